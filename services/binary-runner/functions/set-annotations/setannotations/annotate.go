package setannotations

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"sigs.k8s.io/kustomize/api/filters/annotations"
	"sigs.k8s.io/kustomize/api/hasher"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/kio/kioutil"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// annotate sets annos at fields on items, read as kustomize resources,
// and returns the annotated items and what was set, as results.
func annotate(items fn.KubeObjects, annos map[string]string, fields types.FsSlice) (fn.KubeObjects, fn.Results, error) {
	nodes := make([]*yaml.RNode, 0, len(items))
	for _, o := range items {
		nodes = append(nodes, o.CopyToResourceNode())
	}
	resources := resource.NewFactory(&hasher.Hasher{})
	resources.IncludeLocalConfigs = true
	m, err := resmap.NewFactory(resources).NewResMapFromRNodeSlice(nodes)
	if err != nil {
		return nil, nil, err
	}
	set := appliedAnnotations{}
	for _, r := range m.Resources() {
		if err := annotateResource(r, annos, fields, set); err != nil {
			return nil, nil, fmt.Errorf("failed to run transformer: %w", err)
		}
	}
	results, err := set.results()
	if err != nil {
		return nil, nil, err
	}
	return fn.MoveToKubeObjects(m.ToRNodeSlice()), results, nil
}

// annotateResource sets annos at fields on r and records them in set.
func annotateResource(r *resource.Resource, annos map[string]string, fields types.FsSlice, set appliedAnnotations) error {
	path, index, err := kioutil.GetFileAnnotations(&r.RNode)
	if err != nil {
		return err
	}
	f := annotations.Filter{Annotations: annos, FsSlice: fields}
	f.WithMutationTracker(func(key, value, _ string, node *yaml.RNode) {
		set.add(fieldKey{file: path, index: index, field: strings.Join(node.FieldPath(), ".")}, key, value)
	})
	return r.ApplyFilter(f)
}

// fieldKey names one annotations field: the file and index of its
// resource (kpt's annotations) and its field path.
type fieldKey struct {
	file, index, field string
}

// appliedAnnotations records the annotations set, by field.
type appliedAnnotations map[fieldKey]map[string]string

func (a appliedAnnotations) add(k fieldKey, key, value string) {
	if a[k] == nil {
		a[k] = map[string]string{}
	}
	a[k][key] = value
}

// results reports a's fields, one result each, sorted by file, or a
// single "no annotations applied".
func (a appliedAnnotations) results() (fn.Results, error) {
	if len(a) == 0 {
		return fn.Results{{Message: "no annotations applied"}}, nil
	}
	results := make(fn.Results, 0, len(a))
	for k, annos := range a {
		set, err := json.Marshal(annos)
		if err != nil {
			return nil, fmt.Errorf("reporting annotations set at %s: %w", k.field, err)
		}
		// kpt's index is a number; a resource without one is at index 0.
		index, _ := strconv.Atoi(k.index)
		results = append(results, &fn.Result{
			Message: fmt.Sprintf("set annotations: %s", set),
			Field:   &fn.Field{Path: k.field},
			File:    &fn.File{Path: k.file, Index: index},
		})
	}
	results.Sort()
	return results, nil
}

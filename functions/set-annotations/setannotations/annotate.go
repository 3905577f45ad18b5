package setannotations

//lint:file-ignore SA1019 kpt and porch still write and read the legacy config.kubernetes.io annotations beside the new ones

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"sigs.k8s.io/kustomize/api/filters/filtersutil"
	"sigs.k8s.io/kustomize/api/filters/fsslice"
	"sigs.k8s.io/kustomize/api/hasher"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/kustomize/kyaml/kio/kioutil"
	"sigs.k8s.io/kustomize/kyaml/resid"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/fnrunner/fnrunner/functions/internal/budget"
	"github.com/fnrunner/fnrunner/functions/internal/treesize"
)

// annotate sets annos at fields on items, read as kustomize resources,
// and returns the annotated items and, when rel reports them, what was
// set, as results.
func annotate(items fn.KubeObjects, annos map[string]string, fields types.FsSlice, rel release) (fn.KubeObjects, fn.Results, error) {
	nodes := make([]*yaml.RNode, 0, len(items))
	input := 0
	for _, o := range items {
		n := o.CopyToResourceNode()
		input += treesize.Bytes(n.YNode())
		nodes = append(nodes, n)
	}
	resources, err := readResources(nodes, rel)
	if err != nil {
		return nil, nil, err
	}
	b := newBudget(input)
	set := appliedAnnotations{}
	e := newEntries(annos, rel.quotesOnce)
	for _, r := range resources {
		if err := annotateResource(r, e, fields, set, b); err != nil {
			return nil, nil, fmt.Errorf("failed to run transformer: %w", err)
		}
	}
	var results fn.Results
	if rel.reports {
		var err error
		if results, err = set.results(); err != nil {
			return nil, nil, err
		}
	}
	out := make([]*yaml.RNode, len(resources))
	for i, r := range resources {
		out[i] = &r.RNode
	}
	return fn.MoveToKubeObjects(out), results, nil
}

// readResources reads nodes as kustomize's ResMap does
// (resmap.Factory.NewResMapFromRNodeSlice, local config included): each
// must have a kind and a name, empty ones are dropped, and no two may have
// the same resource id. (ResMap checks each id against all before it; this
// looks it up.) A release that reads nameless items takes any but empty
// ones.
func readResources(nodes []*yaml.RNode, rel release) ([]*resource.Resource, error) {
	var resources []*resource.Resource
	if rel.readsNameless {
		resources = resourcesOf(nodes)
	} else {
		rf := resource.NewFactory(&hasher.Hasher{})
		rf.IncludeLocalConfigs = true
		var err error
		if resources, err = rf.ResourcesFromRNodes(nodes); err != nil {
			return nil, err
		}
	}
	type key struct {
		gvk             resid.Gvk
		name, namespace string
	}
	ids := make(map[key]bool, len(resources))
	for _, r := range resources {
		// ResId.Equals: the same group, version, kind and name, in the
		// same effective namespace.
		id := r.CurId()
		k := key{gvk: resid.Gvk{Group: id.Group, Version: id.Version, Kind: id.Kind}, name: id.Name, namespace: id.EffectiveNamespace()}
		if ids[k] {
			written := id.String()
			if rel.readsNameless {
				written = legacyID(id)
			}
			return nil, fmt.Errorf("may not add resource with an already registered id: %s", written)
		}
		ids[k] = true
	}
	return resources, nil
}

// annotateResource sets annos (of sorted keys) at fields on r and records
// them in set, as kustomize's annotations filter does with a mutation
// tracker, spending what it adds from b.
//
// The filter goes down each field's path for each annotation; this goes
// down each path once and sets every annotation there. Each annotations
// map gets the annotations in the same order, and each annotation's node
// (shared by the fields it is set in) goes through the same fields in the
// same order.
func annotateResource(r *resource.Resource, e entries, fields types.FsSlice, set appliedAnnotations, b *budget.Budget) error {
	path, index := fileAnnotations(r.YNode())
	// The fields of r's kind only: kustomize's field spec filter leaves
	// the others alone.
	fields = selectedFields(r, fields)
	cost := treesize.AliasBytes(r.YNode())
	for _, fs := range fields {
		cost += pathBytes(fs.Path)
	}
	if err := b.Spend(cost); err != nil {
		return err
	}
	setters := e.setters()
	setAll := func(n *yaml.RNode) error {
		field := strings.Join(n.FieldPath(), ".")
		for i, k := range e.keys {
			if err := b.Spend(setBytes + 2*(len(k)+len(e.annos[k])) + len(field)); err != nil {
				return err
			}
			set.add(fieldKey{file: path, index: index, field: field}, k, e.annos[k])
			if err := setters[i](n); err != nil {
				return err
			}
		}
		return nil
	}
	return r.ApplyFilter(kio.FilterAll(yaml.FilterFunc(func(node *yaml.RNode) (*yaml.RNode, error) {
		return node, node.PipeE(fsslice.Filter{
			FsSlice:    fields,
			SetValue:   setAll,
			CreateKind: yaml.MappingNode, // annotations are maps
			CreateTag:  yaml.NodeTagMap,
		})
	})))
}

// entries are the annotations to set, in the order they are set.
type entries struct {
	keys  []string
	annos map[string]string
	// nonStrings says of each key whether YAML 1.1 reads its value as no
	// string.
	nonStrings map[string]bool
	// quotesOnce: a value's node is double-quoted when made, not again
	// after it took a plain value's style (kyaml v0.10's FieldSetter).
	quotesOnce bool
}

func newEntries(annos map[string]string, quotesOnce bool) entries {
	nonStrings := make(map[string]bool, len(annos))
	for k, v := range annos {
		nonStrings[k] = yaml.IsValueNonString(v)
	}
	return entries{keys: yaml.SortedMapKeys(annos), annos: annos, nonStrings: nonStrings, quotesOnce: quotesOnce}
}

// setters are the entries' setters for one resource, in key order.
func (e entries) setters() []filtersutil.SetFn {
	setters := make([]filtersutil.SetFn, len(e.keys))
	for i, k := range e.keys {
		setters[i] = entrySetter(k, e.annos[k], e.nonStrings[k], e.quotesOnce)
	}
	return setters
}

// entrySetter is filtersutil.SetEntry(key, value, yaml.NodeTagString),
// given whether YAML 1.1 reads value as no string: kyaml's FieldSetter of
// one scalar node, made once and set in every field, without FieldSetter's
// cost of parsing the value anew each time. The node is double-quoted if
// it reads as no string, then takes the style of a value it replaces (the
// node's own struct is copied there), or is appended to the map, shared.
// Unless quotesOnce, it is double-quoted again at every field where its
// style is plain, as kyaml v0.21's FieldSetter does.
func entrySetter(key, value string, nonString, quotesOnce bool) filtersutil.SetFn {
	n := &yaml.Node{Kind: yaml.ScalarNode, Value: value, Tag: yaml.NodeTagString}
	if nonString {
		n.Style = yaml.DoubleQuotedStyle
	}
	return func(node *yaml.RNode) error {
		if !quotesOnce && n.Style == 0 && nonString {
			n.Style = yaml.DoubleQuotedStyle
		}
		field, err := node.Pipe(yaml.FieldMatcher{Name: key})
		if err != nil {
			return err
		}
		if field != nil {
			n.Style = field.YNode().Style
			field.SetYNode(n)
			return nil
		}
		node.YNode().Content = append(node.YNode().Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, n)
		return nil
	}
}

// fileAnnotations is the file and index of resource n, as
// kioutil.GetFileAnnotations reads them (through kyaml's GetMeta), without
// its cost: kpt's annotation, or else its legacy one; a null is "", and of
// keys given twice, the last counts.
func fileAnnotations(n *yaml.Node) (path, index string) {
	annotations := field(field(n, yaml.MetadataField), yaml.AnnotationsField)
	if annotations == nil || annotations.Kind != yaml.MappingNode {
		return "", ""
	}
	var legacyPath, legacyIndex string
	var hasPath, hasIndex bool
	for i := 0; i+1 < len(annotations.Content); i += 2 {
		value := scalarValue(annotations.Content[i+1])
		switch scalarValue(annotations.Content[i]) {
		case kioutil.PathAnnotation:
			path, hasPath = value, true
		case kioutil.LegacyPathAnnotation:
			legacyPath = value
		case kioutil.IndexAnnotation:
			index, hasIndex = value, true
		case kioutil.LegacyIndexAnnotation:
			legacyIndex = value
		}
	}
	if !hasPath {
		path = legacyPath
	}
	if !hasIndex {
		index = legacyIndex
	}
	return path, index
}

// field is the value of the first field name of map n, as kyaml's
// RNode.Field finds it, or nil, also when that is empty (kyaml's
// IsNilOrEmpty).
func field(n *yaml.Node, name string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == name {
			if yaml.IsYNodeNilOrEmpty(n.Content[i+1]) {
				return nil
			}
			return n.Content[i+1]
		}
	}
	return nil
}

// scalarValue is kyaml's GetValue: "" for a null.
func scalarValue(n *yaml.Node) string {
	if n.Tag == yaml.NodeTagNull {
		return ""
	}
	return n.Value
}

// selectedFields is the field specs of fields that apply to r, as
// kustomize's field spec filter selects them: by kind, and group and
// version of r's apiVersion, each matching when empty.
func selectedFields(r *resource.Resource, fields types.FsSlice) types.FsSlice {
	kind := r.GetKind()
	group, version := resid.ParseGroupVersion(r.GetApiVersion())
	var selected types.FsSlice
	for _, fs := range fields {
		if (fs.Kind == "" || fs.Kind == kind) && (fs.Group == "" || fs.Group == group) && (fs.Version == "" || fs.Version == version) {
			selected = append(selected, fs)
		}
	}
	return selected
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

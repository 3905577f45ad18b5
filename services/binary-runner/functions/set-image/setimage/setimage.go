// Package setimage is fnrunner's own implementation of the KRM function
// catalog's set-image function, written to the documented behaviour of
// set-image at github.com/kptdev/krm-functions-catalog commit
// 76fe3817f9496724ca04414d136917a9926e5e40 (2025-06-25), the catalog version
// fnrunner's KRM corpus was taken from.
//
// For every resource whose image fields name the configured image, set-image
// replaces the image name, tag or digest:
//
//   - the standard image fields are spec.containers[].image,
//     spec.initContainers[].image, spec.template.spec.containers[].image and
//     spec.template.spec.initContainers[].image, on resources of any kind
//     (CustomResourceDefinitions excepted);
//   - a SetImage functionConfig may list additionalImageFields (kustomize
//     field specs: group, version, kind, path, create), used jointly with the
//     standard ones.
//
// An image matches when it is the configured name, optionally followed by a
// tag and a digest. newName replaces the name and keeps the tag and digest;
// newTag replaces the tag and drops the digest; digest replaces both.
//
// The functionConfig is either a ConfigMap (data keys name, newName, newTag,
// digest) or a fn.kpt.dev SetImage (fields image and additionalImageFields).
// The function reports one info result, "summary: updated a total of N
// image(s)", counting the image fields whose value changed; a bad config is
// one error result and no change; a resource whose image fields cannot be set
// gets an error result naming it and is left as it was.
//
// Image matching and rewriting are kustomize's (its imagetag filter), as in
// the catalog.
package setimage

import (
	"fmt"
	"strconv"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"sigs.k8s.io/kustomize/api/filters/imagetag"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/kio/kioutil"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// summaryFormat is the message of the result that ends every successful run.
const summaryFormat = "summary: updated a total of %d image(s)"

// Run is the set-image function as a fn.ResourceListProcessorFunc. It
// returns false (the function failed) when the functionConfig is invalid or a
// resource could not be updated; the reason is in rl.Results.
func Run(rl *fn.ResourceList) (bool, error) {
	cfg, err := configFrom(rl.FunctionConfig)
	if err != nil {
		rl.Results = append(rl.Results, &fn.Result{Message: err.Error(), Severity: fn.Error})
		return false, nil
	}
	fields := append(standardImageFields(), cfg.AdditionalImageFields...)
	ok, total := true, 0
	for i, obj := range rl.Items {
		updated, n, err := setImages(obj, cfg.Image, fields)
		if err != nil {
			rl.Results = append(rl.Results, errorResult(err, obj))
			ok = false
			continue
		}
		rl.Items[i] = updated
		total += n
	}
	rl.Results = append(rl.Results, &fn.Result{
		Message:  fmt.Sprintf(summaryFormat, total),
		Severity: fn.Info,
	})
	return ok, nil
}

// standardImageFields are the image fields set-image updates on every
// resource.
func standardImageFields() types.FsSlice {
	return types.FsSlice{
		{Path: "spec/containers[]/image"},
		{Path: "spec/initContainers[]/image"},
		{Path: "spec/template/spec/containers[]/image"},
		{Path: "spec/template/spec/initContainers[]/image"},
	}
}

// setImages applies image to the fields of a copy of obj and returns the
// copy with the number of fields whose value changed. obj itself is not
// modified.
func setImages(obj *fn.KubeObject, image types.Image, fields types.FsSlice) (*fn.KubeObject, int, error) {
	node := obj.CopyToResourceNode()
	var tracker changeTracker
	filter := imagetag.Filter{ImageTag: image, FsSlice: fields}
	filter.WithMutationTracker(tracker.record)
	if _, err := filter.Filter([]*yaml.RNode{node}); err != nil {
		return nil, 0, fmt.Errorf("set image %q: %w", image.Name, err)
	}
	tracker.restoreComments()
	return fn.MoveToKubeObject(node), tracker.changed, nil
}

// changeTracker counts the image fields kustomize sets and remembers their
// comments: kustomize replaces a field's node with a new one, comments and
// all, and kpt keeps the comments of the fields a function changes.
type changeTracker struct {
	changed int
	set     []fieldComments
}

// fieldComments are the comments of one image field before it was set.
type fieldComments struct {
	node                    *yaml.Node
	head, line, footComment string
}

// record is kustomize's mutation callback, called before a field is set to
// value.
func (t *changeTracker) record(_, value, _ string, node *yaml.RNode) {
	n := node.YNode()
	if n.Value != value {
		t.changed++
	}
	t.set = append(t.set, fieldComments{node: n, head: n.HeadComment, line: n.LineComment, footComment: n.FootComment})
}

// restoreComments puts back the comments of every field set.
func (t *changeTracker) restoreComments() {
	for _, f := range t.set {
		f.node.HeadComment, f.node.LineComment, f.node.FootComment = f.head, f.line, f.footComment
	}
}

// errorResult is the error result for a resource: the resource and, when
// the orchestrator said, its file (current or legacy annotations).
func errorResult(err error, obj *fn.KubeObject) *fn.Result {
	r := &fn.Result{
		Message:  err.Error(),
		Severity: fn.Error,
		ResourceRef: &fn.ResourceRef{
			APIVersion: obj.GetAPIVersion(),
			Kind:       obj.GetKind(),
			Name:       obj.GetName(),
			Namespace:  obj.GetNamespace(),
		},
	}
	path, index, err := kioutil.GetFileAnnotations(obj.CopyToResourceNode())
	if err == nil && path != "" {
		i, _ := strconv.Atoi(index)
		r.File = &fn.File{Path: path, Index: i}
	}
	return r
}

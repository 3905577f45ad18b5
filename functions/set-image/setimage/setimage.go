// Package setimage is fnrunner's own implementation of the KRM function
// catalog's set-image function, written to what set-image's code does at
// github.com/kptdev/krm-functions-catalog commit
// 76fe3817f9496724ca04414d136917a9926e5e40 (2025-06-25), the catalog version
// fnrunner's KRM corpus was taken from, where its code and its README
// disagree.
//
// For the resources whose image fields name the configured image, set-image
// replaces the image name, tag or digest:
//
//   - the standard image fields are spec.containers[].image of a Pod and
//     spec.template.spec.containers[].image of a Deployment, StatefulSet,
//     ReplicaSet, DaemonSet or PodTemplate, whatever their apiVersion; init
//     containers are not updated, nor are the containers of any other kind
//     (a Job, a CronJob...);
//   - a SetImage functionConfig may list additionalImageFields (kustomize
//     field specs: group, version, kind, path, create), set with kustomize's
//     image transformer on resources of any kind.
//
// An image matches when it is the configured name, optionally followed by a
// tag and a digest. In the standard fields, newName replaces the name, newTag
// the tag and digest, digest both (it wins over newTag); with newName alone
// the old tag is appended without its ":" and the old digest without its "@"
// (nginx:1.2 becomes newName1.2). In the additional fields, kustomize's rules
// apply (the old tag and digest kept, newTag and digest both kept).
//
// The functionConfig is either a ConfigMap (data keys name, newName, newTag,
// digest) or a fn.kpt.dev SetImage (fields image, data and
// additionalImageFields). The function reports one info result, "summary:
// updated a total of N image(s)", counting the standard fields whose value
// changed and every match in the additional fields, changed or not; a bad
// config is an error result followed by "function is terminated: ...", and
// the function fails; a resource whose additional fields cannot be set gets
// an error result naming it, is left as it was, and the function succeeds.
//
// Limits (the function runs in the binary-runner's process): an image name
// of more than 4 KiB or 1000 compiled instructions, or a run whose
// additional image fields would cost more than its input warrants (see
// budget), fails with an error result wrapping ErrTooLarge.
package setimage

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	kfiltersutil "sigs.k8s.io/kustomize/api/filters/filtersutil"
	"sigs.k8s.io/kustomize/api/filters/fsslice"
	"sigs.k8s.io/kustomize/api/pkg/util"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/comments"
	"sigs.k8s.io/kustomize/kyaml/filtersutil"
	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/kustomize/kyaml/order"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/fnrunner/fnrunner/functions/internal/treesize"
)

// summaryFormat is the message of the result that ends every successful run.
const summaryFormat = "summary: updated a total of %d image(s)"

// Run is the set-image function as a fn.ResourceListProcessorFunc. It
// returns false (the function failed) when the catalog's function exits
// non-zero; the reason is in rl.Results.
func Run(rl *fn.ResourceList) (bool, error) {
	results, f := run(rl)
	rl.Results = append(rl.Results, results...)
	if f != nil {
		rl.Results = append(rl.Results, f.Results...)
		return false, nil
	}
	return true, nil
}

// run runs set-image on rl's items and returns its results; a failure ends
// it.
func run(rl *fn.ResourceList) (fn.Results, *failure) {
	var results fn.Results
	cfg, info, f := readConfig(rl.FunctionConfig)
	if info != nil {
		results = append(results, info)
	}
	if f == nil {
		f = applyData(&cfg)
	}
	if f == nil {
		f = validate(cfg.Image)
	}
	if f != nil {
		return results, f
	}

	if f := checkName(cfg.Image.Name); f != nil {
		return results, f
	}

	// The items as kpt passed them, for the additional image fields.
	var originals []*yaml.RNode
	input := 0
	if cfg.AdditionalImageFields != nil {
		originals = make([]*yaml.RNode, len(rl.Items))
		for i, obj := range rl.Items {
			originals[i] = obj.CopyToResourceNode()
			input += treesize.Bytes(originals[i].YNode())
		}
	}
	total := 0
	m := newMatcher(cfg.Image.Name)
	for i, obj := range rl.Items {
		node, n, f := setStandardImages(obj, cfg.Image, m)
		if f != nil {
			return results, f
		}
		if node != nil {
			rl.Items[i] = fn.MoveToKubeObject(node)
		}
		total += n
	}

	if cfg.AdditionalImageFields != nil {
		image, f := cfg.additionalImage()
		if f == nil {
			f = checkName(image.Name)
		}
		if f != nil {
			return results, f
		}
		b := newBudget(input)
		am := newMatcher(image.Name)
		for i, obj := range rl.Items {
			native := keepsStructure(originals[i].YNode())
			if !native {
				if err := b.Spend(roundTripBytes(originals[i].YNode())); err != nil {
					return results, &failure{Results: fn.Results{objectResult(err.Error(), obj, fn.Error)}}
				}
			}
			updated, n, err, f := setAdditionalImages(obj, originals[i], image, am, cfg.AdditionalImageFields, native)
			total += n
			if f != nil {
				return results, f
			}
			if err != nil {
				results = append(results, objectResult(err.Error(), obj, fn.Error))
				continue
			}
			rl.Items[i] = updated
		}
	}

	return append(results, &fn.Result{Message: fmt.Sprintf(summaryFormat, total), Severity: fn.Info}), nil
}

// podTemplateKinds are the kinds whose spec.template.spec containers the
// catalog updates.
var podTemplateKinds = map[string]bool{
	"Deployment": true, "StatefulSet": true, "ReplicaSet": true, "DaemonSet": true, "PodTemplate": true,
}

// containerLists are the container lists of a pod spec the catalog updates,
// in its order.
//
// As the catalog's code does at 76fe381 (updateContainerImages in
// transformer/images_transformer.go), the init containers are looked for
// under the misspelt "iniContainers", so spec.initContainers is never
// updated (and a field actually named iniContainers is).
var containerLists = []string{"iniContainers", "containers"}

// setStandardImages sets the image in the standard image fields of a copy
// of obj and returns the copy (nil for a kind it leaves alone) with the
// number of fields whose value changed, the way the catalog's code does at
// 76fe381 (Run, setPodContainers, setPodSpecContainers,
// updateContainerImages and getNewImageName in
// transformer/images_transformer.go): only the kinds Pod (spec) and
// Deployment, StatefulSet, ReplicaSet, DaemonSet and PodTemplate
// (spec.template.spec), by kind alone; any other kind (a Job, a CronJob, a
// custom resource) is left as it is.
func setStandardImages(obj *fn.KubeObject, image Image, m *matcher) (*yaml.RNode, int, *failure) {
	kind := obj.GetKind()
	if kind != "Pod" && !podTemplateKinds[kind] {
		// Left as it is, uncopied.
		return nil, 0, nil
	}
	node := obj.CopyToResourceNode()
	podSpec := mapValue(node.YNode(), "spec")
	if podSpec == nil {
		return node, 0, nil
	}
	if kind != "Pod" {
		template := mapValue(podSpec, "template")
		if template == nil {
			return node, 0, nil
		}
		if podSpec = mapValue(template, "spec"); podSpec == nil {
			// The catalog's binary panics here (nil pointer): kpt
			// reports the function as failed, without results.
			return nil, 0, &failure{Results: fn.Results{{
				Message:  fmt.Sprintf("%s %q: spec.template has no spec", kind, obj.GetName()),
				Severity: fn.Error,
			}}}
		}
	}

	// The catalog's SDK reads both lists, and fails on a bad one, before
	// it looks at any image.
	var containers []*yaml.Node
	for _, list := range containerLists {
		items := mapValue(podSpec, list)
		if items == nil {
			continue
		}
		if items.Kind != yaml.SequenceNode {
			return nil, 0, unmatchedFields(list)
		}
		for _, c := range items.Content {
			if c.Kind != yaml.MappingNode {
				return nil, 0, unmatchedFields(list)
			}
		}
		containers = append(containers, items.Content...)
	}

	changed := 0
	for _, c := range containers {
		field := mapValue(c, "image")
		old := ""
		if field != nil {
			// The catalog's SDK reads only a string (!!str) value.
			if field.Kind != yaml.ScalarNode || field.Tag != yaml.NodeTagString {
				return nil, 0, unmatchedFields("image")
			}
			old = field.Value
		}
		matched, f := m.matches(old)
		if f != nil {
			return nil, 0, f
		}
		if !matched {
			continue
		}
		value := newImageName(old, image)
		if value == old {
			continue
		}
		if field == nil {
			field = &yaml.Node{}
			c.Content = append(c.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: yaml.NodeTagString, Value: "image"}, field)
		}
		// The catalog's SDK replaces the value with a new string node,
		// keeping its comments.
		field.Kind, field.Tag, field.Style, field.Value = yaml.ScalarNode, yaml.NodeTagString, 0, value
		field.Anchor, field.Alias, field.Content = "", nil, nil
		changed++
	}
	return node, changed, nil
}

// mapValue is the value of field key of mapping n the catalog's SDK reads:
// the first one whose key is a string; nil when there is none or n is not a
// mapping.
func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.Kind == yaml.ScalarNode && (k.Tag == yaml.NodeTagString || k.Tag == "") && k.Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// newImageName is the catalog's getNewImageName (at 76fe381, in
// transformer/images_transformer.go), on kustomize's image.Split, which
// returns the tag and digest without their separators:
//
//   - newTag replaces the tag and drops the digest: name:newTag;
//   - digest replaces both, even with newTag: name@digest;
//   - with neither, the old tag is appended without its ":", or, without a
//     tag, the old digest without its "@" (nginx:1.2 with newName mirror/nginx
//     becomes mirror/nginx1.2).
func newImageName(old string, image Image) string {
	name, tag, digest := util.SplitImageName(old)
	if image.NewName != "" {
		name = image.NewName
	}
	if image.NewTag != "" {
		tag = ":" + image.NewTag
	}
	if image.Digest != "" {
		tag = "@" + image.Digest
	}
	if tag == "" {
		return name + digest
	}
	return name + tag
}

// matcher says whether an image is the configured one, as kustomize's
// IsImageMatched does: the name, as a regular expression, then an optional
// tag and an optional sha256 digest.
type matcher struct {
	name string
	re   *regexp.Regexp
	err  error
}

func newMatcher(name string) *matcher {
	re, err := regexp.Compile(imagePattern(name))
	return &matcher{name: name, re: re, err: err}
}

// imagePattern is kustomize's image pattern for name.
func imagePattern(name string) string {
	return "^" + name + "(:[a-zA-Z0-9_.{}-]*)?(@sha256:[a-zA-Z0-9_.{}-]*)?$"
}

// matches says whether image matches. A name that is no regular expression
// fails the run when an image is first matched against it: the catalog's
// binary panics there (nil pointer), and kpt reports the function as
// failed, without results.
func (m *matcher) matches(image string) (bool, *failure) {
	if m.err != nil {
		return false, invalidName(m.name, m.err)
	}
	return m.re.MatchString(image), nil
}

// invalidName is the failure for an image name that is no regular
// expression.
func invalidName(name string, err error) *failure {
	return &failure{Results: fn.Results{{
		Message:  fmt.Sprintf("invalid image `name` %q: %v", name, err),
		Severity: fn.Error,
	}}}
}

// setAdditionalImages sets the image in the additional image fields of obj
// the way the catalog's code does at 76fe381 (SetAdditionalFieldSpec and
// LogResultCallback in custom/custom.go), and returns the updated object
// with the number of matches; original is obj as kpt passed it.
//
// The catalog runs kustomize's image filter through a JSON round trip of
// the resource (filtersutil.ApplyToJSON) and outputs every resource so
// round-tripped, whether it has additional image fields or not: scalars
// come back in the style YAML gives their JSON value (quotes only where
// needed, null for an empty value, numbers as JSON numbers), which kpt
// keeps, and without comments and with sorted fields, which kpt restores
// from its input (comments.CopyComments and order.SyncOrder, as kyaml's
// FunctionFilter does); this does the same. It counts every field kustomize
// sets, whether its value changes or not. On an error the resource is left
// as it was and err says why; an image name that is no regular expression
// (kustomize panics on it at the first image field) is a failure. m is
// image.Name's matcher. native, for a resource whose structure the round
// trip keeps (keepsStructure), restores comments and order with
// copyComments and syncOrder rather than kyaml's.
//
//lint:ignore ST1008 err fails the run, f is a field the function reports and goes on
func setAdditionalImages(obj *fn.KubeObject, original *yaml.RNode, image types.Image, m *matcher, fields types.FsSlice, native bool) (updated *fn.KubeObject, count int, err error, f *failure) {
	node := obj.CopyToResourceNode()
	filter := imageFilter{image: image, matcher: m, fields: fields}
	filter.setter.WithMutationTracker(func(_, _, _ string, _ *yaml.RNode) { count++ })
	if err := filtersutil.ApplyToJSON(filter, node); err != nil {
		if errors.Is(err, errInvalidName) {
			return nil, count, nil, invalidName(image.Name, m.err)
		}
		return nil, count, err, nil
	}
	if native {
		copyComments(original.YNode(), node.YNode())
		syncOrder(original.YNode(), node.YNode())
		return fn.MoveToKubeObject(node), count, nil, nil
	}
	// Nothing to copy is nothing to walk through (kyaml's copy goes through
	// lists element by element, looking each up in the other list).
	if hasComments(original.YNode()) {
		if err := comments.CopyComments(original, node); err != nil {
			return nil, count, err, nil
		}
	}
	if err := order.SyncOrder(original, node); err != nil {
		return nil, count, err, nil
	}
	return fn.MoveToKubeObject(node), count, nil, nil
}

// errInvalidName is imageFilter's error for an image name that is no
// regular expression, met at the first image field.
var errInvalidName = errors.New("invalid image name")

// imageFilter is kustomize's image filter (imagetag.Filter, as
// setAdditionalImages configures it), with the image name compiled once:
// kustomize compiles it again at every image field (image.IsImageMatched),
// and panics where it is no regular expression.
type imageFilter struct {
	image   types.Image
	matcher *matcher
	fields  types.FsSlice
	setter  kfiltersutil.TrackableSetter
}

func (f imageFilter) Filter(nodes []*yaml.RNode) ([]*yaml.RNode, error) {
	_, err := kio.FilterAll(yaml.FilterFunc(f.filter)).Filter(nodes)
	return nodes, err
}

func (f imageFilter) filter(node *yaml.RNode) (*yaml.RNode, error) {
	// Kustomize leaves CRDs alone.
	if meta, err := node.GetMeta(); err == nil && meta.Kind == "CustomResourceDefinition" {
		return node, nil
	}
	if err := node.PipeE(fsslice.Filter{FsSlice: f.fields, SetValue: f.set}); err != nil {
		return nil, err
	}
	return node, nil
}

// set is kustomize's imageTagUpdater.SetImageValue.
func (f imageFilter) set(rn *yaml.RNode) error {
	if err := yaml.ErrorIfInvalid(rn, yaml.ScalarNode); err != nil {
		return err
	}
	value := rn.YNode().Value
	if f.matcher.err != nil {
		return errInvalidName
	}
	if !f.matcher.re.MatchString(value) {
		return nil
	}
	name, tag, digest := util.SplitImageName(value)
	if f.image.NewName != "" {
		name = f.image.NewName
	}
	switch {
	case f.image.NewTag != "" && f.image.Digest != "":
		tag = f.image.NewTag
		digest = f.image.Digest
	case f.image.NewTag != "":
		tag = f.image.NewTag
		digest = ""
	case f.image.Digest != "":
		tag = ""
		digest = f.image.Digest
	case f.image.TagSuffix != "":
		tag += f.image.TagSuffix
		digest = ""
	}
	if tag != "" {
		name += ":" + tag
	}
	if digest != "" {
		name += "@" + digest
	}
	return f.setter.SetScalar(name)(rn)
}

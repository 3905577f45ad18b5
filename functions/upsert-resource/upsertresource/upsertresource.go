// Package upsertresource is fnrunner's implementation of the KRM function
// catalog's upsert-resource, as documented and as it behaves at catalog
// commit 76fe3817f9496724ca04414d136917a9926e5e40 (2025-06-25; fnrunner's
// test corpus comes from that commit). The Go module proxy does not serve
// the catalog's module, so this is written anew.
//
// The functionConfig is the resource to upsert, or a List (kind List, any
// apiVersion) whose items are the resources to upsert, in order. Each one
// replaces every resource of the package with the same identity: group
// (from apiVersion; the version does not count), kind, namespace and name.
// A replacement keeps the replaced resource's place (kpt's path and index
// annotations). A resource that replaces nothing is added; kpt writes it to
// its default file, <namespace>/<kind>_<name>.yaml, unless it has the
// config.kubernetes.io/target-path annotation, which names its file. That
// annotation also narrows the replacement to resources in that file, and is
// not written out. Resources carrying kpt v0's function annotations
// (config.kubernetes.io/function or config.k8s.io/function) are never
// replaced, and those annotations are not copied from the functionConfig.
//
// Limit (the function runs in the binary-runner's process): a run that
// would copy the resources to upsert more than its input warrants (see
// budget) fails with an error wrapping ErrTooLarge.
package upsertresource

//lint:file-ignore SA1019 kpt and porch still write and read the legacy config.kubernetes.io annotations beside the new ones

import (
	"errors"
	"fmt"
	"slices"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"sigs.k8s.io/kustomize/kyaml/kio/kioutil"
	"sigs.k8s.io/kustomize/kyaml/resid"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/fnrunner/fnrunner/functions/internal/budget"
	"github.com/fnrunner/fnrunner/functions/internal/shape"
	"github.com/fnrunner/fnrunner/functions/internal/treesize"
)

// TargetPathAnnotation, on a resource to upsert, names the package file it
// goes to.
const TargetPathAnnotation = "config.kubernetes.io/target-path"

// listKind is the kind of functionConfig that wraps several resources.
const listKind = "List"

var _ fn.ResourceListProcessorFunc = Run

// errNoConfig is returned for a ResourceList without a functionConfig.
var errNoConfig = errors.New("no functionConfig: want the resource to upsert, or a List of them")

// Run is the function: it upserts the resources of rl.FunctionConfig into
// rl.Items. On failure it leaves the items as they were, adds an error
// result and returns the error.
func Run(rl *fn.ResourceList) (bool, error) {
	if err := run(rl); err != nil {
		rl.Results = append(rl.Results, &fn.Result{Message: err.Error(), Severity: fn.Error})
		return false, err
	}
	return true, nil
}

func run(rl *fn.ResourceList) error {
	if rl.FunctionConfig == nil || rl.FunctionConfig.IsEmpty() {
		return fmt.Errorf("upsert-resource: %w", errNoConfig)
	}
	if err := checkMetadata(rl); err != nil {
		return fmt.Errorf("upsert-resource: %w", err)
	}
	// The resources to upsert are read in the functionConfig's nodes, not
	// a copy of them (each upsert copies its resource), and left there.
	config := rl.FunctionConfig.MoveToResourceNode()
	defer func() { rl.FunctionConfig = fn.MoveToKubeObject(config) }()
	inputs, err := resourcesToUpsert(config)
	if err != nil {
		return fmt.Errorf("upsert-resource: %w", err)
	}
	input := 0
	for _, in := range inputs {
		input += treesize.Bytes(in.YNode())
	}
	// The items' nodes are taken, not copied: upserts replace and add
	// items, never change one, so that on failure the items are put back
	// as they were.
	items := make([]*yaml.RNode, len(rl.Items))
	for i, o := range rl.Items {
		items[i] = o.MoveToResourceNode()
		input += treesize.Bytes(items[i].YNode())
	}
	p := newPackage(slices.Clone(items), newBudget(input))
	for _, in := range inputs {
		if err := p.upsert(in); err != nil {
			rl.Items = fn.MoveToKubeObjects(items)
			return fmt.Errorf("upsert-resource: %s %q: %w", in.GetKind(), in.GetName(), err)
		}
	}
	rl.Items = fn.MoveToKubeObjects(p.items)
	return nil
}

// checkMetadata refuses the items, the functionConfig or a List
// functionConfig's items when their metadata is a list (see package
// shape).
func checkMetadata(rl *fn.ResourceList) error {
	if err := shape.CheckMetadata(rl.Items); err != nil {
		return err
	}
	if err := shape.CheckObjectMetadata(&rl.FunctionConfig.SubObject); err != nil {
		return fmt.Errorf("functionConfig %w", err)
	}
	items, _, _ := rl.FunctionConfig.NestedSlice("items")
	for i, o := range items {
		if err := shape.CheckObjectMetadata(o); err != nil {
			return fmt.Errorf("functionConfig item %d %w", i, err)
		}
	}
	return nil
}

// resourcesToUpsert returns the functionConfig, or the items of a List.
func resourcesToUpsert(config *yaml.RNode) ([]*yaml.RNode, error) {
	if config.GetKind() != listKind {
		if err := validate(config); err != nil {
			return nil, fmt.Errorf("functionConfig: %w", err)
		}
		return []*yaml.RNode{config}, nil
	}
	items := config.Field("items")
	if items == nil || yaml.IsMissingOrNull(items.Value) {
		return nil, nil
	}
	resources, err := items.Value.Elements()
	if err != nil {
		return nil, fmt.Errorf("functionConfig List items: %w", err)
	}
	for i, r := range resources {
		if err := validate(r); err != nil {
			return nil, fmt.Errorf("functionConfig List items[%d]: %w", i, err)
		}
	}
	return resources, nil
}

// validate checks that r is a resource: a map with apiVersion, kind and
// metadata.name.
func validate(r *yaml.RNode) error {
	if r.YNode().Kind != yaml.MappingNode {
		return errors.New("not a resource: not a map")
	}
	switch {
	case r.GetApiVersion() == "":
		return errors.New("not a resource: no apiVersion")
	case r.GetKind() == "":
		return errors.New("not a resource: no kind")
	case r.GetName() == "":
		return errors.New("not a resource: no metadata.name")
	}
	return nil
}

// identity is what makes two resources the same one.
type identity struct {
	group, kind, namespace, name string
}

func identityOf(r *yaml.RNode) identity {
	group, _ := resid.ParseGroupVersion(r.GetApiVersion())
	return identity{group: group, kind: r.GetKind(), namespace: r.GetNamespace(), name: r.GetName()}
}

// pkg is the package's resources, indexed by identity.
type pkg struct {
	items []*yaml.RNode
	// byID lists, for each identity, the indices of the items that upserts
	// may replace (not function configs), with their file path.
	byID   map[identity][]placed
	budget *budget.Budget
}

// placed is an item's index and file path.
type placed struct {
	index int
	path  string
}

func newPackage(items []*yaml.RNode, b *budget.Budget) *pkg {
	p := &pkg{items: items, byID: map[identity][]placed{}, budget: b}
	for i, it := range items {
		if !isFunctionConfig(it) {
			p.add(i)
		}
	}
	return p
}

// add indexes item i.
func (p *pkg) add(i int) {
	it := p.items[i]
	path, _, _ := kioutil.GetFileAnnotations(it)
	id := identityOf(it)
	p.byID[id] = append(p.byID[id], placed{index: i, path: path})
}

// upsert replaces the items that in matches with copies of in, or appends
// a copy of in when it matches none. A replacement keeps the identity and
// the path of the item it replaces, and is no function config.
func (p *pkg) upsert(in *yaml.RNode) error {
	id := identityOf(in)
	target := in.GetAnnotations()[TargetPathAnnotation]
	size := treesize.Bytes(in.YNode())
	replaced := false
	for _, it := range p.byID[id] {
		if target != "" && it.path != target {
			continue
		}
		if err := p.budget.Spend(size); err != nil {
			return err
		}
		r, err := replacement(in, p.items[it.index])
		if err != nil {
			return err
		}
		p.items[it.index] = r
		replaced = true
	}
	if replaced {
		return nil
	}
	if err := p.budget.Spend(size); err != nil {
		return err
	}
	r, err := addition(in, target)
	if err != nil {
		return err
	}
	p.items = append(p.items, r)
	p.add(len(p.items) - 1)
	return nil
}

// replacement is a copy of in in old's place: with in's own annotations
// less the ones that place or drive functions, and old's path and index.
func replacement(in, old *yaml.RNode) (*yaml.RNode, error) {
	r := in.Copy()
	if err := clearAnnotations(r, placementAnnotations()); err != nil {
		return nil, err
	}
	oldAnnotations := old.GetAnnotations()
	for _, key := range append(pathAnnotations(), indexAnnotations()...) {
		if v, ok := oldAnnotations[key]; ok {
			if err := r.PipeE(yaml.SetAnnotation(key, v)); err != nil {
				return nil, fmt.Errorf("setting %s: %w", key, err)
			}
		}
	}
	return r, nil
}

// addition is a copy of in as a new resource: with in's own annotations
// less the ones that place or drive functions, and, when target is set,
// path annotations naming that file.
func addition(in *yaml.RNode, target string) (*yaml.RNode, error) {
	r := in.Copy()
	if err := clearAnnotations(r, placementAnnotations()); err != nil {
		return nil, err
	}
	if target == "" {
		return r, nil
	}
	for _, key := range pathAnnotations() {
		if err := r.PipeE(yaml.SetAnnotation(key, target)); err != nil {
			return nil, fmt.Errorf("setting %s: %w", key, err)
		}
	}
	return r, nil
}

// pathAnnotations name a resource's file, in kpt's current and legacy
// forms (kpt reads either).
func pathAnnotations() []string {
	return []string{kioutil.PathAnnotation, kioutil.LegacyPathAnnotation}
}

// indexAnnotations give a resource's position in its file, in both forms.
func indexAnnotations() []string {
	return []string{kioutil.IndexAnnotation, kioutil.LegacyIndexAnnotation}
}

// functionAnnotations mark kpt v0 function configs.
func functionAnnotations() []string {
	return []string{"config.kubernetes.io/function", "config.k8s.io/function"}
}

// placementAnnotations are the annotations a resource to upsert does not
// carry into the package: kpt's file annotations (in both forms), kpt v0's
// function annotations and the target path.
func placementAnnotations() []string {
	keys := append(pathAnnotations(), indexAnnotations()...)
	keys = append(keys, kioutil.IdAnnotation, kioutil.LegacyIdAnnotation, kioutil.InternalAnnotationsMigrationResourceIDAnnotation, TargetPathAnnotation)
	return append(keys, functionAnnotations()...)
}

func isFunctionConfig(r *yaml.RNode) bool {
	annotations := r.GetAnnotations()
	for _, key := range functionAnnotations() {
		if annotations[key] != "" {
			return true
		}
	}
	return false
}

// clearAnnotations removes the keys from r's annotations, in place, and
// the annotations map if that leaves it empty.
func clearAnnotations(r *yaml.RNode, keys []string) error {
	annotations := r.GetAnnotations()
	cleared := false
	for _, key := range keys {
		if _, ok := annotations[key]; !ok {
			continue
		}
		if err := r.PipeE(yaml.ClearAnnotation(key)); err != nil {
			return fmt.Errorf("clearing %s: %w", key, err)
		}
		cleared = true
	}
	if !cleared {
		return nil
	}
	if err := r.PipeE(yaml.Lookup(yaml.MetadataField), yaml.FieldClearer{Name: yaml.AnnotationsField, IfEmpty: true}); err != nil {
		return fmt.Errorf("clearing empty annotations: %w", err)
	}
	return nil
}

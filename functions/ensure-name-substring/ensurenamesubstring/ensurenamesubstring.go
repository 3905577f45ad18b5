// Package ensurenamesubstring is fnrunner's implementation of the KRM
// function catalog's ensure-name-substring, in two of the catalog's
// behaviours: v0.1.1 (Run), the binary tag porch ships, checked against
// that release's answers (testdata/v0.1.1); and the catalog's :unstable
// tag at commit 76fe3817f9496724ca04414d136917a9926e5e40 (2025-06-25;
// RunUnstable), which fnrunner's test corpus records. The Go module proxy
// does not serve the catalog's module, so this is written anew on
// kustomize's public filters.
//
// The function makes every resource's name contain a substring, prepending
// or appending it to names that lack it (names that already contain it are
// left alone, so running the function again changes nothing). It leaves
// the names of CustomResourceDefinitions, APIServices and Namespaces alone,
// and at 76fe381 the Kptfile's too. Besides metadata.name it updates:
//   - the additional name fields the functionConfig names;
//   - the fields that refer to a renamed resource by name, as kustomize
//     fixes name references (a ConfigMap's name in a Pod's volumes or env,
//     a Secret's in a ServiceAccount, a ClusterRole's in a binding, ...);
//   - at 76fe381, references to renamed resources in kpt's depends-on
//     annotation.
//
// At 76fe381 it clears the kpt annotations that place resources in files
// (path, index, sequence indent and id): kpt then writes every resource to
// its default file, <namespace>/<kind>_<name>.yaml. The catalog function
// did so because the kustomize version it was built on drops those
// annotations along with its own build annotations; the corpus records it.
// v0.1.1, on kustomize api v0.8.11, keeps them, and each resource stays in
// its file: porch refuses a package whose Kptfile left its place.
//
// Limits (the function runs in the binary-runner's process): an
// EnsureNameSubstring of more than 256 KiB, or a run that would write or
// search more than its input warrants (see budget), fails with an error
// wrapping ErrTooLarge.
package ensurenamesubstring

import (
	"fmt"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"sigs.k8s.io/kustomize/api/hasher"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/kyaml/resid"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/fnrunner/fnrunner/functions/internal/exitlog"
	"github.com/fnrunner/fnrunner/functions/internal/shape"
	"github.com/fnrunner/fnrunner/functions/internal/treesize"
)

var (
	_ fn.ResourceListProcessorFunc = Run
	_ fn.ResourceListProcessorFunc = RunUnstable
)

// Run is ensure-name-substring v0.1.1, the binary tag porch ships: it
// ensures the substring rl.FunctionConfig asks for in the names of
// rl.Items. On failure it leaves the items as they were and returns the
// error, which says v0.1.1's log (exitlog.PrintedTwice); v0.1.1 writes no
// result.
func Run(rl *fn.ResourceList) (bool, error) {
	return runAs(rl, v011())
}

// RunUnstable is the function as the catalog's :unstable tag behaved at
// commit 76fe381, which the conformance corpus records. On failure it
// leaves the items as they were, adds an error result and returns the
// error.
func RunUnstable(rl *fn.ResourceList) (bool, error) {
	return runAs(rl, unstable())
}

func runAs(rl *fn.ResourceList, rel release) (bool, error) {
	if err := run(rl, rel); err != nil {
		if !rel.results {
			// v0.1.1's framework printed the error, and its main printed
			// it again (exitlog.PrintedTwice).
			return false, exitlog.PrintedTwice(err)
		}
		err = fmt.Errorf("ensure-name-substring: %w", err)
		rl.Results = append(rl.Results, &fn.Result{Message: err.Error(), Severity: fn.Error})
		return false, err
	}
	return true, nil
}

func run(rl *fn.ResourceList, rel release) error {
	cfg, err := rel.parseConfig(rl.FunctionConfig)
	if err != nil {
		return err
	}
	if err := shape.CheckMetadata(rl.Items); err != nil {
		return err
	}
	items, passed := rl.Items, map[int]*fn.KubeObject(nil)
	if rel.passesNameless {
		items, passed = nameless(rl.Items)
	}
	resources, input, err := readResources(items)
	if err != nil {
		return fmt.Errorf("reading the resources: %w", err)
	}
	b := newBudget(input)
	done, err := ensureNames(resources, cfg, rel, b)
	if err != nil {
		return err
	}
	if rel.dependsOn {
		if err := updateDependsOn(resources, done); err != nil {
			return err
		}
	}
	if err := fixNameReferences(resources, rel.unreferred, b); err != nil {
		return err
	}
	if err := clearAnnotations(resources, rel.cleared); err != nil {
		return err
	}
	out := make([]*yaml.RNode, len(resources))
	for i, r := range resources {
		out[i] = &r.RNode
	}
	rl.Items = merge(fn.MoveToKubeObjects(out), passed)
	return nil
}

// nameless takes the items without a kind or a metadata.name out of items:
// it returns the others, and those by their place in items.
func nameless(items fn.KubeObjects) (fn.KubeObjects, map[int]*fn.KubeObject) {
	var named fn.KubeObjects
	passed := map[int]*fn.KubeObject{}
	for i, o := range items {
		if o.GetKind() == "" || o.GetName() == "" {
			passed[i] = o
			continue
		}
		named = append(named, o)
	}
	return named, passed
}

// merge puts the passed items back in their places among the others.
func merge(others fn.KubeObjects, passed map[int]*fn.KubeObject) fn.KubeObjects {
	if len(passed) == 0 {
		return others
	}
	out := make(fn.KubeObjects, 0, len(others)+len(passed))
	for i := 0; i < cap(out); i++ {
		if o, ok := passed[i]; ok {
			out = append(out, o)
			continue
		}
		out = append(out, others[0])
		others = others[1:]
	}
	return out
}

// readResources reads copies of the items, local config included, as
// kustomize's ResMap does (resmap.Factory.NewResMapFromRNodeSlice): each
// must have a kind and a name, empty ones are dropped, and no two may have
// the same resource id. (ResMap checks each id against all before it; this
// looks it up.) input is the size of the copies (see treesize.Bytes).
func readResources(items fn.KubeObjects) (resources []*resource.Resource, input int, err error) {
	nodes := make([]*yaml.RNode, len(items))
	for i, o := range items {
		nodes[i] = o.CopyToResourceNode()
		input += treesize.Bytes(nodes[i].YNode())
	}
	rf := resource.NewFactory(&hasher.Hasher{})
	rf.IncludeLocalConfigs = true
	if resources, err = rf.ResourcesFromRNodes(nodes); err != nil {
		return nil, 0, err
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
			return nil, 0, fmt.Errorf("may not add resource with an already registered id: %s", id)
		}
		ids[k] = true
	}
	return resources, input, nil
}

// clearAnnotations removes the annotations keys names (kustomize's build
// annotations; at commit 76fe381 those include kpt's path, index, sequence
// indent and id annotations, see the package comment), editing the
// annotations in place so that the rest of each resource keeps its layout,
// and removes an annotations map left empty.
func clearAnnotations(resources []*resource.Resource, keys []string) error {
	for _, r := range resources {
		annotations := r.GetAnnotations()
		cleared := false
		for _, key := range keys {
			if _, ok := annotations[key]; !ok {
				continue
			}
			if err := r.PipeE(yaml.ClearAnnotation(key)); err != nil {
				return fmt.Errorf("%s: clearing %s: %w", describe(r), key, err)
			}
			cleared = true
		}
		if !cleared {
			continue
		}
		if err := r.PipeE(yaml.Lookup(yaml.MetadataField), yaml.FieldClearer{Name: yaml.AnnotationsField, IfEmpty: true}); err != nil {
			return fmt.Errorf("%s: clearing empty annotations: %w", describe(r), err)
		}
	}
	return nil
}

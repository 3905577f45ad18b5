package ensurenamesubstring

import (
	"fmt"
	"slices"

	"sigs.k8s.io/kustomize/api/filters/nameref"
	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/resid"
	"sigs.k8s.io/kustomize/kyaml/utils"
	"sigs.k8s.io/kustomize/kyaml/yaml"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/fnrunner/fnrunner/functions/internal/budget"
	"github.com/fnrunner/fnrunner/functions/internal/treesize"
)

// nameReference says which fields of which kinds hold the name of a
// resource of kind Gvk.
type nameReference struct {
	resid.Gvk `json:",inline"`
	Referrers types.FsSlice `json:"fieldSpecs"`
}

// defaultNameReferences parses kustomize's built-in name references.
func defaultNameReferences() ([]nameReference, error) {
	var specs struct {
		NameReference []nameReference `json:"nameReference"`
	}
	if err := sigsyaml.Unmarshal([]byte(NameReferenceSpecs), &specs); err != nil {
		return nil, fmt.Errorf("parsing the name reference specs: %w", err)
	}
	return specs.NameReference, nil
}

// fixNameReferences updates the fields that refer to renamed resources by
// name (a ConfigMap's name in a Pod's volumes or env, a ClusterRole's in a
// ClusterRoleBinding's roleRef, ...), as kustomize does after it changes
// names: with its name reference filter, which finds each referral among
// the resources the referrer can see by the previous names recorded on
// them. What it costs is spent from b.
//
// Kustomize gives the filter every resource the referrer can see
// (ResMap.SubsetThatCouldBeReferencedByResource), and the filter keeps,
// for each name it reads, those previously so named; this gives it only
// those, looked up by the names it will read, in the same order, so that
// the work is in proportion to the references rather than to them times
// the resources. And kustomize lists, on each resource referred to, its
// referrers (the refBy build annotation, copied to add one, and read with
// every annotation): this clears the list after each referrer's field, as
// nothing reads it before clearBuildAnnotations does.
func fixNameReferences(resources []*resource.Resource, unreferred func(types.FieldSpec) bool, b *budget.Budget) error {
	refs, err := defaultNameReferences()
	if err != nil {
		return err
	}
	byName := previousNames(resources)
	for _, r := range resources {
		id := r.OrgId()
		// Named now: a filter that fails leaves r without its node.
		what := describe(r)
		var canSee func(*resource.Resource) bool
		var aliases int
		for _, ref := range refs {
			for _, field := range ref.Referrers {
				if !id.IsSelected(&field.Gvk) || unreferred(field) {
					continue
				}
				if canSee == nil {
					if canSee, err = referable(r); err != nil {
						return fmt.Errorf("%s: finding the resources it may refer to: %w", what, err)
					}
					aliases = treesize.AliasBytes(r.YNode())
				}
				names, certain := referredNames(r, field)
				referrals := candidatesNamed(resources, byName, names, canSee)
				if certain && len(referrals) == 0 {
					// Nothing to update, nothing to fail.
					continue
				}
				if err := b.Spend(aliases + referenceBytes(names, len(referrals))); err != nil {
					return fmt.Errorf("%s: %w", what, err)
				}
				f := nameref.Filter{
					Referrer:           r,
					NameFieldToUpdate:  field,
					ReferralTarget:     ref.Gvk,
					ReferralCandidates: &candidates{list: referrals},
				}
				if err := r.ApplyFilter(f); err != nil {
					return fmt.Errorf("%s: updating references to %s names: %w", what, ref.Kind, err)
				}
				if err := clearReferrers(referrals); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// previousNames indexes resources by the names of their previous ids (in
// kustomize's previous-id annotations): for each name, the indices of the
// resources once so named, in order.
func previousNames(resources []*resource.Resource) map[string][]int {
	byName := map[string][]int{}
	for i, r := range resources {
		for _, id := range r.PrevIds() {
			if ids := byName[id.Name]; len(ids) == 0 || ids[len(ids)-1] != i {
				byName[id.Name] = append(ids, i)
			}
		}
	}
	return byName
}

// referable says which resources r can refer to, as
// ResMap.SubsetThatCouldBeReferencedByResource selects them: any when r is
// cluster-scoped; else the cluster-scoped ones, those of r's namespace and,
// for a RoleBinding, those of its ServiceAccount subjects' namespaces.
func referable(r *resource.Resource) (func(*resource.Resource) bool, error) {
	referrer := r.CurId()
	if referrer.IsClusterScoped() {
		return func(*resource.Resource) bool { return true }, nil
	}
	namespaces, err := roleBindingNamespaces(r)
	if err != nil {
		return nil, err
	}
	return func(t *resource.Resource) bool {
		id := t.CurId()
		return id.IsClusterScoped() || id.IsNsEquals(referrer) || namespaces[t.GetNamespace()]
	}, nil
}

// roleBindingNamespaces is the namespaces of a RoleBinding's ServiceAccount
// subjects, as kustomize's resmap reads them (getNamespacesForRoleBinding).
func roleBindingNamespaces(r *resource.Resource) (map[string]bool, error) {
	namespaces := map[string]bool{}
	if r.GetKind() != "RoleBinding" {
		return namespaces, nil
	}
	subjects, err := r.GetSlice("subjects")
	if err != nil || subjects == nil {
		return namespaces, nil
	}
	for i, s := range subjects {
		// Kustomize assumes maps, and a string kind (and panics).
		subject, ok := s.(map[string]interface{})
		if !ok {
			return nil, fmt.Errorf("subjects[%d] is not a map", i)
		}
		ns, hasNamespace := subject["namespace"]
		kind, hasKind := subject["kind"]
		if !hasNamespace || !hasKind || kind != "ServiceAccount" {
			continue
		}
		n, ok := ns.(string)
		if !ok {
			//lint:ignore ST1005 the catalog function's message, word for word
			return nil, fmt.Errorf("Invalid Input: namespace is blank for resource %q\n", r.CurId())
		}
		namespaces[n] = true
	}
	return namespaces, nil
}

// referredNames is the names the name reference filter reads at field of
// r, or more: going down the field's path as kustomize's field spec filter
// does (through every item of a list, and through aliases), the strings
// there, and the name fields of the maps, also in lists. certain is false
// where the filter may fail (a string on the way, a map without a name,
// ...): it must then run, to fail as it does.
func referredNames(r *resource.Resource, field types.FieldSpec) (names []string, certain bool) {
	n := nameReader{certain: true}
	n.walk(r.YNode(), utils.PathSplitter(field.Path, "/"))
	return n.names, n.certain
}

type nameReader struct {
	names   []string
	certain bool
}

// walk reads the names at path under n.
func (n *nameReader) walk(node *yaml.Node, path []string) {
	switch {
	case node == nil || node.Tag == yaml.NodeTagNull:
	case node.Kind == yaml.AliasNode:
		n.walk(node.Alias, path)
	case len(path) == 0:
		n.read(node, true)
	case node.Kind == yaml.SequenceNode:
		for _, item := range node.Content {
			n.walk(item, path)
		}
	case node.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(node.Content); i += 2 {
			if node.Content[i].Value == path[0] {
				n.walk(node.Content[i+1], path[1:])
			}
		}
	default:
		n.certain = false
	}
}

// read reads the name node is: a string, a map's name, or, in a list (when
// list), the names of its items.
func (n *nameReader) read(node *yaml.Node, list bool) {
	switch {
	case node.Tag == yaml.NodeTagNull:
	case node.Kind == yaml.ScalarNode:
		n.names = append(n.names, node.Value)
	case node.Kind == yaml.MappingNode:
		named := false
		for i := 0; i+1 < len(node.Content); i += 2 {
			if node.Content[i].Value == "name" {
				n.names = append(n.names, node.Content[i+1].Value)
				named = true
			}
		}
		n.certain = n.certain && named
	case node.Kind == yaml.SequenceNode && list:
		for _, item := range node.Content {
			n.read(item, false)
		}
	default:
		n.certain = false
	}
}

// candidatesNamed is the resources r can see (canSee) once named one of
// names, in order.
func candidatesNamed(resources []*resource.Resource, byName map[string][]int, names []string, canSee func(*resource.Resource) bool) []*resource.Resource {
	var indices []int
	seen := map[string]bool{}
	for _, name := range names {
		if !seen[name] {
			seen[name] = true
			indices = append(indices, byName[name]...)
		}
	}
	slices.Sort(indices)
	indices = slices.Compact(indices)
	var out []*resource.Resource
	for _, i := range indices {
		if canSee(resources[i]) {
			out = append(out, resources[i])
		}
	}
	return out
}

// referenceBytes is what fixing the references names costs, given n
// candidates, beyond going down their field (one of kustomize's, a few
// steps): sieving the candidates for each name, and adding the referrer to
// the referrers listed on a resource once for each reference before it to
// the same one.
func referenceBytes(names []string, n int) int {
	counts := map[string]int{}
	for _, name := range names {
		counts[name]++
	}
	cost := len(names) * n * sieveBytes
	for _, c := range counts {
		cost += c * c * refByBytes
	}
	return cost
}

// refByAnnotation is kustomize's refBy build annotation, which lists the
// referrers of a resource.
const refByAnnotation = konfig.ConfigAnnoDomain + "/refBy"

// clearReferrers removes the refBy annotation from resources, and the
// annotations if none are left, as clearBuildAnnotations would.
func clearReferrers(resources []*resource.Resource) error {
	for _, r := range resources {
		if _, ok := r.GetAnnotations()[refByAnnotation]; !ok {
			continue
		}
		if err := r.PipeE(yaml.ClearAnnotation(refByAnnotation)); err != nil {
			return fmt.Errorf("%s: clearing %s: %w", describe(r), refByAnnotation, err)
		}
		if err := r.PipeE(yaml.Lookup(yaml.MetadataField), yaml.FieldClearer{Name: yaml.AnnotationsField, IfEmpty: true}); err != nil {
			return fmt.Errorf("%s: clearing empty annotations: %w", describe(r), err)
		}
	}
	return nil
}

// candidates is the resources the name reference filter is given, as a
// ResMap: the filter calls Resources, GroupedByOriginalNamespace and
// GroupedByCurrentNamespace; its other methods are not there (nil).
// (Kustomize's own ResMap checks each resource against all before it when
// it is built.)
type candidates struct {
	resmap.ResMap
	list []*resource.Resource
}

func (c *candidates) Resources() []*resource.Resource {
	return slices.Clone(c.list)
}

// GroupedByOriginalNamespace is resWrangler's: the resources by the
// effective namespace of their original ids, cluster-scoped ones left out.
func (c *candidates) GroupedByOriginalNamespace() map[string][]*resource.Resource {
	return c.grouped(func(r *resource.Resource) resid.ResId { return r.OrgId() })
}

// GroupedByCurrentNamespace is resWrangler's: the resources by the
// effective namespace of their current ids, cluster-scoped ones left out.
func (c *candidates) GroupedByCurrentNamespace() map[string][]*resource.Resource {
	return c.grouped(func(r *resource.Resource) resid.ResId { return r.CurId() })
}

func (c *candidates) grouped(id func(*resource.Resource) resid.ResId) map[string][]*resource.Resource {
	byNamespace := map[string][]*resource.Resource{}
	for _, r := range c.list {
		ns := id(r).EffectiveNamespace()
		byNamespace[ns] = append(byNamespace[ns], r)
	}
	delete(byNamespace, resid.TotallyNotANamespace)
	return byNamespace
}

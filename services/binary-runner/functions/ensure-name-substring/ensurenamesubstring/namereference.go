package ensurenamesubstring

import (
	"fmt"

	"sigs.k8s.io/kustomize/api/filters/nameref"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/resid"
	"sigs.k8s.io/yaml"
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
	if err := yaml.Unmarshal([]byte(NameReferenceSpecs), &specs); err != nil {
		return nil, fmt.Errorf("parsing the name reference specs: %w", err)
	}
	return specs.NameReference, nil
}

// fixNameReferences updates the fields that refer to renamed resources by
// name (a ConfigMap's name in a Pod's volumes or env, a ClusterRole's in a
// ClusterRoleBinding's roleRef, ...), as kustomize does after it changes
// names: with its name reference filter, which finds each referral among
// the resources the referrer can see by the previous names recorded on
// them.
func fixNameReferences(m resmap.ResMap) error {
	refs, err := defaultNameReferences()
	if err != nil {
		return err
	}
	for _, r := range m.Resources() {
		id := r.OrgId()
		var candidates resmap.ResMap
		for _, ref := range refs {
			for _, field := range ref.Referrers {
				if !id.IsSelected(&field.Gvk) {
					continue
				}
				if candidates == nil {
					if candidates, err = m.SubsetThatCouldBeReferencedByResource(r); err != nil {
						return fmt.Errorf("%s: finding the resources it may refer to: %w", describe(r), err)
					}
				}
				f := nameref.Filter{
					Referrer:           r,
					NameFieldToUpdate:  field,
					ReferralTarget:     ref.Gvk,
					ReferralCandidates: candidates,
				}
				if err := r.ApplyFilter(f); err != nil {
					return fmt.Errorf("%s: updating references to %s names: %w", describe(r), ref.Kind, err)
				}
			}
		}
	}
	return nil
}

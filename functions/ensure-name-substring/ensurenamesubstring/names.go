package ensurenamesubstring

import (
	"fmt"

	"sigs.k8s.io/kustomize/api/filters/fieldspec"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/resid"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/fnrunner/fnrunner/functions/internal/budget"
	"github.com/fnrunner/fnrunner/functions/internal/treesize"
)

// namePath is the name field of every resource, in field spec form.
const namePath = "metadata/name"

// objectRef identifies a resource the way a depends-on reference does:
// by group, kind and name.
type objectRef struct {
	group, kind, name string
}

// renames maps each renamed resource's original reference to its new name.
type renames map[objectRef]string

// ensureNames adds the substring to every name field that lacks it, in the
// resources whose names the function changes. A changed metadata.name is
// recorded on the resource (kustomize's previous-id annotations, which the
// name reference fix reads) and in the returned renames. What it adds is
// spent from b.
func ensureNames(resources []*resource.Resource, cfg *Config, rel release, b *budget.Budget) (renames, error) {
	done := renames{}
	fields := cfg.nameFields()
	for _, r := range resources {
		id := r.OrgId()
		if keepsName(id, rel.keepsKptfiles) {
			continue
		}
		what := describe(r)
		if err := b.Spend(treesize.AliasBytes(r.YNode())); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		for _, fs := range fields {
			if !id.IsSelected(&fs.Gvk) {
				continue
			}
			var err error
			if fs.Path == namePath {
				err = rename(r, cfg, done, b)
			} else if err = b.Spend(pathBytes(fs.Path)); err == nil {
				err = r.PipeE(ensureField(fs, cfg, b))
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
		}
	}
	return done, nil
}

// keepsName says whether id is of a kind whose names the function leaves
// alone: CustomResourceDefinition, APIService, Namespace, and Kptfile when
// kptfiles says so.
func keepsName(id resid.ResId, kptfiles bool) bool {
	kept := []resid.Gvk{
		{Kind: "CustomResourceDefinition"}, // of any group
		{Group: "apiregistration.k8s.io", Kind: "APIService"},
		{Kind: "Namespace"},
	}
	if kptfiles {
		kept = append(kept, resid.Gvk{Group: "kpt.dev", Kind: "Kptfile"})
	}
	for i := range kept {
		if id.IsSelected(&kept[i]) {
			return true
		}
	}
	return false
}

// rename ensures the substring in r's metadata.name.
func rename(r *resource.Resource, cfg *Config, done renames, b *budget.Budget) error {
	old := r.GetName()
	name, changed := cfg.ensure(old)
	if !changed {
		return nil
	}
	if err := b.Spend(16 * len(name)); err != nil {
		return err
	}
	r.StorePreviousId()
	if cfg.EditMode == Append {
		r.AddNameSuffix(cfg.Substring)
	} else {
		r.AddNamePrefix(cfg.Substring)
	}
	if err := r.SetName(name); err != nil {
		return err
	}
	gvk := r.GetGvk()
	done[objectRef{group: gvk.Group, kind: gvk.Kind, name: old}] = name
	return nil
}

// ensureField is a filter that ensures the substring in each string the
// field spec selects, creating the field when the spec says so, spending
// what it adds from b.
func ensureField(fs types.FieldSpec, cfg *Config, b *budget.Budget) fieldspec.Filter {
	return fieldspec.Filter{
		FieldSpec: fs,
		SetValue: func(n *yaml.RNode) error {
			y := n.YNode()
			if y.Kind != yaml.ScalarNode {
				return fmt.Errorf("not a string but a %s", kindName(y.Kind))
			}
			if err := b.Spend(setBytes + len(y.Value) + len(cfg.Substring)); err != nil {
				return err
			}
			if v, changed := cfg.ensure(y.Value); changed {
				y.Value, y.Tag = v, yaml.NodeTagString
			}
			return nil
		},
		CreateKind: yaml.ScalarNode,
		CreateTag:  yaml.NodeTagString,
	}
}

// describe names r for messages: its kind, namespace and name.
func describe(r *resource.Resource) string {
	if ns := r.GetNamespace(); ns != "" {
		return fmt.Sprintf("%s %s/%s", r.GetKind(), ns, r.GetName())
	}
	return fmt.Sprintf("%s %s", r.GetKind(), r.GetName())
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "map"
	case yaml.SequenceNode:
		return "list"
	default:
		return fmt.Sprintf("YAML node of kind %d", k)
	}
}

// Which resources a pipeline function gets: its selectors and exclude.

package kptrender

import (
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// Selector picks resources for a pipeline function: every field set must
// match.
type Selector struct {
	APIVersion  string            `yaml:"apiVersion"`
	Kind        string            `yaml:"kind"`
	Name        string            `yaml:"name"`
	Namespace   string            `yaml:"namespace"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// IsEmpty says that s sets no field (it then matches everything).
func (s Selector) IsEmpty() bool {
	return s.APIVersion == "" && s.Kind == "" && s.Name == "" && s.Namespace == "" && len(s.Labels) == 0 && len(s.Annotations) == 0
}

// Matches says whether every field s sets matches n.
func (s Selector) Matches(n *yaml.RNode) bool {
	match := func(want, got string) bool { return want == "" || want == got }
	return match(s.APIVersion, n.GetApiVersion()) && match(s.Kind, n.GetKind()) &&
		match(s.Name, n.GetName()) && match(s.Namespace, n.GetNamespace()) &&
		subset(s.Labels, n.GetLabels()) && subset(s.Annotations, n.GetAnnotations())
}

func subset(want, got map[string]string) bool {
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			return false
		}
	}
	return true
}

// selects says whether a function with these selectors and exclusions gets
// n: it matches one of the selectors (or there are none) and none of the
// non-empty exclusions.
func selects(selectors, exclude []Selector, n *yaml.RNode) bool {
	selected := len(selectors) == 0
	for _, s := range selectors {
		if s.Matches(n) {
			selected = true
			break
		}
	}
	if !selected {
		return false
	}
	for _, x := range exclude {
		if !x.IsEmpty() && x.Matches(n) {
			return false
		}
	}
	return true
}

// resourceIDAnnotation marks each resource, while a function with
// selectors runs, so that its output can be put back in place (kpt's
// annotation, removed afterwards).
const resourceIDAnnotation = "internal.config.k8s.io/kpt-resource-id"

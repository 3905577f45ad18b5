package ensurenamesubstring

import (
	"fmt"
	"strings"

	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// DependsOnAnnotation is kpt's annotation naming the resources a resource
// depends on: comma-separated references, each
// <group>/namespaces/<namespace>/<kind>/<name> for a namespaced resource or
// <group>/<kind>/<name> for a cluster-scoped one.
const DependsOnAnnotation = "config.kubernetes.io/depends-on"

// updateDependsOn rewrites, in every resource's depends-on annotation, the
// references to resources of the package that were renamed: a reference
// whose group, kind and name are those of a renamed resource gets its new
// name. As in the catalog, the reference's namespace is not compared (a
// resource of a package often has none until it is applied).
func updateDependsOn(resources []*resource.Resource, done renames) error {
	if len(done) == 0 {
		return nil
	}
	for _, r := range resources {
		value, ok := r.GetAnnotations()[DependsOnAnnotation]
		if !ok {
			continue
		}
		updated := rewriteDependsOn(value, done)
		if updated == value {
			continue
		}
		if err := r.PipeE(yaml.SetAnnotation(DependsOnAnnotation, updated)); err != nil {
			return fmt.Errorf("%s: setting %s: %w", describe(r), DependsOnAnnotation, err)
		}
	}
	return nil
}

// rewriteDependsOn returns the depends-on value with each reference to a
// renamed resource naming its new name.
func rewriteDependsOn(value string, done renames) string {
	refs := strings.Split(value, ",")
	for i, ref := range refs {
		refs[i] = rewriteReference(ref, done)
	}
	return strings.Join(refs, ",")
}

// rewriteReference returns one depends-on reference (spaces around it
// kept) naming the new name of the resource it refers to, or unchanged when
// that resource was not renamed or the reference is malformed.
func rewriteReference(ref string, done renames) string {
	trimmed := strings.TrimSpace(ref)
	parts := strings.Split(trimmed, "/")
	var group, kind string
	nameAt := len(parts) - 1
	switch {
	case len(parts) == 5 && parts[1] == "namespaces":
		group, kind = parts[0], parts[3]
	case len(parts) == 3:
		group, kind = parts[0], parts[1]
	default:
		return ref
	}
	name, ok := done[objectRef{group: group, kind: kind, name: parts[nameAt]}]
	if !ok {
		return ref
	}
	parts[nameAt] = name
	return strings.Replace(ref, trimmed, strings.Join(parts, "/"), 1)
}

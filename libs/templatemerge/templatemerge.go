// Package templatemerge applies a FunctionConfig's podExecutor.templateOverrides
// to the base pod template. It merges, never replaces: env entries are merged
// by name (the template's other entries survive), envFrom entries are added,
// and resources and the pod securityContext are merged field by field.
//
// The contract of the template (as porch's): the container named "function"
// runs the function; init containers copy the wrapper-server into a shared
// volume. Container overrides go to "function", init container overrides to
// every init container.
//
// Apply merges whatever it is given: a Policy says which overrides may be
// applied at all (the Secrets and ConfigMaps they name, the resources they
// ask for), and is checked before.
package templatemerge

import (
	"encoding/json"
	"fmt"

	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"

	"github.com/fnrunner/fnrunner/libs/apis/config/v1alpha1"
)

// FunctionContainer is the name of the container that runs the function.
const FunctionContainer = "function"

// Apply returns a copy of tpl with o applied. A nil o returns a plain copy.
func Apply(tpl *corev1.PodTemplateSpec, o *v1alpha1.TemplateOverrides) (*corev1.PodTemplateSpec, error) {
	out := tpl.DeepCopy()
	if o == nil {
		return out, nil
	}
	spec := &out.Spec
	if o.ServiceAccountName != "" {
		spec.ServiceAccountName = o.ServiceAccountName
	}
	if o.SecurityContext != nil {
		merged := &corev1.PodSecurityContext{}
		if err := mergeJSON(spec.SecurityContext, o.SecurityContext, merged); err != nil {
			return nil, fmt.Errorf("securityContext: %w", err)
		}
		spec.SecurityContext = merged
	}
	if o.Container != nil {
		found := false
		for i := range spec.Containers {
			if spec.Containers[i].Name == FunctionContainer {
				found = true
				if err := applyContainer(&spec.Containers[i], o.Container); err != nil {
					return nil, fmt.Errorf("container %q: %w", FunctionContainer, err)
				}
			}
		}
		if !found {
			return nil, fmt.Errorf("the pod template has no container named %q", FunctionContainer)
		}
	}
	if o.InitContainer != nil {
		for i := range spec.InitContainers {
			if err := applyContainer(&spec.InitContainers[i], o.InitContainer); err != nil {
				return nil, fmt.Errorf("init container %q: %w", spec.InitContainers[i].Name, err)
			}
		}
	}
	return out, nil
}

func applyContainer(c *corev1.Container, o *v1alpha1.ContainerOverrides) error {
	if o.Resources != nil {
		merged := corev1.ResourceRequirements{}
		if err := mergeJSON(&c.Resources, o.Resources, &merged); err != nil {
			return fmt.Errorf("resources: %w", err)
		}
		c.Resources = merged
	}
	c.Env = MergeEnv(c.Env, o.Env)
	for _, ef := range o.EnvFrom {
		if !containsEnvFrom(c.EnvFrom, ef) {
			c.EnvFrom = append(c.EnvFrom, ef)
		}
	}
	return nil
}

// MergeEnv merges override into base by name: an override replaces the base
// entry of the same name in place, new names are appended in order.
func MergeEnv(base, override []corev1.EnvVar) []corev1.EnvVar {
	if len(override) == 0 {
		return base
	}
	out := append([]corev1.EnvVar(nil), base...)
	index := map[string]int{}
	for i, e := range out {
		index[e.Name] = i
	}
	for _, e := range override {
		if i, ok := index[e.Name]; ok {
			out[i] = e
			continue
		}
		index[e.Name] = len(out)
		out = append(out, e)
	}
	return out
}

func containsEnvFrom(list []corev1.EnvFromSource, e corev1.EnvFromSource) bool {
	want, _ := json.Marshal(e)
	for _, have := range list {
		got, _ := json.Marshal(have)
		if string(got) == string(want) {
			return true
		}
	}
	return false
}

// mergeJSON merges override onto base as an RFC 7386 merge patch (fields
// set in override win; maps merge key by key) and decodes the result into out.
func mergeJSON(base, override, out any) error {
	b, err := json.Marshal(base)
	if err != nil {
		return err
	}
	if string(b) == "null" {
		b = []byte("{}")
	}
	p, err := json.Marshal(override)
	if err != nil {
		return err
	}
	merged, err := jsonpatch.MergePatch(b, p)
	if err != nil {
		return err
	}
	return json.Unmarshal(merged, out)
}

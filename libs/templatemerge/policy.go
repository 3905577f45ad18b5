package templatemerge

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/fnrunner/fnrunner/libs/apis/config/v1alpha1"
)

// ErrOverrideRefused: a Policy refuses what templateOverrides put in a pod.
// Every *RefusedError is one.
var ErrOverrideRefused = errors.New("templateOverrides refused")

// Rule is the part of a Policy that refused an override.
type Rule string

// The rules of a Policy.
const (
	// RuleSecrets: a Secret not in Policy.AllowedSecrets.
	RuleSecrets Rule = "secrets"
	// RuleConfigMaps: a ConfigMap not in Policy.AllowedConfigMaps.
	RuleConfigMaps Rule = "configmaps"
	// RuleCPU: a cpu request or limit above Policy.MaxCPU.
	RuleCPU Rule = "cpu"
	// RuleMemory: a memory request or limit above Policy.MaxMemory.
	RuleMemory Rule = "memory"
	// RuleUnsupported: what no Policy allows (a resource other than cpu and
	// memory, a zero or negative quantity, an env source it does not know).
	RuleUnsupported Rule = "unsupported"
)

// RefusedError is one override a Policy refuses.
type RefusedError struct {
	// Field is the override's path, e.g.
	// "templateOverrides.container.env[0].valueFrom.secretKeyRef".
	Field string
	// Rule is the part of the Policy that refused it.
	Rule Rule
	// Reason says why, e.g. `Secret "fnrunner-ca" is not allowed`.
	Reason string
}

func (e *RefusedError) Error() string { return e.Field + ": " + e.Reason }

// Is makes every RefusedError an ErrOverrideRefused.
func (e *RefusedError) Is(target error) bool { return target == ErrOverrideRefused }

// Policy says what a FunctionConfig's templateOverrides may put in a pod
// beyond plain values: the Secrets and ConfigMaps (of the pods' namespace)
// env and envFrom may name, and the CPU and memory resources may ask for.
// The zero Policy allows no Secret, no ConfigMap and no CPU or memory
// above zero.
type Policy struct {
	// AllowedSecrets are the Secrets env secretKeyRef and envFrom
	// secretRef may name.
	AllowedSecrets []string
	// AllowedConfigMaps are the ConfigMaps env configMapKeyRef and envFrom
	// configMapRef may name.
	AllowedConfigMaps []string
	// MaxCPU bounds every cpu request and limit.
	MaxCPU resource.Quantity
	// MaxMemory bounds every memory request and limit.
	MaxMemory resource.Quantity
}

// Check returns the first override of o the policy refuses, as a
// *RefusedError, or nil. The function container's overrides come first,
// then the init containers'.
func (p Policy) Check(o *v1alpha1.TemplateOverrides) error {
	if o == nil {
		return nil
	}
	if err := p.checkContainer("templateOverrides.container", o.Container); err != nil {
		return err
	}
	if err := p.checkContainer("templateOverrides.initContainer", o.InitContainer); err != nil {
		return err
	}
	return nil
}

func (p Policy) checkContainer(path string, c *v1alpha1.ContainerOverrides) *RefusedError {
	if c == nil {
		return nil
	}
	for i, e := range c.Env {
		if e.ValueFrom == nil {
			continue // a plain value
		}
		if err := p.checkEnvSource(fmt.Sprintf("%s.env[%d].valueFrom", path, i), *e.ValueFrom); err != nil {
			return err
		}
	}
	for i, ef := range c.EnvFrom {
		if err := p.checkEnvFrom(fmt.Sprintf("%s.envFrom[%d]", path, i), ef); err != nil {
			return err
		}
	}
	if c.Resources != nil {
		return p.checkResources(path+".resources", c.Resources)
	}
	return nil
}

// checkEnvSource checks every source s sets (the apiserver allows one, but
// nothing is taken for granted here).
func (p Policy) checkEnvSource(field string, s corev1.EnvVarSource) *RefusedError {
	if s.SecretKeyRef != nil {
		if err := p.checkName(field+".secretKeyRef", RuleSecrets, s.SecretKeyRef.Name); err != nil {
			return err
		}
		s.SecretKeyRef = nil
	}
	if s.ConfigMapKeyRef != nil {
		if err := p.checkName(field+".configMapKeyRef", RuleConfigMaps, s.ConfigMapKeyRef.Name); err != nil {
			return err
		}
		s.ConfigMapKeyRef = nil
	}
	// fieldRef and resourceFieldRef read the pod's own metadata, addresses
	// and resources: what the function can learn inside its pod anyway, and
	// no object of the namespace.
	s.FieldRef, s.ResourceFieldRef = nil, nil
	if s != (corev1.EnvVarSource{}) {
		return &RefusedError{Field: field, Rule: RuleUnsupported,
			Reason: "only fieldRef, resourceFieldRef, secretKeyRef and configMapKeyRef are allowed"}
	}
	return nil
}

func (p Policy) checkEnvFrom(field string, s corev1.EnvFromSource) *RefusedError {
	if s.SecretRef != nil {
		if err := p.checkName(field+".secretRef", RuleSecrets, s.SecretRef.Name); err != nil {
			return err
		}
		s.SecretRef = nil
	}
	if s.ConfigMapRef != nil {
		if err := p.checkName(field+".configMapRef", RuleConfigMaps, s.ConfigMapRef.Name); err != nil {
			return err
		}
		s.ConfigMapRef = nil
	}
	s.Prefix = ""
	if s != (corev1.EnvFromSource{}) {
		return &RefusedError{Field: field, Rule: RuleUnsupported, Reason: "only secretRef and configMapRef are allowed"}
	}
	return nil
}

// checkName refuses a Secret or ConfigMap the policy does not name.
func (p Policy) checkName(field string, rule Rule, name string) *RefusedError {
	allowed, kind := p.AllowedSecrets, "Secret"
	if rule == RuleConfigMaps {
		allowed, kind = p.AllowedConfigMaps, "ConfigMap"
	}
	if slices.Contains(allowed, name) {
		return nil
	}
	return &RefusedError{Field: field, Rule: rule, Reason: fmt.Sprintf("%s %q is not allowed", kind, name)}
}

// checkResources bounds requests and limits alike. A limit of zero is
// refused: the kubelet takes it for no limit at all.
func (p Policy) checkResources(path string, r *corev1.ResourceRequirements) *RefusedError {
	if len(r.Claims) > 0 {
		return &RefusedError{Field: path + ".claims", Rule: RuleUnsupported, Reason: "resource claims are not allowed"}
	}
	for _, part := range []struct {
		name  string
		list  corev1.ResourceList
		limit bool
	}{{"requests", r.Requests, false}, {"limits", r.Limits, true}} {
		for _, name := range slices.Sorted(maps.Keys(part.list)) {
			if err := p.checkQuantity(path+"."+part.name+"."+string(name), name, part.list[name], part.limit); err != nil {
				return err
			}
		}
	}
	return nil
}

func (p Policy) checkQuantity(field string, name corev1.ResourceName, q resource.Quantity, limit bool) *RefusedError {
	var (
		bound resource.Quantity
		rule  Rule
	)
	switch name {
	case corev1.ResourceCPU:
		bound, rule = p.MaxCPU, RuleCPU
	case corev1.ResourceMemory:
		bound, rule = p.MaxMemory, RuleMemory
	default:
		return &RefusedError{Field: field, Rule: RuleUnsupported, Reason: "only cpu and memory may be overridden"}
	}
	switch {
	case q.Sign() < 0:
		return &RefusedError{Field: field, Rule: RuleUnsupported, Reason: fmt.Sprintf("%s is negative", q.String())}
	case limit && q.IsZero():
		return &RefusedError{Field: field, Rule: RuleUnsupported, Reason: "a limit of 0 is no limit to the kubelet"}
	case q.Cmp(bound) > 0:
		return &RefusedError{Field: field, Rule: rule, Reason: fmt.Sprintf("%s is above the bound %s", q.String(), bound.String())}
	}
	return nil
}

// CheckMerged checks what Apply made of tpl with o: in each container o
// overrides resources of, for cpu and memory when o names them, the
// request (the limit when there is none, as the apiserver defaults it) is
// not above the limit, and neither is above the policy's bound. The
// template's values count: an override of a request alone must still fit
// the template's limit. A resource o does not name is the template's
// alone, and not checked. It returns a *RefusedError, or nil, or Apply's
// error.
func (p Policy) CheckMerged(tpl *corev1.PodTemplateSpec, o *v1alpha1.TemplateOverrides) error {
	if o == nil || (resourcesOf(o.Container) == nil && resourcesOf(o.InitContainer) == nil) {
		return nil
	}
	merged, err := Apply(tpl, o)
	if err != nil {
		return err
	}
	if r := resourcesOf(o.Container); r != nil {
		for _, c := range merged.Spec.Containers {
			if c.Name == FunctionContainer {
				if err := p.checkMergedContainer("container "+FunctionContainer, r, c.Resources); err != nil {
					return err
				}
			}
		}
	}
	if r := resourcesOf(o.InitContainer); r != nil {
		for _, c := range merged.Spec.InitContainers {
			if err := p.checkMergedContainer("init container "+c.Name, r, c.Resources); err != nil {
				return err
			}
		}
	}
	return nil
}

func resourcesOf(c *v1alpha1.ContainerOverrides) *corev1.ResourceRequirements {
	if c == nil {
		return nil
	}
	return c.Resources
}

// checkMergedContainer checks a merged container's resources, those the
// override names.
func (p Policy) checkMergedContainer(what string, override *corev1.ResourceRequirements, merged corev1.ResourceRequirements) *RefusedError {
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		_, inRequests := override.Requests[name]
		_, inLimits := override.Limits[name]
		if !inRequests && !inLimits {
			continue
		}
		bound, rule := p.MaxCPU, RuleCPU
		if name == corev1.ResourceMemory {
			bound, rule = p.MaxMemory, RuleMemory
		}
		field := fmt.Sprintf("templateOverrides merged into the %s: resources", what)
		limit, hasLimit := merged.Limits[name]
		request, hasRequest := merged.Requests[name]
		if !hasRequest && hasLimit {
			request, hasRequest = limit, true
		}
		switch {
		case hasRequest && hasLimit && request.Cmp(limit) > 0:
			return &RefusedError{Field: field + ".requests." + string(name), Rule: rule,
				Reason: fmt.Sprintf("%s is above the limit %s", request.String(), limit.String())}
		case hasLimit && limit.Cmp(bound) > 0:
			return &RefusedError{Field: field + ".limits." + string(name), Rule: rule,
				Reason: fmt.Sprintf("%s is above the bound %s", limit.String(), bound.String())}
		case hasRequest && request.Cmp(bound) > 0:
			return &RefusedError{Field: field + ".requests." + string(name), Rule: rule,
				Reason: fmt.Sprintf("%s is above the bound %s", request.String(), bound.String())}
		}
	}
	return nil
}

package templatemerge

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/fnrunner/fnrunner/libs/apis/config/v1alpha1"
)

func secretKey(name string) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: "k"}}
}

func configMapKey(name string) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: "k"}}
}

func secretRef(name string) corev1.EnvFromSource {
	return corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}
}

func configMapRef(name string) corev1.EnvFromSource {
	return corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}
}

func resources(requests, limits corev1.ResourceList) *corev1.ResourceRequirements {
	return &corev1.ResourceRequirements{Requests: requests, Limits: limits}
}

func cpu(q string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(q)}
}

func memory(q string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(q)}
}

// Each override a policy refuses names its field and the rule that refused
// it; plain values, the pod's own fields and what the policy names pass.
func TestPolicyCheck(t *testing.T) {
	policy := Policy{
		AllowedSecrets:    []string{"fn-creds"},
		AllowedConfigMaps: []string{"fn-settings"},
		MaxCPU:            resource.MustParse("2"),
		MaxMemory:         resource.MustParse("2Gi"),
	}
	tests := []struct {
		name      string
		container *v1alpha1.ContainerOverrides
		// init puts the overrides on the init containers instead.
		init bool
		// field and rule of the refusal; "" passes.
		field string
		rule  Rule
	}{
		{name: "no overrides"},
		{name: "plain value", container: &v1alpha1.ContainerOverrides{Env: []corev1.EnvVar{{Name: "A", Value: "1"}}}},
		{name: "fieldRef to pod metadata", container: &v1alpha1.ContainerOverrides{Env: []corev1.EnvVar{
			{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}},
		{name: "resourceFieldRef to its own limits", container: &v1alpha1.ContainerOverrides{Env: []corev1.EnvVar{
			{Name: "MEM", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory"}}}}}},
		{name: "secretKeyRef refused", container: &v1alpha1.ContainerOverrides{Env: []corev1.EnvVar{
			{Name: "A", Value: "1"}, {Name: "CA_KEY", ValueFrom: secretKey("fnrunner-ca")}}},
			field: "templateOverrides.container.env[1].valueFrom.secretKeyRef", rule: RuleSecrets},
		{name: "secretKeyRef to a named Secret", container: &v1alpha1.ContainerOverrides{Env: []corev1.EnvVar{{Name: "TOKEN", ValueFrom: secretKey("fn-creds")}}}},
		{name: "secretKeyRef beside a fieldRef refused", container: &v1alpha1.ContainerOverrides{Env: []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}, SecretKeyRef: secretKey("auth-secret").SecretKeyRef}}}},
			field: "templateOverrides.container.env[0].valueFrom.secretKeyRef", rule: RuleSecrets},
		{name: "configMapKeyRef refused", container: &v1alpha1.ContainerOverrides{Env: []corev1.EnvVar{{Name: "A", ValueFrom: configMapKey("kube-root-ca.crt")}}},
			field: "templateOverrides.container.env[0].valueFrom.configMapKeyRef", rule: RuleConfigMaps},
		{name: "configMapKeyRef to a named ConfigMap", container: &v1alpha1.ContainerOverrides{Env: []corev1.EnvVar{{Name: "A", ValueFrom: configMapKey("fn-settings")}}}},
		{name: "a Secret's name is no ConfigMap's", container: &v1alpha1.ContainerOverrides{Env: []corev1.EnvVar{{Name: "A", ValueFrom: configMapKey("fn-creds")}}},
			field: "templateOverrides.container.env[0].valueFrom.configMapKeyRef", rule: RuleConfigMaps},
		{name: "fileKeyRef refused", container: &v1alpha1.ContainerOverrides{Env: []corev1.EnvVar{{Name: "A", ValueFrom: &corev1.EnvVarSource{
			FileKeyRef: &corev1.FileKeySelector{VolumeName: "wrapper-server-tools", Path: "env", Key: "A"}}}}},
			field: "templateOverrides.container.env[0].valueFrom", rule: RuleUnsupported},
		{name: "envFrom secretRef refused", container: &v1alpha1.ContainerOverrides{EnvFrom: []corev1.EnvFromSource{secretRef("auth-secret")}},
			field: "templateOverrides.container.envFrom[0].secretRef", rule: RuleSecrets},
		{name: "envFrom secretRef to a named Secret", container: &v1alpha1.ContainerOverrides{EnvFrom: []corev1.EnvFromSource{secretRef("fn-creds")}}},
		{name: "envFrom configMapRef refused", container: &v1alpha1.ContainerOverrides{EnvFrom: []corev1.EnvFromSource{configMapRef("fn-settings"), configMapRef("other")}},
			field: "templateOverrides.container.envFrom[1].configMapRef", rule: RuleConfigMaps},
		{name: "init container secretKeyRef refused", init: true, container: &v1alpha1.ContainerOverrides{Env: []corev1.EnvVar{{Name: "A", ValueFrom: secretKey("fnrunner-ca")}}},
			field: "templateOverrides.initContainer.env[0].valueFrom.secretKeyRef", rule: RuleSecrets},
		{name: "resources at the bound", container: &v1alpha1.ContainerOverrides{Resources: resources(
			corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2000m"), corev1.ResourceMemory: resource.MustParse("2Gi")},
			corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("2048Mi")})}},
		{name: "cpu limit over the bound refused", container: &v1alpha1.ContainerOverrides{Resources: resources(nil, cpu("2001m"))},
			field: "templateOverrides.container.resources.limits.cpu", rule: RuleCPU},
		{name: "cpu request over the bound refused", container: &v1alpha1.ContainerOverrides{Resources: resources(cpu("3"), nil)},
			field: "templateOverrides.container.resources.requests.cpu", rule: RuleCPU},
		{name: "memory limit over the bound refused", container: &v1alpha1.ContainerOverrides{Resources: resources(memory("1Gi"), memory("3Gi"))},
			field: "templateOverrides.container.resources.limits.memory", rule: RuleMemory},
		{name: "memory request over the bound refused", container: &v1alpha1.ContainerOverrides{Resources: resources(memory("2049Mi"), nil)},
			field: "templateOverrides.container.resources.requests.memory", rule: RuleMemory},
		{name: "init container over the bound refused", init: true, container: &v1alpha1.ContainerOverrides{Resources: resources(nil, memory("64Gi"))},
			field: "templateOverrides.initContainer.resources.limits.memory", rule: RuleMemory},
		{name: "zero request passes", container: &v1alpha1.ContainerOverrides{Resources: resources(cpu("0"), nil)}},
		{name: "zero limit refused: it is none", container: &v1alpha1.ContainerOverrides{Resources: resources(memory("0"), memory("0"))},
			field: "templateOverrides.container.resources.limits.memory", rule: RuleUnsupported},
		{name: "negative request refused", container: &v1alpha1.ContainerOverrides{Resources: resources(cpu("-1"), nil)},
			field: "templateOverrides.container.resources.requests.cpu", rule: RuleUnsupported},
		{name: "other resources refused", container: &v1alpha1.ContainerOverrides{Resources: resources(nil, corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")})},
			field: "templateOverrides.container.resources.limits.nvidia.com/gpu", rule: RuleUnsupported},
		{name: "resource claims refused", container: &v1alpha1.ContainerOverrides{Resources: &corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}},
			field: "templateOverrides.container.resources.claims", rule: RuleUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := &v1alpha1.TemplateOverrides{Container: tt.container}
			if tt.init {
				o = &v1alpha1.TemplateOverrides{InitContainer: tt.container}
			}
			err := policy.Check(o)
			if tt.field == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrOverrideRefused)
			var refused *RefusedError
			require.True(t, errors.As(err, &refused), "%T: %v", err, err)
			assert.Equal(t, tt.field, refused.Field, "%v", err)
			assert.Equal(t, tt.rule, refused.Rule, "%v", err)
			assert.Contains(t, err.Error(), tt.field)
		})
	}
}

// The zero Policy refuses every Secret, ConfigMap and resource bound, and
// passes what names none.
func TestZeroPolicy(t *testing.T) {
	var policy Policy
	require.NoError(t, policy.Check(nil))
	require.NoError(t, policy.Check(&v1alpha1.TemplateOverrides{ServiceAccountName: "fn",
		Container: &v1alpha1.ContainerOverrides{Env: []corev1.EnvVar{{Name: "A", Value: "1"}}, Resources: resources(cpu("0"), nil)}}))
	for _, o := range []*v1alpha1.ContainerOverrides{
		{Env: []corev1.EnvVar{{Name: "A", ValueFrom: secretKey("")}}},
		{EnvFrom: []corev1.EnvFromSource{configMapRef("")}},
		{Resources: resources(nil, cpu("1m"))},
	} {
		assert.ErrorIs(t, policy.Check(&v1alpha1.TemplateOverrides{Container: o}), ErrOverrideRefused, "%+v", o)
	}
}

// A refusal says which override and why.
func TestRefusedErrorMessage(t *testing.T) {
	err := Policy{}.Check(&v1alpha1.TemplateOverrides{Container: &v1alpha1.ContainerOverrides{Env: []corev1.EnvVar{{Name: "K", ValueFrom: secretKey("fnrunner-ca")}}}})
	assert.EqualError(t, err, `templateOverrides.container.env[0].valueFrom.secretKeyRef: Secret "fnrunner-ca" is not allowed`)
	err = Policy{MaxMemory: resource.MustParse("2Gi")}.Check(&v1alpha1.TemplateOverrides{Container: &v1alpha1.ContainerOverrides{Resources: resources(nil, memory("4Gi"))}})
	assert.EqualError(t, err, `templateOverrides.container.resources.limits.memory: 4Gi is above the bound 2Gi`)
}

// The merged container is checked too: a request above its limit, or a
// merged request or limit above the bound, of the resources the override
// names, is refused; the template's values count.
func TestPolicyCheckMerged(t *testing.T) {
	policy := Policy{MaxCPU: resource.MustParse("2"), MaxMemory: resource.MustParse("2Gi")}
	both := func(a, b corev1.ResourceList) corev1.ResourceList {
		out := corev1.ResourceList{}
		for k, v := range a {
			out[k] = v
		}
		for k, v := range b {
			out[k] = v
		}
		return out
	}
	tests := []struct {
		name string
		// template is the function and init containers' resources.
		template corev1.ResourceRequirements
		o        *v1alpha1.TemplateOverrides
		// field and rule of the refusal; "" passes.
		field string
		rule  Rule
	}{
		{name: "no overrides"},
		{name: "no resources overridden, the template's above the bound",
			template: *resources(cpu("4"), cpu("8")),
			o:        &v1alpha1.TemplateOverrides{Container: &v1alpha1.ContainerOverrides{Env: []corev1.EnvVar{{Name: "A", Value: "b"}}}}},
		{name: "within the template's limit",
			template: *resources(cpu("100m"), cpu("1")),
			o:        &v1alpha1.TemplateOverrides{Container: &v1alpha1.ContainerOverrides{Resources: resources(cpu("500m"), nil)}}},
		{name: "a request above the template's limit",
			template: *resources(nil, cpu("1")),
			o:        &v1alpha1.TemplateOverrides{Container: &v1alpha1.ContainerOverrides{Resources: resources(cpu("1500m"), nil)}},
			field:    "templateOverrides merged into the container function: resources.requests.cpu", rule: RuleCPU},
		{name: "a limit below the template's request",
			template: *resources(memory("1Gi"), nil),
			o:        &v1alpha1.TemplateOverrides{Container: &v1alpha1.ContainerOverrides{Resources: resources(nil, memory("512Mi"))}},
			field:    "templateOverrides merged into the container function: resources.requests.memory", rule: RuleMemory},
		{name: "a request above the override's own limit",
			o:     &v1alpha1.TemplateOverrides{Container: &v1alpha1.ContainerOverrides{Resources: resources(cpu("2"), cpu("1"))}},
			field: "templateOverrides merged into the container function: resources.requests.cpu", rule: RuleCPU},
		{name: "a request overridden, the template's limit above the bound",
			template: *resources(nil, memory("4Gi")),
			o:        &v1alpha1.TemplateOverrides{Container: &v1alpha1.ContainerOverrides{Resources: resources(memory("1Gi"), nil)}},
			field:    "templateOverrides merged into the container function: resources.limits.memory", rule: RuleMemory},
		{name: "a limit overridden, the template's request above the bound and the limit",
			template: *resources(cpu("3"), nil),
			o:        &v1alpha1.TemplateOverrides{Container: &v1alpha1.ContainerOverrides{Resources: resources(nil, cpu("2"))}},
			field:    "templateOverrides merged into the container function: resources.requests.cpu", rule: RuleCPU},
		{name: "a limit alone: the request defaults to it",
			o: &v1alpha1.TemplateOverrides{Container: &v1alpha1.ContainerOverrides{Resources: resources(nil, both(cpu("2"), memory("2Gi")))}}},
		{name: "cpu overridden, the template's memory not checked",
			template: *resources(memory("8Gi"), memory("16Gi")),
			o:        &v1alpha1.TemplateOverrides{Container: &v1alpha1.ContainerOverrides{Resources: resources(cpu("1"), cpu("2"))}}},
		{name: "an init container's request above the template's limit",
			template: *resources(nil, cpu("250m")),
			o:        &v1alpha1.TemplateOverrides{InitContainer: &v1alpha1.ContainerOverrides{Resources: resources(cpu("500m"), nil)}},
			field:    "templateOverrides merged into the init container copy-wrapper: resources.requests.cpu", rule: RuleCPU},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				InitContainers: []corev1.Container{{Name: "copy-wrapper", Resources: *tt.template.DeepCopy()}},
				Containers:     []corev1.Container{{Name: FunctionContainer, Resources: *tt.template.DeepCopy()}},
			}}
			// Every override here passes Check: only the merge refuses.
			require.NoError(t, policy.Check(tt.o))
			err := policy.CheckMerged(tpl, tt.o)
			if tt.field == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, ErrOverrideRefused)
			var refused *RefusedError
			require.ErrorAs(t, err, &refused)
			assert.Equal(t, tt.field, refused.Field)
			assert.Equal(t, tt.rule, refused.Rule)
		})
	}
}

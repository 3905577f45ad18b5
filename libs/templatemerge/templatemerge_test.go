package templatemerge

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/fnrunner/fnrunner/libs/apis/config/v1alpha1"
)

func base() *corev1.PodTemplateSpec {
	return &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		ServiceAccountName: "default-fn",
		SecurityContext:    &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532)},
		InitContainers:     []corev1.Container{{Name: "copy-wrapper", Env: []corev1.EnvVar{{Name: "A", Value: "1"}}}},
		Containers: []corev1.Container{{
			Name: FunctionContainer,
			Env:  []corev1.EnvVar{{Name: "KEEP", Value: "template"}, {Name: "OVERRIDE", Value: "template"}},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
			},
		}, {Name: "sidecar"}},
	}}
}

func TestApplyMerges(t *testing.T) {
	tpl := base()
	got, err := Apply(tpl, &v1alpha1.TemplateOverrides{
		ServiceAccountName: "fn-sa",
		SecurityContext:    &corev1.PodSecurityContext{FSGroup: ptr.To[int64](2000)},
		Container: &v1alpha1.ContainerOverrides{
			Env:       []corev1.EnvVar{{Name: "OVERRIDE", Value: "fc"}, {Name: "NEW", Value: "fc"}},
			EnvFrom:   []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}}}},
			Resources: &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")}, Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}},
		},
		InitContainer: &v1alpha1.ContainerOverrides{Env: []corev1.EnvVar{{Name: "B", Value: "2"}}},
	})
	require.NoError(t, err)
	fn := got.Spec.Containers[0]
	wantEnv := []corev1.EnvVar{{Name: "KEEP", Value: "template"}, {Name: "OVERRIDE", Value: "fc"}, {Name: "NEW", Value: "fc"}}
	assert.Equal(t, wantEnv, fn.Env, "env")
	for _, q := range []struct {
		what string
		list corev1.ResourceList
		name corev1.ResourceName
		want string
	}{
		{"template cpu request", fn.Resources.Requests, corev1.ResourceCPU, "100m"},
		{"memory request", fn.Resources.Requests, corev1.ResourceMemory, "512Mi"},
		{"memory limit", fn.Resources.Limits, corev1.ResourceMemory, "1Gi"},
	} {
		t.Run(q.what, func(t *testing.T) {
			got := q.list[q.name]
			assert.Equal(t, q.want, got.String(), "%s in %v", q.name, q.list)
		})
	}
	assert.Len(t, fn.EnvFrom, 1, "envFrom")
	assert.Equal(t, "fn-sa", got.Spec.ServiceAccountName, "serviceAccountName")
	if sc := got.Spec.SecurityContext; assert.NotNil(t, sc, "securityContext") {
		assert.Equal(t, ptr.To[int64](2000), sc.FSGroup, "securityContext not merged: fsGroup")
		assert.Equal(t, ptr.To[int64](65532), sc.RunAsUser, "securityContext not merged: runAsUser")
		assert.Equal(t, ptr.To(true), sc.RunAsNonRoot, "securityContext not merged: runAsNonRoot")
	}
	if e := got.Spec.InitContainers[0].Env; assert.Len(t, e, 2, "init env") {
		assert.Equal(t, "B", e[1].Name, "init env = %v", e)
	}
	assert.Empty(t, got.Spec.Containers[1].Env, "sidecar changed: %+v", got.Spec.Containers[1])
	// The base template is not modified.
	assert.Equal(t, base(), tpl, "Apply modified its input")
	// Applying the same overrides twice changes nothing more.
	again, err := Apply(got, &v1alpha1.TemplateOverrides{Container: &v1alpha1.ContainerOverrides{EnvFrom: fn.EnvFrom}})
	if assert.NoError(t, err, "applying again") {
		assert.Len(t, again.Spec.Containers[0].EnvFrom, 1, "envFrom duplicated")
	}
}

func TestApplyNeedsFunctionContainer(t *testing.T) {
	tpl := base()
	tpl.Spec.Containers[0].Name = "other"
	_, err := Apply(tpl, &v1alpha1.TemplateOverrides{Container: &v1alpha1.ContainerOverrides{}})
	assert.Error(t, err, "a template without the function container was accepted")
	got, err := Apply(tpl, nil)
	assert.NoError(t, err, "nil overrides")
	assert.Equal(t, tpl, got, "nil overrides")
}

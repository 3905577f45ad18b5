package templatemerge

import (
	"reflect"
	"testing"

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
	if err != nil {
		t.Fatal(err)
	}
	fn := got.Spec.Containers[0]
	wantEnv := []corev1.EnvVar{{Name: "KEEP", Value: "template"}, {Name: "OVERRIDE", Value: "fc"}, {Name: "NEW", Value: "fc"}}
	if !reflect.DeepEqual(fn.Env, wantEnv) {
		t.Errorf("env = %v, want %v", fn.Env, wantEnv)
	}
	if cpu := fn.Resources.Requests[corev1.ResourceCPU]; cpu.String() != "100m" {
		t.Errorf("template cpu request lost: %v", fn.Resources.Requests)
	}
	if mem := fn.Resources.Requests[corev1.ResourceMemory]; mem.String() != "512Mi" {
		t.Errorf("memory request = %v", mem.String())
	}
	if lim := fn.Resources.Limits[corev1.ResourceMemory]; lim.String() != "1Gi" {
		t.Errorf("memory limit = %v", lim.String())
	}
	if len(fn.EnvFrom) != 1 || got.Spec.ServiceAccountName != "fn-sa" {
		t.Errorf("envFrom %v sa %q", fn.EnvFrom, got.Spec.ServiceAccountName)
	}
	sc := got.Spec.SecurityContext
	if sc == nil || sc.FSGroup == nil || *sc.FSGroup != 2000 || sc.RunAsUser == nil || *sc.RunAsUser != 65532 || !*sc.RunAsNonRoot {
		t.Errorf("securityContext not merged: %+v", sc)
	}
	if e := got.Spec.InitContainers[0].Env; len(e) != 2 || e[1].Name != "B" {
		t.Errorf("init env = %v", e)
	}
	if len(got.Spec.Containers[1].Env) != 0 {
		t.Errorf("sidecar changed: %+v", got.Spec.Containers[1])
	}
	// The base template is not modified.
	if !reflect.DeepEqual(tpl, base()) {
		t.Error("Apply modified its input")
	}
	// Applying the same overrides twice changes nothing more.
	again, err := Apply(got, &v1alpha1.TemplateOverrides{Container: &v1alpha1.ContainerOverrides{EnvFrom: fn.EnvFrom}})
	if err != nil || len(again.Spec.Containers[0].EnvFrom) != 1 {
		t.Errorf("envFrom duplicated: %v %v", again.Spec.Containers[0].EnvFrom, err)
	}
}

func TestApplyNeedsFunctionContainer(t *testing.T) {
	tpl := base()
	tpl.Spec.Containers[0].Name = "other"
	if _, err := Apply(tpl, &v1alpha1.TemplateOverrides{Container: &v1alpha1.ContainerOverrides{}}); err == nil {
		t.Error("a template without the function container was accepted")
	}
	if got, err := Apply(tpl, nil); err != nil || !reflect.DeepEqual(got, tpl) {
		t.Errorf("nil overrides: %v", err)
	}
}

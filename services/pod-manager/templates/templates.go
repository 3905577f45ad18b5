// Package templates provides the pod-manager's base templates: the core
// PodTemplate "base-pod-template" and the ServiceTemplate
// "base-service-template" in the pod namespace, created from built-in
// defaults when missing (as porch does). Their resourceVersions make the
// template version stamped on every pod; Watcher follows changes.
package templates

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fnrunner/fnrunner/libs/apis/config/v1alpha1"
	"github.com/fnrunner/fnrunner/libs/templatemerge"
)

// Names and well-known values of the template contract.
const (
	PodTemplateName     = "base-pod-template"
	ServiceTemplateName = "base-service-template"
	// ToolsDir is where the init container puts the wrapper-server.
	ToolsDir = "/wrapper-server-tools"
	// WrapperPort is the wrapper-server's port in function pods.
	WrapperPort = 9446
	// WrapperMetricsPort is the wrapper-server's Prometheus port in
	// function pods (the services have 9090 to 9093).
	WrapperMetricsPort = 9094
	// OTelMetricsPort is where porch's runner and its wrapper-servers serve
	// Prometheus metrics (OTEL_EXPORTER_PROMETHEUS_PORT's default), with
	// the OpenTelemetry gRPC names (rpc_server_*): the wrapper-server serves
	// them there too, as porch's inline pod template has it.
	OTelMetricsPort = 9464
	toolsVolume     = "wrapper-server-tools"
	// tmpVolume is the function container's /tmp: the wrapper-server makes
	// each call's private directory there, and a function image may have
	// no /tmp at all (one built from scratch).
	tmpVolume = "tmp"
)

// DefaultPodTemplate is the built-in pod template. The init container runs
// the wrapper-server image's own binary in copy mode, so that image needs no
// shell; the function container runs the copied wrapper-server, to which the
// pod-manager appends "--" and the function image's entrypoint.
func DefaultPodTemplate(namespace, wrapperImage string) *corev1.PodTemplate {
	mount := []corev1.VolumeMount{{Name: toolsVolume, MountPath: ToolsDir}}
	// Function pods run code fnrunner did not write: no API credentials, no
	// root, no capabilities, the runtime's seccomp profile, bounded resources
	// (the restricted Pod Security level; templateOverrides may loosen what
	// the pod-manager's flags allow).
	restricted := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	return &corev1.PodTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: PodTemplateName, Namespace: namespace},
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](65532),
				RunAsGroup:     ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			InitContainers: []corev1.Container{{
				Name:            "copy-wrapper-server",
				Image:           wrapperImage,
				Command:         []string{"/wrapper-server", "--copy-to=" + ToolsDir},
				VolumeMounts:    mount,
				SecurityContext: restricted,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
				},
			}},
			Containers: []corev1.Container{{
				Name: templatemerge.FunctionContainer,
				// Replaced by the function's image (pinned by digest) in each pod;
				// a PodTemplate must name one.
				Image:   wrapperImage,
				Command: []string{ToolsDir + "/wrapper-server"},
				Args:    []string{"--port", fmt.Sprint(WrapperPort), "--metrics-address", fmt.Sprintf(":%d", WrapperMetricsPort)},
				Ports: []corev1.ContainerPort{
					{Name: "grpc", ContainerPort: WrapperPort},
					{Name: "metrics", ContainerPort: WrapperMetricsPort},
					{Name: "otel-metrics", ContainerPort: OTelMetricsPort},
				},
				// porch's inline template's: OpenTelemetry's metrics on
				// 0.0.0.0:9464, no traces.
				Env: []corev1.EnvVar{
					{Name: "OTEL_METRICS_EXPORTER", Value: "prometheus"},
					{Name: "OTEL_TRACES_EXPORTER", Value: "none"},
					{Name: "OTEL_EXPORTER_PROMETHEUS_HOST", Value: "0.0.0.0"},
				},
				// The tools read-only here: a function (without the
				// sandbox's landlock layer) could otherwise replace the
				// wrapper-server or fnsandbox, which every later helper
				// runs outside any call's sandbox.
				VolumeMounts: []corev1.VolumeMount{
					{Name: toolsVolume, MountPath: ToolsDir, ReadOnly: true},
					{Name: tmpVolume, MountPath: "/tmp"},
				},
				// Every second: the kubelet's first probe comes as the
				// container starts, often before the wrapper-server
				// listens, and at the default 10 s period a cold call
				// then waits up to 10 s more (seen on the real node:
				// ready +8 s against +2 s). A gRPC health check is
				// cheap beside porch's exec probe. Ten misses (10 s)
				// before a ready pod counts as unready, as at the
				// default period 3 misses took 30 s: a pod busy with
				// calls does not flap.
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
					GRPC: &corev1.GRPCAction{Port: WrapperPort},
				}, PeriodSeconds: 1, FailureThreshold: 10},
				SecurityContext: restricted,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi")},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: toolsVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: tmpVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("512Mi"))}}},
			},
		}},
	}
}

// DefaultServiceTemplate is the built-in Service template.
func DefaultServiceTemplate(namespace string) *v1alpha1.ServiceTemplate {
	return &v1alpha1.ServiceTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: ServiceTemplateName, Namespace: namespace},
		Template: v1alpha1.ServiceTemplateSpec{Spec: corev1.ServiceSpec{
			Type:  corev1.ServiceTypeClusterIP,
			Ports: []corev1.ServicePort{{Name: "grpc", Port: WrapperPort, TargetPort: intstr.FromInt32(WrapperPort)}},
		}},
	}
}

// Templates are the current base templates.
type Templates struct {
	Pod     *corev1.PodTemplate
	Service *v1alpha1.ServiceTemplate
}

// Version is what pods are stamped with: both templates' resourceVersions,
// so a change to either rolls the pods.
func (t *Templates) Version() string { return t.Pod.ResourceVersion + "." + t.Service.ResourceVersion }

// Ensure reads both templates, creating the missing ones from the defaults.
func Ensure(ctx context.Context, c client.Client, namespace, wrapperImage string) (*Templates, error) {
	pt := &corev1.PodTemplate{}
	if err := getOrCreate(ctx, c, client.ObjectKey{Namespace: namespace, Name: PodTemplateName}, pt, DefaultPodTemplate(namespace, wrapperImage)); err != nil {
		return nil, fmt.Errorf("pod template: %w", err)
	}
	st := &v1alpha1.ServiceTemplate{}
	if err := getOrCreate(ctx, c, client.ObjectKey{Namespace: namespace, Name: ServiceTemplateName}, st, DefaultServiceTemplate(namespace)); err != nil {
		return nil, fmt.Errorf("service template: %w", err)
	}
	return &Templates{Pod: pt, Service: st}, nil
}

func getOrCreate(ctx context.Context, c client.Client, key client.ObjectKey, into, def client.Object) error {
	err := c.Get(ctx, key, into)
	if !apierrors.IsNotFound(err) {
		return err
	}
	if err := c.Create(ctx, def); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return c.Get(ctx, key, into)
}

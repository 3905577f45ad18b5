package kube

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fnrunner/fnrunner/services/pod-manager/podcache"
	"github.com/fnrunner/fnrunner/services/pod-manager/templates"
)

// Events receives what the watcher sees; *podcache.Cache implements it.
type Events interface {
	PodReady(pod, address string)
	PodFailed(pod string, err error)
	// PodPending says why a pod is not ready yet.
	PodPending(pod, reason string)
	// PodUnschedulable is PodPending for a pod the scheduler cannot place.
	PodUnschedulable(pod, reason string)
}

// Addressing says how the pod-manager reaches a function pod.
type Addressing string

// Addressing modes.
const (
	// ServiceDNS dials <pod>.<namespace>.svc.<cluster domain>:9446 (works
	// in service meshes); a pod is ready when its Ready condition is true
	// and its Service's EndpointSlices hold its IP as a ready endpoint or,
	// sooner, when its wrapper-server answers the Watcher's own health
	// check through that address (Watcher.Health; the Service publishes
	// the pod's address before the pod is Ready, so that the way to it is
	// made while its containers start).
	ServiceDNS Addressing = "service-dns"
	// PodIP dials the pod's IP; a pod is ready when its Ready condition is
	// true or, sooner, when its wrapper-server answers the Watcher's own
	// health check (Watcher.Health).
	PodIP Addressing = "pod-ip"
)

// failureReason reports container waiting reasons that mean the pod will
// not serve without a change: they fail the pod at once, with the reason.
func failureReason(reason string) bool {
	switch reason {
	case "CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "ErrImageNeverPull", "InvalidImageName",
		"CreateContainerConfigError", "CreateContainerError", "RunContainerError":
		return true
	}
	return false
}

// Dialing says how function pods are dialled.
type Dialing struct {
	Addressing Addressing
	// ClusterDomain is the cluster's DNS domain, for ServiceDNS ("" =
	// cluster.local).
	ClusterDomain string
}

// Address is how a ready pod is dialled.
func (d Dialing) Address(p *corev1.Pod) string {
	if d.Addressing == PodIP {
		return net.JoinHostPort(p.Status.PodIP, strconv.Itoa(templates.WrapperPort))
	}
	domain := d.ClusterDomain
	if domain == "" {
		domain = "cluster.local"
	}
	return net.JoinHostPort(p.Name+"."+p.Namespace+".svc."+domain, strconv.Itoa(templates.WrapperPort))
}

// Health asks a wrapper-server itself whether it serves.
type Health interface {
	// Serving returns nil when the wrapper-server at address answers its
	// gRPC health check SERVING.
	Serving(ctx context.Context, address string) error
}

// Watcher reports this replica's function pods to Events.
type Watcher struct {
	Client    client.Client
	Namespace string
	Owner     string
	Dialing   Dialing
	Events    Events
	// Health is asked every ProbeInterval whether a pod that has its IP
	// but is not Ready yet already serves at its address, for ProbeFor
	// after the pod was created: a cold call then starts when the
	// wrapper-server answers, not when the kubelet has noticed the
	// container, run its readiness probe (every second at best) and
	// written the pod's status. The readiness probe stays: the pod's Ready
	// condition and adoption still go by it. Nil: the Ready condition only.
	Health        Health
	ProbeFor      time.Duration
	ProbeInterval time.Duration
}

// probeTimeout bounds one direct health check: the wrapper-server answers
// one in a millisecond once it listens, and a closed port or a Service
// without kube-proxy's rules yet refuses at once; only an address that
// drops packets takes this long, and holds one of the watcher's workers
// meanwhile.
const probeTimeout = 250 * time.Millisecond

// SetupWithManager watches pods and EndpointSlices in the namespace.
func (w *Watcher) SetupWithManager(mgr ctrl.Manager) error {
	owned := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetLabels()[LabelManagedBy] == ManagedBy && o.GetLabels()[LabelOwner] == w.Owner
	})
	toPod := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		svc := o.GetLabels()[discoveryv1.LabelServiceName]
		if svc == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: svc}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("function-pods").
		// Direct health checks of several cold pods go on at once.
		WithOptions(controller.Options{MaxConcurrentReconciles: 8}).
		For(&corev1.Pod{}, builder.WithPredicates(owned)).
		Watches(&discoveryv1.EndpointSlice{}, toPod).
		Complete(w)
}

// Reconcile implements reconcile.Reconciler.
func (w *Watcher) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pod corev1.Pod
	err := w.Client.Get(ctx, req.NamespacedName, &pod)
	if apierrors.IsNotFound(err) {
		w.Events.PodFailed(req.Name, errors.New("the pod was deleted"))
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if pod.Labels[LabelManagedBy] != ManagedBy || pod.Labels[LabelOwner] != w.Owner {
		return reconcile.Result{}, nil
	}
	if pod.DeletionTimestamp != nil {
		w.Events.PodFailed(pod.Name, errors.New("the pod is being deleted"))
		return reconcile.Result{}, nil
	}
	if waiting, message := failure(&pod); message != "" {
		// The waiting reason (ErrImagePull, CrashLoopBackOff, ...) is
		// what the pod-manager's metrics count the failure under.
		w.Events.PodFailed(pod.Name, &podcache.Failure{Reason: waiting, Err: errors.New(message)})
		return reconcile.Result{}, nil
	}
	if !Ready(&pod) && w.probing(&pod) {
		address := w.Dialing.Address(&pod)
		ctx, cancel := context.WithTimeout(ctx, probeTimeout)
		err := w.Health.Serving(ctx, address)
		cancel()
		if err == nil {
			w.Events.PodReady(pod.Name, address)
			return reconcile.Result{}, nil
		}
		if reason := Pending(&pod); reason != "" {
			w.Events.PodPending(pod.Name, reason)
		}
		return reconcile.Result{RequeueAfter: w.probeInterval(&pod)}, nil
	}
	if !Ready(&pod) || pod.Status.PodIP == "" {
		if reason := Pending(&pod); reason != "" && Unschedulable(&pod) {
			w.Events.PodUnschedulable(pod.Name, reason)
		} else if reason != "" {
			w.Events.PodPending(pod.Name, reason)
		}
		return reconcile.Result{}, nil
	}
	if w.Dialing.Addressing != PodIP {
		ok, err := w.endpointReady(ctx, &pod)
		if err != nil || !ok {
			return reconcile.Result{}, err
		}
	}
	w.Events.PodReady(pod.Name, w.Dialing.Address(&pod))
	return reconcile.Result{}, nil
}

// slowStart is how long a pod starts as pods usually do (no image to
// pull); one that takes longer (pulling a large image, say) is asked once a
// second at most.
const slowStart = 10 * time.Second

// probeInterval is how soon a starting pod is asked again.
func (w *Watcher) probeInterval(pod *corev1.Pod) time.Duration {
	if time.Since(pod.CreationTimestamp.Time) > slowStart {
		return max(w.ProbeInterval, time.Second)
	}
	return w.ProbeInterval
}

// probing says whether the pod's wrapper-server is asked directly: a
// Health, a pod whose readiness is the wrapper-server's health alone, its
// IP known (its Service has no endpoint before), within ProbeFor of its
// creation.
func (w *Watcher) probing(pod *corev1.Pod) bool {
	return w.Health != nil && w.ProbeInterval > 0 && pod.Status.PodIP != "" &&
		time.Since(pod.CreationTimestamp.Time) < w.ProbeFor && ReadyIsWrapperHealth(pod)
}

// ReadyIsWrapperHealth says whether the pod's Ready condition means no more
// than "the wrapper-server answers its health check SERVING", so that the
// pod-manager may ask that itself instead of waiting for the kubelet: one
// container, no sidecar (an init container that keeps running), no
// readiness gates, no startup probe and no postStart hook (readiness waits
// for them), and a readiness probe that is the wrapper-server's health (a
// gRPC probe of its port, as fnrunner's template has, or grpc-health-probe
// of it, as porch's has), a TCP check of its port (which a health answer
// implies) or none, with no initial delay and one success enough. Anything
// else — an operator's own check, a delay, a sidecar — is the kubelet's to
// judge.
func ReadyIsWrapperHealth(pod *corev1.Pod) bool {
	if len(pod.Spec.Containers) != 1 || len(pod.Spec.ReadinessGates) != 0 {
		return false
	}
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			return false
		}
	}
	c := pod.Spec.Containers[0]
	if c.StartupProbe != nil || c.Lifecycle != nil && c.Lifecycle.PostStart != nil {
		return false
	}
	probe := c.ReadinessProbe
	if probe == nil {
		return true
	}
	if probe.InitialDelaySeconds != 0 || probe.SuccessThreshold > 1 {
		return false
	}
	wrapperPort := func(p intstr.IntOrString) bool {
		if p.Type == intstr.Int {
			return p.IntVal == templates.WrapperPort
		}
		for _, cp := range c.Ports {
			if cp.Name == p.StrVal {
				return cp.ContainerPort == templates.WrapperPort
			}
		}
		return false
	}
	switch h := probe.ProbeHandler; {
	case h.GRPC != nil:
		return h.GRPC.Port == templates.WrapperPort && (h.GRPC.Service == nil || *h.GRPC.Service == "")
	case h.TCPSocket != nil:
		return wrapperPort(h.TCPSocket.Port)
	case h.Exec != nil:
		return healthProbeOfWrapper(h.Exec.Command)
	}
	return false
}

// healthProbeOfWrapper says whether command is grpc-health-probe asking the
// wrapper-server's port on the pod itself for the server's overall health.
func healthProbeOfWrapper(command []string) bool {
	if len(command) == 0 || path.Base(command[0]) != "grpc-health-probe" {
		return false
	}
	local := false
	for i := 1; i < len(command); i++ {
		arg := strings.TrimLeft(command[i], "-")
		name, value, inline := strings.Cut(arg, "=")
		switch name {
		case "addr":
			if !inline {
				if i+1 == len(command) {
					return false
				}
				i++
				value = command[i]
			}
			host, port, err := net.SplitHostPort(value)
			local = err == nil && port == strconv.Itoa(templates.WrapperPort) && (host == "localhost" || host == "127.0.0.1" || host == "::1" || host == "")
		case "service":
			return false
		}
	}
	return local
}

// endpointReady reports whether the pod's Service has the pod's IP as a
// ready endpoint (a mismatch just means "not yet").
func (w *Watcher) endpointReady(ctx context.Context, pod *corev1.Pod) (bool, error) {
	var slices discoveryv1.EndpointSliceList
	if err := w.Client.List(ctx, &slices, client.InNamespace(pod.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: pod.Name}); err != nil {
		return false, err
	}
	for _, s := range slices.Items {
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, a := range ep.Addresses {
				if a == pod.Status.PodIP {
					return true, nil
				}
			}
		}
	}
	return false, nil
}

// Ready reports the pod's Ready condition.
func Ready(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Failure says why a pod will not serve ("" if nothing says so): a
// container waiting for a failure reason, or a finished pod.
func Failure(pod *corev1.Pod) string {
	_, message := failure(pod)
	return message
}

// failure is Failure's message, and the container's waiting reason when
// that is why ("" for a finished pod).
func failure(pod *corev1.Pod) (waiting, message string) {
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range statuses {
			if w := cs.State.Waiting; w != nil && failureReason(w.Reason) {
				return w.Reason, fmt.Sprintf("container %q: %s: %s", cs.Name, w.Reason, w.Message)
			}
		}
	}
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return "", fmt.Sprintf("the pod is %s: %s", pod.Status.Phase, pod.Status.Message)
	}
	return "", ""
}

// Unschedulable says whether the scheduler reported that it cannot place
// the pod (its PodScheduled condition is False for Unschedulable).
func Unschedulable(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
		}
	}
	return false
}

// Pending says why a pod that has not failed is not ready yet ("" if
// nothing says so): it is not scheduled, a container waits, or readiness
// has not passed.
func Pending(pod *corev1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Status != corev1.ConditionFalse {
			continue
		}
		switch c.Type {
		case corev1.PodScheduled:
			return fmt.Sprintf("not scheduled: %s: %s", c.Reason, c.Message)
		case corev1.PodReady:
			for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
				for _, cs := range statuses {
					if w := cs.State.Waiting; w != nil && w.Reason != "" {
						return fmt.Sprintf("container %q waiting: %s: %s", cs.Name, w.Reason, w.Message)
					}
					if cs.State.Running != nil && !cs.Ready {
						return fmt.Sprintf("container %q running but not ready: its readiness probe has not passed", cs.Name)
					}
				}
			}
			return fmt.Sprintf("not ready: %s: %s", c.Reason, c.Message)
		}
	}
	return ""
}

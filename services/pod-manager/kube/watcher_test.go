package kube_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fnrunner/fnrunner/libs/imagematch"
	"github.com/fnrunner/fnrunner/services/pod-manager/kube"
	"github.com/fnrunner/fnrunner/services/pod-manager/podcache"
	"github.com/fnrunner/fnrunner/services/pod-manager/templates"
	"github.com/fnrunner/fnrunner/tests/kubetest"
	"github.com/fnrunner/fnrunner/tests/porchfiles"
)

type events struct {
	mu            sync.Mutex
	ready         map[string]string
	failed        map[string]error
	unschedulable map[string]string
}

var _ kube.Events = (*events)(nil)

func (e *events) PodReady(pod, address string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ready[pod] = address
}

func (e *events) PodFailed(pod string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.failed[pod] = err
}

func (e *events) PodPending(string, string) {}

func (e *events) PodUnschedulable(pod, reason string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.unschedulable[pod] = reason
}

func TestUnschedulable(t *testing.T) {
	for _, tc := range []struct {
		name       string
		conditions []corev1.PodCondition
		want       bool
	}{
		{"the scheduler cannot place it", []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}, true},
		{"not scheduled for another reason", []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonSchedulingGated}}, false},
		{"scheduled", []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}, false},
		{"nothing known yet", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, kube.Unschedulable(&corev1.Pod{Status: corev1.PodStatus{Conditions: tc.conditions}}))
		})
	}
}

// Why a pod is not ready yet, as the calls that time out waiting for it say.
func TestPendingReasons(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  corev1.PodStatus
		want string
	}{
		{"unschedulable", corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/1 nodes are available: 1 Insufficient cpu."}}},
			"not scheduled: Unschedulable: 0/1 nodes are available: 1 Insufficient cpu."},
		{"readiness not passing", corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
			{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady"}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "function", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}},
			`container "function" running but not ready: its readiness probe has not passed`},
		{"creating", corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}},
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "copy-wrapper-server", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}},
			`container "copy-wrapper-server" waiting: PodInitializing: `},
		{"nothing known yet", corev1.PodStatus{Phase: corev1.PodPending}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, kube.Pending(&corev1.Pod{Status: tc.pod}))
		})
	}
}

func TestFailureReasons(t *testing.T) {
	for reason, failed := range map[string]bool{
		"CrashLoopBackOff": true, "ImagePullBackOff": true, "ErrImagePull": true, "InvalidImageName": true,
		"CreateContainerConfigError": true, "ContainerCreating": false, "PodInitializing": false,
	} {
		t.Run(reason, func(t *testing.T) {
			p := &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
				Name: "function", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "m"}},
			}}}}
			if got := kube.Failure(p); failed {
				assert.Contains(t, got, reason, "Failure")
			} else {
				assert.Empty(t, got, "Failure")
			}
		})
	}
	init := &corev1.Pod{Status: corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{{
		Name: "copy-wrapper-server", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull"}},
	}}}}
	assert.Contains(t, kube.Failure(init), "copy-wrapper-server", "init container failure not seen")
}

// In service-dns mode a pod is ready only when its Service's EndpointSlices
// hold its IP as a ready endpoint; a deleted pod is reported failed.
func TestServiceDNSReadiness(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{})
	ctx := context.Background()
	const ns = "fns"
	require.NoError(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	ev := &events{ready: map[string]string{}, failed: map[string]error{}, unschedulable: map[string]string{}}
	w := &kube.Watcher{Client: env.Client, Namespace: ns, Owner: "r0", Dialing: kube.Dialing{Addressing: kube.ServiceDNS}, Events: ev}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "fn-abc", Namespace: ns, Labels: map[string]string{kube.LabelManagedBy: kube.ManagedBy, kube.LabelOwner: "r0"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "function", Image: "example.com/fn:v1"}}},
	}
	require.NoError(t, env.Client.Create(ctx, pod))
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.2.3", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	require.NoError(t, env.Client.Status().Update(ctx, pod))
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: pod.Name}}
	reconcileOnce := func() {
		_, err := w.Reconcile(ctx, req)
		require.NoError(t, err)
	}
	reconcileOnce()
	require.NotContains(t, ev.ready, pod.Name, "ready before any EndpointSlice holds the pod")
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "fn-abc-1", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: pod.Name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.9.9.9"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}
	require.NoError(t, env.Client.Create(ctx, slice))
	reconcileOnce()
	require.NotContains(t, ev.ready, pod.Name, "ready although the EndpointSlice holds another IP")
	slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.1.2.3"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	require.NoError(t, env.Client.Update(ctx, slice))
	reconcileOnce()
	assert.Equal(t, "fn-abc.fns.svc.cluster.local:9446", ev.ready[pod.Name], "address, want the Service's DNS name")
	require.NoError(t, env.Client.Delete(ctx, pod))
	reconcileOnce()
	assert.ErrorContains(t, ev.failed[pod.Name], "deleted", "deleted pod")
}

// Every valid image reference gives a pod and a Service the apiserver
// accepts: the Service's name must be a DNS-1035 label (a letter first,
// lowercase letters, digits and '-', at most 63), which image names with
// underscores, dots, leading digits or 200 characters are not.
func TestObjectNamesForAnyImage(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{})
	ctx := context.Background()
	const ns = "fns"
	require.NoError(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	b := &kube.Backend{Client: env.Client, Namespace: ns, Owner: "r0", MaxRequestBodySize: 1 << 20, PublishNotReadyAddresses: true}
	tpl := &templates.Templates{Pod: templates.DefaultPodTemplate(ns, "example.com/wrapper:v1"), Service: templates.DefaultServiceTemplate(ns)}
	for _, image := range []string{
		"example.com/fns/set-namespace:v1",
		"example.com/fns/my_function:v1",
		"example.com/fns/my.function:v1",
		"example.com/fns/0-leading-digit:v1",
		"example.com/fns/9:v1",
		"example.com/fns/a--b__c.d:v1",
		"example.com/fns/" + strings.Repeat("abcdefghij", 20) + ":v1",
	} {
		t.Run(image, func(t *testing.T) {
			ref, err := imagematch.Parse(image, "")
			require.NoError(t, err)
			spec := &kube.Spec{Function: ref, Image: ref.Repository() + "@sha256:" + strings.Repeat("a", 64), Entrypoint: []string{"/fn"}, Templates: tpl}
			name, err := b.Create(ctx, podcache.Function{Key: podcache.Key{Image: spec.Image}, Spec: spec})
			require.NoError(t, err)
			assert.LessOrEqual(t, len(name), 63)
			var svc corev1.Service
			require.NoError(t, env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &svc), "the pod's Service")
			assert.True(t, svc.Spec.PublishNotReadyAddresses, "the Service publishes the pod's address before it is Ready (PublishNotReadyAddresses)")
		})
	}
}

// The Service's DNS name uses the cluster's domain.
func TestServiceDNSAddressUsesTheClusterDomain(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "fn-abc", Namespace: "fns"}, Status: corev1.PodStatus{PodIP: "10.1.2.3"}}
	assert.Equal(t, "fn-abc.fns.svc.cluster.local:9446", kube.Dialing{Addressing: kube.ServiceDNS}.Address(pod))
	assert.Equal(t, "fn-abc.fns.svc.corp.example:9446", kube.Dialing{Addressing: kube.ServiceDNS, ClusterDomain: "corp.example"}.Address(pod))
	assert.Equal(t, "10.1.2.3:9446", kube.Dialing{Addressing: kube.PodIP, ClusterDomain: "corp.example"}.Address(pod))
}

// The watcher tells the cache why a pod failed (the container's waiting
// reason, which the cache's metrics count it under) and when a pending pod
// cannot be scheduled.
func TestFailureAndUnschedulableReachTheCache(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{})
	ctx := context.Background()
	const ns = "fns"
	require.NoError(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	ev := &events{ready: map[string]string{}, failed: map[string]error{}, unschedulable: map[string]string{}}
	w := &kube.Watcher{Client: env.Client, Namespace: ns, Owner: "r0", Dialing: kube.Dialing{Addressing: kube.PodIP}, Events: ev}
	for _, tc := range []struct {
		name   string
		status corev1.PodStatus
		reason string // the Failure's, "" for no failure
	}{
		{name: "pull", status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
			Name: "function", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: "no such image"}}}}},
			reason: "ErrImagePull"},
		{name: "finished", status: corev1.PodStatus{Phase: corev1.PodFailed, Message: "evicted"}, reason: ""},
		{name: "unschedulable", status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "fn-" + tc.name, Namespace: ns, Labels: map[string]string{kube.LabelManagedBy: kube.ManagedBy, kube.LabelOwner: "r0"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "function", Image: "example.com/fn:v1"}}},
			}
			require.NoError(t, env.Client.Create(ctx, pod))
			pod.Status = tc.status
			require.NoError(t, env.Client.Status().Update(ctx, pod))
			_, err := w.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: pod.Name}})
			require.NoError(t, err)
			ev.mu.Lock()
			defer ev.mu.Unlock()
			if tc.name == "unschedulable" {
				assert.Contains(t, ev.unschedulable[pod.Name], "0/1 nodes are available")
				assert.NotContains(t, ev.failed, pod.Name)
				return
			}
			var f *podcache.Failure
			require.ErrorAs(t, ev.failed[pod.Name], &f)
			assert.Equal(t, tc.reason, f.Reason)
			assert.Equal(t, kube.Failure(pod), f.Error(), "the message is Failure's")
		})
	}
}

// fnrunner's wrapper-server is told the image its pod is for (its metrics
// name that image's calls by it); a template that runs something else is
// not given the flag, porch's own above all: it runs porch's wrapper-server
// by the same command, which exits on a flag it does not know.
func TestWrapperServerGetsTheFunctionImage(t *testing.T) {
	porchfiles.Require(t)
	env := kubetest.Start(t, kubetest.Options{})
	ctx := context.Background()
	const ns = "fns"
	require.NoError(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	b := &kube.Backend{Client: env.Client, Namespace: ns, Owner: "r0", MaxRequestBodySize: 1 << 20, MaxCallsPerPod: 4}
	ref, err := imagematch.Parse("set-namespace:v1", "")
	require.NoError(t, err)
	var porchTemplate corev1.PodTemplate
	for _, o := range porchfiles.Objects(t, "22-function-templates.yaml") {
		if o.GetKind() == "PodTemplate" {
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &porchTemplate))
		}
	}
	require.NotEmpty(t, porchTemplate.Template.Spec.Containers, "porch's PodTemplate")
	for _, tc := range []struct {
		name string
		pod  *corev1.PodTemplate
		want bool
	}{
		{name: "fnrunner's", pod: templates.DefaultPodTemplate(ns, "example.com/wrapper:v1"), want: true},
		{name: "porch's", pod: &porchTemplate, want: false},
		{name: "another command", pod: func() *corev1.PodTemplate {
			p := templates.DefaultPodTemplate(ns, "example.com/wrapper:v1")
			p.Template.Spec.InitContainers = nil
			p.Template.Spec.Containers[0].Command = []string{"/bin/another-wrapper"}
			return p
		}(), want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tpl := &templates.Templates{Pod: tc.pod, Service: templates.DefaultServiceTemplate(ns)}
			spec := &kube.Spec{Function: ref, Image: ref.Repository() + "@sha256:" + strings.Repeat("a", 64), Entrypoint: []string{"/fn"}, Templates: tpl}
			name, err := b.Create(ctx, podcache.Function{Key: podcache.Key{Image: spec.Image}, Spec: spec})
			require.NoError(t, err)
			var pod corev1.Pod
			require.NoError(t, env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &pod))
			args := strings.Join(pod.Spec.Containers[0].Args, " ")
			if tc.want {
				assert.Contains(t, args, "--function-image ghcr.io/kptdev/krm-functions-catalog/set-namespace:v1 --")
			} else {
				assert.NotContains(t, args, "--function-image")
			}
			assert.True(t, strings.HasSuffix(args, "-- /fn"), "args = %q", args)
		})
	}
}

// adopter records what ReconcileExisting does with the pods it finds.
type adopter struct {
	adopted   []string
	discarded int
}

var _ kube.Adopter = (*adopter)(nil)

func (a *adopter) Adopt(_ podcache.Key, pod, _ string, _ time.Duration) {
	a.adopted = append(a.adopted, pod)
}
func (a *adopter) Discarded() { a.discarded++ }

// A pod of an earlier run that is not adopted is deleted and counted.
func TestStalePodsAreDiscarded(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{})
	ctx := context.Background()
	const ns = "fns"
	require.NoError(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	stale := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "fn-old", Namespace: ns,
			Labels:      map[string]string{kube.LabelManagedBy: kube.ManagedBy, kube.LabelOwner: "r0"},
			Annotations: map[string]string{kube.AnnotationTemplateVersion: "v1"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "function", Image: "example.com/fn:v1"}}},
	}
	require.NoError(t, env.Client.Create(ctx, stale))
	b := &kube.Backend{Client: env.Client, Namespace: ns, Owner: "r0"}
	into := &adopter{}
	rec, err := b.ReconcileExisting(ctx, "v2", kube.Dialing{Addressing: kube.PodIP}, time.Minute, into)
	require.NoError(t, err)
	assert.Equal(t, 1, rec.DeletedPods)
	assert.Equal(t, 1, into.discarded)
	assert.Empty(t, into.adopted)
}

// health is a kube.Health whose answer the test sets; it counts the
// addresses asked.
type health struct {
	mu    sync.Mutex
	err   error
	asked []string
}

var _ kube.Health = (*health)(nil)

func (h *health) Serving(_ context.Context, address string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.asked = append(h.asked, address)
	return h.err
}

// A starting pod is ready as soon as its wrapper-server answers the
// pod-manager's own health check at the pod's address (its IP, or its
// Service's name), before the kubelet reports it Ready; until then it is
// checked again every ProbeInterval, and only within ProbeFor of its
// creation.
func TestStartingPodAskedBeforeReady(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{})
	ctx := context.Background()
	const ns = "fns"
	require.NoError(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	newPod := func(name, ip string, ready corev1.ConditionStatus, probe *corev1.Probe) reconcile.Request {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{kube.LabelManagedBy: kube.ManagedBy, kube.LabelOwner: "r0"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "function", Image: "example.com/fn:v1", ReadinessProbe: probe}}},
		}
		require.NoError(t, env.Client.Create(ctx, pod))
		pod.Status = corev1.PodStatus{Phase: corev1.PodPending, PodIP: ip, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready, Reason: "ContainersNotReady"}}}
		require.NoError(t, env.Client.Status().Update(ctx, pod))
		return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
	}
	wrapperHealth := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 9446}}}
	ownCheck := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-f", "/tmp/warm"}}}}
	starting := newPod("fn-starting", "10.1.2.3", corev1.ConditionFalse, wrapperHealth)
	noIP := newPod("fn-no-ip", "", corev1.ConditionFalse, wrapperHealth)
	ownReadiness := newPod("fn-own-readiness", "10.1.2.4", corev1.ConditionFalse, ownCheck)
	alreadyReady := newPod("fn-ready", "10.1.2.5", corev1.ConditionTrue, wrapperHealth)

	for _, tc := range []struct {
		name       string
		addressing kube.Addressing
		probeFor   time.Duration
		req        reconcile.Request
		serving    bool
		address    string // asked, and ready at if serving
		readyAt    string // ready without being asked
	}{
		{name: "not serving yet", addressing: kube.PodIP, probeFor: time.Hour, req: starting, address: "10.1.2.3:9446"},
		{name: "serving", addressing: kube.PodIP, probeFor: time.Hour, req: starting, serving: true, address: "10.1.2.3:9446"},
		{name: "serving through its Service", addressing: kube.ServiceDNS, probeFor: time.Hour, req: starting, serving: true,
			address: "fn-starting.fns.svc.cluster.local:9446"},
		{name: "no IP yet", addressing: kube.PodIP, probeFor: time.Hour, req: noIP, serving: true},
		{name: "past the window", addressing: kube.PodIP, probeFor: time.Nanosecond, req: starting, serving: true},
		{name: "the template's own readiness check", addressing: kube.PodIP, probeFor: time.Hour, req: ownReadiness, serving: true},
		{name: "already Ready", addressing: kube.PodIP, probeFor: time.Hour, req: alreadyReady, readyAt: "10.1.2.5:9446"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := &events{ready: map[string]string{}, failed: map[string]error{}, unschedulable: map[string]string{}}
			h := &health{err: errors.New("connection refused")}
			if tc.serving {
				h.err = nil
			}
			w := &kube.Watcher{Client: env.Client, Namespace: ns, Owner: "r0", Dialing: kube.Dialing{Addressing: tc.addressing}, Events: ev,
				Health: h, ProbeFor: tc.probeFor, ProbeInterval: 100 * time.Millisecond}
			res, err := w.Reconcile(ctx, tc.req)
			require.NoError(t, err)
			if tc.address == "" {
				assert.Empty(t, h.asked, "addresses asked")
				if tc.readyAt != "" {
					assert.Equal(t, tc.readyAt, ev.ready[tc.req.Name], "ready at")
				} else {
					assert.NotContains(t, ev.ready, tc.req.Name, "ready")
				}
				assert.Zero(t, res.RequeueAfter, "asked again")
				return
			}
			assert.Equal(t, []string{tc.address}, h.asked, "addresses asked")
			if tc.serving {
				assert.Equal(t, tc.address, ev.ready[tc.req.Name], "ready at")
				assert.Zero(t, res.RequeueAfter, "asked again")
			} else {
				assert.NotContains(t, ev.ready, tc.req.Name, "ready")
				assert.Equal(t, 100*time.Millisecond, res.RequeueAfter, "asked again after ProbeInterval")
			}
		})
	}
}

// The pod-manager asks a starting pod itself only when the pod's Ready
// condition would mean no more than the wrapper-server's health: the
// probes of fnrunner's and porch's templates, none, or a TCP check of its
// port; not an operator's own check, a delay, a readiness gate or a second
// container.
func TestReadyIsWrapperHealth(t *testing.T) {
	grpcProbe := func(port int32, service string) *corev1.Probe {
		p := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: port}}}
		if service != "" {
			p.GRPC.Service = ptr.To(service)
		}
		return p
	}
	exec := func(command ...string) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: command}}}
	}
	delayed := grpcProbe(9446, "")
	delayed.InitialDelaySeconds = 5
	for _, tc := range []struct {
		name       string
		probe      *corev1.Probe
		containers int
		gates      bool
		mutate     func(*corev1.Pod)
		want       bool
		// porch: probe is porch's template's, read in the case alone (the
		// only one that needs porch's manifests).
		porch bool
	}{
		{name: "fnrunner's template", probe: templates.DefaultPodTemplate("fns", "wrapper:v1").Template.Spec.Containers[0].ReadinessProbe, want: true},
		{name: "porch's template", porch: true, want: true},
		{name: "none", want: true},
		{name: "tcp on the wrapper's port", probe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(9446)}}}, want: true},
		{name: "grpc-health-probe -addr=", probe: exec("/tools/grpc-health-probe", "-addr=127.0.0.1:9446", "-connect-timeout", "1s"), want: true},
		{name: "grpc on another port", probe: grpcProbe(8080, "")},
		{name: "grpc of a named service", probe: grpcProbe(9446, "warm")},
		{name: "grpc-health-probe of a named service", probe: exec("grpc-health-probe", "-addr", "localhost:9446", "-service", "warm")},
		{name: "grpc-health-probe of another host", probe: exec("grpc-health-probe", "-addr", "cache:9446")},
		{name: "an operator's own check", probe: exec("sh", "-c", "test -f /tmp/warm")},
		{name: "http", probe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(9446)}}}},
		{name: "an initial delay", probe: delayed},
		{name: "a readiness gate", probe: grpcProbe(9446, ""), gates: true},
		{name: "a second container", probe: grpcProbe(9446, ""), containers: 2},
		{name: "tcp on the wrapper's port by name", probe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("grpc")}}}, want: true},
		{name: "tcp on another port by name", probe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("metrics")}}}},
		{name: "two successes needed", probe: func() *corev1.Probe { p := grpcProbe(9446, ""); p.SuccessThreshold = 2; return p }()},
		{name: "a startup probe", probe: grpcProbe(9446, ""), mutate: func(p *corev1.Pod) { p.Spec.Containers[0].StartupProbe = grpcProbe(9446, "") }},
		{name: "a postStart hook", probe: grpcProbe(9446, ""), mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"warm-up"}}}}
		}},
		{name: "a native sidecar", probe: grpcProbe(9446, ""), mutate: func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "proxy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}}
		}},
		{name: "an init container that ends", probe: grpcProbe(9446, ""), want: true, mutate: func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "copy-wrapper"}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.porch {
				tc.probe = porchReadinessProbe(t)
			}
			pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "function", ReadinessProbe: tc.probe,
				Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: 9446}, {Name: "metrics", ContainerPort: 9094}}}}}}
			if tc.containers == 2 {
				pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "sidecar"})
			}
			if tc.mutate != nil {
				tc.mutate(pod)
			}
			if tc.gates {
				pod.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/warm"}}
			}
			assert.Equal(t, tc.want, kube.ReadyIsWrapperHealth(pod))
		})
	}
}

// porchReadinessProbe is the function container's readiness probe in
// porch's base pod template, as an operator has it installed.
func porchReadinessProbe(t *testing.T) *corev1.Probe {
	t.Helper()
	for _, o := range porchfiles.Objects(t, "22-function-templates.yaml") {
		if o.GetKind() == "PodTemplate" {
			var tpl corev1.PodTemplate
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &tpl))
			require.NotNil(t, tpl.Template.Spec.Containers[0].ReadinessProbe, "porch's readiness probe")
			return tpl.Template.Spec.Containers[0].ReadinessProbe
		}
	}
	t.Fatal("porch's PodTemplate not found")
	return nil
}

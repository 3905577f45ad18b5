package kube_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fnrunner/fnrunner/libs/imagematch"
	"github.com/fnrunner/fnrunner/services/pod-manager/kube"
	"github.com/fnrunner/fnrunner/services/pod-manager/podcache"
	"github.com/fnrunner/fnrunner/services/pod-manager/templates"
	"github.com/fnrunner/fnrunner/tests/kubetest"
)

type events struct {
	mu     sync.Mutex
	ready  map[string]string
	failed map[string]error
}

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
	ev := &events{ready: map[string]string{}, failed: map[string]error{}}
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
	b := &kube.Backend{Client: env.Client, Namespace: ns, Owner: "r0", MaxRequestBodySize: 1 << 20}
	tpl := &templates.Templates{Pod: templates.DefaultPodTemplate(ns, "example.com/wrapper:v1"), Service: templates.DefaultServiceTemplate(ns)}
	for _, image := range []string{
		"example.com/fns/set-namespace:v1",
		"example.com/fns/my_function:v1",
		"example.com/fns/my.function:v1",
		"example.com/fns/0-leading-digit:v1",
		"example.com/fns/9:v1",
		"example.com/fns/a--b__c..d:v1",
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

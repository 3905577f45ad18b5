package kube_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fnrunner/fnrunner/services/pod-manager/kube"
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

func TestFailureReasons(t *testing.T) {
	for reason, failed := range map[string]bool{
		"CrashLoopBackOff": true, "ImagePullBackOff": true, "ErrImagePull": true, "InvalidImageName": true,
		"CreateContainerConfigError": true, "ContainerCreating": false, "PodInitializing": false,
	} {
		p := &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
			Name: "function", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "m"}},
		}}}}
		got := kube.Failure(p)
		if (got != "") != failed || (failed && !strings.Contains(got, reason)) {
			t.Errorf("%s: Failure = %q", reason, got)
		}
	}
	init := &corev1.Pod{Status: corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{{
		Name: "copy-wrapper-server", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull"}},
	}}}}
	if !strings.Contains(kube.Failure(init), "copy-wrapper-server") {
		t.Errorf("init container failure not seen: %q", kube.Failure(init))
	}
}

// In service-dns mode a pod is ready only when its Service's EndpointSlices
// hold its IP as a ready endpoint; a deleted pod is reported failed.
func TestServiceDNSReadiness(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{})
	ctx := context.Background()
	const ns = "fns"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	ev := &events{ready: map[string]string{}, failed: map[string]error{}}
	w := &kube.Watcher{Client: env.Client, Namespace: ns, Owner: "r0", Addressing: kube.ServiceDNS, Events: ev}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "fn-abc", Namespace: ns, Labels: map[string]string{kube.LabelManagedBy: kube.ManagedBy, kube.LabelOwner: "r0"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "function", Image: "example.com/fn:v1"}}},
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.2.3", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if err := env.Client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: pod.Name}}
	reconcileOnce := func() {
		if _, err := w.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	reconcileOnce()
	if _, ok := ev.ready[pod.Name]; ok {
		t.Fatal("ready before any EndpointSlice holds the pod")
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "fn-abc-1", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: pod.Name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.9.9.9"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}
	if err := env.Client.Create(ctx, slice); err != nil {
		t.Fatal(err)
	}
	reconcileOnce()
	if _, ok := ev.ready[pod.Name]; ok {
		t.Fatal("ready although the EndpointSlice holds another IP")
	}
	slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.1.2.3"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	if err := env.Client.Update(ctx, slice); err != nil {
		t.Fatal(err)
	}
	reconcileOnce()
	if got := ev.ready[pod.Name]; got != "fn-abc.fns.svc.cluster.local:9446" {
		t.Errorf("address = %q, want the Service's DNS name", got)
	}
	if err := env.Client.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	reconcileOnce()
	if err := ev.failed[pod.Name]; err == nil || !errors.Is(err, err) || !strings.Contains(err.Error(), "deleted") {
		t.Errorf("deleted pod: %v", err)
	}
}

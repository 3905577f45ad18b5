package kubetest_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fnrunner/fnrunner/tests/kubetest"
)

// TestPodOnRealAPIServer starts the real apiserver and round-trips a Pod,
// including a status write as a kubelet would make.
func TestPodOnRealAPIServer(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver %s (%s)", v.GitVersion, v.GoVersion)

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "porch-fn-system"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "set-namespace-1", Namespace: ns.Name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:  "function",
			Image: "ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5",
		}}},
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatalf("create pod: %v", err)
	}

	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = "127.0.0.2"
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if err := env.Client.Status().Update(ctx, pod); err != nil {
		t.Fatalf("update pod status: %v", err)
	}

	var got corev1.Pod
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pod), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != corev1.PodRunning || got.Status.PodIP != "127.0.0.2" {
		t.Errorf("status not stored: phase=%s podIP=%s", got.Status.Phase, got.Status.PodIP)
	}
	if got.Spec.Containers[0].Name != "function" || got.UID == "" {
		t.Errorf("unexpected pod: %+v", got.ObjectMeta)
	}
}

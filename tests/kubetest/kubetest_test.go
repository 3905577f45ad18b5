package kubetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	require.NoError(t, err)
	v, err := dc.ServerVersion()
	require.NoError(t, err)
	t.Logf("kube-apiserver %s (%s)", v.GitVersion, v.GoVersion)

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "porch-fn-system"}}
	require.NoError(t, env.Client.Create(ctx, ns))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "set-namespace-1", Namespace: ns.Name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:  "function",
			Image: "ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5",
		}}},
	}
	require.NoError(t, env.Client.Create(ctx, pod), "create pod")

	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = "127.0.0.2"
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	require.NoError(t, env.Client.Status().Update(ctx, pod), "update pod status")

	var got corev1.Pod
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(pod), &got))
	assert.Equal(t, corev1.PodRunning, got.Status.Phase, "status not stored: phase")
	assert.Equal(t, "127.0.0.2", got.Status.PodIP, "status not stored: podIP")
	assert.Equal(t, "function", got.Spec.Containers[0].Name, "container name")
	assert.NotEmpty(t, got.UID, "unexpected pod: %+v", got.ObjectMeta)
}

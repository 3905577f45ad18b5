package kube_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fnrunner/fnrunner/services/pod-manager/kube"
	"github.com/fnrunner/fnrunner/tests/kubetest"
)

// A replica removed for good (the StatefulSet scaled down) leaves pods and
// Services with its owner label: another replica deletes them once their
// owner's Lease went unrenewed for the lease duration, and never those of
// a replica that renews its Lease, nor its own.
func TestPodsOfAGoneReplicaAreDeleted(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{})
	ctx := context.Background()
	const ns = "fns"
	require.NoError(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	replica := func(owner string) *kube.Owners {
		return &kube.Owners{Backend: &kube.Backend{Client: env.Client, Namespace: ns, Owner: owner}, Duration: time.Second, Log: log}
	}
	r0, r1, r2 := replica("pod-manager-0"), replica("pod-manager-1"), replica("pod-manager-2")
	for _, r := range []*kube.Owners{r0, r1, r2} {
		require.NoError(t, r.Renew(ctx))
	}
	for _, owner := range []string{"pod-manager-0", "pod-manager-1", "pod-manager-2", "pod-manager-3"} {
		labels := map[string]string{kube.LabelManagedBy: kube.ManagedBy, kube.LabelOwner: owner, kube.LabelPod: "fn-" + owner}
		require.NoError(t, env.Client.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "fn-" + owner, Namespace: ns, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "function", Image: "example.com/fn:v1"}}}}))
		require.NoError(t, env.Client.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "fn-" + owner, Namespace: ns, Labels: labels},
			Spec: corev1.ServiceSpec{Selector: map[string]string{kube.LabelPod: "fn-" + owner}, Ports: []corev1.ServicePort{{Port: 9446}}}}))
	}
	// An unmanaged pod is never looked at.
	require.NoError(t, env.Client.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: ns, Labels: map[string]string{kube.LabelOwner: "pod-manager-3"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "example.com/x:v1"}}}}))
	exists := func(o client.Object, name string) bool {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, o)
		if apierrors.IsNotFound(err) {
			return false
		}
		require.NoError(t, err)
		return o.GetDeletionTimestamp() == nil
	}
	objects := func(owner string) bool {
		return exists(&corev1.Pod{}, "fn-"+owner) || exists(&corev1.Service{}, "fn-"+owner)
	}

	// pod-manager-2 stops renewing (scaled down); pod-manager-3 never had
	// a Lease (gone before this replica started); pod-manager-1 renews.
	sweep := func() kube.Swept {
		require.NoError(t, r1.Renew(ctx))
		require.NoError(t, r0.Renew(ctx))
		swept, err := r0.Sweep(ctx)
		require.NoError(t, err)
		return swept
	}
	first := sweep()
	assert.Empty(t, first.Owners, "nothing is deleted before a lease was seen unrenewed for its duration")
	require.Eventually(t, func() bool {
		sweep()
		return !objects("pod-manager-2") && !objects("pod-manager-3")
	}, time.Minute, 100*time.Millisecond, "the gone replicas' pods and services deleted")

	assert.True(t, objects("pod-manager-0"), "its own pods stay")
	assert.True(t, objects("pod-manager-1"), "a renewing replica's pods stay")
	assert.True(t, exists(&corev1.Pod{}, "other"), "an unmanaged pod stays")
	assert.False(t, exists(&coordinationv1.Lease{}, kube.LeasePrefix+"pod-manager-2"), "the gone replica's lease deleted")
	assert.True(t, exists(&coordinationv1.Lease{}, kube.LeasePrefix+"pod-manager-1"))
}

package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tests/node"
)

// TestNodeRunsAPod: the node registers, becomes Ready, and runs a pod whose
// image it pulls from the loopback registry.
func TestNodeRunsAPod(t *testing.T) {
	n := node.Start(t)
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sleeper", Namespace: "default"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "main", Image: n.Registry + "/fnrunner/pause:1"}},
		},
	}
	require.NoError(t, n.Kube.Client.Create(ctx, pod))
	err := harness.Poll(2*time.Minute, 500*time.Millisecond, func() error {
		var got corev1.Pod
		if err := n.Kube.Client.Get(ctx, client.ObjectKeyFromObject(pod), &got); err != nil {
			return err
		}
		if got.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %s: %+v", got.Status.Phase, got.Status.ContainerStatuses)
		}
		return nil
	})
	require.NoError(t, err)
}

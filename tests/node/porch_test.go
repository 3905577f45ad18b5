package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fnrunner/fnrunner/libs/apis/config/v1alpha1"
	pb "github.com/fnrunner/fnrunner/protos/evaluator"
	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tests/node"
	"github.com/fnrunner/fnrunner/tests/porchfiles"
)

// runnerFinalizer is the one porch's function-runner component keeps on
// FunctionConfigs, and fnrunner's config-reconciler in its place.
const runnerFinalizer = "config.porch.kpt.dev/functionconfig-function-runner"

// porchFinalizers are porch's other components', which a running porch has
// left on its FunctionConfigs and fnrunner leaves alone.
var porchFinalizers = []string{"config.porch.kpt.dev/functionconfig-porch-server", "config.porch.kpt.dev/functionconfig-controller"}

// TestSwitchFromPorch: a porch installation as an operator has it — porch's
// namespace, CRDs, base templates and 19 FunctionConfigs, some with porch's
// components' finalizers on — switched to fnrunner on the node by applying
// deploy/overlays/from-porch and nothing else. fnrunner's services run from
// porch's objects: every FunctionConfig gets the function runner's
// finalizer and status in porch's own fields while its spec and porch's
// finalizers stay as they were; calls run through the go and binary
// executors by porch's claims; a FunctionConfig whose binary no
// binary-runner has reports that in status and its calls are served by a
// pod made from porch's own template (porch's wrapper-server); a deleted
// FunctionConfig goes.
func TestSwitchFromPorch(t *testing.T) {
	porchfiles.Require(t)
	n := node.Start(t)
	ctx := context.Background()
	c := n.Kube.Client

	ns := &unstructured.Unstructured{}
	ns.SetAPIVersion("v1")
	ns.SetKind("Namespace")
	ns.SetName(namespace)
	objs := []*unstructured.Unstructured{ns}
	for _, f := range []string{"config.porch.kpt.dev_functionconfigs.yaml", "config.porch.kpt.dev_servicetemplates.yaml",
		"22-function-templates.yaml", "23-function-configurations.yaml"} {
		objs = append(objs, porchfiles.Objects(t, f)...)
	}
	specs := map[string]string{}
	var withPorchFinalizers []string
	for _, o := range objs {
		if o.GetKind() != "FunctionConfig" {
			continue
		}
		if len(specs)%2 == 0 {
			o.SetFinalizers(slices.Clone(porchFinalizers))
			withPorchFinalizers = append(withPorchFinalizers, o.GetName())
		}
		specs[o.GetName()] = specJSON(t, o)
	}
	require.Len(t, specs, 19, "porch's FunctionConfigs")

	// A function of porch's shape whose binary the binary-runners do not
	// have, and a pod claim on the node's registry.
	require.NoError(t, node.PushBinaryImage(n.Registry+"/fns/sn-nobinary:node", harness.Binary(t, "FNRUNNER_SET_NAMESPACE"), "/set-namespace", []string{"/set-namespace"}, nil))
	nobinary := functionConfigObject(t, &v1alpha1.FunctionConfig{Spec: v1alpha1.FunctionConfigSpec{
		Image: "sn-nobinary", Prefixes: []string{n.Registry + "/fns"},
		PodExecutor:    &v1alpha1.PodExecutorConfig{Tags: []string{"node"}},
		BinaryExecutor: &v1alpha1.BinaryExecutorConfig{Tags: []string{"node"}, Path: "sn-nobinary"},
	}}, "sn-nobinary")
	objs = append(objs, nobinary)
	// porch's template's init container copies the wrapper-server from
	// docker.io/nephio/porch-wrapper-server:latest, which the node's
	// containerd takes from the node's registry: porch's own, built here.
	img, err := node.PorchWrapperImage(harness.Binary(t, "FNRUNNER_PORCH_WRAPPER_SERVER"), harness.Binary(t, "FNRUNNER_PORCH_GRPC_HEALTH_PROBE"), harness.Binary(t, "FNRUNNER_BUSYBOX"))
	require.NoError(t, err)
	require.NoError(t, node.PushImage(n.Registry+"/nephio/porch-wrapper-server:latest", img))
	apply(t, c, objs)

	conn := deployOverlay(t, n, "deploy/overlays/from-porch", nil)

	// Every FunctionConfig: the function runner's finalizer, its
	// generation observed, porch's finalizers and spec as they were.
	names := append(slices.Sorted(maps.Keys(specs)), "sn-nobinary")
	errs := map[string]string{}
	err = harness.Poll(2*time.Minute, time.Second, func() error {
		for _, name := range names {
			u := getFunctionConfig(t, c, name)
			observed, _, _ := unstructured.NestedInt64(u.Object, "status", "functionRunnerObservedGeneration")
			if !slices.Contains(u.GetFinalizers(), runnerFinalizer) || observed != u.GetGeneration() {
				return fmt.Errorf("%s: finalizers %v, generation %d observed %d", name, u.GetFinalizers(), u.GetGeneration(), observed)
			}
			errs[name], _, _ = unstructured.NestedString(u.Object, "status", "error")
		}
		// The runners' reports arrive after the first status.
		if errs["set-project-id"] == "" || errs["sn-nobinary"] == "" {
			return fmt.Errorf("no runner's report in status yet: %v", errs)
		}
		return nil
	})
	require.NoError(t, err, "\n%s", podReport(ctx, c))
	for _, name := range slices.Sorted(maps.Keys(specs)) {
		u := getFunctionConfig(t, c, name)
		assert.Equal(t, specs[name], specJSON(t, u), "%s: porch's spec changed", name)
		for _, fin := range porchFinalizers {
			assert.Equal(t, slices.Contains(withPorchFinalizers, name), slices.Contains(u.GetFinalizers(), fin), "%s: porch's finalizer %s", name, fin)
		}
		_, conditions, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		assert.False(t, conditions, "%s: conditions in status, which porch's CRD does not have", name)
	}
	for name, text := range errs {
		switch name {
		case "set-project-id", "sn-nobinary":
			assert.Contains(t, text, "binaryExecutor "+name+": not runnable on binary-runner", "%s: status.error", name)
		default:
			assert.Empty(t, text, "%s: status.error", name)
		}
	}

	// Calls by porch's claims: the go executor (set-namespace v0.4.5) and
	// the binary executor (v0.4.2, its binary in fnrunner's functions
	// image).
	for _, image := range []string{"set-namespace:v0.4.5", "ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.2"} {
		var resp *pb.EvaluateFunctionResponse
		// The first waits for kube-proxy to serve the gateway's NodePort.
		err := harness.Poll(time.Minute, time.Second, func() error {
			var err error
			resp, err = callClaimed(t, conn, image, setNamespaceInput, 20*time.Second, nil)
			return err
		})
		require.NoError(t, err, "%s\n%s", image, podReport(ctx, c))
		assert.Contains(t, string(resp.GetResourceList()), "namespace: on-a-node", image)
	}
	// The function without its binary: the binary-runner answers NotFound,
	// the gateway goes on to the pod executor, the pod is porch's template.
	image := n.Registry + "/fns/sn-nobinary:node"
	resp, err := callClaimed(t, conn, image, setNamespaceInput, 2*time.Minute, nil)
	require.NoError(t, err, "%s\n%s", image, podReport(ctx, c))
	assert.Contains(t, string(resp.GetResourceList()), "namespace: on-a-node")
	pods := functionPods(t, c, "sn-nobinary")
	require.Len(t, pods, 1, "the pod that served it")
	assert.Equal(t, "docker.io/nephio/porch-wrapper-server:latest", pods[0].Spec.InitContainers[0].Image, "the pod is porch's template's")

	// A FunctionConfig deleted: the function runner's finalizer goes, and
	// with no other finalizer on it, so does the object.
	var plain string
	for _, name := range slices.Sorted(maps.Keys(specs)) {
		if !slices.Contains(withPorchFinalizers, name) {
			plain = name
			break
		}
	}
	require.NoError(t, c.Delete(ctx, functionConfigRef(plain)))
	err = harness.Poll(time.Minute, time.Second, func() error {
		u := functionConfigRef(plain)
		err := c.Get(ctx, client.ObjectKeyFromObject(u), u)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("%s still there (finalizers %v): %v", plain, u.GetFinalizers(), err)
	})
	assert.NoError(t, err, "a deleted FunctionConfig")
}

// specJSON is a FunctionConfig's spec as JSON, to compare before and after.
func specJSON(t *testing.T, u *unstructured.Unstructured) string {
	t.Helper()
	spec, _, err := unstructured.NestedFieldNoCopy(u.Object, "spec")
	require.NoError(t, err)
	data, err := json.Marshal(spec)
	require.NoError(t, err)
	return string(data)
}

// getFunctionConfig reads a FunctionConfig of the function namespace.
func getFunctionConfig(t *testing.T, c client.Client, name string) *unstructured.Unstructured {
	t.Helper()
	u := functionConfigRef(name)
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(u), u), "FunctionConfig %s", name)
	return u
}

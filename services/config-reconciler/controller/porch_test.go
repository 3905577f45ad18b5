package controller_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fnrunner/fnrunner/libs/apis/config/v1alpha1"
	"github.com/fnrunner/fnrunner/services/config-reconciler/controller"
	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tests/kubetest"
	"github.com/fnrunner/fnrunner/tests/porchfiles"
)

// Porch's other components' finalizers, which the config-reconciler leaves
// alone (../shared/porch-manifests/README.md).
var porchFinalizers = []string{"config.porch.kpt.dev/functionconfig-porch-server", "config.porch.kpt.dev/functionconfig-controller"}

// tick is how often Eventually looks.
const tick = 20 * time.Millisecond

var fcGVK = schema.GroupVersionKind{Group: "config.porch.kpt.dev", Version: "v1alpha1", Kind: "FunctionConfig"}

// Porch's CRD and porch's 19 FunctionConfigs, some with porch's finalizers
// already set: the config-reconciler serves them, never touches their spec,
// writes the status fields porch's schema has, adds and removes only its own
// finalizer, and a deleted FunctionConfig goes once porch's components have
// let it go.
func TestPorchFunctionConfigsAsPorchHasThem(t *testing.T) {
	porchfiles.Require(t)
	crds := t.TempDir()
	for _, name := range []string{"config.porch.kpt.dev_functionconfigs.yaml", "config.porch.kpt.dev_servicetemplates.yaml"} {
		data, err := os.ReadFile(porchfiles.Path(t, name))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(crds, name), data, 0o644))
	}
	f := startWith(t, crds)
	ctx := context.Background()
	fcs := porchfiles.Objects(t, "23-function-configurations.yaml")
	require.Len(t, fcs, 19, "porch's FunctionConfigs")
	specs := map[string]any{}
	for i, o := range fcs {
		require.Equal(t, fcGVK, o.GroupVersionKind())
		if i%2 == 0 {
			// As porch-server's reconciler leaves them.
			o.SetFinalizers(append(slices.Clone(porchFinalizers), controller.Finalizer))
		}
		specs[o.GetName()] = o.Object["spec"]
		require.NoError(t, f.env.Client.Create(ctx, o.DeepCopy()), "create %s", o.GetName())
	}

	get := func(name string) (*unstructured.Unstructured, error) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(fcGVK)
		return u, f.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u)
	}
	for _, o := range fcs {
		name := o.GetName()
		require.Eventually(t, func() bool {
			u, err := get(name)
			if err != nil || !slices.Contains(u.GetFinalizers(), controller.Finalizer) {
				return false
			}
			observed, _, _ := unstructured.NestedInt64(u.Object, "status", "functionRunnerObservedGeneration")
			errText, _, _ := unstructured.NestedString(u.Object, "status", "error")
			return observed == u.GetGeneration() || errText != ""
		}, harness.Wait, tick, "%s: no finalizer or status from the function runner", name)
		u, err := get(name)
		require.NoError(t, err)
		assert.True(t, equality.Semantic.DeepEqual(specs[name], u.Object["spec"]), "%s: spec changed:\nwas %v\nnow %v", name, specs[name], u.Object["spec"])
		for _, fin := range porchFinalizers {
			assert.Equal(t, slices.Contains(o.GetFinalizers(), fin), slices.Contains(u.GetFinalizers(), fin), "%s: porch's finalizer %s", name, fin)
		}
		_, hasConditions, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		assert.False(t, hasConditions, "%s: porch's schema has no conditions", name)
		errText, _, _ := unstructured.NestedString(u.Object, "status", "error")
		assert.Empty(t, errText, "%s: porch's own FunctionConfig judged invalid", name)
	}
	functions := func() int {
		if tables := f.client.Tables(); tables != nil {
			return len(tables.Functions())
		}
		return -1
	}
	require.Eventually(t, func() bool { return functions() == 19 },
		harness.Wait, tick, "the table does not hold porch's 19 FunctionConfigs")

	// Deleted: with only the function runner's finalizer it goes at once;
	// with porch's too it waits for them, without ours.
	alone, withPorch := fcs[1].GetName(), fcs[0].GetName()
	for _, name := range []string{alone, withPorch} {
		u, err := get(name)
		require.NoError(t, err)
		require.NoError(t, f.env.Client.Delete(ctx, u), "delete %s", name)
	}
	require.Eventually(t, func() bool { _, err := get(alone); return apierrors.IsNotFound(err) }, harness.Wait, tick,
		"%s: not deleted (finalizers left)", alone)
	require.Eventually(t, func() bool {
		u, err := get(withPorch)
		return err == nil && !slices.Contains(u.GetFinalizers(), controller.Finalizer)
	}, harness.Wait, tick, "%s: the function runner's finalizer stayed", withPorch)
	u, err := get(withPorch)
	require.NoError(t, err)
	assert.ElementsMatch(t, porchFinalizers, u.GetFinalizers(), "%s: porch's finalizers", withPorch)
	u.SetFinalizers(nil) // porch's components let it go
	require.NoError(t, f.env.Client.Update(ctx, u))
	require.Eventually(t, func() bool { _, err := get(withPorch); return apierrors.IsNotFound(err) }, harness.Wait, tick,
		"%s: not deleted", withPorch)
	require.Eventually(t, func() bool { return functions() == 17 },
		harness.Wait, tick, "the deleted FunctionConfigs stayed in the table")
}

// Uninstalling with no function runner left: ReleaseFinalizers takes the
// function runner's finalizer off every FunctionConfig and leaves porch's
// other components' finalizers, so a delete completes once those let go,
// and one with only ours goes at once.
func TestReleaseFinalizersForUninstall(t *testing.T) {
	porchfiles.Require(t)
	crds := t.TempDir()
	data, err := os.ReadFile(porchfiles.Path(t, "config.porch.kpt.dev_functionconfigs.yaml"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(crds, "functionconfigs.yaml"), data, 0o644))
	env := kubetest.Start(t, kubetest.Options{
		CRDDirectoryPaths: []string{crds},
		AddToScheme:       []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
	})
	ctx := context.Background()
	require.NoError(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	fcs := porchfiles.Objects(t, "23-function-configurations.yaml")
	want := map[string][]string{}
	for i, o := range fcs {
		switch i % 3 {
		case 0: // as porch-server's reconciler and the runner leave them
			o.SetFinalizers(append(slices.Clone(porchFinalizers), controller.Finalizer))
		case 1: // the runner's alone
			o.SetFinalizers([]string{controller.Finalizer})
		}
		want[o.GetName()] = slices.DeleteFunc(slices.Clone(o.GetFinalizers()), func(f string) bool { return f == controller.Finalizer })
		require.NoError(t, env.Client.Create(ctx, o.DeepCopy()), "create %s", o.GetName())
	}

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	n, err := controller.ReleaseFinalizers(ctx, log, env.Client, ns)
	require.NoError(t, err)
	assert.Equal(t, 13, n, "FunctionConfigs that had the function runner's finalizer")
	for name, fins := range want {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(fcGVK)
		require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u))
		assert.ElementsMatch(t, fins, u.GetFinalizers(), "%s: finalizers after release", name)
	}
	// Again: nothing left to release.
	n, err = controller.ReleaseFinalizers(ctx, log, env.Client, ns)
	require.NoError(t, err)
	assert.Zero(t, n)

	// Every delete now completes without a function runner: at once, or
	// once porch's components let theirs go.
	for _, o := range fcs {
		require.NoError(t, env.Client.Delete(ctx, o.DeepCopy()), "delete %s", o.GetName())
	}
	var list v1alpha1.FunctionConfigList
	require.NoError(t, env.Client.List(ctx, &list, client.InNamespace(ns)))
	for _, fc := range list.Items {
		assert.ElementsMatch(t, porchFinalizers, fc.Finalizers, "%s: waits only for porch's components", fc.Name)
		fc.Finalizers = nil
		require.NoError(t, env.Client.Update(ctx, &fc))
	}
	require.Eventually(t, func() bool {
		return env.Client.List(ctx, &list, client.InNamespace(ns)) == nil && len(list.Items) == 0
	}, harness.Wait, tick, "FunctionConfigs left after delete")
}

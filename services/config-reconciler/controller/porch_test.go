package controller_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fnrunner/fnrunner/services/config-reconciler/controller"
	"github.com/fnrunner/fnrunner/tests/harness"
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

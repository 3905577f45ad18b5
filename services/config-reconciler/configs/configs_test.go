package configs

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fnrunner/fnrunner/libs/apis/config/v1alpha1"
)

func fc(name string, spec v1alpha1.FunctionConfigSpec) v1alpha1.FunctionConfig {
	return v1alpha1.FunctionConfig{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Generation: 2}, Spec: spec}
}

func TestEvaluate(t *testing.T) {
	objs := []v1alpha1.FunctionConfig{
		fc("good", v1alpha1.FunctionConfigSpec{Image: "set-namespace", Prefixes: []string{""},
			GoExecutor:     &v1alpha1.GoExecutorConfig{Tags: []string{"v0.4.5"}},
			BinaryExecutor: &v1alpha1.BinaryExecutorConfig{Tags: []string{"~0.4"}, Path: "set-namespace"}}),
		fc("traversal", v1alpha1.FunctionConfigSpec{Image: "starlark",
			BinaryExecutor: &v1alpha1.BinaryExecutorConfig{Tags: []string{"v1"}, Path: "../../bin/sh"},
			GoExecutor:     &v1alpha1.GoExecutorConfig{Tags: []string{"v1"}}}),
		fc("absolute", v1alpha1.FunctionConfigSpec{Image: "abs",
			BinaryExecutor: &v1alpha1.BinaryExecutorConfig{Tags: []string{"v1"}, Path: "/bin/sh"}}),
		fc("rival", v1alpha1.FunctionConfigSpec{Image: "set-namespace",
			GoExecutor: &v1alpha1.GoExecutorConfig{Tags: []string{"v0.4.5"}}}),
		fc("bad-image", v1alpha1.FunctionConfigSpec{Image: "ghcr.io/x/y:v1", PodExecutor: &v1alpha1.PodExecutorConfig{}}),
	}
	entries, verdicts := Evaluate(objs, Options{})
	v := func(name string) Verdict { return verdicts[types.NamespacedName{Namespace: "ns", Name: name}] }

	for _, name := range []string{"good", "rival"} {
		assert.False(t, v(name).Ready(), "%s: verdict %+v, want one conflict", name, v(name))
		assert.Len(t, v(name).Conflicts, 1, "%s: verdict %+v, want one conflict", name, v(name))
	}
	for _, tc := range []struct{ name, problem string }{
		{"traversal", "leaves the functions directory"},
		{"absolute", "absolute"},
		{"bad-image", "spec.image"},
	} {
		if p := v(tc.name).Problems; assert.Len(t, p, 1, "%s problems", tc.name) {
			assert.Contains(t, p[0], tc.problem, "%s problems", tc.name)
		}
	}
	names := map[string]bool{}
	for _, e := range entries {
		names[e.GetName()] = true
		if e.GetName() == "traversal" {
			assert.Nil(t, e.GetBinary(), "traversal entry keeps the bad binary section: %v", e)
			assert.NotNil(t, e.GetGo(), "traversal entry lost the go section: %v", e)
		}
	}
	for _, name := range []string{"good", "rival"} {
		assert.True(t, names[name], "entry %s missing from %v", name, names)
	}
	for _, name := range []string{"absolute", "bad-image"} {
		assert.False(t, names[name], "entry %s present in %v", name, names)
	}

	_, verdicts = Evaluate(objs, Options{AllowAbsoluteBinaryPaths: true})
	assert.True(t, verdicts[types.NamespacedName{Namespace: "ns", Name: "absolute"}].Ready(), "absolute path refused although allowed")
}

// A FunctionConfig without timeToLive leaves it to the pod-manager's
// --pod-ttl; one with it keeps its own.
func TestPodTimeToLive(t *testing.T) {
	tests := []struct {
		name string
		ttl  time.Duration
		want int64
	}{
		{"unset: the pod-manager's --pod-ttl applies", 0, 0},
		{"set", 90 * time.Second, 90},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &v1alpha1.PodExecutorConfig{TimeToLive: metav1.Duration{Duration: tt.ttl}}
			e, problems := Convert(&v1alpha1.FunctionConfig{Spec: v1alpha1.FunctionConfigSpec{Image: "fn", PodExecutor: pod}}, Options{})
			require.Empty(t, problems)
			assert.Equal(t, tt.want, e.GetPod().GetTimeToLiveSeconds())
		})
	}
}

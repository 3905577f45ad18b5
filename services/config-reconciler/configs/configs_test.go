package configs

import (
	"strings"
	"testing"

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
		if v(name).Ready() || len(v(name).Conflicts) != 1 {
			t.Errorf("%s: verdict %+v, want one conflict", name, v(name))
		}
	}
	if p := v("traversal").Problems; len(p) != 1 || !strings.Contains(p[0], "leaves the functions directory") {
		t.Errorf("traversal problems = %v", p)
	}
	if p := v("absolute").Problems; len(p) != 1 || !strings.Contains(p[0], "absolute") {
		t.Errorf("absolute problems = %v", p)
	}
	if p := v("bad-image").Problems; len(p) != 1 || !strings.Contains(p[0], "spec.image") {
		t.Errorf("bad-image problems = %v", p)
	}
	names := map[string]bool{}
	for _, e := range entries {
		names[e.GetName()] = true
		if e.GetName() == "traversal" && (e.GetBinary() != nil || e.GetGo() == nil) {
			t.Errorf("traversal entry keeps the bad binary section or lost the go one: %v", e)
		}
	}
	if !names["good"] || !names["rival"] || names["absolute"] || names["bad-image"] {
		t.Errorf("entries = %v", names)
	}

	_, verdicts = Evaluate(objs, Options{AllowAbsoluteBinaryPaths: true})
	if !verdicts[types.NamespacedName{Namespace: "ns", Name: "absolute"}].Ready() {
		t.Errorf("absolute path refused although allowed")
	}
}

func TestPodDefaults(t *testing.T) {
	e, problems := Convert(&v1alpha1.FunctionConfig{Spec: v1alpha1.FunctionConfigSpec{Image: "fn", PodExecutor: &v1alpha1.PodExecutorConfig{}}}, Options{})
	if len(problems) != 0 || e.GetPod().GetTimeToLiveSeconds() != 1800 {
		t.Errorf("entry %v problems %v", e, problems)
	}
}

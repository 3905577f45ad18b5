// Package porchfiles reads porch's own manifests, as an operator has them
// installed: ../shared/porch-manifests beside the repository (see its
// README), found through harness.Shared. Tests that use it declare
// //:WORKSPACE as data, set FNRUNNER_WORKSPACE_FILE, and are tagged
// external (the files are outside the repository, so Bazel cannot see them
// change).
package porchfiles

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/fnrunner/fnrunner/tests/harness"
)

// Require skips the test (fails it under harness.RequireAllEnv=1) when
// porch's manifests are not there: a test that sets up much before it reads
// them calls it first.
func Require(t testing.TB) {
	t.Helper()
	harness.Shared(t, "porch-manifests")
}

// Path is the path of one of porch's manifests; the test skips (fails under
// harness.RequireAllEnv=1) when it is missing.
func Path(t testing.TB, name string) string {
	t.Helper()
	return harness.Shared(t, filepath.Join("porch-manifests", name))
}

// Objects are the objects of one of porch's manifests, in file order.
func Objects(t testing.TB, name string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(Path(t, name))
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, doc := range strings.Split(string(data), "\n---") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil || u.Object == nil || u.GetKind() == "" {
			continue
		}
		out = append(out, u)
	}
	return out
}

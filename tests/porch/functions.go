package porch

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fnrunner/fnrunner/tests/harness"
)

// Registry is the image prefix porch's suites use (KRM_FN_REGISTRY_URL's
// default in test/e2e/suiteutils).
const Registry = "ghcr.io/kptdev/krm-functions-catalog"

// Function is a function version porch's suites call through the function
// runner, and the binary both runners get for it.
type Function struct {
	// Name and Tag as the suites write them.
	Name, Tag string
	// Env names the binary (tests/porch's BUILD file sets it).
	Env string
	// Upstream: built from the catalog's module at that version; otherwise
	// fnrunner's own build, which fnrunner's FunctionConfigs claim for Tag.
	Upstream bool
}

// Image is the reference the suites send.
func (f Function) Image() string { return Registry + "/" + f.Name + ":" + f.Tag }

// File is the binary's name in a runner's functions directory.
func (f Function) File() string { return f.Name + "-" + f.Tag }

// Functions are the versions porch's suites name that reach the runner and
// can be had: porch-server runs set-namespace v0.4.1, starlark v0.4.3 and
// apply-replacements v0.1.1 itself (pkg/engine/builtinruntime.go), and
// expected.yaml lists the versions nobody can build offline.
func Functions() []Function {
	return []Function{
		// Only TestCreateSetters names it, after create-setters v0.1.0,
		// which nobody has: it is not reached.
		{Name: "apply-setters", Tag: "v0.2.0", Env: "FNRUNNER_UPSTREAM_APPLY_SETTERS_V0_2_0", Upstream: true},
		{Name: "starlark", Tag: "v0.3.0", Env: "FNRUNNER_UPSTREAM_STARLARK_V0_3_0", Upstream: true},
		// fnrunner's apply-setters is the catalog's v0.2.2 module behind an adapter.
		{Name: "apply-setters", Tag: "v0.2.2", Env: "FNRUNNER_APPLY_SETTERS"},
		{Name: "ensure-name-substring", Tag: "v0.1.1", Env: "FNRUNNER_ENSURE_NAME_SUBSTRING"},
		{Name: "search-replace", Tag: "v0.2.0", Env: "FNRUNNER_SEARCH_REPLACE"},
		{Name: "set-annotations", Tag: "v0.1.4", Env: "FNRUNNER_SET_ANNOTATIONS"},
		{Name: "set-labels", Tag: "v0.2.0", Env: "FNRUNNER_SET_LABELS"},
	}
}

// FunctionsDir links every function's binary into dir under its File name.
func FunctionsDir(t testing.TB, dir string) {
	t.Helper()
	for _, f := range Functions() {
		if err := os.Symlink(harness.Binary(t, f.Env), filepath.Join(dir, f.File())); err != nil {
			t.Fatal(err)
		}
	}
}

// PorchRunnerConfig is porch's function-runner's --config for the exec
// runtime: each image, exactly as the suites write it, to its binary.
func PorchRunnerConfig() string {
	var b strings.Builder
	b.WriteString("functions:\n")
	for _, f := range Functions() {
		fmt.Fprintf(&b, "  - function: %s\n    images:\n      - %s\n", f.File(), f.Image())
	}
	return b.String()
}

// UpstreamFunctionConfigs are FunctionConfigs for fnrunner that run the
// upstream builds, each for its one tag, with the binary executor: the
// rest fnrunner claims with its own FunctionConfigs.
func UpstreamFunctionConfigs(namespace string) []string {
	var out []string
	for _, f := range Functions() {
		if !f.Upstream {
			continue
		}
		out = append(out, fmt.Sprintf(`apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata:
  name: %s
  namespace: %s
spec:
  image: %s
  prefixes: [%q]
  binaryExecutor:
    tags: [%s]
    path: %s
`, strings.ReplaceAll(f.File(), ".", "-"), namespace, f.Name, Registry, f.Tag, f.File()))
	}
	return out
}

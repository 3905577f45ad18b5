package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/fnrunner/fnrunner/libs/kptrender"
	pb "github.com/fnrunner/fnrunner/protos/evaluator"
	"github.com/fnrunner/fnrunner/tests/stack"
)

const resources = `apiVersion: v1
kind: ConfigMap
metadata:
  name: a
  namespace: old
data:
  k: v
`

func fnctl(t *testing.T, s *stack.Stack, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	full := append([]string{args[0], "--gateway=" + s.GatewayAddress}, args[1:]...)
	err := run(context.Background(), full, strings.NewReader(stdin), &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestEvalAndRender(t *testing.T) {
	s := stack.Start(t, stack.Options{GatewayArgs: []string{"--log-level=INFO"}})

	out, log, err := fnctl(t, s, resources, "eval", "--image=set-namespace:v0.4.5", "--", "namespace=prod")
	require.NoError(t, err, "eval\n%s", log)
	assert.Contains(t, out, "namespace: prod", "eval of a stream: stdout")
	assert.NotContains(t, out, "kind: ResourceList", "eval of a stream: stdout")
	assert.Contains(t, log, "[PASS] set-namespace:v0.4.5", "eval of a stream: stderr")

	list := "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: a\n"
	cfg := filepath.Join(t.TempDir(), "fn.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: function-input\ndata:\n  namespace: staging\n"), 0o644))
	out, log, err = fnctl(t, s, list, "eval", "--image=set-namespace:v0.4.5", "--fn-config="+cfg)
	assert.NoError(t, err, "eval of a ResourceList\n%s", log)
	assert.Contains(t, out, "kind: ResourceList", "eval of a ResourceList")
	assert.Contains(t, out, "namespace: staging", "eval of a ResourceList")

	_, log, err = fnctl(t, s, resources, "eval", "--image=no-such-function:v1")
	var ee exitError
	if assert.ErrorAs(t, err, &ee, "eval of an unknown image\n%s", log) {
		assert.Equal(t, 1, ee.code, "eval of an unknown image: exit code")
	}
	assert.Contains(t, log, "NotFound", "eval of an unknown image")
	id := regexp.MustCompile(`request id: ([0-9a-f]{32})\n`).FindStringSubmatch(log)
	if assert.NotNil(t, id, "eval of an unknown image prints the call's request id\n%s", log) {
		// The gateway logs a call once it has answered it: the line may
		// come just after fnctl is done.
		assert.Eventually(t, func() bool { return strings.Contains(s.Log("gateway"), `"request_id":"`+id[1]+`"`) }, time.Minute, 20*time.Millisecond,
			"the gateway logged the failed call under the id fnctl printed")
	}

	pkg := packageWith(t, "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: demo\npipeline:\n  mutators:\n  - image: set-namespace:v0.4.5\n    configMap:\n      namespace: rendered\n")
	_, log, err = fnctl(t, s, "", "render", pkg)
	require.NoError(t, err, "render\n%s", log)
	got, _ := os.ReadFile(filepath.Join(pkg, "resources.yaml"))
	assert.Contains(t, string(got), "namespace: rendered", "render wrote")
	assert.Contains(t, log, "Successfully executed 1 function(s)", "render printed")
	assert.Contains(t, log, "[1/1] set-namespace:v0.4.5: ok in", "render printed")

	// The catalog's old image names, mapped for local mode; kpt's results
	// file.
	pkg = packageWith(t, "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: demo\n  annotations:\n    config.kubernetes.io/local-config: \"true\"\npipeline:\n  mutators:\n  - image: gcr.io/kpt-fn/set-labels:unstable\n    configMap:\n      tier: web\n")
	results := filepath.Join(t.TempDir(), "results")
	_, log, err = fnctl(t, s, "", "render", "--map-image=gcr.io/kpt-fn/set-labels:unstable=set-labels:v0.2.1", "--map-image-prefix=gcr.io/kpt-fn/=", "--results-dir="+results, pkg)
	require.NoError(t, err, "render with a mapped image\n%s", log)
	got, _ = os.ReadFile(filepath.Join(pkg, "resources.yaml"))
	assert.Contains(t, string(got), "tier: web", "render with a mapped image wrote")
	written, err := os.ReadFile(filepath.Join(results, "results.yaml"))
	require.NoError(t, err)
	assert.Contains(t, string(written), "kind: FunctionResultList")
	assert.Contains(t, string(written), "items:\n  - image: gcr.io/kpt-fn/set-labels:unstable\n", "the image as the Kptfile names it, the list indented as kpt writes it")

	// A package naming the catalog's old registry with a release's tag
	// runs without any mapping: fnrunner's own FunctionConfigs claim
	// gcr.io/kpt-fn too.
	pkg = packageWith(t, "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: demo\npipeline:\n  mutators:\n  - image: gcr.io/kpt-fn/set-namespace:v0.4.5\n    configMap:\n      namespace: old-registry\n")
	_, log, err = fnctl(t, s, "", "render", pkg)
	require.NoError(t, err, "render of gcr.io/kpt-fn/set-namespace:v0.4.5\n%s", log)
	got, _ = os.ReadFile(filepath.Join(pkg, "resources.yaml"))
	assert.Contains(t, string(got), "namespace: old-registry", "render of the catalog's old registry wrote")

	// eval on a package directory, as kpt fn eval DIR.
	evalPkg := packageWith(t, "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: demo\n")
	_, log, err = fnctl(t, s, "", "eval", "--image=set-namespace:v0.4.5", evalPkg, "--", "namespace=evaluated")
	require.NoError(t, err, "eval DIR\n%s", log)
	got, _ = os.ReadFile(filepath.Join(evalPkg, "resources.yaml"))
	assert.Contains(t, string(got), "namespace: evaluated", "eval DIR wrote the package")
	assert.Contains(t, log, "[PASS] \"ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5\"", "eval DIR printed")

	// -o: the rendered resources elsewhere, the package left as it was.
	before, err := os.ReadFile(filepath.Join(pkg, "resources.yaml"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(pkg, "Kptfile"), []byte("apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: demo\npipeline:\n  mutators:\n  - image: set-namespace:v0.4.5\n    configMap:\n      namespace: elsewhere\n"), 0o644))
	out, log, err = fnctl(t, s, "", "render", "-o", "stdout", pkg)
	require.NoError(t, err, "render -o stdout\n%s", log)
	assert.Contains(t, out, "kind: ResourceList")
	assert.Contains(t, out, "namespace: elsewhere")
	assert.Contains(t, out, "config.kubernetes.io/path: 'resources.yaml'", "stdout keeps the paths")
	out, log, err = fnctl(t, s, "", "render", "--output=unwrap", pkg)
	require.NoError(t, err, "render -o unwrap\n%s", log)
	assert.NotContains(t, out, "kind: ResourceList")
	assert.NotContains(t, out, "config.kubernetes.io/path")
	assert.Contains(t, out, "namespace: elsewhere")
	dest := filepath.Join(t.TempDir(), "out")
	_, log, err = fnctl(t, s, "", "render", "-o", dest, pkg)
	require.NoError(t, err, "render -o DIR\n%s", log)
	got, err = os.ReadFile(filepath.Join(dest, "resources.yaml"))
	require.NoError(t, err)
	assert.Contains(t, string(got), "namespace: elsewhere", "written into the new directory")
	_, log, err = fnctl(t, s, "", "render", "-o", dest, pkg)
	assert.ErrorAs(t, err, new(exitError), "render -o into a directory that exists\n%s", log)
	assert.Contains(t, log, "already exists")
	after, err := os.ReadFile(filepath.Join(pkg, "resources.yaml"))
	require.NoError(t, err)
	assert.Equal(t, string(before), string(after), "-o leaves the package as it was")
}

// packageWith writes a package of kptfile and the resources above.
func packageWith(t *testing.T, kptfile string) string {
	t.Helper()
	pkg := t.TempDir()
	for name, content := range map[string]string{"Kptfile": kptfile, "resources.yaml": resources} {
		require.NoError(t, os.WriteFile(filepath.Join(pkg, name), []byte(content), 0o644))
	}
	return pkg
}

func TestUsage(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), nil, nil, &out, &out)
	assert.ErrorAs(t, err, new(exitError), "no args")
	assert.Contains(t, out.String(), "Commands:", "no args")
	out.Reset()
	err = run(context.Background(), []string{"eval", "--help"}, nil, &out, &out)
	assert.NoError(t, err, "eval --help")
	assert.Contains(t, out.String(), "-fn-config", "eval --help")
}

func TestImageMap(t *testing.T) {
	m := imageMap{
		exact:    map[string]string{"gcr.io/kpt-fn/set-labels:unstable": "set-labels:v0.2.1"},
		prefixes: map[string]string{"gcr.io/kpt-fn/": "", "gcr.io/kpt-fn/starlark": "ghcr.io/kptdev/krm-functions-catalog/starlark"},
	}
	for image, want := range map[string]string{
		"gcr.io/kpt-fn/set-labels:unstable":      "set-labels:v0.2.1",
		"gcr.io/kpt-fn/set-namespace:v0.4.5":     "set-namespace:v0.4.5",
		"gcr.io/kpt-fn/starlark:v0.5.5":          "ghcr.io/kptdev/krm-functions-catalog/starlark:v0.5.5",
		"ghcr.io/kptdev/krm-functions-catalog/x": "ghcr.io/kptdev/krm-functions-catalog/x",
	} {
		assert.Equal(t, want, m.Map(image), image)
	}
}

func TestTruncateOutput(t *testing.T) {
	item := kptrender.StepResult{Image: "f", ExitCode: 1, Stderr: "1\n2\n3\n4\n5\n6\n"}
	for _, c := range []struct {
		truncate bool
		want     []string
		not      []string
	}{
		{true, []string{"    4\n", "...(2 line(s) truncated, use '--truncate-output=false' to disable)"}, []string{"    5\n"}},
		{false, []string{"    6\n"}, []string{"truncated"}},
	} {
		var out bytes.Buffer
		printItem(&out, item, c.truncate)
		for _, w := range c.want {
			assert.Contains(t, out.String(), w, "truncate=%v", c.truncate)
		}
		for _, n := range c.not {
			assert.NotContains(t, out.String(), n, "truncate=%v", c.truncate)
		}
	}
}

// deadlineRecorder is a client that keeps the context of each call.
type deadlineRecorder struct{ calls []context.Context }

func (r *deadlineRecorder) EvaluateFunction(ctx context.Context, _ *pb.EvaluateFunctionRequest, _ ...grpc.CallOption) (*pb.EvaluateFunctionResponse, error) {
	r.calls = append(r.calls, ctx)
	return &pb.EvaluateFunctionResponse{}, nil
}

// Each function call of a render gets --timeout of its own, not a share of
// one deadline for the whole pipeline, and its context ends with the call.
func TestRenderDeadlineIsPerCall(t *testing.T) {
	rec := &deadlineRecorder{}
	ev := perCallDeadline{client: rec, timeout: time.Hour}
	for range 2 {
		before := time.Now()
		_, err := ev.EvaluateFunction(context.Background(), &pb.EvaluateFunctionRequest{})
		require.NoError(t, err)
		d, ok := rec.calls[len(rec.calls)-1].Deadline()
		require.True(t, ok, "the call has no deadline")
		assert.False(t, d.Before(before.Add(time.Hour)), "deadline %v is less than --timeout from the call's start %v", d, before)
	}
	for i, ctx := range rec.calls {
		assert.Error(t, ctx.Err(), "call %d's context still open after it returned", i)
	}
}

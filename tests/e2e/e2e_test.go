// End-to-end tests on loopback: porch's client → gateway → binary-runner,
// with the real catalog functions (in-process and as binaries) and hostile
// test functions, all from the real service binaries.
package e2e_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/fnresult"
	pb "github.com/fnrunner/fnrunner/protos/evaluator"
	"github.com/fnrunner/fnrunner/tests/stack"
	"github.com/fnrunner/fnrunner/tools/procstat"
)

const testFunctions = `apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata:
  name: crash
spec:
  image: crash
  prefixes: [example.com/test]
  binaryExecutor:
    tags: [v1]
    path: crash
---
apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata:
  name: hang
spec:
  image: hang
  prefixes: [example.com/test]
  binaryExecutor:
    tags: [v1]
    path: hang
`

func call(t *testing.T, s *stack.Stack, image, rl string, timeout time.Duration) (*pb.EvaluateFunctionResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return s.Client().EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: image, ResourceList: []byte(rl)})
}

func TestCatalogFunctionsThroughEachExecutor(t *testing.T) {
	for _, tc := range []struct {
		executor string
		args     []string
	}{
		{"go", nil},
		{"binary", []string{"--disable-runtimes=go"}},
	} {
		t.Run(tc.executor, func(t *testing.T) {
			s := stack.Start(t, stack.Options{GatewayArgs: tc.args})
			for _, image := range []string{
				"set-namespace:v0.4.5",
				"ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5",
			} {
				resp, err := call(t, s, image, stack.Input, time.Minute)
				require.NoError(t, err, image)
				assert.Contains(t, string(resp.GetResourceList()), "namespace: prod", "%s did not set the namespace", image)
			}
			resp, err := call(t, s, "apply-setters:v0.2.2", stack.Input, time.Minute)
			require.NoError(t, err)
			out := string(resp.GetResourceList())
			assert.Contains(t, out, `replicas: "5" # kpt-set: ${replicas}`, "apply-setters output")
			assert.Contains(t, out, "set field value", "apply-setters output")
			// v0.4.1 is another implementation, v0.4 a floating tag: a tag
			// nobody read is not claimed.
			for _, image := range []string{"set-namespace:v0.5.0", "set-namespace:v0.4.1", "set-namespace:v0.4"} {
				_, err = call(t, s, image, stack.Input, time.Minute)
				assert.Equal(t, codes.NotFound, status.Code(err), "%s, a tag outside every claim = %v", image, err)
			}
		})
	}
}

func TestFailingFunctions(t *testing.T) {
	s := stack.Start(t, stack.Options{Configs: map[string]string{"test-functions.yaml": testFunctions}})

	// A function that fails returns Internal with its error results in the
	// message and its ResourceList and stderr in the details.
	_, err := call(t, s, "example.com/test/crash:v1", stack.Input, time.Minute)
	st := status.Convert(err)
	require.Equal(t, codes.Internal, st.Code(), "crash = %v", err)
	require.Contains(t, st.Message(), "the crash function always fails", "crash, want the error result")
	d, ok := fnresult.FailureDetails(err)
	assert.True(t, ok, "crash details = %v", err)
	assert.Contains(t, string(d.GetResourceList()), "severity: error", "crash details")
	assert.Contains(t, string(d.GetLog()), "failing on purpose", "crash details")
	// One that crashes without output: Internal with its stderr.
	_, err = call(t, s, "example.com/test/crash:v1", stack.Input+"# panic-now\n", time.Minute)
	st = status.Convert(err)
	assert.Equal(t, codes.Internal, st.Code(), "panicking binary = %v", err)
	assert.Contains(t, st.Message(), "asked to panic", "panicking binary")

	// A function that hangs is killed at the caller's deadline, with every
	// process it started.
	start := time.Now()
	_, err = call(t, s, "example.com/test/hang:v1", stack.Input, 2*time.Second)
	require.Equal(t, codes.DeadlineExceeded, status.Code(err), "hang = %v", err)
	hang, err := filepath.EvalSymlinks(filepath.Join(s.FunctionsDir, "hang"))
	require.NoError(t, err)
	for i := 0; len(procstat.Running(hang)) > 0; i++ {
		if i == 250 {
			require.Failf(t, "processes of the hanging function still run after its deadline", "%v after its deadline: %v", time.Since(start), procstat.Running(hang))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

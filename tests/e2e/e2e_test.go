// End-to-end tests on loopback: porch's client → gateway → binary-runner,
// with the real catalog functions (in-process and as binaries) and hostile
// test functions, all from the real service binaries.
package e2e_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/fnexec"
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
				"set-namespace:v0.4.1", // served by the ~0.4 constraint
			} {
				resp, err := call(t, s, image, stack.Input, time.Minute)
				if err != nil {
					t.Fatalf("%s: %v", image, err)
				}
				if !strings.Contains(string(resp.GetResourceList()), "namespace: prod") {
					t.Errorf("%s did not set the namespace:\n%s", image, resp.GetResourceList())
				}
			}
			resp, err := call(t, s, "apply-setters:v0.2.2", stack.Input, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if out := string(resp.GetResourceList()); !strings.Contains(out, `replicas: "5" # kpt-set: ${replicas}`) || !strings.Contains(out, "set field value") {
				t.Errorf("apply-setters output:\n%s", out)
			}
			if _, err := call(t, s, "set-namespace:v0.5.0", stack.Input, time.Minute); status.Code(err) != codes.NotFound {
				t.Errorf("a tag outside every claim = %v, want NotFound", err)
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
	if st.Code() != codes.Internal || !strings.Contains(st.Message(), "the crash function always fails") {
		t.Fatalf("crash = %v, want Internal with the error result", err)
	}
	d, ok := fnexec.FailureDetails(err)
	if !ok || !strings.Contains(string(d.GetResourceList()), "severity: error") || !strings.Contains(string(d.GetLog()), "failing on purpose") {
		t.Errorf("crash details = %v, %v", d, ok)
	}
	// One that crashes without output: Internal with its stderr.
	_, err = call(t, s, "example.com/test/crash:v1", stack.Input+"# panic-now\n", time.Minute)
	if st := status.Convert(err); st.Code() != codes.Internal || !strings.Contains(st.Message(), "asked to panic") {
		t.Errorf("panicking binary = %v", err)
	}

	// A function that hangs is killed at the caller's deadline, with every
	// process it started.
	start := time.Now()
	_, err = call(t, s, "example.com/test/hang:v1", stack.Input, 2*time.Second)
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("hang = %v, want DeadlineExceeded", err)
	}
	hang, err := filepath.EvalSymlinks(filepath.Join(s.FunctionsDir, "hang"))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; len(procstat.Running(hang)) > 0; i++ {
		if i == 250 {
			t.Fatalf("processes of the hanging function still run %v after its deadline: %v", time.Since(start), procstat.Running(hang))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

package e2e_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	pb "github.com/fnrunner/fnrunner/protos/evaluator"
	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tests/stack"
	"github.com/fnrunner/fnrunner/tests/testcerts"
	"github.com/fnrunner/fnrunner/tools/localstack"
)

// Every service explains each of its flags.
func TestEveryServiceHasHelp(t *testing.T) {
	for env, flags := range map[string][]string{
		"FNRUNNER_GATEWAY":           {"-port", "-max-request-body-size", "-config-address", "-binary-runner-address", "-disable-runtimes", "-metrics-address", "-drain-timeout", "-log-level"},
		"FNRUNNER_BINARY_RUNNER":     {"-port", "-functions", "-function-env", "-allow-absolute-binary-paths", "-max-request-body-size", "-config-address", "-metrics-address"},
		"FNRUNNER_CONFIG_RECONCILER": {"-port", "-namespace", "-config-dir", "-default-image-prefix", "-leader-elect", "-kubeconfig", "-metrics-address"},
		"FNRUNNER_POD_MANAGER":       {"-port", "-config-address", "-pod-namespace", "-pod-ttl", "-scan-interval", "-max-waitlist-length", "-max-parallel-pods-per-function", "-max-request-body-size", "-enable-private-registries", "-registry-auth-secret-path", "-warm-up-pod-cache", "-metrics-address"},
		"FNRUNNER_WRAPPER_SERVER":    {"-port", "-listen-host", "-max-request-body-size", "-max-log-bytes", "-max-concurrent", "-max-queue", "-metrics-address"},
	} {
		out, err := exec.Command(harness.Binary(t, env), "--help").CombinedOutput()
		assert.NoError(t, err, "%s --help", env)
		for _, f := range flags {
			assert.True(t, strings.Contains(string(out), f+" ") || strings.Contains(string(out), f+"\n"), "%s --help does not explain %s:\n%s", env, f, out)
		}
		bad, err := exec.Command(harness.Binary(t, env), "--no-such-flag").CombinedOutput()
		assert.Error(t, err, "%s accepted an unknown flag:\n%s", env, bad)
	}
}

// localstack starts any service, the wrapper-server included: on its own,
// outside a pod, it runs its entrypoint once per call.
func TestWrapperServerOnItsOwn(t *testing.T) {
	s := stack.Start(t, stack.Options{})
	addr, err := s.StartWrapperServer("wrapper-server", []string{harness.Binary(t, "FNRUNNER_SET_NAMESPACE")}, "--log-level=INFO")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, s.WaitHealthy(ctx, "wrapper-server"))
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	resp, err := pb.NewFunctionEvaluatorClient(conn).EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: "set-namespace:v0.4.5", ResourceList: []byte(stack.Input)})
	require.NoError(t, err)
	assert.Contains(t, string(resp.GetResourceList()), "namespace: prod")

	// A call that fails is logged with the request id the caller (the
	// pod-manager) passed on, and no JSON line has a key twice.
	_, err = pb.NewFunctionEvaluatorClient(conn).EvaluateFunction(metadata.AppendToOutgoingContext(ctx, "fnrunner-request-id", "from-the-pod-manager-42"),
		&pb.EvaluateFunctionRequest{Image: "set-namespace:v0.4.5", ResourceList: []byte("apiVersion: v1\nkind: ConfigMap\n")})
	require.Error(t, err)
	harness.WaitFor(t, "the wrapper-server's line about the failed call", func() bool {
		return strings.Contains(s.Log("wrapper-server"), `"request_id":"from-the-pod-manager-42"`)
	}, func() string { return s.Log("wrapper-server") })
	assert.Empty(t, harness.DuplicateKeys(s.Log("wrapper-server")), "wrapper-server logs a key twice")
}

// The gateway keeps serving the last executor table when the
// config-reconciler goes away.
func TestGatewayKeepsLastTable(t *testing.T) {
	s := stack.Start(t, stack.Options{})
	_, err := call(t, s, "set-namespace:v0.4.5", stack.Input, time.Minute)
	require.NoError(t, err)
	require.NoError(t, s.StopService("config-reconciler", 30*time.Second), "stopping the config-reconciler")
	for i := 0; i < 5; i++ {
		_, err := call(t, s, "set-namespace:v0.4.5", stack.Input, time.Minute)
		require.NoError(t, err, "call %d without the config-reconciler", i)
	}
	assert.NoError(t, s.WaitServing(context.Background()), "gateway not SERVING without the config-reconciler")
}

// A service serves Prometheus metrics on --metrics-address and drains on SIGTERM.
func TestMetricsAndSIGTERM(t *testing.T) {
	addr, err := localstack.FreeAddress()
	require.NoError(t, err)
	var out bytes.Buffer
	cmd := exec.Command(harness.Binary(t, "FNRUNNER_GATEWAY"), "--port=0", "--metrics-address="+addr, "--config-address=127.0.0.1:1", "--binary-runner-address=127.0.0.1:1")
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	var body string
	for i := 0; i < 250 && !strings.Contains(body, "go_goroutines"); i++ {
		time.Sleep(20 * time.Millisecond)
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
	}
	assert.True(t, strings.Contains(body, "go_goroutines"), "no Go runtime metrics at /metrics:\n%.500s", body)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	assert.NoError(t, cmd.Wait(), "gateway exit after SIGTERM\n%s", out.String())
	assert.Contains(t, out.String(), `"msg":"stopped"`, "no drain log")
}

// With mutual TLS between the internal services, calls work end to end;
// porch still talks plaintext to the gateway.
func TestMutualTLSBetweenServices(t *testing.T) {
	certs := testcerts.Generate(t, t.TempDir(), "fnrunner")
	s := stack.Start(t, stack.Options{InternalArgs: certs.Args()})
	for _, executor := range []string{"set-namespace:v0.4.5", "apply-setters:v0.2.2"} {
		_, err := call(t, s, executor, stack.Input, time.Minute)
		assert.NoError(t, err, "%s with mutual TLS", executor)
	}
}

// A runner told to use a sandbox layer it cannot have refuses to start and
// names the layer, whatever else is in order: never silently less
// isolation than --sandbox asked for. Missing here, for real: every layer
// when the helper cannot run; uid when calls' directories are not
// reachable by other users (a private --temp-dir).
func TestRunnersRefuseAMissingSandboxLayer(t *testing.T) {
	private := t.TempDir()
	require.NoError(t, os.Chmod(private, 0o700))
	helper := harness.Binary(t, "FNRUNNER_FNSANDBOX")
	for _, service := range []struct {
		env  string
		args []string
	}{
		{"FNRUNNER_BINARY_RUNNER", []string{"--port=0", "--metrics-address=", "--config-address=127.0.0.1:1"}},
		{"FNRUNNER_WRAPPER_SERVER", []string{"--port=0", "--metrics-address=", "--", "/bin/cat"}},
	} {
		for _, tc := range []struct {
			sandbox, helper, tempDir string
			missing                  string
		}{
			{"base", "/nonexistent/fnsandbox", "", "base"},
			{"base,landlock", "/nonexistent/fnsandbox", "", "base"},
			{"base,landlock,uid", helper, private, "uid"},
		} {
			flags := []string{"--sandbox=" + tc.sandbox, "--sandbox-helper=" + tc.helper}
			if tc.tempDir != "" {
				flags = append(flags, "--temp-dir="+tc.tempDir)
			}
			args := append(flags, service.args...)
			t.Run(service.env+" --sandbox="+tc.sandbox+" without "+tc.missing, func(t *testing.T) {
				if tc.missing == "uid" {
					// The uid layer needs root in the first place.
					harness.NeedRoot(t, "the refusal without the uid layer")
				}
				cmd := exec.Command(harness.Binary(t, service.env), args...)
				done := make(chan struct{})
				var out []byte
				var err error
				go func() { out, err = cmd.CombinedOutput(); close(done) }()
				select {
				case <-done:
				case <-time.After(harness.Wait):
					_ = cmd.Process.Kill()
					<-done
					require.FailNow(t, "started without the sandbox layer it was told to use", "%s", out)
				}
				var exit *exec.ExitError
				require.ErrorAs(t, err, &exit, "%s", out)
				assert.NotZero(t, exit.ExitCode())
				assert.Contains(t, string(out), "sandbox layer missing: "+tc.missing)
			})
		}
	}
}

// The binary executor gives a function the variables --function-env names
// from the binary-runner's environment, and no other of them.
func TestFunctionEnvAllowList(t *testing.T) {
	t.Setenv("FNRUNNER_PASSED_ON", "through")
	t.Setenv("FNRUNNER_KEPT_BACK", "a secret")
	script := filepath.Join(t.TempDir(), "print-env")
	require.NoError(t, os.WriteFile(script, []byte(`#!/bin/bash
cat >/dev/null
printf 'apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: env\n  data:\n    passed: "%s"\n    kept: "%s"\n' "$FNRUNNER_PASSED_ON" "$FNRUNNER_KEPT_BACK"
`), 0o755))
	s := stack.Start(t, stack.Options{
		Functions:        map[string]string{"print-env": script},
		Configs:          map[string]string{"print-env.yaml": "apiVersion: config.porch.kpt.dev/v1alpha1\nkind: FunctionConfig\nmetadata:\n  name: print-env\nspec:\n  image: print-env\n  prefixes: [example.com/test]\n  binaryExecutor:\n    tags: [v1]\n    path: print-env\n"},
		BinaryRunnerArgs: []string{"--function-env=FNRUNNER_PASSED_ON"},
	})
	resp, err := call(t, s, "example.com/test/print-env:v1", stack.Input, time.Minute)
	require.NoError(t, err)
	out := string(resp.GetResourceList())
	assert.Regexp(t, `passed: "?through"?\n`, out, "a variable --function-env names")
	assert.Regexp(t, `kept: (""|'')\n`, out, "a variable it does not name")
}

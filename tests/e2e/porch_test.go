package e2e_test

import (
	"fmt"
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
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tests/porchfiles"
)

// porchRunner is porch's function-runner container, as an operator has it
// installed (../shared/porch-manifests/2-function-runner.yaml, unchanged):
// its command line after the binary, and its environment.
func porchRunner(t *testing.T) (argv, env []string) {
	t.Helper()
	path := porchfiles.Path(t, "2-function-runner.yaml")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	for _, doc := range strings.Split(string(data), "\n---") {
		var d appsv1.Deployment
		if yaml.Unmarshal([]byte(doc), &d) != nil || d.Kind != "Deployment" {
			continue
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Name != "function-runner" {
				continue
			}
			for _, e := range c.Env {
				env = append(env, e.Name+"="+e.Value)
			}
			return c.Command[1:], env
		}
	}
	require.FailNow(t, "no function-runner container in "+path)
	return nil, nil
}

// Every service accepts porch's runner command line as it is (an operator
// gives each the runner's flags), acts on the flags it owns and says once
// which it ignores and which service owns them.
func TestPorchRunnerCommandLine(t *testing.T) {
	argv, env := porchRunner(t)
	require.Contains(t, argv, "--functions=/home/nonroot/functions")
	for _, tc := range []struct {
		service string
		// ours make the service runnable on loopback; they come after
		// porch's, as an overlay's patch would.
		ours    []string
		ignored string
		// owner is the service the log names for ignored.
		owner string
		// runs: it serves until SIGTERM; otherwise it stops by itself
		// after the flags (the pod-manager needs a cluster).
		runs bool
	}{
		{"FNRUNNER_GATEWAY", []string{"--port=0", "--config-address=127.0.0.1:1", "--binary-runner-address=127.0.0.1:1"}, "--functions", "binary-runner", true},
		{"FNRUNNER_BINARY_RUNNER", []string{"--port=0", "--config-address=127.0.0.1:1"}, "--pod-namespace", "pod-manager", true},
		{"FNRUNNER_CONFIG_RECONCILER", []string{"--port=0", "--config-dir=" + t.TempDir()}, "--warm-up-pod-cache", "pod-manager", true},
		{"FNRUNNER_POD_MANAGER", []string{"--port=0", "--kubeconfig=/nonexistent"}, "--functions", "binary-runner", false},
	} {
		t.Run(tc.service, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "log")
			f, err := os.Create(out)
			require.NoError(t, err)
			defer f.Close()
			// Porch's deprecated flags too, as an older Deployment
			// of porch's gives them, and its --function-pod-template
			// (a ConfigMap; fnrunner's pods come from ServiceTemplates).
			args := append(append([]string(nil), argv...), "--config=/etc/porch/config.yaml", "--pod-cache-config=/etc/porch/pod-cache-config.yaml", "--function-pod-template=porch-fn-template", "--metrics-address=")
			cmd := exec.Command(harness.Binary(t, tc.service), append(args, tc.ours...)...)
			cmd.Env, cmd.Stdout, cmd.Stderr = env, f, f
			require.NoError(t, cmd.Start())
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			log := func() string { b, _ := os.ReadFile(out); return string(b) }
			if tc.runs {
				require.Eventually(t, func() bool { return strings.Contains(log(), "serving gRPC") }, harness.Wait, 20*time.Millisecond, "not serving:\n%s", log())
				// Porch's env (OTEL_METRICS_EXPORTER=prometheus on
				// OTEL_EXPORTER_PROMETHEUS_HOST:PORT, 0.0.0.0:9464): the
				// address an operator's scrape of porch's runner
				// reads serves the service's metrics and the
				// OpenTelemetry ones, under porch's OTEL_SERVICE_NAME.
				var page string
				require.Eventually(t, func() bool {
					resp, err := http.Get("http://127.0.0.1:9464/metrics")
					if err != nil {
						return false
					}
					defer resp.Body.Close()
					b, err := io.ReadAll(resp.Body)
					page = string(b)
					return err == nil && resp.StatusCode == http.StatusOK
				}, harness.Wait, 20*time.Millisecond, "no metrics on porch's Prometheus address:\n%s", log())
				assert.Contains(t, page, "go_goroutines", "the service's own metrics")
				assert.Contains(t, page, `service_name="porch-function-runner"`, "OpenTelemetry's metrics under porch's OTEL_SERVICE_NAME")
				require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
				assert.NoError(t, <-done, "exit after SIGTERM:\n%s", log())
			} else {
				err := <-done
				var exit *exec.ExitError
				require.ErrorAs(t, err, &exit)
				assert.NotEqual(t, 2, exit.ExitCode(), "refused porch's flags:\n%s", log())
			}
			assert.Equal(t, 1, strings.Count(log(), "porch function-runner flags accepted and ignored"), "\n%s", log())
			assert.Contains(t, log(), fmt.Sprintf("%q:%q", tc.ignored, tc.owner), "the ignored flag and the service that acts on it")
			assert.Equal(t, 2, strings.Count(log(), "deprecated porch flag accepted and ignored"), "--config and --pod-cache-config, each with a warning:\n%s", log())
			assert.Equal(t, 1, strings.Count(log(), "porch flag accepted and ignored: no fnrunner service acts on it"), "--function-pod-template, with a warning:\n%s", log())
			assert.NotContains(t, log(), "flag provided but not defined")
		})
	}
}

// The pod-manager refuses to start without the wrapper-server image, which
// porch's Deployment gives in WRAPPER_SERVER_IMAGE, and says so.
func TestPodManagerNeedsTheWrapperServerImage(t *testing.T) {
	argv, _ := porchRunner(t)
	out, err := exec.Command(harness.Binary(t, "FNRUNNER_POD_MANAGER"), append(argv, "--metrics-address=")...).CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 2, exit.ExitCode(), "%s", out)
	assert.Contains(t, string(out), "WRAPPER_SERVER_IMAGE")
}

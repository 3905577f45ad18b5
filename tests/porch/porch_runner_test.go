package porch_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tests/porch"
)

// Porch's suites with porch's own function-runner behind porch-server, as
// porch's deployments run it for the exec runtime (pods off: there is no
// node), with the same function binaries fnrunner gets.
func TestPorchRunner(t *testing.T) {
	bins := porch.FromEnv(t)
	functions := t.TempDir()
	porch.FunctionsDir(t, functions)
	config := filepath.Join(functions, "config.yaml")
	if err := os.WriteFile(config, []byte(porch.PorchRunnerConfig()), 0o644); err != nil {
		t.Fatal(err)
	}
	env := porch.Start(t, bins, nil, func(env *porch.Env) error {
		env.StartProcess(t, "function-runner", bins.FunctionRunner, []string{
			"--port=9445", "--disable-runtimes=pod", "--functions=" + functions, "--config=" + config,
			"--max-request-body-size=6291456",
		}, nil)
		return nil
	})
	porch.RunAndCheck(t, env, "porch", harness.Runfile(t, "tests/porch/expected.yaml"))
}

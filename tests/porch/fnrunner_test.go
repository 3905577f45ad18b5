package porch_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tests/porch"
	"github.com/fnrunner/fnrunner/tests/stack"
	"github.com/fnrunner/fnrunner/tools/localstack"
)

// The FunctionConfigs' namespace, as porch's manifests and fnrunner's have it.
const fnNamespace = "porch-fn-system"

// Porch's suites with fnrunner's gateway behind porch-server, in cluster
// mode: the config-reconciler watches FunctionConfigs in the suites'
// apiserver (fnrunner's CRDs, deploy/local's FunctionConfigs applied there,
// and one per upstream build the suites name).
func TestFnrunner(t *testing.T) {
	bins := porch.FromEnv(t)
	crds := harness.Runfile(t, os.Getenv("FNRUNNER_CRDS"))
	env := porch.Start(t, bins, []string{crds}, func(env *porch.Env) error {
		ctx := context.Background()
		apply := func(doc []byte) error {
			o := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(doc, &o.Object); err != nil {
				return err
			}
			o.SetNamespace(fnNamespace)
			return env.Kube.Client.Create(ctx, o)
		}
		ns := &unstructured.Unstructured{}
		ns.SetAPIVersion("v1")
		ns.SetKind("Namespace")
		ns.SetName(fnNamespace)
		if err := env.Kube.Client.Create(ctx, ns); err != nil {
			return err
		}
		for _, f := range strings.Fields(os.Getenv("FNRUNNER_LOCAL_CONFIGS")) {
			if filepath.Base(f) == "kustomization.yaml" {
				continue
			}
			data, err := os.ReadFile(harness.Runfile(t, f))
			if err != nil {
				return err
			}
			if err := apply(data); err != nil {
				return err
			}
		}
		for _, fc := range porch.UpstreamFunctionConfigs(fnNamespace) {
			if err := apply([]byte(fc)); err != nil {
				return err
			}
		}
		functions := t.TempDir()
		porch.FunctionsDir(t, functions)
		for _, kv := range strings.Fields(os.Getenv("FNRUNNER_FUNCTIONS")) {
			name, path, _ := strings.Cut(kv, "=")
			if err := os.Symlink(harness.Runfile(t, path), filepath.Join(functions, name)); err != nil {
				return err
			}
		}
		s := stack.Run(t, localstack.Config{
			Binaries:             stack.Binaries(t),
			FunctionsDir:         functions,
			GatewayPort:          9445,
			ConfigReconcilerArgs: []string{"--kubeconfig=" + env.KubeConfig, "--namespace=" + fnNamespace, "--leader-elect=false"},
		})
		ctx, cancel := context.WithTimeout(ctx, harness.Wait)
		defer cancel()
		return s.WaitServing(ctx)
	})
	porch.RunAndCheck(t, env, "fnrunner", harness.Runfile(t, "tests/porch/expected.yaml"))
}

// Package stack starts fnrunner's real service binaries on loopback for
// tests (through tools/localstack): a config-reconciler in --config-dir mode,
// a binary-runner with a functions directory, and a gateway in front. Every
// process gets SIGTERM at the end of the test and must exit cleanly.
//
// The binaries come from Bazel runfiles (see defs.bzl: stack_go_test, and
// tools/bzl/testenv.bzl), named by environment variables (harness.Binary):
//
//	FNRUNNER_GATEWAY, FNRUNNER_BINARY_RUNNER, FNRUNNER_CONFIG_RECONCILER, FNRUNNER_WRAPPER_SERVER
//	FNRUNNER_FUNCTIONS          space-separated name=path of function binaries
//	FNRUNNER_LOCAL_CONFIGS      space-separated FunctionConfig files (deploy/local)
package stack

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/fnrunner/fnrunner/protos/evaluator"
	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tools/localstack"
)

// Input is a small ResourceList for the catalog functions: set-namespace
// (namespace: prod) and apply-setters (replicas: 5) both change it.
const Input = `apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: settings
    namespace: old
  data:
    replicas: "1" # kpt-set: ${replicas}
functionConfig:
  apiVersion: v1
  kind: ConfigMap
  metadata:
    name: function-input
  data:
    namespace: prod
    replicas: "5"
`

// Options change what Start runs.
type Options struct {
	// NoLocalConfigs leaves out deploy/local's FunctionConfigs.
	NoLocalConfigs bool
	// Configs are more FunctionConfig files: name → YAML.
	Configs map[string]string
	// Functions are more function binaries: name in the functions dir → path.
	Functions map[string]string
	// GatewayArgs, BinaryRunnerArgs and ConfigReconcilerArgs are added to
	// those services' flags.
	GatewayArgs, BinaryRunnerArgs, ConfigReconcilerArgs []string
	// BinaryRunner, when set, is run instead of the binary-runner (e.g. a
	// wrapper that runs it in namespaces of its own).
	BinaryRunner string
	// Gateway, when set, is run instead of the gateway (e.g. a wrapper
	// that starts it in a cgroup).
	Gateway string
	// InternalArgs are added to every service's flags (e.g. --tls-*).
	InternalArgs []string
	// PodManagerArgs, when not nil, run a pod-manager with these flags
	// (the caller's: --kubeconfig, --owner, ...) as the gateway's pod
	// executor; Start waits for it to be healthy.
	PodManagerArgs []string
}

// Stack is a running set of services.
type Stack struct {
	*localstack.Stack
	// ConfigDir is the config-reconciler's --config-dir; writing it changes the table.
	ConfigDir string
	// FunctionsDir is the binary-runner's --functions.
	FunctionsDir string
	conn         *grpc.ClientConn
}

// Binaries are the gateway, binary-runner, config-reconciler and
// wrapper-server named by FNRUNNER_GATEWAY, FNRUNNER_BINARY_RUNNER,
// FNRUNNER_CONFIG_RECONCILER and FNRUNNER_WRAPPER_SERVER (the pod-manager is
// the caller's to add: Start runs it when it is set).
func Binaries(t testing.TB) localstack.Binaries {
	t.Helper()
	return localstack.Binaries{
		Gateway:          harness.Binary(t, "FNRUNNER_GATEWAY"),
		BinaryRunner:     harness.Binary(t, "FNRUNNER_BINARY_RUNNER"),
		ConfigReconciler: harness.Binary(t, "FNRUNNER_CONFIG_RECONCILER"),
		WrapperServer:    harness.Binary(t, "FNRUNNER_WRAPPER_SERVER"),
		Fnsandbox:        harness.Binary(t, "FNRUNNER_FNSANDBOX"),
	}
}

// Run starts cfg's services (localstack.Start) without waiting for them to
// be ready, and stops them when the test ends: each must exit cleanly on
// SIGTERM.
func Run(t testing.TB, cfg localstack.Config) *localstack.Stack {
	t.Helper()
	ls, err := localstack.Start(cfg)
	t.Cleanup(func() {
		if err := ls.Stop(30 * time.Second); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

// Start runs the stack and waits until the gateway is SERVING.
func Start(t testing.TB, opts Options) *Stack {
	t.Helper()
	configDir, functionsDir := t.TempDir(), t.TempDir()
	if !opts.NoLocalConfigs {
		for _, f := range strings.Fields(os.Getenv("FNRUNNER_LOCAL_CONFIGS")) {
			data, err := os.ReadFile(harness.Runfile(t, f))
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(configDir, filepath.Base(f)), data)
		}
	}
	for name, content := range opts.Configs {
		writeFile(t, filepath.Join(configDir, name), []byte(content))
	}
	functions := map[string]string{}
	for _, kv := range strings.Fields(os.Getenv("FNRUNNER_FUNCTIONS")) {
		name, path, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("FNRUNNER_FUNCTIONS entry %q is not name=path", kv)
		}
		functions[name] = harness.Runfile(t, path)
	}
	for name, path := range opts.Functions {
		functions[name] = path
	}
	for name, path := range functions {
		if err := os.Symlink(path, filepath.Join(functionsDir, name)); err != nil {
			t.Fatal(err)
		}
	}

	bins := Binaries(t)
	if opts.BinaryRunner != "" {
		bins.BinaryRunner = opts.BinaryRunner
	}
	if opts.Gateway != "" {
		bins.Gateway = opts.Gateway
	}
	if opts.PodManagerArgs != nil {
		bins.PodManager = harness.Binary(t, "FNRUNNER_POD_MANAGER")
	}
	ls := Run(t, localstack.Config{
		Binaries:             bins,
		ConfigDir:            configDir,
		FunctionsDir:         functionsDir,
		GatewayArgs:          opts.GatewayArgs,
		BinaryRunnerArgs:     opts.BinaryRunnerArgs,
		ConfigReconcilerArgs: opts.ConfigReconcilerArgs,
		InternalArgs:         opts.InternalArgs,
		PodManagerArgs:       opts.PodManagerArgs,
	})
	s := &Stack{Stack: ls, ConfigDir: configDir, FunctionsDir: functionsDir}
	var err error
	s.conn, err = grpc.NewClient(s.GatewayAddress, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20), grpc.MaxCallSendMsgSize(256<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := ls.WaitServing(ctx); err != nil {
		t.Fatalf("%v\n%s", err, ls.Logs())
	}
	if opts.PodManagerArgs != nil {
		if err := ls.WaitHealthy(ctx, "pod-manager"); err != nil {
			t.Fatalf("%v\n%s", err, ls.Logs())
		}
	}
	return s
}

// Client returns a client of the gateway, as porch would use it.
func (s *Stack) Client() pb.FunctionEvaluatorClient { return pb.NewFunctionEvaluatorClient(s.conn) }

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

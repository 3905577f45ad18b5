// Package stack starts fnrunner's real service binaries on loopback for
// tests: a config-reconciler in --config-dir mode, a binary-runner with a
// functions directory, and a gateway in front. Every process gets SIGTERM
// at the end of the test and must exit cleanly.
//
// The binaries come from Bazel runfiles (see defs.bzl: stack_go_test), named
// by environment variables:
//
//	FNRUNNER_GATEWAY, FNRUNNER_BINARY_RUNNER, FNRUNNER_CONFIG_RECONCILER
//	FNRUNNER_FUNCTIONS          space-separated name=path of function binaries
//	FNRUNNER_LOCAL_CONFIGS      space-separated FunctionConfig files (deploy/local)
package stack

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/fnrunner/fnrunner/protos/evaluator"
)

// Options change what Start runs.
type Options struct {
	// NoLocalConfigs leaves out deploy/local's FunctionConfigs.
	NoLocalConfigs bool
	// Configs are more FunctionConfig files: name → YAML.
	Configs map[string]string
	// Functions are more function binaries: name in the functions dir → path.
	Functions map[string]string
	// GatewayArgs and BinaryRunnerArgs are added to those services' flags.
	GatewayArgs, BinaryRunnerArgs []string
}

// Stack is a running set of services.
type Stack struct {
	// GatewayAddress is where porch would connect.
	GatewayAddress string
	// ConfigDir is the config-reconciler's --config-dir; writing it changes the table.
	ConfigDir string
	// FunctionsDir is the binary-runner's --functions.
	FunctionsDir string
	conn         *grpc.ClientConn
	procs        []*process
}

type process struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan error
}

// Path resolves a runfiles path from an environment variable to an absolute path.
func Path(t testing.TB, p string) string {
	t.Helper()
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	root := os.Getenv("TEST_SRCDIR")
	if ws := os.Getenv("TEST_WORKSPACE"); root != "" && ws != "" {
		return filepath.Join(root, ws, p)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// Binary returns the absolute path named by an environment variable, failing
// the test (never skipping it) when it is not there.
func Binary(t testing.TB, env string) string {
	t.Helper()
	p := Path(t, os.Getenv(env))
	if p == "" {
		t.Fatalf("%s is not set: run this test with tools/bazel test", env)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s: %v", env, err)
	}
	return p
}

// Start runs the stack and waits until the gateway is SERVING.
func Start(t testing.TB, opts Options) *Stack {
	t.Helper()
	s := &Stack{ConfigDir: t.TempDir(), FunctionsDir: t.TempDir()}
	t.Cleanup(func() { s.stop(t) })

	if !opts.NoLocalConfigs {
		for _, f := range strings.Fields(os.Getenv("FNRUNNER_LOCAL_CONFIGS")) {
			data, err := os.ReadFile(Path(t, f))
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(s.ConfigDir, filepath.Base(f)), data)
		}
	}
	for name, content := range opts.Configs {
		writeFile(t, filepath.Join(s.ConfigDir, name), []byte(content))
	}
	functions := map[string]string{}
	for _, kv := range strings.Fields(os.Getenv("FNRUNNER_FUNCTIONS")) {
		name, path, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("FNRUNNER_FUNCTIONS entry %q is not name=path", kv)
		}
		functions[name] = Path(t, path)
	}
	for name, path := range opts.Functions {
		functions[name] = path
	}
	for name, path := range functions {
		if err := os.Symlink(path, filepath.Join(s.FunctionsDir, name)); err != nil {
			t.Fatal(err)
		}
	}

	configPort, runnerPort, gatewayPort := freePort(t), freePort(t), freePort(t)
	s.GatewayAddress = "127.0.0.1:" + strconv.Itoa(gatewayPort)
	s.start(t, "config-reconciler", Binary(t, "FNRUNNER_CONFIG_RECONCILER"),
		"--config-dir="+s.ConfigDir, "--port="+strconv.Itoa(configPort), "--metrics-address=", "--log-level=WARN")
	s.start(t, "binary-runner", Binary(t, "FNRUNNER_BINARY_RUNNER"), append([]string{
		"--functions=" + s.FunctionsDir, "--port=" + strconv.Itoa(runnerPort), "--metrics-address=", "--log-level=WARN",
		"--config-address=127.0.0.1:" + strconv.Itoa(configPort)}, opts.BinaryRunnerArgs...)...)
	s.start(t, "gateway", Binary(t, "FNRUNNER_GATEWAY"), append([]string{
		"--port=" + strconv.Itoa(gatewayPort), "--metrics-address=", "--log-level=WARN", "--health-interval=100ms",
		"--config-address=127.0.0.1:" + strconv.Itoa(configPort),
		"--binary-runner-address=127.0.0.1:" + strconv.Itoa(runnerPort)}, opts.GatewayArgs...)...)

	conn, err := grpc.NewClient(s.GatewayAddress, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	s.conn = conn
	s.WaitServing(t)
	return s
}

// Client returns a client of the gateway, as porch would use it.
func (s *Stack) Client() pb.FunctionEvaluatorClient { return pb.NewFunctionEvaluatorClient(s.conn) }

// WaitServing waits (bounded) until the gateway's health says SERVING.
func (s *Stack) WaitServing(t testing.TB) {
	t.Helper()
	hc := healthpb.NewHealthClient(s.conn)
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
		if i == 600 {
			t.Fatalf("gateway not SERVING (last: %v, %v); logs:\n%s", resp.GetStatus(), err, s.Logs())
		}
		for _, p := range s.procs {
			select {
			case err := <-p.done:
				t.Fatalf("%s exited early: %v\n%s", p.name, err, p.out.String())
			default:
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Logs returns every process's output.
func (s *Stack) Logs() string {
	var b strings.Builder
	for _, p := range s.procs {
		fmt.Fprintf(&b, "--- %s\n%s\n", p.name, p.out.String())
	}
	return b.String()
}

func (s *Stack) start(t testing.TB, name, bin string, args ...string) {
	t.Helper()
	out := &syncBuffer{}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	p := &process{name: name, cmd: cmd, out: out, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	s.procs = append(s.procs, p)
}

// stop sends SIGTERM to every process, last started first, and checks that
// each exits cleanly.
func (s *Stack) stop(t testing.TB) {
	if s.conn != nil {
		s.conn.Close()
	}
	for i := len(s.procs) - 1; i >= 0; i-- {
		p := s.procs[i]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-p.done:
			if err != nil {
				t.Errorf("%s did not exit cleanly on SIGTERM: %v\n%s", p.name, err, p.out.String())
			}
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			t.Errorf("%s did not stop within 30s of SIGTERM\n%s", p.name, p.out.String())
		}
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	pb "github.com/fnrunner/fnrunner/protos/evaluator"
	"github.com/fnrunner/fnrunner/tests/harness"
)

// startAlone starts the gateway as main does, in this process, with nothing
// behind it (no config-reconciler, no executor), logging to logs; it runs
// until ctx ends, and done then gives serve's answer.
func startAlone(t *testing.T, ctx context.Context, logs *bytes.Buffer) (*grpc.ClientConn, <-chan error) {
	t.Helper()
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	unreachable := "127.0.0.1:1"
	go func() {
		done <- serve(ctx, []string{"--port=0", "--metrics-address=", "--config-address=" + unreachable, "--binary-runner-address=" + unreachable}, logs, ready)
	}()
	var addr net.Addr
	select {
	case addr = <-ready:
	case err := <-done:
		require.Failf(t, "gateway exited early", "%v", err)
	}
	conn, err := grpc.NewClient(addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn, done
}

// TestNotReadyWithoutConfig starts the gateway as main does, with nothing
// behind it, and talks to it with the generated client: it must say it is
// not serving and answer Unavailable, and stop cleanly.
func TestNotReadyWithoutConfig(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var logs bytes.Buffer
	conn, done := startAlone(t, ctx, &logs)
	callCtx, callCancel := context.WithTimeout(ctx, 10*time.Second)
	defer callCancel()

	hc, err := healthpb.NewHealthClient(conn).Check(callCtx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err, "health check")
	assert.NotEqual(t, healthpb.HealthCheckResponse_SERVING, hc.GetStatus(), "health = SERVING without an executor table or executor")
	_, err = pb.NewFunctionEvaluatorClient(conn).EvaluateFunction(callCtx, &pb.EvaluateFunctionRequest{
		Image:        "set-namespace:v0.4.5",
		ResourceList: []byte("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n"),
	})
	require.Equal(t, codes.Unavailable, status.Code(err), "EvaluateFunction = %v", err)
	require.ErrorContains(t, err, "config-reconciler", "EvaluateFunction, want an error naming the config-reconciler")

	cancel()
	require.NoError(t, <-done, "gateway did not stop cleanly")
	assert.Contains(t, logs.String(), `"msg":"stopped"`, "no structured stop log")
}

// rawCodec sends a []byte as the body as it is, as an attacker's client
// would.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { return nil }
func (rawCodec) Name() string                       { return "proto" }

// A body of 6 MiB of nested protobuf start-group tags once overflowed a
// goroutine's stack in the gateway, a fatal error on the porch-facing port:
// now it is InvalidArgument, and the gateway keeps answering.
func TestNestedGroupsBodyIsRefusedAndTheGatewayKeepsServing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	conn, done := startAlone(t, ctx, &bytes.Buffer{})
	callCtx, callCancel := context.WithTimeout(ctx, 30*time.Second)
	defer callCancel()

	var out []byte
	err := conn.Invoke(callCtx, pb.FunctionEvaluator_EvaluateFunction_FullMethodName, bytes.Repeat([]byte{0x0b}, 6<<20), &out, grpc.ForceCodec(rawCodec{}))
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)

	_, err = healthpb.NewHealthClient(conn).Check(callCtx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err, "health check after the nested body")
	_, err = pb.NewFunctionEvaluatorClient(conn).EvaluateFunction(callCtx, &pb.EvaluateFunctionRequest{
		Image: "set-namespace:v0.4.5", ResourceList: []byte("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n")})
	assert.Equal(t, codes.Unavailable, status.Code(err), "an ordinary call after the nested body: %v", err)
	cancel()
	require.NoError(t, <-done, "gateway did not stop cleanly")
}

func TestHelpExplainsEveryFlag(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"--help"}, &out)
	require.ErrorIs(t, err, flag.ErrHelp, "run --help")
	for _, f := range []string{"-port", "-max-request-body-size", "-metrics-address", "-drain-timeout", "-log-level", "-config-address", "-binary-runner-address", "-disable-runtimes"} {
		assert.Contains(t, out.String(), f, "--help does not mention %s", f)
	}
}

func TestDisableRuntimes(t *testing.T) {
	_, err := disabled("exec,pod")
	assert.NoError(t, err, "porch's value rejected")
	_, err = disabled("bogus")
	assert.Error(t, err, "unknown runtime accepted")
	err = run(context.Background(), []string{"--disable-runtimes=bogus", "--port=0", "--metrics-address="}, &bytes.Buffer{})
	assert.ErrorContains(t, err, "bogus", "run with a bad flag")
}

// In a container whose memory limit is below what its admission and
// transport may hold (1 GiB in flight by default), the gateway refuses to
// start rather than be killed by the kubelet with every call in flight.
func TestRefusesABudgetOverItsContainer(t *testing.T) {
	if os.Getenv("GATEWAY_IN_CGROUP") != "" {
		err := serve(context.Background(), []string{"--port=0", "--metrics-address=", "--config-address=127.0.0.1:1", "--binary-runner-address=127.0.0.1:1"}, os.Stderr, nil)
		fmt.Println("serve:", err)
		return
	}
	harness.NeedRoot(t, "running the gateway in a memory cgroup")
	harness.NeedCgroupV1(t, "making a v1 memory cgroup")
	group, err := os.MkdirTemp("/sys/fs/cgroup/memory", "gateway-test-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.Remove(group) })
	require.NoError(t, os.WriteFile(filepath.Join(group, "memory.limit_in_bytes"), []byte("536870912"), 0o644))
	cmd := exec.Command("/bin/sh", "-c", `echo $$ > "$1/cgroup.procs" && exec "$2" -test.run='^TestRefusesABudgetOverItsContainer$'`, "sh", group, os.Args[0])
	cmd.Env = append(os.Environ(), "GATEWAY_IN_CGROUP=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "serve: admission budget over the container's memory limit")
	assert.Contains(t, string(out), "over the 512 MiB limit of its cgroup")
}

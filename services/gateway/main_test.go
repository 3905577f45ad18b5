package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	pb "github.com/fnrunner/fnrunner/protos/evaluator"
)

// TestNotReadyWithoutConfig starts the gateway as main does, with nothing
// behind it, and talks to it with the generated client: it must say it is
// not serving and answer Unavailable, and stop cleanly.
func TestNotReadyWithoutConfig(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	var logs bytes.Buffer
	unreachable := "127.0.0.1:1"
	go func() {
		done <- serve(ctx, []string{"--port=0", "--metrics-address=", "--config-address=" + unreachable, "--binary-runner-address=" + unreachable}, &logs, ready)
	}()
	var addr net.Addr
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("gateway exited early: %v", err)
	}
	conn, err := grpc.NewClient(addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	callCtx, callCancel := context.WithTimeout(ctx, 10*time.Second)
	defer callCancel()

	hc, err := healthpb.NewHealthClient(conn).Check(callCtx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("health check: %v", err)
	}
	if hc.GetStatus() == healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health = SERVING without an executor table or executor")
	}
	_, err = pb.NewFunctionEvaluatorClient(conn).EvaluateFunction(callCtx, &pb.EvaluateFunctionRequest{
		Image:        "set-namespace:v0.4.5",
		ResourceList: []byte("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n"),
	})
	if got := status.Code(err); got != codes.Unavailable || !strings.Contains(err.Error(), "config-reconciler") {
		t.Fatalf("EvaluateFunction = %v, want Unavailable naming the config-reconciler", err)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("gateway did not stop cleanly: %v", err)
	}
	if !strings.Contains(logs.String(), `"msg":"stopped"`) {
		t.Errorf("no structured stop log in:\n%s", logs.String())
	}
}

func TestHelpExplainsEveryFlag(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"--help"}, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("run --help = %v, want flag.ErrHelp", err)
	}
	for _, f := range []string{"-port", "-max-request-body-size", "-metrics-address", "-drain-timeout", "-log-level", "-config-address", "-binary-runner-address", "-disable-runtimes"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("--help does not mention %s:\n%s", f, out.String())
		}
	}
}

func TestDisableRuntimes(t *testing.T) {
	if _, err := disabled("exec,pod"); err != nil {
		t.Errorf("porch's value rejected: %v", err)
	}
	if _, err := disabled("bogus"); err == nil {
		t.Error("unknown runtime accepted")
	}
	err := run(context.Background(), []string{"--disable-runtimes=bogus", "--port=0", "--metrics-address="}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("run with a bad flag = %v", err)
	}
}

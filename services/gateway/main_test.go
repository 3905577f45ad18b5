package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"net"
	"strconv"
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

// TestServesOverLoopback starts the gateway as main does and talks to it with
// the generated client.
func TestServesOverLoopback(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	var logs bytes.Buffer
	go func() {
		done <- run(ctx, []string{"--port=0", "--metrics-address="}, &logs, ready)
	}()
	var addr net.Addr
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("gateway exited early: %v", err)
	}
	port := addr.(*net.TCPAddr).Port

	conn, err := grpc.NewClient(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), grpc.WithTransportCredentials(insecure.NewCredentials()))
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
	if hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health = %v, want SERVING", hc.GetStatus())
	}

	_, err = pb.NewFunctionEvaluatorClient(conn).EvaluateFunction(callCtx, &pb.EvaluateFunctionRequest{
		Image:        "set-namespace:v0.4.5",
		ResourceList: []byte("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n"),
	})
	if got := status.Code(err); got != codes.NotFound {
		t.Fatalf("EvaluateFunction code = %v (%v), want NotFound", got, err)
	}
	if !strings.Contains(status.Convert(err).Message(), `"set-namespace:v0.4.5"`) {
		t.Errorf("message %q does not name the image", status.Convert(err).Message())
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
	err := run(context.Background(), []string{"--help"}, &out, nil)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("run --help = %v, want flag.ErrHelp", err)
	}
	for _, f := range []string{"-port", "-max-request-body-size", "-metrics-address", "-drain-timeout", "-log-level"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("--help does not mention %s:\n%s", f, out.String())
		}
	}
}

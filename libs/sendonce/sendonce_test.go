package sendonce

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/fnrunner/fnrunner/protos/evaluator"
)

// countingEvaluator counts calls and blocks each until release is closed.
type countingEvaluator struct {
	pb.UnimplementedFunctionEvaluatorServer
	calls   atomic.Int32
	started chan struct{}
	release chan struct{}
}

func (c *countingEvaluator) EvaluateFunction(ctx context.Context, req *pb.EvaluateFunctionRequest) (*pb.EvaluateFunctionResponse, error) {
	c.calls.Add(1)
	c.started <- struct{}{}
	select {
	case <-c.release:
	case <-ctx.Done():
	}
	return &pb.EvaluateFunctionResponse{ResourceList: req.GetResourceList()}, nil
}

func serveOn(t *testing.T, addr string, ev pb.FunctionEvaluatorServer) *grpc.Server {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterFunctionEvaluatorServer(srv, ev)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return srv
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func dialExecutor(t *testing.T, addr string, wait time.Duration) pb.FunctionEvaluatorClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, DialOptions(wait)...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewFunctionEvaluatorClient(conn)
}

// A call made while the executor is not up yet is held and sent once it is.
func TestWaitsForTheExecutor(t *testing.T) {
	addr := freeAddr(t)
	client := dialExecutor(t, addr, time.Minute)
	ev := &countingEvaluator{started: make(chan struct{}, 1), release: make(chan struct{})}
	close(ev.release)
	done := make(chan error, 1)
	go func() {
		_, err := client.EvaluateFunction(context.Background(), &pb.EvaluateFunctionRequest{Image: "x"})
		done <- err
	}()
	serveOn(t, addr, ev)
	if err := <-done; err != nil {
		t.Fatalf("call made before the executor was up: %v", err)
	}
	if n := ev.calls.Load(); n != 1 {
		t.Errorf("executor saw %d calls, want 1", n)
	}
}

// A call whose executor dies after receiving it is not sent again, and the
// caller is told why.
func TestNeverRepeatsASentCall(t *testing.T) {
	addr := freeAddr(t)
	client := dialExecutor(t, addr, time.Minute)
	ev := &countingEvaluator{started: make(chan struct{}, 1), release: make(chan struct{})}
	srv := serveOn(t, addr, ev)
	done := make(chan error, 1)
	go func() {
		_, err := client.EvaluateFunction(context.Background(), &pb.EvaluateFunctionRequest{Image: "x"})
		done <- err
	}()
	<-ev.started
	srv.Stop() // the executor goes away with the call in flight
	ev2 := &countingEvaluator{started: make(chan struct{}, 1), release: make(chan struct{})}
	close(ev2.release)
	serveOn(t, addr, ev2) // and comes back
	err := <-done
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "not repeated") {
		t.Fatalf("call cut mid-flight = %v, want Unavailable saying it was not repeated", err)
	}
	if n := ev.calls.Load() + ev2.calls.Load(); n != 1 {
		t.Errorf("the function was asked to run %d times, want 1", n)
	}
}

// With nothing listening, a call fails with Unavailable after the connect wait.
func TestGivesUpOnAnAbsentExecutor(t *testing.T) {
	client := dialExecutor(t, freeAddr(t), 200*time.Millisecond)
	_, err := client.EvaluateFunction(context.Background(), &pb.EvaluateFunctionRequest{Image: "x"})
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "not sent") {
		t.Fatalf("call to an absent executor = %v, want Unavailable saying it was not sent", err)
	}
	// The caller's own deadline wins over the connect wait.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	client = dialExecutor(t, freeAddr(t), time.Minute)
	if _, err := client.EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: "x"}); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("call with a short deadline = %v, want DeadlineExceeded", err)
	}
}

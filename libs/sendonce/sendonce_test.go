package sendonce

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/fnrunner/fnrunner/protos/evaluator"
	"github.com/fnrunner/fnrunner/tools/localstack"
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
	require.NoError(t, err)
	srv := grpc.NewServer()
	pb.RegisterFunctionEvaluatorServer(srv, ev)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return srv
}

func dialExecutor(t *testing.T, addr string, wait time.Duration) pb.FunctionEvaluatorClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, DialOptions(wait)...)...)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return pb.NewFunctionEvaluatorClient(conn)
}

// A call made while the executor is not up yet is held and sent once it is.
func TestWaitsForTheExecutor(t *testing.T) {
	addr, err := localstack.FreeAddress()
	require.NoError(t, err)
	client := dialExecutor(t, addr, time.Minute)
	ev := &countingEvaluator{started: make(chan struct{}, 1), release: make(chan struct{})}
	close(ev.release)
	done := make(chan error, 1)
	go func() {
		_, err := client.EvaluateFunction(context.Background(), &pb.EvaluateFunctionRequest{Image: "x"})
		done <- err
	}()
	serveOn(t, addr, ev)
	require.NoError(t, <-done, "call made before the executor was up")
	assert.Equal(t, int32(1), ev.calls.Load(), "calls the executor saw")
}

// A call whose executor dies after receiving it is not sent again, and the
// caller is told why.
func TestNeverRepeatsASentCall(t *testing.T) {
	addr, err := localstack.FreeAddress()
	require.NoError(t, err)
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
	err = <-done
	require.Equal(t, codes.Unavailable, status.Code(err), "call cut mid-flight = %v", err)
	require.Contains(t, status.Convert(err).Message(), "not repeated", "call cut mid-flight")
	assert.Equal(t, int32(1), ev.calls.Load()+ev2.calls.Load(), "times the function was asked to run")
}

// With nothing listening, a call fails with Unavailable after the connect wait.
func TestGivesUpOnAnAbsentExecutor(t *testing.T) {
	absent, err := localstack.FreeAddress()
	require.NoError(t, err)
	client := dialExecutor(t, absent, 200*time.Millisecond)
	_, err = client.EvaluateFunction(context.Background(), &pb.EvaluateFunctionRequest{Image: "x"})
	require.Equal(t, codes.Unavailable, status.Code(err), "call to an absent executor = %v", err)
	require.Contains(t, status.Convert(err).Message(), "not sent", "call to an absent executor")
	// The caller's own deadline wins over the connect wait.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	absent, err = localstack.FreeAddress()
	require.NoError(t, err)
	client = dialExecutor(t, absent, time.Minute)
	_, err = client.EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: "x"})
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err), "call with a short deadline = %v", err)
}

// An answer to a call that was sent is never "not sent", whatever the other
// end says: a function pod runs any image, so a mark it crafts is dropped
// (and every other detail kept), and the call cannot be sent elsewhere.
func TestBrokenDropsTheMarkOfASentCall(t *testing.T) {
	crafted, err := status.New(codes.Internal, "function failed").WithDetails(
		&errdetails.ErrorInfo{Reason: notSentReason, Domain: notSentDomain},
		&errdetails.DebugInfo{Detail: "the function's own detail"})
	require.NoError(t, err)
	require.NotNil(t, received(crafted.Err()), "the crafted answer carries the mark")

	got := Broken(context.Background(), crafted.Err(), "pod p")
	var notSent *NotSentError
	assert.False(t, errors.As(got, &notSent))
	assert.Nil(t, received(got))
	st := status.Convert(got)
	assert.Equal(t, codes.Internal, st.Code())
	assert.Equal(t, "function failed", st.Message())
	require.Len(t, st.Details(), 1)
	assert.Equal(t, "the function's own detail", st.Details()[0].(*errdetails.DebugInfo).GetDetail())

	// The executor services' own not-sent answers keep it through the
	// interceptor (they are fnrunner's), and it survives the wire.
	ns := NotSent("no table yet")
	wire := status.Convert(ns).Err()
	require.NotNil(t, received(wire))
	assert.Equal(t, codes.Unavailable, status.Code(received(wire)))
}

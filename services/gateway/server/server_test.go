package server

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/executortable"
	"github.com/fnrunner/fnrunner/libs/imagematch"
	configpb "github.com/fnrunner/fnrunner/protos/configstream"
)

type fixedTables struct{ t *executortable.Tables }

func (f fixedTables) Tables() *executortable.Tables { return f.t }

// executor records that it was asked (in asked, unless nil: calls at once
// must not share it) and answers with answer (or its kind).
type executor struct {
	kind   executortable.Kind
	answer error
	asked  *[]executortable.Kind
}

func (e executor) Evaluate(context.Context, imagematch.Reference, *evalwire.Request) (*evalwire.Response, error) {
	if e.asked != nil {
		*e.asked = append(*e.asked, e.kind)
	}
	if e.answer != nil {
		return nil, e.answer
	}
	return &evalwire.Response{Log: []byte(e.kind)}, nil
}

const resourceList = "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n"

// Every image is claimed by the go and binary executors; the pod executor
// runs unclaimed images as well, as the gateway's main sets it up.
func tables() *executortable.Tables {
	return executortable.Build(&configpb.Snapshot{Functions: []*configpb.FunctionConfig{{
		Namespace: "ns", Name: "fn", Image: "fn", Prefixes: []string{""},
		Go:     &configpb.GoExecutor{Tags: []string{"v1"}},
		Binary: &configpb.BinaryExecutor{Tags: []string{"v1"}, Path: "fn"},
		Pod:    &configpb.PodExecutor{Tags: []string{"v1"}},
	}}})
}

func TestRoutesInOrderAndOnlyNotFoundFallsThrough(t *testing.T) {
	notFound := status.Error(codes.NotFound, "not mine")
	tests := []struct {
		name    string
		image   string
		answers map[executortable.Kind]error
		asked   []executortable.Kind
		code    codes.Code
		from    executortable.Kind
	}{
		{name: "go first", image: "fn:v1", asked: []executortable.Kind{executortable.Go}, from: executortable.Go},
		{name: "go NotFound falls to binary", image: "fn:v1",
			answers: map[executortable.Kind]error{executortable.Go: notFound},
			asked:   []executortable.Kind{executortable.Go, executortable.Binary}, from: executortable.Binary},
		{name: "go and binary NotFound fall to pod", image: "fn:v1",
			answers: map[executortable.Kind]error{executortable.Go: notFound, executortable.Binary: notFound},
			asked:   []executortable.Kind{executortable.Go, executortable.Binary, executortable.Pod}, from: executortable.Pod},
		{name: "every executor NotFound", image: "fn:v1",
			answers: map[executortable.Kind]error{executortable.Go: notFound, executortable.Binary: notFound, executortable.Pod: notFound},
			asked:   []executortable.Kind{executortable.Go, executortable.Binary, executortable.Pod}, code: codes.NotFound},
		{name: "a failed function is final", image: "fn:v1",
			answers: map[executortable.Kind]error{executortable.Go: status.Error(codes.Internal, "exit 1")},
			asked:   []executortable.Kind{executortable.Go}, code: codes.Internal},
		{name: "unavailable is final", image: "fn:v1",
			answers: map[executortable.Kind]error{executortable.Go: status.Error(codes.Unavailable, "went away")},
			asked:   []executortable.Kind{executortable.Go}, code: codes.Unavailable},
		{name: "deadline is final", image: "fn:v1",
			answers: map[executortable.Kind]error{executortable.Go: status.Error(codes.DeadlineExceeded, "too slow")},
			asked:   []executortable.Kind{executortable.Go}, code: codes.DeadlineExceeded},
		{name: "unclaimed tag goes to the pod executor only", image: "fn:v2",
			asked: []executortable.Kind{executortable.Pod}, from: executortable.Pod},
		{name: "unclaimed function goes to the pod executor only", image: "other:v1",
			asked: []executortable.Kind{executortable.Pod}, from: executortable.Pod},
		{name: "malformed image asks nobody", image: "Not An Image", code: codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var asked []executortable.Kind
			route := func(k executortable.Kind) Route {
				return Route{Kind: k, Client: executor{kind: k, answer: tt.answers[k], asked: &asked}, Unclaimed: k == executortable.Pod}
			}
			ev := NewEvaluator(slog.New(slog.NewTextHandler(io.Discard, nil)), fixedTables{tables()},
				route(executortable.Go), route(executortable.Binary), route(executortable.Pod))
			resp, err := ev.EvaluateFunction(context.Background(), &evalwire.Request{Image: tt.image, ResourceList: evalwire.Bytes([]byte(resourceList))})
			assert.Equal(t, tt.asked, asked)
			if tt.code != codes.OK {
				require.Error(t, err)
				assert.Equal(t, tt.code, status.Code(err), "%v", err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, string(tt.from), string(resp.Log))
		})
	}
}

func TestNoTableIsNotSent(t *testing.T) {
	var asked []executortable.Kind
	ev := NewEvaluator(slog.New(slog.NewTextHandler(io.Discard, nil)), fixedTables{},
		Route{Kind: executortable.Go, Client: executor{kind: executortable.Go, asked: &asked}})
	_, err := ev.EvaluateFunction(context.Background(), &evalwire.Request{Image: "fn:v1", ResourceList: evalwire.Bytes([]byte(resourceList))})
	assert.Equal(t, codes.Unavailable, status.Code(err))
	assert.Contains(t, err.Error(), "config-reconciler")
	assert.Empty(t, asked)
}

// alternating answers its checks by turns: NOT_SERVING (a stopped replica's
// timeout), then SERVING (the other replica), as a round-robin connection
// over two replicas does.
type alternating struct{ n int }

func (a *alternating) Check(context.Context, *healthpb.HealthCheckRequest, ...grpc.CallOption) (*healthpb.HealthCheckResponse, error) {
	a.n++
	if a.n%2 == 1 {
		return nil, status.Error(codes.DeadlineExceeded, "stopped replica")
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// One route whose connection balances over a stopped and a serving replica
// keeps the gateway SERVING at every check.
func TestServingWithOneReplicaStopped(t *testing.T) {
	h := &alternating{}
	ev := NewEvaluator(slog.New(slog.NewTextHandler(io.Discard, nil)), fixedTables{tables()},
		Route{Kind: executortable.Binary, Client: executor{kind: executortable.Binary, asked: new([]executortable.Kind)}, Health: h})
	for range 6 {
		assert.True(t, ev.Serving(context.Background()), "NOT_SERVING with one replica of two stopped")
	}
}

// snapshotSeen answers with the snapshot its call was routed by.
type snapshotSeen struct{}

func (snapshotSeen) Evaluate(ctx context.Context, _ imagematch.Reference, _ *evalwire.Request) (*evalwire.Response, error) {
	md, _ := metadata.FromOutgoingContext(ctx)
	return &evalwire.Response{Log: []byte(strings.Join(md.Get(executortable.SnapshotHeader), ","))}, nil
}

// Each executor is told the snapshot the gateway routed the call by, so
// that it decides on the same FunctionConfigs or later ones.
func TestExecutorsAreToldTheSnapshot(t *testing.T) {
	tb := executortable.Build(&configpb.Snapshot{Epoch: "run-1", Version: 42, Functions: []*configpb.FunctionConfig{{
		Namespace: "ns", Name: "fn", Image: "fn", Prefixes: []string{""}, Pod: &configpb.PodExecutor{Tags: []string{"v1"}}}}})
	ev := NewEvaluator(slog.New(slog.NewTextHandler(io.Discard, nil)), fixedTables{tb}, Route{Kind: executortable.Pod, Client: snapshotSeen{}})
	resp, err := ev.EvaluateFunction(context.Background(), &evalwire.Request{Image: "fn:v1", ResourceList: evalwire.Bytes([]byte(resourceList))})
	require.NoError(t, err)
	assert.Equal(t, "42@run-1", string(resp.Log))
}

// outlasting is an executor whose function never finishes: it answers when
// its call's context ends, as a gRPC client does.
type outlasting struct{}

func (outlasting) Evaluate(ctx context.Context, _ imagematch.Reference, _ *evalwire.Request) (*evalwire.Response, error) {
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

// A call its executor does not finish within the caller's deadline is
// answered by the gateway before that deadline, naming the function, the
// deadline and the executor; the caller's own gRPC library would only say
// "context deadline exceeded". A call the caller cancels is not
// relabelled.
func TestDeadlineAnsweredBeforeTheCallers(t *testing.T) {
	ev := NewEvaluator(slog.New(slog.NewTextHandler(io.Discard, nil)), fixedTables{tables()}, Route{Kind: executortable.Binary, Client: outlasting{}})
	// A wide margin, so that a loaded machine cannot eat it.
	ev.margin = func(time.Duration) time.Duration { return 2 * time.Second }
	req := func() *evalwire.Request {
		return &evalwire.Request{Image: "fn:v1", ResourceList: evalwire.Bytes([]byte(resourceList))}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := ev.EvaluateFunction(ctx, req())
	assert.NoError(t, ctx.Err(), "the gateway answered only when the caller's deadline had passed")
	require.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
	assert.Regexp(t, `function "fn:v1": no answer from the binary executor within the call's deadline \([0-9.]+m?s\)`, status.Convert(err).Message())

	// Cancelled by the caller while it runs, its deadline still ahead.
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err = ev.EvaluateFunction(ctx, req())
	assert.Equal(t, codes.Canceled, status.Code(err), "%v", err)
}

func TestAnswerMargin(t *testing.T) {
	for _, tc := range []struct{ remaining, want time.Duration }{
		{60 * time.Second, time.Second},
		{4 * time.Second, 200 * time.Millisecond},
		{500 * time.Millisecond, 50 * time.Millisecond},
		{60 * time.Millisecond, 30 * time.Millisecond},
	} {
		assert.Equal(t, tc.want, answerMargin(tc.remaining), "margin of %v", tc.remaining)
	}
}

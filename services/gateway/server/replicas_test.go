package server

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/imagematch"
	"github.com/fnrunner/fnrunner/libs/sendonce"
)

// podManager stands in for a pod-manager replica behind a real gRPC server:
// it answers with its name in the log, or with answer.
type podManager struct {
	name   string
	answer error
	// hold, when set, keeps each call until the server stops.
	hold  bool
	calls atomic.Int32
}

func (p *podManager) EvaluateFunction(ctx context.Context, req *evalwire.Request) (*evalwire.Response, error) {
	p.calls.Add(1)
	if p.hold {
		<-ctx.Done()
	}
	if p.answer != nil {
		return nil, p.answer
	}
	return &evalwire.Response{Log: []byte(p.name)}, nil
}

// serve starts p on loopback and returns its address.
func serve(t *testing.T, p *podManager) (string, *grpc.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(evalwire.ServerCodec())
	evalwire.Register(srv, p)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), srv
}

// dial connects to a replica the way the gateway does: through sendonce's
// interceptor.
func dial(t *testing.T, addr string) Replica { return dialWaiting(t, addr, 200*time.Millisecond) }

// dialWaiting is dial with the gateway's --executor-connect-timeout.
func dialWaiting(t *testing.T, addr string, connectWait time.Duration) Replica {
	t.Helper()
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, sendonce.DialOptions(connectWait)...)
	conn, err := grpc.NewClient(addr, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return Replica{Address: addr, Client: Service{Client: evalwire.NewClient(conn)}}
}

func parse(t *testing.T, image string) imagematch.Reference {
	t.Helper()
	ref, err := imagematch.Parse(image, "")
	require.NoError(t, err)
	return ref
}

// fakeReplica answers in process, for the placement tests.
type fakeReplica struct{ name string }

func (f fakeReplica) Evaluate(context.Context, imagematch.Reference, *evalwire.Request) (*evalwire.Response, error) {
	return &evalwire.Response{Log: []byte(f.name)}, nil
}

func TestReplicasOwnFunctions(t *testing.T) {
	var rs Replicas
	for i := range 3 {
		name := fmt.Sprintf("pm-%d:9449", i)
		rs = append(rs, Replica{Address: name, Client: fakeReplica{name: name}})
	}
	owners := map[string]bool{}
	for i := range 30 {
		fn := fmt.Sprintf("example.com/fns/fn-%d", i)
		first, err := rs.Evaluate(context.Background(), parse(t, fn+":v1"), &evalwire.Request{})
		require.NoError(t, err)
		// Every tag and digest of a function goes to the same replica.
		for _, image := range []string{fn + ":v2", fn + "@sha256:" + fmt.Sprintf("%064d", i), fn} {
			again, err := rs.Evaluate(context.Background(), parse(t, image), &evalwire.Request{})
			require.NoError(t, err)
			assert.Equal(t, string(first.Log), string(again.Log), "%s and %s:v1 went to different replicas", image, fn)
		}
		owners[string(first.Log)] = true
	}
	assert.Len(t, owners, 3, "30 functions should use all 3 replicas")
}

// A short name and its full name are one function, so one replica owns both.
func TestReplicasKeyOnTheNormalizedImage(t *testing.T) {
	var rs Replicas
	for i := range 8 {
		rs = append(rs, Replica{Address: fmt.Sprintf("pm-%d:9449", i)})
	}
	short := rs.Order(parse(t, "set-namespace:v0.4.5"))[0]
	full := rs.Order(parse(t, imagematch.DefaultPrefix+"set-namespace:v0.4"))[0]
	assert.Equal(t, short.Address, full.Address)
}

// The owner is down: the real interceptor fails the call as not sent, and
// the call moves to the next replica, where it runs once.
func TestReplicaDownFailsOver(t *testing.T) {
	ref := parse(t, "example.com/fns/fn:v1")
	up := &podManager{name: "up"}
	upAddr, _ := serve(t, up)
	// Nothing listens on port 1: connections are refused.
	rs := Replicas{dial(t, "127.0.0.1:1"), dial(t, upAddr)}
	if rs.Order(ref)[0].Address != "127.0.0.1:1" {
		rs = Replicas{rs[1], rs[0]}
		ref = ownedBy(t, rs, "127.0.0.1:1")
	}
	resp, err := rs.Evaluate(context.Background(), ref, &evalwire.Request{Image: ref.String()})
	require.NoError(t, err)
	assert.Equal(t, "up", string(resp.Log))
	assert.EqualValues(t, 1, up.calls.Load())
}

// A replica whose connection attempts fail is passed over at once, not after
// the connect wait (a minute here): a caller with a short deadline still
// gets its answer from the next replica. The last replica is waited for.
func TestDownReplicaIsPassedOverWithoutWaiting(t *testing.T) {
	up := &podManager{name: "up"}
	upAddr, _ := serve(t, up)
	rs := Replicas{dialWaiting(t, "127.0.0.1:1", time.Minute), dialWaiting(t, upAddr, time.Minute)}
	ref := ownedBy(t, rs, "127.0.0.1:1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := rs.Evaluate(ctx, ref, &evalwire.Request{Image: ref.String()})
	require.NoError(t, err)
	assert.Equal(t, "up", string(resp.Log))
}

// ownedBy finds a function whose first replica is addr.
func ownedBy(t *testing.T, rs Replicas, addr string) imagematch.Reference {
	t.Helper()
	for i := range 100 {
		ref := parse(t, fmt.Sprintf("example.com/fns/fn-%d:v1", i))
		if rs.Order(ref)[0].Address == addr {
			return ref
		}
	}
	require.FailNow(t, "no function is owned by "+addr)
	return imagematch.Reference{}
}

// A replica that says it ran nothing (its own not-sent answer crosses the
// gRPC boundary as a status detail) passes the call on too.
func TestReplicaThatRanNothingFailsOver(t *testing.T) {
	empty := &podManager{name: "empty", answer: sendonce.NotSent("no executor table yet")}
	up := &podManager{name: "up"}
	emptyAddr, _ := serve(t, empty)
	upAddr, _ := serve(t, up)
	rs := Replicas{dial(t, emptyAddr), dial(t, upAddr)}
	ref := ownedBy(t, rs, emptyAddr)
	resp, err := rs.Evaluate(context.Background(), ref, &evalwire.Request{Image: ref.String()})
	require.NoError(t, err)
	assert.Equal(t, "up", string(resp.Log))
	assert.EqualValues(t, 1, empty.calls.Load())
	assert.EqualValues(t, 1, up.calls.Load())
}

// Any other answer is the owner's and is never passed on, whatever its
// message says; a call cut after it was sent is never sent again.
func TestOwnersAnswerIsFinal(t *testing.T) {
	tests := []struct {
		name  string
		owner *podManager
		cut   bool
		code  codes.Code
	}{
		{"unavailable whose text looks like a connection error", &podManager{answer: status.Error(codes.Unavailable, "connection error: connection refused")}, false, codes.Unavailable},
		{"function failed", &podManager{answer: status.Error(codes.Internal, "exit 1")}, false, codes.Internal},
		{"not found", &podManager{answer: status.Error(codes.NotFound, `function "x" not found`)}, false, codes.NotFound},
		{"took the call, failed before running it", &podManager{answer: sendonce.NotRun("registry down; the function was not run")}, false, codes.Unavailable},
		{"replica died mid-call", &podManager{hold: true}, true, codes.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			other := &podManager{name: "other"}
			ownerAddr, ownerSrv := serve(t, tt.owner)
			otherAddr, _ := serve(t, other)
			rs := Replicas{dial(t, ownerAddr), dial(t, otherAddr)}
			ref := ownedBy(t, rs, ownerAddr)
			if tt.cut {
				go func() {
					for tt.owner.calls.Load() == 0 {
						time.Sleep(10 * time.Millisecond)
					}
					ownerSrv.Stop()
				}()
			}
			_, err := rs.Evaluate(context.Background(), ref, &evalwire.Request{Image: ref.String()})
			require.Error(t, err)
			assert.Equal(t, tt.code, status.Code(err), "%v", err)
			assert.EqualValues(t, 1, tt.owner.calls.Load())
			assert.Zero(t, other.calls.Load(), "the owner's answer was passed on")
		})
	}
}

// No replica at all is an answer, never a nil response.
func TestNoReplicas(t *testing.T) {
	resp, err := Replicas(nil).Evaluate(context.Background(), parse(t, "fn:v1"), &evalwire.Request{})
	assert.Nil(t, resp)
	assert.Equal(t, codes.Unavailable, status.Code(err))
}

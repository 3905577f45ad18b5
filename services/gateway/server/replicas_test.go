package server

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/evalwire"
)

type fakeReplica struct {
	name  string
	err   error
	calls *[]string
}

func (f fakeReplica) EvaluateFunction(_ context.Context, req *evalwire.Request, _ ...grpc.CallOption) (*evalwire.Response, error) {
	*f.calls = append(*f.calls, f.name)
	if f.err != nil {
		return nil, f.err
	}
	return &evalwire.Response{Log: []byte(f.name)}, nil
}

func replicas(calls *[]string, down map[string]error) Replicas {
	var rs Replicas
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("pm-%d:9449", i)
		rs = append(rs, Replica{Address: name, Client: fakeReplica{name: name, err: down[name], calls: calls}})
	}
	return rs
}

func TestReplicasOwnFunctions(t *testing.T) {
	var calls []string
	rs := replicas(&calls, nil)
	owners := map[string]bool{}
	for i := 0; i < 30; i++ {
		fn := fmt.Sprintf("example.com/fns/fn-%d", i)
		first, _ := rs.EvaluateFunction(context.Background(), &evalwire.Request{Image: fn + ":v1"})
		// Every tag and digest of a function goes to the same replica.
		for _, image := range []string{fn + ":v2", fn + "@sha256:abc", fn} {
			again, _ := rs.EvaluateFunction(context.Background(), &evalwire.Request{Image: image})
			if string(again.Log) != string(first.Log) {
				t.Errorf("%s went to %s, %s:v1 to %s", image, again.Log, fn, first.Log)
			}
		}
		owners[string(first.Log)] = true
	}
	if len(owners) != 3 {
		t.Errorf("30 functions used %d of 3 replicas", len(owners))
	}
}

func TestReplicaDownMovesOnlyItsFunctions(t *testing.T) {
	var calls []string
	rs := replicas(&calls, nil)
	image := "example.com/fns/fn:v1"
	owner := rs.Order(image)[0].Address
	down := replicas(&calls, map[string]error{owner: status.Error(codes.Unavailable, "connection error: connection refused")})
	resp, err := down.EvaluateFunction(context.Background(), &evalwire.Request{Image: image})
	if err != nil || string(resp.Log) == owner {
		t.Errorf("with its owner down: %v %v", resp, err)
	}
	// An answer other than "unreachable" is the owner's, never passed on.
	failing := replicas(&calls, map[string]error{owner: status.Error(codes.Unavailable, "no pod: CrashLoopBackOff")})
	calls = nil
	if _, err := failing.EvaluateFunction(context.Background(), &evalwire.Request{Image: image}); status.Code(err) != codes.Unavailable || len(calls) != 1 {
		t.Errorf("owner's own failure: %v after calls %v", err, calls)
	}
}

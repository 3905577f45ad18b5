package server

import (
	"context"
	"errors"
	"hash/fnv"
	"sort"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/imagematch"
	"github.com/fnrunner/fnrunner/libs/sendonce"
)

// Replica is one pod-manager replica.
type Replica struct {
	Address string
	Client  Executor
	Health  HealthChecker
}

// Replicas spreads functions over pod-manager replicas by rendezvous
// hashing of the function (the normalized image without tag or digest):
// every gateway sends a function to the same replica, which alone owns its
// pods. When that replica did not take the call (a *sendonce.NotSentError:
// unreachable, or it ran nothing), the function moves to the next one in its
// order, so calls keep working while a replica restarts.
type Replicas []Replica

var (
	_ Executor      = Replicas(nil)
	_ HealthChecker = Replicas(nil)
)

// Order returns the replicas in the order calls for ref try them.
func (rs Replicas) Order(ref imagematch.Reference) []Replica {
	fn := ref.Repository()
	out := append(Replicas(nil), rs...)
	score := func(r Replica) uint64 {
		h := fnv.New64a()
		h.Write([]byte(fn))
		h.Write([]byte{0})
		h.Write([]byte(r.Address))
		return mix(h.Sum64())
	}
	sort.SliceStable(out, func(i, j int) bool { return score(out[i]) > score(out[j]) })
	return out
}

// mix is splitmix64's finalizer: it spreads FNV's output over all bits.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Evaluate implements Executor.
func (rs Replicas) Evaluate(ctx context.Context, ref imagematch.Reference, req *evalwire.Request) (*evalwire.Response, error) {
	err := sendonce.NotSent("no pod-manager replica to run %q", ref.String())
	order := rs.Order(ref)
	for i, r := range order {
		cctx := ctx
		if i < len(order)-1 {
			// Another replica can take the call: do not wait out a
			// replica whose connection attempts fail.
			cctx = sendonce.FailFast(ctx)
		}
		var resp *evalwire.Response
		resp, err = r.Client.Evaluate(cctx, ref, req)
		// Only a call the replica did not take moves on: any other answer
		// means it owns the function and answered (or may have run it).
		var notSent *sendonce.NotSentError
		if !errors.As(err, &notSent) || !notSent.Elsewhere() || ctx.Err() != nil {
			return resp, err
		}
	}
	return nil, err
}

// Check implements healthpb.HealthClient: SERVING when any replica is.
func (rs Replicas) Check(ctx context.Context, in *healthpb.HealthCheckRequest, opts ...grpc.CallOption) (*healthpb.HealthCheckResponse, error) {
	var err error
	for _, r := range rs {
		var resp *healthpb.HealthCheckResponse
		resp, err = r.Health.Check(ctx, in, opts...)
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return resp, nil
		}
	}
	if err != nil {
		return nil, err
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
}

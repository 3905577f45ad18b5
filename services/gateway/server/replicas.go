package server

import (
	"context"
	"hash/fnv"
	"sort"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/evalwire"
)

// Replica is one pod-manager replica.
type Replica struct {
	Address string
	Client  Executor
	Health  healthpb.HealthClient
}

// Replicas spreads functions over pod-manager replicas by rendezvous
// hashing of the function (image without tag or digest): every gateway sends
// a function to the same replica, which alone owns its pods. When that
// replica cannot be reached the function moves to the next one in its
// order, so calls keep working while a replica restarts.
type Replicas []Replica

// Order returns the replicas in the order image tries them.
func (rs Replicas) Order(image string) []Replica {
	fn := function(image)
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

// function strips the tag and digest from an image.
func function(image string) string {
	image, _, _ = strings.Cut(image, "@")
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		image = image[:i]
	}
	return image
}

// EvaluateFunction implements Executor.
func (rs Replicas) EvaluateFunction(ctx context.Context, req *evalwire.Request, opts ...grpc.CallOption) (*evalwire.Response, error) {
	var err error
	for _, r := range rs.Order(req.Image) {
		var resp *evalwire.Response
		resp, err = r.Client.EvaluateFunction(ctx, req, opts...)
		// Only a replica that could not be reached passes the call on: any
		// other answer means it owns the function and answered.
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil || !unreachable(err) {
			return resp, err
		}
	}
	return nil, err
}

// unreachable: the call never reached the replica (connection refused or
// closed), so nothing ran.
func unreachable(err error) bool {
	msg := status.Convert(err).Message()
	return strings.Contains(msg, "connection refused") || strings.Contains(msg, "connection error") || strings.Contains(msg, "no such host")
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

// List implements healthpb.HealthClient (unused by the gateway).
func (rs Replicas) List(ctx context.Context, in *healthpb.HealthListRequest, opts ...grpc.CallOption) (*healthpb.HealthListResponse, error) {
	return nil, status.Error(codes.Unimplemented, "not used")
}

// Watch implements healthpb.HealthClient (unused by the gateway).
func (rs Replicas) Watch(ctx context.Context, in *healthpb.HealthCheckRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[healthpb.HealthCheckResponse], error) {
	return nil, status.Error(codes.Unimplemented, "not used")
}

package server

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Conns.Serving asks a wrapper-server's health service on a connection of
// its own: SERVING is ready, anything else (NOT_SERVING, nothing listening)
// is not, and a closed port answers at once.
func TestServingAsksTheHealthService(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedAddr := closed.Addr().String()
	require.NoError(t, closed.Close())

	conns := NewConns(1 << 20)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	assert.ErrorContains(t, conns.Serving(ctx, lis.Addr().String()), "NOT_SERVING", "NOT_SERVING")
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	assert.NoError(t, conns.Serving(ctx, lis.Addr().String()), "SERVING")
	assert.Error(t, conns.Serving(ctx, closedAddr), "nothing listening")
}

package grpcserving_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fnrunner/fnrunner/libs/grpcserving"
)

// deadlineService answers how long its call may still run.
var deadlineService = grpc.ServiceDesc{
	ServiceName: "test.Deadline",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Left",
		Handler: func(_ any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			if err := dec(&emptypb.Empty{}); err != nil {
				return nil, err
			}
			left := func(ctx context.Context, _ any) (any, error) {
				d, ok := ctx.Deadline()
				if !ok {
					return wrapperspb.String("none"), nil
				}
				return wrapperspb.String(time.Until(d).Round(time.Hour).String()), nil
			}
			return interceptor(ctx, &emptypb.Empty{}, &grpc.UnaryServerInfo{FullMethod: "/test.Deadline/Left"}, left)
		},
	}},
}

// serve serves srv on a free loopback port until the test ends, and returns
// its address.
func serve(t *testing.T, srv *grpcserving.Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = srv.Serve(ctx, lis) }()
	return lis.Addr().String()
}

// A call without a deadline gets --max-call-duration; a caller's own
// deadline stays.
func TestMaxCallDurationIsTheDefaultDeadline(t *testing.T) {
	srv := grpcserving.New(slog.New(slog.NewTextHandler(io.Discard, nil)), grpcserving.Config{
		Name: "test", MaxMessageSize: 1 << 20, MaxCallDuration: 3 * time.Hour, MaxConcurrentStreams: 8,
	})
	srv.RegisterService(&deadlineService, struct{}{})
	conn, err := grpc.NewClient(serve(t, srv), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()

	var left wrapperspb.StringValue
	require.NoError(t, conn.Invoke(context.Background(), "/test.Deadline/Left", &emptypb.Empty{}, &left))
	assert.Equal(t, "3h0m0s", left.GetValue(), "no deadline: --max-call-duration")

	callCtx, callCancel := context.WithTimeout(context.Background(), 5*time.Hour)
	defer callCancel()
	require.NoError(t, conn.Invoke(callCtx, "/test.Deadline/Left", &emptypb.Empty{}, &left))
	assert.Equal(t, "5h0m0s", left.GetValue(), "the caller's deadline")
}

package grpcserving

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// rpcMetrics counts and times unary calls by method and status code.
type rpcMetrics struct {
	handled  *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newRPCMetrics(reg prometheus.Registerer) *rpcMetrics {
	m := &rpcMetrics{
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fnrunner_grpc_server_handled_total",
			Help: "gRPC calls completed by the server, by method and status code.",
		}, []string{"method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fnrunner_grpc_server_handling_seconds",
			Help:    "Time the server took to answer gRPC calls, by method.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"method"}),
	}
	reg.MustRegister(m.handled, m.duration)
	return m
}

func (m *rpcMetrics) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	m.duration.WithLabelValues(info.FullMethod).Observe(time.Since(start).Seconds())
	m.handled.WithLabelValues(info.FullMethod, status.Code(err).String()).Inc()
	return resp, err
}

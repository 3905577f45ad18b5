package grpcserving

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
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

// callLog logs the end of every call that did not succeed, and of every
// call at debug level, with the call's context: its request id and trace.
func callLog(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		level := slog.LevelDebug
		if err != nil {
			level = slog.LevelInfo
		}
		if log.Enabled(ctx, level) {
			attrs := []slog.Attr{slog.String("method", info.FullMethod), slog.String("code", status.Code(err).String()), slog.Duration("duration", time.Since(start))}
			if err != nil {
				attrs = append(attrs, slog.String("error", status.Convert(err).Message()))
			}
			log.LogAttrs(ctx, level, "call ended", attrs...)
		}
		return resp, err
	}
}

// firstWins gathers from each gatherer in turn and keeps a metric family
// only from the first that has it: controller-runtime's registry carries its
// own Go runtime and process collectors, as the service's does, and
// prometheus.Gatherers would fail the whole scrape (HTTP 500) on the
// duplicates.
type firstWins []prometheus.Gatherer

var _ prometheus.Gatherer = firstWins(nil)

func (g firstWins) Gather() ([]*dto.MetricFamily, error) {
	seen := map[string]bool{}
	var out []*dto.MetricFamily
	var errs []error
	for _, gatherer := range g {
		mfs, err := gatherer.Gather()
		if err != nil {
			errs = append(errs, err)
		}
		for _, mf := range mfs {
			if !seen[mf.GetName()] {
				seen[mf.GetName()] = true
				out = append(out, mf)
			}
		}
	}
	slices.SortFunc(out, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out, errors.Join(errs...)
}

package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/fnrunner/fnrunner/libs/telemetry"
)

// clearEnv unsets every variable Setup reads, for the test.
func clearEnv(t *testing.T) {
	for _, k := range []string{telemetry.EnvTracesExporter, telemetry.EnvMetricsExporter, telemetry.EnvPropagators,
		telemetry.EnvServiceName, telemetry.EnvOTLPEndpoint, telemetry.EnvOTLPTracesEndpoint,
		telemetry.EnvPrometheusHost, telemetry.EnvPrometheusPort} {
		t.Setenv(k, "")
	}
}

func TestSetup(t *testing.T) {
	for _, tc := range []struct {
		name            string
		env             map[string]string
		tracing         bool
		tracesExporter  string
		metricsExporter string
		prometheus      string
		wantErr         bool
	}{
		{name: "nothing set: off, no exporter"},
		{name: "porch's Deployment: prometheus metrics, no traces",
			env:             map[string]string{"OTEL_METRICS_EXPORTER": "prometheus", "OTEL_EXPORTER_PROMETHEUS_HOST": "0.0.0.0", "OTEL_EXPORTER_PROMETHEUS_PORT": "9464", "OTEL_TRACES_EXPORTER": "none"},
			metricsExporter: "prometheus", prometheus: "0.0.0.0:9464"},
		{name: "prometheus on its default address",
			env:             map[string]string{"OTEL_METRICS_EXPORTER": "prometheus"},
			metricsExporter: "prometheus", prometheus: "localhost:9464"},
		{name: "an OTLP endpoint alone turns traces and metrics on",
			env:     map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			tracing: true, tracesExporter: "otlp", metricsExporter: "otlp"},
		{name: "console traces",
			env:     map[string]string{"OTEL_TRACES_EXPORTER": "console"},
			tracing: true, tracesExporter: "console"},
		{name: "an unknown exporter is an error", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin-ish"}, wantErr: true},
		{name: "two exporters are an error", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp,console"}, wantErr: true},
		{name: "an unknown propagator is an error", env: map[string]string{"OTEL_PROPAGATORS": "tracecontext,nope"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			tel, err := telemetry.Setup(context.Background(), "test")
			if tc.wantErr {
				require.Error(t, err)
				assert.True(t, errors.Is(err, telemetry.ErrConfig), "%v", err)
				return
			}
			require.NoError(t, err)
			t.Cleanup(func() {
				// Nothing listens on the OTLP endpoint: flushing gives up.
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				defer cancel()
				_ = tel.Shutdown(ctx)
			})
			assert.Equal(t, tc.tracing, tel.Tracing)
			assert.Equal(t, tc.tracesExporter, tel.TracesExporter)
			assert.Equal(t, tc.metricsExporter, tel.MetricsExporter)
			assert.Equal(t, tc.prometheus, tel.PrometheusAddress)
			if !tc.tracing && tc.metricsExporter == "" {
				assert.Empty(t, tel.ServerOptions(), "off: no stats handler on the server")
				assert.Len(t, tel.DialOptions(), 1, "off: only the request id goes to the next hop")
			}
		})
	}
}

// A call's request id: the trace id when traced, else the previous hop's
// when well formed, else a new one.
func TestRequestID(t *testing.T) {
	traced := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x4b, 0xf9, 1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled}))
	incoming := func(id string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(telemetry.RequestIDHeader, id))
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want string // "" : a new random id
	}{
		{name: "traced", ctx: traced, want: "4bf90100000000000000000000000000"},
		{name: "from the previous hop", ctx: incoming("abc-123"), want: "abc-123"},
		{name: "malformed from the caller", ctx: incoming("a\nb")},
		{name: "too long from the caller", ctx: incoming(strings.Repeat("a", 65))},
		{name: "none", ctx: context.Background()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got string
			_, err := telemetry.UnaryServerInterceptor(tc.ctx, nil, &grpc.UnaryServerInfo{}, func(ctx context.Context, _ any) (any, error) {
				got = telemetry.RequestID(ctx)
				return nil, nil
			})
			require.NoError(t, err)
			if tc.want != "" {
				assert.Equal(t, tc.want, got)
				return
			}
			assert.Len(t, got, 32)
			assert.NotContains(t, got, "\n")
		})
	}
}

// A line logged with a call's context carries its ids; once each.
func TestLogHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(telemetry.LogHandler(slog.NewJSONHandler(&buf, nil))).With("service", "test")
	ctx := telemetry.WithRequestID(context.Background(), "id-1")
	log.InfoContext(ctx, "call ended", "code", "OK")
	log.Info("no call")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2)
	var first, second map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &first))
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &second))
	assert.Equal(t, "id-1", first[telemetry.LogKeyRequestID])
	assert.Equal(t, 1, strings.Count(lines[0], `"service"`))
	assert.NotContains(t, second, telemetry.LogKeyRequestID)
}

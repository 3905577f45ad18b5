// Package telemetry sets up a service's OpenTelemetry tracing and metrics
// from the environment variables porch's runner Deployment and templates
// already set (OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_*, OTEL_SERVICE_NAME,
// OTEL_PROPAGATORS, OTEL_METRICS_EXPORTER, OTEL_EXPORTER_PROMETHEUS_*), and
// gives the gRPC options that carry a trace across fnrunner's hops.
//
// Nothing global is set: every provider is handed to the gRPC stats
// handlers that use it, so two services in one process (tests) stay apart.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/propagators/autoprop"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// Environment variables read here (the OpenTelemetry specification's).
const (
	EnvTracesExporter      = "OTEL_TRACES_EXPORTER"
	EnvMetricsExporter     = "OTEL_METRICS_EXPORTER"
	EnvPropagators         = "OTEL_PROPAGATORS"
	EnvServiceName         = "OTEL_SERVICE_NAME"
	EnvOTLPEndpoint        = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvOTLPTracesEndpoint  = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvPrometheusHost      = "OTEL_EXPORTER_PROMETHEUS_HOST"
	EnvPrometheusPort      = "OTEL_EXPORTER_PROMETHEUS_PORT"
	defaultPrometheusHost  = "localhost"
	defaultPrometheusPort  = "9464"
	serviceNamePrefix      = "fnrunner-"
	prometheusExporterName = "prometheus"
)

// ErrConfig is wrapped by every error about the environment's settings.
var ErrConfig = errors.New("OpenTelemetry configuration")

// Telemetry is a service's tracing and metrics providers, as the
// environment configures them. The zero value is off: no spans, no
// exporter, no gRPC stats handlers.
type Telemetry struct {
	// Tracing says spans are recorded and exported.
	Tracing bool
	// TracesExporter is the exporter's name ("otlp", "console"), empty when
	// tracing is off.
	TracesExporter string
	// MetricsExporter is the OpenTelemetry metrics exporter's name, empty
	// when off. With "prometheus" the OpenTelemetry metrics go into the
	// service's Prometheus endpoint (Gatherer), served at
	// PrometheusAddress too.
	MetricsExporter string
	// PrometheusAddress is OTEL_EXPORTER_PROMETHEUS_HOST:PORT when
	// OTEL_METRICS_EXPORTER is prometheus: the address porch's runner
	// serves metrics on, so an operator's scrape keeps working.
	PrometheusAddress string

	registry       *prometheus.Registry
	tracerProvider trace.TracerProvider
	meterProvider  metric.MeterProvider
	propagator     propagation.TextMapPropagator
	shutdown       []func(context.Context) error
}

// Setup reads the environment and builds the providers of the service named
// service. The exporters' own libraries read their OTEL_EXPORTER_* settings
// themselves.
//
// OTEL_TRACES_EXPORTER unset means "none" unless an OTLP endpoint is set
// (OTEL_EXPORTER_OTLP_ENDPOINT or ..._TRACES_ENDPOINT), then "otlp": a
// runner nobody configured sends nothing anywhere. The same holds for
// OTEL_METRICS_EXPORTER.
func Setup(ctx context.Context, service string) (*Telemetry, error) {
	getenv := os.Getenv
	t := &Telemetry{}
	prop, err := propagator(getenv(EnvPropagators))
	if err != nil {
		return nil, err
	}
	t.propagator = prop

	res, err := serviceResource(ctx, service, getenv)
	if err != nil {
		return nil, err
	}
	if err := t.setupTraces(ctx, getenv, res); err != nil {
		return nil, err
	}
	if err := t.setupMetrics(ctx, getenv, res); err != nil {
		return nil, errors.Join(err, t.Shutdown(ctx))
	}
	return t, nil
}

func (t *Telemetry) setupTraces(ctx context.Context, getenv func(string) string, res *resource.Resource) error {
	name := exporterName(getenv(EnvTracesExporter), getenv(EnvOTLPEndpoint) != "" || getenv(EnvOTLPTracesEndpoint) != "")
	if name == "none" {
		return nil
	}
	if strings.Contains(name, ",") {
		return fmt.Errorf("%w: %s=%q: fnrunner exports traces to one exporter", ErrConfig, EnvTracesExporter, name)
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return fmt.Errorf("%w: %s=%q: %w", ErrConfig, EnvTracesExporter, name, err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	t.Tracing, t.TracesExporter, t.tracerProvider = true, name, tp
	t.shutdown = append(t.shutdown, tp.Shutdown)
	return nil
}

func (t *Telemetry) setupMetrics(ctx context.Context, getenv func(string) string, res *resource.Resource) error {
	name := exporterName(getenv(EnvMetricsExporter), getenv(EnvOTLPEndpoint) != "")
	var reader sdkmetric.Reader
	switch {
	case name == "none":
		return nil
	case strings.Contains(name, ","):
		return fmt.Errorf("%w: %s=%q: fnrunner exports metrics to one exporter", ErrConfig, EnvMetricsExporter, name)
	case name == prometheusExporterName:
		// Into a registry served beside the service's own, on
		// --metrics-address and on porch's Prometheus address.
		reg := prometheus.NewRegistry()
		exp, err := promexporter.New(promexporter.WithRegisterer(reg))
		if err != nil {
			return fmt.Errorf("%w: Prometheus exporter: %w", ErrConfig, err)
		}
		reader, t.registry = exp, reg
		t.PrometheusAddress = net.JoinHostPort(orDefault(getenv(EnvPrometheusHost), defaultPrometheusHost), orDefault(getenv(EnvPrometheusPort), defaultPrometheusPort))
	default:
		r, err := autoexport.NewMetricReader(ctx)
		if err != nil {
			return fmt.Errorf("%w: %s=%q: %w", ErrConfig, EnvMetricsExporter, name, err)
		}
		reader = r
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithResource(res))
	t.MetricsExporter, t.meterProvider = name, mp
	t.shutdown = append(t.shutdown, mp.Shutdown)
	return nil
}

// exporterName is the exporter an OTEL_*_EXPORTER value names, "none" when
// it is unset and no endpoint is configured.
func exporterName(value string, endpoint bool) string {
	value = strings.TrimSpace(value)
	if value == "" {
		if endpoint {
			return "otlp"
		}
		return "none"
	}
	return value
}

// propagator is OTEL_PROPAGATORS' propagator (tracecontext and baggage when
// unset); an unknown name is an error at start, not a silent default.
func propagator(value string) (propagation.TextMapPropagator, error) {
	if strings.TrimSpace(value) == "" {
		return autoprop.NewTextMapPropagator(), nil
	}
	var names []string
	for _, n := range strings.Split(value, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	p, err := autoprop.TextMapPropagator(names...)
	if err != nil {
		return nil, fmt.Errorf("%w: %s=%q: %w", ErrConfig, EnvPropagators, value, err)
	}
	return p, nil
}

// serviceResource names the service: OTEL_SERVICE_NAME (porch's Deployment
// sets porch-function-runner) or fnrunner-<service>, with
// OTEL_RESOURCE_ATTRIBUTES.
func serviceResource(ctx context.Context, service string, getenv func(string) string) (*resource.Resource, error) {
	name := getenv(EnvServiceName)
	if name == "" {
		name = serviceNamePrefix + service
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(name)))
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("%w: resource: %w", ErrConfig, err)
	}
	return res, nil
}

func orDefault(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

// TracerProvider is the service's tracer provider (a no-op one when
// tracing is off).
func (t *Telemetry) TracerProvider() trace.TracerProvider {
	if t == nil || t.tracerProvider == nil {
		return tracenoop.NewTracerProvider()
	}
	return t.tracerProvider
}

// MeterProvider is the service's OpenTelemetry meter provider (no-op when
// metrics export is off).
func (t *Telemetry) MeterProvider() metric.MeterProvider {
	if t == nil || t.meterProvider == nil {
		return metricnoop.NewMeterProvider()
	}
	return t.meterProvider
}

// Gatherer gathers the OpenTelemetry metrics exported to Prometheus (none
// unless OTEL_METRICS_EXPORTER is prometheus).
func (t *Telemetry) Gatherer() prometheus.Gatherer {
	if t == nil || t.registry == nil {
		return prometheus.Gatherers{}
	}
	return t.registry
}

// Propagator is the service's text map propagator.
func (t *Telemetry) Propagator() propagation.TextMapPropagator {
	if t == nil || t.propagator == nil {
		return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}
	return t.propagator
}

func (t *Telemetry) on() bool {
	return t != nil && (t.tracerProvider != nil || t.meterProvider != nil)
}

func (t *Telemetry) options() []otelgrpc.Option {
	return []otelgrpc.Option{
		otelgrpc.WithTracerProvider(t.TracerProvider()),
		otelgrpc.WithMeterProvider(t.MeterProvider()),
		otelgrpc.WithPropagators(t.Propagator()),
	}
}

// ServerOptions are the gRPC server options that continue a caller's trace
// (none when telemetry is off). UnaryServerInterceptor goes with them.
func (t *Telemetry) ServerOptions() []grpc.ServerOption {
	if !t.on() {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(t.options()...))}
}

// DialOptions are the gRPC dial options that carry the call's request id
// and (when telemetry is on) its trace to the next hop.
func (t *Telemetry) DialOptions() []grpc.DialOption {
	opts := []grpc.DialOption{grpc.WithChainUnaryInterceptor(UnaryClientInterceptor)}
	if t.on() {
		opts = append(opts, grpc.WithStatsHandler(otelgrpc.NewClientHandler(t.options()...)))
	}
	return opts
}

// Shutdown flushes and stops the exporters.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	var errs []error
	for _, f := range t.shutdown {
		errs = append(errs, f(ctx))
	}
	return errors.Join(errs...)
}

// instrumentationName names fnrunner's own spans' tracer.
const instrumentationName = "github.com/fnrunner/fnrunner"

// Start starts a span named name under ctx's span, with the tracer of the
// provider that made ctx's span: a no-op when the call is not traced, so
// code deep in a service needs no provider handed down.
func Start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return trace.SpanFromContext(ctx).TracerProvider().Tracer(instrumentationName).Start(ctx, name, trace.WithAttributes(attrs...))
}

// Attribute keys of fnrunner's spans.
const (
	AttrImage          = attribute.Key("fnrunner.image")
	AttrExecutor       = attribute.Key("fnrunner.executor")
	AttrTableVersion   = attribute.Key("fnrunner.table.version")
	AttrNotFound       = attribute.Key("fnrunner.not_found")
	AttrWeight         = attribute.Key("fnrunner.admission.weight")
	AttrPod            = attribute.Key("fnrunner.pod.name")
	AttrPodCold        = attribute.Key("fnrunner.pod.cold")
	AttrPodReadySecs   = attribute.Key("fnrunner.pod.ready_seconds")
	AttrCache          = attribute.Key("fnrunner.image.cache")
	AttrRegistrySecs   = attribute.Key("fnrunner.registry.seconds")
	AttrExitCode       = attribute.Key("fnrunner.function.exit_code")
	AttrBytesIn        = attribute.Key("fnrunner.function.bytes_in")
	AttrBytesOut       = attribute.Key("fnrunner.function.bytes_out")
	AttrSandboxLayers  = attribute.Key("fnrunner.sandbox.layers")
	AttrPrestarted     = attribute.Key("fnrunner.function.prestarted")
	AttrGRPCStatusCode = attribute.Key("rpc.grpc.status_code")
)

// End ends span, recording err (with its gRPC code) when there is one.
func End(span trace.Span, err error) {
	if err != nil {
		st := status.Convert(err)
		span.SetAttributes(AttrGRPCStatusCode.Int(int(st.Code())))
		span.SetStatus(otelcodes.Error, st.Message())
	}
	span.End()
}

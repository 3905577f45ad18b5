// Package tracesink is an OTLP/gRPC trace receiver on loopback for tests:
// services started by a test export their spans to it (OTEL_EXPORTER_OTLP_*
// pointing at Address), and the test reads them back.
package tracesink

import (
	"context"
	"encoding/hex"
	"net"
	"strconv"
	"sync"
	"testing"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
)

// Span is one received span, flattened.
type Span struct {
	// Service is the exporting service's service.name.
	Service string
	Name    string
	// TraceID, SpanID and ParentID are hex; ParentID is "" for a root.
	TraceID, SpanID, ParentID string
	// Attributes are the span's attributes as strings.
	Attributes map[string]string
}

// Sink receives spans.
type Sink struct {
	// Address is the receiver's host:port.
	Address string
	srv     *grpc.Server
	mu      sync.Mutex
	spans   []Span
	exports int
}

// Start starts a receiver that stops when the test ends.
func Start(t testing.TB) *Sink {
	t.Helper()
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// New starts a receiver on loopback; Close stops it.
func New() (*Sink, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Sink{Address: lis.Addr().String(), srv: grpc.NewServer()}
	collectorpb.RegisterTraceServiceServer(s.srv, &receiver{sink: s})
	go func() { _ = s.srv.Serve(lis) }()
	return s, nil
}

// Close stops the receiver.
func (s *Sink) Close() { s.srv.Stop() }

// Spans are the spans received so far.
func (s *Sink) Spans() []Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Span(nil), s.spans...)
}

// Exports is how many export requests arrived (empty ones included).
func (s *Sink) Exports() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exports
}

// Trace is the spans of the trace with the hex id id.
func (s *Sink) Trace(id string) []Span {
	var out []Span
	for _, sp := range s.Spans() {
		if sp.TraceID == id {
			out = append(out, sp)
		}
	}
	return out
}

type receiver struct {
	collectorpb.UnimplementedTraceServiceServer
	sink *Sink
}

func (r *receiver) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	var spans []Span
	for _, rs := range req.GetResourceSpans() {
		service := attributes(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				spans = append(spans, Span{
					Service:    service,
					Name:       sp.GetName(),
					TraceID:    hex.EncodeToString(sp.GetTraceId()),
					SpanID:     hex.EncodeToString(sp.GetSpanId()),
					ParentID:   hex.EncodeToString(sp.GetParentSpanId()),
					Attributes: attributes(sp.GetAttributes()),
				})
			}
		}
	}
	r.sink.mu.Lock()
	defer r.sink.mu.Unlock()
	r.sink.spans = append(r.sink.spans, spans...)
	r.sink.exports++
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

// attributes renders OTLP attributes as strings (a list as "[a b]").
func attributes(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = anyValue(kv.GetValue())
	}
	return m
}

func anyValue(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	case *commonpb.AnyValue_ArrayValue:
		s := "["
		for i, e := range x.ArrayValue.GetValues() {
			if i > 0 {
				s += " "
			}
			s += anyValue(e)
		}
		return s + "]"
	case nil:
		return ""
	default:
		return v.String()
	}
}

// Setenv makes every service the test starts from now on export its spans
// to the sink over OTLP/gRPC (as porch's Deployment configures its runner
// through OTEL_* variables), soon after each call ends.
func (s *Sink) Setenv(t *testing.T) {
	t.Helper()
	for k, v := range s.Env() {
		t.Setenv(k, v)
	}
}

// Env is the environment that points a service's traces at the sink.
func (s *Sink) Env() map[string]string {
	return map[string]string{
		"OTEL_TRACES_EXPORTER":        "otlp",
		"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + s.Address,
		"OTEL_BSP_SCHEDULE_DELAY":     "100", // ms
		"OTEL_METRICS_EXPORTER":       "none",
	}
}

// Find is the span of service named name, with parent parent when that is
// not empty; nil if there is none.
func Find(spans []Span, service, name, parent string) *Span {
	for i, sp := range spans {
		if sp.Service == service && sp.Name == name && (parent == "" || sp.ParentID == parent) {
			return &spans[i]
		}
	}
	return nil
}

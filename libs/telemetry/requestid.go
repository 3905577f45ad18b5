package telemetry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// RequestIDHeader is the gRPC metadata key of a call's request id: sent back
// to the caller in the response header, and passed on to the next hop so
// every service logs a call under one id. With tracing on it is the trace
// id.
const RequestIDHeader = "fnrunner-request-id"

// Log attribute keys a call's log lines carry.
const (
	LogKeyRequestID = "request_id"
	LogKeyTraceID   = "trace_id"
	LogKeySpanID    = "span_id"
)

// maxRequestIDLen bounds a request id taken from a caller.
const maxRequestIDLen = 64

type requestIDKey struct{}

// WithRequestID returns ctx carrying the request id id.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID is ctx's request id, "" if it has none.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// requestID is a call's id: the trace id when the call is traced, else the
// one the previous hop sent (when it is well formed), else a new one.
func requestID(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		return sc.TraceID().String()
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(RequestIDHeader); len(v) == 1 && validRequestID(v[0]) {
			return v[0]
		}
	}
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	return hex.EncodeToString(b[:])
}

// validRequestID accepts ids of letters, digits and '-', at most
// maxRequestIDLen long: what a log line and a header can carry as is.
func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLen {
		return false
	}
	for _, c := range id {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-':
		default:
			return false
		}
	}
	return true
}

// UnaryServerInterceptor gives every call a request id in its context and
// returns it to the caller in the response header (and, for a call that
// fails, the trailer).
func UnaryServerInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	id := requestID(ctx)
	// In the header for the caller that reads it early, in the trailer for
	// an answer that is only a status (a trailers-only response).
	_ = grpc.SetHeader(ctx, metadata.Pairs(RequestIDHeader, id)) // fails only once headers are sent
	resp, err := handler(WithRequestID(ctx, id), req)
	if err != nil {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(RequestIDHeader, id))
	}
	return resp, err
}

// UnaryClientInterceptor passes the call's request id on to the next hop.
func UnaryClientInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if id := RequestID(ctx); id != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, RequestIDHeader, id)
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// LogHandler adds a call's request id, trace id and span id to every record
// logged with the call's context (slog's *Context methods).
func LogHandler(h slog.Handler) slog.Handler { return logHandler{h} }

type logHandler struct{ slog.Handler }

var _ slog.Handler = logHandler{}

func (h logHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := RequestID(ctx); id != "" {
		r.AddAttrs(slog.String(LogKeyRequestID, id))
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String(LogKeyTraceID, sc.TraceID().String()), slog.String(LogKeySpanID, sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return logHandler{h.Handler.WithAttrs(attrs)}
}

func (h logHandler) WithGroup(name string) slog.Handler {
	return logHandler{h.Handler.WithGroup(name)}
}

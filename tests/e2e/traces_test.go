package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/fnrunner/fnrunner/protos/evaluator"
	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tests/stack"
	"github.com/fnrunner/fnrunner/tests/tracesink"
)

// The method every hop serves and calls: its spans (server and client) are
// named after it.
const evaluateSpan = "evaluator.FunctionEvaluator/EvaluateFunction"

// porchTraceparent is what porch-server's otelgrpc client sends: W3C trace
// context for a sampled span of porch's.
const (
	porchTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	porchSpanID  = "00f067aa0ba902b7"
)

// callAsPorch calls the gateway with porch's trace context and returns the
// request id the gateway answered with.
func callAsPorch(t *testing.T, s *stack.Stack, image string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+porchTraceID+"-"+porchSpanID+"-01")
	var header, trailer metadata.MD
	_, err := s.Client().EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: image, ResourceList: []byte(stack.Input)},
		grpc.Header(&header), grpc.Trailer(&trailer))
	ids := append(header.Get("fnrunner-request-id"), trailer.Get("fnrunner-request-id")...)
	require.NotEmpty(t, ids, "no request id in the answer's metadata")
	return ids[0], err
}

// waitForSpans waits until porch's trace holds the gateway's server span
// (the child of porch's) and a span of each service named in want
// ("service name"), and returns the whole trace.
func waitForSpans(t *testing.T, sink *tracesink.Sink, want ...string) []tracesink.Span {
	t.Helper()
	var spans []tracesink.Span
	err := harness.Poll(30*time.Second, 50*time.Millisecond, func() error {
		spans = sink.Trace(porchTraceID)
		if tracesink.Find(spans, "fnrunner-gateway", evaluateSpan, porchSpanID) == nil {
			return fmt.Errorf("no gateway server span under porch's span")
		}
		for _, w := range want {
			service, name, _ := strings.Cut(w, " ")
			if tracesink.Find(spans, service, name, "") == nil {
				return fmt.Errorf("no span %q of %s in porch's trace", name, service)
			}
		}
		return nil
	})
	require.NoError(t, err, "spans received: %+v", sink.Spans())
	return spans
}

// One call from a porch-like client carrying a traceparent, through the
// gateway to the binary-runner (go and binary executors): one trace, each
// hop's span the child of the one before, with the routing decision and
// the function run on them; the request id is the trace id and is in the
// services' log lines about the call.
func TestTraceContinuesFromPorchThroughTheBinaryRunner(t *testing.T) {
	sink := tracesink.Start(t)
	sink.Setenv(t)
	s := stack.Start(t, stack.Options{GatewayArgs: []string{"--log-level=INFO"}, BinaryRunnerArgs: []string{"--log-level=INFO"},
		Configs: map[string]string{"test-functions.yaml": testFunctions}})

	id, err := callAsPorch(t, s, "set-namespace:v0.4.5")
	require.NoError(t, err)
	assert.Equal(t, porchTraceID, id, "the request id is the trace id")

	spans := waitForSpans(t, sink, "fnrunner-binary-runner "+evaluateSpan, "fnrunner-binary-runner function")
	gw := tracesink.Find(spans, "fnrunner-gateway", evaluateSpan, porchSpanID)
	require.NotNil(t, gw, "the gateway's server span is the child of porch's: %+v", spans)
	assert.Equal(t, "go", gw.Attributes["fnrunner.executor"], "routing decision on the gateway's span")
	assert.NotEmpty(t, gw.Attributes["fnrunner.table.version"])
	assert.NotNil(t, tracesink.Find(spans, "fnrunner-gateway", "admission", gw.SpanID), "admission wait under the gateway's span")
	client := tracesink.Find(spans, "fnrunner-gateway", evaluateSpan, gw.SpanID)
	require.NotNil(t, client, "the gateway's client span to the executor: %+v", spans)
	runner := tracesink.Find(spans, "fnrunner-binary-runner", evaluateSpan, client.SpanID)
	require.NotNil(t, runner, "the binary-runner's server span is the child of the gateway's call: %+v", spans)
	fn := tracesink.Find(spans, "fnrunner-binary-runner", "function", runner.SpanID)
	require.NotNil(t, fn, "the function run under the binary-runner's span: %+v", spans)
	assert.NotEmpty(t, fn.Attributes["fnrunner.function.bytes_in"])
	assert.Equal(t, "0", fn.Attributes["fnrunner.function.exit_code"])

	// A call that fails: its log lines carry the id the caller got back.
	id, err = callAsPorch(t, s, "example.com/no-such-function:v1")
	require.Equal(t, codes.NotFound, status.Code(err))
	require.NoError(t, harness.Poll(10*time.Second, 50*time.Millisecond, func() error {
		if !strings.Contains(s.Log("gateway"), `"request_id":"`+id+`"`) {
			return fmt.Errorf("no gateway log line with request id %s", id)
		}
		return nil
	}), "gateway log:\n%s", s.Log("gateway"))
	// One that fails in the binary-runner (a function that exits 1): the
	// binary-runner's line about it carries the same id.
	id, err = callAsPorch(t, s, "example.com/test/crash:v1")
	require.Equal(t, codes.Internal, status.Code(err), "%v", err)
	require.NoError(t, harness.Poll(10*time.Second, 50*time.Millisecond, func() error {
		if !strings.Contains(s.Log("binary-runner"), `"request_id":"`+id+`"`) {
			return fmt.Errorf("no binary-runner log line with request id %s", id)
		}
		return nil
	}), "binary-runner log:\n%s", s.Log("binary-runner"))

	for _, name := range []string{"gateway", "binary-runner", "config-reconciler"} {
		assertNoDuplicateKeys(t, name, s.Log(name))
	}
}

// The binary executor's run is traced too, with the sandbox layers it ran
// under.
func TestTraceOfTheBinaryExecutor(t *testing.T) {
	sink := tracesink.Start(t)
	sink.Setenv(t)
	s := stack.Start(t, stack.Options{GatewayArgs: []string{"--disable-runtimes=go"}})
	_, err := callAsPorch(t, s, "set-namespace:v0.4.5")
	require.NoError(t, err)
	spans := waitForSpans(t, sink, "fnrunner-binary-runner "+evaluateSpan, "fnrunner-binary-runner function")
	gw := tracesink.Find(spans, "fnrunner-gateway", evaluateSpan, porchSpanID)
	require.NotNil(t, gw, "%+v", spans)
	assert.Equal(t, "binary", gw.Attributes["fnrunner.executor"])
	assert.Equal(t, "[]", gw.Attributes["fnrunner.not_found"], "the go executor is off: no executor was asked before")
	fn := tracesink.Find(spans, "fnrunner-binary-runner", "function", "")
	assert.Contains(t, fn.Attributes, "fnrunner.sandbox.layers")
}

// Tracing off (porch's manifests set OTEL_TRACES_EXPORTER=none): nothing is
// exported even with an endpoint configured, and calls still get a request
// id of their own.
func TestTracingOff(t *testing.T) {
	sink := tracesink.Start(t)
	sink.Setenv(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	s := stack.Start(t, stack.Options{})
	id, err := callAsPorch(t, s, "set-namespace:v0.4.5")
	require.NoError(t, err)
	assert.NotEqual(t, porchTraceID, id, "no trace: the request id is the gateway's own")
	assert.Len(t, id, 32)
	require.NoError(t, s.StopService("gateway", 30*time.Second))
	require.NoError(t, s.StopService("binary-runner", 30*time.Second))
	assert.Zero(t, sink.Exports(), "spans were exported with tracing off: %+v", sink.Spans())
}

// assertNoDuplicateKeys fails on a JSON log line with a key twice.
func assertNoDuplicateKeys(t *testing.T, service, log string) {
	t.Helper()
	assert.Empty(t, harness.DuplicateKeys(log), "%s logs a key twice", service)
}

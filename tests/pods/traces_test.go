package pods_test

import (
	"context"
	"fmt"
	"strconv"
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
	"github.com/fnrunner/fnrunner/tests/tracesink"
)

// One call from a porch-like client carrying a traceparent, through the
// gateway, the pod-manager and the wrapper-server of a pod the call starts:
// one trace, each hop's server span the child of the previous hop's client
// span, with the image lookup, the pod acquisition and the function run.
func TestTraceThroughThePodPath(t *testing.T) {
	const traceID, porchSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	const evaluate = "evaluator.FunctionEvaluator/EvaluateFunction"
	sink := tracesink.Start(t)
	sink.Setenv(t)
	// INFO: each service logs every call that failed.
	f := startLogging(t, "INFO")

	ctx, cancel := context.WithTimeout(context.Background(), harness.Wait)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+traceID+"-"+porchSpan+"-01")
	var header metadata.MD
	_, err := f.gateway.EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: f.host + "/fns/traced:v1", ResourceList: []byte(input)}, grpc.Header(&header))
	require.NoError(t, err)
	assert.Equal(t, []string{traceID}, header.Get("fnrunner-request-id"), "the request id is porch's trace id")

	var spans []tracesink.Span
	require.NoError(t, harness.Poll(30*time.Second, 50*time.Millisecond, func() error {
		spans = sink.Trace(traceID)
		for _, w := range [][2]string{{"fnrunner-gateway", evaluate}, {"fnrunner-pod-manager", evaluate}, {"fnrunner-wrapper-server", evaluate}, {"fnrunner-wrapper-server", "function"}} {
			if tracesink.Find(spans, w[0], w[1], "") == nil {
				return fmt.Errorf("no span %q of %s yet", w[1], w[0])
			}
		}
		if tracesink.Find(spans, "fnrunner-gateway", evaluate, porchSpan) == nil {
			return fmt.Errorf("no gateway server span yet")
		}
		return nil
	}), "spans: %+v", sink.Spans())

	gw := tracesink.Find(spans, "fnrunner-gateway", evaluate, porchSpan)
	assert.Equal(t, "pod", gw.Attributes["fnrunner.executor"])
	toPM := tracesink.Find(spans, "fnrunner-gateway", evaluate, gw.SpanID)
	require.NotNil(t, toPM, "the gateway's call to the pod-manager: %+v", spans)
	pm := tracesink.Find(spans, "fnrunner-pod-manager", evaluate, toPM.SpanID)
	require.NotNil(t, pm, "the pod-manager's span under the gateway's call: %+v", spans)
	lookup := tracesink.Find(spans, "fnrunner-pod-manager", "image metadata", pm.SpanID)
	require.NotNil(t, lookup, "image lookup under the pod-manager's span: %+v", spans)
	assert.Equal(t, "miss", lookup.Attributes["fnrunner.image.cache"], "the first lookup asks the registry")
	assert.NotEmpty(t, lookup.Attributes["fnrunner.registry.seconds"])
	acquire := tracesink.Find(spans, "fnrunner-pod-manager", "pod acquire", pm.SpanID)
	require.NotNil(t, acquire, "pod acquisition under the pod-manager's span: %+v", spans)
	assert.NotEmpty(t, acquire.Attributes["fnrunner.pod.name"])
	assert.Equal(t, "true", acquire.Attributes["fnrunner.pod.cold"], "the first call waits for its pod to start")
	ready, err := strconv.ParseFloat(acquire.Attributes["fnrunner.pod.ready_seconds"], 64)
	assert.NoError(t, err, "the cold pod's time to ready: %v", acquire.Attributes)
	assert.Positive(t, ready, "the cold pod's time to ready")
	toPod := tracesink.Find(spans, "fnrunner-pod-manager", evaluate, pm.SpanID)
	require.NotNil(t, toPod, "the pod-manager's call to the pod: %+v", spans)
	wrapper := tracesink.Find(spans, "fnrunner-wrapper-server", evaluate, toPod.SpanID)
	require.NotNil(t, wrapper, "the wrapper-server's span under the pod-manager's call: %+v", spans)
	fn := tracesink.Find(spans, "fnrunner-wrapper-server", "function", wrapper.SpanID)
	require.NotNil(t, fn, "the function run in the pod: %+v", spans)
	assert.Equal(t, "0", fn.Attributes["fnrunner.function.exit_code"])
	assert.NotEmpty(t, fn.Attributes["fnrunner.function.bytes_out"])

	// The next call finds the pod warm and the image's metadata cached.
	warm := traced(t, f, sink, "1af7651916cd43dd8448eb211c80319c", f.host+"/fns/traced:v1", codes.OK)
	acquire = tracesink.Find(warm, "fnrunner-pod-manager", "pod acquire", "")
	require.NotNil(t, acquire, "pod acquisition of the warm call: %+v", warm)
	assert.Equal(t, "false", acquire.Attributes["fnrunner.pod.cold"])
	assert.NotContains(t, acquire.Attributes, "fnrunner.pod.ready_seconds", "a warm call waited for no pod")
	lookup = tracesink.Find(warm, "fnrunner-pod-manager", "image metadata", "")
	require.NotNil(t, lookup, "image lookup of the warm call: %+v", warm)
	assert.Equal(t, "hit", lookup.Attributes["fnrunner.image.cache"])

	// A call that fails: an image its registry does not have. The gateway
	// asked the pod executor, which answered NotFound; its span and the
	// pod-manager's carry the code.
	failed := traced(t, f, sink, "2af7651916cd43dd8448eb211c80319c", f.host+"/fns/no-such-function:v1", codes.NotFound)
	gw = tracesink.Find(failed, "fnrunner-gateway", evaluate, porchSpan)
	require.NotNil(t, gw, "the gateway's server span of the failed call: %+v", failed)
	assert.Equal(t, "none", gw.Attributes["fnrunner.executor"], "no executor had the function")
	assert.Equal(t, "[pod]", gw.Attributes["fnrunner.not_found"], "the executors that answered NotFound")
	assert.Equal(t, "NOT_FOUND", gw.Attributes["rpc.response.status_code"], "otelgrpc's record of the answer")
	lookup = tracesink.Find(failed, "fnrunner-pod-manager", "image metadata", "")
	require.NotNil(t, lookup, "image lookup of the failed call: %+v", failed)
	assert.Equal(t, strconv.Itoa(int(codes.NotFound)), lookup.Attributes["rpc.grpc.status_code"], "the lookup's error code")

	// The pod-manager logs the failed call with its id (porch's trace id),
	// and no JSON line of its log has a key twice.
	harness.WaitFor(t, "the pod-manager's log line of the failed call", func() bool {
		return strings.Contains(f.stack.Log("pod-manager"), `"request_id":"2af7651916cd43dd8448eb211c80319c"`)
	}, f.log("pod-manager"))
	assert.Empty(t, harness.DuplicateKeys(f.stack.Log("pod-manager")), "pod-manager logs a key twice")
}

// traced calls image through the gateway with porch's trace context under
// traceID and returns the trace once the gateway's server span is in.
func traced(t *testing.T, f *fixture, sink *tracesink.Sink, traceID, image string, want codes.Code) []tracesink.Span {
	t.Helper()
	const porchSpan = "b7ad6b7169203331"
	ctx, cancel := context.WithTimeout(context.Background(), harness.Wait)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+traceID+"-"+porchSpan+"-01")
	_, err := f.gateway.EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: image, ResourceList: []byte(input)})
	require.Equal(t, want, status.Code(err), "%s: %v", image, err)
	var spans []tracesink.Span
	require.NoError(t, harness.Poll(30*time.Second, 50*time.Millisecond, func() error {
		spans = sink.Trace(traceID)
		if tracesink.Find(spans, "fnrunner-gateway", "evaluator.FunctionEvaluator/EvaluateFunction", porchSpan) == nil ||
			tracesink.Find(spans, "fnrunner-pod-manager", "image metadata", "") == nil ||
			tracesink.Find(spans, "fnrunner-pod-manager", "pod acquire", "") == nil && want == codes.OK {
			return fmt.Errorf("trace %s not complete yet", traceID)
		}
		return nil
	}))
	return spans
}

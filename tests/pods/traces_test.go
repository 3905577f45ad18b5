package pods_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

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
	f := start(t)

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
	toPod := tracesink.Find(spans, "fnrunner-pod-manager", evaluate, pm.SpanID)
	require.NotNil(t, toPod, "the pod-manager's call to the pod: %+v", spans)
	wrapper := tracesink.Find(spans, "fnrunner-wrapper-server", evaluate, toPod.SpanID)
	require.NotNil(t, wrapper, "the wrapper-server's span under the pod-manager's call: %+v", spans)
	fn := tracesink.Find(spans, "fnrunner-wrapper-server", "function", wrapper.SpanID)
	require.NotNil(t, fn, "the function run in the pod: %+v", spans)
	assert.Equal(t, "0", fn.Attributes["fnrunner.function.exit_code"])
}

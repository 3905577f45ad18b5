package evalmetrics

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/evalwire"
)

// names names the images in it, by themselves.
type names map[string]bool

func (n names) FunctionName(image string) (string, bool) { return image, n[image] }

// answer is an evaluator that sets executor (if any) and answers out or err.
type answer struct {
	executor string
	out      string
	err      error
	image    string // the image it leaves in the request, if any
}

func (a answer) EvaluateFunction(ctx context.Context, req *evalwire.Request) (*evalwire.Response, error) {
	defer req.Free()
	if a.executor != "" {
		SetExecutor(ctx, a.executor)
	}
	if a.image != "" {
		req.Image, req.Tag = a.image, ""
	}
	if a.err != nil {
		return nil, a.err
	}
	return &evalwire.Response{ResourceList: evalwire.Bytes([]byte(a.out))}, nil
}

func newMetrics(t *testing.T, n Namer) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	m, err := New(reg, n)
	require.NoError(t, err)
	return m, reg
}

func request(image, tag, rl string) *evalwire.Request {
	return &evalwire.Request{Image: image, Tag: tag, ResourceList: evalwire.Bytes([]byte(rl))}
}

func TestEvaluatorRecordsEachCall(t *testing.T) {
	tests := []struct {
		name               string
		next               answer
		image, tag         string
		executor, function string
		code               string
		out                float64
	}{
		{name: "answered by the default executor", next: answer{out: "abcd"}, image: "fn:v1",
			executor: "pod", function: "fn:v1", code: "OK", out: 4},
		{name: "the executor the evaluator inside names", next: answer{executor: "go", out: "ab"}, image: "fn:v1",
			executor: "go", function: "fn:v1", code: "OK", out: 2},
		{name: "an error: no output", next: answer{executor: "binary", err: status.Error(codes.DeadlineExceeded, "slow")}, image: "fn:v1",
			executor: "binary", function: "fn:v1", code: "DeadlineExceeded"},
		{name: "a plain error is Unknown", next: answer{err: errors.New("boom")}, image: "fn:v1",
			executor: "pod", function: "fn:v1", code: "Unknown"},
		{name: "an image the namer does not name", next: answer{}, image: "made-up:v9",
			executor: "pod", function: Other, code: "OK"},
		{name: "porch's tag field, exact", next: answer{}, image: "fn", tag: "v1",
			executor: "pod", function: "fn:v1", code: "OK"},
		{name: "porch's tag field, a constraint", next: answer{}, image: "fn", tag: "~1",
			executor: "pod", function: Other, code: "OK"},
		{name: "the image as the evaluator inside left it", next: answer{image: "fn:v1"}, image: "fn", tag: "~1",
			executor: "pod", function: "fn:v1", code: "OK"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, reg := newMetrics(t, names{"fn:v1": true})
			e := &Evaluator{Next: tt.next, Metrics: m, Executor: "pod"}
			_, err := e.EvaluateFunction(context.Background(), request(tt.image, tt.tag, "123"))
			assert.Equal(t, tt.code, status.Code(err).String())

			assert.Equal(t, 1.0, testutil.ToFloat64(m.evaluations.WithLabelValues(tt.executor, tt.function, tt.code)))
			assert.Equal(t, 1, testutil.CollectAndCount(m.evaluations), "one series")
			assert.Equal(t, 3.0, testutil.ToFloat64(m.inBytes.WithLabelValues(tt.executor, tt.function)))
			assert.Equal(t, tt.out, testutil.ToFloat64(m.outBytes.WithLabelValues(tt.executor, tt.function)))
			assert.Equal(t, 1, testutil.CollectAndCount(m.duration), "one histogram")
			count, err := testutil.GatherAndCount(reg)
			require.NoError(t, err)
			assert.Equal(t, 4, count, "one series in each family")
		})
	}
}

func TestDurationHistogram(t *testing.T) {
	m, reg := newMetrics(t, names{"fn:v1": true})
	e := &Evaluator{Next: answer{executor: "go"}, Metrics: m, Executor: None}
	for range 3 {
		_, err := e.EvaluateFunction(context.Background(), request("fn:v1", "", "x"))
		require.NoError(t, err)
	}
	families, err := reg.Gather()
	require.NoError(t, err)
	var found bool
	for _, f := range families {
		if f.GetName() != "fnrunner_evaluation_duration_seconds" {
			continue
		}
		found = true
		require.Len(t, f.GetMetric(), 1)
		h := f.GetMetric()[0].GetHistogram()
		assert.Equal(t, uint64(3), h.GetSampleCount())
		assert.Less(t, h.GetSampleSum(), 5.0)
		assert.Len(t, h.GetBucket(), len(DurationBuckets))
	}
	assert.True(t, found, "no duration histogram")
}

func TestExpositionFormat(t *testing.T) {
	m, reg := newMetrics(t, names{})
	e := &Evaluator{Next: answer{err: status.Error(codes.NotFound, "nobody")}, Metrics: m, Executor: None}
	_, err := e.EvaluateFunction(context.Background(), request("fn:v1", "", "12345"))
	require.Error(t, err)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP fnrunner_evaluations_total EvaluateFunction calls answered, by executor, function (the executor table's name for the image, else other) and gRPC code.
# TYPE fnrunner_evaluations_total counter
fnrunner_evaluations_total{code="NotFound",executor="none",function="other"} 1
# HELP fnrunner_evaluation_input_bytes_total ResourceList bytes received in EvaluateFunction calls, by executor and function.
# TYPE fnrunner_evaluation_input_bytes_total counter
fnrunner_evaluation_input_bytes_total{executor="none",function="other"} 5
# HELP fnrunner_evaluation_output_bytes_total ResourceList bytes answered to EvaluateFunction calls, by executor and function.
# TYPE fnrunner_evaluation_output_bytes_total counter
fnrunner_evaluation_output_bytes_total{executor="none",function="other"} 0
`), "fnrunner_evaluations_total", "fnrunner_evaluation_input_bytes_total", "fnrunner_evaluation_output_bytes_total"))
}

// However many images callers make up, each family has a series per
// named function and one for other.
func TestUnnamedImagesShareOneSeries(t *testing.T) {
	m, _ := newMetrics(t, names{"fn:v1": true})
	e := &Evaluator{Next: answer{}, Metrics: m, Executor: "wrapper"}
	for i := range 1000 {
		_, err := e.EvaluateFunction(context.Background(), request(fmt.Sprintf("made-up-%d:v1", i), "", "x"))
		require.NoError(t, err)
	}
	_, err := e.EvaluateFunction(context.Background(), request("fn:v1", "", "x"))
	require.NoError(t, err)
	for _, c := range []prometheus.Collector{m.evaluations, m.duration, m.inBytes, m.outBytes} {
		assert.Equal(t, 2, testutil.CollectAndCount(c))
	}
	assert.Equal(t, 1000.0, testutil.ToFloat64(m.evaluations.WithLabelValues("wrapper", Other, "OK")))
}

func TestRegisteringTwiceFails(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, err := New(reg, names{})
	require.NoError(t, err)
	_, err = New(reg, names{})
	var already prometheus.AlreadyRegisteredError
	assert.ErrorAs(t, err, &already)
}

func TestSetExecutorOutsideACall(t *testing.T) {
	assert.NotPanics(t, func() { SetExecutor(context.Background(), "go") })
}

package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/admission"
	"github.com/fnrunner/fnrunner/libs/evalmetrics"
	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/executortable"
	"github.com/fnrunner/fnrunner/libs/imagematch"
)

// tableNames names images as the table does (configclient.Client's
// FunctionName over a fixed table).
type tableNames struct{ t *executortable.Tables }

var _ evalmetrics.Namer = tableNames{}

func (n tableNames) FunctionName(image string) (string, bool) { return n.t.FunctionNameOf(image) }

// metered is the gateway as main serves it: metrics around admission around
// the evaluator, every collector in reg.
func metered(t *testing.T, tables *executortable.Tables, routes ...Route) (evalwire.Server, *Evaluator, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	ev := NewEvaluator(slog.New(slog.NewTextHandler(io.Discard, nil)), fixedTables{tables}, routes...)
	admitted := admission.NewWeighted(1<<30, 4096, 1<<30)
	reg.MustRegister(ev.Collectors()...)
	reg.MustRegister(admitted.Collectors()...)
	m, err := evalmetrics.New(reg, tableNames{tables})
	require.NoError(t, err)
	return &evalmetrics.Evaluator{Metrics: m, Executor: evalmetrics.None,
		Next: &admission.Evaluator{Next: ev, Limit: admitted, Factor: 2, Service: "gateway"}}, ev, reg
}

// The executor label is the executor that answered, none when every
// executor said NotFound or none was asked; each NotFound that fell through
// is counted by executor.
func TestEvaluationMetricsNameTheExecutorThatAnswered(t *testing.T) {
	notFound := status.Error(codes.NotFound, "not mine")
	tests := []struct {
		name     string
		image    string
		answers  map[executortable.Kind]error
		executor string
		function string
		code     codes.Code
		notFound []executortable.Kind
	}{
		{name: "go answers", image: "fn:v1", executor: "go", function: "ghcr.io/kptdev/krm-functions-catalog/fn:v1"},
		{name: "go NotFound, binary answers", image: "fn:v1", answers: map[executortable.Kind]error{executortable.Go: notFound},
			executor: "binary", function: "ghcr.io/kptdev/krm-functions-catalog/fn:v1", notFound: []executortable.Kind{executortable.Go}},
		{name: "a failure is the executor's", image: "fn:v1", answers: map[executortable.Kind]error{executortable.Go: status.Error(codes.Internal, "exit 1")},
			executor: "go", function: "ghcr.io/kptdev/krm-functions-catalog/fn:v1", code: codes.Internal},
		{name: "every executor NotFound", image: "fn:v1",
			answers:  map[executortable.Kind]error{executortable.Go: notFound, executortable.Binary: notFound, executortable.Pod: notFound},
			executor: evalmetrics.None, function: "ghcr.io/kptdev/krm-functions-catalog/fn:v1", code: codes.NotFound,
			notFound: []executortable.Kind{executortable.Go, executortable.Binary, executortable.Pod}},
		{name: "an unclaimed image the pod executor runs", image: "unclaimed:v1", executor: "pod", function: evalmetrics.Other},
		{name: "malformed image: nobody asked", image: "Not An Image", executor: evalmetrics.None, function: evalmetrics.Other, code: codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			route := func(k executortable.Kind) Route {
				return Route{Kind: k, Client: executor{kind: k, answer: tt.answers[k], asked: new([]executortable.Kind)}, Unclaimed: k == executortable.Pod}
			}
			srv, ev, reg := metered(t, tables(), route(executortable.Go), route(executortable.Binary), route(executortable.Pod))
			_, err := srv.EvaluateFunction(context.Background(), &evalwire.Request{Image: tt.image, ResourceList: evalwire.Bytes([]byte(resourceList))})
			require.Equal(t, tt.code, status.Code(err), "%v", err)

			want := fmt.Sprintf(`
# HELP fnrunner_evaluations_total EvaluateFunction calls answered, by executor, function (the executor table's name for the image, else other) and gRPC code.
# TYPE fnrunner_evaluations_total counter
fnrunner_evaluations_total{code=%q,executor=%q,function=%q} 1
`, tt.code.String(), tt.executor, tt.function)
			assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "fnrunner_evaluations_total"))
			assert.Equal(t, len(tt.notFound), testutil.CollectAndCount(ev.notFound))
			for _, k := range tt.notFound {
				assert.Equal(t, 1.0, testutil.ToFloat64(ev.notFound.WithLabelValues(string(k))), "NotFound from %s", k)
			}
		})
	}
}

// unclaimedAnswers is the pod executor of the cardinality test: it runs
// any image, but says NotFound to some and runs out of time on others.
type unclaimedAnswers struct{}

func (unclaimedAnswers) Evaluate(_ context.Context, ref imagematch.Reference, _ *evalwire.Request) (*evalwire.Response, error) {
	switch {
	case strings.HasSuffix(ref.Name, "3"):
		return nil, status.Error(codes.NotFound, "no such image")
	case strings.HasSuffix(ref.Name, "7"):
		return nil, status.Error(codes.DeadlineExceeded, "pod not ready")
	}
	return &evalwire.Response{ResourceList: evalwire.Bytes([]byte(resourceList))}, nil
}

// 10,000 calls of distinct images no FunctionConfig claims, and some of the
// claimed one, leave each family with a series per table image and one for
// other, per executor and code seen, not one per image.
func TestSeriesStayBoundedWhateverImagesCallersSend(t *testing.T) {
	tables := tables() // one image, fn, claimed by every executor
	srv, ev, reg := metered(t, tables,
		Route{Kind: executortable.Go, Client: executor{kind: executortable.Go}},
		Route{Kind: executortable.Pod, Client: unclaimedAnswers{}, Unclaimed: true})

	const calls = 10000
	var wg sync.WaitGroup
	images := make(chan string)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for image := range images {
				_, _ = srv.EvaluateFunction(context.Background(), &evalwire.Request{Image: image, ResourceList: evalwire.Bytes([]byte(resourceList))})
			}
		}()
	}
	for i := range calls {
		images <- fmt.Sprintf("registry-%d.example.com/unclaimed-%d:v%d", i%97, i, i)
		if i%100 == 0 {
			images <- "fn:v1"
		}
	}
	close(images)
	wg.Wait()

	// Executor × code seen: go OK (fn:v1); pod OK, pod DeadlineExceeded
	// and none NotFound (unclaimed). Functions: fn:v1 and other.
	tableImages := 1
	executorCodes := 4
	bound := (tableImages + 1) * executorCodes
	for _, family := range []string{
		"fnrunner_evaluations_total",
		"fnrunner_evaluation_duration_seconds",
		"fnrunner_evaluation_input_bytes_total",
		"fnrunner_evaluation_output_bytes_total",
	} {
		n, err := testutil.GatherAndCount(reg, family)
		require.NoError(t, err)
		assert.LessOrEqual(t, n, bound, family)
		assert.Positive(t, n, family)
	}
	n, err := testutil.GatherAndCount(reg, "fnrunner_evaluations_total")
	require.NoError(t, err)
	assert.Equal(t, 4, n, "go/fn:v1/OK, pod/other/OK, pod/other/DeadlineExceeded, none/other/NotFound")
	assert.Equal(t, 1, testutil.CollectAndCount(ev.notFound), "NotFound from the pod executor only")
	n, err = testutil.GatherAndCount(reg, "fnrunner_admission_wait_seconds")
	require.NoError(t, err)
	assert.Equal(t, 1, n)

	total := 0.0
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == "fnrunner_evaluations_total" {
			for _, m := range f.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	assert.Equal(t, float64(calls+calls/100), total, "every call counted")
}

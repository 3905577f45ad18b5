// Package evalmetrics counts the EvaluateFunction calls a service answers,
// per executor and function: calls by gRPC code, their duration, and the
// ResourceList bytes in and out. Every service that answers EvaluateFunction
// wraps its evaluator in an Evaluator.
//
// Labels stay bounded whatever callers send. The function label is the name
// a Namer gives the image (the executor table's name for it, see
// executortable.Tables.FunctionName), else "other"; the executor label is
// the Evaluator's, or one that the evaluator inside sets (SetExecutor) from
// a fixed set.
package evalmetrics

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/imagematch"
)

const (
	// Other is the function label of every image the Namer does not name.
	Other = "other"
	// None is the executor label of a call that no executor answered
	// (the gateway's, when every executor said NotFound or none was asked).
	None = "none"
)

// Namer names images for the function label; *configclient.Client
// implements it over the newest executor table.
type Namer interface {
	// FunctionName is the label of the calls of image, and false for an
	// image it does not name (counted as Other). Its names must be a
	// bounded set, whatever images callers send.
	FunctionName(image string) (string, bool)
}

// DurationBuckets are the buckets of fnrunner_evaluation_duration_seconds:
// from an in-process function's milliseconds to a cold pod's minutes.
var DurationBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// Metrics are the evaluation metric families of one service.
type Metrics struct {
	namer       Namer
	evaluations *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	inBytes     *prometheus.CounterVec
	outBytes    *prometheus.CounterVec
}

// New registers the evaluation metric families with reg; namer names the
// functions.
func New(reg prometheus.Registerer, namer Namer) (*Metrics, error) {
	m := &Metrics{
		namer: namer,
		evaluations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fnrunner_evaluations_total",
			Help: "EvaluateFunction calls answered, by executor, function (the executor table's name for the image, else other) and gRPC code.",
		}, []string{"executor", "function", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fnrunner_evaluation_duration_seconds",
			Help:    "Time to answer an EvaluateFunction call (waiting for admission included), by executor and function.",
			Buckets: DurationBuckets,
		}, []string{"executor", "function"}),
		inBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fnrunner_evaluation_input_bytes_total",
			Help: "ResourceList bytes received in EvaluateFunction calls, by executor and function.",
		}, []string{"executor", "function"}),
		outBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fnrunner_evaluation_output_bytes_total",
			Help: "ResourceList bytes answered to EvaluateFunction calls, by executor and function.",
		}, []string{"executor", "function"}),
	}
	for _, c := range []prometheus.Collector{m.evaluations, m.duration, m.inBytes, m.outBytes} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering the evaluation metrics: %w", err)
		}
	}
	return m, nil
}

// Function is the function label of a call of image (with porch's tag
// field, tag, when the image has none): the Namer's name for it, else
// Other. A tag field that is a semver constraint names no one image: Other.
func (m *Metrics) Function(image, tag string) string {
	if tag != "" && !imagematch.HasTag(image) {
		if imagematch.IsConstraint(tag) {
			return Other
		}
		image += ":" + tag
	}
	if name, ok := m.namer.FunctionName(image); ok {
		return name
	}
	return Other
}

// Observe records one answered call: its executor, function label, code,
// duration and ResourceList bytes in and out.
func (m *Metrics) Observe(executor, function string, code codes.Code, d time.Duration, in, out int) {
	m.evaluations.WithLabelValues(executor, function, code.String()).Inc()
	m.duration.WithLabelValues(executor, function).Observe(d.Seconds())
	m.inBytes.WithLabelValues(executor, function).Add(float64(in))
	m.outBytes.WithLabelValues(executor, function).Add(float64(out))
}

// Evaluator records every call Next answers.
type Evaluator struct {
	Next    evalwire.Server
	Metrics *Metrics
	// Executor is the executor label of the calls for which Next sets none
	// (SetExecutor).
	Executor string
}

var _ evalwire.Server = (*Evaluator)(nil)

// EvaluateFunction implements evalwire.Server. The function label is taken
// after Next answered, from the image as Next left it: the gateway and the
// pod-manager put porch's tag field into the image.
func (e *Evaluator) EvaluateFunction(ctx context.Context, req *evalwire.Request) (*evalwire.Response, error) {
	start := time.Now()
	in := req.ResourceList.Len() // Next frees the buffers
	c := &call{}
	resp, err := e.Next.EvaluateFunction(context.WithValue(ctx, callKey{}, c), req)
	out := 0
	if resp != nil {
		out = resp.ResourceList.Len()
	}
	executor := e.Executor
	if x := c.executor.Load(); x != nil {
		executor = *x
	}
	e.Metrics.Observe(executor, e.Metrics.Function(req.Image, req.Tag), status.Code(err), time.Since(start), in, out)
	return resp, err
}

// call is what the evaluator inside tells the Evaluator about one call.
type call struct {
	executor atomic.Pointer[string]
}

type callKey struct{}

// SetExecutor sets the executor label of the call ctx belongs to (the one
// that answered it); it does nothing outside an Evaluator's call. executor
// must come from a fixed set, never from the caller.
func SetExecutor(ctx context.Context, executor string) {
	if c, ok := ctx.Value(callKey{}).(*call); ok {
		c.executor.Store(&executor)
	}
}

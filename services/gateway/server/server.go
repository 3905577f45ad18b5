// Package server is the gateway's implementation of porch's
// evaluator.FunctionEvaluator service. It checks the request, then asks the
// executors that the executor table says run the image, in a fixed order;
// only NotFound falls through to the next one, every other answer is
// returned as it is.
package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/evalmetrics"
	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/executortable"
	"github.com/fnrunner/fnrunner/libs/imagematch"
	"github.com/fnrunner/fnrunner/libs/resourcelist"
	"github.com/fnrunner/fnrunner/libs/sendonce"
	"github.com/fnrunner/fnrunner/libs/telemetry"
)

// Tables gives the current executor table; *configclient.Client implements it.
type Tables interface {
	Tables() *executortable.Tables
}

// Executor runs a call whose image the gateway parsed as ref; Service and
// Replicas implement it.
type Executor interface {
	Evaluate(ctx context.Context, ref imagematch.Reference, req *evalwire.Request) (*evalwire.Response, error)
}

// Service is one executor service behind one connection.
type Service struct {
	Client *evalwire.Client
}

var _ Executor = Service{}

// Evaluate implements Executor.
func (s Service) Evaluate(ctx context.Context, _ imagematch.Reference, req *evalwire.Request) (*evalwire.Response, error) {
	return s.Client.EvaluateFunction(ctx, req)
}

// HealthChecker checks an executor service's health;
// healthpb.HealthClient and Replicas implement it.
type HealthChecker interface {
	Check(ctx context.Context, in *healthpb.HealthCheckRequest, opts ...grpc.CallOption) (*healthpb.HealthCheckResponse, error)
}

// Route is one executor and the service that runs it.
type Route struct {
	Kind   executortable.Kind
	Client Executor
	Health HealthChecker
	// Unclaimed: ask this executor even when the table does not name it for
	// the image (the pod executor runs unclaimed images, as porch's does;
	// it answers NotFound when told not to).
	Unclaimed bool
}

// Evaluator serves EvaluateFunction.
type Evaluator struct {
	log    *slog.Logger
	tables Tables
	routes []Route
	// notFound counts the NotFound answers that fell through, by executor.
	notFound *prometheus.CounterVec
	// margin is how much of a call's remaining time the gateway keeps to
	// answer it itself (answerMargin).
	margin func(remaining time.Duration) time.Duration
}

// NewEvaluator returns an Evaluator that tries routes in the order given.
func NewEvaluator(log *slog.Logger, tables Tables, routes ...Route) *Evaluator {
	return &Evaluator{log: log, tables: tables, routes: routes, margin: answerMargin,
		notFound: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fnrunner_gateway_not_found_total",
			Help: "Calls an executor answered NotFound, so that the gateway asked the next one (or, after the last, answered NotFound), by executor.",
		}, []string{"executor"}),
	}
}

// Collectors export fnrunner_gateway_not_found_total.
func (e *Evaluator) Collectors() []prometheus.Collector {
	return []prometheus.Collector{e.notFound}
}

// EvaluateFunction implements evalwire.Server. The ResourceList stays in
// the buffers it came in: sniffed, then handed to the executor as it is; the
// executor's answer goes back the same way. The executor whose answer it
// returns is the call's executor in evalmetrics (none: every executor asked
// said NotFound, or none was asked).
func (e *Evaluator) EvaluateFunction(ctx context.Context, req *evalwire.Request) (*evalwire.Response, error) {
	// Answers are in buffers of their own: the request's go back to the
	// pool once every executor asked is done with it.
	defer req.Free()
	if err := imagematch.CheckFields(req.Image, req.Tag); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	tables := e.tables.Tables()
	if tables == nil {
		return nil, sendonce.NotSent("the gateway has no executor table yet (is the config-reconciler reachable?); the function was not run")
	}
	var err error
	if req.Tag != "" {
		// The executors get the image with its tag, as older porch sends
		// it, or (no claimed tag fits) the tag field for the pod executor.
		req.Image, req.Tag, err = withTag(tables, req.Image, req.Tag)
		if err != nil {
			return nil, err
		}
	}
	ref, err := imagematch.Parse(req.Image, tables.DefaultPrefix)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := resourcelist.SniffFrom(evalwire.NewReader(req.ResourceList)); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	// The routing decision, on the call's span: which executors were
	// asked, which said NotFound, which answered.
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(telemetry.AttrImage.String(req.Image), telemetry.AttrTableVersion.Int64(int64(tables.Version)))
	// The executors get the caller's deadline less a margin, in which the
	// gateway answers a call they did not finish itself, naming the
	// function, before the caller's own gRPC library gives up with
	// "context deadline exceeded".
	execCtx := ctx
	deadline, bounded := ctx.Deadline()
	var budget time.Duration
	if bounded {
		remaining := time.Until(deadline)
		budget = remaining.Round(100 * time.Millisecond)
		var cancel context.CancelFunc
		execCtx, cancel = context.WithDeadline(ctx, deadline.Add(-e.margin(remaining)))
		defer cancel()
	}
	var notFound []string
	for _, r := range e.routes {
		if _, ok := tables.Lookup(r.Kind, ref); !ok && !r.Unclaimed {
			continue
		}
		start := time.Now()
		// The executor is told the snapshot this decision was made by,
		// and decides on it or a later one.
		resp, err := r.Client.Evaluate(executortable.WithSnapshot(metadata.AppendToOutgoingContext(execCtx, executortable.Header, string(r.Kind)), tables), ref, req)
		code := status.Code(err)
		if code == codes.DeadlineExceeded && bounded && execCtx.Err() != nil && ctx.Err() == nil {
			// The call's deadline: the caller's, or --max-call-duration's.
			err = status.Errorf(codes.DeadlineExceeded, "function %q: no answer from the %s executor within the call's deadline (%v)", req.Image, r.Kind, budget)
		}
		e.log.DebugContext(ctx, "routed", "image", req.Image, "executor", r.Kind, "code", code.String(), "duration", time.Since(start).String())
		if code == codes.NotFound {
			notFound = append(notFound, string(r.Kind))
			e.notFound.WithLabelValues(string(r.Kind)).Inc()
			continue
		}
		span.SetAttributes(telemetry.AttrExecutor.String(string(r.Kind)), telemetry.AttrNotFound.StringSlice(notFound))
		evalmetrics.SetExecutor(ctx, string(r.Kind))
		return resp, err
	}
	span.SetAttributes(telemetry.AttrExecutor.String("none"), telemetry.AttrNotFound.StringSlice(notFound))
	return nil, status.Errorf(codes.NotFound, "function %q not found", req.Image)
}

// answerMargin is how much of a call's remaining time the gateway keeps to
// answer it itself: a twentieth, at least 50 ms and at most a second, and
// never more than half.
func answerMargin(remaining time.Duration) time.Duration {
	return min(max(remaining/20, 50*time.Millisecond), time.Second, remaining/2)
}

// Serving reports whether the gateway can answer: it holds an executor table
// and at least one executor service answers its health check.
func (e *Evaluator) Serving(ctx context.Context) bool {
	if e.tables.Tables() == nil {
		return false
	}
	for _, r := range e.routes {
		// A route's connection may balance over several replicas, one of
		// them stopped (its check times out): a second check goes to
		// another, so one stopped replica does not flip readiness.
		for range healthAttempts {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			resp, err := r.Health.Check(cctx, &healthpb.HealthCheckRequest{})
			cancel()
			if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
				return true
			}
		}
	}
	return false
}

// healthAttempts is how many checks of one route Serving makes.
const healthAttempts = 2

// WatchHealth sets the gateway's health from Serving every interval until ctx ends.
func (e *Evaluator) WatchHealth(ctx context.Context, interval time.Duration, set func(healthpb.HealthCheckResponse_ServingStatus)) {
	last := healthpb.HealthCheckResponse_UNKNOWN
	for {
		s := healthpb.HealthCheckResponse_NOT_SERVING
		if e.Serving(ctx) {
			s = healthpb.HealthCheckResponse_SERVING
		}
		if s != last {
			e.log.Info("health changed", "status", s.String())
			set(s)
			last = s
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

// Package runner is the binary-runner's executor service: it serves
// evaluator.FunctionEvaluator for the functions the executor table gives to
// the go executor (linked in, run in-process) and the binary executor
// (binaries under --functions, run with fnexec's isolation).
package runner

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/executortable"
	"github.com/fnrunner/fnrunner/libs/fnexec"
	"github.com/fnrunner/fnrunner/libs/imagematch"
	"github.com/fnrunner/fnrunner/libs/resourcelist"
	"github.com/fnrunner/fnrunner/services/binary-runner/catalog"
)

// Tables gives the executor table; *configclient.Client implements it.
type Tables interface {
	// Await returns the newest table, waiting up to max for the first one;
	// nil if none came.
	Await(ctx context.Context, max time.Duration) *executortable.Tables
}

// tableWait is how long a call that arrives before the first executor table
// (just after a restart) waits for it.
const tableWait = 10 * time.Second

// Options configure the runner.
type Options struct {
	// FunctionsDir is where relative binary paths are resolved.
	FunctionsDir string
	// AllowAbsolutePaths lets the table name binaries outside FunctionsDir.
	AllowAbsolutePaths bool
	// Exec bounds each binary run.
	Exec fnexec.Options
	// MaxOutputBytes bounds in-process output like Exec.MaxOutputBytes.
	MaxOutputBytes int
}

// Runner implements evalwire.Server.
type Runner struct {
	tables    Tables
	opts      Options
	functions map[string]catalog.Function
	tap       stderrTap
}

// New returns a runner over the given table and linked-in functions.
func New(tables Tables, functions map[string]catalog.Function, opts Options) *Runner {
	return &Runner{tables: tables, opts: opts, functions: functions}
}

// EvaluateFunction implements evalwire.Server. The ResourceList is only
// sniffed before the run: the function reads it, and fnexec.Respond says
// whether it was to blame if the function fails.
func (r *Runner) EvaluateFunction(ctx context.Context, req *evalwire.Request) (*evalwire.Response, error) {
	// No answer refers to the request's buffers: they go back to the pool.
	defer req.Free()
	tables := r.tables.Await(ctx, tableWait)
	if tables == nil {
		return nil, status.Error(codes.Unavailable, "binary-runner has no executor table yet (is the config-reconciler reachable?); the function was not run")
	}
	ref, err := imagematch.Parse(req.Image, tables.DefaultPrefix)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := resourcelist.SniffFrom(evalwire.NewReader(req.ResourceList)); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	kinds := []executortable.Kind{executortable.Go, executortable.Binary}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		// The gateway names the executor it chose; without it: go, then binary.
		if v := md.Get(executortable.Header); len(v) == 1 {
			kinds = []executortable.Kind{executortable.Kind(v[0])}
		}
	}
	for _, k := range kinds {
		fc, ok := tables.Lookup(k, ref)
		if !ok {
			continue
		}
		switch k {
		case executortable.Go:
			return r.runGo(ctx, req, fc.GetGo().GetId())
		case executortable.Binary:
			return r.runBinary(ctx, req, fc.GetBinary().GetPath())
		}
	}
	return nil, status.Errorf(codes.NotFound, "function %q not found", req.Image)
}

func (r *Runner) runBinary(ctx context.Context, req *evalwire.Request, path string) (*evalwire.Response, error) {
	bin, err := r.resolve(path)
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "function %q: %v", req.Image, err)
	}
	res, err := fnexec.Run(ctx, []string{bin}, evalwire.NewReader(req.ResourceList), r.opts.Exec)
	return fnexec.Respond(req.Image, req.ResourceList, res, err)
}

// resolve turns a table path into the binary to run (fnexec.ResolveBinary).
func (r *Runner) resolve(path string) (string, error) {
	return fnexec.ResolveBinary(r.opts.FunctionsDir, path, r.opts.AllowAbsolutePaths)
}

// runGo runs a linked-in function as its binary would (fn.Run), but in this
// process: a panic becomes an Internal error, and the caller's deadline is
// honoured (a function that overruns it finishes in the background, its
// result discarded).
func (r *Runner) runGo(ctx context.Context, req *evalwire.Request, id string) (*evalwire.Response, error) {
	f, ok := r.functions[id]
	if !ok {
		return nil, status.Errorf(codes.FailedPrecondition, "function %q: no linked-in Go function with id %q", req.Image, id)
	}
	// The function reads one contiguous ResourceList; this copy is its own,
	// so it may outlive the call (see below).
	input := req.ResourceList.Materialize()
	type outcome struct {
		res *fnexec.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		if !f.WritesStderr {
			res, err := runInProcess(f.Process, input)
			done <- outcome{res, err}
			return
		}
		var res *fnexec.Result
		var err error
		log, tapErr := r.tap.capture(r.opts.Exec.MaxLogBytes, func() {
			res, err = runInProcess(f.Process, input)
		})
		if tapErr == nil {
			res.Log = append(log, res.Log...)
		}
		done <- outcome{res, err}
	}()
	select {
	case <-ctx.Done():
		return fnexec.Respond(req.Image, nil, nil, fmt.Errorf("function did not finish: %w", ctx.Err()))
	case o := <-done:
		if o.err == nil && r.opts.MaxOutputBytes > 0 && o.res.ResourceList.Len() > r.opts.MaxOutputBytes {
			return fnexec.Respond(req.Image, req.ResourceList, o.res, fmt.Errorf("%w (%d bytes)", fnexec.ErrOutputTooLarge, r.opts.MaxOutputBytes))
		}
		return fnexec.Respond(req.Image, req.ResourceList, o.res, o.err)
	}
}

func runInProcess(p fn.ResourceListProcessorFunc, input []byte) (res *fnexec.Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			res = &fnexec.Result{ExitCode: 2, Log: fmt.Appendf(nil, "panic: %v\n\n%s", v, debug.Stack())}
			err = &fnexec.ExitError{Result: res}
		}
	}()
	out, runErr := fn.Run(p, input)
	res = &fnexec.Result{ResourceList: evalwire.Bytes(out)}
	if runErr != nil {
		// What the function's binary would print and exit with (fn.AsMain).
		res.ExitCode = 1
		res.Log = fmt.Appendf(nil, "failed to evaluate function: %v\n", runErr)
		return res, &fnexec.ExitError{Result: res}
	}
	return res, nil
}

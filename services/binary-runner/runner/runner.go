// Package runner is the binary-runner's executor service: it serves
// evaluator.FunctionEvaluator for the functions the executor table gives to
// the go executor (linked in, run in-process) and the binary executor
// (binaries under --functions, run with fnexec's isolation). Both are a
// Runtime; fnresult.Respond turns what a Runtime returns into the answer.
package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/admission"
	"github.com/fnrunner/fnrunner/libs/evalmetrics"
	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/executortable"
	"github.com/fnrunner/fnrunner/libs/fnexec"
	"github.com/fnrunner/fnrunner/libs/fnresult"
	"github.com/fnrunner/fnrunner/libs/imagematch"
	"github.com/fnrunner/fnrunner/libs/resourcelist"
	"github.com/fnrunner/fnrunner/libs/sendonce"
	"github.com/fnrunner/fnrunner/services/binary-runner/binpath"
	"github.com/fnrunner/fnrunner/services/binary-runner/catalog"
)

// Runtime runs a function on one ResourceList, the way kpt's runtimes do
// (Run(r io.Reader, w io.Writer) error), but without copying it: input is
// the request's buffers, which the caller holds until Run returns and a
// Runtime must not free or keep, and the output comes back in the Result's
// buffers, which go into the response as they are.
//
// Run returns the Result (exit code 0) and nil on success; otherwise the
// errors fnresult.Respond maps: ctx's error (wrapped) when it ended first,
// an error wrapping fnresult.ErrOutputTooLarge or fnresult.ErrStart, or a
// *fnresult.ExitError, each with the Result when there is one.
type Runtime interface {
	Run(ctx context.Context, input mem.BufferSlice) (*fnresult.Result, error)
}

// The binary executor runs binaries with fnexec; the go executor runs
// linked-in functions in this process.
var (
	_ Runtime = (*fnexec.Binary)(nil)
	_ Runtime = (*inProcess)(nil)
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
	// Scripts run the script functions (catalog.Function.Script).
	Scripts Scripts
	// Admission, when set, bounds the calls running by their Weight.
	Admission *admission.Weighted
}

// Scripts are how the script functions' binaries run.
type Scripts struct {
	// Args are added to the binary's command line: the script bounds
	// (functions/starlark/bounds.Bounds.Args).
	Args []string
	// Exec, when set, bounds each run instead of Options.Exec: with the
	// TCP ports the allowed hosts need opened in the sandbox.
	Exec *fnexec.Options
}

// Weights: the memory a call needs while it runs, from its input, counted
// before the run. A function holds its input as a YAML tree: per byte of
// text, and per node, which a line of block-style YAML (what kpt writes)
// or an element of a flow-style one (after a comma) roughly is. A call that
// runs a process (a binary, starlark) also costs the process's runtime.
//
// Measured (GNU time's maximum resident set size, 2026-12-01, the catalog
// binaries built from their modules): on tools/bench's 3 MiB input of
// 22,000 lines set-namespace peaks at 104 MiB, set-labels at 112 and
// starlark at 140; on 3 MiB of 11,000 small ConfigMaps (121,000 lines) at
// 347, 452 and 510 MiB, apply-replacements at 419; on 2 KiB, 9 to 16 MiB.
// ByteWeight × bytes + NodeWeight × nodes covers each beside the runtime:
// 134 MiB for the first, 519 for the second. ProcessWeight is a runtime's
// own: older catalog releases, as porch runs them, load kyaml's OpenAPI
// schema at start (starlark v0.3.0: 70 MiB, 56 to 75 of its own pages at
// their peak, by the garbage collector's timing, on an empty input). At
// the binary-runner's 672 MiB in flight, 8 calls of 2 KiB run at once, or 3
// of 3 MiB.
//
// A script's memory is its own, not its input's: ScriptWeight more lets a
// script recurse to --starlark-max-call-depth's default (10,000 calls: 67
// MiB in all) or build a package's worth of resources from a small input.
const (
	ByteWeight    = 16
	NodeWeight    = 4 << 10
	ProcessWeight = 80 << 20
	ScriptWeight  = 32 << 20
	// BufferWeight is what a call that runs a process costs the
	// binary-runner itself, per input byte: its request and the output
	// buffers (2.4×). The rest of its weight bounds the process's memory.
	BufferWeight = 3
)

// Weight is the admission weight of a call on input whose runtime needs
// fixed bytes besides: 0 in process, ProcessWeight for a binary,
// ProcessWeight + ScriptWeight for a script.
func Weight(input mem.BufferSlice, fixed int64) int64 {
	nodes := 0
	for _, b := range input {
		data := b.ReadOnlyData()
		nodes += bytes.Count(data, newline) + bytes.Count(data, comma)
	}
	return int64(input.Len())*ByteWeight + int64(nodes)*NodeWeight + fixed
}

var newline, comma = []byte("\n"), []byte(",")

// processMemory is the memory bound of a call's processes: what admission
// charged it (its weight, or the whole budget for a call heavier than that)
// less the runner's own buffers.
func processMemory(weight int64, input int, limiter *admission.Weighted) uint64 {
	if limiter != nil {
		weight = min(weight, limiter.Capacity())
	}
	return uint64(max(weight-int64(input)*BufferWeight, ProcessWeight))
}

// Runner implements evalwire.Server.
type Runner struct {
	tables    Tables
	opts      Options
	functions map[string]catalog.Function
}

// New returns a runner over the given table and linked-in functions.
func New(tables Tables, functions map[string]catalog.Function, opts Options) *Runner {
	return &Runner{tables: tables, opts: opts, functions: functions}
}

// EvaluateFunction implements evalwire.Server. The ResourceList is only
// sniffed before the run: the function reads it, and fnresult.Respond says
// whether it was to blame if the function fails.
func (r *Runner) EvaluateFunction(ctx context.Context, req *evalwire.Request) (*evalwire.Response, error) {
	// No answer refers to the request's buffers: they go back to the pool.
	defer req.Free()
	kinds := []executortable.Kind{executortable.Go, executortable.Binary}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		// The gateway names the executor it chose; without it: go, then binary.
		if v := md.Get(executortable.Header); len(v) == 1 {
			kinds = []executortable.Kind{executortable.Kind(v[0])}
		}
	}
	if len(kinds) == 1 {
		// The call is the chosen executor's, whatever its answer.
		setExecutor(ctx, kinds[0])
	}
	if err := imagematch.CheckFields(req.Image, req.Tag); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	tables := r.tables.Await(ctx, tableWait)
	if tables == nil {
		return nil, sendonce.NotSent("binary-runner has no executor table yet (is the config-reconciler reachable?); the function was not run")
	}
	ref, err := imagematch.Parse(req.Image, tables.DefaultPrefix)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := resourcelist.SniffFrom(evalwire.NewReader(req.ResourceList)); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	var missing error
	for _, k := range kinds {
		fc, ok := tables.Lookup(k, ref)
		if !ok {
			continue
		}
		setExecutor(ctx, k)
		var rt Runtime
		fixed := int64(ProcessWeight)
		switch k {
		case executortable.Go:
			rt, fixed, err = r.goRuntime(fc.GetGo().GetId())
		case executortable.Binary:
			rt, err = r.binaryRuntime(fc.GetBinary().GetPath())
		default:
			continue
		}
		if k == executortable.Binary && errors.Is(err, ErrBinaryMissing) {
			// This runner cannot run it (a porch FunctionConfig naming a
			// binary this image lacks): NotFound, so the gateway tries
			// the next executor, as for an image no one claims.
			missing = err
			continue
		}
		if err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "function %q: %v", req.Image, err)
		}
		w := Weight(req.ResourceList, fixed)
		if bin, ok := rt.(*fnexec.Binary); ok {
			bin.Options.MaxMemoryBytes = processMemory(w, req.ResourceList.Len(), r.opts.Admission)
			// The request is one of BufferWeight's buffers, the output
			// the others: more output than that counts in the bound.
			bin.Options.OutputReserve = uint64(req.ResourceList.Len()) * (BufferWeight - 1)
		}
		release := func() {}
		if r.opts.Admission != nil {
			var err error
			release, err = r.opts.Admission.Acquire(ctx, w, int64(req.ResourceList.Len()))
			if errors.Is(err, admission.ErrQueueFull) {
				return nil, status.Errorf(codes.ResourceExhausted, "function %q: binary-runner queue full: %s; the function was not run", req.Image, r.opts.Admission.QueueState())
			}
			if err != nil {
				st := status.FromContextError(err)
				return nil, status.Errorf(st.Code(), "function %q: gave up waiting for memory to run in (--max-in-flight-bytes): %v; the function was not run", req.Image, err)
			}
		}
		res, err := rt.Run(ctx, req.ResourceList)
		resp, err := fnresult.Respond(req.Image, req.ResourceList, res, err)
		if err != nil || resp == nil {
			release()
			return resp, err
		}
		size := int64(req.ResourceList.Len())
		if err := admission.HoldAnswer(ctx, r.opts.Admission, release, req.Image, w, size, resp); err != nil {
			return nil, err
		}
		return resp, nil
	}
	if missing != nil {
		return nil, status.Errorf(codes.NotFound, "function %q not found: %v", req.Image, missing)
	}
	return nil, status.Errorf(codes.NotFound, "function %q not found", req.Image)
}

// setExecutor names the executor of the call in its metrics
// (evalmetrics.SetExecutor): go or binary; any other name the gateway's
// header might carry is none of the runner's and is not a label.
func setExecutor(ctx context.Context, k executortable.Kind) {
	if k == executortable.Go || k == executortable.Binary {
		evalmetrics.SetExecutor(ctx, string(k))
	}
}

// ErrBinaryMissing is a binary executor path with no executable file behind
// it in this runner (binpath.Resolve).
var ErrBinaryMissing = binpath.ErrMissing

// binaryRuntime is the binary executor's runtime for a table path
// (binpath.Resolve). A missing binary is ErrBinaryMissing; any other error
// (a path the rules refuse, permissions, I/O) is the runner's problem, not
// a reason to run something else.
func (r *Runner) binaryRuntime(path string) (*fnexec.Binary, error) {
	bin, err := binpath.Resolve(r.opts.FunctionsDir, path, r.opts.AllowAbsolutePaths)
	if err != nil {
		return nil, err
	}
	return &fnexec.Binary{Argv: []string{bin}, Options: r.opts.Exec}, nil
}

// goRuntime is the go executor's runtime for a linked-in function, with
// the fixed part of its calls' weight.
func (r *Runner) goRuntime(id string) (Runtime, int64, error) {
	f, ok := r.functions[id]
	if !ok {
		return nil, 0, fmt.Errorf("no linked-in Go function with id %q", id)
	}
	if f.Script {
		rt, err := r.binaryRuntime(f.Binary)
		if err != nil {
			return nil, 0, err
		}
		rt.Argv = append(rt.Argv, r.opts.Scripts.Args...)
		if r.opts.Scripts.Exec != nil {
			rt.Options = *r.opts.Scripts.Exec
		}
		return rt, ProcessWeight + ScriptWeight, nil
	}
	if f.Binary != "" {
		// Run out of process (catalog.Function.Binary), from the
		// functions directory.
		rt, err := r.binaryRuntime(f.Binary)
		return rt, ProcessWeight, err
	}
	return &inProcess{process: f.Process, maxOutputBytes: r.opts.MaxOutputBytes}, 0, nil
}

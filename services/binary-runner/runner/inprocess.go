package runner

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"google.golang.org/grpc/mem"

	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/fnresult"
)

// inProcess is the go executor's Runtime: a linked-in function run as its
// binary would run it (fn.Run, as fn.AsMain does), but in this process. A
// panic is a failed run, the caller's deadline is honoured (a function that
// overruns it finishes in the background, its result discarded), and output
// over maxOutputBytes fails the run as a binary's would.
type inProcess struct {
	process fn.ResourceListProcessorFunc
	// maxOutputBytes bounds the output (0: unbounded).
	maxOutputBytes int
	// finished, when set, is called once the function has returned, which
	// may be after Run did: its admission is held until then, since its
	// memory is still in use.
	finished func()
}

// Run implements Runtime.
func (p *inProcess) Run(ctx context.Context, input mem.BufferSlice) (*fnresult.Result, error) {
	// The function reads one contiguous ResourceList; this copy is its own,
	// so it may outlive the call (see below).
	data := input.Materialize()
	type outcome struct {
		res *fnresult.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := runInProcess(p.process, data)
		done <- outcome{res, err}
		if p.finished != nil {
			p.finished()
		}
	}()
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("function did not finish: %w", ctx.Err())
	case o := <-done:
		if o.err == nil && p.maxOutputBytes > 0 && o.res.ResourceList.Len() > p.maxOutputBytes {
			return o.res, fmt.Errorf("%w (%d bytes)", fnresult.ErrOutputTooLarge, p.maxOutputBytes)
		}
		return o.res, o.err
	}
}

// runInProcess is fn.Run with what the function's binary would print and
// exit with: exit code 1 and the error on failure, exit code 2 and the
// stack on a panic.
func runInProcess(p fn.ResourceListProcessorFunc, input []byte) (res *fnresult.Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			res = &fnresult.Result{ExitCode: 2, Log: fmt.Appendf(nil, "panic: %v\n\n%s", v, debug.Stack())}
			err = &fnresult.ExitError{Result: res}
		}
	}()
	out, runErr := fn.Run(p, input)
	res = &fnresult.Result{ResourceList: evalwire.Bytes(out)}
	if runErr != nil {
		// What the function's binary would print and exit with (fn.AsMain).
		res.ExitCode = 1
		res.Log = fmt.Appendf(nil, "failed to evaluate function: %v\n", runErr)
		return res, &fnresult.ExitError{Result: res}
	}
	return res, nil
}

// Package fnresult is the outcome of one KRM function run and how it is
// answered: the Result a runtime produced, the errors a runtime reports, and
// Respond, which turns them into the answer of EvaluateFunction (a response
// or a gRPC status error with the function's output in its details).
//
// It runs nothing. Runtimes (fnexec's binaries, the binary-runner's
// in-process functions) produce Results and errors; the services answer
// with Respond; clients read a failed call's output with FailureDetails.
// Clients therefore link this package, never process code.
package fnresult

import (
	"errors"
	"fmt"
	"syscall"

	"google.golang.org/grpc/mem"
)

// Result is what a function produced.
type Result struct {
	// ResourceList is the function's output (its stdout), kept in buffers
	// (from gRPC's pool, for a binary) so that it is held once, whatever its
	// size, and goes into the response as it is.
	ResourceList mem.BufferSlice
	// Log is the function's stderr, possibly truncated.
	Log []byte
	// ExitCode is the function's exit code (0 on success).
	ExitCode int
}

// The errors a runtime reports, besides *ExitError and the context's error
// (wrapped) when the caller's context ends first. Respond maps each to a
// gRPC code.
var (
	// ErrOutputTooLarge means the function wrote more than the output limit.
	ErrOutputTooLarge = errors.New("function output exceeds the message size limit")
	// ErrStart means the function could not be started (a binary missing or
	// not executable).
	ErrStart = errors.New("cannot start function")
	// ErrMemoryExceeded means the function's processes held more memory
	// than the call's bound, and were killed.
	ErrMemoryExceeded = errors.New("function used more memory than its call may")
)

// ExitError is returned when the function exits non-zero or is killed by a
// signal. Result holds what it wrote, results included.
type ExitError struct {
	Result *Result
	// Signal is set when the process was killed by a signal.
	Signal syscall.Signal
}

func (e *ExitError) Error() string {
	if e.Signal != 0 {
		return fmt.Sprintf("function killed by signal %v", e.Signal)
	}
	return fmt.Sprintf("function exited with code %d", e.Result.ExitCode)
}

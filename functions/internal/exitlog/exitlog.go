// Package exitlog gives a function's failure the log its release's binary
// wrote, where that is not the SDK's.
//
// A binary run by fn.AsMain writes "failed to evaluate function: <error>"
// on its standard error when it fails. Releases on kyaml v0.10's framework
// wrote something else: the framework's command printed the processor's
// error, and some mains printed it again. fnrunner answers as the release
// did, as a binary (AsMain) and in the binary-runner's process, whose go
// executor asks an error for its ExitLog.
package exitlog

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/kptdev/krm-functions-sdk/go/fn"
)

// Error is a function's failure and what its release's binary wrote on
// its standard error for it.
type Error struct {
	// Err is the failure.
	Err error
	// Log is what the binary wrote.
	Log string
}

// Error implements error.
func (e *Error) Error() string { return e.Err.Error() }

// Unwrap returns the failure.
func (e *Error) Unwrap() error { return e.Err }

// ExitLog is what the release's binary wrote on its standard error.
func (e *Error) ExitLog() string { return e.Log }

// PrintedTwice is the failure of a function whose release printed err as
// kyaml v0.10's framework command does ("%v", no newline) and then again
// with a newline, as the catalog's mains of that time did
// (fmt.Fprintln(os.Stderr, err)).
func PrintedTwice(err error) *Error {
	return &Error{Err: err, Log: err.Error() + err.Error() + "\n"}
}

// ErrorResult is the failure of a function whose release's processor
// returned its one error result, as kyaml v0.10's framework prints a
// Result of one item without a field: "[error] : <message>".
func ErrorResult(err error) *Error {
	return &Error{Err: err, Log: fmt.Sprintf("[%s] %s: %s", fn.Error, "", err.Error())}
}

// Of returns what a binary run by AsMain writes on its standard error when
// it fails with err.
func Of(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Log
	}
	return fmt.Sprintf("failed to evaluate function: %v", err)
}

// AsMain is fn.AsMain, but a failure is logged as Of logs it.
func AsMain(p fn.ResourceListProcessorFunc) error {
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		err = fmt.Errorf("unable to read from stdin: %w", err)
	} else {
		var out []byte
		out, err = fn.Run(p, in)
		// As fn.AsMain does, the output is written before the error.
		if _, werr := os.Stdout.Write(out); werr != nil {
			err = werr
		}
	}
	if err != nil {
		fmt.Fprint(os.Stderr, Of(err))
	}
	return err
}

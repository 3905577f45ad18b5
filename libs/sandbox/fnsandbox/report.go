package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/fnrunner/fnrunner/libs/sandbox/spec"
)

// The helper's reports to the runner, on file descriptor 3: how the call
// ended, or why the sandbox failed.

// fail reports a sandbox failure (the function never ran) on file
// descriptor 3 when the runner passed one, else on stderr, and exits 125, as
// container runtimes do.
func fail(err error) {
	if !report(spec.ErrorReport(err.Error())) {
		fmt.Fprintf(os.Stderr, "fnsandbox: %v\n", err)
	}
	os.Exit(125)
}

// report writes a line for the runner on file descriptor 3, when it passed
// one. Not through an os.File: its finalizer would close descriptor 3
// whenever the collector ran, in a warm helper perhaps a later call's.
func report(line string) bool {
	_, err := unix.Write(3, []byte(line+"\n"))
	return err == nil
}

// exitAs ends the helper the way the function ended: with its exit code, or,
// when a signal killed it, by saying which on file descriptor 3 (the Go
// runtime handles too many signals for the helper to die of the same one)
// and exiting 128 + the signal, as a shell reports it.
func exitAs(ws unix.WaitStatus) {
	os.Exit(exitCode(ws))
}

// exitCode is the code a helper ends a call with: the function's, or 128 +
// the signal that killed it, said on descriptor 3 first.
func exitCode(ws unix.WaitStatus) int {
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		report(spec.SignalReport(int(ws.Signal())))
		return 128 + int(ws.Signal())
	}
	return 125
}

// Exec functions, run on this machine as kpt fn render --allow-exec does.

package kptrender

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"

	"github.com/google/shlex"
	"golang.org/x/sys/unix"
)

// defaultExecTimeout is kpt's bound on an exec function's run.
const defaultExecTimeout = 5 * time.Minute

// ErrExecNotAllowed is kpt's refusal of a pipeline with an exec function
// when exec functions were not allowed.
var ErrExecNotAllowed = errors.New("must run with `--allow-exec` option to allow running function binaries")

// ExecExitError is an exec function that exited with a status other
// than 0.
type ExecExitError struct {
	ExitCode       int
	Stdout, Stderr []byte
}

func (e *ExecExitError) Error() string {
	return fmt.Sprintf("exit status %d", e.ExitCode)
}

// runExec runs an exec function as kpt does: its command split as a shell
// would (kpt's shlex), the program found as exec.Command finds it (a
// relative path from the working directory), input on its stdin, its
// stdout the output; its stderr is returned too. Unlike kpt's, it runs in a
// process group of its own, and whatever of that group is left when the
// program exits is killed then (kpt leaves it, and waits for it while it
// holds the output open); when ctx ends or after timeout the whole group is
// killed.
func runExec(ctx context.Context, command string, input []byte, timeout time.Duration) (stdout, stderr []byte, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	words, err := shlex.Split(command)
	if err != nil {
		return nil, nil, fmt.Errorf("exec command %q must be valid: %w", command, err)
	}
	if len(words) == 0 {
		return nil, nil, fmt.Errorf("exec command %q names no program", command)
	}
	cmd := exec.CommandContext(ctx, words[0], words[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// Only a process that left the group (setsid) can hold the output
	// open once the group is killed: not for longer than this.
	cmd.WaitDelay = time.Second
	cmd.Stdin = bytes.NewReader(input)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	// The program's exit, not reaped yet: its group id cannot be taken by
	// another group while what it left is killed.
	var info unix.Siginfo
	for {
		if werr := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil); !errors.Is(werr, unix.EINTR) {
			break
		}
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	err = cmd.Wait()
	var xe *exec.ExitError
	switch {
	case errors.As(err, &xe) && ctx.Err() == nil:
		return nil, nil, &ExecExitError{ExitCode: xe.ExitCode(), Stdout: out.Bytes(), Stderr: errOut.Bytes()}
	case err != nil && ctx.Err() != nil:
		return nil, nil, fmt.Errorf("%w (%v)", ctx.Err(), err)
	case err != nil:
		return nil, nil, err
	}
	return out.Bytes(), errOut.Bytes(), nil
}

// A call's rlimits, set on the traced function by the limiter's thread,
// and the call's ids it takes for that.

package main

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/fnrunner/fnrunner/libs/sandbox/spec"
)

// limiter is the helper's thread that sets a function's rlimits: not the
// call's thread, whose seccomp filter refuses prlimit on another process
// (installCallFilter), nor the main thread, the thread group's leader,
// whose ids kill() checks while it has taken a call's (applyLimits).
type limiter struct {
	requests chan limitsRequest
}

// limitsRequest is what to set on which function, and where to say how it
// went.
type limitsRequest struct {
	pid      int
	limits   spec.Limits
	uid, gid int
	done     chan error
}

// newLimiter starts the thread; it serves the helper's calls one after
// another.
func newLimiter() *limiter {
	l := &limiter{requests: make(chan limitsRequest)}
	go func() {
		runtime.LockOSThread() // ids taken by applyLimits are this thread's alone
		for r := range l.requests {
			r.done <- applyLimits(r.pid, r.limits, r.uid, r.gid)
		}
	}()
	return l
}

// apply asks the thread to set s's limits on pid; the answer comes on the
// channel.
func (l *limiter) apply(pid int, s spec.Spec) <-chan error {
	done := make(chan error, 1)
	l.requests <- limitsRequest{pid: pid, limits: s.Limits, uid: s.UID, gid: s.GID, done: done}
	return done
}

// asCall gives the calling thread uid and gid as its real and effective ids,
// root staying its saved ones.
func asCall(uid, gid int) error {
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), 0); errno != 0 {
		return fmt.Errorf("taking gid %d to set the function's limits: %w", gid, errno)
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), 0); errno != 0 {
		return fmt.Errorf("taking uid %d to set the function's limits: %w", uid, errno)
	}
	return nil
}

// applyLimits sets the call's rlimits l on the function pid, stopped at its
// exec, or about to be. It runs on the limiter's thread, which has no
// seccomp filter. Setting another user's rlimits takes CAP_SYS_RESOURCE,
// which a container's root often lacks, or the same real ids: with uid >= 0
// this thread takes the call's for that (asCall), keeping root as its saved
// ones, and takes root back after; the function, traced, runs nothing
// before it stops after its exec, and so can signal nothing meanwhile.
func applyLimits(pid int, l spec.Limits, uid, gid int) error {
	if uid >= 0 {
		if err := asCall(uid, gid); err != nil {
			return err
		}
		defer func() {
			if err := asRoot(); err != nil {
				// This thread serves every later call: it must not
				// keep a call's ids.
				fail(err)
			}
		}()
	}
	for _, r := range []struct {
		name     string
		resource int
		value    uint64
	}{
		{"processes", unix.RLIMIT_NPROC, l.Processes},
		{"address space", unix.RLIMIT_AS, l.AddressSpace},
		{"file size", unix.RLIMIT_FSIZE, l.FileSize},
		{"open files", unix.RLIMIT_NOFILE, l.OpenFiles},
		{"CPU seconds", unix.RLIMIT_CPU, l.CPUSeconds},
	} {
		if r.value == 0 {
			continue
		}
		lim := unix.Rlimit{Cur: r.value, Max: r.value}
		if err := unix.Prlimit(pid, r.resource, &lim, nil); err != nil {
			return fmt.Errorf("limit on %s (%d): %w", r.name, r.value, err)
		}
	}
	return nil
}

// asRoot gives the calling thread its root ids back (see asCall).
func asRoot() error {
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, 0, 0, 0); errno != 0 {
		return fmt.Errorf("taking root back: %w", errno)
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESGID, 0, 0, 0); errno != 0 {
		return fmt.Errorf("taking gid 0 back: %w", errno)
	}
	return nil
}

// setLimits waits for the traced function to stop after its exec, has the
// call's rlimits set on it (apply: by the limiter's thread) and
// lets it go. It is called on the thread that started the function (its
// tracer). It returns the function's status when the function ended before
// that.
//
// The limiter is asked as soon as the exec has begun, and sets the limits
// while the function finishes it (the five set here survive the exec;
// RLIMIT_STACK would not: the exec writes back the one it started with),
// so that its wake-up costs the call little; they are on before the
// function runs an instruction of its own all the same, as it stops first. By then the
// function has its final ids: a uid of its own is taken in the fork's child,
// before the exec, and the limiter takes it too (applyLimits) while the
// function, traced, can run nothing, so can signal nothing.
func setLimits(pid int, apply func(pid int) <-chan error) (int, *unix.WaitStatus, error) {
	// The limiter is done (and has its own ids back) before the function
	// is waited for: a function that ended meanwhile is not reaped, so its
	// pid is no other process's while the limiter uses it. Both come
	// about together, so waiting for one first costs nothing.
	limitsErr := <-apply(pid)
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, unix.WALL, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return pid, nil, fmt.Errorf("waiting for the function to start: %w", err)
		}
		if !ws.Stopped() {
			return pid, &ws, nil
		}
		if ws.StopSignal() != unix.SIGTRAP {
			// A signal on the way to the function's exec: pass it on.
			if err := unix.PtraceCont(pid, int(ws.StopSignal())); err != nil {
				return pid, nil, fmt.Errorf("starting the function: %w", err)
			}
			continue
		}
		break
	}
	if limitsErr != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		return pid, nil, limitsErr
	}
	if err := unix.PtraceDetach(pid); err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		return pid, nil, fmt.Errorf("letting the function go: %w", err)
	}
	return pid, nil, nil
}

// A call's thread: how far it restricts itself ahead, and the call's
// start on it.

package main

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/fnrunner/fnrunner/libs/sandbox/spec"
)

// started is what a callThread reports once the function started, or
// failed to.
type started struct {
	spec spec.Spec
	// group is the call's cgroup when it has one (made before the
	// function started, to be removed once the call has ended, whether
	// the function started or not).
	group *callCgroup
	pid   int
	// exited is set when the function ended before it was let go.
	exited *unix.WaitStatus
	err    error
}

// callThread is a goroutine locked to an OS thread of its own, which
// takes a call, carries the call's restrictions and is the function's
// parent (its parent-death signal is tied to the thread): it stays alive
// until the call is done, and then ends with the goroutine, restrictions
// and all (never the main thread, which the runtime would keep: see init).
type callThread struct {
	started chan started
	done    chan struct{}
}

// newCallThread makes the thread: it restricts itself as far as it can
// before the call comes (restrictAhead: calls in namespaces or not), takes
// the call from next (which fails one the thread cannot take: see
// restricted.takes), prepares it (its cgroup named name) and starts the
// function, and reports on started. The call's work between its coming
// and the function's start is all on this thread: no other has to be
// woken for it.
func newCallThread(reports, namespaces bool, limits *limiter, name string, next func(restricted) (spec.Spec, error)) *callThread {
	t := &callThread{started: make(chan started, 1), done: make(chan struct{})}
	go func() {
		runtime.LockOSThread()
		ahead := restrictAhead(namespaces)
		s, err := next(ahead)
		if err != nil {
			t.started <- started{err: err}
			return
		}
		t.started <- startCall(s, ahead, reports, limits, name)
		<-t.done
	}()
	return t
}

// startCall prepares call s on the calling thread, which ahead says how
// far it restricted already (next made sure it takes s), and starts the
// function from it.
func startCall(s spec.Spec, ahead restricted, reports bool, limits *limiter, name string) started {
	st := started{spec: s}
	if s.Inside {
		if st.err = callMounts(s.PrivateDir, s.DirBytes); st.err != nil {
			return st
		}
	}
	// A warm helper starts in "/"; the one inside the call's namespaces
	// inherits its working directory (and gets no WorkDir).
	if s.WorkDir != "" {
		if err := unix.Chdir(s.WorkDir); err != nil {
			st.err = fmt.Errorf("entering the working directory %s: %w", s.WorkDir, err)
			return st
		}
	}
	if s.UID >= 0 {
		if st.err = giveToCall(s); st.err != nil {
			return st
		}
	}
	if s.Cgroup {
		if st.group, st.err = newCallCgroup(name, cgroupLimits{memory: s.MemoryMax, pids: s.PidsMax, cpuMillis: s.CPUMillis}); st.err != nil {
			return st
		}
	}
	st.pid, st.exited, st.err = startRestricted(s, ahead, reports, func(pid int) <-chan error { return limits.apply(pid, s) })
	return st
}

// restricted is how far a call's thread restricted itself before its call
// came.
type restricted struct {
	// seccomp is set when the thread has the filter
	// (installCallFilter).
	seccomp bool
	err     error
}

// takes fails when a thread restricted as r cannot start call s.
func (r restricted) takes(s spec.Spec) error {
	if r.err != nil {
		return r.err
	}
	if r.seccomp && s.Namespaces {
		// The helper in the namespaces sets the limits, from a thread
		// that must not have the filter.
		return errors.New("a helper for calls without namespaces (-warm) got one in namespaces")
	}
	return nil
}

// restrictAhead restricts the calling thread as every call needs, so that
// a warm helper's call does not wait for it: no_new_privs, an empty
// capability bounding set and, unless the calls are in namespaces (their
// helper inside does it), the seccomp filter. None of them keeps the thread
// from preparing the call: its mounts, directory, the files it gives the
// call's uid, its cgroup.
func restrictAhead(namespaces bool) restricted {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return restricted{err: fmt.Errorf("no_new_privs: %w", err)}
	}
	if err := dropBoundingSet(); err != nil {
		return restricted{err: err}
	}
	if namespaces {
		return restricted{}
	}
	if err := installCallFilter(); err != nil {
		return restricted{err: err}
	}
	return restricted{seccomp: true}
}

// dropBoundingSet empties the calling thread's capability bounding set, so
// that a function started as root (without the uid layer) gets no
// capabilities from exec. Without CAP_SETPCAP (a non-root runner) there is
// nothing to drop: such a runner has no capabilities to pass on.
func dropBoundingSet() error {
	for c := 0; ; c++ {
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		switch {
		case err == nil:
		case errors.Is(err, unix.EINVAL):
			return nil // past the last capability
		case errors.Is(err, unix.EPERM):
			return nil
		default:
			return fmt.Errorf("dropping capability %d: %w", c, err)
		}
	}
}

// Command fnsandbox runs one KRM function call in its sandbox. The
// binary-runner and the wrapper-server start it (package sandbox builds its
// command line, package spec encodes it) with the function's command line
// after "--":
//
//  1. it becomes a child subreaper;
//  2. one thread sets no_new_privs, empties its capability bounding set,
//     installs the seccomp filter (not for calls in namespaces: the helper
//     inside does), applies the Landlock rules and starts the function from
//     there, as the call's uid when one is given, in its own process group
//     with SIGKILL as its parent-death signal; a warm helper's thread does
//     all but Landlock before its call comes. The helper's other threads
//     stay unrestricted, so it can still end the call. The function starts
//     traced: another thread sets the call's rlimits on it (prlimit) while
//     it finishes its exec, and it is let go from its stop after the exec,
//     so the limits are on before its first instruction, and are the
//     function's alone (a Go helper reserves more address space than a call
//     may be allowed);
//  3. when the function exits, or the helper gets SIGTERM or SIGINT, it kills
//     the function and its group, then every process left below it (a setsid
//     escapee is reparented to the helper, found and killed), reaps them all,
//     and exits as the function did: with its exit code, or, when a signal
//     killed it, saying which on file descriptor 3.
//
// Once the function runs, the helper never blocks on one process: every
// wait is WNOHANG, woken by SIGCHLD or the function's pidfd, so a function
// whose exit only a tracer sees, or that left its process group, cannot
// hold it. (Before, the thread that started it waits for its stop after
// the exec.)
//
// "fnsandbox -warm" (or -warm-namespaces) starts before its calls and
// serves them one after another on file descriptor 4 (see serve and
// spec.Warm). "fnsandbox -probe" prints which layers this kernel and
// container allow.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/fnrunner/fnrunner/libs/sandbox/spec"
)

// init keeps the main goroutine on the main thread for good, so that no
// call's thread is ever the main thread: a goroutine that ends locked to
// its thread ends the thread too, except the main one, which the runtime
// keeps. A helper's work is on goroutines of its own (see main), not tied
// to a thread: waking one takes no switch to a thread of its own.
func init() { runtime.LockOSThread() }

func main() {
	// The runner's report pipe, if any, is the helper's alone.
	_, err := unix.FcntlInt(3, unix.F_GETFD, 0)
	reports := err == nil
	unix.CloseOnExec(3)
	if len(os.Args) == 2 {
		switch os.Args[1] {
		case spec.Probe:
			fmt.Print(probe().String())
			return
		case spec.Probe + "-noop": // the probe's traced child
			return
		case spec.Probe + "-mounts": // the probe's child in new namespaces
			// /proc doubles as the tmpfs's mount point.
			if err := callMounts("/proc", 1<<20); err != nil {
				fmt.Fprintf(os.Stderr, "fnsandbox -probe: %v\n", err)
				os.Exit(1)
			}
			return
		}
	}
	// A child subreaper for its life: every orphan below it is its
	// call's, as it serves one call at a time.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fail(fmt.Errorf("child subreaper: %w", err))
	}
	go func() {
		if len(os.Args) == 2 && (os.Args[1] == spec.Warm || os.Args[1] == spec.WarmNamespaces) {
			serve(os.Args[1] == spec.WarmNamespaces)
		}
		s, err := spec.Parse(os.Args[1:])
		if err != nil {
			fail(err)
		}
		sig := newSignals()
		thread := newCallThread(reports, s.Namespaces, newLimiter(), "call-"+strconv.Itoa(os.Getpid()), func(ahead restricted) (spec.Spec, error) { return s, ahead.takes(s) })
		_, ws, _, err := run(sig, thread)
		if err != nil {
			fail(err)
		}
		exitAs(ws)
	}()
	select {} // the helper's goroutine ends the process
}

// signals are a helper's channels for the signals it acts on, notified for
// its whole life (stopping a notification waits for the signal loop).
type signals struct {
	// stop gets SIGTERM and SIGINT during a call: end the call.
	stop chan os.Signal
	// children gets SIGCHLD: reap.
	children chan os.Signal

	mu   sync.Mutex
	idle bool
}

func newSignals() *signals {
	s := &signals{stop: make(chan os.Signal, 1), children: make(chan os.Signal, 1)}
	raw := make(chan os.Signal, 1)
	signal.Notify(raw, syscall.SIGTERM, syscall.SIGINT)
	signal.Notify(s.children, syscall.SIGCHLD)
	go func() {
		for got := range raw {
			s.mu.Lock()
			if s.idle {
				die(got)
			}
			select {
			case s.stop <- got:
			default:
			}
			s.mu.Unlock()
		}
	}()
	return s
}

// waiting says whether the helper waits for a call (or is in one). A
// stop signal that came or comes while it waits ends it.
func (s *signals) waiting(idle bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.idle = idle
	if !idle {
		return
	}
	select {
	case got := <-s.stop:
		die(got)
	default:
	}
}

// die ends the helper of sig, as it would without a handler for it.
func die(sig os.Signal) {
	signal.Reset(syscall.SIGTERM, syscall.SIGINT)
	_ = unix.Kill(os.Getpid(), sig.(syscall.Signal))
	select {} // until it arrives
}

// run waits for thread to start the function of call s, then for the
// function or a stop signal, and ends everything left below the helper.
func run(sig *signals, thread *callThread) (s spec.Spec, ws unix.WaitStatus, stopped bool, err error) {
	defer close(thread.done)
	// A SIGCHLD left from an earlier call only makes the reaper look once
	// more.
	children := sig.children
	st := <-thread.started
	s = st.spec
	if st.group != nil {
		defer st.group.remove()
	}
	r := &reaper{function: st.pid, group: st.group}
	if st.err != nil {
		if st.pid > 0 {
			r.sweep(children)
		}
		return s, 0, false, st.err
	}
	if st.exited != nil {
		r.functionExited, r.status = true, *st.exited
	}
	var exited <-chan struct{}
	if !r.functionExited { // else it is reaped already
		var unwatch func()
		exited, unwatch = watchExit(st.pid)
		defer unwatch()
	}
	for !stopped && !r.reap() && !r.functionExited {
		select {
		case <-children:
		case <-exited:
			exited = nil // once: its exit may be a tracer's to see first
		case <-sig.stop:
			stopped = true
		}
	}
	r.sweep(children)
	if st.group != nil {
		if limit := st.group.oomKilled(); limit > 0 {
			report(spec.MemoryReport(limit))
		}
	}
	if !r.functionExited {
		return s, unix.WaitStatus(unix.SIGKILL), true, nil // stopped: it was killed
	}
	return s, r.status, stopped, nil
}

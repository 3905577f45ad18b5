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
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
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

// callSocket is a warm helper's descriptor for its calls (spec.Warm).
const callSocket = 4

// serve is a warm helper's life: it serves the runner's calls one after
// another on callSocket, so that a call pays for no process start of the
// helper's (on a 2-core machine starting this Go process costs as much
// CPU as a small call). Between calls it holds nothing of any call: the
// call's descriptors are closed and every process of it reaped before the
// answer goes out. A call that fails to start, is stopped (SIGTERM), or
// whose runner closed the socket ends the helper as a helper of one call
// ends. Its calls are all in namespaces of their own (the userns layer),
// or none is: each call's thread is restricted before the call comes as
// those calls need (see restrictAhead).
func serve(namespaces bool) {
	// Nothing it inherited beyond its descriptors 0 to 4 reaches a
	// function (a runner's parent may leave descriptors open on exec).
	if err := closeOnExecFrom(callSocket + 1); err != nil {
		fail(fmt.Errorf("closing inherited descriptors on exec: %w", err))
	}
	unix.CloseOnExec(callSocket)
	state, err := openStateFiles()
	if err != nil {
		fail(err)
	}
	own, err := state.read()
	if err != nil {
		fail(err)
	}
	null, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		fail(fmt.Errorf("opening /dev/null: %w", err))
	}
	sig := newSignals()
	limits := newLimiter()
	var buf callBuffers
	for n := 1; ; n++ {
		// The thread that takes the next call, and carries its
		// restrictions, is made while the helper waits.
		next := func(ahead restricted) (spec.Spec, error) {
			// Told to stop between calls (from outside: the runner
			// stops calls only), or while it waits: it ends of it as it
			// did before serving calls, so a call sent meanwhile fails
			// as a stopped one and the runner's next call goes to
			// another.
			sig.waiting(true)
			s, err := awaitCall(&buf)
			// While it waited, a function running as its uid outside a
			// pid namespace (no uid or userns layer) may have changed
			// it: it refuses the call rather than pass that on. What
			// the function inherits is the process's and this
			// thread's.
			if err == nil && s.UID < 0 && !s.Namespaces {
				if changed := state.unchanged(own); changed != nil {
					err = helperFault{changed}
				}
			}
			// Nor does it take one its thread cannot start.
			if err == nil {
				err = ahead.takes(s)
			}
			if err != nil {
				refuse(err)
			}
			if _, err := unix.Write(callSocket, []byte(spec.Accepted)); err != nil {
				os.Exit(0) // the runner is gone
			}
			sig.waiting(false)
			return s, nil
		}
		thread := newCallThread(true, namespaces, limits, "call-"+strconv.Itoa(os.Getpid())+"-"+strconv.Itoa(n), next)
		s, ws, stopped, err := run(sig, thread)
		if err != nil {
			fail(err)
		}
		// A call in a cgroup of its own moved the helper there and back:
		// a helper whose move back failed, or whose memory was
		// charged there, is not to serve another. (One its function
		// changed refuses its next call, as above.)
		if stopped || s.Cgroup || !awaited() {
			exitAs(ws)
		}
		code := exitCode(ws)
		if err := endCall(null); err != nil {
			fail(err)
		}
		if _, err := unix.Write(callSocket, spec.FormatExit(code)); err != nil {
			os.Exit(0) // the runner is gone
		}
	}
}

// refuse answers a warm helper's call with why it does not run it, and
// ends the helper as a sandbox failure.
func refuse(err error) {
	var fault helperFault
	_, _ = unix.Write(callSocket, spec.FormatRefusal(err.Error(), errors.As(err, &fault)))
	fail(err)
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

// closeOnExecFrom marks every descriptor from first on close-on-exec:
// close_range where the kernel has it (5.11), else one by one.
func closeOnExecFrom(first int) error {
	if unix.CloseRange(uint(first), ^uint(0), unix.CLOSE_RANGE_CLOEXEC) == nil {
		return nil
	}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd >= first {
			unix.CloseOnExec(fd) // the directory's own descriptor is gone by then
		}
	}
	return nil
}

// callBuffers are where a warm helper receives its calls, made once.
type callBuffers struct {
	msg, oob []byte
}

// awaitCall waits for a warm helper's next call on callSocket and puts the
// call's descriptors in place: standard input, output and error, and the
// report pipe on 3 (see spec.Warm). With no call (the runner closed the
// socket or ended) it exits quietly.
func awaitCall(buf *callBuffers) (spec.Spec, error) {
	// While it waits, its descriptors are the runner uid's to open
	// through /proc, a function's too where no uid or Landlock layer
	// separates them: not dumpable, they are not (a call sent there would
	// run in a later call). Dumpable again after, as a helper's children
	// need it for their uid maps.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return spec.Spec{}, fmt.Errorf("not dumpable: %w", err)
	}
	if buf.msg == nil {
		buf.msg, buf.oob = make([]byte, spec.MaxEncoded+1), make([]byte, unix.CmsgSpace(spec.Descriptors*4))
	}
	b, oob := buf.msg, buf.oob
	var n, oobn, flags int
	var err error
	for {
		n, oobn, flags, _, err = unix.Recvmsg(callSocket, b, oob, unix.MSG_CMSG_CLOEXEC)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return spec.Spec{}, helperFault{fmt.Errorf("reading the call: %w", err)}
	}
	fds, fdErr := receivedDescriptors(oob[:oobn])
	if n == 0 && oobn == 0 {
		os.Exit(0)
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0); err != nil {
		return spec.Spec{}, fmt.Errorf("dumpable: %w", err)
	}
	switch {
	case fdErr != nil:
		return spec.Spec{}, helperFault{fdErr}
	case flags&unix.MSG_CTRUNC != 0:
		// Its limit on open files, lowered from outside, leaves no
		// room for them.
		return spec.Spec{}, helperFault{fmt.Errorf("the call's %d descriptors did not fit (open files limited?)", spec.Descriptors)}
	case flags&unix.MSG_TRUNC != 0 || n > spec.MaxEncoded:
		return spec.Spec{}, fmt.Errorf("call larger than %d bytes", spec.MaxEncoded)
	case len(fds) != spec.Descriptors:
		return spec.Spec{}, fmt.Errorf("call came with %d descriptors, not %d", len(fds), spec.Descriptors)
	}
	// Received descriptors are numbered above 3: 0 to 3 stay open
	// between calls (see endCall).
	for i, fd := range fds {
		if err := placeCallDescriptor(fd, i); err != nil {
			return spec.Spec{}, helperFault{fmt.Errorf("placing the call's descriptor %d: %w", i, err)}
		}
		unix.Close(fd)
	}
	return spec.Decode(b[:n])
}

// helperFault is a warm helper's failure to take a call that another
// helper may run: the helper is at fault, not the call.
type helperFault struct{ error }

func (f helperFault) Unwrap() error { return f.error }

// receivedDescriptors are the descriptors in a call message's control
// data.
func receivedDescriptors(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("reading the call's descriptors: %w", err)
	}
	var fds []int
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			return nil, fmt.Errorf("reading the call's descriptors: %w", err)
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

// awaited says whether the runner still waits for an answer after this
// call: during a call it sends nothing, so a readable socket means it
// closed its end.
func awaited() bool {
	fds := []unix.PollFd{{Fd: callSocket, Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n == 0
}

// placeCallDescriptor puts fd on a call's descriptor number to (0 to 3):
// the function inherits 0 to 2, the report pipe on 3 is the helper's alone.
func placeCallDescriptor(fd, to int) error {
	flag := 0
	if to == 3 {
		flag = unix.O_CLOEXEC
	}
	return unix.Dup3(fd, to, flag)
}

// endCall lets go of a call that has ended: its descriptors become null,
// /dev/null (so the runner sees the end of its pipes, and descriptors 0 to
// 3 stay taken), and the working directory "/" again.
func endCall(null int) error {
	for fd := 0; fd <= 3; fd++ {
		if err := placeCallDescriptor(null, fd); err != nil {
			return fmt.Errorf("ending the call: %w", err)
		}
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("ending the call: %w", err)
	}
	return nil
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

// callMounts gives the call, in its own mount namespace, a /proc of its own
// pid namespace (so it sees its own processes only) and, when dirBytes is
// set, a tmpfs of that size on its private directory, which becomes the
// working directory again. Mounts made here never reach the runner's
// namespace: the call's are private, and gone with the namespace.
func callMounts(dir string, dirBytes uint64) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making the call's mounts private: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting the call's /proc: %w", err)
	}
	if dir == "" || dirBytes == 0 {
		return nil
	}
	cwd, _ := os.Getwd()
	opts := "size=" + strconv.FormatUint(dirBytes, 10) + ",mode=0700"
	if err := unix.Mount("fnrunner-call", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mounting a tmpfs of %d bytes on %s: %w", dirBytes, dir, err)
	}
	if cwd != dir {
		return nil
	}
	// The working directory was the directory below the new mount.
	if err := unix.Chdir(dir); err != nil {
		return fmt.Errorf("entering %s: %w", dir, err)
	}
	return nil
}

// giveToCall hands the call's uid its private directory and the pipes of
// its standard streams (the runner's, mode 0600), so that it can reopen
// /dev/stdin, /dev/stdout and /dev/stderr.
func giveToCall(s spec.Spec) error {
	if s.PrivateDir != "" {
		if err := os.Lchown(s.PrivateDir, s.UID, s.GID); err != nil {
			return fmt.Errorf("giving %s to uid %d: %w", s.PrivateDir, s.UID, err)
		}
	}
	for fd := 0; fd <= 2; fd++ {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO {
			_ = unix.Fchown(fd, s.UID, s.GID)
		}
	}
	return nil
}

// startRestricted restricts the calling thread (locked to it) further, as
// far as ahead has not: the seccomp filter, Landlock; and starts the
// function from it.
func startRestricted(s spec.Spec, ahead restricted, reports bool, apply func(pid int) <-chan error) (int, *unix.WaitStatus, error) {
	pid, err := forkRestricted(s, ahead, reports)
	if err != nil || s.Limits == (spec.Limits{}) || s.Namespaces {
		// In namespaces, the helper run there sets the limits.
		return pid, nil, err
	}
	return setLimits(pid, apply)
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

// forkRestricted restricts the calling thread further (see
// startRestricted) and starts the function from it, traced when it is to
// get rlimits.
func forkRestricted(s spec.Spec, ahead restricted, reports bool) (int, error) {
	if s.Landlock && !s.Namespaces {
		if err := restrictThread(s.ReadOnly, append([]string{s.PrivateDir}, s.ReadWrite...), s.ConnectPorts, s.AnyConnect); err != nil {
			return 0, err
		}
	}
	if !s.Namespaces && !ahead.seccomp {
		// In namespaces, the helper run there, the function's parent,
		// does it.
		if err := installCallFilter(); err != nil {
			return 0, err
		}
	}
	sys := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Ptrace: s.Limits != (spec.Limits{}) && !s.Namespaces}
	path := s.Path
	if path == "" {
		path = s.Argv[0]
	}
	if fd, ok := strings.CutPrefix(path, "/proc/self/fd/"); ok && s.UID < 0 && !s.Namespaces {
		// The helper run in namespaces got the binary as a descriptor:
		// closed on exec, unless it is a script.
		if n, err := strconv.Atoi(fd); err == nil {
			closeOnExecUnlessScript(n)
		}
	}
	files := []uintptr{0, 1, 2}
	if s.UID >= 0 {
		sys.Credential = &syscall.Credential{Uid: uint32(s.UID), Gid: uint32(s.GID), Groups: []uint32{}}
	}
	argv := s.Argv
	if s.UID >= 0 || s.Namespaces {
		// The binary is opened here, as the runner, and executed through
		// the descriptor, so the call's uid need not be able to reach it
		// (Bazel's output tree, a functions directory below a private
		// home). Through a second exec (namespaces) it must stay open.
		fd, err := openForExec(path, s.Namespaces)
		if err != nil {
			return 0, fmt.Errorf("starting %s: %w", path, err)
		}
		defer unix.Close(fd)
		path = "/proc/self/fd/" + strconv.Itoa(fd)
	}
	if s.Namespaces {
		var err error
		if path, argv, err = namespaces(s, sys, path); err != nil {
			return 0, err
		}
		if s.UID >= 0 {
			// Groups cannot be set inside (setgroups is denied there):
			// this thread, which the function's namespaces inherit
			// from, drops the runner's.
			if _, _, errno := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); errno != 0 {
				return 0, fmt.Errorf("dropping groups: %w", errno)
			}
		}
		defer unix.Close(selfFD(path))
		if reports {
			files = append(files, 3) // its reports go to the runner
		}
	}
	// No Dir: the function inherits the helper's working directory (its
	// private directory) without walking a path the call's uid may not
	// reach.
	env := s.Env
	if env == nil {
		env = os.Environ()
	}
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   env,
		Files: files,
		Sys:   sys,
	})
	if err != nil {
		return 0, fmt.Errorf("starting %s: %w", s.Argv[0], err)
	}
	return pid, nil
}

// selfFD is N of a /proc/self/fd/N path.
func selfFD(path string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(path, "/proc/self/fd/"))
	return n
}

// namespaces starts the function in namespaces of its own: user (its uid 0
// is the call's uid outside, or the helper's own without the uid layer),
// pid, mount, IPC, UTS, and network unless it may connect somewhere (a new
// network namespace has no interface up, so no TCP, UDP or DNS at all).
//
// The helper's thread writes the new namespace's uid and gid maps, which
// Landlock would forbid, and the function must not be PID 1 (which ignores
// the signals it has no handler for, the rlimits' SIGXFSZ and SIGXCPU
// among them). So the helper runs itself again in the namespaces, as their
// PID 1: that one applies no_new_privs, an empty bounding set (a new user
// namespace starts with a full one), Landlock and the rlimits as ever,
// starts the function, reports to the runner on descriptor 3, and when it
// ends, the kernel kills whatever is left in the namespaces. It returns the
// command line of the helper in the namespaces.
func namespaces(s spec.Spec, sys *syscall.SysProcAttr, path string) (string, []string, error) {
	sys.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS
	if !s.AnyConnect && len(s.ConnectPorts) == 0 {
		sys.Cloneflags |= syscall.CLONE_NEWNET
	}
	uid, gid := os.Getuid(), os.Getgid()
	if s.UID >= 0 {
		uid, gid = s.UID, s.GID
	}
	sys.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}}
	sys.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}}
	// Uid 0 inside is the mapped uid outside; groups cannot be set in a
	// namespace whose setgroups is denied.
	sys.Credential = &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true}

	self, err := unix.Open("/proc/self/exe", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", nil, fmt.Errorf("fnsandbox itself: %w", err)
	}
	inner := s
	inner.Namespaces, inner.UID, inner.GID, inner.Path = false, -1, -1, path
	// It starts in the working directory and with the environment it is
	// to give the function (not on its command line, which anyone reads).
	inner.WorkDir, inner.Env = "", nil
	inner.Inside = true
	inner.Cgroup = false // the call's cgroup holds this helper, and so the one inside
	// The helper inside may not reach the binary by its path (it is the
	// call's uid): its Landlock rule names the descriptor instead.
	inner.ReadOnly = append(slices.Clone(s.ReadOnly), path)
	return "/proc/self/fd/" + strconv.Itoa(self), append([]string{"fnsandbox"}, inner.Args()...), nil
}

// closeOnExecUnlessScript marks fd close-on-exec unless it holds a script,
// whose interpreter reads it through the descriptor.
func closeOnExecUnlessScript(fd int) {
	magic := make([]byte, 2)
	if n, _ := unix.Pread(fd, magic, 0); n != 2 || string(magic) != "#!" {
		unix.CloseOnExec(fd)
	}
}

// openForExec opens the binary at path to be executed through
// /proc/self/fd: close-on-exec (the kernel has opened the binary by then),
// unless it is a script, whose interpreter reads it through the descriptor.
func openForExec(path string, keep bool) (int, error) {
	flags := unix.O_RDONLY | unix.O_CLOEXEC
	if keep {
		flags = unix.O_RDONLY
	}
	fd, err := unix.Open(path, flags, 0)
	if err != nil {
		return -1, err
	}
	magic := make([]byte, 2)
	if n, _ := unix.Pread(fd, magic, 0); n == 2 && string(magic) == "#!" {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	return fd, nil
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

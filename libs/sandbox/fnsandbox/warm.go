// A warm helper: its calls, one after another on callSocket, and their
// descriptors.

package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/fnrunner/fnrunner/libs/sandbox/spec"
)

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
// closed its end. A signal during the poll (a call's SIGCHLD, the Go
// runtime's preemption) interrupts it, never restarted: it asks again,
// else the helper would end after a call for nothing.
func awaited() bool {
	fds := []unix.PollFd{{Fd: callSocket, Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if !errors.Is(err, unix.EINTR) {
			return err == nil && n == 0
		}
	}
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

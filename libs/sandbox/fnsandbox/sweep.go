package main

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// reaper reaps the helper's children without ever blocking on one, noting
// the function's status when it is among them.
type reaper struct {
	function int
	// group, when the call has one, names every process of the call.
	group          *callCgroup
	functionExited bool
	status         unix.WaitStatus
}

// reap reaps every child that has ended and reports whether the helper has
// no child left.
func (r *reaper) reap() (none bool) {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil: // ECHILD
			return true
		case pid == 0:
			return false
		case pid == r.function:
			r.functionExited, r.status = true, ws
		}
	}
}

// sweep kills and reaps every process left below the helper: the function
// and its group, then, round by round, each remaining child (as a child
// subreaper, the helper inherits every orphaned descendant, a setsid
// escapee's or a tracer's too), until the helper has no children. Each round
// kills what the last one orphaned; the process limit bounds how many a
// fork bomb makes meanwhile. Waits are for SIGCHLD or a short timer, never
// for one process.
//
// As PID 1 of the call's namespaces (userns), whose /proc is still the
// outer one, it kills everything else in them at once instead: kill(-1).
func (r *reaper) sweep(children <-chan os.Signal) {
	if !r.functionExited {
		// Not reaped yet, so its pid (and group) cannot have been
		// given to another process; once reaped, what is left of its
		// group is found among the helper's children below.
		_ = unix.Kill(r.function, unix.SIGKILL)
		_ = unix.Kill(-r.function, unix.SIGKILL)
	}
	init := os.Getpid() == 1
	for !r.reap() {
		switch {
		case init:
			_ = unix.Kill(-1, unix.SIGKILL)
		case r.group != nil && r.group.kill() > 0:
			// The call's processes are in its cgroup: one read
			// finds them. Scanning /proc for the helper's children
			// instead takes a read per process on the machine, and
			// a fork bomb refills its cgroup's pids.max faster than
			// that under load (the runner's SIGKILL then came first,
			// and orphaned the bomb).
		default:
			// Without a cgroup, or once it is empty while the helper
			// still has children (a process that left it).
			for _, c := range childrenOf(os.Getpid()) {
				_ = unix.Kill(-c, unix.SIGKILL)
				_ = unix.Kill(c, unix.SIGKILL)
			}
		}
		select {
		case <-children:
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// childrenOf lists the processes whose parent is ppid, from /proc (the
// kernel's children list needs CONFIG_PROC_CHILDREN, which not every kernel
// has).
func childrenOf(ppid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if parentOf(stat) == ppid {
			out = append(out, pid)
		}
	}
	return out
}

// parentOf is the ppid field of /proc/<pid>/stat: the second field after the
// command name, which is in parentheses and may itself hold spaces and
// parentheses.
func parentOf(stat []byte) int {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return -1
	}
	fields := bytes.Fields(stat[i+1:])
	if len(fields) < 2 {
		return -1
	}
	ppid, err := strconv.Atoi(string(fields[1]))
	if err != nil {
		return -1
	}
	return ppid
}

// watchExit returns a channel that is ready once process pid, a child of
// the helper, has exited, and a function ending the watch. It wakes the
// helper sooner than SIGCHLD, which reaches it through the runtime's signal
// handling: the process's pidfd waits in the runtime's poller, whose
// thread the kernel wakes itself. Without pidfds (Linux before 5.10) the
// channel is never ready, and SIGCHLD alone wakes the helper.
func watchExit(pid int) (<-chan struct{}, func()) {
	if pid <= 0 {
		return nil, func() {}
	}
	// The child is not reaped before the watch ends: pid is still its.
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil, func() {}
	}
	f := os.NewFile(uintptr(fd), "function pidfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, func() {}
	}
	exited, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		// A pidfd is readable once its process has exited; it has
		// nothing to read.
		err := rc.Read(func(fd uintptr) bool {
			ready := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(ready, 0)
			if errors.Is(err, unix.EINTR) {
				return false // the poller says when to look again
			}
			return err != nil || n > 0
		})
		if err == nil {
			close(exited)
		}
	}()
	return exited, func() {
		f.Close() // ends a wait still going on
		<-done
	}
}

// Command fnsandbox runs one KRM function call in its sandbox. The
// binary-runner and the wrapper-server start it (package sandbox builds its
// command line, package spec encodes it) with the function's command line
// after "--":
//
//  1. it becomes a child subreaper and sets the call's rlimits;
//  2. one thread sets no_new_privs, applies the Landlock rules and starts the
//     function from there, as the call's uid when one is given, in its own
//     process group with SIGKILL as its parent-death signal; the helper's
//     other threads stay unrestricted, so it can still end the call;
//  3. when the function exits, or the helper gets SIGTERM or SIGINT, it kills
//     the function's group and then every process left below it (a setsid
//     escapee is reparented to the helper, found and killed), reaps them
//     all, and exits as the function did: with its exit code, or killed by
//     the same signal.
//
// "fnsandbox -probe" prints which layers this kernel and container allow.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/fnrunner/fnrunner/libs/sandbox/spec"
)

func main() {
	// The runner's error pipe, if any, is the helper's alone.
	unix.CloseOnExec(3)
	if len(os.Args) == 2 {
		switch os.Args[1] {
		case spec.Probe:
			fmt.Print(probe().String())
			return
		case spec.Probe + "-noop": // the probe's child in new namespaces
			return
		}
	}
	s, err := spec.Parse(os.Args[1:])
	if err != nil {
		fail(err)
	}
	ws, err := run(s)
	if err != nil {
		fail(err)
	}
	exitAs(ws)
}

// fail reports a sandbox failure (the function never ran) on file
// descriptor 3 when the runner passed one, else on stderr, and exits 125, as
// container runtimes do.
func fail(err error) {
	w := os.Stderr
	if _, statErr := os.NewFile(3, "").Stat(); statErr == nil {
		w = os.NewFile(3, "sandbox errors")
	}
	fmt.Fprintf(w, "fnsandbox: %v\n", err)
	os.Exit(125)
}

// run starts the function as s says, waits for it or for a stop signal, and
// ends everything left below the helper.
func run(s spec.Spec) (unix.WaitStatus, error) {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return 0, fmt.Errorf("child subreaper: %w", err)
	}
	if err := setLimits(s.Limits); err != nil {
		return 0, err
	}
	if s.UID >= 0 && s.PrivateDir != "" {
		if err := os.Lchown(s.PrivateDir, s.UID, s.GID); err != nil {
			return 0, fmt.Errorf("giving %s to uid %d: %w", s.PrivateDir, s.UID, err)
		}
	}
	type started struct {
		pid int
		err error
	}
	startedc := make(chan started, 1)
	exited := make(chan unix.WaitStatus, 1)
	go func() {
		// This thread carries the restrictions and is the function's
		// parent (its parent-death signal is tied to the thread), so it
		// stays locked until the function exits and then ends with the
		// goroutine.
		runtime.LockOSThread()
		pid, err := startRestricted(s)
		startedc <- started{pid, err}
		if err != nil {
			return
		}
		var ws unix.WaitStatus
		for {
			_, err := unix.Wait4(pid, &ws, 0, nil)
			if !errors.Is(err, unix.EINTR) {
				break
			}
		}
		exited <- ws
	}()
	st := <-startedc
	if st.err != nil {
		return 0, st.err
	}
	var ws unix.WaitStatus
	select {
	case ws = <-exited:
	case <-signals:
		_ = unix.Kill(-st.pid, unix.SIGKILL)
		ws = <-exited
	}
	sweep(st.pid)
	return ws, nil
}

// startRestricted applies no_new_privs and Landlock to the calling thread
// (locked to it) and starts the function from it.
func startRestricted(s spec.Spec) (int, error) {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return 0, fmt.Errorf("no_new_privs: %w", err)
	}
	if s.Landlock {
		if err := restrictThread(s.ReadOnly, append([]string{s.PrivateDir}, s.ReadWrite...), s.ConnectPorts, s.AnyConnect); err != nil {
			return 0, err
		}
	}
	sys := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	path := s.Argv[0]
	files := []uintptr{0, 1, 2}
	if s.UID >= 0 {
		sys.Credential = &syscall.Credential{Uid: uint32(s.UID), Gid: uint32(s.GID), Groups: []uint32{}}
		// The binary is opened here, as the runner, and executed through
		// the descriptor, so the call's uid need not be able to reach it
		// (Bazel's output tree, a functions directory below a private
		// home). The descriptor stays open in the function: an
		// interpreter's script is read through it.
		fd, err := unix.Open(path, unix.O_RDONLY, 0)
		if err != nil {
			return 0, fmt.Errorf("starting %s: %w", path, err)
		}
		defer unix.Close(fd)
		files = append(files, uintptr(fd))
		path = "/proc/self/fd/3"
	}
	// No Dir: the function inherits the helper's working directory (its
	// private directory) without walking a path the call's uid may not
	// reach.
	pid, err := syscall.ForkExec(path, s.Argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: files,
		Sys:   sys,
	})
	if err != nil {
		return 0, fmt.Errorf("starting %s: %w", s.Argv[0], err)
	}
	return pid, nil
}

// setLimits sets the call's rlimits on the helper, to be inherited.
func setLimits(l spec.Limits) error {
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
		if err := unix.Setrlimit(r.resource, &lim); err != nil {
			return fmt.Errorf("limit on %s (%d): %w", r.name, r.value, err)
		}
	}
	return nil
}

// exitAs ends the helper the way the function ended.
func exitAs(ws unix.WaitStatus) {
	switch {
	case ws.Exited():
		os.Exit(ws.ExitStatus())
	case ws.Signaled():
		sig := ws.Signal()
		signal.Reset(sig)
		_ = unix.Kill(os.Getpid(), sig)
		// A signal whose default is not to end the process: say so.
		os.Exit(128 + int(sig))
	}
	os.Exit(125)
}

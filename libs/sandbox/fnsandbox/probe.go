package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/fnrunner/fnrunner/libs/sandbox/spec"
)

// probe finds out which layers this kernel and container allow, by trying
// each the way a run applies it.
func probe() spec.Report {
	var r spec.Report
	add := func(layer string, ok bool, detail string) {
		r = append(r, spec.Finding{Layer: layer, Available: ok, Detail: detail})
	}
	ok, detail := baseFinding()
	add("base", ok, detail)
	ok, detail = landlockFinding()
	add("landlock", ok, detail)
	ok, detail = uidFinding()
	add("uid", ok, detail)
	ok, detail = usernsFinding()
	add("userns", ok, detail)
	ok, detail = cgroupFinding()
	add("cgroup", ok, detail)
	return r
}

// baseFinding tries no_new_privs and the seccomp filter (on a thread that
// is then discarded) and the child subreaper.
func baseFinding() (bool, string) {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			errc <- fmt.Errorf("no_new_privs: %w", err)
			return
		}
		errc <- installCallFilter()
	}()
	if err := <-errc; err != nil {
		return false, err.Error()
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return false, "child subreaper: " + err.Error()
	}
	// rlimits are set on the function stopped at its exec, traced by the
	// helper: tracing its own child must be allowed (Yama's ptrace_scope 3
	// or a seccomp profile may forbid it).
	errc = make(chan error, 1)
	go func() {
		runtime.LockOSThread() // the tracer is this thread
		defer runtime.UnlockOSThread()
		exe, err := os.Executable()
		if err != nil {
			errc <- err
			return
		}
		pid, err := syscall.ForkExec(exe, []string{exe, spec.Probe + "-noop"}, &syscall.ProcAttr{Sys: &syscall.SysProcAttr{Ptrace: true}})
		if err != nil {
			errc <- err
			return
		}
		var ws unix.WaitStatus
		_, err = unix.Wait4(pid, &ws, unix.WALL, nil)
		if err == nil && ws.Stopped() {
			err = unix.PtraceDetach(pid)
			_, _ = unix.Wait4(pid, &ws, unix.WALL, nil)
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		return false, "tracing a child to set its rlimits: " + err.Error()
	}
	return true, "no_new_privs, no capabilities, no prlimit of other processes (seccomp), child subreaper, rlimits"
}

// uidFinding: a call gets its own uid only when the helper may change uid
// and gid (root, or CAP_SETUID and CAP_SETGID).
func uidFinding() (bool, string) {
	caps, err := effectiveCaps()
	if err != nil {
		return false, err.Error()
	}
	const setgid, setuid = 6, 7
	if caps&(1<<setuid) == 0 || caps&(1<<setgid) == 0 {
		return false, "no CAP_SETUID and CAP_SETGID (the runner is not root)"
	}
	return true, fmt.Sprintf("runner uid %d may change uid", os.Getuid())
}

func effectiveCaps() (uint64, error) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, fmt.Errorf("no CapEff in /proc/self/status")
}

// usernsFinding starts a child in a new user namespace.
func usernsFinding() (bool, string) {
	exe, err := os.Executable()
	if err != nil {
		return false, err.Error()
	}
	// As a run does: uid 0 inside is this uid, and the helper there mounts
	// the call's /proc (which a container runtime's masked /proc forbids).
	pid, err := syscall.ForkExec(exe, []string{exe, spec.Probe + "-mounts"}, &syscall.ProcAttr{
		Files: []uintptr{0, 1, 2},
		Sys: &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWNET,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
			Credential:  &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true},
		},
	})
	if err != nil {
		return false, "unshare user, pid, mount and network namespaces: " + err.Error()
	}
	var ws unix.WaitStatus
	_, _ = unix.Wait4(pid, &ws, 0, nil)
	if !ws.Exited() || ws.ExitStatus() != 0 {
		return false, "namespaces, but not the call's own /proc in them (a masked /proc?): see the helper's stderr"
	}
	return true, "user, pid, mount, IPC, UTS and network namespaces; a /proc of its own; a size-limited tmpfs as private directory"
}

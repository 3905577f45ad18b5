// The function's start: its mounts and files, its fork, restricted, in
// namespaces of its own when the call is in them.

package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/fnrunner/fnrunner/libs/sandbox/spec"
)

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

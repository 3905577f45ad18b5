package main

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// sweep kills and reaps every process left below the helper after the
// function (pid) exited: its process group first, then, round by round,
// each remaining child of the helper (as a child subreaper, the helper
// inherits every orphaned descendant, a setsid escapee's too), until the
// helper has no children. Each round kills what the last one orphaned, and
// the process limit bounds how many a fork bomb makes meanwhile.
func sweep(pid int) {
	_ = unix.Kill(-pid, unix.SIGKILL)
	for {
		var ws unix.WaitStatus
		reaped, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		switch {
		case errors.Is(err, unix.ECHILD):
			return
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return
		case reaped > 0:
			continue
		}
		children := childrenOf(os.Getpid())
		for _, c := range children {
			_ = unix.Kill(-c, unix.SIGKILL)
			_ = unix.Kill(c, unix.SIGKILL)
		}
		if len(children) == 0 {
			// Reparenting is under way; look again shortly.
			time.Sleep(time.Millisecond)
			continue
		}
		_, _ = unix.Wait4(-1, &ws, 0, nil)
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

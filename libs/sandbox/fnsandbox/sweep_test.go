package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fnrunner/fnrunner/tests/harness"
)

// startChild starts argv as a child the test reaps itself, its standard
// input stdin.
func startChild(t *testing.T, stdin *os.File, argv ...string) int {
	t.Helper()
	path, err := exec.LookPath(argv[0])
	require.NoError(t, err)
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{stdin.Fd(), 2, 2}})
	require.NoError(t, err)
	return pid
}

// reapChild waits for pid and returns its status.
func reapChild(t *testing.T, pid int) unix.WaitStatus {
	t.Helper()
	var ws unix.WaitStatus
	_, err := unix.Wait4(pid, &ws, 0, nil)
	require.NoError(t, err)
	return ws
}

// skipWithoutPidfds skips a test (harness.Need) on a kernel without pidfds
// (before 5.10 for PIDFD_NONBLOCK), where watchExit watches nothing.
func skipWithoutPidfds(t *testing.T) {
	t.Helper()
	fd, err := unix.PidfdOpen(os.Getpid(), unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) {
		harness.Need(t, "watching exits by pidfd", fmt.Errorf("this kernel has no pidfds: %w", err))
	}
	require.NoError(t, err)
	unix.Close(fd)
}

// The watch is ready once its process has exited, not before, without
// reaping it: the reaper still finds its status.
func TestWatchExit(t *testing.T) {
	skipWithoutPidfds(t)
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	// It lives until the pipe's write end closes (cat reads it to the end).
	pid := startChild(t, r, "cat")

	exited, unwatch := watchExit(pid)
	require.NotNil(t, exited)
	select {
	case <-exited:
		t.Fatal("ready while the process runs")
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, w.Close())
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("not ready after the process exited")
	}
	unwatch()
	ws := reapChild(t, pid)
	assert.True(t, ws.Exited())
	assert.Zero(t, ws.ExitStatus())
}

// Ended while its process still runs, the watch lets go at once.
func TestWatchExitEndsBeforeTheProcess(t *testing.T) {
	skipWithoutPidfds(t)
	pid := startChild(t, os.Stdin, "sleep", "60")
	defer func() {
		_ = unix.Kill(pid, unix.SIGKILL)
		reapChild(t, pid)
	}()
	exited, unwatch := watchExit(pid)
	require.NotNil(t, exited)
	done := make(chan struct{})
	go func() {
		unwatch()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("unwatch waited for the process")
	}
	select {
	case <-exited:
		t.Fatal("ready though the process runs")
	default:
	}
}

// No process, no watch: a channel that is never ready.
func TestWatchExitOfNoProcess(t *testing.T) {
	exited, unwatch := watchExit(0)
	assert.Nil(t, exited)
	unwatch()
}

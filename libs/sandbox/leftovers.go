package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// endUID ends every process of uid, a call's own (the uid layer), that a
// helper killed before it ended its call left running, and reports whether
// none is left, not even a zombie (which would still count against the
// uid's process limit in a later call): it looks through /proc round after
// round, kills each process of the uid, and reaps those whose parent the
// runner has become (as PID 1 of its container, orphans come to it); the
// others' parents reap them. It gives up after rounds (a process it may
// not kill, a zombie no one reaps). Each process is signalled and reaped
// through a pidfd opened before its owner is read again, so a pid given
// meanwhile to another process is never touched.
func endUID(uid, rounds int) bool {
	for range rounds {
		entries, err := os.ReadDir("/proc")
		if err != nil {
			return false
		}
		left := 0
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if _, ok := stateOf(pid, uid); !ok {
				continue
			}
			fd, err := unix.PidfdOpen(pid, 0)
			if errors.Is(err, unix.ESRCH) {
				continue // gone
			}
			if err != nil {
				// No pidfds (an old kernel, a seccomp profile): it
				// cannot be killed safely, so the uid stays kept.
				left++
				continue
			}
			// The pidfd is the process read now, or one that has ended:
			// a signal or a wait on the latter fails.
			if st, ok := stateOf(pid, uid); ok {
				left++
				switch st {
				case running:
					_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
				case dead:
					// Reaped here when the runner is its parent; else
					// left to its parent, and counted until it is gone.
					var info unix.Siginfo
					if unix.Waitid(unix.P_PIDFD, fd, &info, unix.WEXITED|unix.WNOHANG, nil) == nil && info.Signo != 0 {
						left--
					}
				}
			}
			unix.Close(fd)
		}
		if left == 0 {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// procState is what endUID makes of a process.
type procState int

const (
	// running: it runs, or its main thread has ended and another runs
	// (a zombie leader with threads).
	running procState = iota
	// dead: a zombie, to be reaped.
	dead
)

// stateOf reads process pid's state when its real uid is uid.
func stateOf(pid, uid int) (procState, bool) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	zombie, real, threads := false, -1, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Bytes()
		if v, ok := bytes.CutPrefix(line, []byte("State:")); ok {
			zombie = bytes.HasPrefix(bytes.TrimSpace(v), []byte("Z"))
		} else if v, ok := bytes.CutPrefix(line, []byte("Uid:")); ok {
			if f := bytes.Fields(v); len(f) > 0 {
				real, _ = strconv.Atoi(string(f[0]))
			}
		} else if v, ok := bytes.CutPrefix(line, []byte("Threads:")); ok {
			threads, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
			break // after State and Uid
		}
	}
	if real != uid {
		return 0, false
	}
	if zombie && threads <= 1 {
		return dead, true
	}
	return running, true
}

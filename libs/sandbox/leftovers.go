package sandbox

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// endUID ends every process of uid, a call's own (the uid layer), that a
// helper killed before it ended its call left running: it looks through
// /proc and kills each, round after round, until none is left (it reports
// true) or rounds have passed (false: one it cannot kill, or a fork bomb
// outrunning it). A process is killed through a pidfd opened before its
// owner is read again, so that a pid given meanwhile to a process of
// another uid is never signalled. Zombies are not counted: they run
// nothing, and whoever reaps them is not this.
func endUID(uid, rounds int) bool {
	for range rounds {
		entries, err := os.ReadDir("/proc")
		if err != nil {
			return false
		}
		left := 0
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || !runsAs(pid, uid) {
				continue
			}
			fd, err := unix.PidfdOpen(pid, 0)
			if err != nil {
				continue // gone
			}
			// The pidfd is the process read now, or one that ended: a
			// signal to the latter fails.
			if runsAs(pid, uid) {
				left++
				_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
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

// runsAs says whether process pid, not a zombie, has uid as its real uid.
func runsAs(pid, uid int) bool {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	zombie, real := false, -1
	for sc.Scan() {
		line := sc.Bytes()
		if v, ok := bytes.CutPrefix(line, []byte("State:")); ok {
			zombie = bytes.HasPrefix(bytes.TrimSpace(v), []byte("Z"))
		}
		if v, ok := bytes.CutPrefix(line, []byte("Uid:")); ok {
			if f := bytes.Fields(v); len(f) > 0 {
				real, _ = strconv.Atoi(string(f[0]))
			}
			break // after State
		}
	}
	return !zombie && real == uid
}

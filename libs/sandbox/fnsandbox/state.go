package main

import (
	"fmt"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// helperState is what of a warm helper another process of its uid could
// change and a later call's function would inherit: its rlimits, OOM score
// adjustment and cgroups, and each thread's scheduling (policy, nice value,
// priority), I/O priority and CPU affinity (a thread starts with its
// creator's). A function running as the helper's uid may change its own
// helper, and, outside a pid namespace, the helpers waiting beside it.
type helperState struct {
	limits, oomScoreAdj, cgroups string
	sched                        unix.SchedAttr
	ioprio                       uintptr
	affinity                     unix.CPUSet
}

// stateFiles are the helper's /proc files its state is read from, opened
// once: reading one again costs a fraction of opening it (a warm helper
// reads its state on every call).
type stateFiles struct {
	limits, oomScoreAdj, cgroups, tasks int
	buf                                 []byte
}

func openStateFiles() (*stateFiles, error) {
	f := &stateFiles{buf: make([]byte, 8<<10)}
	for _, file := range []struct {
		fd   *int
		path string
	}{
		{&f.limits, "/proc/self/limits"},
		{&f.oomScoreAdj, "/proc/self/oom_score_adj"},
		{&f.cgroups, "/proc/self/cgroup"},
		{&f.tasks, "/proc/self/task"},
	} {
		fd, err := unix.Open(file.path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("reading the helper's state: %w", err)
		}
		*file.fd = fd
	}
	return f, nil
}

// read reads the helper's state, and fails when its threads disagree.
func (f *stateFiles) read() (helperState, error) {
	st, err := f.process()
	if err != nil {
		return st, err
	}
	tids, err := f.threads()
	if err != nil {
		return st, err
	}
	first := true
	for _, tid := range tids {
		sched, ioprio, affinity, err := threadState(tid)
		if err != nil {
			continue // ended meanwhile
		}
		if first {
			st.sched, st.ioprio, st.affinity, first = sched, ioprio, affinity, false
		} else if sched != st.sched || ioprio != st.ioprio || affinity != st.affinity {
			return st, fmt.Errorf("thread %d of the helper has another scheduling, I/O priority or CPU affinity", tid)
		}
	}
	return st, nil
}

// process reads the helper's state that is its process's: rlimits, OOM
// score adjustment, cgroups.
func (f *stateFiles) process() (helperState, error) {
	var st helperState
	for _, file := range []struct {
		fd   int
		into *string
	}{{f.limits, &st.limits}, {f.oomScoreAdj, &st.oomScoreAdj}, {f.cgroups, &st.cgroups}} {
		n, err := unix.Pread(file.fd, f.buf, 0)
		if err != nil {
			return st, fmt.Errorf("reading the helper's state: %w", err)
		}
		if n == len(f.buf) {
			return st, fmt.Errorf("reading the helper's state: over %d bytes", len(f.buf))
		}
		*file.into = string(f.buf[:n])
	}
	return st, nil
}

// threadState is thread tid's scheduling, I/O priority and CPU affinity;
// tid 0 is the calling thread.
func threadState(tid int) (unix.SchedAttr, uintptr, unix.CPUSet, error) {
	var affinity unix.CPUSet
	sched, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return unix.SchedAttr{}, 0, affinity, err
	}
	const ioprioWhoProcess = 1
	ioprio, _, errno := unix.Syscall(unix.SYS_IOPRIO_GET, ioprioWhoProcess, uintptr(tid), 0)
	if errno != 0 {
		return unix.SchedAttr{}, 0, affinity, errno
	}
	if err := unix.SchedGetaffinity(tid, &affinity); err != nil {
		return unix.SchedAttr{}, 0, affinity, err
	}
	return *sched, ioprio, affinity, nil
}

// threads lists the helper's thread ids.
func (f *stateFiles) threads() ([]int, error) {
	if _, err := unix.Seek(f.tasks, 0, 0); err != nil {
		return nil, fmt.Errorf("reading the helper's threads: %w", err)
	}
	var tids []int
	for {
		n, err := unix.Getdents(f.tasks, f.buf)
		if err != nil {
			return nil, fmt.Errorf("reading the helper's threads: %w", err)
		}
		if n == 0 {
			return tids, nil
		}
		_, _, names := syscall.ParseDirent(f.buf[:n], -1, nil)
		for _, name := range names {
			if tid, err := strconv.Atoi(name); err == nil {
				tids = append(tids, tid)
			}
		}
	}
}

// unchanged fails when the helper's state is no longer want: its
// process's, and the calling thread's. A process it starts inherits the
// process's and its parent thread's: a call's thread checks itself before
// it starts the function (another thread changed passes nothing on).
func (f *stateFiles) unchanged(want helperState) error {
	now, err := f.process()
	if err != nil {
		return err
	}
	if now.sched, now.ioprio, now.affinity, err = threadState(0); err != nil {
		return fmt.Errorf("reading the helper's state: %w", err)
	}
	if now != want {
		return fmt.Errorf("the helper's limits, OOM score, cgroups or scheduling changed since it started")
	}
	return nil
}

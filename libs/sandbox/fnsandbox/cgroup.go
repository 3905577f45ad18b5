package main

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fnrunner/fnrunner/libs/sandbox/spec"
)

// callCgroup is a call's cgroup: in cgroup v1, one directory per controller
// (memory, pids); in v2, one directory.
type callCgroup struct {
	v2      bool
	dirs    []string
	origins []string // the helper's own cgroups, to go back to
	// cpu: the cpu controller is there (v1's cpu hierarchy, or enabled
	// for v2's children), so CPU time can be bounded.
	cpu bool
}

// cgroupBases are the helper's own cgroup directories: v2's unified one, or
// v1's memory and pids ones, and its cpu one when there is that hierarchy.
func cgroupBases() (v2 bool, bases []string, err error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return false, nil, err
	}
	defer f.Close()
	v1 := map[string]string{}
	unified := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			unified = parts[2]
		}
		for _, c := range strings.Split(parts[1], ",") {
			v1[c] = parts[2]
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return true, []string{filepath.Join("/sys/fs/cgroup", unified)}, nil
	}
	for _, c := range []string{"memory", "pids"} {
		p, ok := v1[c]
		if !ok {
			return false, nil, fmt.Errorf("no cgroup v1 %s controller", c)
		}
		bases = append(bases, filepath.Join("/sys/fs/cgroup", c, p))
	}
	if p, ok := v1["cpu"]; ok {
		if dir := filepath.Join("/sys/fs/cgroup", "cpu", p); writable(dir) {
			bases = append(bases, dir)
		}
	}
	return false, bases, nil
}

// writable says whether a cgroup can be made in dir (as root in a container
// whose v1 hierarchies are mounted read-only, it cannot).
func writable(dir string) bool {
	return unix.Access(dir, unix.W_OK) == nil
}

// cgroupLimits are a call's cgroup limits; 0 leaves one unset.
type cgroupLimits struct {
	memory, pids uint64
	// cpuMillis is the CPU time per wall-clock second, in thousandths of
	// a CPU (1000: one CPU).
	cpuMillis uint64
}

// cpuPeriod is the CFS period the call's CPU quota is given over, in µs.
const cpuPeriod = 100_000

// newCallCgroup makes the call's cgroup with its limits and moves the helper
// into it, so that everything it starts is in it too. The CPU limit needs
// the cpu controller; without it the call runs unbounded in CPU (the probe
// says so).
func newCallCgroup(name string, l cgroupLimits) (*callCgroup, error) {
	v2, bases, err := cgroupBases()
	if err != nil {
		return nil, err
	}
	// A helper killed in a call leaves its cgroup behind, and pids are
	// reused: the name is made unique, so a call never fails on another's
	// leftover (sweepCallCgroups removes those).
	var suffix [4]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return nil, fmt.Errorf("cgroup: naming: %w", err)
	}
	name += "-" + hex.EncodeToString(suffix[:])
	c := &callCgroup{v2: v2, origins: bases}
	for _, base := range bases {
		parent := filepath.Join(base, spec.CallGroupsDir)
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		if v2 {
			// Controllers reach a child only when its parent enables
			// them (the parent holds no process: the v2 rule).
			if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+memory +pids"), 0); err != nil {
				return nil, fmt.Errorf("cgroup: enabling memory and pids: %w", err)
			}
			// cpu only where it was delegated to this cgroup.
			c.cpu = os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+cpu"), 0) == nil
		} else if strings.HasPrefix(base+"/", "/sys/fs/cgroup/cpu/") {
			c.cpu = true
		}
		dir := filepath.Join(parent, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			c.remove()
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		c.dirs = append(c.dirs, dir)
	}
	for _, dir := range c.dirs {
		if err := c.limit(dir, l); err != nil {
			c.remove()
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			c.remove()
			return nil, fmt.Errorf("cgroup: joining %s: %w", dir, err)
		}
	}
	return c, nil
}

// limit writes the limits that dir's controller (v1) or dir (v2) takes.
func (c *callCgroup) limit(dir string, l cgroupLimits) error {
	write := func(file string, v string) error {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(v), 0); err != nil {
			return fmt.Errorf("cgroup: %s: %w", file, err)
		}
		return nil
	}
	var files [][2]string
	add := func(file string, v uint64) {
		if v > 0 {
			files = append(files, [2]string{file, strconv.FormatUint(v, 10)})
		}
	}
	quota := l.cpuMillis * cpuPeriod / 1000
	switch {
	case c.v2:
		add("memory.max", l.memory)
		add("pids.max", l.pids)
		if quota > 0 && c.cpu {
			files = append(files, [2]string{"cpu.max", fmt.Sprintf("%d %d", quota, cpuPeriod)})
		}
	case exists(filepath.Join(dir, "memory.limit_in_bytes")):
		add("memory.limit_in_bytes", l.memory)
	case exists(filepath.Join(dir, "pids.max")):
		add("pids.max", l.pids)
	case exists(filepath.Join(dir, "cpu.cfs_quota_us")):
		add("cpu.cfs_period_us", cpuPeriod)
		add("cpu.cfs_quota_us", quota)
	}
	for _, f := range files {
		if err := write(f[0], f[1]); err != nil {
			return err
		}
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// oomKilled is the call's memory limit if the kernel killed one of its
// processes for reaching it, else 0. A kill counted in the call's cgroup
// (oom_kill: v2's memory.events, v1's memory.oom_control since Linux 4.13)
// may be an ancestor's or the machine's out of memory: it is the call's
// own only when the call's limit was hit too (v2's oom, v1's
// memory.failcnt) and is set.
func (c *callCgroup) oomKilled() uint64 {
	if len(c.dirs) == 0 {
		return 0
	}
	dir := c.dirs[0] // v2's one, or v1's memory controller's (cgroupBases)
	events, limitFile := "memory.events", "memory.max"
	if !c.v2 {
		events, limitFile = "memory.oom_control", "memory.limit_in_bytes"
	}
	counts := keyedCounts(filepath.Join(dir, events))
	hit := counts["oom"]
	if !c.v2 {
		hit = readCount(filepath.Join(dir, "memory.failcnt"))
	}
	if counts["oom_kill"] == 0 || hit == 0 {
		return 0
	}
	limit := readCount(filepath.Join(dir, limitFile)) // "max" reads as 0
	if limit == 0 || limit >= 1<<62 {
		return 0
	}
	return limit
}

// keyedCounts reads a cgroup file of "key count" lines.
func keyedCounts(path string) map[string]uint64 {
	data, _ := os.ReadFile(path)
	out := map[string]uint64{}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			if n, err := strconv.ParseUint(f[1], 10, 64); err == nil {
				out[f[0]] = n
			}
		}
	}
	return out
}

// readCount reads a cgroup file holding one number; 0 when it holds none.
func readCount(path string) uint64 {
	data, _ := os.ReadFile(path)
	n, _ := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	return n
}

// pids lists the processes in the call's cgroup, the helper aside.
func (c *callCgroup) pids() []int {
	var out []int
	if len(c.dirs) == 0 {
		return nil
	}
	data, _ := os.ReadFile(filepath.Join(c.dirs[0], "cgroup.procs"))
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
			out = append(out, pid)
		}
	}
	return out
}

// kill sends SIGKILL to every process in the call's cgroup but the helper,
// and returns how many it found.
func (c *callCgroup) kill() int {
	pids := c.pids()
	for _, p := range pids {
		_ = unix.Kill(p, unix.SIGKILL)
	}
	return len(pids)
}

// remove moves the helper back to its own cgroups and removes the call's
// (empty by then: every process of the call was reaped). A cgroup whose
// last processes are still being torn down by the kernel is busy for a
// moment: it tries again for up to removeWait.
func (c *callCgroup) remove() {
	pid := []byte(strconv.Itoa(os.Getpid()))
	for i, dir := range c.dirs {
		deadline := time.Now().Add(removeWait)
		for {
			err := os.WriteFile(filepath.Join(c.origins[i], "cgroup.procs"), pid, 0)
			if err == nil {
				err = unix.Rmdir(dir)
			}
			if err == nil || errors.Is(err, unix.ENOENT) {
				break
			}
			if time.Now().After(deadline) {
				fmt.Fprintf(os.Stderr, "fnsandbox: removing cgroup %s: %v\n", dir, err)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	c.dirs = nil
}

// removeWait bounds how long remove waits for a busy cgroup.
const removeWait = time.Second

// staleAfter is the age from which a call cgroup holding no process is
// another helper's leftover: a call's cgroup holds its helper from a
// moment after it is made until the call ends.
const staleAfter = time.Minute

// sweepCallCgroups removes the call cgroups below parents left behind by
// helpers killed in a call (SIGKILL leaves no time to remove them): those
// made more than staleAfter ago. rmdir removes only a cgroup without
// processes or children, so one still in use stays. It returns how many
// were removed.
func sweepCallCgroups(parents []string, now time.Time) int {
	removed := 0
	for _, parent := range parents {
		entries, err := os.ReadDir(parent)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if !e.IsDir() || !strings.HasPrefix(e.Name(), "call-") {
				continue
			}
			info, err := e.Info()
			if err != nil || now.Sub(info.ModTime()) < staleAfter {
				continue
			}
			if unix.Rmdir(filepath.Join(parent, e.Name())) == nil {
				removed++
			}
		}
	}
	return removed
}

// cgroupFinding: the layer is there when a call's cgroup can be made and
// joined here. Once it is known to be, the call cgroups left behind by
// helpers killed in a call are removed (each runner probes as it starts).
func cgroupFinding() (bool, string) {
	c, err := newCallCgroup("probe-"+strconv.Itoa(os.Getpid()), cgroupLimits{})
	if err != nil {
		return false, err.Error()
	}
	var parents []string
	for _, base := range c.origins {
		parents = append(parents, filepath.Join(base, spec.CallGroupsDir))
	}
	swept := sweepCallCgroups(parents, time.Now())
	kind := "v1 memory and pids"
	switch {
	case c.v2 && c.cpu:
		kind = "v2 memory, pids and cpu"
	case c.v2:
		kind = "v2 memory and pids (no cpu controller: CPU time is not bounded)"
	case c.cpu:
		kind = "v1 memory, pids and cpu"
	default:
		kind = "v1 memory and pids (no cpu hierarchy: CPU time is not bounded)"
	}
	c.remove()
	found := kind + ", below " + filepath.Join(c.origins[0], spec.CallGroupsDir)
	if swept > 0 {
		found += fmt.Sprintf(" (%d left by killed helpers removed)", swept)
	}
	return true, found
}

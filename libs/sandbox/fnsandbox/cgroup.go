package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// callGroupsDir is the directory, below the helper's own cgroup in each
// controller, that holds one cgroup per call.
const callGroupsDir = "fnrunner-calls"

// callCgroup is a call's cgroup: in cgroup v1, one directory per controller
// (memory, pids); in v2, one directory.
type callCgroup struct {
	v2      bool
	dirs    []string
	origins []string // the helper's own cgroups, to go back to
}

// cgroupBases are the helper's own cgroup directories: v2's unified one, or
// v1's memory and pids ones.
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
	return false, bases, nil
}

// newCallCgroup makes the call's cgroup with its memory and process limits
// (0: none) and moves the helper into it, so that everything it starts is
// in it too.
func newCallCgroup(name string, memoryMax, pidsMax uint64) (*callCgroup, error) {
	v2, bases, err := cgroupBases()
	if err != nil {
		return nil, err
	}
	c := &callCgroup{v2: v2, origins: bases}
	for _, base := range bases {
		parent := filepath.Join(base, callGroupsDir)
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		if v2 {
			// Controllers reach a child only when its parent enables
			// them (the parent holds no process: the v2 rule).
			if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+memory +pids"), 0); err != nil {
				return nil, fmt.Errorf("cgroup: enabling memory and pids: %w", err)
			}
		}
		dir := filepath.Join(parent, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			c.remove()
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		c.dirs = append(c.dirs, dir)
	}
	for _, dir := range c.dirs {
		if err := c.limit(dir, memoryMax, pidsMax); err != nil {
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
func (c *callCgroup) limit(dir string, memoryMax, pidsMax uint64) error {
	write := func(file string, v uint64) error {
		if v == 0 {
			return nil
		}
		if err := os.WriteFile(filepath.Join(dir, file), []byte(strconv.FormatUint(v, 10)), 0); err != nil {
			return fmt.Errorf("cgroup: %s: %w", file, err)
		}
		return nil
	}
	if c.v2 {
		if err := write("memory.max", memoryMax); err != nil {
			return err
		}
		return write("pids.max", pidsMax)
	}
	if _, err := os.Stat(filepath.Join(dir, "memory.limit_in_bytes")); err == nil {
		return write("memory.limit_in_bytes", memoryMax)
	}
	return write("pids.max", pidsMax)
}

// pids lists the processes in the call's cgroup, the helper aside.
func (c *callCgroup) pids() []int {
	var out []int
	if len(c.dirs) == 0 {
		return nil
	}
	data, _ := os.ReadFile(filepath.Join(c.dirs[len(c.dirs)-1], "cgroup.procs"))
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
			out = append(out, pid)
		}
	}
	return out
}

// remove moves the helper back to its own cgroups and removes the call's
// (empty by then: every process of the call was reaped).
func (c *callCgroup) remove() {
	for i, dir := range c.dirs {
		_ = os.WriteFile(filepath.Join(c.origins[i], "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0)
		if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
			fmt.Fprintf(os.Stderr, "fnsandbox: removing cgroup %s: %v\n", dir, err)
		}
	}
	c.dirs = nil
}

// cgroupFinding: the layer is there when a call's cgroup can be made and
// joined here.
func cgroupFinding() (bool, string) {
	c, err := newCallCgroup("probe-"+strconv.Itoa(os.Getpid()), 0, 0)
	if err != nil {
		return false, err.Error()
	}
	kind := "v1 memory and pids"
	if c.v2 {
		kind = "v2"
	}
	c.remove()
	return true, kind + ", below " + filepath.Join(c.origins[0], callGroupsDir)
}

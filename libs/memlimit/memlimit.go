// Package memlimit reads the memory limit of the cgroup a process runs in:
// its container's, which the kubelet enforces by killing the container.
package memlimit

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Cgroups are a host's cgroup hierarchies, and the groups of one process.
type Cgroups struct {
	// Root is where the hierarchies are mounted ("" is /sys/fs/cgroup).
	Root string
	// Self is the process's /proc/<pid>/cgroup ("" is /proc/self/cgroup).
	Self string
}

// unlimitedV1 is what a cgroup v1 memory controller says when no limit is set
// (the largest page-aligned int64).
const unlimitedV1 = 9223372036854771712

// Limit is the memory limit of the process's cgroup: the lowest of its own
// and its ancestors', cgroup v2 or v1. ok is false when none is set, or the
// process is in no memory cgroup that can be read (no cgroupfs mounted).
func (c Cgroups) Limit() (limit uint64, ok bool, err error) {
	root, self := c.paths()
	v2, v1, err := groups(self)
	if err != nil {
		return 0, false, err
	}
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		return limitV2(root, v2)
	}
	if v1 == "" {
		return 0, false, nil
	}
	return limitV1(filepath.Join(root, "memory"), v1)
}

// Group is the directory of the process's own memory cgroup, and the file in
// it that holds its limit: v2's memory.max, or v1's memory.limit_in_bytes.
func (c Cgroups) Group() (dir, limitFile string, err error) {
	root, self := c.paths()
	v2, v1, err := groups(self)
	if err != nil {
		return "", "", err
	}
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		dir = filepath.Join(root, v2)
		return dir, filepath.Join(dir, "memory.max"), nil
	}
	if v1 == "" {
		return "", "", errors.New("the process is in no memory cgroup")
	}
	dir = filepath.Join(root, "memory", v1)
	return dir, filepath.Join(dir, "memory.limit_in_bytes"), nil
}

// paths are Root and Self, or their defaults.
func (c Cgroups) paths() (root, self string) {
	root, self = c.Root, c.Self
	if root == "" {
		root = "/sys/fs/cgroup"
	}
	if self == "" {
		self = "/proc/self/cgroup"
	}
	return root, self
}

// groups reads the process's unified (v2) group and its v1 memory group.
func groups(path string) (v2, v1 string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", fmt.Errorf("reading the process's cgroups: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		case containsController(parts[1], "memory"):
			v1 = parts[2]
		}
	}
	return v2, v1, sc.Err()
}

func containsController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// limitV2 is the lowest memory.max from the group up to the mount's root.
// In a container with its own cgroup namespace the group is "/", the
// container's, mounted at root.
func limitV2(root, group string) (uint64, bool, error) {
	dir := filepath.Join(root, group)
	if _, err := os.Stat(dir); err != nil {
		dir = root // a group path from outside the mount's namespace
	}
	var lowest uint64
	found := false
	for {
		data, err := os.ReadFile(filepath.Join(dir, "memory.max"))
		switch {
		case errors.Is(err, fs.ErrNotExist): // the root group has none
		case err != nil:
			return 0, false, fmt.Errorf("reading the cgroup memory limit: %w", err)
		default:
			if v := strings.TrimSpace(string(data)); v != "max" {
				n, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					return 0, false, fmt.Errorf("reading the cgroup memory limit %s: %w", dir, err)
				}
				if !found || n < lowest {
					lowest, found = n, true
				}
			}
		}
		if dir == root || !strings.HasPrefix(dir, root) {
			return lowest, found, nil
		}
		dir = filepath.Dir(dir)
	}
}

// limitV1 is the group's hierarchical_memory_limit (memory.stat): the
// lowest limit of it and its ancestors.
func limitV1(mount, group string) (uint64, bool, error) {
	dir := filepath.Join(mount, group)
	if _, err := os.Stat(dir); err != nil {
		dir = mount
	}
	f, err := os.Open(filepath.Join(dir, "memory.stat"))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("reading the cgroup memory limit: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "hierarchical_memory_limit ")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("reading the cgroup memory limit %s: %w", dir, err)
		}
		if n >= unlimitedV1 {
			return 0, false, nil
		}
		return n, true, nil
	}
	return 0, false, sc.Err()
}

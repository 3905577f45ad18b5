package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/fnrunner/fnrunner/libs/fnexec"
	"github.com/fnrunner/fnrunner/libs/memlimit"
	"github.com/fnrunner/fnrunner/libs/sandbox/spec"
)

// callMemory is the memory limit of c's cgroup: the call's bound, at most
// --sandbox-max-memory; that alone for a call without one (0: none).
func (s *Sandbox) callMemory(c fnexec.Call) uint64 {
	if c.MemoryMax > 0 && (s.memory == 0 || c.MemoryMax < s.memory) {
		return c.MemoryMax
	}
	return s.memory
}

// joinWait bounds how long chargeMemory waits for a helper to move into its
// call's cgroup: it does so just after it took the call, before it starts
// the function.
const joinWait = 2 * time.Second

var errNotInCallGroup = errors.New("the helper is not in a call's cgroup")

// chargeMemory sets the memory limit of the cgroup of st, a function
// process started ahead of its call (the cgroup layer), to c's bound: it was
// started with the bound of the call before it.
func (s *Sandbox) chargeMemory(ctx context.Context, st *fnexec.Started, c fnexec.Call) error {
	if !slices.Contains(s.layers, Cgroup) {
		return nil
	}
	// A call without a bound of its own gets the sandbox's, as a process
	// started for it would: not the bound of the call before.
	limit := s.callMemory(c)
	value := strconv.FormatUint(limit, 10)
	if limit == 0 {
		value = "max" // v2; v1 reads -1 as no limit
	}
	file, err := callMemoryFile(ctx, st.Process.Pid)
	if err != nil {
		return err
	}
	if limit == 0 && filepath.Base(file) == "memory.limit_in_bytes" {
		value = "-1"
	}
	// Below what the process holds already, the kernel reclaims or
	// refuses (v1: EBUSY): either way the call does not start over it.
	if err := os.WriteFile(file, []byte(value), 0); err != nil {
		return fmt.Errorf("setting the call's memory bound: %w", err)
	}
	return nil
}

// callMemoryFile is the memory limit file of the call's cgroup the helper
// pid is in, once it is in one.
func callMemoryFile(ctx context.Context, pid int) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, joinWait)
	defer cancel()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		dir, file, err := memlimit.Cgroups{Self: fmt.Sprintf("/proc/%d/cgroup", pid)}.Group()
		if err != nil {
			return "", fmt.Errorf("finding the call's cgroup: %w", err)
		}
		if filepath.Base(filepath.Dir(dir)) == spec.CallGroupsDir {
			return file, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%w after %v (%s)", errNotInCallGroup, joinWait, dir)
		case <-tick.C:
		}
	}
}

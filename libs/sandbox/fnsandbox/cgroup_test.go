package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fnrunner/fnrunner/tests/harness"
)

// requireCgroups skips the test (harness.Need) unless this process may make
// cgroups (root, a hierarchy it finds), as the sandbox's cgroup layer needs,
// and returns the helper's cgroup directories.
func requireCgroups(t *testing.T) []string {
	t.Helper()
	harness.NeedRoot(t, "call cgroups")
	_, bases, err := cgroupBases()
	harness.Need(t, "call cgroups", err)
	// A v2 host may not delegate the memory and pids controllers here.
	probe, err := newCallCgroup("probe-test-"+strconv.Itoa(os.Getpid()), cgroupLimits{})
	harness.Need(t, "call cgroups", err)
	probe.remove()
	return bases
}

// A helper killed in a call leaves its cgroup, under a name a later
// helper with the same pid makes again: the later call still gets one.
func TestCallCgroupNamesOutliveLeftovers(t *testing.T) {
	requireCgroups(t)
	name := "call-test-" + strconv.Itoa(os.Getpid())
	left, err := newCallCgroup(name, cgroupLimits{})
	require.NoError(t, err)
	// Killed: back in its own cgroups, the call's left behind.
	for i, dir := range left.dirs {
		require.NoError(t, os.WriteFile(filepath.Join(left.origins[i], "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0))
		t.Cleanup(func() { _ = unix.Rmdir(dir) })
	}
	again, err := newCallCgroup(name, cgroupLimits{})
	require.NoError(t, err, "a call cgroup under the leftover's name")
	assert.NotEqual(t, left.dirs, again.dirs)
	again.remove()
}

func TestSweepRemovesOnlyOldUnusedCallCgroups(t *testing.T) {
	bases := requireCgroups(t)
	parent := filepath.Join(bases[len(bases)-1], "fnrunner-sweep-test-"+strconv.Itoa(os.Getpid()))
	require.NoError(t, os.Mkdir(parent, 0o755))
	dirs := map[string]string{}
	for _, name := range []string{"call-left", "call-busy", "probe-1"} {
		dirs[name] = filepath.Join(parent, name)
		require.NoError(t, os.Mkdir(dirs[name], 0o755))
	}
	sleep := exec.Command("sleep", "60")
	require.NoError(t, sleep.Start())
	t.Cleanup(func() {
		_ = sleep.Process.Kill()
		_ = sleep.Wait()
		for _, d := range dirs {
			_ = unix.Rmdir(d)
		}
		_ = unix.Rmdir(parent)
	})
	require.NoError(t, os.WriteFile(filepath.Join(dirs["call-busy"], "cgroup.procs"), []byte(strconv.Itoa(sleep.Process.Pid)), 0))

	assert.Zero(t, sweepCallCgroups([]string{parent}, time.Now()), "cgroups just made")
	assert.Equal(t, 1, sweepCallCgroups([]string{parent, filepath.Join(parent, "missing")}, time.Now().Add(2*staleAfter)))
	assert.NoDirExists(t, dirs["call-left"], "an old call cgroup without processes")
	assert.DirExists(t, dirs["call-busy"], "a call cgroup with a process")
	assert.DirExists(t, dirs["probe-1"], "not a call's")
}

// A kill counted in the call's cgroup is the call's bound only when the
// call's own limit was hit and is set: an ancestor's or the machine's out
// of memory kills in the call's cgroup too.
func TestOOMKillIsTheCallsOnlyAtItsOwnLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		v2    bool
		files map[string]string
		want  uint64
	}{
		{"v2 at its limit", true, map[string]string{"memory.events": "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n", "memory.max": "100663296\n"}, 96 << 20},
		{"v2 an ancestor's", true, map[string]string{"memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 1\n", "memory.max": "100663296\n"}, 0},
		{"v2 no limit", true, map[string]string{"memory.events": "oom 1\noom_kill 1\n", "memory.max": "max\n"}, 0},
		{"v2 no kill", true, map[string]string{"memory.events": "oom 1\noom_kill 0\n", "memory.max": "100663296\n"}, 0},
		{"v1 at its limit", false, map[string]string{"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n", "memory.failcnt": "12\n", "memory.limit_in_bytes": "100663296\n"}, 96 << 20},
		{"v1 an ancestor's", false, map[string]string{"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n", "memory.failcnt": "0\n", "memory.limit_in_bytes": "100663296\n"}, 0},
		{"v1 no limit", false, map[string]string{"memory.oom_control": "oom_kill 1\n", "memory.failcnt": "3\n", "memory.limit_in_bytes": "9223372036854771712\n"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, data := range tc.files {
				require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644))
			}
			c := &callCgroup{v2: tc.v2, dirs: []string{dir}}
			assert.Equal(t, tc.want, c.oomKilled())
		})
	}
}

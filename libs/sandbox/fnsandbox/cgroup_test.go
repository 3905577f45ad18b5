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

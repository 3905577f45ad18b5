package memlimit_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/libs/memlimit"
	"github.com/fnrunner/fnrunner/tests/harness"
)

// With MEMLIMIT_PRINT set, the test binary prints its own limit.
func TestMain(m *testing.M) {
	if os.Getenv("MEMLIMIT_PRINT") == "" {
		os.Exit(m.Run())
	}
	limit, ok, err := memlimit.Cgroups{}.Limit()
	fmt.Println(limit, ok, err)
	os.Exit(0)
}

func write(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		path := filepath.Join(root, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(data), 0o644))
	}
}

func TestLimit(t *testing.T) {
	v1Stat := func(limit uint64) string {
		return "cache 0\nrss 0\nhierarchical_memory_limit " + strconv.FormatUint(limit, 10) + "\nhierarchical_memsw_limit 9223372036854771712\n"
	}
	tests := []struct {
		name  string
		self  string
		files map[string]string
		limit uint64
		ok    bool
	}{
		{"v2 container (own cgroup namespace)", "0::/\n", map[string]string{"cgroup.controllers": "memory pids", "memory.max": "1073741824\n"}, 1 << 30, true},
		{"v2 lowest of the ancestors", "0::/kubepods/pod1/c1\n", map[string]string{
			"cgroup.controllers": "memory", "kubepods/memory.max": "max\n", "kubepods/pod1/memory.max": "805306368\n", "kubepods/pod1/c1/memory.max": "1073741824\n",
		}, 768 << 20, true},
		{"v2 none set", "0::/a\n", map[string]string{"cgroup.controllers": "memory", "a/memory.max": "max\n"}, 0, false},
		{"v1 hierarchical limit", "12:pids:/x\n4:memory:/kubepods/c1\n0::/\n", map[string]string{"memory/kubepods/c1/memory.stat": v1Stat(1408 << 20)}, 1408 << 20, true},
		{"v1 group from outside the namespace", "4:memory:/elsewhere\n", map[string]string{"memory/memory.stat": v1Stat(320 << 20)}, 320 << 20, true},
		{"v1 unlimited", "4:memory:/\n", map[string]string{"memory/memory.stat": v1Stat(9223372036854771712)}, 0, false},
		{"no memory cgroup", "1:cpu:/\n", map[string]string{}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			write(t, root, tt.files)
			self := filepath.Join(t.TempDir(), "cgroup")
			require.NoError(t, os.WriteFile(self, []byte(tt.self), 0o644))
			limit, ok, err := memlimit.Cgroups{Root: root, Self: self}.Limit()
			require.NoError(t, err)
			assert.Equal(t, tt.ok, ok)
			assert.Equal(t, tt.limit, limit)
		})
	}
}

// A process in a real memory cgroup reads the limit its parent group sets.
func TestLimitOfARealCgroup(t *testing.T) {
	harness.NeedRoot(t, "making a memory cgroup")
	harness.NeedCgroupV1(t, "making a v1 memory cgroup")
	parent, err := os.MkdirTemp("/sys/fs/cgroup/memory", "memlimit-test-")
	require.NoError(t, err)
	child := filepath.Join(parent, "c")
	require.NoError(t, os.Mkdir(child, 0o755))
	t.Cleanup(func() { _ = os.Remove(child); _ = os.Remove(parent) })
	require.NoError(t, os.WriteFile(filepath.Join(parent, "memory.limit_in_bytes"), []byte("335544320"), 0o644))

	cmd := exec.Command("/bin/sh", "-c", `echo $$ > "$1/cgroup.procs" && exec "$2"`, "sh", child, os.Args[0])
	cmd.Env = append(os.Environ(), "MEMLIMIT_PRINT=1")
	out, err := cmd.Output()
	require.NoError(t, err)
	assert.Equal(t, "335544320 true <nil>", strings.TrimSpace(string(out)))
}

func TestGroup(t *testing.T) {
	tests := []struct {
		name, self, controllers string
		dir, file               string
		err                     bool
	}{
		{"v2", "0::/kubepods/c1/fnrunner-calls/call-1\n", "memory pids", "kubepods/c1/fnrunner-calls/call-1", "memory.max", false},
		{"v1", "8:pids:/x\n4:memory:/c1/fnrunner-calls/call-1\n0::/\n", "", "memory/c1/fnrunner-calls/call-1", "memory.limit_in_bytes", false},
		{"no memory cgroup", "1:cpu:/\n", "", "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			files := map[string]string{"self": tt.self}
			if tt.controllers != "" {
				files["cgroup.controllers"] = tt.controllers
			}
			write(t, root, files)
			dir, file, err := memlimit.Cgroups{Root: root, Self: filepath.Join(root, "self")}.Group()
			if tt.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, filepath.Join(root, tt.dir), dir)
			assert.Equal(t, filepath.Join(root, tt.dir, tt.file), file)
		})
	}
}

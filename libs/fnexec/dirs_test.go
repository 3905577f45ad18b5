package fnexec

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newDirs is a Dirs below a fresh root, closed at the test's end.
func newDirs(t *testing.T) (*Dirs, string) {
	t.Helper()
	root := t.TempDir()
	d, err := NewDirs(root)
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return d, root
}

// entries are root's entries' names.
func entries(t *testing.T, root string) []string {
	t.Helper()
	es, err := os.ReadDir(root)
	require.NoError(t, err)
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func TestDirsGiveEachCallAnEmptyDirectoryOfItsOwn(t *testing.T) {
	d, root := newDirs(t)
	seen := map[string]bool{}
	for range 2 * dirsAhead {
		// Each call finds its directory empty, and leaves a file in it.
		res, err := Run(context.Background(), sh(`ls -A "$HOME"; pwd; echo x > "$HOME/left"`), nil, Options{Dirs: d})
		require.NoError(t, err)
		out := strings.TrimSpace(string(res.ResourceList.Materialize()))
		require.Equal(t, filepath.Dir(out), root, "private directory below the root: %q", out)
		assert.False(t, seen[out], "directory %s given twice", out)
		seen[out] = true
		// One the function wrote into is gone when its call returns, so
		// the space it took is free for the next call.
		_, err = os.Stat(out)
		assert.ErrorIs(t, err, os.ErrNotExist, "%s still there", out)
	}
}

func TestDirsLeaveNothingBehind(t *testing.T) {
	d, root := newDirs(t)
	for range 2 * dirsAhead {
		_, err := Run(context.Background(), sh("cat >/dev/null"), strings.NewReader(rl), Options{Dirs: d})
		require.NoError(t, err)
	}
	// Left empty, removed after their calls; the ones made ahead, at Close.
	d.Close()
	assert.Empty(t, entries(t, root))
	// A call after Close makes and removes its own.
	res, err := Run(context.Background(), sh("pwd"), nil, Options{Dirs: d})
	require.NoError(t, err)
	assert.Equal(t, root, filepath.Dir(strings.TrimSpace(string(res.ResourceList.Materialize()))))
	assert.Empty(t, entries(t, root))
}

// A temp-dir reaper (or an operator) empties the root while directories
// wait: calls go on in new ones.
func TestDirsSweptAwayWhileWaiting(t *testing.T) {
	d, root := newDirs(t)
	for range 3 {
		for _, name := range entries(t, root) {
			require.NoError(t, os.RemoveAll(filepath.Join(root, name)))
		}
		res, err := Run(context.Background(), sh("pwd"), nil, Options{Dirs: d})
		require.NoError(t, err)
		assert.Equal(t, root, filepath.Dir(strings.TrimSpace(string(res.ResourceList.Materialize()))))
	}
}

func TestMain(m *testing.M) {
	// TestPrivateDirectoryWithoutPermissionsIsRemoved's runner, as an
	// unprivileged uid.
	if dir := os.Getenv("FNEXEC_TEST_REMOVE_TREE"); dir != "" {
		removeTree(dir)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A function running as the runner's uid (no uid layer, a non-root
// runner) takes its permissions away from what it made: the runner gives
// them back and removes it all. Root ignores permissions, so the removal
// runs as nobody, in a copy of this test binary it can reach.
func TestPrivateDirectoryWithoutPermissionsIsRemoved(t *testing.T) {
	const nobody = 65534
	parent, err := os.MkdirTemp("/tmp", "fnexec-test-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(parent) })
	require.NoError(t, os.Chmod(parent, 0o777))
	private := filepath.Join(parent, "fn-private")
	deep := filepath.Join(private, "d", "e")
	require.NoError(t, os.MkdirAll(deep, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(deep, "f"), []byte("x"), 0o600))
	for _, p := range []string{private, filepath.Join(private, "d"), deep, filepath.Join(deep, "f")} {
		if os.Geteuid() == 0 {
			require.NoError(t, os.Chown(p, nobody, nobody))
		}
	}
	require.NoError(t, os.Chmod(deep, 0))
	require.NoError(t, os.Chmod(filepath.Join(private, "d"), 0o100))
	require.NoError(t, os.Chmod(private, 0o500))
	if os.Geteuid() != 0 {
		removeTree(private)
	} else {
		self, err := os.ReadFile(os.Args[0])
		require.NoError(t, err)
		bin := filepath.Join(parent, "fnexec.test")
		require.NoError(t, os.WriteFile(bin, self, 0o755))
		cmd := exec.Command(bin)
		cmd.Env = []string{"FNEXEC_TEST_REMOVE_TREE=" + private}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	_, err = os.Lstat(private)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

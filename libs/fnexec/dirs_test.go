package fnexec

import (
	"context"
	"os"
	"path/filepath"
	"strings"
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

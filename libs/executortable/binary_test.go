package executortable

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestResolveBinaryStaysInsideDir(t *testing.T) {
	for _, p := range []string{"../x", "..", ".", "", "/bin/sh", "a/../../x"} {
		_, err := ResolveBinary("/fns", p, false)
		assert.Error(t, err, "ResolveBinary(%q) accepted", p)
	}
	got, err := ResolveBinary("/fns", "sub/fn", false)
	require.NoError(t, err)
	assert.Equal(t, "/fns/sub/fn", got)

	got, err = ResolveBinary("/fns", "sub/../fn", false)
	require.NoError(t, err)
	assert.Equal(t, "/fns/fn", got)
}

func TestResolveBinaryAbsolute(t *testing.T) {
	_, err := ResolveBinary("/fns", "/bin/sh", false)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--allow-absolute-binary-paths")

	got, err := ResolveBinary("/fns", "/bin/../bin/sh", true)
	require.NoError(t, err)
	assert.Equal(t, "/bin/sh", got)
}

func TestResolveBinaryRelativeDir(t *testing.T) {
	// The config-reconciler checks paths with dir "": they resolve in the
	// working directory.
	wd, err := os.Getwd()
	require.NoError(t, err)
	got, err := ResolveBinary("", "fn", false)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(wd, "fn"), got)
}

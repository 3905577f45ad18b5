package binpath

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "fine"), []byte("#!/bin/sh\ncat\n"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "owner-only"), []byte("#!/bin/sh\ncat\n"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "not-executable"), []byte("#!/bin/sh\ncat\n"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "a-directory"), 0o755))
	require.NoError(t, os.Symlink("fine", filepath.Join(dir, "link-to-fine")))
	require.NoError(t, os.Symlink("gone", filepath.Join(dir, "dangling")))
	fifo := filepath.Join(dir, "a-fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	for _, tc := range []struct {
		name          string
		path          string
		allowAbsolute bool
		want          string // the file run, when runnable
		reason        string // Reason's answer, when not
		missing       bool   // the error is ErrMissing: calls fall through
	}{
		{name: "fine", path: "fine", want: filepath.Join(dir, "fine")},
		{name: "cleaned", path: "./x/../fine", want: filepath.Join(dir, "fine")},
		{name: "owner executable", path: "owner-only", want: filepath.Join(dir, "owner-only")},
		{name: "symlink", path: "link-to-fine", want: filepath.Join(dir, "link-to-fine")},
		{name: "absolute allowed", path: filepath.Join(dir, "fine"), allowAbsolute: true, want: filepath.Join(dir, "fine")},
		{name: "missing", path: "missing", reason: "no such file", missing: true},
		{name: "dangling symlink", path: "dangling", reason: "no such file", missing: true},
		{name: "below a file", path: "fine/x", reason: "no such file", missing: true},
		{name: "directory", path: "a-directory", reason: "a directory", missing: true},
		{name: "fifo", path: "a-fifo", reason: "not a regular file", missing: true},
		{name: "not executable", path: "not-executable", reason: "not executable", missing: true},
		{name: "absolute refused", path: "/bin/sh",
			reason: `binary path "/bin/sh" is absolute, and absolute paths are not allowed (--allow-absolute-binary-paths)`},
		{name: "outside", path: "../fine", reason: `binary path "../fine" leaves the functions directory`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(dir, tc.path, tc.allowAbsolute)
			if tc.reason == "" {
				require.NoError(t, err)
				assert.Equal(t, tc.want, got)
				assert.Empty(t, Reason(err))
				return
			}
			require.Error(t, err)
			assert.Equal(t, tc.reason, Reason(err))
			assert.Equal(t, tc.missing, errors.Is(err, ErrMissing), "errors.Is(%v, ErrMissing)", err)
			if tc.missing {
				assert.Contains(t, err.Error(), "no executable binary at "+tc.path)
			}
		})
	}
}

package depcheck_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/tests/harness"
)

// Every Go package under libs/ is in libs.bzl's LIBS, the targets the libs'
// layering is checked on, and nothing else is: a new library is guarded the
// day it appears.
func TestLibsListIsTheTree(t *testing.T) {
	data, err := os.ReadFile(harness.Runfile(t, os.Getenv("LIBS_BZL")))
	require.NoError(t, err)
	var listed []string
	for _, m := range regexp.MustCompile(`"(//libs/[^"]+)"`).FindAllStringSubmatch(string(data), -1) {
		listed = append(listed, m[1])
	}
	require.NotEmpty(t, listed, "no //libs/ labels in libs.bzl")

	root := harness.Workspace(t)
	var tree []string
	err = filepath.WalkDir(filepath.Join(root, "libs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "BUILD.bazel" {
			return err
		}
		build, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(build), "go_library(") || strings.Contains(string(build), "go_binary(") {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			tree = append(tree, "//"+filepath.ToSlash(rel))
		}
		return nil
	})
	require.NoError(t, err)
	assert.ElementsMatch(t, tree, listed, "tools/depcheck/libs.bzl's LIBS must list every Go package under libs/, and no other")
}

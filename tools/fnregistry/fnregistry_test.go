package main

import (
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/modfile"
	"sigs.k8s.io/yaml"

	"github.com/fnrunner/fnrunner/tests/harness"
)

// catalogModules is the path below which go.mod's catalog modules live.
const catalogModules = "github.com/kptdev/krm-functions-catalog/functions/go/"

func load(t *testing.T) *Registry {
	t.Helper()
	r, err := Load(harness.Source(t, RegistryPath))
	require.NoError(t, err)
	return r
}

// TestWrittenFilesAreCurrent writes every file from the registry and fails
// when a checked-in one differs, or a FunctionConfig is left of a function
// the registry no longer has.
func TestWrittenFilesAreCurrent(t *testing.T) {
	files, err := Generate(load(t), func(rel string) ([]byte, error) { return os.ReadFile(harness.Source(t, rel)) })
	require.NoError(t, err)
	rels := make([]string, 0, len(files))
	for rel := range files {
		rels = append(rels, rel)
	}
	sort.Strings(rels)
	for _, rel := range rels {
		got, err := os.ReadFile(harness.Source(t, rel))
		if !assert.NoError(t, err, "%s: run %s", rel, UpdateCommand) {
			continue
		}
		assert.Equal(t, string(files[rel]), string(got), "%s is stale: run %s", rel, UpdateCommand)
	}
	root := strings.TrimSuffix(harness.Source(t, FunctionConfigDir), FunctionConfigDir)
	stale, err := Stale(os.DirFS(root), files)
	require.NoError(t, err)
	assert.Empty(t, stale, "FunctionConfigs of no registry entry: run %s", UpdateCommand)
}

// TestGoModAgrees holds go.mod's catalog modules to the registry: each
// entry's module required at its version, and no catalog module required
// that no entry names.
func TestGoModAgrees(t *testing.T) {
	data, err := os.ReadFile(harness.Source(t, "go.mod"))
	require.NoError(t, err)
	mod, err := modfile.ParseLax("go.mod", data, nil)
	require.NoError(t, err)
	required := map[string]string{}
	for _, req := range mod.Require {
		if strings.HasPrefix(req.Mod.Path, catalogModules) {
			required[req.Mod.Path] = req.Mod.Version
		}
	}
	named := map[string]bool{}
	for _, f := range load(t).Functions {
		if f.Own() {
			continue
		}
		named[f.Module] = true
		assert.Equal(t, f.Version, required[f.Module], "go.mod's version of %s, the module of %s", f.Module, f.Name)
	}
	for module := range required {
		assert.True(t, named[module], "go.mod requires %s, which no entry of %s names", module, RegistryPath)
	}
}

func TestCheck(t *testing.T) {
	own := func(edit func(f *Function)) string {
		f := Function{Name: "set-x", Version: "v0.1.2", Tags: []string{"v0.1.2"}, Build: "functions/set-x", GoExecutor: InProcess,
			Processor: "github.com/fnrunner/fnrunner/functions/set-x/setx.Run", ReadFrom: map[string]string{"v0.1.2": "its release"}}
		edit(&f)
		return "functions:\n- " + strings.ReplaceAll(mustYAML(t, f), "\n", "\n  ")
	}
	for _, tc := range []struct {
		name, registry, err string
	}{
		{"valid", own(func(*Function) {}), ""},
		{"an unknown field", own(func(*Function) {}) + "colour: red\n", "unknown field"},
		{"no functions", "functions: []\n", "no functions"},
		{"a version not among the tags", own(func(f *Function) { f.Tags = []string{"v0.1.3"} }), "do not include the version"},
		{"a short version", own(func(f *Function) { f.Version, f.Tags = "v0.1", []string{"v0.1"} }), "neither a full semantic version"},
		{"unstable", own(func(f *Function) {
			f.Version, f.Tags, f.ReadFrom = Unstable, []string{Unstable}, map[string]string{Unstable: "a commit"}
		}), ""},
		{"a floating tag", own(func(f *Function) { f.Tags, f.ReadFrom["v0.1"] = []string{"v0.1.2", "v0.1"}, "its last v0.1" }), ""},
		{"a constraint", own(func(f *Function) { f.Tags, f.ReadFrom["~0.1"] = []string{"v0.1.2", "~0.1"}, "all of v0.1" }), "a constraint claims"},
		{"a tag without readFrom", own(func(f *Function) { f.Tags = []string{"v0.1.2", "v0.1.1"} }), "behaviour of v0.1.1"},
		{"readFrom of no tag", own(func(f *Function) { f.ReadFrom["v0.1.1"] = "another release" }), "not among the tags"},
		{"an image that is the name", own(func(f *Function) { f.Image = "set-x" }), "leave it out"},
		{"a module build without a module", own(func(f *Function) { f.Build = BuildModule }), `needs a module`},
		{"a build of another directory", own(func(f *Function) { f.Build = "functions/set-y" }), `want "module" or "functions/set-x"`},
		{"in process without a processor", own(func(f *Function) { f.Processor = "" }), "processor"},
		{"a processor for a binary", own(func(f *Function) { f.GoExecutor = AsBinary }), "only for goExecutor"},
		{"an unknown executor", own(func(f *Function) { f.GoExecutor = "pod" }), `goExecutor "pod"`},
		{"a name with capitals", own(func(f *Function) { f.Name = "Set-X" }), "lower-case"},
		{"no readFrom", own(func(f *Function) { f.ReadFrom = nil }), "readFrom must say"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.registry))
			if tc.err == "" {
				assert.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalid)
			assert.ErrorContains(t, err, tc.err)
		})
	}
	_, err := Parse([]byte("functions:\n- name: b\n  version: v1.0.0\n  tags: [v1.0.0]\n  build: functions/b\n  goExecutor: binary\n  readFrom: {v1.0.0: x}\n- name: a\n  version: v1.0.0\n  tags: [v1.0.0]\n  build: functions/a\n  goExecutor: binary\n  readFrom: {v1.0.0: x}\n"))
	assert.ErrorContains(t, err, "sorted by name")
}

func TestDocsNeedMarkers(t *testing.T) {
	_, err := Generate(load(t), func(string) ([]byte, error) { return []byte("# Catalog functions\n"), nil })
	assert.ErrorIs(t, err, ErrNoMarkers)
}

func mustYAML(t *testing.T, v any) string {
	t.Helper()
	data, err := yaml.Marshal(v)
	require.NoError(t, err)
	return string(data)
}

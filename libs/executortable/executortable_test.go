package executortable

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/libs/imagematch"
	configpb "github.com/fnrunner/fnrunner/protos/configstream"
)

func TestBuildAndLookup(t *testing.T) {
	s := &configpb.Snapshot{Version: 3, Functions: []*configpb.FunctionConfig{
		{Namespace: "ns", Name: "sn", Image: "set-namespace", Prefixes: []string{""},
			Go:     &configpb.GoExecutor{Tags: []string{"v0.4.5"}, Id: "set-namespace"},
			Binary: &configpb.BinaryExecutor{Tags: []string{"~0.4"}, Path: "set-namespace"},
			Pod:    &configpb.PodExecutor{}},
		{Namespace: "ns", Name: "dup", Image: "set-namespace", Go: &configpb.GoExecutor{Tags: []string{"v0.4.5"}, Id: "x"}},
		{Namespace: "ns", Name: "bad", Image: "starlark", Binary: &configpb.BinaryExecutor{Tags: []string{"~~"}, Path: "s"}},
	}}
	tables := Build(s)
	ref, err := imagematch.Parse("set-namespace:v0.4.5", "")
	require.NoError(t, err)
	fc, ok := tables.Lookup(Go, ref)
	assert.False(t, ok, "conflicting go claim resolved to %s", Owner(fc))
	fc, ok = tables.Lookup(Binary, ref)
	assert.True(t, ok, "binary lookup = %v", fc)
	assert.Equal(t, "set-namespace", fc.GetBinary().GetPath(), "binary lookup = %v", fc)
	fc, ok = tables.Lookup(Pod, ref)
	assert.True(t, ok, "pod lookup = %v", fc)
	assert.Equal(t, "ns/sn", Owner(fc), "pod lookup = %v", fc)
	if got := tables.ConflictsOf("ns/dup"); assert.Len(t, got, 1, "ConflictsOf(ns/dup)") {
		assert.Contains(t, got[0], "go executor", "ConflictsOf(ns/dup)")
		assert.Contains(t, got[0], "ns/sn", "ConflictsOf(ns/dup)")
	}
	assert.NotNil(t, tables.Invalid["ns/bad"], "invalid = %v", tables.Invalid)
}

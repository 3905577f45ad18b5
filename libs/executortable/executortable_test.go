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

// A call pinning a digest that no claim names goes to no executor's claim,
// so the gateway sends it on to the pod executor, which pulls the digest.
func TestLookupDigestNobodyClaims(t *testing.T) {
	const claimed = "sha256:0000000000000000000000000000000000000000000000000000000000000001"
	tables := Build(&configpb.Snapshot{Functions: []*configpb.FunctionConfig{
		{Namespace: "ns", Name: "sn", Image: "set-namespace",
			Go:     &configpb.GoExecutor{Tags: []string{"v0.4.5", "~0.4"}, Id: "set-namespace"},
			Binary: &configpb.BinaryExecutor{Path: "set-namespace"},
			Pod:    &configpb.PodExecutor{Tags: []string{claimed}}},
	}})
	for _, tc := range []struct {
		image string
		want  []Kind
	}{
		{"set-namespace:v0.4.5", []Kind{Go, Binary}},
		{"set-namespace:v0.4.5@sha256:0000000000000000000000000000000000000000000000000000000000000002", nil},
		{"set-namespace@" + claimed, []Kind{Pod}},
		{"set-namespace:v0.4.5@" + claimed, []Kind{Pod}},
	} {
		t.Run(tc.image, func(t *testing.T) {
			assert.Equal(t, tc.want, claimingKinds(t, tables, tc.image))
		})
	}
}

// A claim of a tag, or of every tag, runs no digest of it in any
// executor, the pod executor's included: the digest may name another build
// than the tag does (an old one), which its FunctionConfig's settings and
// the unclaimed-image rules were never asked about.
func TestTagClaimsRunNoDigest(t *testing.T) {
	const digest = "sha256:0000000000000000000000000000000000000000000000000000000000000003"
	tables := Build(&configpb.Snapshot{Functions: []*configpb.FunctionConfig{
		{Namespace: "ns", Name: "sn", Image: "set-namespace",
			Go:  &configpb.GoExecutor{Tags: []string{"v0.4.5"}, Id: "set-namespace"},
			Pod: &configpb.PodExecutor{Tags: []string{"v0.4.5"}}},
		{Namespace: "ns", Name: "any", Image: "apply-setters", Pod: &configpb.PodExecutor{}},
	}})
	for _, image := range []string{
		"set-namespace:v0.4.5@" + digest,
		"set-namespace@" + digest,
		"apply-setters@" + digest,
		"apply-setters:v0.2.0@" + digest,
	} {
		t.Run(image, func(t *testing.T) {
			assert.Empty(t, claimingKinds(t, tables, image))
		})
	}
}

// claimingKinds are the executors whose claims run image.
func claimingKinds(t *testing.T, tables *Tables, image string) []Kind {
	t.Helper()
	ref, err := imagematch.Parse(image, "")
	require.NoError(t, err)
	var got []Kind
	for _, k := range Kinds() {
		if _, ok := tables.Lookup(k, ref); ok {
			got = append(got, k)
		}
	}
	return got
}

// A repository is claimed for an executor when some claim of it names a
// tag (exact, a constraint, or every tag), under one of its prefixes;
// claims of digests only, and claims for other executors, do not count.
func TestClaimsRepository(t *testing.T) {
	const digest = "sha256:0000000000000000000000000000000000000000000000000000000000000004"
	tables := Build(&configpb.Snapshot{DefaultImagePrefix: "registry.example/fns", Functions: []*configpb.FunctionConfig{
		{Namespace: "ns", Name: "exact", Image: "exact", Pod: &configpb.PodExecutor{Tags: []string{"v1"}}},
		{Namespace: "ns", Name: "constraint", Image: "constraint", Prefixes: []string{"docker.io/fns"}, Pod: &configpb.PodExecutor{Tags: []string{"~1.2"}}},
		{Namespace: "ns", Name: "every", Image: "every", Prefixes: []string{"", "ghcr.io/other"}, Pod: &configpb.PodExecutor{}},
		{Namespace: "ns", Name: "digest", Image: "digest", Pod: &configpb.PodExecutor{Tags: []string{digest}}},
		{Namespace: "ns", Name: "go", Image: "go-only", Go: &configpb.GoExecutor{Tags: []string{"v1"}, Id: "x"}},
	}})
	for _, tc := range []struct {
		image string
		kind  Kind
		want  bool
	}{
		{"exact", Pod, true},
		{"exact:v2", Pod, true}, // the repository, whatever the tag
		{"registry.example/fns/exact", Pod, true},
		{"registry.example/other/exact", Pod, false},
		{"exact", Binary, false},
		{"index.docker.io/fns/constraint", Pod, true},
		{"docker.io/fns/constraint:v9", Pod, true},
		{"constraint", Pod, false}, // not under the default prefix
		{"every", Pod, true},
		{"ghcr.io/other/every", Pod, true},
		{"digest", Pod, false},
		{"go-only", Go, true},
		{"go-only", Pod, false},
		{"unknown", Pod, false},
	} {
		t.Run(string(tc.kind)+" "+tc.image, func(t *testing.T) {
			ref, err := imagematch.Parse(tc.image, tables.DefaultPrefix)
			require.NoError(t, err)
			assert.Equal(t, tc.want, tables.ClaimsRepository(tc.kind, ref))
		})
	}
}

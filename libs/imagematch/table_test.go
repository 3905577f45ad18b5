package imagematch

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustParse(t *testing.T, image string) Reference {
	t.Helper()
	ref, err := Parse(image, "")
	require.NoError(t, err)
	return ref
}

func TestLookupPrecedence(t *testing.T) {
	claims := []Claim[string]{
		{Owner: "ns/exact", Name: "set-namespace", Prefixes: []string{""}, Tags: []string{"v0.4.5"}, Value: "exact-default"},
		{Owner: "ns/constraint", Name: "set-namespace", Prefixes: []string{"", "ghcr.io/kptdev/krm-functions-catalog"}, Tags: []string{"~0.4"}, Value: "constraint"},
		{Owner: "ns/range", Name: "set-namespace", Prefixes: []string{"registry.example.com/fns"}, Tags: []string{">=0.2.0 <0.3.0"}, Value: "range"},
		{Owner: "ns/any", Name: "starlark", Value: "any-tag"},
		{Owner: "ns/digest", Name: "apply-setters", Tags: []string{"sha256:" + sha('d')}, Value: "digest"},
		{Owner: "ns/latest", Name: "apply-setters", Tags: []string{"latest"}, Value: "latest"},
	}
	table, conflicts, invalid := NewTable("", claims)
	require.Empty(t, conflicts, "conflicts")
	require.Empty(t, invalid, "invalid")
	for _, tc := range []struct {
		image string
		want  string // "" = no match
	}{
		{"set-namespace:v0.4.5", "exact-default"}, // exact tag beats constraint
		{"ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5", "exact-default"},
		{"set-namespace:v0.4.2", "constraint"}, // explicit prefix of ns/constraint ranks it first
		{"set-namespace:v0.5.0", ""},           // outside ~0.4
		{"set-namespace:latest", ""},           // not semver: constraints never match
		{"registry.example.com/fns/set-namespace:v0.2.9", "range"},
		{"registry.example.com/fns/set-namespace:v0.3.0", ""},
		{"other.example.com/set-namespace:v0.4.5", ""}, // empty prefixes are not "any registry"
		{"starlark:v0.5.5", "any-tag"},
		{"gcr.io/kpt-fn/starlark:v0.5.5", ""},
		{"apply-setters@sha256:" + sha('d'), "digest"},
		{"apply-setters:latest@sha256:" + sha('e'), ""}, // a digest nobody claims: not the tag's claim
		{"apply-setters", "latest"},
		{"apply-setters:v0.2.2", ""},
	} {
		t.Run(tc.image, func(t *testing.T) {
			got, ok := table.Lookup(mustParse(t, tc.image))
			assert.Equal(t, tc.want != "", ok, "Lookup(%s) found a value", tc.image)
			assert.Equal(t, tc.want, got, "Lookup(%s)", tc.image)
		})
	}
}

// A reference that pins a digest is run only by a claim of that digest:
// tags, constraints and "every tag" say what runs for a tag, not that it is
// the content the digest names.
func TestLookupDigests(t *testing.T) {
	claimed, unclaimed := "sha256:"+sha('d'), "sha256:"+sha('e')
	table, conflicts, invalid := NewTable("", []Claim[string]{
		{Owner: "ns/tag", Name: "fn", Tags: []string{"v1.0.0"}, Value: "tag"},
		{Owner: "ns/constraint", Name: "fn", Tags: []string{"~1.0"}, Value: "constraint"},
		{Owner: "ns/digest", Name: "fn", Tags: []string{claimed}, Value: "digest"},
		{Owner: "ns/any", Name: "any", Value: "any-tag"},
	})
	require.Empty(t, conflicts, "conflicts")
	require.Empty(t, invalid, "invalid")
	for _, tc := range []struct {
		name, image string
		want        string // "" = no match
	}{
		{"tag alone", "fn:v1.0.0", "tag"},
		{"constraint alone", "fn:v1.0.3", "constraint"},
		{"claimed tag with a digest nobody claims", "fn:v1.0.0@" + unclaimed, ""},
		{"constraint with a digest nobody claims", "fn:v1.0.3@" + unclaimed, ""},
		{"every tag with a digest", "any:v1@" + unclaimed, ""},
		{"every tag, digest only", "any@" + unclaimed, ""},
		{"digest only, unclaimed", "fn@" + unclaimed, ""},
		{"digest only, claimed exactly", "fn@" + claimed, "digest"},
		{"claimed digest under a claimed tag", "fn:v1.0.0@" + claimed, "digest"},
		{"claimed digest under any tag", "fn:unrelated@" + claimed, "digest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := table.Lookup(mustParse(t, tc.image))
			assert.Equal(t, tc.want != "", ok, "Lookup(%s) found a value", tc.image)
			assert.Equal(t, tc.want, got, "Lookup(%s)", tc.image)
		})
	}
}

func TestExplicitPrefixBeatsDefault(t *testing.T) {
	table, conflicts, _ := NewTable("", []Claim[string]{
		{Owner: "a/default", Name: "fn", Prefixes: []string{""}, Tags: []string{"~1"}, Value: "default"},
		{Owner: "z/explicit", Name: "fn", Prefixes: []string{"ghcr.io/kptdev/krm-functions-catalog"}, Tags: []string{">=1.0.0"}, Value: "explicit"},
	})
	require.Empty(t, conflicts)
	got, _ := table.Lookup(mustParse(t, "fn:v1.2.3"))
	assert.Equal(t, "explicit", got)
}

func TestConflicts(t *testing.T) {
	table, conflicts, invalid := NewTable("", []Claim[string]{
		{Owner: "ns/a", Name: "fn", Prefixes: []string{""}, Tags: []string{"v1", "v2"}, Value: "a"},
		{Owner: "ns/b", Name: "fn", Prefixes: []string{"ghcr.io/kptdev/krm-functions-catalog/"}, Tags: []string{"v1"}, Value: "b"},
		{Owner: "ns/c", Name: "fn", Prefixes: []string{"other.example.com"}, Tags: []string{"v1"}, Value: "c"},
		{Owner: "ns/bad", Name: "fn", Tags: []string{"~~1"}, Value: "bad"},
		{Owner: "ns/bad-name", Name: "ghcr.io/fn", Value: "bad"},
	})
	want := []Conflict{{Name: "fn", Prefix: "ghcr.io/kptdev/krm-functions-catalog", Tag: "v1", Owners: []string{"ns/a", "ns/b"}}}
	assert.Equal(t, want, conflicts, "conflicts")
	assert.Len(t, invalid, 2, "invalid")
	assert.Error(t, invalid["ns/bad"], "invalid = %v", invalid)
	assert.Error(t, invalid["ns/bad-name"], "invalid = %v", invalid)
	// Neither owner wins the conflicting key; their other keys still work.
	v, ok := table.Lookup(mustParse(t, "fn:v1"))
	assert.False(t, ok, "conflicting key resolved to %q", v)
	for image, want := range map[string]string{"fn:v2": "a", "other.example.com/fn:v1": "c"} {
		v, _ := table.Lookup(mustParse(t, image))
		assert.Equal(t, want, v, "Lookup(%s)", image)
	}
}

func TestIsConstraint(t *testing.T) {
	for tag, want := range map[string]bool{
		"v0.4.5": false, "latest": false, "unstable": false, "1.2": false, "sha256:abc": false,
		"~0.4": true, "^1": true, ">=0.2.0 <0.3.0": true, "0.4.x": true, "*": true, "1.x": true, "1 || 2": true,
	} {
		assert.Equal(t, want, IsConstraint(tag), "IsConstraint(%q)", tag)
	}
}

func sha(c byte) string {
	b := make([]byte, 64)
	for i := range b {
		b[i] = c
	}
	return string(b)
}

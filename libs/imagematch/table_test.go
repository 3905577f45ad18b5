package imagematch

import (
	"reflect"
	"testing"
)

func mustParse(t *testing.T, image string) Reference {
	t.Helper()
	ref, err := Parse(image, "")
	if err != nil {
		t.Fatal(err)
	}
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
	if len(conflicts) != 0 || len(invalid) != 0 {
		t.Fatalf("conflicts=%v invalid=%v", conflicts, invalid)
	}
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
		{"apply-setters:latest@sha256:" + sha('e'), "latest"},
		{"apply-setters", "latest"},
		{"apply-setters:v0.2.2", ""},
	} {
		got, ok := table.Lookup(mustParse(t, tc.image))
		if (tc.want == "") == ok || got != tc.want {
			t.Errorf("Lookup(%s) = %q, %v; want %q", tc.image, got, ok, tc.want)
		}
	}
}

func TestExplicitPrefixBeatsDefault(t *testing.T) {
	table, conflicts, _ := NewTable("", []Claim[string]{
		{Owner: "a/default", Name: "fn", Prefixes: []string{""}, Tags: []string{"~1"}, Value: "default"},
		{Owner: "z/explicit", Name: "fn", Prefixes: []string{"ghcr.io/kptdev/krm-functions-catalog"}, Tags: []string{">=1.0.0"}, Value: "explicit"},
	})
	if len(conflicts) != 0 {
		t.Fatal(conflicts)
	}
	if got, _ := table.Lookup(mustParse(t, "fn:v1.2.3")); got != "explicit" {
		t.Errorf("got %q, want explicit", got)
	}
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
	if !reflect.DeepEqual(conflicts, want) {
		t.Errorf("conflicts = %+v, want %+v", conflicts, want)
	}
	if len(invalid) != 2 || invalid["ns/bad"] == nil || invalid["ns/bad-name"] == nil {
		t.Errorf("invalid = %v", invalid)
	}
	// Neither owner wins the conflicting key; their other keys still work.
	if v, ok := table.Lookup(mustParse(t, "fn:v1")); ok {
		t.Errorf("conflicting key resolved to %q", v)
	}
	if v, _ := table.Lookup(mustParse(t, "fn:v2")); v != "a" {
		t.Errorf("fn:v2 = %q, want a", v)
	}
	if v, _ := table.Lookup(mustParse(t, "other.example.com/fn:v1")); v != "c" {
		t.Errorf("other prefix = %q, want c", v)
	}
}

func TestIsConstraint(t *testing.T) {
	for tag, want := range map[string]bool{
		"v0.4.5": false, "latest": false, "unstable": false, "1.2": false, "sha256:abc": false,
		"~0.4": true, "^1": true, ">=0.2.0 <0.3.0": true, "0.4.x": true, "*": true, "1.x": true, "1 || 2": true,
	} {
		if got := IsConstraint(tag); got != want {
			t.Errorf("IsConstraint(%q) = %v, want %v", tag, got, want)
		}
	}
}

func sha(c byte) string {
	b := make([]byte, 64)
	for i := range b {
		b[i] = c
	}
	return string(b)
}

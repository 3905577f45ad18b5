package executortable

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	configpb "github.com/fnrunner/fnrunner/protos/configstream"
)

func TestFunctionName(t *testing.T) {
	tables := Build(&configpb.Snapshot{DefaultImagePrefix: "example.com/fns", Functions: []*configpb.FunctionConfig{
		{Namespace: "ns", Name: "sn", Image: "set-namespace", Prefixes: []string{"", "ghcr.io/kptdev/krm-functions-catalog"},
			Go:  &configpb.GoExecutor{Tags: []string{"v0.4.5", "~0.4"}},
			Pod: &configpb.PodExecutor{Tags: []string{"sha256:" + digest}}},
		{Namespace: "ns", Name: "any", Image: "any-tag", Binary: &configpb.BinaryExecutor{Path: "any"}},
	}})
	tests := []struct {
		name, image string
		want        string // "" = not named
	}{
		{name: "exact tag, short", image: "set-namespace:v0.4.5", want: "example.com/fns/set-namespace:v0.4.5"},
		{name: "exact tag, spelled out: the same name", image: "example.com/fns/set-namespace:v0.4.5", want: "example.com/fns/set-namespace:v0.4.5"},
		{name: "exact tag under a second prefix", image: "ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5",
			want: "ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5"},
		{name: "exact tag with a digest nobody claims: not run, not named", image: "set-namespace:v0.4.5@sha256:" + other, want: ""},
		{name: "claimed digest", image: "set-namespace@sha256:" + digest, want: "example.com/fns/set-namespace@sha256:" + digest},
		{name: "claimed digest under a tag: named by the digest", image: "set-namespace:v0.4.5@sha256:" + digest, want: "example.com/fns/set-namespace@sha256:" + digest},
		{name: "unclaimed digest only", image: "set-namespace@sha256:" + other, want: ""},
		{name: "constraint with a digest", image: "set-namespace:v0.4.7@sha256:" + other, want: ""},
		{name: "every tag with a digest", image: "any-tag:whatever@sha256:" + other, want: ""},
		{name: "every tag, digest only", image: "any-tag@sha256:" + other, want: ""},
		{name: "constraint: the repository only", image: "set-namespace:v0.4.7", want: "example.com/fns/set-namespace"},
		{name: "constraint, without v: the repository only", image: "set-namespace:0.4.123", want: "example.com/fns/set-namespace"},
		{name: "a prerelease the constraint leaves out", image: "set-namespace:v0.4.7-rc.1", want: ""},
		{name: "every tag: the repository only", image: "any-tag:whatever", want: "example.com/fns/any-tag"},
		{name: "tag no claim runs", image: "set-namespace:v0.5.0", want: ""},
		{name: "unclaimed image", image: "unknown:v1", want: ""},
		{name: "unclaimed prefix", image: "elsewhere.io/set-namespace:v0.4.5", want: ""},
		{name: "not an image", image: "Not An Image", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tables.FunctionNameOf(tt.image)
			assert.Equal(t, tt.want != "", ok, "named: %q", got)
			assert.Equal(t, tt.want, got)
		})
	}
}

// However many tags a caller makes up, the names stay the table's.
func TestFunctionNamesAreBounded(t *testing.T) {
	tables := Build(&configpb.Snapshot{Functions: []*configpb.FunctionConfig{
		{Namespace: "ns", Name: "sn", Image: "set-namespace", Go: &configpb.GoExecutor{Tags: []string{"v0.4.5", "~0.4"}}},
		{Namespace: "ns", Name: "any", Image: "any-tag", Binary: &configpb.BinaryExecutor{Path: "any"}},
	}})
	names := map[string]bool{}
	for i := range 1000 {
		for _, image := range []string{
			fmt.Sprintf("set-namespace:v0.4.%d", i),
			fmt.Sprintf("set-namespace:0.4.%d", i),
			fmt.Sprintf("any-tag:t%d", i),
			fmt.Sprintf("unclaimed-%d:v1", i),
			fmt.Sprintf("any-tag@sha256:%064x", i),
			fmt.Sprintf("set-namespace:v0.4.5@sha256:%064x", i),
		} {
			if name, ok := tables.FunctionNameOf(image); ok {
				names[name] = true
			}
		}
	}
	assert.Len(t, names, 3, "names: %v", names)
}

func TestFunctionNameWithoutTable(t *testing.T) {
	var tables *Tables
	_, ok := tables.FunctionNameOf("set-namespace:v0.4.5")
	assert.False(t, ok)
}

const (
	digest = "0000000000000000000000000000000000000000000000000000000000000001"
	other  = "0000000000000000000000000000000000000000000000000000000000000002"
)

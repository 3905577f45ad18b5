package main

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The flags that bound registry lookups, their defaults, and values
// refused.
func TestRegistryBoundFlags(t *testing.T) {
	type bounds struct {
		ttl                       time.Duration
		lookups, unclaimed, pages int
		config, tags              int64
	}
	tests := []struct {
		name  string
		args  []string
		want  bounds
		fails bool
	}{
		{name: "defaults", want: bounds{ttl: 30 * time.Second, lookups: 16, pages: 64, config: 4 << 20, tags: 4 << 20}},
		{name: "set", args: []string{"--tag-list-ttl=5s", "--max-registry-lookups=4", "--max-unclaimed-registry-lookups=3", "--max-tag-list-pages=8",
			"--max-image-config-size=65536", "--max-tag-list-size=1048576"},
			want: bounds{ttl: 5 * time.Second, lookups: 4, unclaimed: 3, pages: 8, config: 65536, tags: 1 << 20}},
		{name: "no TTL", args: []string{"--tag-list-ttl=0"}, fails: true},
		{name: "no lookups", args: []string{"--max-registry-lookups=0"}, fails: true},
		{name: "more unclaimed lookups than lookups", args: []string{"--max-registry-lookups=4", "--max-unclaimed-registry-lookups=5"}, fails: true},
		{name: "negative unclaimed lookups", args: []string{"--max-unclaimed-registry-lookups=-1"}, fails: true},
		{name: "no pages", args: []string{"--max-tag-list-pages=0"}, fails: true},
		{name: "negative config size", args: []string{"--max-image-config-size=-1"}, fails: true},
		{name: "no tag-list bytes", args: []string{"--max-tag-list-size=0"}, fails: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseFlags(append([]string{"--wrapper-server-image=wrapper"}, tt.args...), io.Discard)
			if tt.fails {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, bounds{ttl: o.tagListTTL, lookups: o.maxRegistryLookups, unclaimed: o.maxUnclaimedLookups, pages: o.maxTagListPages,
				config: o.maxImageConfigSize, tags: o.maxTagListSize})
		})
	}
}

// --registry-no-proxy is a comma-separated list, as NO_PROXY.
func TestRegistryNoProxyFlag(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		want []string
	}{
		{name: "default: none"},
		{name: "empty", args: []string{"--registry-no-proxy="}},
		{name: "list", args: []string{"--registry-proxy=http://proxy.example:3128", "--registry-no-proxy=registry.internal, .svc.cluster.local,,10.0.0.0/8"},
			want: []string{"registry.internal", ".svc.cluster.local", "10.0.0.0/8"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseFlags(append([]string{"--wrapper-server-image=wrapper"}, tt.args...), io.Discard)
			require.NoError(t, err)
			assert.Equal(t, tt.want, o.registryNoProxy)
		})
	}
}

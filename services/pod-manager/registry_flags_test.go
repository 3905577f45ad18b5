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
		{name: "defaults", want: bounds{ttl: 30 * time.Second, lookups: 8, pages: 64, config: 1 << 20, tags: 1 << 20}},
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

// The shipped budgets fit deploy/'s 1,408 MiB limit with what the transport
// holds, the registry lookups and caches at their costliest, and the
// runtime: the pod-manager starts under the limit it is given.
func TestShippedBudgetFitsTheContainer(t *testing.T) {
	o, err := parseFlags([]string{"--wrapper-server-image=fnrunner/wrapper-server"}, io.Discard)
	require.NoError(t, err)
	require.NoError(t, o.admission.Fit(1408<<20, true, o.rest()))
	t.Logf("in flight %d MiB + queue %d MiB + the rest %d MiB (registry %d MiB)", o.admission.MaxInFlightBytes>>20, o.admission.MaxQueueBytes>>20, o.rest()>>20, o.registryOptions().MaxHeld()>>20)
	o.maxRegistryLookups = 64
	assert.Error(t, o.admission.Fit(1408<<20, true, o.rest()), "64 lookups at once would not fit")
}

package bounds_test

import (
	"flag"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/functions/starlark/bounds"
)

// What the runner passes is what the binary reads.
func TestArgsRoundTrip(t *testing.T) {
	want := bounds.Bounds{MaxSteps: 7, MaxDepth: 9, AllowedHosts: []string{"example.com", "10.0.0.1:8080"}}
	var got bounds.Bounds
	fs := flag.NewFlagSet("starlark", flag.ContinueOnError)
	got.Register(fs)
	require.NoError(t, fs.Parse(want.Args()))
	assert.Equal(t, want, got)
	assert.Equal(t, []uint16{80, 443, 8080}, want.Ports())
}

func TestPermits(t *testing.T) {
	b := bounds.Bounds{AllowedHosts: []string{"Example.com", "10.0.0.1:8080", "bücher.example:8443", "[::1]"}}
	for address, want := range map[string]bool{
		"example.com:443":      true,
		"EXAMPLE.COM.:80":      true,
		"example.com:8080":     false,
		"evil.example.com:443": false,
		"10.0.0.1:8080":        true,
		"10.0.0.1:80":          false,
		"127.0.0.1:80":         false,
		"example.com":          false,
	} {
		assert.Equal(t, want, b.Permits(address), address)
	}
}

func TestParseHostsRejectsURLs(t *testing.T) {
	for _, v := range []string{"http://example.com", "example.com:0", "user@example.com", "example.com:x", ":80", "*.example.com", "a\tb", "x%y", "[example.com]"} {
		_, err := bounds.ParseHosts(v)
		assert.Error(t, err, v)
	}
	hosts, err := bounds.ParseHosts(" a.example , b:81,")
	require.NoError(t, err)
	assert.Equal(t, []string{"a.example", "b:81"}, hosts)
}

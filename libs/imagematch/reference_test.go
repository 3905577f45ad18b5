package imagematch

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	const catalog = "ghcr.io/kptdev/krm-functions-catalog"
	for _, tc := range []struct {
		image, defaultPrefix string
		want                 Reference
	}{
		{"set-namespace:v0.4.5", "", Reference{Prefix: catalog, Name: "set-namespace", Tag: "v0.4.5"}},
		{"set-namespace", "", Reference{Prefix: catalog, Name: "set-namespace", Tag: "latest"}},
		{catalog + "/set-namespace:v0.4.5", "", Reference{Prefix: catalog, Name: "set-namespace", Tag: "v0.4.5"}},
		{"set-namespace:v1", "registry.example.com/fns", Reference{Prefix: "registry.example.com/fns", Name: "set-namespace", Tag: "v1"}},
		{"set-namespace:v1", "registry.example.com/fns/", Reference{Prefix: "registry.example.com/fns", Name: "set-namespace", Tag: "v1"}},
		{"gcr.io/kpt-fn/apply-setters:unstable", "", Reference{Prefix: "gcr.io/kpt-fn", Name: "apply-setters", Tag: "unstable"}},
		{"docker.io/example/fn:1.0", "", Reference{Prefix: "index.docker.io/example", Name: "fn", Tag: "1.0"}},
		{"localhost:5000/fns/fn:v2", "", Reference{Prefix: "localhost:5000/fns", Name: "fn", Tag: "v2"}},
		{"localhost:5000/fn", "", Reference{Prefix: "localhost:5000", Name: "fn", Tag: "latest"}},
		{"set-namespace@sha256:" + strings.Repeat("a", 64), "", Reference{Prefix: catalog, Name: "set-namespace", Digest: "sha256:" + strings.Repeat("a", 64)}},
		{"set-namespace:v0.4.5@sha256:" + strings.Repeat("b", 64), "", Reference{Prefix: catalog, Name: "set-namespace", Tag: "v0.4.5", Digest: "sha256:" + strings.Repeat("b", 64)}},
		{"[::1]:5000/fns/fn:v1", "", Reference{Prefix: "[::1]:5000/fns", Name: "fn", Tag: "v1"}},
		{"10.0.0.7:8080/fn:v1", "", Reference{Prefix: "10.0.0.7:8080", Name: "fn", Tag: "v1"}},
		{"Registry.Example.com/fns/fn:V_1.x-Y", "", Reference{Prefix: "registry.example.com/fns", Name: "fn", Tag: "V_1.x-Y"}},
	} {
		t.Run(tc.image, func(t *testing.T) {
			got, err := Parse(tc.image, tc.defaultPrefix)
			require.NoError(t, err, "Parse(%q)", tc.image)
			assert.Equal(t, tc.want, got, "Parse(%q)", tc.image)
		})
	}
}

func TestParseRejects(t *testing.T) {
	for _, image := range []string{
		"",
		" set-namespace:v1",
		"set namespace:v1",
		"set-namespace:v1\n",
		"Set-Namespace:v1",
		"ghcr.io/KPTDEV/fn:v1",
		"set-namespace:",
		"set-namespace:v1@sha256:short",
		"@sha256:" + strings.Repeat("a", 64),
		"fn:" + strings.Repeat("x", 200),
		strings.Repeat("a/", 600) + "fn",
		"fn:tag:other",
	} {
		ref, err := Parse(image, "")
		assert.ErrorIs(t, err, ErrInvalidImage, "Parse(%q) = %+v", image, ref)
	}
}

// Names outside the distribution grammar are refused, whatever
// go-containerregistry's weak validation lets through: a prefix compared as
// a string must not be escaped by "..".
func TestParseGrammar(t *testing.T) {
	for _, tc := range []struct {
		image string
		ok    bool
	}{
		{"ghcr.io/allowed/../evil/fn:v1", false},
		{"ghcr.io/allowed/./fn:v1", false},
		{"ghcr.io/a//b:v1", false},
		{"ghcr.io/-a/fn:v1", false},
		{"ghcr.io/a-/fn:v1", false},
		{"ghcr.io/A/fn:v1", false},
		{"ghcr.io/fns/a..b:v1", false},
		{"ghcr.io/fns/a___b:v1", false},
		{"ghcr.io/fns/_a:v1", false},
		{"ghcr.io/fns/a.:v1", false},
		{"..:v1", false},
		{"-fn:v1", false},
		{"fn-:v1", false},
		{"ghcr.io/fns/a__b:v1", true},
		{"ghcr.io/fns/a_b:v1", true},
		{"ghcr.io/fns/a-b:v1", true},
		{"ghcr.io/fns/a--b:v1", true},
		{"ghcr.io/fns/a.b:v1", true},
		{"ghcr.io/fns/a.b-c__d_e:v1", true},
		{"localhost:5000/x:v1", true},
		{"localhost/x:v1", true},
		{"[::1]:5000/x:v1", true},
		{"[::1]/x:v1", true},
		{"-ghcr.io/fn:v1", false},
		{"ghcr-.io/fn:v1", false},
		{"ghcr..io/fn:v1", false},
		{"ghcr.io:port/fn:v1", false},
		{"[::1/fn:v1", false},
		{"[zz::1]:5000/fn:v1", false},
		{"fn:.v1", false},
		{"fn:-v1", false},
		{"fn:_v1", true},
		{"fn:v1.-_", true},
		{"fn:" + strings.Repeat("t", 128), true},
		{"fn:" + strings.Repeat("t", 129), false},
		{"fn:.v1@sha256:" + strings.Repeat("a", 64), false},
		{"ghcr.io/a/../fn@sha256:" + strings.Repeat("a", 64), false},
		{"ghcr.io/" + strings.Repeat("a", 255-len("ghcr.io/")) + ":v1", true},
		{"ghcr.io/" + strings.Repeat("a", 256-len("ghcr.io/")) + ":v1", false},
	} {
		t.Run(tc.image, func(t *testing.T) {
			ref, err := Parse(tc.image, "")
			if tc.ok {
				assert.NoError(t, err, "Parse(%q)", tc.image)
				return
			}
			assert.ErrorIs(t, err, ErrInvalidImage, "Parse(%q) = %+v", tc.image, ref)
		})
	}
}

// The default prefix is part of the name, so it is held to the grammar too.
func TestParseChecksTheDefaultPrefix(t *testing.T) {
	_, err := Parse("fn:v1", "ghcr.io/allowed/../evil")
	assert.ErrorIs(t, err, ErrInvalidImage)
}

func TestNormalizePrefixRejects(t *testing.T) {
	for _, prefix := range []string{
		"ghcr.io/allowed/..",
		"ghcr.io/allowed/../evil",
		"ghcr.io/./fns",
		"ghcr.io//fns",
		"ghcr.io/Fns",
		"ghcr.io/-fns",
		"ghcr.io/fns-",
		"ghcr.io/a___b",
		"-ghcr.io/fns",
		"ghcr.io/" + strings.Repeat("a", 300),
	} {
		got, err := NormalizePrefix(prefix, "")
		assert.ErrorIs(t, err, ErrInvalidImage, "NormalizePrefix(%q) = %q", prefix, got)
	}
}

func TestNormalizePrefix(t *testing.T) {
	for in, want := range map[string]string{
		"":                                      "ghcr.io/kptdev/krm-functions-catalog",
		"ghcr.io/kptdev/krm-functions-catalog":  "ghcr.io/kptdev/krm-functions-catalog",
		"ghcr.io/kptdev/krm-functions-catalog/": "ghcr.io/kptdev/krm-functions-catalog",
		"docker.io/example":                     "index.docker.io/example",
		"localhost:5000":                        "localhost:5000",
		"[::1]:5000/fns":                        "[::1]:5000/fns",
		"ghcr.io/a__b/c-d":                      "ghcr.io/a__b/c-d",
	} {
		got, err := NormalizePrefix(in, "")
		assert.NoError(t, err, "NormalizePrefix(%q)", in)
		assert.Equal(t, want, got, "NormalizePrefix(%q)", in)
	}
}

// Registry hosts compare case-insensitively, as host names do; docker.io is
// index.docker.io in any case, as go-containerregistry has it. Ports are
// kept, an explicit default one included: go-containerregistry tells
// example.com:443 from example.com (its keychain and scheme differ), so
// fnrunner does too. Repository paths stay case-sensitive.
func TestRegistryHostIsCaseInsensitive(t *testing.T) {
	for _, tc := range []struct {
		image, want        string // want: Parse's Prefix; "" = refused
		prefix, wantPrefix string // NormalizePrefix's in and out
	}{
		{image: "Example.COM/fn:v1", want: "example.com", prefix: "Example.COM/", wantPrefix: "example.com"},
		{image: "EXAMPLE.com/fns/fn:v1", want: "example.com/fns", prefix: "EXAMPLE.com/fns", wantPrefix: "example.com/fns"},
		{image: "Docker.IO/example/fn:v1", want: "index.docker.io/example", prefix: "Docker.IO/example", wantPrefix: "index.docker.io/example"},
		{image: "docker.io/example/fn:v1", want: "index.docker.io/example", prefix: "docker.io/example", wantPrefix: "index.docker.io/example"},
		{image: "Index.Docker.IO/example/fn:v1", want: "index.docker.io/example", prefix: "Index.Docker.IO/example", wantPrefix: "index.docker.io/example"},
		{image: "LocalHost:5000/fn:v1", want: "localhost:5000", prefix: "LocalHost:5000", wantPrefix: "localhost:5000"},
		{image: "LOCALHOST/fns/fn:v1", want: "localhost/fns", prefix: "LOCALHOST/fns", wantPrefix: "localhost/fns"},
		{image: "[FE80::1]:5000/fn:v1", want: "[fe80::1]:5000", prefix: "[FE80::1]:5000", wantPrefix: "[fe80::1]:5000"},
		{image: "Example.com:443/fn:v1", want: "example.com:443", prefix: "Example.com:443", wantPrefix: "example.com:443"},
		{image: "example.com:443/fn:v1", want: "example.com:443", prefix: "example.com:443/", wantPrefix: "example.com:443"},
		{image: "Example.com/FNS/fn:v1", prefix: "Example.com/FNS"},
		{image: "Example.com/fns/FN:v1", prefix: "Example.com/fns/FN"},
		{image: "Fns/fn:v1", prefix: "Fns"}, // no registry: all path
	} {
		t.Run(tc.image, func(t *testing.T) {
			ref, err := Parse(tc.image, "")
			np, nerr := NormalizePrefix(tc.prefix, "")
			if tc.want == "" {
				assert.ErrorIs(t, err, ErrInvalidImage, "Parse(%q) = %+v", tc.image, ref)
				assert.ErrorIs(t, nerr, ErrInvalidImage, "NormalizePrefix(%q) = %q", tc.prefix, np)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, ref.Prefix)
			require.NoError(t, nerr)
			assert.Equal(t, tc.wantPrefix, np)
		})
	}
	a, err := NormalizePrefix("example.com:443", "")
	require.NoError(t, err)
	b, err := NormalizePrefix("example.com", "")
	require.NoError(t, err)
	assert.NotEqual(t, a, b, "an explicit default port is kept, as go-containerregistry keeps it")
}

// A parsed reference's String parses back to itself.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"set-namespace:v0.4.5",
		"ghcr.io/kptdev/krm-functions-catalog/starlark:v0.5.5",
		"localhost:5000/a/b/c:1@sha256:" + strings.Repeat("c", 64),
		"fn@sha256:" + strings.Repeat("0", 64),
		"UPPER:v1",
		"a:b:c",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, image string) {
		ref, err := Parse(image, "")
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidImage)
			return
		}
		require.True(t, ref.Name != "" && ref.Prefix != "" && (ref.Tag != "" || ref.Digest != ""), "Parse(%q) = %+v: incomplete", image, ref)
		again, err := Parse(ref.String(), "")
		require.NoError(t, err, "Parse(%q) ok but its String %q does not parse", image, ref.String())
		require.Equal(t, ref, again, "round trip of %q", image)
	})
}

package imagemeta

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/tests/testregistry"
)

func TestPrivateRegistryWithCustomCA(t *testing.T) {
	reg := testregistry.New(t)
	host, ca := reg.Host, reg.CAFile
	image := host + "/fns/set-namespace:v1"
	digest := reg.Push(t, image, v1.Config{Entrypoint: []string{"/usr/local/bin/function"}})
	cmdOnly := reg.Push(t, host+"/fns/cmd-only:v1", v1.Config{Cmd: []string{"/fn", "--serve"}})

	r, err := New(Options{AllowedRegistries: []string{host}, DockerConfigPath: reg.DockerConfig(t, testregistry.User, testregistry.Password), CAPaths: []string{filepath.Dir(ca)}})
	require.NoError(t, err)
	ctx := context.Background()
	meta, err := r.Resolve(ctx, image)
	require.NoError(t, err)
	assert.Equal(t, digest.String(), meta.Digest, "meta = %+v", meta)
	assert.Equal(t, []string{"/usr/local/bin/function"}, meta.Entrypoint, "meta = %+v", meta)
	if meta, err := r.Resolve(ctx, host+"/fns/cmd-only:v1"); assert.NoError(t, err, "Cmd fallback") {
		assert.Equal(t, cmdOnly.String(), meta.Digest, "Cmd fallback: %+v", meta)
		if assert.NotEmpty(t, meta.Entrypoint, "Cmd fallback: %+v", meta) {
			assert.Equal(t, "/fn", meta.Entrypoint[0], "Cmd fallback: %+v", meta)
		}
	}

	// Without credentials: refused, saying so.
	anon, err := New(Options{AllowedRegistries: []string{host}, CAPaths: []string{ca}})
	require.NoError(t, err)
	if _, err := anon.Resolve(ctx, image); assert.Error(t, err, "anonymous resolve") {
		assert.Contains(t, strings.ToLower(err.Error()), "unauthorized", "anonymous resolve")
	}
	// Without the CA: the certificate is not trusted.
	noCA, err := New(Options{AllowedRegistries: []string{host}, DockerConfigPath: reg.DockerConfig(t, testregistry.User, testregistry.Password)})
	require.NoError(t, err)
	_, err = noCA.Resolve(ctx, image)
	assert.ErrorContains(t, err, "certificate", "resolve without the CA")
}

func TestTagsExpireDigestsDoNot(t *testing.T) {
	reg := testregistry.New(t)
	host, ca := reg.Host, reg.CAFile
	image := host + "/fns/fn:v1"
	first := reg.Push(t, image, v1.Config{Entrypoint: []string{"/one"}})
	r, err := New(Options{AllowedRegistries: []string{host}, DockerConfigPath: reg.DockerConfig(t, testregistry.User, testregistry.Password), CAPaths: []string{ca}, TTL: time.Minute})
	require.NoError(t, err)
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	ctx := context.Background()
	m, _ := r.Resolve(ctx, image)
	require.Equal(t, first.String(), m.Digest, "first = %+v", m)
	pinned := host + "/fns/fn@" + first.String()
	m, err = r.Resolve(ctx, pinned)
	require.NoError(t, err, "pinned")
	require.Equal(t, first.String(), m.Digest, "pinned: %+v", m)

	second := reg.Push(t, image, v1.Config{Entrypoint: []string{"/two"}}) // the tag moves
	m, _ = r.Resolve(ctx, image)
	assert.Equal(t, first.String(), m.Digest, "within the TTL: %+v, want the cached digest", m)
	now = now.Add(2 * time.Minute)
	m, _ = r.Resolve(ctx, image)
	assert.Equal(t, second.String(), m.Digest, "after the TTL: %+v", m)
	if assert.NotEmpty(t, m.Entrypoint, "after the TTL: %+v", m) {
		assert.Equal(t, "/two", m.Entrypoint[0], "after the TTL: %+v", m)
	}
	reg.Close() // a digest never needs the registry again
	if m, err := r.Resolve(ctx, pinned); assert.NoError(t, err, "pinned after the TTL, registry gone") {
		assert.Equal(t, first.String(), m.Digest, "pinned after the TTL, registry gone: %+v", m)
	}
}

// Package testregistry is go-containerregistry's registry on loopback for
// tests: behind TLS with a self-signed certificate and basic auth, as a
// private registry is, with helpers to push images and write credentials.
package testregistry

import (
	"encoding/base64"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/require"
)

// The credentials the registry accepts.
const (
	User     = "porch"
	Password = "s3cret"
)

// Registry is a private registry on loopback, stopped when the test ends.
type Registry struct {
	// Host is host:port, for image references.
	Host string
	// CAFile is the PEM file of the registry's self-signed certificate.
	CAFile string
	// Transport reaches the registry (it trusts the certificate).
	Transport http.RoundTripper
	srv       *httptest.Server
	manifests atomic.Int64
}

// UnauthorizedBody is the body of the registry's 401 answers: a caller's
// error must never show it.
const UnauthorizedBody = "unauthorized: registry-body-not-for-callers"

// New starts a registry.
func New(t testing.TB) *Registry {
	t.Helper()
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	out := &Registry{}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != User || p != Password {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, UnauthorizedBody, http.StatusUnauthorized)
			return
		}
		if strings.Contains(r.URL.Path, "/manifests/") && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			out.manifests.Add(1)
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.crt")
	require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644))
	out.Host, out.CAFile, out.Transport, out.srv = strings.TrimPrefix(srv.URL, "https://"), ca, srv.Client().Transport, srv
	return out
}

// ManifestRequests counts the manifest GETs and HEADs the registry answered
// to authenticated clients.
func (r *Registry) ManifestRequests() int64 { return r.manifests.Load() }

// Close stops the registry before the test ends, e.g. to show that
// something no longer needs it.
func (r *Registry) Close() { r.srv.Close() }

// Push pushes a small random image with config cfg as ref (a full reference
// into this registry) and returns its digest.
func (r *Registry) Push(t testing.TB, ref string, cfg v1.Config) v1.Hash {
	t.Helper()
	img, err := random.Image(256, 1)
	require.NoError(t, err)
	img, err = mutate.Config(img, cfg)
	require.NoError(t, err)
	return r.PushImage(t, ref, img)
}

// PushImage pushes img as ref and returns its digest.
func (r *Registry) PushImage(t testing.TB, ref string, img v1.Image) v1.Hash {
	t.Helper()
	parsed, err := name.ParseReference(ref)
	require.NoError(t, err)
	require.NoError(t, remote.Write(parsed, img, remote.WithAuth(&authn.Basic{Username: User, Password: Password}), remote.WithTransport(r.Transport)))
	d, err := img.Digest()
	require.NoError(t, err)
	return d
}

// DockerConfig writes a .dockerconfigjson holding user:password for this
// registry, keyed by its URL ("https://host:port/v1/", as docker login
// writes it), and returns its path.
func (r *Registry) DockerConfig(t testing.TB, user, password string) string {
	t.Helper()
	return r.dockerConfig(t, "https://"+r.Host+"/v1/", user, password)
}

// DockerConfigByHost is DockerConfig keyed by the bare host:port, as
// kubectl create secret docker-registry writes it.
func (r *Registry) DockerConfigByHost(t testing.TB, user, password string) string {
	t.Helper()
	return r.dockerConfig(t, r.Host, user, password)
}

func (r *Registry) dockerConfig(t testing.TB, key, user, password string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), ".dockerconfigjson")
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	require.NoError(t, os.WriteFile(p, []byte(`{"auths":{"`+key+`":{"auth":"`+auth+`"}}}`), 0o600))
	return p
}

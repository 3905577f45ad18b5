// Package testregistry is go-containerregistry's registry on loopback for
// tests: behind TLS with a self-signed certificate and basic auth, as a
// private registry is, with helpers to push images and write credentials.
// It pages tag lists as the distribution registry does (a Link header when
// a page asked for with n is full), counts the requests it gets, and can
// answer a path with a handler of the test's instead (a registry that
// lies: huge or endless answers).
package testregistry

import (
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	requests  atomic.Int64
	blobs     atomic.Int64
	tagLists  atomic.Int64

	mu        sync.Mutex
	overrides map[string]http.Handler
}

// UnauthorizedBody is the body of the registry's 401 answers: a caller's
// error must never show it.
const UnauthorizedBody = "unauthorized: registry-body-not-for-callers"

// New starts a registry.
func New(t testing.TB) *Registry {
	t.Helper()
	reg := paged(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	out := &Registry{overrides: map[string]http.Handler{}}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out.requests.Add(1)
		if u, p, ok := r.BasicAuth(); !ok || u != User || p != Password {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, UnauthorizedBody, http.StatusUnauthorized)
			return
		}
		read := r.Method == http.MethodGet || r.Method == http.MethodHead
		switch {
		case strings.Contains(r.URL.Path, "/manifests/") && read:
			out.manifests.Add(1)
		case strings.Contains(r.URL.Path, "/blobs/") && read:
			out.blobs.Add(1)
		case strings.HasSuffix(r.URL.Path, "/tags/list") && r.Method == http.MethodGet:
			out.tagLists.Add(1)
		}
		out.mu.Lock()
		h, ok := out.overrides[r.URL.Path]
		out.mu.Unlock()
		if ok {
			h.ServeHTTP(w, r)
			return
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

// Requests counts every request the registry got, with credentials or
// without, to any path.
func (r *Registry) Requests() int64 { return r.requests.Load() }

// BlobRequests counts the blob GETs and HEADs the registry answered to
// authenticated clients.
func (r *Registry) BlobRequests() int64 { return r.blobs.Load() }

// TagListRequests counts the tag-list pages the registry answered to
// authenticated clients.
func (r *Registry) TagListRequests() int64 { return r.tagLists.Load() }

// Serve answers authenticated requests for path (a URL path, such as
// /v2/fns/fn/tags/list) with h in place of the registry, until the test
// ends. The requests are counted as the registry's own are.
func (r *Registry) Serve(path string, h http.Handler) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.overrides[path] = h
}

// Endless answers with prefix and then chunk again and again until the
// client stops reading: an answer without end or Content-Length, for Serve.
func Endless(contentType, prefix, chunk string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		if _, err := io.WriteString(w, prefix); err != nil {
			return
		}
		block := []byte(strings.Repeat(chunk, max(1, 64<<10/len(chunk))))
		for r.Context().Err() == nil {
			if _, err := w.Write(block); err != nil {
				return
			}
		}
	})
}

// Declaring answers with a Content-Length of size and as many zero bytes of
// it as the client reads, for Serve.
func Declaring(contentType string, size int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		_, _ = io.Copy(w, io.LimitReader(zeros{}, size))
	})
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// LinkedPages answers every page of the tag list at path (its URL path)
// with one tag of tagSize bytes and a Link to one more page, without end,
// for Serve.
func LinkedPages(path string, tagSize int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		page, _ := strconv.Atoi(r.URL.Query().Get("page"))
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Link", "<"+path+"?page="+strconv.Itoa(page+1)+`>; rel="next"`)
		_, _ = io.WriteString(w, `{"name":"fns","tags":["`+strings.Repeat("v", tagSize)+`"]}`)
	})
}

// paged pages reg's tag lists as the distribution registry does: "last"
// starts a page after that tag, "n" bounds it, and a page of n tags links to
// the next. (reg itself starts a page after "last" only when some tag
// follows it, and links to none.)
func paged(reg http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if !strings.HasSuffix(r.URL.Path, "/tags/list") || r.Method != http.MethodGet || (!q.Has("n") && !q.Has("last")) {
			reg.ServeHTTP(w, r)
			return
		}
		all := r.Clone(r.Context())
		all.URL.RawQuery = ""
		rec := httptest.NewRecorder()
		reg.ServeHTTP(rec, all)
		var page struct {
			Name string   `json:"name"`
			Tags []string `json:"tags"`
		}
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &page) != nil {
			maps.Copy(w.Header(), rec.Header())
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body.Bytes())
			return
		}
		if last := q.Get("last"); last != "" {
			i, _ := slices.BinarySearch(page.Tags, last)
			for i < len(page.Tags) && page.Tags[i] <= last {
				i++
			}
			page.Tags = page.Tags[i:]
		}
		if n, err := strconv.Atoi(q.Get("n")); err == nil && n > 0 && len(page.Tags) >= n {
			page.Tags = page.Tags[:n]
			next := url.Values{"n": {q.Get("n")}, "last": {page.Tags[n-1]}}
			w.Header().Set("Link", "<"+r.URL.Path+"?"+next.Encode()+`>; rel="next"`)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(page)
	})
}

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

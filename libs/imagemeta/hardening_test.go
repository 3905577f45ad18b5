package imagemeta

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/tests/testregistry"
)

// An image names its registry, and the caller names the image: the
// registry's address is checked when it is dialled. Nothing here is sent
// anywhere: each address is refused before a connection is made.
func TestRegistryAddressesAreChecked(t *testing.T) {
	r, err := New(Options{AllowedRegistries: []string{"169.254.169.254", "registry.internal:5000"}})
	require.NoError(t, err)
	for _, image := range []string{
		"127.0.0.1:5000/fns/fn:v1",          // loopback
		"localhost:5000/fns/fn:v1",          // a name that resolves to loopback counts
		"10.0.0.7:8080/fns/fn:v1",           // private (a ClusterIP), not allowed
		"192.168.1.10/fns/fn:v1",            // private
		"100.64.0.1/fns/fn:v1",              // shared address space
		"169.254.169.254/latest/fn:v1",      // the metadata endpoint, even when named
		"[fd00:ec2::254]:80/fns/fn:v1",      // private IPv6
		"[::1]:5000/fns/fn:v1",              // loopback IPv6
		"[fe80::1]:5000/fns/fn:v1",          // link-local IPv6
		"0.0.0.0:5000/fns/fn:v1",            // unspecified
		"[::ffff:127.0.0.1]:5000/fns/fn:v1", // loopback, v4-mapped
	} {
		t.Run(image, func(t *testing.T) {
			_, err := r.Resolve(context.Background(), image)
			assert.ErrorIs(t, err, ErrForbiddenAddress)
		})
	}
}

// A registry named in AllowedRegistries is reached on loopback (as tests
// and in-cluster registries need); the same registry unnamed is not.
func TestAllowedRegistryIsReached(t *testing.T) {
	reg := testregistry.New(t)
	image := reg.Host + "/fns/fn:v1"
	reg.Push(t, image, v1.Config{Entrypoint: []string{"/fn"}})
	creds := reg.DockerConfig(t, testregistry.User, testregistry.Password)
	allowed, err := New(Options{DockerConfigPath: creds, CAPaths: []string{reg.CAFile}, AllowedRegistries: []string{reg.Host}})
	require.NoError(t, err)
	_, err = allowed.Resolve(context.Background(), image)
	require.NoError(t, err)
	unnamed, err := New(Options{DockerConfigPath: creds, CAPaths: []string{reg.CAFile}})
	require.NoError(t, err)
	_, err = unnamed.Resolve(context.Background(), image)
	assert.ErrorIs(t, err, ErrForbiddenAddress)
}

func resolver(t *testing.T, reg *testregistry.Registry, opts Options) *Resolver {
	t.Helper()
	if opts.DockerConfigPath == "" {
		opts.DockerConfigPath = reg.DockerConfig(t, testregistry.User, testregistry.Password)
	}
	opts.CAPaths = []string{reg.CAFile}
	opts.AllowedRegistries = []string{reg.Host}
	r, err := New(opts)
	require.NoError(t, err)
	return r
}

// A thousand calls at once for one image (a cold cache, or TTL expiry)
// make one manifest request, not a thousand.
func TestConcurrentLookupsShareOneRequest(t *testing.T) {
	reg := testregistry.New(t)
	image := reg.Host + "/fns/fn:v1"
	digest := reg.Push(t, image, v1.Config{Entrypoint: []string{"/fn"}})
	r := resolver(t, reg, Options{})
	before := reg.ManifestRequests()
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for range 1000 {
		wg.Go(func() {
			m, err := r.Resolve(context.Background(), image)
			if err == nil && m.Digest != digest.String() {
				err = errors.New("wrong digest " + m.Digest)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.LessOrEqual(t, reg.ManifestRequests()-before, int64(2), "manifest requests for 1,000 concurrent lookups (a descriptor GET, and at most one HEAD)")
}

// When the registry fails, the last answer is served past its TTL; "no
// such image" is remembered for a while; the cache is bounded.
func TestStaleOnErrorNegativeCachingAndBound(t *testing.T) {
	reg := testregistry.New(t)
	image := reg.Host + "/fns/fn:v1"
	digest := reg.Push(t, image, v1.Config{Entrypoint: []string{"/fn"}})
	r := resolver(t, reg, Options{TTL: time.Minute, NegativeTTL: 30 * time.Second, MaxEntries: 2})
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	ctx := context.Background()

	// Negative caching: the missing image is not asked for again within
	// NegativeTTL, even once it exists; after it, it is found.
	missing := reg.Host + "/fns/later:v1"
	_, err := r.Resolve(ctx, missing)
	var re *RegistryError
	require.ErrorAs(t, err, &re)
	assert.True(t, re.NotFound(), "%v", err)
	reg.Push(t, missing, v1.Config{Entrypoint: []string{"/later"}})
	asked := reg.ManifestRequests()
	_, err = r.Resolve(ctx, missing)
	require.ErrorAs(t, err, &re, "within NegativeTTL")
	assert.Equal(t, asked, reg.ManifestRequests(), "the registry was asked again within NegativeTTL")
	now = now.Add(31 * time.Second)
	_, err = r.Resolve(ctx, missing)
	require.NoError(t, err, "after NegativeTTL")

	// Bounded: two entries at most.
	_, err = r.Resolve(ctx, image)
	require.NoError(t, err)
	_, err = r.Resolve(ctx, reg.Host+"/fns/fn@"+digest.String())
	require.NoError(t, err)
	assert.Equal(t, 2, r.cache.len())

	// Stale on error: past the TTL with the registry gone, the last answer.
	now = now.Add(2 * time.Minute)
	reg.Close()
	m, err := r.Resolve(ctx, image)
	require.NoError(t, err, "registry gone, an entry past its TTL")
	assert.Equal(t, digest.String(), m.Digest)
}

// A registry's error body never reaches the caller, and credentials are
// read again when the mounted file changes.
func TestRegistryErrorsAndCredentialReload(t *testing.T) {
	reg := testregistry.New(t)
	image := reg.Host + "/fns/fn:v1"
	reg.Push(t, image, v1.Config{Entrypoint: []string{"/fn"}})
	creds := reg.DockerConfig(t, testregistry.User, "wrong")
	r := resolver(t, reg, Options{DockerConfigPath: creds})

	_, err := r.Resolve(context.Background(), image)
	var re *RegistryError
	require.ErrorAs(t, err, &re)
	assert.True(t, re.Denied(), "%v", err)
	assert.NotContains(t, err.Error(), "registry-body-not-for-callers")

	// The Secret is updated in place: the next lookup uses it.
	right, err := os.ReadFile(reg.DockerConfig(t, testregistry.User, testregistry.Password))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(creds, right, 0o600))
	later := time.Now().Add(time.Second)
	require.NoError(t, os.Chtimes(creds, later, later))
	_, err = r.Resolve(context.Background(), image)
	assert.NoError(t, err, "after the credentials changed")
}

// A caller waits for a shared registry request no longer than its own
// context allows.
func TestCallerDoesNotWaitPastItsDeadline(t *testing.T) {
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		http.NotFound(w, r)
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(release) })
	host := strings.TrimPrefix(slow.URL, "http://")
	r, err := New(Options{AllowedRegistries: []string{host}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = r.Resolve(ctx, host+"/fns/fn:v1")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

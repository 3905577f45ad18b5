package imagemeta

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
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

// Each address class, alone and carried in an IPv6 address, as a registry
// named in AllowedRegistries (allowed) or not. Nothing is dialled.
func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		ip string
		// want is the reason an unnamed registry is refused ("" = dialled);
		// wantAllowed the reason a named one is.
		want, wantAllowed string
	}{
		{ip: "8.8.8.8"},
		{ip: "2a00:1450:4001::1"},
		{ip: "127.0.0.1", want: "loopback"},
		{ip: "::1", want: "loopback"},
		{ip: "::", want: "loopback"},
		{ip: "10.0.0.1", want: "private"},
		{ip: "100.64.0.1", want: "private"},
		{ip: "fd00::1", want: "private"},
		{ip: "169.254.169.254", want: "link-local", wantAllowed: "link-local"},
		{ip: "fe80::1", want: "link-local", wantAllowed: "link-local"},
		{ip: "224.0.0.1", want: "multicast", wantAllowed: "multicast"},

		// Special-purpose ranges.
		{ip: "0.1.2.3", want: "special-purpose"},
		{ip: "192.0.0.8", want: "special-purpose"},
		{ip: "192.0.2.1", want: "special-purpose"},
		{ip: "198.51.100.1", want: "special-purpose"},
		{ip: "203.0.113.1", want: "special-purpose"},
		{ip: "198.18.0.1", want: "special-purpose"},
		{ip: "198.19.255.255", want: "special-purpose"},
		{ip: "198.20.0.1"},
		{ip: "240.0.0.1", want: "special-purpose"},
		{ip: "255.255.255.255", want: "special-purpose"},
		{ip: "::ffff:198.18.0.1", want: "special-purpose"},
		{ip: "100::1", want: "special-purpose"},
		{ip: "2001:db8::1", want: "special-purpose"},

		// 6to4: the IPv4 address in bits 16–48.
		{ip: "2002:808:808::1"},
		{ip: "2002:a00:1::", want: "private"},
		{ip: "2002:7f00:1::", want: "loopback"},
		{ip: "2002:c000:201::", want: "special-purpose"},
		{ip: "2002:a9fe:a9fe::", want: "link-local", wantAllowed: "link-local"},
		// NAT64: the IPv4 address in the last 32 bits.
		{ip: "64:ff9b::8.8.8.8"},
		{ip: "64:ff9b::10.0.0.1", want: "private"},
		{ip: "64:ff9b::169.254.169.254", want: "link-local", wantAllowed: "link-local"},
		{ip: "64:ff9b:1::8.8.8.8"},
		{ip: "64:ff9b:1::127.0.0.1", want: "loopback"},
		{ip: "64:ff9b:1:ffff::169.254.169.254", want: "link-local", wantAllowed: "link-local"},
		// Teredo: the client's IPv4 address in the last 32 bits, inverted.
		{ip: "2001:0:4136:e378:8000:63bf:f7f7:f7f7"},                                                // 8.8.8.8
		{ip: "2001:0:4136:e378:8000:63bf:f5ff:fffe", want: "private"},                               // 10.0.0.1
		{ip: "2001:0:4136:e378:8000:63bf:5601:5601", want: "link-local", wantAllowed: "link-local"}, // 169.254.169.254
		// IPv4-compatible: ::/96.
		{ip: "::8.8.8.8"},
		{ip: "::10.0.0.1", want: "private"},
		{ip: "::198.18.0.1", want: "special-purpose"},
		{ip: "::169.254.169.254", want: "link-local", wantAllowed: "link-local"},
	} {
		t.Run(tc.ip, func(t *testing.T) {
			ip := netip.MustParseAddr(tc.ip)
			for _, c := range []struct {
				allowed bool
				want    string
			}{{false, tc.want}, {true, tc.wantAllowed}} {
				err := check(ip, c.allowed)
				if c.want == "" {
					assert.NoError(t, err, "allowed: %v", c.allowed)
					continue
				}
				assert.ErrorIs(t, err, ErrForbiddenAddress, "allowed: %v", c.allowed)
				assert.ErrorContains(t, err, c.want, "allowed: %v", c.allowed)
			}
		})
	}
}

// The guard refuses special-purpose and embedded addresses where it dials
// them. Its dialer connects to loopback only, whatever the guard decides.
func TestSpecialPurposeRegistriesAreRefused(t *testing.T) {
	r, err := New(Options{})
	require.NoError(t, err)
	r.transport = registryTransport(loopbackOnly(t, newDialGuard(nil, nil), nil))
	for _, image := range []string{
		"198.18.0.1/fns/fn:v1",
		"240.0.0.1/fns/fn:v1",
		"192.0.2.1:5000/fns/fn:v1",
		"[2001:db8::1]:5000/fns/fn:v1",
		"[100::1]/fns/fn:v1",
		"[2002:7f00:1::]:5000/fns/fn:v1",
		"[2002:a9fe:a9fe::]/fns/fn:v1",
		"[64:ff9b::a00:1]/fns/fn:v1",
		"[2001:0:4136:e378:8000:63bf:5601:5601]/fns/fn:v1",
		"[::a00:1]/fns/fn:v1",
	} {
		t.Run(image, func(t *testing.T) {
			_, err := r.Resolve(context.Background(), image)
			assert.ErrorIs(t, err, ErrForbiddenAddress)
		})
	}
}

// loopbackOnly makes g dial nothing outside loopback, whatever g decides:
// a broken guard fails the test rather than sending traffic out. It answers
// names from names, never from DNS.
func loopbackOnly(t *testing.T, g *dialGuard, names fakeResolver) *dialGuard {
	t.Helper()
	g.resolver = names
	g.dialer = &net.Dialer{Timeout: 5 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil || !ap.Addr().Unmap().IsLoopback() {
			t.Errorf("dialled %s, outside loopback", address)
			return errors.New("test: dial outside loopback")
		}
		return nil
	}}
	return g
}

// fakeResolver answers names from a map.
type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if addrs, ok := f[host]; ok {
		return addrs, nil
	}
	return nil, &net.DNSError{Err: "not in the test resolver", Name: host, IsNotFound: true}
}

func addrs(ips ...string) []netip.Addr {
	out := make([]netip.Addr, len(ips))
	for i, ip := range ips {
		out[i] = netip.MustParseAddr(ip)
	}
	return out
}

// recordingProxy is an HTTP proxy on loopback that records what it is
// asked and refuses it all: it never connects anywhere.
type recordingProxy struct {
	*httptest.Server
	mu    sync.Mutex
	asked []string
}

func newRecordingProxy(t *testing.T) *recordingProxy {
	t.Helper()
	p := &recordingProxy{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.asked = append(p.asked, r.Method+" "+r.Host)
		p.mu.Unlock()
		http.Error(w, "test proxy: refused", http.StatusForbidden)
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *recordingProxy) proxyURL(t *testing.T) *url.URL {
	t.Helper()
	u, err := url.Parse(p.URL)
	require.NoError(t, err)
	return u
}

func (p *recordingProxy) Asked() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.asked...)
}

// Through a proxy, the destination is checked before the proxy is asked
// for it, by the rules that apply without one; every address it resolves
// to must pass, since the proxy picks one.
func TestProxyDestinationIsChecked(t *testing.T) {
	proxy, err := url.Parse("http://proxy.example:3128")
	require.NoError(t, err)
	g := loopbackOnly(t, newDialGuard([]string{"registry.internal:5000", "named.internal"}, proxy), fakeResolver{
		"public.example":    addrs("8.8.8.8", "2a00:1450:4001::1"),
		"loopback.example":  addrs("127.0.0.1"),
		"mixed.example":     addrs("8.8.8.8", "10.0.0.1"),
		"special.example":   addrs("198.18.0.1"),
		"sixtofour.example": addrs("2002:a00:1::"),
		"registry.internal": addrs("10.0.0.7"),
		"named.internal":    addrs("169.254.169.254"),
	})
	for _, tc := range []struct {
		url  string
		want string // "" = through the proxy
	}{
		{url: "https://public.example/v2/"},
		{url: "https://loopback.example/v2/", want: "loopback"},
		{url: "https://127.0.0.1:5000/v2/", want: "loopback"},
		{url: "https://mixed.example/v2/", want: "private"},
		{url: "https://special.example/v2/", want: "special-purpose"},
		{url: "https://sixtofour.example/v2/", want: "private"},
		{url: "https://registry.internal:5000/v2/"},
		{url: "https://registry.internal/v2/", want: "private"}, // allowed on :5000, not :443
		{url: "https://named.internal/v2/", want: "link-local"},
		{url: "http://[fe80::1]/v2/", want: "link-local"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, tc.url, nil)
			require.NoError(t, err)
			got, err := g.Proxy(req)
			if tc.want == "" {
				require.NoError(t, err)
				assert.Equal(t, proxy, got)
				return
			}
			assert.ErrorIs(t, err, ErrForbiddenAddress)
			assert.ErrorContains(t, err, tc.want)
			assert.Nil(t, got)
		})
	}
	req, err := http.NewRequest(http.MethodGet, "https://unknown.example/v2/", nil)
	require.NoError(t, err)
	_, err = g.Proxy(req)
	var dnsErr *net.DNSError
	assert.ErrorAs(t, err, &dnsErr, "a name that does not resolve")
}

// A registry that resolves to loopback is refused before the proxy is
// asked to connect to it; a public one is asked for (the test proxy
// refuses it). The proxy itself is on loopback, not allowed, and dialled:
// the operator named it.
func TestProxyIsAskedOnlyForAllowedDestinations(t *testing.T) {
	p := newRecordingProxy(t)
	r, err := New(Options{Proxy: p.proxyURL(t)})
	require.NoError(t, err)
	r.transport = registryTransport(loopbackOnly(t, newDialGuard(nil, p.proxyURL(t)), fakeResolver{
		"public.example":   addrs("8.8.8.8"),
		"registry.example": addrs("127.0.0.1"),
	}))
	ctx := context.Background()

	for _, image := range []string{"registry.example/fns/fn:v1", "127.0.0.1:5000/fns/fn:v1", "[::1]:5000/fns/fn:v1"} {
		_, err = r.Resolve(ctx, image)
		assert.ErrorIs(t, err, ErrForbiddenAddress, "Resolve(%s)", image)
	}
	assert.Empty(t, p.Asked(), "the proxy was asked for a refused destination")

	_, err = r.Resolve(ctx, "public.example/fns/fn:v1")
	require.Error(t, err, "the test proxy refuses every request")
	assert.NotErrorIs(t, err, ErrForbiddenAddress)
	if asked := p.Asked(); assert.NotEmpty(t, asked, "the proxy was not asked for an allowed destination") {
		for _, a := range asked {
			assert.Equal(t, "CONNECT public.example:443", a)
		}
	}
}

// The resolver New makes uses a proxy only when Options names one, and
// never the environment's. With a real name resolving to loopback: refused
// before any proxy is asked.
func TestProxyFromOptionsOnly(t *testing.T) {
	p := newRecordingProxy(t)
	r, err := New(Options{Proxy: p.proxyURL(t)})
	require.NoError(t, err)
	_, err = r.Resolve(context.Background(), "localhost:5000/fns/fn:v1")
	assert.ErrorIs(t, err, ErrForbiddenAddress)
	assert.Empty(t, p.Asked(), "the proxy was asked for localhost")

	t.Setenv("HTTPS_PROXY", p.URL)
	t.Setenv("HTTP_PROXY", p.URL)
	none, err := New(Options{})
	require.NoError(t, err)
	assert.Nil(t, none.transport.(*http.Transport).Proxy, "a proxy from the environment")
	// Were the environment's proxy used, the guard would dial it (allowed
	// here) and ask it for registry.example; without it, the guard refuses
	// registry.example's loopback address itself.
	none.transport = registryTransport(loopbackOnly(t, newDialGuard([]string{p.Listener.Addr().String()}, nil), fakeResolver{
		"registry.example": addrs("127.0.0.1"),
	}))
	_, err = none.Resolve(context.Background(), "registry.example/fns/fn:v1")
	assert.ErrorIs(t, err, ErrForbiddenAddress)
	assert.Empty(t, p.Asked(), "the environment's proxy was used")
}

// A proxy at a link-local address is never dialled; a proxy URL the
// transport cannot use is refused by New.
func TestProxyAddressIsChecked(t *testing.T) {
	proxy, err := url.Parse("http://169.254.169.254:3128")
	require.NoError(t, err)
	r, err := New(Options{Proxy: proxy})
	require.NoError(t, err)
	r.transport = registryTransport(loopbackOnly(t, newDialGuard(nil, proxy), fakeResolver{"public.example": addrs("8.8.8.8")}))
	_, err = r.Resolve(context.Background(), "public.example/fns/fn:v1")
	assert.ErrorIs(t, err, ErrForbiddenAddress)
	assert.ErrorContains(t, err, "link-local")

	for _, bad := range []*url.URL{{Scheme: "ftp", Host: "proxy.example:21"}, {Scheme: "http"}, {Scheme: "http", Path: "proxy.example"}} {
		_, err := New(Options{Proxy: bad})
		assert.Error(t, err, "New with proxy %q", bad)
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
	assert.Equal(t, 2, r.cache[unclaimed].len())

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

func TestParseProxyURL(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // "" = nil for "", an error otherwise
	}{
		{in: ""},
		{in: "http://proxy.example:3128", want: "http://proxy.example:3128"},
		{in: "https://user:secret@proxy.example", want: "https://user:secret@proxy.example"},
		{in: "socks5://10.0.0.1:1080", want: "socks5://10.0.0.1:1080"},
		{in: "proxy.example:3128"},
		{in: "proxy.example"},
		{in: "ftp://proxy.example"},
		{in: "http://"},
		{in: "http://[::1"},
		{in: "http://user:secret@[::1"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseProxyURL(tc.in)
			switch {
			case tc.in == "":
				assert.NoError(t, err)
				assert.Nil(t, got)
			case tc.want == "":
				assert.Error(t, err, "ParseProxyURL(%q) = %v", tc.in, got)
				assert.NotContains(t, fmt.Sprint(err), "secret")
			default:
				require.NoError(t, err)
				assert.Equal(t, tc.want, got.String())
			}
		})
	}
}

package imagemeta

import (
	"context"
	"errors"
	"fmt"
	"io"
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

		// IPv4-mapped: unmapped, then checked as IPv4.
		{ip: "::ffff:8.8.8.8"},
		{ip: "::ffff:10.0.0.1", want: "private"},
		{ip: "::ffff:127.0.0.1", want: "loopback"},
		{ip: "::ffff:169.254.169.254", want: "link-local", wantAllowed: "link-local"},
		{ip: "::ffff:192.88.99.1", want: "6to4 relay anycast"},

		// The rest of the IANA special-purpose registries, and site-local.
		{ip: "192.0.0.9", want: "IETF protocol assignments"},
		{ip: "192.31.196.1", want: "AS112"},
		{ip: "192.52.193.1", want: "AMT"},
		{ip: "192.88.99.1", want: "6to4 relay anycast"},
		{ip: "192.88.100.1"},
		{ip: "192.175.48.1", want: "AS112 direct delegation"},
		{ip: "100:0:0:1::1", want: "dummy"},
		{ip: "2001:1::1", want: "IETF protocol assignments"},
		{ip: "2001:2::1", want: "IETF protocol assignments"},  // benchmarking
		{ip: "2001:3::1", want: "IETF protocol assignments"},  // AMT
		{ip: "2001:10::1", want: "IETF protocol assignments"}, // ORCHID
		{ip: "2001:20::1", want: "IETF protocol assignments"}, // ORCHIDv2
		{ip: "2001:2f:ffff::1", want: "IETF protocol assignments"},
		{ip: "2001:30::1", want: "IETF protocol assignments"}, // drone remote ID
		{ip: "2001:1ff::1", want: "IETF protocol assignments"},
		{ip: "2001:200::1"}, // past 2001::/23: a public address
		{ip: "2620:4f:8000::1", want: "AS112 direct delegation"},
		{ip: "3fff::1", want: "documentation"},
		{ip: "5f00::1", want: "SRv6"},
		{ip: "fec0::1", want: "site-local"},
		{ip: "feff::1", want: "site-local"},
		{ip: "::ffff:0:a00:1", want: "reserved"}, // IPv4-translated (RFC 2765)
		{ip: "4000::1", want: "reserved"},
		{ip: "1::1", want: "reserved"},
		{ip: "e000::1", want: "reserved"},
		{ip: "2002:c058:6301::", want: "6to4 relay anycast"},
	} {
		t.Run(tc.ip, func(t *testing.T) {
			ip := netip.MustParseAddr(tc.ip)
			rules := newAddressRules()
			for _, c := range []struct {
				allowed bool
				want    string
			}{{false, tc.want}, {true, tc.wantAllowed}} {
				err := rules.check(ip, c.allowed)
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
		"192.88.99.1/fns/fn:v1",
		"[fec0::1]/fns/fn:v1",
		"[2001:20::1]/fns/fn:v1",
		"[::ffff:a00:1]/fns/fn:v1",
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

func (p *recordingProxy) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked = nil
}

func (p *recordingProxy) Asked() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.asked...)
}

// Through a proxy, the destination is checked by the rules that apply
// without one, and the proxy is asked for the address checked, never the
// name: it has nothing to resolve again. A refused address never reaches
// the proxy. The test proxy refuses every CONNECT, so nothing is connected.
func TestProxyDestinationIsChecked(t *testing.T) {
	p := newRecordingProxy(t)
	names := fakeResolver{
		"public.example":    addrs("8.8.8.8", "2a00:1450:4001::1"),
		"v6.example":        addrs("2a00:1450:4001::1"),
		"loopback.example":  addrs("127.0.0.1"),
		"mixed.example":     addrs("10.0.0.1", "8.8.8.8"),
		"special.example":   addrs("198.18.0.1"),
		"sixtofour.example": addrs("2002:a00:1::"),
		"registry.internal": addrs("10.0.0.7"),
		"named.internal":    addrs("169.254.169.254"),
	}
	for _, tc := range []struct {
		address string
		asked   string // the CONNECT the proxy gets; "" = none
		want    string // why the guard refuses; "" = it asks the proxy
	}{
		{address: "public.example:443", asked: "CONNECT 8.8.8.8:443"},
		{address: "v6.example:443", asked: "CONNECT [2a00:1450:4001::1]:443"},
		{address: "mixed.example:443", asked: "CONNECT 8.8.8.8:443"}, // the refused address is skipped
		{address: "registry.internal:5000", asked: "CONNECT 10.0.0.7:5000"},
		{address: "loopback.example:443", want: "loopback"},
		{address: "127.0.0.1:5000", want: "loopback"}, // never proxied, and refused
		{address: "special.example:443", want: "special-purpose"},
		{address: "sixtofour.example:443", want: "private"},
		{address: "registry.internal:443", want: "private"}, // allowed on :5000, not :443
		{address: "named.internal:443", want: "link-local"},
		{address: "[fe80::1]:80", want: "link-local"},
	} {
		t.Run(tc.address, func(t *testing.T) {
			p.reset()
			g := loopbackOnly(t, newDialGuard([]string{"registry.internal:5000", "named.internal"}, p.proxyURL(t)), names)
			conn, err := g.DialContext(context.Background(), "tcp", tc.address)
			require.Error(t, err, "the test proxy refuses every CONNECT")
			assert.Nil(t, conn)
			if tc.want != "" {
				assert.ErrorIs(t, err, ErrForbiddenAddress)
				assert.ErrorContains(t, err, tc.want)
				assert.Empty(t, p.Asked(), "the proxy was asked for a refused destination")
				return
			}
			assert.NotErrorIs(t, err, ErrForbiddenAddress)
			assert.ErrorContains(t, err, "403")
			assert.Equal(t, []string{tc.asked}, p.Asked())
		})
	}
	g := loopbackOnly(t, newDialGuard(nil, p.proxyURL(t)), names)
	_, err := g.DialContext(context.Background(), "tcp", "unknown.example:443")
	var dnsErr *net.DNSError
	assert.ErrorAs(t, err, &dnsErr, "a name that does not resolve")
}

// tunnelProxy is an HTTP proxy on loopback that records each CONNECT and
// tunnels it, to loopback addresses only.
type tunnelProxy struct {
	*httptest.Server
	mu    sync.Mutex
	asked []string
}

func newTunnelProxy(t *testing.T) *tunnelProxy {
	t.Helper()
	p := &tunnelProxy{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.asked = append(p.asked, r.Method+" "+r.Host)
		p.mu.Unlock()
		ap, err := netip.ParseAddrPort(r.Host)
		if r.Method != http.MethodConnect || err != nil || !ap.Addr().IsLoopback() {
			http.Error(w, "test proxy: loopback addresses only", http.StatusForbidden)
			return
		}
		up, err := net.Dial("tcp", r.Host)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			up.Close()
			return
		}
		_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\n\r\n")
		go func() { _, _ = io.Copy(up, conn); up.Close() }()
		go func() { _, _ = io.Copy(conn, up); conn.Close() }()
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *tunnelProxy) Asked() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.asked...)
}

// Through the tunnel the proxy opened to the checked address, the registry
// still gets its name as the TLS server name and in the Host header, as
// go-containerregistry's transport sends them. A registry in NoProxy is
// dialled without the proxy (NO_PROXY syntax), still checked.
func TestProxyTunnelKeepsTheName(t *testing.T) {
	type seen struct{ host, serverName string }
	got := make(chan seen, 1)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Host, r.TLS.ServerName}
	}))
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	// httptest's certificate is for example.com and 127.0.0.1.
	names := fakeResolver{"example.com": addrs("127.0.0.1"), "fns.example.com": addrs("127.0.0.1")}
	for _, tc := range []struct {
		host    string
		noProxy []string
		proxied bool
	}{
		{host: "example.com", proxied: true},
		{host: "example.com", noProxy: []string{"other.example"}, proxied: true},
		{host: "example.com", noProxy: []string{".example.com"}, proxied: true}, // subdomains only
		{host: "example.com", noProxy: []string{"example.com"}},
		{host: "example.com", noProxy: []string{"other.example", " example.com "}},
		{host: "example.com", noProxy: []string{fmt.Sprintf("example.com:%d", port)}},
		{host: "example.com", noProxy: []string{"example.com:1"}, proxied: true},
		{host: "example.com", noProxy: []string{"*"}},
		{host: "fns.example.com", noProxy: []string{".example.com"}},
		{host: "fns.example.com", noProxy: []string{"example.com"}},
		{host: "127.0.0.1"}, // loopback is never proxied
	} {
		t.Run(fmt.Sprintf("%s %v", tc.host, tc.noProxy), func(t *testing.T) {
			p := newTunnelProxy(t)
			g := loopbackOnly(t, newDialGuard([]string{tc.host}, p.proxyURL(t), tc.noProxy...), names)
			tr := registryTransport(g)
			tr.TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
			t.Cleanup(tr.CloseIdleConnections)
			hostPort := net.JoinHostPort(tc.host, fmt.Sprint(port))
			resp, err := (&http.Client{Transport: tr}).Get("https://" + hostPort + "/v2/")
			require.NoError(t, err)
			resp.Body.Close()
			s := <-got
			assert.Equal(t, hostPort, s.host, "Host")
			if tc.host != "127.0.0.1" {
				assert.Equal(t, tc.host, s.serverName, "TLS server name")
			}
			if tc.proxied {
				assert.Equal(t, []string{fmt.Sprintf("CONNECT 127.0.0.1:%d", port)}, p.Asked())
			} else {
				assert.Empty(t, p.Asked())
			}
		})
	}
}

func (p *tunnelProxy) proxyURL(t *testing.T) *url.URL {
	t.Helper()
	u, err := url.Parse(p.URL)
	require.NoError(t, err)
	return u
}

// socksRecorder is a SOCKS5 server on loopback that records the address
// each request names and refuses it: it never connects anywhere.
type socksRecorder struct {
	ln    net.Listener
	mu    sync.Mutex
	asked []string
}

func newSOCKSRecorder(t *testing.T) *socksRecorder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &socksRecorder{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
	return s
}

func (s *socksRecorder) serve(c net.Conn) {
	defer c.Close()
	b := make([]byte, 262)
	if _, err := io.ReadFull(c, b[:2]); err != nil {
		return
	}
	if _, err := io.ReadFull(c, b[:b[1]]); err != nil {
		return
	}
	if _, err := c.Write([]byte{5, 0}); err != nil {
		return
	}
	if _, err := io.ReadFull(c, b[:4]); err != nil {
		return
	}
	var host string
	switch b[3] {
	case 1, 4:
		n := 4
		if b[3] == 4 {
			n = 16
		}
		if _, err := io.ReadFull(c, b[:n]); err != nil {
			return
		}
		ip, _ := netip.AddrFromSlice(b[:n])
		host = "ip " + ip.String()
	case 3:
		if _, err := io.ReadFull(c, b[:1]); err != nil {
			return
		}
		n := int(b[0])
		if _, err := io.ReadFull(c, b[:n]); err != nil {
			return
		}
		host = "name " + string(b[:n])
	default:
		return
	}
	if _, err := io.ReadFull(c, b[:2]); err != nil {
		return
	}
	s.mu.Lock()
	s.asked = append(s.asked, fmt.Sprintf("%s port %d", host, int(b[0])<<8|int(b[1])))
	s.mu.Unlock()
	_, _ = c.Write([]byte{5, 1, 0, 1, 0, 0, 0, 0, 0, 0}) // general failure
}

func (s *socksRecorder) Asked() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.asked...)
}

// A SOCKS5 proxy, socks5 or socks5h alike, is given the checked address,
// never the name.
func TestSOCKS5ProxyIsGivenTheAddress(t *testing.T) {
	names := fakeResolver{"public.example": addrs("8.8.8.8"), "v6.example": addrs("2a00:1450:4001::1"), "loopback.example": addrs("127.0.0.1")}
	for _, tc := range []struct {
		scheme, address, asked, want string
	}{
		{scheme: "socks5", address: "public.example:443", asked: "ip 8.8.8.8 port 443"},
		{scheme: "socks5h", address: "public.example:443", asked: "ip 8.8.8.8 port 443"},
		{scheme: "socks5h", address: "v6.example:5000", asked: "ip 2a00:1450:4001::1 port 5000"},
		{scheme: "socks5h", address: "loopback.example:443", want: "loopback"},
	} {
		t.Run(tc.scheme+" "+tc.address, func(t *testing.T) {
			s := newSOCKSRecorder(t)
			g := loopbackOnly(t, newDialGuard(nil, &url.URL{Scheme: tc.scheme, Host: s.ln.Addr().String()}), names)
			_, err := g.DialContext(context.Background(), "tcp", tc.address)
			require.Error(t, err, "the test proxy refuses every request")
			if tc.want != "" {
				assert.ErrorIs(t, err, ErrForbiddenAddress)
				assert.ErrorContains(t, err, tc.want)
				assert.Empty(t, s.Asked())
				return
			}
			assert.NotErrorIs(t, err, ErrForbiddenAddress)
			assert.Equal(t, []string{tc.asked}, s.Asked())
		})
	}
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
			assert.Equal(t, "CONNECT 8.8.8.8:443", a, "the checked address, not the name")
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

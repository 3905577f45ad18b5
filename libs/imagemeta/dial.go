package imagemeta

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpproxy"
	"golang.org/x/net/proxy"
)

// ErrForbiddenAddress means a registry (or a host it redirects to) resolves
// to an address fnrunner does not dial for an image named by a caller:
// link-local ones (the cloud metadata endpoint) never, even carried in an
// IPv6 address; loopback, private and special-purpose ones only for
// registries named in Options.AllowedRegistries.
var ErrForbiddenAddress = errors.New("registry address not allowed")

// addressRules are the ranges check refuses, and those whose IPv6
// addresses carry an IPv4 one. newAddressRules builds them; nothing
// changes them after.
type addressRules struct {
	cgnat   netip.Prefix
	special []specialRange
	// IPv6 ranges whose addresses carry an IPv4 address that packets to
	// them end up at.
	nat64, nat64Local, sixToFour, teredo, v4Compat netip.Prefix
	// globalUnicast is where every public IPv6 address is (RFC 4291 2.4).
	globalUnicast netip.Prefix
}

// specialRange is a range of the IANA special-purpose registries, and what
// it is. An address in except is not in the range (it is checked by the
// IPv4 address it carries).
type specialRange struct {
	prefix, except netip.Prefix
	what           string
}

// newAddressRules returns the rules check applies. special are the ranges
// of the IANA IPv4 and IPv6 special-purpose address registries (RFC 6890,
// as updated to 2025) that check does not name otherwise, and the
// deprecated site-local range: none is a registry's public address.
// Several are globally reachable anycast services (AS112, AMT, the 6to4
// relay, PCP and TURN anycast); none of them is a registry either.
func newAddressRules() *addressRules {
	p := netip.MustParsePrefix
	teredo := p("2001::/32")
	return &addressRules{
		cgnat: p("100.64.0.0/10"), // the shared address space (RFC 6598), private in practice
		special: []specialRange{
			{prefix: p("0.0.0.0/8"), what: "this network"},
			{prefix: p("192.0.0.0/24"), what: "IETF protocol assignments"},
			{prefix: p("192.0.2.0/24"), what: "documentation"},
			{prefix: p("192.31.196.0/24"), what: "AS112"},
			{prefix: p("192.52.193.0/24"), what: "AMT"},
			{prefix: p("192.88.99.0/24"), what: "6to4 relay anycast"},
			{prefix: p("192.175.48.0/24"), what: "AS112 direct delegation"},
			{prefix: p("198.18.0.0/15"), what: "benchmarking"},
			{prefix: p("198.51.100.0/24"), what: "documentation"},
			{prefix: p("203.0.113.0/24"), what: "documentation"},
			{prefix: p("240.0.0.0/4"), what: "reserved"}, // 255.255.255.255 included
			{prefix: p("100::/64"), what: "discard"},
			{prefix: p("100:0:0:1::/64"), what: "dummy"},
			// PCP, TURN and DNS-SD anycast (2001:1::/48), benchmarking
			// (2001:2::/48), AMT (2001:3::/32), AS112 (2001:4:112::/48),
			// ORCHID and ORCHIDv2 (2001:10::/28, 2001:20::/28), drone
			// remote ID (2001:30::/28); Teredo is read as the IPv4 address
			// it carries.
			{prefix: p("2001::/23"), except: teredo, what: "IETF protocol assignments"},
			{prefix: p("2001:db8::/32"), what: "documentation"},
			{prefix: p("2620:4f:8000::/48"), what: "AS112 direct delegation"},
			{prefix: p("3fff::/20"), what: "documentation"},
			{prefix: p("5f00::/16"), what: "SRv6 SIDs"},
			{prefix: p("fec0::/10"), what: "site-local (deprecated)"},
		},
		nat64:         p("64:ff9b::/96"),
		nat64Local:    p("64:ff9b:1::/48"),
		sixToFour:     p("2002::/16"),
		teredo:        teredo,
		v4Compat:      p("::/96"),
		globalUnicast: p("2000::/3"),
	}
}

// dialGuard dials registries only at the addresses they may have. It checks
// the address it dials, after resolving the name, so a name that resolves
// to 127.0.0.1 counts as loopback and a second lookup cannot change it.
// Through a proxy it does the same, and asks the proxy for the address it
// checked (CONNECT ip:port, or its SOCKS5 equivalent), never for the name:
// the proxy resolves nothing. The transport still sends the name in the
// Host header and as the TLS server name. The proxy itself is dialled
// wherever it is, except link-local.
type dialGuard struct {
	allowed   map[string]bool // host:port and host
	proxyURL  *url.URL        // nil: none
	proxyAddr string          // the proxy's host:port, "" for none
	// noProxy are the registries reached without the proxy (NO_PROXY
	// syntax); proxyFor applies it.
	noProxy  []string
	proxyFor func(*url.URL) (*url.URL, error)
	// proxyTLS is the TLS configuration for an https proxy (nil: the
	// system roots).
	proxyTLS *tls.Config
	rules    *addressRules
	resolver hostResolver
	dialer   *net.Dialer
}

// hostResolver is the part of *net.Resolver the guard uses.
type hostResolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// newDialGuard returns a guard for registries allowed at private addresses,
// a proxy (nil: none) and the registries that bypass it (NO_PROXY syntax:
// comma-separated hosts, host:port, .suffix or *.suffix for subdomains, IP
// addresses and CIDR ranges, "*" for all).
func newDialGuard(allowed []string, proxyURL *url.URL, noProxy ...string) *dialGuard {
	g := &dialGuard{allowed: map[string]bool{}, proxyURL: proxyURL, rules: newAddressRules(), resolver: net.DefaultResolver, dialer: &net.Dialer{}}
	for _, a := range allowed {
		if a = strings.TrimSpace(a); a != "" {
			g.allowed[strings.ToLower(a)] = true
		}
	}
	if proxyURL != nil {
		g.proxyAddr = strings.ToLower(net.JoinHostPort(proxyURL.Hostname(), portOf(proxyURL)))
		for _, n := range noProxy {
			if n = strings.TrimSpace(n); n != "" {
				g.noProxy = append(g.noProxy, n)
			}
		}
		g.proxyFor = (&httpproxy.Config{
			HTTPProxy:  proxyURL.String(),
			HTTPSProxy: proxyURL.String(),
			NoProxy:    strings.Join(g.noProxy, ","),
		}).ProxyFunc()
	}
	return g
}

// DialContext is the registry transport's dialer: it resolves address,
// checks its addresses, and connects to the first allowed one, directly or
// through the proxy. Nothing is sent before the check.
func (g *dialGuard) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	ip, err := g.checked(ctx, host, g.isAllowed(host, address))
	if err != nil {
		return nil, err
	}
	target := net.JoinHostPort(ip.String(), port)
	if !g.viaProxy(address) {
		return g.dialer.DialContext(ctx, network, target)
	}
	switch g.proxyURL.Scheme {
	case "socks5", "socks5h":
		return g.dialSOCKS5(ctx, network, target)
	}
	return g.dialConnect(ctx, target)
}

// checked resolves host and returns its first address check allows.
func (g *dialGuard) checked(ctx context.Context, host string, allowed bool) (netip.Addr, error) {
	addrs, err := g.lookup(ctx, host)
	if err != nil {
		return netip.Addr{}, err
	}
	var refused error
	for _, ip := range addrs {
		if err := g.rules.check(ip, allowed); err != nil {
			refused = fmt.Errorf("%s resolves to %s: %w", host, ip, err)
			continue
		}
		return ip, nil
	}
	if refused == nil {
		refused = fmt.Errorf("%s: no address", host)
	}
	return netip.Addr{}, refused
}

// viaProxy says whether a registry at address (host:port) is reached
// through the proxy: there is one, and the registry is not in noProxy
// (nor localhost or a loopback address, which NO_PROXY never proxies).
func (g *dialGuard) viaProxy(address string) bool {
	if g.proxyURL == nil {
		return false
	}
	u, err := g.proxyFor(&url.URL{Scheme: "https", Host: address})
	return err == nil && u != nil
}

// dialProxy connects to the proxy: the operator named it, so it may be
// anywhere but link-local.
func (g *dialGuard) dialProxy(ctx context.Context, network string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(g.proxyAddr)
	if err != nil {
		return nil, err
	}
	ip, err := g.checked(ctx, host, true)
	if err != nil {
		return nil, fmt.Errorf("registry proxy: %w", err)
	}
	return g.dialer.DialContext(ctx, network, net.JoinHostPort(ip.String(), port))
}

// maxConnectResponse bounds the proxy's answer to a CONNECT.
const maxConnectResponse = 64 << 10

// dialConnect opens a tunnel to target (ip:port) through an HTTP(S) proxy.
func (g *dialGuard) dialConnect(ctx context.Context, target string) (_ net.Conn, err error) {
	conn, err := g.dialProxy(ctx, "tcp")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			conn.Close()
		}
	}()
	// The dial's context bounds the CONNECT too, as net/http's does.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if g.proxyURL.Scheme == "https" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if g.proxyTLS != nil {
			cfg = g.proxyTLS.Clone()
		}
		cfg.ServerName = g.proxyURL.Hostname()
		cfg.NextProtos = nil // CONNECT is HTTP/1.1
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, fmt.Errorf("registry proxy: %w", err)
		}
		conn = tc
	}
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: target}, Host: target, Header: http.Header{}}
	if u := g.proxyURL.User; u != nil {
		pw, _ := u.Password()
		req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(u.Username()+":"+pw)))
	}
	if err := req.Write(conn); err != nil {
		return nil, fmt.Errorf("registry proxy: CONNECT %s: %w", target, err)
	}
	br := bufio.NewReader(io.LimitReader(conn, maxConnectResponse))
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return nil, fmt.Errorf("registry proxy: CONNECT %s: %w", target, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("registry proxy: CONNECT %s: %s", target, resp.Status)
	}
	if br.Buffered() > 0 {
		return nil, fmt.Errorf("registry proxy: CONNECT %s: data after the answer", target)
	}
	if !stop() {
		return nil, ctx.Err()
	}
	return conn, nil
}

// dialSOCKS5 connects to target (ip:port) through a SOCKS5 proxy, which is
// given the address, not a name.
func (g *dialGuard) dialSOCKS5(ctx context.Context, network, target string) (net.Conn, error) {
	var auth *proxy.Auth
	if u := g.proxyURL.User; u != nil {
		pw, _ := u.Password()
		auth = &proxy.Auth{User: u.Username(), Password: pw}
	}
	d, err := proxy.SOCKS5("tcp", g.proxyAddr, auth, proxyDialer{g})
	if err != nil {
		return nil, fmt.Errorf("registry proxy: %w", err)
	}
	conn, err := d.(proxy.ContextDialer).DialContext(ctx, network, target)
	if err != nil {
		return nil, fmt.Errorf("registry proxy: %w", err)
	}
	return conn, nil
}

// proxyDialer dials g's proxy, whatever address it is asked for.
type proxyDialer struct{ g *dialGuard }

func (d proxyDialer) Dial(network, _ string) (net.Conn, error) {
	return d.g.dialProxy(context.Background(), network)
}

func (d proxyDialer) DialContext(ctx context.Context, network, _ string) (net.Conn, error) {
	return d.g.dialProxy(ctx, network)
}

// isAllowed says whether a registry is named in Options.AllowedRegistries,
// by host or by host:port.
func (g *dialGuard) isAllowed(host, address string) bool {
	return g.allowed[strings.ToLower(host)] || g.allowed[strings.ToLower(address)]
}

// portOf is u's port, else its scheme's.
func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	switch u.Scheme {
	case "http":
		return "80"
	case "socks5", "socks5h":
		return "1080"
	}
	return "443"
}

func (g *dialGuard) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip}, nil
	}
	return g.resolver.LookupNetIP(ctx, "ip", host)
}

// check says whether ip may be dialled; allowed: the registry is named in
// Options.AllowedRegistries (or is the proxy). An IPv4-mapped address is
// checked as its IPv4 address; an IPv6 address that carries an IPv4 one
// (NAT64, 6to4, Teredo, IPv4-compatible) is checked as that IPv4 address
// as well, which is where its packets go. An IPv6 address outside the
// global unicast range 2000::/3 and the ranges named here is reserved.
func (r *addressRules) check(ip netip.Addr, allowed bool) error {
	ip = ip.Unmap()
	if ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsMulticast() || ip.IsInterfaceLocalMulticast() {
		return fmt.Errorf("%w: link-local or multicast (the metadata endpoint lives there)", ErrForbiddenAddress)
	}
	v4, form, embedded := r.embeddedIPv4(ip)
	if embedded {
		if err := r.check(v4, allowed); err != nil {
			return fmt.Errorf("%s address carrying %s: %w", form, v4, err)
		}
	}
	switch {
	case allowed:
		return nil
	case ip.IsLoopback(), ip.IsUnspecified():
		return fmt.Errorf("%w: loopback (name the registry in --allowed-registries)", ErrForbiddenAddress)
	case ip.IsPrivate(), r.cgnat.Contains(ip):
		return fmt.Errorf("%w: private (in-cluster registries must be named in --allowed-registries)", ErrForbiddenAddress)
	}
	for _, sp := range r.special {
		if sp.prefix.Contains(ip) && !(sp.except.IsValid() && sp.except.Contains(ip)) {
			return fmt.Errorf("%w: special-purpose, %s %s (name the registry in --allowed-registries)", ErrForbiddenAddress, sp.what, sp.prefix)
		}
	}
	if ip.Is6() && !embedded && !r.globalUnicast.Contains(ip) {
		return fmt.Errorf("%w: special-purpose, reserved (outside the global unicast %s; name the registry in --allowed-registries)", ErrForbiddenAddress, r.globalUnicast)
	}
	return nil
}

// embeddedIPv4 is the IPv4 address an IPv6 address of a transition form
// carries, and the form's name. NAT64 (RFC 6052) is read in its /96 layout,
// the well-known prefix's and the usual one for the local-use prefix.
// IPv4-compatible addresses (deprecated) are ::/96 but for :: and ::1.
func (r *addressRules) embeddedIPv4(ip netip.Addr) (netip.Addr, string, bool) {
	if !ip.Is6() {
		return netip.Addr{}, "", false
	}
	a := ip.As16()
	switch {
	case r.nat64.Contains(ip), r.nat64Local.Contains(ip):
		return netip.AddrFrom4([4]byte(a[12:16])), "NAT64", true
	case r.sixToFour.Contains(ip):
		return netip.AddrFrom4([4]byte(a[2:6])), "6to4", true
	case r.teredo.Contains(ip):
		return netip.AddrFrom4([4]byte{^a[12], ^a[13], ^a[14], ^a[15]}), "Teredo", true
	case r.v4Compat.Contains(ip) && !ip.IsUnspecified() && !ip.IsLoopback():
		return netip.AddrFrom4([4]byte(a[12:16])), "IPv4-compatible", true
	}
	return netip.Addr{}, "", false
}

package imagemeta

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
)

// ErrForbiddenAddress means a registry (or a host it redirects to) resolves
// to an address fnrunner does not dial for an image named by a caller:
// link-local ones (the cloud metadata endpoint) never, even carried in an
// IPv6 address; loopback, private and special-purpose ones only for
// registries named in Options.AllowedRegistries.
var ErrForbiddenAddress = errors.New("registry address not allowed")

// cgnat is the shared address space (RFC 6598), private in practice.
var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// specialPurpose are the ranges of the IANA special-purpose registries
// (RFC 6890) that check does not name otherwise: none is a registry's
// public address. It is never written.
var specialPurpose = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this network"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"}, // 255.255.255.255 included
	{netip.MustParsePrefix("100::/64"), "discard"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
}

// IPv6 ranges whose addresses carry an IPv4 address that packets to them
// end up at.
var (
	nat64      = netip.MustParsePrefix("64:ff9b::/96")
	nat64Local = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFour  = netip.MustParsePrefix("2002::/16")
	teredo     = netip.MustParsePrefix("2001::/32")
	v4Compat   = netip.MustParsePrefix("::/96")
)

// dialGuard dials registries only at the addresses they may have. It checks
// the address it dials, after resolving the name, so a name that resolves
// to 127.0.0.1 counts as loopback and a second lookup cannot change it.
// Through a proxy it checks the destination before the proxy is asked
// (Proxy), and dials the proxy wherever it is, except link-local.
type dialGuard struct {
	allowed   map[string]bool // host:port and host
	proxyURL  *url.URL        // nil: none
	proxyAddr string          // the proxy's host:port, "" for none
	resolver  hostResolver
	dialer    *net.Dialer
}

// hostResolver is the part of *net.Resolver the guard uses.
type hostResolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// newDialGuard returns a guard for registries allowed at private addresses
// and a proxy (nil: none).
func newDialGuard(allowed []string, proxy *url.URL) *dialGuard {
	g := &dialGuard{allowed: map[string]bool{}, proxyURL: proxy, resolver: net.DefaultResolver, dialer: &net.Dialer{}}
	for _, a := range allowed {
		if a = strings.TrimSpace(a); a != "" {
			g.allowed[strings.ToLower(a)] = true
		}
	}
	if proxy != nil {
		g.proxyAddr = strings.ToLower(net.JoinHostPort(proxy.Hostname(), portOf(proxy)))
	}
	return g
}

// DialContext is the registry transport's dialer.
func (g *dialGuard) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	addrs, err := g.lookup(ctx, host)
	if err != nil {
		return nil, err
	}
	// The operator named the proxy: it may be anywhere but link-local.
	allowed := g.isAllowed(host, address) || (g.proxyAddr != "" && strings.ToLower(address) == g.proxyAddr)
	var refused error
	for _, ip := range addrs {
		if err := check(ip, allowed); err != nil {
			refused = fmt.Errorf("%s resolves to %s: %w", host, ip, err)
			continue
		}
		return g.dialer.DialContext(ctx, network, net.JoinHostPort(ip.String(), port))
	}
	if refused == nil {
		refused = fmt.Errorf("%s: no address", host)
	}
	return nil, refused
}

// isAllowed says whether a registry is named in Options.AllowedRegistries,
// by host or by host:port.
func (g *dialGuard) isAllowed(host, address string) bool {
	return g.allowed[strings.ToLower(host)] || g.allowed[strings.ToLower(address)]
}

// Proxy is the transport's Proxy when the guard has one: every request
// goes through it, once its destination passed the checks DialContext makes
// of a registry it dials itself (DialContext then dials only the proxy).
func (g *dialGuard) Proxy(req *http.Request) (*url.URL, error) {
	if err := g.checkDestination(req.Context(), req.URL); err != nil {
		return nil, err
	}
	return g.proxyURL, nil
}

// checkDestination resolves the host of a request sent through the proxy
// and refuses it if any of its addresses is refused: the proxy picks the
// address, not fnrunner, so every one must be one fnrunner would dial.
// The proxy resolves the name again, and a name can resolve to another
// address then (DNS rebinding); only the proxy's own rules can stop that,
// as only they see the address it dials.
func (g *dialGuard) checkDestination(ctx context.Context, u *url.URL) error {
	host := u.Hostname()
	addrs, err := g.lookup(ctx, host)
	if err != nil {
		return err
	}
	if len(addrs) == 0 {
		return fmt.Errorf("%s: no address", host)
	}
	allowed := g.isAllowed(host, net.JoinHostPort(host, portOf(u)))
	for _, ip := range addrs {
		if err := check(ip, allowed); err != nil {
			return fmt.Errorf("%s resolves to %s: %w", host, ip, err)
		}
	}
	return nil
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
// Options.AllowedRegistries (or is the proxy). An IPv6 address that carries
// an IPv4 one (NAT64, 6to4, Teredo, IPv4-compatible) is checked as that
// IPv4 address as well, which is where its packets go.
func check(ip netip.Addr, allowed bool) error {
	ip = ip.Unmap()
	if ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsMulticast() || ip.IsInterfaceLocalMulticast() {
		return fmt.Errorf("%w: link-local or multicast (the metadata endpoint lives there)", ErrForbiddenAddress)
	}
	if v4, form, ok := embeddedIPv4(ip); ok {
		if err := check(v4, allowed); err != nil {
			return fmt.Errorf("%s address carrying %s: %w", form, v4, err)
		}
	}
	switch {
	case allowed:
		return nil
	case ip.IsLoopback(), ip.IsUnspecified():
		return fmt.Errorf("%w: loopback (name the registry in --allowed-registries)", ErrForbiddenAddress)
	case ip.IsPrivate(), cgnat.Contains(ip):
		return fmt.Errorf("%w: private (in-cluster registries must be named in --allowed-registries)", ErrForbiddenAddress)
	}
	for _, sp := range specialPurpose {
		if sp.prefix.Contains(ip) {
			return fmt.Errorf("%w: special-purpose, %s %s (name the registry in --allowed-registries)", ErrForbiddenAddress, sp.what, sp.prefix)
		}
	}
	return nil
}

// embeddedIPv4 is the IPv4 address an IPv6 address of a transition form
// carries, and the form's name. NAT64 (RFC 6052) is read in its /96 layout,
// the well-known prefix's and the usual one for the local-use prefix.
// IPv4-compatible addresses (deprecated) are ::/96 but for :: and ::1.
func embeddedIPv4(ip netip.Addr) (netip.Addr, string, bool) {
	if !ip.Is6() {
		return netip.Addr{}, "", false
	}
	a := ip.As16()
	switch {
	case nat64.Contains(ip), nat64Local.Contains(ip):
		return netip.AddrFrom4([4]byte(a[12:16])), "NAT64", true
	case sixToFour.Contains(ip):
		return netip.AddrFrom4([4]byte(a[2:6])), "6to4", true
	case teredo.Contains(ip):
		return netip.AddrFrom4([4]byte{^a[12], ^a[13], ^a[14], ^a[15]}), "Teredo", true
	case v4Compat.Contains(ip) && !ip.IsUnspecified() && !ip.IsLoopback():
		return netip.AddrFrom4([4]byte(a[12:16])), "IPv4-compatible", true
	}
	return netip.Addr{}, "", false
}

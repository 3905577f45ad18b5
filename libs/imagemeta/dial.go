package imagemeta

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// ErrForbiddenAddress means a registry (or a host it redirects to) resolves
// to an address fnrunner does not dial for an image named by a caller:
// link-local ones (the cloud metadata endpoint) never, loopback and private
// ones only for registries named in Options.AllowedRegistries.
var ErrForbiddenAddress = errors.New("registry address not allowed")

// cgnat is the shared address space (RFC 6598), private in practice.
var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// dialGuard dials registries only at the addresses they may have. It checks
// the address it dials, after resolving the name, so a name that resolves
// to 127.0.0.1 counts as loopback and a second lookup cannot change it.
type dialGuard struct {
	allowed  map[string]bool // host:port and host
	resolver *net.Resolver
	dialer   *net.Dialer
}

func newDialGuard(allowed []string) *dialGuard {
	g := &dialGuard{allowed: map[string]bool{}, resolver: net.DefaultResolver, dialer: &net.Dialer{}}
	for _, a := range allowed {
		if a = strings.TrimSpace(a); a != "" {
			g.allowed[strings.ToLower(a)] = true
		}
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
	allowed := g.allowed[strings.ToLower(host)] || g.allowed[strings.ToLower(address)]
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

func (g *dialGuard) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip}, nil
	}
	return g.resolver.LookupNetIP(ctx, "ip", host)
}

// check says whether ip may be dialled; allowed: the registry is named in
// Options.AllowedRegistries.
func check(ip netip.Addr, allowed bool) error {
	ip = ip.Unmap()
	switch {
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast(), ip.IsMulticast(), ip.IsInterfaceLocalMulticast():
		return fmt.Errorf("%w: link-local or multicast (the metadata endpoint lives there)", ErrForbiddenAddress)
	case allowed:
		return nil
	case ip.IsLoopback(), ip.IsUnspecified():
		return fmt.Errorf("%w: loopback (name the registry in --allowed-registries)", ErrForbiddenAddress)
	case ip.IsPrivate(), cgnat.Contains(ip):
		return fmt.Errorf("%w: private (in-cluster registries must be named in --allowed-registries)", ErrForbiddenAddress)
	}
	return nil
}

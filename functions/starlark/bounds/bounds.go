// Package bounds is what the binary-runner tells fnrunner's starlark binary
// about the limits of one run: how many steps a script may take, how deep
// it may call, and which hosts its http module may reach. The runner turns
// its flags into Args; the binary reads them back with Register.
package bounds

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/idna"
)

// Defaults for the binary's flags, and the binary-runner's.
const (
	// DefaultMaxSteps is about nine seconds of a busy loop on one core of
	// the bench machine (110 million steps a second; the interpreter
	// counts one step per instruction).
	DefaultMaxSteps = 1_000_000_000
	// DefaultMaxDepth is far beyond what a KRM script needs, and well
	// within the Go stack: unbounded recursion otherwise ends the process
	// with a fatal stack overflow rather than an answer.
	DefaultMaxDepth = 10_000
)

// Bounds limit one script run.
type Bounds struct {
	// MaxSteps is the most interpreter steps a script may take; 0 is no
	// limit.
	MaxSteps uint64
	// MaxDepth is the deepest call stack a script may build; 0 is no limit.
	MaxDepth int
	// AllowedHosts are the hosts the http module may reach: "name" (ports
	// 80 and 443) or "name:port". None: no network at all.
	AllowedHosts []string
}

// Register adds the binary's flags, with their defaults, to fs.
func (b *Bounds) Register(fs *flag.FlagSet) {
	b.MaxSteps, b.MaxDepth = DefaultMaxSteps, DefaultMaxDepth
	fs.Uint64Var(&b.MaxSteps, "max-steps", DefaultMaxSteps, "Most starlark interpreter steps a script may take (0: no limit).")
	fs.IntVar(&b.MaxDepth, "max-call-depth", DefaultMaxDepth, "Deepest call stack a script may build (0: no limit).")
	fs.Func("allowed-hosts", `Comma-separated hosts the script's http module may reach: "name" (ports 80 and 443) or "name:port" (default: none, no network).`, func(v string) error {
		hosts, err := ParseHosts(v)
		b.AllowedHosts = append(b.AllowedHosts, hosts...)
		return err
	})
}

// ParseHosts splits a comma-separated host list and checks each entry.
func ParseHosts(v string) ([]string, error) {
	var hosts []string
	for _, h := range strings.Split(v, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if _, _, err := split(h); err != nil {
			return nil, err
		}
		hosts = append(hosts, h)
	}
	return hosts, nil
}

// Args are the command-line arguments that give the binary b.
func (b Bounds) Args() []string {
	args := []string{
		"--max-steps=" + strconv.FormatUint(b.MaxSteps, 10),
		"--max-call-depth=" + strconv.Itoa(b.MaxDepth),
	}
	if len(b.AllowedHosts) > 0 {
		args = append(args, "--allowed-hosts="+strings.Join(b.AllowedHosts, ","))
	}
	return args
}

// Ports are the TCP ports the allowed hosts are reached on, for a sandbox
// that filters connections by port.
func (b Bounds) Ports() []uint16 {
	var ports []uint16
	for _, h := range b.AllowedHosts {
		_, p, err := split(h)
		if err != nil {
			continue
		}
		for _, port := range p {
			if !slices.Contains(ports, port) {
				ports = append(ports, port)
			}
		}
	}
	slices.Sort(ports)
	return ports
}

// Permits says whether address ("host:port", as a dialer gets it) is one of
// the allowed hosts. Names are compared as names: an allowed name is not
// resolved, and an address it resolves to is not allowed by that.
func (b Bounds) Permits(address string) bool {
	host, portText, err := net.SplitHostPort(address)
	if err != nil {
		return false
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return false
	}
	host, err = canonical(host)
	if err != nil {
		return false
	}
	for _, h := range b.AllowedHosts {
		name, ports, err := split(h)
		if err == nil && name == host && slices.Contains(ports, uint16(port)) {
			return true
		}
	}
	return false
}

// split reads one allowed-hosts entry: "name", "name:port", an IP address,
// "[v6]" or "[v6]:port".
func split(entry string) (string, []uint16, error) {
	bad := fmt.Errorf("allowed host %q: want name, name:port, [IPv6] or [IPv6]:port", entry)
	host, ports := entry, []uint16{80, 443}
	if h, port, err := net.SplitHostPort(entry); err == nil {
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil || p == 0 {
			return "", nil, bad
		}
		host, ports = h, []uint16{uint16(p)}
	} else if h, ok := strings.CutPrefix(entry, "["); ok && strings.HasSuffix(h, "]") {
		host = strings.TrimSuffix(h, "]")
		if net.ParseIP(host) == nil {
			return "", nil, bad
		}
	}
	name, err := canonical(host)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %w", bad, err)
	}
	return name, ports, nil
}

// canonical is how a host is compared: an IP address in its usual form, a
// name in lower case ASCII (IDNA, as the http client dials it) without a
// trailing dot.
func canonical(host string) (string, error) {
	if ip := net.ParseIP(host); ip != nil {
		return ip.String(), nil
	}
	name, err := idna.Lookup.ToASCII(strings.TrimSuffix(host, "."))
	if err != nil {
		return "", err
	}
	if name == "" {
		return "", errors.New("empty name")
	}
	return name, nil
}

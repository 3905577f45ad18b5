package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// clusterDNS is the node's cluster DNS: CoreDNS does not build from the Go
// module proxy here (see README), so this answers, from the apiserver, the
// records fnrunner's services use, as CoreDNS's kubernetes plugin would:
//
//   - <svc>.<ns>.svc.<domain> A: a ClusterIP Service's address, a headless
//     Service's endpoints;
//   - <host>.<svc>.<ns>.svc.<domain> A: a headless Service's endpoint with
//     that hostname (a StatefulSet's pod);
//   - _<port>._<proto>.<svc>.<ns>.svc.<domain> SRV: per endpoint of a
//     headless Service (target its hostname), else the Service's name.
//
// Everything else is NXDOMAIN: nothing is forwarded outside the node. It
// listens on the node's address, in the node's network namespace.
type clusterDNS struct {
	c      client.Client
	domain string
	conn   net.PacketConn
}

// listenInNetns opens a UDP socket on addr in the network namespace at
// nsPath. The socket stays in that namespace; the thread that made it is
// put back, or (if that fails) ended with its goroutine.
func listenInNetns(nsPath, addr string) (net.PacketConn, error) {
	type result struct {
		conn net.PacketConn
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer orig.Close()
		target, err := os.Open(nsPath)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("entering %s: %w", nsPath, err)}
			return
		}
		conn, lerr := net.ListenPacket("udp", addr)
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			// Leave the thread locked: it ends with this goroutine.
			ch <- result{conn, lerr}
			return
		}
		runtime.UnlockOSThread()
		ch <- result{conn, lerr}
	}()
	r := <-ch
	return r.conn, r.err
}

func (d *clusterDNS) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := d.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		if resp := d.answer(buf[:n]); resp != nil {
			_, _ = d.conn.WriteTo(resp, from)
		}
	}
}

func (d *clusterDNS) answer(query []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rcode := dnsmessage.RCodeSuccess
	answers, err := d.lookup(ctx, q)
	switch {
	case errors.Is(err, errNoName):
		rcode = dnsmessage.RCodeNameError
	case err != nil:
		rcode = dnsmessage.RCodeServerFailure
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RCode: rcode})
	b.EnableCompression()
	if b.StartQuestions() != nil || b.Question(q) != nil || b.StartAnswers() != nil {
		return nil
	}
	for _, a := range answers {
		if a(&b) != nil {
			return nil
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

var errNoName = errors.New("no such name")

type record func(*dnsmessage.Builder) error

func (d *clusterDNS) lookup(ctx context.Context, q dnsmessage.Question) ([]record, error) {
	name := strings.ToLower(strings.TrimSuffix(q.Name.String(), "."))
	suffix := ".svc." + d.domain
	if !strings.HasSuffix(name, suffix) {
		return nil, errNoName
	}
	labels := strings.Split(strings.TrimSuffix(name, suffix), ".")
	if len(labels) < 2 {
		return nil, errNoName
	}
	ns, svcName := labels[len(labels)-1], labels[len(labels)-2]
	prefix := labels[:len(labels)-2]
	var svc corev1.Service
	if err := d.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: svcName}, &svc); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, errNoName
		}
		return nil, err
	}
	var slices discoveryv1.EndpointSliceList
	if err := d.c.List(ctx, &slices, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: svcName}); err != nil {
		return nil, err
	}
	headless := svc.Spec.ClusterIP == corev1.ClusterIPNone
	base := svcName + "." + ns + suffix + "."
	hdr := func(name string, typ dnsmessage.Type) dnsmessage.ResourceHeader {
		return dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET, TTL: 5}
	}
	a := func(name, ip string) record {
		return func(b *dnsmessage.Builder) error {
			addr, err := netip.ParseAddr(ip)
			if err != nil || !addr.Is4() {
				return nil
			}
			return b.AResource(hdr(name, dnsmessage.TypeA), dnsmessage.AResource{A: addr.As4()})
		}
	}
	type endpoint struct {
		host, ip string
		ports    map[string]int32
	}
	var eps []endpoint
	for _, s := range slices.Items {
		ports := map[string]int32{}
		for _, p := range s.Ports {
			if p.Name != nil && p.Port != nil {
				ports[*p.Name] = *p.Port
			}
		}
		for _, e := range s.Endpoints {
			ready := e.Conditions.Ready == nil || *e.Conditions.Ready || svc.Spec.PublishNotReadyAddresses
			if !ready || len(e.Addresses) == 0 {
				continue
			}
			host := strings.ReplaceAll(e.Addresses[0], ".", "-")
			if e.Hostname != nil && *e.Hostname != "" {
				host = *e.Hostname
			}
			eps = append(eps, endpoint{host, e.Addresses[0], ports})
		}
	}
	var out []record
	switch {
	case len(prefix) == 0: // the Service
		if q.Type != dnsmessage.TypeA {
			return nil, nil
		}
		if !headless {
			return []record{a(base, svc.Spec.ClusterIP)}, nil
		}
		for _, e := range eps {
			out = append(out, a(base, e.ip))
		}
		return out, nil
	case len(prefix) == 1: // an endpoint's hostname
		for _, e := range eps {
			if e.host == prefix[0] && q.Type == dnsmessage.TypeA {
				out = append(out, a(prefix[0]+"."+base, e.ip))
			}
		}
		if len(out) == 0 && q.Type == dnsmessage.TypeA {
			return nil, errNoName
		}
		return out, nil
	case len(prefix) == 2 && strings.HasPrefix(prefix[0], "_") && strings.HasPrefix(prefix[1], "_"): // SRV
		if q.Type != dnsmessage.TypeSRV {
			return nil, nil
		}
		portName, proto := prefix[0][1:], strings.ToUpper(prefix[1][1:])
		for _, p := range svc.Spec.Ports {
			if p.Name != portName || string(p.Protocol) != proto {
				continue
			}
			srv := func(target string, port uint16) record {
				return func(b *dnsmessage.Builder) error {
					return b.SRVResource(hdr(prefix[0]+"."+prefix[1]+"."+base, dnsmessage.TypeSRV), dnsmessage.SRVResource{Priority: 0, Weight: 10, Port: port, Target: dnsmessage.MustNewName(target)})
				}
			}
			if !headless {
				out = append(out, srv(base, uint16(p.Port)))
				continue
			}
			for _, e := range eps {
				if port, ok := e.ports[p.Name]; ok {
					out = append(out, srv(e.host+"."+base, uint16(port)))
				}
			}
		}
		return out, nil
	}
	return nil, errNoName
}

package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/imagematch"
)

// LookupFunc lists the replicas' addresses (host:port), e.g. from a DNS SRV
// record.
type LookupFunc func(ctx context.Context) ([]string, error)

// DialFunc connects to the replica at address; close ends the connection.
type DialFunc func(address string) (r Replica, close func(), err error)

// SRVLookup lists the targets of the DNS SRV record name ("_grpc._tcp.
// fnrunner-pod-manager": a headless Service's named port). For a
// StatefulSet behind a headless Service the targets are the replicas' own
// names (fnrunner-pod-manager-0.fnrunner-pod-manager...), one per ordinal.
func SRVLookup(name string) LookupFunc {
	return func(ctx context.Context) ([]string, error) {
		_, srvs, err := net.DefaultResolver.LookupSRV(ctx, "", "", name)
		if err != nil {
			return nil, fmt.Errorf("looking up %s: %w", name, err)
		}
		var out []string
		for _, s := range srvs {
			out = append(out, net.JoinHostPort(strings.TrimSuffix(s.Target, "."), strconv.Itoa(int(s.Port))))
		}
		return out, nil
	}
}

// DiscoveredReplicas are pod-manager replicas found by lookup, again every
// interval (Run): scaling the StatefulSet needs no change to the gateway.
// Calls use the replicas of the last lookup that succeeded, spread as
// Replicas spreads them.
type DiscoveredReplicas struct {
	lookup LookupFunc
	dial   DialFunc
	log    *slog.Logger

	mu       sync.RWMutex
	replicas Replicas
	closers  map[string]func()
	// closed: Run ended; a lookup still going finds nothing to fill.
	closed bool

	// lookingUp, while a lookup for calls that found no replica runs,
	// is closed when it ends: the calls meanwhile share it. missed is
	// when the last such lookup ended finding none: within emptyInterval
	// of it calls fail at once rather than look again (a StatefulSet
	// scaled to zero must not get a DNS query per call).
	lookingUpMu sync.Mutex
	lookingUp   chan struct{}
	missed      time.Time
	// waiting counts the calls waiting for such a lookup (for tests);
	// now is the clock (time.Now; a test's own).
	waiting atomic.Int32
	now     func() time.Time

	// found is how many replicas calls are spread over (found by the last
	// lookup that succeeded, and dialled);
	// failures counts the lookups that failed (the last replicas stay).
	found    prometheus.Gauge
	failures prometheus.Counter
}

var (
	_ Executor      = (*DiscoveredReplicas)(nil)
	_ HealthChecker = (*DiscoveredReplicas)(nil)
)

// NewDiscoveredReplicas returns replicas found by lookup and reached by dial;
// there are none until Refresh or Run.
func NewDiscoveredReplicas(log *slog.Logger, lookup LookupFunc, dial DialFunc) *DiscoveredReplicas {
	return &DiscoveredReplicas{lookup: lookup, dial: dial, log: log, closers: map[string]func(){}, now: time.Now,
		found: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fnrunner_gateway_pod_manager_replicas",
			Help: "Pod-manager replicas the gateway spreads calls over: those the last --pod-manager-srv lookup that succeeded found, and that it could dial.",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fnrunner_gateway_pod_manager_lookup_failures_total",
			Help: "--pod-manager-srv lookups that failed or found no replica (the replicas found before stay).",
		}),
	}
}

// Collectors export fnrunner_gateway_pod_manager_replicas and
// fnrunner_gateway_pod_manager_lookup_failures_total.
func (d *DiscoveredReplicas) Collectors() []prometheus.Collector {
	return []prometheus.Collector{d.found, d.failures}
}

// Run refreshes the replicas every interval until ctx ends, then closes
// their connections. While none is found (a new install, the StatefulSet
// scaled from zero) it looks again every emptyInterval, if that is sooner.
func (d *DiscoveredReplicas) Run(ctx context.Context, interval time.Duration) {
	defer d.close()
	for {
		if err := d.Refresh(ctx); err != nil && ctx.Err() == nil {
			d.log.Warn("pod-manager replicas not refreshed: the last ones found stay", "error", err)
		}
		wait := interval
		if len(d.current()) == 0 {
			wait = min(interval, emptyInterval)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// emptyInterval is how often Run looks again while no replica is found.
const emptyInterval = time.Second

// lookupTimeout bounds a lookup that calls wait for.
const lookupTimeout = 5 * time.Second

// lookUpForCalls refreshes the replicas for calls that found none, one
// lookup for the calls that come meanwhile, and waits for it or ctx; within
// emptyInterval of a lookup that found none it returns at once.
func (d *DiscoveredReplicas) lookUpForCalls(ctx context.Context) {
	d.lookingUpMu.Lock()
	if len(d.current()) > 0 {
		// A lookup ended since the caller looked: it found some.
		d.lookingUpMu.Unlock()
		return
	}
	done := d.lookingUp
	if done == nil {
		if d.now().Sub(d.missed) < emptyInterval {
			d.lookingUpMu.Unlock()
			return
		}
		done = make(chan struct{})
		d.lookingUp = done
		go func() {
			// Not a call's context: the lookup serves every call
			// waiting, whichever ends first.
			lctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
			defer cancel()
			err := d.Refresh(lctx)
			if err != nil && !errors.Is(err, errClosed) {
				d.log.Warn("pod-manager replicas looked up for a call: none found", "error", err)
			}
			d.lookingUpMu.Lock()
			d.lookingUp = nil
			if len(d.current()) == 0 {
				d.missed = d.now()
			}
			d.lookingUpMu.Unlock()
			close(done)
		}()
	}
	d.lookingUpMu.Unlock()
	d.waiting.Add(1)
	defer d.waiting.Add(-1)
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// Refresh looks the replicas up once and connects to new ones; replicas no
// longer found are dropped and their connections closed.
func (d *DiscoveredReplicas) Refresh(ctx context.Context) error {
	addrs, err := d.lookup(ctx)
	if err != nil {
		d.failures.Inc()
		return err
	}
	slices.Sort(addrs)
	addrs = slices.Compact(addrs)
	if len(addrs) == 0 {
		d.failures.Inc()
		return fmt.Errorf("no pod-manager replica found")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errClosed
	}
	byAddr := map[string]Replica{}
	var have []string
	for _, r := range d.replicas {
		byAddr[r.Address] = r
		have = append(have, r.Address)
	}
	if slices.Equal(have, addrs) {
		d.found.Set(float64(len(d.replicas)))
		return nil
	}
	next := make(Replicas, 0, len(addrs))
	var dialErr error
	for _, a := range addrs {
		if r, ok := byAddr[a]; ok {
			next = append(next, r)
			continue
		}
		r, closer, err := d.dial(a)
		if err != nil {
			dialErr = err
			continue
		}
		d.closers[a] = closer
		next = append(next, r)
	}
	for _, r := range d.replicas {
		if !slices.Contains(addrs, r.Address) {
			if c := d.closers[r.Address]; c != nil {
				c()
			}
			delete(d.closers, r.Address)
		}
	}
	d.replicas = next
	d.found.Set(float64(len(next)))
	d.log.Info("pod-manager replicas", "addresses", addrs)
	return dialErr
}

func (d *DiscoveredReplicas) current() Replicas {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.replicas
}

func (d *DiscoveredReplicas) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.closers {
		c()
	}
	d.closers, d.replicas, d.closed = map[string]func(){}, nil, true
}

// errClosed is Refresh's error once Run has ended.
var errClosed = errors.New("pod-manager discovery stopped")

// Evaluate implements Executor over the replicas found last. With none
// found yet, the call looks them up first (once, shared with the calls
// meanwhile) rather than fail while a replica may be there: Run looks
// only every interval.
func (d *DiscoveredReplicas) Evaluate(ctx context.Context, ref imagematch.Reference, req *evalwire.Request) (*evalwire.Response, error) {
	if len(d.current()) == 0 {
		d.lookUpForCalls(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	return d.current().Evaluate(ctx, ref, req)
}

// Check implements HealthChecker over the replicas found last.
func (d *DiscoveredReplicas) Check(ctx context.Context, in *healthpb.HealthCheckRequest, opts ...grpc.CallOption) (*healthpb.HealthCheckResponse, error) {
	return d.current().Check(ctx, in, opts...)
}

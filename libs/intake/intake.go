// Package intake bounds what a gRPC server holds for calls before the
// service's own admission sees them, and after it has answered them.
//
// grpc-go reads a stream's headers and buffers its request up to the stream's
// flow-control window before any handler runs, and once a handler asks for the
// request it opens the window to the message's whole length. An answer sits in
// the transport until the client opens its window for it. None of that is
// weighed by admission (libs/admission), which sees a call only once its
// request is read and forgets it when the handler returns. A Gate bounds each
// stage:
//
//   - connections: in all, and per peer address; when full, the connection
//     idle longest (or, with none idle, stalled longest) is closed to make
//     room, so a client reconnecting always gets in;
//   - streams whose request is not being read yet, each holding at most its
//     window and header list: refused at the tap, before any read, once the
//     limit is spent, unless a peer holding more of them than the new
//     stream's own peer can give its oldest one up (each peer's fair share,
//     however many connections it opens);
//   - requests being read, each up to the largest message: at most MaxReading
//     at once, half of them for one peer, granted in turn across peers;
//   - a request's arrival: a stream whose request has not fully arrived
//     within ReceiveTimeout, or whose connection reads less than
//     MinReceiveRate while it reads, is ended (DeadlineExceeded);
//   - an answer's departure: a connection with more than MaxUnsentBytes of
//     answers waiting to leave has no more requests read until they leave,
//     and one whose answers wait longer than SendTimeout for a write (a
//     client that keeps its receive window shut) is closed.
//
// A Gate is wired into a server by three things: Listener wraps the server's
// listener, Tap is its grpc.InTapHandle, and Wrap wraps every service it
// registers, so that a method's request is read under the gate.
package intake

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// Limits are a Gate's bounds; a zero field is unbounded.
type Limits struct {
	// MaxConnections bounds the connections open at once.
	MaxConnections int
	// MaxConnectionsPerPeer bounds the connections open from one peer
	// address (IP).
	MaxConnectionsPerPeer int
	// MaxUnreadStreams bounds the streams whose request is not being read
	// yet (each holds up to its flow-control window and header list).
	MaxUnreadStreams int
	// MaxReading bounds the requests being read at once (each holds up to
	// the largest message); one peer gets at most half of them.
	MaxReading int
	// ReceiveTimeout bounds the time from a stream's start until its
	// request has been read.
	ReceiveTimeout time.Duration
	// MinReceiveRate, in bytes a second, is the least a connection must
	// read, over each ReceiveRateWindow, while one of its requests is
	// being read: a stream reading on a connection slower than that is
	// ended, so that a trickling request gives its reading slot up long
	// before ReceiveTimeout.
	MinReceiveRate int64
	// ReceiveRateWindow is how long MinReceiveRate is measured over;
	// zero is DefaultReceiveRateWindow.
	ReceiveRateWindow time.Duration
	// SendTimeout bounds the time from a handler's return until its answer
	// has left; past it the stream's connection is closed.
	SendTimeout time.Duration
	// MaxUnsentBytes bounds the answers (Sent) one connection may have
	// waiting to leave: past it, the connection's next requests are not
	// read until its client takes some, so that a client that takes no
	// answers cannot fill the service's admission with them.
	MaxUnsentBytes int64
}

// Errors a stream's context is cancelled with (context.Cause), and what
// Status maps to a gRPC status.
var (
	// ErrReceiveTimeout: the request did not arrive within ReceiveTimeout.
	ErrReceiveTimeout = errors.New("request not received in full in time")
	// ErrReceiveTooSlow: the request arrived slower than MinReceiveRate.
	ErrReceiveTooSlow = errors.New("request arriving too slowly")
	// ErrPreempted: the stream gave its place to one of a peer holding
	// fewer unread streams.
	ErrPreempted = errors.New("stream preempted by another connection's")
	// ErrUnreadStreams: the unread-streams limit is spent.
	ErrUnreadStreams = errors.New("too many requests being received")
	// ErrSendTimeout: the answer did not leave within SendTimeout, and the
	// connection was closed.
	ErrSendTimeout = errors.New("answer not taken by the client in time")
)

// Refusal reasons, the values of the metric's reason label.
const (
	reasonPeerConnections = "connections_per_peer"
	reasonEvicted         = "connection_evicted"
	reasonUnreadStreams   = "unread_streams"
	reasonPreempted       = "preempted"
	reasonReceiveTimeout  = "receive_timeout"
	reasonReceiveTooSlow  = "receive_too_slow"
	reasonSendTimeout     = "send_timeout"
)

// DefaultReceiveRateWindow is what MinReceiveRate is measured over when
// ReceiveRateWindow is zero.
const DefaultReceiveRateWindow = 5 * time.Second

// Gate bounds one server's connections and streams, as Limits say.
type Gate struct {
	limits Limits
	log    *slog.Logger
	warn   *rateLog

	mu      sync.Mutex
	owned   bool                  // the gate's Listener accepts the connections
	conns   map[string]*conn      // by connKey
	peers   map[string]*peerShare // by peer address
	unread  int
	reading int
	turns   []*peerShare // peers with streams waiting to read, in turn order

	refused   *prometheus.CounterVec
	gauges    []prometheus.Collector
	readingWg atomic.Int64 // streams waiting for a reading slot
}

// New returns a gate with limits; server names it in metrics ("grpc",
// "health", "metrics") and log lines.
func New(log *slog.Logger, server string, limits Limits) *Gate {
	g := &Gate{
		limits: limits,
		log:    log.With("server", server),
		warn:   newRateLog(time.Second),
		conns:  map[string]*conn{},
		peers:  map[string]*peerShare{},
	}
	labels := prometheus.Labels{"server": server}
	g.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "fnrunner_intake_refused_total",
		Help:        "Connections and streams the transport's bounds refused, closed or ended, by reason: connections_per_peer, connection_evicted, unread_streams, preempted, receive_timeout, receive_too_slow, send_timeout.",
		ConstLabels: labels,
	}, []string{"reason"})
	for _, r := range []string{reasonPeerConnections, reasonEvicted, reasonUnreadStreams, reasonPreempted, reasonReceiveTimeout, reasonReceiveTooSlow, reasonSendTimeout} {
		g.refused.WithLabelValues(r)
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, f)
	}
	g.gauges = []prometheus.Collector{
		gauge("fnrunner_intake_connections", "Client connections open.", func() float64 { return float64(g.Connections()) }),
		gauge("fnrunner_intake_peers", "Client IPs (IPv6: /64s) with a connection or a call.", func() float64 { return float64(g.Peers()) }),
		gauge("fnrunner_intake_unread_streams", "Streams whose request is not being read yet.", func() float64 { return float64(g.Unread()) }),
		gauge("fnrunner_intake_reading_streams", "Streams whose request is being read.", func() float64 { return float64(g.Reading()) }),
		gauge("fnrunner_intake_unsent_bytes", "Answers waiting to leave for their clients, in bytes.", func() float64 { return float64(g.Unsent()) }),
		gauge("fnrunner_intake_reading_waiting_streams", "Streams waiting for their turn to read their request.", func() float64 { return float64(g.readingWg.Load()) }),
	}
	return g
}

// Collectors are the gate's metrics.
func (g *Gate) Collectors() []prometheus.Collector {
	return append([]prometheus.Collector{g.refused}, g.gauges...)
}

// Connections is the number of connections open.
func (g *Gate) Connections() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.conns)
}

// Peers is the number of client IPs (IPv6: /64s) the gate holds a share
// for: each with a connection open or a stream not ended.
func (g *Gate) Peers() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.peers)
}

// Unread is the number of streams whose request is not being read yet.
func (g *Gate) Unread() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.unread
}

// Unsent is the bytes of answers waiting to leave, on all connections.
func (g *Gate) Unsent() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	var n int64
	for _, c := range g.conns {
		n += c.out.unsent()
	}
	return n
}

// Reading is the number of streams whose request is being read.
func (g *Gate) Reading() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reading
}

// refuse counts and logs (at a bounded rate) one refusal.
func (g *Gate) refuse(reason string, attrs ...any) {
	g.refused.WithLabelValues(reason).Inc()
	if n, ok := g.warn.allow(reason); ok {
		g.log.Warn("transport bound reached", append([]any{"reason", reason, "suppressed", n}, attrs...)...)
	}
}

// Tap is the server's grpc.InTapHandle. It runs for every new stream before
// grpc-go reads anything of it but its headers: it refuses the stream when
// the unread-streams limit is spent and no peer holding more unread streams
// can give one up, and otherwise returns the stream's context, which
// carries the stream's ticket and ends it when ReceiveTimeout passes before
// its request is read.
func (g *Gate) Tap(ctx context.Context, _ *tap.Info) (context.Context, error) {
	c := g.connOf(ctx)
	if c == nil {
		return nil, status.Error(codes.Unavailable, "the connection was closed")
	}
	t := &ticket{g: g, c: c}
	ctx, t.cancel = context.WithCancelCause(ctx)
	var victim *ticket
	g.mu.Lock()
	if max := g.limits.MaxUnreadStreams; max > 0 && g.unread >= max {
		victim = g.preemptable(c.peer)
		if victim == nil {
			g.forgetLocked(c)
			g.mu.Unlock()
			t.cancel(ErrUnreadStreams)
			g.refuse(reasonUnreadStreams, "peer", c.peer.addr, "limit", max)
			return nil, Status(ctx, ErrUnreadStreams)
		}
		victim.releaseLocked()
		victim.cause = ErrPreempted
	}
	c.peer.unread = append(c.peer.unread, t)
	c.streams++
	c.peer.streams++
	g.unread++
	g.mu.Unlock()
	if victim != nil {
		g.refuse(reasonPreempted, "peer", victim.c.peer.addr, "for", c.peer.addr)
		victim.cancel(ErrPreempted)
	}

	if d := g.limits.ReceiveTimeout; d > 0 {
		t.receive = time.AfterFunc(d, func() {
			if t.expire() {
				g.refuse(reasonReceiveTimeout, "peer", c.peer.addr, "after", d.String())
			}
		})
	}
	context.AfterFunc(ctx, t.end)
	return context.WithValue(ctx, ticketKey{}, t), nil
}

// preemptable is the oldest unread stream of the peer holding the most, if
// it holds at least two more than p: giving it up to p moves the peers
// toward equal shares. g.mu is held.
func (g *Gate) preemptable(p *peerShare) *ticket {
	var most *peerShare
	for _, o := range g.peers {
		if len(o.unread) > len(p.unread)+1 && (most == nil || len(o.unread) > len(most.unread)) {
			most = o
		}
	}
	if most == nil {
		return nil
	}
	return most.unread[0]
}

// connOf finds the connection a stream's context belongs to: nil for one
// the gate's listener closed. Without the gate's listener, a connection is
// tracked from its first stream on, without the means to close it.
func (g *Gate) connOf(ctx context.Context) *conn {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return g.untracked("")
	}
	k := connKey(p.Addr, p.LocalAddr)
	g.mu.Lock()
	c, owned := g.conns[k], g.owned
	g.mu.Unlock()
	if c != nil || owned {
		// With the gate's listener, a connection it does not know is one
		// it has closed, whose buffered streams grpc-go still taps.
		return c
	}
	return g.untracked(k)
}

// untracked is the record of a connection the listener did not accept (or
// of a stream without peer): it is counted but never closed.
func (g *Gate) untracked(key string) *conn {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := "untracked " + key
	if c := g.conns[k]; c != nil {
		return c
	}
	c := &conn{g: g, key: k, peer: g.peerLocked("unknown"), untracked: true}
	c.lastRead.Store(time.Now().UnixNano())
	g.conns[k] = c
	return c
}

type ticketKey struct{}

func ticketOf(ctx context.Context) *ticket {
	t, _ := ctx.Value(ticketKey{}).(*ticket)
	return t
}

// Stream states.
const (
	stateUnread  = iota // tapped, its request not asked for
	stateWaiting        // waiting for a reading slot
	stateReading        // reading its request
	stateRead           // its request read (or failed)
	stateEnded          // released: the stream ended, was preempted or timed out
)

// ticket is one stream's place in the gate.
type ticket struct {
	g       *Gate
	c       *conn
	cancel  context.CancelCauseFunc
	receive *time.Timer // ReceiveTimeout, until the request is read
	rate    *time.Timer // MinReceiveRate's next measure, while reading

	// Under g.mu:
	state   int
	cause   error         // why the gate ended the stream, before its context says so
	marks   []*mark       // its answers counted by Sent
	granted chan struct{} // closed when a waiting stream may read
	seen    int64         // the connection's bytes read at the last measure
	stream  statusWriter  // the stream grpc-go reads, once its handler asks
}

// statusWriter is grpc-go's server stream (grpc.ServerTransportStream), as
// far as the gate ends one: its status written before its context is
// cancelled reaches the client, where a read cancelled under the handler
// would answer "context canceled" (grpc-go writes the read's error).
type statusWriter interface {
	WriteStatus(*status.Status) error
}

// releaseLocked gives up what t holds: its unread place or reading slot;
// a waiting stream leaves the queue. It reports whether t held a reading
// slot. g.mu is held.
func (t *ticket) releaseLocked() (heldSlot bool) {
	g, p := t.g, t.c.peer
	switch t.state {
	case stateUnread, stateWaiting:
		p.unread = remove(p.unread, t)
		g.unread--
		if t.state == stateWaiting {
			p.waiting = remove(p.waiting, t)
			g.readingWg.Add(-1)
		}
	case stateReading:
		g.reading--
		p.reading--
		t.c.reading--
		heldSlot = true
		if t.rate != nil {
			t.rate.Stop()
		}
	}
	if t.state < stateRead {
		t.state = stateRead
	}
	return heldSlot
}

// expire ends t for ErrReceiveTimeout, if its request has not been read:
// it reports whether t was still unread, waiting or reading.
func (t *ticket) expire() bool {
	g := t.g
	g.mu.Lock()
	if t.state >= stateRead {
		g.mu.Unlock()
		return false
	}
	t.endLocked(ErrReceiveTimeout)
	return true
}

// endLocked gives up what t holds, ends its stream for cause and unlocks
// g.mu, which is held.
func (t *ticket) endLocked(cause error) {
	var w statusWriter
	if t.releaseLocked() {
		// Reading: grpc-go would answer the cancelled read itself.
		w = t.stream
		t.g.grantLocked()
	}
	t.cause = cause
	t.g.mu.Unlock()
	if w != nil {
		_ = w.WriteStatus(status.Convert(causeStatus(cause)))
	}
	t.cancel(cause)
}

// end runs when the stream's context is done: it gives up whatever t still
// holds.
func (t *ticket) end() {
	g, c := t.g, t.c
	g.mu.Lock()
	if t.state == stateEnded {
		g.mu.Unlock()
		return
	}
	if t.releaseLocked() {
		g.grantLocked()
	}
	t.state = stateEnded
	c.streams--
	c.peer.streams--
	g.forgetLocked(c)
	// grpc-go closes a connection before it ends its streams: the peer's
	// share goes with its last stream.
	g.forgetPeerLocked(c.peer)
	g.mu.Unlock()
	if t.receive != nil {
		t.receive.Stop()
	}
}

func remove[T comparable](s []T, v T) []T {
	for i, x := range s {
		if x == v {
			return append(s[:i], s[i+1:]...)
		}
	}
	return s
}

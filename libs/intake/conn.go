package intake

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Listener wraps a server's listener: every connection it accepts is counted
// against MaxConnections and MaxConnectionsPerPeer, and its reads and writes
// are watched, so that the gate can close it when it stalls.
//
// A connection over the peer's limit is closed at once, unless one of the
// peer's own is idle (no stream open), which is closed instead. A connection
// over the global limit closes the one idle longest, or, with none idle, the
// one whose reads stalled longest: a client reconnecting always gets in.
func (g *Gate) Listener(l net.Listener) net.Listener {
	g.mu.Lock()
	g.owned = true
	g.mu.Unlock()
	return &listener{Listener: l, g: g}
}

type listener struct {
	net.Listener
	g *Gate
}

// Accept returns the next admitted connection; refused ones are closed
// here and never reach the server (an Accept error would stop it).
func (l *listener) Accept() (net.Conn, error) {
	for {
		raw, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if c := l.g.admit(raw); c != nil {
			return c, nil
		}
	}
}

// connKey identifies a connection by its two ends: what the listener saw,
// and what grpc-go puts in a stream's peer.
func connKey(remote, local net.Addr) string {
	k := ""
	if remote != nil {
		k = remote.String()
	}
	if local != nil {
		k += "|" + local.String()
	}
	return k
}

// peerOf is a connection's peer for the per-peer limits and shares: its
// IPv4 address, or its IPv6 /64 (one host's whole subnet: it may use any
// address of it).
func peerOf(a net.Addr) string {
	if a == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || ip.Unmap().Is4() {
		return host
	}
	p, err := ip.Prefix(64)
	if err != nil {
		return host
	}
	return p.String()
}

// admit counts a new connection in, closing another to make room or
// refusing it (nil) as Listener says.
func (g *Gate) admit(raw net.Conn) *conn {
	now := time.Now()
	c := &conn{Conn: raw, g: g, key: connKey(raw.RemoteAddr(), raw.LocalAddr())}
	c.lastRead.Store(now.UnixNano())
	var victims []*conn
	g.mu.Lock()
	c.peer = g.peerLocked(peerOf(raw.RemoteAddr()))
	if max := g.limits.MaxConnectionsPerPeer; max > 0 && c.peer.conns >= max {
		v := g.victimLocked(func(o *conn) bool { return o.peer == c.peer && o.streams == 0 })
		if v == nil {
			g.forgetPeerLocked(c.peer)
			g.mu.Unlock()
			g.refuse(reasonPeerConnections, "peer", c.peer.addr, "limit", max)
			_ = raw.Close()
			return nil
		}
		victims = append(victims, v)
		g.dropLocked(v)
	}
	if max := g.limits.MaxConnections; max > 0 && len(g.conns) >= max {
		v := g.victimLocked(func(o *conn) bool { return o.streams == 0 })
		if v == nil {
			v = g.victimLocked(func(*conn) bool { return true })
		}
		if v != nil {
			victims = append(victims, v)
			g.dropLocked(v)
		}
	}
	g.conns[c.key] = c
	c.peer = g.peerLocked(c.peer.addr) // a victim of the peer's may have dropped its share
	c.peer.conns++
	g.mu.Unlock()
	for _, v := range victims {
		g.refuse(reasonEvicted, "peer", v.peer.addr, "streams", v.streamCount(), "idle", now.Sub(time.Unix(0, v.lastRead.Load())).String(), "for", c.peer.addr)
		_ = v.Conn.Close()
	}
	return c
}

// victimLocked is the closable connection that ok accepts whose last read
// is oldest. g.mu is held.
func (g *Gate) victimLocked(ok func(*conn) bool) *conn {
	var v *conn
	for _, o := range g.conns {
		if o.untracked || !ok(o) {
			continue
		}
		if v == nil || o.lastRead.Load() < v.lastRead.Load() {
			v = o
		}
	}
	return v
}

// dropLocked counts c out. g.mu is held.
func (g *Gate) dropLocked(c *conn) {
	if g.conns[c.key] != c {
		return
	}
	delete(g.conns, c.key)
	c.peer.conns--
	g.forgetPeerLocked(c.peer)
}

// forgetLocked counts out an untracked connection with no stream left (a
// tracked one leaves when it closes). g.mu is held.
func (g *Gate) forgetLocked(c *conn) {
	if c.untracked && c.streams == 0 && g.conns[c.key] == c {
		delete(g.conns, c.key)
		g.forgetPeerLocked(c.peer)
	}
}

// peerShare is what one peer address holds, however many connections it
// opens: the unit of the gate's fair shares.
type peerShare struct {
	addr string

	// Under g.mu:
	conns   int       // tracked connections open
	streams int       // streams tapped and not ended
	unread  []*ticket // streams unread or waiting, oldest first
	waiting []*ticket // streams waiting for a reading slot, in order
	reading int       // streams reading
	inTurns bool      // in g.turns
}

// peerLocked is the share of the peer at addr. g.mu is held.
func (g *Gate) peerLocked(addr string) *peerShare {
	p := g.peers[addr]
	if p == nil {
		p = &peerShare{addr: addr}
		g.peers[addr] = p
	}
	return p
}

// forgetPeerLocked drops p once nothing of it is left. g.mu is held.
func (g *Gate) forgetPeerLocked(p *peerShare) {
	if p.conns <= 0 && p.streams <= 0 && !p.inTurns && g.peers[p.addr] == p {
		delete(g.peers, p.addr)
	}
}

// conn is one client connection.
type conn struct {
	net.Conn
	g         *Gate
	key       string
	peer      *peerShare
	untracked bool // not accepted by the listener: counted, never closed

	lastRead  atomic.Int64 // unix nanoseconds of the last read that returned data
	bytesRead atomic.Int64 // bytes read in all, for MinReceiveRate

	// Under g.mu:
	streams int // streams tapped and not ended
	reading int // streams reading their request

	// Answers handed to the transport and bytes written, for Sent.
	out outbox

	closeOnce sync.Once
}

func (c *conn) streamCount() int {
	c.g.mu.Lock()
	defer c.g.mu.Unlock()
	return c.streams
}

func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.lastRead.Store(time.Now().UnixNano())
		c.bytesRead.Add(int64(n))
	}
	return n, err
}

func (c *conn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if n > 0 && c.out.wrote(int64(n)) && c.g.limits.MaxUnsentBytes > 0 {
		c.g.drained()
	}
	return n, err
}

// Close counts the connection out and runs what waited for its answers.
func (c *conn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(func() {
		c.g.mu.Lock()
		c.g.dropLocked(c)
		c.g.mu.Unlock()
		c.out.close()
		c.g.drained()
	})
	return err
}

// closeStalled closes the connection because an answer has not left it in
// time.
func (c *conn) closeStalled(d time.Duration) {
	if c.untracked {
		return
	}
	c.g.refuse(reasonSendTimeout, "peer", c.peer.addr, "after", d.String(), "unsent", c.out.unsent())
	_ = c.Close()
}

var (
	errClosed  = errors.New("connection closed")
	errDropped = errors.New("answer dropped with its stream")
)

// outbox follows the answers queued on a connection: each is out once the
// bytes written to the connection reach the bytes queued up to and including
// it. A connection writes frames, headers and other streams' data too, so an
// answer counts as out no later than it has really left, and possibly a
// little earlier when other streams' answers pass it.
type outbox struct {
	mu       sync.Mutex
	queued   int64
	written  int64
	progress time.Time // when the last answer left, or the first began to wait
	pending  []*mark
	closed   bool
	timer    *time.Timer
}

type mark struct {
	at, size int64
	done     func(error)
}

// add queues an answer of n bytes and calls done once it is out, or with
// errClosed when the connection closes first. With timeout > 0, stall is
// called when answers are pending and none has left for timeout.
func (o *outbox) add(n int64, timeout time.Duration, stall func(), done func(error)) *mark {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		done(errClosed)
		return nil
	}
	if len(o.pending) == 0 {
		// What was written while no answer waited (headers, trailers,
		// other frames) is no credit for this one.
		o.written = o.queued
		o.progress = time.Now()
	}
	n = max(n, 0)
	o.queued += n
	if o.written >= o.queued {
		o.mu.Unlock()
		done(nil)
		return nil
	}
	m := &mark{at: o.queued, size: n, done: done}
	o.pending = append(o.pending, m)
	if timeout > 0 && o.timer == nil {
		o.timer = time.AfterFunc(timeout, func() { o.check(timeout, stall) })
	}
	o.mu.Unlock()
	return m
}

// drop takes back an answer that will never be written (its stream ended
// before grpc-go sent it), and calls its done.
func (o *outbox) drop(m *mark) {
	o.mu.Lock()
	i := slices.Index(o.pending, m)
	if i < 0 {
		o.mu.Unlock()
		return
	}
	o.pending = slices.Delete(o.pending, i, i+1)
	for _, later := range o.pending[i:] {
		later.at -= m.size
	}
	o.queued -= m.size
	o.mu.Unlock()
	m.done(errDropped)
}

// check calls stall if answers have waited for a write for timeout, and
// otherwise looks again when they would have.
func (o *outbox) check(timeout time.Duration, stall func()) {
	o.mu.Lock()
	o.timer = nil
	if o.closed || len(o.pending) == 0 {
		o.mu.Unlock()
		return
	}
	if wait := timeout - time.Since(o.progress); wait > 0 {
		o.timer = time.AfterFunc(wait, func() { o.check(timeout, stall) })
		o.mu.Unlock()
		return
	}
	o.mu.Unlock()
	stall()
}

// wrote counts n bytes written, and reports whether answers left with them.
func (o *outbox) wrote(n int64) bool {
	o.mu.Lock()
	o.written += n
	var done []*mark
	i := 0
	for i < len(o.pending) && o.pending[i].at <= o.written {
		i++
	}
	if i > 0 {
		// Progress is an answer out, not any write: a client that keeps
		// its window shut cannot hold the connection open with frames
		// the server answers (SETTINGS, PING).
		done = append(done, o.pending[:i]...)
		o.pending = append(o.pending[:0], o.pending[i:]...)
		o.progress = time.Now()
	}
	o.mu.Unlock()
	for _, m := range done {
		m.done(nil)
	}
	return len(done) > 0
}

func (o *outbox) close() {
	o.mu.Lock()
	o.closed = true
	pending := o.pending
	o.pending = nil
	if o.timer != nil {
		o.timer.Stop()
		o.timer = nil
	}
	o.mu.Unlock()
	for _, m := range pending {
		m.done(errClosed)
	}
}

func (o *outbox) unsent() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return max(o.queued-o.written, 0)
}

package intake

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"
)

// Wrap returns desc with every method's request read under the gate: a
// stream waits for a reading slot before its request is read (grpc-go
// calls a unary handler before it reads the body, and opens the stream's
// window to the message's length only when the handler asks for it), and
// its receive timeout stops once the request is in. A server registers
// every service through it (grpcserving does), so that no method reads
// outside the gate.
func (g *Gate) Wrap(desc *grpc.ServiceDesc) *grpc.ServiceDesc {
	out := *desc
	out.Methods = make([]grpc.MethodDesc, len(desc.Methods))
	for i, m := range desc.Methods {
		h := m.Handler
		m.Handler = func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			uncompressed(ctx)
			defer answered(ctx)
			return h(srv, ctx, func(v any) error { return read(ctx, func() error { return dec(v) }) }, interceptor)
		}
		out.Methods[i] = m
	}
	out.Streams = make([]grpc.StreamDesc, len(desc.Streams))
	for i, s := range desc.Streams {
		h := s.Handler
		s.Handler = func(srv any, stream grpc.ServerStream) error {
			uncompressed(stream.Context())
			defer answered(stream.Context())
			return h(srv, &gatedStream{ServerStream: stream})
		}
		out.Streams[i] = s
	}
	return &out
}

// uncompressed sends a stream's answers as they are, whatever compressor its
// request came with: Sent counts an answer out once as many bytes have been
// written, which a compressed answer never reaches.
func uncompressed(ctx context.Context) {
	_ = grpc.SetSendCompressor(ctx, encoding.Identity)
}

// gatedStream reads a streaming method's first message under the gate; a
// client-streaming method's later messages are read as they come.
type gatedStream struct{ grpc.ServerStream }

func (s *gatedStream) RecvMsg(m any) error {
	return read(s.Context(), func() error { return s.ServerStream.RecvMsg(m) })
}

// read runs recv, the read of a stream's request, once the stream may read
// it, and then marks it read.
func read(ctx context.Context, recv func() error) error {
	t := ticketOf(ctx)
	if t == nil {
		return recv()
	}
	if err := t.beginRead(ctx); err != nil {
		return Status(ctx, err)
	}
	err := recv()
	if cause := t.endRead(); cause != nil {
		// The gate ended the stream while it read (its receive timeout,
		// its rate): the read's own error, if any, is grpc-go's Canceled,
		// and a read that finished just then is not to be run.
		return causeStatus(cause)
	}
	if err != nil {
		return Status(ctx, err)
	}
	return nil
}

// Status is err as the gRPC status a client gets: a stream the gate ended
// says why (its context's cause); any other error is left as it is.
func Status(ctx context.Context, err error) error {
	if s := causeStatus(err); s != nil {
		return s
	}
	if s := causeStatus(context.Cause(ctx)); s != nil {
		return s
	}
	return err
}

// causeStatus is the status of a stream the gate ended for cause; nil for
// any other error.
func causeStatus(cause error) error {
	switch {
	case errors.Is(cause, ErrReceiveTimeout):
		return status.Errorf(codes.DeadlineExceeded, "%v: the request did not arrive in full within --max-receive-duration; nothing was run", cause)
	case errors.Is(cause, ErrReceiveTooSlow):
		return status.Errorf(codes.DeadlineExceeded, "%v: the request arrived slower than --min-receive-rate; nothing was run", cause)
	case errors.Is(cause, ErrPreempted):
		return status.Errorf(codes.ResourceExhausted, "%v (--max-unread-streams); nothing was run", cause)
	case errors.Is(cause, ErrUnreadStreams):
		return status.Errorf(codes.ResourceExhausted, "%v (--max-unread-streams); nothing was run", cause)
	}
	return nil
}

// beginRead waits until t may read its request: a reading slot is free,
// t's peer holds less than its share of them, and no peer whose turn comes
// first waits.
func (t *ticket) beginRead(ctx context.Context) error {
	g, p := t.g, t.c.peer
	g.mu.Lock()
	if t.state != stateUnread {
		// Read already (a later message), or ended by the gate.
		cause := t.cause
		g.mu.Unlock()
		if cause != nil {
			return cause
		}
		return context.Cause(ctx)
	}
	t.stream, _ = grpc.ServerTransportStreamFromContext(ctx).(statusWriter)
	if len(g.turns) == 0 && g.mayReadLocked(t) {
		t.grantLocked()
		g.mu.Unlock()
		return nil
	}
	t.state = stateWaiting
	t.granted = make(chan struct{})
	p.waiting = append(p.waiting, t)
	g.readingWg.Add(1)
	g.queueLocked(p)
	// A slot may be free while the peers in turn before this one are at
	// their share.
	g.grantLocked()
	granted := t.granted
	g.mu.Unlock()

	select {
	case <-granted:
		return nil
	case <-ctx.Done():
		g.mu.Lock()
		if t.state == stateReading {
			// Granted meanwhile: the read fails on the context, and
			// endRead gives the slot back.
			g.mu.Unlock()
			return nil
		}
		if t.releaseLocked() {
			g.grantLocked()
		}
		cause := t.cause
		g.mu.Unlock()
		if cause != nil {
			return cause
		}
		return context.Cause(ctx)
	}
}

// mayReadLocked says whether t may take a reading slot now: a slot is
// free, its peer is under its share, and its connection's answers are
// leaving. g.mu is held.
func (g *Gate) mayReadLocked(t *ticket) bool {
	if m := g.limits.MaxUnsentBytes; m > 0 && t.c.out.unsent() > m {
		return false
	}
	limit := g.limits.MaxReading
	if limit <= 0 {
		return true
	}
	return g.reading < limit && t.c.peer.reading < max(1, limit/2)
}

// grantLocked moves t from unread (or waiting) to reading, and starts
// measuring its connection's rate. g.mu is held.
func (t *ticket) grantLocked() {
	g, p := t.g, t.c.peer
	p.unread = remove(p.unread, t)
	g.unread--
	if t.state == stateWaiting {
		p.waiting = remove(p.waiting, t)
		g.readingWg.Add(-1)
		close(t.granted)
	}
	t.state = stateReading
	g.reading++
	p.reading++
	t.c.reading++
	if g.limits.MinReceiveRate > 0 && !t.c.untracked {
		t.seen = t.c.bytesRead.Load()
		t.rate = time.AfterFunc(g.rateWindow(), t.measure)
	}
}

func (g *Gate) rateWindow() time.Duration {
	if w := g.limits.ReceiveRateWindow; w > 0 {
		return w
	}
	return DefaultReceiveRateWindow
}

// measure ends t, still reading, if its connection read less than
// MinReceiveRate over the last window; otherwise it measures again a
// window later.
func (t *ticket) measure() {
	g := t.g
	w := g.rateWindow()
	g.mu.Lock()
	if t.state != stateReading {
		g.mu.Unlock()
		return
	}
	now := t.c.bytesRead.Load()
	// Every stream reading on the connection needs the rate: one paid
	// for does not carry the others.
	if float64(now-t.seen) >= float64(g.limits.MinReceiveRate)*w.Seconds()*float64(max(t.c.reading, 1)) {
		t.seen = now
		t.rate = time.AfterFunc(w, t.measure)
		g.mu.Unlock()
		return
	}
	t.endLocked(ErrReceiveTooSlow)
	g.refuse(reasonReceiveTooSlow, "peer", t.c.peer.addr, "read", now-t.seen, "in", w.String())
}

// grantLocked gives free reading slots to waiting streams, one peer at a
// time in turn. g.mu is held.
func (g *Gate) grantLocked() {
	for skipped := 0; len(g.turns) > 0 && skipped < len(g.turns); {
		p := g.turns[0]
		g.turns = g.turns[1:]
		p.inTurns = false
		if len(p.waiting) == 0 {
			g.forgetPeerLocked(p)
			continue
		}
		next := g.nextLocked(p)
		if next == nil {
			g.queueLocked(p)
			if limit := g.limits.MaxReading; limit > 0 && g.reading >= limit {
				return
			}
			skipped++
			continue
		}
		skipped = 0
		next.grantLocked()
		if len(p.waiting) > 0 {
			g.queueLocked(p)
		}
	}
}

// nextLocked is p's oldest waiting stream that may read now: one whose
// connection's answers are leaving. g.mu is held.
func (g *Gate) nextLocked(p *peerShare) *ticket {
	for _, t := range p.waiting {
		if g.mayReadLocked(t) {
			return t
		}
		if limit := g.limits.MaxReading; limit > 0 && (g.reading >= limit || p.reading >= max(1, limit/2)) {
			return nil
		}
	}
	return nil
}

// queueLocked puts p at the end of the turns, unless it is there. g.mu is
// held.
func (g *Gate) queueLocked(p *peerShare) {
	if !p.inTurns {
		p.inTurns = true
		g.turns = append(g.turns, p)
	}
}

// endRead marks t's request read: its reading slot goes to the next
// stream, and its receive timeout stops. It returns why the gate ended t
// instead, if it did while t read.
func (t *ticket) endRead() (endedBy error) {
	g := t.g
	g.mu.Lock()
	if t.state == stateReading {
		t.releaseLocked()
		g.grantLocked()
	} else {
		endedBy = t.cause
	}
	g.mu.Unlock()
	if t.receive != nil {
		t.receive.Stop()
	}
	return endedBy
}

// Sent calls done once an answer of n bytes, handed to the transport by
// the stream of ctx, has been written to its connection (or the connection
// has closed); at once for a stream the gate does not know. A connection
// whose answers wait longer than SendTimeout for the client to take them is
// closed. Admission calls it to keep a call's weight until its answer is
// out: grpc-go ends a stream's context when its answer is queued, not when
// it is written.
func Sent(ctx context.Context, n int64, done func()) {
	t := ticketOf(ctx)
	if t == nil || t.c.untracked {
		done()
		return
	}
	c := t.c
	m := c.out.add(n, t.g.limits.SendTimeout, func() { c.closeStalled(t.g.limits.SendTimeout) }, func(error) { done() })
	if m != nil {
		t.g.mu.Lock()
		t.marks = append(t.marks, m)
		t.g.mu.Unlock()
	}
}

// answered runs when a stream's handler has returned: if the stream has
// ended already (the client reset it, its deadline passed), grpc-go writes
// none of its answer, and what Sent counted for it is taken back.
func answered(ctx context.Context) {
	t := ticketOf(ctx)
	if t == nil || ctx.Err() == nil {
		return
	}
	t.g.mu.Lock()
	marks := t.marks
	t.marks = nil
	t.g.mu.Unlock()
	for _, m := range marks {
		t.c.out.drop(m)
	}
}

// drained gives reading slots again to the streams of a connection whose
// unsent answers had held them back.
func (g *Gate) drained() {
	g.mu.Lock()
	g.grantLocked()
	g.mu.Unlock()
}

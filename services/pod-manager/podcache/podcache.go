// Package podcache decides which pod runs each call of a function, when to
// start another pod and when an idle pod goes. All of its state belongs to
// one goroutine (Run); callers and the pod watcher talk to it over channels,
// so there are no locks and no shared maps.
//
// Placement, per function: take the pod with the least load (calls running
// and waiting on it), ties broken round-robin; start another pod when there
// is none, or when the least load is at least PreferredMaxQueueLength and
// fewer than MaxParallelExecutions pods exist. A call waits on a pod until
// the pod is ready. A pod is given at most MaxCallsPerPod calls at once;
// when every pod has that many and no more may be started, calls wait in the
// cache, in arrival order, for the first pod that has room (each up to its
// deadline: the caller bounds how many wait). When a pod fails, its waiting calls are placed again
// (on another or a new pod) and answered; a call whose pods failed twice gets
// the failure's reason. Idle pods past their TTL are deleted.
package podcache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Function is what the cache needs to know about a function.
type Function struct {
	// Key identifies the function's pods; calls with the same key share
	// them.
	Key Key
	// MaxParallelExecutions bounds the function's pods (at least 1).
	MaxParallelExecutions int
	// PreferredMaxQueueLength is the load per pod that makes the cache start
	// another pod (at least 1).
	PreferredMaxQueueLength int
	// MaxCallsPerPod bounds the calls one pod is given at once, running or
	// waiting in it (0: no bound).
	MaxCallsPerPod int
	// TTL is how long an idle pod is kept.
	TTL time.Duration
	// Spec is passed to Backend.Create unchanged.
	Spec any
	// Label is the function label the cache's metrics count the function's
	// pods and calls under, from a bounded set (the executor table's name
	// for the image, see executortable.Tables.FunctionName); "" is "other".
	// The newest call's label is the function's.
	Label string
}

// Backend creates and deletes pods. Create must not block on the pod
// becoming ready: readiness and failure come back through Cache.PodReady and
// Cache.PodFailed.
type Backend interface {
	Create(ctx context.Context, f Function) (pod string, err error)
	Delete(ctx context.Context, pod string) error
}

// Lease is a pod assigned to one call. Release must be called once.
type Lease struct {
	Pod     string
	Address string
	// Cold says the call waited for its pod to start.
	Cold bool
	// ReadyAfter is, for a cold lease, how long its pod took from its
	// creation to ready.
	ReadyAfter time.Duration
	release    func()
}

// Release tells the cache the call is over.
func (l *Lease) Release() { l.release() }

// ErrClosed is returned once the cache has stopped.
var ErrClosed = errors.New("pod cache stopped")

// ErrNotReady is wrapped by the error of calls whose pod did not become
// ready within Cache.ReadyTimeout (it could not be scheduled, or its
// readiness never passed); the error says why, as far as it is known.
var ErrNotReady = errors.New("pod not ready in time")

// maxAttempts is how many pods may fail under one call before it gets the error.
const maxAttempts = 2

// Cache places calls on pods.
type Cache struct {
	// ReadyTimeout bounds how long a pod may take to become ready (0: no
	// bound); set it before Run. A pod that takes longer is deleted and the
	// calls waiting on it fail with ErrNotReady and the last reason
	// PodPending gave, never placed on another pod (the next would likely
	// wait as long).
	ReadyTimeout time.Duration

	backend  Backend
	now      func() time.Time
	requests chan *request
	releases chan string
	cancels  chan *request
	events   chan event
	gc       chan chan []string
	stats    chan chan map[Key]Stats
	states   chan chan map[string]functionState
	deletes  chan Key
	done     chan struct{}
	metrics  *metrics
}

type request struct {
	fn       Function
	ctx      context.Context
	reply    chan reply
	attempts int
	pod      *pod
	// queued: waiting in its function's queue for a pod with room.
	queued bool
	// cold: it waited for a pod to start (counted once).
	cold bool
}

type reply struct {
	lease *Lease
	err   error
}

type event struct {
	pod     string
	address string
	err     error
	// pending is why the pod is not ready yet (PodPending); unschedulable
	// says the scheduler cannot place it (PodUnschedulable).
	pending       string
	unschedulable bool
	// created is set when a Create finished: the pod it was for.
	created *pod
	// adopt is a ready pod found at start.
	adopt *pod
	// retire selects the functions whose pods go.
	retire func(key Key) bool
}

type pod struct {
	name     string // "" until Create returns
	fn       Key
	address  string
	ready    bool
	created  time.Time
	pending  string // why it is not ready yet, if known
	running  int    // leases handed out and not released
	waiting  []*request
	lastUsed time.Time
	ttl      time.Duration
	retired  bool

	// unschedulable: the last reason it is not ready is the scheduler's.
	unschedulable bool
}

func (p *pod) load() int { return p.running + len(p.waiting) }

type function struct {
	pods []*pod // starting and ready
	rr   int
	// queue holds calls that found every pod full (MaxCallsPerPod) and
	// no room for another pod, in arrival order.
	queue []*request
	// label is the newest call's Function.Label.
	label string
}

// New returns a cache; call Run to start it.
func New(backend Backend) *Cache {
	return &Cache{
		backend:  backend,
		now:      time.Now,
		requests: make(chan *request),
		releases: make(chan string),
		cancels:  make(chan *request),
		events:   make(chan event, 64),
		gc:       make(chan chan []string),
		stats:    make(chan chan map[Key]Stats),
		states:   make(chan chan map[string]functionState),
		deletes:  make(chan Key),
		done:     make(chan struct{}),
		metrics:  newMetrics(),
	}
}

// Acquire waits for a pod for one call of f.
func (c *Cache) Acquire(ctx context.Context, f Function) (*Lease, error) {
	if f.MaxParallelExecutions < 1 {
		f.MaxParallelExecutions = 1
	}
	if f.PreferredMaxQueueLength < 1 {
		f.PreferredMaxQueueLength = 1
	}
	r := &request{fn: f, ctx: ctx, reply: make(chan reply, 1)}
	select {
	case c.requests <- r:
	case <-c.done:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case rep := <-r.reply:
		return rep.lease, rep.err
	case <-ctx.Done():
		select {
		case c.cancels <- r:
		case <-c.done:
		}
		// The loop may have answered before it saw the cancel.
		select {
		case rep := <-r.reply:
			if rep.lease != nil {
				rep.lease.Release()
			}
		default:
		}
		return nil, ctx.Err()
	case <-c.done:
		return nil, ErrClosed
	}
}

// Adopt adds a pod that already serves at address (one this pod-manager
// created before it restarted) to the pods of the function with key.
func (c *Cache) Adopt(key Key, name, address string, ttl time.Duration) {
	c.send(event{adopt: &pod{name: name, fn: key, address: address, ready: true, ttl: ttl}})
}

// Retire deletes the pods of every function whose key keep rejects: idle
// ones now, busy ones when their last call ends. New calls of those keys
// get new pods (a changed template changes the key).
func (c *Cache) Retire(keep func(key Key) bool) {
	c.send(event{retire: keep})
}

// PodReady reports that a pod serves at address.
func (c *Cache) PodReady(pod, address string) { c.send(event{pod: pod, address: address}) }

// PodFailed reports that a pod will not serve (crashed, image pull failed,
// deleted); err says why and reaches the calls that waited on it.
func (c *Cache) PodFailed(pod string, err error) { c.send(event{pod: pod, err: err}) }

// PodPending reports why a pod is not ready yet (unschedulable, readiness
// not passing); the calls it fails at ReadyTimeout say so.
func (c *Cache) PodPending(pod, reason string) { c.send(event{pod: pod, pending: reason}) }

// PodUnschedulable is PodPending for a pod the scheduler cannot place: if
// it is not ready within ReadyTimeout, its failure's reason is
// ReasonUnschedulable.
func (c *Cache) PodUnschedulable(pod, reason string) {
	c.send(event{pod: pod, pending: reason, unschedulable: true})
}

// Discarded counts a pod that an earlier run of this pod-manager left and
// that was deleted at start instead of adopted.
func (c *Cache) Discarded() { c.metrics.deleted.WithLabelValues(other, deletedOrphan).Inc() }

func (c *Cache) send(e event) {
	select {
	case c.events <- e:
	case <-c.done:
	}
}

// CollectGarbage deletes idle pods past their TTL now and returns their names.
func (c *Cache) CollectGarbage() []string {
	ch := make(chan []string, 1)
	select {
	case c.gc <- ch:
		return <-ch
	case <-c.done:
		return nil
	}
}

// Stats describe one function's pods.
type Stats struct {
	Pods, Ready, Running, Waiting, Pending int
	// Queued calls wait for a pod with room (MaxCallsPerPod).
	Queued int
}

// Stats returns the current state per function key.
func (c *Cache) Stats() map[Key]Stats {
	ch := make(chan map[Key]Stats, 1)
	select {
	case c.stats <- ch:
		return <-ch
	case <-c.done:
		return nil
	}
}

// Run owns the cache's state until ctx ends; it collects garbage every
// scanInterval (0: only when asked), and checks pods against ReadyTimeout at
// least four times within it.
func (c *Cache) Run(ctx context.Context, scanInterval time.Duration) {
	defer close(c.done)
	fns := map[Key]*function{}
	pods := map[string]*pod{}
	interval := scanInterval
	if check := c.ReadyTimeout / 4; c.ReadyTimeout > 0 && (interval == 0 || check < interval) {
		interval = max(check, 100*time.Millisecond)
	}
	var tick <-chan time.Time
	if interval > 0 {
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	l := &loop{c: c, ctx: ctx, fns: fns, pods: pods, deleting: map[Key]int{}}
	for {
		select {
		case <-ctx.Done():
			l.failAll(ErrClosed)
			return
		case r := <-c.requests:
			l.place(r)
		case name := <-c.releases:
			if p := pods[name]; p != nil && p.running > 0 {
				p.running--
				p.lastUsed = c.now()
				l.retireIfIdle(p)
				l.dequeue(p.fn)
			}
		case r := <-c.cancels:
			l.cancel(r)
		case e := <-c.events:
			l.handle(e)
		case ch := <-c.gc:
			ch <- l.collect()
		case <-tick:
			l.collect()
		case ch := <-c.stats:
			ch <- l.stats()
		case ch := <-c.states:
			ch <- l.states()
		case key := <-c.deletes:
			if l.deleting[key]--; l.deleting[key] <= 0 {
				delete(l.deleting, key)
			}
		}
	}
}

// loop is the state Run owns.
type loop struct {
	c    *Cache
	ctx  context.Context
	fns  map[Key]*function
	pods map[string]*pod // by name, once created
	// early holds Ready/Failed events for pods whose Create has not
	// returned, while creating counts those Creates: with none in flight,
	// an event for an unknown pod is for one already gone (its deletion's
	// updates, another replica's), and is dropped; one older than
	// earlyFor is dropped at a collection (Creates overlap for good under
	// steady cold starts).
	early    map[string]earlyEvent
	creating int
	// deleting counts the pods being deleted (Backend.Delete not returned).
	deleting map[Key]int
}

func (l *loop) fn(key Key) *function {
	f := l.fns[key]
	if f == nil {
		f = &function{}
		l.fns[key] = f
	}
	return f
}

// place puts a call on the least-loaded pod (starting pods included), ties
// broken round-robin, starting a pod first when there is none or the least
// load has reached PreferredMaxQueueLength and the function may have more.
func (l *loop) place(r *request) {
	if r.ctx.Err() != nil {
		r.reply <- reply{err: r.ctx.Err()}
		return
	}
	f := l.fn(r.fn.Key)
	f.label = r.fn.Label
	if len(f.queue) > 0 {
		// Calls already wait for room: this one waits behind them.
		r.queued = true
		f.queue = append(f.queue, r)
		l.dequeue(r.fn.Key)
		return
	}
	best := l.leastLoaded(f)
	if best == nil || (best.load() >= r.fn.PreferredMaxQueueLength && len(f.pods) < r.fn.MaxParallelExecutions) {
		best = l.create(f, r.fn)
	}
	if full(best, r.fn) {
		r.queued = true
		f.queue = append(f.queue, r)
		return
	}
	l.assign(best, r)
}

// full says whether p has as many calls as fn lets a pod have.
func full(p *pod, fn Function) bool {
	return fn.MaxCallsPerPod > 0 && p.load() >= fn.MaxCallsPerPod
}

// dequeue places the calls waiting in key's queue while they fit: on a pod
// with room, or on a new pod. It is called whenever a pod may have room (a
// call ended) or may be started (a pod went).
func (l *loop) dequeue(key Key) {
	f := l.fns[key]
	if f == nil {
		return
	}
	for len(f.queue) > 0 {
		r := f.queue[0]
		if r.ctx.Err() != nil {
			f.queue = f.queue[1:]
			r.queued = false
			r.reply <- reply{err: r.ctx.Err()}
			continue
		}
		best := l.leastLoaded(f)
		if best == nil || (full(best, r.fn) || best.load() >= r.fn.PreferredMaxQueueLength) && len(f.pods) < r.fn.MaxParallelExecutions {
			best = l.create(f, r.fn)
		}
		if full(best, r.fn) {
			return
		}
		f.queue = f.queue[1:]
		r.queued = false
		l.assign(best, r)
	}
}

func (l *loop) leastLoaded(f *function) *pod {
	n := len(f.pods)
	if n == 0 {
		return nil
	}
	var best *pod
	start := f.rr % n
	for i := 0; i < n; i++ {
		p := f.pods[(start+i)%n]
		if best == nil || p.load() < best.load() {
			best = p
		}
	}
	f.rr = (f.rr + 1) % n
	return best
}

func (l *loop) assign(p *pod, r *request) {
	r.pod = p
	// The function's current TTL applies (an adopted pod starts with the
	// default; a FunctionConfig may have changed it).
	if r.fn.TTL > 0 {
		p.ttl = r.fn.TTL
	}
	if p.ready {
		p.running++
		p.lastUsed = l.c.now()
		r.reply <- reply{lease: l.lease(p)}
		return
	}
	if !r.cold {
		r.cold = true
		l.c.metrics.coldStarts.WithLabelValues(l.label(p)).Inc()
	}
	p.waiting = append(p.waiting, r)
}

// label is the function label of p's function.
func (l *loop) label(p *pod) string { return l.fn(p.fn).labelOrOther() }

func (l *loop) lease(p *pod) *Lease {
	name := p.name
	var once sync.Once
	return &Lease{Pod: p.name, Address: p.address, release: func() {
		// Released twice: ignored, so counters never go negative.
		once.Do(func() {
			select {
			case l.c.releases <- name:
			case <-l.c.done:
			}
		})
	}}
}

// create starts a pod for f; it is a placement candidate at once.
func (l *loop) create(f *function, fn Function) *pod {
	now := l.c.now()
	p := &pod{fn: fn.Key, ttl: fn.TTL, lastUsed: now, created: now}
	f.pods = append(f.pods, p)
	l.creating++
	go func() {
		name, err := l.c.backend.Create(l.ctx, fn)
		if err != nil {
			err = fmt.Errorf("creating a pod: %w", err)
		}
		l.c.send(event{pod: name, err: err, created: p})
	}()
	return p
}

func (l *loop) handle(e event) {
	if keep := e.retire; keep != nil {
		for key, f := range l.fns {
			if keep(key) {
				continue
			}
			for _, p := range append([]*pod(nil), f.pods...) {
				p.retired = true
				l.retireIfIdle(p)
			}
		}
		return
	}
	if p := e.adopt; p != nil {
		if _, known := l.pods[p.name]; !known {
			p.lastUsed = l.c.now()
			l.pods[p.name] = p
			f := l.fn(p.fn)
			f.pods = append(f.pods, p)
			l.dequeue(p.fn)
		}
		return
	}
	if p := e.created; p != nil {
		l.creating--
		early, ok := l.early[e.pod]
		if l.creating == 0 {
			clear(l.early)
		} else {
			delete(l.early, e.pod)
		}
		if e.err != nil {
			l.remove(p, e.err)
			return
		}
		p.name = e.pod
		l.pods[p.name] = p
		l.c.metrics.created.WithLabelValues(l.label(p)).Inc()
		if ok {
			l.handle(early.event)
		}
		return
	}
	p := l.pods[e.pod]
	if p == nil {
		if l.creating == 0 {
			return
		}
		if l.early == nil {
			l.early = map[string]earlyEvent{}
		}
		if prev, ok := l.early[e.pod]; ok && e.pending != "" && prev.pending == "" {
			return // a reason to wait never hides a ready or failed event
		}
		l.early[e.pod] = earlyEvent{event: e, at: l.c.now()}
		return
	}
	if e.err != nil {
		l.remove(p, e.err)
		return
	}
	if e.pending != "" {
		p.pending, p.unschedulable = e.pending, e.unschedulable
		return
	}
	// Ready: the calls waiting on this pod, and only those, start on it.
	var readyAfter time.Duration
	if !p.ready && !p.created.IsZero() {
		readyAfter = l.c.now().Sub(p.created)
		l.c.metrics.timeToReady.WithLabelValues(l.label(p)).Observe(readyAfter.Seconds())
	}
	p.ready, p.address = true, e.address
	waiting := p.waiting
	p.waiting = nil
	for _, r := range waiting {
		if r.ctx.Err() != nil {
			r.reply <- reply{err: r.ctx.Err()}
			continue
		}
		p.running++
		p.lastUsed = l.c.now()
		lease := l.lease(p)
		lease.Cold, lease.ReadyAfter = true, readyAfter
		r.reply <- reply{lease: lease}
	}
	// Room left by waiting calls that gave up is a queued call's.
	l.dequeue(p.fn)
}

// drop forgets a pod and deletes it (if it was created), counting the
// deletion under reason.
func (l *loop) drop(p *pod, reason string) {
	f := l.fn(p.fn)
	for i, q := range f.pods {
		if q == p {
			f.pods = append(f.pods[:i], f.pods[i+1:]...)
			break
		}
	}
	if p.name != "" {
		delete(l.pods, p.name)
		l.c.metrics.deleted.WithLabelValues(f.labelOrOther(), reason).Inc()
		l.deleting[p.fn]++
		go func(name string, key Key) {
			_ = l.c.backend.Delete(l.ctx, name)
			select {
			case l.c.deletes <- key:
			case <-l.c.done:
			}
		}(p.name, p.fn)
	}
}

// remove drops a failed pod and places its waiting calls again, ahead of
// the calls queued after them.
func (l *loop) remove(p *pod, err error) {
	l.c.metrics.failed.WithLabelValues(l.label(p), failureReason(err)).Inc()
	l.drop(p, deletedFailed)
	waiting := p.waiting
	p.waiting = nil
	var again []*request
	for _, r := range waiting {
		r.pod = nil
		r.attempts++
		if r.attempts >= maxAttempts {
			r.reply <- reply{err: err}
			continue
		}
		r.queued = true
		again = append(again, r)
	}
	f := l.fn(p.fn)
	f.queue = append(again, f.queue...)
	l.dequeue(p.fn)
}

// retireIfIdle deletes a retired pod that has no calls left.
func (l *loop) retireIfIdle(p *pod) {
	if !p.retired || p.load() > 0 || p.name == "" {
		return
	}
	l.drop(p, deletedTemplateChanged)
	l.dequeue(p.fn)
}

func (l *loop) cancel(r *request) {
	if r.queued {
		f := l.fns[r.fn.Key]
		for i, w := range f.queue {
			if w == r {
				f.queue = append(f.queue[:i], f.queue[i+1:]...)
				break
			}
		}
		r.queued = false
		return
	}
	p := r.pod
	if p == nil {
		return
	}
	for i, w := range p.waiting {
		if w == r {
			p.waiting = append(p.waiting[:i], p.waiting[i+1:]...)
			// Its room on p may be a queued call's now.
			l.dequeue(p.fn)
			return
		}
	}
}

// collect deletes pods idle past their TTL (ready or not) and pods not
// ready within ReadyTimeout, and returns their names.
func (l *loop) collect() []string {
	var gone []string
	now := l.c.now()
	for _, f := range l.fns {
		for _, p := range append([]*pod(nil), f.pods...) {
			switch {
			case p.name == "":
				// Create has not returned.
			case !p.ready && l.c.ReadyTimeout > 0 && now.Sub(p.created) > l.c.ReadyTimeout:
				gone = append(gone, p.name)
				l.expire(p, now.Sub(p.created))
			case p.load() == 0 && now.Sub(p.lastUsed) > p.ttl:
				gone = append(gone, p.name)
				l.drop(p, deletedTTL)
				l.dequeue(p.fn)
			}
		}
	}
	// A function with no pod, none being deleted and no call is
	// forgotten: every image a caller names would otherwise stay
	// (unclaimed images included).
	for key, f := range l.fns {
		if len(f.pods) == 0 && l.deleting[key] == 0 && len(f.queue) == 0 {
			delete(l.fns, key)
		}
	}
	for name, e := range l.early {
		if now.Sub(e.at) > earlyFor {
			delete(l.early, name)
		}
	}
	return gone
}

// earlyEvent is an event for a pod whose Create had not returned, and when
// it came.
type earlyEvent struct {
	event
	at time.Time
}

// earlyFor is how long an event for a pod whose Create has not returned is
// kept: a Create (the pod and its Service) returns in seconds.
const earlyFor = 5 * time.Minute

// expire deletes a pod that did not become ready in time and fails the
// calls waiting on it, saying why.
func (l *loop) expire(p *pod, waited time.Duration) {
	why := p.pending
	if why == "" {
		why = "no reason reported"
	}
	err := fmt.Errorf("%w: pod %s not ready after %v: %s", ErrNotReady, p.name, waited.Round(time.Second), why)
	reason := ReasonReadyTimeout
	if p.unschedulable {
		reason = ReasonUnschedulable
	}
	l.c.metrics.failed.WithLabelValues(l.label(p), reason).Inc()
	l.drop(p, deletedFailed)
	for _, r := range p.waiting {
		r.reply <- reply{err: err}
	}
	p.waiting = nil
	// Calls queued for room did not wait on it: they may have a new pod.
	l.dequeue(p.fn)
}

func (l *loop) stats() map[Key]Stats {
	out := map[Key]Stats{}
	for key, f := range l.fns {
		s := Stats{Pods: len(f.pods)}
		for _, p := range f.pods {
			if p.ready {
				s.Ready++
			} else {
				s.Pending++
			}
			s.Running += p.running
			s.Waiting += len(p.waiting)
		}
		s.Queued = len(f.queue)
		out[key] = s
	}
	return out
}

func (l *loop) failAll(err error) {
	for _, f := range l.fns {
		for _, r := range f.queue {
			r.reply <- reply{err: err}
		}
		f.queue = nil
		for _, p := range f.pods {
			for _, r := range p.waiting {
				r.reply <- reply{err: err}
			}
		}
	}
}

package imagemeta

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrTooManyLookups: as many registry lookups as allowed are in flight, so
// none was started for this one; nothing was asked of the registry.
var ErrTooManyLookups = errors.New("too many registry lookups in flight")

// ErrLookupTimeout is the cause of a registry lookup that ran out of its
// time (lookupTimeout, all its requests together): the registry was slow,
// whatever the deadlines of the calls that waited for it.
var ErrLookupTimeout = fmt.Errorf("the registry lookup took longer than %v", lookupTimeout)

// errNoWaiters is the cause of a lookup cancelled because every caller
// that waited for it has gone.
var errNoWaiters = errors.New("no caller waits for the registry lookup any more")

// errLookupPanicked is wrapped by the error of a lookup that panicked.
var errLookupPanicked = errors.New("the registry lookup panicked")

// lookupTimeout bounds one registry lookup, all its requests together.
const lookupTimeout = time.Minute

// flights runs registry lookups apart from their callers: one caller
// giving up does not fail the others that wait for the same lookup, and
// a lookup ends when the last of them has gone. One lookup per key at a
// time, shared by every caller that asks for the key meanwhile; at most
// max at once, of which at most maxUnclaimed started for keys not
// claimed, so that those never take the claimed ones' share.
type flights struct {
	max, maxUnclaimed int
	// timeout bounds each lookup: lookupTimeout but in tests.
	timeout time.Duration

	mu sync.Mutex
	// calls are the lookups callers may join.
	calls map[string]*flight
	// running counts the lookups whose work has not returned, joinable or
	// not (one cancelled is not, but holds its place until it returns);
	// unclaimed those of them started for keys not claimed.
	running, unclaimed int
}

// flight is one lookup in progress; done is closed once val and err are set.
type flight struct {
	done    chan struct{}
	val     any
	err     error
	claimed bool
	cancel  context.CancelCauseFunc
	// waiters counts the callers waiting for it, under flights.mu.
	waiters int
}

// newFlights bounds the lookups at max, those not claimed at maxUnclaimed
// (clamped to max).
func newFlights(max, maxUnclaimed int) *flights {
	return newFlightsTimeout(max, maxUnclaimed, lookupTimeout)
}

// newFlightsTimeout is newFlights with each lookup bounded by timeout
// rather than lookupTimeout.
func newFlightsTimeout(max, maxUnclaimed int, timeout time.Duration) *flights {
	return &flights{max: max, maxUnclaimed: min(maxUnclaimed, max), timeout: timeout, calls: map[string]*flight{}}
}

// do waits for key's lookup in progress, or starts fn in a new one, no
// longer than ctx allows. fn runs on a context of its own that carries
// ctx's values, ended after f.timeout (cause ErrLookupTimeout, which its
// error then wraps) or once every caller waiting for it has gone.
// With max lookups in flight, or maxUnclaimed of them not claimed and
// claimed false, none is started and do fails with ErrTooManyLookups.
// A panic in fn is fn's error.
func (f *flights) do(ctx context.Context, key string, claimed bool, fn func(context.Context) (any, error)) (any, error) {
	c, err := f.join(ctx, key, claimed, fn)
	if err != nil {
		return nil, err
	}
	select {
	case <-c.done:
		return c.val, c.err
	case <-ctx.Done():
		f.leave(key, c)
		return nil, ctx.Err()
	}
}

// join counts the caller as a waiter of key's lookup, started if need be.
func (f *flights) join(ctx context.Context, key string, claimed bool, fn func(context.Context) (any, error)) (*flight, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.calls[key]; ok {
		c.waiters++
		return c, nil
	}
	if f.running >= f.max {
		return nil, fmt.Errorf("%w: %d, the most allowed", ErrTooManyLookups, f.running)
	}
	if !claimed && f.unclaimed >= f.maxUnclaimed {
		return nil, fmt.Errorf("%w: %d for images no FunctionConfig claims, the most they may take of %d", ErrTooManyLookups, f.unclaimed, f.max)
	}
	fctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	fctx, stop := context.WithTimeoutCause(fctx, f.timeout, ErrLookupTimeout)
	c := &flight{done: make(chan struct{}), claimed: claimed, cancel: cancel, waiters: 1}
	f.calls[key] = c
	f.running++
	if !claimed {
		f.unclaimed++
	}
	go func() {
		defer func() {
			if p := recover(); p != nil {
				c.val, c.err = nil, fmt.Errorf("%w: %v", errLookupPanicked, p)
			}
			if c.err != nil && errors.Is(context.Cause(fctx), ErrLookupTimeout) {
				c.err = fmt.Errorf("%w: %w", ErrLookupTimeout, c.err)
			}
			stop()
			cancel(nil)
			f.ended(key, c)
			close(c.done)
		}()
		c.val, c.err = fn(fctx)
	}()
	return c, nil
}

// leave counts a caller of c's out; the last to leave cancels it, and no
// caller joins it after.
func (f *flights) leave(key string, c *flight) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c.waiters--
	if c.waiters > 0 {
		return
	}
	if f.calls[key] == c {
		delete(f.calls, key)
	}
	c.cancel(errNoWaiters)
}

// ended gives c's place back.
func (f *flights) ended(key string, c *flight) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls[key] == c {
		delete(f.calls, key)
	}
	f.running--
	if !c.claimed {
		f.unclaimed--
	}
}

// inFlight is the number of lookups whose work has not returned.
func (f *flights) inFlight() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.running
}

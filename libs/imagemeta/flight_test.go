package imagemeta

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// blocked is a lookup that counts its runs and waits to be released, or
// for its context to end.
type blocked struct {
	runs    atomic.Int32
	release chan struct{}
	// started gets the context of each run (of the first few).
	started chan context.Context
	// cause is its context's cause, once it ended.
	cause atomic.Pointer[error]
}

func newBlocked() *blocked {
	return &blocked{release: make(chan struct{}), started: make(chan context.Context, 16)}
}

func (b *blocked) fn(ctx context.Context) (any, error) {
	b.runs.Add(1)
	select {
	case b.started <- ctx:
	default:
	}
	select {
	case <-b.release:
		return "value", nil
	case <-ctx.Done():
		cause := context.Cause(ctx)
		b.cause.Store(&cause)
		return nil, ctx.Err()
	}
}

// waiters is the number of callers waiting for key's joinable lookup.
func waiters(f *flights, key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.calls[key]; ok {
		return c.waiters
	}
	return 0
}

// waitFor is how long a test polls before it fails: a bound on a hang,
// not a duration under test.
const waitFor = 10 * time.Second

// receive waits for a value from ch.
func receive[T any](t *testing.T, ch <-chan T, msg string) T {
	t.Helper()
	var v T
	require.Eventually(t, func() bool {
		select {
		case v = <-ch:
			return true
		default:
			return false
		}
	}, waitFor, time.Millisecond, msg)
	return v
}

// Callers that ask for one key while its lookup is in flight wait for that
// lookup: it runs once, and each gets its result.
func TestFlightsShareOneLookup(t *testing.T) {
	f := newFlights(1, 1)
	lookup := newBlocked()
	const callers = 50
	results := make(chan any, callers)
	for range callers {
		go func() {
			v, err := f.do(t.Context(), "key", false, lookup.fn)
			assert.NoError(t, err)
			results <- v
		}()
	}
	require.Eventually(t, func() bool { return waiters(f, "key") == callers }, waitFor, time.Millisecond, "every caller waits")
	assert.Equal(t, 1, f.inFlight(), "lookups in flight")
	close(lookup.release)
	for range callers {
		assert.Equal(t, "value", receive(t, results, "a caller's result"))
	}
	assert.Equal(t, int32(1), lookup.runs.Load(), "lookups run")
	assert.Zero(t, f.inFlight())
}

// At most max lookups run at once, and at most maxUnclaimed of them for
// keys not claimed: those never take the places kept for claimed ones. A
// caller that joins a lookup in flight is never refused.
func TestFlightsKeepPlacesForClaimedLookups(t *testing.T) {
	f := newFlights(3, 1)
	lookup := newBlocked()
	do := func(key string, claimed bool) chan error {
		done := make(chan error, 1)
		go func() {
			_, err := f.do(t.Context(), key, claimed, lookup.fn)
			done <- err
		}()
		return done
	}
	// start has a caller wait for key's lookup, joined or started.
	start := func(key string, claimed bool) chan error {
		before := waiters(f, key)
		done := do(key, claimed)
		require.Eventually(t, func() bool { return waiters(f, key) == before+1 }, waitFor, time.Millisecond, key+" waits")
		return done
	}
	var waiting []chan error
	waiting = append(waiting, start("unclaimed", false))
	for _, tc := range []struct {
		key     string
		claimed bool
		refused bool
	}{
		{key: "another unclaimed", refused: true},
		{key: "unclaimed", claimed: false}, // joins
		{key: "claimed 1", claimed: true},
		{key: "claimed 2", claimed: true},
		{key: "claimed 3", claimed: true, refused: true}, // three in flight
		{key: "claimed 1", claimed: true},                // joins
		{key: "yet another unclaimed", refused: true},
	} {
		if tc.refused {
			require.ErrorIs(t, receive(t, do(tc.key, tc.claimed), tc.key), ErrTooManyLookups, tc.key)
			assert.Zero(t, waiters(f, tc.key), tc.key)
			continue
		}
		waiting = append(waiting, start(tc.key, tc.claimed))
	}
	assert.Equal(t, 3, f.inFlight(), "lookups in flight")
	assert.Equal(t, 2, waiters(f, "unclaimed"))
	assert.Equal(t, 2, waiters(f, "claimed 1"))
	assert.Equal(t, 1, waiters(f, "claimed 2"))
	close(lookup.release)
	for _, done := range waiting {
		assert.NoError(t, receive(t, done, "a caller's result"))
	}
	assert.Equal(t, int32(3), lookup.runs.Load(), "lookups run")
	assert.Zero(t, f.inFlight())
	assert.NoError(t, receive(t, do("another unclaimed", false), "another unclaimed"), "once the lookups ended")
}

// A lookup ends when the last caller waiting for it has gone, and gives
// its place back: the work of callers that gave up is not left running.
// While one waits, the others' going does not end it.
func TestFlightEndsWithItsLastWaiter(t *testing.T) {
	f := newFlights(1, 1)
	lookup := newBlocked()
	var cancels []context.CancelFunc
	results := make(chan error, 2)
	for range 2 {
		ctx, cancel := context.WithCancel(t.Context())
		cancels = append(cancels, cancel)
		go func() {
			_, err := f.do(ctx, "key", false, lookup.fn)
			results <- err
		}()
	}
	require.Eventually(t, func() bool { return waiters(f, "key") == 2 }, waitFor, time.Millisecond, "both callers wait")
	lctx := receive(t, lookup.started, "the lookup started")

	cancels[0]()
	assert.ErrorIs(t, receive(t, results, "the first caller"), context.Canceled, "the first caller")
	// A caller leaves before do returns: had its going ended the lookup,
	// the lookup's context would have ended by now.
	assert.NoError(t, lctx.Err(), "the lookup ended while a caller waits")
	assert.Equal(t, 1, waiters(f, "key"))
	assert.Equal(t, 1, f.inFlight())

	cancels[1]()
	assert.ErrorIs(t, receive(t, results, "the second caller"), context.Canceled, "the second caller")
	require.Error(t, lctx.Err(), "the lookup did not end with its last caller")
	assert.ErrorIs(t, context.Cause(lctx), errNoWaiters)
	require.Eventually(t, func() bool { return f.inFlight() == 0 }, waitFor, time.Millisecond, "the lookup's work returned")
	if cause := lookup.cause.Load(); assert.NotNil(t, cause, "the lookup saw its end") {
		assert.ErrorIs(t, *cause, errNoWaiters)
	}
	assert.Zero(t, waiters(f, "key"), "a caller may join the cancelled lookup")

	close(lookup.release)
	v, err := f.do(t.Context(), "other", false, lookup.fn)
	require.NoError(t, err, "its place was given back")
	assert.Equal(t, "value", v)
	assert.Equal(t, int32(2), lookup.runs.Load(), "lookups run")
}

// A lookup that runs out of its time fails with ErrLookupTimeout, the
// registry's slowness, not with the DeadlineExceeded of a caller's
// deadline; its callers' deadlines are further off.
func TestFlightTimeoutIsItsOwn(t *testing.T) {
	f := newFlightsTimeout(1, 1, time.Nanosecond)
	lookup := newBlocked()
	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	_, err := f.do(ctx, "key", true, lookup.fn)
	require.ErrorIs(t, err, ErrLookupTimeout)
	assert.NoError(t, ctx.Err(), "the caller's own deadline")
	if cause := lookup.cause.Load(); assert.NotNil(t, cause) {
		assert.ErrorIs(t, *cause, ErrLookupTimeout)
	}
	assert.Zero(t, f.inFlight())
}

// A lookup's own time is lookupTimeout, not its callers' deadline.
func TestFlightsTimeoutIsLookupTimeout(t *testing.T) {
	assert.Equal(t, lookupTimeout, newFlights(1, 1).timeout)
}

// A lookup that fails before its time is not said to have run out of it.
func TestFlightErrorIsNotATimeout(t *testing.T) {
	f := newFlights(1, 1)
	failed := errors.New("the registry failed")
	_, err := f.do(t.Context(), "key", false, func(context.Context) (any, error) { return nil, failed })
	require.ErrorIs(t, err, failed)
	assert.NotErrorIs(t, err, ErrLookupTimeout)
}

// A lookup that panics fails its callers with an error, and gives its
// place and its key back.
func TestFlightPanicIsItsError(t *testing.T) {
	f := newFlights(1, 1)
	_, err := f.do(t.Context(), "key", false, func(context.Context) (any, error) { panic("boom") })
	require.ErrorIs(t, err, errLookupPanicked)
	assert.ErrorContains(t, err, "boom")
	assert.Zero(t, f.inFlight())
	assert.Zero(t, waiters(f, "key"))
	v, err := f.do(t.Context(), "key", false, func(context.Context) (any, error) { return "value", nil })
	require.NoError(t, err)
	assert.Equal(t, "value", v)
}

package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/imagematch"
	"github.com/fnrunner/fnrunner/libs/sendonce"
)

// named answers with its address.
type named string

func (n named) Evaluate(context.Context, imagematch.Reference, *evalwire.Request) (*evalwire.Response, error) {
	return &evalwire.Response{Log: []byte(n)}, nil
}

// The replicas follow what the lookup finds: a scaled-up StatefulSet's new
// ordinal gets its share of functions, a removed one's connection is closed,
// and a failed lookup keeps the last replicas found.
func TestDiscoveredReplicasFollowTheLookup(t *testing.T) {
	var mu sync.Mutex
	found := []string{"pm-0:9449", "pm-1:9449"}
	var lookupErr error
	closed := map[string]bool{}
	d := NewDiscoveredReplicas(slog.New(slog.NewTextHandler(io.Discard, nil)),
		func(context.Context) ([]string, error) {
			mu.Lock()
			defer mu.Unlock()
			return append([]string(nil), found...), lookupErr
		},
		func(addr string) (Replica, func(), error) {
			return Replica{Address: addr, Client: named(addr)}, func() { closed[addr] = true }, nil
		})
	ctx := context.Background()
	owners := func() map[string]int {
		out := map[string]int{}
		for i := range 300 {
			ref := imagematch.Reference{Prefix: "example.com", Name: "fn-" + string(rune('a'+i%26)) + string(rune('a'+i/26))}
			resp, err := d.Evaluate(ctx, ref, &evalwire.Request{})
			require.NoError(t, err)
			out[string(resp.Log)]++
		}
		return out
	}

	require.NoError(t, d.Refresh(ctx))
	assert.ElementsMatch(t, []string{"pm-0:9449", "pm-1:9449"}, keys(owners()))
	assert.Equal(t, 2.0, testutil.ToFloat64(d.found))

	mu.Lock()
	found = append(found, "pm-2:9449")
	mu.Unlock()
	require.NoError(t, d.Refresh(ctx))
	after := owners()
	assert.Positive(t, after["pm-2:9449"], "the new ordinal got no function: %v", after)

	mu.Lock()
	found = []string{"pm-0:9449", "pm-2:9449"}
	mu.Unlock()
	require.NoError(t, d.Refresh(ctx))
	assert.True(t, closed["pm-1:9449"], "the removed replica's connection stayed open")
	assert.ElementsMatch(t, []string{"pm-0:9449", "pm-2:9449"}, keys(owners()))

	mu.Lock()
	lookupErr = errors.New("DNS down")
	mu.Unlock()
	require.Error(t, d.Refresh(ctx))
	assert.ElementsMatch(t, []string{"pm-0:9449", "pm-2:9449"}, keys(owners()), "a failed lookup dropped the replicas")
	assert.Equal(t, 2.0, testutil.ToFloat64(d.found), "the replicas still used")
	assert.Equal(t, 1.0, testutil.ToFloat64(d.failures))
}

func keys(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A call that finds no replica (a new install whose pod-manager became
// ready after the gateway's last lookup) looks them up itself, one lookup
// for every call waiting, instead of failing until the next interval. A
// lookup that finds none fails its calls not sent, and for emptyInterval
// after it calls fail at once, without a lookup each (the test's clock).
func TestCallsWithNoReplicaLookUpOnce(t *testing.T) {
	var mu sync.Mutex
	var found []string
	lookups := 0
	release := make(chan struct{})
	d := NewDiscoveredReplicas(slog.New(slog.NewTextHandler(io.Discard, nil)),
		func(context.Context) ([]string, error) {
			mu.Lock()
			lookups++
			wait := release
			mu.Unlock()
			<-wait
			mu.Lock()
			defer mu.Unlock()
			return append([]string(nil), found...), nil
		},
		func(addr string) (Replica, func(), error) {
			return Replica{Address: addr, Client: named(addr)}, func() {}, nil
		})
	clock := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	d.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	ctx := context.Background()
	evaluate := func() (*evalwire.Response, error) {
		return d.Evaluate(ctx, imagematch.Reference{Name: "fn"}, &evalwire.Request{})
	}
	lookupsSoFar := func() int { mu.Lock(); defer mu.Unlock(); return lookups }

	// None found: the call is not sent, and the next one, within
	// emptyInterval, looks no more.
	close(release)
	_, err := evaluate()
	var notSent *sendonce.NotSentError
	require.ErrorAs(t, err, &notSent, "no replica found: the call is not sent")
	_, err = evaluate()
	require.ErrorAs(t, err, &notSent)
	assert.Equal(t, 1, lookupsSoFar(), "a call within emptyInterval of a lookup that found none looked again")

	// The pod-manager appears; after emptyInterval eight calls at once
	// share one lookup: it ends only once all eight wait on it.
	mu.Lock()
	clock = clock.Add(emptyInterval)
	found, lookups, release = []string{"pm-0:9449"}, 0, make(chan struct{})
	mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			var resp *evalwire.Response
			resp, errs[i] = evaluate()
			if errs[i] == nil {
				assert.Equal(t, "pm-0:9449", string(resp.Log))
			}
		})
	}
	require.Eventually(t, func() bool { return d.waiting.Load() == int32(len(errs)) && lookupsSoFar() > 0 }, 10*time.Second, 10*time.Millisecond,
		"the calls did not all wait on a lookup")
	assert.Equal(t, 1, lookupsSoFar(), "calls waiting together looked up once")
	close(release)
	wg.Wait()
	for i, err := range errs {
		assert.NoError(t, err, "call %d", i)
	}
	assert.Equal(t, 1, lookupsSoFar())
}

// A call that ends while it waits for the lookup gets its own context's
// error, not "no replica".
func TestCallEndsWhileLookingUp(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	d := NewDiscoveredReplicas(slog.New(slog.NewTextHandler(io.Discard, nil)),
		func(context.Context) ([]string, error) { <-release; return nil, nil },
		func(addr string) (Replica, func(), error) {
			return Replica{Address: addr, Client: named(addr)}, func() {}, nil
		})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := d.Evaluate(ctx, imagematch.Reference{Name: "fn"}, &evalwire.Request{})
	require.ErrorIs(t, err, context.Canceled)
}

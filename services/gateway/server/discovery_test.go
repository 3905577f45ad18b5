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
// for every call waiting, instead of failing until the next interval; when
// that lookup finds none either, the call fails not sent.
func TestCallsWithNoReplicaLookUpOnce(t *testing.T) {
	var mu sync.Mutex
	var found []string
	lookups := 0
	release := make(chan struct{})
	d := NewDiscoveredReplicas(slog.New(slog.NewTextHandler(io.Discard, nil)),
		func(context.Context) ([]string, error) {
			<-release
			mu.Lock()
			defer mu.Unlock()
			lookups++
			return append([]string(nil), found...), nil
		},
		func(addr string) (Replica, func(), error) {
			return Replica{Address: addr, Client: named(addr)}, func() {}, nil
		})
	ctx := context.Background()

	close(release)
	_, err := d.Evaluate(ctx, imagematch.Reference{Name: "fn"}, &evalwire.Request{})
	var notSent *sendonce.NotSentError
	require.ErrorAs(t, err, &notSent, "no replica found: the call is not sent")
	assert.Equal(t, 1, lookups)

	// The pod-manager appears; eight calls at once share one lookup.
	mu.Lock()
	found, lookups = []string{"pm-0:9449"}, 0
	mu.Unlock()
	release = make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var resp *evalwire.Response
			resp, errs[i] = d.Evaluate(ctx, imagematch.Reference{Name: "fn"}, &evalwire.Request{})
			if errs[i] == nil {
				assert.Equal(t, "pm-0:9449", string(resp.Log))
			}
		}()
	}
	// Every call is waiting on the lookup before it answers.
	require.Eventually(t, func() bool {
		d.lookingUpMu.Lock()
		defer d.lookingUpMu.Unlock()
		return d.lookingUp != nil
	}, 10*time.Second, 10*time.Millisecond)
	close(release)
	wg.Wait()
	for i, err := range errs {
		assert.NoError(t, err, "call %d", i)
	}
	assert.Equal(t, 1, lookups, "calls that came together looked up once")
}

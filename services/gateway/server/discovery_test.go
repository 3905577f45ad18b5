package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/imagematch"
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

	_, err := d.Evaluate(ctx, imagematch.Reference{Name: "fn"}, &evalwire.Request{})
	require.Error(t, err, "no replica before the first lookup")

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

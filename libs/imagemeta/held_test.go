package imagemeta

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/tests/testregistry"
)

// heapObjects is the bytes of the heap's objects, live or not yet collected.
func heapObjects() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// peakHeap runs f and returns the most the heap's objects grew while it
// ran, sampled every 200 µs with the collector run often (with GOMEMLIMIT
// at the container's limit, as deploy/ sets it, what is not live is
// collected before the limit is reached).
func peakHeap(f func()) uint64 {
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	runtime.GC()
	base := heapObjects()
	var peak uint64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			peak = max(peak, heapObjects())
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Microsecond):
			}
		}
	}()
	f()
	close(stop)
	<-done
	return peak - min(peak, base)
}

// The lookups in flight, each at its costliest (JSON of one-byte strings
// filling its bound: a tag list, a config's Env), hold no more than MaxHeld
// says, caches included: what the pod-manager fits into its container.
func TestLookupsHoldNoMoreThanMaxHeld(t *testing.T) {
	reg := testregistry.New(t)
	opts := Options{MaxUnclaimedLookups: DefaultMaxLookups}
	tagList := `{"name":"fns/tags%d","tags":[` + strings.Repeat(`"a",`, (DefaultMaxTagListSize-4096)/4) + `"b"]}`
	env := make([]string, (DefaultMaxConfigSize-4096)/3) // `"",` each
	var lookups []func(*Resolver) error
	for i := range DefaultMaxLookups / 2 {
		path := fmt.Sprintf("/v2/fns/tags%d/tags/list", i)
		reg.Serve(path, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, tagList, i)
		}))
		image := fmt.Sprintf("%s/fns/image%d:v1", reg.Host, i)
		reg.Push(t, image, v1.Config{Entrypoint: []string{"/fn"}, Env: env})
		repo := fmt.Sprintf("%s/fns/tags%d", reg.Host, i)
		lookups = append(lookups, func(res *Resolver) error {
			_, err := res.Tags(context.Background(), repo)
			return err
		}, func(res *Resolver) error {
			_, err := res.Resolve(context.Background(), image)
			return err
		})
	}
	res := resolver(t, reg, opts)
	errs := make([]error, len(lookups))
	grew := peakHeap(func() {
		var wg sync.WaitGroup
		for i, lookup := range lookups {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = lookup(res)
			}()
		}
		wg.Wait()
	})
	for i, err := range errs {
		require.NoError(t, err, "lookup %d", i)
	}
	t.Logf("%d lookups at once grew the heap by %d MiB; MaxHeld %d MiB", len(lookups), grew>>20, opts.MaxHeld()>>20)
	assert.LessOrEqual(t, int64(grew), opts.MaxHeld())
}

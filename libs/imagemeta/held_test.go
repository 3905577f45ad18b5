package imagemeta

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

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

// serveRaw answers path with body, as a registry answers a manifest or a
// blob: its digest and length in the headers.
func serveRaw(reg *testregistry.Registry, path, contentType string, body []byte) string {
	digest := digestOf(body)
	reg.Serve(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Docker-Content-Digest", digest)
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		if r.Method != http.MethodHead {
			_, _ = w.Write(body)
		}
	}))
	return digest
}

// costlyImage serves an image whose manifest holds layers empty objects
// and whose config holds history empty objects and an Env string of
// envBytes: JSON that costs far more decoded than its bytes.
func costlyImage(reg *testregistry.Registry, repo string, layers, history, envBytes int) string {
	config := []byte(`{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/fn"],"Env":["A=` + strings.Repeat("a", envBytes) + `"]},"history":[` +
		strings.TrimSuffix(strings.Repeat(`{},`, history), ",") + `]}`)
	digest := serveRaw(reg, "/v2/"+repo+"/blobs/"+digestOf(config), "application/octet-stream", config)
	manifest := fmt.Sprintf(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","size":%d,"digest":"%s"},"layers":[%s]}`,
		len(config), digest, strings.TrimSuffix(strings.Repeat(`{},`, layers), ","))
	serveRaw(reg, "/v2/"+repo+"/manifests/v1", "application/vnd.oci.image.manifest.v1+json", []byte(manifest))
	return reg.Host + "/" + repo + ":v1"
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// An image whose answers hold more JSON values than DefaultMaxImageValues
// is refused as it is read: 350,000 empty history entries in a 1 MiB config.
func TestImageOfManyValuesIsRefused(t *testing.T) {
	reg := testregistry.New(t)
	image := costlyImage(reg, "fns/values", 0, (DefaultMaxConfigSize-1024)/3, 0)
	_, err := resolver(t, reg, Options{}).Resolve(context.Background(), image)
	require.ErrorIs(t, err, ErrTooLarge)
	assert.ErrorContains(t, err, "more than 16384 JSON values")
}

// The lookups in flight, each at its costliest within its bounds (a tag
// list of one-byte tags filling its bytes; an image whose manifest and
// config fill the JSON values with empty objects and the bytes with a
// string), hold no more than MaxHeld says, caches included: what the
// pod-manager fits into its container.
func TestLookupsHoldNoMoreThanMaxHeld(t *testing.T) {
	reg := testregistry.New(t)
	opts := Options{MaxUnclaimedLookups: DefaultMaxLookups}
	tagList := `{"name":"fns/tags%d","tags":[` + strings.Repeat(`"a",`, (DefaultMaxTagListSize-4096)/4) + `"b"]}`
	var lookups []func(*Resolver) error
	for i := range DefaultMaxLookups / 2 {
		path := fmt.Sprintf("/v2/fns/tags%d/tags/list", i)
		reg.Serve(path, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, tagList, i)
		}))
		repo := fmt.Sprintf("%s/fns/tags%d", reg.Host, i)
		// Half the values in the manifest, half in the config, with room
		// for the other answers' (tokens, the config's own fields).
		each := (DefaultMaxImageValues - 512) / 4
		image := costlyImage(reg, fmt.Sprintf("fns/image%d", i), each, each, DefaultMaxConfigSize-64<<10)
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

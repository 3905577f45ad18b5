package imagemeta

import (
	"context"
	"fmt"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/tests/testregistry"
)

// The tag-list cache holds at most its bytes: the least recently used
// lists go first, and a list larger than the whole is not kept.
func TestTagListCacheIsBoundedInBytes(t *testing.T) {
	list := func(n, size int) tagList {
		tags := make([]string, n)
		for i := range tags {
			tags[i] = strings.Repeat("v", size)
		}
		return tagList{tags: tags}
	}
	one := tagListCost("a", list(10, 84)) // 64 + 1 + 10 × (16 + 84)
	assert.Equal(t, 1065, one)
	for _, tc := range []struct {
		name string
		puts []string // keys, each a list costing one, in order
		get  string   // touched after the first two puts
		want []string // keys kept
	}{
		{name: "within the bound", puts: []string{"a", "b", "c"}, want: []string{"a", "b", "c"}},
		{name: "least recently put goes", puts: []string{"a", "b", "c", "d"}, want: []string{"b", "c", "d"}},
		{name: "least recently used goes", puts: []string{"a", "b", "c", "d"}, get: "a", want: []string{"a", "c", "d"}},
		{name: "put again, not twice", puts: []string{"a", "b", "a", "a", "c"}, want: []string{"a", "b", "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLRU(0, 3*one, tagListCost)
			for i, k := range tc.puts {
				l.put(k, list(10, 84))
				if i == 1 && tc.get != "" {
					l.get(tc.get)
				}
			}
			var kept []string
			for _, k := range []string{"a", "b", "c", "d"} {
				if _, ok := l.byKey[k]; ok {
					kept = append(kept, k)
				}
			}
			assert.Equal(t, tc.want, kept)
			assert.Equal(t, len(tc.want)*one, l.used, "bytes held")
		})
	}
	l := newLRU(0, 3*one, tagListCost)
	l.put("small", list(1, 1))
	l.put("huge", list(40, 84))
	_, ok := l.get("huge")
	assert.False(t, ok, "a list larger than the cache")
	_, ok = l.get("small")
	assert.True(t, ok, "what the cache held before it")
}

// What callers' images leave in the caches, found or not, never evicts
// what images and repositories a FunctionConfig claims left there: they
// are kept apart, each part bounded on its own.
func TestUnclaimedEntriesDoNotEvictClaimedOnes(t *testing.T) {
	reg := testregistry.New(t)
	claimedImage, claimedRepo := reg.Host+"/fns/claimed:v1", reg.Host+"/fns/claimed"
	reg.Push(t, claimedImage, v1.Config{Entrypoint: []string{"/fn"}})
	for i := range 4 {
		reg.Push(t, fmt.Sprintf("%s/fns/found-%d:v1", reg.Host, i), v1.Config{Entrypoint: []string{"/fn"}})
	}
	for _, tc := range []struct {
		name  string
		count int
		flood func(ctx context.Context, r *Resolver, i int)
	}{
		{name: "images not found", count: 4, flood: func(ctx context.Context, r *Resolver, i int) {
			_, err := r.Resolve(ctx, fmt.Sprintf("%s/fns/missing-%d:v1", reg.Host, i))
			assertNotFound(t, err)
		}},
		{name: "images found", count: 4, flood: func(ctx context.Context, r *Resolver, i int) {
			_, err := r.Resolve(ctx, fmt.Sprintf("%s/fns/found-%d:v1", reg.Host, i))
			assert.NoError(t, err)
		}},
		{name: "tag lists not found", count: 40, flood: func(ctx context.Context, r *Resolver, i int) {
			_, err := r.Tags(ctx, fmt.Sprintf("%s/fns/missing-%d", reg.Host, i))
			assertNotFound(t, err)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Two entries a part of the metadata cache; some 5 KiB a part
			// of the tag-list cache.
			r := resolver(t, reg, Options{MaxEntries: 2, MaxTagListSize: 1 << 10})
			ctx := context.Background()
			_, err := r.Resolve(ctx, claimedImage, Claimed())
			require.NoError(t, err)
			_, err = r.Tags(ctx, claimedRepo, Claimed())
			require.NoError(t, err)
			for i := range tc.count {
				tc.flood(ctx, r, i)
			}
			requests := reg.Requests()
			_, err = r.Resolve(ctx, claimedImage, Claimed())
			require.NoError(t, err)
			_, err = r.Tags(ctx, claimedRepo, Claimed())
			require.NoError(t, err)
			assert.Equal(t, requests, reg.Requests(), "registry requests: the claimed entries were evicted")
		})
	}
}

// assertNotFound: err is the registry's "not found", which is cached.
func assertNotFound(t *testing.T, err error) {
	t.Helper()
	var re *RegistryError
	if assert.ErrorAs(t, err, &re) {
		assert.True(t, re.NotFound(), "%v", err)
	}
}

// The tag-list cache is sized from the tag lists' bound: the largest list
// allowed, at its costliest (tags of one byte, 17 bytes each for their 4
// in the JSON), is kept, at the default bound and at others.
func TestLargestTagListIsCached(t *testing.T) {
	for _, max := range []int64{DefaultMaxTagListSize, 6 << 20, 64 << 10} {
		t.Run(fmt.Sprint(max), func(t *testing.T) {
			r, err := New(Options{MaxTagListSize: max})
			require.NoError(t, err)
			key := "registry.example/" + strings.Repeat("r", 255)
			tags := make([]string, max/4)
			for i := range tags {
				tags[i] = "a"
			}
			r.tags[claimed].put(key, tagList{tags: tags})
			_, ok := r.tags[claimed].get(key)
			assert.True(t, ok, "the largest list, %d bytes in the cache", tagListCost(key, tagList{tags: tags}))
		})
	}
}

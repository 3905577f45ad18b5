package imagemeta

import (
	"container/list"
	"time"
)

// class is the part of the lookups and of the caches an image or a
// repository is looked up in: those a FunctionConfig claims (Claimed), and
// any other a caller names. Callers' images never take the claimed ones'
// places, nor evict their entries.
type class int

const (
	unclaimed class = iota
	claimed
	classes // the number of classes
)

// LookupOption configures one Resolve or Tags call.
type LookupOption func(*lookupOptions)

type lookupOptions struct {
	class class
}

// Claimed says that a FunctionConfig claims the image or repository. Its
// registry lookup may take any of Options.MaxLookups, not only the
// Options.MaxUnclaimedLookups that other lookups share, and its answer is
// cached apart from theirs, so that no caller's images evict it.
func Claimed() LookupOption {
	return func(o *lookupOptions) { o.class = claimed }
}

func classOf(opts []LookupOption) class {
	var o lookupOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o.class
}

// cached is what the cache knows of one image: its metadata, or (negative
// caching) that the registry does not have it or that it is over a bound.
type cached struct {
	meta Metadata
	err  error
	// expires: zero never (pinned by digest).
	expires time.Time
}

func (c cached) fresh(now time.Time) bool { return c.expires.IsZero() || now.Before(c.expires) }

// cachedCost is what an entry of the metadata cache holds, in bytes,
// roughly: its strings, their headers, and the entry's own.
func cachedCost(key string, c cached) int {
	n := 128 + len(key) + len(c.meta.Digest)
	for _, arg := range c.meta.Entrypoint {
		n += 16 + len(arg)
	}
	if c.err != nil {
		n += len(c.err.Error())
	}
	return n
}

// tagList is what the cache knows of one repository's tags: the list, or
// the registry's definite answer that there is none to have (not found,
// over a bound).
type tagList struct {
	tags    []string
	err     error
	expires time.Time
}

// tagListOverhead is what a tag list's entry costs besides its key and
// its tags.
const tagListOverhead = 64

// tagListCost is what a tag list holds, in bytes (each tag's string header
// and bytes, and the entry's), for the tag-list cache's bound.
func tagListCost(key string, l tagList) int {
	n := tagListOverhead + len(key)
	for _, t := range l.tags {
		n += 16 + len(t)
	}
	if l.err != nil {
		n += len(l.err.Error())
	}
	return n
}

// lru is a cache of at most maxEntries entries (0: no bound on their
// number) whose costs sum to at most maxCost; the least recently used go
// first. An entry that costs more than maxCost on its own is not kept. It
// is not safe for concurrent use (Resolver holds its lock).
type lru[V any] struct {
	maxEntries, maxCost, used int
	cost                      func(key string, v V) int
	order                     *list.List // front: most recently used; values are *lruEntry[V]
	byKey                     map[string]*list.Element
}

type lruEntry[V any] struct {
	key  string
	val  V
	cost int
}

// newLRU returns a cache of at most maxEntries entries (0: any number)
// whose costs, as cost says, sum to at most maxCost.
func newLRU[V any](maxEntries, maxCost int, cost func(key string, v V) int) *lru[V] {
	return &lru[V]{maxEntries: maxEntries, maxCost: maxCost, cost: cost, order: list.New(), byKey: map[string]*list.Element{}}
}

func (l *lru[V]) get(key string) (V, bool) {
	e, ok := l.byKey[key]
	if !ok {
		var zero V
		return zero, false
	}
	l.order.MoveToFront(e)
	return e.Value.(*lruEntry[V]).val, true
}

func (l *lru[V]) put(key string, val V) {
	l.remove(key)
	c := l.cost(key, val)
	if c > l.maxCost {
		return
	}
	l.byKey[key] = l.order.PushFront(&lruEntry[V]{key: key, val: val, cost: c})
	l.used += c
	for l.used > l.maxCost || (l.maxEntries > 0 && l.order.Len() > l.maxEntries) {
		l.remove(l.order.Back().Value.(*lruEntry[V]).key)
	}
}

func (l *lru[V]) remove(key string) {
	e, ok := l.byKey[key]
	if !ok {
		return
	}
	l.order.Remove(e)
	delete(l.byKey, key)
	l.used -= e.Value.(*lruEntry[V]).cost
}

func (l *lru[V]) len() int { return l.order.Len() }

package imagemeta

import (
	"container/list"
	"time"
)

// cached is what the cache knows of one image: its metadata, or (negative
// caching) that the registry does not have it.
type cached struct {
	meta Metadata
	err  error
	// expires: zero never (pinned by digest).
	expires time.Time
}

func (c cached) fresh(now time.Time) bool { return c.expires.IsZero() || now.Before(c.expires) }

// lru is a cache of at most max entries; the least recently used goes
// first. It is not safe for concurrent use (Resolver holds its lock).
type lru struct {
	max   int
	order *list.List // front: most recently used; values are *lruEntry
	byKey map[string]*list.Element
}

type lruEntry struct {
	key string
	val cached
}

func newLRU(max int) *lru {
	if max <= 0 {
		max = 1024
	}
	return &lru{max: max, order: list.New(), byKey: map[string]*list.Element{}}
}

func (l *lru) get(key string) (cached, bool) {
	e, ok := l.byKey[key]
	if !ok {
		return cached{}, false
	}
	l.order.MoveToFront(e)
	return e.Value.(*lruEntry).val, true
}

func (l *lru) put(key string, val cached) {
	if e, ok := l.byKey[key]; ok {
		e.Value.(*lruEntry).val = val
		l.order.MoveToFront(e)
		return
	}
	l.byKey[key] = l.order.PushFront(&lruEntry{key: key, val: val})
	for l.order.Len() > l.max {
		last := l.order.Back()
		l.order.Remove(last)
		delete(l.byKey, last.Value.(*lruEntry).key)
	}
}

func (l *lru) len() int { return l.order.Len() }

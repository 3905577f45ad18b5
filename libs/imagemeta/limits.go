package imagemeta

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// ErrTooLarge is wrapped by the error of a registry read past its bound: an
// answer larger than it may be, a lookup's answers larger together than its
// budget, a config blob whose manifest declares more, an index within an
// index, a tag list of more bytes or pages than allowed. Nothing past the
// bound is read.
var ErrTooLarge = errors.New("too large")

// The bounds of registry reads, by default. Decoded, JSON may take many
// times its bytes (an empty object 45 times): a lookup's JSON values are
// bounded too, and at these bounds the lookups in flight and the caches
// together hold MaxHeld at most, which the pod-manager fits into its
// container's memory beside its calls.
const (
	// DefaultMaxManifestSize bounds a manifest or image index, and every
	// other answer but a blob's (pings, tokens, errors). A function image's
	// manifest is a few KiB; the OCI distribution spec has registries
	// accept up to 4 MiB, which a flag may allow.
	DefaultMaxManifestSize = 1 << 20
	// DefaultMaxConfigSize bounds an image's config blob. A function image's
	// config (Entrypoint, Env, labels, one history entry a layer) is a few
	// KiB; 1 MiB is far above what docker, ko or buildpacks write.
	DefaultMaxConfigSize = 1 << 20
	// DefaultMaxTagListSize bounds the bytes of one repository's tag list,
	// all its pages together: some 8,000 tags of the longest (128 bytes),
	// 40,000 of 20. A catalog function has tens.
	DefaultMaxTagListSize = 1 << 20
	// DefaultMaxTagPages bounds the pages of one tag list (a registry
	// decides how many tags a page has, often 100 or 1,000): each is a
	// round trip within the lookup's minute.
	DefaultMaxTagPages = 64
	// DefaultTagListTTL is how long a tag list is reused.
	DefaultTagListTTL = 30 * time.Second
	// DefaultMaxLookups bounds the registry lookups in flight.
	DefaultMaxLookups = 8
	// metaCacheBytes bounds what each part of the metadata cache (claimed
	// images', the others') holds besides its entries' number: an
	// Entrypoint may be as long as its config blob allows.
	metaCacheBytes = 8 << 20
	// DefaultMaxImageValues bounds the JSON values (objects, arrays and
	// their elements) one image lookup's answers may hold together: an
	// index, a manifest and a config have tens to hundreds.
	DefaultMaxImageValues = 16 << 10
	// valueCost bounds what one JSON value costs decoded into
	// go-containerregistry's types, in a slice grown by doubling: its
	// largest element (a v1.Descriptor, 136 bytes) twice, and more.
	valueCost = 320
	// tagCost bounds what one tag of a list costs decoded: its 16-byte
	// string header twice (the slice grows by doubling) and its slice of
	// the last page's, in a list whose tags take 3 bytes each at least
	// ("",).
	tagCost = 48
	// headerFactor bounds what an answer's headers cost decoded, for
	// their bytes on the wire (measured 2026-12-02: 9-15 for distinct
	// empty headers).
	headerFactor = 16
)

// MaxHeld is the most memory the registry lookups in flight and the caches
// of a Resolver made with o may hold together, in bytes. An image lookup
// holds its answers' bytes, their strings decoded, at most
// DefaultMaxImageValues values and its headers; a tag list, its bytes,
// its tags' strings and their headers, a tag each 3 bytes at least.
func (o Options) MaxHeld() int64 {
	manifest := positive(o.MaxManifestSize, DefaultMaxManifestSize)
	config := positive(o.MaxConfigSize, DefaultMaxConfigSize)
	tagList := positive(o.MaxTagListSize, DefaultMaxTagListSize)
	lookups := int64(positive(o.MaxLookups, DefaultMaxLookups))
	headers := int64(headerFactor * MaxAnswerHeaderBytes)
	image := 2*imageBudget(manifest, config) + DefaultMaxImageValues*valueCost + headers
	tags := 2*tagList + tagList/3*tagCost + headers
	caches := int64(classes) * (int64(tagCacheBytes(tagList)) + metaCacheBytes)
	return lookups*max(image, tags) + caches
}

// imageBudget is what one image lookup may read, all its answers together
// (pings, tokens, an index, a manifest, a config blob, and their retries):
// two manifests (an index and the image's) and a config.
func imageBudget(maxManifest, maxConfig int64) int64 { return 2*maxManifest + maxConfig }

// tagCacheBytes bounds each part of the tag-list cache (claimed
// repositories', the others'): one list of maxTagList bytes at its
// costliest, or thousands of ordinary ones. A tag costs 16 bytes more than
// its own (tagListCost), and takes 3 more in the list's JSON ("v",): one
// of a single byte costs 17 for its 4, 4.25 times.
func tagCacheBytes(maxTagList int64) int {
	return int(maxTagList/4*17) + tagListOverhead + maxCachedKey
}

// maxCachedKey is the longest repository name whose largest list is
// still cached.
const maxCachedKey = 1 << 10

// cappedTransport bounds what next's answers may carry: a blob's
// (only config blobs are read) at maxBlob bytes, any other at maxOther.
// A request whose context carries a readBudget also charges that budget.
// An answer past its bound is refused before it is read when its
// Content-Length says so, and otherwise fails the read with ErrTooLarge.
type cappedTransport struct {
	next              http.RoundTripper
	maxBlob, maxOther int64
}

func (t *cappedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || req.Method == http.MethodHead {
		return resp, err
	}
	body := &cappedBody{ReadCloser: resp.Body, budget: budgetOf(req.Context())}
	body.max, body.what = t.bound(req)
	if left, max, what := body.left(); resp.ContentLength > left {
		resp.Body.Close()
		if left < max {
			return nil, fmt.Errorf("%s: %w: %d bytes, with %d of its %d left", what, ErrTooLarge, resp.ContentLength, left, max)
		}
		return nil, fmt.Errorf("%s: %w: %d bytes, more than %d", what, ErrTooLarge, resp.ContentLength, max)
	}
	resp.Body = body
	return resp, nil
}

// bound is the bound of req's answer, decided by the request that began
// its redirect chain: a blob's redirect goes wherever the registry keeps
// its blobs.
func (t *cappedTransport) bound(req *http.Request) (int64, string) {
	first := req
	for first.Response != nil && first.Response.Request != nil {
		first = first.Response.Request
	}
	if strings.Contains(first.URL.Path, "/blobs/") {
		return t.maxBlob, "config blob"
	}
	return t.maxOther, "registry answer"
}

// cappedBody fails a read past max bytes, or past its budget's, with
// ErrTooLarge. Bodies that share a budget may be read at once (a ping
// over https and one over http): each read takes its bytes from the
// budget before it reads, and gives back what it did not use.
type cappedBody struct {
	io.ReadCloser
	max, read int64
	what      string
	budget    *readBudget
	// err is the error of a read past a bound, returned by every read after.
	err error
	// inString and escaped follow the JSON read so far, for the values
	// its budget counts.
	inString, escaped bool
}

// left is how many more bytes may be read, as far as is known now, and
// the bound that says so.
func (b *cappedBody) left() (left, max int64, what string) {
	left, max, what = b.max-b.read, b.max, b.what
	if b.budget != nil {
		if bl := b.budget.left.Load(); bl < left {
			left, max, what = bl, b.budget.max, b.budget.what
		}
	}
	return left, max, what
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if len(p) == 0 {
		return b.ReadCloser.Read(p)
	}
	allowed, max, what := min(int64(len(p)), b.max-b.read), b.max, b.what
	if b.budget != nil {
		// Taken before the read, so that another body's read meanwhile
		// cannot take it too; what this read does not use is given back.
		if taken := b.budget.take(allowed); taken < allowed {
			allowed, max, what = taken, b.budget.max, b.budget.what
		}
	}
	// One byte more than allowed tells a body at its bound from one past
	// it; that byte is not returned.
	n, err := b.ReadCloser.Read(p[:min(int64(len(p)), allowed+1)])
	if int64(n) > allowed {
		n = int(allowed)
		b.err = fmt.Errorf("%s: %w: more than %d bytes", what, ErrTooLarge, max)
		err = b.err
	}
	b.read += int64(n)
	if b.budget != nil {
		b.budget.give(allowed - int64(n))
		if b.budget.maxValues > 0 && b.budget.values.Add(b.values(p[:n])) > b.budget.maxValues {
			b.err = fmt.Errorf("%s: %w: more than %d JSON values", b.budget.what, ErrTooLarge, b.budget.maxValues)
			return n, b.err
		}
	}
	return n, err
}

// values counts the JSON values that p, the next bytes of the answer,
// opens or adds: '{', '[' and ',' outside strings.
func (b *cappedBody) values(p []byte) int64 {
	var n int64
	for _, c := range p {
		switch {
		case b.escaped:
			b.escaped = false
		case b.inString:
			switch c {
			case '\\':
				b.escaped = true
			case '"':
				b.inString = false
			}
		case c == '"':
			b.inString = true
		case c == '{', c == '[', c == ',':
			n++
		}
	}
	return n
}

// readBudget is a bound shared by the answers of one lookup (an image's
// manifests and config, a tag list's pages, and their pings, tokens and
// retries), carried in their requests' context. Its bytes left never go
// below zero.
type readBudget struct {
	max  int64
	left atomic.Int64
	what string
	// maxValues, when set, bounds the JSON values the answers hold
	// together (objects, arrays, and the elements after the first of
	// each: '{', '[' and ',' outside strings), which cost more decoded
	// than their bytes.
	maxValues int64
	values    atomic.Int64
}

// take takes up to want bytes from the budget, and says how many.
func (b *readBudget) take(want int64) int64 {
	for {
		left := b.left.Load()
		got := min(want, left)
		if got <= 0 {
			return 0
		}
		if b.left.CompareAndSwap(left, left-got) {
			return got
		}
	}
}

// give gives back n bytes taken and not read.
func (b *readBudget) give(n int64) {
	if n > 0 {
		b.left.Add(n)
	}
}

type readBudgetKey struct{}

// withReadBudget returns ctx carrying a budget of max bytes, and of
// maxValues JSON values when set, for every registry answer read under it.
func withReadBudget(ctx context.Context, max, maxValues int64, what string) context.Context {
	b := &readBudget{max: max, maxValues: maxValues, what: what}
	b.left.Store(max)
	return context.WithValue(ctx, readBudgetKey{}, b)
}

func budgetOf(ctx context.Context) *readBudget {
	b, _ := ctx.Value(readBudgetKey{}).(*readBudget)
	return b
}

package imagemeta

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/tests/testregistry"
)

// A registry's answers are read no further than their bounds, at the
// defaults unless the case says otherwise: a manifest, a tag-list page, a
// tag list of many pages, and one that links to another page without end.
func TestRegistryAnswersAreBounded(t *testing.T) {
	const tagsPath = "/v2/fns/fn/tags/list"
	for _, tc := range []struct {
		name    string
		path    string
		handler http.Handler
		opts    Options
		tags    bool // list tags, rather than resolve the image
		message string
		// tagPages, when set, is how many pages the registry was asked for.
		tagPages int64
	}{
		{name: "an endless manifest", path: "/v2/fns/fn/manifests/v1",
			handler: testregistry.Endless("application/vnd.oci.image.manifest.v1+json", `{"schemaVersion":2,"annotations":{"a":"`, "a"),
			message: "more than 1048576 bytes"},
		{name: "a manifest that declares more than the bound", path: "/v2/fns/fn/manifests/v1",
			handler: testregistry.Declaring("application/vnd.oci.image.manifest.v1+json", DefaultMaxManifestSize+1), message: "1048577 bytes, more than 1048576"},
		{name: "a manifest over a bound set lower", path: "/v2/fns/fn/manifests/v1", opts: Options{MaxManifestSize: 1 << 10},
			handler: testregistry.Endless("application/vnd.oci.image.manifest.v1+json", `{"schemaVersion":2,"annotations":{"a":"`, "a"),
			message: "more than 1024 bytes"},
		{name: "an endless tag-list page", path: tagsPath, tags: true,
			handler: testregistry.Endless("application/json", `{"name":"fns/fn","tags":[`, `"v1.0.0",`),
			message: "tag list: too large: more than 1048576 bytes", tagPages: 1},
		{name: "tag-list pages over the list's bytes together", path: tagsPath, tags: true, opts: Options{MaxTagListSize: 64 << 10},
			handler: testregistry.LinkedPages(tagsPath, 40<<10), message: "more than 65536 bytes", tagPages: 2},
		{name: "tag-list pages without end", path: tagsPath, tags: true,
			handler: testregistry.LinkedPages(tagsPath, 8), message: "tag list: too large: more than 64 pages", tagPages: DefaultMaxTagPages},
		{name: "tag-list pages past a bound set lower", path: tagsPath, tags: true, opts: Options{MaxTagPages: 3},
			handler: testregistry.LinkedPages(tagsPath, 8), message: "more than 3 pages", tagPages: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := testregistry.New(t)
			reg.Serve(tc.path, tc.handler)
			r := resolver(t, reg, tc.opts)
			var err error
			if tc.tags {
				_, err = r.Tags(context.Background(), reg.Host+"/fns/fn")
			} else {
				_, err = r.Resolve(context.Background(), reg.Host+"/fns/fn:v1")
			}
			require.ErrorIs(t, err, ErrTooLarge)
			assert.ErrorContains(t, err, tc.message)
			if tc.tagPages > 0 {
				assert.Equal(t, tc.tagPages, reg.TagListRequests(), "tag-list pages asked for")
			}
			assert.Zero(t, r.flights.inFlight(), "lookups left in flight")
		})
	}
}

// An answer whose headers pass MaxAnswerHeaderBytes fails the lookup before
// any more of it is read.
func TestAnswerHeadersAreBounded(t *testing.T) {
	reg := testregistry.New(t)
	reg.Serve("/v2/fns/fn/manifests/v1", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for i := range 64 { // 64 × 8 KiB: twice the bound
			w.Header().Set(fmt.Sprintf("X-Pad-%d", i), strings.Repeat("a", 8<<10))
		}
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		_, _ = io.WriteString(w, `{"schemaVersion":2}`)
	}))
	r := resolver(t, reg, Options{})
	_, err := r.Resolve(context.Background(), reg.Host+"/fns/fn:v1")
	require.Error(t, err)
	assert.ErrorContains(t, err, "headers exceeded")
	assert.Zero(t, r.flights.inFlight(), "lookups left in flight")
}

// A config blob larger than the bound is never asked for, whether the
// image has one (pushed) or its manifest only says so; what the manifest
// declares is read no further than that. The refusal is remembered for
// the negative TTL, as "not found" is.
func TestConfigOverTheBoundIsNotFetched(t *testing.T) {
	reg := testregistry.New(t)
	big := reg.Push(t, reg.Host+"/fns/big:v1", v1.Config{Entrypoint: []string{"/fn"}, Env: []string{"BIG=" + strings.Repeat("x", DefaultMaxConfigSize)}})
	reg.Push(t, reg.Host+"/fns/small:v1", v1.Config{Entrypoint: []string{"/fn"}})
	reg.Serve("/v2/fns/lying/manifests/v1", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		fmt.Fprintf(w, `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",`+
			`"config":{"mediaType":"application/vnd.oci.image.config.v1+json","size":%d,"digest":"sha256:%s"},"layers":[]}`,
			int64(10)<<30, strings.Repeat("0", 64))
	}))
	r := resolver(t, reg, Options{})
	ctx := context.Background()

	for _, tc := range []struct{ image, message string }{
		{reg.Host + "/fns/big:v1", "config: too large: the manifest declares"},
		{reg.Host + "/fns/big@" + big.String(), "more than 1048576"},
		{reg.Host + "/fns/lying:v1", "declares 10737418240 bytes, more than 1048576"},
	} {
		t.Run(tc.image, func(t *testing.T) {
			blobs := reg.BlobRequests()
			_, err := r.Resolve(ctx, tc.image)
			require.ErrorIs(t, err, ErrTooLarge)
			assert.ErrorContains(t, err, tc.message)
			assert.Equal(t, blobs, reg.BlobRequests(), "blob requests")

			requests := reg.Requests()
			_, err = r.Resolve(ctx, tc.image)
			assert.ErrorIs(t, err, ErrTooLarge, "remembered")
			assert.Equal(t, requests, reg.Requests(), "the registry was asked again within the negative TTL")
		})
	}
	_, err := r.Resolve(ctx, reg.Host+"/fns/small:v1")
	require.NoError(t, err, "a config within the bound")

	// A bound set lower refuses the small one too.
	low := resolver(t, reg, Options{MaxConfigSize: 64})
	_, err = low.Resolve(ctx, reg.Host+"/fns/small:v1")
	assert.ErrorIs(t, err, ErrTooLarge)
}

// A config blob that goes on past the size its manifest declares is read
// no further than declared: the lookup fails and ends.
func TestConfigLongerThanDeclaredFails(t *testing.T) {
	reg := testregistry.New(t)
	image := reg.Host + "/fns/fn:v1"
	reg.Push(t, image, v1.Config{Entrypoint: []string{"/fn"}})
	ref, err := name.ParseReference(image)
	require.NoError(t, err)
	img, err := remote.Image(ref, remote.WithTransport(reg.Transport), remote.WithAuth(&authn.Basic{Username: testregistry.User, Password: testregistry.Password}))
	require.NoError(t, err)
	cfg, err := img.ConfigName()
	require.NoError(t, err)
	reg.Serve("/v2/fns/fn/blobs/"+cfg.String(), testregistry.Endless("application/octet-stream", `{"config":{"Entrypoint":["/fn"],"Env":["A=`, "a"))

	r := resolver(t, reg, Options{})
	_, err = r.Resolve(context.Background(), image)
	require.Error(t, err)
	assert.ErrorContains(t, err, "config")
	assert.Zero(t, r.flights.inFlight(), "lookups left in flight")
}

// The bound of an answer is its first request's: a blob's, redirected to
// wherever the registry keeps blobs, is a blob's; any other redirected
// there is not. A HEAD's is not read.
func TestBoundsFollowTheRedirectChain(t *testing.T) {
	const maxBlob, maxOther = 4 << 10, 1 << 10
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/storage/"):
			_, _ = w.Write(bytes.Repeat([]byte("b"), 2<<10))
		default:
			http.Redirect(w, r, "/storage/"+strings.ReplaceAll(r.URL.Path, "/", "_"), http.StatusTemporaryRedirect)
		}
	}))
	t.Cleanup(srv.Close)
	client := &http.Client{Transport: &cappedTransport{next: http.DefaultTransport, maxBlob: maxBlob, maxOther: maxOther}}
	for _, tc := range []struct {
		method, path string
		tooLarge     bool
	}{
		{http.MethodGet, "/v2/fns/fn/blobs/sha256:00", false},
		{http.MethodGet, "/v2/fns/fn/manifests/v1", true},
		{http.MethodGet, "/v2/fns/fn/tags/list", true},
		{http.MethodHead, "/v2/fns/fn/manifests/v1", false},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			require.NoError(t, err)
			resp, err := client.Do(req)
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			if tc.tooLarge {
				assert.ErrorIs(t, err, ErrTooLarge)
			} else {
				assert.NoError(t, err)
			}
		})
	}
}

// A tag list is reused for the tag-list TTL, then asked for again; its
// pages are followed; callers listing one repository at once make one
// listing, whether they join it in flight or find what it cached
// (TestFlightsShareOneLookup shows them joining).
func TestTagListsAreCachedPagedAndShared(t *testing.T) {
	reg := testregistry.New(t)
	repo := reg.Host + "/fns/fn"
	for _, tag := range []string{"v1.0.0", "v1.1.0", "v1.2.0", "v2.0.0", "v2.1.0"} {
		reg.Push(t, repo+":"+tag, v1.Config{Entrypoint: []string{"/fn"}})
	}
	r := resolver(t, reg, Options{TagListTTL: 30 * time.Second, TagPageSize: 2})
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	ctx := context.Background()

	tags, err := r.Tags(ctx, repo)
	require.NoError(t, err)
	assert.Equal(t, []string{"v1.0.0", "v1.1.0", "v1.2.0", "v2.0.0", "v2.1.0"}, tags)
	assert.Equal(t, int64(3), reg.TagListRequests(), "pages of two tags")

	reg.Push(t, repo+":v3.0.0", v1.Config{Entrypoint: []string{"/fn"}})
	tags, err = r.Tags(ctx, repo)
	require.NoError(t, err)
	assert.NotContains(t, tags, "v3.0.0", "within the TTL")
	assert.Equal(t, int64(3), reg.TagListRequests(), "within the TTL")

	now = now.Add(31 * time.Second)
	tags, err = r.Tags(ctx, repo)
	require.NoError(t, err)
	assert.Contains(t, tags, "v3.0.0", "after the TTL")

	// One listing for many callers at once.
	const callers = 50
	other := reg.Host + "/fns/other"
	reg.Serve("/v2/fns/other/tags/list", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"name":"fns/other","tags":["v1"]}`)
	}))
	before := reg.TagListRequests()
	results := make(chan error, callers)
	for range callers {
		go func() {
			tags, err := r.Tags(ctx, other)
			if err == nil && !assert.ObjectsAreEqual([]string{"v1"}, tags) {
				err = fmt.Errorf("tags %v", tags)
			}
			results <- err
		}()
	}
	for range callers {
		require.NoError(t, <-results)
	}
	assert.Equal(t, before+1, reg.TagListRequests(), "one listing for %d callers", callers)
}

// At most MaxLookups registry lookups are in flight. Past them, none is
// started and nothing is asked of the registry: the call fails with
// ErrTooManyLookups, or gets an image's expired metadata when there is
// some. (TestFlightsKeepPlacesForClaimedLookups shows that a caller that
// joins a lookup in flight is not refused.)
func TestLookupsInFlightAreBounded(t *testing.T) {
	reg := testregistry.New(t)
	for _, image := range []string{"/fns/fn:v1", "/fns/other:v1"} {
		reg.Push(t, reg.Host+image, v1.Config{Entrypoint: []string{"/fn"}})
	}
	entered, release := make(chan struct{}, 1), make(chan struct{})
	reg.Serve("/v2/fns/slow/manifests/v1", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		entered <- struct{}{}
		<-release
		http.NotFound(w, nil)
	}))
	r := resolver(t, reg, Options{MaxLookups: 1, TTL: time.Minute})
	refused := func() float64 { return testutil.ToFloat64(r.lookups.WithLabelValues(resultRefused)) }
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	ctx := context.Background()
	_, err := r.Resolve(ctx, reg.Host+"/fns/other:v1")
	require.NoError(t, err)
	now = now.Add(2 * time.Minute) // other's metadata expires

	slow := make(chan error, 1)
	go func() {
		_, err := r.Resolve(ctx, reg.Host+"/fns/slow:v1")
		slow <- err
	}()
	<-entered
	requests, refusedBefore := reg.Requests(), refused()

	_, err = r.Resolve(ctx, reg.Host+"/fns/fn:v1")
	require.ErrorIs(t, err, ErrTooManyLookups, "a second image")
	_, err = r.Tags(ctx, reg.Host+"/fns/fn")
	require.ErrorIs(t, err, ErrTooManyLookups, "a tag list")
	m, err := r.Resolve(ctx, reg.Host+"/fns/other:v1")
	require.NoError(t, err, "expired metadata served")
	assert.Equal(t, []string{"/fn"}, m.Entrypoint)
	assert.Equal(t, requests, reg.Requests(), "registry requests while the bound was reached")
	assert.Equal(t, refusedBefore+1, refused(), "lookups{result=refused}")

	close(release)
	var re *RegistryError
	require.ErrorAs(t, <-slow, &re)
	assert.True(t, re.NotFound())
	_, err = r.Resolve(ctx, reg.Host+"/fns/fn:v1")
	assert.NoError(t, err, "once the lookup in flight ended")
}

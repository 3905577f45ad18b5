package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/executortable"
	"github.com/fnrunner/fnrunner/libs/imagemeta"
	configpb "github.com/fnrunner/fnrunner/protos/configstream"
	"github.com/fnrunner/fnrunner/services/pod-manager/kube"
	"github.com/fnrunner/fnrunner/services/pod-manager/podcache"
	"github.com/fnrunner/fnrunner/services/pod-manager/templates"
	"github.com/fnrunner/fnrunner/tests/testregistry"
)

func testResolver(t *testing.T, reg *testregistry.Registry, opts imagemeta.Options) *imagemeta.Resolver {
	t.Helper()
	opts.DockerConfigPath = reg.DockerConfig(t, testregistry.User, testregistry.Password)
	opts.CAPaths = []string{reg.CAFile}
	opts.AllowedRegistries = []string{reg.Host}
	r, err := imagemeta.New(opts)
	require.NoError(t, err)
	return r
}

func testServer(tables *executortable.Tables, resolver Resolver, cache Cache, opts Options) *Server {
	tpl := &templates.Templates{Pod: templates.DefaultPodTemplate("ns", "wrapper"), Service: templates.DefaultServiceTemplate("ns")}
	opts.MaxParallelExecutions, opts.PreferredMaxQueueLength, opts.TTL = 1, 1, time.Minute
	opts.OverrideServiceAccounts = []string{"*"}
	return New(fixedTables{tables}, resolver, cache, func() *templates.Templates { return tpl }, NewConns(1<<20), opts)
}

// A call for an image no FunctionConfig claims, when unclaimed images are
// not run or not from there, is refused before anything is asked of any
// registry: not its tags, not its manifest. A repository a FunctionConfig
// claims has its tags listed, whatever the unclaimed-image rules.
func TestUnclaimedImagesAskNothingOfTheRegistry(t *testing.T) {
	reg := testregistry.New(t)
	prefix := reg.Host + "/fns"
	for _, image := range []string{"/fn:v1.0.0", "/claimed:v1.0.0"} {
		reg.Push(t, prefix+image, v1.Config{Entrypoint: []string{"/fn"}})
	}
	tables := executortable.Build(&configpb.Snapshot{DefaultImagePrefix: prefix, Functions: []*configpb.FunctionConfig{{
		Namespace: "ns", Name: "claimed", Image: "claimed", Pod: &configpb.PodExecutor{Tags: []string{"~1.0"}},
	}}})
	notRun := func(o *Options) { o.RunUnclaimed = false }
	elsewhere := func(o *Options) {
		o.RunUnclaimed, o.UnclaimedPrefixes = true, []string{"ghcr.io/kptdev/krm-functions-catalog"}
	}
	for _, tc := range []struct {
		name       string
		image, tag string
		opts       func(*Options)
		code       codes.Code
		message    string
		// asked: the registry is asked (for the claimed repository).
		asked bool
	}{
		{name: "not run: a tag", image: "fn:v1.0.0", opts: notRun, code: codes.NotFound, message: `function "fn:v1.0.0" not found`},
		{name: "not run: a tag constraint", image: "fn", tag: "~1.0", opts: notRun, code: codes.NotFound, message: `function "fn" not found`},
		{name: "not run: an exact tag field", image: "fn", tag: "v1.0.0", opts: notRun, code: codes.NotFound},
		{name: "not run: a digest", image: "fn@sha256:" + strings.Repeat("1", 64), opts: notRun, code: codes.NotFound},
		{name: "not run: a registry of the caller's", image: "127.0.0.2:5000/fns/fn", tag: ">= 0", opts: notRun, code: codes.NotFound},
		{name: "outside --allowed-unclaimed-images: a tag", image: "fn:v1.0.0", opts: elsewhere, code: codes.PermissionDenied, message: "--allowed-unclaimed-images"},
		{name: "outside --allowed-unclaimed-images: a tag constraint", image: "fn", tag: "~1.0", opts: elsewhere, code: codes.PermissionDenied, message: "--allowed-unclaimed-images"},
		{name: "outside --allowed-unclaimed-images: a path out of the prefix", image: "ghcr.io/kptdev/krm-functions-catalog/../fn", tag: "~1.0", opts: elsewhere,
			code: codes.InvalidArgument},
		{name: "claimed: the constraint is resolved from the registry", image: "claimed", tag: "~1.0", opts: notRun,
			code: codes.Unavailable, message: "no pods here", asked: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{}
			tc.opts(&opts)
			pods := &recordingPods{}
			s := testServer(tables, testResolver(t, reg, imagemeta.Options{}), pods, opts)
			before := reg.Requests()
			_, err := s.EvaluateFunction(context.Background(), &evalwire.Request{Image: tc.image, Tag: tc.tag})
			require.Error(t, err)
			assert.Equal(t, tc.code, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), tc.message)
			if tc.asked {
				assert.Greater(t, reg.Requests(), before, "registry requests")
				assert.Len(t, pods.images, 1, "pods asked for")
			} else {
				assert.Equal(t, before, reg.Requests(), "registry requests")
				assert.Empty(t, pods.images, "pods asked for")
			}
		})
	}
}

// What a registry answers is read within its bounds, and past them the
// call is refused with ResourceExhausted, nothing run: huge or endless tag
// pages, tag lists without end, a config blob larger than the bound (none
// asked for), a manifest that declares one. So is a call that needs a
// registry lookup while --max-registry-lookups are in flight.
func TestRegistryBoundsAreResourceExhausted(t *testing.T) {
	reg := testregistry.New(t)
	prefix := reg.Host + "/fns"
	reg.Push(t, prefix+"/big-config:v1", v1.Config{Entrypoint: []string{"/fn"}, Env: []string{"BIG=" + strings.Repeat("x", imagemeta.DefaultMaxConfigSize)}})
	reg.Push(t, prefix+"/endless-tags:v1", v1.Config{Entrypoint: []string{"/fn"}})
	reg.Push(t, prefix+"/linked-tags:v1", v1.Config{Entrypoint: []string{"/fn"}})
	reg.Serve("/v2/fns/endless-tags/tags/list", testregistry.Endless("application/json", `{"name":"fns/endless-tags","tags":[`, `"v1.0.0",`))
	reg.Serve("/v2/fns/linked-tags/tags/list", testregistry.LinkedPages("/v2/fns/linked-tags/tags/list", 16))
	reg.Serve("/v2/fns/lying/manifests/v1", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		fmt.Fprintf(w, `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",`+
			`"config":{"mediaType":"application/vnd.oci.image.config.v1+json","size":%d,"digest":"sha256:%s"},"layers":[]}`,
			int64(1)<<40, strings.Repeat("0", 64))
	}))
	reg.Serve("/v2/fns/huge-manifest/manifests/v1", testregistry.Endless("application/vnd.oci.image.manifest.v1+json", `{"schemaVersion":2,"annotations":{"a":"`, "a"))
	tables := executortable.Build(&configpb.Snapshot{DefaultImagePrefix: prefix})
	for _, tc := range []struct {
		name, image, tag string
		message          string
	}{
		{name: "an endless tag-list page", image: "endless-tags", tag: "~1.0", message: "tag list: too large: more than 1048576 bytes"},
		{name: "tag-list pages without end", image: "linked-tags", tag: "~1.0", message: "tag list: too large: more than 64 pages"},
		{name: "a config blob over the bound", image: "big-config:v1", message: "config: too large: the manifest declares"},
		{name: "a manifest declaring a config of 1 TiB", image: "lying:v1", message: "declares 1099511627776 bytes, more than 1048576"},
		{name: "an endless manifest", image: "huge-manifest:v1", message: "too large: more than 1048576 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testServer(tables, testResolver(t, reg, imagemeta.Options{}), noPods{}, Options{RunUnclaimed: true})
			blobs := reg.BlobRequests()
			_, err := s.EvaluateFunction(context.Background(), &evalwire.Request{Image: tc.image, Tag: tc.tag})
			require.Error(t, err)
			assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), tc.message)
			assert.Contains(t, status.Convert(err).Message(), "the function was not run")
			assert.Equal(t, blobs, reg.BlobRequests(), "config blobs asked for")
		})
	}

	t.Run("too many lookups in flight", func(t *testing.T) {
		entered, release := make(chan struct{}, 1), make(chan struct{})
		reg.Serve("/v2/fns/slow/manifests/v1", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			entered <- struct{}{}
			<-release
			http.NotFound(w, nil)
		}))
		s := testServer(tables, testResolver(t, reg, imagemeta.Options{MaxLookups: 1}), noPods{}, Options{RunUnclaimed: true})
		slow := make(chan error, 1)
		go func() {
			_, err := s.EvaluateFunction(context.Background(), &evalwire.Request{Image: "slow:v1"})
			slow <- err
		}()
		<-entered
		before := reg.Requests()
		for _, req := range []*evalwire.Request{{Image: "endless-tags:v1"}, {Image: "linked-tags", Tag: "~1.0"}} {
			_, err := s.EvaluateFunction(context.Background(), req)
			assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), "--max-registry-lookups")
		}
		assert.Equal(t, before, reg.Requests(), "registry requests past the bound")
		close(release)
		assert.Equal(t, codes.NotFound, status.Code(<-slow))
	})
}

// recordingPods is a pod cache that records the images it is asked for
// pods of, and has none.
type recordingPods struct {
	mu     sync.Mutex
	images []string
}

func (p *recordingPods) Acquire(_ context.Context, f podcache.Function) (*podcache.Lease, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.images = append(p.images, f.Spec.(*kube.Spec).Image)
	return nil, fmt.Errorf("no pods here")
}

func (*recordingPods) PodFailed(string, error) {}

// Warm-up resolves its images a few at a time, so that more FunctionConfigs
// than --max-registry-lookups all get their pod asked for.
func TestWarmUpStaysWithinTheLookupBound(t *testing.T) {
	reg := testregistry.New(t)
	prefix := reg.Host + "/fns"
	var fcs []*configpb.FunctionConfig
	var want []string
	for i := range 3 * warmUpLookups {
		name := fmt.Sprintf("fn-%02d", i)
		digest := reg.Push(t, prefix+"/"+name+":v1", v1.Config{Entrypoint: []string{"/fn"}})
		fcs = append(fcs, &configpb.FunctionConfig{Namespace: "ns", Name: name, Image: name, Pod: &configpb.PodExecutor{Tags: []string{"v1"}}})
		want = append(want, prefix+"/"+name+"@"+digest.String())
	}
	tables := executortable.Build(&configpb.Snapshot{DefaultImagePrefix: prefix, Functions: fcs})
	pods := &recordingPods{}
	s := testServer(tables, testResolver(t, reg, imagemeta.Options{MaxLookups: warmUpLookups}), pods, Options{})
	s.WarmUp(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil)), time.Minute)
	slices.Sort(pods.images)
	assert.Equal(t, want, pods.images)
}

// Lookups for images no FunctionConfig claims take at most their share of
// --max-registry-lookups: callers' images on a slow registry of theirs
// never leave claimed images without a lookup, for their metadata or for
// their tags. A lookup whose callers have all gone ends: its request to
// the registry is cancelled, rather than left to run out its minute.
func TestClaimedImagesKeepTheirLookups(t *testing.T) {
	reg := testregistry.New(t)
	prefix := reg.Host + "/fns"
	digest := reg.Push(t, prefix+"/claimed:v1.0.0", v1.Config{Entrypoint: []string{"/fn"}})
	reg.Push(t, prefix+"/unclaimed:v1", v1.Config{Entrypoint: []string{"/fn"}})
	entered, gone := make(chan struct{}, 1), make(chan struct{})
	reg.Serve("/v2/fns/slow/manifests/v1", http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-r.Context().Done()
		close(gone)
	}))
	tables := executortable.Build(&configpb.Snapshot{DefaultImagePrefix: prefix, Functions: []*configpb.FunctionConfig{{
		Namespace: "ns", Name: "claimed", Image: "claimed", Pod: &configpb.PodExecutor{Tags: []string{"v1.0.0", "~1.0"}},
	}}})
	pods := &recordingPods{}
	s := testServer(tables, testResolver(t, reg, imagemeta.Options{MaxLookups: 2, MaxUnclaimedLookups: 1}), pods, Options{RunUnclaimed: true})

	ctx, cancel := context.WithCancel(context.Background())
	slow := make(chan error, 1)
	go func() {
		_, err := s.EvaluateFunction(ctx, &evalwire.Request{Image: "slow:v1"})
		slow <- err
	}()
	<-entered // the unclaimed images' share is taken

	before := reg.Requests()
	_, err := s.EvaluateFunction(context.Background(), &evalwire.Request{Image: "unclaimed:v1"})
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "another unclaimed image: %v", err)
	assert.Equal(t, before, reg.Requests(), "registry requests past the unclaimed images' share")

	for _, req := range []*evalwire.Request{{Image: "claimed:v1.0.0"}, {Image: "claimed", Tag: "~1.0"}} {
		_, err := s.EvaluateFunction(context.Background(), req)
		assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
		assert.Contains(t, status.Convert(err).Message(), "no pods here", "a claimed image %s %s was looked up", req.Image, req.Tag)
	}
	assert.Equal(t, []string{prefix + "/claimed@" + digest.String(), prefix + "/claimed@" + digest.String()}, pods.images)

	cancel()
	assert.Equal(t, codes.Canceled, status.Code(<-slow))
	<-gone // the slow lookup's request ended with its only caller
}

// lockedBuffer is a log's output, written by many goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Warm-up's lookups stay within --max-registry-lookups when they fail as
// when they succeed: each of many images the registry does not have is
// looked up, none refused for too many lookups.
func TestWarmUpStaysWithinTheLookupBoundWhenLookupsFail(t *testing.T) {
	reg := testregistry.New(t)
	prefix := reg.Host + "/fns"
	var fcs []*configpb.FunctionConfig
	for i := range 3 * warmUpLookups {
		name := fmt.Sprintf("missing-%02d", i)
		fcs = append(fcs, &configpb.FunctionConfig{Namespace: "ns", Name: name, Image: name, Pod: &configpb.PodExecutor{Tags: []string{"v1"}}})
	}
	tables := executortable.Build(&configpb.Snapshot{DefaultImagePrefix: prefix, Functions: fcs})
	const lookups = 2
	s := testServer(tables, testResolver(t, reg, imagemeta.Options{MaxLookups: lookups}), noPods{}, Options{MaxRegistryLookups: lookups})
	var logged lockedBuffer
	s.WarmUp(context.Background(), slog.New(slog.NewTextHandler(&logged, nil)), time.Minute)
	assert.Equal(t, 3*warmUpLookups, strings.Count(logged.String(), "warm-up failed"), "%s", logged.String())
	assert.Equal(t, 3*warmUpLookups, strings.Count(logged.String(), "registry answered 404"), "lookups that reached the registry")
	assert.NotContains(t, logged.String(), "too many registry lookups")
}

// When a lookup runs out of its minute, the call is Unavailable (the
// registry was slow; it may be asked again), not DeadlineExceeded: that
// is the call's own deadline.
func TestLookupTimeoutIsUnavailable(t *testing.T) {
	timedOut := fmt.Errorf("%w: image %q: %w", imagemeta.ErrLookupTimeout, "fn:v1", context.DeadlineExceeded)
	for _, tc := range []struct {
		name string
		err  error
		code codes.Code
	}{
		{name: "the lookup's minute", err: fmt.Errorf("function %q: resolving the image: %w", "fn:v1", timedOut), code: codes.Unavailable},
		{name: "the call's deadline", err: fmt.Errorf("image %q: waiting for the registry: %w", "fn:v1", context.DeadlineExceeded), code: codes.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.code, status.Code(toStatus(tc.err)))
		})
	}
}

// Package imagemeta resolves a function image's digest and entrypoint from
// its registry with go-containerregistry: Entrypoint, else Cmd, of the
// linux/amd64 image, and lists a repository's tags. Results are cached for a
// TTL (a tag can move), except for references pinned by digest, which never
// change. Private registries: credentials from a dockerconfigjson file, and
// extra CA certificates added to the system roots.
//
// Every registry read is bounded: each answer in bytes (ErrTooLarge), an
// image lookup's answers together, a tag list in bytes and pages, and the
// lookups in flight in number (ErrTooManyLookups), with places kept for
// images a FunctionConfig claims (Claimed). A lookup ends after a minute
// (ErrLookupTimeout), or once no caller waits for it.
package imagemeta

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/fnrunner/fnrunner/libs/telemetry"
)

// Metadata is what the pod-manager needs to know about an image.
type Metadata struct {
	// Digest of what the reference names now ("sha256:…"); pods pull image@digest.
	Digest string
	// Entrypoint is the image's Entrypoint, else its Cmd.
	Entrypoint []string
}

// Options configure a Resolver.
type Options struct {
	// DockerConfigPath is a dockerconfigjson file with registry credentials
	// ("" = anonymous). It is read again when it changes (a mounted Secret
	// that is updated).
	DockerConfigPath string
	// CAPaths are PEM files or directories of them (ca.crt, ca.pem, *.crt,
	// *.pem) whose certificates are trusted besides the system roots.
	CAPaths []string
	// AllowedRegistries are registries (host or host:port) that may be
	// dialled at private or loopback addresses: in-cluster registries sit
	// on private ClusterIPs. Every other registry must resolve to public
	// addresses; link-local ones (cloud metadata) are never dialled.
	AllowedRegistries []string
	// Proxy is the HTTP(S) or SOCKS5 proxy registries are reached through
	// (nil: none; HTTPS_PROXY, HTTP_PROXY and NO_PROXY in the environment
	// are ignored). The proxy may be at any address but a link-local one;
	// each registry's own addresses are checked as without it, and the
	// proxy is asked to connect to the address checked (CONNECT ip:port),
	// never to the name, so it resolves nothing again. A registry on plain
	// http is reached through a CONNECT tunnel too.
	Proxy *url.URL
	// NoProxy are registries reached without Proxy, in NO_PROXY syntax:
	// hosts (with their subdomains), host:port, .suffix or *.suffix
	// (subdomains only), IP addresses, CIDR ranges, "*" for all.
	// localhost and loopback addresses never go through the proxy.
	NoProxy []string
	// TTL is how long a tag's metadata is reused (0 = 5 minutes).
	TTL time.Duration
	// NegativeTTL is how long "no such image" is remembered (0 = 30 s).
	NegativeTTL time.Duration
	// MaxEntries bounds each part of the metadata cache (claimed images',
	// the others'), least recently used first out (0 = 1024). So does 8
	// MiB of their metadata, each part.
	MaxEntries int
	// Platform to resolve in multi-platform images (default linux/amd64).
	Platform v1.Platform

	// MaxManifestSize bounds a manifest, and every registry answer but a
	// blob's (0 = DefaultMaxManifestSize).
	MaxManifestSize int64
	// MaxConfigSize bounds an image's config blob (0 =
	// DefaultMaxConfigSize): a manifest that declares a larger one is
	// refused before the blob is asked for.
	MaxConfigSize int64
	// MaxTagListSize bounds a tag list's bytes, all pages together (0 =
	// DefaultMaxTagListSize).
	MaxTagListSize int64
	// MaxTagPages bounds a tag list's pages (0 = DefaultMaxTagPages).
	MaxTagPages int
	// TagPageSize is the tags asked for a page (0: as many as the registry
	// gives without asking).
	TagPageSize int
	// TagListTTL is how long a repository's tag list is reused (0 =
	// DefaultTagListTTL).
	TagListTTL time.Duration
	// MaxLookups bounds the registry lookups in flight, image metadata and
	// tag lists together (0 = DefaultMaxLookups). Each runs apart from its
	// callers for up to a minute, and ends when none waits for it any more;
	// past the bound, a lookup is not started and the call fails with
	// ErrTooManyLookups (or, for an image whose metadata expired, gets that
	// metadata).
	MaxLookups int
	// MaxUnclaimedLookups bounds, of MaxLookups, those for images and
	// repositories not Claimed (0 = half of MaxLookups, at least one; at
	// most MaxLookups). The rest are kept for claimed ones.
	MaxUnclaimedLookups int
}

// Resolver resolves and caches image metadata. Concurrent lookups of one
// image share one registry request; when the registry fails, an expired
// entry is served rather than nothing. It is safe for concurrent use.
type Resolver struct {
	keychain authn.Keychain
	// transport dials registries; every registry request goes through
	// capped, which bounds the answers.
	transport   http.RoundTripper
	ttl         time.Duration
	negTTL      time.Duration
	tagTTL      time.Duration
	platform    v1.Platform
	maxManifest int64
	maxConfig   int64
	maxTagList  int64
	maxTagPages int
	tagPageSize int
	now         func() time.Time
	flights     *flights

	mu sync.Mutex
	// cache and tags have a part for each class.
	cache [classes]*lru[cached]
	tags  [classes]*lru[tagList]

	lookups  *prometheus.CounterVec
	registry *prometheus.HistogramVec
}

// The results of Resolve, as fnrunner_image_metadata_lookups_total counts them.
const (
	resultHit      = "hit"      // fresh metadata from the cache
	resultNegative = "negative" // "no such image" from the cache
	resultMiss     = "miss"     // metadata from the registry
	resultStale    = "stale"    // the registry failed or was not asked (too many lookups); expired metadata served
	resultRefused  = "refused"  // too many lookups in flight: not asked, nothing cached
	resultError    = "error"    // an error, from the registry or waiting for it
)

// New returns a Resolver.
func New(opts Options) (*Resolver, error) {
	maxLookups := positive(opts.MaxLookups, DefaultMaxLookups)
	r := &Resolver{
		keychain:    authn.NewMultiKeychain(), // anonymous
		ttl:         opts.TTL,
		negTTL:      opts.NegativeTTL,
		tagTTL:      positive(opts.TagListTTL, DefaultTagListTTL),
		platform:    opts.Platform,
		maxManifest: positive(opts.MaxManifestSize, DefaultMaxManifestSize),
		maxConfig:   positive(opts.MaxConfigSize, DefaultMaxConfigSize),
		maxTagList:  positive(opts.MaxTagListSize, DefaultMaxTagListSize),
		maxTagPages: positive(opts.MaxTagPages, DefaultMaxTagPages),
		tagPageSize: max(opts.TagPageSize, 0),
		now:         time.Now,
		flights:     newFlights(maxLookups, positive(opts.MaxUnclaimedLookups, max(1, maxLookups/2))),
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fnrunner_image_metadata_lookups_total",
			Help: "Image metadata lookups by result: hit (fresh in the cache), negative (cached as not found or over a bound), miss (asked the registry), stale (the registry failed or too many lookups were in flight, an expired entry served), refused (too many lookups in flight, the registry not asked), error.",
		}, []string{"result"}),
		registry: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fnrunner_registry_request_duration_seconds",
			Help:    "Time of registry requests (an image's manifest and config, or a repository's tags), by outcome: ok or error.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"outcome"}),
	}
	for _, res := range []string{resultHit, resultNegative, resultMiss, resultStale, resultRefused, resultError} {
		r.lookups.WithLabelValues(res)
	}
	for c := range classes {
		r.cache[c] = newLRU(positive(opts.MaxEntries, 1024), metaCacheBytes, cachedCost)
		r.tags[c] = newLRU(0, tagCacheBytes(r.maxTagList), tagListCost)
	}
	if r.ttl <= 0 {
		r.ttl = 5 * time.Minute
	}
	if r.negTTL <= 0 {
		r.negTTL = 30 * time.Second
	}
	if r.platform.OS == "" {
		r.platform = v1.Platform{OS: "linux", Architecture: "amd64"}
	}
	if opts.DockerConfigPath != "" {
		kc, err := newFileKeychain(opts.DockerConfigPath)
		if err != nil {
			return nil, err
		}
		r.keychain = kc
	}
	if opts.Proxy != nil {
		if err := checkProxyURL(opts.Proxy); err != nil {
			return nil, err
		}
	}
	guard := newDialGuard(opts.AllowedRegistries, opts.Proxy, opts.NoProxy...)
	tr := registryTransport(guard)
	if len(opts.CAPaths) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		n, err := addCAs(pool, opts.CAPaths)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, fmt.Errorf("no CA certificates found in %v", opts.CAPaths)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		guard.proxyTLS = tr.TLSClientConfig
	}
	r.transport = tr
	return r, nil
}

// positive is v, or def when v is not above zero.
func positive[T int | int64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// capped is r's transport with every answer bounded.
func (r *Resolver) capped() http.RoundTripper {
	return &cappedTransport{next: r.transport, maxBlob: r.maxConfig, maxOther: r.maxManifest}
}

// registryTransport is go-containerregistry's default transport dialling
// through g, which also opens g's proxy tunnels: the transport's own Proxy
// is never used, as it would ask the proxy for the name, not the address g
// checked. So are the environment's proxy settings never used. An answer's
// headers are bounded at MaxAnswerHeaderBytes (net/http's default is 10
// MiB), outside the bodies' bounds.
func registryTransport(g *dialGuard) *http.Transport {
	tr := remote.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = g.DialContext
	tr.Proxy = nil
	tr.MaxResponseHeaderBytes = MaxAnswerHeaderBytes
	return tr
}

// MaxAnswerHeaderBytes bounds the headers of a registry's answer: a
// registry sends a few (the digest, the content type, a tag list's Link, a
// challenge), a few KiB at most.
const MaxAnswerHeaderBytes = 64 << 10

// ParseProxyURL parses a proxy URL for Options.Proxy: "" is none (nil);
// the scheme must be one the transport dials (http, https, socks5,
// socks5h), with a host.
func ParseProxyURL(s string) (*url.URL, error) {
	if s == "" {
		return nil, nil
	}
	u, err := url.Parse(s)
	var ue *url.Error
	if errors.As(err, &ue) {
		// Not ue itself: it quotes the URL, and with it any password.
		err = ue.Err
	}
	if err != nil {
		return nil, fmt.Errorf("registry proxy: not a URL: %w", err)
	}
	if err := checkProxyURL(u); err != nil {
		return nil, err
	}
	return u, nil
}

// checkProxyURL refuses a proxy URL the transport cannot use.
func checkProxyURL(u *url.URL) error {
	switch u.Scheme {
	case "http", "https", "socks5", "socks5h":
	default:
		return fmt.Errorf("registry proxy %q: the scheme must be http, https, socks5 or socks5h", u.Redacted())
	}
	if u.Hostname() == "" {
		return fmt.Errorf("registry proxy %q: no host", u.Redacted())
	}
	return nil
}

// Collectors export the cache's and the registry's metrics:
// fnrunner_image_metadata_lookups_total{result} and
// fnrunner_registry_request_duration_seconds{outcome}.
func (r *Resolver) Collectors() []prometheus.Collector {
	return []prometheus.Collector{r.lookups, r.registry}
}

// observeRegistry records one registry request that began at start.
func (r *Resolver) observeRegistry(start time.Time, err error) {
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	r.registry.WithLabelValues(outcome).Observe(time.Since(start).Seconds())
}

// ErrNoEntrypoint means the image has neither Entrypoint nor Cmd, so there
// is nothing to run in a function pod.
var ErrNoEntrypoint = errors.New("the image has neither Entrypoint nor Cmd")

// RegistryError is a registry's refusal, without the body it came with (a
// registry's error body is the registry's, not the caller's to read).
type RegistryError struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Codes are the distribution error codes (MANIFEST_UNKNOWN, ...).
	Codes []transport.ErrorCode
}

func (e *RegistryError) Error() string {
	if len(e.Codes) == 0 {
		return fmt.Sprintf("registry answered %d %s", e.StatusCode, http.StatusText(e.StatusCode))
	}
	codes := make([]string, len(e.Codes))
	for i, c := range e.Codes {
		codes[i] = string(c)
	}
	return fmt.Sprintf("registry answered %d %s", e.StatusCode, strings.Join(codes, ", "))
}

// NotFound: the registry does not have the repository or the reference.
func (e *RegistryError) NotFound() bool {
	for _, c := range e.Codes {
		if c == transport.ManifestUnknownErrorCode || c == transport.NameUnknownErrorCode || c == transport.BlobUnknownErrorCode {
			return true
		}
	}
	return e.StatusCode == http.StatusNotFound
}

// Denied: the registry refused the credentials (or their absence).
func (e *RegistryError) Denied() bool {
	for _, c := range e.Codes {
		if c == transport.UnauthorizedErrorCode || c == transport.DeniedErrorCode {
			return true
		}
	}
	return e.StatusCode == http.StatusUnauthorized || e.StatusCode == http.StatusForbidden
}

// clean takes the registry's body out of err: go-containerregistry's
// transport.Error says what the registry's body said, which is the
// registry's, not the caller's to read. Its place is taken by a
// RegistryError (status and error codes), which errors.As finds; the rest
// of err's text (a TLS failure beside it, say) stays.
func clean(err error) error {
	var te *transport.Error
	if !errors.As(err, &te) {
		return err
	}
	re := &RegistryError{StatusCode: te.StatusCode}
	for _, d := range te.Errors {
		re.Codes = append(re.Codes, d.Code)
	}
	msg := re.Error()
	if full, raw := err.Error(), te.Error(); strings.Contains(full, raw) {
		msg = strings.ReplaceAll(full, raw, re.Error())
	}
	return &cleanedError{msg: msg, registry: re}
}

// cleanedError is an error whose registry body clean took out.
type cleanedError struct {
	msg      string
	registry *RegistryError
}

func (e *cleanedError) Error() string { return e.msg }
func (e *cleanedError) Unwrap() error { return e.registry }

// lookup counts a lookup's result and names it on the call's span.
func (r *Resolver) lookup(ctx context.Context, result string) {
	r.lookups.WithLabelValues(result).Inc()
	trace.SpanFromContext(ctx).SetAttributes(telemetry.AttrCache.String(result))
}

// Resolve returns the image's metadata, from the cache while it is fresh.
func (r *Resolver) Resolve(ctx context.Context, image string, opts ...LookupOption) (Metadata, error) {
	cl := classOf(opts)
	c, ok := r.cached(cl, image)
	if ok && c.fresh(r.now()) {
		if c.err != nil {
			r.lookup(ctx, resultNegative)
		} else {
			r.lookup(ctx, resultHit)
		}
		return c.meta, c.err
	}
	ref, err := name.ParseReference(image, name.StrictValidation)
	if err != nil {
		r.lookup(ctx, resultError)
		return Metadata{}, fmt.Errorf("image %q: %w", image, err)
	}
	// One registry lookup per image at a time; the others wait for it,
	// each no longer than its own context.
	asked := time.Now()
	defer func() {
		trace.SpanFromContext(ctx).SetAttributes(telemetry.AttrRegistrySecs.Float64(time.Since(asked).Seconds()))
	}()
	val, err := r.flights.do(ctx, "image "+image, cl == claimed, func(fctx context.Context) (any, error) {
		// A lookup that ended since this caller looked has cached its answer.
		if c, ok := r.cached(cl, image); ok && c.fresh(r.now()) {
			return c.meta, c.err
		}
		return r.fetch(fctx, cl, image, ref)
	})
	if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
		r.lookup(ctx, resultError)
		return Metadata{}, fmt.Errorf("image %q: waiting for the registry: %w", image, err)
	}
	if err == nil {
		r.lookup(ctx, resultMiss)
		return val.(Metadata), nil
	}
	var re *RegistryError
	switch {
	case errors.As(err, &re) && re.NotFound(), errors.Is(err, ErrTooLarge):
		// The registry's answer, the same when asked again soon.
		r.store(cl, image, cached{err: err, expires: r.now().Add(r.negTTL)})
	case ok && c.err == nil:
		// The registry failed (down, throttling) or was not asked (too
		// many lookups): what it said last is better than nothing.
		r.lookup(ctx, resultStale)
		return c.meta, nil
	case errors.Is(err, ErrTooManyLookups):
		r.lookup(ctx, resultRefused)
		return Metadata{}, fmt.Errorf("image %q: %w", image, err)
	}
	r.lookup(ctx, resultError)
	return Metadata{}, err
}

// fetch asks the registry for image's metadata, and caches it in cl's part.
// All the answers of the lookup together are read within imageBudget.
func (r *Resolver) fetch(ctx context.Context, cl class, image string, ref name.Reference) (Metadata, error) {
	ctx = withReadBudget(ctx, imageBudget(r.maxManifest, r.maxConfig), DefaultMaxImageValues, "image lookup")
	opts := []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(r.keychain),
		remote.WithTransport(r.capped()),
		remote.WithPlatform(r.platform),
	}
	start := time.Now()
	desc, cfg, err := r.get(ctx, ref, opts)
	r.observeRegistry(start, err)
	if err != nil {
		return Metadata{}, fmt.Errorf("image %q: %w", image, err)
	}
	meta := Metadata{Digest: desc.Digest.String(), Entrypoint: cfg.Config.Entrypoint}
	if len(meta.Entrypoint) == 0 {
		meta.Entrypoint = cfg.Config.Cmd
	}
	if len(meta.Entrypoint) == 0 {
		return Metadata{}, fmt.Errorf("image %q: %w", image, ErrNoEntrypoint)
	}
	entry := cached{meta: meta}
	if _, pinned := ref.(name.Digest); !pinned {
		entry.expires = r.now().Add(r.ttl)
	}
	r.store(cl, image, entry)
	return meta, nil
}

// get asks the registry for ref's manifest and config: for an index, its
// image for r.platform's. The config is asked for only when its manifest
// declares it within r.maxConfig, and go-containerregistry reads no more
// of it than declared. The descriptor is ref's own (an index's, when it
// names one): pods pull what ref names.
func (r *Resolver) get(ctx context.Context, ref name.Reference, opts []remote.Option) (*remote.Descriptor, *v1.ConfigFile, error) {
	puller, err := remote.NewPuller(opts...)
	if err != nil {
		return nil, nil, err
	}
	desc, err := puller.Get(ctx, ref)
	if err != nil {
		return nil, nil, clean(err)
	}
	image := desc
	if desc.MediaType.IsIndex() {
		if image, err = r.child(ctx, puller, ref, desc); err != nil {
			return nil, nil, err
		}
	}
	img, err := image.Image()
	if err != nil {
		return nil, nil, clean(err)
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, nil, clean(err)
	}
	if size := m.Config.Size; size > r.maxConfig {
		return nil, nil, fmt.Errorf("config: %w: the manifest declares %d bytes, more than %d", ErrTooLarge, size, r.maxConfig)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", clean(err))
	}
	return desc, cfg, nil
}

// child is the image that index desc (ref's) lists for r.platform: the
// first whose platform satisfies it, a child without one counting as
// linux/amd64, as go-containerregistry has it. Only one level is followed:
// go-containerregistry's Descriptor.Image follows an index within an
// index without end, a manifest read each, so a child that is an index
// again is refused.
func (r *Resolver) child(ctx context.Context, puller *remote.Puller, ref name.Reference, desc *remote.Descriptor) (*remote.Descriptor, error) {
	index, err := v1.ParseIndexManifest(bytes.NewReader(desc.Manifest))
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	for _, m := range index.Manifests {
		p := v1.Platform{OS: "linux", Architecture: "amd64"}
		if m.Platform != nil {
			p = *m.Platform
		}
		if !p.Satisfies(r.platform) {
			continue
		}
		if m.MediaType.IsIndex() {
			return nil, nestedIndex(r.platform)
		}
		child, err := puller.Get(ctx, ref.Context().Digest(m.Digest.String()))
		if err != nil {
			return nil, clean(err)
		}
		if child.MediaType.IsIndex() {
			return nil, nestedIndex(r.platform)
		}
		return child, nil
	}
	return nil, fmt.Errorf("index: no image for %s", r.platform)
}

// nestedIndex is the error of an index whose image for platform is an
// index again.
func nestedIndex(platform v1.Platform) error {
	return fmt.Errorf("index: %w: its image for %s is an index again; one level of index is followed", ErrTooLarge, platform)
}

// cached is the entry for image in cl's part of the cache, fresh or not.
func (r *Resolver) cached(cl class, image string) (cached, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cache[cl].get(image)
}

func (r *Resolver) store(cl class, image string, c cached) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cache[cl].put(image, c)
}

// dockerConfig is a dockerconfigjson file.
type dockerConfig struct {
	Auths map[string]struct {
		Auth     string `json:"auth"`
		Username string `json:"username"`
		Password string `json:"password"`
	} `json:"auths"`
}

// staticKeychain answers from a dockerconfigjson, by registry host.
type staticKeychain map[string]authn.AuthConfig

// Resolve implements authn.Keychain.
func (k staticKeychain) Resolve(res authn.Resource) (authn.Authenticator, error) {
	if c, ok := k[res.RegistryStr()]; ok {
		return authn.FromConfig(c), nil
	}
	return authn.Anonymous, nil
}

// LoadDockerConfig reads registry credentials from a dockerconfigjson file.
func LoadDockerConfig(path string) (authn.Keychain, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("registry credentials: %w", err)
	}
	var dc dockerConfig
	if err := json.Unmarshal(data, &dc); err != nil {
		return nil, fmt.Errorf("registry credentials %s: %w", path, err)
	}
	kc := staticKeychain{}
	for host, a := range dc.Auths {
		c := authn.AuthConfig{Username: a.Username, Password: a.Password}
		if a.Auth != "" {
			raw, err := base64.StdEncoding.DecodeString(a.Auth)
			if err != nil {
				return nil, fmt.Errorf("registry credentials %s: auth of %s: %w", path, host, err)
			}
			user, pass, ok := strings.Cut(string(raw), ":")
			if !ok {
				return nil, fmt.Errorf("registry credentials %s: auth of %s is not user:password", path, host)
			}
			c.Username, c.Password = user, pass
		}
		kc[normalizeHost(host)] = c
	}
	return kc, nil
}

// normalizeHost turns "https://index.docker.io/v1/" or "docker.io" into the
// registry name go-containerregistry uses.
func normalizeHost(h string) string {
	h = strings.TrimPrefix(strings.TrimPrefix(h, "https://"), "http://")
	h, _, _ = strings.Cut(h, "/")
	if reg, err := name.NewRegistry(h); err == nil {
		return reg.RegistryStr()
	}
	return h
}

func addCAs(pool *x509.CertPool, paths []string) (int, error) {
	n := 0
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return 0, fmt.Errorf("CA certificates: %w", err)
		}
		files := []string{p}
		if st.IsDir() {
			files = nil
			entries, err := os.ReadDir(p)
			if err != nil {
				return 0, err
			}
			for _, e := range entries {
				if !e.IsDir() && (strings.HasSuffix(e.Name(), ".crt") || strings.HasSuffix(e.Name(), ".pem")) {
					files = append(files, filepath.Join(p, e.Name()))
				}
			}
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return 0, err
			}
			if !pool.AppendCertsFromPEM(data) {
				return 0, errors.New("no PEM certificates in " + f)
			}
			n++
		}
	}
	return n, nil
}

// Package imagemeta resolves a function image's digest and entrypoint from
// its registry with go-containerregistry: Entrypoint, else Cmd, of the
// linux/amd64 image. Results are cached for a TTL (a tag can move), except
// for references pinned by digest, which never change. Private registries:
// credentials from a dockerconfigjson file, and extra CA certificates added
// to the system roots.
package imagemeta

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
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
	// ("" = anonymous).
	DockerConfigPath string
	// CAPaths are PEM files or directories of them (ca.crt, ca.pem, *.crt,
	// *.pem) whose certificates are trusted besides the system roots.
	CAPaths []string
	// TTL is how long a tag's metadata is reused (0 = 5 minutes).
	TTL time.Duration
	// Platform to resolve in multi-platform images (default linux/amd64).
	Platform v1.Platform
}

// Resolver resolves and caches image metadata. It is safe for concurrent use.
type Resolver struct {
	keychain  authn.Keychain
	transport http.RoundTripper
	ttl       time.Duration
	platform  v1.Platform
	now       func() time.Time

	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	meta    Metadata
	expires time.Time // zero: never (pinned by digest)
}

// New returns a Resolver.
func New(opts Options) (*Resolver, error) {
	r := &Resolver{
		keychain: authn.NewMultiKeychain(), // anonymous
		ttl:      opts.TTL,
		platform: opts.Platform,
		now:      time.Now,
		cache:    map[string]cached{},
	}
	if r.ttl <= 0 {
		r.ttl = 5 * time.Minute
	}
	if r.platform.OS == "" {
		r.platform = v1.Platform{OS: "linux", Architecture: "amd64"}
	}
	if opts.DockerConfigPath != "" {
		kc, err := LoadDockerConfig(opts.DockerConfigPath)
		if err != nil {
			return nil, err
		}
		r.keychain = kc
	}
	tr := remote.DefaultTransport.(*http.Transport).Clone()
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
	}
	r.transport = tr
	return r, nil
}

// ErrNoEntrypoint means the image has neither Entrypoint nor Cmd, so there
// is nothing to run in a function pod.
var ErrNoEntrypoint = errors.New("the image has neither Entrypoint nor Cmd")

// Resolve returns the image's metadata, from the cache while it is fresh.
func (r *Resolver) Resolve(ctx context.Context, image string) (Metadata, error) {
	r.mu.Lock()
	c, ok := r.cache[image]
	r.mu.Unlock()
	if ok && (c.expires.IsZero() || r.now().Before(c.expires)) {
		return c.meta, nil
	}
	ref, err := name.ParseReference(image, name.StrictValidation)
	if err != nil {
		return Metadata{}, fmt.Errorf("image %q: %w", image, err)
	}
	opts := []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(r.keychain),
		remote.WithTransport(r.transport),
		remote.WithPlatform(r.platform),
	}
	desc, err := remote.Get(ref, opts...)
	if err != nil {
		return Metadata{}, fmt.Errorf("image %q: %w", image, err)
	}
	img, err := desc.Image()
	if err != nil {
		return Metadata{}, fmt.Errorf("image %q: %w", image, err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return Metadata{}, fmt.Errorf("image %q: config: %w", image, err)
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
	r.mu.Lock()
	r.cache[image] = entry
	r.mu.Unlock()
	return meta, nil
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

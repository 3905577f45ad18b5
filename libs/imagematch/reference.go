// Package imagematch parses KRM function image references and finds the
// FunctionConfig entry that runs a given image.
//
// An image is split into a prefix (registry and repository path without the
// last element), a name (the last element), and a tag and/or digest:
//
//	ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.5
//	└──────────── prefix ───────────────┘ └── name ──┘ └tag┘
//
// An image without "/" gets the default prefix, as porch does:
// "set-namespace:v0.4.5" is the same function as the one above.
package imagematch

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// DefaultPrefix is porch's default image prefix (its --default-image-prefix).
const DefaultPrefix = "ghcr.io/kptdev/krm-functions-catalog/"

// maxImageLength bounds what Parse accepts; registries cap references far lower.
const maxImageLength = 1024

// Reference is a parsed function image.
type Reference struct {
	// Prefix is the registry and repository path before the name, normalized
	// the way go-containerregistry does (docker.io → index.docker.io), its
	// registry lower-cased.
	Prefix string
	// Name is the last element of the repository path, e.g. "set-namespace".
	Name string
	// Tag is the tag, or "" when the image names only a digest. An image with
	// neither gets "latest", as container runtimes do.
	Tag string
	// Digest is "sha256:…" when the image pins one.
	Digest string
}

// Repository is the reference without tag or digest: prefix/name. Every
// tag and digest of a function share it.
func (r Reference) Repository() string { return r.Prefix + "/" + r.Name }

// String is the full reference: prefix/name[:tag][@digest].
func (r Reference) String() string {
	s := r.Repository()
	if r.Tag != "" {
		s += ":" + r.Tag
	}
	if r.Digest != "" {
		s += "@" + r.Digest
	}
	return s
}

// ErrInvalidImage is wrapped by every error Parse returns.
var ErrInvalidImage = errors.New("invalid image")

// Parse parses an image reference. An image without "/" is put under
// defaultPrefix ("" means DefaultPrefix).
func Parse(image, defaultPrefix string) (Reference, error) {
	if image == "" {
		return Reference{}, fmt.Errorf("%w: empty", ErrInvalidImage)
	}
	if len(image) > maxImageLength {
		return Reference{}, fmt.Errorf("%w: longer than %d characters", ErrInvalidImage, maxImageLength)
	}
	if strings.TrimSpace(image) != image || strings.ContainsAny(image, " \t\r\n") {
		return Reference{}, fmt.Errorf("%w %q: contains white space", ErrInvalidImage, image)
	}
	full := image
	if !strings.Contains(image, "/") {
		full = normalizeDefault(defaultPrefix) + image
	}
	full = lowerRegistry(full)

	// Split off the digest ourselves: ParseReference keeps either the tag or
	// the digest of "name:tag@digest", and both matter here.
	var digest string
	if i := strings.Index(full, "@"); i >= 0 {
		d, err := name.NewDigest(full, name.StrictValidation)
		if err != nil {
			return Reference{}, fmt.Errorf("%w %q: %w", ErrInvalidImage, image, err)
		}
		digest = d.DigestStr()
		full = full[:i]
	}
	tag, err := name.NewTag(full, name.WeakValidation)
	if err != nil {
		return Reference{}, fmt.Errorf("%w %q: %w", ErrInvalidImage, image, err)
	}
	t := tag.TagStr()
	if digest != "" && !hasExplicitTag(full) {
		t = ""
	}
	if err := checkName(tag.RegistryStr(), tag.RepositoryStr()); err != nil {
		return Reference{}, fmt.Errorf("%w %q: %w", ErrInvalidImage, image, err)
	}
	if err := checkTag(t); err != nil {
		return Reference{}, fmt.Errorf("%w %q: %w", ErrInvalidImage, image, err)
	}
	dir, base := path.Split(tag.RepositoryStr())
	if base == "" {
		return Reference{}, fmt.Errorf("%w %q: no function name", ErrInvalidImage, image)
	}
	return Reference{
		Prefix: strings.TrimSuffix(tag.RegistryStr()+"/"+dir, "/"),
		Name:   base,
		Tag:    t,
		Digest: digest,
	}, nil
}

// hasExplicitTag reports whether a reference without digest names a tag: a
// ":" after the last "/" (a ":" before it belongs to a registry port).
func hasExplicitTag(ref string) bool {
	return strings.Contains(ref[strings.LastIndex(ref, "/")+1:], ":")
}

// lowerRegistry lower-cases the registry of ref, the part before the first
// "/" when go-containerregistry takes it for one (it has a '.' or a ':', or
// is localhost, in any case). Host names are case-insensitive (RFC 4343),
// so Example.COM and example.com are one registry; the repository path is
// left as it is, for the grammar to check. A port is kept: neither
// go-containerregistry's name package nor docker's reference package drops
// a default port, and their keychains and schemes tell example.com:443 from
// example.com (localhost:443 is dialled over http, localhost over https).
func lowerRegistry(ref string) string {
	i := strings.Index(ref, "/")
	if i < 0 {
		return ref
	}
	reg := ref[:i]
	if !strings.ContainsAny(reg, ".:") && !strings.EqualFold(reg, "localhost") {
		return ref
	}
	return strings.ToLower(reg) + ref[i:]
}

// NormalizePrefix turns a configured prefix into the form Reference.Prefix
// has: "" is the default prefix; a trailing "/" is dropped; the registry is
// lower-cased and normalized (docker.io → index.docker.io).
func NormalizePrefix(prefix, defaultPrefix string) (string, error) {
	if prefix == "" {
		prefix = normalizeDefault(defaultPrefix)
	}
	p := strings.TrimSuffix(prefix, "/")
	ref, err := name.NewRepository(lowerRegistry(p+"/x"), name.WeakValidation)
	if err != nil {
		return "", fmt.Errorf("%w: prefix %q: %w", ErrInvalidImage, prefix, err)
	}
	if err := checkName(ref.RegistryStr(), ref.RepositoryStr()); err != nil {
		return "", fmt.Errorf("%w: prefix %q: %w", ErrInvalidImage, prefix, err)
	}
	return strings.TrimSuffix(ref.RegistryStr()+"/"+strings.TrimSuffix(ref.RepositoryStr(), "x"), "/"), nil
}

func normalizeDefault(p string) string {
	if p == "" {
		p = DefaultPrefix
	}
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	return p
}

// The OCI distribution name grammar (github.com/distribution/reference),
// which go-containerregistry's weak validation does not enforce: it lets
// through path components such as ".." or "-a", which a prefix compared as
// a string does not see.
var (
	domainRE        = regexp.MustCompile(`^(?:` + domainComponent + `(?:\.` + domainComponent + `)*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?$`)
	pathComponentRE = regexp.MustCompile(`^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*$`)
	tagRE           = regexp.MustCompile(`^[\w][\w.-]{0,127}$`)
)

const domainComponent = `(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])`

// maxNameLength bounds a repository name, registry included, as the
// distribution grammar does.
const maxNameLength = 255

// checkName checks a registry and a repository path against the
// distribution grammar: the registry is a domain name, an IPv4 address or
// a bracketed IPv6 address, with an optional port; each path component is
// lower-case letters and digits, separated by one '.', one or two '_', or
// dashes; the whole name is at most maxNameLength characters.
func checkName(registry, repository string) error {
	if !domainRE.MatchString(registry) {
		return fmt.Errorf("registry %q is not a domain name or an IP address with an optional port", registry)
	}
	for _, c := range strings.Split(repository, "/") {
		if !pathComponentRE.MatchString(c) {
			return fmt.Errorf("path component %q is not lower-case letters and digits separated by '.', '_', '__' or dashes", c)
		}
	}
	if n := len(registry) + 1 + len(repository); n > maxNameLength {
		return fmt.Errorf("the name is %d characters, longer than %d", n, maxNameLength)
	}
	return nil
}

// checkTag checks a tag against the distribution grammar: up to 128 word
// characters, dots and dashes, not starting with a dot or a dash. "" (a
// reference with a digest only) has no tag to check.
func checkTag(tag string) error {
	if tag != "" && !tagRE.MatchString(tag) {
		return fmt.Errorf("tag %q is not up to 128 letters, digits, '_', '.' and '-', starting with a letter, a digit or '_'", tag)
	}
	return nil
}

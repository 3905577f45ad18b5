package imagemeta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Tags lists the tags of repository (an image without tag or digest) from
// its registry, through the same dial checks and credentials as Resolve.
// A list is reused for the tag-list TTL, short (a caller resolving a tag
// constraint wants the registry's current list, near enough), and one
// listing per repository at a time is shared by its callers. The caller
// must not change the list.
func (r *Resolver) Tags(ctx context.Context, repository string, opts ...LookupOption) ([]string, error) {
	cl := classOf(opts)
	repo, err := name.NewRepository(repository, name.StrictValidation)
	if err != nil {
		return nil, fmt.Errorf("repository %q: %w", repository, err)
	}
	if c, ok := r.cachedTags(cl, repo); ok {
		return c.tags, c.err
	}
	val, err := r.flights.do(ctx, "tags "+repo.Name(), cl == claimed, func(fctx context.Context) (any, error) {
		// A listing that ended since this caller looked has cached its answer.
		if c, ok := r.cachedTags(cl, repo); ok {
			return c.tags, c.err
		}
		return r.listTags(fctx, cl, repository, repo)
	})
	if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
		return nil, fmt.Errorf("repository %q: waiting for the registry: %w", repository, err)
	}
	if errors.Is(err, ErrTooManyLookups) {
		return nil, fmt.Errorf("repository %q: listing tags: %w", repository, err)
	}
	if err != nil {
		return nil, err
	}
	return val.([]string), nil
}

// listTags asks the registry for repo's tags, page by page, at most
// r.maxTagPages pages of r.maxTagList bytes together, and caches the
// registry's answer in cl's part.
func (r *Resolver) listTags(ctx context.Context, cl class, repository string, repo name.Repository) ([]string, error) {
	start := time.Now()
	tags, err := r.pages(ctx, repo)
	r.observeRegistry(start, err)
	if err != nil {
		err = fmt.Errorf("repository %q: listing tags: %w", repository, err)
	}
	var re *RegistryError
	if err == nil || errors.Is(err, ErrTooLarge) || (errors.As(err, &re) && re.NotFound()) {
		r.mu.Lock()
		r.tags[cl].put(repo.Name(), tagList{tags: tags, err: err, expires: r.now().Add(r.tagTTL)})
		r.mu.Unlock()
	}
	return tags, err
}

// pages lists repo's tags page by page. Its own loop rather than
// go-containerregistry's Lister: that one bounds neither the pages nor
// their bytes, and refuses every next page of a registry it addresses as
// http (a private or loopback address) that serves https. All the
// answers of the listing together (its pings, tokens and retries too) are
// read within r.maxTagList.
func (r *Resolver) pages(ctx context.Context, repo name.Repository) ([]string, error) {
	ctx = withReadBudget(ctx, r.maxTagList, 0, "tag list")
	auth, err := authn.Resolve(ctx, r.keychain, repo)
	if err != nil {
		return nil, err
	}
	tr, err := transport.NewWithContext(ctx, repo.Registry, auth, transport.NewUserAgent(transport.NewRetry(r.capped()), ""),
		[]string{repo.Scope(transport.PullScope)})
	if err != nil {
		return nil, clean(err)
	}
	client := &http.Client{Transport: tr}
	first := &url.URL{Scheme: repo.Scheme(), Host: repo.RegistryStr(), Path: "/v2/" + repo.RepositoryStr() + "/tags/list"}
	if r.tagPageSize > 0 {
		first.RawQuery = url.Values{"n": {strconv.Itoa(r.tagPageSize)}}.Encode()
	}
	var tags []string
	for page, next := 1, first; ; page++ {
		got, link, err := listPage(ctx, client, next)
		if err != nil {
			return nil, err
		}
		tags = append(tags, got...)
		if link == "" {
			return slices.Clip(tags), nil
		}
		if page == r.maxTagPages {
			return nil, fmt.Errorf("tag list: %w: more than %d pages", ErrTooLarge, r.maxTagPages)
		}
		if next, err = nextPage(first, link); err != nil {
			return nil, err
		}
	}
}

// listPage asks for one page of a tag list: its tags, and the target of
// its Link header ("" for none, or an empty one).
func listPage(ctx context.Context, client *http.Client, u *url.URL) ([]string, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	if err := transport.CheckError(resp, http.StatusOK); err != nil {
		return nil, "", clean(err)
	}
	var page struct {
		Tags []string `json:"tags"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		return nil, "", fmt.Errorf("tag list: %w", err)
	}
	link := resp.Header.Get("Link")
	if link == "" {
		return page.Tags, "", nil
	}
	target, _, ok := strings.Cut(strings.TrimPrefix(link, "<"), ">")
	if !ok || !strings.HasPrefix(link, "<") {
		return nil, "", fmt.Errorf("tag list: a Link header that is not <URL>: %.100q", link)
	}
	return page.Tags, target, nil
}

// nextPage is the page a Link target names, resolved against the first
// page's URL; it must be on the same registry. Its scheme is the first's:
// the transport decided it when it pinged the registry.
func nextPage(first *url.URL, target string) (*url.URL, error) {
	u, err := first.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("tag list: next page: %w", err)
	}
	if u.Host != first.Host {
		return nil, fmt.Errorf("tag list: the next page is on %q, not on the registry", u.Host)
	}
	u.Scheme = first.Scheme
	return u, nil
}

// cachedTags is the fresh entry for repo in cl's part of the tag-list cache.
func (r *Resolver) cachedTags(cl class, repo name.Repository) (tagList, bool) {
	r.mu.Lock()
	c, ok := r.tags[cl].get(repo.Name())
	r.mu.Unlock()
	return c, ok && r.now().Before(c.expires)
}

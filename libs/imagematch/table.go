package imagematch

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/Masterminds/semver/v3"
)

// Claim is what one FunctionConfig says about one executor: this executor
// runs image Name under these prefixes and tags.
type Claim[T any] struct {
	// Owner identifies the FunctionConfig, e.g. "porch-fn-system/set-namespace".
	Owner string
	// Name is the image name without prefix or tag (spec.image).
	Name string
	// Prefixes as configured; "" is the default prefix. None means the
	// default prefix only (never "any registry").
	Prefixes []string
	// Tags are exact tags ("v0.4.5", "latest", "sha256:…" for a digest) or
	// semver constraints ("~0.4", ">=0.2.0 <0.3.0"). None means every tag.
	// A reference that pins a digest is run only by a claim of that digest;
	// tags, constraints and "every tag" run references without one.
	Tags []string
	// Value is what Lookup returns for a match.
	Value T
}

// Conflict is one image, prefix and tag claimed by more than one owner.
// None of the owners is used for it.
type Conflict struct {
	Name, Prefix, Tag string
	Owners            []string
}

func (c Conflict) String() string {
	return fmt.Sprintf("%s/%s:%s is claimed by %s", c.Prefix, c.Name, c.Tag, strings.Join(c.Owners, ", "))
}

// Match quality, best last. Lookup compares the tag rank first, then the
// prefix rank, then the owner's name (for a deterministic answer).
const (
	rankAnyTag = iota + 1
	rankConstraint
	rankExactTag
)

const (
	rankDefaultPrefix = iota + 1
	rankExplicitPrefix
)

const anyTag = "*"

type rule[T any] struct {
	owner      string
	name       string
	prefix     string
	explicit   bool
	tag        string
	constraint *semver.Constraints
	value      T
}

// tagRank is how well r's tag matches ref's, 0 for not at all. A reference
// that pins a digest names content, which only a claim of that digest
// vouches for: no tag, constraint or "every tag" matches it, so that the
// call goes to an executor that pulls the digest rather than to one that
// runs whatever it has for the tag.
func (r *rule[T]) tagRank(ref Reference) int {
	if ref.Digest != "" {
		if r.tag == ref.Digest {
			return rankExactTag
		}
		return 0
	}
	switch {
	case r.tag == anyTag:
		return rankAnyTag
	case r.constraint != nil:
		v, err := semver.NewVersion(ref.Tag)
		if ref.Tag == "" || err != nil || !r.constraint.Check(v) {
			return 0
		}
		return rankConstraint
	case r.tag == ref.Tag:
		return rankExactTag
	}
	return 0
}

// Table answers which claim runs an image, for one executor.
type Table[T any] struct {
	byName map[string][]rule[T]
}

// NewTable builds the table for one executor. Claims whose prefixes or tags
// cannot be parsed are left out and reported in invalid, by owner. Keys
// (name, prefix, tag) claimed by more than one owner are left out and
// reported in conflicts; the owners' other keys stay.
func NewTable[T any](defaultPrefix string, claims []Claim[T]) (t *Table[T], conflicts []Conflict, invalid map[string]error) {
	type key struct{ name, prefix, tag string }
	owners := map[key]map[string]bool{}
	var rules []rule[T]
	invalid = map[string]error{}
	for _, c := range claims {
		rs, err := claimRules(defaultPrefix, c)
		if err != nil {
			invalid[c.Owner] = err
			continue
		}
		for _, r := range rs {
			k := key{r.name, r.prefix, r.tag}
			if owners[k] == nil {
				owners[k] = map[string]bool{}
			}
			owners[k][r.owner] = true
		}
		rules = append(rules, rs...)
	}

	t = &Table[T]{byName: map[string][]rule[T]{}}
	for _, r := range rules {
		if len(owners[key{r.name, r.prefix, r.tag}]) == 1 {
			t.byName[r.name] = append(t.byName[r.name], r)
		}
	}
	for k, os := range owners {
		if len(os) > 1 {
			conflicts = append(conflicts, Conflict{Name: k.name, Prefix: k.prefix, Tag: k.tag, Owners: sortedOwners(os)})
		}
	}
	sort.Slice(conflicts, func(i, j int) bool { return conflicts[i].String() < conflicts[j].String() })
	return t, conflicts, invalid
}

func claimRules[T any](defaultPrefix string, c Claim[T]) ([]rule[T], error) {
	if c.Name == "" || strings.Contains(c.Name, "/") || strings.Contains(c.Name, ":") {
		return nil, fmt.Errorf("image %q must be a name without registry or tag", c.Name)
	}
	prefixes := c.Prefixes
	if len(prefixes) == 0 {
		prefixes = []string{""}
	}
	tags := c.Tags
	if len(tags) == 0 {
		tags = []string{anyTag}
	}
	var out []rule[T]
	for _, p := range prefixes {
		np, err := NormalizePrefix(p, defaultPrefix)
		if err != nil {
			return nil, err
		}
		for _, tag := range tags {
			r := rule[T]{owner: c.Owner, name: c.Name, prefix: np, explicit: p != "", tag: tag, value: c.Value}
			if tag != anyTag && IsConstraint(tag) {
				cs, err := semver.NewConstraint(tag)
				if err != nil {
					return nil, fmt.Errorf("tag %q: not a semver constraint: %w", tag, err)
				}
				r.constraint = cs
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// IsConstraint reports whether a configured tag is a semver constraint rather
// than an exact tag: it has an operator (~ ^ < > = !), a range or list
// separator (space, comma, ||), or an x/* wildcard part ("0.4.x").
func IsConstraint(tag string) bool {
	if strings.ContainsAny(tag, "~^<>=! ,|*") {
		return true
	}
	for _, part := range strings.Split(strings.TrimPrefix(tag, "v"), ".") {
		if part == "x" || part == "X" {
			return true
		}
	}
	return false
}

// Lookup returns the value of the best claim for ref, if any claims it. A
// reference with a digest is claimed only by a claim of that digest
// ("sha256:…" among its tags), whatever its tag.
func (t *Table[T]) Lookup(ref Reference) (T, bool) {
	var best *rule[T]
	bestTag, bestPrefix := 0, 0
	for i := range t.byName[ref.Name] {
		r := &t.byName[ref.Name][i]
		if r.prefix != ref.Prefix {
			continue
		}
		tr := r.tagRank(ref)
		if tr == 0 {
			continue
		}
		pr := rankDefaultPrefix
		if r.explicit {
			pr = rankExplicitPrefix
		}
		if best == nil || tr > bestTag || (tr == bestTag && (pr > bestPrefix || (pr == bestPrefix && r.owner < best.owner))) {
			best, bestTag, bestPrefix = r, tr, pr
		}
	}
	if best == nil {
		var zero T
		return zero, false
	}
	return best.value, true
}

// Len is the number of rules (claim × prefix × tag) in the table.
func (t *Table[T]) Len() int {
	n := 0
	for _, rs := range t.byName {
		n += len(rs)
	}
	return n
}

func sortedOwners(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for o := range m {
		out = append(out, o)
	}
	sort.Strings(out)
	return out
}

// Tags are the exact tags claimed for name under prefix (neither constraints
// nor "every tag"), sorted: what a tag constraint from the caller can
// resolve to without asking a registry.
func (t *Table[T]) Tags(prefix, name string) []string {
	var out []string
	for _, r := range t.byName[name] {
		if r.prefix == prefix && r.tag != anyTag && r.constraint == nil && !slices.Contains(out, r.tag) {
			out = append(out, r.tag)
		}
	}
	sort.Strings(out)
	return out
}

package imagematch

import (
	"errors"
	"fmt"
	"strings"

	"github.com/Masterminds/semver/v3"
)

// ErrNoTag is a tag constraint that no tag satisfies.
var ErrNoTag = errors.New("no tag satisfies the constraint")

// HasTag says whether image names a tag or a digest of its own.
func HasTag(image string) bool {
	return strings.Contains(image, "@") || hasExplicitTag(image)
}

// BestTag is the tag of tags that a caller's tag field asks for: the field
// itself when it is an exact tag, else the highest semantic version of tags
// that satisfies the constraint. It fails with ErrInvalidImage for a field
// that is neither, and with ErrNoTag when no tag satisfies it.
func BestTag(field string, tags []string) (string, error) {
	if !IsConstraint(field) {
		return field, nil
	}
	c, err := semver.NewConstraint(field)
	if err != nil {
		return "", fmt.Errorf("%w: tag %q is neither a tag nor a semver constraint: %w", ErrInvalidImage, field, err)
	}
	var best *semver.Version
	bestTag := ""
	for _, t := range tags {
		v, err := semver.NewVersion(t)
		if err != nil || !c.Check(v) {
			continue
		}
		if best == nil || v.GreaterThan(best) {
			best, bestTag = v, t
		}
	}
	if best == nil {
		return "", fmt.Errorf("%w %q among %d tags", ErrNoTag, field, len(tags))
	}
	return bestTag, nil
}

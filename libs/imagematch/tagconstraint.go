package imagematch

import (
	"errors"
	"fmt"
	"strings"

	"github.com/Masterminds/semver/v3"
)

// Bounds of a request's image and tag fields, well over any image
// reference (a registry host, a repository of at most 255 bytes, a tag of
// at most 128) and any tag constraint one writes. They are checked before
// anything parses the fields: a semver constraint's parse (its range
// rewriting) takes time quadratic in its length.
const (
	MaxImageLen    = 1024
	MaxTagFieldLen = 256
)

// CheckFields refuses an image or a tag field over those bounds, wrapping
// ErrInvalidImage; the error gives the length, not the field.
func CheckFields(image, tag string) error {
	if len(image) > MaxImageLen {
		return fmt.Errorf("%w: the image field is %d bytes, longer than any image reference (at most %d)", ErrInvalidImage, len(image), MaxImageLen)
	}
	if len(tag) > MaxTagFieldLen {
		return fmt.Errorf("%w: the tag field is %d bytes, longer than any tag or tag constraint (at most %d)", ErrInvalidImage, len(tag), MaxTagFieldLen)
	}
	return nil
}

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
	if err := CheckFields("", field); err != nil {
		return "", err
	}
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

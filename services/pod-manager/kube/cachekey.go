package kube

import (
	"fmt"
	"strings"
)

// CacheKey says which calls share pods: those with the same image, template
// version and overrides. Its String is the pod cache's key and the pods'
// AnnotationKey, so a restarted pod-manager adopts the pods it made.
type CacheKey struct {
	// Image is pinned by digest.
	Image string
	// TemplateVersion is templates.Templates.Version.
	TemplateVersion string
	// Overrides is a hash of the FunctionConfig's templateOverrides.
	Overrides string
}

// String is image|version|overrides.
func (k CacheKey) String() string {
	return fmt.Sprintf("%s|%s|%s", k.Image, k.TemplateVersion, k.Overrides)
}

// ParseCacheKey reads a CacheKey's String; ok is false for anything else.
func ParseCacheKey(s string) (k CacheKey, ok bool) {
	parts := strings.Split(s, "|")
	if len(parts) != 3 {
		return CacheKey{}, false
	}
	return CacheKey{Image: parts[0], TemplateVersion: parts[1], Overrides: parts[2]}, true
}

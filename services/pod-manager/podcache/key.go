package podcache

import (
	"fmt"
	"strings"
)

// Key says which calls share pods: those with the same image, template
// version and overrides. Its String is written on the pods (the
// pod-manager's kube.AnnotationKey), so a restarted pod-manager adopts the
// pods it made.
type Key struct {
	// Image is pinned by digest.
	Image string
	// TemplateVersion is templates.Templates.Version.
	TemplateVersion string
	// Overrides is a hash of the FunctionConfig's templateOverrides.
	Overrides string
}

// String is image|version|overrides.
func (k Key) String() string {
	return fmt.Sprintf("%s|%s|%s", k.Image, k.TemplateVersion, k.Overrides)
}

// ParseKey reads a Key's String; ok is false for anything else.
func ParseKey(s string) (k Key, ok bool) {
	parts := strings.Split(s, "|")
	if len(parts) != 3 {
		return Key{}, false
	}
	return Key{Image: parts[0], TemplateVersion: parts[1], Overrides: parts[2]}, true
}

package evalmetrics

import (
	"fmt"

	"github.com/fnrunner/fnrunner/libs/imagematch"
)

// ImageNamer names the calls of one image: a function pod's wrapper-server,
// which has no executor table, names the calls of the image its pod was
// started for by that image, and no other.
type ImageNamer struct {
	ref  imagematch.Reference
	name string
}

var _ Namer = (*ImageNamer)(nil)

// NewImageNamer returns a namer of image, a full reference (the pod-manager
// passes imagematch.Reference.String()); "" names nothing.
func NewImageNamer(image string) (*ImageNamer, error) {
	if image == "" {
		return &ImageNamer{}, nil
	}
	ref, err := imagematch.Parse(image, "")
	if err != nil {
		return nil, fmt.Errorf("function image: %w", err)
	}
	return &ImageNamer{ref: ref, name: ref.String()}, nil
}

// FunctionName implements Namer: the image's full reference for a call of
// the same image, a short name ("set-namespace:v0.4.5") taken under the
// image's own prefix; false for any other.
func (n *ImageNamer) FunctionName(image string) (string, bool) {
	if n.name == "" {
		return "", false
	}
	ref, err := imagematch.Parse(image, n.ref.Prefix)
	if err != nil || ref != n.ref {
		return "", false
	}
	return n.name, true
}

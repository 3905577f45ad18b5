package server

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/executortable"
	"github.com/fnrunner/fnrunner/libs/imagematch"
)

// withTag is the image a request from porch after April 2026 names: its
// image comes without a tag and its tag field holds an exact tag or a semver
// constraint (">= 0.4.0 < 0.5.0"). A constraint resolves to the highest
// version among the tags the FunctionConfigs claim for the image that
// satisfies it; when none does, the request goes on with its tag field, and
// the pod executor resolves it against the registry's tags, as porch's pod
// evaluator does. An image that names its own tag or digest keeps it.
func withTag(tables *executortable.Tables, image, tag string) (string, string, error) {
	if tag == "" || imagematch.HasTag(image) {
		return image, "", nil
	}
	ref, err := imagematch.Parse(image, tables.DefaultPrefix)
	if err != nil {
		return "", "", status.Error(codes.InvalidArgument, err.Error())
	}
	best, err := imagematch.BestTag(tag, tables.Tags(ref))
	switch {
	case errors.Is(err, imagematch.ErrNoTag):
		return image, tag, nil
	case err != nil:
		return "", "", status.Errorf(codes.InvalidArgument, "function %q: %v", image, err)
	}
	return image + ":" + best, "", nil
}

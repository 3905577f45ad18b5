// Package shape checks that the maps a function walks are maps before the
// SDK or kyaml reads them as such. The SDK's SubObject.GetMap wraps any
// value as a map, and reading a list of odd length through it ends the
// process (log.Fatalf); kyaml indexes a list read as metadata as if it were
// a map, and panics. The binary-runner runs functions in its own process,
// so a list there must be an error.
package shape

import (
	"errors"
	"fmt"
	"strings"

	"github.com/kptdev/krm-functions-sdk/go/fn"
)

// ErrList is a list where a map was expected.
var ErrList = errors.New("a list where a map was expected")

// IsList says whether the value at fields under o is a list.
func IsList(o *fn.SubObject, fields ...string) bool {
	// NestedSlice fails with ErrUnmatchedField for a value that is not a
	// list, and otherwise for a list of other than maps.
	_, found, err := o.NestedSlice(fields...)
	return found && !errors.As(err, new(*fn.ErrUnmatchedField))
}

// metadataMaps are the maps of an object's metadata that kyaml reads.
var metadataMaps = [][]string{{"metadata"}, {"metadata", "labels"}, {"metadata", "annotations"}}

// CheckMetadata returns an error wrapping ErrList for the first of
// objects whose metadata, labels or annotations are a list.
func CheckMetadata(objects fn.KubeObjects) error {
	for i, o := range objects {
		if err := CheckObjectMetadata(&o.SubObject); err != nil {
			return fmt.Errorf("resource %d %w", i, err)
		}
	}
	return nil
}

// CheckObjectMetadata returns an error wrapping ErrList when o's
// metadata, labels or annotations are a list.
func CheckObjectMetadata(o *fn.SubObject) error {
	for _, fields := range metadataMaps {
		if IsList(o, fields...) {
			kind, _, _ := o.NestedString("kind")
			return fmt.Errorf("(kind %q): %s: %w", kind, strings.Join(fields, "."), ErrList)
		}
	}
	return nil
}

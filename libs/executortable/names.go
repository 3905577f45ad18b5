package executortable

import (
	"slices"

	"github.com/fnrunner/fnrunner/libs/imagematch"
)

// FunctionName is the name metrics count calls of ref under (their
// "function" label), and false when no executor's table runs ref (the
// caller counts it as "other"). The name comes from the table, never from
// the caller alone, so there are at most as many as the table has claims:
//
//   - prefix/name@digest when ref pins a digest: only a claim of that
//     digest runs it (imagematch.Table.Lookup), whatever its tag;
//   - prefix/name:tag when a claim names ref's tag exactly;
//   - prefix/name when ref is run by a claim for every tag or by a semver
//     constraint ("~0.4" runs v0.4.0, 0.4.1, v0.4.99999, ...).
//
// The prefix is the normalized one (imagematch.Reference.Prefix), so
// "set-namespace:v0.4.5" and its full spelling under the default prefix
// are one name.
func (t *Tables) FunctionName(ref imagematch.Reference) (string, bool) {
	if t == nil {
		return "", false
	}
	routed := false
	for _, k := range Kinds() {
		if _, ok := t.Lookup(k, ref); ok {
			routed = true
			break
		}
	}
	if !routed {
		return "", false
	}
	exact := t.Tags(ref)
	switch {
	case ref.Digest != "" && slices.Contains(exact, ref.Digest):
		return imagematch.Reference{Prefix: ref.Prefix, Name: ref.Name, Digest: ref.Digest}.String(), true
	case ref.Digest == "" && slices.Contains(exact, ref.Tag):
		return imagematch.Reference{Prefix: ref.Prefix, Name: ref.Name, Tag: ref.Tag}.String(), true
	}
	return ref.Repository(), true
}

// FunctionNameOf is FunctionName of an image as a call names it (under the
// table's default prefix); false for an image that does not parse.
func (t *Tables) FunctionNameOf(image string) (string, bool) {
	if t == nil {
		return "", false
	}
	ref, err := imagematch.Parse(image, t.DefaultPrefix)
	if err != nil {
		return "", false
	}
	return t.FunctionName(ref)
}

package searchreplace

import "strings"

// pathDelimiter separates the elements of field paths and path expressions.
const pathDelimiter = "."

// pathPattern is a by-path expression split into its elements. An element is
// a field name, a field name with a list index (a[1], a[*], *[1]), "*" (any
// one element) or "**" (any number of elements, none included).
type pathPattern []string

// parsePathPattern splits a by-path expression into its elements.
func parsePathPattern(expr string) pathPattern {
	return strings.Split(expr, pathDelimiter)
}

// splitFieldPath splits a field path (as reported in results, e.g.
// spec.containers[0].image) into elements. A field name containing the
// delimiter is split too, as the catalog does, so that a by-path written
// with that name matches it.
func splitFieldPath(path string) []string {
	return strings.Split(path, pathDelimiter)
}

// isAbsolute says whether the expression names one field: no wildcard and
// no empty element.
func (p pathPattern) isAbsolute() bool {
	if len(p) == 0 {
		return false
	}
	for _, e := range p {
		if e == "" || strings.Contains(e, "*") {
			return false
		}
	}
	return true
}

// matches says whether the field path elements match the whole expression.
func (p pathPattern) matches(path []string) bool {
	// matched[j] says whether the path elements seen so far match the
	// first j pattern elements.
	matched := make([]bool, len(p)+1)
	matched[0] = true
	for j := 1; j <= len(p); j++ {
		matched[j] = matched[j-1] && p[j-1] == "**"
	}
	for _, elem := range path {
		next := make([]bool, len(p)+1)
		for j := 1; j <= len(p); j++ {
			switch pat := p[j-1]; {
			case pat == "**":
				// none of this element (next[j-1]) or it and maybe
				// more before (matched[j]).
				next[j] = next[j-1] || matched[j]
			case pat == "*" || elementMatches(elem, pat):
				next[j] = matched[j-1]
			}
		}
		matched = next
	}
	return matched[len(p)]
}

// elementMatches matches one path element against one pattern element other
// than "*" and "**": equal names, or a list element a[i] against a[i], a[*],
// *[i] or *[*].
//
// As the catalog's code does at 76fe381 (elementMatch in
// searchreplace/pathparser.go), both are split at every "[" and only the
// name and the first index are compared, so that a[*] and a[0] also match
// the element a[0][1] of a list of lists.
func elementMatches(elem, pat string) bool {
	if elem == pat {
		return true
	}
	if !strings.Contains(elem, "[") {
		return false
	}
	elemParts := strings.Split(elem, "[")
	patParts := strings.Split(pat, "[")
	if patParts[0] != "*" && patParts[0] != elemParts[0] {
		return false
	}
	return len(patParts) > 1 && (patParts[1] == "*]" || patParts[1] == elemParts[1])
}

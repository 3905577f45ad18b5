package searchreplace

import (
	"strconv"
	"strings"
)

// pathDelimiter separates the elements of field paths and path expressions.
const pathDelimiter = "."

// pathPattern is a by-path expression split into its elements. An element is
// a field name, a field name with a list index (a[1], a[*], *[1]), "*" (any
// one element) or "**" (any number of elements, none included).
type pathPattern []patternElement

// patternElement is one element of a by-path expression, with the parts
// elementMatches compares.
type patternElement struct {
	text string
	// name is text up to its first "[", index what follows up to the next
	// "[" ("1]", "*]"); indexed says whether text has a "[".
	name, index string
	indexed     bool
}

// parsePathPattern splits a by-path expression into its elements.
func parsePathPattern(expr string) pathPattern {
	elems := strings.Split(expr, pathDelimiter)
	p := make(pathPattern, len(elems))
	for i, e := range elems {
		p[i].text = e
		p[i].name, p[i].index, p[i].indexed = strings.Cut(e, "[")
		p[i].index, _, _ = strings.Cut(p[i].index, "[")
	}
	return p
}

// isAbsolute says whether the expression names one field: no wildcard and
// no empty element.
func (p pathPattern) isAbsolute() bool {
	if len(p) == 0 {
		return false
	}
	for _, e := range p {
		if e.text == "" || strings.Contains(e.text, "*") {
			return false
		}
	}
	return true
}

// pathElement is one element of a field path (as reported in results, e.g.
// spec.containers[0].image, split at the delimiter): a field name, or a
// part of one, followed, for a list's items, by their indices. A field name
// containing the delimiter is split too, as the catalog does, so that a
// by-path written with that name matches it.
//
// Only the name and the first index are kept: elementMatches compares no
// more, so that the elements of lists of lists cost no more than others.
type pathElement struct {
	name string
	// index is the first index and its "]" ("0]"), when indexed.
	index   string
	indexed bool
}

// elementMatches matches one path element against one pattern element other
// than "*" and "**": equal names, or a list element a[i] against a[i], a[*],
// *[i] or *[*].
//
// As the catalog's code does at 76fe381 (elementMatch in
// searchreplace/pathparser.go), both are split at every "[" and only the
// name and the first index are compared, so that a[*] and a[0] also match
// the element a[0][1] of a list of lists. (The catalog also matches equal
// elements; an element with a "[" equal to the pattern element has their
// name and first index.)
func elementMatches(elem pathElement, pat patternElement) bool {
	name, index, bracket := strings.Cut(elem.name, "[")
	switch {
	case bracket:
		index, _, _ = strings.Cut(index, "[")
	case elem.indexed:
		index = elem.index
	default:
		return elem.name == pat.text
	}
	return (pat.name == "*" || pat.name == name) && pat.indexed && (pat.index == "*]" || pat.index == index)
}

// pathMatcher follows a walk down a resource and says whether the field
// path it is at matches a by-path expression, in time in proportion to the
// expression's length a step, however deep the walk.
//
// It is the matching of the whole path against the expression, element
// after element: at each depth, matched says which prefixes of the
// expression the path elements down to it match.
type pathMatcher struct {
	pattern pathPattern
	// levels is the path's elements, each with what they match.
	levels []pathLevel
	// root is what no element matches: the empty prefix, and "**"s.
	root []bool
}

type pathLevel struct {
	elem pathElement
	// matched[j] says whether the path elements down to elem match the
	// first j pattern elements.
	matched []bool
}

func newPathMatcher(p pathPattern) *pathMatcher {
	m := &pathMatcher{pattern: p, root: make([]bool, len(p)+1)}
	m.root[0] = true
	for j := 1; j <= len(p); j++ {
		m.root[j] = m.root[j-1] && p[j-1].text == "**"
	}
	return m
}

// depth is the number of path elements.
func (m *pathMatcher) depth() int { return len(m.levels) }

// matches says whether the path elements match the whole expression.
func (m *pathMatcher) matches() bool {
	return m.top()[len(m.pattern)]
}

// top is what the path elements match.
func (m *pathMatcher) top() []bool {
	if len(m.levels) == 0 {
		return m.root
	}
	return m.levels[len(m.levels)-1].matched
}

// pushField adds the elements of a field name: its parts between
// delimiters.
func (m *pathMatcher) pushField(name string) {
	for {
		part, rest, more := strings.Cut(name, pathDelimiter)
		m.push(pathElement{name: part})
		if !more {
			return
		}
		name = rest
	}
}

// pushIndex goes into item i of a list: the index is the last element's
// (an element of its own at the root). popIndex undoes it, given what
// pushIndex returned.
func (m *pathMatcher) pushIndex(i int) (pathElement, bool) {
	if len(m.levels) == 0 {
		m.push(pathElement{index: strconv.Itoa(i) + "]", indexed: true})
		return pathElement{}, false
	}
	last := &m.levels[len(m.levels)-1]
	old := last.elem
	if !old.indexed {
		last.elem.index, last.elem.indexed = strconv.Itoa(i)+"]", true
		m.step(m.below(), last.elem, last.matched)
	}
	return old, true
}

func (m *pathMatcher) popIndex(old pathElement, replaced bool) {
	if !replaced {
		m.pop(1)
		return
	}
	last := &m.levels[len(m.levels)-1]
	if last.elem != old {
		last.elem = old
		m.step(m.below(), old, last.matched)
	}
}

// push adds one element.
func (m *pathMatcher) push(e pathElement) {
	below := m.top()
	// The levels popped keep their states, for the next.
	if len(m.levels) < cap(m.levels) {
		m.levels = m.levels[:len(m.levels)+1]
	} else {
		m.levels = append(m.levels, pathLevel{})
	}
	last := &m.levels[len(m.levels)-1]
	if last.matched == nil {
		last.matched = make([]bool, len(m.pattern)+1)
	}
	last.elem = e
	m.step(below, e, last.matched)
}

// pop removes the last n elements.
func (m *pathMatcher) pop(n int) {
	m.levels = m.levels[:len(m.levels)-n]
}

// below is what the elements before the last one match.
func (m *pathMatcher) below() []bool {
	if len(m.levels) < 2 {
		return m.root
	}
	return m.levels[len(m.levels)-2].matched
}

// step sets next to what one more element e matches, given what the
// elements before it match.
func (m *pathMatcher) step(matched []bool, e pathElement, next []bool) {
	next[0] = false
	for j := 1; j <= len(m.pattern); j++ {
		switch pat := m.pattern[j-1]; {
		case pat.text == "**":
			// none of this element (next[j-1]) or it and maybe
			// more before (matched[j]).
			next[j] = next[j-1] || matched[j]
		case pat.text == "*" || elementMatches(e, pat):
			next[j] = matched[j-1]
		default:
			next[j] = false
		}
	}
}

// matchesField says whether the path elements followed by those of a field
// name match the whole expression, without going there.
func (m *pathMatcher) matchesField(name string) bool {
	before := len(m.levels)
	m.pushField(name)
	ok := m.matches()
	m.pop(len(m.levels) - before)
	return ok
}

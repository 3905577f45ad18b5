package searchreplace

import (
	"path"
	"unicode/utf8"
)

// matchFilePath reports whether name matches the by-file-path pattern as
// search-replace v0.2.0 matches it: with doublestar v4.0.2's Match, which
// that release is built with. Later doublestar releases (the root module
// has v4.9) match more: v4.0.2 decides at the first alternatives ({a,b})
// it reaches, without trying longer matches of a star or doublestar before
// them, so `**/{a,b}.yaml` matches `a.yaml` and not `dir/a.yaml`. A
// malformed pattern is path.ErrBadPattern, reported, as there, only when
// the match fails on the malformed part or after it.
//
// tools/doublestar402 holds v4.0.2 itself; glob_test.go compares the two.
func matchFilePath(pattern, name string) (bool, error) {
	g := glob{pattern: pattern, name: name, segmentStart: true, star: noBacktrack, doublestar: noBacktrack}
	return g.match()
}

const separator = '/'

// backtrack is where to resume after a mismatch: the pattern just past a
// star or doublestar, and the name where the star's match ends so far.
type backtrack struct{ pattern, name int }

var noBacktrack = backtrack{-1, -1}

// glob is one match of a pattern against a name, from their starts: the
// classic one-pass wildcard match, resuming at the last star (which never
// takes a separator), else at the last doublestar (one directory more).
type glob struct {
	pattern, name string
	p, n          int // where the match is in each
	segmentStart  bool
	star          backtrack
	doublestar    backtrack
}

func (g *glob) match() (bool, error) {
	for g.n < len(g.name) {
		if g.p < len(g.pattern) {
			done, ok, err := g.step()
			if done || err != nil {
				return ok, err
			}
			if ok {
				continue
			}
		}
		if g.resume() {
			continue
		}
		if g.p < len(g.pattern) && !validPattern(g.pattern[g.p:]) {
			return false, path.ErrBadPattern
		}
		return false, nil
	}
	return zeroLength(g.pattern[g.p:])
}

// step matches the pattern's next term. It says whether the match is
// decided (done, then ok is the answer), else whether the term matched.
func (g *glob) step() (done, ok bool, err error) {
	switch g.pattern[g.p] {
	case '*':
		g.p++
		if g.p < len(g.pattern) && g.pattern[g.p] == '*' {
			g.p++
			if g.segmentStart {
				if g.p == len(g.pattern) {
					return true, true, nil // a trailing /** matches the rest
				}
				if r, size := utf8.DecodeRuneInString(g.pattern[g.p:]); r == separator {
					g.p += size
					g.doublestar, g.star = backtrack{g.p, g.n}, noBacktrack
					return false, true, nil
				}
			}
			// Anywhere else, ** is *.
		}
		g.segmentStart = false
		g.star = backtrack{g.p, g.n}
		return false, true, nil
	case '?':
		g.segmentStart = false
		r, size := utf8.DecodeRuneInString(g.name[g.n:])
		if r == separator {
			return false, false, nil
		}
		g.p++
		g.n += size
		return false, true, nil
	case '[':
		g.segmentStart = false
		return g.class()
	case '{':
		g.segmentStart = false
		ok, err := g.alternatives()
		return true, ok, err
	case '\\':
		g.p++
		if g.p == len(g.pattern) {
			return true, false, path.ErrBadPattern
		}
		return false, g.literal(), nil
	default:
		return false, g.literal(), nil
	}
}

// literal matches the pattern's rune at p against the name's. On a
// mismatch after a backslash, p goes back to it: the rest of the pattern
// is validated from there.
func (g *glob) literal() bool {
	pr, psize := utf8.DecodeRuneInString(g.pattern[g.p:])
	nr, nsize := utf8.DecodeRuneInString(g.name[g.n:])
	if pr != nr {
		if g.p > 0 && g.pattern[g.p-1] == '\\' {
			g.p--
		}
		return false
	}
	g.p += psize
	g.n += nsize
	g.segmentStart = pr == separator
	return true
}

// class matches a character class, g.p at its '['.
func (g *glob) class() (done, ok bool, err error) {
	g.p++
	if g.p == len(g.pattern) {
		return true, false, path.ErrBadPattern
	}
	r, size := utf8.DecodeRuneInString(g.name[g.n:])
	negated := g.pattern[g.p] == '!' || g.pattern[g.p] == '^'
	if negated {
		g.p++
	}
	if g.p == len(g.pattern) || g.pattern[g.p] == ']' {
		return true, false, path.ErrBadPattern
	}
	in := false
	prev := utf8.MaxRune // the last single rune, a range's low end
	for g.p < len(g.pattern) && g.pattern[g.p] != ']' && !in {
		c, csize := utf8.DecodeRuneInString(g.pattern[g.p:])
		g.p += csize
		if prev < utf8.MaxRune && c == '-' && g.p < len(g.pattern) && g.pattern[g.p] != ']' {
			if g.pattern[g.p] == '\\' {
				g.p++
			}
			hi, hisize := utf8.DecodeRuneInString(g.pattern[g.p:])
			g.p += hisize
			in = prev <= r && r <= hi
			prev = utf8.MaxRune
			continue
		}
		if c == '\\' {
			c, csize = utf8.DecodeRuneInString(g.pattern[g.p:])
			g.p += csize
		}
		in = c == r
		prev = c
	}
	if in == negated {
		if g.p >= len(g.pattern) {
			return true, false, path.ErrBadPattern
		}
		return false, false, nil
	}
	end := indexUnescaped(g.pattern[g.p:], ']')
	if end < 0 {
		return true, false, path.ErrBadPattern
	}
	g.p += end + 1
	g.n += size
	return false, true, nil
}

// alternatives decides the match at a '{' (g.p): each alternative with
// the rest of the pattern, matched afresh against the rest of the name.
func (g *glob) alternatives() (bool, error) {
	start := g.p + 1
	end := closingBrace(g.pattern[start:])
	if end < 0 {
		return false, path.ErrBadPattern
	}
	end += start
	rest := g.pattern[end+1:]
	for {
		comma := nextAlternative(g.pattern[start:end])
		if comma < 0 {
			return matchFilePath(g.pattern[start:end]+rest, g.name[g.n:])
		}
		comma += start
		if ok, err := matchFilePath(g.pattern[start:comma]+rest, g.name[g.n:]); ok || err != nil {
			return ok, err
		}
		start = comma + 1
	}
}

// resume goes back to the last star, which takes one more rune unless that
// is a separator, else to the last doublestar, which takes one directory
// more. It says whether there was somewhere to go.
func (g *glob) resume() bool {
	if g.star.pattern >= 0 {
		if r, size := utf8.DecodeRuneInString(g.name[g.star.name:]); r != separator {
			g.star.name += size
			g.p, g.n, g.segmentStart = g.star.pattern, g.star.name, false
			return true
		}
	}
	if g.doublestar.pattern >= 0 {
		for i := g.doublestar.name; i < len(g.name); {
			r, size := utf8.DecodeRuneInString(g.name[i:])
			i += size
			if r == separator {
				g.doublestar.name = i
				g.p, g.n, g.segmentStart = g.doublestar.pattern, i, true
				return true
			}
		}
	}
	return false
}

// zeroLength says whether the rest of a pattern matches the empty rest of
// a name.
func zeroLength(rest string) (bool, error) {
	switch rest {
	case "", "*", "**", "/**":
		return true, nil
	}
	if rest[0] != '{' {
		if !validPattern(rest) {
			return false, path.ErrBadPattern
		}
		return false, nil
	}
	end := closingBrace(rest[1:])
	if end < 0 {
		return false, path.ErrBadPattern
	}
	end++
	after := rest[end+1:]
	start := 1
	for {
		comma := nextAlternative(rest[start:end])
		if comma < 0 {
			return zeroLength(rest[start:end] + after)
		}
		comma += start
		if ok, err := zeroLength(rest[start:comma] + after); ok || err != nil {
			return ok, err
		}
		start = comma + 1
	}
}

// validPattern says whether a pattern is well formed: no trailing
// backslash, classes closed and not empty, braces balanced.
func validPattern(s string) bool {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
			if i >= len(s) {
				return false
			}
		case '[':
			i++
			if i < len(s) && (s[i] == '^' || s[i] == '!') {
				i++
			}
			if i >= len(s) || s[i] == ']' {
				return false
			}
			end := indexUnescaped(s[i:], ']')
			if end < 0 {
				return false
			}
			i += end
		case '{':
			depth++
		case '}':
			if depth == 0 {
				return false
			}
			depth--
		}
	}
	return depth == 0
}

// indexUnescaped is the index of the first c in s not after a backslash,
// or -1.
func indexUnescaped(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case c:
			return i
		}
	}
	return -1
}

// closingBrace is the index of the '}' closing a '{' just before s, or -1.
func closingBrace(s string) int {
	depth := 1
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '{':
			depth++
		case '}':
			if depth--; depth == 0 {
				return i
			}
		}
	}
	return -1
}

// nextAlternative is the index of the first ',' of s outside nested
// braces, or -1.
func nextAlternative(s string) int {
	depth := 1
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '{':
			depth++
		case '}':
			depth--
		case ',':
			if depth == 1 {
				return i
			}
		}
	}
	return -1
}

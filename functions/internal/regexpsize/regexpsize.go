// Package regexpsize estimates how large a regular expression compiles,
// without compiling it: the functions that take a pattern from their
// functionConfig check it against a limit before matching every field with
// it.
package regexpsize

import "regexp/syntax"

// Instructions is about the size of re compiled, without compiling it
// (which expands its repetitions): a literal's characters, a repetition's
// expression times its maximum (or minimum) count, one for any other
// operator and its operands'. It stops counting past a million.
func Instructions(re *syntax.Regexp) int {
	const most = 1 << 20
	switch re.Op {
	case syntax.OpLiteral:
		return max(len(re.Rune), 1)
	case syntax.OpRepeat:
		return min(Instructions(re.Sub[0])*max(re.Max, re.Min, 1), most)
	}
	n := 1
	for _, sub := range re.Sub {
		n = min(n+Instructions(sub), most)
	}
	return n
}

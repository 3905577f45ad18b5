// Command doublestar402 answers doublestar v4.0.2's Match, which
// search-replace v0.2.0 is built with, for the pairs on its input: each
// line a pattern, a tab and a name; each answer a line of 1 (match), 0 (no
// match) or E (path.ErrBadPattern, or another error after it).
// functions/search-replace/searchreplace's glob test compares fnrunner's
// matching with it.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64<<10), 1<<20)
	out := bufio.NewWriter(os.Stdout)
	for in.Scan() {
		pattern, name, ok := strings.Cut(in.Text(), "\t")
		if !ok {
			fmt.Fprintln(os.Stderr, "doublestar402: a line without a tab")
			os.Exit(2)
		}
		switch ok, err := doublestar.Match(pattern, name); {
		case err != nil:
			fmt.Fprintln(out, "E")
		case ok:
			fmt.Fprintln(out, "1")
		default:
			fmt.Fprintln(out, "0")
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "doublestar402:", err)
		os.Exit(2)
	}
	if err := out.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "doublestar402:", err)
		os.Exit(2)
	}
}

package searchreplace

import (
	"bufio"
	"errors"
	"math/rand/v2"
	"os/exec"
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/tests/harness"
)

func TestMatchFilePath(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
		err           error
	}{
		{"**/setters.yaml", "a/b/setters.yaml", true, nil},
		{"app/*.yaml", "app/x.yaml", true, nil},
		{"app/*.yaml", "app/b/x.yaml", false, nil},
		{"**", "a/b", true, nil},
		{"*.{yaml,yml}", "x.yml", true, nil},
		// v4.0.2 decides at the first alternatives it reaches.
		{"**/{a,b}.yaml", "a.yaml", true, nil},
		{"**/{a,b}.yaml", "dir/a.yaml", false, nil},
		{"*{a,b}", "xa", false, nil},
		{"*.{yaml,yml}", "a.b.yaml", false, nil},
		{"[a", "b", false, path.ErrBadPattern},
		{"a[", "a", false, path.ErrBadPattern},
		{"a{b", "ab", false, path.ErrBadPattern},
		{"x}", "y", false, path.ErrBadPattern},
		{"x}", "x}", true, nil},
	} {
		ok, err := matchFilePath(tc.pattern, tc.name)
		assert.Equal(t, tc.want, ok, "%q %q", tc.pattern, tc.name)
		assert.ErrorIs(t, err, tc.err, "%q %q", tc.pattern, tc.name)
		if tc.err == nil {
			assert.NoError(t, err, "%q %q", tc.pattern, tc.name)
		}
	}
}

// globPairs are patterns and names over the runes globs treat apart, a
// letter of two bytes among them: every combination the matcher's states
// can meet, at random, with a fixed seed, and all short ones in full.
func globPairs() [][2]string {
	patternTerms := []string{"a", "b", "é", "/", ".", "*", "**", "**/", "/**", "?", "[ab]", "[!a]", "[a-b]", "[\\]]", "[", "]", "{", "}", ",", "{a,b}", "{a,}", "{,/}", "{a,{b,c}}", "\\", "\\*", "\\a", "-", "^"}
	nameRunes := []string{"a", "b", "c", "é", "/", ".", "*", "{", "}", ",", "]", "\\", "-"}
	var pairs [][2]string
	names := []string{""}
	for range 3 {
		var longer []string
		for _, n := range names {
			for _, r := range []string{"a", "b", "/", "."} {
				longer = append(longer, n+r)
			}
		}
		names = append(names, longer...)
	}
	patterns := []string{""}
	for range 2 {
		var longer []string
		for _, p := range patterns {
			for _, term := range patternTerms {
				longer = append(longer, p+term)
			}
		}
		patterns = append(patterns, longer...)
	}
	for _, p := range patterns {
		for _, n := range names {
			pairs = append(pairs, [2]string{p, n})
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200_000 {
		var p, n strings.Builder
		for range rng.IntN(8) {
			p.WriteString(patternTerms[rng.IntN(len(patternTerms))])
		}
		for range rng.IntN(10) {
			n.WriteString(nameRunes[rng.IntN(len(nameRunes))])
		}
		pairs = append(pairs, [2]string{p.String(), n.String()})
	}
	return pairs
}

// TestMatchFilePathAsDoublestar402 compares matchFilePath with doublestar
// v4.0.2 itself (tools/doublestar402, built from its module) on globPairs:
// the same answer for every pair, ErrBadPattern where it fails.
func TestMatchFilePathAsDoublestar402(t *testing.T) {
	oracle := harness.Binary(t, "FNRUNNER_DOUBLESTAR402")
	pairs := globPairs()
	var in strings.Builder
	for _, p := range pairs {
		in.WriteString(p[0] + "\t" + p[1] + "\n")
	}
	cmd := exec.Command(oracle)
	cmd.Stdin = strings.NewReader(in.String())
	out, err := cmd.Output()
	require.NoError(t, err)
	answers := bufio.NewScanner(strings.NewReader(string(out)))
	differ := 0
	for _, p := range pairs {
		require.True(t, answers.Scan(), "doublestar402 answered fewer pairs than it was given")
		ok, err := matchFilePath(p[0], p[1])
		got := "0"
		switch {
		case errors.Is(err, path.ErrBadPattern):
			got = "E"
		case err != nil:
			t.Fatalf("%q %q: %v", p[0], p[1], err)
		case ok:
			got = "1"
		}
		if want := answers.Text(); got != want {
			differ++
			if differ <= 20 {
				t.Errorf("pattern %q, name %q: %s, doublestar v4.0.2 %s", p[0], p[1], got, want)
			}
		}
	}
	assert.Zero(t, differ, "of %d pairs", len(pairs))
	t.Logf("%d pairs, the same answers", len(pairs))
}

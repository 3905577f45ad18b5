// Package docs_test holds README.md and docs/ to the rules of issue 36: a
// README of at most maxReadmeLines with a link to switching from porch, a
// path table that lists exactly the directories one level under tableRoots,
// prose of short sentences and short table cells, and relative links that
// lead somewhere.
//
// The pages come from the runfiles (//:docs); the tree the path table and
// the links are checked against is the repository itself (harness.Workspace),
// so that a new directory, or a file a link names, counts at once.
package docs_test

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/tests/harness"
)

const (
	maxReadmeLines  = 200
	maxMeanSentence = 25.0
	maxTableCell    = 200
	switchLinkName  = "Switching from porch"
	generatedBench  = "docs/bench/"
)

// tableRoots are the directories whose every subdirectory the README's path
// table lists. One that does not exist (yet) has none.
var tableRoots = []string{"libs", "services", "tools", "tests", "functions"}

// pages reads every page of //:docs from the runfiles, by its path from the
// repository's root.
func pages(t *testing.T) map[string]string {
	t.Helper()
	files := strings.Fields(os.Getenv("FNRUNNER_DOCS"))
	require.NotEmpty(t, files, "FNRUNNER_DOCS is not set: run this test with tools/bazel test")
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(harness.Runfile(t, f))
		require.NoError(t, err)
		out[path.Clean(filepath.ToSlash(f))] = string(b)
	}
	require.Contains(t, out, "README.md")
	return out
}

// sorted returns the pages' paths in order.
func sorted(p map[string]string) []string {
	names := make([]string, 0, len(p))
	for n := range p {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func TestReadmeIsAFrontDoor(t *testing.T) {
	readme := pages(t)["README.md"]
	lines := strings.Count(strings.TrimSuffix(readme, "\n"), "\n") + 1
	assert.LessOrEqual(t, lines, maxReadmeLines, "README.md lines: move detail to docs/")
	assert.Regexp(t, `\[`+switchLinkName+`\]\([^)]+\)`, readme, "README.md links to switching from porch by that name")
}

// pathCell is a path table's first cell: `root/dir`, with or without a
// trailing slash.
var pathCell = regexp.MustCompile("^`([a-z]+)/([^/`]+)/?`$")

// TestPathTableListsEveryDirectory compares the README's path table with
// the directories one level under each of tableRoots.
func TestPathTableListsEveryDirectory(t *testing.T) {
	listed := map[string]bool{}
	for _, l := range Lines(pages(t)["README.md"]) {
		if !IsTableRow(l.Text) {
			continue
		}
		m := pathCell.FindStringSubmatch(Cells(l.Text)[0])
		if m == nil || !slices.Contains(tableRoots, m[1]) {
			continue
		}
		p := m[1] + "/" + m[2]
		assert.False(t, listed[p], "README.md:%d lists %s twice", l.Number, p)
		listed[p] = true
	}
	root := harness.Workspace(t)
	var tree []string
	for _, dir := range tableRoots {
		entries, err := os.ReadDir(filepath.Join(root, dir))
		if os.IsNotExist(err) {
			continue
		}
		require.NoError(t, err)
		for _, e := range entries {
			if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
				tree = append(tree, dir+"/"+e.Name())
			}
		}
	}
	for _, p := range tree {
		assert.True(t, listed[p], "%s is not in README.md's path table: add a row for it", p)
	}
	for p := range listed {
		assert.Contains(t, tree, p, "README.md's path table lists %s, which is not a directory", p)
	}
}

// TestProse: short sentences and short table cells on every page but
// docs/bench's, which the bench tool writes.
func TestProse(t *testing.T) {
	all := pages(t)
	for _, name := range sorted(all) {
		if strings.HasPrefix(name, generatedBench) {
			continue
		}
		t.Run(name, func(t *testing.T) {
			text := all[name]
			p := Measure(text)
			assert.LessOrEqual(t, p.Mean(), maxMeanSentence, "%s: mean sentence of %.1f words (%d words, %d sentences): split sentences", name, p.Mean(), p.Words, p.Sentences)
			for _, l := range Lines(text) {
				if !IsTableRow(l.Text) {
					continue
				}
				for _, c := range Cells(l.Text) {
					assert.LessOrEqual(t, utf8.RuneCountInString(c), maxTableCell, "%s:%d: a table cell of %d characters: %.60s…", name, l.Number, utf8.RuneCountInString(c), c)
				}
			}
		})
	}
}

var (
	linkTarget = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	external   = regexp.MustCompile(`^[a-z][a-z0-9+.-]*:`)
)

// TestRelativeLinksLeadSomewhere: every relative link of every page names a
// file or directory of the repository, and a #fragment a heading of the
// page it names.
func TestRelativeLinksLeadSomewhere(t *testing.T) {
	all := pages(t)
	root := harness.Workspace(t)
	for _, name := range sorted(all) {
		for _, l := range Lines(all[name]) {
			text := codeSpan.ReplaceAllString(l.Text, "")
			for _, m := range linkTarget.FindAllStringSubmatch(text, -1) {
				target := m[1]
				if external.MatchString(target) {
					continue
				}
				file, fragment, _ := strings.Cut(target, "#")
				where := fmt.Sprintf("%s:%d: link %s", name, l.Number, target)
				page := name
				if file != "" {
					page = path.Clean(path.Join(path.Dir(name), file))
					if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(page))); err != nil {
						t.Errorf("%s: no such file: %s", where, page)
						continue
					}
				}
				if fragment == "" || !strings.HasSuffix(page, ".md") {
					continue
				}
				text, ok := all[page]
				if !ok {
					b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(page)))
					require.NoError(t, err)
					text = string(b)
				}
				assert.Contains(t, anchors(text), fragment, "%s: no heading of %s has that anchor", where, page)
			}
		}
	}
}

// anchors are the ids GitHub gives a page's headings: lower case, without
// punctuation but - and _, spaces as -, a second of a name suffixed -1.
func anchors(text string) []string {
	var out []string
	seen := map[string]int{}
	for _, l := range Lines(text) {
		t := strings.TrimSpace(l.Text)
		if !strings.HasPrefix(t, "#") {
			continue
		}
		t = strings.TrimSpace(strings.TrimLeft(t, "#"))
		t = link.ReplaceAllString(t, "$1")
		var b strings.Builder
		for _, r := range strings.ToLower(t) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out = append(out, fmt.Sprintf("%s-%d", a, n))
		} else {
			out = append(out, a)
		}
		seen[a]++
	}
	return out
}

func TestAnchors(t *testing.T) {
	assert.Equal(t, []string{"switching-from-porch", "the-gateways---port", "faq", "faq-1"},
		anchors("# Switching from porch\n```\n# not a heading\n```\n## The gateway's `--port`\n## FAQ\n## FAQ\n"))
}

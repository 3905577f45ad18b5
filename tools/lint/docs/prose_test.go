package docs_test

// How a page is read: its lines outside code blocks, its tables' cells and
// its sentences.

import (
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
)

// Prose is what a page says in sentences: its paragraphs and list items,
// without code blocks, tables, headings or HTML.
type Prose struct {
	Sentences int
	Words     int
}

// Mean is the mean sentence length in words (0 for a page without prose).
func (p Prose) Mean() float64 {
	if p.Sentences == 0 {
		return 0
	}
	return float64(p.Words) / float64(p.Sentences)
}

var (
	fence    = regexp.MustCompile("^\\s*(```|~~~)")
	listItem = regexp.MustCompile(`^\s*([-*+]|\d+\.)\s+`)
	codeSpan = regexp.MustCompile("`+[^`]*`+")
	image    = regexp.MustCompile(`!\[[^\]]*\]\([^)]*\)`)
	link     = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	htmlTag  = regexp.MustCompile(`<!--.*?-->|</?[a-zA-Z][^>]*>`)
	ending   = regexp.MustCompile(`[.!?]["')\]]*\s+`)
	// abbreviations end no sentence.
	abbreviations = strings.NewReplacer("e.g.", "eg", "i.e.", "ie", "etc.)", "etc)", "vs.", "vs")
)

// Lines returns the page's lines outside fenced code blocks, each with its
// 1-based line number.
func Lines(text string) []Line {
	var out []Line
	in := false
	for i, l := range strings.Split(text, "\n") {
		if fence.MatchString(l) {
			in = !in
			continue
		}
		if !in {
			out = append(out, Line{Number: i + 1, Text: l})
		}
	}
	return out
}

// Line is one line of a page.
type Line struct {
	Number int
	Text   string
}

// IsTableRow says whether l is a row of a Markdown table.
func IsTableRow(l string) bool {
	return strings.HasPrefix(strings.TrimSpace(l), "|")
}

// Cells returns a table row's cells, trimmed; an escaped \| is no border.
func Cells(row string) []string {
	row = strings.TrimSpace(row)
	row = strings.TrimPrefix(row, "|")
	row = strings.TrimSuffix(row, "|")
	var cells []string
	var cell strings.Builder
	for i := 0; i < len(row); i++ {
		switch {
		case row[i] == '\\' && i+1 < len(row) && row[i+1] == '|':
			cell.WriteString(`\|`)
			i++
		case row[i] == '|':
			cells = append(cells, strings.TrimSpace(cell.String()))
			cell.Reset()
		default:
			cell.WriteByte(row[i])
		}
	}
	return append(cells, strings.TrimSpace(cell.String()))
}

// Measure counts the page's sentences and their words. A paragraph or a
// list item is split at a full stop, question or exclamation mark followed
// by a space; its end ends a sentence too. A code span counts as one word.
func Measure(text string) Prose {
	var p Prose
	var block []string
	flush := func() {
		if len(block) > 0 {
			p.add(strings.Join(block, " "))
		}
		block = block[:0]
	}
	for _, l := range Lines(text) {
		t := strings.TrimSpace(l.Text)
		switch {
		case t == "", IsTableRow(t), strings.HasPrefix(t, "#"), strings.HasPrefix(t, "<"):
			flush()
			continue
		case listItem.MatchString(t):
			flush()
			t = listItem.ReplaceAllString(t, "")
		}
		block = append(block, t)
	}
	flush()
	return p
}

func (p *Prose) add(text string) {
	text = image.ReplaceAllString(text, "")
	text = codeSpan.ReplaceAllString(text, "code")
	text = link.ReplaceAllString(text, "$1")
	text = htmlTag.ReplaceAllString(text, "")
	text = abbreviations.Replace(text)
	for _, s := range ending.Split(text+" ", -1) {
		if n := words(s); n > 0 {
			p.Sentences++
			p.Words += n
		}
	}
}

func words(s string) int {
	n := 0
	for _, w := range strings.Fields(s) {
		if strings.IndexFunc(w, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) >= 0 {
			n++
		}
	}
	return n
}

func TestMeasure(t *testing.T) {
	for _, tc := range []struct {
		name             string
		text             string
		sentences, words int
	}{
		{"two sentences", "One two three. Four five.\n", 2, 5},
		{"a paragraph over two lines", "One two\nthree four.\n", 1, 4},
		{"a list item ends a sentence", "- one two\n- three\n", 2, 3},
		{"code spans are one word", "Run `tools/bazel test //...` now.\n", 1, 3},
		{"links count their text", "See [the porch page](docs/porch.md).\n", 1, 4},
		{"abbreviations end nothing", "Use a flag, e.g. `--port`, here.\n", 1, 6},
		{"decimals end nothing", "It took 0.6 ms.\n", 1, 4},
		{"code blocks, tables and headings are no prose", "# Title\n\n```\nnot. prose. here.\n```\n\n| a | b |\n|---|---|\n\nOne.\n", 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Measure(tc.text)
			assert.Equal(t, tc.sentences, p.Sentences, "sentences")
			assert.Equal(t, tc.words, p.Words, "words")
		})
	}
}

func TestCells(t *testing.T) {
	assert.Equal(t, []string{"`a`", "b \\| c", ""}, Cells("| `a` | b \\| c | |"))
}

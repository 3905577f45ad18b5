package searchreplace

import (
	"fmt"
	"regexp/syntax"
	"strings"

	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/fnrunner/fnrunner/functions/internal/budget"
	"github.com/fnrunner/fnrunner/functions/internal/regexpsize"
	"github.com/fnrunner/fnrunner/functions/internal/treesize"
)

// ErrTooLarge is returned for a run that would do more than its input
// warrants: with an expression over its limit, or more work than its
// budget.
var ErrTooLarge = budget.ErrTooLarge

// Limits on the expressions, whose cost is paid at every field or resource.
const (
	// maxPathElements bounds by-path's elements: each step down a
	// resource costs one step per element.
	maxPathElements = 64
	// maxRegexBytes and maxRegexInstructions bound by-value-regex, which
	// is run on every value in time in proportion to its compiled size.
	maxRegexBytes        = 4 << 10
	maxRegexInstructions = 1000
	// maxFilePathBytes and maxFilePathAlternatives bound by-file-path,
	// matched against every resource's file path in time in proportion to
	// its length times the path's, and to the number of paths its braces
	// stand for ({a,b}{c,d} for four).
	maxFilePathBytes        = 1 << 10
	maxFilePathAlternatives = 64
)

// checkLimits checks cfg's expressions against their limits.
func checkLimits(cfg Config) error {
	if n := strings.Count(cfg.ByPath, pathDelimiter) + 1; cfg.ByPath != "" && n > maxPathElements {
		return fmt.Errorf("%w: %s has %d elements, more than %d", ErrTooLarge, ByPath, n, maxPathElements)
	}
	if len(cfg.ByFilePath) > maxFilePathBytes {
		return fmt.Errorf("%w: %s is %d bytes, more than %d", ErrTooLarge, ByFilePath, len(cfg.ByFilePath), maxFilePathBytes)
	}
	if n := alternatives(cfg.ByFilePath); n > maxFilePathAlternatives {
		return fmt.Errorf("%w: %s stands for more than %d paths", ErrTooLarge, ByFilePath, maxFilePathAlternatives)
	}
	if cfg.ByValueRegex == "" {
		return nil
	}
	if len(cfg.ByValueRegex) > maxRegexBytes {
		return fmt.Errorf("%w: %s is %d bytes, more than %d", ErrTooLarge, ByValueRegex, len(cfg.ByValueRegex), maxRegexBytes)
	}
	// As regexp.Compile parses it; a bad expression is left to
	// regexp.Compile to report.
	re, err := syntax.Parse(cfg.ByValueRegex, syntax.Perl)
	if err != nil {
		return nil
	}
	if n := regexpsize.Instructions(re); n > maxRegexInstructions {
		return fmt.Errorf("%w: %s compiles to about %d instructions, more than %d", ErrTooLarge, ByValueRegex, n, maxRegexInstructions)
	}
	return nil
}

// alternatives is the number of patterns the braces of a glob stand for,
// or more: the product of their alternatives, nested ones counted as if
// they were not ({a,{b,c}} counts four). It stops counting past
// maxFilePathAlternatives.
func alternatives(glob string) int {
	product := 1
	var open []int // the alternatives of each brace open so far
	for i := 0; i < len(glob) && product <= maxFilePathAlternatives; i++ {
		switch glob[i] {
		case '\\':
			i++
		case '{':
			open = append(open, 1)
		case ',':
			if len(open) > 0 {
				open[len(open)-1]++
			}
		case '}':
			if len(open) > 0 {
				product *= open[len(open)-1]
				open = open[:len(open)-1]
			}
		}
	}
	return product
}

// The budget of a run: what it may add to its input's memory, in bytes.
// The input's tree takes about 30 bytes of memory for each byte of its YAML
// (a node is nodeBytes), and a run copies it; it may add budget.Slack plus
// half that tree (treesize.Bytes of the resources). A match reported costs
// matchBytes, its value (twice: in the result's message too) and its path;
// a value written, its text; YAML text made with the encoder, encodeBytes
// and encodeFactor times the tree it writes (the encoder holds all its
// events); and each replacement of a capture
// group, the text it reads and writes. The function runs in the binary-runner's process,
// which admits it by its input's size.
const (
	nodeBytes    = treesize.NodeBytes
	matchBytes   = 512
	encodeBytes  = 8 << 10
	encodeFactor = 16
)

// newBudget is the budget of a run whose input takes input bytes.
func newBudget(input int) *budget.Budget {
	return budget.New(input, "matches and values", budget.WithHalfInput())
}

// quickText is scalar n as YAML, without the spaces around it, as
// yaml.String writes it, for the common cases it knows without the
// encoder's cost: a string of printable ASCII, plain (starting with a
// letter, not true, false or null, of letters, digits and ./_-), single or
// double quoted (without quotes or backslashes), an integer or a boolean,
// with a line comment or none. ok is false for the others.
func quickText(n *yaml.Node) (text string, ok bool) {
	if n.Kind != yaml.ScalarNode || n.Anchor != "" || n.HeadComment != "" || n.FootComment != "" ||
		!printable(n.Value) || !printable(n.LineComment) {
		return "", false
	}
	switch {
	case n.Style == 0 && (n.Tag == "" || n.Tag == yaml.NodeTagString) && isPlainString(n.Value):
		text = n.Value
	case n.Style == 0 && (n.Tag == "" || n.Tag == yaml.NodeTagInt) && isInteger(n.Value):
		text = n.Value
	case n.Style == 0 && (n.Tag == "" || n.Tag == yaml.NodeTagBool) && (n.Value == "true" || n.Value == "false"):
		text = n.Value
	case n.Style == yaml.DoubleQuotedStyle && !strings.ContainsAny(n.Value, `"\`):
		text = `"` + n.Value + `"`
	case n.Style == yaml.SingleQuotedStyle && !strings.Contains(n.Value, "'"):
		text = "'" + n.Value + "'"
	default:
		return "", false
	}
	switch {
	case n.LineComment == "":
	case strings.HasPrefix(n.LineComment, "#"):
		text += " " + n.LineComment
	default:
		text += " # " + n.LineComment
	}
	return strings.TrimSpace(text), true
}

// printable says whether s is printable ASCII.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// isPlainString says whether YAML writes string s plain: a letter then
// letters, digits and ./_-, and not true, false or null.
func isPlainString(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
		if !letter && (i == 0 || !('0' <= c && c <= '9' || c == '.' || c == '/' || c == '_' || c == '-')) {
			return false
		}
	}
	switch strings.ToLower(s) {
	case "true", "false", "null":
		return false
	}
	return true
}

// isInteger says whether s is a decimal integer without leading zeros.
func isInteger(s string) bool {
	s = strings.TrimPrefix(s, "-")
	if s == "" || (s[0] == '0' && len(s) > 1) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

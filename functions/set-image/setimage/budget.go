package setimage

import (
	"fmt"
	"regexp/syntax"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/fnrunner/fnrunner/functions/internal/budget"
	"github.com/fnrunner/fnrunner/functions/internal/regexpsize"
)

// ErrTooLarge is returned for a run that would do more than its input
// warrants: with an image name over its limits, or more work than its
// budget.
var ErrTooLarge = budget.ErrTooLarge

// Limits on the image name, a regular expression matched against every
// image, in time in proportion to its compiled size.
const (
	maxNameBytes        = 4 << 10
	maxNameInstructions = 1000
)

// checkName checks an image name against its limits. A name that is no
// regular expression is left to the matcher to report, as the catalog does.
func checkName(name string) *failure {
	err := nameLimits(name)
	if err == nil {
		return nil
	}
	return &failure{Results: fn.Results{{Message: err.Error(), Severity: fn.Error}}}
}

func nameLimits(name string) error {
	if len(name) > maxNameBytes {
		return fmt.Errorf("%w: image `name` is %d bytes, more than %d", ErrTooLarge, len(name), maxNameBytes)
	}
	re, err := syntax.Parse(imagePattern(name), syntax.Perl)
	if err != nil {
		return nil
	}
	if n := regexpsize.Instructions(re); n > maxNameInstructions {
		return fmt.Errorf("%w: image `name` compiles to about %d instructions, more than %d", ErrTooLarge, n, maxNameInstructions)
	}
	return nil
}

// The budget of a run with additional image fields: what it may spend,
// beyond the JSON round trip of each resource (which costs hundreds of
// bytes for each byte of it, see setAdditionalImages), on the parts of
// that round trip that grow faster than the resource, for a resource whose
// structure the round trip changes (see keepsStructure): kyaml's order
// sync looks each field of a map up in the map, and its comment copy each
// item of a list up in the list (roundTripBytes). A run may spend budget.Slack
// plus its input's size in memory (treesize.Bytes of its items: about 30
// bytes for each byte of their YAML, a node being treesize.NodeBytes).
const (
	// fieldPairBytes and itemPairBytes are what the order sync costs for
	// each field of a map and field before it, and the comment copy for
	// each item of a list and item before it.
	fieldPairBytes = 64
	itemPairBytes  = 1 << 10
)

// newBudget is the budget of a run whose input takes input bytes.
func newBudget(input int) *budget.Budget {
	return budget.New(input, "the maps and lists to restore after the JSON round trip")
}

// roundTripBytes is what the round trip of the resource n costs beyond its
// size: fieldPairBytes for each pair of fields in a map, and, if it has
// comments to copy, itemPairBytes for each pair of items in a list.
func roundTripBytes(n *yaml.Node) int {
	fields, items := pairs(n)
	if !hasComments(n) {
		items = 0
	}
	return fields*fieldPairBytes + items*itemPairBytes
}

// pairs counts the pairs of fields in the maps under n, and of items in
// its lists.
func pairs(n *yaml.Node) (fields, items int) {
	if n == nil {
		return 0, 0
	}
	switch k := len(n.Content); n.Kind {
	case yaml.MappingNode:
		fields = k / 2 * k / 2
	case yaml.SequenceNode:
		items = k * k
	}
	for _, c := range n.Content {
		f, i := pairs(c)
		fields, items = fields+f, items+i
	}
	return fields, items
}

// hasComments says whether the tree under n has a comment.
func hasComments(n *yaml.Node) bool {
	if n == nil {
		return false
	}
	if n.HeadComment != "" || n.LineComment != "" || n.FootComment != "" {
		return true
	}
	for _, c := range n.Content {
		if hasComments(c) {
			return true
		}
	}
	return false
}

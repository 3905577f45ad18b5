package setannotations

import (
	"strings"

	"github.com/fnrunner/fnrunner/functions/internal/budget"
)

// ErrTooLarge is returned for a run that would do more than its input
// warrants: with more annotations than maxAnnotations, or more work than
// its budget.
var ErrTooLarge = budget.ErrTooLarge

// Limits on the functionConfig. maxAnnotations bounds its annotations:
// each annotations field takes time in proportion to its annotations times
// the annotations set. maxConfigBytes bounds a SetAnnotations (see
// treesize.TextBytes), which is read through JSON.
const (
	maxAnnotations = 1024
	maxConfigBytes = 256 << 10
)

// The budget of a run: what it may add to its input's memory, in bytes.
// The input's tree takes about 30 bytes of memory for each byte of its YAML
// (a node is treesize.NodeBytes); a run may add budget.Slack plus as much
// again as that tree (treesize.Bytes of the resources). Going down a
// field's path costs pathBytes, and going through the aliases of a
// resource, treesize.NodeBytes a node it reaches again; setting an
// annotation costs setBytes, its text (twice: in the results too) and its
// field's path.
const setBytes = 512

// pathBytes is what kustomize's field spec filter costs going down path:
// 1 KiB a step, and the path so far copied at each.
func pathBytes(path string) int {
	steps := strings.Count(path, "/") + 1
	return (1+steps)<<10 + 16*steps*steps
}

// newBudget is the budget of a run whose input takes input bytes.
func newBudget(input int) *budget.Budget {
	return budget.New(input, "annotations to set")
}

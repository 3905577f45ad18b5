package ensurenamesubstring

import (
	"strings"

	"github.com/fnrunner/fnrunner/functions/internal/budget"
)

// ErrTooLarge is returned for a run that would do more than its input
// warrants: with a functionConfig over maxConfigBytes, or more work than
// its budget.
var ErrTooLarge = budget.ErrTooLarge

// maxConfigBytes bounds an EnsureNameSubstring (see treesize.TextBytes), which is
// read through JSON at a cost of hundreds of bytes for each of its bytes.
const maxConfigBytes = 256 << 10

// The budget of a run: what it may add to its input's memory, in bytes,
// beyond what kustomize's handling of each resource and reference costs
// anyway. The input's tree takes about 30 bytes of memory for each byte of
// its YAML (a node is treesize.NodeBytes); a run may add budget.Slack plus
// as much again as that tree (treesize.Bytes of the resources). Renaming a
// resource costs 16 times its new name (in its name, and kustomize's
// annotations recording the change, each copied and parsed as YAML to be
// set); setting a name field, setBytes and its new value; going down a
// field's path, pathBytes; going through the aliases of a resource,
// treesize.NodeBytes a node it reaches again (for each field looked for);
// and fixing references, sieveBytes for each reference and each resource it
// may refer to, and the referrer's id (refByBytes) for each reference to
// the same resource before it in the field (kustomize lists the referrers
// on the resource referred to, a list it copies to add one).
const (
	setBytes   = 512
	sieveBytes = 1 << 10
	refByBytes = 128
)

// newBudget is the budget of a run whose input takes input bytes.
func newBudget(input int) *budget.Budget {
	return budget.New(input, "names and references")
}

// pathBytes is what kustomize's field spec filter costs going down path:
// 1 KiB a step, and the path so far copied at each.
func pathBytes(path string) int {
	steps := strings.Count(path, "/") + 1
	return (1+steps)<<10 + 16*steps*steps
}

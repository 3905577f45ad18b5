package setlabels

import (
	"github.com/kptdev/krm-functions-sdk/go/fn"

	"github.com/fnrunner/fnrunner/functions/internal/budget"
	"github.com/fnrunner/fnrunner/functions/internal/treesize"
)

// ErrTooLarge is returned for a run that would do more than its input
// warrants: more labels than maxLabels, or more work than its budget.
var ErrTooLarge = budget.ErrTooLarge

// maxLabels bounds the labels of a functionConfig: each label field takes
// time in proportion to its labels times the labels set.
const maxLabels = 1024

// The budget of a run: what it may add to its input's memory, in bytes.
// The input's tree takes about 30 bytes of memory for each byte of its YAML
// (a node is nodeBytes); a run may add budget.Slack plus as much again as
// that tree (inputBytes). Setting a label adds two nodes and its text;
// looking one up, visitBytes. The function runs in the binary-runner's
// process, which admits it by its input's size.
const (
	nodeBytes  = treesize.NodeBytes
	visitBytes = 128
)

// newBudget is the budget of a run whose input takes input bytes.
func newBudget(input int) *budget.Budget {
	return budget.New(input, "labels to set")
}

// inputBytes is treesize.Bytes of rl's items and functionConfig, read in place
// (each object is left an object of the same nodes).
func inputBytes(rl *fn.ResourceList) int {
	size := 0
	measure := func(o *fn.KubeObject) {
		if o == nil {
			return
		}
		n := o.MoveToResourceNode()
		size += treesize.Bytes(n.YNode())
		*o = *fn.MoveToKubeObject(n)
	}
	for _, o := range rl.Items {
		measure(o)
	}
	measure(rl.FunctionConfig)
	return size
}

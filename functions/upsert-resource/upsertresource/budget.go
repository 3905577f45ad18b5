package upsertresource

import (
	"errors"

	"github.com/fnrunner/fnrunner/functions/internal/budget"
)

// ErrTooLarge is returned for a run that would copy more than its input
// warrants (see budget).
var ErrTooLarge = errors.New("output too large for the input")

// newBudget is the budget of a run whose input takes input bytes: what it
// may add to its input's memory, in bytes. The input's tree takes about 30
// bytes of memory for each byte of its YAML (a node is treesize.NodeBytes);
// a run may add budget.Slack plus as much again as that tree
// (treesize.Bytes of its items and of the resources to upsert). The
// function runs in the binary-runner's process, which admits it by its
// input's size.
func newBudget(input int) *budget.Budget {
	return budget.New(input, "copies of the resources to upsert", budget.WithSentinel(ErrTooLarge))
}

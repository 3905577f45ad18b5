package upsertresource

import (
	"errors"
	"fmt"

	"github.com/fnrunner/fnrunner/functions/internal/treesize"
)

// ErrTooLarge is returned for a run that would copy more than its input
// warrants (see budget).
var ErrTooLarge = errors.New("output too large for the input")

// The budget of a run: what it may add to its input's memory, in bytes.
// The input's tree takes about 30 bytes of memory for each byte of its YAML
// (a node is nodeBytes); a run may add budgetSlack plus as much again as
// that tree (treeBytes of its items and functionConfig). The function runs
// in the binary-runner's process, which admits it by its input's size.
const (
	budgetSlack = 8 << 20
	nodeBytes   = treesize.NodeBytes
)

// budget counts what a run adds against its limit.
type budget struct {
	limit, used int
}

func newBudget(input int) *budget {
	return &budget{limit: budgetSlack + input}
}

// spend counts n more bytes, or fails with ErrTooLarge when that exceeds
// the limit.
func (b *budget) spend(n int) error {
	b.used += n
	if b.used > b.limit {
		return fmt.Errorf("%w: copies of the resources to upsert exceed %d bytes (%d MiB and the input's size in memory)", ErrTooLarge, b.limit, budgetSlack>>20)
	}
	return nil
}

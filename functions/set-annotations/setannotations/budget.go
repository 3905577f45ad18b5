package setannotations

import (
	"errors"
	"fmt"
	"strings"

	"github.com/fnrunner/fnrunner/functions/internal/treesize"
)

// ErrTooLarge is returned for a run that would do more than its input
// warrants: with more annotations than maxAnnotations, or more work than
// its budget.
var ErrTooLarge = errors.New("too much work for the input")

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
// (a node is nodeBytes); a run may add budgetSlack plus as much again as
// that tree (treeBytes of the resources). Going down a field's path costs
// pathBytes, and going through the aliases of a resource, nodeBytes a node
// it reaches again; setting an annotation costs setBytes, its text (twice:
// in the results too) and its field's path.
const (
	budgetSlack = 8 << 20
	nodeBytes   = treesize.NodeBytes
	setBytes    = 512
)

// pathBytes is what kustomize's field spec filter costs going down path:
// 1 KiB a step, and the path so far copied at each.
func pathBytes(path string) int {
	steps := strings.Count(path, "/") + 1
	return (1+steps)<<10 + 16*steps*steps
}

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
		return fmt.Errorf("%w: annotations to set exceed %d bytes (%d MiB and the input's size in memory)", ErrTooLarge, b.limit, budgetSlack>>20)
	}
	return nil
}

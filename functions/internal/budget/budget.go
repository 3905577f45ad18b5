// Package budget bounds the work of a function's run by the size of its
// input. The functions run in the binary-runner's process, which admits a
// run by its input's size: a run may add to its input's memory (see
// treesize.Bytes) Slack and a share of that input, and a run that would
// add more fails with an error wrapping ErrTooLarge.
//
// A function counts what each step of its run adds with Budget.Spend, at
// costs it states in its own terms:
//
//	b := budget.New(input, "labels to set")
//	if err := b.Spend(2*treesize.NodeBytes + len(k) + len(v)); err != nil {
//		return err
//	}
package budget

import (
	"errors"
	"fmt"
)

// ErrTooLarge is wrapped by the error of a run that would do more than its
// input warrants.
var ErrTooLarge = errors.New("too much work for the input")

// Slack is what a run may add to its input's memory beyond its share of
// the input, in bytes.
const Slack = 8 << 20

// Budget counts what a run adds against its limit. It is not safe for
// concurrent use.
type Budget struct {
	limit, used int
	// what is what the run spends the budget on, and share the input's
	// share of the limit, as the error of an overspent budget names them.
	what, share string
	// err is the sentinel the error of an overspent budget wraps.
	err error
}

// Option configures the Budget of New.
type Option func(*options)

type options struct {
	halfInput bool
	sentinel  error
}

// WithHalfInput makes a run's limit Slack plus half of its input, not all
// of it.
func WithHalfInput() Option {
	return func(o *options) { o.halfInput = true }
}

// WithSentinel makes the error of an overspent budget wrap err instead of
// ErrTooLarge, for a function whose errors name their own.
func WithSentinel(err error) Option {
	return func(o *options) { o.sentinel = err }
}

// New returns the budget of a run whose input takes input bytes of memory
// (see treesize.Bytes): Slack plus as much again as its input, unless
// WithHalfInput. what names what the run spends it on ("labels to set"),
// in the error of Spend.
func New(input int, what string, opts ...Option) *Budget {
	o := options{sentinel: ErrTooLarge}
	for _, opt := range opts {
		opt(&o)
	}
	b := &Budget{limit: Slack + input, what: what, share: "the input's size", err: o.sentinel}
	if o.halfInput {
		b.limit, b.share = Slack+input/2, "half the input's size"
	}
	return b
}

// Spend counts n more bytes, or fails with an error wrapping ErrTooLarge
// (or the sentinel of WithSentinel) when that exceeds the limit.
func (b *Budget) Spend(n int) error {
	b.used += n
	if b.used > b.limit {
		return fmt.Errorf("%w: %s exceed %d bytes (%d MiB and %s in memory)", b.err, b.what, b.limit, Slack>>20, b.share)
	}
	return nil
}

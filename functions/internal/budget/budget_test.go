package budget_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/functions/internal/budget"
)

func TestSpend(t *testing.T) {
	errOwn := errors.New("output too large for the input")
	tests := []struct {
		name    string
		input   int
		opts    []budget.Option
		limit   int
		message string
		err     error
	}{{
		name:    "the input",
		input:   1001,
		limit:   budget.Slack + 1001,
		message: "too much work for the input: things exceed 8389609 bytes (8 MiB and the input's size in memory)",
		err:     budget.ErrTooLarge,
	}, {
		name:    "half the input",
		input:   1001,
		opts:    []budget.Option{budget.WithHalfInput()},
		limit:   budget.Slack + 500,
		message: "too much work for the input: things exceed 8389108 bytes (8 MiB and half the input's size in memory)",
		err:     budget.ErrTooLarge,
	}, {
		name:    "a sentinel of its own",
		input:   0,
		opts:    []budget.Option{budget.WithSentinel(errOwn)},
		limit:   budget.Slack,
		message: "output too large for the input: things exceed 8388608 bytes (8 MiB and the input's size in memory)",
		err:     errOwn,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := budget.New(tt.input, "things", tt.opts...)
			require.NoError(t, b.Spend(tt.limit-1))
			require.NoError(t, b.Spend(1))
			err := b.Spend(1)
			require.ErrorIs(t, err, tt.err)
			assert.EqualError(t, err, tt.message)
			if tt.err != budget.ErrTooLarge {
				assert.NotErrorIs(t, err, budget.ErrTooLarge)
			}
			// Once overspent, a budget stays overspent.
			assert.Error(t, b.Spend(0))
		})
	}
}

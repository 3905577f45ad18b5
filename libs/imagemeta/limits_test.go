package imagemeta

import (
	"context"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// endless reads as many bytes as asked for, without end.
type endless struct{}

func (endless) Read(p []byte) (int, error) { return len(p), nil }

// gated is endless, but its first read waits for proceed, once it said so
// on entered.
type gated struct {
	entered, proceed chan struct{}
	first            bool
}

func (g *gated) Read(p []byte) (int, error) {
	if !g.first {
		g.first = true
		close(g.entered)
		<-g.proceed
	}
	return len(p), nil
}

// Two answers read under one budget at once (a tag list's page and a
// ping, or pings over https and http) read no more than the budget
// together, and each fails past it. A read that another's overlaps takes
// its bytes before it reads: the budget never goes below zero, and no
// read is cut to a negative length.
func TestOneBudgetReadByTwoBodiesAtOnce(t *testing.T) {
	const budget = 100
	b := budgetOf(withReadBudget(context.Background(), budget, 0, "lookup"))
	slow := &gated{entered: make(chan struct{}), proceed: make(chan struct{})}
	first := &cappedBody{ReadCloser: io.NopCloser(slow), max: 1 << 20, what: "first", budget: b}
	second := &cappedBody{ReadCloser: io.NopCloser(endless{}), max: 1 << 20, what: "second", budget: b}

	type read struct {
		n   int
		err error
	}
	firstRead := make(chan read, 1)
	go func() {
		n, err := first.Read(make([]byte, 60))
		firstRead <- read{n, err}
	}()
	<-slow.entered // the first read is under way, its 60 bytes taken

	got, err := io.ReadAll(second)
	require.ErrorIs(t, err, ErrTooLarge, "the second body, past what the first left")
	assert.ErrorContains(t, err, "lookup: too large: more than 100 bytes")
	assert.Len(t, got, budget-60)

	close(slow.proceed)
	r := <-firstRead
	require.NoError(t, r.err)
	assert.Equal(t, 60, r.n)
	n, err := first.Read(make([]byte, 60))
	assert.ErrorIs(t, err, ErrTooLarge, "the first body, once the budget is spent")
	assert.Zero(t, n)
	assert.Zero(t, b.left.Load(), "the budget left")
}

// A body's own bound and its budget's: the tighter one ends it, and says
// so; bytes a read took and did not use go back to the budget.
func TestCappedBodyBounds(t *testing.T) {
	for _, tc := range []struct {
		name        string
		max, budget int64 // budget 0: none
		body        int
		read        int
		message     string // "": the whole body is read
	}{
		{name: "within both", max: 100, budget: 100, body: 100, read: 100},
		{name: "past its own bound", max: 50, budget: 100, body: 100, read: 50, message: "answer: too large: more than 50 bytes"},
		{name: "past the budget", max: 100, budget: 50, body: 100, read: 50, message: "lookup: too large: more than 50 bytes"},
		{name: "past its own bound, no budget", max: 50, body: 51, read: 50, message: "answer: too large: more than 50 bytes"},
		{name: "at its own bound, no budget", max: 50, body: 50, read: 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.budget > 0 {
				ctx = withReadBudget(ctx, tc.budget, 0, "lookup")
			}
			body := &cappedBody{ReadCloser: io.NopCloser(io.LimitReader(endless{}, int64(tc.body))), max: tc.max, what: "answer", budget: budgetOf(ctx)}
			got, err := io.ReadAll(body)
			assert.Len(t, got, tc.read)
			if tc.message == "" {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, ErrTooLarge)
				assert.ErrorContains(t, err, tc.message)
			}
			if b := budgetOf(ctx); b != nil {
				assert.Equal(t, tc.budget-int64(tc.read), b.left.Load(), "the budget left")
			}
		})
	}
}

package admission

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLimits(t *testing.T) {
	l := New(2, 1)
	ctx := context.Background()
	r1, err := l.Acquire(ctx)
	require.NoError(t, err, "first call")
	r2, err := l.Acquire(ctx)
	require.NoError(t, err, "second call")
	require.Equal(t, 2, l.InFlight(), "in flight after two calls")
	got := make(chan error, 1)
	go func() {
		r, err := l.Acquire(ctx) // queued
		if err == nil {
			r()
		}
		got <- err
	}()
	for l.Queued() != 1 {
	}
	_, err = l.Acquire(ctx)
	assert.ErrorIs(t, err, ErrQueueFull, "fourth call")
	r1()
	assert.NoError(t, <-got, "queued call")
	r2()
	assert.Zero(t, l.InFlight(), "in flight after release")
	assert.Zero(t, l.Queued(), "queued after release")

	// A waiter whose context ends gives up its queue place.
	l = New(1, 1)
	r, _ := l.Acquire(ctx)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = l.Acquire(cctx)
	assert.ErrorIs(t, err, context.Canceled, "cancelled waiter")
	assert.Zero(t, l.Queued(), "cancelled waiter still queued")
	r()
}

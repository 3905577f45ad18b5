package admission

import (
	"context"
	"errors"
	"testing"
)

func TestLimits(t *testing.T) {
	l := New(2, 1)
	ctx := context.Background()
	r1, err1 := l.Acquire(ctx)
	r2, err2 := l.Acquire(ctx)
	if err1 != nil || err2 != nil || l.InFlight() != 2 {
		t.Fatalf("first two: %v %v in flight %d", err1, err2, l.InFlight())
	}
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
	if _, err := l.Acquire(ctx); !errors.Is(err, ErrQueueFull) {
		t.Errorf("fourth call: %v, want ErrQueueFull", err)
	}
	r1()
	if err := <-got; err != nil {
		t.Errorf("queued call: %v", err)
	}
	r2()
	if l.InFlight() != 0 || l.Queued() != 0 {
		t.Errorf("in flight %d queued %d after release", l.InFlight(), l.Queued())
	}

	// A waiter whose context ends gives up its queue place.
	l = New(1, 1)
	r, _ := l.Acquire(ctx)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Acquire(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled waiter: %v", err)
	}
	if l.Queued() != 0 {
		t.Errorf("cancelled waiter still queued")
	}
	r()
}

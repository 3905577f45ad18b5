// Package admission bounds work: at most N calls run at once, at most Q more
// wait, and anything beyond is refused at once rather than queued without end.
package admission

import (
	"context"
	"errors"
)

// ErrQueueFull is returned when every slot is busy and the queue is full.
var ErrQueueFull = errors.New("too many calls in flight and queued")

// Limiter admits calls. The zero value is not usable; use New.
type Limiter struct {
	slots   chan struct{}
	waiting chan struct{}
}

// New returns a limiter for concurrent running calls and queue waiting ones.
func New(concurrent, queue int) *Limiter {
	if concurrent < 1 {
		concurrent = 1
	}
	if queue < 0 {
		queue = 0
	}
	return &Limiter{slots: make(chan struct{}, concurrent), waiting: make(chan struct{}, queue)}
}

// Acquire waits for a slot. It fails at once with ErrQueueFull when the
// queue is full, and with ctx's error when ctx ends while waiting. The
// returned release must be called exactly once.
func (l *Limiter) Acquire(ctx context.Context) (release func(), err error) {
	select {
	case l.slots <- struct{}{}:
		return l.release, nil
	default:
	}
	select {
	case l.waiting <- struct{}{}:
	default:
		return nil, ErrQueueFull
	}
	defer func() { <-l.waiting }()
	select {
	case l.slots <- struct{}{}:
		return l.release, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *Limiter) release() { <-l.slots }

// InFlight is the number of running calls.
func (l *Limiter) InFlight() int { return len(l.slots) }

// Queued is the number of waiting calls.
func (l *Limiter) Queued() int { return len(l.waiting) }

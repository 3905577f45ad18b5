// Package admission bounds work: at most N calls run at once, at most Q more
// wait, and anything beyond is refused at once rather than queued without end.
package admission

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fnrunner/fnrunner/libs/telemetry"
)

// ErrQueueFull is returned when every slot is busy and the queue is full.
var ErrQueueFull = errors.New("too many calls in flight and queued")

// Limiter admits calls. The zero value is not usable; use New.
type Limiter struct {
	slots   chan struct{}
	waiting chan struct{}
	wait    prometheus.Histogram
}

// New returns a limiter for concurrent running calls and queue waiting ones.
func New(concurrent, queue int) *Limiter {
	if concurrent < 1 {
		concurrent = 1
	}
	if queue < 0 {
		queue = 0
	}
	return &Limiter{slots: make(chan struct{}, concurrent), waiting: make(chan struct{}, queue), wait: newWaitHistogram()}
}

// Acquire waits for a slot. It fails at once with ErrQueueFull when the
// queue is full, and with ctx's error when ctx ends while waiting. The
// returned release must be called exactly once.
func (l *Limiter) Acquire(ctx context.Context) (release func(), err error) {
	_, span := telemetry.Start(ctx, spanName)
	defer func() { telemetry.End(span, err) }()
	select {
	case l.slots <- struct{}{}:
		l.wait.Observe(0)
		return l.release, nil
	default:
	}
	select {
	case l.waiting <- struct{}{}:
	default:
		return nil, ErrQueueFull
	}
	defer func() { <-l.waiting }()
	start := time.Now()
	select {
	case l.slots <- struct{}{}:
		waited(l.wait, start)
		return l.release, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *Limiter) release() { <-l.slots }

// spanName names the span of a call's wait for admission (its duration is
// the queue wait).
const spanName = "admission"

// InFlight is the number of running calls.
func (l *Limiter) InFlight() int { return len(l.slots) }

// Queued is the number of waiting calls.
func (l *Limiter) Queued() int { return len(l.waiting) }

// Collectors export how long admitted calls waited:
// fnrunner_admission_wait_seconds.
func (l *Limiter) Collectors() []prometheus.Collector {
	return []prometheus.Collector{l.wait}
}

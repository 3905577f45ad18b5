package admission

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"

	"github.com/fnrunner/fnrunner/libs/telemetry"
)

// Weighted admits calls by weight: an estimate of the memory a call needs
// while it runs (its input bytes times a factor for how it runs). Calls run
// while their weights fit in the capacity; the others wait in order of
// arrival, each up to its context's end: at most queue of them, holding at
// most queueBytes together (what a waiting call holds is its request, read
// whole before it comes here). Beyond either bound a call is refused at
// once with ErrQueueFull, but a call finding no other waiting may always
// wait. A call heavier than the whole capacity runs alone.
type Weighted struct {
	sem          *semaphore.Weighted
	capacity     int64
	queue        int64
	queueBytes   int64
	mu           sync.Mutex // serializes changes to waiting and waitingBytes together
	waiting      atomic.Int64
	waitingBytes atomic.Int64
	inFlight     atomic.Int64
	wait         prometheus.Histogram
}

// NewWeighted returns a limiter of capacity (weight units, e.g. bytes) with
// at most queue calls waiting, holding at most queueBytes.
func NewWeighted(capacity int64, queue int, queueBytes int64) *Weighted {
	if capacity < 1 {
		capacity = 1
	}
	return &Weighted{sem: semaphore.NewWeighted(capacity), capacity: capacity, queue: int64(max(queue, 0)), queueBytes: max(queueBytes, 0), wait: newWaitHistogram()}
}

// Acquire admits a call of weight that holds held bytes while it waits,
// as described on Weighted. The returned release must be called exactly
// once.
func (w *Weighted) Acquire(ctx context.Context, weight, held int64) (release func(), err error) {
	_, span := telemetry.Start(ctx, spanName, telemetry.AttrWeight.Int64(weight))
	defer func() { telemetry.End(span, err) }()
	weight = min(max(weight, 1), w.capacity)
	held = max(held, 0)
	if w.sem.TryAcquire(weight) {
		w.wait.Observe(0)
	} else {
		if !w.enqueue(held) {
			return nil, ErrQueueFull
		}
		start := time.Now()
		err := w.sem.Acquire(ctx, weight)
		w.dequeue(held)
		if err != nil {
			return nil, err
		}
		waited(w.wait, start)
	}
	return w.admitted(weight), nil
}

// TryAcquire admits a call of weight if it fits now, without waiting.
func (w *Weighted) TryAcquire(weight int64) (release func(), ok bool) {
	weight = min(max(weight, 1), w.capacity)
	if !w.sem.TryAcquire(weight) {
		return nil, false
	}
	return w.admitted(weight), true
}

// Grow makes a running call, admitted at weight, hold need instead when need
// is more: at once if the difference fits beside the calls running, and
// otherwise by giving its weight back and waiting for need whole, holding
// held bytes meanwhile (as a queued call holds its request), so that no call
// holds weight while it waits for more. It returns the release of what the
// call holds then (nil with an error: Acquire's).
func (w *Weighted) Grow(ctx context.Context, release func(), weight, need, held int64) (func(), error) {
	if need <= weight {
		return release, nil
	}
	if more, ok := w.TryAcquire(need - weight); ok {
		return func() { more(); release() }, nil
	}
	release()
	return w.Acquire(ctx, need, held)
}

// admitted counts weight in flight and returns its release.
func (w *Weighted) admitted(weight int64) (release func()) {
	w.inFlight.Add(weight)
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			w.inFlight.Add(-weight)
			w.sem.Release(weight)
		}
	}
}

// enqueue counts a call holding held bytes as waiting, if the queue has
// room for it.
func (w *Weighted) enqueue(held int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, bytes := w.waiting.Load()+1, w.waitingBytes.Load()+held
	if n > w.queue || n > 1 && bytes > w.queueBytes {
		return false
	}
	w.waiting.Store(n)
	w.waitingBytes.Store(bytes)
	return true
}

// dequeue counts a waiting call out.
func (w *Weighted) dequeue(held int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.waiting.Add(-1)
	w.waitingBytes.Add(-held)
}

// InFlight is the weight of the calls running.
func (w *Weighted) InFlight() int64 { return w.inFlight.Load() }

// Queued is the number of calls waiting.
func (w *Weighted) Queued() int64 { return w.waiting.Load() }

// QueuedBytes is what the calls waiting hold.
func (w *Weighted) QueuedBytes() int64 { return w.waitingBytes.Load() }

// QueueState says, for a refused call's answer, what waits and the bounds.
func (w *Weighted) QueueState() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("%d calls holding %d bytes already wait for memory (--max-queue %d, --max-queue-bytes %d)", w.Queued(), w.QueuedBytes(), w.queue, w.queueBytes)
}

// Capacity is the weight that may run at once.
func (w *Weighted) Capacity() int64 { return w.capacity }

// Collectors export the limiter's state: fnrunner_admission_in_flight_weight,
// fnrunner_admission_capacity_weight, fnrunner_admission_queued_calls and
// fnrunner_admission_queued_bytes,
// and how long admitted calls waited: fnrunner_admission_wait_seconds.
func (w *Weighted) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fnrunner_admission_in_flight_weight",
			Help: "Weight (estimated bytes of memory) of the calls running.",
		}, func() float64 { return float64(w.InFlight()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fnrunner_admission_capacity_weight",
			Help: "Weight (estimated bytes of memory) the calls running may have together.",
		}, func() float64 { return float64(w.Capacity()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fnrunner_admission_queued_calls",
			Help: "Calls waiting for room to run.",
		}, func() float64 { return float64(w.Queued()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fnrunner_admission_queued_bytes",
			Help: "Bytes the calls waiting for room to run hold (their requests).",
		}, func() float64 { return float64(w.QueuedBytes()) }),
		w.wait,
	}
}

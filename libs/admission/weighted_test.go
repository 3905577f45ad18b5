package admission

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/evalwire"
)

func TestWeightedAdmitsByWeight(t *testing.T) {
	w := NewWeighted(100, 2, 1<<30)
	ctx := context.Background()
	r60, err := w.Acquire(ctx, 60, 0)
	require.NoError(t, err)
	r30, err := w.Acquire(ctx, 30, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(90), w.InFlight())

	// 20 does not fit: it waits; so does the next one; a third is refused.
	admitted := make(chan func(), 2)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := w.Acquire(ctx, 20, 0)
			if assert.NoError(t, err) {
				admitted <- r
			}
		}()
	}
	for w.Queued() != 2 {
	}
	_, err = w.Acquire(ctx, 1, 0)
	assert.ErrorIs(t, err, ErrQueueFull, "a full queue refuses at once, whatever the weight")

	r60()
	wg.Wait()
	close(admitted)
	for r := range admitted {
		r()
		r() // a second release does nothing
	}
	r30()
	assert.Zero(t, w.InFlight())
	assert.Zero(t, w.Queued())
}

func TestWeightedHeavierThanCapacityRunsAlone(t *testing.T) {
	w := NewWeighted(100, 1, 1<<30)
	r, err := w.Acquire(context.Background(), 1000, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(100), w.InFlight())
	r()
}

func TestWeightedWaiterGivesUpAtItsDeadline(t *testing.T) {
	w := NewWeighted(10, 1, 1<<30)
	r, err := w.Acquire(context.Background(), 10, 0)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = w.Acquire(ctx, 5, 0)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, w.Queued(), "the waiter left the queue")
	r()
}

// Waiting calls hold their requests: what they hold together is bounded
// too, so that many large requests queued cannot take the service's memory
// (a queue of 1,024 calls of 6 MiB would hold 6 GiB). A call finding the
// queue empty may always wait, whatever it holds.
func TestWeightedBoundsWhatTheQueueHolds(t *testing.T) {
	w := NewWeighted(10, 100, 5<<20)
	ctx := context.Background()
	hold, err := w.Acquire(ctx, 10, 0)
	require.NoError(t, err)

	type result struct {
		release func()
		err     error
	}
	enqueue := func(weight, held int64) <-chan result {
		out := make(chan result, 1)
		before, beforeBytes := w.Queued(), w.QueuedBytes()
		go func() {
			r, err := w.Acquire(ctx, weight, held)
			out <- result{r, err}
		}()
		for w.Queued() == before || w.QueuedBytes() == beforeBytes {
			select {
			case r := <-out:
				out <- r // refused: not queued
				return out
			default:
			}
		}
		return out
	}
	big := enqueue(10, 8<<20)
	assert.Equal(t, int64(8<<20), w.QueuedBytes(), "alone in the queue, a call waits whatever it holds")
	_, err = w.Acquire(ctx, 1, 1)
	assert.ErrorIs(t, err, ErrQueueFull, "over --max-queue-bytes behind it")
	assert.Contains(t, w.QueueState(), "1 calls holding 8388608 bytes already wait")
	assert.Equal(t, int64(1), w.Queued(), "the refused call left no count behind")
	assert.Equal(t, int64(8<<20), w.QueuedBytes(), "nor bytes")

	hold()
	r := <-big
	require.NoError(t, r.err)
	// The call admitted holds the whole capacity: the next ones wait.
	small := []<-chan result{enqueue(1, 2<<20), enqueue(1, 2<<20)}
	assert.Equal(t, int64(4<<20), w.QueuedBytes())
	_, err = w.Acquire(ctx, 1, 2<<20)
	assert.ErrorIs(t, err, ErrQueueFull, "6 MiB would wait")
	_, err = w.Acquire(ctx, 1, 1<<20+1)
	assert.ErrorIs(t, err, ErrQueueFull, "a byte over")
	r.release()
	for _, c := range small {
		r := <-c
		require.NoError(t, r.err)
		r.release()
	}
	assert.Zero(t, w.Queued())
	assert.Zero(t, w.QueuedBytes())
}

type recorder struct{ calls int }

func (r *recorder) EvaluateFunction(_ context.Context, req *evalwire.Request) (*evalwire.Response, error) {
	r.calls++
	req.Free()
	return &evalwire.Response{}, nil
}

func TestEvaluatorRefusesAFullQueueWithoutCallingOn(t *testing.T) {
	next := &recorder{}
	w := NewWeighted(10, 0, 1<<30)
	e := &Evaluator{Next: next, Limit: w, Factor: 2, Service: "gateway"}
	req := func() *evalwire.Request {
		return &evalwire.Request{Image: "fn:v1", ResourceList: evalwire.Bytes([]byte("abc"))}
	}
	_, err := e.EvaluateFunction(context.Background(), req())
	require.NoError(t, err)
	assert.Equal(t, 1, next.calls)

	hold, err := w.Acquire(context.Background(), 10, 0)
	require.NoError(t, err)
	_, err = e.EvaluateFunction(context.Background(), req())
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "gateway queue full")
	assert.Equal(t, 1, next.calls, "a refused call never reaches the next server")
	hold()
}

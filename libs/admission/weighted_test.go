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
	w := NewWeighted(100, 2)
	ctx := context.Background()
	r60, err := w.Acquire(ctx, 60)
	require.NoError(t, err)
	r30, err := w.Acquire(ctx, 30)
	require.NoError(t, err)
	assert.Equal(t, int64(90), w.InFlight())

	// 20 does not fit: it waits; so does the next one; a third is refused.
	admitted := make(chan func(), 2)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := w.Acquire(ctx, 20)
			if assert.NoError(t, err) {
				admitted <- r
			}
		}()
	}
	for w.Queued() != 2 {
	}
	_, err = w.Acquire(ctx, 1)
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
	w := NewWeighted(100, 1)
	r, err := w.Acquire(context.Background(), 1000)
	require.NoError(t, err)
	assert.Equal(t, int64(100), w.InFlight())
	r()
}

func TestWeightedWaiterGivesUpAtItsDeadline(t *testing.T) {
	w := NewWeighted(10, 1)
	r, err := w.Acquire(context.Background(), 10)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = w.Acquire(ctx, 5)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, w.Queued(), "the waiter left the queue")
	r()
}

type recorder struct{ calls int }

func (r *recorder) EvaluateFunction(_ context.Context, req *evalwire.Request) (*evalwire.Response, error) {
	r.calls++
	req.Free()
	return &evalwire.Response{}, nil
}

func TestEvaluatorRefusesAFullQueueWithoutCallingOn(t *testing.T) {
	next := &recorder{}
	w := NewWeighted(10, 0)
	e := &Evaluator{Next: next, Limit: w, Factor: 2, Service: "gateway"}
	req := func() *evalwire.Request {
		return &evalwire.Request{Image: "fn:v1", ResourceList: evalwire.Bytes([]byte("abc"))}
	}
	_, err := e.EvaluateFunction(context.Background(), req())
	require.NoError(t, err)
	assert.Equal(t, 1, next.calls)

	hold, err := w.Acquire(context.Background(), 10)
	require.NoError(t, err)
	_, err = e.EvaluateFunction(context.Background(), req())
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "gateway queue full")
	assert.Equal(t, 1, next.calls, "a refused call never reaches the next server")
	hold()
}

package load

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestRunCountsEveryCallOnce(t *testing.T) {
	var calls, inFlight, peak atomic.Int64
	s := Run(context.Background(), 100, 8, func(context.Context) error {
		n := calls.Add(1)
		cur := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			p := peak.Load()
			if cur <= p || peak.CompareAndSwap(p, cur) {
				break
			}
		}
		if n%10 == 0 {
			return errors.New("every tenth fails")
		}
		return nil
	})
	assert.Equal(t, int64(100), calls.Load(), "calls made")
	assert.Equal(t, 100, s.Calls, "calls counted")
	assert.Equal(t, 10, s.Errors, "errors counted")
	assert.Error(t, s.FirstError, "first error")
	assert.LessOrEqual(t, peak.Load(), int64(8), "calls in flight, more than the concurrency of 8")
	assert.IsNonDecreasing(t, []time.Duration{s.Min, s.P50, s.P90, s.P99, s.Max}, "percentiles out of order: %+v", s)
}

func TestInterleavedMakesOneCallOfEachPerRound(t *testing.T) {
	var counts [3]atomic.Int64
	calls := make([]Call, len(counts))
	for i := range calls {
		calls[i] = func(context.Context) error { counts[i].Add(1); return nil }
	}
	s := Interleaved(context.Background(), 7, calls)
	for i := range counts {
		assert.Equal(t, int64(7), counts[i].Load(), "calls of scenario %d", i)
		assert.Equal(t, 7, s[i].Calls)
	}
	assert.Zero(t, s[0].PairedP50, "the first scenario against itself")
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []time.Duration
		want time.Duration
	}{
		{nil, 0},
		{[]time.Duration{5}, 5},
		{[]time.Duration{3, -1, 2}, 2},
		{[]time.Duration{4, 1, 3, 2}, 3},
	} {
		assert.Equal(t, tc.want, median(tc.in), "median of %v", tc.in)
	}
}

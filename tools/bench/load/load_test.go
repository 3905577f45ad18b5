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

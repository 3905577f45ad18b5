package load

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
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
	if calls.Load() != 100 || s.Calls != 100 || s.Errors != 10 || s.FirstError == nil {
		t.Errorf("calls=%d stats=%+v", calls.Load(), s)
	}
	if peak.Load() > 8 {
		t.Errorf("%d calls in flight, more than the concurrency of 8", peak.Load())
	}
	if s.P50 > s.P90 || s.P90 > s.P99 || s.P99 > s.Max || s.Min > s.P50 {
		t.Errorf("percentiles out of order: %+v", s)
	}
}

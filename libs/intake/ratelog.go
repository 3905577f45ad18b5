package intake

import (
	"sync"
	"time"
)

// rateLog lets one log line a reason through per interval and counts the
// ones it held back, so that an attack logs a line a second, not a line a
// stream.
type rateLog struct {
	every      time.Duration
	mu         sync.Mutex
	last       map[string]time.Time
	suppressed map[string]int
}

func newRateLog(every time.Duration) *rateLog {
	return &rateLog{every: every, last: map[string]time.Time{}, suppressed: map[string]int{}}
}

// allow reports whether a line for reason may be logged now and, if so, how
// many were held back since the last one.
func (r *rateLog) allow(reason string) (suppressed int, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if last, seen := r.last[reason]; seen && now.Sub(last) < r.every {
		r.suppressed[reason]++
		return 0, false
	}
	r.last[reason] = now
	n := r.suppressed[reason]
	r.suppressed[reason] = 0
	return n, true
}

package admission

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Both limiters record how long each admitted call waited: 0 when admitted
// at once, the time in the queue otherwise; refused calls and calls that
// gave up are not counted.
func TestWaitHistogram(t *testing.T) {
	tests := []struct {
		name string
		// limiter has room for one call and one waiting.
		limiter func() (acquire func(context.Context) (func(), error), queued func() int, collectors []prometheus.Collector)
	}{
		{name: "weighted", limiter: func() (func(context.Context) (func(), error), func() int, []prometheus.Collector) {
			w := NewWeighted(10, 1, 1<<30)
			return func(ctx context.Context) (func(), error) { return w.Acquire(ctx, 10, 0) }, func() int { return int(w.Queued()) }, w.Collectors()
		}},
		{name: "by count", limiter: func() (func(context.Context) (func(), error), func() int, []prometheus.Collector) {
			l := New(1, 1)
			return l.Acquire, l.Queued, l.Collectors()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			acquire, queued, collectors := tt.limiter()
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(collectors...)
			ctx := context.Background()

			first, err := acquire(ctx)
			require.NoError(t, err)
			count, sum := waitHistogram(t, reg)
			assert.Equal(t, uint64(1), count, "admitted at once")
			assert.Zero(t, sum, "admitted at once")

			gaveUp, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
			_, err = acquire(gaveUp)
			cancel()
			require.ErrorIs(t, err, context.DeadlineExceeded)
			count, _ = waitHistogram(t, reg)
			assert.Equal(t, uint64(1), count, "a call that gave up")

			admitted := make(chan func(), 1)
			go func() {
				r, err := acquire(ctx)
				assert.NoError(t, err)
				admitted <- r
			}()
			require.Eventually(t, func() bool { return queued() == 1 }, 5*time.Second, time.Millisecond)
			_, err = acquire(ctx)
			require.ErrorIs(t, err, ErrQueueFull)
			time.Sleep(50 * time.Millisecond)
			first()
			second := <-admitted
			second()
			count, sum = waitHistogram(t, reg)
			assert.Equal(t, uint64(2), count, "refused calls are not counted")
			assert.GreaterOrEqual(t, sum, 0.05, "the second call waited")
			assert.Less(t, sum, 5.0)
		})
	}
}

// waitHistogram is fnrunner_admission_wait_seconds's count and sum.
func waitHistogram(t *testing.T, reg *prometheus.Registry) (uint64, float64) {
	t.Helper()
	n, err := testutil.GatherAndCount(reg, "fnrunner_admission_wait_seconds")
	require.NoError(t, err)
	require.Equal(t, 1, n, "one histogram")
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == "fnrunner_admission_wait_seconds" {
			h := f.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	t.Fatal("no fnrunner_admission_wait_seconds")
	return 0, 0
}

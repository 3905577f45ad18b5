package admission

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// waitBuckets span an immediate admission to a call that waited out a
// long deadline.
var waitBuckets = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// newWaitHistogram is fnrunner_admission_wait_seconds: how long each
// admitted call waited, 0 for one admitted at once.
func newWaitHistogram() prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "fnrunner_admission_wait_seconds",
		Help:    "Time a call waited in the admission queue before it ran (0 when admitted at once); calls refused or that gave up are not counted.",
		Buckets: waitBuckets,
	})
}

// waited records a call admitted after waiting since start.
func waited(h prometheus.Histogram, start time.Time) { h.Observe(time.Since(start).Seconds()) }

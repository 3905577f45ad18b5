package podcache

import (
	"errors"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// other is the function label of a function without one (Function.Label
// empty: an image no FunctionConfig names, or a pod adopted at start that
// no call has named yet), and the reason of failures outside the set below.
const other = "other"

// Failure reasons, as fnrunner_pods_failed_total counts them: the
// container waiting reasons of failureReasons, these two, or other.
const (
	// ReasonUnschedulable: the pod was not ready within ReadyTimeout and
	// the scheduler last said it could not place it (PodUnschedulable).
	ReasonUnschedulable = "Unschedulable"
	// ReasonReadyTimeout: the pod was not ready within ReadyTimeout, for
	// any other reason.
	ReasonReadyTimeout = "ReadyTimeout"
)

// failureReasons are the reasons a Failure may carry; any other counts as
// other, so that the label stays a bounded set.
var failureReasons = []string{
	"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CrashLoopBackOff", "CreateContainerConfigError",
	ReasonUnschedulable, ReasonReadyTimeout,
}

// Failure is a pod failure (PodFailed's err) with its reason, e.g. the
// waiting reason of the container that fails; the error says the rest.
type Failure struct {
	Reason string
	Err    error
}

func (f *Failure) Error() string { return f.Err.Error() }
func (f *Failure) Unwrap() error { return f.Err }

// failureReason is the reason label of a pod failure.
func failureReason(err error) string {
	var f *Failure
	if errors.As(err, &f) && slices.Contains(failureReasons, f.Reason) {
		return f.Reason
	}
	return other
}

// Deletion reasons, as fnrunner_pods_deleted_total counts them.
const (
	deletedTTL             = "ttl"              // idle past its TTL
	deletedFailed          = "failed"           // failed, or not ready within ReadyTimeout
	deletedTemplateChanged = "template-changed" // retired (Retire: the templates changed), once idle
	deletedOrphan          = "orphan"           // left by an earlier run, deleted at start (Discarded)
)

// Pod states, as fnrunner_function_pods counts them.
const (
	stateStarting    = "starting"    // created or being created, not ready yet
	stateReady       = "ready"       // serving
	stateTerminating = "terminating" // retired and finishing its calls, or being deleted
)

// metrics are the cache's metric families (Collectors).
type metrics struct {
	coldStarts  *prometheus.CounterVec
	timeToReady *prometheus.HistogramVec
	created     *prometheus.CounterVec
	deleted     *prometheus.CounterVec
	failed      *prometheus.CounterVec
	pods        *prometheus.Desc
	waiting     *prometheus.Desc
}

func newMetrics() *metrics {
	return &metrics{
		coldStarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fnrunner_pod_cold_starts_total",
			Help: "Calls that waited for a function pod to start (no ready pod had room), by function.",
		}, []string{"function"}),
		timeToReady: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fnrunner_pod_time_to_ready_seconds",
			Help:    "Time from asking for a function pod to its being ready to serve (its wrapper-server answering the pod-manager's own health check, or the pod Ready), by function.",
			Buckets: []float64{.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 120, 300},
		}, []string{"function"}),
		created: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fnrunner_pods_created_total",
			Help: "Function pods created, by function.",
		}, []string{"function"}),
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fnrunner_pods_deleted_total",
			Help: "Function pods deleted, by function and reason: ttl, failed, template-changed, orphan.",
		}, []string{"function", "reason"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fnrunner_pods_failed_total",
			Help: "Function pods that failed or could not be created, by function and reason: ErrImagePull, ImagePullBackOff, InvalidImageName, CrashLoopBackOff, CreateContainerConfigError, Unschedulable, ReadyTimeout or other.",
		}, []string{"function", "reason"}),
		pods: prometheus.NewDesc("fnrunner_function_pods",
			"Function pods by function and state: starting, ready, terminating.", []string{"function", "state"}, nil),
		waiting: prometheus.NewDesc("fnrunner_pod_waiting_calls",
			"Calls waiting for a function pod: for one to start, or for room on one, by function.", []string{"function"}, nil),
	}
}

// Collectors export the cache's metrics: fnrunner_function_pods,
// fnrunner_pod_waiting_calls, fnrunner_pod_cold_starts_total,
// fnrunner_pod_time_to_ready_seconds, fnrunner_pods_created_total,
// fnrunner_pods_deleted_total and fnrunner_pods_failed_total.
func (c *Cache) Collectors() []prometheus.Collector {
	m := c.metrics
	return []prometheus.Collector{m.coldStarts, m.timeToReady, m.created, m.deleted, m.failed, gauges{c}}
}

// gauges collects fnrunner_function_pods and fnrunner_pod_waiting_calls
// from the cache's state when scraped.
type gauges struct{ c *Cache }

var _ prometheus.Collector = gauges{}

// gaugeWait bounds how long a scrape waits for the cache's loop.
const gaugeWait = time.Second

// Describe implements prometheus.Collector.
func (g gauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.c.metrics.pods
	ch <- g.c.metrics.waiting
}

// Collect implements prometheus.Collector.
func (g gauges) Collect(ch chan<- prometheus.Metric) {
	m := g.c.metrics
	for label, s := range g.c.functionStates(gaugeWait) {
		ch <- prometheus.MustNewConstMetric(m.pods, prometheus.GaugeValue, float64(s.starting), label, stateStarting)
		ch <- prometheus.MustNewConstMetric(m.pods, prometheus.GaugeValue, float64(s.ready), label, stateReady)
		ch <- prometheus.MustNewConstMetric(m.pods, prometheus.GaugeValue, float64(s.terminating), label, stateTerminating)
		ch <- prometheus.MustNewConstMetric(m.waiting, prometheus.GaugeValue, float64(s.waiting), label)
	}
}

// functionState is what the gauges say of one function label.
type functionState struct {
	starting, ready, terminating, waiting int
}

// functionStates asks the loop for the state by function label, waiting at
// most timeout for it (nothing if the cache is not running).
func (c *Cache) functionStates(timeout time.Duration) map[string]functionState {
	ch := make(chan map[string]functionState, 1)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case c.states <- ch:
		return <-ch
	case <-c.done:
	case <-t.C:
	}
	return nil
}

// states sums the pods and waiting calls of every function by label.
func (l *loop) states() map[string]functionState {
	out := map[string]functionState{}
	for key, f := range l.fns {
		s := out[f.labelOrOther()]
		for _, p := range f.pods {
			switch {
			case p.retired:
				s.terminating++
			case p.ready:
				s.ready++
			default:
				s.starting++
			}
			s.waiting += len(p.waiting)
		}
		s.terminating += l.deleting[key]
		s.waiting += len(f.queue)
		if len(f.pods) == 0 && l.deleting[key] == 0 && len(f.queue) == 0 {
			continue // a function that has nothing now
		}
		out[f.labelOrOther()] = s
	}
	return out
}

func (f *function) labelOrOther() string {
	if f.label == "" {
		return other
	}
	return f.label
}

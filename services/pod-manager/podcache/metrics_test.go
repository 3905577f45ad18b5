package podcache

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// labelled is fn with a function label.
var labelled = Function{Key: Key{Image: "sn"}, MaxParallelExecutions: 2, PreferredMaxQueueLength: 1, TTL: time.Minute, Label: "example.com/sn:v1"}

// podGauges is what the gauges say of label: pods by state and waiting calls.
func podGauges(c *Cache, label string) (starting, ready, terminating, waiting int) {
	s := c.functionStates(time.Second)[label]
	return s.starting, s.ready, s.terminating, s.waiting
}

// A call that finds no pod starts one and waits for it: a cold start, a pod
// created, its time to ready; the gauges follow the pod from starting to
// ready and the call from waiting to running; at its TTL it is deleted.
func TestPodLifecycleMetrics(t *testing.T) {
	c, b, now := start(t)
	ch := acquireAsync(c, context.Background(), labelled)
	require.Eventually(t, func() bool { created, _ := b.names(); return len(created) == 1 }, wait, tick, "gave up waiting for create")
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(c.metrics.created.WithLabelValues(labelled.Label)) == 1
	}, wait, tick, "pods created")
	starting, ready, terminating, waiting := podGauges(c, labelled.Label)
	assert.Equal(t, []int{1, 0, 0, 1}, []int{starting, ready, terminating, waiting}, "starting, ready, terminating, waiting before ready")
	assert.Equal(t, 1.0, testutil.ToFloat64(c.metrics.coldStarts.WithLabelValues(labelled.Label)), "cold starts")

	*now = now.Add(3 * time.Second)
	created, _ := b.names()
	c.PodReady(created[0], "x")
	r := <-ch
	require.NoError(t, r.err)
	starting, ready, terminating, waiting = podGauges(c, labelled.Label)
	assert.Equal(t, []int{0, 1, 0, 0}, []int{starting, ready, terminating, waiting}, "starting, ready, terminating, waiting once ready")
	c.PodReady(created[0], "x") // the watcher says so again: counted once
	require.Eventually(t, func() bool { return c.Stats()[labelled.Key].Ready == 1 }, wait, tick)
	assert.Equal(t, 1, testutil.CollectAndCount(c.metrics.timeToReady))
	assert.Equal(t, uint64(1), histogram(t, c.metrics.timeToReady).GetSampleCount(), "time to ready observed once")
	assert.Equal(t, 3.0, histogram(t, c.metrics.timeToReady).GetSampleSum(), "time to ready")

	// A warm call: no cold start, no pod.
	r.lease.Release()
	l, err := c.Acquire(context.Background(), labelled)
	require.NoError(t, err)
	l.Release()
	assert.Equal(t, 1.0, testutil.ToFloat64(c.metrics.coldStarts.WithLabelValues(labelled.Label)), "cold starts after a warm call")
	assert.Equal(t, 1.0, testutil.ToFloat64(c.metrics.created.WithLabelValues(labelled.Label)), "pods created after a warm call")

	require.Eventually(t, func() bool { return c.Stats()[labelled.Key].Running == 0 }, wait, tick, "gave up waiting for idle")
	*now = now.Add(2 * time.Minute)
	// While its deletion runs (held here), the pod is terminating, through
	// later collections too.
	b.mu.Lock()
	require.Len(t, c.CollectGarbage(), 1)
	assert.Empty(t, c.CollectGarbage())
	starting, ready, terminating, waiting = podGauges(c, labelled.Label)
	assert.Equal(t, []int{0, 0, 1, 0}, []int{starting, ready, terminating, waiting}, "starting, ready, terminating, waiting while it is deleted")
	b.mu.Unlock()
	assert.Equal(t, 1.0, testutil.ToFloat64(c.metrics.deleted.WithLabelValues(labelled.Label, "ttl")))
	require.Eventually(t, func() bool { _, d := b.names(); return len(d) == 1 }, wait, tick, "gave up waiting for deleted")
	require.Eventually(t, func() bool { _, ok := c.functionStates(time.Second)[labelled.Label]; return !ok },
		wait, tick, "a function without pods left in the gauges")
}

// A pod's failure is counted under its reason, from a bounded set, and
// the pod is deleted as failed.
func TestPodFailureReasons(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		reason string
	}{
		{name: "a reason of the set", err: &Failure{Reason: "ImagePullBackOff", Err: errors.New(`container "function": ImagePullBackOff: no such image`)}, reason: "ImagePullBackOff"},
		{name: "wrapped", err: errors.Join(errors.New("pod x"), &Failure{Reason: "CrashLoopBackOff", Err: errors.New("back-off")}), reason: "CrashLoopBackOff"},
		{name: "a reason outside the set", err: &Failure{Reason: "RunContainerError", Err: errors.New("no")}, reason: "other"},
		{name: "a made-up reason", err: &Failure{Reason: "anything at all", Err: errors.New("no")}, reason: "other"},
		{name: "no reason", err: errors.New("wrapper-server not reachable"), reason: "other"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, b, _ := start(t)
			ch := acquireAsync(c, context.Background(), Function{Key: Key{Image: "bad"}, MaxParallelExecutions: 1, PreferredMaxQueueLength: 1, Label: "bad"})
			var pod string
			for range maxAttempts {
				require.Eventually(t, func() bool {
					created, _ := b.names()
					return len(created) > 0 && created[len(created)-1] != pod
				}, wait, tick, "gave up waiting for a pod")
				created, _ := b.names()
				pod = created[len(created)-1]
				c.PodFailed(pod, tt.err)
			}
			r := <-ch
			require.Error(t, r.err)
			assert.Equal(t, float64(maxAttempts), testutil.ToFloat64(c.metrics.failed.WithLabelValues("bad", tt.reason)))
			assert.Equal(t, 1, testutil.CollectAndCount(c.metrics.failed), "one series")
			assert.Equal(t, float64(maxAttempts), testutil.ToFloat64(c.metrics.deleted.WithLabelValues("bad", "failed")))
		})
	}
}

// A pod not ready within ReadyTimeout fails as Unschedulable when the
// scheduler said it cannot place it, as ReadyTimeout otherwise.
func TestReadyTimeoutReasons(t *testing.T) {
	for _, unschedulable := range []bool{true, false} {
		want := ReasonReadyTimeout
		if unschedulable {
			want = ReasonUnschedulable
		}
		t.Run(want, func(t *testing.T) {
			c, b, now := startWithReadyTimeout(t, time.Minute)
			f := Function{Key: Key{Image: "stuck"}, MaxParallelExecutions: 1, PreferredMaxQueueLength: 1, Label: "stuck"}
			ch := acquireAsync(c, context.Background(), f)
			require.Eventually(t, func() bool { return c.Stats()[f.Key].Waiting == 1 }, wait, tick)
			require.Eventually(t, func() bool { created, _ := b.names(); return len(created) == 1 }, wait, tick)
			created, _ := b.names()
			if unschedulable {
				c.PodUnschedulable(created[0], "not scheduled: Unschedulable: 0/1 nodes are available")
			} else {
				c.PodPending(created[0], `container "function" waiting: ContainerCreating`)
			}
			require.Eventually(t, func() bool { return c.Stats()[f.Key].Pending == 1 }, wait, tick)
			*now = now.Add(61 * time.Second)
			require.Len(t, c.CollectGarbage(), 1)
			assert.ErrorIs(t, (<-ch).err, ErrNotReady)
			assert.Equal(t, 1.0, testutil.ToFloat64(c.metrics.failed.WithLabelValues("stuck", want)))
			assert.Equal(t, 1.0, testutil.ToFloat64(c.metrics.deleted.WithLabelValues("stuck", "failed")))
			assert.Equal(t, 1, testutil.CollectAndCount(c.metrics.failed))
		})
	}
}

// A pod that could not be created failed (other) but was neither created
// nor deleted.
func TestCreateFailureMetrics(t *testing.T) {
	c, b, _ := start(t)
	b.failNext = errors.New("quota exceeded")
	ch := acquireAsync(c, context.Background(), labelled)
	require.Eventually(t, func() bool { created, _ := b.names(); return len(created) == 1 }, wait, tick, "gave up waiting for the second create")
	created, _ := b.names()
	c.PodReady(created[0], "x")
	r := <-ch
	require.NoError(t, r.err)
	r.lease.Release()
	assert.Equal(t, 1.0, testutil.ToFloat64(c.metrics.failed.WithLabelValues(labelled.Label, "other")))
	assert.Equal(t, 1.0, testutil.ToFloat64(c.metrics.created.WithLabelValues(labelled.Label)))
	assert.Zero(t, testutil.CollectAndCount(c.metrics.deleted))
}

// Pods retired by a template change are terminating while they finish
// their calls, then deleted as template-changed; pods of an earlier run
// deleted at start are orphans; functions without a label are other.
func TestRetiredAndOrphanedPods(t *testing.T) {
	c, b, _ := start(t)
	c.Adopt(Key{Image: "sn", TemplateVersion: "v1"}, "busy", "b", time.Hour)
	c.Discarded()
	require.Eventually(t, func() bool { return c.Stats()[Key{Image: "sn", TemplateVersion: "v1"}].Ready == 1 }, wait, tick, "gave up waiting for adoption")
	old := Function{Key: Key{Image: "sn", TemplateVersion: "v1"}, MaxParallelExecutions: 1, PreferredMaxQueueLength: 1}
	l, err := c.Acquire(context.Background(), old)
	require.NoError(t, err)
	starting, ready, terminating, _ := podGauges(c, "other")
	assert.Equal(t, []int{0, 1, 0}, []int{starting, ready, terminating}, "an adopted pod of an unlabelled function")
	c.Retire(func(Key) bool { return false })
	require.Eventually(t, func() bool { _, _, terminating, _ := podGauges(c, "other"); return terminating == 1 }, wait, tick, "the busy retired pod terminating")
	l.Release()
	require.Eventually(t, func() bool { _, d := b.names(); return len(d) == 1 }, wait, tick, "gave up waiting for the retired pod's deletion")
	assert.Equal(t, 1.0, testutil.ToFloat64(c.metrics.deleted.WithLabelValues("other", "template-changed")))
	assert.Equal(t, 1.0, testutil.ToFloat64(c.metrics.deleted.WithLabelValues("other", "orphan")))
}

// Calls waiting for room on a full pod are waiting calls too.
func TestWaitingCallsGauge(t *testing.T) {
	c, b, _ := start(t)
	f := Function{Key: Key{Image: "busy"}, MaxParallelExecutions: 1, PreferredMaxQueueLength: 1, MaxCallsPerPod: 1, Label: "busy"}
	first := acquireAsync(c, context.Background(), f)
	require.Eventually(t, func() bool { created, _ := b.names(); return len(created) == 1 }, wait, tick)
	created, _ := b.names()
	c.PodReady(created[0], "x")
	r := <-first
	require.NoError(t, r.err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 3 {
		acquireAsync(c, ctx, f)
	}
	require.Eventually(t, func() bool { _, _, _, waiting := podGauges(c, "busy"); return waiting == 3 }, wait, tick, "three calls queued for room")
	assert.Equal(t, 1.0, testutil.ToFloat64(c.metrics.coldStarts.WithLabelValues("busy")), "calls queued for room on a ready pod are no cold start")
	r.lease.Release()
}

// The families as scraped.
func TestCollectors(t *testing.T) {
	c, b, _ := start(t)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c.Collectors()...)
	ch := acquireAsync(c, context.Background(), labelled)
	require.Eventually(t, func() bool { created, _ := b.names(); return len(created) == 1 }, wait, tick)
	require.Eventually(t, func() bool { return c.Stats()[labelled.Key].Pending == 1 }, wait, tick)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP fnrunner_function_pods Function pods by function and state: starting, ready, terminating.
# TYPE fnrunner_function_pods gauge
fnrunner_function_pods{function="example.com/sn:v1",state="ready"} 0
fnrunner_function_pods{function="example.com/sn:v1",state="starting"} 1
fnrunner_function_pods{function="example.com/sn:v1",state="terminating"} 0
# HELP fnrunner_pod_waiting_calls Calls waiting for a function pod: for one to start, or for room on one, by function.
# TYPE fnrunner_pod_waiting_calls gauge
fnrunner_pod_waiting_calls{function="example.com/sn:v1"} 1
# HELP fnrunner_pods_created_total Function pods created, by function.
# TYPE fnrunner_pods_created_total counter
fnrunner_pods_created_total{function="example.com/sn:v1"} 1
# HELP fnrunner_pod_cold_starts_total Calls that waited for a function pod to start (no ready pod had room), by function.
# TYPE fnrunner_pod_cold_starts_total counter
fnrunner_pod_cold_starts_total{function="example.com/sn:v1"} 1
`), "fnrunner_function_pods", "fnrunner_pod_waiting_calls", "fnrunner_pods_created_total", "fnrunner_pod_cold_starts_total"))
	created, _ := b.names()
	c.PodReady(created[0], "x")
	(<-ch).lease.Release()
}

// histogram is the one histogram h holds.
func histogram(t *testing.T, h *prometheus.HistogramVec) interface {
	GetSampleCount() uint64
	GetSampleSum() float64
} {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(h)
	families, err := reg.Gather()
	require.NoError(t, err)
	require.Len(t, families, 1)
	require.Len(t, families[0].GetMetric(), 1)
	return families[0].GetMetric()[0].GetHistogram()
}

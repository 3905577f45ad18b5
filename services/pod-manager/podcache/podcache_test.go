package podcache

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type fakeBackend struct {
	mu       sync.Mutex
	n        int
	created  []string
	deleted  []string
	failNext error
}

func (b *fakeBackend) Create(_ context.Context, f Function) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failNext != nil {
		err := b.failNext
		b.failNext = nil
		return "", err
	}
	b.n++
	name := fmt.Sprintf("%s-%d", f.Key.Image, b.n)
	b.created = append(b.created, name)
	return name, nil
}

func (b *fakeBackend) Delete(_ context.Context, pod string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.deleted = append(b.deleted, pod)
	return nil
}

func (b *fakeBackend) names() (created, deleted []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.created...), append([]string(nil), b.deleted...)
}

func start(t *testing.T) (*Cache, *fakeBackend, *time.Time) {
	t.Helper()
	return startWithReadyTimeout(t, 0)
}

func startWithReadyTimeout(t *testing.T, readyTimeout time.Duration) (*Cache, *fakeBackend, *time.Time) {
	t.Helper()
	b := &fakeBackend{}
	c := New(b)
	c.ReadyTimeout = readyTimeout
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	c.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	ctx, cancel := context.WithCancel(context.Background())
	go c.Run(ctx, 0)
	t.Cleanup(cancel)
	return c, b, &now
}

// wait and tick bound require.Eventually (conditions run on another
// goroutine, so they must not call t.FailNow).
const wait, tick = 10 * time.Second, 5 * time.Millisecond

type result struct {
	lease *Lease
	err   error
}

func acquireAsync(c *Cache, ctx context.Context, f Function) chan result {
	ch := make(chan result, 1)
	go func() {
		l, err := c.Acquire(ctx, f)
		ch <- result{l, err}
	}()
	return ch
}

var fn = Function{Key: Key{Image: "sn"}, MaxParallelExecutions: 2, PreferredMaxQueueLength: 1, TTL: time.Minute}

func TestEightCallsTwoPodsBalanced(t *testing.T) {
	c, b, _ := start(t)
	var chans []chan result
	for i := 0; i < 8; i++ {
		chans = append(chans, acquireAsync(c, context.Background(), fn))
	}
	require.Eventually(t, func() bool {
		s := c.Stats()[Key{Image: "sn"}]
		return s.Waiting == 8 && s.Pods == 2
	}, wait, tick, "gave up waiting for 8 calls placed on 2 pods")
	require.Eventually(t, func() bool { created, _ := b.names(); return len(created) == 2 }, wait, tick, "gave up waiting for 2 creates")
	created, _ := b.names()
	for _, p := range created {
		c.PodReady(p, p+":9446")
	}
	per := map[string]int{}
	for _, ch := range chans {
		r := <-ch
		require.NoError(t, r.err)
		per[r.lease.Pod]++
		defer r.lease.Release()
	}
	assert.Equal(t, map[string]int{created[0]: 4, created[1]: 4}, per, "calls per pod")
	got, _ := b.names()
	assert.Len(t, got, 2, "pods created")
}

func TestWarmReuseAndRelease(t *testing.T) {
	c, b, _ := start(t)
	ch := acquireAsync(c, context.Background(), fn)
	require.Eventually(t, func() bool { created, _ := b.names(); return len(created) == 1 }, wait, tick, "gave up waiting for create")
	created, _ := b.names()
	c.PodReady(created[0], "addr")
	r := <-ch
	require.NoError(t, r.err, "cold call")
	require.Equal(t, "addr", r.lease.Address, "cold call")
	r.lease.Release()
	r.lease.Release() // twice: ignored
	require.Eventually(t, func() bool { return c.Stats()[Key{Image: "sn"}].Running == 0 }, wait, tick, "gave up waiting for release")
	l, err := c.Acquire(context.Background(), fn)
	require.NoError(t, err, "warm call")
	require.Equal(t, created[0], l.Pod, "warm call")
	l.Release()
	got, _ := b.names()
	assert.Len(t, got, 1, "warm call created a pod")
	s := c.Stats()[Key{Image: "sn"}]
	assert.GreaterOrEqual(t, s.Running, 0, "negative counters: %+v", s)
	assert.GreaterOrEqual(t, s.Waiting, 0, "negative counters: %+v", s)
}

func TestReadyEventGoesToThatPod(t *testing.T) {
	c, b, _ := start(t)
	first := acquireAsync(c, context.Background(), fn)
	require.Eventually(t, func() bool { return c.Stats()[Key{Image: "sn"}].Pods == 1 }, wait, tick, "gave up waiting for first pod")
	second := acquireAsync(c, context.Background(), fn)
	require.Eventually(t, func() bool { created, _ := b.names(); return len(created) == 2 }, wait, tick, "gave up waiting for two creates")
	created, _ := b.names()
	// Only the second pod becomes ready: only its call is answered.
	c.PodReady(created[1], "b")
	var got result
	select {
	case got = <-second:
	case got = <-first:
	}
	require.NoError(t, got.err, "answered call")
	require.Equal(t, created[1], got.lease.Pod, "answered call")
	select {
	case r := <-first:
		if r.lease != nil {
			require.Equal(t, created[0], r.lease.Pod, "the call waiting on %s", created[0])
		}
	default:
	}
}

func TestFailedPodRequeuesItsCalls(t *testing.T) {
	c, b, _ := start(t)
	one := Function{Key: Key{Image: "fl"}, MaxParallelExecutions: 1, PreferredMaxQueueLength: 4, TTL: time.Minute}
	chans := []chan result{acquireAsync(c, context.Background(), one), acquireAsync(c, context.Background(), one)}
	require.Eventually(t, func() bool { return c.Stats()[Key{Image: "fl"}].Waiting == 2 }, wait, tick, "gave up waiting for two calls on one pod")
	require.Eventually(t, func() bool { created, _ := b.names(); return len(created) == 1 }, wait, tick, "gave up waiting for its create")
	created, _ := b.names()
	c.PodFailed(created[0], errors.New("CrashLoopBackOff: back-off restarting failed container"))
	require.Eventually(t, func() bool { created, _ := b.names(); return len(created) == 2 }, wait, tick, "gave up waiting for replacement pod")
	created, deleted := b.names()
	require.Eventually(t, func() bool { _, deleted = b.names(); return len(deleted) == 1 }, wait, tick, "gave up waiting for failed pod deleted")
	assert.Equal(t, created[0], deleted[0], "deleted %v", deleted)
	c.PodReady(created[1], "ok")
	for _, ch := range chans {
		if r := <-ch; assert.NoError(t, r.err, "requeued call") && assert.Equal(t, created[1], r.lease.Pod, "requeued call") {
			r.lease.Release()
		}
	}

	// A call whose pods keep failing gets the reason.
	ch := acquireAsync(c, context.Background(), Function{Key: Key{Image: "bad"}, MaxParallelExecutions: 1, PreferredMaxQueueLength: 1})
	for i := 0; i < maxAttempts; i++ {
		require.Eventually(t, func() bool {
			return c.Stats()[Key{Image: "bad"}].Pods == 1 && c.Stats()[Key{Image: "bad"}].Waiting == 1
		}, wait, tick, "gave up waiting for a pod for bad")
		var pod string
		require.Eventually(t, func() bool {
			created, _ := b.names()
			pod = created[len(created)-1]
			return pod[:3] == "bad"
		}, wait, tick, "gave up waiting for its name")
		c.PodFailed(pod, errors.New("ImagePullBackOff: no such image"))
		if i < maxAttempts-1 {
			require.Eventually(t, func() bool { created, _ := b.names(); return created[len(created)-1] != pod }, wait, tick, "gave up waiting for retry")
		}
	}
	r := <-ch
	assert.EqualError(t, r.err, "ImagePullBackOff: no such image", "call on failing pods")
}

func TestCreateErrorReachesTheCall(t *testing.T) {
	c, b, _ := start(t)
	b.failNext = errors.New("quota exceeded")
	ch := acquireAsync(c, context.Background(), fn)
	require.Eventually(t, func() bool { created, _ := b.names(); return len(created) == 1 }, wait, tick, "gave up waiting for retry create")
	created, _ := b.names()
	c.PodReady(created[0], "x")
	if r := <-ch; assert.NoError(t, r.err, "call after one failed create") {
		r.lease.Release()
	}
}

func TestCancelWhileWaiting(t *testing.T) {
	c, b, _ := start(t)
	ctx, cancel := context.WithCancel(context.Background())
	ch := acquireAsync(c, ctx, fn)
	require.Eventually(t, func() bool { return c.Stats()[Key{Image: "sn"}].Waiting == 1 }, wait, tick, "gave up waiting for waiting")
	cancel()
	r := <-ch
	assert.ErrorIs(t, r.err, context.Canceled, "cancelled call: %+v", r)
	require.Eventually(t, func() bool { return c.Stats()[Key{Image: "sn"}].Waiting == 0 }, wait, tick, "gave up waiting for no waiter left")
	require.Eventually(t, func() bool { created, _ := b.names(); return len(created) == 1 }, wait, tick, "gave up waiting for its create")
	created, _ := b.names()
	c.PodReady(created[0], "x")
	require.Eventually(t, func() bool { s := c.Stats()[Key{Image: "sn"}]; return s.Ready == 1 && s.Running == 0 }, wait, tick, "gave up waiting for pod ready and idle")
}

func TestTTLGarbageCollection(t *testing.T) {
	c, b, now := start(t)
	ch := acquireAsync(c, context.Background(), fn)
	require.Eventually(t, func() bool { created, _ := b.names(); return len(created) == 1 }, wait, tick, "gave up waiting for create")
	created, _ := b.names()
	c.PodReady(created[0], "x")
	r := <-ch
	assert.Empty(t, c.CollectGarbage(), "busy pod collected")
	r.lease.Release()
	require.Eventually(t, func() bool { return c.Stats()[Key{Image: "sn"}].Running == 0 }, wait, tick, "gave up waiting for idle")
	assert.Empty(t, c.CollectGarbage(), "pod collected before its TTL")
	*now = now.Add(2 * time.Minute)
	assert.Equal(t, []string{created[0]}, c.CollectGarbage(), "collected after the TTL")
	_, known := c.Stats()[Key{Image: "sn"}]
	assert.True(t, known, "a function forgotten while its pod is deleted")
	require.Eventually(t, func() bool { _, d := b.names(); return len(d) == 1 }, wait, tick, "gave up waiting for deleted")

	// A function with no pod (none being deleted either) and no call is
	// then forgotten at a collection: every image callers name would
	// otherwise stay in the cache.
	require.Eventually(t, func() bool {
		c.CollectGarbage()
		_, known := c.Stats()[Key{Image: "sn"}]
		return !known
	}, wait, tick, "a function with no pod and no call is kept")
}

func TestAdoptedPodIsUsed(t *testing.T) {
	c, b, _ := start(t)
	c.Adopt(Key{Image: "sn"}, "sn-old", "old:9446", time.Minute)
	require.Eventually(t, func() bool { return c.Stats()[Key{Image: "sn"}].Ready == 1 }, wait, tick, "gave up waiting for adoption")
	l, err := c.Acquire(context.Background(), fn)
	require.NoError(t, err)
	require.Equal(t, "sn-old", l.Pod, "want the adopted pod")
	require.Equal(t, "old:9446", l.Address, "want the adopted pod")
	l.Release()
	created, _ := b.names()
	assert.Empty(t, created, "created although a pod was adopted")
}

func TestRetire(t *testing.T) {
	c, b, _ := start(t)
	c.Adopt(Key{Image: "sn", TemplateVersion: "v1"}, "idle", "a", time.Hour)
	c.Adopt(Key{Image: "sn", TemplateVersion: "v1"}, "busy", "b", time.Hour)
	c.Adopt(Key{Image: "sn", TemplateVersion: "v2"}, "new", "c", time.Hour)
	require.Eventually(t, func() bool {
		s := c.Stats()
		return s[Key{Image: "sn", TemplateVersion: "v1"}].Ready == 2 && s[Key{Image: "sn", TemplateVersion: "v2"}].Ready == 1
	}, wait, tick, "gave up waiting for adoption")
	old := Function{Key: Key{Image: "sn", TemplateVersion: "v1"}, MaxParallelExecutions: 2, PreferredMaxQueueLength: 1}
	l1, err := c.Acquire(context.Background(), old)
	require.NoError(t, err)
	c.Retire(func(key Key) bool { return key == Key{Image: "sn", TemplateVersion: "v2"} })
	require.Eventually(t, func() bool { _, d := b.names(); return len(d) == 1 }, wait, tick, "gave up waiting for idle old pod deleted")
	_, d := b.names()
	require.NotEqual(t, l1.Pod, d[0], "deleted the busy pod")
	l1.Release()
	require.Eventually(t, func() bool { _, d := b.names(); return len(d) == 2 }, wait, tick, "gave up waiting for busy old pod deleted after its call")
	s := c.Stats()
	assert.Equal(t, 1, s[Key{Image: "sn", TemplateVersion: "v2"}].Pods, "stats after retiring: %+v", s)
	assert.Zero(t, s[Key{Image: "sn", TemplateVersion: "v1"}].Pods, "stats after retiring: %+v", s)
}

func TestCallsRefreshTheTTL(t *testing.T) {
	c, _, now := start(t)
	c.Adopt(Key{Image: "sn"}, "adopted", "a", time.Hour) // adopted with the default
	require.Eventually(t, func() bool { return c.Stats()[Key{Image: "sn"}].Ready == 1 }, wait, tick, "gave up waiting for adoption")
	short := Function{Key: Key{Image: "sn"}, MaxParallelExecutions: 1, PreferredMaxQueueLength: 1, TTL: time.Minute}
	l, err := c.Acquire(context.Background(), short)
	require.NoError(t, err)
	l.Release()
	require.Eventually(t, func() bool { return c.Stats()[Key{Image: "sn"}].Running == 0 }, wait, tick, "gave up waiting for idle")
	*now = now.Add(2 * time.Minute)
	assert.Len(t, c.CollectGarbage(), 1, "the FunctionConfig's 1m TTL did not replace the adopted pod's 1h")
}

// A pod that does not become ready within ReadyTimeout (here: it cannot be
// scheduled) is deleted, and the calls waiting on it fail at once with the
// reason, rather than at their deadline or on another pod that would wait
// as long.
func TestPodNotReadyInTimeFailsItsCallsWithTheReason(t *testing.T) {
	c, b, now := startWithReadyTimeout(t, time.Minute)
	slow := Function{Key: Key{Image: "stuck"}, MaxParallelExecutions: 2, PreferredMaxQueueLength: 4, TTL: time.Hour}
	first := acquireAsync(c, context.Background(), slow)
	second := acquireAsync(c, context.Background(), slow)
	require.Eventually(t, func() bool { return c.Stats()[slow.Key].Waiting == 2 }, wait, tick, "gave up waiting for two waiting calls")
	created, _ := b.names()
	require.Len(t, created, 1)
	c.PodPending(created[0], "Unschedulable: 0/1 nodes are available: 1 Insufficient cpu")
	assert.Empty(t, c.CollectGarbage(), "pod collected before the ready timeout")

	*now = now.Add(61 * time.Second)
	assert.Equal(t, []string{created[0]}, c.CollectGarbage())
	for _, ch := range []chan result{first, second} {
		r := <-ch
		require.ErrorIs(t, r.err, ErrNotReady)
		assert.Contains(t, r.err.Error(), "Unschedulable: 0/1 nodes are available")
	}
	require.Eventually(t, func() bool { _, d := b.names(); return len(d) == 1 }, wait, tick, "gave up waiting for the pod's deletion")
	assert.Zero(t, c.Stats()[slow.Key].Pods)
}

// A pod that is not ready and has no calls left goes at its TTL too.
func TestTTLAppliesToPodsThatAreNotReady(t *testing.T) {
	c, b, now := start(t)
	ctx, cancel := context.WithCancel(context.Background())
	ch := acquireAsync(c, ctx, fn)
	require.Eventually(t, func() bool { created, _ := b.names(); return len(created) == 1 }, wait, tick, "gave up waiting for create")
	require.Eventually(t, func() bool { return c.Stats()[fn.Key].Pending == 1 }, wait, tick, "gave up waiting for the pod's name")
	cancel()
	<-ch
	require.Eventually(t, func() bool { return c.Stats()[fn.Key].Waiting == 0 }, wait, tick, "gave up waiting for the cancelled call to go")
	assert.Empty(t, c.CollectGarbage(), "collected before its TTL")
	*now = now.Add(2 * time.Minute)
	created, _ := b.names()
	assert.Equal(t, []string{created[0]}, c.CollectGarbage())
}

// A burst beyond what the pods may take (MaxCallsPerPod on each of
// MaxParallelExecutions pods) waits in the cache, in arrival order, and each
// waiting call gets the room a finished call leaves; a cancelled one leaves
// the queue; no pod beyond the bound is started.
func TestBurstWaitsForRoom(t *testing.T) {
	c, b, _ := start(t)
	f := Function{Key: Key{Image: "sn"}, MaxParallelExecutions: 2, PreferredMaxQueueLength: 1, MaxCallsPerPod: 2}
	var chans []chan result
	for i := 0; i < 4; i++ {
		chans = append(chans, acquireAsync(c, context.Background(), f))
	}
	require.Eventually(t, func() bool { return c.Stats()[f.Key].Waiting == 4 }, wait, tick, "gave up waiting for 4 calls on the pods")
	cancelled, cancel := context.WithCancel(context.Background())
	// One after another, so that they arrive in this order.
	var queued []chan result
	for i, ctx := range []context.Context{context.Background(), cancelled, context.Background()} {
		queued = append(queued, acquireAsync(c, ctx, f))
		require.Eventually(t, func() bool { return c.Stats()[f.Key].Queued == i+1 }, wait, tick, "gave up waiting for %d calls queued", i+1)
	}
	cancel()
	require.ErrorIs(t, (<-queued[1]).err, context.Canceled)
	require.Eventually(t, func() bool { return c.Stats()[f.Key].Queued == 2 }, wait, tick, "the cancelled call stayed queued")

	require.Eventually(t, func() bool { created, _ := b.names(); return len(created) == 2 }, wait, tick, "gave up waiting for 2 creates")
	created, _ := b.names()
	for _, p := range created {
		c.PodReady(p, p+":9446")
	}
	var leases []*Lease
	for _, ch := range chans {
		r := <-ch
		require.NoError(t, r.err)
		leases = append(leases, r.lease)
	}
	select {
	case r := <-queued[0]:
		t.Fatalf("a queued call got a pod while every pod was full: %+v", r)
	case <-time.After(50 * time.Millisecond):
	}
	leases[0].Release()
	first := <-queued[0]
	require.NoError(t, first.err, "the first queued call")
	assert.Equal(t, leases[0].Pod, first.lease.Pod, "the first queued call takes the room the ended call left")
	leases[1].Release()
	second := <-queued[2]
	require.NoError(t, second.err, "the next queued call")
	for _, l := range append(leases[2:], first.lease, second.lease) {
		l.Release()
	}
	got, _ := b.names()
	assert.Len(t, got, 2, "pods created")
	assert.Zero(t, c.Stats()[f.Key].Queued, "calls left queued")
}

// Room that frees up on a pod that is not ready yet (a waiting call gave
// up) goes to the first queued call; a call that comes later queues behind
// it rather than taking the room.
func TestQueuedCallTakesRoomAWaitingCallLeft(t *testing.T) {
	c, b, _ := start(t)
	f := Function{Key: Key{Image: "p"}, MaxParallelExecutions: 1, PreferredMaxQueueLength: 1, MaxCallsPerPod: 1, TTL: time.Hour}
	gaveUp, cancel := context.WithCancel(context.Background())
	first := acquireAsync(c, gaveUp, f)
	require.Eventually(t, func() bool { return c.Stats()[f.Key].Waiting == 1 }, wait, tick, "the first call waits on the pod")
	queued := acquireAsync(c, context.Background(), f)
	require.Eventually(t, func() bool { return c.Stats()[f.Key].Queued == 1 }, wait, tick, "the second call queues")
	cancel()
	require.ErrorIs(t, (<-first).err, context.Canceled)
	require.Eventually(t, func() bool { s := c.Stats()[f.Key]; return s.Waiting == 1 && s.Queued == 0 }, wait, tick,
		"the queued call did not take the room: %+v", c.Stats()[f.Key])
	later := acquireAsync(c, context.Background(), f)
	require.Eventually(t, func() bool { return c.Stats()[f.Key].Queued == 1 }, wait, tick, "the later call queues behind")
	created, _ := b.names()
	c.PodReady(created[0], "x:1")
	r := <-queued
	require.NoError(t, r.err)
	r.lease.Release()
	r = <-later
	require.NoError(t, r.err)
	r.lease.Release()
}

// Events for pods the cache does not know (a deleted pod's last updates,
// another replica's pods) are kept only while a Create is in flight, whose
// pod they may be for, and no longer than earlyFor.
func TestEventsForUnknownPodsNeedACreateInFlight(t *testing.T) {
	b := &fakeBackend{}
	now := time.Unix(1000, 0)
	l := &loop{c: New(b), ctx: context.Background(), fns: map[Key]*function{}, pods: map[string]*pod{}, deleting: map[Key]int{}}
	l.c.now = func() time.Time { return now }
	fn := fn
	fn.TTL = time.Hour // no pod goes at the collection below
	for i := range 50 {
		l.handle(event{pod: fmt.Sprintf("gone-%d", i), address: "x"})
		l.handle(event{pod: fmt.Sprintf("gone-%d", i), err: errors.New("deleted")})
	}
	assert.Zero(t, len(l.early), "events kept with no Create in flight")

	// Two Creates in flight: each pod's Ready may come before its Create
	// returns, and the first to return leaves the other's.
	first, second := l.create(l.fn(fn.Key), fn), l.create(l.fn(fn.Key), fn)
	l.handle(event{pod: "sn-1", address: "10.0.0.1"})
	l.handle(event{pod: "sn-2", address: "10.0.0.2"})
	l.handle(event{pod: "gone", address: "x"})
	assert.Equal(t, 3, len(l.early))
	l.handle(<-l.c.events)
	l.handle(<-l.c.events)
	for _, p := range []*pod{first, second} {
		assert.True(t, p.ready, "%s: the Ready that came first was lost", p.name)
		assert.Equal(t, "10.0.0."+strings.TrimPrefix(p.name, "sn-"), p.address)
	}
	assert.Zero(t, len(l.early), "events kept once no Create is in flight")

	// A Create that fails counts as returned.
	b.failNext = errors.New("quota")
	l.create(l.fn(fn.Key), fn)
	l.handle(event{pod: "gone", address: "x"})
	l.handle(<-l.c.events)
	assert.Zero(t, len(l.early), "events kept once the failed Create returned")

	// One that never returns keeps nothing for long.
	b.mu.Lock() // Create blocks
	l.create(l.fn(fn.Key), fn)
	l.handle(event{pod: "gone", address: "x"})
	now = now.Add(earlyFor + time.Second)
	l.collect()
	assert.Zero(t, len(l.early), "an event kept past earlyFor")
	b.mu.Unlock()
	l.handle(<-l.c.events)
}

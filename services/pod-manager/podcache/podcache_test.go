package podcache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
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
	name := fmt.Sprintf("%s-%d", f.Key, b.n)
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
	b := &fakeBackend{}
	c := New(b)
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	c.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	ctx, cancel := context.WithCancel(context.Background())
	go c.Run(ctx, 0)
	t.Cleanup(cancel)
	return c, b, &now
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i == 2000 {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

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

var fn = Function{Key: "sn", MaxParallelExecutions: 2, PreferredMaxQueueLength: 1, TTL: time.Minute}

func TestEightCallsTwoPodsBalanced(t *testing.T) {
	c, b, _ := start(t)
	var chans []chan result
	for i := 0; i < 8; i++ {
		chans = append(chans, acquireAsync(c, context.Background(), fn))
	}
	waitFor(t, "8 calls placed on 2 pods", func() bool {
		s := c.Stats()["sn"]
		return s.Waiting == 8 && s.Pods == 2
	})
	waitFor(t, "2 creates", func() bool { created, _ := b.names(); return len(created) == 2 })
	created, _ := b.names()
	for _, p := range created {
		c.PodReady(p, p+":9446")
	}
	per := map[string]int{}
	for _, ch := range chans {
		r := <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
		per[r.lease.Pod]++
		defer r.lease.Release()
	}
	if len(per) != 2 || per[created[0]] != 4 || per[created[1]] != 4 {
		t.Errorf("calls per pod = %v, want 4 and 4", per)
	}
	if got, _ := b.names(); len(got) != 2 {
		t.Errorf("%d pods created, want exactly 2", len(got))
	}
}

func TestWarmReuseAndRelease(t *testing.T) {
	c, b, _ := start(t)
	ch := acquireAsync(c, context.Background(), fn)
	waitFor(t, "create", func() bool { created, _ := b.names(); return len(created) == 1 })
	created, _ := b.names()
	c.PodReady(created[0], "addr")
	r := <-ch
	if r.err != nil || r.lease.Address != "addr" {
		t.Fatalf("cold call: %+v", r)
	}
	r.lease.Release()
	r.lease.Release() // twice: ignored
	waitFor(t, "release", func() bool { return c.Stats()["sn"].Running == 0 })
	l, err := c.Acquire(context.Background(), fn)
	if err != nil || l.Pod != created[0] {
		t.Fatalf("warm call: %v %v", l, err)
	}
	l.Release()
	if got, _ := b.names(); len(got) != 1 {
		t.Errorf("warm call created a pod: %v", got)
	}
	if s := c.Stats()["sn"]; s.Running < 0 || s.Waiting < 0 {
		t.Errorf("negative counters: %+v", s)
	}
}

func TestReadyEventGoesToThatPod(t *testing.T) {
	c, b, _ := start(t)
	first := acquireAsync(c, context.Background(), fn)
	waitFor(t, "first pod", func() bool { return c.Stats()["sn"].Pods == 1 })
	second := acquireAsync(c, context.Background(), fn)
	waitFor(t, "two creates", func() bool { created, _ := b.names(); return len(created) == 2 })
	created, _ := b.names()
	// Only the second pod becomes ready: only its call is answered.
	c.PodReady(created[1], "b")
	var got result
	select {
	case got = <-second:
	case got = <-first:
	}
	if got.err != nil || got.lease.Pod != created[1] {
		t.Fatalf("answered %+v, want a lease on %s", got, created[1])
	}
	select {
	case r := <-first:
		if r.lease != nil && r.lease.Pod != created[0] {
			t.Fatalf("call waiting on %s was answered with %s", created[0], r.lease.Pod)
		}
	default:
	}
}

func TestFailedPodRequeuesItsCalls(t *testing.T) {
	c, b, _ := start(t)
	one := Function{Key: "fl", MaxParallelExecutions: 1, PreferredMaxQueueLength: 4, TTL: time.Minute}
	chans := []chan result{acquireAsync(c, context.Background(), one), acquireAsync(c, context.Background(), one)}
	waitFor(t, "two calls on one pod", func() bool { return c.Stats()["fl"].Waiting == 2 })
	waitFor(t, "its create", func() bool { created, _ := b.names(); return len(created) == 1 })
	created, _ := b.names()
	c.PodFailed(created[0], errors.New("CrashLoopBackOff: back-off restarting failed container"))
	waitFor(t, "replacement pod", func() bool { created, _ := b.names(); return len(created) == 2 })
	created, deleted := b.names()
	waitFor(t, "failed pod deleted", func() bool { _, deleted = b.names(); return len(deleted) == 1 })
	if deleted[0] != created[0] {
		t.Errorf("deleted %v, want %s", deleted, created[0])
	}
	c.PodReady(created[1], "ok")
	for _, ch := range chans {
		if r := <-ch; r.err != nil || r.lease.Pod != created[1] {
			t.Errorf("requeued call: %+v", r)
		} else {
			r.lease.Release()
		}
	}

	// A call whose pods keep failing gets the reason.
	ch := acquireAsync(c, context.Background(), Function{Key: "bad", MaxParallelExecutions: 1, PreferredMaxQueueLength: 1})
	for i := 0; i < maxAttempts; i++ {
		waitFor(t, "a pod for bad", func() bool { return c.Stats()["bad"].Pods == 1 && c.Stats()["bad"].Waiting == 1 })
		var pod string
		waitFor(t, "its name", func() bool {
			created, _ := b.names()
			pod = created[len(created)-1]
			return pod[:3] == "bad"
		})
		c.PodFailed(pod, errors.New("ImagePullBackOff: no such image"))
		if i < maxAttempts-1 {
			waitFor(t, "retry", func() bool { created, _ := b.names(); return created[len(created)-1] != pod })
		}
	}
	if r := <-ch; r.err == nil || r.err.Error() != "ImagePullBackOff: no such image" {
		t.Errorf("call on failing pods: %+v", r)
	}
}

func TestCreateErrorReachesTheCall(t *testing.T) {
	c, b, _ := start(t)
	b.failNext = errors.New("quota exceeded")
	ch := acquireAsync(c, context.Background(), fn)
	waitFor(t, "retry create", func() bool { created, _ := b.names(); return len(created) == 1 })
	created, _ := b.names()
	c.PodReady(created[0], "x")
	if r := <-ch; r.err != nil {
		t.Errorf("call after one failed create: %v", r.err)
	} else {
		r.lease.Release()
	}
}

func TestCancelWhileWaiting(t *testing.T) {
	c, b, _ := start(t)
	ctx, cancel := context.WithCancel(context.Background())
	ch := acquireAsync(c, ctx, fn)
	waitFor(t, "waiting", func() bool { return c.Stats()["sn"].Waiting == 1 })
	cancel()
	if r := <-ch; !errors.Is(r.err, context.Canceled) {
		t.Errorf("cancelled call: %+v", r)
	}
	waitFor(t, "no waiter left", func() bool { return c.Stats()["sn"].Waiting == 0 })
	waitFor(t, "its create", func() bool { created, _ := b.names(); return len(created) == 1 })
	created, _ := b.names()
	c.PodReady(created[0], "x")
	waitFor(t, "pod ready and idle", func() bool { s := c.Stats()["sn"]; return s.Ready == 1 && s.Running == 0 })
}

func TestTTLGarbageCollection(t *testing.T) {
	c, b, now := start(t)
	ch := acquireAsync(c, context.Background(), fn)
	waitFor(t, "create", func() bool { created, _ := b.names(); return len(created) == 1 })
	created, _ := b.names()
	c.PodReady(created[0], "x")
	r := <-ch
	if gone := c.CollectGarbage(); len(gone) != 0 {
		t.Errorf("busy pod collected: %v", gone)
	}
	r.lease.Release()
	waitFor(t, "idle", func() bool { return c.Stats()["sn"].Running == 0 })
	if gone := c.CollectGarbage(); len(gone) != 0 {
		t.Errorf("pod collected before its TTL: %v", gone)
	}
	*now = now.Add(2 * time.Minute)
	if gone := c.CollectGarbage(); len(gone) != 1 || gone[0] != created[0] {
		t.Errorf("collected %v, want %s", gone, created[0])
	}
	waitFor(t, "deleted", func() bool { _, d := b.names(); return len(d) == 1 })
}

func TestAdoptedPodIsUsed(t *testing.T) {
	c, b, _ := start(t)
	c.Adopt("sn", "sn-old", "old:9446", time.Minute)
	waitFor(t, "adoption", func() bool { return c.Stats()["sn"].Ready == 1 })
	l, err := c.Acquire(context.Background(), fn)
	if err != nil || l.Pod != "sn-old" || l.Address != "old:9446" {
		t.Fatalf("lease = %+v, %v; want the adopted pod", l, err)
	}
	l.Release()
	if created, _ := b.names(); len(created) != 0 {
		t.Errorf("created %v although a pod was adopted", created)
	}
}

func TestRetire(t *testing.T) {
	c, b, _ := start(t)
	c.Adopt("sn|v1", "idle", "a", time.Hour)
	c.Adopt("sn|v1", "busy", "b", time.Hour)
	c.Adopt("sn|v2", "new", "c", time.Hour)
	waitFor(t, "adoption", func() bool { s := c.Stats(); return s["sn|v1"].Ready == 2 && s["sn|v2"].Ready == 1 })
	old := Function{Key: "sn|v1", MaxParallelExecutions: 2, PreferredMaxQueueLength: 1}
	l1, err := c.Acquire(context.Background(), old)
	if err != nil {
		t.Fatal(err)
	}
	c.Retire(func(key string) bool { return key == "sn|v2" })
	waitFor(t, "idle old pod deleted", func() bool { _, d := b.names(); return len(d) == 1 })
	if _, d := b.names(); d[0] == l1.Pod {
		t.Fatalf("deleted %s, which is busy", d[0])
	}
	l1.Release()
	waitFor(t, "busy old pod deleted after its call", func() bool { _, d := b.names(); return len(d) == 2 })
	if s := c.Stats(); s["sn|v2"].Pods != 1 || s["sn|v1"].Pods != 0 {
		t.Errorf("stats after retiring: %+v", s)
	}
}

func TestCallsRefreshTheTTL(t *testing.T) {
	c, _, now := start(t)
	c.Adopt("sn", "adopted", "a", time.Hour) // adopted with the default
	waitFor(t, "adoption", func() bool { return c.Stats()["sn"].Ready == 1 })
	short := Function{Key: "sn", MaxParallelExecutions: 1, PreferredMaxQueueLength: 1, TTL: time.Minute}
	l, err := c.Acquire(context.Background(), short)
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	waitFor(t, "idle", func() bool { return c.Stats()["sn"].Running == 0 })
	*now = now.Add(2 * time.Minute)
	if gone := c.CollectGarbage(); len(gone) != 1 {
		t.Errorf("collected %v: the FunctionConfig's 1m TTL did not replace the adopted pod's 1h", gone)
	}
}

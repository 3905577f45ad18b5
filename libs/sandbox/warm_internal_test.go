package sandbox

import (
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// idleHelper is a warmHelper whose process has ended and whose socket
// leads nowhere: enough for the pool's bookkeeping.
func idleHelper(t *testing.T) *warmHelper {
	t.Helper()
	proc, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
	require.NoError(t, err)
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	require.NoError(t, unix.Close(fds[1]))
	f := os.NewFile(uintptr(fds[0]), "helper socket")
	defer f.Close()
	conn, err := net.FileConn(f)
	require.NoError(t, err)
	return &warmHelper{proc: proc, conn: conn.(*net.UnixConn)}
}

// Helpers handed back while the pool starts one fill it: the one started
// is ended, and the pool holds its size, not one more (a flake of
// TestWarmHelperServesCallsOneAfterAnother on a loaded machine: three
// helpers waited where two should).
func TestRefillNeverOverfills(t *testing.T) {
	p := &warmPool{size: 2, log: slog.New(slog.DiscardHandler), starts: make(chan chan<- startResult)}
	t.Cleanup(p.close)
	p.refill()
	reply := <-p.starts // the start in flight
	for range 2 {
		h := idleHelper(t)
		h.answered = true
		p.put(h)
	}
	started := idleHelper(t)
	reply <- startResult{h: started}
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return !p.filling
	}, time.Minute, time.Millisecond, "the refill ends")
	p.mu.Lock()
	defer p.mu.Unlock()
	assert.Len(t, p.ready, 2)
	assert.NotContains(t, p.ready, started, "the helper started past the pool's size is ended")
}

// A pool closed while it starts a helper ends that helper before close
// returns: none outlives the pool (a flake of
// TestWarmHelperServesCallsOneAfterAnother: a closed pool's helper, still
// starting, was counted among the next pool's).
func TestCloseEndsTheHelperBeingStarted(t *testing.T) {
	p := &warmPool{size: 2, log: slog.New(slog.DiscardHandler), starts: make(chan chan<- startResult)}
	p.refill()
	reply := <-p.starts // the start in flight
	closed := make(chan struct{})
	go func() {
		p.close()
		close(closed)
	}()
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.closed
	}, time.Minute, time.Millisecond, "the pool closes")
	select {
	case <-closed:
		t.Fatal("close returned while a helper was being started")
	default:
	}
	started := idleHelper(t)
	reply <- startResult{h: started}
	<-closed
	assert.True(t, started.reaped, "the helper started as the pool closed is ended")
	assert.Empty(t, p.ready)
}

// A call that comes while the pool fills stops the filling once the
// helper being started is ready: another starting would take CPU from
// the call, and the call's helper comes back to the pool (a flake of
// TestWarmHelperServesCallsOneAfterAnother: a helper started during the
// first call filled the pool, and the call's own was ended).
func TestRefillStopsWhenACallComes(t *testing.T) {
	p := &warmPool{size: 2, log: slog.New(slog.DiscardHandler), starts: make(chan chan<- startResult)}
	t.Cleanup(p.close)
	p.refill()
	reply := <-p.starts // the start in flight
	_, ok := p.take()
	require.False(t, ok, "no helper is ready yet")
	started := idleHelper(t)
	reply <- startResult{h: started}
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return !p.filling
	}, time.Minute, time.Millisecond, "the refill ends without starting another")
	p.mu.Lock()
	assert.Equal(t, []*warmHelper{started}, p.ready)
	p.mu.Unlock()

	// The call's end refills it.
	p.refill()
	reply = <-p.starts
	reply <- startResult{h: idleHelper(t)}
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return !p.filling && len(p.ready) == 2
	}, time.Minute, time.Millisecond, "the pool is full again")
}

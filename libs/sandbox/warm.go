package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fnrunner/fnrunner/libs/fnexec"
	"github.com/fnrunner/fnrunner/libs/sandbox/spec"
)

// warmPool keeps helpers started ahead of time ("fnsandbox -warm"), each
// waiting for calls on a socket of its own (see spec.Warm). Starting a Go
// process is most of what the sandbox costs a call, in time and, on a busy
// machine, in CPU taken from the calls: a helper serves calls one after
// another, and a call finding none ready starts one, which then joins the
// pool. A helper whose call failed to start, was stopped or was started
// ahead of it (prestart.go) serves that call alone.
type warmPool struct {
	helper string
	// namespaces is set when its calls are in namespaces of their own
	// (the userns layer; spec.WarmNamespaces).
	namespaces bool
	size       int
	log        *slog.Logger

	// starts goes to the goroutine that starts every helper (see
	// starter).
	starts chan chan<- startResult

	mu      sync.Mutex
	ready   []*warmHelper
	filling bool
	closed  bool
	// takes counts the calls that looked for a ready helper; refilled is
	// its count at the last refill, which stops when another came since
	// (see refill).
	takes, refilled uint64
	// filler is the refilling goroutine, which close waits for: a helper
	// it was starting when the pool closed is ended before close returns.
	filler sync.WaitGroup
}

type startResult struct {
	h   *warmHelper
	err error
}

// warmHelper is a started helper and the runner's end of its socket.
type warmHelper struct {
	proc *os.Process
	conn *net.UnixConn
	// answered is set when the helper answered its last call: it waits
	// for the next. stopped is set when the runner asked it to stop its
	// call (it then ends, whether it answered or not), reaped once its
	// process was waited for.
	answered, stopped, reaped bool
	// killed is set when its process was found ended by a signal (the
	// runner's SIGKILL, say) rather than by its own exit: it may not have
	// ended every process of its call.
	killed bool
}

// unswept says whether the helper's call may have left processes running:
// it neither answered nor exited by itself.
func (h *warmHelper) unswept() bool { return !h.answered && h.killed }

func newWarmPool(helper string, namespaces bool, size int, log *slog.Logger) *warmPool {
	p := &warmPool{helper: helper, namespaces: namespaces, size: max(size, 0), log: log, starts: make(chan chan<- startResult)}
	go p.starter()
	p.refill()
	return p
}

// starter starts helpers, from a thread of its own for good: a helper's
// parent-death signal fires when the thread that started it ends (the Go
// runtime ends a thread whose goroutine exits locked to it), not only the
// runner.
func (p *warmPool) starter() {
	runtime.LockOSThread()
	for reply := range p.starts {
		h, err := startHelper(p.helper, p.namespaces)
		reply <- startResult{h, err}
	}
}

// start starts a helper on the starter's thread.
func (p *warmPool) start() (*warmHelper, error) {
	reply := make(chan startResult, 1)
	p.starts <- reply
	r := <-reply
	return r.h, r.err
}

// run hands encoded (a spec.Spec) and the call's pipes to a ready
// helper, or to one started now when none is, and waits for it to accept the
// call (or for ctx to end). With reuse, the helper answers when the call has
// ended and the Started's Wait reads the answer; the caller then hands the
// helper back with put. Without, it serves this call alone and exits as the
// function did. The caller calls refill when the call has ended: a helper
// starting meanwhile would take CPU from the call.
//
// When ctx ends during the handoff, the helper may have started the
// function already: run then returns an error wrapping errHandoffStopped
// and calls gone, with the helper, once it has ended that call's every
// process; the call's uid and directory must wait for it. On any other
// error gone is not called.
func (p *warmPool) run(ctx context.Context, encoded []byte, reuse bool, gone func(*warmHelper)) (*fnexec.Started, *warmHelper, error) {
	if len(encoded) > spec.MaxEncoded {
		return nil, nil, fmt.Errorf("call of %d bytes (its environment and paths) over the sandbox's %d", len(encoded), spec.MaxEncoded)
	}
	for {
		// A call served alone (started ahead of its call) gets a new
		// helper: prestart.go judges it by its helper's CPU, which a
		// helper that served calls has spent on them.
		h, warm := (*warmHelper)(nil), false
		if reuse {
			h, warm = p.take()
		}
		if !warm {
			var err error
			if h, err = p.start(); err != nil {
				return nil, nil, err
			}
		}
		st, err := h.send(ctx, encoded, reuse)
		if err == nil {
			return st, h, nil
		}
		if ctx.Err() != nil {
			// It may have accepted the call meanwhile and started
			// the function: stopped as a call is, it ends every
			// process of it (and a helper stopped from outside is
			// killed).
			go func() {
				h.terminate()
				gone(h)
			}()
			return nil, nil, fmt.Errorf("%w: handing the call to %s: %w", errHandoffStopped, p.helper, context.Cause(ctx))
		}
		// It did not take the call: of no further use (one stopped
		// from outside would not exit of its socket's closing).
		_ = h.proc.Kill()
		h.discard()
		var refused *spec.RefusedError
		switch {
		case warm && errors.As(err, &refused) && refused.HelperAtFault:
			// Changed while it waited (see spec.Warm): a function of
			// the runner's uid reached it.
			p.log.WarnContext(ctx, "a warm sandbox helper refused a call; another takes it", "err", err)
			continue
		case warm && (errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF)):
			continue // it died waiting (killed from outside)
		}
		return nil, nil, fmt.Errorf("handing the call to %s: %w", p.helper, err)
	}
}

// errHandoffStopped is a call whose context ended while its helper was
// being handed it (warmPool.run).
var errHandoffStopped = errors.New("call stopped while handed to its sandbox helper")

// put hands back a helper whose call has ended: to the pool when it
// answered and there is room, else it is ended.
func (p *warmPool) put(h *warmHelper) {
	p.mu.Lock()
	if h.answered && !h.stopped && !p.closed && len(p.ready) < p.size {
		h.answered = false
		p.ready = append(p.ready, h)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	go h.discard()
}

// take returns a ready helper, if there is one.
func (p *warmPool) take() (*warmHelper, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.takes++
	if n := len(p.ready); n > 0 {
		h := p.ready[n-1]
		p.ready = p.ready[:n-1]
		return h, true
	}
	return nil, false
}

// refill starts helpers in the background until size are ready, or until
// a call comes: a helper starting meanwhile would take CPU from the call,
// whose end refills the pool again (and its helper comes back to it).
func (p *warmPool) refill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refilled = p.takes
	if p.filling || p.closed || len(p.ready) >= p.size {
		return
	}
	p.filling = true
	p.filler.Add(1)
	go func() {
		defer p.filler.Done()
		for {
			p.mu.Lock()
			if p.closed || len(p.ready) >= p.size || p.takes != p.refilled {
				p.filling = false
				p.mu.Unlock()
				return
			}
			p.mu.Unlock()
			h, err := p.start()
			p.mu.Lock()
			// Helpers handed back while it started may have filled the
			// pool: a helper past its size is ended, never kept.
			if err != nil || p.closed || len(p.ready) >= p.size {
				p.filling = false
				p.mu.Unlock()
				if err != nil {
					// Calls start their own until the next call
					// tries again.
					p.log.Warn("starting a warm sandbox helper", "err", err)
				} else {
					h.discard()
				}
				return
			}
			p.ready = append(p.ready, h)
			p.mu.Unlock()
		}
	}()
}

// close ends the ready helpers (each exits when its call pipe closes) and
// stops the refilling: when it returns, no helper it started waits for a
// call, nor one being started (only those serving calls are left, each
// ended when its call is).
func (p *warmPool) close() {
	p.mu.Lock()
	ready := p.ready
	p.ready, p.closed = nil, true
	p.mu.Unlock()
	for _, h := range ready {
		h.discard()
	}
	p.filler.Wait()
}

// startHelper starts "helper -warm" (-warm-namespaces for calls in
// namespaces) with its end of a socket for its calls on descriptor 4, and
// /dev/null on 0 to 3 until a call brings its own.
func startHelper(helper string, namespaces bool) (*warmHelper, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox helper socket: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "sandbox helper"), os.NewFile(uintptr(fds[1]), "sandbox helper")
	defer theirs.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		ours.Close()
		return nil, fmt.Errorf("sandbox helper: %w", err)
	}
	defer null.Close()
	mode := spec.Warm
	if namespaces {
		mode = spec.WarmNamespaces
	}
	proc, err := os.StartProcess(helper, []string{"fnsandbox", mode}, &os.ProcAttr{
		Dir:   "/",
		Env:   []string{},
		Files: []*os.File{null, null, null, null, theirs},
		// Its own group, so a signal to the runner's group does not
		// reach it; it dies with the runner.
		Sys: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		ours.Close()
		return nil, fmt.Errorf("starting %s: %w", helper, err)
	}
	c, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		_ = proc.Kill()
		_, _ = proc.Wait()
		return nil, fmt.Errorf("sandbox helper socket: %w", err)
	}
	return &warmHelper{proc: proc, conn: c.(*net.UnixConn)}, nil
}

// send hands the helper a call: its spec and the helper's ends of the
// call's pipes (standard streams and reports), and waits for its acceptance
// (spec.Warm) until ctx ends. Without reuse the socket is closed after it,
// so the helper serves this call alone.
func (h *warmHelper) send(ctx context.Context, encoded []byte, reuse bool) (*fnexec.Started, error) {
	// The helper's ends are bare descriptors, blocking, as a function
	// expects its standard streams: they only pass through the socket. The
	// runner's are non-blocking files in Go's poller.
	var theirs []int
	var ours []*os.File
	closeTheirs := func() {
		for _, fd := range theirs {
			unix.Close(fd)
		}
		theirs = nil
	}
	defer closeTheirs()
	closeOurs := func() {
		for _, f := range ours {
			f.Close()
		}
	}
	// stdin (they read), stdout, stderr, reports (they write).
	for i, theyRead := range []bool{true, false, false, false} {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			closeOurs()
			return nil, fmt.Errorf("sandbox helper pipe %d: %w", i, err)
		}
		their, our := p[1], p[0]
		if theyRead {
			their, our = p[0], p[1]
		}
		theirs = append(theirs, their)
		if err := unix.SetNonblock(our, true); err != nil {
			unix.Close(our)
			closeOurs()
			return nil, fmt.Errorf("sandbox helper pipe %d: %w", i, err)
		}
		ours = append(ours, os.NewFile(uintptr(our), "sandbox helper pipe"))
	}
	_, _, err := h.conn.WriteMsgUnix(encoded, unix.UnixRights(theirs...), nil)
	closeTheirs()
	if err == nil {
		err = h.accepted(ctx)
	}
	if err != nil {
		closeOurs()
		return nil, err
	}
	st := &fnexec.Started{Process: h.proc, Stdin: ours[0], Stdout: ours[1], Stderr: ours[2], Reports: ours[3]}
	if reuse {
		st.Wait = h.wait
		st.Stop = func() error {
			h.stopped = true
			return h.proc.Signal(syscall.SIGTERM)
		}
	} else {
		h.conn.Close()
	}
	return st, nil
}

// accepted reads the helper's first answer to a call: nil when it runs it,
// a *spec.RefusedError when it does not, io.EOF or ECONNRESET (wrapped) when
// it ended without an answer, and ctx's error when ctx ended first.
func (h *warmHelper) accepted(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { _ = h.conn.SetReadDeadline(time.Unix(1, 0)) })
	b := make([]byte, 4096)
	n, err := h.conn.Read(b)
	if !stop() {
		// The deadline is set, or being set: the socket is of no
		// further use.
		return fmt.Errorf("waiting for the sandbox helper: %w", context.Cause(ctx))
	}
	if err != nil {
		return fmt.Errorf("waiting for the sandbox helper to accept the call: %w", err)
	}
	return spec.ParseAcceptance(b[:n])
}

// wait waits for the helper's answer to its call: the call's exit code.
// Without one, the helper has ended, and its exit status is the call's.
func (h *warmHelper) wait() (syscall.WaitStatus, error) {
	b := make([]byte, 64)
	n, err := h.conn.Read(b)
	if err == nil {
		code, err := spec.ParseExit(b[:n])
		if err == nil {
			h.answered = true
			return syscall.WaitStatus(code << 8), nil
		}
		_ = h.proc.Kill() // it cannot be trusted with another call
	}
	h.reaped = true
	state, err := h.proc.Wait()
	if err != nil {
		return 0, err
	}
	ws := state.Sys().(syscall.WaitStatus)
	h.killed = ws.Signaled()
	return ws, nil
}

// terminate ends a helper that may be running a call the runner gave up
// on (see stopHelper).
func (h *warmHelper) terminate() { stopHelper(h.proc, h.discard) }

// stopHelper ends a helper's call as a cancelled one is stopped: SIGTERM
// (every process of the call ended, its cgroup removed), then SIGKILL if it
// is still there stopGrace later. reap waits for the helper.
func stopHelper(proc *os.Process, reap func()) {
	_ = proc.Signal(syscall.SIGTERM)
	kill := time.AfterFunc(stopGrace, func() { _ = proc.Kill() })
	defer kill.Stop()
	reap()
}

// stopGrace is how long a helper told to stop has to end its call, as
// fnexec gives a wrapper.
const stopGrace = 5 * time.Second

// discard ends a helper that serves no call: with its socket closed it
// exits.
func (h *warmHelper) discard() {
	_ = h.conn.Close()
	if !h.reaped {
		h.reaped = true
		if state, err := h.proc.Wait(); err == nil {
			h.killed = state.Sys().(syscall.WaitStatus).Signaled()
		}
	}
}

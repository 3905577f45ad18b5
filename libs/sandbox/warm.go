package sandbox

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"syscall"

	"github.com/fnrunner/fnrunner/libs/fnexec"
	"github.com/fnrunner/fnrunner/libs/sandbox/spec"
)

// warmPool keeps helpers started ahead of time ("fnsandbox -warm"), each
// with its pipes in place, waiting for the spec of one call on descriptor
// 4. Starting a Go process is most of what the sandbox costs a call; a
// warm helper has paid it before the call came. Each is used once.
type warmPool struct {
	helper string
	size   int
	log    *slog.Logger

	// starts goes to the goroutine that starts every helper (see
	// starter).
	starts chan chan<- startResult

	mu      sync.Mutex
	ready   []*warmHelper
	filling bool
	closed  bool
}

type startResult struct {
	h   *warmHelper
	err error
}

// warmHelper is a started helper and the runner's ends of its pipes.
type warmHelper struct {
	proc *os.Process
	// call is where its call's spec goes.
	call                    *os.File
	stdin                   *os.File
	stdout, stderr, reports *os.File
}

func newWarmPool(helper string, size int, log *slog.Logger) *warmPool {
	p := &warmPool{helper: helper, size: max(size, 0), log: log, starts: make(chan chan<- startResult)}
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
		h, err := startHelper(p.helper)
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

// run hands encoded (a spec.Spec) to a ready helper, or to one started now
// when none is. The caller calls refill when the call has ended: a helper
// starting meanwhile would take CPU from the call.
func (p *warmPool) run(encoded []byte) (*fnexec.Started, error) {
	for {
		h, warm := p.take()
		if !warm {
			var err error
			if h, err = p.start(); err != nil {
				return nil, err
			}
		}
		if warm && h.exited() {
			// It died waiting (killed from outside).
			h.discard()
			continue
		}
		if _, err := h.call.Write(encoded); err != nil {
			h.discard()
			if warm {
				continue // died just now
			}
			return nil, fmt.Errorf("handing the call to %s: %w", p.helper, err)
		}
		h.call.Close()
		return &fnexec.Started{Process: h.proc, Stdin: h.stdin, Stdout: h.stdout, Stderr: h.stderr, Reports: h.reports}, nil
	}
}

// take returns a ready helper, if there is one.
func (p *warmPool) take() (*warmHelper, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.ready); n > 0 {
		h := p.ready[n-1]
		p.ready = p.ready[:n-1]
		return h, true
	}
	return nil, false
}

// refill starts helpers in the background until size are ready.
func (p *warmPool) refill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.filling || p.closed || len(p.ready) >= p.size {
		return
	}
	p.filling = true
	go func() {
		for {
			p.mu.Lock()
			if p.closed || len(p.ready) >= p.size {
				p.filling = false
				p.mu.Unlock()
				return
			}
			p.mu.Unlock()
			h, err := p.start()
			p.mu.Lock()
			if err != nil || p.closed {
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
// stops the refilling.
func (p *warmPool) close() {
	p.mu.Lock()
	ready := p.ready
	p.ready, p.closed = nil, true
	p.mu.Unlock()
	for _, h := range ready {
		h.discard()
	}
}

// startHelper starts "helper -warm" with the pipes of a call: standard
// streams, reports on descriptor 3, the spec on 4.
func startHelper(helper string) (*warmHelper, error) {
	var theirs, ours []*os.File
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			f.Close()
		}
	}
	// stdin (they read), stdout, stderr, reports (they write), call (they read).
	for i, theyRead := range []bool{true, false, false, false, true} {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(theirs)
			closeAll(ours)
			return nil, fmt.Errorf("sandbox helper pipe %d: %w", i, err)
		}
		if theyRead {
			theirs, ours = append(theirs, r), append(ours, w)
		} else {
			theirs, ours = append(theirs, w), append(ours, r)
		}
	}
	proc, err := os.StartProcess(helper, []string{"fnsandbox", spec.Warm}, &os.ProcAttr{
		Dir:   "/",
		Env:   []string{},
		Files: theirs,
		// Its own group, so a signal to the runner's group does not
		// reach it; it dies with the runner.
		Sys: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	closeAll(theirs)
	if err != nil {
		closeAll(ours)
		return nil, fmt.Errorf("starting %s: %w", helper, err)
	}
	return &warmHelper{proc: proc, stdin: ours[0], stdout: ours[1], stderr: ours[2], reports: ours[3], call: ours[4]}, nil
}

// exited says whether the helper has ended, without reaping it. A helper
// whose threads are still ending is not reported yet (and may still hold
// its pipes): its call then fails as one killed while running would.
func (h *warmHelper) exited() bool { return exited(h.proc.Pid) }

// discard ends an unused helper: with its call pipe closed it exits.
func (h *warmHelper) discard() {
	for _, f := range []*os.File{h.call, h.stdin, h.stdout, h.stderr, h.reports} {
		_ = f.Close()
	}
	_, _ = h.proc.Wait()
}

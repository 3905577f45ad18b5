package sandbox

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fnrunner/fnrunner/libs/fnexec"
)

// Bounds on the function processes started ahead of time.
const (
	// idleCPU is the CPU a process started ahead of time, with all it
	// started, may use before its call comes: a function that works
	// before it reads its input is not started ahead (a Go program's
	// start takes a few milliseconds).
	idleCPU = time.Second
	// firstCheck is when a process started ahead is first looked at:
	// by then a function has started and waits for its input.
	firstCheck = 100 * time.Millisecond
	// idleCheck is how often the waiting processes are looked at after.
	idleCheck = time.Second
	// maxIdle is how long a process started ahead waits for its call
	// before it is ended (it holds a call's memory, directory and uid).
	maxIdle = 10 * time.Minute
	// maxSkipped bounds the functions remembered as not to be started
	// ahead.
	maxSkipped = 1024
	// startWithin bounds a start ahead: its new helper accepts the call
	// in milliseconds unless stopped from outside, and calls of the
	// function wait for it (see take).
	startWithin = 10 * time.Second
)

// prestartPool keeps function processes started ahead of time, each in
// its sandbox and private directory, blocked on its standard input until a
// call of the same function takes it; that call skips the process start
// and the function's own start-up, most of a small call's time.
//
// A function is started ahead only after one of its calls succeeded, one
// process per function, at most size in all (the least recently used
// gives way). What a function does before reading its input runs outside
// any call, so only waiting for it is allowed: one that exits, uses more
// than idleCPU, or starts a process whose standard input is not the call's
// (a daemon, a setsid escapee, a pipeline's later stages, a fork bomb's
// pipes) before its call comes is ended, and its function is not started
// ahead again.
type prestartPool struct {
	size int
	log  *slog.Logger
	// ctx ends when the pool is closed: a start in flight gives up.
	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	ready []*prestarted // least recently started first
	// starting are the functions being started ahead, each closed when
	// its start is over.
	starting map[string]chan struct{}
	skip     map[string]bool
	checking bool
	closed   bool
}

// prestarted is a function process waiting for its call.
type prestarted struct {
	key   string
	name  string // the function's binary, for logs
	st    *fnexec.Started
	since time.Time
}

func newPrestartPool(size int, log *slog.Logger) *prestartPool {
	p := &prestartPool{size: max(size, 0), log: log, starting: map[string]chan struct{}{}, skip: map[string]bool{}}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p
}

// len is how many are started or starting.
func (p *prestartPool) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready) + len(p.starting)
}

// take returns the process started ahead for key, if one is there and
// still waiting. One being started is waited for, until ctx ends: its
// helper is further on than a new one would be.
func (p *prestartPool) take(ctx context.Context, key string) *fnexec.Started {
	p.mu.Lock()
	if starting, ok := p.starting[key]; ok {
		p.mu.Unlock()
		select {
		case <-starting:
		case <-ctx.Done():
			return nil
		}
		p.mu.Lock()
	}
	var got *prestarted
	for i, r := range p.ready {
		if r.key == key {
			got = r
			p.ready = append(p.ready[:i], p.ready[i+1:]...)
			break
		}
	}
	p.mu.Unlock()
	if got == nil {
		return nil
	}
	if exited(got.st.Process.Pid) {
		// It did not wait for its input: calls start it themselves.
		p.skipKey(key, got.name, "it exited before its call came")
		go endPrestarted(got.st)
		return nil
	}
	got.st.Prestarted = true
	return got.st
}

// refill starts a process of key's function ahead of its next call, with
// start, unless one is there or starting or the function is not to be
// started ahead. It does not wait for the start.
func (p *prestartPool) refill(key, name string, start func(context.Context) (*fnexec.Started, error)) {
	if p.size == 0 {
		return
	}
	p.mu.Lock()
	if _, ok := p.starting[key]; ok || p.closed || p.skip[key] || p.has(key) {
		p.mu.Unlock()
		return
	}
	var evicted *prestarted
	if len(p.ready)+len(p.starting) >= p.size {
		if len(p.ready) == 0 {
			p.mu.Unlock()
			return
		}
		evicted, p.ready = p.ready[0], p.ready[1:]
	}
	done := make(chan struct{})
	p.starting[key] = done
	p.mu.Unlock()
	if evicted != nil {
		go endPrestarted(evicted.st)
	}
	go func() {
		defer close(done) // after a start that came too late is ended
		ctx, cancel := context.WithTimeout(p.ctx, startWithin)
		st, err := start(ctx)
		cancel()
		p.mu.Lock()
		delete(p.starting, key)
		if err != nil {
			p.mu.Unlock()
			p.log.Debug("starting a function ahead of its call", "err", err)
			return
		}
		if p.closed {
			p.mu.Unlock()
			endPrestarted(st)
			return
		}
		r := &prestarted{key: key, name: name, st: st, since: time.Now()}
		p.ready = append(p.ready, r)
		time.AfterFunc(firstCheck, func() { p.inspect(r) })
		if !p.checking {
			p.checking = true
			go p.check()
		}
		p.mu.Unlock()
	}()
}

func (p *prestartPool) has(key string) bool {
	for _, r := range p.ready {
		if r.key == key {
			return true
		}
	}
	return false
}

// check looks, every idleCheck while any wait, at those waiting.
func (p *prestartPool) check() {
	for {
		time.Sleep(idleCheck)
		p.mu.Lock()
		if p.closed || len(p.ready) == 0 {
			p.checking = false
			p.mu.Unlock()
			return
		}
		waiting := append([]*prestarted(nil), p.ready...)
		p.mu.Unlock()
		for _, r := range waiting {
			p.inspect(r)
		}
	}
}

// inspect ends r, and stops starting its function ahead, when r exited,
// started a process for something else than reading its input, or used
// more than idleCPU before its call came.
func (p *prestartPool) inspect(r *prestarted) {
	why := ""
	if exited(r.st.Process.Pid) {
		why = "it exited before its call came"
	} else if cpu, others := inspectTree(r.st.Process.Pid); others > 0 {
		why = "it started a process that does not read the call's input (or whose input the runner may not see) before its call came"
	} else if cpu > idleCPU {
		why = "it used " + cpu.String() + " of CPU before its call came"
	}
	if why == "" {
		if time.Since(r.since) > maxIdle && p.remove(r) {
			// Not wrong, only unused: the next call starts another.
			endPrestarted(r.st)
		}
		return
	}
	if !p.remove(r) {
		return
	}
	p.skipKey(r.key, r.name, why)
	endPrestarted(r.st)
}

// remove takes r out of the ready ones, if a call has not taken it.
func (p *prestartPool) remove(r *prestarted) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.ready {
		if x == r {
			p.ready = append(p.ready[:i], p.ready[i+1:]...)
			return true
		}
	}
	return false
}

// skipKey stops starting key's function ahead of its calls.
func (p *prestartPool) skipKey(key, name, why string) {
	p.mu.Lock()
	if len(p.skip) >= maxSkipped {
		clear(p.skip)
	}
	p.skip[key] = true
	p.mu.Unlock()
	p.log.Warn("function not started ahead of its calls any more", "function", name, "why", why)
}

// close ends every process waiting for its call, and those being started.
func (p *prestartPool) close() {
	p.mu.Lock()
	ready := p.ready
	p.ready, p.closed = nil, true
	p.cancel()
	var starting []chan struct{}
	for _, done := range p.starting {
		starting = append(starting, done)
	}
	p.mu.Unlock()
	for _, done := range starting {
		<-done
	}
	var wg sync.WaitGroup
	for _, r := range ready {
		wg.Add(1)
		go func() {
			defer wg.Done()
			endPrestarted(r.st)
		}()
	}
	wg.Wait()
}

// endPrestarted ends a process no call took: its helper, on SIGTERM, kills
// the function's whole tree and reaps it (SIGKILL if it is still there
// stopGrace later); then the call's directory and uid are released.
func endPrestarted(st *fnexec.Started) {
	stopHelper(st.Process, func() { _, _ = st.Process.Wait() })
	for _, c := range []interface{ Close() error }{st.Stdin, st.Stdout, st.Stderr, st.Reports} {
		_ = c.Close()
	}
	st.Release(false)
}

// exited says whether the process pid (a child) has ended, without reaping
// it.
func exited(pid int) bool {
	// With nothing to report, waitid leaves info zeroed (as Linux
	// does); an ended child's is SIGCHLD's.
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err != nil || info.Signo == int32(unix.SIGCHLD)
}

// inspectTree is the CPU time pid and every process below it have used,
// as /proc says (the helper's own start included), and how many processes
// below it have another standard input than pid's.
func inspectTree(pid int) (time.Duration, int) {
	stdin := func(p int) (string, bool) {
		l, err := os.Readlink("/proc/" + strconv.Itoa(p) + "/fd/0")
		// One that ended meanwhile has no descriptors left; one the
		// runner may not look into (a closed fd 0, not dumpable, another
		// uid without CAP_SYS_PTRACE) is not known to read the input.
		_, gone := os.Stat("/proc/" + strconv.Itoa(p))
		return l, err == nil || gone != nil
	}
	input, _ := stdin(pid)
	var ticks uint64
	others := 0
	seen := map[int]bool{}
	for todo := []int{pid}; len(todo) > 0; {
		p := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if seen[p] {
			continue
		}
		seen[p] = true
		ticks += processTicks(p)
		if in, ok := stdin(p); p != pid && (!ok || in != "" && in != input) {
			others++
		}
		tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(p) + "/task")
		for _, t := range tasks {
			children, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/task/" + t.Name() + "/children")
			for _, f := range strings.Fields(string(children)) {
				if c, err := strconv.Atoi(f); err == nil {
					todo = append(todo, c)
				}
			}
		}
	}
	// USER_HZ is 100 on every Linux architecture Go supports.
	return time.Duration(ticks) * 10 * time.Millisecond, others
}

// processTicks is the CPU time of pid, all its threads together, and of
// the children it has reaped: utime, stime, cutime and cstime, the 14th to
// 17th fields of /proc/<pid>/stat.
func processTicks(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return 0
	}
	var ticks uint64
	for _, v := range f[11:15] {
		n, _ := strconv.ParseUint(v, 10, 64)
		ticks += n
	}
	return ticks
}

// Package fnexec runs a KRM function binary on one ResourceList, isolated
// from the runner: a clean environment, a private working directory, its own
// process group (killed on cancel, deadline or exit, so no child outlives the
// call), stdout capped at the message limit and stderr capped.
//
// The binary-runner and the wrapper-server both run functions through it.
// What a run produced, and how that is answered, is package fnresult's.
package fnexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/mem"

	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/fnresult"
	"github.com/fnrunner/fnrunner/libs/proctree"
	"github.com/fnrunner/fnrunner/libs/telemetry"
)

// Defaults for Options.
const (
	DefaultMaxOutputBytes = 6 * 1024 * 1024
	DefaultMaxLogBytes    = 1024 * 1024
	defaultPath           = "/usr/local/bin:/usr/bin:/bin"
	// waitDelay bounds how long Wait waits for the output pipes after the
	// process group was killed.
	waitDelay = 5 * time.Second
)

// Options bound one run.
type Options struct {
	// MaxOutputBytes caps stdout (the ResourceList). A function that writes
	// more is killed and the run fails with fnresult.ErrOutputTooLarge.
	MaxOutputBytes int
	// MaxLogBytes caps the stderr kept; the rest is counted and dropped.
	MaxLogBytes int
	// Env is added to the clean environment (PATH, HOME, TMPDIR); of two
	// equal names, Env's wins.
	Env []string
	// TempDir is where private working directories are made ("" = os.TempDir()).
	TempDir string
	// Dirs, when set, makes the private directories instead, ahead of the
	// calls, and removes the empty ones after them (TempDir is not used).
	Dirs *Dirs
	// Dir, when set, is the working directory instead of the private one
	// (which stays HOME and TMPDIR): the wrapper-server runs the function in
	// its container's working directory, as porch's does.
	Dir string
	// Sandbox, when set, wraps each run's command line (package sandbox
	// does, in fnsandbox).
	Sandbox Wrapper
	// MaxMemoryBytes, when set, bounds the memory the function's
	// processes hold together (proctree.Tree.Resident: pages touched, not
	// address space reserved), sampled every MemoryPoll: over it they are
	// ended as at a deadline and the run fails with
	// fnresult.ErrMemoryExceeded. Below a sandbox's helper, which is
	// their child subreaper, every process the function starts counts;
	// without a sandbox, one that leaves its parent's tree does not.
	MaxMemoryBytes uint64
	// MemoryPoll is how often MaxMemoryBytes is checked
	// (DefaultMemoryPoll when 0).
	MemoryPoll time.Duration
	// OutputReserve is how much of the output the caller has paid for
	// beside MaxMemoryBytes: output kept beyond it counts against the
	// bound too, as memory the call holds in the runner.
	OutputReserve uint64
}

// DefaultMemoryPoll is Options.MemoryPoll's default: a process that
// touches memory as fast as one core can (a few GB/s) passes its bound by
// some tens of megabytes before it is seen; reading a call's processes'
// status takes tens of microseconds.
const DefaultMemoryPoll = 10 * time.Millisecond

// Wrapper runs a function's process inside a sandbox. Its process ends the
// function's whole process tree when it gets SIGTERM, exits with the
// function's exit code, and reports on its Reports pipe its own failures
// (the function never ran) and the signal that killed the function.
type Wrapper interface {
	// Start starts the call's process, in a private directory it makes
	// (Call.Prepare): possibly one started ahead of time, which gets the
	// call now.
	Start(ctx context.Context, c Call) (*Started, error)
	// Report reads what the wrapper wrote on its Reports pipe: the signal
	// that killed the function (0 if none), and the wrapper's own failure
	// (nil if none), the function never having run; an error wrapping
	// fnresult.ErrMemoryExceeded says instead that the wrapper's memory
	// bound (Call.MemoryMax) ended the function.
	Report(out []byte) (syscall.Signal, error)
}

// Call is what a Wrapper is asked to run: a function as Run was given it,
// before its private directory exists (Prepare makes one).
type Call struct {
	// Argv is the function's command line.
	Argv []string
	// Dir, when set, is the working directory instead of the private one
	// (Options.Dir).
	Dir string
	// Env is added to the clean environment (Options.Env).
	Env []string
	// TempDir is where the private directory is made (Options.TempDir).
	TempDir string
	// Dirs, when set, gives the private directory (Options.Dirs).
	Dirs *Dirs
	// MemoryMax, when set, is the call's memory bound
	// (Options.MaxMemoryBytes), for a wrapper that bounds a call's memory
	// itself (a cgroup) to bound it at.
	MemoryMax uint64
}

// ErrPrivateDir is wrapped by Prepare's errors.
var ErrPrivateDir = errors.New("private working directory")

// Private is a call's private directory, with the working directory and
// the whole environment the function gets.
type Private struct {
	// Dir is the private directory (an absolute path), the function's
	// HOME and TMPDIR.
	Dir string
	// WorkDir is the function's working directory: Dir, or Call.Dir.
	WorkDir string
	// Env is the function's whole environment.
	Env []string
	// dirs made Dir, and removes it.
	dirs *Dirs
}

// Prepare makes c's private directory below c.TempDir, or takes one c.Dirs
// made; the caller removes it (Remove) when the call has ended.
func (c Call) Prepare() (Private, error) {
	p := Private{WorkDir: c.Dir, dirs: c.Dirs}
	dir := ""
	if c.Dirs != nil {
		if d, ok := c.Dirs.take(); ok {
			if _, err := os.Lstat(d); err == nil { // not swept away by someone else
				dir = d
			}
		}
	}
	var err error
	if dir == "" {
		root := c.TempDir
		if c.Dirs != nil {
			root = c.Dirs.root
		}
		if dir, err = os.MkdirTemp(root, "fn-"); err != nil {
			return Private{}, fmt.Errorf("%w: %w", ErrPrivateDir, err)
		}
	}
	// A sandbox's helper does not start in the runner's directory.
	if p.Dir, err = filepath.Abs(dir); err == nil && c.Dir != "" {
		p.WorkDir, err = filepath.Abs(c.Dir)
	}
	if err != nil {
		os.RemoveAll(dir)
		return Private{}, fmt.Errorf("%w: %w", ErrPrivateDir, err)
	}
	if p.WorkDir == "" {
		p.WorkDir = p.Dir
	}
	p.Env = dedupEnv(append([]string{"PATH=" + defaultPath, "HOME=" + p.Dir, "TMPDIR=" + p.Dir}, c.Env...))
	return p, nil
}

// Remove removes the private directory, once its call has ended: at once,
// or after the call when c.Dirs made it and the function left it empty.
func (p Private) Remove() {
	if p.dirs == nil {
		removeTree(p.Dir)
		return
	}
	p.dirs.remove(p.Dir)
}

// Started is a wrapper's process running one call. Run owns and closes
// every field.
type Started struct {
	// Process is the wrapper's process: SIGTERM asks it to end the call,
	// SIGKILL ends it.
	Process *os.Process
	// Wait, when set, waits for the end of the call and says how it
	// ended, for a wrapper that outlives its call (it serves calls one
	// after another); unset, the call ends when Process exits, with its
	// status.
	Wait func() (syscall.WaitStatus, error)
	// Stop, when set, asks the wrapper to end the call instead of
	// sending Process SIGTERM.
	Stop func() error
	// Stdin is the function's standard input, Stdout and Stderr its
	// output, Reports the wrapper's (the runner's ends of the pipes).
	Stdin                   io.WriteCloser
	Stdout, Stderr, Reports io.ReadCloser
	// Prestarted says the function's process was started before the call
	// came (it waited for its input).
	Prestarted bool
	// Release is called once the call has ended (its private directory
	// may go), saying whether the function exited 0 in time.
	Release func(succeeded bool)
}

// Binary is a function binary as a runtime: Run runs Argv on one
// ResourceList with Options.
type Binary struct {
	// Argv is the binary and its arguments.
	Argv []string
	// Options bound each run.
	Options Options
}

// Run runs the binary with input on its stdin, written to the pipe from
// input's buffers without a copy; see the package function Run.
func (b *Binary) Run(ctx context.Context, input mem.BufferSlice) (*fnresult.Result, error) {
	ctx, span := telemetry.Start(ctx, "function", telemetry.AttrBytesIn.Int(input.Len()))
	if l, ok := b.Options.Sandbox.(layered); ok {
		span.SetAttributes(telemetry.AttrSandboxLayers.StringSlice(l.LayerNames()))
	}
	res, err := Run(ctx, b.Argv, evalwire.NewReader(input), b.Options)
	if res != nil {
		span.SetAttributes(telemetry.AttrExitCode.Int(res.ExitCode), telemetry.AttrBytesOut.Int(res.ResourceList.Len()))
	}
	span.End()
	return res, err
}

// layered is a Wrapper that names the sandbox layers it applies.
type layered interface {
	LayerNames() []string
}

// Run runs argv with stdin as its standard input (an io.WriterTo, like
// evalwire.NewReader, is written to the pipe without a copy). It returns
// ctx's error (wrapped) when the context ends first, an error wrapping
// fnresult.ErrOutputTooLarge (the Result holding the output kept), a
// *fnresult.ExitError, or an error wrapping fnresult.ErrStart; on success
// the Result has exit code 0.
func Run(ctx context.Context, argv []string, stdin io.Reader, opts Options) (*fnresult.Result, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("%w: no command", fnresult.ErrStart)
	}
	if opts.MaxOutputBytes <= 0 {
		opts.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if opts.MaxLogBytes <= 0 {
		opts.MaxLogBytes = DefaultMaxLogBytes
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stdout := &cappedBuffer{pool: mem.DefaultBufferPool(), limit: opts.MaxOutputBytes, onOverflow: func() { cancel(fnresult.ErrOutputTooLarge) }}
	stderr := &cappedBuffer{pool: mem.DefaultBufferPool(), limit: opts.MaxLogBytes}

	call := Call{Argv: argv, Dir: opts.Dir, Env: opts.Env, TempDir: opts.TempDir, Dirs: opts.Dirs, MemoryMax: opts.MaxMemoryBytes}
	// watch bounds the memory of the processes below pid (and pid's own,
	// with self) once it has started.
	watch := func(pid int, self bool) {}
	if opts.MaxMemoryBytes > 0 {
		poll := opts.MemoryPoll
		if poll <= 0 {
			poll = DefaultMemoryPoll
		}
		// Output kept beyond what the caller reserved for it is memory
		// the call holds too: the processes' bound shrinks by it.
		extra := func() uint64 {
			return uint64(max(stdout.kept.Load()-int64(opts.OutputReserve), 0))
		}
		limit := func() uint64 { return opts.MaxMemoryBytes - min(extra(), opts.MaxMemoryBytes) }
		watch = func(pid int, self bool) {
			go proctree.Tree{}.Watch(runCtx, pid, self, limit, poll, func(used uint64, err error) {
				if err != nil {
					cancel(fmt.Errorf("%w: its memory could not be checked against the call's bound of %d MiB (%w), and it was killed", fnresult.ErrMemoryExceeded, opts.MaxMemoryBytes>>20, err))
					return
				}
				cancel(fmt.Errorf("%w: its processes held %d MiB, and its output %d MiB beyond its reserve, over the call's bound of %d MiB, and were killed", fnresult.ErrMemoryExceeded, used>>20, extra()>>20, opts.MaxMemoryBytes>>20))
			})
		}
	}
	var state syscall.WaitStatus
	var killedBy syscall.Signal
	var err error
	if opts.Sandbox != nil {
		state, killedBy, err = runWrapped(runCtx, opts.Sandbox, call, stdin, stdout, stderr, watch)
	} else {
		var p Private
		if p, err = call.Prepare(); err != nil {
			return nil, err
		}
		defer p.Remove()
		state, err = runBare(runCtx, argv, p.WorkDir, p.Env, stdin, stdout, stderr, watch)
	}
	if errors.Is(err, ErrPrivateDir) {
		return nil, err
	}
	if errors.Is(err, fnresult.ErrStart) {
		return nil, err
	}

	res := &fnresult.Result{ResourceList: stdout.Buffers(), Log: stderr.BytesWithNote()}
	if cause := context.Cause(runCtx); cause != nil {
		if errors.Is(cause, fnresult.ErrOutputTooLarge) {
			return res, fmt.Errorf("%w (%d bytes)", fnresult.ErrOutputTooLarge, opts.MaxOutputBytes)
		}
		if errors.Is(cause, fnresult.ErrMemoryExceeded) {
			return res, cause
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return res, fmt.Errorf("function did not finish: %w", ctxErr)
		}
	}
	if err != nil {
		return res, err
	}
	if !succeeded(state) {
		res.ExitCode = state.ExitStatus() // -1 when a signal ended it
		xe := &fnresult.ExitError{Result: res}
		if state.Signaled() {
			xe.Signal = state.Signal()
		}
		if killedBy != 0 {
			xe.Signal = killedBy
		}
		return res, xe
	}
	return res, nil
}

// runBare runs argv as a child in a process group of its own, killed as a
// whole at the end.
func runBare(ctx context.Context, argv []string, dir string, env []string, stdin io.Reader, stdout, stderr io.Writer, watch func(pid int, self bool)) (syscall.WaitStatus, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Cancel = func() error { return killGroup(cmd.Process) }
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdin = stdin
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = waitDelay
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("%w %s: %w", fnresult.ErrStart, argv[0], err)
	}
	watch(cmd.Process.Pid, true)
	waitErr := cmd.Wait()
	// Whatever the function left running in its group goes with it.
	_ = killGroup(cmd.Process)
	var ee *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &ee) {
		return 0, fmt.Errorf("waiting for function: %w", waitErr)
	}
	return cmd.ProcessState.Sys().(syscall.WaitStatus), nil
}

// succeeded says whether a process that ended with ws exited 0.
func succeeded(ws syscall.WaitStatus) bool { return ws.Exited() && ws.ExitStatus() == 0 }

// stop asks st's wrapper to end its call.
func (st *Started) stop() error {
	if st.Stop != nil {
		return st.Stop()
	}
	return st.Process.Signal(syscall.SIGTERM)
}

// wait waits for st's call to end.
func (st *Started) wait() (syscall.WaitStatus, error) {
	if st.Wait != nil {
		return st.Wait()
	}
	state, err := st.Process.Wait()
	if err != nil {
		return 0, err
	}
	return state.Sys().(syscall.WaitStatus), nil
}

// runWrapped runs c through w. When ctx ends, the wrapper gets SIGTERM (it
// ends the function's tree itself: a kill of its group would leave setsid
// escapees behind), and SIGKILL if it is still there waitDelay later. From
// then, or from the wrapper's exit, the pipes have waitDelay to drain; the
// copies are over when it returns (the input may be freed).
//
// watch is started on the wrapper's process: what counts is below it.
func runWrapped(ctx context.Context, w Wrapper, c Call, stdin io.Reader, stdout, stderr io.Writer, watch func(pid int, self bool)) (syscall.WaitStatus, syscall.Signal, error) {
	st, err := w.Start(ctx, c)
	if errors.Is(err, ErrPrivateDir) || err != nil && ctx.Err() != nil {
		return 0, 0, err // Run reports ctx's end
	}
	if err != nil {
		return 0, 0, fmt.Errorf("%w %s: sandbox: %w", fnresult.ErrStart, c.Argv[0], err)
	}
	trace.SpanFromContext(ctx).SetAttributes(telemetry.AttrPrestarted.Bool(st.Prestarted))
	watch(st.Process.Pid, false)
	ok := false
	defer func() { st.Release(ok) }()
	defer st.Reports.Close()
	stdinDone := make(chan struct{})
	go func() {
		defer close(stdinDone)
		// A function that exits without reading all of it ends the
		// copy with EPIPE, as os/exec ignores too.
		_, _ = io.Copy(st.Stdin, stdin)
		st.Stdin.Close()
	}()
	outDone := make(chan struct{}, 2)
	copyOut := func(w io.Writer, r io.ReadCloser) {
		_, _ = io.Copy(w, r)
		outDone <- struct{}{}
	}
	go copyOut(stdout, st.Stdout)
	go copyOut(stderr, st.Stderr)

	waited := make(chan error, 1)
	var state syscall.WaitStatus
	go func() {
		var err error
		state, err = st.wait()
		waited <- err
	}()
	var waitErr error
	var deadline *time.Timer
	select {
	case waitErr = <-waited:
		deadline = time.NewTimer(waitDelay)
	case <-ctx.Done():
		_ = st.stop()
		deadline = time.NewTimer(waitDelay)
		select {
		case waitErr = <-waited:
		case <-deadline.C:
			_ = st.Process.Kill()
			waitErr = <-waited
			deadline.Reset(0)
		}
	}
	defer deadline.Stop()
	// The wrapper has reaped everything below it; a descriptor passed on
	// outside it could still hold the pipes open.
	outputHeld := false
	for pending := 2; pending > 0 || stdinDone != nil; {
		select {
		case <-outDone:
			pending--
		case <-stdinDone:
			stdinDone = nil
		case <-deadline.C:
			outputHeld = pending > 0
			st.Stdin.Close()
			st.Stdout.Close()
			st.Stderr.Close()
		}
	}
	st.Stdout.Close()
	st.Stderr.Close()
	if waitErr != nil {
		return 0, 0, fmt.Errorf("waiting for function: %w", waitErr)
	}
	if outputHeld && ctx.Err() == nil {
		return 0, 0, fmt.Errorf("waiting for function: its output was still open %v after it ended", waitDelay)
	}
	out, _ := io.ReadAll(io.LimitReader(st.Reports, 4096))
	sig, err := w.Report(out)
	if errors.Is(err, fnresult.ErrMemoryExceeded) {
		return state, sig, err // the wrapper's own bound ended it
	}
	if err != nil {
		return 0, 0, fmt.Errorf("%w %s: %w", fnresult.ErrStart, c.Argv[0], err)
	}
	ok = succeeded(state) && sig == 0 && ctx.Err() == nil
	return state, sig, nil
}

// dedupEnv keeps the last of equal names, as os/exec does.
func dedupEnv(env []string) []string {
	last := map[string]int{}
	for i, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		last[name] = i
	}
	out := make([]string, 0, len(last))
	for i, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if last[name] == i {
			out = append(out, kv)
		}
	}
	return out
}

func killGroup(p *os.Process) error {
	if p == nil {
		return nil
	}
	err := syscall.Kill(-p.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// chunkSize is the size of the buffers output is kept in.
const chunkSize = 32 << 10

// cappedBuffer keeps the first limit bytes written to it in fixed-size
// buffers from a pool (never a growing array that is copied as it doubles)
// and counts the rest.
type cappedBuffer struct {
	pool mem.BufferPool
	full mem.BufferSlice
	cur  *[]byte // being filled, up to fill
	fill int
	n    int
	// kept is n, for readers beside the writer.
	kept       atomic.Int64
	limit      int
	dropped    int64
	onOverflow func()
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	written := len(p)
	if room := b.limit - b.n; len(p) > room {
		first := b.dropped == 0
		b.dropped += int64(len(p) - max(room, 0))
		p = p[:max(room, 0)]
		if first && b.onOverflow != nil {
			b.onOverflow()
		}
	}
	b.n += len(p)
	b.kept.Store(int64(b.n))
	for len(p) > 0 {
		if b.cur == nil {
			b.cur, b.fill = b.pool.Get(chunkSize), 0
		}
		c := copy((*b.cur)[b.fill:], p)
		b.fill += c
		p = p[c:]
		if b.fill == len(*b.cur) {
			b.seal()
		}
	}
	// Keep consuming so the writer never blocks on a full pipe.
	return written, nil
}

// seal moves the buffer being filled to the full ones.
func (b *cappedBuffer) seal() {
	if b.cur == nil {
		return
	}
	*b.cur = (*b.cur)[:b.fill]
	b.full = append(b.full, mem.NewBuffer(b.cur, b.pool))
	b.cur = nil
}

// Buffers returns what was kept; the buffer is done with.
func (b *cappedBuffer) Buffers() mem.BufferSlice {
	b.seal()
	return b.full
}

// BytesWithNote returns what was kept in one slice, plus a note of how much
// was dropped; the buffer is done with.
func (b *cappedBuffer) BytesWithNote() []byte {
	kept := b.Buffers()
	out := kept.Materialize()
	kept.Free()
	if b.dropped == 0 {
		return out
	}
	return append(out, fmt.Sprintf("\n[fnrunner: %d more bytes of log dropped]\n", b.dropped)...)
}

// Package sandbox runs function binaries inside layers of protection, as
// the binary-runner and the wrapper-server do for every call. A run goes
// through fnsandbox (the helper in ./fnsandbox, shipped beside each service
// binary), which applies the layers this package asks for:
//
//   - base: no_new_privs; a seccomp filter refusing prlimit on another
//     process (a function of the helper's uid lowering the helper's limits
//     would stop it finding what the function left running), and System V
//     IPC and the POSIX message queue calls (whose objects would outlive
//     the call; files in /dev/mqueue, /dev/shm or /tmp are landlock's);
//     a child
//     subreaper that kills and reaps every descendant at the end of a call,
//     setsid escapees included; rlimits (address space, file size, open
//     files, CPU); the private temp dir is fnexec's, removed after the
//     call. Always on unless --sandbox=none.
//   - landlock: files only below the function's binary, the read-only system
//     paths and its temp dir; no TCP bind, TCP connect only to the allowed
//     ports; no ptrace, signals or abstract sockets out of the call (so no
//     /proc/<pid>/environ or fd of the runner or of another call).
//   - uid: each concurrent call runs as its own unprivileged uid and gid, with
//     no capabilities (when the runner may change uid, as root does); the
//     process limit then counts that call alone.
//   - userns: each call in user, pid, mount, IPC and UTS namespaces of its
//     own, and a network namespace with no interface up unless it may
//     connect somewhere; the function is PID 1 of its pid namespace, so the
//     kernel kills whatever it left when it ends.
//   - cgroup: each call in a cgroup of its own (v1 memory and pids, or v2)
//     with a memory limit for all its processes together and a process
//     limit that does not need the uid layer.
//
// At start Open asks the helper which layers this kernel and container
// allow,
// logs it, exports it as metrics and refuses to start when a layer named by
// --sandbox is missing.
package sandbox

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fnrunner/fnrunner/libs/fnexec"
	"github.com/fnrunner/fnrunner/libs/fnresult"
	"github.com/fnrunner/fnrunner/libs/sandbox/spec"
)

// Layer names one protection.
type Layer string

// The layers; see the package comment.
const (
	Base     Layer = "base"
	Landlock Layer = "landlock"
	UID      Layer = "uid"
	UserNS   Layer = "userns"
	Cgroup   Layer = "cgroup"
)

// Applied are the layers this version applies, in order.
var applied = []Layer{Base, Landlock, UID, UserNS, Cgroup}

// ErrLayerMissing is wrapped by Open's error when --sandbox names a layer
// this kernel or container does not allow.
var ErrLayerMissing = errors.New("sandbox layer missing")

// Flags are the --sandbox flags of a runner.
type Flags struct {
	// Mode is "auto" (every layer available), "none", or a comma-separated
	// list of layers, each required.
	Mode string
	// Helper is the fnsandbox executable.
	Helper string
	// Limits are the rlimits of each call.
	Limits spec.Limits
	// ReadOnly are the paths a function may read and execute below, beside
	// its own binary (landlock).
	ReadOnly []string
	// ReadWrite are paths a function may also write below, beside its
	// private directory (landlock).
	ReadWrite []string
	// ConnectPorts are the TCP ports a function may connect to (landlock).
	ConnectPorts []uint16
	// AnyConnect lets a function connect to any TCP port (landlock still
	// denies bind).
	AnyConnect bool
	// FirstUID is the first of the uids (and gids) calls run as (uid).
	FirstUID int
	// MemoryMax is the memory of all a call's processes together (cgroup).
	MemoryMax uint64
	// DirBytes bounds the files in a call's private directory together
	// (userns: a size-limited tmpfs).
	DirBytes uint64
	// CPUMillis bounds a call's CPU time, in thousandths of a CPU (cgroup).
	CPUMillis uint64
	// WarmHelpers is how many helpers wait, started ahead of time, for
	// the next calls.
	WarmHelpers int
	// PrestartedFunctions is how many function processes wait, started
	// ahead of time in their sandbox, for the next call of their function.
	PrestartedFunctions int
	// TempDir is where the runner makes each call's private directory
	// ("" = os.TempDir()): with the uid layer, every call's uid must be
	// able to reach it.
	TempDir string
}

// Defaults are a service's flag defaults.
type Defaults struct {
	MemoryMax    uint64
	DirBytes     uint64
	CPUMillis    uint64
	AddressSpace uint64
	ReadOnly     []string
	AnyConnect   bool
	WarmHelpers  int
	// PrestartedFunctions is --sandbox-prestarted-functions.
	PrestartedFunctions int
}

// SystemReadOnly are the read-only paths of the binary-runner's functions:
// what a static or dynamically linked binary and a TLS client need.
var SystemReadOnly = []string{
	"/bin", "/lib", "/lib64", "/usr/bin", "/usr/lib", "/usr/lib64", "/usr/share/zoneinfo", "/usr/share/ca-certificates",
	"/etc/ssl", "/etc/ca-certificates", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf",
	"/etc/hosts", "/etc/resolv.conf", "/etc/localtime", "/dev/zero", "/dev/urandom", "/dev/random",
}

// Register adds the --sandbox flags to fs.
func (f *Flags) Register(fs *flag.FlagSet, d Defaults) {
	helper := "fnsandbox"
	if exe, err := os.Executable(); err == nil {
		helper = filepath.Join(filepath.Dir(exe), "fnsandbox")
	}
	f.ReadOnly = slices.Clone(d.ReadOnly)
	f.Limits = spec.Limits{Processes: 256, AddressSpace: d.AddressSpace, FileSize: 256 << 20, OpenFiles: 1024}
	f.FirstUID = 2000000
	f.AnyConnect = d.AnyConnect
	connectDefault := "none"
	if d.AnyConnect {
		connectDefault = "any"
	}
	fs.StringVar(&f.Mode, "sandbox", "auto", `Sandbox layers for function binaries: "auto" (each one this kernel and container allow; what is missing is logged), "none", or a comma-separated list of base, landlock, uid, userns and cgroup, each required: the service refuses to start when one is missing.`)
	fs.IntVar(&f.WarmHelpers, "sandbox-warm-helpers", d.WarmHelpers, "Helpers (fnsandbox) started ahead of time, each waiting for one call, so that a call does not wait for a process to start; a call finding none ready starts its own. 0 = none.")
	fs.IntVar(&f.PrestartedFunctions, "sandbox-prestarted-functions", d.PrestartedFunctions, "Function processes started ahead of time in their sandbox, each waiting on its standard input for the next call of its function (same binary file, arguments, environment), so that the call skips the process's start. After a call that succeeded one is started for its function, the least recently used giving way when all are in use. One that exits, uses more than 1s of CPU or starts a process not reading the call's input before its call comes is ended, and its function is not started ahead again. Needs a sandbox (not --sandbox=none). 0 = none.")
	fs.StringVar(&f.Helper, "sandbox-helper", helper, "The fnsandbox executable (default: fnsandbox beside this service's executable).")
	fs.Uint64Var(&f.Limits.Processes, "sandbox-max-processes", f.Limits.Processes, "Processes and threads of a call together: its cgroup's pids.max (cgroup layer) and RLIMIT_NPROC of its uid (uid layer; without it RLIMIT_NPROC would count the runner's own threads and every call's, so it is not set); 0 = not set.")
	fs.Uint64Var(&f.MemoryMax, "sandbox-max-memory", d.MemoryMax, "Memory of all a call's processes together, in bytes (cgroup layer; beyond it the kernel kills one of them); 0 = not set.")
	f.CPUMillis = d.CPUMillis
	fs.Func("sandbox-max-cpus", fmt.Sprintf("CPUs all of a call's processes together may use, e.g. 1 or 0.5 (cgroup layer, where the cpu controller is there; the probe's log line says); 0 = not bounded (default %s).", strconv.FormatFloat(float64(d.CPUMillis)/1000, 'f', -1, 64)), func(v string) error {
		cpus, err := strconv.ParseFloat(v, 64)
		if err != nil || cpus < 0 || cpus > 1024 {
			return fmt.Errorf("want a number of CPUs, e.g. 1 or 0.5, not %q", v)
		}
		f.CPUMillis = uint64(cpus * 1000)
		if cpus > 0 && f.CPUMillis < 10 {
			return fmt.Errorf("%q: at least 0.01 CPU", v)
		}
		return nil
	})
	fs.Uint64Var(&f.DirBytes, "sandbox-max-dir-size", d.DirBytes, "Bytes of all files in a call's private directory (its HOME and TMPDIR) together, with the userns layer: a tmpfs of this size in the call's mount namespace, its pages counted in the call's memory (cgroup layer); 0 = not bounded (RLIMIT_FSIZE still bounds each file).")
	fs.Uint64Var(&f.Limits.AddressSpace, "sandbox-max-address-space", f.Limits.AddressSpace, "RLIMIT_AS of each function process, in bytes; 0 = not set. It counts address space reserved, not memory used: runtimes reserve far more than they touch (the catalog's starlark v0.3.0 maps 4 GiB at start), so the binary-runner bounds the memory a call's processes hold instead (see --max-in-flight-bytes) and sets none by default.")
	fs.Uint64Var(&f.Limits.FileSize, "sandbox-max-file-size", f.Limits.FileSize, "RLIMIT_FSIZE: the largest file a function writes, in bytes; 0 = not set.")
	fs.Uint64Var(&f.Limits.OpenFiles, "sandbox-max-open-files", f.Limits.OpenFiles, "RLIMIT_NOFILE of each function process; 0 = not set.")
	fs.Uint64Var(&f.Limits.CPUSeconds, "sandbox-max-cpu-seconds", 0, "RLIMIT_CPU of each function process, in CPU seconds; 0 = not set (the call's deadline still ends it).")
	fs.Func("sandbox-read-only-paths", fmt.Sprintf("Comma-separated paths a function may read and execute below, beside its binary, with the landlock layer (default %q).", strings.Join(d.ReadOnly, ",")), func(v string) error {
		f.ReadOnly = splitList(v)
		return nil
	})
	fs.Func("sandbox-read-write-paths", "Comma-separated paths a function may also write below with the landlock layer, beside its private directory (default: none).", func(v string) error {
		f.ReadWrite = splitList(v)
		return nil
	})
	fs.Func("sandbox-allow-connect-ports", fmt.Sprintf("Comma-separated TCP ports a function may connect to with the landlock layer, or \"any\" (default %s; TCP bind is always denied).", connectDefault), func(v string) error {
		f.ConnectPorts, f.AnyConnect = nil, v == "any"
		if f.AnyConnect {
			return nil
		}
		for _, p := range splitList(v) {
			n, err := strconv.ParseUint(p, 10, 16)
			if err != nil {
				return fmt.Errorf("port %q: %w", p, err)
			}
			f.ConnectPorts = append(f.ConnectPorts, uint16(n))
		}
		return nil
	})
	fs.IntVar(&f.FirstUID, "sandbox-first-uid", f.FirstUID, "With the uid layer, concurrent calls run as uids (and gids) FIRST, FIRST+1, ...: pick a range no one else uses.")
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

var _ fnexec.Wrapper = (*Sandbox)(nil)

// Sandbox wraps function command lines in fnsandbox with the layers in use;
// with none in use (Enabled false) the runner runs functions bare.
type Sandbox struct {
	helper    string
	layers    []Layer
	limits    spec.Limits
	memory    uint64 // cgroup
	cpuMillis uint64 // cgroup
	dirBytes  uint64 // userns
	pids      uint64 // cgroup
	readOnly  []string
	readWrite []string
	ports     []uint16
	anyPort   bool
	report    spec.Report

	uids *uidPool
	warm *warmPool
	pre  *prestartPool
	// starts counts calls by how their function started.
	starts *prometheus.CounterVec
}

// Open finds out which layers are available, decides which to use by
// f.Mode and logs both. It fails, wrapping
// ErrLayerMissing, when a layer f.Mode names is missing.
func (f *Flags) Open(ctx context.Context, log *slog.Logger) (*Sandbox, error) {
	want, err := parseMode(f.Mode)
	if err != nil {
		return nil, err
	}
	if f.Mode == "none" {
		log.Warn("sandbox off (--sandbox=none): function binaries run as the runner, with its files, network and limits")
		return &Sandbox{}, nil
	}
	helper, err := helperPath(f.Helper)
	var report []spec.Finding
	if err == nil {
		report, err = Probe(ctx, helper)
	}
	// The helper applies Landlock in the call's working directory: a
	// relative path would be the private directory's, and a missing one
	// is dropped.
	readOnly, aerr := absPaths(f.ReadOnly)
	readWrite, werr := absPaths(f.ReadWrite)
	if err := errors.Join(aerr, werr); err != nil {
		return nil, fmt.Errorf("--sandbox-read-only-paths, --sandbox-read-write-paths: %w", err)
	}
	if err != nil {
		if f.Mode != "auto" {
			return nil, fmt.Errorf("%w: base: %w", ErrLayerMissing, err)
		}
		log.Error("sandbox helper unusable: function binaries run unsandboxed", "helper", f.Helper, "err", err)
		return &Sandbox{}, nil
	}
	for i, fd := range report {
		if fd.Layer == string(UID) && fd.Available {
			err := mapped(f.FirstUID, uidRange)
			if err == nil {
				err = reachableByAll(f.TempDir)
			}
			if err != nil {
				report[i] = spec.Finding{Layer: fd.Layer, Detail: err.Error()}
			}
		}
	}
	available := func(l Layer) (spec.Finding, bool) {
		for _, fd := range report {
			if fd.Layer == string(l) {
				return fd, fd.Available
			}
		}
		return spec.Finding{Layer: string(l), Detail: "not reported by the helper"}, false
	}
	var use []Layer
	for _, l := range applied {
		fd, ok := available(l)
		switch {
		case want == nil && ok:
			use = append(use, l)
		case want == nil:
			log.Warn("sandbox layer missing", "layer", l, "why", fd.Detail)
		case slices.Contains(want, l) && !ok:
			return nil, fmt.Errorf("%w: %s (--sandbox=%s): %s", ErrLayerMissing, l, f.Mode, fd.Detail)
		case slices.Contains(want, l):
			use = append(use, l)
		}
	}
	if !slices.Contains(use, Base) {
		use = append([]Layer{Base}, use...) // every other layer runs through the helper
	}
	for _, fd := range report {
		log.Info("sandbox layer", "layer", fd.Layer, "available", fd.Available, "used", slices.Contains(use, Layer(fd.Layer)), "detail", fd.Detail)
	}
	s := &Sandbox{helper: helper, warm: newWarmPool(helper, slices.Contains(use, UserNS), f.WarmHelpers, log), starts: newStartsCounter(), layers: use, limits: f.Limits, memory: f.MemoryMax, cpuMillis: f.CPUMillis, dirBytes: f.DirBytes, pids: f.Limits.Processes, readOnly: readOnly, readWrite: readWrite, ports: f.ConnectPorts, anyPort: f.AnyConnect, report: report}
	s.pre = newPrestartPool(f.PrestartedFunctions, log)
	if slices.Contains(use, UID) {
		s.uids = &uidPool{first: f.FirstUID}
	} else {
		s.limits.Processes = 0
	}
	return s, nil
}

// absPaths are paths made absolute (the runner's working directory).
func absPaths(paths []string) ([]string, error) {
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		out = append(out, abs)
	}
	return out, nil
}

// helperPath is the helper's absolute path: helpers start in "/", and the
// runner's working directory is no longer looked at after Open. A name
// without a slash is looked up in PATH, as os/exec does.
func helperPath(helper string) (string, error) {
	p, err := exec.LookPath(helper)
	if err != nil {
		return "", fmt.Errorf("--sandbox-helper: %w", err)
	}
	return filepath.Abs(p)
}

// uidRange is how many uids from --sandbox-first-uid must exist: more
// concurrent calls than this is not expected of one runner.
const uidRange = 4096

// mapped fails unless the uids (and gids) first to first+n-1 exist in this
// process's user namespace: a container runtime's or Bazel's namespace maps
// only a few, and the kernel refuses the others.
func mapped(first, n int) error {
	for _, file := range []string{"/proc/self/uid_map", "/proc/self/gid_map"} {
		m, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		ok := false
		for _, line := range strings.Split(strings.TrimSpace(string(m)), "\n") {
			var inside, outside, length int
			if _, err := fmt.Sscan(line, &inside, &outside, &length); err == nil && first >= inside && first+n <= inside+length {
				ok = true
			}
		}
		if !ok {
			return fmt.Errorf("ids %d-%d are not mapped in this user namespace (%s: %s)", first, first+n-1, file, strings.Join(strings.Fields(string(m)), " "))
		}
	}
	return nil
}

// reachableByAll fails unless every user may traverse dir and each directory
// above it.
func reachableByAll(dir string) error {
	if dir == "" {
		dir = os.TempDir()
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for p := abs; ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("temp dir: %w", err)
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("calls' uids cannot reach the temp dir %s: %s is mode %v (use a --temp-dir every user may traverse)", abs, p, st.Mode().Perm())
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// parseMode returns the required layers, nil for "auto" (and "none").
func parseMode(mode string) ([]Layer, error) {
	if mode == "auto" || mode == "none" {
		return nil, nil
	}
	var want []Layer
	for _, name := range splitList(mode) {
		l := Layer(name)
		switch {
		case slices.Contains(applied, l):
			want = append(want, l)
		default:
			return nil, fmt.Errorf("--sandbox=%s: unknown layer %q (auto, none, or of %v)", mode, name, applied)
		}
	}
	if len(want) == 0 {
		return nil, fmt.Errorf("--sandbox=%q names no layer", mode)
	}
	return want, nil
}

// Probe runs the helper's probe.
func Probe(ctx context.Context, helper string) (spec.Report, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, helper, spec.Probe)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("running %s %s: %w: %s", helper, spec.Probe, err, strings.TrimSpace(stderr.String()))
	}
	return spec.ParseReport(string(out))
}

// Close ends the helpers and function processes started ahead of time
// (--sandbox-warm-helpers, --sandbox-prestarted-functions); calls after it
// start their own.
func (s *Sandbox) Close() {
	if s.warm != nil {
		s.warm.close()
	}
	if s.pre != nil {
		s.pre.close()
	}
}

// Prestarted is how many function processes are started, or starting,
// ahead of their calls.
func (s *Sandbox) Prestarted() int {
	if s.pre == nil {
		return 0
	}
	return s.pre.len()
}

// Layers are the layers in use.
func (s *Sandbox) Layers() []Layer { return slices.Clone(s.layers) }

// LayerNames are the names of the layers in use (for traces).
func (s *Sandbox) LayerNames() []string {
	names := make([]string, len(s.layers))
	for i, l := range s.layers {
		names[i] = string(l)
	}
	return names
}

// Enabled says whether functions run in the sandbox at all.
func (s *Sandbox) Enabled() bool { return len(s.layers) > 0 }

// Start runs c in the sandbox (fnexec.Wrapper): a process of c's function
// started ahead of time gets the call when there is one
// (--sandbox-prestarted-functions); otherwise a warm helper, or a new one
// when none is ready, starts it now.
func (s *Sandbox) Start(ctx context.Context, c fnexec.Call) (*fnexec.Started, error) {
	// A call already over takes no process started ahead and no helper:
	// either would be stopped at once, and not replaced.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	key, keyed := s.prestartKey(c)
	if keyed {
		if st := s.pre.take(ctx, key); st != nil {
			if err := s.chargeMemory(ctx, st, c); err == nil {
				s.starts.WithLabelValues("prestarted").Inc()
				s.afterCall(st, key, keyed, c)
				return st, nil
			} else {
				s.warm.log.Warn("a function process started ahead could not be given its call's memory bound: it is ended, and the call starts its own", "function", c.Argv[0], "error", err)
				go endPrestarted(st)
			}
		}
		if err := ctx.Err(); err != nil { // it ended while take waited
			return nil, err
		}
	}
	st, err := s.start(ctx, c, true)
	if err != nil {
		return nil, err
	}
	s.starts.WithLabelValues("now").Inc()
	s.afterCall(st, key, keyed, c)
	return st, nil
}

// prestartKey is c's functionKey when functions are started ahead of time
// (and its binary is there): without it no call pays for the lookup.
func (s *Sandbox) prestartKey(c fnexec.Call) (string, bool) {
	if s.pre.size == 0 {
		return "", false
	}
	key, err := s.functionKey(c)
	return key, err == nil
}

// afterCall makes st's release also start the next helpers and, after a
// call that succeeded, a process of the same function (keyed by key) for
// the next call.
func (s *Sandbox) afterCall(st *fnexec.Started, key string, keyed bool, c fnexec.Call) {
	release := st.Release
	st.Release = func(succeeded bool) {
		release(succeeded)
		s.warm.refill()
		if keyed && succeeded {
			s.pre.refill(key, c.Argv[0], func(ctx context.Context) (*fnexec.Started, error) { return s.start(ctx, c, false) })
		}
	}
}

// start starts c's function in a private directory of its own, through a
// warm helper or a new one, which serves further calls when reuse is set
// (see warmPool.run). The Started's Release removes the directory, gives
// back the call's uid and the helper.
func (s *Sandbox) start(ctx context.Context, c fnexec.Call, reuse bool) (*fnexec.Started, error) {
	p, err := c.Prepare()
	if err != nil {
		return nil, err
	}
	sp, release, err := s.spec(c, p.Dir)
	if err != nil {
		p.Remove()
		return nil, err
	}
	sp.WorkDir, sp.Env = p.WorkDir, p.Env
	cleanup := func(h *warmHelper) {
		if h != nil && h.unswept() && sp.UID >= 0 {
			// What its function left runs as the call's uid: ended,
			// the uid goes to later calls again; while one is left, the
			// uid is kept from them.
			go func() {
				ended := endUID(sp.UID, leftoverRounds)
				p.Remove()
				if !ended {
					s.warm.log.Warn("a sandbox helper was killed before it ended its call's processes, and what is left of them could not be ended or reaped: its uid is not given to another call", "uid", sp.UID)
					return
				}
				s.warm.log.Warn("a sandbox helper was killed before it ended its call's processes: the runner ended them by their uid", "uid", sp.UID)
				release()
			}()
			return
		}
		// The directory is the uid's: gone before a later call gets the
		// uid (release is a no-op without the uid layer).
		p.Remove()
		release()
	}
	st, h, err := s.warm.run(ctx, sp.Encode(), reuse, cleanup)
	if errors.Is(err, errHandoffStopped) {
		return nil, err // cleanup once the helper has ended what it started
	}
	if err != nil {
		cleanup(nil)
		return nil, err
	}
	st.Release = func(bool) {
		cleanup(h)
		if reuse {
			s.warm.put(h)
		} // else it served this call alone, and whoever waited for it reaped it
	}
	return st, nil
}

// leftoverRounds bound endUID's rounds (10 ms apart) for what a killed
// helper's call left running.
const leftoverRounds = 100

// functionKey names what makes two calls the same function's for a
// process started ahead of time: the command line, environment and
// directories, the ports it may connect to, and the binary file itself (a
// replaced binary is another function).
func (s *Sandbox) functionKey(c fnexec.Call) (string, error) {
	bin, err := exec.LookPath(c.Argv[0])
	if err != nil {
		return "", err
	}
	var st syscall.Stat_t
	if err := syscall.Stat(bin, &st); err != nil {
		return "", err
	}
	var b strings.Builder
	// The change time is the kernel's: no one sets it back.
	fmt.Fprintf(&b, "%d:%d:%d:%d.%d:%d.%d\x00%v:%t\x00%s\x00%s", st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec, s.ports, s.anyPort, c.Dir, c.TempDir)
	for _, part := range [][]string{c.Argv, c.Env} {
		b.WriteString("\x00\x00")
		b.WriteString(strings.Join(part, "\x00"))
	}
	return b.String(), nil
}

// spec is the helper's spec for c with dir as its private, writable
// directory (its cgroup limited at callMemory), and a release to call once
// the call has ended.
func (s *Sandbox) spec(c fnexec.Call, dir string) (spec.Spec, func(), error) {
	argv := c.Argv
	sp := spec.Spec{Limits: s.limits, UID: -1, GID: -1, PrivateDir: dir, Argv: argv}
	// The helper does no PATH lookup and runs in the private directory:
	// the binary is resolved here.
	bin, err := exec.LookPath(argv[0])
	if err != nil {
		return spec.Spec{}, nil, fmt.Errorf("function binary: %w", err)
	}
	if bin, err = filepath.Abs(bin); err != nil {
		return spec.Spec{}, nil, fmt.Errorf("function binary: %w", err)
	}
	sp.Path = bin
	if slices.Contains(s.layers, Landlock) {
		// A symlinked binary (Bazel's runfiles, /usr/bin/x -> ...) is
		// opened through its target.
		real, err := filepath.EvalSymlinks(bin)
		if err != nil {
			return spec.Spec{}, nil, fmt.Errorf("function binary: %w", err)
		}
		sp.Landlock = true
		sp.ReadOnly = append(slices.Clone(s.readOnly), real)
		// /dev/null is written to by many (os/exec's default stdout).
		sp.ReadWrite = append([]string{"/dev/null"}, s.readWrite...)
	}
	// Landlock filters by them, and userns keeps a network namespace
	// only when the function may connect somewhere.
	sp.ConnectPorts = s.ports
	sp.AnyConnect = s.anyPort
	sp.Namespaces = slices.Contains(s.layers, UserNS)
	if sp.Namespaces {
		sp.DirBytes = s.dirBytes
	}
	if slices.Contains(s.layers, Cgroup) {
		sp.Cgroup, sp.MemoryMax, sp.PidsMax, sp.CPUMillis = true, s.callMemory(c), s.pids, s.cpuMillis
	}
	release := func() {}
	if s.uids != nil {
		id, err := s.uids.get()
		if err != nil {
			return spec.Spec{}, nil, err
		}
		sp.UID, sp.GID = id, id
		release = func() { s.uids.put(id) }
	}
	return sp, release, nil
}

// AllowingConnect returns a sandbox like s whose functions may also open TCP
// connections to ports (and, with the userns layer, keep the runner's
// network namespace to do it): for a function that filters by host itself,
// as fnrunner's starlark does.
func (s *Sandbox) AllowingConnect(ports ...uint16) fnexec.Wrapper {
	c := *s
	c.layers = slices.Clone(s.layers)
	c.ports = slices.Concat(s.ports, ports)
	return &c
}

// Report reads what fnsandbox wrote on descriptor 3 (fnexec.Wrapper): a
// call its cgroup's memory limit ended is fnresult.ErrMemoryExceeded.
func (s *Sandbox) Report(out []byte) (syscall.Signal, error) {
	r := spec.ParseHelperReport(string(out))
	if r.Failure != "" {
		return 0, errors.New(r.Failure)
	}
	if r.MemoryLimit > 0 {
		return syscall.Signal(r.Signal), fmt.Errorf("%w: the kernel killed a process of the call in its cgroup, whose memory reached the call's bound of %d MiB", fnresult.ErrMemoryExceeded, r.MemoryLimit>>20)
	}
	return syscall.Signal(r.Signal), nil
}

// Collector exports what Open found: fnrunner_sandbox_layer_available and
// fnrunner_sandbox_layer_used, 1 or 0 for each layer.
func (s *Sandbox) Collector() prometheus.Collector {
	available := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fnrunner_sandbox_layer_available",
		Help: "1 when this kernel and container allow the sandbox layer, as found at start.",
	}, []string{"layer"})
	used := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fnrunner_sandbox_layer_used",
		Help: "1 when function binaries run with the sandbox layer.",
	}, []string{"layer"})
	for _, l := range applied {
		var avail float64
		for _, f := range s.report {
			if f.Layer == string(l) && f.Available {
				avail = 1
			}
		}
		available.WithLabelValues(string(l)).Set(avail)
		var inUse float64
		if slices.Contains(s.layers, l) {
			inUse = 1
		}
		used.WithLabelValues(string(l)).Set(inUse)
	}
	starts := s.starts
	if starts == nil { // --sandbox=none
		starts = newStartsCounter()
	}
	return collectors{available, used, starts, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fnrunner_sandbox_prestarted_functions",
		Help: "Function processes started, or starting, ahead of their calls (--sandbox-prestarted-functions).",
	}, func() float64 { return float64(s.Prestarted()) })}
}

func newStartsCounter() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fnrunner_sandbox_function_starts_total",
		Help: `Sandboxed function calls by how the function's process started: "prestarted" (before the call came, --sandbox-prestarted-functions) or "now".`,
	}, []string{"start"})
	c.WithLabelValues("prestarted")
	c.WithLabelValues("now")
	return c
}

type collectors []prometheus.Collector

func (c collectors) Describe(ch chan<- *prometheus.Desc) {
	for _, x := range c {
		x.Describe(ch)
	}
}

func (c collectors) Collect(ch chan<- prometheus.Metric) {
	for _, x := range c {
		x.Collect(ch)
	}
}

// uidPool hands each concurrent call a uid of its own: the lowest free one
// from first on.
type uidPool struct {
	first int
	mu    sync.Mutex
	inUse []bool
}

func (p *uidPool) get() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, used := range p.inUse {
		if !used {
			p.inUse[i] = true
			return p.first + i, nil
		}
	}
	if len(p.inUse) == uidRange {
		return 0, fmt.Errorf("uid layer: all %d uids from %d are in use", uidRange, p.first)
	}
	p.inUse = append(p.inUse, true)
	return p.first + len(p.inUse) - 1, nil
}

func (p *uidPool) put(id int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inUse[id-p.first] = false
}

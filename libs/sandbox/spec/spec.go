// Package spec is the command line between a runner and fnsandbox, the
// helper that runs one function call in its sandbox: the runner encodes a
// Spec with Args, the helper decodes it with Parse. Both sides link only
// this and the standard library.
package spec

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Limits are the rlimits set on a call's processes; 0 leaves one as it is.
type Limits struct {
	// Processes is RLIMIT_NPROC: processes and threads of the call's uid.
	Processes uint64
	// AddressSpace is RLIMIT_AS in bytes, per process.
	AddressSpace uint64
	// FileSize is RLIMIT_FSIZE in bytes: the largest file a process writes.
	FileSize uint64
	// OpenFiles is RLIMIT_NOFILE, per process.
	OpenFiles uint64
	// CPUSeconds is RLIMIT_CPU, per process.
	CPUSeconds uint64
}

// Spec is one sandboxed run.
type Spec struct {
	// Limits are set on the helper before it starts the function, so the
	// function and all it starts inherit them.
	Limits Limits
	// Landlock turns on the Landlock rules below; without it they are not
	// enforced.
	Landlock bool
	// ReadOnly are paths (directories or files) the function may read and
	// execute; missing ones are skipped.
	ReadOnly []string
	// ReadWrite are paths the function may read, write, create and remove in.
	ReadWrite []string
	// PrivateDir is the call's own directory: writable with Landlock, and
	// given to UID.
	PrivateDir string
	// ConnectPorts are TCP ports the function may connect to; every other
	// TCP connect and bind is denied.
	ConnectPorts []uint16
	// AnyConnect leaves TCP unrestricted (ConnectPorts is then ignored).
	AnyConnect bool
	// UID and GID, when not -1, are what the function runs as; the helper
	// gives it PrivateDir first.
	UID, GID int
	// Cgroup runs the call in a cgroup of its own (v1 memory and pids, or
	// v2), with MemoryMax bytes of memory and PidsMax processes and
	// threads for all its processes together (0: no limit).
	Cgroup             bool
	MemoryMax, PidsMax uint64
	// CPUMillis bounds the CPU time of all the call's processes together,
	// in thousandths of a CPU per second (1000: one CPU), where the cpu
	// controller is there; 0: not bounded.
	CPUMillis uint64
	// Namespaces starts the function in new user, pid, mount, IPC and UTS
	// namespaces, and a network namespace of its own (no interface up)
	// unless it may connect somewhere (AnyConnect or ConnectPorts).
	Namespaces bool
	// Inside is set for the helper that runs as PID 1 of the call's
	// namespaces: it mounts the call's own /proc (its pid namespace's) and,
	// with DirBytes, a tmpfs of that size on PrivateDir, before it starts
	// the function.
	Inside bool
	// DirBytes bounds the bytes of all files in PrivateDir together (a
	// size-limited tmpfs, in the call's mount namespace); 0: not bounded.
	DirBytes uint64
	// WorkDir, when set, is the function's working directory (by default
	// the helper's own).
	WorkDir string
	// Env, when set, is the function's environment (by default the
	// helper's own).
	Env []string
	// Path is the function's executable (an absolute path), when Argv[0]
	// is not.
	Path string
	// Argv is the function's command line.
	Argv []string
}

// Probe, given as the only argument, makes the helper report which layers it
// can apply instead of running anything.
const Probe = "-probe"

// Warm, given as the only argument, makes the helper start before its calls
// are known and serve them one after another on file descriptor 4, a unix
// SOCK_SEQPACKET socket. Each call is one message from the runner: the
// Spec in Encode's form, with the call's standard input, output, error and
// report pipe as four descriptors (SCM_RIGHTS). When the call has ended and
// every process of it is gone, the helper closes those descriptors and
// answers with one message, FormatExit's form, then waits for the next call.
// Before it runs a call, it answers Accepted, or FormatRefusal's form when it
// will not run it (it then ends): it could not take the call's descriptors,
// or it is no longer as it started (a function running as its uid changed
// it meanwhile). A refused call never started; another helper may take it.
// A runner that closes the socket after the acceptance gets no other answer:
// the helper exits as the function did when that call ends (and quietly
// when no call came).
const Warm = "-warm"

// WarmNamespaces is Warm for a helper whose calls are all in namespaces of
// their own (Namespaces): it prepares each call's thread ahead of the call
// as those need. A Warm helper refuses a call in namespaces.
const WarmNamespaces = "-warm-namespaces"

// Accepted is a warm helper's first answer to a call it runs.
const Accepted = "accepted"

// FormatRefusal is a warm helper's first answer to a call it does not run:
// why, and whether the helper is at fault (it changed, or could not take
// the call's descriptors: another helper may run the call) or the call is (a
// message no helper would run).
func FormatRefusal(reason string, helperAtFault bool) []byte {
	kind := refusedCall
	if helperAtFault {
		kind = refusedHelper
	}
	return []byte(kind + reason)
}

const (
	refusedHelper = "refused helper: "
	refusedCall   = "refused call: "
)

// RefusedError is a warm helper's refusal of a call, which it never started.
type RefusedError struct {
	Reason string
	// HelperAtFault is set when another helper may run the call.
	HelperAtFault bool
}

func (e *RefusedError) Error() string { return "sandbox helper refused the call: " + e.Reason }

// ParseAcceptance decodes a warm helper's first answer to a call: nil for
// Accepted, a *RefusedError for FormatRefusal's form.
func ParseAcceptance(b []byte) error {
	if string(b) == Accepted {
		return nil
	}
	if reason, ok := strings.CutPrefix(string(b), refusedHelper); ok {
		return &RefusedError{Reason: reason, HelperAtFault: true}
	}
	if reason, ok := strings.CutPrefix(string(b), refusedCall); ok {
		return &RefusedError{Reason: reason}
	}
	return fmt.Errorf("sandbox helper answered %q, neither accepting nor refusing the call", b)
}

// MaxEncoded bounds a warm helper's call message (a unix socket's default
// send buffer, 208 KiB on Linux, bounds one message).
const MaxEncoded = 128 << 10

// Descriptors is how many descriptors come with a warm helper's call.
const Descriptors = 4

// FormatExit is a warm helper's answer when a call has ended: the exit
// code the helper would have exited with (128 + the signal, reported as
// ever, when a signal killed the function).
func FormatExit(code int) []byte { return []byte("exit " + strconv.Itoa(code)) }

// ParseExit decodes FormatExit.
func ParseExit(b []byte) (int, error) {
	n, ok := strings.CutPrefix(string(b), "exit ")
	code, err := strconv.Atoi(n)
	if !ok || err != nil || code < 0 || code > 255 {
		return 0, fmt.Errorf("sandbox helper answered %q, not an exit code", b)
	}
	return code, nil
}

// Encode is s as a warm helper reads it: Args separated by NUL bytes, which
// no argument, path or environment entry can hold.
func (s Spec) Encode() []byte { return []byte(strings.Join(s.Args(), "\x00")) }

// Decode decodes Encode.
func Decode(b []byte) (Spec, error) {
	if len(b) == 0 {
		return Spec{}, errors.New("fnsandbox: no call")
	}
	return Parse(strings.Split(string(b), "\x00"))
}

// Args is the helper's command line for s (without the helper itself).
func (s Spec) Args() []string {
	var a []string
	lim := func(name string, v uint64) {
		if v > 0 {
			a = append(a, "-"+name+"="+strconv.FormatUint(v, 10))
		}
	}
	lim("nproc", s.Limits.Processes)
	lim("as", s.Limits.AddressSpace)
	lim("fsize", s.Limits.FileSize)
	lim("nofile", s.Limits.OpenFiles)
	lim("cpu", s.Limits.CPUSeconds)
	if s.Landlock {
		a = append(a, "-landlock")
		for _, p := range s.ReadOnly {
			a = append(a, "-ro="+p)
		}
		for _, p := range s.ReadWrite {
			a = append(a, "-rw="+p)
		}
	}
	if s.PrivateDir != "" {
		a = append(a, "-dir="+s.PrivateDir)
	}
	if s.AnyConnect {
		a = append(a, "-any-connect")
	}
	for _, p := range s.ConnectPorts {
		a = append(a, "-connect="+strconv.Itoa(int(p)))
	}
	if s.UID >= 0 {
		a = append(a, "-uid="+strconv.Itoa(s.UID), "-gid="+strconv.Itoa(s.GID))
	}
	if s.Namespaces {
		a = append(a, "-namespaces")
	}
	if s.Inside {
		a = append(a, "-inside")
	}
	if s.DirBytes > 0 {
		a = append(a, "-dir-bytes="+strconv.FormatUint(s.DirBytes, 10))
	}
	if s.Cgroup {
		a = append(a, "-cgroup", "-memory-max="+strconv.FormatUint(s.MemoryMax, 10), "-pids-max="+strconv.FormatUint(s.PidsMax, 10), "-cpu-millis="+strconv.FormatUint(s.CPUMillis, 10))
	}
	if s.WorkDir != "" {
		a = append(a, "-workdir="+s.WorkDir)
	}
	for _, e := range s.Env {
		a = append(a, "-env="+e)
	}
	if s.Path != "" {
		a = append(a, "-path="+s.Path)
	}
	a = append(a, "--")
	return append(a, s.Argv...)
}

// Parse decodes Args.
func Parse(args []string) (Spec, error) {
	s := Spec{UID: -1, GID: -1}
	fs := flag.NewFlagSet("fnsandbox", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Uint64Var(&s.Limits.Processes, "nproc", 0, "")
	fs.Uint64Var(&s.Limits.AddressSpace, "as", 0, "")
	fs.Uint64Var(&s.Limits.FileSize, "fsize", 0, "")
	fs.Uint64Var(&s.Limits.OpenFiles, "nofile", 0, "")
	fs.Uint64Var(&s.Limits.CPUSeconds, "cpu", 0, "")
	fs.BoolVar(&s.Landlock, "landlock", false, "")
	fs.BoolVar(&s.AnyConnect, "any-connect", false, "")
	fs.Func("ro", "", func(v string) error { s.ReadOnly = append(s.ReadOnly, v); return nil })
	fs.Func("rw", "", func(v string) error { s.ReadWrite = append(s.ReadWrite, v); return nil })
	fs.Func("connect", "", func(v string) error {
		p, err := strconv.ParseUint(v, 10, 16)
		if err != nil {
			return err
		}
		s.ConnectPorts = append(s.ConnectPorts, uint16(p))
		return nil
	})
	fs.StringVar(&s.PrivateDir, "dir", "", "")
	fs.StringVar(&s.Path, "path", "", "")
	fs.StringVar(&s.WorkDir, "workdir", "", "")
	fs.Func("env", "", func(v string) error { s.Env = append(s.Env, v); return nil })
	fs.BoolVar(&s.Namespaces, "namespaces", false, "")
	fs.BoolVar(&s.Inside, "inside", false, "")
	fs.Uint64Var(&s.DirBytes, "dir-bytes", 0, "")
	fs.BoolVar(&s.Cgroup, "cgroup", false, "")
	fs.Uint64Var(&s.MemoryMax, "memory-max", 0, "")
	fs.Uint64Var(&s.PidsMax, "pids-max", 0, "")
	fs.Uint64Var(&s.CPUMillis, "cpu-millis", 0, "")
	fs.IntVar(&s.UID, "uid", -1, "")
	fs.IntVar(&s.GID, "gid", -1, "")
	if err := fs.Parse(args); err != nil {
		return Spec{}, fmt.Errorf("fnsandbox arguments: %w", err)
	}
	s.Argv = fs.Args()
	if len(s.Argv) == 0 {
		return Spec{}, errors.New("fnsandbox arguments: no command after --")
	}
	return s, nil
}

// CallGroupsDir is the directory, below the helper's own cgroup in each
// controller, that holds one cgroup per call.
const CallGroupsDir = "fnrunner-calls"

// The helper's reports to the runner, one line each on file descriptor 3.
const (
	errorPrefix  = "fnsandbox: "
	signalPrefix = "fnsandbox-signal: "
	memoryPrefix = "fnsandbox-memory: "
)

// ErrorReport says the sandbox failed and the function never ran.
func ErrorReport(msg string) string { return errorPrefix + msg }

// SignalReport says the function was killed by signal sig.
func SignalReport(sig int) string { return signalPrefix + strconv.Itoa(sig) }

// MemoryReport says the kernel killed a process of the call in its cgroup,
// whose memory limit is limit bytes.
func MemoryReport(limit uint64) string { return memoryPrefix + strconv.FormatUint(limit, 10) }

// HelperReport is what the helper wrote on file descriptor 3.
type HelperReport struct {
	// Signal killed the function (0 if none).
	Signal int
	// Failure is the helper's own failure ("" if none): the function
	// never ran.
	Failure string
	// MemoryLimit, when set, is the limit of the call's cgroup, at which
	// the kernel killed one of its processes.
	MemoryLimit uint64
}

// ParseHelperReport reads what the helper wrote on file descriptor 3.
func ParseHelperReport(out string) HelperReport {
	var r HelperReport
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if v, ok := strings.CutPrefix(line, signalPrefix); ok {
			if n, err := strconv.Atoi(v); err == nil {
				r.Signal = n
			}
		} else if v, ok := strings.CutPrefix(line, memoryPrefix); ok {
			if n, err := strconv.ParseUint(v, 10, 64); err == nil {
				r.MemoryLimit = n
			}
		} else if line != "" {
			r.Failure = line
		}
	}
	return r
}

// Report is what the helper's probe found: one Finding per layer.
type Report []Finding

// Finding says whether the helper can apply one layer here, and why not.
type Finding struct {
	Layer     string
	Available bool
	Detail    string
}

// String is the probe's output: one "layer ok|missing detail" line each.
func (r Report) String() string {
	var b strings.Builder
	for _, f := range r {
		state := "missing"
		if f.Available {
			state = "ok"
		}
		fmt.Fprintf(&b, "%s %s %s\n", f.Layer, state, f.Detail)
	}
	return b.String()
}

// ParseReport decodes String.
func ParseReport(out string) (Report, error) {
	var r Report
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		fields := strings.SplitN(line, " ", 3)
		if len(fields) < 2 || (fields[1] != "ok" && fields[1] != "missing") {
			return nil, fmt.Errorf("fnsandbox probe: unexpected line %q", line)
		}
		f := Finding{Layer: fields[0], Available: fields[1] == "ok"}
		if len(fields) == 3 {
			f.Detail = strings.TrimSpace(fields[2])
		}
		r = append(r, f)
	}
	return r, nil
}

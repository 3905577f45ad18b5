package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fnrunner/fnrunner/libs/fnexec"
	"github.com/fnrunner/fnrunner/libs/fnresult"
	"github.com/fnrunner/fnrunner/libs/sandbox"
	"github.com/fnrunner/fnrunner/libs/sandbox/spec"
	"github.com/fnrunner/fnrunner/tests/harness"
)

// helper is fnsandbox, built by Bazel (FNRUNNER_FNSANDBOX) or by hand.
func helper(t *testing.T) string {
	t.Helper()
	return harness.Binary(t, "FNRUNNER_FNSANDBOX")
}

func discard() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// open is a sandbox with mode's layers and the binary-runner's paths.
func open(t *testing.T, mode string, limits spec.Limits) *sandbox.Sandbox {
	t.Helper()
	f := sandbox.Flags{Mode: mode, Helper: helper(t), Limits: limits, ReadOnly: sandbox.SystemReadOnly, FirstUID: 3100000, TempDir: tempRoot(t), DirBytes: 8 << 20, WarmHelpers: 2}
	sb, err := f.Open(context.Background(), discard())
	if errors.Is(err, sandbox.ErrLayerMissing) {
		harness.Need(t, "sandbox layers "+mode, err)
	}
	require.NoError(t, err)
	t.Cleanup(sb.Close)
	return sb
}

// tempRoot is a directory every uid may reach (Bazel's test temp dir is
// below root's private home).
func tempRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "sandbox-test-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o711))
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func run(t *testing.T, sb *sandbox.Sandbox, timeout time.Duration, script string) (*fnresult.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	opts := fnexec.Options{TempDir: tempRoot(t)}
	if sb.Enabled() {
		opts.Sandbox = sb
	}
	return fnexec.Run(ctx, []string{"/bin/bash", "-c", script}, strings.NewReader("input\n"), opts)
}

func out(res *fnresult.Result) string {
	if res == nil {
		return ""
	}
	return strings.TrimSpace(string(res.ResourceList.Materialize()))
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

func TestProbeFindsEveryLayer(t *testing.T) {
	report, err := sandbox.Probe(context.Background(), helper(t))
	require.NoError(t, err)
	var layers []string
	for _, f := range report {
		layers = append(layers, f.Layer)
		assert.NotEmpty(t, f.Detail, f.Layer)
	}
	assert.Equal(t, []string{"base", "landlock", "uid", "userns", "cgroup"}, layers)
}

func TestOrdinaryCallRunsInEveryLayerSet(t *testing.T) {
	for _, mode := range []string{"none", "base", "base,landlock", "base,landlock,uid", "base,userns", "base,cgroup", "base,landlock,uid,userns,cgroup", "auto"} {
		t.Run(mode, func(t *testing.T) {
			sb := open(t, mode, spec.Limits{})
			res, err := run(t, sb, 10*time.Second, `cat; echo log >&2; echo made > "$TMPDIR/f"; cat "$TMPDIR/f"; pwd; grep '^NoNewPrivs:' /proc/self/status 2>/dev/null || echo 'NoNewPrivs: unreadable'`)
			require.NoError(t, err, "log: %s", res.Log)
			lines := strings.Split(out(res), "\n")
			require.Len(t, lines, 4)
			assert.Equal(t, []string{"input", "made"}, lines[:2])
			assert.Equal(t, "log", strings.TrimSpace(string(res.Log)))
			// Every sandboxed call runs with no_new_privs: no setuid
			// binary or file capability raises what it may do.
			nnp := strings.Join(strings.Fields(lines[3]), " ")
			// (Without one it is whatever the runner has; Landlock
			// keeps /proc from the function.)
			if mode != "none" && mode != "auto" && !strings.Contains(mode, "landlock") {
				assert.Equal(t, "NoNewPrivs: 1", nnp)
			}
		})
	}
}

// Private directories made ahead by fnexec.Dirs, in every layer set: each
// call gets an empty one it may write to; what it wrote is gone when its
// call returns (the directory too, or, with userns, the tmpfs it wrote
// into), the empty directories once Dirs is closed.
func TestPrivateDirectoriesMadeAhead(t *testing.T) {
	for _, mode := range []string{"base", "base,landlock,uid", "base,userns", "base,landlock,uid,userns,cgroup"} {
		t.Run(mode, func(t *testing.T) {
			sb := open(t, mode, spec.Limits{})
			root := tempRoot(t)
			dirs, err := fnexec.NewDirs(root)
			require.NoError(t, err)
			defer dirs.Close()
			for i := range 6 {
				script := `ls -A "$HOME"; cat >/dev/null; echo "$HOME"`
				if i%2 == 0 {
					script += `; echo x > "$HOME/left"`
				}
				res, err := fnexec.Run(context.Background(), []string{"/bin/bash", "-c", script}, strings.NewReader("input\n"), fnexec.Options{Sandbox: sb, Dirs: dirs})
				require.NoError(t, err, "log: %s", res.Log)
				home := out(res)
				require.Equal(t, root, filepath.Dir(home), "an empty private directory below the root: %q", home)
				if left, err := os.ReadDir(home); err == nil {
					assert.Empty(t, left, "what the call wrote in %s is still there", home)
				} else {
					assert.ErrorIs(t, err, os.ErrNotExist)
				}
			}
			dirs.Close()
			left, err := os.ReadDir(root)
			require.NoError(t, err)
			assert.Empty(t, left)
		})
	}
}

// The hostile cases, each under each layer set: whether the attack is
// stopped there. "none" documents what holds without a sandbox at all.
func TestHostileCasesByLayer(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "tls.key")
	require.NoError(t, os.WriteFile(secret, []byte("PRIVATE KEY"), 0o644))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { lis.Close() })
	port := lis.Addr().(*net.TCPAddr).Port

	cases := []struct {
		name   string
		script string
		// stopped reports whether the attack failed, from the call's
		// output and error.
		stopped func(t *testing.T, output string, err error) bool
		// stoppedBy are the layer sets that stop it.
		stoppedBy []string
	}{
		{
			// Found by a duration of its own (a pid in a pid namespace
			// means nothing outside it).
			name:   "setsid escapee outlives the call",
			script: `d=300.$$$RANDOM; setsid bash -c "touch $TMPDIR/up; exec sleep $d" </dev/null >/dev/null 2>&1 & until [ -e "$TMPDIR/up" ]; do :; done; echo $d`,
			stopped: func(t *testing.T, output string, err error) bool {
				// The escapee may not have become sleep yet (it
				// touches "up" before its exec): look for a while.
				var pids []int
				for i := 0; i < 25 && len(pids) == 0; i++ {
					if i > 0 {
						time.Sleep(20 * time.Millisecond)
					}
					pids = sleeping(t, output)
				}
				for _, pid := range pids {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
				// Stopped, and the call answered as the function did
				// (not held to its deadline by what it left).
				return len(pids) == 0 && err == nil
			},
			stoppedBy: []string{"base", "base,userns", "base,landlock", "base,landlock,uid", "base,landlock,uid,userns"},
		},
		{
			// A root runner's function has no capabilities, so cannot
			// ptrace-read a root process; a non-root runner's has the
			// same uid as the runner and can, unless Landlock scopes it
			// or the userns layer's pid namespace and /proc hide the
			// runner (seen as uid 65534 by tests/portable).
			name:      "reads the runner's environment",
			script:    `cat /proc/` + strconv.Itoa(os.Getpid()) + `/environ >/dev/null && echo read`,
			stopped:   func(t *testing.T, output string, err error) bool { return output != "read" },
			stoppedBy: append(ifRoot("base"), "base,userns", "base,landlock", "base,landlock,uid", "base,landlock,uid,userns"),
		},
		{
			name:      "reads a file of the runner (its TLS key)",
			script:    `cat ` + secret,
			stopped:   func(t *testing.T, output string, err error) bool { return !strings.Contains(output, "PRIVATE KEY") },
			stoppedBy: []string{"base,landlock", "base,landlock,uid", "base,landlock,uid,userns"},
		},
		{
			name:      "connects to a loopback service",
			script:    `echo hello > /dev/tcp/127.0.0.1/` + strconv.Itoa(port) + ` && echo connected`,
			stopped:   func(t *testing.T, output string, err error) bool { return output != "connected" },
			stoppedBy: []string{"base,userns", "base,landlock", "base,landlock,uid", "base,landlock,uid,userns"},
		},
		{
			name:      "writes outside its temp dir",
			script:    `echo x > ` + filepath.Dir(secret) + `/planted && echo wrote`,
			stopped:   func(t *testing.T, output string, err error) bool { return output != "wrote" },
			stoppedBy: []string{"base,landlock", "base,landlock,uid", "base,landlock,uid,userns"},
		},
		{
			// Landlock does not cover stat, and /proc/<pid> is there
			// for every uid: only a /proc of the call's own pid
			// namespace hides the runner.
			name:      "sees the runner's process",
			script:    `test -d /proc/` + strconv.Itoa(os.Getpid()) + ` && echo seen`,
			stopped:   func(t *testing.T, output string, err error) bool { return output != "seen" },
			stoppedBy: []string{"base,userns", "base,landlock,uid,userns"},
		},
		{
			// 20 files of 1 MiB, each under RLIMIT_FSIZE: only a
			// size-limited tmpfs (8 MiB here) bounds them together.
			name:      "fills its temp dir",
			script:    `for i in $(seq 20); do head -c 1048576 /dev/zero > $TMPDIR/f$i || exit 0; done; echo filled`,
			stopped:   func(t *testing.T, output string, err error) bool { return output != "filled" },
			stoppedBy: []string{"base,userns", "base,landlock,uid,userns"},
		},
		{
			// Made in the runner's IPC namespace, a segment outlives the
			// call, holding the node's limits and whatever it was given
			// for a later call to read: the filter refuses System V IPC,
			// and a call's own IPC namespace (userns) takes its objects
			// with it.
			name:   "leaves a System V shared memory segment behind",
			script: `cat >/dev/null; ipcmk -M 4096 2>/dev/null | awk '{print $NF}'`,
			stopped: func(t *testing.T, output string, err error) bool {
				if output == "" {
					return true // not made
				}
				for _, line := range strings.Split(readFile(t, "/proc/sysvipc/shm"), "\n")[1:] {
					if f := strings.Fields(line); len(f) > 3 && f[1] == output && f[3] == "4096" {
						_ = exec.Command("ipcrm", "-m", output).Run()
						return false
					}
				}
				return true
			},
			stoppedBy: []string{"base", "base,userns", "base,landlock", "base,landlock,uid", "base,landlock,uid,userns"},
		},
		{
			name:      "runs as root",
			script:    `id -u`,
			stopped:   func(t *testing.T, output string, err error) bool { return output != "0" },
			stoppedBy: []string{"base,landlock,uid"},
		},
	}
	sets := []string{"none", "base", "base,userns", "base,landlock", "base,landlock,uid", "base,landlock,uid,userns"}
	for _, set := range sets {
		if strings.Contains(set, "uid") && os.Getuid() != 0 {
			t.Run(set, func(t *testing.T) { harness.NeedRoot(t, "hostile calls under "+set+" (the uid layer)") })
			continue
		}
		sb := open(t, set, spec.Limits{})
		for _, c := range cases {
			t.Run(set+"/"+c.name, func(t *testing.T) {
				res, err := run(t, sb, 10*time.Second, c.script)
				want := false
				for _, s := range c.stoppedBy {
					want = want || s == set
				}
				if c.name == "runs as root" {
					harness.NeedRoot(t, "a call of a root runner")
				}
				if c.name == "runs as root" && strings.Contains(set, "userns") {
					t.Skip("uid 0 inside its own user namespace, by design: mapped to the call's uid outside")
				}
				assert.Equal(t, want, c.stopped(t, out(res), err), "output %q, err %v", out(res), err)
			})
		}
	}
}

func TestLimitsBoundAHostileCall(t *testing.T) {
	// The process limit is per call only with the uid layer.
	harness.NeedRoot(t, "limits on a hostile call")
	sb := open(t, "base,landlock,uid", spec.Limits{Processes: 64, AddressSpace: 512 << 20, FileSize: 1 << 20, OpenFiles: 64})
	t.Run("fork bomb ends with the call", func(t *testing.T) {
		res, err := run(t, sb, 3*time.Second, `bomb() { bomb | bomb & }; bomb 2>/dev/null; sleep 60`)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		if i := strings.Index(string(res.Log), "fnsandbox"); i >= 0 || strings.Contains(string(res.Log), "goroutine") {
			t.Logf("log: %.3000s", res.Log)
		}
		// Nothing of the call is left: its uid has no process.
		if left := processesOf(t, 3100000); len(left) > 0 {
			for _, pid := range left[:min(5, len(left))] {
				stat, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
				t.Logf("left: %s", stat)
			}
			t.Errorf("%d processes of the call's uid are left", len(left))
		}
	})
	t.Run("memory bomb fails", func(t *testing.T) {
		_, err := run(t, sb, 10*time.Second, `dd if=/dev/zero of=/dev/null bs=1G count=1`)
		var xe *fnresult.ExitError
		require.ErrorAs(t, err, &xe)
	})
	t.Run("temp dir fill stops at the file size limit", func(t *testing.T) {
		res, err := run(t, sb, 10*time.Second, `head -c 4194304 /dev/zero > "$TMPDIR/fill"; stat -c %s "$TMPDIR/fill"`)
		require.NoError(t, err)
		assert.Equal(t, "1048576", out(res))
	})
	t.Run("open files stop at the limit", func(t *testing.T) {
		res, err := run(t, sb, 10*time.Second, `ulimit -n`)
		require.NoError(t, err)
		assert.Equal(t, "64", out(res))
	})
	t.Run("a next call runs", func(t *testing.T) {
		res, err := run(t, sb, 10*time.Second, `cat`)
		require.NoError(t, err)
		assert.Equal(t, "input", out(res))
	})
}

// The cgroup layer bounds a call's processes together: memory across all of
// them, and processes without the uid layer; its cgroup goes with the call.
func TestCgroupBoundsTheWholeCall(t *testing.T) {
	harness.NeedRoot(t, "the cgroup layer's bounds")
	f := sandbox.Flags{Mode: "base,cgroup", Helper: helper(t), Limits: spec.Limits{Processes: 64}, MemoryMax: 256 << 20, CPUMillis: 500, FirstUID: 3100000}
	// Whether the layer can be had here at all (a v2 host may not delegate
	// the memory and pids controllers), before this test moves itself.
	probe, err := f.Open(context.Background(), discard())
	if errors.Is(err, sandbox.ErrLayerMissing) {
		harness.Need(t, "the cgroup layer's bounds", err)
	}
	require.NoError(t, err)
	probe.Close()
	// The helpers, and so their calls' cgroups, below a pids cgroup of
	// this test's own: other tests' calls (a suite run at once) are not
	// this test's to count or kill.
	scope := testCgroup(t)
	sb, err := f.Open(context.Background(), discard())
	require.NoError(t, err)
	t.Cleanup(sb.Close)
	// Should a call's processes outlive it (the assertion at the end),
	// they go with the test: a fork bomb left behind would keep Bazel's
	// process wrapper, its subreaper, waiting for good.
	t.Cleanup(func() {
		for _, dir := range callCgroups(t, scope) {
			for range 1000 {
				data, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
				if len(strings.Fields(string(data))) == 0 {
					break
				}
				for _, f := range strings.Fields(string(data)) {
					if pid, err := strconv.Atoi(f); err == nil {
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
				time.Sleep(time.Millisecond)
			}
			_ = syscall.Rmdir(dir)
		}
	})

	// allocate reads a number of MiB on its input, then holds that much.
	allocate := []string{"/usr/bin/python3", "-c", "import sys; x = b'x' * (int(sys.stdin.read()) << 20)"}
	t.Run("memory over the call's limit", func(t *testing.T) {
		_, err := fnexec.Run(context.Background(), allocate, strings.NewReader("400"), fnexec.Options{Sandbox: sb, TempDir: tempRoot(t)})
		require.ErrorIs(t, err, fnresult.ErrMemoryExceeded, "killed by the kernel in the call's cgroup")
		assert.Contains(t, err.Error(), "cgroup")
		assert.Contains(t, err.Error(), "256 MiB")
	})
	t.Run("memory over the call's own bound, the watchdog not looking", func(t *testing.T) {
		// The call's cgroup is limited at its bound (what admission
		// charged it), below the sandbox's: the kernel ends it, though
		// the watchdog would look only in an hour.
		opts := fnexec.Options{Sandbox: sb, TempDir: tempRoot(t), MaxMemoryBytes: 96 << 20, MemoryPoll: time.Hour}
		_, err := fnexec.Run(context.Background(), allocate, strings.NewReader("160"), opts)
		require.ErrorIs(t, err, fnresult.ErrMemoryExceeded)
		assert.Contains(t, err.Error(), "96 MiB")
		res, err := fnexec.Run(context.Background(), allocate, strings.NewReader("16"), opts)
		require.NoError(t, err, "under its bound: %s", res.Log)
	})
	t.Run("a process started ahead gets its call's bound", func(t *testing.T) {
		pf := f
		pf.PrestartedFunctions = 1
		pre, err := pf.Open(context.Background(), discard())
		require.NoError(t, err)
		t.Cleanup(pre.Close)
		opts := fnexec.Options{Sandbox: pre, TempDir: tempRoot(t), MaxMemoryBytes: 96 << 20, MemoryPoll: time.Hour}
		res, err := fnexec.Run(context.Background(), allocate, strings.NewReader("1"), opts)
		require.NoError(t, err, "%s", res.Log)
		harness.WaitFor(t, "a process started ahead, under the first call's 96 MiB", func() bool { return pre.Prestarted() == 1 })
		// A call without a bound of its own gets the sandbox's (256 MiB),
		// not the call's before it.
		opts.MaxMemoryBytes = 0
		res, err = fnexec.Run(context.Background(), allocate, strings.NewReader("160"), opts)
		require.NoError(t, err, "160 MiB under the sandbox's 256 MiB: %s", res.Log)
		harness.WaitFor(t, "a process started ahead, under the sandbox's 256 MiB", func() bool { return pre.Prestarted() == 1 })
		opts.MaxMemoryBytes = 96 << 20
		_, err = fnexec.Run(context.Background(), allocate, strings.NewReader("160"), opts)
		require.ErrorIs(t, err, fnresult.ErrMemoryExceeded, "the call's own bound, below the one its process started with")
		assert.Contains(t, err.Error(), "96 MiB")
	})
	t.Run("fork bomb without the uid layer", func(t *testing.T) {
		res, err := run(t, sb, 3*time.Second, `bomb() { bomb | bomb & }; bomb 2>/dev/null; sleep 60`)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		_ = res
	})
	t.Run("CPU: half a CPU for all its processes", func(t *testing.T) {
		// The quota the kernel enforces, read by the call from its own
		// cgroup (v1's cpu hierarchy, or v2's cpu.max).
		res, err := run(t, sb, 10*time.Second, `g=$(sed -n 's/^[0-9]*:\(cpu,cpuacct\|cpu\|\):\(.*\)/\2/p' /proc/self/cgroup | head -1)
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then cat /sys/fs/cgroup$g/cpu.max; else cat /sys/fs/cgroup/cpu$g/cpu.cfs_quota_us /sys/fs/cgroup/cpu$g/cpu.cfs_period_us | tr '\n' ' '; fi`)
		require.NoError(t, err)
		assert.Equal(t, "50000 100000", strings.TrimSpace(out(res)))
	})
	t.Run("a next call runs", func(t *testing.T) {
		res, err := run(t, sb, 10*time.Second, `cat`)
		require.NoError(t, err)
		assert.Equal(t, "input", out(res))
	})
	assert.Empty(t, callCgroups(t, scope), "a call's cgroup outlived it")
}

// testCgroup moves this process into a pids cgroup of its own, below its
// own pids cgroup (v1) or unified one (v2), until the test ends, and
// returns it: what it starts (sandbox helpers) stays there.
func testCgroup(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/cgroup")
	require.NoError(t, err)
	base := ""
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		switch {
		case len(parts) != 3:
		case slices.Contains(strings.Split(parts[1], ","), "pids"):
			base = filepath.Join("/sys/fs/cgroup/pids", parts[2])
		case parts[0] == "0" && parts[1] == "" && base == "":
			base = filepath.Join("/sys/fs/cgroup", parts[2])
		}
	}
	require.NotEmpty(t, base, "no pids cgroup: %s", data)
	dir := filepath.Join(base, fmt.Sprintf("sandbox-test-%d", os.Getpid()))
	require.NoError(t, os.Mkdir(dir, 0o755))
	self := []byte(strconv.Itoa(os.Getpid()))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cgroup.procs"), self, 0))
	t.Cleanup(func() {
		_ = os.WriteFile(filepath.Join(base, "cgroup.procs"), self, 0)
		// Removed once its helpers are gone (sb.Close ran before).
		_ = syscall.Rmdir(filepath.Join(dir, "fnrunner-calls"))
		_ = syscall.Rmdir(dir)
	})
	return dir
}

// callCgroups lists the call cgroups fnsandbox made below scope.
func callCgroups(t *testing.T, scope string) []string {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(scope, "fnrunner-calls", "call-*"))
	require.NoError(t, err)
	return matches
}

func TestCancelledCallLeavesNothing(t *testing.T) {
	sb := open(t, "base", spec.Limits{})
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pids")
	_, err := run(t, sb, 2*time.Second, `(setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! >> `+pidFile+`); sleep 300 & echo $! >> `+pidFile+`; sleep 300`)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	pids, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	for _, p := range strings.Fields(string(pids)) {
		pid, err := strconv.Atoi(p)
		require.NoError(t, err)
		assert.False(t, alive(pid), "process %d outlived the cancelled call", pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// Escapes found by attacking the helper: each leaves a setsid process behind
// if the helper waits on the function alone.
func TestEscapesThroughTheHelper(t *testing.T) {
	for _, c := range []struct{ name, python string }{
		{"a tracer sees the function's exit first", `
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
parent = os.getpid()
if os.fork() == 0:
    os.setsid()
    libc.ptrace(0x4206, parent, 0, 0)  # PTRACE_SEIZE
    if os.fork() == 0:
        time.sleep(300)
    time.sleep(300)
time.sleep(0.3)
print(os.getpid(), flush=True)
`},
		{"the function leaves its process group", `
import os, time
os.setpgid(0, os.getpgid(os.getppid()))
if os.fork() == 0:
    os.setsid()
    time.sleep(300)
time.sleep(300)
`},
	} {
		t.Run(c.name, func(t *testing.T) {
			sb := open(t, "base", spec.Limits{})
			before := childrenOfInit(t)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			start := time.Now()
			_, _ = fnexec.Run(ctx, []string{"/usr/bin/python3", "-c", c.python}, strings.NewReader(""), fnexec.Options{Sandbox: sb, TempDir: tempRoot(t)})
			assert.Less(t, time.Since(start), 6*time.Second, "the helper was held past the deadline")
			for pid := range childrenOfInit(t) {
				if !before[pid] && strings.Contains(cmdline(pid), "python3") {
					t.Errorf("process %d (%s) escaped to init", pid, cmdline(pid))
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		})
	}
}

// A function of the helper's uid (no uid layer: a non-root runner, as
// deploy/ runs the binary-runner) lowers its helper's open-files limit, so
// that the helper cannot look for what it left running, and leaves a setsid
// escapee. The helper's limits are not the function's to change: the call
// ends as the function did, and the escapee with it.
func TestFunctionCannotChangeItsHelpersLimits(t *testing.T) {
	for _, mode := range []string{"base", "base,landlock", "base,landlock,uid", "base,userns"} {
		t.Run(mode, func(t *testing.T) {
			sb := open(t, mode, spec.Limits{})
			before := childrenOfInit(t)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			res, err := fnexec.Run(ctx, []string{"/bin/bash", "-c", `setsid sleep 300 </dev/null >/dev/null 2>&1 &
prlimit --pid $PPID --nofile=3:3 && echo lowered >&2; prlimit --pid $PPID --nproc=1:1 && echo lowered >&2; echo done`}, strings.NewReader(""), fnexec.Options{Sandbox: sb, TempDir: tempRoot(t)})
			require.NoError(t, err, "log: %s", res.Log)
			assert.Equal(t, "done", out(res))
			assert.NotContains(t, string(res.Log), "lowered")
			for pid := range childrenOfInit(t) {
				if !before[pid] && strings.Contains(cmdline(pid), "sleep 300") {
					t.Errorf("process %d (%s) escaped to init", pid, cmdline(pid))
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		})
	}
}

func TestFunctionsGetWhatOrdinaryProcessesHave(t *testing.T) {
	for _, mode := range []string{"base", "base,userns", "base,cgroup", "base,landlock", "base,landlock,uid", "base,landlock,uid,userns,cgroup"} {
		t.Run(mode, func(t *testing.T) {
			if strings.Contains(mode, "uid") {
				harness.NeedRoot(t, "functions under "+mode+" (the uid layer)")
			}
			sb := open(t, mode, spec.Limits{FileSize: 1 << 20})
			// A bare command name, looked up in PATH.
			res, err := fnexec.Run(context.Background(), []string{"cat"}, strings.NewReader("in"), fnexec.Options{Sandbox: sb, TempDir: tempRoot(t)})
			require.NoError(t, err)
			assert.Equal(t, "in", out(res))
			// A binary below a directory only root may enter (Bazel's
			// output tree is below root's home).
			private := filepath.Join(t.TempDir(), "private")
			require.NoError(t, os.Mkdir(private, 0o700))
			cat, err := os.ReadFile("/bin/cat")
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(private, "cat"), cat, 0o755))
			res, err = fnexec.Run(context.Background(), []string{filepath.Join(private, "cat")}, strings.NewReader("in"), fnexec.Options{Sandbox: sb, TempDir: tempRoot(t)})
			require.NoError(t, err)
			assert.Equal(t, "in", out(res))
			// Its standard streams reopened by name.
			res, err = run(t, sb, 10*time.Second, `cat /dev/stdin > /dev/stdout; echo log > /dev/stderr`)
			require.NoError(t, err, "log: %s", res.Log)
			assert.Equal(t, "input", out(res))
			// The working directory and environment it was given (the
			// wrapper-server's are its container's), also below a
			// tmpfs private directory (userns).
			res, err = fnexec.Run(context.Background(), []string{"/bin/sh", "-c", `pwd; echo "$FOO"; test "$HOME" = "$TMPDIR" && touch "$HOME/x" && echo private`}, strings.NewReader(""),
				fnexec.Options{Sandbox: sb, TempDir: tempRoot(t), Dir: "/usr/share", Env: []string{"FOO=a b=c"}})
			require.NoError(t, err, "log: %s", res.Log)
			assert.Equal(t, "/usr/share\na b=c\nprivate", out(res))
			// No capabilities, root or not.
			res, err = run(t, sb, 10*time.Second, `grep CapEff /proc/self/status 2>/dev/null || echo "CapEff: unreadable"`)
			require.NoError(t, err)
			if strings.Contains(mode, "landlock") {
				assert.Equal(t, "CapEff: unreadable", out(res))
			} else {
				assert.Equal(t, "CapEff:\t0000000000000000", out(res))
			}
			// The signal that killed it, here the file size limit's.
			_, err = run(t, sb, 10*time.Second, `exec head -c 2097152 /dev/zero > "$TMPDIR/big"`)
			var xe *fnresult.ExitError
			require.ErrorAs(t, err, &xe)
			assert.Equal(t, syscall.SIGXFSZ, xe.Signal, "killed by the file size limit: %v", err)
		})
	}
	sb := open(t, "base", spec.Limits{FileSize: 1 << 20})
	_, err := run(t, sb, 10*time.Second, `exec head -c 2097152 /dev/zero > "$TMPDIR/big"`)
	var xe *fnresult.ExitError
	require.ErrorAs(t, err, &xe)
	assert.Equal(t, syscall.SIGXFSZ, xe.Signal, "killed by the file size limit: %v", err)
}

// From a review: what os/exec did for the runner, the helper path does too.
func TestHelperPathKeepsWhatOSExecDid(t *testing.T) {
	sb := open(t, "base", spec.Limits{})
	// Of two equal names, Options.Env's wins (a Go function reads the
	// first PATH of its environment).
	res, err := fnexec.Run(context.Background(), []string{"/usr/bin/env"}, strings.NewReader(""), fnexec.Options{Sandbox: sb, TempDir: tempRoot(t), Env: []string{"PATH=/opt/fn/bin:/usr/bin:/bin"}})
	require.NoError(t, err)
	assert.Equal(t, 1, strings.Count(out(res), "PATH="), "one PATH: %s", out(res))
	assert.Contains(t, out(res), "PATH=/opt/fn/bin:/usr/bin:/bin")
	// A relative --temp-dir (the helper does not start in the runner's
	// working directory).
	root := tempRoot(t)
	t.Chdir(root)
	res, err = fnexec.Run(context.Background(), []string{"/bin/sh", "-c", "pwd"}, strings.NewReader(""), fnexec.Options{Sandbox: sb, TempDir: "."})
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(out(res), root+"/fn-"), "working directory %q", out(res))
}

// tools/local passes the helper as a runfiles path relative to the runner's
// working directory: the helpers, started in "/", must still find it, and a
// later change of working directory must not lose it.
func TestRelativeHelperPath(t *testing.T) {
	abs := helper(t)
	dir := filepath.Dir(filepath.Dir(abs))
	t.Chdir(dir)
	rel, err := filepath.Rel(dir, abs)
	require.NoError(t, err)
	f := sandbox.Flags{Mode: "base", Helper: rel, ReadOnly: sandbox.SystemReadOnly, FirstUID: 3100000, TempDir: tempRoot(t), WarmHelpers: 1}
	sb, err := f.Open(context.Background(), discard())
	require.NoError(t, err)
	t.Cleanup(sb.Close)
	t.Chdir(tempRoot(t))
	for range 3 { // a warm helper's call, then ones that may start their own
		res, err := run(t, sb, time.Minute, "cat")
		require.NoError(t, err)
		assert.Equal(t, "input", out(res))
	}
}

// Relative --sandbox-read-only-paths and --sandbox-read-write-paths are
// the runner's working directory's, not the call's private directory's.
func TestRelativeLandlockPaths(t *testing.T) {
	root := tempRoot(t)
	for _, d := range []string{"ro", "rw"} {
		require.NoError(t, os.Mkdir(filepath.Join(root, d), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, d, "f"), []byte(d+"\n"), 0o644))
	}
	t.Chdir(root)
	f := sandbox.Flags{Mode: "base,landlock", Helper: helper(t), ReadOnly: append(slices.Clone(sandbox.SystemReadOnly), "ro"), ReadWrite: []string{"./rw"}, TempDir: tempRoot(t)}
	sb, err := f.Open(context.Background(), discard())
	require.NoError(t, err)
	t.Cleanup(sb.Close)
	res, err := run(t, sb, time.Minute, fmt.Sprintf("cat %[1]s/ro/f %[1]s/rw/f && echo w > %[1]s/rw/g && echo denied > %[1]s/ro/g || true", root))
	require.NoError(t, err, "log: %s", res.Log)
	assert.Equal(t, "ro\nrw", out(res))
	assert.FileExists(t, filepath.Join(root, "rw", "g"))
	assert.NoFileExists(t, filepath.Join(root, "ro", "g"))
}

func TestWarmHelperGoneBeforeItsCall(t *testing.T) {
	sb := open(t, "base", spec.Limits{})
	warm := awaitWarmHelpers(t, 2)
	for _, pid := range warm {
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	}
	require.Eventually(t, func() bool {
		for _, pid := range warm {
			// Ended, all its threads too (then a parent may wait).
			var info unix.Siginfo
			if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil || info.Signo == 0 {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "the helpers are dead")
	for range 3 {
		res, err := run(t, sb, 10*time.Second, `cat`)
		require.NoError(t, err)
		assert.Equal(t, "input", out(res), "a call given to a dead helper goes to another")
	}
	sb.Close()
	require.Eventually(t, func() bool {
		return len(warmHelpers(t)) == 0
	}, 10*time.Second, 10*time.Millisecond, "no helper waits after Close")
	res, err := run(t, sb, 10*time.Second, `cat`)
	require.NoError(t, err)
	assert.Equal(t, "input", out(res), "after Close, a call starts its own helper")
}

// A warm helper serves calls one after another: whatever a call was and
// did, the next one finds nothing of it, and a helper that cannot be
// trusted with another call is replaced.
func TestWarmHelperServesCallsOneAfterAnother(t *testing.T) {
	// Not with the cgroup layer: a helper that moved into a call's cgroup
	// serves that call alone.
	modes := []string{"base", "base,userns"}
	if os.Getuid() == 0 {
		modes = append(modes, "base,landlock,uid")
	}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			sb := open(t, mode, spec.Limits{FileSize: 1 << 20})
			helpers := awaitWarmHelpers(t, 2)
			// A call that leaves a setsid escapee, fails, is killed by
			// a signal: each answered as ever.
			_, err := run(t, sb, 10*time.Second, `(setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! >&2); exit 3`)
			var xe *fnresult.ExitError
			require.ErrorAs(t, err, &xe)
			assert.Equal(t, 3, xe.Result.ExitCode)
			if !strings.Contains(mode, "userns") { // in a pid namespace its pid means nothing here
				pid, err := strconv.Atoi(strings.TrimSpace(string(xe.Result.Log)))
				require.NoError(t, err)
				assert.False(t, alive(pid), "the escapee outlived its call")
			}
			_, err = run(t, sb, 10*time.Second, `exec head -c 2097152 /dev/zero > "$TMPDIR/big"`)
			require.ErrorAs(t, err, &xe)
			assert.Equal(t, syscall.SIGXFSZ, xe.Signal)

			// The next ones get their own streams and nothing else: not
			// the helper's socket, not an earlier call's pipe.
			for range 3 {
				res, err := run(t, sb, 10*time.Second, `cat; exec python3 -c 'import os
for fd in range(3, 1024):
    try:
        os.fstat(fd)
        print(fd)
    except OSError:
        pass
print("end")'`)
				require.NoError(t, err, "log: %s", res.Log)
				assert.Equal(t, "input\nend", out(res), "descriptors open in a later call")
			}
			assert.ElementsMatch(t, helpers, warmHelpers(t), "the same helpers served every call")

			// Nor does a function that changed its helper (as its uid, it
			// may: base alone; a root runner's capabilities leave little
			// to it) pass the change on: every later call
			// runs as the first did. A helper changed where a function
			// would inherit it (its process, or the thread a call would
			// start from) refuses its next call, which another runs; one
			// changed elsewhere (its main thread, which starts nothing)
			// may serve on.
			if mode == "base" {
				const show = `cat >/dev/null; echo "$(ulimit -n) $(nice) $(taskset -p $$ | awk '{print $NF}') $(cat /proc/self/oom_score_adj)"`
				res, err := run(t, sb, 10*time.Second, show)
				require.NoError(t, err, "log: %s", res.Log)
				want := out(res)
				for _, change := range []string{
					`prlimit --pid $PPID --nofile=64:64`,
					`renice -n 19 -p $PPID`,
					`taskset -p 1 $PPID`,
					`(for task in /proc/$PPID/task/*; do renice -n 19 -p ${task##*/} || exit 1; done)`,
					`taskset -a -p 1 $PPID`,
				} {
					before := warmHelpers(t)
					res, err := run(t, sb, 10*time.Second, `if `+change+` >/dev/null 2>&1; then echo changed; else echo refused; fi; echo $PPID`)
					require.NoError(t, err, "log: %s", res.Log)
					lines := strings.Fields(out(res))
					require.Len(t, lines, 2)
					changed, err := strconv.Atoi(lines[1])
					require.NoError(t, err)
					require.Contains(t, before, changed, "a warm helper ran it")
					if strings.HasPrefix(change, "prlimit") {
						require.Equal(t, "refused", lines[0], "a function may not change its helper's limits (the helper's seccomp filter)")
					}
					// A root runner's function, without capabilities,
					// may not renice or move a process with more of
					// them either (its helper): refused then too.
					for range 3 {
						res, err := run(t, sb, 10*time.Second, show)
						require.NoError(t, err, "after %s: log: %s", change, res.Log)
						assert.Equal(t, want, out(res), "after %s, a later call inherited it", change)
					}
					awaitWarmHelpers(t, 2)
				}
			}

			// A stopped call's helper is not trusted with another: it
			// ends, and another takes its place. The call is stopped
			// once its function runs (a deadline could end it before it
			// reached a helper on a loaded machine), and its helper is
			// found from its function: one of those waiting, or one
			// started for it.
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			stopped := make(chan error, 1)
			go func() {
				_, err := fnexec.Run(ctx, []string{"/bin/bash", "-c", `exec sleep 300`}, strings.NewReader("input\n"), fnexec.Options{Sandbox: sb, TempDir: tempRoot(t)})
				stopped <- err
			}()
			var busy int
			require.Eventually(t, func() bool {
				busy = servingHelper(t, "sleep 300 ")
				return busy > 0
			}, 30*time.Second, 10*time.Millisecond, "the call to be stopped runs")
			cancel()
			require.ErrorIs(t, <-stopped, context.Canceled)
			res, err := run(t, sb, 10*time.Second, `cat`)
			require.NoError(t, err)
			assert.Equal(t, "input", out(res))
			require.Eventually(t, func() bool {
				now := warmHelpers(t)
				return len(now) == 2 && !slices.Contains(now, busy)
			}, 10*time.Second, 10*time.Millisecond, "the stopped call's helper was replaced")

			// Told to stop from outside while it waits, a helper ends,
			// and calls go to another.
			idle := warmHelpers(t)
			require.NoError(t, syscall.Kill(idle[0], syscall.SIGTERM))
			require.Eventually(t, func() bool { return !slices.Contains(warmHelpers(t), idle[0]) }, 10*time.Second, 10*time.Millisecond, "a helper stopped while waiting ends")
			for range 3 {
				res, err := run(t, sb, 10*time.Second, `cat`)
				require.NoError(t, err)
				assert.Equal(t, "input", out(res))
			}
		})
	}
}

// A process of the runner's uid can change the helpers waiting for calls:
// lower their limits, leave them unable to receive a call's descriptors,
// and, as root, raise their OOM score. A function that runs as its helper's
// uid (no uid layer) may do the last, not the others (the helper's seccomp
// filter refuses prlimit on another process). No later call inherits a
// change, and none fails for it: the changed helper refuses the call, which
// goes to another.
func TestWarmHelperChangedWhileWaiting(t *testing.T) {
	changes := map[string]string{
		"limits":              `prlimit --pid $p --stack=1048576:1048576`,
		"too few descriptors": `prlimit --pid $p --nofile=5:5`,
	}
	if os.Getuid() == 0 {
		// A waiting helper is not dumpable: its /proc files are root's.
		changes["OOM score"] = `echo 900 > /proc/$p/oom_score_adj`
	}
	for name, change := range changes {
		t.Run(name, func(t *testing.T) {
			awaitWarmHelpers(t, 0) // the last subtest's are gone
			sb := open(t, "base", spec.Limits{})
			helpers := awaitWarmHelpers(t, 2)
			const show = `echo "$(ulimit -s) $(cat /proc/self/oom_score_adj)"`
			res, err := run(t, sb, 10*time.Second, `cat >/dev/null; `+show)
			require.NoError(t, err)
			want := out(res)

			// The helper that ran it changes the other: its function,
			// or, for limits, which a function may not change, a
			// process of the runner's uid outside the sandbox.
			pids := strconv.Itoa(helpers[0]) + " " + strconv.Itoa(helpers[1])
			byFunction := !strings.HasPrefix(change, "prlimit")
			res, err = run(t, sb, 10*time.Second, `cat >/dev/null; for p in `+pids+`; do [ $p = $PPID ] && echo $p || { `+change+`; } || exit 1; done`)
			if !byFunction {
				require.Error(t, err, "a function changed another helper's limits: %s", out(res))
				res, err = run(t, sb, 10*time.Second, `cat >/dev/null; echo $PPID`)
			}
			require.NoError(t, err, "log: %s", res.Log)
			unchanged, err := strconv.Atoi(out(res))
			require.NoError(t, err)
			changed := helpers[0]
			if changed == unchanged {
				changed = helpers[1]
			}
			if !byFunction {
				// The helpers waiting now (the refused attempt may have
				// had one replaced): the one that did not run the
				// last call is changed.
				now := awaitWarmHelpers(t, 2)
				require.Contains(t, now, unchanged)
				changed = now[0]
				if changed == unchanged {
					changed = now[1]
				}
				cmd := exec.Command("/bin/bash", "-c", change)
				cmd.Env = append(os.Environ(), "p="+strconv.Itoa(changed))
				b, err := cmd.CombinedOutput()
				require.NoError(t, err, "%s", b)
			}

			// Two calls at once take both helpers: the first waits
			// for the second to end.
			gate := filepath.Join(tempRoot(t), "gate")
			require.NoError(t, unix.Mkfifo(gate, 0o600))
			first := make(chan string, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				res, err := fnexec.Run(ctx, []string{"/bin/bash", "-c", `cat >/dev/null; read x < ` + gate + `; ` + show}, strings.NewReader("input\n"), fnexec.Options{TempDir: tempRoot(t), Sandbox: sb})
				if err != nil {
					first <- err.Error()
					return
				}
				first <- out(res)
			}()
			require.Eventually(t, func() bool {
				return len(processes(t, func(p process) bool { return strings.Contains(p.cmdline, "read x < "+gate) })) > 0
			}, 10*time.Second, 10*time.Millisecond, "the first call runs")
			res, err = run(t, sb, 10*time.Second, `cat >/dev/null; `+show+`; echo go > `+gate)
			require.NoError(t, err, "log: %s", res.Log)
			assert.Equal(t, want, out(res), "a call on the changed helper")
			assert.Equal(t, want, <-first)
			assert.True(t, reaped(changed), "the changed helper was refused and reaped")
		})
	}
}

// A helper stopped while it waits (a function of the runner's uid may do
// that too) holds no call past its deadline, and is not handed another.
func TestWarmHelperStoppedWhileWaiting(t *testing.T) {
	sb := open(t, "base", spec.Limits{})
	helpers := awaitWarmHelpers(t, 2)
	for _, pid := range helpers {
		require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	}
	// Each stopped helper costs at most the call that took it.
	var failed int
	for {
		res, err := run(t, sb, time.Second, `cat`)
		if err == nil {
			assert.Equal(t, "input", out(res))
			break
		}
		require.ErrorIs(t, err, context.DeadlineExceeded)
		failed++
		require.LessOrEqual(t, failed, len(helpers), "a call went to a helper that had failed one already")
	}
	for _, pid := range helpers {
		assert.Eventually(t, func() bool { return reaped(pid) }, 10*time.Second, 10*time.Millisecond, "the stopped helper %d is gone", pid)
	}
}

// warmHelpers are the warm helpers this test process started.
func warmHelpers(t *testing.T) []int {
	t.Helper()
	return processes(t, func(p process) bool { return p.ppid == os.Getpid() && strings.Contains(p.cmdline, spec.Warm) })
}

// servingHelper is the warm helper whose call runs a process of cmdline
// (its child, or, in namespaces, its inner helper's), or 0.
func servingHelper(t *testing.T, cmdline string) int {
	t.Helper()
	parents := map[int]int{}
	var fn int
	processes(t, func(p process) bool {
		parents[p.pid] = p.ppid
		if p.cmdline == cmdline {
			fn = p.pid
		}
		return false
	})
	helpers := warmHelpers(t)
	for pid, hops := parents[fn], 0; pid > 1 && hops < 3; pid, hops = parents[pid], hops+1 {
		if slices.Contains(helpers, pid) {
			return pid
		}
	}
	return 0
}

// awaitWarmHelpers waits until n warm helpers wait for calls.
func awaitWarmHelpers(t *testing.T, n int) []int {
	t.Helper()
	var helpers []int
	require.Eventually(t, func() bool {
		helpers = warmHelpers(t)
		return len(helpers) == n
	}, 10*time.Second, 10*time.Millisecond, "%d helpers wait for calls", n)
	return helpers
}

// reaped says whether pid, a child of this process, has been waited for.
func reaped(pid int) bool {
	var info unix.Siginfo
	return unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil) != nil
}

func cmdline(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.ReplaceAll(string(b), "\x00", " ")
}

// A call whose deadline ends while its helper is being handed it: the
// helper may have started the function, so the call's directory (and uid)
// go back only once the helper has ended, not when the caller is answered.
// Here the helpers are stopped (SIGSTOP), so the handoff never completes
// and the helper ends only when killed, stopGrace later.
func TestCallStoppedDuringItsHandoffKeepsItsDirectoryUntilTheHelperEnds(t *testing.T) {
	sb := open(t, "base", spec.Limits{})
	for _, pid := range awaitWarmHelpers(t, 2) {
		require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	}
	root := tempRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := fnexec.Run(ctx, []string{"/bin/cat"}, strings.NewReader("input\n"), fnexec.Options{Sandbox: sb, TempDir: root})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	left, err := os.ReadDir(root)
	require.NoError(t, err)
	assert.Len(t, left, 1, "the call's directory, kept while its helper may run its function")
	require.Eventually(t, func() bool {
		left, err := os.ReadDir(root)
		return err == nil && len(left) == 0
	}, 30*time.Second, 50*time.Millisecond, "the directory goes once the helper has ended")
}

// A helper that does not end its call when told to (stopped here, as a
// helper swamped or stuck might be) is killed, and what its function left
// running, outside its process group, runs on as the call's uid: the
// runner ends it by that uid, and no later call gets the uid while it runs
// (the leftover could reach its private directory, its processes).
func TestKilledHelpersLeftoversAreEndedByUID(t *testing.T) {
	harness.NeedRoot(t, "ending a killed helper's leftovers by uid (the uid layer)")
	sb := open(t, "base,landlock,uid", spec.Limits{})
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		// Two leftovers: an escapee, and one whose main thread has
		// exited while another runs (a zombie to look at).
		_, err := fnexec.Run(ctx, []string{"/bin/bash", "-c", `setsid sleep 302 </dev/null >/dev/null 2>&1 &
setsid python3 -c '
import ctypes, platform, threading, time
threading.Thread(target=time.sleep, args=(302,)).start()
ctypes.CDLL(None).syscall(60 if platform.machine() == "x86_64" else 93, 0)' </dev/null >/dev/null 2>&1 &
exec sleep 301`}, strings.NewReader(""), fnexec.Options{Sandbox: sb, TempDir: tempRoot(t)})
		done <- err
	}()
	var function, escapee process
	require.Eventually(t, func() bool {
		function, escapee = process{}, process{}
		processes(t, func(p process) bool {
			switch p.cmdline {
			case "sleep 301 ":
				function = p
			case "sleep 302 ":
				escapee = p
			}
			return false
		})
		return function.pid > 0 && escapee.pid > 0
	}, 10*time.Second, 10*time.Millisecond, "the function and its escapee run")
	t.Cleanup(func() { _ = syscall.Kill(escapee.pid, syscall.SIGKILL) })
	var threaded int
	require.Eventually(t, func() bool {
		for _, pid := range processesOf(t, escapee.uid) {
			if zombieWithThreads(pid) {
				threaded = pid
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "the leftover whose main thread exited runs")
	t.Cleanup(func() { _ = syscall.Kill(threaded, syscall.SIGKILL) })
	helper := function.ppid
	require.NoError(t, syscall.Kill(helper, syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(helper, syscall.SIGKILL) })
	require.ErrorIs(t, <-done, context.DeadlineExceeded)
	leftover := escapee.uid
	// Calls meanwhile never get the uid of a leftover still running.
	for range 3 {
		running := alive(escapee.pid)
		res, err := run(t, sb, 10*time.Second, `id -u`)
		require.NoError(t, err, "log: %s", res.Log)
		if running {
			assert.NotEqual(t, strconv.Itoa(leftover), out(res), "a later call got the uid of a leftover process")
		}
	}
	require.Eventually(t, func() bool { return len(processesOf(t, leftover)) == 0 }, 10*time.Second, 10*time.Millisecond,
		"the runner ended what the killed helper left (zombies reaped too)")
}

// zombieWithThreads says whether pid is a zombie whose other threads run.
func zombieWithThreads(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	status := string(b)
	return strings.Contains(status, "\nState:\tZ") && !strings.Contains(status, "\nThreads:\t1\n")
}

// A call whose deadline has passed before it starts (it waited in a queue)
// takes no warm helper: the same helpers serve the next calls.
func TestCallOverBeforeItStartsTakesNoHelper(t *testing.T) {
	sb := open(t, "base", spec.Limits{})
	warm := awaitWarmHelpers(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 3 {
		_, err := fnexec.Run(ctx, []string{"/bin/cat"}, strings.NewReader("input\n"), fnexec.Options{Sandbox: sb, TempDir: tempRoot(t)})
		require.ErrorIs(t, err, context.Canceled)
	}
	assert.ElementsMatch(t, warm, warmHelpers(t), "the helpers that waited still wait")
}

func TestSandboxFailureIsNotTheFunctions(t *testing.T) {
	sb := open(t, "base", spec.Limits{})
	_, err := fnexec.Run(context.Background(), []string{"/nonexistent/fn"}, strings.NewReader(""), fnexec.Options{Sandbox: sb})
	require.ErrorIs(t, err, fnresult.ErrStart)
	assert.Contains(t, err.Error(), "/nonexistent/fn")
	var xe *fnresult.ExitError
	assert.False(t, errors.As(err, &xe))
}

func TestRequiredLayerMissingRefusesToStart(t *testing.T) {
	// A helper that is not root has no uid layer: the runner as an
	// ordinary user, for real (setpriv drops to nobody).
	harness.NeedRoot(t, "a runner refusing a missing layer (dropping to another user)")
	dir := tempRoot(t)
	require.NoError(t, os.Chmod(dir, 0o755))
	bin, err := os.ReadFile(helper(t))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "fnsandbox"), bin, 0o755))
	nonRoot := filepath.Join(dir, "fnsandbox-as-nobody")
	require.NoError(t, os.WriteFile(nonRoot, []byte("#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all "+filepath.Join(dir, "fnsandbox")+" \"$@\"\n"), 0o755))

	f := sandbox.Flags{Mode: "base,landlock,uid", Helper: nonRoot, TempDir: dir}
	_, err = f.Open(context.Background(), discard())
	require.ErrorIs(t, err, sandbox.ErrLayerMissing)
	assert.Contains(t, err.Error(), "uid")
	// Nor may nobody make cgroups.
	f.Mode = "base,cgroup"
	_, err = f.Open(context.Background(), discard())
	require.ErrorIs(t, err, sandbox.ErrLayerMissing)
	assert.Contains(t, err.Error(), "cgroup (--sandbox=base,cgroup)")

	f.Mode = "auto"
	sb, err := f.Open(context.Background(), discard())
	require.NoError(t, err)
	assert.Equal(t, []sandbox.Layer{sandbox.Base, sandbox.Landlock, sandbox.UserNS}, sb.Layers(), "nobody may not make cgroups here")

	f.Helper = "/nonexistent/fnsandbox"
	f.Mode = "base"
	_, err = f.Open(context.Background(), discard())
	require.ErrorIs(t, err, sandbox.ErrLayerMissing)
	f.Mode = "auto"
	sb, err = f.Open(context.Background(), discard())
	require.NoError(t, err)
	assert.False(t, sb.Enabled(), "auto without a helper runs bare, and logs it")

	for _, mode := range []string{"bogus", ","} {
		f.Mode = mode
		_, err = f.Open(context.Background(), discard())
		assert.Error(t, err, mode)
	}
}

func ifRoot(sets ...string) []string {
	if os.Getuid() == 0 {
		return sets
	}
	return nil
}

// process is what a test needs of one process in /proc.
type process struct {
	pid, ppid, uid int
	cmdline        string
}

// processes lists the processes keep accepts.
func processes(t *testing.T, keep func(process) bool) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p := process{pid: pid, ppid: -1, cmdline: cmdline(pid)}
		if stat, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			if i := strings.LastIndexByte(string(stat), ')'); i > 0 {
				if f := strings.Fields(string(stat)[i+1:]); len(f) > 1 {
					p.ppid, _ = strconv.Atoi(f[1])
				}
			}
		}
		var st syscall.Stat_t
		if syscall.Stat("/proc/"+e.Name(), &st) == nil {
			p.uid = int(st.Uid)
		}
		if keep(p) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// childrenOfInit are the processes whose parent is PID 1.
func childrenOfInit(t *testing.T) map[int]bool {
	t.Helper()
	out := map[int]bool{}
	for _, pid := range processes(t, func(p process) bool { return p.ppid == 1 }) {
		out[pid] = true
	}
	return out
}

// sleeping lists the processes whose command line holds d.
func sleeping(t *testing.T, d string) []int {
	t.Helper()
	require.NotEmpty(t, d)
	return processes(t, func(p process) bool { return strings.Contains(p.cmdline, d) })
}

// processesOf lists the pids whose owner is uid.
func processesOf(t *testing.T, uid int) []int {
	t.Helper()
	return processes(t, func(p process) bool { return p.uid == uid })
}

// A call's memory bound (fnexec.Options.MaxMemoryBytes) counts every
// process below the helper, one that left its session included, with the
// layers the shipped binary-runner has (no cgroup).
func TestMemoryBoundCountsTheWholeCall(t *testing.T) {
	sb := open(t, "base,landlock", spec.Limits{})
	// tail keeps the 64 MiB it read until its output is read, which sleep
	// never does: the memory is held until the bound ends the call, not
	// only for the moment before tail would exit, which a busy machine's
	// scan of the call's processes could miss.
	hold := "head -c 67108864 /dev/zero | tail -c 67108864 | sleep 60"
	for name, script := range map[string]string{
		"one process":               hold,
		"processes together":        "(" + hold + ") & (" + hold + ") & sleep 60",
		"one that left its session": "setsid bash -c '" + hold + "' & sleep 60",
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			opts := fnexec.Options{TempDir: tempRoot(t), Sandbox: sb, MaxMemoryBytes: 48 << 20}
			if name == "processes together" {
				opts.MaxMemoryBytes = 96 << 20 // more than either holds alone
			}
			_, err := fnexec.Run(ctx, []string{"/bin/bash", "-c", script}, strings.NewReader("input\n"), opts)
			require.ErrorIs(t, err, fnresult.ErrMemoryExceeded)
			require.NoError(t, ctx.Err(), "ended by its memory, not its deadline")
		})
	}
	res, err := run(t, sb, 10*time.Second, `cat`)
	require.NoError(t, err)
	assert.Equal(t, "input", out(res), "a next call runs")
}

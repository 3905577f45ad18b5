package fnexec

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/fnresult"
)

const rl = "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n"

func sh(script string) []string { return []string{"/bin/sh", "-c", script} }

func TestRunPassesInputThrough(t *testing.T) {
	res, err := Run(context.Background(), sh("cat; echo from-stderr >&2"), strings.NewReader(rl), Options{})
	require.NoError(t, err)
	assert.Equal(t, rl, string(res.ResourceList.Materialize()))
	assert.Equal(t, "from-stderr", strings.TrimSpace(string(res.Log)))
	assert.Zero(t, res.ExitCode)
}

func TestBinaryRunsOnBuffers(t *testing.T) {
	b := &Binary{Argv: sh("cat; echo from-stderr >&2"), Options: Options{MaxLogBytes: 1000}}
	input := evalwire.Bytes([]byte(rl))
	res, err := b.Run(context.Background(), input)
	require.NoError(t, err)
	assert.Equal(t, rl, string(res.ResourceList.Materialize()))
	assert.Equal(t, "from-stderr", strings.TrimSpace(string(res.Log)))
	// The input is the caller's, still whole.
	assert.Equal(t, rl, string(input.Materialize()))
}

func TestRunCleanEnvironmentAndPrivateDir(t *testing.T) {
	t.Setenv("FNRUNNER_SECRET", "leak")
	res, err := Run(context.Background(), sh("env; pwd"), nil, Options{Env: []string{"EXTRA=1"}})
	require.NoError(t, err)
	out := string(res.ResourceList.Materialize())
	assert.NotContains(t, out, "FNRUNNER_SECRET", "environment not clean")
	assert.Contains(t, out, "EXTRA=1")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	dir := lines[len(lines)-1]
	_, err = os.Stat(dir)
	assert.ErrorIs(t, err, os.ErrNotExist, "working directory %s not removed", dir)
}

// Dir sets the working directory (the wrapper-server's container's); HOME
// and TMPDIR stay the private directory, which is still removed.
func TestRunInAGivenDirectory(t *testing.T) {
	workdir := t.TempDir()
	res, err := Run(context.Background(), sh("pwd; echo \"$TMPDIR\""), nil, Options{Dir: workdir})
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(res.ResourceList.Materialize())), "\n")
	require.Len(t, lines, 2)
	assert.Equal(t, workdir, lines[0])
	assert.NotEqual(t, workdir, lines[1])
	_, err = os.Stat(lines[1])
	assert.ErrorIs(t, err, os.ErrNotExist, "private directory %s not removed", lines[1])
}

func TestFailureKeepsResults(t *testing.T) {
	script := "cat <<'X'\napiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\nresults:\n- message: namespace is required\n  severity: error\nX\necho 'failed to evaluate function' >&2\nexit 1\n"
	res, err := Run(context.Background(), sh(script), strings.NewReader(rl), Options{})
	var xe *fnresult.ExitError
	require.ErrorAs(t, err, &xe)
	assert.Equal(t, 1, xe.Result.ExitCode)
	assert.Zero(t, xe.Signal)
	assert.Same(t, res, xe.Result)
	assert.Contains(t, string(res.ResourceList.Materialize()), "namespace is required")
	assert.Contains(t, string(res.Log), "failed to evaluate")
}

func TestCrashReportsSignal(t *testing.T) {
	res, err := Run(context.Background(), sh("echo boom >&2; kill -SEGV $$"), nil, Options{})
	var xe *fnresult.ExitError
	require.ErrorAs(t, err, &xe)
	assert.Equal(t, syscall.SIGSEGV, xe.Signal)
	assert.Contains(t, string(res.Log), "boom")
}

func TestHangingFunctionHonoursDeadlineAndLeavesNoProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	// The script prints its own and its background child's pid, then hangs.
	res, err := Run(ctx, sh("sleep 600 & echo $$ $! >&2; wait"), nil, Options{})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assertGone(t, res.Log)
}

func TestCancelIsTheCallers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err := Run(ctx, sh("sleep 600"), nil, Options{})
	require.ErrorIs(t, err, context.Canceled)
}

func TestChildrenDoNotOutliveTheFunction(t *testing.T) {
	// The function exits at once but leaves a background child behind.
	res, err := Run(context.Background(), sh("sleep 600 >/dev/null 2>&1 & echo $$ $! >&2; cat"), strings.NewReader(rl), Options{})
	require.NoError(t, err)
	assertGone(t, res.Log)
}

func TestOutputOverLimit(t *testing.T) {
	res, err := Run(context.Background(), []string{"/usr/bin/yes"}, nil, Options{MaxOutputBytes: 1 << 20})
	require.ErrorIs(t, err, fnresult.ErrOutputTooLarge)
	assert.LessOrEqual(t, res.ResourceList.Len(), 1<<20, "kept more than the limit")
}

func TestLogIsCapped(t *testing.T) {
	res, err := Run(context.Background(), sh("head -c 100000 /dev/zero >&2; cat"), strings.NewReader(rl), Options{MaxLogBytes: 1000})
	require.NoError(t, err)
	assert.LessOrEqual(t, len(res.Log), 1100)
	assert.Contains(t, string(res.Log), "99000 more bytes of log dropped")
}

func TestMissingBinary(t *testing.T) {
	_, err := Run(context.Background(), []string{"/nonexistent/fn"}, nil, Options{})
	require.ErrorIs(t, err, fnresult.ErrStart)
	_, err = Run(context.Background(), nil, nil, Options{})
	require.ErrorIs(t, err, fnresult.ErrStart)
}

func TestOutputKeptInBuffers(t *testing.T) {
	// More than one buffer's worth, in writes of every size.
	res, err := Run(context.Background(), sh("cat; head -c 100000 /dev/zero | tr '\\0' x; echo"), strings.NewReader(rl), Options{})
	require.NoError(t, err)
	want := rl + strings.Repeat("x", 100000) + "\n"
	require.Equal(t, want, string(res.ResourceList.Materialize()))
	require.GreaterOrEqual(t, len(res.ResourceList), 2, "output not split into buffers")
	res.ResourceList.Free()
}

// assertGone checks that the pids a script printed ("$$ $!") are gone.
func assertGone(t *testing.T, log []byte) {
	t.Helper()
	fields := strings.Fields(string(log))
	require.GreaterOrEqual(t, len(fields), 2, "script printed no pids: %q", log)
	for _, f := range fields[:2] {
		pid, err := strconv.Atoi(f)
		require.NoError(t, err, "bad pid %q", f)
		// SIGKILL is delivered asynchronously: allow it a moment (bounded).
		assert.Eventually(t, func() bool { return !alive(pid) }, 5*time.Second, 20*time.Millisecond, "process %d is still running", pid)
	}
}

// alive reports whether pid runs. A zombie (killed, not yet reaped by its
// parent or init) does not.
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(stat)
	i := strings.LastIndex(s, ")")
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}

// hold is a script whose processes hold about mib MiB each, in n
// processes (tail -c keeps what it reads of a pipe in memory), until the
// call ends them.
func hold(mib, n int) string {
	return "for i in $(seq " + strconv.Itoa(n) + "); do (head -c " + strconv.Itoa(mib<<20) + " /dev/zero | tail -c " + strconv.Itoa(mib<<20) + " >/dev/null; sleep 60) & done; sleep 60"
}

func TestMemoryOverTheCallsBound(t *testing.T) {
	tests := []struct {
		name   string
		script string
		limit  uint64
		over   bool
	}{
		{"one process", hold(96, 1), 64 << 20, true},
		{"three processes together", hold(32, 3), 64 << 20, true},
		{"under the bound", "head -c 16777216 /dev/zero | tail -c 16777216 >/dev/null; cat", 64 << 20, false},
		// Output kept in the runner is memory the call holds too.
		{"output beyond its reserve", "head -c 83886080 /dev/zero; sleep 60", 64 << 20, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := Run(ctx, sh(tt.script), strings.NewReader(rl), Options{MaxMemoryBytes: tt.limit, MaxOutputBytes: 128 << 20, OutputReserve: 8 << 20})
			if !tt.over {
				require.NoError(t, err)
				assert.Equal(t, rl, string(res.ResourceList.Materialize()))
				return
			}
			require.ErrorIs(t, err, fnresult.ErrMemoryExceeded)
			assert.Contains(t, err.Error(), "over the call's bound of 64 MiB")
			assert.NoError(t, ctx.Err(), "ended by its memory, not its deadline")
		})
	}
}

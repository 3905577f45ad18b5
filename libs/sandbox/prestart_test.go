package sandbox_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/libs/fnexec"
	"github.com/fnrunner/fnrunner/libs/sandbox"
	"github.com/fnrunner/fnrunner/tests/harness"
)

// prestartFixture is a sandbox that starts functions ahead of their calls,
// and a function script that records, at its start, its pid in a file.
type prestartFixture struct {
	sb     *sandbox.Sandbox
	dir    string
	script string
	pids   string
}

func newPrestartFixture(t *testing.T, mode, body string) *prestartFixture {
	t.Helper()
	root := tempRoot(t)
	pids := filepath.Join(root, "pids")
	f := sandbox.Flags{Mode: mode, Helper: helper(t), ReadOnly: sandbox.SystemReadOnly, ReadWrite: []string{pids}, FirstUID: 3200000, TempDir: root, WarmHelpers: 1, PrestartedFunctions: 2}
	sb, err := f.Open(context.Background(), discard())
	if errors.Is(err, sandbox.ErrLayerMissing) {
		harness.Need(t, "prestarted functions under "+mode, err)
	}
	require.NoError(t, err)
	t.Cleanup(sb.Close)
	fx := &prestartFixture{sb: sb, dir: root, script: filepath.Join(root, "fn"), pids: pids}
	require.NoError(t, os.WriteFile(fx.pids, nil, 0o666))
	fx.write(t, body)
	require.NoError(t, os.Chmod(fx.pids, 0o666))
	return fx
}

// write replaces the function script (a new file, as an operator's
// rollout would leave it).
func (fx *prestartFixture) write(t *testing.T, body string) {
	t.Helper()
	// The new file is written by another process (install): a process
	// this one forks meanwhile (the sandbox starts helpers all along)
	// would inherit a descriptor open for writing it, and exec of the
	// script fails with ETXTBSY until that child has exec'd itself (Go
	// issue 22315; it failed a full run once).
	staging, tmp := fx.script+".txt", fx.script+".new"
	require.NoError(t, os.WriteFile(staging, []byte("#!/bin/bash\necho $$ >> "+fx.pids+"\n"+body), 0o644))
	out, err := exec.Command("install", "-m", "0755", staging, tmp).CombinedOutput()
	require.NoError(t, err, "install: %s", out)
	require.NoError(t, os.Rename(tmp, fx.script))
}

func (fx *prestartFixture) call(t *testing.T, env ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := fnexec.Run(ctx, []string{fx.script}, strings.NewReader("input\n"), fnexec.Options{Sandbox: fx.sb, TempDir: fx.dir, Env: env})
	return out(res), err
}

// started are the pids the function's processes recorded, in order.
func (fx *prestartFixture) started(t *testing.T) []int {
	t.Helper()
	b, err := os.ReadFile(fx.pids)
	require.NoError(t, err)
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(f)
		require.NoError(t, err)
		pids = append(pids, n)
	}
	return pids
}

// awaitStarts waits until n processes of the function have started.
func (fx *prestartFixture) awaitStarts(t *testing.T, n int) []int {
	t.Helper()
	require.Eventually(t, func() bool { return len(fx.started(t)) >= n }, time.Minute, 5*time.Millisecond)
	return fx.started(t)
}

// After a call succeeded, the next call of the same function is answered by
// a process started before it came, in a private directory of its own.
func TestPrestartedProcessTakesTheNextCall(t *testing.T) {
	for _, mode := range append([]string{"base"}, ifRoot("base,landlock,uid", "base,landlock,uid,userns,cgroup")...) {
		t.Run(mode, func(t *testing.T) {
			fx := newPrestartFixture(t, mode, `shopt -s nullglob dotglob
files=("$HOME"/*)
n=${#files[@]}
touch "$HOME/left-by-$$"
cat
echo "home:$HOME files-before:$n pid:$$"
`)
			first, err := fx.call(t)
			require.NoError(t, err)
			assert.Contains(t, first, "input\n")
			assert.Contains(t, first, "files-before:0")
			assert.Equal(t, 1, fx.sb.Prestarted(), "one process is started for the next call")
			pids := fx.awaitStarts(t, 2)

			second, err := fx.call(t)
			require.NoError(t, err)
			assert.Contains(t, second, "input\n")
			assert.Contains(t, second, "files-before:0", "the call's private directory is its own")
			if mode == "base" { // with userns the pid is the namespace's
				assert.Contains(t, second, "pid:"+strconv.Itoa(pids[1]), "the process started ahead answered")
			}
			assert.Len(t, fx.started(t), 2, "no process was started during the second call")
			home := strings.TrimPrefix(strings.Fields(second[strings.Index(second, "home:"):])[0], "home:")
			assert.NoDirExists(t, home, "the call's directory goes with it")
		})
	}
}

// A call that failed starts nothing ahead.
func TestFailedCallStartsNothingAhead(t *testing.T) {
	fx := newPrestartFixture(t, "base", "cat; exit 3\n")
	_, err := fx.call(t)
	require.Error(t, err)
	assert.Equal(t, 0, fx.sb.Prestarted())
}

// Another environment, or a replaced binary, is another function: its
// call does not get a process started for the old one.
func TestPrestartedProcessOnlyForTheSameFunction(t *testing.T) {
	fx := newPrestartFixture(t, "base", "cat; echo v1 $V\n")
	_, err := fx.call(t, "V=a")
	require.NoError(t, err)
	fx.awaitStarts(t, 2)

	got, err := fx.call(t, "V=b")
	require.NoError(t, err)
	assert.Contains(t, got, "v1 b")

	fx.write(t, "cat; echo v2 $V\n")
	got, err = fx.call(t, "V=a")
	require.NoError(t, err)
	assert.Contains(t, got, "v2 a", "the replaced binary ran, not the process started before")
}

// A process started ahead that works before its call comes (spins, itself
// or in children that end before they are seen) is ended, and its function
// is not started ahead again.
func TestPrestartedProcessBusyBeforeItsCallIsEnded(t *testing.T) {
	for name, spin := range map[string]string{
		"itself":                  "while :; do :; done",
		"in short-lived children": "while :; do (i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done); done",
	} {
		t.Run(name, func(t *testing.T) {
			mark := filepath.Join(tempRoot(t), "mark")
			fx := newPrestartFixture(t, "base", `if [ -e "$MARK" ]; then rm -f "$MARK"; `+spin+`; fi
cat
touch "$MARK"
`)
			_, err := fx.call(t, "MARK="+mark)
			require.NoError(t, err)
			spinner := fx.awaitStarts(t, 2)[1]
			require.Eventually(t, func() bool { return fx.sb.Prestarted() == 0 && !alive(spinner) }, time.Minute, 20*time.Millisecond)

			got, err := fx.call(t, "MARK="+mark)
			require.NoError(t, err)
			assert.Equal(t, "input", got)
			assert.Equal(t, 0, fx.sb.Prestarted(), "not started ahead again")
			assert.FileExists(t, mark)
		})
	}
}

// Close ends the processes waiting for their calls, and all they started.
func TestCloseEndsPrestartedProcesses(t *testing.T) {
	fx := newPrestartFixture(t, "base", "sleep 1234.5 <&0 & cat\n")
	_, err := fx.call(t)
	require.NoError(t, err)
	waiting := fx.awaitStarts(t, 2)[1]
	require.Eventually(t, func() bool { return len(sleeping(t, "1234.5")) == 1 }, time.Minute, 5*time.Millisecond)
	require.True(t, alive(waiting))
	fx.sb.Close()
	assert.False(t, alive(waiting))
	assert.Empty(t, sleeping(t, "1234.5"), "its child went with it")
	assert.Equal(t, 0, fx.sb.Prestarted())
}

// One that starts a process not reading its input (a setsid escapee here)
// before its call comes is ended with it, and its function is not started
// ahead again.
func TestPrestartedProcessStartingADaemonIsEnded(t *testing.T) {
	fx := newPrestartFixture(t, "base", "setsid sleep 1234.6 </dev/null >/dev/null 2>&1 & cat\n")
	_, err := fx.call(t)
	require.NoError(t, err)
	fx.awaitStarts(t, 2)
	require.Eventually(t, func() bool { return fx.sb.Prestarted() == 0 && len(sleeping(t, "1234.6")) == 0 }, time.Minute, 5*time.Millisecond)
	_, err = fx.call(t)
	require.NoError(t, err)
	assert.Equal(t, 0, fx.sb.Prestarted(), "not started ahead again")
}

// A helper started ahead of a call that never accepts it (stopped from
// outside; here it never answers) holds no call past its deadline, and
// calls of the function go on once it is given up.
func TestPrestartThatNeverAcceptsHoldsNoCall(t *testing.T) {
	root := tempRoot(t)
	mute := filepath.Join(root, "mute")
	// Helpers started while mute exists never answer.
	muted := filepath.Join(root, "fnsandbox")
	require.NoError(t, os.WriteFile(muted, []byte("#!/bin/bash\nif [ \"$1\" = -warm ] && [ -e "+mute+" ]; then exec sleep 600; fi\nexec "+helper(t)+" \"$@\"\n"), 0o755))
	f := sandbox.Flags{Mode: "base", Helper: muted, ReadOnly: sandbox.SystemReadOnly, TempDir: root, PrestartedFunctions: 1}
	sb, err := f.Open(context.Background(), discard())
	require.NoError(t, err)
	t.Cleanup(sb.Close)
	call := func(timeout time.Duration) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		res, err := fnexec.Run(ctx, []string{"/bin/bash", "-c", `[ -e "$MUTE" ] || touch "$MUTE"; cat`}, strings.NewReader("input\n"), fnexec.Options{Sandbox: sb, TempDir: root, Env: []string{"MUTE=" + mute}})
		return out(res), err
	}
	// The call mutes the helpers started after it: the one started ahead
	// of the next call, and the next call's own.
	got, err := call(10 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "input", got)
	_, err = call(time.Second)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	require.NoError(t, os.Remove(mute))
	assert.Eventually(t, func() bool {
		got, err := call(10 * time.Second)
		return err == nil && got == "input"
	}, time.Minute, 100*time.Millisecond, "calls go on once the mute start is given up")
}

package fnexec

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/evalwire"
)

const rl = "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n"

// input is the ResourceList the runs in these tests were given.
func input() mem.BufferSlice { return evalwire.Bytes([]byte(rl)) }

func sh(script string) []string { return []string{"/bin/sh", "-c", script} }

func TestRunPassesInputThrough(t *testing.T) {
	res, err := Run(context.Background(), sh("cat; echo from-stderr >&2"), strings.NewReader(rl), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.ResourceList.Materialize()) != rl || strings.TrimSpace(string(res.Log)) != "from-stderr" || res.ExitCode != 0 {
		t.Errorf("res = %+v", res)
	}
	resp, err := Respond("fn", input(), res, err)
	if err != nil || string(resp.ResourceList.Materialize()) != rl {
		t.Errorf("Respond = %v, %v", resp, err)
	}
}

func TestRunCleanEnvironmentAndPrivateDir(t *testing.T) {
	t.Setenv("FNRUNNER_SECRET", "leak")
	res, err := Run(context.Background(), sh("env; pwd"), nil, Options{Env: []string{"EXTRA=1"}})
	if err != nil {
		t.Fatal(err)
	}
	out := string(res.ResourceList.Materialize())
	if strings.Contains(out, "FNRUNNER_SECRET") || !strings.Contains(out, "EXTRA=1") {
		t.Errorf("environment not clean:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	dir := lines[len(lines)-1]
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("working directory %s not removed: %v", dir, err)
	}
}

func TestFailureKeepsResults(t *testing.T) {
	script := "cat <<'X'\napiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\nresults:\n- message: namespace is required\n  severity: error\nX\necho 'failed to evaluate function' >&2\nexit 1\n"
	res, err := Run(context.Background(), sh(script), strings.NewReader(rl), Options{})
	var xe *ExitError
	if !errors.As(err, &xe) || xe.Result.ExitCode != 1 {
		t.Fatalf("err = %v, want ExitError with code 1", err)
	}
	_, rerr := Respond("set-namespace:v0.4.5", input(), res, err)
	st := status.Convert(rerr)
	if st.Code() != codes.Internal || !strings.Contains(st.Message(), "namespace is required") {
		t.Errorf("status = %v", st)
	}
	d, ok := FailureDetails(rerr)
	if !ok || !strings.Contains(string(d.GetResourceList()), "namespace is required") || !strings.Contains(string(d.GetLog()), "failed to evaluate") {
		t.Errorf("details = %v, %v", d, ok)
	}
}

func TestCrashWithoutOutputReportsStderr(t *testing.T) {
	res, err := Run(context.Background(), sh("echo boom >&2; kill -SEGV $$"), nil, Options{})
	var xe *ExitError
	if !errors.As(err, &xe) || xe.Signal != syscall.SIGSEGV {
		t.Fatalf("err = %v, want killed by SIGSEGV", err)
	}
	_, rerr := Respond("fn", input(), res, err)
	if st := status.Convert(rerr); st.Code() != codes.Internal || !strings.Contains(st.Message(), "boom") {
		t.Errorf("status = %v", st)
	}
}

func TestHangingFunctionHonoursDeadlineAndLeavesNoProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	// The script prints its own and its background child's pid, then hangs.
	res, err := Run(ctx, sh("sleep 600 & echo $$ $! >&2; wait"), nil, Options{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	_, rerr := Respond("fn", input(), res, err)
	if status.Code(rerr) != codes.DeadlineExceeded {
		t.Errorf("code = %v", status.Code(rerr))
	}
	assertGone(t, res.Log)
}

func TestChildrenDoNotOutliveTheFunction(t *testing.T) {
	// The function exits at once but leaves a background child behind.
	res, err := Run(context.Background(), sh("sleep 600 >/dev/null 2>&1 & echo $$ $! >&2; cat"), strings.NewReader(rl), Options{})
	if err != nil {
		t.Fatal(err)
	}
	assertGone(t, res.Log)
}

func TestOutputOverLimit(t *testing.T) {
	res, err := Run(context.Background(), []string{"/usr/bin/yes"}, nil, Options{MaxOutputBytes: 1 << 20})
	if !errors.Is(err, ErrOutputTooLarge) {
		t.Fatalf("err = %v, want ErrOutputTooLarge", err)
	}
	if res.ResourceList.Len() > 1<<20 {
		t.Errorf("kept %d bytes, more than the limit", res.ResourceList.Len())
	}
	_, rerr := Respond("fn", input(), res, err)
	if status.Code(rerr) != codes.ResourceExhausted {
		t.Errorf("code = %v", status.Code(rerr))
	}
}

func TestLogIsCapped(t *testing.T) {
	res, err := Run(context.Background(), sh("head -c 100000 /dev/zero >&2; cat"), strings.NewReader(rl), Options{MaxLogBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Log) > 1100 || !strings.Contains(string(res.Log), "99000 more bytes of log dropped") {
		t.Errorf("log of %d bytes ends %q", len(res.Log), res.Log[max(0, len(res.Log)-60):])
	}
}

func TestInvalidOutputIsInternal(t *testing.T) {
	res, err := Run(context.Background(), sh("echo not a resource list"), nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, rerr := Respond("fn", input(), res, err)
	if st := status.Convert(rerr); st.Code() != codes.Internal || !strings.Contains(st.Message(), "invalid output") {
		t.Errorf("status = %v", st)
	}
}

func TestMissingBinary(t *testing.T) {
	res, err := Run(context.Background(), []string{"/nonexistent/fn"}, nil, Options{})
	if !errors.Is(err, ErrStart) {
		t.Fatalf("err = %v, want ErrStart", err)
	}
	_, rerr := Respond("fn", input(), res, err)
	if status.Code(rerr) != codes.FailedPrecondition {
		t.Errorf("code = %v", status.Code(rerr))
	}
}

// assertGone checks that the pids a script printed ("$$ $!") are gone.
func assertGone(t *testing.T, log []byte) {
	t.Helper()
	fields := strings.Fields(string(log))
	if len(fields) < 2 {
		t.Fatalf("script printed no pids: %q", log)
	}
	for _, f := range fields[:2] {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("bad pid %q", f)
		}
		// SIGKILL is delivered asynchronously: allow it a moment (bounded).
		for i := 0; alive(pid); i++ {
			if i == 250 {
				t.Errorf("process %d is still running", pid)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
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

func TestOutputKeptInBuffers(t *testing.T) {
	// More than one buffer's worth, in writes of every size.
	res, err := Run(context.Background(), sh("cat; head -c 100000 /dev/zero | tr '\\0' x; echo"), strings.NewReader(rl), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := rl + strings.Repeat("x", 100000) + "\n"
	if got := string(res.ResourceList.Materialize()); got != want {
		t.Fatalf("kept %d bytes, want %d", len(got), len(want))
	}
	if len(res.ResourceList) < 2 {
		t.Fatalf("output in %d buffer(s), want it split", len(res.ResourceList))
	}
	res.ResourceList.Free()
}

func TestFailureOnInvalidInputIsTheCallers(t *testing.T) {
	const bad = "{{{ this: is [not yaml"
	res, err := Run(context.Background(), sh("cat >/dev/null; echo 'failed to parse input' >&2; exit 1"), strings.NewReader(bad), Options{})
	_, rerr := Respond("fn", evalwire.Bytes([]byte(bad)), res, err)
	if status.Code(rerr) != codes.InvalidArgument || !strings.Contains(status.Convert(rerr).Message(), "failed to parse input") {
		t.Fatalf("got %v, want InvalidArgument that also tells what the function said", rerr)
	}
}

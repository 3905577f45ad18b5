package ledger

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/tests/harness"
)

// fakeTB records what a check says instead of failing the test: Errorf
// notes the message, Fatalf notes it and ends the goroutine the check runs
// in (see checked), as testing.T's Fatalf does.
type fakeTB struct {
	testing.TB
	errors, logs []string
	fatal        string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Logf(format string, args ...any) {
	f.logs = append(f.logs, fmt.Sprintf(format, args...))
}

func (f *fakeTB) Errorf(format string, args ...any) {
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// checked runs check against a fakeTB in a goroutine of its own, so that
// Fatalf can stop it, and returns what it said.
func checked(t *testing.T, check func(tb testing.TB)) *fakeTB {
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(f)
	}()
	<-done
	return f
}

// report is the account of sent calls numbered 0.., of which ok were
// answered OK (the others with an error).
func report(sent int, ok ...int) *Report {
	r := &Report{Sent: sent, OK: len(ok), Failed: sent - len(ok), OKCalls: map[int]bool{}}
	for _, i := range ok {
		r.OKCalls[i] = true
	}
	return r
}

var executionCases = []struct {
	name string
	// runs are the call numbers the record holds, one a run.
	runs []int
	r    *Report
	// want are the errors the check reports (each message contains its
	// string), none when empty.
	want     []string
	executed int
}{
	{name: "each OK call ran once", runs: []int{2, 0, 1}, r: report(3, 0, 1, 2), executed: 3},
	{name: "a call answered with an error ran once", runs: []int{0, 1}, r: report(2, 0), executed: 2},
	{name: "a call answered with an error never ran", runs: []int{0}, r: report(2, 0), executed: 1},
	{name: "no call ran and none was answered OK", r: report(4), executed: 0},
	{name: "a call ran twice", runs: []int{0, 1, 1, 2}, r: report(3, 0, 1, 2), executed: 4,
		want: []string{"call 1 ran 2 times", "call 1 answered OK but ran 2 times"}},
	{name: "a call answered with an error ran twice", runs: []int{0, 1, 1}, r: report(2, 0), executed: 3,
		want: []string{"call 1 ran 2 times"}},
	{name: "a call answered OK has no record", runs: []int{0, 2}, r: report(3, 0, 1, 2), executed: 2,
		want: []string{"call 1 answered OK but ran 0 times"}},
	{name: "a call ran that was never sent", runs: []int{0, 1, 5}, r: report(2, 0, 1), executed: 3,
		want: []string{"call 5 ran but was never sent"}},
}

// CheckExecutions fails a run whose record shows a call that ran twice, one
// answered OK without a run, or a run of a call never sent, naming the
// call; it passes an account that holds.
func TestCheckExecutions(t *testing.T) {
	for _, tc := range executionCases {
		t.Run(tc.name, func(t *testing.T) {
			record := filepath.Join(t.TempDir(), "runs")
			var lines strings.Builder
			for _, i := range tc.runs {
				fmt.Fprintln(&lines, i)
			}
			require.NoError(t, os.WriteFile(record, []byte(lines.String()), 0o644))
			assertChecked(t, tc.r, record, tc.want, tc.executed)
		})
	}
}

func assertChecked(t *testing.T, r *Report, record string, want []string, executed int) {
	t.Helper()
	var got int
	f := checked(t, func(tb testing.TB) { got = CheckExecutions(tb, "run", r, record) })
	assert.Empty(t, f.fatal, "fatal")
	assert.Len(t, f.errors, len(want), "errors: %q", f.errors)
	for _, w := range want {
		assert.True(t, containsOne(f.errors, w), "no error says %q: %q", w, f.errors)
	}
	assert.Equal(t, executed, got, "executions returned")
	assert.Contains(t, f.logs, fmt.Sprintf("run: %d executions recorded for %d calls sent", executed, r.Sent), "the ledger line")
}

func containsOne(msgs []string, s string) bool {
	for _, m := range msgs {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// A record that is missing counts no run; one that is not a record stops
// the check.
func TestCheckExecutionsRecordFile(t *testing.T) {
	dir := t.TempDir()
	t.Run("missing", func(t *testing.T) {
		assertChecked(t, report(2, 1), filepath.Join(dir, "none"), []string{"call 1 answered OK but ran 0 times"}, 0)
	})
	t.Run("not call numbers", func(t *testing.T) {
		record := filepath.Join(dir, "garbage")
		require.NoError(t, os.WriteFile(record, []byte("0\nzero\n"), 0o644))
		f := checked(t, func(tb testing.TB) { CheckExecutions(tb, "run", report(1, 0), record) })
		assert.Contains(t, f.fatal, `executions record line "zero"`)
		assert.Empty(t, f.errors, "errors after the fatal one")
	})
}

// CheckExecutionsOf leaves out the calls that do not go through the record
// function, and catches a run of one of them.
func TestCheckExecutionsOf(t *testing.T) {
	even := func(i int) bool { return i%2 == 0 }
	for _, tc := range []struct {
		name string
		runs string
		want []string
	}{
		{"the even calls ran once", "0\n2\n", nil},
		{"an odd call ran", "0\n1\n2\n", []string{"call 1 ran but was never sent to the record function"}},
		{"an even call ran twice", "0\n2\n2\n", []string{"call 2 ran 2 times", "call 2 answered OK but ran 2 times"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			record := filepath.Join(t.TempDir(), "runs")
			require.NoError(t, os.WriteFile(record, []byte(tc.runs), 0o644))
			f := checked(t, func(tb testing.TB) { CheckExecutionsOf(tb, "run", report(4, 0, 1, 2, 3), record, even) })
			assert.Len(t, f.errors, len(tc.want), "errors: %q", f.errors)
			for _, w := range tc.want {
				assert.True(t, containsOne(f.errors, w), "no error says %q: %q", w, f.errors)
			}
			assert.Contains(t, f.logs, "run: "+strconv.Itoa(strings.Count(tc.runs, "\n"))+" executions recorded for 2 calls sent")
		})
	}
}

// End to end: the real record function (tests/testfns/record, as the
// binary-runner and the wrapper-server run it) run twice for one call, as
// a runner that repeats a call would, is caught.
func TestCheckExecutionsCatchesTheRecordFunctionRunTwice(t *testing.T) {
	bin := harness.Binary(t, "FNRUNNER_RECORD")
	for _, tc := range executionCases {
		t.Run(tc.name, func(t *testing.T) {
			record := filepath.Join(t.TempDir(), "runs")
			for _, i := range tc.runs {
				cmd := exec.Command(bin)
				in := RecordInputSleeping(record, i, 0)
				cmd.Stdin = strings.NewReader(in)
				out, err := cmd.Output()
				require.NoError(t, err, "record call %d", i)
				require.Equal(t, in, string(out), "record answers its input")
			}
			assertChecked(t, tc.r, record, tc.want, tc.executed)
		})
	}
}

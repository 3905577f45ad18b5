// Package ledger runs calls under load and accounts for every one of them:
// sent, answered OK, answered with an error status and unanswered (no
// answer within the call's deadline plus a grace period). A load or fault
// test then asserts on the account, never on durations.
//
// A unary call returns once, so the caller's side cannot see a call that
// was repeated: a retry behind the gateway still gives one answer. That is
// the function's side to say. tests/testfns/record appends each call's
// number to a file when it runs (RecordInput), and CheckExecutions fails a
// test on a call that ran more than once, on one answered OK that did not
// run exactly once, and on a run of a call never sent.
package ledger

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Call is one request; i numbers it from 0. It returns the call's error.
type Call func(ctx context.Context, i int) error

// Options shape a run.
type Options struct {
	// Calls in all, and at most Concurrency of them in flight.
	Calls, Concurrency int
	// Deadline of each call (default one minute).
	Deadline time.Duration
	// Grace after a call's deadline before it counts as unanswered
	// (default 30 s).
	Grace time.Duration
}

// Report is the account of a run.
type Report struct {
	Sent, OK, Failed, Unanswered int
	// Codes counts the error answers by status code.
	Codes map[codes.Code]int
	// Unclear are error answers that are not a gRPC status with a message.
	Unclear []error
	// Errors holds the first error answer of each code, for messages.
	Errors map[codes.Code]error
	// OKCalls are the numbers of the calls answered OK.
	OKCalls map[int]bool
}

func (r *Report) String() string {
	var cs []string
	for c, n := range r.Codes {
		cs = append(cs, fmt.Sprintf("%v=%d", c, n))
	}
	sort.Strings(cs)
	return fmt.Sprintf("sent=%d ok=%d error=%d unanswered=%d codes={%s}", r.Sent, r.OK, r.Failed, r.Unanswered, strings.Join(cs, " "))
}

// Run makes the calls and accounts for them.
func Run(ctx context.Context, opts Options, call Call) *Report {
	if opts.Concurrency < 1 {
		opts.Concurrency = 1
	}
	if opts.Deadline <= 0 {
		opts.Deadline = time.Minute
	}
	if opts.Grace <= 0 {
		opts.Grace = 30 * time.Second
	}
	r := &Report{Codes: map[codes.Code]int{}, Errors: map[codes.Code]error{}, OKCalls: map[int]bool{}}
	var mu sync.Mutex
	answered := make([]bool, opts.Calls)
	answer := func(i int, err error) {
		mu.Lock()
		defer mu.Unlock()
		answered[i] = true
		if err == nil {
			r.OK++
			r.OKCalls[i] = true
			return
		}
		r.Failed++
		st, ok := status.FromError(err)
		if !ok || st.Code() == codes.Unknown || !clear(st) {
			r.Unclear = append(r.Unclear, err)
		}
		r.Codes[st.Code()]++
		if r.Errors[st.Code()] == nil {
			r.Errors[st.Code()] = err
		}
	}

	slots := make(chan struct{}, opts.Concurrency)
	var all sync.WaitGroup
	for i := 0; i < opts.Calls; i++ {
		select {
		case slots <- struct{}{}:
		case <-time.After(opts.Deadline + opts.Grace):
			// Every slot is held by a call that never came back.
			mu.Lock()
			r.Unanswered += opts.Calls - i
			mu.Unlock()
			return r.finish(answered, &mu)
		}
		mu.Lock()
		r.Sent++
		mu.Unlock()
		all.Add(1)
		go func(i int) {
			defer all.Done()
			defer func() { <-slots }()
			cctx, cancel := context.WithTimeout(ctx, opts.Deadline)
			defer cancel()
			answer(i, call(cctx, i))
		}(i)
	}
	done := make(chan struct{})
	go func() { all.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(opts.Deadline + opts.Grace):
	}
	return r.finish(answered, &mu)
}

func (r *Report) finish(answered []bool, mu *sync.Mutex) *Report {
	mu.Lock()
	defer mu.Unlock()
	out := *r
	out.Codes = map[codes.Code]int{}
	for c, n := range r.Codes {
		out.Codes[c] = n
	}
	out.OKCalls = map[int]bool{}
	for i := range r.OKCalls {
		out.OKCalls[i] = true
	}
	out.Unanswered = r.Unanswered
	for i := 0; i < r.Sent; i++ {
		if !answered[i] {
			out.Unanswered++
		}
	}
	return &out
}

// clear reports whether a status says more than its code's name.
func clear(st *status.Status) bool {
	msg := strings.TrimSpace(st.Message())
	return msg != "" && !strings.EqualFold(msg, st.Code().String())
}

// Check fails t if a call went unanswered, if an error answer lacks a clear
// message, or if one has a code not in allowed. It logs the account either
// way. Whether a call ran twice is CheckExecutions' to say.
func Check(t testing.TB, name string, r *Report, allowed ...codes.Code) {
	t.Helper()
	t.Logf("%s: %v", name, r)
	for c, err := range r.Errors {
		t.Logf("%s: first %v: %v", name, c, status.Convert(err).Message())
	}
	if r.Unanswered > 0 {
		t.Errorf("%s: %d of %d calls unanswered", name, r.Unanswered, r.Sent)
	}
	for _, err := range r.Unclear {
		t.Errorf("%s: error answer without a clear status message: %v", name, err)
	}
	ok := map[codes.Code]bool{}
	for _, c := range allowed {
		ok[c] = true
	}
	for c, n := range r.Codes {
		if !ok[c] {
			t.Errorf("%s: %d calls answered %v (not expected here): %v", name, n, c, r.Errors[c])
		}
	}
}

// CheckExecutions reads the function side's record of a run (one call
// number a line, as tests/testfns/record writes it) and fails t if a call
// ran more than once, was answered OK without having run exactly once, or
// ran without having been sent: an answer on the caller's side alone cannot
// show that a call was repeated. A call answered with an error may have run
// once or not at all. It returns how many runs the record holds (a scenario
// where no call may reach a function asserts none).
func CheckExecutions(t testing.TB, name string, r *Report, record string) int {
	t.Helper()
	return CheckExecutionsOf(t, name, r, record, func(int) bool { return true })
}

// CheckExecutionsOf is CheckExecutions for a run where only the calls that
// records selects (by number) go through the record function; a run of
// another call is an error too.
func CheckExecutionsOf(t testing.TB, name string, r *Report, record string, records func(i int) bool) int {
	t.Helper()
	data, err := os.ReadFile(record)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s: reading the executions: %v", name, err)
	}
	runs := map[int]int{}
	for _, line := range strings.Fields(string(data)) {
		i, err := strconv.Atoi(line)
		if err != nil {
			t.Fatalf("%s: executions record line %q", name, line)
		}
		runs[i]++
	}
	executed := 0
	for _, i := range sortedKeys(runs) {
		n := runs[i]
		executed += n
		switch {
		case i < 0 || i >= r.Sent || !records(i):
			t.Errorf("%s: call %d ran but was never sent to the record function (runs: %d)", name, i, n)
		case n > 1:
			t.Errorf("%s: call %d ran %d times", name, i, n)
		}
	}
	for _, i := range sortedKeys(r.OKCalls) {
		if records(i) && runs[i] != 1 {
			t.Errorf("%s: call %d answered OK but ran %d times", name, i, runs[i])
		}
	}
	sent := 0
	for i := 0; i < r.Sent; i++ {
		if records(i) {
			sent++
		}
	}
	t.Logf("%s: %d executions recorded for %d calls sent", name, executed, sent)
	return executed
}

func sortedKeys[V any](m map[int]V) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	return keys
}

// RecordInput is call i's ResourceList for tests/testfns/record, which
// appends i to the file runs when it runs (CheckExecutions reads it) and
// answers after 20 ms, so that calls overlap.
func RecordInput(runs string, i int) string { return RecordInputSleeping(runs, i, 20*time.Millisecond) }

// RecordInputSleeping is RecordInput for a function that answers after
// sleep (once it has recorded its run).
func RecordInputSleeping(runs string, i int, sleep time.Duration) string {
	return fmt.Sprintf("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\nfunctionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: record\n  data:\n    callId: %q\n    ledger: %q\n    sleep: %s\n", strconv.Itoa(i), runs, sleep)
}

// Progress is a run going on in the background (Background).
type Progress struct {
	answered atomic.Int32
	done     chan *Report
}

// Background starts Run in a goroutine, for a test that does something to
// the system (kills a service, deletes a pod) while the calls go on.
func Background(ctx context.Context, opts Options, call Call) *Progress {
	p := &Progress{done: make(chan *Report, 1)}
	go func() {
		p.done <- Run(ctx, opts, func(ctx context.Context, i int) error {
			defer p.answered.Add(1)
			return call(ctx, i)
		})
	}()
	return p
}

// Answered is how many calls have been answered so far.
func (p *Progress) Answered() int { return int(p.answered.Load()) }

// Wait returns the run's report once it is over.
func (p *Progress) Wait() *Report { return <-p.done }

// Records makes the record function's files, one for each name, empty and
// writable by every uid, in a directory of their own below /tmp that every
// uid may enter and write: with the sandbox's uid layer each call runs as a
// uid of its own, and a test's temporary directory is closed to them. It
// returns the directory (for --sandbox-read-write-paths) and the files by
// name; RecordFile adds one.
func Records(t testing.TB, names ...string) (dir string, files map[string]string) {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "records-")
	if err != nil {
		t.Fatalf("records: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatalf("records: %v", err)
	}
	files = map[string]string{}
	for _, name := range names {
		files[name] = RecordFile(t, dir, name)
	}
	return dir, files
}

// RecordFile makes the empty record file name in dir, writable by every
// uid, and returns its path.
func RecordFile(t testing.TB, dir, name string) string {
	t.Helper()
	f := filepath.Join(dir, name)
	if err := os.WriteFile(f, nil, 0o666); err != nil {
		t.Fatalf("record file: %v", err)
	}
	if err := os.Chmod(f, 0o666); err != nil {
		t.Fatalf("record file: %v", err)
	}
	return f
}

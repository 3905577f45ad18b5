package report

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"

	"github.com/fnrunner/fnrunner/libs/executortable"
	"github.com/fnrunner/fnrunner/libs/reporttoken"
	configpb "github.com/fnrunner/fnrunner/protos/configstream"
	"github.com/fnrunner/fnrunner/services/binary-runner/binpath"
)

func binary(name, path string) *configpb.FunctionConfig {
	return &configpb.FunctionConfig{Namespace: "ns", Name: name, Image: name, Binary: &configpb.BinaryExecutor{Tags: []string{"v1"}, Path: path}}
}

// With the check calls make (binpath.Resolve, tested there), the report
// names each FunctionConfig whose binary this runner cannot run, in the
// table's order, with the reason.
func TestUnrunnable(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "fine"), []byte("#!/bin/sh\ncat\n"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "not-executable"), []byte("#!/bin/sh\ncat\n"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "a-directory"), 0o755))
	check := func(path string) error {
		_, err := binpath.Resolve(dir, path, false)
		return err
	}
	got := Unrunnable([]*configpb.FunctionConfig{
		binary("a", "fine"), binary("b", "missing"), binary("c", "a-directory"), binary("d", "not-executable"), binary("e", "/bin/sh"),
	}, check)
	var names, reasons []string
	for _, u := range got {
		assert.Equal(t, "ns", u.GetNamespace())
		names, reasons = append(names, u.GetName()+" "+u.GetPath()), append(reasons, u.GetReason())
	}
	assert.Equal(t, []string{"b missing", "c a-directory", "d not-executable", "e /bin/sh"}, names)
	assert.Equal(t, []string{"no such file", "a directory", "not executable",
		`binary path "/bin/sh" is absolute, and absolute paths are not allowed (--allow-absolute-binary-paths)`}, reasons)
}

func TestUnrunnableChecksEachPathOnceAndSkipsOtherExecutors(t *testing.T) {
	checked := map[string]int{}
	check := func(path string) error {
		checked[path]++
		return &binpath.MissingError{Path: path, Reason: "no such file"}
	}
	got := Unrunnable([]*configpb.FunctionConfig{
		binary("a", "same"),
		{Namespace: "ns", Name: "go-only", Image: "g", Go: &configpb.GoExecutor{Tags: []string{"v1"}, Id: "g"}},
		binary("b", "same"),
	}, check)
	require.Len(t, got, 2)
	assert.Equal(t, "a", got[0].GetName())
	assert.Equal(t, "b", got[1].GetName())
	assert.Equal(t, map[string]int{"same": 1}, checked)
}

type fakeTables struct {
	mu      sync.Mutex
	tables  *executortable.Tables
	changed chan struct{}
}

func newFakeTables() *fakeTables { return &fakeTables{changed: make(chan struct{})} }

func (f *fakeTables) Current() (*executortable.Tables, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tables, f.changed
}

func (f *fakeTables) set(s *configpb.Snapshot) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tables = executortable.Build(s)
	close(f.changed)
	f.changed = make(chan struct{})
}

type fakeSender struct {
	mu      sync.Mutex
	fail    int // the next fail calls fail
	reports []*configpb.RunnerReport
	// auth is the authorization metadata each delivered report came with.
	auth  []string
	calls int
}

func (f *fakeSender) Report(ctx context.Context, r *configpb.RunnerReport) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.fail > 0 {
		f.fail--
		return errors.New("unavailable")
	}
	f.reports = append(f.reports, r)
	md, _ := metadata.FromOutgoingContext(ctx)
	f.auth = append(f.auth, strings.Join(md.Get("authorization"), ","))
	return nil
}

func (f *fakeSender) delivered() []*configpb.RunnerReport {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*configpb.RunnerReport(nil), f.reports...)
}

// A report follows every table, a failed one is retried, and a recheck
// that finds the file changed reports again without a new table. Each
// carries the token file's content as it is when sent.
func TestReporterRun(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("first\n"), 0o600))
	check := func(path string) error {
		_, err := binpath.Resolve(dir, path, false)
		return err
	}
	tables := newFakeTables()
	sender := &fakeSender{fail: 1}
	r := New(slog.New(slog.DiscardHandler), tables, sender, check, Options{Runner: "runner-0", RunnerUID: "uid-0", Recheck: 50 * time.Millisecond,
		Token: reporttoken.File(tokenFile).Token})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	defer func() { cancel(); <-done }()

	tables.set(&configpb.Snapshot{Epoch: "e", Version: 1, Functions: []*configpb.FunctionConfig{binary("fn", "fn")}})
	// The first attempt fails; the retry (after minBackoff) delivers it.
	require.Eventually(t, func() bool { return len(sender.delivered()) == 1 }, 5*time.Second, 10*time.Millisecond)
	rep := sender.delivered()[0]
	assert.Equal(t, "runner-0", rep.GetRunner())
	assert.Equal(t, "uid-0", rep.GetRunnerUid())
	assert.Equal(t, "e", rep.GetEpoch())
	assert.Equal(t, uint64(1), rep.GetVersion())
	require.Len(t, rep.GetUnrunnable(), 1)
	assert.Equal(t, "no such file", rep.GetUnrunnable()[0].GetReason())

	// The kubelet rotates the token, then the binary appears: the next
	// recheck reports the empty list, with the new token.
	require.NoError(t, os.WriteFile(tokenFile, []byte("second"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "fn"), []byte("#!/bin/sh\ncat\n"), 0o755))
	require.Eventually(t, func() bool { return len(sender.delivered()) == 2 }, 5*time.Second, 10*time.Millisecond)
	assert.Empty(t, sender.delivered()[1].GetUnrunnable())
	assert.Equal(t, uint64(1), sender.delivered()[1].GetVersion())

	// Rechecks that find nothing new send nothing.
	time.Sleep(200 * time.Millisecond)
	assert.Len(t, sender.delivered(), 2, "reports without a change")

	// A new table is reported even when all is fine.
	tables.set(&configpb.Snapshot{Epoch: "e", Version: 2, Functions: []*configpb.FunctionConfig{binary("fn", "fn")}})
	require.Eventually(t, func() bool { return len(sender.delivered()) == 3 }, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, uint64(2), sender.delivered()[2].GetVersion())
	assert.Empty(t, sender.delivered()[2].GetUnrunnable())
	sender.mu.Lock()
	defer sender.mu.Unlock()
	assert.Equal(t, []string{"Bearer first", "Bearer second", "Bearer second"}, sender.auth)
}

// A report stands for Resend, then goes again unchanged: one stored under
// this runner's name by someone else does not stay.
func TestReporterResendsAnUnchangedReport(t *testing.T) {
	tables := newFakeTables()
	sender := &fakeSender{}
	r := New(slog.New(slog.DiscardHandler), tables, sender, func(string) error { return nil },
		Options{Runner: "runner-0", Recheck: 10 * time.Millisecond, Resend: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	defer func() { cancel(); <-done }()

	tables.set(&configpb.Snapshot{Epoch: "e", Version: 1, Functions: []*configpb.FunctionConfig{binary("fn", "fn")}})
	require.Eventually(t, func() bool { return len(sender.delivered()) >= 3 }, 10*time.Second, 10*time.Millisecond)
	for _, rep := range sender.delivered() {
		assert.Equal(t, uint64(1), rep.GetVersion(), "the same report")
	}
}

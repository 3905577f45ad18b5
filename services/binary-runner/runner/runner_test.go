package runner

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/admission"
	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/executortable"
	"github.com/fnrunner/fnrunner/libs/fnexec"
	"github.com/fnrunner/fnrunner/libs/fnresult"
	configpb "github.com/fnrunner/fnrunner/protos/configstream"
	"github.com/fnrunner/fnrunner/services/binary-runner/catalog"
)

type fixedTables struct{ t *executortable.Tables }

func (f fixedTables) Await(context.Context, time.Duration) *executortable.Tables { return f.t }

func newRunner(functions map[string]catalog.Function, entries ...*configpb.FunctionConfig) *Runner {
	return New(fixedTables{executortable.Build(&configpb.Snapshot{Version: 1, Functions: entries})}, functions,
		Options{FunctionsDir: "/nonexistent", Exec: fnexec.Options{MaxLogBytes: 1 << 20}, MaxOutputBytes: 1 << 20})
}

func goEntry(image, id string) *configpb.FunctionConfig {
	return &configpb.FunctionConfig{Namespace: "ns", Name: image, Image: image, Go: &configpb.GoExecutor{Tags: []string{"v1"}, Id: id}}
}

const rl = "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n"

// A go entry whose function runs out of process (starlark) runs its binary
// from the functions directory, and what it writes to stderr is that call's
// log alone.
func TestOutOfProcessFunctionRunsItsBinary(t *testing.T) {
	dir := t.TempDir()
	script := "#!/bin/sh\ncat\necho \"hello from $0\" >&2\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "starlark"), []byte(script), 0o755))
	r := New(fixedTables{executortable.Build(&configpb.Snapshot{Version: 1, Functions: []*configpb.FunctionConfig{goEntry("starlark", "starlark")}})},
		catalog.Functions(), Options{FunctionsDir: dir, Exec: fnexec.Options{MaxLogBytes: 1 << 20}, MaxOutputBytes: 1 << 20})
	resp, err := r.EvaluateFunction(context.Background(), &evalwire.Request{Image: "starlark:v1", ResourceList: evalwire.Bytes([]byte(rl))})
	require.NoError(t, err)
	assert.Contains(t, string(resp.Log), "hello from "+filepath.Join(dir, "starlark"))
	assert.Equal(t, rl, string(resp.ResourceList.Materialize()))

	// Without its binary the entry cannot run: said, not guessed.
	_, err = newRunner(catalog.Functions(), goEntry("starlark", "starlark")).EvaluateFunction(context.Background(),
		&evalwire.Request{Image: "starlark:v1", ResourceList: evalwire.Bytes([]byte(rl))})
	assert.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
}

func TestPanicIsInternal(t *testing.T) {
	r := newRunner(map[string]catalog.Function{"boom": {Process: func(*fn.ResourceList) (bool, error) { panic("kaboom") }}}, goEntry("boom", "boom"))
	_, err := r.EvaluateFunction(context.Background(), &evalwire.Request{Image: "boom:v1", ResourceList: evalwire.Bytes([]byte(rl))})
	require.Equal(t, codes.Internal, status.Code(err), "panic = %v", err)
	d, ok := fnresult.FailureDetails(err)
	assert.True(t, ok, "panic details = %v", err)
	assert.Contains(t, string(d.GetLog()), "kaboom", "panic details = %v", d)
	// The runner is still fine.
	_, err = r.EvaluateFunction(context.Background(), &evalwire.Request{Image: "nope:v1", ResourceList: evalwire.Bytes([]byte(rl))})
	assert.Equal(t, codes.NotFound, status.Code(err), "after a panic: %v", err)
}

// An in-process function that overruns its caller's deadline: Go cannot
// stop it, so the call is answered DeadlineExceeded once it has returned,
// its weight gone with it; the next calls proceed meanwhile.
func TestDeadlineForInProcessFunction(t *testing.T) {
	release := make(chan struct{})
	running := make(chan struct{})
	r := newRunner(map[string]catalog.Function{
		"slow": {Process: func(*fn.ResourceList) (bool, error) { close(running); <-release; return true, nil }},
		"fast": {Process: func(*fn.ResourceList) (bool, error) { return true, nil }},
	}, goEntry("slow", "slow"), goEntry("fast", "fast"))
	r.opts.Admission = admission.NewWeighted(1<<30, 10, 1<<30)
	ctx, cancel := context.WithCancel(context.Background())
	answered := make(chan error, 1)
	go func() {
		_, err := r.EvaluateFunction(ctx, &evalwire.Request{Image: "slow:v1", ResourceList: evalwire.Bytes([]byte(rl))})
		answered <- err
	}()
	<-running
	cancel()
	for range 3 {
		_, err := r.EvaluateFunction(context.Background(), &evalwire.Request{Image: "fast:v1", ResourceList: evalwire.Bytes([]byte(rl))})
		require.NoError(t, err, "a next call while the overrun goes on")
	}
	select {
	case err := <-answered:
		t.Fatalf("answered (%v) while its function still runs", err)
	default:
	}
	assert.Equal(t, Weight(evalwire.Bytes([]byte(rl)), 0), r.opts.Admission.InFlight(), "the overrun holds its weight while it runs")

	close(release)
	err := <-answered
	assert.Equal(t, codes.Canceled, status.Code(err), "slow function = %v", err)
	assert.Zero(t, r.opts.Admission.InFlight(), "its weight is gone when it is answered")
}

func binaryEntry(image, path string) *configpb.FunctionConfig {
	return &configpb.FunctionConfig{Namespace: "ns", Name: image, Image: image, Binary: &configpb.BinaryExecutor{Tags: []string{"v1"}, Path: path}}
}

func TestBinaryRuntime(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "fn"), []byte("#!/bin/sh\ncat; echo ran >&2\n"), 0o755))
	r := newRunner(nil, binaryEntry("fn", "fn"))
	r.opts.FunctionsDir = dir
	resp, err := r.EvaluateFunction(context.Background(), &evalwire.Request{Image: "fn:v1", ResourceList: evalwire.Bytes([]byte(rl))})
	require.NoError(t, err)
	assert.Equal(t, rl, string(resp.ResourceList.Materialize()))
	assert.Equal(t, "ran", strings.TrimSpace(string(resp.Log)))
}

// A call that runs a process weighs what the process needs too: while the
// binary runs, its call holds Weight(input, ProcessWeight).
func TestBinaryCallWeighsItsProcess(t *testing.T) {
	dir := t.TempDir()
	gate := filepath.Join(dir, "gate")
	require.NoError(t, unix.Mkfifo(gate, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "fn"), []byte("#!/bin/sh\ncat\nread x < "+gate+"\n"), 0o755))
	// Should the test fail before it opens the gate, the function must
	// not wait on it for good (Bazel would wait for it too): opened for
	// reading and writing, a fifo does not block.
	t.Cleanup(func() {
		if f, err := os.OpenFile(gate, os.O_RDWR, 0); err == nil {
			_, _ = f.WriteString("go\n")
			_ = f.Close()
		}
	})
	r := newRunner(nil, binaryEntry("fn", "fn"))
	r.opts.FunctionsDir = dir
	r.opts.Admission = admission.NewWeighted(1<<30, 10, 1<<30)
	done := make(chan error, 1)
	go func() {
		_, err := r.EvaluateFunction(context.Background(), &evalwire.Request{Image: "fn:v1", ResourceList: evalwire.Bytes([]byte(rl))})
		done <- err
	}()
	want := Weight(evalwire.Bytes([]byte(rl)), ProcessWeight)
	require.Eventually(t, func() bool { return r.opts.Admission.InFlight() == want }, 10*time.Second, time.Millisecond,
		"in flight: %d, want %d", r.opts.Admission.InFlight(), want)
	f, err := os.OpenFile(gate, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("go\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, <-done)
	assert.Zero(t, r.opts.Admission.InFlight(), "released when the call ended")
}

func TestBinaryPathsStayInsideFunctionsDir(t *testing.T) {
	// The path rules are executortable.ResolveBinary's (tested there); a
	// path that breaks them is the table's fault, not the caller's.
	for _, p := range []string{"../x", "/bin/sh"} {
		r := newRunner(nil, binaryEntry("fn", p))
		_, err := r.EvaluateFunction(context.Background(), &evalwire.Request{Image: "fn:v1", ResourceList: evalwire.Bytes([]byte(rl))})
		assert.Equal(t, codes.FailedPrecondition, status.Code(err), "path %q: %v", p, err)
	}
}

// A binary executor path with no executable file in this runner (a porch
// FunctionConfig naming a binary porch's runner image had) is NotFound, so
// the gateway goes on to the pod executor.
func TestMissingBinaryIsNotFound(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "not-executable"), []byte("#!/bin/sh\ncat\n"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "a-directory"), 0o755))
	for _, p := range []string{"set-labels", "not-executable", "a-directory"} {
		r := newRunner(nil, binaryEntry("fn", p))
		r.opts.FunctionsDir = dir
		_, err := r.EvaluateFunction(context.Background(), &evalwire.Request{Image: "fn:v1", ResourceList: evalwire.Bytes([]byte(rl))})
		assert.Equal(t, codes.NotFound, status.Code(err), "path %q: %v", p, err)
		assert.Contains(t, status.Convert(err).Message(), "no executable binary at "+p, "path %q", p)
	}
}

func TestMissingLinkedInFunction(t *testing.T) {
	r := newRunner(nil, goEntry("gone", "gone"))
	_, err := r.EvaluateFunction(context.Background(), &evalwire.Request{Image: "gone:v1", ResourceList: evalwire.Bytes([]byte(rl))})
	assert.Equal(t, codes.FailedPrecondition, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), `no linked-in Go function with id "gone"`)
}

func TestInProcessOutputOverLimit(t *testing.T) {
	// Runs on the runner's goroutine: errors go back as the function's.
	big := func(rl *fn.ResourceList) (bool, error) {
		o := fn.NewEmptyKubeObject()
		if err := errors.Join(o.SetAPIVersion("v1"), o.SetKind("ConfigMap"), o.SetNestedString(strings.Repeat("x", 2<<20), "data", "big")); err != nil {
			return false, err
		}
		rl.Items = append(rl.Items, o)
		return true, nil
	}
	r := newRunner(map[string]catalog.Function{"big": {Process: big}}, goEntry("big", "big"))
	_, err := r.EvaluateFunction(context.Background(), &evalwire.Request{Image: "big:v1", ResourceList: evalwire.Bytes([]byte(rl))})
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
}

func TestWeight(t *testing.T) {
	tests := []struct {
		name  string
		input string
		fixed int64
		want  int64
	}{
		{"bytes and lines", "a: 1\nb: 2\n", 0, 10*ByteWeight + 2*NodeWeight},
		{"flow style counts its commas", "[1,2,3]", 0, 7*ByteWeight + 2*NodeWeight},
		{"a process costs its runtime", "a: 1\n", ProcessWeight, 5*ByteWeight + NodeWeight + ProcessWeight},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Split across buffers, as a request arrives.
			in := evalwire.Bytes([]byte(tt.input[:len(tt.input)/2]))
			in = append(in, evalwire.Bytes([]byte(tt.input[len(tt.input)/2:]))...)
			assert.Equal(t, tt.want, Weight(in, tt.fixed))
		})
	}
}

// A binary whose processes hold more than its call was charged is killed,
// and the call fails with ResourceExhausted saying so.
func TestBinaryPastItsMemoryBound(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "fn"), []byte("#!/bin/sh\nhead -c 268435456 /dev/zero | tail -c 167772160 >/dev/null\ncat\n"), 0o755))
	r := newRunner(nil, binaryEntry("fn", "fn"))
	r.opts.FunctionsDir = dir
	r.opts.Admission = admission.NewWeighted(1<<30, 10, 1<<30)
	_, err := r.EvaluateFunction(context.Background(), &evalwire.Request{Image: "fn:v1", ResourceList: evalwire.Bytes([]byte(rl))})
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "over the call's bound of 80 MiB")
	assert.Zero(t, r.opts.Admission.InFlight())
}

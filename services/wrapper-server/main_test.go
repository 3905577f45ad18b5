package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/admission"
	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/fnexec"
	pb "github.com/fnrunner/fnrunner/protos/evaluator"
	"github.com/fnrunner/fnrunner/tools/localstack"
)

const rl = "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n"

func TestServesTheEntrypoint(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	var logs bytes.Buffer
	go func() {
		done <- serve(ctx, []string{"--port=0", "--", "/bin/sh", "-c", "cat; echo ran >&2"}, &logs, ready)
	}()
	addr := <-ready
	conn, err := grpc.NewClient(addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	resp, err := pb.NewFunctionEvaluatorClient(conn).EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: "fn", ResourceList: []byte(rl)})
	require.NoError(t, err, "EvaluateFunction")
	require.Equal(t, rl, string(resp.GetResourceList()), "EvaluateFunction = %v", resp)
	require.Equal(t, "ran", strings.TrimSpace(string(resp.GetLog())), "EvaluateFunction = %v", resp)
	_, err = pb.NewFunctionEvaluatorClient(conn).EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: "fn", ResourceList: []byte("not: [yaml")})
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "bad input: %v", err)
	cancel()
	require.NoError(t, <-done)
}

func TestNeedsEntrypoint(t *testing.T) {
	err := run(context.Background(), []string{"--port=0"}, &bytes.Buffer{})
	assert.ErrorContains(t, err, "entrypoint", "run without entrypoint")
}

func TestBoundedConcurrency(t *testing.T) {
	dir := t.TempDir()
	release := filepath.Join(dir, "release")
	w := &wrapper{
		function:   &fnexec.Binary{Argv: []string{"/bin/sh", "-c", "while [ ! -e " + release + " ]; do sleep 0.02; done; cat"}},
		limit:      admission.New(1, 1),
		concurrent: 1, queue: 1,
	}
	ctx := context.Background()
	results := make(chan error, 2)
	call := func() {
		_, err := w.EvaluateFunction(ctx, &evalwire.Request{Image: "fn", ResourceList: evalwire.Bytes([]byte(rl))})
		results <- err
	}
	go call()
	waitUntil(t, func() bool { return w.limit.InFlight() == 1 })
	go call()
	waitUntil(t, func() bool { return w.limit.Queued() == 1 })
	_, err := w.EvaluateFunction(ctx, &evalwire.Request{Image: "fn", ResourceList: evalwire.Bytes([]byte(rl))})
	st := status.Convert(err)
	assert.Equal(t, codes.ResourceExhausted, st.Code(), "third call = %v", err)
	assert.Contains(t, st.Message(), "--max-queue 1", "third call")
	require.NoError(t, os.WriteFile(release, nil, 0o644))
	for i := 0; i < 2; i++ {
		assert.NoError(t, <-results, "admitted call")
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i == 1000 {
			require.FailNow(t, "condition not reached")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCopyTo(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tools")
	require.NoError(t, run(context.Background(), []string{"--copy-to=" + dir}, &bytes.Buffer{}))
	st, err := os.Stat(filepath.Join(dir, "wrapper-server"))
	if assert.NoError(t, err, "copied binary") {
		assert.NotZero(t, st.Mode()&0o111, "copied binary not executable: %v", st.Mode())
		assert.NotZero(t, st.Size(), "copied binary is empty")
	}
}

// The function runs with the container's environment and working
// directory, as porch's wrapper-server runs it; HOME and TMPDIR stay the
// call's private directory.
func TestFunctionGetsTheContainersEnvironmentAndWorkdir(t *testing.T) {
	workdir := t.TempDir()
	t.Chdir(workdir)
	t.Setenv("FN_SETTING", "from-the-template")
	t.Setenv("HOME", "/home/should-not-leak")
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	script := `cat >/dev/null; printf 'apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n# setting=%s cwd=%s home=%s\n' "$FN_SETTING" "$(pwd)" "$HOME"`
	go func() {
		done <- serve(ctx, []string{"--port=0", "--", "/bin/sh", "-c", script}, &bytes.Buffer{}, ready)
	}()
	addr := <-ready
	conn, err := grpc.NewClient(addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	resp, err := pb.NewFunctionEvaluatorClient(conn).EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: "fn", ResourceList: []byte(rl)})
	require.NoError(t, err)
	out := string(resp.GetResourceList())
	assert.Contains(t, out, "setting=from-the-template")
	assert.Contains(t, out, "cwd="+workdir)
	assert.NotContains(t, out, "home=/home/should-not-leak")
	cancel()
	require.NoError(t, <-done)
}

// The wrapper-server's metrics name the calls of the image its pod was
// started for (--function-image) by that image, any other as other, under
// the executor wrapper; admitted calls' waits are counted.
func TestMetricsNameThePodsImage(t *testing.T) {
	metrics, err := localstack.FreeAddress()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, []string{"--port=0", "--metrics-address=" + metrics, "--function-image=example.com/fns/fn:v1", "--", "/bin/cat"}, &bytes.Buffer{}, ready)
	}()
	addr := <-ready
	conn, err := grpc.NewClient(addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	for _, image := range []string{"fn:v1", "example.com/fns/fn:v1", "made-up-1:v1", "made-up-2:v1"} {
		_, err := pb.NewFunctionEvaluatorClient(conn).EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: image, ResourceList: []byte(rl)})
		require.NoError(t, err, image)
	}
	var body string
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + metrics + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		body = string(b)
		return err == nil && resp.StatusCode == http.StatusOK
	}, 10*time.Second, 10*time.Millisecond, "no metrics at %s", metrics)
	for _, want := range []string{
		`fnrunner_evaluations_total{code="OK",executor="wrapper",function="example.com/fns/fn:v1"} 2`,
		`fnrunner_evaluations_total{code="OK",executor="wrapper",function="other"} 2`,
		fmt.Sprintf(`fnrunner_evaluation_input_bytes_total{executor="wrapper",function="other"} %d`, 2*len(rl)),
		fmt.Sprintf(`fnrunner_evaluation_output_bytes_total{executor="wrapper",function="example.com/fns/fn:v1"} %d`, 2*len(rl)),
		`fnrunner_evaluation_duration_seconds_count{executor="wrapper",function="other"} 2`,
		`fnrunner_admission_wait_seconds_count 4`,
	} {
		assert.Contains(t, body, want)
	}
	cancel()
	require.NoError(t, <-done)
}

func TestFunctionImageMustBeAnImage(t *testing.T) {
	err := run(context.Background(), []string{"--port=0", "--function-image=Not An Image", "--", "/bin/cat"}, &bytes.Buffer{})
	assert.ErrorContains(t, err, "--function-image")
}

// In a container without a usable temp dir (an image built from scratch,
// under a template that mounts no /tmp, e.g. one an older pod-manager made),
// calls get their private directories beside the wrapper-server's
// executable.
func TestNoTempDirInTheContainer(t *testing.T) {
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "not-there"))
	exeDir := t.TempDir() // where the init container put the wrapper-server
	dir, err := callsDir("", exeDir)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(exeDir, "tmp"), dir)

	// A temp dir that is there but may not be written: the same.
	readOnly := t.TempDir()
	require.NoError(t, os.Chmod(readOnly, 0o555))
	t.Cleanup(func() { _ = os.Chmod(readOnly, 0o755) })
	if os.Getuid() != 0 { // root writes anyway
		t.Setenv("TMPDIR", readOnly)
		got, err := callsDir("", exeDir)
		require.NoError(t, err)
		assert.Equal(t, dir, got, "a temp dir that may not be written")
		t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "not-there"))
	}

	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, []string{"--port=0", "--sandbox=none", "--temp-dir=" + dir, "--", "/bin/sh", "-c", `cat >/dev/null; printf 'apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n# tmp=%s\n' "$TMPDIR"`}, &bytes.Buffer{}, ready)
	}()
	addr := <-ready
	conn, err := grpc.NewClient(addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	resp, err := pb.NewFunctionEvaluatorClient(conn).EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: "fn", ResourceList: []byte(rl)})
	require.NoError(t, err)
	assert.Contains(t, string(resp.GetResourceList()), "# tmp="+dir+"/fn-")
	cancel()
	require.NoError(t, <-done)

	given, err := callsDir("/somewhere", exeDir)
	require.NoError(t, err)
	assert.Equal(t, "/somewhere", given, "--temp-dir")
}

// A call whose deadline passes while it waits for a run slot was never
// run: it says so, not that it was killed at its deadline.
func TestCallEndedWhileQueuedWasNotRun(t *testing.T) {
	release := filepath.Join(t.TempDir(), "release")
	t.Cleanup(func() { _ = os.WriteFile(release, nil, 0o644) })
	w := &wrapper{
		function:   &fnexec.Binary{Argv: []string{"/bin/sh", "-c", "while [ ! -e " + release + " ]; do sleep 0.02; done; cat"}},
		limit:      admission.New(1, 1),
		concurrent: 1, queue: 1,
	}
	busy := make(chan error, 1)
	go func() {
		_, err := w.EvaluateFunction(context.Background(), &evalwire.Request{Image: "fn", ResourceList: evalwire.Bytes([]byte(rl))})
		busy <- err
	}()
	waitUntil(t, func() bool { return w.limit.InFlight() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := w.EvaluateFunction(ctx, &evalwire.Request{Image: "fn", ResourceList: evalwire.Bytes([]byte(rl))})
	st := status.Convert(err)
	assert.Equal(t, codes.DeadlineExceeded, st.Code(), "%v", err)
	assert.Contains(t, st.Message(), "not run")
	assert.NotContains(t, st.Message(), "killed")
	require.NoError(t, os.WriteFile(release, nil, 0o644))
	require.NoError(t, <-busy)
}

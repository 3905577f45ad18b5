// Load and fault tests on loopback: the real gateway, config-reconciler and
// binary-runner (tests/stack), real and hostile functions. Every scenario
// accounts for each call it sends (tests/ledger): none may go unanswered,
// and every error must carry a clear status message. Where its calls can
// go through tests/testfns/record, the function notes each run on its side
// and no call may have run twice, or been answered OK without running once
// (ledger.CheckExecutions). Nothing here asserts a duration.
package faults_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/fnrunner/fnrunner/protos/evaluator"
	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tests/ledger"
	"github.com/fnrunner/fnrunner/tests/stack"
	"github.com/fnrunner/fnrunner/tools/bench/load"
	"github.com/fnrunner/fnrunner/tools/localstack"
	"github.com/fnrunner/fnrunner/tools/procstat"
)

func evaluate(s *stack.Stack, image, rl string) ledger.Call {
	client := s.Client()
	return func(ctx context.Context, _ int) error {
		_, err := client.EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: image, ResourceList: []byte(rl)})
		return err
	}
}

func pid(t *testing.T, s *stack.Stack, service string) int {
	t.Helper()
	p, err := s.Pid(service)
	require.NoError(t, err)
	return p
}

// recordImage is tests/testfns/record through its binary FunctionConfig
// (testdata/hostile.yaml).
const recordImage = "example.com/test/record:v1"

// record calls the record function through client: call i notes its run
// in the ledger file runs (ledger.RecordInput).
func record(client pb.FunctionEvaluatorClient, runs string) ledger.Call {
	return func(ctx context.Context, i int) error {
		_, err := client.EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: recordImage, ResourceList: []byte(ledger.RecordInput(runs, i))})
		return err
	}
}

// records is ledger.Records with the binary-runner's flag that lets
// functions write there.
func records(t *testing.T, names ...string) (string, map[string]string) {
	t.Helper()
	dir, files := ledger.Records(t, names...)
	return "--sandbox-read-write-paths=" + dir, files
}

// hostile reads the FunctionConfigs of the test functions (tests/testfns).
func hostile(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("testdata/hostile.yaml")
	require.NoError(t, err)
	return string(data)
}

// metric reads a gauge from a service's Prometheus endpoint (-1 if absent).
func metric(metrics, name string) float64 {
	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}

// goroutines reads go_goroutines from a service's Prometheus endpoint.
func goroutines(metrics string) (int, error) {
	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			n, err := strconv.ParseFloat(v, 64)
			return int(n), err
		}
	}
	return 0, fmt.Errorf("no go_goroutines at %s", metrics)
}

// 1,000 calls at once through the gateway, to the record function (each a
// process in the binary-runner's sandbox: most wait in its admission
// queue): all answered, each run once, and the gateway's goroutines, open
// files and memory come back down afterwards.
func TestThousandConcurrentCalls(t *testing.T) {
	metrics, err := localstack.FreeAddress()
	require.NoError(t, err)
	writable, runs := records(t, "warm-up", "1000")
	s := stack.Start(t, stack.Options{GatewayArgs: []string{"--metrics-address=" + metrics},
		BinaryRunnerArgs: []string{writable}, Configs: map[string]string{"hostile.yaml": hostile(t)}})
	gw := pid(t, s, "gateway")
	// Warm up (connections, caches), then take the baseline.
	warm := ledger.Run(context.Background(), ledger.Options{Calls: 10, Concurrency: 2}, record(s.Client(), runs["warm-up"]))
	require.Equal(t, 10, warm.OK, "warm-up: %v", warm)
	baseFiles, err := procstat.OpenFiles(gw)
	require.NoError(t, err)
	baseGoroutines, err := goroutines(metrics)
	require.NoError(t, err)

	var peakGoroutines atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if n, err := goroutines(metrics); err == nil && int64(n) > peakGoroutines.Load() {
				peakGoroutines.Store(int64(n))
			}
		}
	}()
	r := ledger.Run(context.Background(), ledger.Options{Calls: 1000, Concurrency: 1000, Deadline: 2 * time.Minute},
		record(s.Client(), runs["1000"]))
	close(stop)
	<-sampled
	ledger.Check(t, "1000 concurrent", r)
	ledger.CheckExecutions(t, "1000 concurrent", r, runs["1000"])
	assert.Equal(t, 1000, r.OK, "calls OK of 1000")

	peakRSS, err := procstat.PeakRSS(gw)
	require.NoError(t, err)
	t.Logf("gateway: goroutines %d at rest, %d at peak; peak RSS %d MiB; %d open files at rest",
		baseGoroutines, peakGoroutines.Load(), peakRSS>>20, baseFiles)
	// A few goroutines per call in flight at most, and nothing left behind.
	assert.LessOrEqual(t, peakGoroutines.Load(), int64(baseGoroutines+5*1000), "gateway peak goroutines for 1000 calls (baseline %d)", baseGoroutines)
	assert.LessOrEqual(t, peakRSS, int64(512<<20), "gateway peak RSS %d MiB for 1000 small calls", peakRSS>>20)
	require.Eventually(t, func() bool {
		n, err := goroutines(metrics)
		return err == nil && n <= baseGoroutines+20
	}, harness.Wait, 20*time.Millisecond, "gave up waiting for gateway goroutines back to baseline")
	require.Eventually(t, func() bool {
		n, err := procstat.OpenFiles(gw)
		return err == nil && n <= baseFiles+5
	}, harness.Wait, 20*time.Millisecond, "gave up waiting for gateway open files back to baseline")
}

// The binary-runner is killed with calls in flight and started again: calls
// sent to it when it died fail with Unavailable saying the function may
// have run; calls that arrive while it is down wait for it and succeed.
func TestBinaryRunnerKilledMidLoad(t *testing.T) {
	// The record function notes each run on its side, in a ledger the
	// sandbox lets it write: no call may run twice, whatever the caller saw.
	writable, files := records(t, "runs")
	runs := files["runs"]
	s := stack.Start(t, stack.Options{GatewayArgs: []string{"--disable-runtimes=go", "--executor-connect-timeout=1m"},
		BinaryRunnerArgs: []string{writable},
		Configs:          map[string]string{"hostile.yaml": hostile(t)}})
	const calls, concurrency = 400, 8
	run := ledger.Background(context.Background(), ledger.Options{Calls: calls, Concurrency: concurrency, Deadline: 2 * time.Minute},
		record(s.Client(), runs))
	require.Eventually(t, func() bool { return run.Answered() >= calls/4 }, harness.Wait, 20*time.Millisecond, "gave up waiting for a quarter of the calls answered")
	require.NoError(t, s.Kill("binary-runner"))
	// Calls keep arriving at the gateway while the runner is down.
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, s.Restart("binary-runner"))
	r := run.Wait()
	ledger.Check(t, "binary-runner killed", r, codes.Unavailable)
	ledger.CheckExecutions(t, "binary-runner killed", r, runs)
	assert.LessOrEqual(t, r.Codes[codes.Unavailable], concurrency, "calls Unavailable; at most the %d in flight when the runner died may fail", concurrency)
	assert.GreaterOrEqual(t, r.OK, calls-concurrency, "calls OK of %d", calls)
	if err := r.Errors[codes.Unavailable]; err != nil {
		assert.ErrorContains(t, err, "not repeated", "Unavailable does not say the call was not repeated")
	}
}

// The gateway starts while the config-reconciler is down: it is not ready
// and answers Unavailable, and no call reaches a function; when the
// reconciler appears, it becomes ready.
func TestConfigReconcilerDownAtGatewayStart(t *testing.T) {
	writable, runs := records(t, "probe", "down", "back")
	s := stack.Start(t, stack.Options{BinaryRunnerArgs: []string{writable}, Configs: map[string]string{"hostile.yaml": hostile(t)}})
	for _, svc := range []string{"config-reconciler", "gateway"} {
		require.NoError(t, s.Kill(svc))
	}
	require.NoError(t, s.Restart("gateway"))
	// The gateway answers but is not ready, and says why.
	client := s.Client()
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		err := record(client, runs["probe"])(ctx, 0)
		return strings.Contains(status.Convert(err).Message(), "executor table")
	}, harness.Wait, 20*time.Millisecond, "gave up waiting for the gateway to answer")
	r := ledger.Run(context.Background(), ledger.Options{Calls: 20, Concurrency: 4, Deadline: 10 * time.Second},
		record(client, runs["down"]))
	ledger.Check(t, "no config-reconciler", r, codes.Unavailable)
	assert.Zero(t, ledger.CheckExecutions(t, "no config-reconciler", r, runs["down"]), "calls run without an executor table")
	assert.Zero(t, r.OK, "calls OK without an executor table")
	if err := r.Errors[codes.Unavailable]; err != nil {
		assert.ErrorContains(t, err, "config-reconciler", "Unavailable does not point at the config-reconciler")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	assert.Error(t, s.WaitServing(ctx), "gateway SERVING without an executor table")
	require.NoError(t, s.Restart("config-reconciler"))
	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, s.WaitServing(ctx), "gateway not SERVING once the config-reconciler is up")
	probes, err := os.ReadFile(runs["probe"])
	require.NoError(t, err)
	assert.Empty(t, string(probes), "probe calls run without an executor table")
	r = ledger.Run(context.Background(), ledger.Options{Calls: 20, Concurrency: 4}, record(client, runs["back"]))
	ledger.Check(t, "config-reconciler back", r)
	ledger.CheckExecutions(t, "config-reconciler back", r, runs["back"])
	assert.Equal(t, 20, r.OK, "calls OK once the config-reconciler is back")
}

// Hostile functions, called together with well-behaved ones: a function that
// hangs is killed at the deadline, one that floods stdout is cut off at the
// message limit, one that leaves children behind loses them; ordinary calls
// (the record function's) are unaffected, each run once, and the runner's
// memory stays bounded.
func TestHostileFunctions(t *testing.T) {
	writable, runs := records(t, "ordinary")
	s := stack.Start(t, stack.Options{Configs: map[string]string{"hostile.yaml": hostile(t)}, BinaryRunnerArgs: []string{writable}})
	runner := pid(t, s, "binary-runner")
	require.NoError(t, procstat.ResetPeak(runner))
	images := []string{"example.com/test/hang:v1", "example.com/test/flood:v1", "example.com/test/orphan:v1", recordImage}
	want := []codes.Code{codes.DeadlineExceeded, codes.ResourceExhausted, codes.OK, codes.OK}
	const ordinary = 3 // images[3]: the record function
	got := make([]atomic.Int32, len(images))
	client := s.Client()
	r := ledger.Run(context.Background(), ledger.Options{Calls: 40, Concurrency: 8, Deadline: 3 * time.Second},
		func(ctx context.Context, i int) error {
			k := i % len(images)
			rl := stack.Input
			if k == ordinary {
				rl = ledger.RecordInput(runs["ordinary"], i)
			}
			_, err := client.EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: images[k], ResourceList: []byte(rl)})
			if status.Code(err) == want[k] {
				got[k].Add(1)
			}
			return err
		})
	ledger.Check(t, "hostile functions", r, codes.DeadlineExceeded, codes.ResourceExhausted)
	ledger.CheckExecutionsOf(t, "hostile functions, ordinary calls", r, runs["ordinary"], func(i int) bool { return i%len(images) == ordinary })
	for k, image := range images {
		assert.Equal(t, int32(10), got[k].Load(), "%s: calls of 10 answered %v", image, want[k])
	}
	peak, err := procstat.PeakRSS(runner)
	require.NoError(t, err)
	t.Logf("binary-runner peak RSS %d MiB with 1 GiB floods", peak>>20)
	assert.LessOrEqual(t, peak, int64(256<<20), "binary-runner peak RSS %d MiB: a flooding function's output is not capped", peak>>20)
	for _, fn := range []string{"hang", "orphan"} {
		exe, err := filepath.EvalSymlinks(filepath.Join(s.FunctionsDir, fn))
		require.NoError(t, err)
		require.Eventually(t, func() bool { return len(procstat.Running(exe)) == 0 }, harness.Wait, 20*time.Millisecond, "gave up waiting for %s", fn+"'s processes gone")
	}
}

// 64 concurrent 3 MiB calls on the go executor, which holds each document
// as a kyaml tree: the binary-runner's admission by weight
// (--max-in-flight-bytes) keeps its peak RSS under 1 GiB. Without it the
// same load peaked at 3.2 GiB (docs/bench/matrix.md). At the shipped
// budgets five such calls run at once (134 MiB each) and 96 MiB of requests
// wait; a call past that is answered at once, ResourceExhausted saying the
// queue is full, and at least those that fit at once are answered OK.
func TestLargeConcurrentGoCalls(t *testing.T) {
	s := stack.Start(t, stack.Options{GatewayArgs: []string{"--disable-runtimes=binary,pod"}})
	runner := pid(t, s, "binary-runner")
	require.NoError(t, procstat.ResetPeak(runner))
	input := string(load.SetNamespaceInput(3 << 20))
	r := ledger.Run(context.Background(), ledger.Options{Calls: 64, Concurrency: 64, Deadline: 5 * time.Minute},
		evaluate(s, "set-namespace:v0.4.5", input))
	ledger.Check(t, "64 concurrent 3 MiB go-executor calls", r, codes.ResourceExhausted)
	if err := r.Errors[codes.ResourceExhausted]; err != nil {
		assert.ErrorContains(t, err, "queue full")
	}
	assert.GreaterOrEqual(t, r.OK, 5+31, "calls OK of 64: at least the 5 that run and the 31 that wait at once")
	peak, err := procstat.PeakRSS(runner)
	require.NoError(t, err)
	t.Logf("binary-runner peak RSS %d MiB for 64 concurrent 3 MiB go-executor calls", peak>>20)
	assert.LessOrEqual(t, peak, int64(1<<30), "binary-runner peak RSS %d MiB", peak>>20)
}

// With room for one call and no queue, a second call while the first runs
// is refused at once, saying the queue is full (not that its message was too
// large); with a queue it waits and runs.
func TestAdmissionQueueFull(t *testing.T) {
	for _, tc := range []struct {
		queue string
		want  codes.Code
	}{{"0", codes.ResourceExhausted}, {"1", codes.OK}} {
		t.Run("queue "+tc.queue, func(t *testing.T) {
			metrics, err := localstack.FreeAddress()
			require.NoError(t, err)
			s := stack.Start(t, stack.Options{Configs: map[string]string{"hostile.yaml": hostile(t)},
				GatewayArgs:      []string{"--disable-runtimes=go"},
				BinaryRunnerArgs: []string{"--max-in-flight-bytes=1", "--max-queue=" + tc.queue, "--metrics-address=" + metrics}})
			client := s.Client()
			first := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				_, err := client.EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: "example.com/test/hang:v1", ResourceList: []byte(stack.Input)})
				first <- err
			}()
			require.Eventually(t, func() bool { return metric(metrics, "fnrunner_admission_in_flight_weight") > 0 }, harness.Wait, 10*time.Millisecond,
				"gave up waiting for the hang function to run")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err = client.EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: "set-namespace:v0.4.5", ResourceList: []byte(stack.Input)})
			assert.Equal(t, tc.want, status.Code(err), "second call: %v", err)
			if tc.want == codes.ResourceExhausted {
				assert.Contains(t, status.Convert(err).Message(), "queue full")
			}
			assert.Equal(t, codes.DeadlineExceeded, status.Code(<-first))
		})
	}
}

// What waiting calls hold is bounded too (--max-queue-bytes): with room for
// one call's request in the queue, a call that finds another waiting is
// refused at once, saying the queue is full and what waits; the one waiting
// runs once the call ahead of it ends.
func TestAdmissionQueueBytesFull(t *testing.T) {
	metrics, err := localstack.FreeAddress()
	require.NoError(t, err)
	s := stack.Start(t, stack.Options{Configs: map[string]string{"hostile.yaml": hostile(t)},
		GatewayArgs: []string{"--disable-runtimes=go"},
		BinaryRunnerArgs: []string{"--max-in-flight-bytes=1", "--max-queue=10", "--max-queue-bytes=" + strconv.Itoa(len(stack.Input)),
			"--metrics-address=" + metrics}})
	client := s.Client()
	call := func(timeout time.Duration, image string) <-chan error {
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			_, err := client.EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: image, ResourceList: []byte(stack.Input)})
			done <- err
		}()
		return done
	}
	first := call(3*time.Second, "example.com/test/hang:v1")
	require.Eventually(t, func() bool { return metric(metrics, "fnrunner_admission_in_flight_weight") > 0 }, harness.Wait, 10*time.Millisecond,
		"gave up waiting for the hang function to run")
	second := call(time.Minute, "set-namespace:v0.4.5")
	require.Eventually(t, func() bool { return metric(metrics, "fnrunner_admission_queued_bytes") > 0 }, harness.Wait, 10*time.Millisecond,
		"gave up waiting for the second call to wait")

	err = <-call(time.Minute, "set-namespace:v0.4.5")
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "third call: %v", err)
	assert.Contains(t, status.Convert(err).Message(), "queue full")
	assert.Contains(t, status.Convert(err).Message(), "1 calls holding")
	assert.Equal(t, codes.DeadlineExceeded, status.Code(<-first))
	assert.NoError(t, <-second, "the call that waited")
}

// Bad requests and a bad FunctionConfig each get a clear error, and the
// gateway keeps serving (the record function's calls, each run once).
func TestBadInputs(t *testing.T) {
	writable, runs := records(t, "after")
	s := stack.Start(t, stack.Options{Configs: map[string]string{"hostile.yaml": hostile(t)}, BinaryRunnerArgs: []string{writable}})
	big := stack.Input + "# " + strings.Repeat("x", 7<<20) + "\n"
	for _, tc := range []struct {
		name, image, rl string
		want            codes.Code
	}{
		{"empty body", "set-namespace:v0.4.5", "", codes.InvalidArgument},
		{"not YAML", "set-namespace:v0.4.5", "{{{ this: is [not yaml", codes.InvalidArgument},
		{"binary garbage", "set-namespace:v0.4.5", "\x00\x01\x02\xff\xfe", codes.InvalidArgument},
		{"YAML that is not a ResourceList", "set-namespace:v0.4.5", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n", codes.InvalidArgument},
		{"ResourceList whose items are not a list", "set-namespace:v0.4.5", "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: 3\n", codes.InvalidArgument},
		{"7 MiB body at the 6 MiB limit", "set-namespace:v0.4.5", big, codes.ResourceExhausted},
		{"image with spaces", "set namespace:v0.4.5", stack.Input, codes.InvalidArgument},
		{"uppercase image", "Set-Namespace:v0.4.5", stack.Input, codes.InvalidArgument},
		{"digest-only image", "@sha256:" + strings.Repeat("a", 64), stack.Input, codes.InvalidArgument},
		{"very long image", strings.Repeat("a", 5000) + ":v1", stack.Input, codes.InvalidArgument},
		{"empty image", "", stack.Input, codes.InvalidArgument},
		{"unknown image", "ghcr.io/example/no-such-function:v1", stack.Input, codes.NotFound},
		// Refused by the config-reconciler, so no executor claims the image.
		{"FunctionConfig with a path out of the functions dir", "example.com/test/traversal:v1", stack.Input, codes.NotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ledger.Run(context.Background(), ledger.Options{Calls: 3, Concurrency: 3}, evaluate(s, tc.image, tc.rl))
			ledger.Check(t, tc.name, r, tc.want)
			assert.Equal(t, 3, r.Codes[tc.want], "want %v for every call", tc.want)
		})
	}
	assert.Contains(t, s.Logs(), "spec.binaryExecutor.path", "the config-reconciler does not say why it refused the traversal FunctionConfig")
	r := ledger.Run(context.Background(), ledger.Options{Calls: 5}, record(s.Client(), runs["after"]))
	ledger.Check(t, "after bad inputs", r)
	ledger.CheckExecutions(t, "after bad inputs", r, runs["after"])
	assert.Equal(t, 5, r.OK, "calls OK after bad inputs")
}

// TestLargeResourceListMemory sends one 64 MiB ResourceList through
// set-namespace with the message limit raised: the gateway and the
// binary-runner (binary executor) each peak under 3× the input, because
// neither holds it more than about twice (evalwire). The function's own
// memory is its process's, not counted here.
func TestLargeResourceListMemory(t *testing.T) {
	const size = 64 << 20
	data := load.SetNamespaceInput(size)
	limit := "--max-request-body-size=" + strconv.Itoa(96<<20)
	// The binary executor's process is bounded by what its call weighs;
	// a 64 MiB input weighs more than the default budget holds.
	s := stack.Start(t, stack.Options{GatewayArgs: []string{limit, "--disable-runtimes=go,pod"}, BinaryRunnerArgs: []string{limit, "--max-in-flight-bytes=" + strconv.Itoa(4<<30)}})
	// A small call first, so that connections and tables are in place.
	require.NoError(t, evaluate(s, "set-namespace:v0.4.5", stack.Input)(context.Background(), 0))
	pids := map[string]int{"gateway": pid(t, s, "gateway"), "binary-runner": pid(t, s, "binary-runner")}
	read, err := procstat.Peaks(pids)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	resp, err := s.Client().EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: "set-namespace:v0.4.5", ResourceList: data})
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(resp.GetResourceList()), len(data), "output bytes, want at least the input's")
	require.Contains(t, string(resp.GetResourceList()[:4096]), "namespace: bench", "output does not look like the namespaced input")
	got := read()
	for name := range pids {
		peak, ok := got[name]
		require.True(t, ok, "%s: peak RSS not readable", name)
		t.Logf("%s peak RSS %d MiB for a %d MiB input (%.2f×)", name, peak>>20, len(data)>>20, float64(peak)/float64(len(data)))
		assert.Less(t, peak, 3*int64(len(data)), "%s peaked at %d MiB, not under 3× the %d MiB input", name, peak>>20, len(data)>>20)
	}
}

// starlarkInput is a ResourceList whose functionConfig runs script.
func starlarkInput(script string) string {
	var b strings.Builder
	b.WriteString("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: x\n")
	b.WriteString("functionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: script\n  data:\n    source: |\n")
	for _, line := range strings.Split(script, "\n") {
		b.WriteString("      " + line + "\n")
	}
	return b.String()
}

// Hostile starlark scripts through the default route for starlark (the go
// executor's entry): unbounded recursion fails the call (the call-depth
// limit) and only the call,
// a script that never ends is stopped at the caller's deadline, and each is
// followed by ordinary calls (starlark's and the record function's, each
// run once) that succeed on a binary-runner that never stopped serving.
func TestHostileStarlark(t *testing.T) {
	writable, runs := records(t, "unbounded recursion", "a loop that never ends")
	s := stack.Start(t, stack.Options{Configs: map[string]string{"hostile.yaml": hostile(t)}, BinaryRunnerArgs: []string{writable}})
	runner := pid(t, s, "binary-runner")
	starlarkExe, err := filepath.EvalSymlinks(filepath.Join(s.FunctionsDir, "starlark"))
	require.NoError(t, err)
	for _, tc := range []struct {
		name, script string
		want         codes.Code
		deadline     time.Duration
	}{
		{"unbounded recursion", "def f(n):\n  return f(n + 1)\nf(0)", codes.Internal, time.Minute},
		{"a loop that never ends", "def spin():\n  for i in range(1 << 62):\n    pass\nspin()", codes.DeadlineExceeded, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ledger.Run(context.Background(), ledger.Options{Calls: 2, Concurrency: 1, Deadline: tc.deadline},
				evaluate(s, "starlark:v0.5.5", starlarkInput(tc.script)))
			ledger.Check(t, tc.name, r, tc.want)
			assert.Equal(t, 2, r.Codes[tc.want], "want %v for every call", tc.want)

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			require.NoError(t, s.WaitHealthy(ctx, "binary-runner"), "the binary-runner stopped serving")
			assert.Equal(t, runner, pid(t, s, "binary-runner"), "the binary-runner was restarted")
			recorded := func(i int) bool { return i%2 == 0 }
			r = ledger.Run(context.Background(), ledger.Options{Calls: 4, Concurrency: 2, Deadline: 20 * time.Second},
				func(ctx context.Context, i int) error {
					if recorded(i) {
						return record(s.Client(), runs[tc.name])(ctx, i)
					}
					return evaluate(s, "starlark:v0.5.5", starlarkInput("print('hello')"))(ctx, i)
				})
			ledger.Check(t, "ordinary calls after "+tc.name, r)
			ledger.CheckExecutionsOf(t, "ordinary calls after "+tc.name, r, runs[tc.name], recorded)
			require.Eventually(t, func() bool { return len(procstat.Running(starlarkExe)) == 0 }, harness.Wait, 20*time.Millisecond,
				"a starlark process outlived its call")
		})
	}
}

// Two binary-runners behind one gateway (--binary-runner-address lists both,
// as dns:/// gives a headless Service's pods): both get calls. One is then
// stopped (SIGSTOP: its connections stay open and nothing answers): the
// gateway gives up its connection when pings go unanswered (about 15 s); a
// call that had been sent to it fails Unavailable, never repeated, and every
// call after succeeds on the other within its deadline; no call runs twice,
// even once the stopped runner goes on.
func TestTwoBinaryRunnersShareTheLoad(t *testing.T) {
	// Each run of calls records its executions in a file of its own, which
	// every call's uid (the sandbox's uid layer) may write.
	writable, runs := records(t, "both", "one-stopped")
	s := stack.Start(t, stack.Options{Configs: map[string]string{"hostile.yaml": hostile(t)}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var addrs, metrics []string
	for i := range 2 {
		m, err := localstack.FreeAddress()
		require.NoError(t, err)
		name := fmt.Sprintf("binary-runner-%d", i+1)
		a, err := s.StartBinaryRunner(name, "--metrics-address="+m, writable, fmt.Sprintf("--sandbox-first-uid=%d", 3300000+i*10000))
		require.NoError(t, err)
		require.NoError(t, s.WaitHealthy(ctx, name))
		addrs, metrics = append(addrs, a), append(metrics, m)
	}
	gateway, err := s.StartGateway("gateway-2", nil, "--binary-runner-address="+strings.Join(addrs, ","))
	require.NoError(t, err)
	require.NoError(t, s.WaitHealthy(ctx, "gateway-2"))
	conn, err := grpc.NewClient(gateway, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	client := pb.NewFunctionEvaluatorClient(conn)
	handled := func(i int) float64 {
		return metric(metrics[i], `fnrunner_grpc_server_handled_total{code="OK",method="/evaluator.FunctionEvaluator/EvaluateFunction"}`)
	}
	r := ledger.Run(ctx, ledger.Options{Calls: 20, Concurrency: 2, Deadline: 30 * time.Second}, record(client, runs["both"]))
	ledger.Check(t, "two binary-runners", r)
	ledger.CheckExecutions(t, "two binary-runners", r, runs["both"])
	first := []float64{handled(0), handled(1)}
	t.Logf("calls handled by each binary-runner: %v", first)
	assert.Positive(t, first[0], "binary-runner-1 got no call")
	assert.Positive(t, first[1], "binary-runner-2 got no call")

	stopped, err := s.Pid("binary-runner-1")
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(stopped, syscall.SIGSTOP))
	defer syscall.Kill(stopped, syscall.SIGCONT)
	// One call at a time: only one can be on its way to the stopped runner
	// when the gateway gives its connection up.
	const calls = 6
	r = ledger.Run(ctx, ledger.Options{Calls: calls, Concurrency: 1, Deadline: 45 * time.Second}, record(client, runs["one-stopped"]))
	ledger.Check(t, "one binary-runner stopped", r, codes.Unavailable)
	assert.LessOrEqual(t, r.Codes[codes.Unavailable], 1, "calls Unavailable: only one can have gone to the stopped runner")
	assert.GreaterOrEqual(t, r.OK, calls-1, "calls OK with one binary-runner stopped")
	assert.Equal(t, first[1]+float64(r.OK), handled(1), "the OK calls went to binary-runner-2")
	if err := r.Errors[codes.Unavailable]; err != nil {
		assert.ErrorContains(t, err, "not repeated", "the call sent to the stopped runner")
	}
	// Once it goes on, the stopped runner may still run the call it had
	// been sent (the caller was told it may have run): once at most.
	require.NoError(t, syscall.Kill(stopped, syscall.SIGCONT))
	require.NoError(t, s.WaitHealthy(ctx, "binary-runner-1"))
	ledger.CheckExecutions(t, "one binary-runner stopped", r, runs["one-stopped"])
}

// A real Go runtime crash in the binary-runner's go executor, not a signal:
// the kernel refuses the memory that calls far heavier than their admission
// weight ask for (RLIMIT_AS set on the running process a little above what
// it has mapped, as a memory-limited host without overcommit would), and
// the runtime ends the process with "fatal error: out of memory".
// The calls in flight are answered Unavailable by the gateway, saying they
// were not repeated; the process ends rather than wedging; once restarted,
// it serves.
func TestGoRuntimeCrash(t *testing.T) {
	s := stack.Start(t, stack.Options{GatewayArgs: []string{"--disable-runtimes=binary,pod"},
		// Admission would keep these calls' memory within its bound.
		BinaryRunnerArgs: []string{"--max-in-flight-bytes=64000000000"}})
	runner := pid(t, s, "binary-runner")
	mapped, err := procstat.VirtualSize(runner)
	require.NoError(t, err)
	limit := uint64(mapped + 256<<20)
	require.NoError(t, unix.Prlimit(runner, unix.RLIMIT_AS, &unix.Rlimit{Cur: limit, Max: limit}, nil))

	const calls = 16 // about 50 MiB each at once: 800 MiB
	input := string(load.SetNamespaceInput(3 << 20))
	r := ledger.Run(context.Background(), ledger.Options{Calls: calls, Concurrency: calls, Deadline: 2 * time.Minute},
		evaluate(s, "set-namespace:v0.4.5", input))
	ctx, cancel := context.WithTimeout(context.Background(), harness.Wait)
	defer cancel()
	state, err := s.WaitExit(ctx, "binary-runner")
	require.NoError(t, err, "the binary-runner did not end (wedged?)")
	assert.Equal(t, 2, state.ExitCode(), "the runtime's exit code for a fatal error")
	log := s.Log("binary-runner")
	crashed := regexp.MustCompile(`fatal error: (out of memory|runtime: cannot allocate memory)`).MatchString(log)
	assert.True(t, crashed, "the runtime's crash is not in the binary-runner's log; its end:\n%s", log[max(0, len(log)-2000):])

	ledger.Check(t, "go runtime crash", r, codes.Unavailable)
	assert.Positive(t, r.Codes[codes.Unavailable], "calls in flight when the runtime crashed")
	if err := r.Errors[codes.Unavailable]; err != nil {
		// Sent and cut off, or (a call that reached the gateway as the
		// runner went) never sent: either way said, never repeated.
		assert.Regexp(t, "not repeated|not sent", status.Convert(err).Message(), "Unavailable does not say whether the call was repeated")
	}
	t.Logf("go runtime crash: %d of %d calls Unavailable, %d OK", r.Codes[codes.Unavailable], calls, r.OK)

	require.NoError(t, s.Restart("binary-runner"))
	require.NoError(t, s.WaitHealthy(ctx, "binary-runner"))
	after := ledger.Run(context.Background(), ledger.Options{Calls: 4, Concurrency: 2, Deadline: time.Minute},
		evaluate(s, "set-namespace:v0.4.5", string(load.SetNamespaceInput(2<<10))))
	ledger.Check(t, "after the restart", after)
	assert.Equal(t, 4, after.OK, "calls OK after the restart")
}

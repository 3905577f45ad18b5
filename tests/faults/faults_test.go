// Load and fault tests on loopback: the real gateway, config-reconciler and
// binary-runner (tests/stack), real and hostile functions. Every scenario
// accounts for each call it sends (tests/ledger): none may go unanswered or
// be answered twice, and every error must carry a clear status message.
// Nothing here asserts a duration.
package faults_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/fnrunner/fnrunner/protos/evaluator"
	"github.com/fnrunner/fnrunner/tests/ledger"
	"github.com/fnrunner/fnrunner/tests/stack"
	"github.com/fnrunner/fnrunner/tools/bench/load"
	"github.com/fnrunner/fnrunner/tools/procstat"
)

// hostile are FunctionConfigs for the test functions (tests/testfns).
const hostile = `apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata:
  name: hostile
spec:
  image: hang
  prefixes: [example.com/test]
  binaryExecutor:
    tags: [v1]
    path: hang
---
apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata:
  name: flood
spec:
  image: flood
  prefixes: [example.com/test]
  binaryExecutor:
    tags: [v1]
    path: flood
---
apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata:
  name: orphan
spec:
  image: orphan
  prefixes: [example.com/test]
  binaryExecutor:
    tags: [v1]
    path: orphan
---
apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata:
  name: traversal
spec:
  image: traversal
  prefixes: [example.com/test]
  binaryExecutor:
    tags: [v1]
    path: ../../../../bin/sh
`

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
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitFor polls cond (bounded: a hang fails the test, it does not time it).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i == 1500 {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
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

// 1,000 calls at once through the gateway: all answered, and the gateway's
// goroutines, open files and memory come back down afterwards.
func TestThousandConcurrentCalls(t *testing.T) {
	metrics := freeAddress(t)
	s := stack.Start(t, stack.Options{GatewayArgs: []string{"--metrics-address=" + metrics}})
	gw := pid(t, s, "gateway")
	// Warm up (connections, caches), then take the baseline.
	if r := ledger.Run(context.Background(), ledger.Options{Calls: 10, Concurrency: 2}, evaluate(s, "set-namespace:v0.4.5", stack.Input)); r.OK != 10 {
		t.Fatalf("warm-up: %v", r)
	}
	baseFiles, err := procstat.OpenFiles(gw)
	if err != nil {
		t.Fatal(err)
	}
	baseGoroutines, err := goroutines(metrics)
	if err != nil {
		t.Fatal(err)
	}

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
		evaluate(s, "set-namespace:v0.4.5", stack.Input))
	close(stop)
	<-sampled
	ledger.Check(t, "1000 concurrent", r)
	if r.OK != 1000 {
		t.Errorf("%d of 1000 calls OK", r.OK)
	}

	peakRSS, err := procstat.PeakRSS(gw)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gateway: goroutines %d at rest, %d at peak; peak RSS %d MiB; %d open files at rest",
		baseGoroutines, peakGoroutines.Load(), peakRSS>>20, baseFiles)
	// A few goroutines per call in flight at most, and nothing left behind.
	if p := peakGoroutines.Load(); p > int64(baseGoroutines+5*1000) {
		t.Errorf("gateway peaked at %d goroutines for 1000 calls (baseline %d)", p, baseGoroutines)
	}
	if peakRSS > 512<<20 {
		t.Errorf("gateway peak RSS %d MiB for 1000 small calls", peakRSS>>20)
	}
	waitFor(t, "gateway goroutines back to baseline", func() bool {
		n, err := goroutines(metrics)
		return err == nil && n <= baseGoroutines+20
	})
	waitFor(t, "gateway open files back to baseline", func() bool {
		n, err := procstat.OpenFiles(gw)
		return err == nil && n <= baseFiles+5
	})
}

// The binary-runner is killed with calls in flight and started again: calls
// sent to it when it died fail with Unavailable saying the function may
// have run; calls that arrive while it is down wait for it and succeed.
func TestBinaryRunnerKilledMidLoad(t *testing.T) {
	s := stack.Start(t, stack.Options{GatewayArgs: []string{"--disable-runtimes=go", "--executor-connect-timeout=1m"}})
	const calls, concurrency = 400, 8
	run := ledger.Background(context.Background(), ledger.Options{Calls: calls, Concurrency: concurrency, Deadline: 2 * time.Minute},
		evaluate(s, "set-namespace:v0.4.5", stack.Input))
	waitFor(t, "a quarter of the calls answered", func() bool { return run.Answered() >= calls/4 })
	if err := s.Kill("binary-runner"); err != nil {
		t.Fatal(err)
	}
	// Calls keep arriving at the gateway while the runner is down.
	time.Sleep(300 * time.Millisecond)
	if err := s.Restart("binary-runner"); err != nil {
		t.Fatal(err)
	}
	r := run.Wait()
	ledger.Check(t, "binary-runner killed", r, codes.Unavailable)
	if n := r.Codes[codes.Unavailable]; n > concurrency {
		t.Errorf("%d calls Unavailable; at most the %d in flight when the runner died may fail", n, concurrency)
	}
	if r.OK < calls-concurrency {
		t.Errorf("only %d of %d calls OK", r.OK, calls)
	}
	if err := r.Errors[codes.Unavailable]; err != nil && !strings.Contains(err.Error(), "not repeated") {
		t.Errorf("Unavailable does not say the call was not repeated: %v", err)
	}
}

// The gateway starts while the config-reconciler is down: it is not ready
// and answers Unavailable; when the reconciler appears, it becomes ready.
func TestConfigReconcilerDownAtGatewayStart(t *testing.T) {
	s := stack.Start(t, stack.Options{})
	for _, svc := range []string{"config-reconciler", "gateway"} {
		if err := s.Kill(svc); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Restart("gateway"); err != nil {
		t.Fatal(err)
	}
	// The gateway answers but is not ready, and says why.
	client := s.Client()
	waitFor(t, "the gateway to answer", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := client.EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: "set-namespace:v0.4.5", ResourceList: []byte(stack.Input)})
		return strings.Contains(status.Convert(err).Message(), "executor table")
	})
	r := ledger.Run(context.Background(), ledger.Options{Calls: 20, Concurrency: 4, Deadline: 10 * time.Second},
		evaluate(s, "set-namespace:v0.4.5", stack.Input))
	ledger.Check(t, "no config-reconciler", r, codes.Unavailable)
	if r.OK != 0 {
		t.Errorf("%d calls OK without an executor table", r.OK)
	}
	if err := r.Errors[codes.Unavailable]; err != nil && !strings.Contains(err.Error(), "config-reconciler") {
		t.Errorf("Unavailable does not point at the config-reconciler: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.WaitServing(ctx); err == nil {
		t.Error("gateway SERVING without an executor table")
	}
	if err := s.Restart("config-reconciler"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := s.WaitServing(ctx); err != nil {
		t.Fatalf("gateway not SERVING once the config-reconciler is up: %v", err)
	}
	r = ledger.Run(context.Background(), ledger.Options{Calls: 20, Concurrency: 4}, evaluate(s, "set-namespace:v0.4.5", stack.Input))
	ledger.Check(t, "config-reconciler back", r)
}

// Hostile functions, called together with well-behaved ones: a function that
// hangs is killed at the deadline, one that floods stdout is cut off at the
// message limit, one that leaves children behind loses them; ordinary calls
// are unaffected and the runner's memory stays bounded.
func TestHostileFunctions(t *testing.T) {
	s := stack.Start(t, stack.Options{Configs: map[string]string{"hostile.yaml": hostile}})
	runner := pid(t, s, "binary-runner")
	if err := procstat.ResetPeak(runner); err != nil {
		t.Fatal(err)
	}
	images := []string{"example.com/test/hang:v1", "example.com/test/flood:v1", "example.com/test/orphan:v1", "set-namespace:v0.4.5"}
	want := []codes.Code{codes.DeadlineExceeded, codes.ResourceExhausted, codes.OK, codes.OK}
	got := make([]atomic.Int32, len(images))
	client := s.Client()
	r := ledger.Run(context.Background(), ledger.Options{Calls: 40, Concurrency: 8, Deadline: 3 * time.Second},
		func(ctx context.Context, i int) error {
			k := i % len(images)
			_, err := client.EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: images[k], ResourceList: []byte(stack.Input)})
			if status.Code(err) == want[k] {
				got[k].Add(1)
			}
			return err
		})
	ledger.Check(t, "hostile functions", r, codes.DeadlineExceeded, codes.ResourceExhausted)
	for k, image := range images {
		if n := got[k].Load(); n != 10 {
			t.Errorf("%s: %d of 10 calls answered %v", image, n, want[k])
		}
	}
	peak, err := procstat.PeakRSS(runner)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("binary-runner peak RSS %d MiB with 1 GiB floods", peak>>20)
	if peak > 256<<20 {
		t.Errorf("binary-runner peak RSS %d MiB: a flooding function's output is not capped", peak>>20)
	}
	for _, fn := range []string{"hang", "orphan"} {
		exe, err := filepath.EvalSymlinks(filepath.Join(s.FunctionsDir, fn))
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, fn+"'s processes gone", func() bool { return len(procstat.Running(exe)) == 0 })
	}
}

// Bad requests and a bad FunctionConfig each get a clear error, and the
// gateway keeps serving.
func TestBadInputs(t *testing.T) {
	s := stack.Start(t, stack.Options{Configs: map[string]string{"hostile.yaml": hostile}})
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
			if r.Codes[tc.want] != 3 {
				t.Errorf("want %v for every call", tc.want)
			}
		})
	}
	if !strings.Contains(s.Logs(), "spec.binaryExecutor.path") {
		t.Errorf("the config-reconciler does not say why it refused the traversal FunctionConfig:\n%s", s.Logs())
	}
	r := ledger.Run(context.Background(), ledger.Options{Calls: 5}, evaluate(s, "set-namespace:v0.4.5", stack.Input))
	ledger.Check(t, "after bad inputs", r)
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
	s := stack.Start(t, stack.Options{GatewayArgs: []string{limit, "--disable-runtimes=go,pod"}, BinaryRunnerArgs: []string{limit}})
	// A small call first, so that connections and tables are in place.
	if err := evaluate(s, "set-namespace:v0.4.5", stack.Input)(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	pids := map[string]int{"gateway": pid(t, s, "gateway"), "binary-runner": pid(t, s, "binary-runner")}
	read, err := procstat.Peaks(pids)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	resp, err := s.Client().EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: "set-namespace:v0.4.5", ResourceList: data})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.GetResourceList()); n < len(data) || !strings.Contains(string(resp.GetResourceList()[:4096]), "namespace: bench") {
		t.Fatalf("output of %d bytes does not look like the namespaced input", n)
	}
	got := read()
	for name := range pids {
		peak, ok := got[name]
		if !ok {
			t.Fatalf("%s: peak RSS not readable", name)
		}
		t.Logf("%s peak RSS %d MiB for a %d MiB input (%.2f×)", name, peak>>20, len(data)>>20, float64(peak)/float64(len(data)))
		if peak >= 3*int64(len(data)) {
			t.Errorf("%s peaked at %d MiB, not under 3× the %d MiB input", name, peak>>20, len(data)>>20)
		}
	}
}

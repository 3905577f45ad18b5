package pods_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fnrunner/fnrunner/libs/sandbox"
	"github.com/fnrunner/fnrunner/libs/sandbox/spec"
	pb "github.com/fnrunner/fnrunner/protos/evaluator"
	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tests/stack"
	"github.com/fnrunner/fnrunner/tools/bench/load"
	"github.com/fnrunner/fnrunner/tools/bench/report"
	"github.com/fnrunner/fnrunner/tools/procstat"
)

var (
	benchOut       = flag.String("bench-out", "", "Directory for BenchmarkMatrix's table (matrix.md) and charts (*.png); empty: print the table only.")
	benchScale     = flag.Float64("bench-scale", 1, "Multiplies the number of calls of each BenchmarkMatrix scenario.")
	benchExecutors = flag.String("bench-executors", "bare,go,binary,sandbox,pod", `BenchmarkMatrix's executors, comma-separated: "bare" (exec of the binary), "go", "binary" (--sandbox=none), "sandbox" (the binary executor in each sandbox layer set this machine allows) and "pod" (warm and cold).`)
)

// sandboxLayerSets are the binary executor's rows beside "binary"
// (--sandbox=none): each layer set adds one layer to the one before.
var sandboxLayerSets = []string{"base", "base,landlock", "base,landlock,uid", "base,landlock,uid,userns", "base,landlock,uid,userns,cgroup"}

type benchFunction struct {
	name, image, env, entrypoint string
	input                        func(size int) []byte
}

var benchFunctions = []benchFunction{
	{"set-namespace", "set-namespace:v0.4.5", "FNRUNNER_SET_NAMESPACE", "/fn/set-namespace", load.SetNamespaceInput},
	{"starlark", "starlark:v0.5.5", "FNRUNNER_STARLARK", "/fn/starlark", load.StarlarkInput},
	{"set-labels", "set-labels:v0.2.1", "FNRUNNER_SET_LABELS", "/fn/set-labels", load.SetLabelsInput},
}

var benchInputs = []struct {
	name string
	size int
}{{"2 KiB", 2 << 10}, {"3 MiB", 3 << 20}}

var benchConcurrency = []int{1, 8, 64}

// calls is how many calls a scenario makes.
func calls(size, concurrency int) int {
	n := 4 * concurrency
	if size > 1<<20 {
		n = concurrency
	}
	return max(int(float64(max(n, 12))**benchScale), concurrency, 1)
}

// peaks is procstat.Peaks for a benchmark.
func peaks(b *testing.B, pids map[string]int) func() map[string]int64 {
	read, err := procstat.Peaks(pids)
	if err != nil {
		b.Fatal(err)
	}
	return read
}

func dialLarge(b *testing.B, address string) pb.FunctionEvaluatorClient {
	conn, err := grpc.NewClient(address, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20), grpc.MaxCallSendMsgSize(256<<20)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return pb.NewFunctionEvaluatorClient(conn)
}

// BenchmarkMatrix measures set-namespace, starlark and set-labels on small and 3 MiB
// inputs through every executor (go, binary with --sandbox=none, binary in
// each sandbox layer set, pod warm, pod cold; -bench-executors picks some) at
// 1, 8 and 64 calls in flight, next to a bare exec of the same binary. It
// prints a markdown table and, with -bench-out, writes it and a chart per
// scenario. It asserts nothing. Run it with tools/bazel run
// //tools/bench:matrix.
func BenchmarkMatrix(b *testing.B) {
	ctx := context.Background()
	var rows []report.Row
	// Each row as it is measured, on stdout: a benchmark's log (b.Logf)
	// keeps only its first lines, and the first errors of the later rows
	// were lost there.
	add := func(r report.Row) {
		rows = append(rows, r)
		fmt.Printf("%s %s %s c=%d: %v\n", r.Function, r.Input, r.Executor, r.Concurrency, r.Stats)
		if r.Stats.FirstError != nil {
			fmt.Printf("  first error: %v\n", r.Stats.FirstError)
		}
	}
	inputs := map[string]map[string][]byte{}
	for _, fn := range benchFunctions {
		inputs[fn.name] = map[string][]byte{}
		for _, in := range benchInputs {
			inputs[fn.name][in.name] = fn.input(in.size)
		}
	}

	executors := map[string]bool{}
	for _, ex := range strings.Split(*benchExecutors, ",") {
		executors[strings.TrimSpace(ex)] = true
	}

	// The floor: the function binary, exec'd directly.
	for _, fn := range benchFunctions {
		if !executors["bare"] {
			break
		}
		bin := harness.Binary(b, fn.env)
		for _, in := range benchInputs {
			data := inputs[fn.name][in.name]
			for _, c := range benchConcurrency {
				s := load.Run(ctx, calls(in.size, c), c, func(context.Context) error {
					cmd := exec.Command(bin)
					cmd.Stdin, cmd.Stdout = bytes.NewReader(data), io.Discard
					return cmd.Run()
				})
				add(report.Row{Input: in.name, Function: fn.name, Executor: "bare exec", Concurrency: c, Stats: s})
			}
		}
	}

	// go, binary and the binary executor in each sandbox layer set: the
	// loopback stack, one executor at a time.
	type stackExecutor struct {
		name, disable, sandbox string
	}
	var stackExecutors []stackExecutor
	if executors["go"] {
		stackExecutors = append(stackExecutors, stackExecutor{"go", "binary,pod", "auto"})
	}
	if executors["binary"] {
		stackExecutors = append(stackExecutors, stackExecutor{"binary", "go,pod", "none"})
	}
	if executors["sandbox"] {
		found, err := sandbox.Probe(ctx, harness.Binary(b, "FNRUNNER_FNSANDBOX"))
		if err != nil {
			b.Fatalf("sandbox probe: %v", err)
		}
		for _, set := range sandboxLayerSets {
			if missing := missingLayers(found, set); missing != "" {
				b.Logf("no binary (%s) rows: %s", set, missing)
				continue
			}
			stackExecutors = append(stackExecutors, stackExecutor{"binary (" + set + ")", "go,pod", set})
		}
	}
	for _, ex := range stackExecutors {
		s := stack.Start(b, stack.Options{GatewayArgs: []string{"--disable-runtimes=" + ex.disable}, BinaryRunnerArgs: []string{"--sandbox=" + ex.sandbox}})
		pids := map[string]int{}
		for _, svc := range []string{"gateway", "config-reconciler", "binary-runner"} {
			if pids[svc], _ = s.Pid(svc); pids[svc] == 0 {
				b.Fatalf("no pid for %s", svc)
			}
		}
		client := dialLarge(b, s.GatewayAddress)
		for _, fn := range benchFunctions {
			for _, in := range benchInputs {
				call := load.Evaluate(client, fn.image, inputs[fn.name][in.name], 5*time.Minute)
				load.Run(ctx, 3, 1, call) // warm
				for _, c := range benchConcurrency {
					read := peaks(b, pids)
					st := load.Run(ctx, calls(in.size, c), c, call)
					add(report.Row{Input: in.name, Function: fn.name, Executor: ex.name, Concurrency: c, Stats: st, PeakRSS: read()})
				}
			}
		}
		if err := s.Stop(30 * time.Second); err != nil {
			b.Error(err)
		}
	}

	if executors["pod"] {
		podRows(ctx, b, inputs, add)
	}

	// Group the rows by scenario for the table and the charts.
	// Group the rows by scenario for the table and the charts.
	var ordered []report.Row
	for _, fn := range benchFunctions {
		for _, in := range benchInputs {
			for _, r := range rows {
				if r.Function == fn.name && r.Input == in.name {
					ordered = append(ordered, r)
				}
			}
		}
	}
	var table strings.Builder
	fmt.Fprintf(&table, "Measured %s on %s; calls per row as the n column says.\n\n", time.Now().UTC().Format("2006-01-02"), report.Machine())
	if err := report.Markdown(&table, ordered); err != nil {
		b.Fatal(err)
	}
	fmt.Println(table.String())
	if *benchOut != "" {
		if err := os.MkdirAll(*benchOut, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(*benchOut, "matrix.md"), []byte(table.String()), 0o644); err != nil {
			b.Fatal(err)
		}
		files, err := report.Charts(*benchOut, ordered)
		if err != nil {
			b.Fatal(err)
		}
		fmt.Printf("wrote %s and %d charts to %s\n", "matrix.md", len(files), *benchOut)
	}
}

// missingLayers says which of set's layers the probe found missing, and
// why ("" when none is).
func missingLayers(found spec.Report, set string) string {
	var missing []string
	for _, layer := range strings.Split(set, ",") {
		for _, f := range found {
			if f.Layer == layer && !f.Available {
				missing = append(missing, layer+": "+f.Detail)
			}
		}
	}
	return strings.Join(missing, "; ")
}

// podRows adds the pod warm and pod cold rows: envtest, the test kubelet,
// images in a registry.
func podRows(ctx context.Context, b *testing.B, inputs map[string]map[string][]byte, add func(report.Row)) {
	f := start(b)
	pids := map[string]int{}
	for _, svc := range []string{"gateway", "pod-manager"} {
		if pids[svc], _ = f.stack.Pid(svc); pids[svc] == 0 {
			b.Fatalf("no pid for %s", svc)
		}
	}
	client := f.gateway
	for _, fn := range benchFunctions {
		warmImage := f.host + "/fns/bench-" + fn.name + ":warm"
		f.registry.Push(b, warmImage, v1.Config{Entrypoint: []string{fn.entrypoint}})
		for _, in := range benchInputs {
			data := inputs[fn.name][in.name]
			for _, c := range benchConcurrency {
				// Warm: the pods exist; the first round starts them.
				call := load.Evaluate(client, warmImage, data, 5*time.Minute)
				load.Run(ctx, c, c, call)
				read := peaks(b, pids)
				st := load.Run(ctx, calls(in.size, c), c, call)
				add(report.Row{Input: in.name, Function: fn.name, Executor: "pod warm", Concurrency: c, Stats: st, PeakRSS: read()})

				// Cold: every call an image no pod runs yet.
				n := max(c, 3)
				images := make(chan string, n)
				for i := 0; i < n; i++ {
					image := fmt.Sprintf("%s/fns/bench-%s:cold-%d-%d", f.host, fn.name, in.size, c*1000+i)
					f.registry.Push(b, image, v1.Config{Entrypoint: []string{fn.entrypoint}})
					images <- image
				}
				read = peaks(b, pids)
				st = load.Run(ctx, n, c, func(ctx context.Context) error { return load.Evaluate(client, <-images, data, 5*time.Minute)(ctx) })
				add(report.Row{Input: in.name, Function: fn.name, Executor: "pod cold", Concurrency: c, Stats: st, PeakRSS: read()})
			}
		}
	}
}

// BenchmarkMemory prints the peak RSS of the gateway and the binary-runner
// while one 64 MiB ResourceList goes through set-namespace, with the message
// limit raised to 96 MiB (tests/faults asserts the gateway and binary-runner
// stay under 3x), and next to it the function exec'd on its own. It asserts nothing.
// Run it with tools/bazel run //tools/bench:memory.
func BenchmarkMemory(b *testing.B) {
	const size = 64 << 20
	data := load.SetNamespaceInput(size)
	limit := "--max-request-body-size=" + strconv.Itoa(96<<20)
	var table strings.Builder
	fmt.Fprintf(&table, "One %s ResourceList through set-namespace (limit raised to 96 MiB); peak RSS during the call, measured %s on %s.\n\n",
		report.MiB(int64(len(data))), time.Now().UTC().Format("2006-01-02"), report.Machine())
	table.WriteString("| executor | gateway peak RSS | × input | binary-runner peak RSS | × input |\n|---|---|---|---|---|\n")
	for _, ex := range []struct{ name, disable string }{{"go", "binary,pod"}, {"binary", "go,pod"}} {
		s := stack.Start(b, stack.Options{GatewayArgs: []string{limit, "--disable-runtimes=" + ex.disable}, BinaryRunnerArgs: []string{limit}})
		pids := map[string]int{}
		for _, svc := range []string{"gateway", "binary-runner"} {
			pids[svc], _ = s.Pid(svc)
		}
		client := dialLarge(b, s.GatewayAddress)
		read := peaks(b, pids)
		if err := load.Evaluate(client, "set-namespace:v0.4.5", data, 5*time.Minute)(context.Background()); err != nil {
			b.Fatalf("%s: %v", ex.name, err)
		}
		p := read()
		ratio := func(n int64) string { return fmt.Sprintf("%.2f", float64(n)/float64(len(data))) }
		fmt.Fprintf(&table, "| %s | %s | %s | %s | %s |\n", ex.name, report.MiB(p["gateway"]), ratio(p["gateway"]), report.MiB(p["binary-runner"]), ratio(p["binary-runner"]))
		if err := s.Stop(30 * time.Second); err != nil {
			b.Error(err)
		}
	}
	// The function on its own: what the go executor takes into the
	// binary-runner's process, and the binary executor leaves in the
	// function's.
	cmd := exec.Command(harness.Binary(b, "FNRUNNER_SET_NAMESPACE"))
	cmd.Stdin, cmd.Stdout = bytes.NewReader(data), io.Discard
	if err := cmd.Run(); err != nil {
		b.Fatalf("set-namespace on its own: %v", err)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		own := ru.Maxrss << 10 // KiB on Linux
		fmt.Fprintf(&table, "\nset-namespace exec'd on its own on the same input peaks at %s (%.2f× input): the go executor runs the function inside the binary-runner, so its row carries the function's own YAML tree; with the binary executor that memory is the function process's, and the binary-runner's row is its own.\n",
			report.MiB(own), float64(own)/float64(len(data)))
	}
	fmt.Println(table.String())
	if *benchOut != "" {
		if err := os.MkdirAll(*benchOut, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(*benchOut, "memory.md"), []byte(table.String()), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

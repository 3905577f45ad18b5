// bench path: the binary executor's call hop by hop.

package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/fnrunner/fnrunner/libs/executortable"
	"github.com/fnrunner/fnrunner/libs/fnexec"
	pb "github.com/fnrunner/fnrunner/protos/evaluator"
	"github.com/fnrunner/fnrunner/tools/bench/load"
	"github.com/fnrunner/fnrunner/tools/localstack"
	"github.com/fnrunner/fnrunner/tools/procstat"
)

// pathImage is the function bench path calls.
const pathImage = "set-namespace:v0.4.5"

// pathCmd breaks the binary executor's path down hop by hop: the same 2 KB
// set-namespace call as a bare exec, through fnexec in this process, sent
// to a binary-runner directly, and through a gateway in front of it, for
// --sandbox=none and the always-on layers, beside the go executor direct and
// through its gateway. The rows are interleaved and paired, so each
// difference between two rows is what that hop or that work adds.
func pathCmd(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("bench path", flag.ContinueOnError)
	var flags stackFlags
	flags.register(fs)
	n := fs.Int("n", 400, "Rounds; a round is one call of each row.")
	size := fs.Int("size", 2<<10, "Input size in bytes.")
	layers := fs.String("layers", "base,landlock,uid", "The sandbox layer set compared with --sandbox=none.")
	idle := fs.Duration("idle", 20*time.Second, "How long the services' idle CPU is read, before the rounds.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	functionsDir, err := flags.resolve("path")
	if err != nil {
		return err
	}
	defer os.RemoveAll(functionsDir)
	input := load.SetNamespaceInput(*size)
	var done cleanups
	defer done.run()

	var rows pathRows
	if err := rows.addLocal(&flags, input, &done); err != nil {
		return err
	}
	stacks, err := rows.addStacks(ctx, &flags, functionsDir, *layers, input, &done)
	if err != nil {
		return err
	}
	for _, c := range rows.calls {
		_ = load.Run(ctx, 3, 1, c) // warm connections, caches and helpers
	}
	idleCPU, err := readIdleCPU(stacks, *idle)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "set-namespace v0.4.5 on %d bytes, %d interleaved rounds, one call at a time;\n"+
		"paired = the median over rounds of (this call - the bare exec's in the same round)\n\n", len(input), *n)
	fmt.Fprintf(out, "| row | n | errors | p50 | p90 | paired over bare exec |\n|---|---|---|---|---|---|\n")
	results, busyCPU, err := runRounds(ctx, stacks, *n, rows.calls)
	if err != nil {
		return err
	}
	round := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	for i, s := range results {
		fmt.Fprintf(out, "| %s | %d | %d | %v | %v | %v |\n", rows.names[i], s.Calls, s.Errors, round(s.P50), round(s.P90), round(s.PairedP50))
		if s.FirstError != nil {
			fmt.Fprintf(out, "  first error: %v\n", s.FirstError)
		}
	}
	printPathCPU(out, stacks, idleCPU, busyCPU, *n)
	return nil
}

// pathRows are bench path's rows, in order: their names and calls.
type pathRows struct {
	names []string
	calls []load.Call
}

// addLocal adds the rows that start no fnrunner service: the bare exec,
// fnexec in this process, and the floor of the two hops, a bare exec
// behind plain gRPC servers. What they hold is released when done runs.
func (r *pathRows) addLocal(flags *stackFlags, input []byte, done *cleanups) error {
	// fnexec as the binary-runner calls it: private directories made ahead.
	dirs, err := fnexec.NewDirs("")
	if err != nil {
		return err
	}
	done.add(dirs.Close)
	r.names = []string{"bare exec (os/exec)", "fnexec --sandbox=none, in the bench's process"}
	r.calls = []load.Call{bareExec(input, flags.setNamespace), func(ctx context.Context) error {
		_, err := fnexec.Run(ctx, []string{flags.setNamespace}, bytes.NewReader(input), fnexec.Options{Dirs: dirs})
		return err
	}}
	// The floor of the two hops: a bare exec behind plain gRPC servers.
	execAddr, stopExec, err := startFloor("floor-exec", "-binary", flags.setNamespace)
	if err != nil {
		return err
	}
	done.add(stopExec)
	proxyAddr, stopProxy, err := startFloor("floor-proxy", "-target", execAddr)
	if err != nil {
		return err
	}
	done.add(stopProxy)
	for _, f := range []struct{ name, address string }{
		{"bare exec behind a plain gRPC server (one hop, no fnrunner code)", execAddr},
		{"bare exec behind a plain gRPC proxy and server (two hops, no fnrunner code)", proxyAddr},
	} {
		conn, err := dial(f.address)
		if err != nil {
			return err
		}
		done.add(func() { conn.Close() })
		r.names = append(r.names, f.name)
		r.calls = append(r.calls, load.Evaluate(pb.NewFunctionEvaluatorClient(conn), pathImage, input, time.Minute))
	}
	return nil
}

// stackCPU names a stack and the pids of its services, whose CPU time is
// read.
type stackCPU struct {
	label string
	pids  map[string]int
}

// addStacks starts one stack per executor and layer set, each started once
// and idle but for its own rows' calls, and adds two rows for each: its
// binary-runner called directly, and its gateway. The stacks stay up until
// done runs.
func (r *pathRows) addStacks(ctx context.Context, flags *stackFlags, functionsDir, layers string, input []byte, done *cleanups) ([]stackCPU, error) {
	var stacks []stackCPU
	services := []string{"gateway", "binary-runner", "config-reconciler"}
	for _, st := range []struct {
		executor, disable, sandbox string
	}{
		{"binary", "go,pod", "none"},
		{"binary", "go,pod", layers},
		{"go", "binary,pod", "none"},
	} {
		s, err := localstack.Start(localstack.Config{Binaries: flags.bins, ConfigDir: flags.configDir, FunctionsDir: functionsDir,
			GatewayArgs:      []string{"--disable-runtimes=" + st.disable},
			BinaryRunnerArgs: []string{"--sandbox=" + st.sandbox}})
		if err == nil {
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			err = s.WaitServing(wctx)
			cancel()
		}
		done.add(func() { s.Stop(30 * time.Second) })
		if err != nil {
			return nil, err
		}
		gw, err := dial(s.GatewayAddress)
		if err != nil {
			return nil, err
		}
		done.add(func() { gw.Close() })
		runner, err := dial(s.BinaryRunnerAddress)
		if err != nil {
			return nil, err
		}
		done.add(func() { runner.Close() })
		direct := load.Evaluate(pb.NewFunctionEvaluatorClient(runner), pathImage, input, time.Minute)
		executor := st.executor
		label := st.executor + " executor"
		if st.executor == "binary" {
			label += ", --sandbox=" + st.sandbox
		}
		pids := map[string]int{}
		for _, name := range services {
			if pids[name], err = s.Pid(name); err != nil {
				return nil, err
			}
		}
		stacks = append(stacks, stackCPU{label: label, pids: pids})
		r.names = append(r.names, label+", binary-runner called directly", label+", through the gateway")
		r.calls = append(r.calls, func(ctx context.Context) error {
			// As the gateway sends it: the executor named.
			return direct(metadata.AppendToOutgoingContext(ctx, executortable.Header, executor))
		}, load.Evaluate(pb.NewFunctionEvaluatorClient(gw), pathImage, input, time.Minute))
	}
	return stacks, nil
}

// cpuTimes are every stack's services' CPU times, by stack and service.
type cpuTimes []map[string]time.Duration

// readCPU reads every service's CPU time; one that cannot be read (a
// service gone) ends the bench rather than print a wrong figure.
func readCPU(stacks []stackCPU) (cpuTimes, error) {
	out := make(cpuTimes, len(stacks))
	for i, st := range stacks {
		out[i] = map[string]time.Duration{}
		for name, pid := range st.pids {
			d, err := procstat.CPUTime(pid)
			if err != nil {
				return nil, fmt.Errorf("%s of %s: %w", name, st.label, err)
			}
			out[i][name] = d
		}
	}
	return out, nil
}

// cpuSpan is the services' CPU times at the start and the end of a span
// of wall time.
type cpuSpan struct {
	start, end cpuTimes
	wall       time.Duration
}

// used is what the service name of stack i used over the span.
func (s cpuSpan) used(i int, name string) time.Duration { return s.end[i][name] - s.start[i][name] }

// readIdleCPU reads the services' CPU time over idle, no call made.
func readIdleCPU(stacks []stackCPU, idle time.Duration) (cpuSpan, error) {
	var span cpuSpan
	var err error
	if span.start, err = readCPU(stacks); err != nil {
		return span, err
	}
	t0 := time.Now()
	time.Sleep(idle)
	span.wall = time.Since(t0)
	span.end, err = readCPU(stacks)
	return span, err
}

// runRounds runs n interleaved rounds of calls and reads the services' CPU
// time around them.
func runRounds(ctx context.Context, stacks []stackCPU, n int, calls []load.Call) ([]load.Stats, cpuSpan, error) {
	var span cpuSpan
	var err error
	if span.start, err = readCPU(stacks); err != nil {
		return nil, span, err
	}
	t1 := time.Now()
	results := load.Interleaved(ctx, n, calls)
	span.wall = time.Since(t1)
	if span.end, err = readCPU(stacks); err != nil {
		return nil, span, err
	}
	return results, span, nil
}

// printPathCPU prints each stack's services' CPU time, idle and per call
// of n rounds.
func printPathCPU(out io.Writer, stacks []stackCPU, idle, busy cpuSpan, n int) {
	// A stack's gateway answers one call a round, its binary-runner two
	// (called directly, and through the gateway). What a service uses
	// idle (health checks, the table's stream) goes on during the rounds:
	// its idle rate is taken off.
	fmt.Fprintf(out, "\nCPU time of each stack's services (utime + stime, 10 ms ticks): idle over %v, in millicores;\n"+
		"during the rounds, per call the service answered, its idle rate over the rounds' %v taken off\n\n", idle.wall.Round(time.Second), busy.wall.Round(time.Second))
	fmt.Fprintf(out, "| stack | gateway idle | binary-runner idle | config-reconciler idle | gateway per call | binary-runner per call |\n|---|---|---|---|---|---|\n")
	round := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	millicores := func(d time.Duration) string { return fmt.Sprintf("%.1fm", 1000*d.Seconds()/idle.wall.Seconds()) }
	for i, st := range stacks {
		idleOf := func(name string) time.Duration { return idle.used(i, name) }
		perCall := func(name string, calls int) time.Duration {
			used := busy.used(i, name) - time.Duration(float64(idleOf(name))*busy.wall.Seconds()/idle.wall.Seconds())
			return used / time.Duration(calls)
		}
		fmt.Fprintf(out, "| %s | %s | %s | %s | %v | %v |\n", st.label,
			millicores(idleOf("gateway")), millicores(idleOf("binary-runner")), millicores(idleOf("config-reconciler")),
			round(perCall("gateway", n)), round(perCall("binary-runner", 2*n)))
	}
}

// bench catalog: set-namespace through each executor and sandbox layer set.

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	pb "github.com/fnrunner/fnrunner/protos/evaluator"
	"github.com/fnrunner/fnrunner/tests/tracesink"
	"github.com/fnrunner/fnrunner/tools/bench/load"
	"github.com/fnrunner/fnrunner/tools/localstack"
)

func catalogCmd(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("bench catalog", flag.ContinueOnError)
	var st stackFlags
	st.register(fs)
	smallN := fs.Int("small-n", 300, "Calls per small-input scenario.")
	largeN := fs.Int("large-n", 20, "Calls per 3 MB scenario.")
	pause := fs.Duration("pause", 50*time.Millisecond, "The pause between calls of the paced rows (not counted).")
	if err := fs.Parse(args); err != nil {
		return err
	}
	functionsDir, err := st.resolve("catalog")
	if err != nil {
		return err
	}
	defer os.RemoveAll(functionsDir)
	var done cleanups
	defer done.run()

	inputs := []struct {
		name string
		data []byte
		n    int
	}{
		{"small (2 KB)", load.SetNamespaceInput(2 << 10), *smallN},
		{"large (3 MB)", load.SetNamespaceInput(3 << 20), *largeN},
	}
	var rows []catalogRow
	for _, in := range inputs {
		bareCall := bareExec(in.data, st.setNamespace)
		rows = append(rows, catalogRow{in.name + ", bare exec", load.Run(ctx, in.n, 1, bareCall)})
		rows = append(rows, catalogRow{fmt.Sprintf("%s, bare exec, %v between calls", in.name, *pause), load.Paced(ctx, in.n, *pause, bareCall)})
		for _, ex := range catalogExecutors() {
			if ex.paced {
				ex.name += fmt.Sprintf(", %v between calls", *pause)
			}
			stats, err := catalogRun(ctx, &st, functionsDir, ex, in.data, in.n, *pause, &done)
			if err != nil {
				return err
			}
			rows = append(rows, catalogRow{in.name + ", " + ex.name, stats})
		}
	}
	printCatalog(out, rows)
	return nil
}

// catalogRow is one scenario's calls.
type catalogRow struct {
	scenario string
	stats    load.Stats
}

// catalogExecutor is a scenario's stack: the executor its gateway leaves
// on, and the binary-runner's sandbox.
type catalogExecutor struct {
	name, disable, sandbox string
	extra                  []string
	paced                  bool
}

// catalogExecutors are the scenarios run on each input: the go executor,
// and the binary executor once per sandbox layer set (libs/sandbox).
func catalogExecutors() []catalogExecutor {
	const prestarted = "--sandbox-prestarted-functions=4"
	return []catalogExecutor{
		{name: "go executor", disable: "binary,pod", sandbox: "none"},
		{name: "go executor, tracing on (OTLP to a receiver)", disable: "binary,pod", sandbox: "none"},
		{name: "binary executor, --sandbox=none", disable: "go,pod", sandbox: "none"},
		{name: "binary executor, --sandbox=base", disable: "go,pod", sandbox: "base"},
		{name: "binary executor, --sandbox=base,landlock", disable: "go,pod", sandbox: "base,landlock"},
		{name: "binary executor, --sandbox=base,landlock,uid", disable: "go,pod", sandbox: "base,landlock,uid"},
		{name: "binary executor, --sandbox=base,landlock,uid,userns", disable: "go,pod", sandbox: "base,landlock,uid,userns"},
		{name: "binary executor, --sandbox=base,landlock,uid,userns,cgroup", disable: "go,pod", sandbox: "base,landlock,uid,userns,cgroup"},
		{name: "binary executor, --sandbox=none", disable: "go,pod", sandbox: "none", paced: true},
		{name: "binary executor, --sandbox=base " + prestarted, disable: "go,pod", sandbox: "base", extra: []string{prestarted}},
		{name: "binary executor, --sandbox=base " + prestarted, disable: "go,pod", sandbox: "base", extra: []string{prestarted}, paced: true},
		{name: "binary executor, --sandbox=base,landlock,uid " + prestarted, disable: "go,pod", sandbox: "base,landlock,uid", extra: []string{prestarted}, paced: true},
		{name: "binary executor, --sandbox=base,landlock,uid,userns,cgroup " + prestarted, disable: "go,pod", sandbox: "base,landlock,uid,userns,cgroup", extra: []string{prestarted}, paced: true},
	}
}

// catalogRun starts a stack for ex, makes n calls of set-namespace on data
// through its gateway (paced by pause for a paced scenario), and stops it.
// A trace receiver it starts stays until done runs.
func catalogRun(ctx context.Context, st *stackFlags, functionsDir string, ex catalogExecutor, data []byte, n int, pause time.Duration, done *cleanups) (load.Stats, error) {
	// With tracing on, the services export every span to a
	// receiver here, as OTEL_* variables configure them in a
	// cluster (they take the environment at start).
	var traceEnv map[string]string
	if strings.Contains(ex.name, "tracing on") {
		sink, err := tracesink.New()
		if err != nil {
			return load.Stats{}, err
		}
		done.add(sink.Close)
		traceEnv = sink.Env()
	}
	for k, v := range traceEnv {
		os.Setenv(k, v)
	}
	s, err := localstack.Start(localstack.Config{Binaries: st.bins, ConfigDir: st.configDir, FunctionsDir: functionsDir,
		GatewayArgs:      []string{"--disable-runtimes=" + ex.disable},
		BinaryRunnerArgs: append([]string{"--sandbox=" + ex.sandbox}, ex.extra...)})
	for k := range traceEnv {
		os.Unsetenv(k)
	}
	if err == nil {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		err = s.WaitServing(wctx)
		cancel()
	}
	if err != nil {
		_ = s.Stop(10 * time.Second)
		return load.Stats{}, err
	}
	conn, err := dial(s.GatewayAddress)
	if err != nil {
		return load.Stats{}, err
	}
	call := load.Evaluate(pb.NewFunctionEvaluatorClient(conn), "set-namespace:v0.4.5", data, time.Minute)
	_ = load.Run(ctx, 3, 1, call) // warm the connection and caches
	stats := load.Run(ctx, n, 1, call)
	if ex.paced {
		stats = load.Paced(ctx, n, pause, call)
	}
	conn.Close()
	if err := s.Stop(30 * time.Second); err != nil {
		return load.Stats{}, err
	}
	return stats, nil
}

// printCatalog prints the rows as a table, each compared with the bare
// exec of its input.
func printCatalog(out io.Writer, rows []catalogRow) {
	fmt.Fprintf(out, "set-namespace v0.4.5, one call at a time; ratio = p50 / p50 of the bare exec of the same input\n\n")
	fmt.Fprintf(out, "| scenario | n | errors | p50 | p90 | p99 | throughput | p50 ratio |\n|---|---|---|---|---|---|---|---|\n")
	// Each row is compared with the bare exec of its input, a paced row
	// with the paced one.
	var base, pacedBase time.Duration
	for _, r := range rows {
		paced := strings.HasSuffix(r.scenario, "between calls")
		switch {
		case strings.HasSuffix(r.scenario, "bare exec"):
			base = r.stats.P50
		case strings.Contains(r.scenario, "bare exec,"):
			pacedBase = r.stats.P50
		}
		b := base
		if paced {
			b = pacedBase
		}
		ratio := "-"
		if b > 0 {
			ratio = fmt.Sprintf("%.2f", float64(r.stats.P50)/float64(b))
		}
		s := r.stats
		throughput := fmt.Sprintf("%.1f/s", s.Throughput())
		if paced {
			throughput = "-" // the pauses are in the wall time
		}
		fmt.Fprintf(out, "| %s | %d | %d | %v | %v | %v | %s | %s |\n", r.scenario, s.Calls, s.Errors,
			s.P50.Round(10*time.Microsecond), s.P90.Round(10*time.Microsecond), s.P99.Round(10*time.Microsecond), throughput, ratio)
		if s.FirstError != nil {
			fmt.Fprintf(out, "  first error: %v\n", s.FirstError)
		}
	}
}

// Command bench measures fnrunner. It prints numbers and asserts nothing.
//
//	bench load --address localhost:9445 --image set-namespace:v0.4.5 --input rl.yaml -n 200 -c 8
//	bench catalog      (tools/bazel run //tools/bench:catalog) set-namespace on small and 3 MB
//	                   inputs through the go and binary executors and as a bare exec, side by side
//	bench sandbox      (tools/bazel run //tools/bench:sandbox) set-namespace run by fnexec in each
//	                   sandbox layer set, with and without warm helpers, beside a bare exec
//	bench path         (tools/bazel run //tools/bench:path) the binary executor's call hop by hop,
//	                   beside the same bare exec behind plain gRPC servers
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/fnrunner/fnrunner/libs/executortable"
	"github.com/fnrunner/fnrunner/libs/fnexec"
	"github.com/fnrunner/fnrunner/libs/sandbox"
	"github.com/fnrunner/fnrunner/libs/sandbox/spec"
	pb "github.com/fnrunner/fnrunner/protos/evaluator"
	"github.com/fnrunner/fnrunner/tests/tracesink"
	"github.com/fnrunner/fnrunner/tools/bench/load"
	"github.com/fnrunner/fnrunner/tools/localstack"
	"github.com/fnrunner/fnrunner/tools/procstat"
)

const usage = `Usage: bench COMMAND [flags]

Commands:
  load     send calls to any evaluator.FunctionEvaluator and print p50/p90/p99 and throughput
  catalog  set-namespace on small and 3 MB inputs through the go and binary executors and as a
           bare exec of the same binary, side by side with ratios (run it with
           tools/bazel run //tools/bench:catalog)
  sandbox  set-namespace on a 2 KB input run the way the binary-runner runs it (package fnexec),
           in each sandbox layer set, with warm helpers and without, beside a bare exec
           (tools/bazel run //tools/bench:sandbox)
  path     the binary executor's 2 KB call hop by hop: bare exec, the same behind one and two
           plain gRPC servers (the hops' floor), fnexec, a binary-runner called directly, through
           the gateway, for --sandbox=none and the always-on layers, beside the go executor;
           interleaved and paired (tools/bazel run //tools/bench:path)
  starlark fnrunner's bounded starlark in the bench's process (as an in-process entry would run
           it) against the same code as a process, as the go executor's starlark entry runs it,
           in each sandbox layer set and as a bare exec; interleaved and paired
           (tools/bazel run //tools/bench:starlark)
`

func main() {
	ctx := context.Background()
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "load":
		err = loadCmd(ctx, os.Args[2:], os.Stdout)
	case "catalog":
		err = catalogCmd(ctx, os.Args[2:], os.Stdout)
	case "sandbox":
		err = sandboxCmd(ctx, os.Args[2:], os.Stdout)
	case "path":
		err = pathCmd(ctx, os.Args[2:], os.Stdout)
	case "starlark":
		err = starlarkCmd(ctx, os.Args[2:], os.Stdout)
	case "floor-exec", "floor-proxy":
		err = floorCmd(os.Args[1], os.Args[2:], os.Stdout)
	case "-h", "--help", "help":
		fmt.Fprint(os.Stdout, usage)
	default:
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

// bareExec runs bin on input as a bare exec (os/exec, no fnrunner): the
// floor the rows are compared with.
func bareExec(input []byte, bin string, args ...string) load.Call {
	return func(context.Context) error {
		cmd := exec.Command(bin, args...)
		cmd.Stdin = bytes.NewReader(input)
		cmd.Stdout = io.Discard
		return cmd.Run()
	}
}

func dial(address string) (*grpc.ClientConn, error) {
	return grpc.NewClient(address, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
}

func loadCmd(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("bench load", flag.ContinueOnError)
	address := fs.String("address", "localhost:9445", "Address of the FunctionEvaluator (fnrunner's gateway or porch's function-runner).")
	image := fs.String("image", "set-namespace:v0.4.5", "Function image.")
	input := fs.String("input", "", "ResourceList file; default: a generated one of --size bytes.")
	size := fs.Int("size", 2048, "Size of the generated ResourceList, in bytes.")
	n := fs.Int("n", 200, "Number of calls.")
	c := fs.Int("c", 8, "Calls in flight at once.")
	timeout := fs.Duration("timeout", time.Minute, "Deadline of each call.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	data := load.SetNamespaceInput(*size)
	if *input != "" {
		var err error
		if data, err = os.ReadFile(*input); err != nil {
			return err
		}
	}
	conn, err := dial(*address)
	if err != nil {
		return err
	}
	defer conn.Close()
	s := load.Run(ctx, *n, *c, load.Evaluate(pb.NewFunctionEvaluatorClient(conn), *image, data, *timeout))
	fmt.Fprintf(out, "%s %s (%d bytes): %s\n", *address, *image, len(data), s)
	if s.FirstError != nil {
		fmt.Fprintf(out, "first error: %v\n", s.FirstError)
	}
	return nil
}

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

	inputs := []struct {
		name string
		data []byte
		n    int
	}{
		{"small (2 KB)", load.SetNamespaceInput(2 << 10), *smallN},
		{"large (3 MB)", load.SetNamespaceInput(3 << 20), *largeN},
	}
	type row struct {
		scenario string
		stats    load.Stats
	}
	var rows []row
	for _, in := range inputs {
		bareCall := bareExec(in.data, st.setNamespace)
		rows = append(rows, row{in.name + ", bare exec", load.Run(ctx, in.n, 1, bareCall)})
		rows = append(rows, row{fmt.Sprintf("%s, bare exec, %v between calls", in.name, *pause), load.Paced(ctx, in.n, *pause, bareCall)})
		// The binary executor once per sandbox layer set (libs/sandbox).
		const prestarted = "--sandbox-prestarted-functions=4"
		for _, ex := range []struct {
			name, disable, sandbox string
			extra                  []string
			paced                  bool
		}{
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
		} {
			if ex.paced {
				ex.name += fmt.Sprintf(", %v between calls", *pause)
			}
			// With tracing on, the services export every span to a
			// receiver here, as OTEL_* variables configure them in a
			// cluster (they take the environment at start).
			var traceEnv map[string]string
			if strings.Contains(ex.name, "tracing on") {
				sink, err := tracesink.New()
				if err != nil {
					return err
				}
				defer sink.Close()
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
				return err
			}
			conn, err := dial(s.GatewayAddress)
			if err != nil {
				return err
			}
			call := load.Evaluate(pb.NewFunctionEvaluatorClient(conn), "set-namespace:v0.4.5", in.data, time.Minute)
			_ = load.Run(ctx, 3, 1, call) // warm the connection and caches
			stats := load.Run(ctx, in.n, 1, call)
			if ex.paced {
				stats = load.Paced(ctx, in.n, *pause, call)
			}
			rows = append(rows, row{in.name + ", " + ex.name, stats})
			conn.Close()
			if err := s.Stop(30 * time.Second); err != nil {
				return err
			}
		}
	}
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
	return nil
}

func sandboxCmd(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("bench sandbox", flag.ContinueOnError)
	helper := fs.String("fnsandbox-binary", "", "Path of the fnsandbox helper (set by the Bazel target).")
	function := fs.String("set-namespace-binary", "", "Path of the set-namespace function binary (set by the Bazel target).")
	n := fs.Int("n", 300, "Calls per row, one at a time.")
	size := fs.Int("size", 2<<10, "Input size in bytes.")
	pause := fs.Duration("pause", 50*time.Millisecond, "The pause between calls of the paced rows (not counted).")
	interleavedOnly := fs.Bool("interleaved-only", false, "Run only the interleaved rows (bare exec, none and the warm layer sets), not the processes started ahead: a larger -n in the same time.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := binaries("sandbox", helper, function); err != nil {
		return err
	}
	input := load.SetNamespaceInput(*size)
	tempDir, err := callsDir("bench-sandbox-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tempDir)
	// As the binary-runner makes them: ahead of the calls.
	dirs, err := fnexec.NewDirs(tempDir)
	if err != nil {
		return err
	}
	defer dirs.Close()
	type row struct {
		name  string
		stats load.Stats
	}
	var rows []row
	open := func(mode string, warm, pre int) (*sandbox.Sandbox, string, error) {
		sb, err := openSandbox(ctx, *helper, tempDir, mode, warm, pre)
		return sb, fmt.Sprintf("fnexec, --sandbox=%s --sandbox-warm-helpers=%d --sandbox-prestarted-functions=%d", mode, warm, pre), err
	}
	via := func(sb *sandbox.Sandbox) load.Call {
		opts := fnexec.Options{TempDir: tempDir, Dirs: dirs}
		if sb.Enabled() {
			opts.Sandbox = sb
		}
		return func(ctx context.Context) error {
			_, err := fnexec.Run(ctx, []string{*function}, bytes.NewReader(input), opts)
			return err
		}
	}
	bareCall := bareExec(input, *function)
	// The layers, interleaved: a round is one call of each.
	names := []string{"bare exec (os/exec)"}
	calls := []load.Call{bareCall}
	for _, r := range []struct {
		mode string
		warm int
	}{
		{"none", 0}, {"base", 0}, {"base", 4}, {"base,landlock", 4}, {"base,landlock,uid", 4},
		{"base,landlock,uid,userns", 4}, {"base,landlock,uid,userns,cgroup", 4},
	} {
		sb, name, err := open(r.mode, r.warm, 0)
		if err != nil {
			fmt.Fprintf(out, "%s: %v\n", name, err)
			continue
		}
		defer sb.Close()
		names, calls = append(names, name), append(calls, via(sb))
	}
	time.Sleep(200 * time.Millisecond) // the warm helpers start
	var bare, none load.Stats
	for i, s := range load.Interleaved(ctx, *n, calls) {
		switch i {
		case 0:
			bare = s
		case 1:
			none = s
		}
		rows = append(rows, row{names[i] + ", interleaved", s})
	}
	// Processes started ahead: one scenario after the other, as the time
	// between a scenario's calls is what they use.
	ahead := []struct {
		mode  string
		paced bool
	}{
		{"base", false}, {"base", true}, {"base,landlock", true}, {"base,landlock,uid", true},
		{"base,landlock,uid,userns", true}, {"base,landlock,uid,userns,cgroup", false}, {"base,landlock,uid,userns,cgroup", true},
	}
	if *interleavedOnly {
		ahead = nil
	} else {
		rows = append(rows, row{fmt.Sprintf("bare exec (os/exec), %v between calls", *pause), load.Paced(ctx, *n, *pause, bareCall)})
	}
	for _, r := range ahead {
		sb, name, err := open(r.mode, 4, 4)
		if r.paced {
			name += fmt.Sprintf(", %v between calls", *pause)
		}
		if err != nil {
			fmt.Fprintf(out, "%s: %v\n", name, err)
			continue
		}
		time.Sleep(200 * time.Millisecond) // the warm helpers start
		var s load.Stats
		if r.paced {
			s = load.Paced(ctx, *n, *pause, via(sb))
		} else {
			s = load.Run(ctx, *n, 1, via(sb))
		}
		sb.Close()
		rows = append(rows, row{name, s})
	}
	fmt.Fprintf(out, "set-namespace v0.4.5 on %d bytes, one call at a time; + p50 = p50 - p50 of the bare exec, or of --sandbox=none;\n"+
		"paired = the median over rounds of (this call - the bare exec's in the same round), interleaved rows only\n\n", len(input))
	fmt.Fprintf(out, "| scenario | n | errors | p50 | p90 | p99 | + p50 over bare exec | + p50 over none | paired over bare exec |\n|---|---|---|---|---|---|---|---|---|\n")
	round := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	for _, r := range rows {
		s := r.stats
		paired := "-"
		if strings.HasSuffix(r.name, ", interleaved") {
			paired = round(s.PairedP50).String()
		}
		fmt.Fprintf(out, "| %s | %d | %d | %v | %v | %v | %v | %v | %s |\n", r.name, s.Calls, s.Errors,
			round(s.P50), round(s.P90), round(s.P99), round(s.P50-bare.P50), round(s.P50-none.P50), paired)
		if s.FirstError != nil {
			fmt.Fprintf(out, "  first error: %v\n", s.FirstError)
		}
	}
	return nil
}

// stackFlags are the flags of the benches that start the services: their
// binaries (set by the Bazel targets) and FunctionConfigs.
type stackFlags struct {
	bins         localstack.Binaries
	setNamespace string
	configDir    string
}

func (f *stackFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.bins.Gateway, "gateway-binary", "", "Path of the gateway binary (set by the Bazel target).")
	fs.StringVar(&f.bins.BinaryRunner, "binary-runner-binary", "", "Path of the binary-runner binary (set by the Bazel target).")
	fs.StringVar(&f.bins.ConfigReconciler, "config-reconciler-binary", "", "Path of the config-reconciler binary (set by the Bazel target).")
	fs.StringVar(&f.bins.Fnsandbox, "fnsandbox-binary", "", "Path of the fnsandbox helper (set by the Bazel target).")
	fs.StringVar(&f.setNamespace, "set-namespace-binary", "", "Path of the set-namespace function binary (set by the Bazel target).")
	fs.StringVar(&f.configDir, "config-dir", "deploy/local/functionconfigs", "FunctionConfig files.")
}

// resolve makes the binaries' paths absolute and returns a functions
// directory holding set-namespace, which the caller removes. target names
// the Bazel target that sets the flags.
func (f *stackFlags) resolve(target string) (string, error) {
	for _, p := range []*string{&f.bins.Gateway, &f.bins.BinaryRunner, &f.bins.ConfigReconciler, &f.bins.Fnsandbox, &f.setNamespace} {
		if *p == "" {
			return "", fmt.Errorf("binaries not given: run tools/bazel run //tools/bench:%s", target)
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return "", err
		}
		*p = abs
	}
	dir, err := os.MkdirTemp("", "bench-functions-")
	if err != nil {
		return "", err
	}
	if err := os.Symlink(f.setNamespace, filepath.Join(dir, "set-namespace")); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

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
	const image = "set-namespace:v0.4.5"

	// fnexec as the binary-runner calls it: private directories made ahead.
	dirs, err := fnexec.NewDirs("")
	if err != nil {
		return err
	}
	defer dirs.Close()
	names := []string{"bare exec (os/exec)", "fnexec --sandbox=none, in the bench's process"}
	calls := []load.Call{bareExec(input, flags.setNamespace), func(ctx context.Context) error {
		_, err := fnexec.Run(ctx, []string{flags.setNamespace}, bytes.NewReader(input), fnexec.Options{Dirs: dirs})
		return err
	}}
	// The floor of the two hops: a bare exec behind plain gRPC servers.
	execAddr, stopExec, err := startFloor("floor-exec", "-binary", flags.setNamespace)
	if err != nil {
		return err
	}
	defer stopExec()
	proxyAddr, stopProxy, err := startFloor("floor-proxy", "-target", execAddr)
	if err != nil {
		return err
	}
	defer stopProxy()
	for _, f := range []struct{ name, address string }{
		{"bare exec behind a plain gRPC server (one hop, no fnrunner code)", execAddr},
		{"bare exec behind a plain gRPC proxy and server (two hops, no fnrunner code)", proxyAddr},
	} {
		conn, err := dial(f.address)
		if err != nil {
			return err
		}
		defer conn.Close()
		names = append(names, f.name)
		calls = append(calls, load.Evaluate(pb.NewFunctionEvaluatorClient(conn), image, input, time.Minute))
	}
	// One stack per executor and layer set, each started once and idle but
	// for its own rows' calls. Each one's services' CPU time is read idle
	// and around the rounds.
	type stackCPU struct {
		label string
		pids  map[string]int
	}
	var stacks []stackCPU
	services := []string{"gateway", "binary-runner", "config-reconciler"}
	for _, st := range []struct {
		executor, disable, sandbox string
	}{
		{"binary", "go,pod", "none"},
		{"binary", "go,pod", *layers},
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
		defer s.Stop(30 * time.Second)
		if err != nil {
			return err
		}
		gw, err := dial(s.GatewayAddress)
		if err != nil {
			return err
		}
		defer gw.Close()
		runner, err := dial(s.BinaryRunnerAddress)
		if err != nil {
			return err
		}
		defer runner.Close()
		direct := load.Evaluate(pb.NewFunctionEvaluatorClient(runner), image, input, time.Minute)
		executor := st.executor
		label := st.executor + " executor"
		if st.executor == "binary" {
			label += ", --sandbox=" + st.sandbox
		}
		pids := map[string]int{}
		for _, name := range services {
			if pids[name], err = s.Pid(name); err != nil {
				return err
			}
		}
		stacks = append(stacks, stackCPU{label: label, pids: pids})
		names = append(names, label+", binary-runner called directly", label+", through the gateway")
		calls = append(calls, func(ctx context.Context) error {
			// As the gateway sends it: the executor named.
			return direct(metadata.AppendToOutgoingContext(ctx, executortable.Header, executor))
		}, load.Evaluate(pb.NewFunctionEvaluatorClient(gw), image, input, time.Minute))
	}
	for _, c := range calls {
		_ = load.Run(ctx, 3, 1, c) // warm connections, caches and helpers
	}
	// cpu reads every service's CPU time; one that cannot be read (a
	// service gone) ends the bench rather than print a wrong figure.
	cpu := func() ([]map[string]time.Duration, error) {
		out := make([]map[string]time.Duration, len(stacks))
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
	idleStart, err := cpu()
	if err != nil {
		return err
	}
	t0 := time.Now()
	time.Sleep(*idle)
	idleWall := time.Since(t0)
	idleEnd, err := cpu()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "set-namespace v0.4.5 on %d bytes, %d interleaved rounds, one call at a time;\n"+
		"paired = the median over rounds of (this call - the bare exec's in the same round)\n\n", len(input), *n)
	fmt.Fprintf(out, "| row | n | errors | p50 | p90 | paired over bare exec |\n|---|---|---|---|---|---|\n")
	round := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	busyStart, err := cpu()
	if err != nil {
		return err
	}
	t1 := time.Now()
	results := load.Interleaved(ctx, *n, calls)
	busyWall := time.Since(t1)
	busyEnd, err := cpu()
	if err != nil {
		return err
	}
	for i, s := range results {
		fmt.Fprintf(out, "| %s | %d | %d | %v | %v | %v |\n", names[i], s.Calls, s.Errors, round(s.P50), round(s.P90), round(s.PairedP50))
		if s.FirstError != nil {
			fmt.Fprintf(out, "  first error: %v\n", s.FirstError)
		}
	}
	// A stack's gateway answers one call a round, its binary-runner two
	// (called directly, and through the gateway). What a service uses
	// idle (health checks, the table's stream) goes on during the rounds:
	// its idle rate is taken off.
	fmt.Fprintf(out, "\nCPU time of each stack's services (utime + stime, 10 ms ticks): idle over %v, in millicores;\n"+
		"during the rounds, per call the service answered, its idle rate over the rounds' %v taken off\n\n", idleWall.Round(time.Second), busyWall.Round(time.Second))
	fmt.Fprintf(out, "| stack | gateway idle | binary-runner idle | config-reconciler idle | gateway per call | binary-runner per call |\n|---|---|---|---|---|---|\n")
	millicores := func(d time.Duration) string { return fmt.Sprintf("%.1fm", 1000*d.Seconds()/idleWall.Seconds()) }
	for i, st := range stacks {
		idleOf := func(name string) time.Duration { return idleEnd[i][name] - idleStart[i][name] }
		perCall := func(name string, calls int) time.Duration {
			busy := busyEnd[i][name] - busyStart[i][name] - time.Duration(float64(idleOf(name))*busyWall.Seconds()/idleWall.Seconds())
			return busy / time.Duration(calls)
		}
		fmt.Fprintf(out, "| %s | %s | %s | %s | %v | %v |\n", st.label,
			millicores(idleOf("gateway")), millicores(idleOf("binary-runner")), millicores(idleOf("config-reconciler")),
			round(perCall("gateway", *n)), round(perCall("binary-runner", 2**n)))
	}
	return nil
}

// binaries checks that the Bazel target (//tools/bench:<target>) gave each
// binary's path, and makes them absolute (it gives runfiles paths).
func binaries(target string, paths ...*string) error {
	for _, p := range paths {
		if *p == "" {
			return fmt.Errorf("binaries not given: run tools/bazel run //tools/bench:%s", target)
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	return nil
}

// callsDir makes the directory the calls' private directories go in, which
// every call's uid (the uid layer) must reach.
func callsDir(prefix string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// openSandbox opens the sandbox layers mode names with the limits the
// binary-runner's flags default to, its calls' directories in tempDir.
func openSandbox(ctx context.Context, helper, tempDir, mode string, warm, prestarted int) (*sandbox.Sandbox, error) {
	flags := sandbox.Flags{Mode: mode, Helper: helper, WarmHelpers: warm, PrestartedFunctions: prestarted, ReadOnly: sandbox.SystemReadOnly, FirstUID: 2000000, TempDir: tempDir,
		Limits: spec.Limits{Processes: 256, FileSize: 256 << 20, OpenFiles: 1024}, MemoryMax: 2 << 30, DirBytes: 512 << 20, CPUMillis: 1000}
	return flags.Open(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

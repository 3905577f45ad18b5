// Command bench measures fnrunner. It prints numbers and asserts nothing.
//
//	bench load --address localhost:9445 --image set-namespace:v0.4.5 --input rl.yaml -n 200 -c 8
//	bench catalog      (tools/bazel run //tools/bench:catalog) set-namespace on small and 3 MB
//	                   inputs through the go and binary executors and as a bare exec, side by side
//	bench sandbox      (tools/bazel run //tools/bench:sandbox) set-namespace run by fnexec in each
//	                   sandbox layer set, with and without warm helpers, beside a bare exec
//	bench path         (tools/bazel run //tools/bench:path) the binary executor's call hop by hop,
//	                   beside the same bare exec behind plain gRPC servers
//	bench porch        porch's e2e suites against both runners, from //tests/porch's outputs
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
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fnrunner/fnrunner/libs/sandbox"
	"github.com/fnrunner/fnrunner/libs/sandbox/spec"
	pb "github.com/fnrunner/fnrunner/protos/evaluator"
	"github.com/fnrunner/fnrunner/tools/bench/load"
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
  porch    the table of porch's e2e suites against porch's runner and fnrunner, from the runs
           //tests/porch's tests leave in their outputs; --out writes docs/bench/porch-e2e-<date>.md
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
	case "porch":
		err = porchCmd(os.Args[2:], os.Stdout)
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

// cleanups are what a bench undoes when it ends, as its defer statements
// would: the last added first.
type cleanups []func()

func (c *cleanups) add(f func()) { *c = append(*c, f) }

func (c *cleanups) run() {
	for i := len(*c) - 1; i >= 0; i-- {
		(*c)[i]()
	}
}

// Command fnctl runs KRM functions through an fnrunner gateway (or any
// evaluator.FunctionEvaluator, such as porch's function-runner).
//
//	fnctl eval --image set-namespace:v0.4.5 [--fn-config f.yaml | -- key=value ...] < resources
//	fnctl render DIR
package main

//lint:file-ignore SA1019 kpt and porch still write and read the legacy config.kubernetes.io annotations beside the new ones

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/kustomize/kyaml/kio/kioutil"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/fnrunner/fnrunner/libs/fnresult"
	"github.com/fnrunner/fnrunner/libs/kptrender"
	"github.com/fnrunner/fnrunner/libs/resourcelist"
	"github.com/fnrunner/fnrunner/libs/telemetry"
	pb "github.com/fnrunner/fnrunner/protos/evaluator"
)

const usage = `Usage: fnctl COMMAND [flags]

Runs KRM functions through an fnrunner gateway.

Commands:
  eval    run one function on resources read from stdin; write the result to stdout
            fnctl eval --image set-namespace:v0.4.5 -- namespace=prod < resources.yaml
            fnctl eval --image apply-replacements:v0.1.5 --fn-config r.yaml < resources.yaml
  render  run a kpt package's Kptfile pipeline and write the package back
            fnctl render ./my-package
  from-porch  write the FunctionConfigs that reproduce porch v1.5's runner --config and --pod-cache-config
            fnctl from-porch --config config.yaml --pod-cache-config pod-cache-config.yaml > fcs.yaml

Run 'fnctl COMMAND --help' for a command's flags.
`

// exitError carries an exit status without printing anything more.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

type common struct {
	gateway  string
	timeout  time.Duration
	maxBytes int
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.gateway, "gateway", "localhost:9445", "Address of the gateway (evaluator.FunctionEvaluator).")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Minute, "Deadline of each function call (for render's exec functions kpt's 5 minutes unless given).")
	fs.IntVar(&c.maxBytes, "max-message-size", 64*1024*1024, "Largest gRPC message sent or received, in bytes (the gateway applies its own limit).")
}

// perCallDeadline gives each function call of a render its own deadline
// (--timeout), as eval's one call has: a pipeline of many steps is not
// bounded by one step's deadline.
type perCallDeadline struct {
	client  pb.FunctionEvaluatorClient
	timeout time.Duration
}

var _ kptrender.Evaluator = perCallDeadline{}

func (p perCallDeadline) EvaluateFunction(ctx context.Context, req *pb.EvaluateFunctionRequest, opts ...grpc.CallOption) (*pb.EvaluateFunctionResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	return p.client.EvaluateFunction(ctx, req, opts...)
}

// dial connects to the gateway; a call that fails has its request id
// (the gateway's, the trace id when tracing is on) printed to stderr, so
// an operator can find it in the services' logs and traces.
func (c *common) dial(stderr io.Writer) (*grpc.ClientConn, error) {
	return grpc.NewClient(c.gateway, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(c.maxBytes), grpc.MaxCallSendMsgSize(c.maxBytes)),
		grpc.WithChainUnaryInterceptor(printRequestID(stderr)))
}

// printRequestID prints the request id of every call that fails.
func printRequestID(stderr io.Writer) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		var header, trailer metadata.MD
		err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Header(&header), grpc.Trailer(&trailer))...)
		if err == nil {
			return nil
		}
		id := header.Get(telemetry.RequestIDHeader)
		if len(id) == 0 {
			id = trailer.Get(telemetry.RequestIDHeader)
		}
		if len(id) > 0 {
			fmt.Fprintf(stderr, "request id: %s\n", id[0])
		}
		return err
	}
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return exitError{2}
		}
		return nil
	}
	switch args[0] {
	case "eval":
		return eval(ctx, args[1:], stdin, stdout, stderr)
	case "render":
		return render(ctx, args[1:], stdout, stderr)
	case "from-porch":
		return fromPorch(args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "fnctl: unknown command %q\n\n%s", args[0], usage)
		return exitError{2}
	}
}

func eval(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var c common
	var image, fnConfig string
	fs := flag.NewFlagSet("fnctl eval", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.register(fs)
	fs.StringVar(&image, "image", "", "Function image, e.g. set-namespace:v0.4.5 (required).")
	fs.StringVar(&fnConfig, "fn-config", "", "File holding the functionConfig. Alternatively give key=value pairs after --, which become a ConfigMap.")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: fnctl eval --image IMAGE [--fn-config FILE | -- key=value ...] < resources\n       fnctl eval --image IMAGE DIR [--fn-config FILE | -- key=value ...]\n\nReads resources (a YAML stream or a ResourceList) from stdin, runs the function, writes the\nresult in the same form to stdout and the function's results and log to stderr. Given a\npackage directory (an existing one, first after the flags), runs the function on the package\nas kpt fn eval DIR does and writes the package back.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return exitError{2}
	}
	if image == "" {
		return usageErr(stderr, "--image is required")
	}
	dir, pairs := packageArg(fs.Args())
	if fnConfig != "" && len(pairs) > 0 {
		return usageErr(stderr, "give either --fn-config or key=value pairs, not both")
	}
	config, err := functionConfig(fnConfig, pairs)
	if err != nil {
		return err
	}

	var in []byte
	wasList := false
	if dir == "" {
		if in, err = io.ReadAll(stdin); err != nil {
			return fmt.Errorf("reading stdin: %w", err)
		}
		if rl, err := resourcelist.Parse(in); err == nil {
			wasList = true
			if config == nil {
				config = rl.FunctionConfig
			}
		}
	}
	if config == nil {
		// Nothing given: kpt fn eval's empty function-input ConfigMap.
		if config, err = kptrender.EvalConfig(nil); err != nil {
			return err
		}
	}
	if dir != "" {
		return evalPackage(ctx, c, dir, image, config, stderr)
	}
	return evalStream(ctx, c, image, config, in, wasList, stdout, stderr)
}

// packageArg is the package directory eval was given, if args (what
// follows the flags) start with an existing directory, and the key=value
// pairs after it (and after a "--" following it).
func packageArg(args []string) (dir string, pairs []string) {
	pairs = args
	if len(pairs) > 0 {
		if fi, err := os.Stat(pairs[0]); err == nil && fi.IsDir() {
			dir, pairs = pairs[0], pairs[1:]
			if len(pairs) > 0 && pairs[0] == "--" {
				pairs = pairs[1:]
			}
		}
	}
	return dir, pairs
}

// evalStream runs image, with config, on the resources in (a YAML stream,
// or a ResourceList when wasList) in one call, and writes the result to
// stdout in the same form, the function's results and log to stderr.
func evalStream(ctx context.Context, c common, image string, config *yaml.RNode, in []byte, wasList bool, stdout, stderr io.Writer) error {
	reader := &kio.ByteReader{Reader: bytes.NewReader(in), PreserveSeqIndent: true, WrapBareSeqNode: true}
	items, err := reader.Read()
	if err != nil {
		return fmt.Errorf("reading resources: %w", err)
	}
	req, err := kptrender.BuildResourceList(items, config)
	if err != nil {
		return err
	}

	conn, err := c.dial(stderr)
	if err != nil {
		return err
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	start := time.Now()
	resp, err := pb.NewFunctionEvaluatorClient(conn).EvaluateFunction(cctx, &pb.EvaluateFunctionRequest{Image: image, ResourceList: req})
	took := time.Since(start).Round(time.Millisecond)
	if err != nil {
		st := status.Convert(err)
		if d, ok := fnresult.FailureDetails(err); ok {
			printResults(stderr, d.GetResourceList(), d.GetLog())
		}
		fmt.Fprintf(stderr, "[FAIL] %s in %v: %s: %s\n", image, took, st.Code(), st.Message())
		return exitError{1}
	}
	printResults(stderr, resp.GetResourceList(), resp.GetLog())
	fmt.Fprintf(stderr, "[PASS] %s in %v\n", image, took)
	if wasList {
		_, err = stdout.Write(resp.GetResourceList())
		return err
	}
	out, err := resourcelist.Parse(resp.GetResourceList())
	if err != nil {
		return err
	}
	return kio.ByteWriter{Writer: stdout}.Write(out.Items)
}

// evalPackage runs image on the package at dir as kpt fn eval DIR does
// (libs/kptrender Eval) and writes the package back when it succeeded.
func evalPackage(ctx context.Context, c common, dir, image string, config *yaml.RNode, stderr io.Writer) error {
	conn, err := c.dial(stderr)
	if err != nil {
		return err
	}
	defer conn.Close()
	ev := perCallDeadline{client: pb.NewFunctionEvaluatorClient(conn), timeout: c.timeout}
	list, err := kptrender.Eval(ctx, dir, ev, image, config, kptrender.Options{})
	if list != nil {
		for _, item := range list.Items {
			printItem(stderr, item, true)
		}
	}
	if err != nil {
		return err
	}
	if list.ExitCode != 0 {
		fmt.Fprintf(stderr, "\nPackage %q not written: the function failed.\n", dir)
		return exitError{1}
	}
	return nil
}

func render(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c common
	fs := flag.NewFlagSet("fnctl render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.register(fs)
	resultsDir := fs.String("results-dir", "", "Directory to write kpt's FunctionResultList to, as results.yaml (kpt fn render --results-dir).")
	maps := registerImageMaps(fs)
	truncate := fs.Bool("truncate-output", true, "Print at most 4 lines of a failed function's stderr (kpt fn render --truncate-output).")
	output := fs.String("output", "", "Where the rendered resources go instead of back into the package (kpt fn render -o): stdout (one ResourceList), unwrap (a YAML stream, without path annotations) or a directory that does not exist yet.")
	fs.StringVar(output, "o", "", "Short for --output.")
	allowExec := fs.Bool("allow-exec", false, "Run the pipeline's exec functions, on this machine as the user running fnctl, not through the gateway (kpt fn render --allow-exec); without it a pipeline with one fails.")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: fnctl render [flags] [DIR]\n\nRuns the package's Kptfile pipeline (mutators, then validators) through the gateway and writes\nthe package back (or to --output) when every function succeeded. DIR defaults to the current\ndirectory. Prints progress, timing and results per step.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return exitError{2}
	}
	dir := "."
	switch fs.NArg() {
	case 0:
	case 1:
		dir = fs.Arg(0)
	default:
		return usageErr(stderr, "render takes one package directory")
	}
	rendered, err := outputBuffer(*output, stderr)
	if err != nil {
		return err
	}
	conn, err := c.dial(stderr)
	if err != nil {
		return err
	}
	defer conn.Close()
	fmt.Fprintf(stderr, "Package %q:\n", dir)
	mapImage := maps.Map
	ev := perCallDeadline{client: pb.NewFunctionEvaluatorClient(conn), timeout: c.timeout}
	opts := kptrender.Options{Progress: stderr, MapImage: mapImage, AllowExec: *allowExec,
		// kpt's opt-out of its attribution annotation, honoured as kpt does.
		NoAttribution: os.Getenv("KRM_DISABLE_ATTRIBUTION") != ""}
	if rendered != nil {
		opts.Output = rendered
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "timeout" {
			// An exec function's bound is kpt's 5 minutes unless given.
			opts.ExecTimeout = c.timeout
		}
	})
	list, err := kptrender.Render(ctx, dir, ev, opts)
	if list != nil {
		if werr := reportSteps(stderr, list, *truncate, *resultsDir); werr != nil {
			return werr
		}
	}
	if err != nil {
		return err
	}
	if list.ExitCode != 0 {
		fmt.Fprintf(stderr, "\nPackage %q not written: a function failed.\n", dir)
		return exitError{1}
	}
	if rendered != nil {
		return writeOutput(*output, rendered, stdout)
	}
	fmt.Fprintf(stderr, "\nSuccessfully executed %d function(s) in %d package(s).\n", len(list.Items), list.Packages)
	return nil
}

// registerImageMaps registers render's --map-image and --map-image-prefix
// flags, which fill the map returned.
func registerImageMaps(fs *flag.FlagSet) imageMap {
	images := map[string]string{}
	fs.Func("map-image", "OLD=NEW: call image NEW where the Kptfile names OLD (repeatable), e.g. gcr.io/kpt-fn/set-labels:unstable=set-labels:v0.2.1 for the catalog's old names in local mode.", func(v string) error {
		from, to, ok := strings.Cut(v, "=")
		if !ok || from == "" || to == "" {
			return fmt.Errorf("want OLD=NEW, not %q", v)
		}
		images[from] = to
		return nil
	})
	prefixes := map[string]string{}
	fs.Func("map-image-prefix", "OLD=NEW: call NEW+rest where a Kptfile image is OLD+rest (repeatable; NEW may be empty; --map-image wins, then the longest OLD), e.g. gcr.io/kpt-fn/= for the catalog's old registry in local mode.", func(v string) error {
		from, to, ok := strings.Cut(v, "=")
		if !ok || from == "" {
			return fmt.Errorf("want OLD=NEW, not %q", v)
		}
		prefixes[from] = to
		return nil
	})
	return imageMap{exact: images, prefixes: prefixes}
}

// outputBuffer is where a render's resources go for --output (nil: back
// into the package). A directory must not exist yet, as with kpt.
func outputBuffer(output string, stderr io.Writer) (*bytes.Buffer, error) {
	var rendered *bytes.Buffer
	switch output {
	case "":
	case "stdout", "unwrap":
		rendered = &bytes.Buffer{}
	default:
		// As kpt: the directory must not exist yet.
		if _, err := os.Lstat(output); err == nil {
			return nil, usageErr(stderr, fmt.Sprintf("directory %q already exists, please delete the directory and retry", output))
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		rendered = &bytes.Buffer{}
	}
	return rendered, nil
}

// reportSteps prints each step of a render's list (a failed one's stderr
// truncated if truncate) and writes the list to resultsDir when given.
func reportSteps(stderr io.Writer, list *kptrender.ResultList, truncate bool, resultsDir string) error {
	for _, item := range list.Items {
		printItem(stderr, item, truncate)
	}
	if resultsDir != "" {
		if err := writeResults(resultsDir, list); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "For complete results, see %s\n", filepath.Join(resultsDir, "results.yaml"))
	}
	return nil
}

// writeOutput writes a render's ResourceList where --output says, as kpt
// fn render -o does: stdout as it is, unwrap as a YAML stream without the
// path and index annotations, else into a new directory by their paths.
func writeOutput(dest string, rendered *bytes.Buffer, stdout io.Writer) error {
	if dest == "stdout" {
		_, err := stdout.Write(rendered.Bytes())
		return err
	}
	var out kio.Writer
	if dest == "unwrap" {
		out = kio.ByteWriter{Writer: stdout, ClearAnnotations: []string{
			kioutil.IndexAnnotation, kioutil.PathAnnotation, kioutil.LegacyIndexAnnotation, kioutil.LegacyPathAnnotation, //nolint:staticcheck // kpt clears both
		}}
	} else {
		if err := os.MkdirAll(dest, 0o755); err != nil {
			return fmt.Errorf("output directory: %w", err)
		}
		out = &kio.LocalPackageWriter{PackagePath: dest}
	}
	return kio.Pipeline{
		Inputs:  []kio.Reader{&kio.ByteReader{Reader: rendered, PreserveSeqIndent: true, WrapBareSeqNode: true}},
		Outputs: []kio.Writer{out},
	}.Execute()
}

// writeResults writes list to dir/results.yaml, as kpt does (kyaml's
// encoder, sequences indented under their key).
func writeResults(dir string, list *kptrender.ResultList) error {
	var buf bytes.Buffer
	if err := yaml.NewEncoderWithOptions(&buf, &yaml.EncoderOptions{SeqIndent: yaml.WideSequenceStyle}).Encode(list); err != nil {
		return fmt.Errorf("results: %w", err)
	}
	b := buf.Bytes()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("results: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, "results.yaml"), b, 0o644)
}

// imageMap rewrites a Kptfile's image names: an exact name first, else
// the longest matching prefix.
type imageMap struct{ exact, prefixes map[string]string }

// Map returns what to call for image.
func (m imageMap) Map(image string) string {
	if to, ok := m.exact[image]; ok {
		return to
	}
	best, found := "", false
	for from := range m.prefixes {
		if strings.HasPrefix(image, from) && len(from) >= len(best) {
			best, found = from, true
		}
	}
	if found {
		return m.prefixes[best] + strings.TrimPrefix(image, best)
	}
	return image
}

// stderrLines is how much of a failed function's stderr kpt prints when it
// truncates output.
const stderrLines = 4

func printItem(w io.Writer, item kptrender.StepResult, truncate bool) {
	verdict := "PASS"
	if item.ExitCode != 0 {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "[%s] %q in %v\n", verdict, item.Name(), item.Duration.Round(time.Millisecond))
	if len(item.Results) > 0 {
		fmt.Fprintln(w, "  Results:")
	}
	for _, r := range item.Results {
		fmt.Fprintf(w, "    %s\n", r.String())
	}
	if s := strings.TrimSpace(item.Stderr); s != "" && item.ExitCode != 0 {
		lines := strings.Split(s, "\n")
		more := 0
		if truncate && len(lines) > stderrLines {
			more = len(lines) - stderrLines
			lines = lines[:stderrLines]
		}
		fmt.Fprintf(w, "  Stderr:\n    %s\n", strings.Join(lines, "\n    "))
		if more > 0 {
			fmt.Fprintf(w, "    ...(%d line(s) truncated, use '--truncate-output=false' to disable)\n", more)
		}
	}
}

func printResults(w io.Writer, rl, log []byte) {
	if results, err := resourcelist.Results(rl); err == nil {
		for _, r := range results {
			fmt.Fprintln(w, r.String())
		}
	}
	if s := strings.TrimSpace(string(log)); s != "" {
		fmt.Fprintf(w, "%s\n", s)
	}
}

// functionConfig reads --fn-config, or makes kpt fn eval's functionConfig of
// the arguments after --.
func functionConfig(file string, pairs []string) (*yaml.RNode, error) {
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--fn-config: %w", err)
		}
		n, err := yaml.Parse(string(data))
		if err != nil {
			return nil, fmt.Errorf("--fn-config %s: %w", file, err)
		}
		return n, nil
	}
	if len(pairs) == 0 {
		return nil, nil
	}
	return kptrender.EvalConfig(pairs)
}

func usageErr(w io.Writer, msg string) error {
	fmt.Fprintf(w, "fnctl: %s\n", msg)
	return exitError{2}
}

func main() {
	// Under `bazel run` the process starts in the runfiles tree: paths on
	// the command line, and a Kptfile's relative exec paths, are the
	// caller's, as they are for kpt.
	if wd := os.Getenv("BUILD_WORKING_DIRECTORY"); wd != "" {
		if err := os.Chdir(wd); err != nil {
			fmt.Fprintf(os.Stderr, "fnctl: %v\n", err)
			os.Exit(1)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	var ee exitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		os.Exit(ee.code)
	default:
		fmt.Fprintf(os.Stderr, "fnctl: %v\n", err)
		os.Exit(1)
	}
}

// Command binary-runner runs KRM functions for the gateway: linked-in catalog
// functions in-process (go executor) and function binaries from --functions
// (binary executor), as the executor table from the config-reconciler says.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fnrunner/fnrunner/functions/starlark/bounds"
	"github.com/fnrunner/fnrunner/libs/admission"
	"github.com/fnrunner/fnrunner/libs/configclient"
	"github.com/fnrunner/fnrunner/libs/evalmetrics"
	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/fnexec"
	"github.com/fnrunner/fnrunner/libs/grpcserving"
	"github.com/fnrunner/fnrunner/libs/reporttoken"
	"github.com/fnrunner/fnrunner/libs/sandbox"
	"github.com/fnrunner/fnrunner/libs/telemetry"
	"github.com/fnrunner/fnrunner/services/binary-runner/binpath"
	"github.com/fnrunner/fnrunner/services/binary-runner/catalog"
	"github.com/fnrunner/fnrunner/services/binary-runner/report"
	"github.com/fnrunner/fnrunner/services/binary-runner/runner"
)

type options struct {
	tls                grpcserving.TLSFlags
	common             grpcserving.Flags
	port               int
	configAddress      string
	reportTokenFile    string
	functions          string
	allowAbsolutePaths bool
	maxRequestBodySize int
	maxLogBytes        int
	tempDir            string
	functionEnv        []string
	sandbox            sandbox.Flags
	admission          admission.Flags
	starlark           bounds.Bounds
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("binary-runner", flag.ContinueOnError)
	fs.SetOutput(stderr)
	grpcserving.Usage(fs, "Runs KRM functions for the gateway: linked-in catalog functions in-process (go executor) and\nfunction binaries from --functions (binary executor), as the config-reconciler's executor table says.")
	o.common.Register(fs, ":9092")
	o.tls.Register(fs)
	fs.IntVar(&o.port, "port", 9448, "TCP port of the internal executor service (evaluator.FunctionEvaluator) and gRPC health.")
	fs.StringVar(&o.configAddress, "config-address", "localhost:9447", "Address of the config-reconciler's executor table stream.")
	fs.StringVar(&o.reportTokenFile, "report-token-file", "", "Service account token sent with this runner's reports to the config-reconciler (a projected serviceAccountToken volume with the config-reconciler's --report-audience, as in deploy/), read again for every report. A config-reconciler watching a cluster refuses reports without one; with --config-dir it needs none.")
	fs.StringVar(&o.functions, "functions", "./functions", "Directory of function binaries; relative binaryExecutor paths are resolved here.")
	fs.BoolVar(&o.allowAbsolutePaths, "allow-absolute-binary-paths", false, "Run binaryExecutor paths that are absolute (otherwise only binaries inside --functions).")
	fs.IntVar(&o.maxRequestBodySize, "max-request-body-size", 6*1024*1024, "Largest gRPC message received or sent, in bytes; also the cap on a function's output.")
	fs.IntVar(&o.maxLogBytes, "max-log-bytes", fnexec.DefaultMaxLogBytes, "Most bytes of a function's stderr kept and returned as its log.")
	fs.Func("function-env", "Comma-separated names of environment variables passed from the binary-runner's environment to function binaries (default: none; functions get PATH, HOME and TMPDIR only).", func(v string) error {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				o.functionEnv = append(o.functionEnv, name)
			}
		}
		return nil
	})
	fs.StringVar(&o.tempDir, "temp-dir", "", "Where each function run gets its private working directory (default: the system temp dir).")
	fs.Uint64Var(&o.starlark.MaxSteps, "starlark-max-steps", bounds.DefaultMaxSteps, "Most interpreter steps a starlark script may take; over it the call fails with an error result (0: no limit; 110 million steps are about a second of a busy loop).")
	fs.IntVar(&o.starlark.MaxDepth, "starlark-max-call-depth", bounds.DefaultMaxDepth, "Deepest call stack a starlark script may build; deeper, the call fails with an error result (0: no limit, and unbounded recursion then ends the script's process).")
	fs.Func("starlark-allowed-hosts", `Comma-separated hosts starlark scripts' http module may reach: "name" (ports 80 and 443) or "name:port", compared by name as the script writes it (default: none; scripts have no network).`, func(v string) error {
		hosts, err := bounds.ParseHosts(v)
		o.starlark.AllowedHosts = append(o.starlark.AllowedHosts, hosts...)
		return err
	})
	o.admission.Register(fs, 672<<20, 1024, 96<<20, fmt.Sprintf("%d × its input bytes + %d KiB × its input's lines and commas (about its YAML nodes), + %d MiB for a function process (binary executor, starlark) and %d MiB more for a starlark script, whose processes are killed when they hold more than that (less %d × the input, the runner's own buffers) and the call fails with ResourceExhausted; with --max-queue-bytes and %d MiB more, it must fit the container's memory limit (checked at start) and is the Go runtime's soft memory limit unless GOMEMLIMIT is set", runner.ByteWeight, runner.NodeWeight>>10, runner.ProcessWeight>>20, runner.ScriptWeight>>20, runner.BufferWeight, memoryHeadroom>>20))
	o.sandbox.Register(fs, sandbox.Defaults{MemoryMax: 2 << 30, DirBytes: 512 << 20, CPUMillis: 1000, ReadOnly: sandbox.SystemReadOnly, WarmHelpers: 4})
	if err := o.common.Parse(fs, args); err != nil {
		return nil, grpcserving.FlagError(err)
	}
	return o, nil
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	dialCreds, err := o.tls.DialOption()
	if err != nil {
		return grpcserving.FlagError(err)
	}
	log := o.common.Logger(stderr, "binary-runner")
	// Past its container's limit the kubelet kills the service with
	// every call in flight: what admission and the transport may hold
	// must fit it.
	if err := o.admission.FitContainer(o.common.Held(o.maxRequestBodySize) + admission.RuntimeHeadroom); err != nil {
		return grpcserving.FlagError(err)
	}
	tel, err := telemetry.Setup(ctx, "binary-runner")
	if err != nil {
		return err
	}
	o.common.LogIgnoredPorchFlags(log)
	o.sandbox.TempDir = o.tempDir
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
		// The garbage collector works harder as the heap nears what
		// admission lets calls use, rather than letting it double.
		debug.SetMemoryLimit(o.admission.MaxInFlightBytes + o.admission.MaxQueueBytes + memoryHeadroom)
	}
	dirs, err := fnexec.NewDirs(o.tempDir)
	if err != nil {
		return grpcserving.FlagError(fmt.Errorf("--temp-dir: %w", err))
	}
	defer dirs.Close()
	sb, err := o.sandbox.Open(ctx, log)
	if err != nil {
		return err
	}
	defer sb.Close()
	cfg, closeCfg, err := configclient.Dial(log, o.configAddress, "binary-runner", dialCreds)
	if err != nil {
		return err
	}
	defer closeCfg()

	lis, srv, err := o.common.Open(log, o.port, &o.tls, grpcserving.Config{
		Telemetry:      tel,
		Name:           "binary-runner",
		ServerOptions:  []grpc.ServerOption{evalwire.ServerCodec()},
		MaxMessageSize: o.maxRequestBodySize,
	})
	if err != nil {
		return err
	}
	if err := o.registerRunner(log, srv, cfg, sb, dirs); err != nil {
		return err
	}
	reporter, err := o.newReporter(log, cfg)
	if err != nil {
		return err
	}

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { cfg.Run(ctx); return nil })
	g.Go(func() error { reporter.Run(ctx); return nil })
	g.Go(func() error {
		if cfg.WaitReady(ctx) {
			srv.Health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
		}
		return nil
	})
	g.Go(func() error { return srv.Serve(ctx, lis) })
	return g.Wait()
}

// registerRunner registers on srv the runner of the go and binary
// executors, behind admission, and the metrics.
func (o *options) registerRunner(log *slog.Logger, srv *grpcserving.Server, cfg *configclient.Client, sb *sandbox.Sandbox, dirs *fnexec.Dirs) error {
	srv.Registry.MustRegister(sb.Collector())
	admitted := o.admission.Limiter()
	srv.Registry.MustRegister(admitted.Collectors()...)
	exec, scriptExec := o.execOptions(sb, dirs)
	o.warnUnsandboxed(log, sb)
	srv.Registry.MustRegister(cfg.Collectors()...)
	evaluations, err := evalmetrics.New(srv.Registry, cfg)
	if err != nil {
		return err
	}
	evalwire.Register(srv, &evalmetrics.Evaluator{Metrics: evaluations, Executor: evalmetrics.None, Next: runner.New(cfg, catalog.Functions(), runner.Options{
		FunctionsDir:       o.functions,
		AllowAbsolutePaths: o.allowAbsolutePaths,
		MaxOutputBytes:     o.maxRequestBodySize,
		Exec:               exec,
		Scripts:            runner.Scripts{Args: o.starlark.Args(), Exec: &scriptExec},
		Admission:          admitted,
	})})
	return nil
}

// execOptions are how function binaries (exec) and starlark scripts'
// processes (scriptExec) run: in sb when it is enabled, a script's also
// allowed to connect to the ports of --starlark-allowed-hosts.
func (o *options) execOptions(sb *sandbox.Sandbox, dirs *fnexec.Dirs) (exec, scriptExec fnexec.Options) {
	exec = fnexec.Options{
		Env:            passedEnv(o.functionEnv),
		MaxOutputBytes: o.maxRequestBodySize,
		MaxLogBytes:    o.maxLogBytes,
		TempDir:        o.tempDir,
		Dirs:           dirs,
	}
	scriptExec = exec
	if sb.Enabled() {
		exec.Sandbox = sb
		scriptExec.Sandbox = sb
		if ports := o.starlark.Ports(); len(ports) > 0 {
			scriptExec.Sandbox = sb.AllowingConnect(ports...)
		}
	}
	return exec, scriptExec
}

// warnUnsandboxed says which flags do not hold without the landlock layer.
func (o *options) warnUnsandboxed(log *slog.Logger, sb *sandbox.Sandbox) {
	if o.reportTokenFile != "" && !slices.Contains(sb.Layers(), sandbox.Landlock) {
		log.Warn("--report-token-file without the landlock sandbox layer: functions can read this runner's report token, and report for it", "report_token_file", o.reportTokenFile)
	}
	if len(o.starlark.AllowedHosts) > 0 && !slices.Contains(sb.Layers(), sandbox.Landlock) {
		// Only Landlock filters by port; the starlark binary still
		// dials only the allowed hosts.
		log.Warn("--starlark-allowed-hosts without the landlock sandbox layer: starlark processes keep the runner's network, every port", "allowed_hosts", o.starlark.AllowedHosts)
	}
}

// newReporter makes the reporter of this runner's binary executors' paths
// to the config-reconciler.
func (o *options) newReporter(log *slog.Logger, cfg *configclient.Client) (*report.Reporter, error) {
	name, uid, err := identity()
	if err != nil {
		return nil, err
	}
	var token func() (string, error)
	if o.reportTokenFile != "" {
		token = reporttoken.File(o.reportTokenFile).Token
	}
	return report.New(log, cfg, cfg, func(path string) error {
		_, err := binpath.Resolve(o.functions, path, o.allowAbsolutePaths)
		return err
	}, report.Options{Runner: name, RunnerUID: uid, Recheck: recheckInterval, Token: token}), nil
}

// memoryHeadroom is the binary-runner's own memory beside its calls'
// (requests being received, the executor table, the runtime): with
// --max-in-flight-bytes and --max-queue-bytes, its soft memory limit
// (unless GOMEMLIMIT is set).
const memoryHeadroom = 256 << 20

// recheckInterval is how often the binary executors' paths are checked again
// while the table stays the same (a volume mounted late, a file removed).
const recheckInterval = time.Minute

func main() { grpcserving.Main("binary-runner", run) }

// identity names this runner in its reports to the config-reconciler: its
// pod's name and UID (POD_NAME and POD_UID, from the downward API), or
// outside a cluster the host name and no UID.
func identity() (name, uid string, err error) {
	if name := os.Getenv("POD_NAME"); name != "" {
		return name, os.Getenv("POD_UID"), nil
	}
	host, err := os.Hostname()
	if err != nil {
		return "", "", fmt.Errorf("naming this runner for its reports (no POD_NAME): %w", err)
	}
	return host, "", nil
}

// passedEnv is NAME=value of each of names that is set in this process's
// environment.
func passedEnv(names []string) []string {
	var env []string
	for _, name := range names {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	return env
}

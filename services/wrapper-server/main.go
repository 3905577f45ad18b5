// Command wrapper-server runs inside each function pod: it serves porch's
// evaluator.FunctionEvaluator and gRPC health on --port (9446) and runs the
// function's entrypoint, given after "--", once per call, with the
// ResourceList on stdin. Runs are isolated like the binary-runner's (clean
// environment, private working directory, own process group, capped output)
// and bounded: --max-concurrent at once, --max-queue waiting, beyond that
// ResourceExhausted.
//
//	wrapper-server --port 9446 --max-request-body-size 6291456 -- /usr/local/bin/function
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/admission"
	"github.com/fnrunner/fnrunner/libs/evalmetrics"
	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/fnexec"
	"github.com/fnrunner/fnrunner/libs/fnresult"
	"github.com/fnrunner/fnrunner/libs/grpcserving"
	"github.com/fnrunner/fnrunner/libs/resourcelist"
	"github.com/fnrunner/fnrunner/libs/sandbox"
	"github.com/fnrunner/fnrunner/libs/telemetry"
)

type options struct {
	common             grpcserving.Flags
	port               int
	maxRequestBodySize int
	maxLogBytes        int
	maxConcurrent      int
	maxQueue           int
	functionImage      string
	namer              *evalmetrics.ImageNamer
	copyTo             string
	tempDir            string
	entrypoint         []string
	sandbox            sandbox.Flags
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("wrapper-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	grpcserving.Usage(fs, "Runs in a function pod: serves evaluator.FunctionEvaluator on --port and runs the function\nentrypoint given after -- once per call.\n\n  wrapper-server [flags] -- ENTRYPOINT [ARGS...]")
	o.common.Register(fs, "")
	fs.IntVar(&o.port, "port", 9446, "TCP port of evaluator.FunctionEvaluator and gRPC health.")
	fs.IntVar(&o.maxRequestBodySize, "max-request-body-size", 6*1024*1024, "Largest gRPC message received or sent, in bytes; also the cap on the function's output.")
	fs.IntVar(&o.maxLogBytes, "max-log-bytes", fnexec.DefaultMaxLogBytes, "Most bytes of the function's stderr kept and returned as its log.")
	fs.IntVar(&o.maxConcurrent, "max-concurrent", runtime.GOMAXPROCS(0), "Function runs at once. Default: the CPUs this container may use (its CPU limit, as Go's GOMAXPROCS reads it), not the node's.")
	fs.IntVar(&o.maxQueue, "max-queue", 16, "Calls that may wait for a run; more are refused with ResourceExhausted.")
	fs.StringVar(&o.functionImage, "function-image", "", "The image this pod was started for (the pod-manager sets it): the function label of its calls' metrics; calls of other images are counted as other.")
	fs.StringVar(&o.tempDir, "temp-dir", "", "Where each call gets its private working directory (HOME, TMPDIR). Default: the system temp dir ($TMPDIR, else /tmp), or, in a container where it is missing or not writable (an image built from scratch, under a template that mounts no /tmp), a tmp directory beside this executable: the volume the init container copied it to.")
	fs.StringVar(&o.copyTo, "copy-to", "", "Copy this executable, and fnsandbox beside it, into the directory and exit (the pod's init container does this; no shell needed).")
	// The function's image is its whole file system: it may read all of
	// it (the pod's template decides what is mounted) and, as in porch's
	// pods, reach the network; it writes only to its temp dir.
	o.sandbox.Register(fs, sandbox.Defaults{ReadOnly: []string{"/"}, AnyConnect: true, WarmHelpers: 1})
	if err := fs.Parse(args); err != nil {
		return nil, grpcserving.FlagError(err)
	}
	if o.copyTo != "" {
		return o, nil
	}
	o.entrypoint = fs.Args()
	if len(o.entrypoint) == 0 {
		return nil, grpcserving.FlagError(errors.New("no function entrypoint: give it after --"))
	}
	namer, err := evalmetrics.NewImageNamer(o.functionImage)
	if err != nil {
		return nil, grpcserving.FlagError(fmt.Errorf("--function-image: %w", err))
	}
	o.namer = namer
	return o, nil
}

// functionRuntime runs the function on one ResourceList: the shape of the
// binary-runner's runner.Runtime (see there), declared here so that this
// server does not link the binary-runner. The entrypoint runs as a
// *fnexec.Binary.
type functionRuntime interface {
	Run(ctx context.Context, input mem.BufferSlice) (*fnresult.Result, error)
}

var _ functionRuntime = (*fnexec.Binary)(nil)

type wrapper struct {
	function          functionRuntime
	limit             *admission.Limiter
	concurrent, queue int
}

// EvaluateFunction implements evalwire.Server. Like the binary-runner, it
// only sniffs the ResourceList before the run (fnresult.Respond).
func (w *wrapper) EvaluateFunction(ctx context.Context, req *evalwire.Request) (*evalwire.Response, error) {
	// No answer refers to the request's buffers: they go back to the pool.
	defer req.Free()
	if err := resourcelist.SniffFrom(evalwire.NewReader(req.ResourceList)); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	release, err := w.limit.Acquire(ctx)
	if err != nil {
		if errors.Is(err, admission.ErrQueueFull) {
			return nil, status.Errorf(codes.ResourceExhausted, "function %q: %v in this pod (--max-concurrent %d, --max-queue %d)", req.Image, err, w.concurrent, w.queue)
		}
		// It never started: not "killed at its deadline", as Respond
		// says of a run.
		st := status.FromContextError(err)
		return nil, status.Errorf(st.Code(), "function %q: not run: its call ended while it waited for a run slot in this pod (--max-concurrent %d): %v", req.Image, w.concurrent, err)
	}
	defer release()
	res, err := w.function.Run(ctx, req.ResourceList)
	return fnresult.Respond(req.Image, req.ResourceList, res, err)
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	return serve(ctx, args, stderr, nil)
}

// serve runs the server; ready, if not nil, receives the listener's address.
func serve(ctx context.Context, args []string, stderr io.Writer, ready chan<- net.Addr) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.copyTo != "" {
		return copySelf(o.copyTo)
	}
	log := o.common.Logger(stderr, "wrapper-server")
	tel, err := telemetry.Setup(ctx, "wrapper-server")
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("this executable: %w", err)
	}
	tempDir, err := callsDir(o.tempDir, filepath.Dir(self))
	if err != nil {
		return err
	}
	if o.tempDir == "" && tempDir != os.TempDir() {
		log.Info("calls' private directories are made beside the wrapper-server: the container has no usable temp dir", "temp_dir", tempDir, "system_temp_dir", os.TempDir())
	}
	o.sandbox.TempDir = tempDir
	dirs, err := fnexec.NewDirs(tempDir)
	if err != nil {
		return err
	}
	defer dirs.Close()
	sb, err := o.sandbox.Open(ctx, log)
	if err != nil {
		return err
	}
	defer sb.Close()
	lis, srv, err := o.common.Open(log, o.port, nil, grpcserving.Config{
		Telemetry:      tel,
		Name:           "wrapper-server",
		ServerOptions:  []grpc.ServerOption{evalwire.ServerCodec()},
		MaxMessageSize: o.maxRequestBodySize,
	})
	if err != nil {
		return err
	}
	// The function runs with its container's environment and working
	// directory (the image's ENV and WORKDIR, the template's env and
	// envFrom), as porch's wrapper-server runs it; its HOME and TMPDIR stay
	// a private directory removed after the call.
	workdir, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("working directory: %w", err)
	}
	srv.Registry.MustRegister(sb.Collector())
	limit := admission.New(o.maxConcurrent, o.maxQueue)
	srv.Registry.MustRegister(limit.Collectors()...)
	evaluations, err := evalmetrics.New(srv.Registry, o.namer)
	if err != nil {
		return err
	}
	exec := fnexec.Options{MaxOutputBytes: o.maxRequestBodySize, MaxLogBytes: o.maxLogBytes, Env: containerEnv(), Dir: workdir, TempDir: tempDir, Dirs: dirs}
	if sb.Enabled() {
		exec.Sandbox = sb
	}
	evalwire.Register(srv, &evalmetrics.Evaluator{Metrics: evaluations, Executor: "wrapper", Next: &wrapper{
		function:   &fnexec.Binary{Argv: o.entrypoint, Options: exec},
		limit:      limit,
		concurrent: o.maxConcurrent,
		queue:      o.maxQueue,
	}})
	srv.Health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	log.Info("running function", "entrypoint", o.entrypoint)
	if ready != nil {
		ready <- lis.Addr()
	}
	return srv.Serve(ctx, lis)
}

func main() { grpcserving.Main("wrapper-server", run) }

// containerEnv is this container's environment for the function, less HOME
// and TMPDIR, which stay the call's private directory.
func containerEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); name != "HOME" && name != "TMPDIR" {
			env = append(env, kv)
		}
	}
	return env
}

// callsDir is where calls' private directories go: flag when set, else the
// system temp dir when a directory can be made in it, else (a container
// with no /tmp, or one it may not write) tmp in exeDir, the wrapper-server's
// own directory, made if need be: in a function pod, the volume the init
// container copied the wrapper-server to, writable by it. Every call's uid
// must reach it (the sandbox's uid layer): 0711.
func callsDir(flag, exeDir string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if probe, err := os.MkdirTemp(os.TempDir(), "probe-"); err == nil {
		_ = os.Remove(probe)
		return os.TempDir(), nil
	}
	dir := filepath.Join(exeDir, "tmp")
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return "", fmt.Errorf("no usable temp dir %s, and none beside this executable: %w", os.TempDir(), err)
	}
	return dir, nil
}

// copySelf copies this executable to dir/wrapper-server, and fnsandbox
// beside it, when there is one, to dir/fnsandbox.
func copySelf(dir string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := copyExecutable(self, dir, "wrapper-server"); err != nil {
		return err
	}
	helper := filepath.Join(filepath.Dir(self), "fnsandbox")
	if _, err := os.Stat(helper); err != nil {
		return nil
	}
	return copyExecutable(helper, dir, "fnsandbox")
}

// copyExecutable copies src to dir/name, atomically.
func copyExecutable(src, dir, name string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	dst := filepath.Join(dir, name)
	out, err := os.OpenFile(dst+".tmp", os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(dst+".tmp", dst)
}

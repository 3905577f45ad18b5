// Command gateway is the gRPC endpoint porch talks to: it serves porch's
// evaluator.FunctionEvaluator service and gRPC health on --port (9445) and
// routes each call to the executor the executor table names.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fnrunner/fnrunner/libs/admission"
	"github.com/fnrunner/fnrunner/libs/configclient"
	"github.com/fnrunner/fnrunner/libs/evalmetrics"
	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/executortable"
	"github.com/fnrunner/fnrunner/libs/grpcserving"
	"github.com/fnrunner/fnrunner/libs/sendonce"
	"github.com/fnrunner/fnrunner/libs/telemetry"
	"github.com/fnrunner/fnrunner/services/gateway/server"
)

type options struct {
	tls                 grpcserving.TLSFlags
	common              grpcserving.Flags
	admission           admission.Flags
	port                int
	maxRequestBodySize  int
	configAddress       string
	binaryRunnerAddress string
	podManagerAddress   string
	podManagerSRV       string
	discoveryInterval   time.Duration
	disableRuntimes     string
	healthInterval      time.Duration
	connectWait         time.Duration
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	grpcserving.Usage(fs, "Serves porch's evaluator.FunctionEvaluator/EvaluateFunction and routes each call to an executor:\ngo, then binary, then pod; only NotFound falls through to the next.")
	o.common.Register(fs, ":9090")
	o.tls.Register(fs)
	fs.IntVar(&o.port, "port", 9445, "TCP port of the porch-facing gRPC service (evaluator.FunctionEvaluator and grpc.health.v1.Health). 0 picks a free port.")
	fs.IntVar(&o.maxRequestBodySize, "max-request-body-size", 6*1024*1024, "Largest gRPC message received or sent, in bytes. Must match porch-server's --max-request-body-size.")
	o.admission.Register(fs, 1<<30, 4096, 128<<20, "input bytes × 2 (the request's buffers and the answer's)")
	fs.StringVar(&o.configAddress, "config-address", "localhost:9447", "Address of the config-reconciler's executor table stream.")
	fs.StringVar(&o.binaryRunnerAddress, "binary-runner-address", "localhost:9448", "Address of the binary-runners (go and binary executors), calls balanced round-robin across them: host:port, dns:///name:port (every address of the name: use a headless Service so each replica gets calls), or a comma-separated list of host:port.")
	fs.StringVar(&o.podManagerAddress, "pod-manager-address", "", "Comma-separated addresses of the pod-manager replicas (pod executor); each function goes to one replica by rendezvous hashing. Empty: no pod executor.")
	fs.StringVar(&o.podManagerSRV, "pod-manager-srv", "", `DNS SRV name of the pod-manager replicas instead of --pod-manager-address, e.g. "_grpc._tcp.fnrunner-pod-manager": the StatefulSet's headless Service lists one target per ordinal, looked up again every --pod-manager-discovery-interval, so scaling the StatefulSet needs no gateway change.`)
	fs.DurationVar(&o.discoveryInterval, "pod-manager-discovery-interval", 10*time.Second, "How often --pod-manager-srv is looked up again.")
	fs.StringVar(&o.disableRuntimes, "disable-runtimes", "", "Comma-separated executors not to use: go, binary (porch's name: exec), pod.")
	fs.DurationVar(&o.healthInterval, "health-interval", 2*time.Second, "How often the executors' health is checked; the gateway is SERVING only with an executor table and a reachable executor.")
	fs.DurationVar(&o.connectWait, "executor-connect-timeout", 10*time.Second, "How long a call waits for a connection to its executor service (e.g. while it restarts) before Unavailable. A call is never sent twice: one whose connection breaks after it was sent fails with Unavailable.")
	if err := o.common.Parse(fs, args); err != nil {
		return nil, grpcserving.FlagError(err)
	}
	return o, nil
}

// disabled parses --disable-runtimes.
func disabled(s string) (map[executortable.Kind]bool, error) {
	out := map[executortable.Kind]bool{}
	for _, f := range strings.Split(s, ",") {
		switch f = strings.TrimSpace(f); f {
		case "":
		case "exec", "binary":
			out[executortable.Binary] = true
		case "go":
			out[executortable.Go] = true
		case "pod":
			out[executortable.Pod] = true
		default:
			return nil, fmt.Errorf("--disable-runtimes: unknown executor %q (want go, binary, exec or pod)", f)
		}
	}
	return out, nil
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	return serve(ctx, args, stderr, nil)
}

// serve runs the gateway; ready, if not nil, receives the listener's address.
func serve(ctx context.Context, args []string, stderr io.Writer, ready chan<- net.Addr) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	off, err := disabled(o.disableRuntimes)
	if err != nil {
		return grpcserving.FlagError(err)
	}
	dialCreds, err := o.tls.DialOption()
	if err != nil {
		return grpcserving.FlagError(err)
	}
	log := o.common.Logger(stderr, "gateway")
	// Past its container's limit the kubelet kills the service with
	// every call in flight: what admission and the transport may hold
	// must fit it.
	if err := o.admission.FitContainer(o.common.Held(o.maxRequestBodySize) + admission.RuntimeHeadroom); err != nil {
		return grpcserving.FlagError(err)
	}
	tel, err := telemetry.Setup(ctx, "gateway")
	if err != nil {
		return err
	}
	o.common.LogIgnoredPorchFlags(log)

	cfg, closeCfg, err := configclient.Dial(log, o.configAddress, "gateway", dialCreds)
	if err != nil {
		return err
	}
	defer closeCfg()

	executorDial := o.executorDialOptions(dialCreds, tel)
	runnerConn, err := o.dialBinaryRunners(executorDial)
	if err != nil {
		return err
	}
	defer runnerConn.Close()
	routes := runnerRoutes(runnerConn, off)
	podRoutes, discovered, closeReplicas, err := o.podManagerRoutes(log, off, executorDial)
	if err != nil {
		return err
	}
	defer closeReplicas()
	ev := server.NewEvaluator(log, cfg, append(routes, podRoutes...)...)

	lis, srv, err := o.open(log, tel, cfg, ev, discovered)
	if err != nil {
		return err
	}
	if ready != nil {
		ready <- lis.Addr()
	}
	return o.runUntilDone(ctx, cfg, discovered, ev, lis, srv)
}

// executorDialOptions are the options of the connections to the executor
// services: a call sent at most once, waiting up to
// --executor-connect-timeout for a connection.
func (o *options) executorDialOptions(dialCreds grpc.DialOption, tel *telemetry.Telemetry) []grpc.DialOption {
	return append([]grpc.DialOption{dialCreds,
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(o.maxRequestBodySize), grpc.MaxCallSendMsgSize(o.maxRequestBodySize))},
		append(append(sendonce.DialOptions(o.connectWait), grpcserving.WindowDialOptions()...), tel.DialOptions()...)...)
}

// dialBinaryRunners connects to the binary-runners of
// --binary-runner-address, calls balanced across them.
func (o *options) dialBinaryRunners(executorDial []grpc.DialOption) (*grpc.ClientConn, error) {
	target, targetDial, err := sendonce.Target(o.binaryRunnerAddress)
	if err != nil {
		return nil, grpcserving.FlagError(fmt.Errorf("--binary-runner-address: %w", err))
	}
	runnerConn, err := grpc.NewClient(target, append(targetDial, executorDial...)...)
	if err != nil {
		return nil, fmt.Errorf("binary-runner address %q: %w", o.binaryRunnerAddress, err)
	}
	return runnerConn, nil
}

// runnerRoutes are the routes of the go and binary executors, both served
// by the binary-runners, that off leaves on.
func runnerRoutes(runnerConn *grpc.ClientConn, off map[executortable.Kind]bool) []server.Route {
	var routes []server.Route
	for _, k := range []executortable.Kind{executortable.Go, executortable.Binary} {
		if !off[k] {
			routes = append(routes, server.Route{Kind: k, Client: server.Service{Client: evalwire.NewClient(runnerConn)}, Health: healthpb.NewHealthClient(runnerConn)})
		}
	}
	return routes
}

// podManagerRoutes is the pod executor's route, unless off has it or no
// pod-manager is named: to the replicas of --pod-manager-srv (discovered,
// then not nil) or of --pod-manager-address. closeConns closes the
// connections to the replicas of --pod-manager-address; on an error they
// are closed already.
func (o *options) podManagerRoutes(log *slog.Logger, off map[executortable.Kind]bool, executorDial []grpc.DialOption) (routes []server.Route, discovered *server.DiscoveredReplicas, closeConns func(), err error) {
	// dialReplica connects to one pod-manager replica.
	dialReplica := func(addr string) (server.Replica, func(), error) {
		conn, err := grpc.NewClient(addr, executorDial...)
		if err != nil {
			return server.Replica{}, nil, fmt.Errorf("pod-manager address %q: %w", addr, err)
		}
		return server.Replica{Address: addr, Client: server.Service{Client: evalwire.NewClient(conn)}, Health: healthpb.NewHealthClient(conn)},
			func() { conn.Close() }, nil
	}
	var closers []func()
	closeConns = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	if o.podManagerSRV != "" && o.podManagerAddress != "" {
		return nil, nil, nil, grpcserving.FlagError(fmt.Errorf("--pod-manager-srv and --pod-manager-address exclude each other"))
	}
	if o.podManagerSRV != "" && !off[executortable.Pod] {
		discovered = server.NewDiscoveredReplicas(log, server.SRVLookup(o.podManagerSRV), dialReplica)
		routes = append(routes, server.Route{Kind: executortable.Pod, Client: discovered, Health: discovered, Unclaimed: true})
	}
	if o.podManagerAddress != "" && !off[executortable.Pod] {
		var replicas server.Replicas
		for _, addr := range strings.Split(o.podManagerAddress, ",") {
			addr = strings.TrimSpace(addr)
			if addr == "" {
				continue
			}
			r, closeConn, err := dialReplica(addr)
			if err != nil {
				closeConns()
				return nil, nil, nil, err
			}
			closers = append(closers, closeConn)
			replicas = append(replicas, r)
		}
		if len(replicas) == 0 {
			closeConns()
			return nil, nil, nil, grpcserving.FlagError(fmt.Errorf("--pod-manager-address %q names no address", o.podManagerAddress))
		}
		routes = append(routes, server.Route{Kind: executortable.Pod, Client: replicas, Health: replicas, Unclaimed: true})
	}
	return routes, discovered, closeConns, nil
}

// open opens the porch-facing port and registers on it ev, behind
// admission, and the metrics.
func (o *options) open(log *slog.Logger, tel *telemetry.Telemetry, cfg *configclient.Client, ev *server.Evaluator, discovered *server.DiscoveredReplicas) (net.Listener, *grpcserving.Server, error) {
	lis, srv, err := o.common.Open(log, o.port, nil, grpcserving.Config{
		Telemetry:      tel,
		Name:           "gateway",
		ServerOptions:  []grpc.ServerOption{evalwire.ServerCodec()},
		MaxMessageSize: o.maxRequestBodySize,
	})
	if err != nil {
		return nil, nil, err
	}
	admitted := o.admission.Limiter()
	srv.Registry.MustRegister(admitted.Collectors()...)
	srv.Registry.MustRegister(ev.Collectors()...)
	srv.Registry.MustRegister(cfg.Collectors()...)
	if discovered != nil {
		srv.Registry.MustRegister(discovered.Collectors()...)
	}
	evaluations, err := evalmetrics.New(srv.Registry, cfg)
	if err != nil {
		return nil, nil, err
	}
	evalwire.Register(srv, &evalmetrics.Evaluator{Metrics: evaluations, Executor: evalmetrics.None,
		Next: &admission.Evaluator{Next: ev, Limit: admitted, Factor: 2, Service: "gateway"}})
	return lis, srv, nil
}

// runUntilDone runs the gateway until ctx ends or a part fails: the executor table,
// the discovery of pod-manager replicas, the executors' health (the
// gateway's) and the porch-facing service.
func (o *options) runUntilDone(ctx context.Context, cfg *configclient.Client, discovered *server.DiscoveredReplicas, ev *server.Evaluator, lis net.Listener, srv *grpcserving.Server) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { cfg.Run(ctx); return nil })
	if discovered != nil {
		g.Go(func() error { discovered.Run(ctx, o.discoveryInterval); return nil })
	}
	g.Go(func() error {
		ev.WatchHealth(ctx, o.healthInterval, func(s healthpb.HealthCheckResponse_ServingStatus) {
			if ctx.Err() == nil {
				srv.Health.SetServingStatus("", s)
			}
		})
		return nil
	})
	g.Go(func() error { return srv.Serve(ctx, lis) })
	return g.Wait()
}

func main() { grpcserving.Main("gateway", run) }

// Command config-reconciler watches FunctionConfig objects (or, with
// --config-dir, FunctionConfig YAML files), writes their status, and streams
// the executor table to the gateway and the runners.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/fnrunner/fnrunner/libs/apis/config/v1alpha1"
	"github.com/fnrunner/fnrunner/libs/grpcserving"
	"github.com/fnrunner/fnrunner/libs/imagematch"
	"github.com/fnrunner/fnrunner/libs/reporttoken"
	"github.com/fnrunner/fnrunner/libs/restconfig"
	"github.com/fnrunner/fnrunner/libs/telemetry"
	configpb "github.com/fnrunner/fnrunner/protos/configstream"
	"github.com/fnrunner/fnrunner/services/config-reconciler/configs"
	"github.com/fnrunner/fnrunner/services/config-reconciler/controller"
	"github.com/fnrunner/fnrunner/services/config-reconciler/filesource"
	"github.com/fnrunner/fnrunner/services/config-reconciler/reports"
	"github.com/fnrunner/fnrunner/services/config-reconciler/store"
)

type options struct {
	tls                  grpcserving.TLSFlags
	common               grpcserving.Flags
	port                 int
	namespace            string
	configDir            string
	defaultImagePrefix   string
	allowAbsolutePaths   bool
	kubeconfig           string
	leaderElect          bool
	leaderElectionID     string
	maxMessageSize       int
	healthProbeAddress   string
	reportAudience       string
	reportServiceAccount string
	releaseFinalizers    bool
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("config-reconciler", flag.ContinueOnError)
	fs.SetOutput(stderr)
	grpcserving.Usage(fs, "Watches FunctionConfigs in --namespace (or reads them from --config-dir), writes their status,\nand streams the executor table to the gateway and the runners on --port.")
	o.common.Register(fs, ":9091")
	o.tls.Register(fs)
	fs.IntVar(&o.port, "port", 9447, "TCP port of the internal gRPC service that streams the executor table (and gRPC health).")
	fs.StringVar(&o.namespace, "namespace", "porch-fn-system", "Namespace whose FunctionConfigs are watched; in --config-dir mode, the namespace given to files' objects without one.")
	fs.StringVar(&o.configDir, "config-dir", "", "Read FunctionConfig YAML files from this directory (reloaded on change) instead of watching a cluster. For local use.")
	fs.StringVar(&o.defaultImagePrefix, "default-image-prefix", imagematch.DefaultPrefix, "Prefix of images given without a registry, and what an empty prefix in a FunctionConfig means.")
	fs.BoolVar(&o.allowAbsolutePaths, "allow-absolute-binary-paths", false, "Accept absolute binaryExecutor paths (otherwise only paths inside the binary-runner's --functions directory). Must match the binary-runner's flag.")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Path to a kubeconfig. Default: in-cluster configuration, then $KUBECONFIG, then ~/.kube/config.")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "Elect a leader among replicas; only the leader writes status, every replica serves the stream.")
	fs.StringVar(&o.leaderElectionID, "leader-election-id", "fnrunner-config-reconciler", "Name of the Lease used for leader election, in --namespace.")
	fs.IntVar(&o.maxMessageSize, "max-message-size", 16*1024*1024, "Largest gRPC message sent or received on --port, in bytes.")
	fs.StringVar(&o.reportAudience, "report-audience", reporttoken.DefaultAudience, "Audience of the service account tokens binary-runners prove their pod with when they report on --port (a projected serviceAccountToken volume in deploy/); reports without one bound to the pod they name are refused. Not used with --config-dir.")
	fs.StringVar(&o.reportServiceAccount, "report-service-account", "fnrunner-binary-runner", "Service account of the binary-runners' pods in --namespace: a report whose token is of another is refused. Not used with --config-dir.")
	fs.BoolVar(&o.releaseFinalizers, "release-finalizers", false, "Uninstall step, run once fnrunner's Deployments are gone: remove the function-runner finalizer (config.porch.kpt.dev/functionconfig-function-runner) from every FunctionConfig in --namespace, leaving every other finalizer, then exit. Only when no function runner (fnrunner or porch's) will manage them again.")
	fs.StringVar(&o.healthProbeAddress, "health-probe-address", "0", "Address of controller-runtime's HTTP /healthz and /readyz (\"0\" disables; gRPC health on --port is always served).")
	if err := o.common.Parse(fs, args); err != nil {
		return nil, grpcserving.FlagError(err)
	}
	if o.releaseFinalizers && o.configDir != "" {
		return nil, grpcserving.FlagError(fmt.Errorf("--release-finalizers acts on a cluster; it cannot be used with --config-dir"))
	}
	if o.configDir == "" && (o.reportAudience == "" || o.reportServiceAccount == "") {
		return nil, grpcserving.FlagError(fmt.Errorf("--report-audience and --report-service-account must name something: every report would be refused"))
	}
	return o, nil
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	log := o.common.Logger(stderr, "config-reconciler")
	tel, err := telemetry.Setup(ctx, "config-reconciler")
	if err != nil {
		return err
	}
	o.common.LogIgnoredPorchFlags(log)
	if o.releaseFinalizers {
		return releaseFinalizers(ctx, o, log)
	}
	cfgOpts := configs.Options{DefaultImagePrefix: o.defaultImagePrefix, AllowAbsoluteBinaryPaths: o.allowAbsolutePaths}
	st := store.New(o.defaultImagePrefix)

	// Every replica keeps the binary-runners' reports it receives: in a
	// cluster as ConfigMaps, which the leader reads into status; with
	// --config-dir there is no status, and they are only logged.
	var mgr ctrl.Manager
	var recorder store.Recorder = reports.NewMemory(log)
	if o.configDir == "" {
		if mgr, err = newManager(o, log); err != nil {
			return err
		}
		recorder = reports.NewConfigMaps(log, mgr.GetClient(), mgr.GetAPIReader(), reports.Options{
			Namespace:      o.namespace,
			Tokens:         reports.TokenReview{Client: mgr.GetClient(), Audience: o.reportAudience},
			ServiceAccount: o.reportServiceAccount,
		})
	}

	lis, srv, err := o.common.Open(log, o.port, &o.tls, grpcserving.Config{
		Telemetry:      tel,
		Name:           "config-reconciler",
		MaxMessageSize: o.maxMessageSize,
		Gatherers:      []prometheus.Gatherer{ctrlmetrics.Registry},
	})
	if err != nil {
		return err
	}
	configpb.RegisterExecutorConfigServer(srv, &store.Server{Store: st, Reports: recorder, Log: log, Stopping: srv.Stopping()})
	srv.Registry.MustRegister(st.Collectors()...)

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return srv.Serve(ctx, lis) })
	g.Go(func() error {
		select {
		case <-st.Loaded():
			srv.Health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
			log.Info("executor table loaded; serving")
		case <-ctx.Done():
		}
		return nil
	})

	if o.configDir != "" {
		log.Info("reading FunctionConfigs from files", "dir", o.configDir)
		g.Go(func() error { return filesource.Run(ctx, log, o.configDir, o.namespace, cfgOpts, st) })
		return g.Wait()
	}
	if err := controller.Setup(mgr, log, o.namespace, cfgOpts, st); err != nil {
		return err
	}
	log.Info("watching FunctionConfigs", "namespace", o.namespace, "leaderElection", o.leaderElect)
	g.Go(func() error { return mgr.Start(ctx) })
	return g.Wait()
}

// newManager is the controller-runtime manager of cluster mode, its cache
// limited to --namespace (controller.CacheOptions).
func newManager(o *options, log *slog.Logger) (ctrl.Manager, error) {
	restCfg, err := restconfig.Load(o.kubeconfig)
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                  scheme,
		Logger:                  logr.FromSlogHandler(log.Handler()),
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  o.healthProbeAddress,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        o.leaderElectionID,
		LeaderElectionNamespace: o.namespace,
		// Give up leadership at once on shutdown so another replica takes
		// over status without waiting for the lease to expire.
		LeaderElectionReleaseOnCancel: true,
		Cache:                         controller.CacheOptions(o.namespace),
	})
	if err != nil {
		return nil, fmt.Errorf("controller manager: %w", err)
	}
	if o.healthProbeAddress != "0" {
		if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
			return nil, err
		}
	}
	return mgr, nil
}

// releaseFinalizers is --release-finalizers: one pass, then exit.
func releaseFinalizers(ctx context.Context, o *options, log *slog.Logger) error {
	restCfg, err := restconfig.Load(o.kubeconfig)
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(restCfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	n, err := controller.ReleaseFinalizers(ctx, log, c, o.namespace)
	if err != nil {
		return err
	}
	log.Info("function-runner finalizer released", "namespace", o.namespace, "functionConfigs", n, "finalizer", controller.Finalizer)
	return nil
}

func main() { grpcserving.Main("config-reconciler", run) }

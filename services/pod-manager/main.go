// Command pod-manager runs KRM functions in pods for the gateway: it creates
// pods and Services from templates (with per-function overrides), keeps a
// pod cache with TTL garbage collection, and forwards each call to a pod's
// wrapper-server.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/fnrunner/fnrunner/libs/admission"
	"github.com/fnrunner/fnrunner/libs/apis/config/v1alpha1"
	"github.com/fnrunner/fnrunner/libs/configclient"
	"github.com/fnrunner/fnrunner/libs/evalmetrics"
	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/grpcserving"
	"github.com/fnrunner/fnrunner/libs/imagemeta"
	"github.com/fnrunner/fnrunner/libs/restconfig"
	"github.com/fnrunner/fnrunner/libs/telemetry"
	"github.com/fnrunner/fnrunner/services/pod-manager/kube"
	"github.com/fnrunner/fnrunner/services/pod-manager/podcache"
	"github.com/fnrunner/fnrunner/services/pod-manager/server"
	"github.com/fnrunner/fnrunner/services/pod-manager/templates"
)

func run(ctx context.Context, args []string, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	dialCreds, err := o.tls.DialOption()
	if err != nil {
		return grpcserving.FlagError(err)
	}
	m := &podManager{o: o, log: o.common.Logger(stderr, "pod-manager")}
	// Past its container's limit the kubelet kills the service with
	// every call in flight: what admission and the transport may hold
	// must fit it.
	if err := o.admission.FitContainer(o.rest()); err != nil {
		return grpcserving.FlagError(err)
	}
	if m.tel, err = telemetry.Setup(ctx, "pod-manager"); err != nil {
		return err
	}
	o.common.LogIgnoredPorchFlags(m.log)
	if err := m.connectCluster(ctx); err != nil {
		return err
	}
	if err := m.newResolver(ctx); err != nil {
		return err
	}
	m.conns = server.NewConns(o.maxRequestBodySize, append(grpcserving.WindowDialOptions(), m.tel.DialOptions()...)...)
	defer m.conns.CloseAll()
	m.newPodCache()
	if err := m.setupControllers(); err != nil {
		return err
	}
	cfg, closeCfg, err := configclient.Dial(m.log, o.configAddress, "pod-manager", dialCreds)
	if err != nil {
		return err
	}
	defer closeCfg()
	m.cfg = cfg
	if err := m.openServer(); err != nil {
		return err
	}
	return m.serve(ctx)
}

// podManager is the pod-manager's parts, which run sets up step by step.
type podManager struct {
	o   *options
	log *slog.Logger
	tel *telemetry.Telemetry

	// The cluster: its client, and the pod templates found or created there.
	restCfg *rest.Config
	scheme  *runtime.Scheme
	direct  client.Client
	tpl     *templates.Templates
	current atomic.Pointer[templates.Templates]

	// Image metadata, and the pods' pull Secret ("": none).
	resolver   *imagemeta.Resolver
	pullSecret string

	// The pods: their connections, their backend and cache, and the
	// controllers that watch them and the templates.
	conns   *server.Conns
	backend *kube.Backend
	pods    *podcache.Cache
	mgr     ctrl.Manager
	dialing kube.Dialing

	// The executor table, and the executor service.
	cfg       *configclient.Client
	lis       net.Listener
	srv       *grpcserving.Server
	podServer *server.Server
}

// connectCluster makes the cluster's client and ensures the pod templates
// in the pods' namespace.
func (m *podManager) connectCluster(ctx context.Context) error {
	o := m.o
	var err error
	if m.restCfg, err = restconfig.Load(o.kubeconfig); err != nil {
		return err
	}
	m.scheme = runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(m.scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(m.scheme); err != nil {
		return err
	}
	if m.direct, err = client.New(m.restCfg, client.Options{Scheme: m.scheme}); err != nil {
		return err
	}
	if m.tpl, err = templates.Ensure(ctx, m.direct, o.podNamespace, o.wrapperServerImage); err != nil {
		return err
	}
	m.current.Store(m.tpl)
	return nil
}

// newResolver makes the image metadata resolver, with the registries'
// credentials (then also the pods' pull Secret) and CAs when enabled.
func (m *podManager) newResolver(ctx context.Context) error {
	o := m.o
	metaOpts := o.registryOptions()
	if o.enablePrivateRegistries {
		metaOpts.DockerConfigPath = o.registryAuthSecretPath
		if err := ensurePullSecret(ctx, m.direct, o.podNamespace, o.registryAuthSecretName, o.registryAuthSecretPath); err != nil {
			return err
		}
		m.pullSecret = o.registryAuthSecretName
	}
	if o.enablePrivateRegistryTLS {
		metaOpts.CAPaths = []string{o.tlsSecretPath}
	}
	var err error
	m.resolver, err = imagemeta.New(metaOpts)
	return err
}

// newPodCache makes the pods' backend, in the cluster, and their cache.
func (m *podManager) newPodCache() {
	o := m.o
	m.backend = &kube.Backend{Client: m.direct, Namespace: o.podNamespace, Owner: o.owner, MaxRequestBodySize: o.maxRequestBodySize, MaxCallsPerPod: o.maxCallsPerPod, OnDelete: m.conns.Close,
		PublishNotReadyAddresses: kube.Addressing(o.podAddress) == kube.ServiceDNS && o.podProbeInterval > 0}
	m.pods = podcache.New(m.backend)
	m.pods.ReadyTimeout = o.podReadyTimeout
}

// setupControllers makes the controller manager, with the watchers of the
// pods (for the cache) and of the templates.
func (m *podManager) setupControllers() error {
	o, log := m.o, m.log
	mgr, err := ctrl.NewManager(m.restCfg, ctrl.Options{
		Scheme:  m.scheme,
		Logger:  logr.FromSlogHandler(log.Handler()),
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   cache.Options{DefaultNamespaces: map[string]cache.Config{o.podNamespace: {}}},
	})
	if err != nil {
		return fmt.Errorf("controller manager: %w", err)
	}
	m.mgr = mgr
	m.dialing = kube.Dialing{Addressing: kube.Addressing(o.podAddress), ClusterDomain: o.clusterDomain}
	if err := (&kube.Watcher{Client: mgr.GetClient(), Namespace: o.podNamespace, Owner: o.owner, Dialing: m.dialing, Events: m.pods,
		Health: m.conns, ProbeFor: probeFor(o.podReadyTimeout), ProbeInterval: o.podProbeInterval}).SetupWithManager(mgr); err != nil {
		return err
	}
	// A template change rolls the pods: new calls get pods of the new
	// version (it is part of the cache key), old ones go once idle.
	pods := m.pods
	return (&templates.Watcher{Client: m.direct, Namespace: o.podNamespace, WrapperImage: o.wrapperServerImage, Current: &m.current,
		OnChange: func(t *templates.Templates) {
			log.Info("templates changed; rolling function pods", "templateVersion", t.Version())
			pods.Retire(func(key podcache.Key) bool { return key.TemplateVersion == t.Version() })
		}}).SetupWithManager(mgr)
}

// openServer opens the executor service's port and registers on it the
// pods' evaluator, behind admission, and the metrics.
func (m *podManager) openServer() error {
	o := m.o
	lis, srv, err := o.common.Open(m.log, o.port, &o.tls, grpcserving.Config{
		Telemetry:      m.tel,
		Name:           "pod-manager",
		ServerOptions:  []grpc.ServerOption{evalwire.ServerCodec()},
		MaxMessageSize: o.maxRequestBodySize,
		Gatherers:      []prometheus.Gatherer{ctrlmetrics.Registry},
	})
	if err != nil {
		return err
	}
	m.lis, m.srv = lis, srv
	m.podServer = server.New(m.cfg, m.resolver, m.pods, m.current.Load, m.conns, server.Options{
		MaxParallelExecutions:       o.maxParallelPods,
		PreferredMaxQueueLength:     o.maxWaitlistLength,
		MaxCallsPerPod:              o.maxCallsPerPod,
		TTL:                         o.podTTL,
		PullSecret:                  m.pullSecret,
		RunUnclaimed:                o.runUnclaimed,
		UnclaimedPrefixes:           o.unclaimedPrefixes,
		OverrideServiceAccounts:     o.overrideServiceAccounts,
		DenyOverrideSecurityContext: !o.allowOverrideSecurityContext,
		OverridePolicy:              o.overridePolicy,
		MaxRegistryLookups:          o.maxRegistryLookups,
	})
	admitted := o.admission.Limiter()
	srv.Registry.MustRegister(admitted.Collectors()...)
	srv.Registry.MustRegister(m.cfg.Collectors()...)
	srv.Registry.MustRegister(m.pods.Collectors()...)
	srv.Registry.MustRegister(m.resolver.Collectors()...)
	evaluations, err := evalmetrics.New(srv.Registry, m.cfg)
	if err != nil {
		return err
	}
	evalwire.Register(srv, &evalmetrics.Evaluator{Metrics: evaluations, Executor: "pod",
		Next: &admission.Evaluator{Next: m.podServer, Limit: admitted, Factor: 2, Service: "pod-manager"}})
	return nil
}

// serve runs the pod-manager until ctx ends or a part fails: the pod
// cache's collection, this replica's Lease, and, once the pods of a
// previous run are reconciled, the controllers, the executor table and the
// executor service (serving once the first table arrived).
func (m *podManager) serve(ctx context.Context) error {
	o, log, pods, cfg, srv := m.o, m.log, m.pods, m.cfg, m.srv
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { pods.Run(ctx, o.scanInterval); return nil })
	if o.ownerLease > 0 {
		// Before adopting: the others see this replica's Lease renewed.
		owners := &kube.Owners{Backend: m.backend, Duration: o.ownerLease, Log: log}
		if err := owners.Renew(ctx); err != nil {
			log.Warn("renewing this replica's lease", "err", err)
		}
		g.Go(func() error { owners.Run(ctx); return nil })
	}
	// Pods of a previous run of this replica: adopt the current ones, delete
	// the rest, before any call is served.
	rec, err := m.backend.ReconcileExisting(ctx, m.tpl.Version(), m.dialing, o.podTTL, pods)
	if err != nil {
		return err
	}
	log.Info("existing pods reconciled", "adopted", rec.Adopted, "deletedPods", rec.DeletedPods, "deletedServices", rec.DeletedServices)
	g.Go(func() error { return m.mgr.Start(ctx) })
	g.Go(func() error { cfg.Run(ctx); return nil })
	g.Go(func() error {
		if cfg.WaitReady(ctx) {
			srv.Health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
			if o.warmUp {
				m.podServer.WarmUp(ctx, log, 2*time.Minute)
			}
		}
		return nil
	})
	g.Go(func() error { return srv.Serve(ctx, m.lis) })
	log.Info("pod-manager started", "namespace", o.podNamespace, "owner", o.owner, "templateVersion", m.tpl.Version(), "podAddress", o.podAddress)
	return g.Wait()
}

// ensurePullSecret creates or updates the pull Secret from the credentials file.
func ensurePullSecret(ctx context.Context, c client.Client, namespace, name, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("registry credentials: %w", err)
	}
	want := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{kube.LabelManagedBy: kube.ManagedBy}},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: data},
	}
	var have corev1.Secret
	err = c.Get(ctx, client.ObjectKeyFromObject(want), &have)
	switch {
	case apierrors.IsNotFound(err):
		return c.Create(ctx, want)
	case err != nil:
		return err
	}
	have.Type, have.Data = want.Type, want.Data
	return c.Update(ctx, &have)
}

func main() { grpcserving.Main("pod-manager", run) }

// probeFor is how long after its creation a starting pod is asked directly
// whether it serves: as long as it may take to become ready, a minute when
// that is not bounded.
func probeFor(podReadyTimeout time.Duration) time.Duration {
	if podReadyTimeout <= 0 {
		return time.Minute
	}
	return podReadyTimeout
}

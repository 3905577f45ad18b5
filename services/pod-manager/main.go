// Command pod-manager runs KRM functions in pods for the gateway: it creates
// pods and Services from templates (with per-function overrides), keeps a
// pod cache with TTL garbage collection, and forwards each call to a pod's
// wrapper-server.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
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
	"github.com/fnrunner/fnrunner/libs/imagematch"
	"github.com/fnrunner/fnrunner/libs/imagemeta"
	"github.com/fnrunner/fnrunner/libs/restconfig"
	"github.com/fnrunner/fnrunner/libs/telemetry"
	"github.com/fnrunner/fnrunner/libs/templatemerge"
	"github.com/fnrunner/fnrunner/services/pod-manager/kube"
	"github.com/fnrunner/fnrunner/services/pod-manager/podcache"
	"github.com/fnrunner/fnrunner/services/pod-manager/server"
	"github.com/fnrunner/fnrunner/services/pod-manager/templates"
)

type options struct {
	tls                          grpcserving.TLSFlags
	common                       grpcserving.Flags
	admission                    admission.Flags
	port                         int
	configAddress                string
	podNamespace                 string
	podTTL                       time.Duration
	scanInterval                 time.Duration
	ownerLease                   time.Duration
	maxWaitlistLength            int
	maxCallsPerPod               int
	maxParallelPods              int
	maxRequestBodySize           int
	enablePrivateRegistries      bool
	registryAuthSecretPath       string
	registryAuthSecretName       string
	enablePrivateRegistryTLS     bool
	tlsSecretPath                string
	wrapperServerImage           string
	podAddress                   string
	clusterDomain                string
	unclaimedPrefixes            []string
	overrideServiceAccounts      []string
	allowOverrideSecurityContext bool
	overridePolicy               templatemerge.Policy
	podReadyTimeout              time.Duration
	podProbeInterval             time.Duration
	imageMetadataTTL             time.Duration
	tagListTTL                   time.Duration
	maxRegistryLookups           int
	maxUnclaimedLookups          int
	maxImageConfigSize           int64
	maxTagListSize               int64
	maxTagListPages              int
	allowedRegistries            []string
	registryProxy                *url.URL
	registryNoProxy              []string
	kubeconfig                   string
	owner                        string
	runUnclaimed                 bool
	warmUp                       bool
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{overrideServiceAccounts: []string{"*"}, overridePolicy: templatemerge.Policy{
		// The default template limits the function container to 2 CPUs
		// and 1 GiB; a FunctionConfig may ask for as much CPU and twice the memory.
		MaxCPU: resource.MustParse("2"), MaxMemory: resource.MustParse("2Gi"),
	}}
	host, _ := os.Hostname()
	fs := flag.NewFlagSet("pod-manager", flag.ContinueOnError)
	fs.SetOutput(stderr)
	grpcserving.Usage(fs, "Runs KRM functions in pods for the gateway: pods and Services from templates plus per-function\noverrides, a pod cache with TTL garbage collection, calls forwarded to each pod's wrapper-server.")
	o.common.Register(fs, ":9093")
	o.tls.Register(fs)
	fs.IntVar(&o.port, "port", 9449, "TCP port of the internal executor service (evaluator.FunctionEvaluator) and gRPC health.")
	fs.StringVar(&o.configAddress, "config-address", "localhost:9447", "Address of the config-reconciler's executor table stream.")
	fs.StringVar(&o.podNamespace, "pod-namespace", "porch-fn-system", "Namespace of the function pods, their Services and the templates.")
	fs.DurationVar(&o.podTTL, "pod-ttl", 30*time.Minute, "Idle time after which a function pod is deleted, unless its FunctionConfig sets timeToLive.")
	fs.DurationVar(&o.scanInterval, "scan-interval", time.Minute, "How often idle pods are looked for.")
	fs.IntVar(&o.maxWaitlistLength, "max-waitlist-length", 2, "Default preferredMaxQueueLength: the load per pod at which another pod is started.")
	fs.IntVar(&o.maxCallsPerPod, "max-calls-per-pod", 16, "Calls one function pod is given at once (running or waiting in its wrapper-server, whose --max-queue the default template sets to this). More wait here, in arrival order and each up to its deadline, for a pod with room while pods are started up to maxParallelExecutions; --max-in-flight-bytes bounds what waits.")
	fs.IntVar(&o.maxParallelPods, "max-parallel-pods-per-function", 1, "Default maxParallelExecutions: the most pods per function.")
	fs.IntVar(&o.maxRequestBodySize, "max-request-body-size", 6*1024*1024, "Largest gRPC message received or sent, in bytes; passed to every wrapper-server.")
	o.admission.Register(fs, 832<<20, 4096, 128<<20, "input bytes × 2 (the request's buffers and the answer's)")
	fs.BoolVar(&o.enablePrivateRegistries, "enable-private-registries", false, "Use the credentials at --registry-auth-secret-path for image metadata and as the pods' pull secret.")
	fs.StringVar(&o.registryAuthSecretPath, "registry-auth-secret-path", "/var/tmp/config-secret/.dockerconfigjson", "dockerconfigjson file with registry credentials.")
	fs.StringVar(&o.registryAuthSecretName, "registry-auth-secret-name", "auth-secret", "Name of the pull Secret created in --pod-namespace from those credentials and added to pods' imagePullSecrets.")
	fs.Func("allowed-registries", "Comma-separated registries (host or host:port) that image lookups may reach at private or loopback addresses, such as an in-cluster registry on a ClusterIP; others must resolve to public addresses, and link-local ones (cloud metadata) are never reached.", func(v string) error {
		o.allowedRegistries = splitList(v)
		return nil
	})
	fs.Func("registry-proxy", "URL of an HTTP(S) or SOCKS5 proxy through which image lookups reach registries, e.g. http://proxy.example:3128; empty (default): none. The environment's HTTPS_PROXY, HTTP_PROXY and NO_PROXY are ignored. The proxy may be at any address but a link-local one; each registry's own addresses are checked as without a proxy, and the proxy is asked to connect to the address checked (CONNECT ip:port), never to the name.", func(v string) (err error) {
		o.registryProxy, err = imagemeta.ParseProxyURL(v)
		return err
	})
	fs.Func("registry-no-proxy", "Comma-separated registries reached without --registry-proxy, as NO_PROXY: hosts (with their subdomains), host:port, .suffix or *.suffix (subdomains only), IP addresses, CIDR ranges, * for all; empty (default): none. localhost and loopback addresses never go through the proxy. Their addresses are checked all the same.", func(v string) error {
		o.registryNoProxy = splitList(v)
		return nil
	})
	fs.BoolVar(&o.enablePrivateRegistryTLS, "enable-private-registries-tls", false, "Trust the CA certificates in --tls-secret-path (ca.crt, ca.pem) for registries.")
	fs.StringVar(&o.tlsSecretPath, "tls-secret-path", "/var/tmp/tls-secret/", "Directory of CA certificates for registries.")
	fs.StringVar(&o.wrapperServerImage, "wrapper-server-image", os.Getenv("WRAPPER_SERVER_IMAGE"), "Image of the wrapper-server, used by the default pod template's init container (default $WRAPPER_SERVER_IMAGE).")
	fs.StringVar(&o.podAddress, "pod-address", string(kube.ServiceDNS), "How pods are dialled: service-dns (<svc>.<ns>.svc.<cluster domain>:9446, for meshes) or pod-ip.")
	fs.DurationVar(&o.podReadyTimeout, "pod-ready-timeout", time.Minute, "How long a function pod may take to become ready (porch waits 60 s); then it is deleted and the calls waiting on it fail with Unavailable naming why (unschedulable, readiness not passing). 0: no bound.")
	fs.DurationVar(&o.podProbeInterval, "pod-probe-interval", 100*time.Millisecond, "How often the pod-manager asks a starting function pod's wrapper-server itself (gRPC health, at the address --pod-address gives) whether it serves, so that a cold call starts as soon as it does, not after the kubelet's next readiness probe and status update. 0: wait for the pod's Ready condition (and, with service-dns, its ready endpoint) only.")
	fs.Func("allowed-unclaimed-images", "Comma-separated image prefixes (registry/path) under which images no FunctionConfig claims may run in pods; empty: any (porch's behaviour, with --run-unclaimed-images).", func(v string) error {
		// Normalized as image references are (docker.io → index.docker.io),
		// so that a prefix matches the images it names.
		o.unclaimedPrefixes = nil
		for _, p := range splitList(v) {
			np, err := imagematch.NormalizePrefix(p, "")
			if err != nil {
				return err
			}
			o.unclaimedPrefixes = append(o.unclaimedPrefixes, np)
		}
		return nil
	})
	fs.Func("allowed-override-service-accounts", "Comma-separated ServiceAccounts a FunctionConfig's templateOverrides.serviceAccountName may name; \"*\" (default): any, as porch allows; empty: none.", func(v string) error {
		o.overrideServiceAccounts = splitList(v)
		return nil
	})
	fs.BoolVar(&o.allowOverrideSecurityContext, "allow-override-security-context", true, "Let a FunctionConfig's templateOverrides.securityContext change the pod's (as porch does).")
	fs.Func("allowed-override-secrets", "Comma-separated Secrets (of --pod-namespace) a FunctionConfig's templateOverrides env secretKeyRef and envFrom secretRef may name; empty (default): none.", func(v string) error {
		o.overridePolicy.AllowedSecrets = splitList(v)
		return nil
	})
	fs.Func("allowed-override-configmaps", "Comma-separated ConfigMaps (of --pod-namespace) a FunctionConfig's templateOverrides env configMapKeyRef and envFrom configMapRef may name; empty (default): none.", func(v string) error {
		o.overridePolicy.AllowedConfigMaps = splitList(v)
		return nil
	})
	fs.Func("max-override-cpu", "Most CPU a FunctionConfig's templateOverrides resources may request or limit a container to (default 2).", quantityFlag(&o.overridePolicy.MaxCPU))
	fs.Func("max-override-memory", "Most memory a FunctionConfig's templateOverrides resources may request or limit a container to (default 2Gi).", quantityFlag(&o.overridePolicy.MaxMemory))
	fs.StringVar(&o.clusterDomain, "cluster-domain", "cluster.local", "The cluster's DNS domain, for --pod-address=service-dns.")
	fs.DurationVar(&o.imageMetadataTTL, "image-metadata-ttl", 5*time.Minute, "How long a tag's digest and entrypoint are reused (digests never change).")
	fs.DurationVar(&o.tagListTTL, "tag-list-ttl", imagemeta.DefaultTagListTTL, "How long a repository's tag list, listed to resolve a call's tag constraint, is reused. Calls that need one list at once share one listing.")
	fs.IntVar(&o.maxRegistryLookups, "max-registry-lookups", imagemeta.DefaultMaxLookups, fmt.Sprintf("Registry lookups (an image's manifest and config, or a repository's tag list) in flight at once. Each runs up to a minute, shared by the calls that need it, and ends when none of them waits any more; past the bound, a call that needs another is refused at once with ResourceExhausted (an image whose metadata expired gets that). An image's lookup reads at most 2 × %d MiB (an index and a manifest) + --max-image-config-size, all its answers together, pings, tokens and retries too; a tag list's, --max-tag-list-size. Decoded, a lookup may hold up to 8 times what it read: the start check (the container's memory limit) counts that for each lookup, and the caches.", imagemeta.DefaultMaxManifestSize>>20))
	fs.IntVar(&o.maxUnclaimedLookups, "max-unclaimed-registry-lookups", 0, "Of --max-registry-lookups, the most that images and repositories no FunctionConfig claims for pods may take (0: half, at least 1). The rest are kept for claimed ones, so that callers' images never crowd out porch's.")
	fs.Int64Var(&o.maxImageConfigSize, "max-image-config-size", imagemeta.DefaultMaxConfigSize, "Largest image config blob read, in bytes. An image whose manifest declares a larger one is refused with ResourceExhausted before the config is asked for.")
	fs.Int64Var(&o.maxTagListSize, "max-tag-list-size", imagemeta.DefaultMaxTagListSize, "Largest repository tag list read, in bytes, all its pages together; a call whose tag constraint needs a larger one is refused with ResourceExhausted.")
	fs.IntVar(&o.maxTagListPages, "max-tag-list-pages", imagemeta.DefaultMaxTagPages, "Most pages of one repository's tag list followed; a call whose tag constraint needs more is refused with ResourceExhausted.")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Path to a kubeconfig. Default: in-cluster configuration, then $KUBECONFIG, then ~/.kube/config.")
	fs.StringVar(&o.owner, "owner", firstNonEmpty(os.Getenv("POD_NAME"), host), "This replica's identity, a label on the pods it owns (default $POD_NAME, else the host name).")
	fs.DurationVar(&o.ownerLease, "owner-lease-duration", 40*time.Second, "Each replica renews a Lease (fnrunner-pod-manager-<owner>, in the pods' namespace) every quarter of this; the pods and Services of a replica whose Lease went unrenewed this long (a replica removed for good) are deleted by the others. A replica that restarts within it adopts its own pods. 0 = no Lease and no such deletion.")
	fs.BoolVar(&o.runUnclaimed, "run-unclaimed-images", true, "Run images no FunctionConfig claims in pods with the defaults, as porch does.")
	fs.BoolVar(&o.warmUp, "warm-up-pod-cache", true, "Once the first executor table arrived, start one pod per FunctionConfig with podExecutor tags (first exact tag).")
	if err := o.common.Parse(fs, args); err != nil {
		return nil, grpcserving.FlagError(err)
	}
	if o.wrapperServerImage == "" {
		return nil, grpcserving.FlagError(errors.New("the wrapper-server image is required: set WRAPPER_SERVER_IMAGE (as porch's Deployment does) or --wrapper-server-image; function pods copy the wrapper-server from it"))
	}
	for _, b := range []struct {
		flag string
		v    int64
	}{
		{"--tag-list-ttl", int64(o.tagListTTL)}, {"--max-registry-lookups", int64(o.maxRegistryLookups)},
		{"--max-image-config-size", o.maxImageConfigSize}, {"--max-tag-list-size", o.maxTagListSize}, {"--max-tag-list-pages", int64(o.maxTagListPages)},
	} {
		if b.v <= 0 {
			return nil, grpcserving.FlagError(fmt.Errorf("%s must be above 0", b.flag))
		}
	}
	if o.maxUnclaimedLookups < 0 || o.maxUnclaimedLookups > o.maxRegistryLookups {
		return nil, grpcserving.FlagError(fmt.Errorf("--max-unclaimed-registry-lookups must be between 0 and --max-registry-lookups (%d)", o.maxRegistryLookups))
	}
	if a := kube.Addressing(o.podAddress); a != kube.ServiceDNS && a != kube.PodIP {
		return nil, grpcserving.FlagError(fmt.Errorf("--pod-address %q: want service-dns or pod-ip", o.podAddress))
	}
	return o, nil
}

// quantityFlag reads a flag value, a resource quantity not below zero, into q.
func quantityFlag(q *resource.Quantity) func(string) error {
	return func(v string) error {
		parsed, err := resource.ParseQuantity(v)
		if err != nil {
			return err
		}
		if parsed.Sign() < 0 {
			return fmt.Errorf("%s is negative", v)
		}
		*q = parsed
		return nil
	}
}

// splitList reads a comma-separated flag value.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// registryOptions are the image metadata resolver's options from the
// flags, credentials and CAs aside.
func (o *options) registryOptions() imagemeta.Options {
	return imagemeta.Options{TTL: o.imageMetadataTTL, AllowedRegistries: o.allowedRegistries, Proxy: o.registryProxy, NoProxy: o.registryNoProxy,
		TagListTTL: o.tagListTTL, MaxLookups: o.maxRegistryLookups, MaxUnclaimedLookups: o.maxUnclaimedLookups, MaxConfigSize: o.maxImageConfigSize,
		MaxTagListSize: o.maxTagListSize, MaxTagPages: o.maxTagListPages}
}

// rest is the memory the pod-manager holds beside its admitted calls: what
// its transport holds of calls not yet admitted, its registry lookups and
// caches, and its runtime.
func (o *options) rest() int64 {
	return o.common.Held(o.maxRequestBodySize) + o.registryOptions().MaxHeld() + admission.RuntimeHeadroom
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
	log := o.common.Logger(stderr, "pod-manager")
	// Past its container's limit the kubelet kills the service with
	// every call in flight: what admission and the transport may hold
	// must fit it.
	if err := o.admission.FitContainer(o.rest()); err != nil {
		return grpcserving.FlagError(err)
	}
	tel, err := telemetry.Setup(ctx, "pod-manager")
	if err != nil {
		return err
	}
	o.common.LogIgnoredPorchFlags(log)
	restCfg, err := restconfig.Load(o.kubeconfig)
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	direct, err := client.New(restCfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	tpl, err := templates.Ensure(ctx, direct, o.podNamespace, o.wrapperServerImage)
	if err != nil {
		return err
	}
	var current atomic.Pointer[templates.Templates]
	current.Store(tpl)

	metaOpts := o.registryOptions()
	pullSecret := ""
	if o.enablePrivateRegistries {
		metaOpts.DockerConfigPath = o.registryAuthSecretPath
		if err := ensurePullSecret(ctx, direct, o.podNamespace, o.registryAuthSecretName, o.registryAuthSecretPath); err != nil {
			return err
		}
		pullSecret = o.registryAuthSecretName
	}
	if o.enablePrivateRegistryTLS {
		metaOpts.CAPaths = []string{o.tlsSecretPath}
	}
	resolver, err := imagemeta.New(metaOpts)
	if err != nil {
		return err
	}

	conns := server.NewConns(o.maxRequestBodySize, append(grpcserving.WindowDialOptions(), tel.DialOptions()...)...)
	defer conns.CloseAll()
	backend := &kube.Backend{Client: direct, Namespace: o.podNamespace, Owner: o.owner, MaxRequestBodySize: o.maxRequestBodySize, MaxCallsPerPod: o.maxCallsPerPod, OnDelete: conns.Close,
		PublishNotReadyAddresses: kube.Addressing(o.podAddress) == kube.ServiceDNS && o.podProbeInterval > 0}
	pods := podcache.New(backend)
	pods.ReadyTimeout = o.podReadyTimeout

	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:  scheme,
		Logger:  logr.FromSlogHandler(log.Handler()),
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   cache.Options{DefaultNamespaces: map[string]cache.Config{o.podNamespace: {}}},
	})
	if err != nil {
		return fmt.Errorf("controller manager: %w", err)
	}
	dialing := kube.Dialing{Addressing: kube.Addressing(o.podAddress), ClusterDomain: o.clusterDomain}
	if err := (&kube.Watcher{Client: mgr.GetClient(), Namespace: o.podNamespace, Owner: o.owner, Dialing: dialing, Events: pods,
		Health: conns, ProbeFor: probeFor(o.podReadyTimeout), ProbeInterval: o.podProbeInterval}).SetupWithManager(mgr); err != nil {
		return err
	}
	// A template change rolls the pods: new calls get pods of the new
	// version (it is part of the cache key), old ones go once idle.
	if err := (&templates.Watcher{Client: direct, Namespace: o.podNamespace, WrapperImage: o.wrapperServerImage, Current: &current,
		OnChange: func(t *templates.Templates) {
			log.Info("templates changed; rolling function pods", "templateVersion", t.Version())
			pods.Retire(func(key podcache.Key) bool { return key.TemplateVersion == t.Version() })
		}}).SetupWithManager(mgr); err != nil {
		return err
	}

	cfg, closeCfg, err := configclient.Dial(log, o.configAddress, "pod-manager", dialCreds)
	if err != nil {
		return err
	}
	defer closeCfg()

	lis, srv, err := o.common.Open(log, o.port, &o.tls, grpcserving.Config{
		Telemetry:      tel,
		Name:           "pod-manager",
		ServerOptions:  []grpc.ServerOption{evalwire.ServerCodec()},
		MaxMessageSize: o.maxRequestBodySize,
		Gatherers:      []prometheus.Gatherer{ctrlmetrics.Registry},
	})
	if err != nil {
		return err
	}
	podServer := server.New(cfg, resolver, pods, current.Load, conns, server.Options{
		MaxParallelExecutions:       o.maxParallelPods,
		PreferredMaxQueueLength:     o.maxWaitlistLength,
		MaxCallsPerPod:              o.maxCallsPerPod,
		TTL:                         o.podTTL,
		PullSecret:                  pullSecret,
		RunUnclaimed:                o.runUnclaimed,
		UnclaimedPrefixes:           o.unclaimedPrefixes,
		OverrideServiceAccounts:     o.overrideServiceAccounts,
		DenyOverrideSecurityContext: !o.allowOverrideSecurityContext,
		OverridePolicy:              o.overridePolicy,
		MaxRegistryLookups:          o.maxRegistryLookups,
	})
	admitted := o.admission.Limiter()
	srv.Registry.MustRegister(admitted.Collectors()...)
	srv.Registry.MustRegister(cfg.Collectors()...)
	srv.Registry.MustRegister(pods.Collectors()...)
	srv.Registry.MustRegister(resolver.Collectors()...)
	evaluations, err := evalmetrics.New(srv.Registry, cfg)
	if err != nil {
		return err
	}
	evalwire.Register(srv, &evalmetrics.Evaluator{Metrics: evaluations, Executor: "pod",
		Next: &admission.Evaluator{Next: podServer, Limit: admitted, Factor: 2, Service: "pod-manager"}})

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { pods.Run(ctx, o.scanInterval); return nil })
	if o.ownerLease > 0 {
		// Before adopting: the others see this replica's Lease renewed.
		owners := &kube.Owners{Backend: backend, Duration: o.ownerLease, Log: log}
		if err := owners.Renew(ctx); err != nil {
			log.Warn("renewing this replica's lease", "err", err)
		}
		g.Go(func() error { owners.Run(ctx); return nil })
	}
	// Pods of a previous run of this replica: adopt the current ones, delete
	// the rest, before any call is served.
	rec, err := backend.ReconcileExisting(ctx, tpl.Version(), dialing, o.podTTL, pods)
	if err != nil {
		return err
	}
	log.Info("existing pods reconciled", "adopted", rec.Adopted, "deletedPods", rec.DeletedPods, "deletedServices", rec.DeletedServices)
	g.Go(func() error { return mgr.Start(ctx) })
	g.Go(func() error { cfg.Run(ctx); return nil })
	g.Go(func() error {
		if cfg.WaitReady(ctx) {
			srv.Health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
			if o.warmUp {
				podServer.WarmUp(ctx, log, 2*time.Minute)
			}
		}
		return nil
	})
	g.Go(func() error { return srv.Serve(ctx, lis) })
	log.Info("pod-manager started", "namespace", o.podNamespace, "owner", o.owner, "templateVersion", tpl.Version(), "podAddress", o.podAddress)
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

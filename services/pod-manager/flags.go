// The pod-manager's flags, by what they set, and their checks.

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/fnrunner/fnrunner/libs/admission"
	"github.com/fnrunner/fnrunner/libs/grpcserving"
	"github.com/fnrunner/fnrunner/libs/imagematch"
	"github.com/fnrunner/fnrunner/libs/imagemeta"
	"github.com/fnrunner/fnrunner/libs/templatemerge"
	"github.com/fnrunner/fnrunner/services/pod-manager/kube"
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
	fs := flag.NewFlagSet("pod-manager", flag.ContinueOnError)
	fs.SetOutput(stderr)
	grpcserving.Usage(fs, "Runs KRM functions in pods for the gateway: pods and Services from templates plus per-function\noverrides, a pod cache with TTL garbage collection, calls forwarded to each pod's wrapper-server.")
	o.common.Register(fs, ":9093")
	o.tls.Register(fs)
	o.registerCallFlags(fs)
	o.registerRegistryAccessFlags(fs)
	o.registerPodFlags(fs)
	o.registerPolicyFlags(fs)
	o.registerLookupFlags(fs)
	o.registerReplicaFlags(fs)
	if err := o.common.Parse(fs, args); err != nil {
		return nil, grpcserving.FlagError(err)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	return o, nil
}

// registerCallFlags registers the flags of the executor service and of the
// calls it takes.
func (o *options) registerCallFlags(fs *flag.FlagSet) {
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
}

// registerRegistryAccessFlags registers the flags of how registries are
// reached: credentials, addresses, proxy and CAs.
func (o *options) registerRegistryAccessFlags(fs *flag.FlagSet) {
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
}

// registerPodFlags registers the flags of the function pods: their
// wrapper-server, how they are dialled and how long they may take to start.
func (o *options) registerPodFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.wrapperServerImage, "wrapper-server-image", os.Getenv("WRAPPER_SERVER_IMAGE"), "Image of the wrapper-server, used by the default pod template's init container (default $WRAPPER_SERVER_IMAGE).")
	fs.StringVar(&o.podAddress, "pod-address", string(kube.ServiceDNS), "How pods are dialled: service-dns (<svc>.<ns>.svc.<cluster domain>:9446, for meshes) or pod-ip.")
	fs.StringVar(&o.clusterDomain, "cluster-domain", "cluster.local", "The cluster's DNS domain, for --pod-address=service-dns.")
	fs.DurationVar(&o.podReadyTimeout, "pod-ready-timeout", time.Minute, "How long a function pod may take to become ready (porch waits 60 s); then it is deleted and the calls waiting on it fail with Unavailable naming why (unschedulable, readiness not passing). 0: no bound.")
	fs.DurationVar(&o.podProbeInterval, "pod-probe-interval", 100*time.Millisecond, "How often the pod-manager asks a starting function pod's wrapper-server itself (gRPC health, at the address --pod-address gives) whether it serves, so that a cold call starts as soon as it does, not after the kubelet's next readiness probe and status update. 0: wait for the pod's Ready condition (and, with service-dns, its ready endpoint) only.")
}

// registerPolicyFlags registers the flags of what may run in pods: unclaimed
// images, and what a FunctionConfig's templateOverrides may change.
func (o *options) registerPolicyFlags(fs *flag.FlagSet) {
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
	fs.BoolVar(&o.runUnclaimed, "run-unclaimed-images", true, "Run images no FunctionConfig claims in pods with the defaults, as porch does.")
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
}

// registerLookupFlags registers the flags of the image metadata lookups and
// their caches.
func (o *options) registerLookupFlags(fs *flag.FlagSet) {
	fs.DurationVar(&o.imageMetadataTTL, "image-metadata-ttl", 5*time.Minute, "How long a tag's digest and entrypoint are reused (digests never change).")
	fs.DurationVar(&o.tagListTTL, "tag-list-ttl", imagemeta.DefaultTagListTTL, "How long a repository's tag list, listed to resolve a call's tag constraint, is reused. Calls that need one list at once share one listing.")
	fs.IntVar(&o.maxRegistryLookups, "max-registry-lookups", imagemeta.DefaultMaxLookups, fmt.Sprintf("Registry lookups (an image's manifest and config, or a repository's tag list) in flight at once. Each runs up to a minute, shared by the calls that need it, and ends when none of them waits any more; past the bound, a call that needs another is refused at once with ResourceExhausted (an image whose metadata expired gets that). An image's lookup reads at most 2 × %d MiB (an index and a manifest) + --max-image-config-size, all its answers together, pings, tokens and retries too; a tag list's, --max-tag-list-size. An image's lookup holds at most 16,384 JSON values; what a lookup may hold decoded is counted for each, with the caches, by the start check (the container's memory limit).", imagemeta.DefaultMaxManifestSize>>20))
	fs.IntVar(&o.maxUnclaimedLookups, "max-unclaimed-registry-lookups", 0, "Of --max-registry-lookups, the most that images and repositories no FunctionConfig claims for pods may take (0: half, at least 1). The rest are kept for claimed ones, so that callers' images never crowd out porch's.")
	fs.Int64Var(&o.maxImageConfigSize, "max-image-config-size", imagemeta.DefaultMaxConfigSize, "Largest image config blob read, in bytes. An image whose manifest declares a larger one is refused with ResourceExhausted before the config is asked for.")
	fs.Int64Var(&o.maxTagListSize, "max-tag-list-size", imagemeta.DefaultMaxTagListSize, "Largest repository tag list read, in bytes, all its pages together; a call whose tag constraint needs a larger one is refused with ResourceExhausted.")
	fs.IntVar(&o.maxTagListPages, "max-tag-list-pages", imagemeta.DefaultMaxTagPages, "Most pages of one repository's tag list followed; a call whose tag constraint needs more is refused with ResourceExhausted.")
}

// registerReplicaFlags registers the flags of this replica: its cluster, its
// identity among the replicas, and its warm-up; host is the default owner.
func (o *options) registerReplicaFlags(fs *flag.FlagSet) {
	host, _ := os.Hostname()
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Path to a kubeconfig. Default: in-cluster configuration, then $KUBECONFIG, then ~/.kube/config.")
	fs.StringVar(&o.owner, "owner", firstNonEmpty(os.Getenv("POD_NAME"), host), "This replica's identity, a label on the pods it owns (default $POD_NAME, else the host name).")
	fs.DurationVar(&o.ownerLease, "owner-lease-duration", 40*time.Second, "Each replica renews a Lease (fnrunner-pod-manager-<owner>, in the pods' namespace) every quarter of this; the pods and Services of a replica whose Lease went unrenewed this long (a replica removed for good) are deleted by the others. A replica that restarts within it adopts its own pods. 0 = no Lease and no such deletion.")
	fs.BoolVar(&o.warmUp, "warm-up-pod-cache", true, "Once the first executor table arrived, start one pod per FunctionConfig with podExecutor tags (first exact tag).")
}

// validate refuses flag values the pod-manager cannot run with.
func (o *options) validate() error {
	if o.wrapperServerImage == "" {
		return grpcserving.FlagError(errors.New("the wrapper-server image is required: set WRAPPER_SERVER_IMAGE (as porch's Deployment does) or --wrapper-server-image; function pods copy the wrapper-server from it"))
	}
	for _, b := range []struct {
		flag string
		v    int64
	}{
		{"--tag-list-ttl", int64(o.tagListTTL)}, {"--max-registry-lookups", int64(o.maxRegistryLookups)},
		{"--max-image-config-size", o.maxImageConfigSize}, {"--max-tag-list-size", o.maxTagListSize}, {"--max-tag-list-pages", int64(o.maxTagListPages)},
	} {
		if b.v <= 0 {
			return grpcserving.FlagError(fmt.Errorf("%s must be above 0", b.flag))
		}
	}
	if o.maxUnclaimedLookups < 0 || o.maxUnclaimedLookups > o.maxRegistryLookups {
		return grpcserving.FlagError(fmt.Errorf("--max-unclaimed-registry-lookups must be between 0 and --max-registry-lookups (%d)", o.maxRegistryLookups))
	}
	if a := kube.Addressing(o.podAddress); a != kube.ServiceDNS && a != kube.PodIP {
		return grpcserving.FlagError(fmt.Errorf("--pod-address %q: want service-dns or pod-ip", o.podAddress))
	}
	return nil
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

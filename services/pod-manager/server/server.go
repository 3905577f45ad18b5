// Package server is the pod-manager's executor service: for each call it
// resolves the image (digest, entrypoint), leases a pod from the pod cache
// and forwards the call to that pod's wrapper-server.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/executortable"
	"github.com/fnrunner/fnrunner/libs/imagematch"
	"github.com/fnrunner/fnrunner/libs/imagemeta"
	"github.com/fnrunner/fnrunner/libs/sendonce"
	"github.com/fnrunner/fnrunner/libs/telemetry"
	"github.com/fnrunner/fnrunner/libs/templatemerge"
	"github.com/fnrunner/fnrunner/services/pod-manager/kube"
	"github.com/fnrunner/fnrunner/services/pod-manager/podcache"
	"github.com/fnrunner/fnrunner/services/pod-manager/templates"
)

// Tables gives the current executor table; *configclient.Client implements it.
type Tables interface {
	Tables() *executortable.Tables
	// Await returns the newest table, waiting up to max for the first one;
	// nil if none came.
	Await(ctx context.Context, max time.Duration) *executortable.Tables
}

// Resolver gives image metadata; *imagemeta.Resolver implements it. The
// server passes imagemeta.Claimed for images and repositories a
// FunctionConfig claims for pods.
type Resolver interface {
	Resolve(ctx context.Context, image string, opts ...imagemeta.LookupOption) (imagemeta.Metadata, error)
	// Tags lists a repository's tags, for a tag constraint to resolve.
	Tags(ctx context.Context, repository string, opts ...imagemeta.LookupOption) ([]string, error)
}

// Cache leases pods; *podcache.Cache implements it.
type Cache interface {
	Acquire(ctx context.Context, f podcache.Function) (*podcache.Lease, error)
	// PodFailed drops a pod that does not answer.
	PodFailed(pod string, err error)
}

// podConnectWait is how long a call waits for its pod's wrapper-server to
// accept a connection before the pod counts as failed and the call (not sent
// yet) is placed on another; podAttempts bounds how many pods it tries;
// tableWait is how long a call that arrives before the first executor table
// (just after a restart) waits for it.
const (
	podConnectWait = 5 * time.Second
	podAttempts    = 3
	tableWait      = 5 * time.Second
)

// Options are the flag defaults for functions without their own settings.
type Options struct {
	MaxParallelExecutions   int
	PreferredMaxQueueLength int
	// MaxCallsPerPod bounds the calls a pod is given at once; more wait
	// here for room (podcache.Function.MaxCallsPerPod).
	MaxCallsPerPod int
	TTL            time.Duration
	PullSecret     string
	// RunUnclaimed runs images no FunctionConfig claims for pods with the
	// defaults (porch does); otherwise they are NotFound.
	RunUnclaimed bool
	// UnclaimedPrefixes, when not empty, limits RunUnclaimed to images
	// under one of these prefixes (imagematch.NormalizePrefix'd).
	UnclaimedPrefixes []string
	// OverrideServiceAccounts are the templateOverrides.serviceAccountName
	// values allowed ("*": any, as porch allows).
	OverrideServiceAccounts []string
	// DenyOverrideSecurityContext refuses templateOverrides.securityContext.
	DenyOverrideSecurityContext bool
	// OverridePolicy bounds the Secrets, ConfigMaps and resources
	// templateOverrides may put in a pod (the zero Policy: none).
	OverridePolicy templatemerge.Policy
	// MaxRegistryLookups is the resolver's bound on registry lookups in
	// flight (--max-registry-lookups; 0: imagemeta.DefaultMaxLookups).
	// WarmUp takes at most warmUpLookups of them.
	MaxRegistryLookups int
}

// Server implements evalwire.Server.
type Server struct {
	tables    Tables
	resolver  Resolver
	cache     Cache
	templates func() *templates.Templates
	opts      Options
	conns     *Conns
	settings  settingsCache
}

// New returns the service.
func New(tables Tables, resolver Resolver, cache Cache, tpl func() *templates.Templates, conns *Conns, opts Options) *Server {
	return &Server{tables: tables, resolver: resolver, cache: cache, templates: tpl, conns: conns, opts: opts}
}

// EvaluateFunction implements evalwire.Server. A call is sent
// to one pod only once: if the pod does not accept the connection (deleted,
// evicted), the call was not sent and goes to another pod; if the
// connection breaks after the call was sent, the caller gets Unavailable.
func (s *Server) EvaluateFunction(ctx context.Context, req *evalwire.Request) (*evalwire.Response, error) {
	// The answer is the pod's, in buffers of its own: the request's go back
	// to the pool once it has been passed on.
	defer req.Free()
	resp, err := s.evaluate(ctx, req)
	if err != nil {
		return nil, toStatus(err)
	}
	return resp, nil
}

func (s *Server) evaluate(ctx context.Context, req *evalwire.Request) (*evalwire.Response, error) {
	if err := imagematch.CheckFields(req.Image, req.Tag); err != nil {
		return nil, err
	}
	if req.Tag != "" && !imagematch.HasTag(req.Image) {
		image, err := s.withRegistryTag(ctx, req.Image, req.Tag)
		if err != nil {
			return nil, err
		}
		// The pod gets the image with its tag, as older porch sends it.
		req.Image, req.Tag = image, ""
	}
	for attempt := 1; ; attempt++ {
		lease, err := s.lease(ctx, req.Image)
		if err != nil {
			return nil, err
		}
		conn, err := s.conns.Get(lease.Pod, lease.Address)
		if err != nil {
			lease.Release()
			return nil, sendonce.NotRun("function %q: pod %s: %v", req.Image, lease.Pod, err)
		}
		if err := sendonce.WaitReady(ctx, conn, podConnectWait); err != nil {
			lease.Release()
			if ctx.Err() != nil {
				return nil, fmt.Errorf("function %q: waiting for pod %s to accept the call: %w", req.Image, lease.Pod, ctx.Err())
			}
			s.conns.Close(lease.Pod)
			s.cache.PodFailed(lease.Pod, fmt.Errorf("wrapper-server at %s not reachable", lease.Address))
			if attempt == podAttempts {
				return nil, sendonce.NotRun("function %q: %d pods in a row did not accept the call (last: %s at %s); it was not run",
					req.Image, attempt, lease.Pod, lease.Address)
			}
			continue
		}
		resp, err := evalwire.NewClient(conn).EvaluateFunction(ctx, req)
		lease.Release()
		return resp, sendonce.Broken(ctx, err, fmt.Sprintf("function %q: pod %s", req.Image, lease.Pod))
	}
}

// errNotAllowed: the pod-manager's allow-lists refuse what the call asks
// for (a FunctionConfig's refused overrides are
// templatemerge.ErrOverrideRefused).
var errNotAllowed = errors.New("not allowed")

// checkUnclaimed refuses image (ref, parsed) when no FunctionConfig claims
// it for pods, unless unclaimed images run and ref is under
// --allowed-unclaimed-images.
func (o Options) checkUnclaimed(image string, ref imagematch.Reference) error {
	if !o.RunUnclaimed {
		return &notClaimedError{image: image}
	}
	if !o.unclaimedAllowed(ref) {
		return fmt.Errorf("function %q: %w: unclaimed images must be under --allowed-unclaimed-images %v", image, errNotAllowed, o.UnclaimedPrefixes)
	}
	return nil
}

// unclaimedAllowed: ref may run in a pod without a FunctionConfig.
func (o Options) unclaimedAllowed(ref imagematch.Reference) bool {
	if len(o.UnclaimedPrefixes) == 0 {
		return true
	}
	for _, p := range o.UnclaimedPrefixes {
		if strings.HasPrefix(ref.Repository(), strings.TrimSuffix(p, "/")+"/") {
			return true
		}
	}
	return false
}

// notClaimedError: no FunctionConfig claims the image for pods, and
// unclaimed images are not run.
type notClaimedError struct{ image string }

func (e *notClaimedError) Error() string { return fmt.Sprintf("function %q not found", e.image) }

// toStatus is the one place where the pod-manager's errors become gRPC
// answers, decided by their types. Every error that is not yet an answer
// came before a pod was asked, so nothing ran: an Unavailable one says so
// (sendonce.NotRun; the call stays with this replica, which owns the
// function's pods).
func toStatus(err error) error {
	var (
		notClaimed *notClaimedError
		regErr     *imagemeta.RegistryError
		badName    *name.ErrBadName
	)
	if _, ok := status.FromError(err); ok {
		return err // already an answer: a pod's, or a *sendonce.NotSentError
	}
	code := codes.Unavailable
	switch {
	case errors.Is(err, imagemeta.ErrLookupTimeout):
		// The registry's slowness, not the call's deadline (the lookup's
		// error wraps its own DeadlineExceeded too).
		code = codes.Unavailable
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, imagematch.ErrInvalidImage), errors.As(err, &badName):
		code = codes.InvalidArgument
	case errors.As(err, &notClaimed), errors.Is(err, imagematch.ErrNoTag):
		code = codes.NotFound
	case errors.Is(err, imagemeta.ErrNoEntrypoint), errors.Is(err, errBadOverrides), errors.Is(err, templatemerge.ErrOverrideRefused):
		// The FunctionConfig is the problem, not the caller: every
		// templateOverrides refusal (service account, securityContext,
		// env, resources) alike.
		code = codes.FailedPrecondition
	case errors.Is(err, imagemeta.ErrForbiddenAddress), errors.Is(err, errNotAllowed):
		code = codes.PermissionDenied
	case errors.Is(err, imagemeta.ErrTooManyLookups):
		return status.Errorf(codes.ResourceExhausted, "%v (--max-registry-lookups, --max-unclaimed-registry-lookups); the function was not run", err)
	case errors.Is(err, imagemeta.ErrTooLarge):
		return status.Errorf(codes.ResourceExhausted, "%v; the function was not run", err)
	case errors.As(err, &regErr) && regErr.NotFound():
		code = codes.NotFound
	case errors.As(err, &regErr) && regErr.Denied():
		code = codes.PermissionDenied
	}
	if code == codes.Unavailable {
		return sendonce.NotRun("%v; the function was not run", err)
	}
	return status.Error(code, err.Error())
}

// withRegistryTag resolves a tag field (porch after April 2026: an image
// without tag, and an exact tag or a semver constraint) against the tags the
// image's registry lists, as porch's pod evaluator does: the highest version
// that satisfies the constraint. The registry is asked only for a
// repository the call may run from: one a FunctionConfig claims for pods,
// or one unclaimed images may come from.
func (s *Server) withRegistryTag(ctx context.Context, image, tag string) (string, error) {
	tables := s.tables.Await(ctx, tableWait)
	if tables == nil {
		return "", sendonce.NotSent("pod-manager has no executor table yet (is the config-reconciler reachable?); the function was not run")
	}
	if !imagematch.IsConstraint(tag) {
		return image + ":" + tag, nil
	}
	ref, err := imagematch.Parse(image, tables.DefaultPrefix)
	if err != nil {
		return "", fmt.Errorf("function %q: %w", image, err)
	}
	var lookup []imagemeta.LookupOption
	if tables.ClaimsRepository(executortable.Pod, ref) {
		lookup = append(lookup, imagemeta.Claimed())
	} else if err := s.opts.checkUnclaimed(image, ref); err != nil {
		return "", err
	}
	tags, err := s.resolver.Tags(ctx, ref.Repository(), lookup...)
	if err != nil {
		return "", fmt.Errorf("function %q: resolving tag %q: %w", image, tag, err)
	}
	best, err := imagematch.BestTag(tag, tags)
	if err != nil {
		return "", fmt.Errorf("function %q: %w", image, err)
	}
	return image + ":" + best, nil
}

// lease finds (or starts) a pod for image.
func (s *Server) lease(ctx context.Context, image string) (*podcache.Lease, error) {
	f, err := s.function(ctx, image)
	if err != nil {
		return nil, err
	}
	return s.acquire(ctx, image, f)
}

// function is what the pod cache needs to find (or start) a pod for
// image: its settings and its metadata, from the registry. It is the only
// part of a lease that asks the registry anything.
func (s *Server) function(ctx context.Context, image string) (podcache.Function, error) {
	tables := s.tables.Await(ctx, tableWait)
	if tables == nil {
		return podcache.Function{}, sendonce.NotSent("pod-manager has no executor table yet (is the config-reconciler reachable?); the function was not run")
	}
	ref, err := imagematch.Parse(image, tables.DefaultPrefix)
	if err != nil {
		return podcache.Function{}, err
	}
	// Before anything is asked of the registry.
	fc, claimed := tables.Lookup(executortable.Pod, ref)
	var lookup []imagemeta.LookupOption
	if claimed {
		lookup = append(lookup, imagemeta.Claimed())
	} else if err := s.opts.checkUnclaimed(image, ref); err != nil {
		return podcache.Function{}, err
	}
	settings, err := s.settings.of(tables, fc, s.opts)
	if err != nil {
		return podcache.Function{}, fmt.Errorf("function %q: %w", image, err)
	}
	tpls := s.templates()
	// The overrides merged into the template must fit it and the policy,
	// before the registry is asked anything.
	if err := s.opts.OverridePolicy.CheckMerged(&tpls.Pod.Template, settings.overrides); err != nil {
		return podcache.Function{}, fmt.Errorf("function %q: FunctionConfig %s/%s: %w (%s)", image, fc.GetNamespace(), fc.GetName(), err, overrideFlag(err))
	}
	mctx, span := telemetry.Start(ctx, "image metadata", telemetry.AttrImage.String(ref.String()))
	meta, err := s.resolver.Resolve(mctx, ref.String(), lookup...)
	// The span records the code the call will be answered with.
	telemetry.End(span, toStatus(err))
	if err != nil {
		return podcache.Function{}, fmt.Errorf("function %q: resolving the image: %w", image, err)
	}
	spec := &kube.Spec{
		Function:   ref,
		Image:      ref.Repository() + "@" + meta.Digest,
		Entrypoint: meta.Entrypoint,
		Overrides:  settings.overrides,
		Templates:  tpls,
		PullSecret: s.opts.PullSecret,
	}
	f := settings.function
	f.Spec = spec
	f.Key = podcache.Key{Image: spec.Image, TemplateVersion: spec.Templates.Version(), Overrides: settings.overridesHash}
	// The pods' metrics name the function as the table does ("": other).
	f.Label, _ = tables.FunctionName(ref)
	return f, nil
}

// acquire leases a pod of f, image's.
func (s *Server) acquire(ctx context.Context, image string, f podcache.Function) (*podcache.Lease, error) {
	actx, span := telemetry.Start(ctx, "pod acquire", telemetry.AttrImage.String(f.Key.Image))
	lease, err := s.cache.Acquire(actx, f)
	if err == nil {
		span.SetAttributes(telemetry.AttrPod.String(lease.Pod), telemetry.AttrPodCold.Bool(lease.Cold))
		if lease.Cold {
			span.SetAttributes(telemetry.AttrPodReadySecs.Float64(lease.ReadyAfter.Seconds()))
		}
	}
	telemetry.End(span, toStatus(err))
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("function %q: no pod was ready before the deadline: %w", image, err)
	case errors.Is(err, context.Canceled):
		return nil, fmt.Errorf("function %q: cancelled while waiting for a pod: %w", image, err)
	case err != nil:
		return nil, fmt.Errorf("function %q: no pod: %w", image, err)
	}
	return lease, nil
}

// WarmUp starts one pod for every FunctionConfig with podExecutor tags, for
// its first exact tag under its first prefix (as porch does). Call it once
// the first executor table arrived, never before. Its images are looked up
// a few at a time, whether their lookups succeed or not; their pods start
// all at once.
func (s *Server) WarmUp(ctx context.Context, log *slog.Logger, timeout time.Duration) {
	tables := s.tables.Tables()
	if tables == nil {
		return
	}
	slots := make(chan struct{}, min(warmUpLookups, positive(s.opts.MaxRegistryLookups, imagemeta.DefaultMaxLookups)))
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, image := range warmUpImages(tables) {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			f, err := s.function(cctx, image)
			<-slots
			if err != nil {
				log.Warn("warm-up failed", "image", image, "error", err)
				return
			}
			lease, err := s.acquire(cctx, image, f)
			if err != nil {
				log.Warn("warm-up failed", "image", image, "error", err)
				return
			}
			lease.Release()
			log.Info("warmed up", "image", image, "pod", lease.Pod)
		})
	}
}

// warmUpLookups bounds the image lookups WarmUp runs at once (or
// --max-registry-lookups, when lower): a lookup past that bound is
// refused, not queued, and calls arriving meanwhile need the rest.
const warmUpLookups = 4

// positive is v, or def when v is not above zero.
func positive(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

// warmUpImages are the images WarmUp starts pods for.
func warmUpImages(tables *executortable.Tables) []string {
	var out []string
	for _, fc := range tables.Functions() {
		p := fc.GetPod()
		if p == nil {
			continue
		}
		tag := ""
		for _, t := range p.GetTags() {
			if !imagematch.IsConstraint(t) {
				tag = t
				break
			}
		}
		if tag == "" {
			continue
		}
		prefix := ""
		if len(fc.GetPrefixes()) > 0 {
			prefix = fc.GetPrefixes()[0]
		}
		np, err := imagematch.NormalizePrefix(prefix, tables.DefaultPrefix)
		if err != nil {
			continue
		}
		ref := imagematch.Reference{Prefix: np, Name: fc.GetImage(), Tag: tag}
		if strings.HasPrefix(tag, "sha256:") {
			// A digest claim: name@sha256:…, not name:sha256:….
			ref.Tag, ref.Digest = "", tag
		}
		out = append(out, ref.String())
	}
	return out
}

// Conns keeps one client connection per pod and closes it when the pod goes.
type Conns struct {
	mu      sync.Mutex
	maxSize int
	opts    []grpc.DialOption
	conns   map[string]*grpc.ClientConn
}

// NewConns returns an empty pool whose connections carry messages up to
// maxSize bytes, dialled with opts added (e.g. the trace's stats handler).
func NewConns(maxSize int, opts ...grpc.DialOption) *Conns {
	return &Conns{maxSize: maxSize, opts: opts, conns: map[string]*grpc.ClientConn{}}
}

// Get returns the pod's connection, dialing it the first time.
func (c *Conns) Get(pod, address string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if conn, ok := c.conns[pod]; ok && conn.Target() == address {
		return conn, nil
	} else if ok {
		conn.Close()
	}
	conn, err := grpc.NewClient(address, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(c.maxSize), grpc.MaxCallSendMsgSize(c.maxSize))}, c.opts...)...)
	if err != nil {
		return nil, err
	}
	c.conns[pod] = conn
	return conn, nil
}

var _ kube.Health = (*Conns)(nil)

// Serving implements kube.Health on a connection of its own: a pooled
// connection that met a closed port would wait out gRPC's reconnect
// backoff (a second and more) before the call. A name is looked up once,
// as an absolute name (a Service's name has fewer dots than a cluster's
// ndots, and would first be tried under every search domain); a TCP dial
// comes first, refused at once while nothing listens.
func (c *Conns) Serving(ctx context.Context, address string) error {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	if net.ParseIP(host) == nil {
		addrs, err := net.DefaultResolver.LookupHost(ctx, strings.TrimSuffix(host, ".")+".")
		if err != nil {
			return err
		}
		address = net.JoinHostPort(addrs[0], port)
	}
	var d net.Dialer
	tcp, err := d.DialContext(ctx, "tcp", address)
	if err != nil {
		return err
	}
	tcp.Close()
	conn, err := grpc.NewClient(address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("wrapper-server at %s: %s", address, resp.GetStatus())
	}
	return nil
}

// Close closes the pod's connection, if any.
func (c *Conns) Close(pod string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if conn, ok := c.conns[pod]; ok {
		conn.Close()
		delete(c.conns, pod)
	}
}

// CloseAll closes every connection.
func (c *Conns) CloseAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for pod, conn := range c.conns {
		conn.Close()
		delete(c.conns, pod)
	}
}

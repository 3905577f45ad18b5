// Package server is the pod-manager's executor service: for each call it
// resolves the image (digest, entrypoint), leases a pod from the pod cache
// and forwards the call to that pod's wrapper-server.
package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/apis/config/v1alpha1"
	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/executortable"
	"github.com/fnrunner/fnrunner/libs/imagematch"
	"github.com/fnrunner/fnrunner/libs/imagemeta"
	"github.com/fnrunner/fnrunner/libs/sendonce"
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

// Resolver gives image metadata; *imagemeta.Resolver implements it.
type Resolver interface {
	Resolve(ctx context.Context, image string) (imagemeta.Metadata, error)
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
	TTL                     time.Duration
	MaxMessageSize          int
	PullSecret              string
	// RunUnclaimed runs images no FunctionConfig claims for pods with the
	// defaults (porch does); otherwise they are NotFound.
	RunUnclaimed bool
}

// Server implements evalwire.Server.
type Server struct {
	tables    Tables
	resolver  Resolver
	cache     Cache
	templates func() *templates.Templates
	opts      Options
	conns     *Conns
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
	for attempt := 1; ; attempt++ {
		lease, err := s.lease(ctx, req.Image)
		if err != nil {
			return nil, err
		}
		conn, err := s.conns.Get(lease.Pod, lease.Address)
		if err != nil {
			lease.Release()
			return nil, status.Errorf(codes.Unavailable, "function %q: pod %s: %v", req.Image, lease.Pod, err)
		}
		if err := sendonce.WaitReady(ctx, conn, podConnectWait); err != nil {
			lease.Release()
			if ctx.Err() != nil {
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			s.conns.Close(lease.Pod)
			s.cache.PodFailed(lease.Pod, fmt.Errorf("wrapper-server at %s not reachable", lease.Address))
			if attempt == podAttempts {
				return nil, status.Errorf(codes.Unavailable, "function %q: %d pods in a row did not accept the call (last: %s at %s); it was not run",
					req.Image, attempt, lease.Pod, lease.Address)
			}
			continue
		}
		resp, err := evalwire.NewClient(conn).EvaluateFunction(ctx, req)
		lease.Release()
		return resp, sendonce.Broken(ctx, err, fmt.Sprintf("function %q: pod %s", req.Image, lease.Pod))
	}
}

// lease finds (or starts) a pod for image; errors are gRPC statuses.
func (s *Server) lease(ctx context.Context, image string) (*podcache.Lease, error) {
	tables := s.tables.Await(ctx, tableWait)
	if tables == nil {
		return nil, status.Error(codes.Unavailable, "pod-manager has no executor table yet (is the config-reconciler reachable?); the function was not run")
	}
	ref, err := imagematch.Parse(image, tables.DefaultPrefix)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	f := podcache.Function{
		MaxParallelExecutions:   s.opts.MaxParallelExecutions,
		PreferredMaxQueueLength: s.opts.PreferredMaxQueueLength,
		TTL:                     s.opts.TTL,
	}
	spec := &kube.Spec{Templates: s.templates(), PullSecret: s.opts.PullSecret}
	fc, claimed := tables.Lookup(executortable.Pod, ref)
	if !claimed && !s.opts.RunUnclaimed {
		return nil, status.Errorf(codes.NotFound, "function %q not found", image)
	}
	if p := fc.GetPod(); p != nil {
		if p.GetMaxParallelExecutions() > 0 {
			f.MaxParallelExecutions = int(p.GetMaxParallelExecutions())
		}
		if p.GetPreferredMaxQueueLength() > 0 {
			f.PreferredMaxQueueLength = int(p.GetPreferredMaxQueueLength())
		}
		if p.GetTimeToLiveSeconds() > 0 {
			f.TTL = time.Duration(p.GetTimeToLiveSeconds()) * time.Second
		}
		if raw := p.GetTemplateOverridesJson(); len(raw) > 0 {
			spec.Overrides = &v1alpha1.TemplateOverrides{}
			if err := json.Unmarshal(raw, spec.Overrides); err != nil {
				return nil, status.Errorf(codes.FailedPrecondition, "function %q: templateOverrides: %v", image, err)
			}
		}
	}
	meta, err := s.resolver.Resolve(ctx, ref.String())
	if err != nil {
		code := codes.Unavailable
		if strings.Contains(err.Error(), "MANIFEST_UNKNOWN") || strings.Contains(err.Error(), "NAME_UNKNOWN") {
			code = codes.NotFound
		}
		return nil, status.Errorf(code, "function %q: resolving the image: %v", image, err)
	}
	spec.Image = ref.Prefix + "/" + ref.Name + "@" + meta.Digest
	spec.Entrypoint = meta.Entrypoint
	f.Spec = spec
	f.Key = cacheKey(spec)

	lease, err := s.cache.Acquire(ctx, f)
	if err != nil {
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			return nil, status.Errorf(codes.DeadlineExceeded, "function %q: no pod was ready before the deadline", image)
		case errors.Is(err, context.Canceled):
			return nil, status.Errorf(codes.Canceled, "function %q: cancelled while waiting for a pod", image)
		}
		return nil, status.Errorf(codes.Unavailable, "function %q: no pod: %v", image, err)
	}
	return lease, nil
}

// WarmUp starts one pod for every FunctionConfig with podExecutor tags, for
// its first exact tag under its first prefix (as porch does). Call it once
// the first executor table arrived, never before.
func (s *Server) WarmUp(ctx context.Context, log *slog.Logger, timeout time.Duration) {
	tables := s.tables.Tables()
	if tables == nil {
		return
	}
	var wg sync.WaitGroup
	for _, image := range WarmUpImages(tables) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			lease, err := s.lease(cctx, image)
			if err != nil {
				log.Warn("warm-up failed", "image", image, "error", err)
				return
			}
			lease.Release()
			log.Info("warmed up", "image", image, "pod", lease.Pod)
		}()
	}
	wg.Wait()
}

// WarmUpImages are the images WarmUp starts pods for.
func WarmUpImages(tables *executortable.Tables) []string {
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
		out = append(out, np+"/"+fc.GetImage()+":"+tag)
	}
	return out
}

// KeyVersion is the template version inside a cache key.
func KeyVersion(key string) string {
	parts := strings.Split(key, "|")
	if len(parts) != 3 {
		return ""
	}
	return parts[1]
}

// cacheKey: calls share pods when image, template version and overrides
// agree: image|version|overrides-hash.
func cacheKey(spec *kube.Spec) string {
	h := sha256.New()
	_ = json.NewEncoder(h).Encode(spec.Overrides)
	return fmt.Sprintf("%s|%s|%s", spec.Image, spec.Templates.Version(), hex.EncodeToString(h.Sum(nil))[:12])
}

// Conns keeps one client connection per pod and closes it when the pod goes.
type Conns struct {
	mu      sync.Mutex
	maxSize int
	conns   map[string]*grpc.ClientConn
}

// NewConns returns an empty pool whose connections carry messages up to maxSize bytes.
func NewConns(maxSize int) *Conns {
	return &Conns{maxSize: maxSize, conns: map[string]*grpc.ClientConn{}}
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
	conn, err := grpc.NewClient(address, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(c.maxSize), grpc.MaxCallSendMsgSize(c.maxSize)))
	if err != nil {
		return nil, err
	}
	c.conns[pod] = conn
	return conn, nil
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

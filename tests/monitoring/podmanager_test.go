package monitoring_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fnrunner/fnrunner/libs/configclient"
	"github.com/fnrunner/fnrunner/libs/imagemeta"
	"github.com/fnrunner/fnrunner/services/pod-manager/podcache"
)

// The pod-manager needs a Kubernetes API server, which this test does not
// run (tests/pods does). Its metrics come from three parts, which it
// registers as they are and which run here the same way on loopback, with
// their Kubernetes side faked: the pod cache (podcache, its pods created by
// a fake backend that makes them ready, or fail as an image pull does), the
// image metadata resolver (imagemeta, asking a real registry on loopback)
// and the executor table client (configclient, following the stack's
// config-reconciler). podManager serves them on /metrics, where
// Prometheus scrapes them as the job pod-manager.

// fakePods is a podcache.Backend whose pods become ready after a moment,
// or fail as an image that cannot be pulled does.
type fakePods struct {
	cache *podcache.Cache
	// failing is the image whose pods fail.
	failing string
	n       atomic.Int64
}

func (b *fakePods) Create(_ context.Context, f podcache.Function) (string, error) {
	pod := fmt.Sprintf("fn-%d", b.n.Add(1))
	go func() {
		time.Sleep(50 * time.Millisecond)
		if f.Key.Image == b.failing {
			b.cache.PodFailed(pod, &podcache.Failure{Reason: "ImagePullBackOff", Err: fmt.Errorf("pod %s: ImagePullBackOff: no such image", pod)})
			return
		}
		b.cache.PodReady(pod, "127.0.0.1:1")
	}()
	return pod, nil
}

func (b *fakePods) Delete(context.Context, string) error { return nil }

// podManager is the pod-manager's metric sources, served on /metrics.
type podManager struct {
	// address is where /metrics is served.
	address  string
	function string
	pods     *podcache.Cache
	failing  string
	resolver *imagemeta.Resolver
	registry string
	round    int
}

// startPodManager runs the pod-manager's metric sources, following the
// config-reconciler at configAddress, and serves them; drive makes their
// series move. Calls are counted under the function label function.
func startPodManager(t *testing.T, configAddress, function string) *podManager {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	reg := prometheus.NewRegistry()
	pm := &podManager{function: function}

	// The executor table, as the pod-manager follows it.
	cfg, closeCfg, err := configclient.Dial(slog.New(slog.DiscardHandler), configAddress, "pod-manager",
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(closeCfg)
	cfgDone := make(chan struct{})
	go func() { defer close(cfgDone); cfg.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-cfgDone })
	reg.MustRegister(cfg.Collectors()...)
	waitCtx, waitCancel := context.WithTimeout(ctx, time.Minute)
	defer waitCancel()
	require.True(t, cfg.WaitReady(waitCtx), "the pod-manager's table client got no table")

	// The pod cache, its pods made by a fake backend.
	pm.failing = "example.com/monitoring/set-namespace@sha256:" + strings.Repeat("f", 64)
	backend := &fakePods{failing: pm.failing}
	pm.pods = podcache.New(backend)
	backend.cache = pm.pods
	pm.pods.ReadyTimeout = time.Minute
	podsDone := make(chan struct{})
	go func() { defer close(podsDone); pm.pods.Run(ctx, time.Second) }()
	t.Cleanup(func() { cancel(); <-podsDone })
	reg.MustRegister(pm.pods.Collectors()...)

	// Image metadata, from a registry on loopback.
	regSrv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(regSrv.Close)
	pm.registry = strings.TrimPrefix(regSrv.URL, "http://")
	pm.resolver, err = imagemeta.New(imagemeta.Options{AllowedRegistries: []string{pm.registry}})
	require.NoError(t, err)
	reg.MustRegister(pm.resolver.Collectors()...)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("pod-manager metrics: %v", err)
		}
	}()
	t.Cleanup(func() { srv.Close() })
	pm.address = l.Addr().String()
	return pm
}

// drive is one round of work for the pod-manager's metric sources: a call
// of a new image of the function starts a pod (a cold start) that becomes
// ready and stays (its TTL is long), and the next call finds it warm; a
// call of an image whose pods fail gets two that fail; the image metadata
// of a new tag is looked up twice (a miss, then a hit), and of a tag the
// registry has not, twice (an error, then a cached not-found).
func (pm *podManager) drive(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	pm.round++
	good := podcache.Function{Key: podcache.Key{Image: fmt.Sprintf("example.com/monitoring/set-namespace@sha256:%064x", pm.round)},
		MaxParallelExecutions: 1, TTL: time.Hour, Label: pm.function}
	for range 2 {
		lease, err := pm.pods.Acquire(ctx, good)
		require.NoError(t, err)
		lease.Release()
	}
	bad := good
	bad.Key.Image = pm.failing
	_, err := pm.pods.Acquire(ctx, bad)
	var failure *podcache.Failure
	require.ErrorAs(t, err, &failure, "a call whose pods fail")

	ref, err := name.ParseReference(fmt.Sprintf("%s/monitoring/fn:r%d", pm.registry, pm.round))
	require.NoError(t, err)
	img, err := random.Image(512, 1)
	require.NoError(t, err)
	img, err = mutate.Config(img, v1.Config{Entrypoint: []string{"/function"}})
	require.NoError(t, err)
	require.NoError(t, remote.Write(ref, img))
	for range 2 {
		_, err := pm.resolver.Resolve(ctx, ref.String())
		require.NoError(t, err)
		_, err = pm.resolver.Resolve(ctx, fmt.Sprintf("%s/monitoring/fn:missing-%d", pm.registry, pm.round))
		require.Error(t, err)
	}
}

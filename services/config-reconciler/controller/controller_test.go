package controller_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/fnrunner/fnrunner/libs/apis/config/v1alpha1"
	"github.com/fnrunner/fnrunner/libs/configclient"
	"github.com/fnrunner/fnrunner/libs/executortable"
	"github.com/fnrunner/fnrunner/libs/imagematch"
	configpb "github.com/fnrunner/fnrunner/protos/configstream"
	"github.com/fnrunner/fnrunner/services/config-reconciler/configs"
	"github.com/fnrunner/fnrunner/services/config-reconciler/controller"
	"github.com/fnrunner/fnrunner/services/config-reconciler/store"
	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tests/kubetest"
)

const ns = "porch-fn-system"

type fixture struct {
	env    *kubetest.Environment
	client *configclient.Client
	// config calls the reconciler's stream service, as a runner does.
	config configpb.ExecutorConfigClient
}

// start runs the real controllers against a real apiserver, and a real
// stream subscriber over loopback gRPC.
func start(t *testing.T) *fixture {
	t.Helper()
	return startWith(t, crdDir(t))
}

// startWith is start with the CRDs in crds (ours, or porch's own).
func startWith(t *testing.T, crds string) *fixture {
	t.Helper()
	env := kubetest.Start(t, kubetest.Options{
		CRDDirectoryPaths: []string{crds},
		AddToScheme:       []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	require.NoError(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:  env.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   controller.CacheOptions(ns),
		// Each test of this process runs a manager of its own.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	require.NoError(t, err)
	st := store.New("")
	require.NoError(t, controller.Setup(mgr, log, ns, configs.Options{}, st))
	go func() {
		assert.NoError(t, mgr.Start(ctx), "manager")
	}()

	conn := serve(t, &store.Server{Store: st, Log: log, Reports: newRecorder(log, mgr)})
	cc := configclient.New(log, conn, "test")
	go cc.Run(ctx)
	return &fixture{env: env, client: cc, config: configpb.NewExecutorConfigClient(conn)}
}

// serve serves the stream service over loopback gRPC and returns a
// connection to it.
func serve(t *testing.T, s *store.Server) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	configpb.RegisterExecutorConfigServer(srv, s)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn
}

func functionConfig(name, image string, spec v1alpha1.FunctionConfigSpec) *v1alpha1.FunctionConfig {
	spec.Image = image
	return &v1alpha1.FunctionConfig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
}

func goSpec(tags ...string) v1alpha1.FunctionConfigSpec {
	return v1alpha1.FunctionConfigSpec{GoExecutor: &v1alpha1.GoExecutorConfig{Tags: tags}}
}

func (f *fixture) get(t *testing.T, name string) *v1alpha1.FunctionConfig {
	t.Helper()
	var fc v1alpha1.FunctionConfig
	require.NoError(t, f.env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &fc))
	return &fc
}

func (f *fixture) lookup(t *testing.T, kind executortable.Kind, image string) (*configpb.FunctionConfig, bool) {
	t.Helper()
	tables := f.client.Tables()
	if tables == nil {
		return nil, false
	}
	ref, err := imagematch.Parse(image, "")
	require.NoError(t, err)
	return tables.Lookup(kind, ref)
}

func TestStatusConflictsDeletionAndStream(t *testing.T) {
	f := start(t)
	ctx := context.Background()

	// The namespace has no FunctionConfig yet: a table (an empty one) is
	// published all the same once the caches have synced, since no object
	// event will come to trigger it and nothing downstream becomes ready
	// without a table.
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.True(t, f.client.WaitReady(waitCtx), "no executor table published for an empty namespace")
	assert.Empty(t, f.client.Tables().Functions())

	// A valid FunctionConfig: Ready, observed generation set, in the table.
	sn := functionConfig("set-namespace", "set-namespace", goSpec("v0.4.5"))
	require.NoError(t, f.env.Client.Create(ctx, sn))
	harness.WaitFor(t, "set-namespace Ready", func() bool {
		fc := f.get(t, "set-namespace")
		return meta.IsStatusConditionTrue(fc.Status.Conditions, v1alpha1.ConditionReady) &&
			fc.Status.FunctionRunnerObservedGeneration == fc.Generation && fc.Status.Error == ""
	})
	harness.WaitFor(t, "set-namespace in the streamed table", func() bool {
		_, ok := f.lookup(t, executortable.Go, "set-namespace:v0.4.5")
		return ok
	})

	// An invalid binary path is reported and kept out of the table.
	bad := functionConfig("escape", "starlark", v1alpha1.FunctionConfigSpec{
		BinaryExecutor: &v1alpha1.BinaryExecutorConfig{Tags: []string{"v0.5.5"}, Path: "../../../bin/sh"}})
	require.NoError(t, f.env.Client.Create(ctx, bad))
	harness.WaitFor(t, "escape reported invalid", func() bool {
		fc := f.get(t, "escape")
		c := meta.FindStatusCondition(fc.Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == controller.ReasonInvalid &&
			strings.Contains(fc.Status.Error, "leaves the functions directory")
	})
	_, ok := f.lookup(t, executortable.Binary, "starlark:v0.5.5")
	assert.False(t, ok, "a binary path outside the functions directory reached the table")

	// A rival claiming the same image, prefix, tag and executor: both get a
	// Conflict condition and neither is used for that tag.
	rival := functionConfig("rival", "set-namespace", goSpec("v0.4.5", "v0.4.4"))
	require.NoError(t, f.env.Client.Create(ctx, rival))
	for _, name := range []string{"set-namespace", "rival"} {
		harness.WaitFor(t, name+" in conflict", func() bool {
			fc := f.get(t, name)
			return meta.IsStatusConditionTrue(fc.Status.Conditions, v1alpha1.ConditionConflict) &&
				meta.IsStatusConditionFalse(fc.Status.Conditions, v1alpha1.ConditionReady) &&
				strings.Contains(fc.Status.Error, ns+"/rival") && strings.Contains(fc.Status.Error, ns+"/set-namespace")
		})
	}
	harness.WaitFor(t, "conflicting tag out of the table", func() bool {
		_, conflicting := f.lookup(t, executortable.Go, "set-namespace:v0.4.5")
		owner, other := f.lookup(t, executortable.Go, "set-namespace:v0.4.4")
		return !conflicting && other && owner.GetName() == "rival"
	})

	// Deleting the rival resolves the conflict: no stale entry is left and
	// the original is Ready again.
	require.NoError(t, f.env.Client.Delete(ctx, rival))
	harness.WaitFor(t, "rival gone from the table", func() bool {
		_, stale := f.lookup(t, executortable.Go, "set-namespace:v0.4.4")
		fc, ok := f.lookup(t, executortable.Go, "set-namespace:v0.4.5")
		return !stale && ok && fc.GetName() == "set-namespace"
	})
	harness.WaitFor(t, "set-namespace Ready again", func() bool {
		fc := f.get(t, "set-namespace")
		return meta.IsStatusConditionTrue(fc.Status.Conditions, v1alpha1.ConditionReady) &&
			meta.IsStatusConditionFalse(fc.Status.Conditions, v1alpha1.ConditionConflict)
	})

	// A spec change reaches subscribers within a second.
	fc := f.get(t, "set-namespace")
	fc.Spec.GoExecutor.Tags = append(fc.Spec.GoExecutor.Tags, "v0.4.6")
	require.NoError(t, f.env.Client.Update(ctx, fc))
	changed := time.Now()
	harness.WaitFor(t, "the new tag streamed", func() bool {
		_, ok := f.lookup(t, executortable.Go, "set-namespace:v0.4.6")
		return ok
	})
	assert.LessOrEqual(t, time.Since(changed), time.Second, "time the stream took to carry the change")
	harness.WaitFor(t, "new generation observed", func() bool {
		fc := f.get(t, "set-namespace")
		return fc.Status.FunctionRunnerObservedGeneration == fc.Generation && fc.Generation > 1
	})
}

func TestCRDRejectsConfigWithoutExecutor(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{CRDDirectoryPaths: []string{crdDir(t)}, AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	ctx := context.Background()
	require.NoError(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	err := env.Client.Create(ctx, functionConfig("none", "set-namespace", v1alpha1.FunctionConfigSpec{}))
	require.ErrorContains(t, err, "At least one configuration must be specified", "create without executor, want the CEL rule's message")
	err = env.Client.Create(ctx, functionConfig("empty-image", "", goSpec("v1")))
	require.Error(t, err, "a FunctionConfig with an empty image was accepted")
}

func crdDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("FNRUNNER_CRDS")
	if dir == "" {
		dir = "../../../crds"
	}
	_, err := os.Stat(dir)
	require.NoError(t, err, "CRD directory")
	return dir
}

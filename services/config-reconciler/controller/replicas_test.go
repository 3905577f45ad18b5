package controller_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/fnrunner/fnrunner/libs/apis/config/v1alpha1"
	"github.com/fnrunner/fnrunner/services/config-reconciler/configs"
	"github.com/fnrunner/fnrunner/services/config-reconciler/controller"
	"github.com/fnrunner/fnrunner/services/config-reconciler/store"
	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tests/kubetest"
)

// Two replicas with leader election: both serve the whole table, one is
// elected and writes status.
func TestTwoReplicas(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{CRDDirectoryPaths: []string{crdDir(t)}, AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var stores []*store.Store
	var mgrs []ctrl.Manager
	for i := 0; i < 2; i++ {
		mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
			Scheme:                        env.Scheme,
			Metrics:                       metricsserver.Options{BindAddress: "0"},
			Cache:                         cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
			LeaderElection:                true,
			LeaderElectionID:              "fnrunner-config-reconciler",
			LeaderElectionNamespace:       ns,
			LeaderElectionReleaseOnCancel: true,
			// Two managers in one test process register the same controller names.
			Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		})
		require.NoError(t, err)
		st := store.New("")
		require.NoError(t, controller.Setup(mgr, log, ns, configs.Options{}, st))
		go func() {
			assert.NoError(t, mgr.Start(ctx), "manager %d", i)
		}()
		stores, mgrs = append(stores, st), append(mgrs, mgr)
	}

	require.NoError(t, env.Client.Create(ctx, functionConfig("set-namespace", "set-namespace", goSpec("v0.4.5"))))
	for _, st := range stores {
		harness.WaitFor(t, "replica table", func() bool {
			snap, _ := st.Current()
			return len(snap.GetFunctions()) == 1 && snap.GetFunctions()[0].GetName() == "set-namespace"
		})
	}
	f := &fixture{env: env}
	harness.WaitFor(t, "status written by the leader", func() bool {
		return meta.IsStatusConditionTrue(f.get(t, "set-namespace").Status.Conditions, v1alpha1.ConditionReady)
	})
	elected := 0
	for _, m := range mgrs {
		select {
		case <-m.Elected():
			elected++
		default:
		}
	}
	assert.Equal(t, 1, elected, "replicas elected")
}

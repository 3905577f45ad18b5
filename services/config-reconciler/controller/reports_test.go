package controller_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/fnrunner/fnrunner/libs/apis/config/v1alpha1"
	"github.com/fnrunner/fnrunner/libs/reporttoken"
	configpb "github.com/fnrunner/fnrunner/protos/configstream"
	"github.com/fnrunner/fnrunner/services/config-reconciler/configs"
	"github.com/fnrunner/fnrunner/services/config-reconciler/controller"
	"github.com/fnrunner/fnrunner/services/config-reconciler/reports"
	"github.com/fnrunner/fnrunner/services/config-reconciler/store"
	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tests/kubetest"
	"github.com/fnrunner/fnrunner/tests/porchfiles"
)

// replica is one config-reconciler: a manager with leader election, its
// table, and its stream service (with Report) over loopback gRPC.
type replica struct {
	mgr    ctrl.Manager
	store  *store.Store
	config configpb.ExecutorConfigClient
}

func startReplicas(t *testing.T, env *kubetest.Environment, n int) []*replica {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var out []*replica
	for i := 0; i < n; i++ {
		mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
			Scheme:                        env.Scheme,
			Metrics:                       metricsserver.Options{BindAddress: "0"},
			Cache:                         controller.CacheOptions(ns),
			LeaderElection:                true,
			LeaderElectionID:              "fnrunner-config-reconciler",
			LeaderElectionNamespace:       ns,
			LeaderElectionReleaseOnCancel: true,
			Controller:                    config.Controller{SkipNameValidation: ptr.To(true)},
		})
		require.NoError(t, err)
		st := store.New("")
		require.NoError(t, controller.Setup(mgr, log, ns, configs.Options{}, st))
		go func() {
			assert.NoError(t, mgr.Start(ctx), "manager %d", i)
		}()
		conn := serve(t, &store.Server{Store: st, Log: log, Reports: newRecorder(log, mgr)})
		out = append(out, &replica{mgr: mgr, store: st, config: configpb.NewExecutorConfigClient(conn)})
	}
	return out
}

// follower waits for a leader among replicas and returns one that is not.
func follower(t *testing.T, replicas []*replica) *replica {
	t.Helper()
	var other *replica
	harness.WaitFor(t, "a leader elected", func() bool {
		other = nil
		elected := 0
		for _, r := range replicas {
			select {
			case <-r.mgr.Elected():
				elected++
			default:
				other = r
			}
		}
		return elected == 1 && other != nil
	})
	return other
}

func unrunnable(runner, uid, name, path, reason string) *configpb.RunnerReport {
	r := &configpb.RunnerReport{Runner: runner, RunnerUid: uid, Epoch: "e", Version: 1}
	if name != "" {
		r.Unrunnable = []*configpb.UnrunnableBinary{{Namespace: ns, Name: name, Path: path, Reason: reason}}
	}
	return r
}

// runnerPod creates a pod in ns, as a runner's (envtest runs none), under
// the service account runnerSA.
func runnerPod(t *testing.T, env *kubetest.Environment, name string, labels map[string]string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: runnerSA}}
	if err := env.Client.Create(ctx, sa); !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{ServiceAccountName: runnerSA, Containers: []corev1.Container{{Name: "binary-runner", Image: "fnrunner/binary-runner"}}},
	}
	require.NoError(t, env.Client.Create(ctx, pod))
	return pod
}

// runnerSA is the runner pods' service account.
const runnerSA = "fnrunner-binary-runner"

// token is a service account token bound to pod for audience, from the
// apiserver (TokenRequest), as the kubelet puts in a projected volume.
func token(t *testing.T, env *kubetest.Environment, pod *corev1.Pod, audience string) string {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: runnerSA}}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences:      []string{audience},
		BoundObjectRef: &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID},
	}}
	require.NoError(t, env.Client.SubResource("token").Create(context.Background(), sa, tr))
	require.NotEmpty(t, tr.Status.Token)
	return tr.Status.Token
}

// as is a context whose calls carry pod's token for the config-reconciler,
// as the binary-runner sends its reports.
func as(t *testing.T, env *kubetest.Environment, pod *corev1.Pod) context.Context {
	t.Helper()
	return reporttoken.Attach(context.Background(), token(t, env, pod, reporttoken.DefaultAudience))
}

// newRecorder is the cluster's Recorder of a replica, as main makes it.
func newRecorder(log *slog.Logger, mgr ctrl.Manager) *reports.ConfigMaps {
	return reports.NewConfigMaps(log, mgr.GetClient(), mgr.GetAPIReader(), reports.Options{
		Namespace:      ns,
		Tokens:         reports.TokenReview{Client: mgr.GetClient(), Audience: reporttoken.DefaultAudience},
		ServiceAccount: runnerSA,
	})
}

func reportCM(t *testing.T, env *kubetest.Environment, runner string) *corev1.ConfigMap {
	t.Helper()
	var cm corev1.ConfigMap
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: reports.Name(runner)}, &cm))
	return &cm
}

// A binary-runner reports a binaryExecutor it cannot run to the replica
// that is not the leader; the leader puts the error in status (porch's
// error field and the Ready condition), leaves the table as it is, and
// clears the error once the runner reports the binary runnable.
func TestRunnerReportReachesStatusFromAnyReplica(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{CRDDirectoryPaths: []string{crdDir(t)}, AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	ctx := context.Background()
	require.NoError(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	replicas := startReplicas(t, env, 2)
	f := &fixture{env: env}

	fc := functionConfig("apply-setters", "apply-setters", v1alpha1.FunctionConfigSpec{
		BinaryExecutor: &v1alpha1.BinaryExecutorConfig{Tags: []string{"v0.2.0"}, Path: "apply-setters"},
		PodExecutor:    &v1alpha1.PodExecutorConfig{Tags: []string{"v0.2.2"}},
	})
	require.NoError(t, env.Client.Create(ctx, fc))
	harness.WaitFor(t, "apply-setters Ready", func() bool {
		return meta.IsStatusConditionTrue(f.get(t, "apply-setters").Status.Conditions, v1alpha1.ConditionReady)
	})

	// The runner's pod: only a binary-runner pod of the namespace may
	// report, and its report is owned by it.
	pod := runnerPod(t, env, "fnrunner-binary-runner-0", map[string]string{reports.RunnerLabel: reports.RunnerLabelValue})

	other := follower(t, replicas)
	_, err := other.config.Report(as(t, env, pod), unrunnable(pod.Name, string(pod.UID), "apply-setters", "apply-setters", "no such file"))
	require.NoError(t, err)
	const want = "binaryExecutor apply-setters: not runnable on binary-runner fnrunner-binary-runner-0: no such file"
	harness.WaitFor(t, "the runner's error in status", func() bool {
		got := f.get(t, "apply-setters")
		ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
		return got.Status.Error == want && ready != nil && ready.Status == metav1.ConditionFalse &&
			ready.Reason == controller.ReasonNotRunnable && ready.Message == want &&
			got.Status.FunctionRunnerObservedGeneration == got.Generation
	})

	// The report is kept as a ConfigMap owned by the runner's pod, which
	// the garbage collector deletes with it.
	cm := reportCM(t, env, pod.Name)
	assert.Equal(t, "true", cm.Labels[reports.Label])
	require.Len(t, cm.OwnerReferences, 1)
	assert.Equal(t, metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}, cm.OwnerReferences[0])

	// The table is as before: both executors stay, calls fall through.
	for _, r := range replicas {
		snap, _ := r.store.Current()
		require.Len(t, snap.GetFunctions(), 1)
		assert.Equal(t, "apply-setters", snap.GetFunctions()[0].GetBinary().GetPath())
		assert.NotNil(t, snap.GetFunctions()[0].GetPod(), "the pod executor left the table")
	}

	// Reports without a token bound to the runner's pod, from runners
	// that are no binary-runner pod here, or with another UID than the
	// pod's, are refused and stored nowhere: they neither reach status
	// nor change the pod's report.
	other0 := runnerPod(t, env, "other-app", map[string]string{reports.RunnerLabel: "other-app"})
	gone := runnerPod(t, env, "fnrunner-binary-runner-gone", map[string]string{reports.RunnerLabel: reports.RunnerLabelValue})
	goneToken := token(t, env, gone, reporttoken.DefaultAudience)
	require.NoError(t, env.Client.Delete(ctx, gone, client.GracePeriodSeconds(0)))
	const unknown = "is not a binary-runner pod of namespace " + ns
	for _, tc := range []struct {
		name, runner, uid string
		ctx               context.Context
		code              codes.Code
		message           string
		stored            bool // a ConfigMap of this runner is there from before
	}{
		{name: "outside a pod, no token", runner: "laptop", ctx: ctx, code: codes.Unauthenticated, message: "no service account token"},
		{name: "no token, naming the runner", runner: pod.Name, uid: string(pod.UID), ctx: ctx, code: codes.Unauthenticated, message: "no service account token", stored: true},
		{name: "a forged token", runner: pod.Name, ctx: reporttoken.Attach(ctx, "eyJhbGciOiJub25lIn0.e30."), code: codes.Unauthenticated, message: "no service account token valid", stored: true},
		{name: "the pod's token for another audience", runner: pod.Name, ctx: reporttoken.Attach(ctx, token(t, env, pod, "vault")), code: codes.Unauthenticated, message: "no service account token valid", stored: true},
		{name: "the token of a pod deleted since", runner: gone.Name, uid: string(gone.UID), ctx: reporttoken.Attach(ctx, goneToken), code: codes.Unauthenticated, message: "no service account token valid"},
		{name: "a token too large to be one", runner: pod.Name, ctx: reporttoken.Attach(ctx, strings.Repeat("x", reporttoken.MaxBytes+1)), code: codes.InvalidArgument, message: "too large", stored: true},
		{name: "a pod that is no binary-runner", runner: other0.Name, uid: string(other0.UID), ctx: as(t, env, other0), code: codes.PermissionDenied, message: unknown},
		{name: "another pod's token, naming the runner", runner: pod.Name, uid: string(pod.UID), ctx: as(t, env, other0), code: codes.PermissionDenied, message: unknown, stored: true},
		{name: "the pod under another UID", runner: pod.Name, uid: "0a1b", ctx: as(t, env, pod), code: codes.PermissionDenied, message: unknown, stored: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range replicas {
				_, err := r.config.Report(tc.ctx, unrunnable(tc.runner, tc.uid, "", "", ""))
				require.Equal(t, tc.code, grpcstatus.Code(err), "%v", err)
				assert.Contains(t, grpcstatus.Convert(err).Message(), tc.message)
			}
			var cm corev1.ConfigMap
			err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: reports.Name(tc.runner)}, &cm)
			if !tc.stored {
				assert.True(t, apierrors.IsNotFound(err), "a report of %s was stored: %v", tc.runner, err)
				return
			}
			require.NoError(t, err)
			rep, err := reports.Decode(&cm)
			require.NoError(t, err)
			assert.Equal(t, string(pod.UID), rep.RunnerUID, "the refused report replaced the pod's")
			assert.Len(t, rep.Unrunnable, 1)
		})
	}
	assert.Equal(t, want, f.get(t, "apply-setters").Status.Error)

	// More runner pods: one reports without a UID (stored, owned by its
	// pod as the apiserver has it), one on an older table whose path
	// differed (ignored for status).
	pod1 := runnerPod(t, env, "fnrunner-binary-runner-1", map[string]string{reports.RunnerLabel: reports.RunnerLabelValue})
	pod2 := runnerPod(t, env, "fnrunner-binary-runner-2", map[string]string{reports.RunnerLabel: reports.RunnerLabelValue})
	_, err = replicas[0].config.Report(as(t, env, pod1), unrunnable(pod1.Name, "", "apply-setters", "apply-setters", "not executable"))
	require.NoError(t, err)
	_, err = replicas[1].config.Report(as(t, env, pod2), unrunnable(pod2.Name, string(pod2.UID), "apply-setters", "old/apply-setters", "no such file"))
	require.NoError(t, err)
	for _, p := range []*corev1.Pod{pod1, pod2} {
		assert.Equal(t, []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID}}, reportCM(t, env, p.Name).OwnerReferences)
	}
	harness.WaitFor(t, "both reasons in status", func() bool {
		return f.get(t, "apply-setters").Status.Error == want+"; binaryExecutor apply-setters: not runnable on binary-runner fnrunner-binary-runner-1: not executable"
	})

	// The binaries appear: the reports are empty, the error goes.
	for _, p := range []*corev1.Pod{pod, pod1} {
		_, err = other.config.Report(as(t, env, p), unrunnable(p.Name, "", "", "", ""))
		require.NoError(t, err)
	}
	harness.WaitFor(t, "apply-setters Ready again", func() bool {
		got := f.get(t, "apply-setters")
		return got.Status.Error == "" && meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionReady)
	})

	// A report must name its runner.
	_, err = other.config.Report(as(t, env, pod), &configpb.RunnerReport{})
	require.Error(t, err)
}

// Under porch's own CRD (no conditions) the runner's error is in porch's
// error field, and it goes when the runner can run the binary.
func TestRunnerReportInPorchStatus(t *testing.T) {
	porchfiles.Require(t)
	crds := t.TempDir()
	for _, name := range []string{"config.porch.kpt.dev_functionconfigs.yaml", "config.porch.kpt.dev_servicetemplates.yaml"} {
		data, err := os.ReadFile(porchfiles.Path(t, name))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(crds, name), data, 0o644))
	}
	f := startWith(t, crds)
	ctx := context.Background()
	var fc *unstructured.Unstructured
	for _, o := range porchfiles.Objects(t, "23-function-configurations.yaml") {
		if o.GetName() == "apply-setters" {
			fc = o
		}
	}
	require.NotNil(t, fc, "porch's apply-setters FunctionConfig")
	path, _, _ := unstructured.NestedString(fc.Object, "spec", "binaryExecutor", "path")
	require.Equal(t, "apply-setters", path)
	require.NoError(t, f.env.Client.Create(ctx, fc.DeepCopy()))
	key := types.NamespacedName{Namespace: ns, Name: "apply-setters"}
	status := func() (errText string, observed, generation int64) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(fcGVK)
		require.NoError(t, f.env.Client.Get(ctx, key, u))
		errText, _, _ = unstructured.NestedString(u.Object, "status", "error")
		observed, _, _ = unstructured.NestedInt64(u.Object, "status", "functionRunnerObservedGeneration")
		return errText, observed, u.GetGeneration()
	}
	harness.WaitFor(t, "apply-setters applied", func() bool {
		errText, observed, generation := status()
		return errText == "" && observed == generation
	})

	pod := runnerPod(t, f.env, "fnrunner-binary-runner-0", map[string]string{reports.RunnerLabel: reports.RunnerLabelValue})
	_, err := f.config.Report(as(t, f.env, pod), unrunnable(pod.Name, "", "apply-setters", "apply-setters", "no such file"))
	require.NoError(t, err)
	harness.WaitFor(t, "the runner's error in porch's status", func() bool {
		errText, observed, generation := status()
		return errText == "binaryExecutor apply-setters: not runnable on binary-runner fnrunner-binary-runner-0: no such file" &&
			observed == generation
	})

	_, err = f.config.Report(as(t, f.env, pod), unrunnable(pod.Name, "", "", "", ""))
	require.NoError(t, err)
	harness.WaitFor(t, "the error cleared", func() bool {
		errText, _, _ := status()
		return errText == ""
	})
	_, hasConditions, _ := unstructured.NestedSlice(func() map[string]any {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(fcGVK)
		require.NoError(t, f.env.Client.Get(ctx, key, u))
		return u.Object
	}(), "status", "conditions")
	assert.False(t, hasConditions, "porch's schema has no conditions")
	assert.False(t, strings.Contains(string(reportCM(t, f.env, "fnrunner-binary-runner-0").Data[reports.DataKey]), "apply-setters"),
		"the cleared report still names the FunctionConfig")
}

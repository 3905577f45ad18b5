package pods_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fnrunner/fnrunner/libs/apis/config/v1alpha1"
	pb "github.com/fnrunner/fnrunner/protos/evaluator"
	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tests/ledger"
	"github.com/fnrunner/fnrunner/tests/stack"
	"github.com/fnrunner/fnrunner/tools/localstack"
)

// recording calls image, an image of tests/testfns/record, through
// client: call i notes its run in the ledger file runs and answers after
// sleep.
func recording(client pb.FunctionEvaluatorClient, image, runs string, sleep time.Duration) ledger.Call {
	return func(ctx context.Context, i int) error {
		_, err := client.EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: image, ResourceList: []byte(ledger.RecordInputSleeping(runs, i, sleep))})
		return err
	}
}

// Function pods are deleted while calls run on them: every call is answered,
// OK or Unavailable with a message, none ran twice, and the function keeps
// being served.
func TestPodDeletedMidCall(t *testing.T) {
	f := start(t)
	// Pods set as slow's (maxParallelExecutions 2) running the record
	// function, which takes half a second as slow does.
	image := f.host + "/fns/record-slow:v1"
	const calls, concurrency = 40, 4
	run := ledger.Background(context.Background(), ledger.Options{Calls: calls, Concurrency: concurrency, Deadline: 2 * time.Minute},
		recording(f.gateway, image, f.runs, 500*time.Millisecond))
	require.Eventually(t, func() bool { return run.Answered() >= 4 }, harness.Wait, 20*time.Millisecond, "gave up waiting for calls answered by a slow pod")
	deleted := 0
	for _, p := range f.pods(t) {
		if p.Status.Phase == corev1.PodRunning {
			require.NoError(t, f.env.Client.Delete(context.Background(), &p))
			deleted++
		}
	}
	require.NotZero(t, deleted, "no running pod to delete")
	r := run.Wait()
	ledger.Check(t, "pods deleted mid-call", r, codes.Unavailable)
	ledger.CheckExecutions(t, "pods deleted mid-call", r, f.runs)
	assert.GreaterOrEqual(t, r.OK, calls-deleted*2, "calls OK of %d after deleting %d pods", calls, deleted)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	assert.NoError(t, recording(f.gateway, image, f.ledger(t, "after"), 0)(ctx, 0), "after the pods were deleted")
}

// The pod-manager is restarted (SIGTERM, then started again) under load:
// calls in flight finish, calls that arrive meanwhile wait for it, none
// runs twice, and the new process adopts the pods.
func TestPodManagerRestartedUnderLoad(t *testing.T) {
	f := start(t)
	// A pod set as steady's (its TTL outlasts the test) running the record
	// function.
	image := f.host + "/fns/record-steady:v1"
	const calls, concurrency = 200, 8
	run := ledger.Background(context.Background(), ledger.Options{Calls: calls, Concurrency: concurrency, Deadline: 2 * time.Minute},
		recording(f.gateway, image, f.runs, 20*time.Millisecond))
	require.Eventually(t, func() bool { return run.Answered() >= calls/4 }, harness.Wait, 20*time.Millisecond, "gave up waiting for a quarter of the calls answered")
	f.restartPodManager(t)
	r := run.Wait()
	ledger.Check(t, "pod-manager restarted", r, codes.Unavailable)
	ledger.CheckExecutions(t, "pod-manager restarted", r, f.runs)
	assert.LessOrEqual(t, r.Codes[codes.Unavailable], concurrency, "calls Unavailable; at most the %d in flight may fail", concurrency)
	steady := 0
	for _, p := range f.kubelet.StartedPods() {
		if strings.HasPrefix(p, "record-steady-") {
			steady++
		}
	}
	assert.Equal(t, 1, steady, "pods started: %v; the restarted pod-manager should adopt the one record-steady pod", f.kubelet.StartedPods())
}

// kube-apiserver goes away and comes back: the gateway keeps serving from
// its last executor table meanwhile (the binary executor's record function:
// no call runs twice), and the config-reconciler (watching the cluster)
// resyncs and picks up what changed once it is back.
func TestAPIServerStoppedAndRestarted(t *testing.T) {
	env := kubeEnvironment(t)
	ctx := context.Background()
	create := func(name, prefix string) {
		t.Helper()
		fc := &v1alpha1.FunctionConfig{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: v1alpha1.FunctionConfigSpec{Image: "record", Prefixes: []string{prefix},
				BinaryExecutor: &v1alpha1.BinaryExecutorConfig{Tags: []string{"v1"}, Path: "record"}},
		}
		require.NoError(t, env.Client.Create(ctx, fc))
	}
	create("record", "example.com/before")

	functions := t.TempDir()
	require.NoError(t, os.Symlink(harness.Binary(t, "FNRUNNER_RECORD"), filepath.Join(functions, "record")))
	// Each run of calls notes its executions in a file of its own; the
	// probes that wait for a FunctionConfig, in one they share.
	loads := []string{"before the outage", "apiserver down", "after the outage", "after the outage, older config"}
	ledgerDir, runs := ledger.Records(t, append([]string{"probe"}, loads...)...)
	// The config-reconciler watches the cluster (no --config-dir).
	s := stack.Run(t, localstack.Config{Binaries: stack.Binaries(t), FunctionsDir: functions,
		BinaryRunnerArgs:     []string{"--sandbox-read-write-paths=" + ledgerDir},
		ConfigReconcilerArgs: []string{"--kubeconfig=" + kubeconfig(t, env), "--namespace=" + ns, "--leader-elect=false"}})
	wctx, cancel := context.WithTimeout(ctx, harness.Wait)
	defer cancel()
	require.NoError(t, s.WaitServing(wctx), "gateway SERVING")
	reconcilerLog := func() string { return s.Log("config-reconciler") }
	conn, err := grpc.NewClient(s.GatewayAddress, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	gateway := pb.NewFunctionEvaluatorClient(conn)
	load := func(name, image string) {
		r := ledger.Run(ctx, ledger.Options{Calls: 20, Concurrency: 4}, recording(gateway, image, runs[name], 20*time.Millisecond))
		ledger.Check(t, name, r)
		ledger.CheckExecutions(t, name, r, runs[name])
	}
	served := func(image string) func() bool {
		return func() bool { return recording(gateway, image, runs["probe"], 0)(ctx, 0) == nil }
	}
	harness.WaitFor(t, "the FunctionConfig served", served("example.com/before/record:v1"), reconcilerLog)
	load(loads[0], "example.com/before/record:v1")

	require.NoError(t, env.StopAPIServer())
	load(loads[1], "example.com/before/record:v1")
	health := healthpb.NewHealthClient(conn)
	hr, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
	assert.NoError(t, err, "gateway health with the apiserver down")
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, hr.GetStatus(), "gateway health with the apiserver down; want SERVING from its last table")

	require.NoError(t, env.StartAPIServer())
	create("record-after", "example.com/after")
	harness.WaitFor(t, "the FunctionConfig made after the outage served", served("example.com/after/record:v1"), reconcilerLog)
	load(loads[2], "example.com/after/record:v1")
	load(loads[3], "example.com/before/record:v1")
	harness.WaitFor(t, "status written after the outage", func() bool {
		var fc v1alpha1.FunctionConfig
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "record-after"}, &fc); err != nil {
			return false
		}
		for _, c := range fc.Status.Conditions {
			if c.Type == "Ready" && c.Status == metav1.ConditionTrue {
				return true
			}
		}
		return false
	}, reconcilerLog)
}

// A burst beyond what a function's pods take at once (256 calls at c=64 on
// set-namespace: maxParallelExecutions 2, --max-calls-per-pod 16) waits in
// the pod-manager for room: every call OK and run once, and no pod beyond
// the two.
func TestBurstQueuesInThePodManager(t *testing.T) {
	f := start(t)
	// Pods set as set-namespace's running the record function.
	image := f.host + "/fns/record-set-namespace:v1"
	const calls, concurrency = 256, 64
	r := ledger.Run(context.Background(), ledger.Options{Calls: calls, Concurrency: concurrency, Deadline: 2 * time.Minute},
		recording(f.gateway, image, f.runs, 20*time.Millisecond))
	ledger.Check(t, "burst through the pod path", r)
	ledger.CheckExecutions(t, "burst through the pod path", r, f.runs)
	assert.Equal(t, calls, r.OK, "calls OK")
	started := 0
	for _, p := range f.kubelet.StartedPods() {
		if strings.HasPrefix(p, "record-set-namespace-") {
			started++
		}
	}
	assert.LessOrEqual(t, started, 2, "record-set-namespace pods started (maxParallelExecutions 2): %v", f.kubelet.StartedPods())
}

// Pods that never become ready: one the scheduler cannot place, one whose
// readiness never passes. Calls waiting on them fail with Unavailable naming
// why once --pod-ready-timeout has passed (porch waits 60 s; 3 s here), not
// at their own deadline, the function never runs (the record function: the
// unready pod's wrapper-server is up), and the pods are deleted.
func TestPodsThatNeverBecomeReady(t *testing.T) {
	f := start(t)
	f.kubelet.Unschedulable("/fns/unschedulable")
	f.kubelet.NeverReady("/fns/unready")
	for _, ref := range []string{"/fns/unschedulable:v1", "/fns/unready:v1"} {
		f.registry.Push(t, f.host+ref, v1.Config{Entrypoint: []string{"/fn/record"}})
	}
	// Without warm-up: the test kubelet starts pods one at a time, and
	// warm pods would keep it from these for seconds.
	f.restartPodManager(t, "--warm-up-pod-cache=false", "--pod-ready-timeout=3s")
	wctx, cancel := context.WithTimeout(context.Background(), harness.Wait)
	defer cancel()
	require.NoError(t, f.stack.WaitHealthy(wctx, "pod-manager"), "pod-manager after its restart")
	for _, tc := range []struct{ image, why string }{
		{"/fns/unschedulable:v1", "Unschedulable: 0/1 nodes are available"},
		{"/fns/unready:v1", "readiness probe has not passed"},
	} {
		t.Run(tc.image, func(t *testing.T) {
			name := strings.TrimPrefix(strings.Split(tc.image, ":")[0], "/fns/")
			runs := f.ledger(t, name)
			r := ledger.Run(context.Background(), ledger.Options{Calls: 1, Deadline: time.Minute},
				recording(f.client, f.host+tc.image, runs, 0))
			ledger.Check(t, name, r, codes.Unavailable)
			assert.Zero(t, ledger.CheckExecutions(t, name, r, runs), "runs of a function whose pod never became ready")
			err := r.Errors[codes.Unavailable]
			require.Error(t, err, "the call's answer: %v", r)
			assert.Contains(t, status.Convert(err).Message(), tc.why)
			assert.Contains(t, status.Convert(err).Message(), "not ready after")
			require.Eventually(t, func() bool {
				for _, p := range f.pods(t) {
					if strings.HasPrefix(p.Name, name+"-") && p.DeletionTimestamp == nil {
						return false
					}
				}
				return true
			}, harness.Wait, 20*time.Millisecond, "the pod that never became ready was not deleted")
		})
	}
}

// A pod-manager replica is killed (SIGKILL) under load behind a gateway
// that spreads functions over two replicas: only calls in flight on it fail
// (Unavailable, not repeated); its functions' later calls go to the other
// replica, which starts pods of its own for them.
func TestPodManagerReplicaKilledUnderLoad(t *testing.T) {
	f := start(t)
	second, _ := f.startPodManager(t, "replica-1")
	gw := f.startGateway(t, f.stack.PodManagerAddress, second)
	owners := f.spread(t, gw, 3, "replica-0", "replica-1")
	// The same functions (so the same owners) at a tag whose image is
	// tests/testfns/record: each run is noted on the function's side.
	var images []string
	for img := range owners {
		record := strings.TrimSuffix(img, ":v1") + ":record"
		f.registry.Push(t, f.host+"/fns/"+record, v1.Config{Entrypoint: []string{"/fn/record"}})
		images = append(images, record)
	}
	const calls, concurrency = 120, 6
	run := ledger.Background(context.Background(), ledger.Options{Calls: calls, Concurrency: concurrency, Deadline: 2 * time.Minute},
		func(ctx context.Context, i int) error {
			_, err := gw.EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: f.host + "/fns/" + images[i%len(images)], ResourceList: []byte(ledger.RecordInput(f.runs, i))})
			return err
		})
	require.Eventually(t, func() bool { return run.Answered() >= calls/4 }, harness.Wait, 20*time.Millisecond, "gave up waiting for a quarter of the calls answered")
	require.NoError(t, f.stack.Kill("pod-manager-replica-1"))
	r := run.Wait()
	ledger.Check(t, "pod-manager replica killed", r, codes.Unavailable)
	ledger.CheckExecutions(t, "pod-manager replica killed", r, f.runs)
	assert.LessOrEqual(t, r.Codes[codes.Unavailable], concurrency, "calls Unavailable; at most the %d in flight may fail", concurrency)
	assert.GreaterOrEqual(t, r.OK, calls-concurrency, "calls OK of %d", calls)
	if err := r.Errors[codes.Unavailable]; err != nil {
		assert.ErrorContains(t, err, "not repeated", "Unavailable does not say the call was not repeated")
	}
	// Every function is served after the kill, by the replica left.
	for k, img := range images {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := f.client.EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: f.host + "/fns/" + img, ResourceList: []byte(ledger.RecordInput(f.runs, calls+k))})
		cancel()
		assert.NoError(t, err, "%s after replica-1 was killed", img)
	}
}

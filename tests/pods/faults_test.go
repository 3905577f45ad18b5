package pods_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fnrunner/fnrunner/libs/apis/config/v1alpha1"
	pb "github.com/fnrunner/fnrunner/protos/evaluator"
	"github.com/fnrunner/fnrunner/tests/kubetest"
	"github.com/fnrunner/fnrunner/tests/ledger"
	"github.com/fnrunner/fnrunner/tests/stack"
)

// inBackground calls image through client in the background.
func inBackground(client pb.FunctionEvaluatorClient, image string, opts ledger.Options) *ledger.Progress {
	return ledger.Background(context.Background(), opts, func(ctx context.Context, _ int) error {
		_, err := client.EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: image, ResourceList: []byte(input)})
		return err
	})
}

// Function pods are deleted while calls run on them: every call is answered,
// OK or Unavailable with a message, and the function keeps being served.
func TestPodDeletedMidCall(t *testing.T) {
	f := start(t)
	image := f.host + "/fns/slow:v1"
	const calls, concurrency = 40, 4
	run := inBackground(f.gateway, image, ledger.Options{Calls: calls, Concurrency: concurrency, Deadline: 2 * time.Minute})
	waitFor(t, "calls answered by a slow pod", func() bool { return run.Answered() >= 4 })
	deleted := 0
	for _, p := range f.pods(t) {
		if p.Status.Phase == corev1.PodRunning {
			if err := f.env.Client.Delete(context.Background(), &p); err != nil {
				t.Fatal(err)
			}
			deleted++
		}
	}
	if deleted == 0 {
		t.Fatal("no running pod to delete")
	}
	r := run.Wait()
	ledger.Check(t, "pods deleted mid-call", r, codes.Unavailable)
	if r.OK < calls-deleted*2 {
		t.Errorf("only %d of %d calls OK after deleting %d pods", r.OK, calls, deleted)
	}
	if _, err := f.gateway.EvaluateFunction(context.Background(), &pb.EvaluateFunctionRequest{Image: image, ResourceList: []byte(input)}); err != nil {
		t.Errorf("after the pods were deleted: %v", err)
	}
}

// The pod-manager is restarted (SIGTERM, then started again) under load:
// calls in flight finish, calls that arrive meanwhile wait for it, and the
// new process adopts the pods.
func TestPodManagerRestartedUnderLoad(t *testing.T) {
	f := start(t)
	image := f.host + "/fns/steady:v1"
	const calls, concurrency = 200, 8
	run := inBackground(f.gateway, image, ledger.Options{Calls: calls, Concurrency: concurrency, Deadline: 2 * time.Minute})
	waitFor(t, "a quarter of the calls answered", func() bool { return run.Answered() >= calls/4 })
	f.restartPodManager()
	r := run.Wait()
	ledger.Check(t, "pod-manager restarted", r, codes.Unavailable)
	if n := r.Codes[codes.Unavailable]; n > concurrency {
		t.Errorf("%d calls Unavailable; at most the %d in flight may fail", n, concurrency)
	}
	steady := 0
	for _, p := range f.kubelet.StartedPods() {
		if strings.HasPrefix(p, "steady-") {
			steady++
		}
	}
	if steady != 1 {
		t.Errorf("pods started: %v; the restarted pod-manager should adopt the one steady pod", f.kubelet.StartedPods())
	}
}

// kube-apiserver goes away and comes back: the gateway keeps serving from
// its last executor table meanwhile, and the config-reconciler (watching the
// cluster) resyncs and picks up what changed once it is back.
func TestAPIServerStoppedAndRestarted(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{CRDDirectoryPaths: []string{stack.Path(t, os.Getenv("FNRUNNER_CRDS"))}, AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	create := func(name, prefix string) {
		t.Helper()
		fc := &v1alpha1.FunctionConfig{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: v1alpha1.FunctionConfigSpec{Image: "set-namespace", Prefixes: []string{prefix},
				BinaryExecutor: &v1alpha1.BinaryExecutorConfig{Tags: []string{"v0.4.5"}, Path: "set-namespace"}},
		}
		if err := env.Client.Create(ctx, fc); err != nil {
			t.Fatal(err)
		}
	}
	create("set-namespace", "example.com/before")

	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	functions := filepath.Join(dir, "functions")
	if err := os.MkdirAll(functions, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(stack.Binary(t, "FNRUNNER_SET_NAMESPACE"), filepath.Join(functions, "set-namespace")); err != nil {
		t.Fatal(err)
	}
	cfgPort, runnerPort, gwPort := freePort(t), freePort(t), freePort(t)
	cfgAddr, runnerAddr := "127.0.0.1:"+strconv.Itoa(cfgPort), "127.0.0.1:"+strconv.Itoa(runnerPort)
	reconcilerLog, _ := startBinary(t, "FNRUNNER_CONFIG_RECONCILER", "--kubeconfig="+kubeconfig, "--namespace="+ns, "--leader-elect=false",
		"--port="+strconv.Itoa(cfgPort), "--metrics-address=", "--log-level=WARN")
	_, _ = startBinary(t, "FNRUNNER_BINARY_RUNNER", "--functions="+functions, "--config-address="+cfgAddr,
		"--port="+strconv.Itoa(runnerPort), "--metrics-address=", "--log-level=WARN")
	_, _ = startBinary(t, "FNRUNNER_GATEWAY", "--port="+strconv.Itoa(gwPort), "--config-address="+cfgAddr, "--binary-runner-address="+runnerAddr,
		"--metrics-address=", "--log-level=WARN", "--health-interval=100ms")
	waitServing(t, "127.0.0.1:"+strconv.Itoa(gwPort))
	conn, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(gwPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	gateway := pb.NewFunctionEvaluatorClient(conn)
	load := func(name, image string) *ledger.Report {
		r := ledger.Run(ctx, ledger.Options{Calls: 20, Concurrency: 4}, func(ctx context.Context, _ int) error {
			_, err := gateway.EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: image, ResourceList: []byte(input)})
			return err
		})
		ledger.Check(t, name, r)
		return r
	}
	waitFor(t, "the FunctionConfig served", func() bool {
		_, err := gateway.EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: "example.com/before/set-namespace:v0.4.5", ResourceList: []byte(input)})
		return err == nil
	}, reconcilerLog)
	load("before the outage", "example.com/before/set-namespace:v0.4.5")

	if err := env.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	load("apiserver down", "example.com/before/set-namespace:v0.4.5")
	health := healthpb.NewHealthClient(conn)
	if r, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gateway health with the apiserver down: %v, %v; want SERVING from its last table", r, err)
	}

	if err := env.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	create("set-namespace-after", "example.com/after")
	waitFor(t, "the FunctionConfig made after the outage served", func() bool {
		_, err := gateway.EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: "example.com/after/set-namespace:v0.4.5", ResourceList: []byte(input)})
		return err == nil
	}, reconcilerLog)
	load("after the outage", "example.com/after/set-namespace:v0.4.5")
	load("after the outage, older config", "example.com/before/set-namespace:v0.4.5")
	waitFor(t, "status written after the outage", func() bool {
		var fc v1alpha1.FunctionConfig
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "set-namespace-after"}, &fc); err != nil {
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

// The pod executor on a real kube-apiserver: the real config-reconciler and
// pod-manager binaries, a registry on loopback, and a test kubelet that runs
// the real wrapper-server with the real set-namespace binary for each pod.
package pods_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fnrunner/fnrunner/libs/apis/config/v1alpha1"
	pb "github.com/fnrunner/fnrunner/protos/evaluator"
	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tests/kubelet"
	"github.com/fnrunner/fnrunner/tests/kubetest"
	"github.com/fnrunner/fnrunner/tests/ledger"
	"github.com/fnrunner/fnrunner/tests/stack"
	"github.com/fnrunner/fnrunner/tests/testregistry"
	"github.com/fnrunner/fnrunner/tools/localstack"
)

const ns = "porch-fn-system"

const input = `apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: a
functionConfig:
  apiVersion: v1
  kind: ConfigMap
  metadata:
    name: function-input
  data:
    namespace: from-a-pod
`

// fixture is a kube-apiserver, a private registry, the test kubelet and
// the services on loopback: config-reconciler, pod-manager (replica-0) and
// a gateway in front of it (no binary-runner).
type fixture struct {
	env      *kubetest.Environment
	kubelet  *kubelet.Kubelet
	stack    *localstack.Stack
	client   pb.FunctionEvaluatorClient // the pod-manager
	gateway  pb.FunctionEvaluatorClient
	host     string // the registry's host:port
	registry *testregistry.Registry
	digest   v1.Hash
	// pmArgs are the pod-manager's flags, without --warm-up-pod-cache.
	pmArgs []string
	// runs is where tests/testfns/record (entrypoint /fn/record) notes
	// each call it ran (ledger.CheckExecutions), in a directory every
	// wrapper-server lets functions write below.
	runs string
}

// kubeEnvironment starts a kube-apiserver with fnrunner's CRDs and the
// pods' namespace. Its Service range is a /16: every function pod has a
// ClusterIP Service, and envtest's /24 was full after about 250 pods (the
// bench matrix's set-labels pod rows, after set-namespace's and starlark's,
// all failed "failed to allocate a serviceIP: range is full").
func kubeEnvironment(t testing.TB) *kubetest.Environment {
	t.Helper()
	env := kubetest.Start(t, kubetest.Options{CRDDirectoryPaths: []string{harness.Runfile(t, os.Getenv("FNRUNNER_CRDS"))}, AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
		APIServerArgs: map[string]string{"service-cluster-ip-range": "10.0.0.0/16"}})
	require.NoError(t, env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	return env
}

// kubeconfig writes env's kubeconfig for the services.
func kubeconfig(t testing.TB, env *kubetest.Environment) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(p, env.KubeConfig, 0o600))
	return p
}

// envScript is a function that answers with a ConfigMap holding two
// variables of its environment and its working directory.
const envScript = `#!/bin/sh
cat > /dev/null
cat <<END
apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: env
  data:
    image: "$IMAGE_ENV"
    functionconfig: "$FROM_FUNCTIONCONFIG"
    cwd: "$(pwd)"
END
`

func start(t testing.TB) *fixture { return startLogging(t, "") }

// startLogging is start with the services' --log-level (default WARN).
func startLogging(t testing.TB, logLevel string) *fixture {
	t.Helper()
	env := kubeEnvironment(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	// A private registry: TLS with a self-signed certificate, basic auth.
	reg := testregistry.New(t)
	host := reg.Host
	push := func(ref, entrypoint string) v1.Hash {
		return reg.Push(t, host+ref, v1.Config{Entrypoint: []string{entrypoint}})
	}
	digest := push("/fns/set-namespace:v0.4.5", "/fn/set-namespace")
	push("/fns/crashy:v1", "/fn/set-namespace")
	push("/fns/slow:v1", "/fn/slow")
	push("/fns/steady:v1", "/fn/set-namespace")
	// tests/testfns/record in pods set as those above (testdata).
	for _, fn := range []string{"set-namespace", "slow", "steady"} {
		push("/fns/record-"+fn+":v1", "/fn/record")
	}
	push("/fns/flaky:v1", "/fn/set-namespace")
	push("/fns/traced:v1", "/fn/set-namespace")
	// A function that reports its environment and working directory: the
	// image's ENV and WORKDIR, under the FunctionConfig's env override.
	envImage := v1.Config{Entrypoint: []string{"/fn/env"}, WorkingDir: t.TempDir(),
		Env: []string{"IMAGE_ENV=from-image", "FROM_FUNCTIONCONFIG=from-image"}}
	reg.Push(t, host+"/fns/env:v1", envImage)

	dir := t.TempDir()
	configs := filepath.Join(dir, "configs")
	require.NoError(t, os.MkdirAll(configs, 0o755))
	fcs, err := os.ReadFile("testdata/functionconfigs.yaml")
	require.NoError(t, err)
	fcs = []byte(os.Expand(string(fcs), func(v string) string {
		if v == "REGISTRY" {
			return host
		}
		return os.Getenv(v) // OTEL_*: set by a test that collects traces
	}))
	require.NoError(t, os.WriteFile(filepath.Join(configs, "fc.yaml"), fcs, 0o644))
	// A function that takes half a second, so that parallel calls overlap.
	slowFn := filepath.Join(dir, "slow")
	script := "#!/bin/sh\nsleep 0.5\nexec " + harness.Binary(t, "FNRUNNER_SET_NAMESPACE") + "\n"
	require.NoError(t, os.WriteFile(slowFn, []byte(script), 0o755))
	envFn := filepath.Join(dir, "env")
	require.NoError(t, os.WriteFile(envFn, []byte(envScript), 0o755))

	pmArgs := []string{"--kubeconfig=" + kubeconfig(t, env), "--pod-namespace=" + ns, "--owner=replica-0", "--pod-address=pod-ip",
		"--wrapper-server-image=example.com/fnrunner/wrapper-server:test", "--scan-interval=100ms",
		"--enable-private-registries", "--registry-auth-secret-path=" + reg.DockerConfigByHost(t, testregistry.User, testregistry.Password),
		"--registry-auth-secret-name=fn-pull", "--enable-private-registries-tls", "--tls-secret-path=" + filepath.Dir(reg.CAFile),
		"--allowed-registries=" + reg.Host}
	bins := localstack.Binaries{
		Gateway:          harness.Binary(t, "FNRUNNER_GATEWAY"),
		ConfigReconciler: harness.Binary(t, "FNRUNNER_CONFIG_RECONCILER"),
		PodManager:       harness.Binary(t, "FNRUNNER_POD_MANAGER"),
		WrapperServer:    harness.Binary(t, "FNRUNNER_WRAPPER_SERVER"),
	}
	s := stack.Run(t, localstack.Config{Binaries: bins, ConfigDir: configs, LogLevel: logLevel,
		PodManagerArgs: append(append([]string(nil), pmArgs...), "--warm-up-pod-cache=false")})

	// The record function's ledger: one file every function may append to,
	// whatever uid the sandbox runs it as.
	ledgerDir, ledgers := ledger.Records(t, "runs")
	runs := ledgers["runs"]
	require.NoError(t, os.Chmod(dir, 0o755))

	k := &kubelet.Kubelet{Client: env.Client, Namespace: ns, WrapperServer: bins.WrapperServer, SandboxHelper: harness.Binary(t, "FNRUNNER_FNSANDBOX"),
		WrapperArgs: []string{"--sandbox-read-write-paths=" + ledgerDir},
		Entrypoints: map[string]string{"/fn/set-namespace": harness.Binary(t, "FNRUNNER_SET_NAMESPACE"), "/fn/slow": slowFn, "/fn/record": harness.Binary(t, "FNRUNNER_RECORD"),
			"/fn/starlark": harness.Binary(t, "FNRUNNER_STARLARK"), "/fn/set-labels": harness.Binary(t, "FNRUNNER_SET_LABELS"), "/fn/env": envFn},
		Images: map[string]v1.Config{host + "/fns/env": envImage}}
	k.FailImages("crashy", "CrashLoopBackOff")
	k.FailFirstImage("/fns/flaky", "ImagePullBackOff")
	go k.Run(ctx)

	wctx, wcancel := context.WithTimeout(ctx, harness.Wait)
	defer wcancel()
	require.NoError(t, s.WaitHealthy(wctx, "pod-manager"), "pod-manager\n%s", s.Log("pod-manager"))
	require.NoError(t, s.WaitServing(wctx), "gateway\n%s", s.Log("gateway"))
	return &fixture{env: env, kubelet: k, stack: s, client: dial(t, s.PodManagerAddress), gateway: dial(t, s.GatewayAddress),
		host: host, registry: reg, digest: digest, pmArgs: pmArgs, runs: runs}
}

// ledger makes another ledger file beside f.runs, for a scenario that
// accounts for several runs of calls.
func (f *fixture) ledger(t testing.TB, name string) string {
	t.Helper()
	return ledger.RecordFile(t, filepath.Dir(f.runs), name)
}

// dial connects to a service until the test ends.
func dial(t testing.TB, address string) pb.FunctionEvaluatorClient {
	t.Helper()
	conn, err := grpc.NewClient(address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return pb.NewFunctionEvaluatorClient(conn)
}

// log reads a service's output, for harness.WaitFor.
func (f *fixture) log(name string) func() string {
	return func() string { return f.stack.Log(name) }
}

// restartPodManager stops the pod-manager (it must exit cleanly) and starts
// it again, on the same port, with extra flags.
func (f *fixture) restartPodManager(t testing.TB, extra ...string) {
	t.Helper()
	require.NoError(t, f.stack.Replace("pod-manager", 30*time.Second, append(append([]string(nil), f.pmArgs...), extra...)...))
}

// startPodManager starts another replica with owner; it returns its address
// and a func that stops it (it must exit cleanly).
func (f *fixture) startPodManager(t testing.TB, owner string) (string, func()) {
	t.Helper()
	var args []string
	for _, a := range f.pmArgs {
		if strings.HasPrefix(a, "--owner=") {
			a = "--owner=" + owner
		}
		args = append(args, a)
	}
	name := "pod-manager-" + owner
	address, err := f.stack.StartPodManager(name, append(args, "--warm-up-pod-cache=false")...)
	require.NoError(t, err)
	return address, sync.OnceFunc(func() {
		assert.NoError(t, f.stack.StopService(name, 30*time.Second))
	})
}

// startGateway starts a gateway in front of the given pod-manager replicas.
func (f *fixture) startGateway(t testing.TB, podManagers ...string) pb.FunctionEvaluatorClient {
	t.Helper()
	name := "gateway-" + strings.Join(podManagers, ",")
	address, err := f.stack.StartGateway(name, podManagers)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), harness.Wait)
	defer cancel()
	require.NoError(t, f.stack.WaitHealthy(ctx, name), "second gateway SERVING")
	return dial(t, address)
}

func (f *fixture) call(t testing.TB, image string) (*pb.EvaluateFunctionResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return f.client.EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: image, ResourceList: []byte(input)})
}

// spread calls functions of their own (unclaimed images: the default TTL,
// so no pod of theirs expires during a test) through gw, a gateway in
// front of several replicas, until each of owners owns at least one of
// them (the gateway's rendezvous hash of the replicas' random ports
// decides) and there are at least n; it returns each image (under the
// registry's fns/) with its owner.
func (f *fixture) spread(t *testing.T, gw pb.FunctionEvaluatorClient, n int, owners ...string) map[string]string {
	t.Helper()
	got := map[string]string{}
	count := map[string]int{}
	missing := func() bool {
		for _, o := range owners {
			if count[o] == 0 {
				return true
			}
		}
		return false
	}
	for i := 0; len(got) < n || missing(); i++ {
		require.Less(t, i, 32, "32 functions, none owned by one of %v: %v", owners, count)
		img := fmt.Sprintf("spread-%d:v1", i)
		f.registry.Push(t, f.host+"/fns/"+img, v1.Config{Entrypoint: []string{"/fn/set-namespace"}})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := gw.EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: f.host + "/fns/" + img, ResourceList: []byte(input)})
		cancel()
		require.NoError(t, err, img)
		owner := ""
		for _, p := range f.pods(t) {
			if strings.Contains(p.Annotations["fn.kpt.dev/image"], fmt.Sprintf("/fns/spread-%d@", i)) {
				owner = p.Labels["fn.kpt.dev/owner"]
			}
		}
		require.NotEmpty(t, owner, "no pod for %s", img)
		if len(got) >= n-1 && count[owner] > 0 && missing() {
			continue // the last place is for a replica that owns none yet
		}
		got[img] = owner
		count[owner]++
	}
	return got
}

func (f *fixture) pods(t testing.TB) []corev1.Pod {
	t.Helper()
	var list corev1.PodList
	require.NoError(t, f.env.Client.List(context.Background(), &list, client.InNamespace(ns)))
	return list.Items
}

func (f *fixture) services(t testing.TB) []corev1.Service {
	t.Helper()
	var list corev1.ServiceList
	require.NoError(t, f.env.Client.List(context.Background(), &list, client.InNamespace(ns)))
	return list.Items
}

func TestPodExecutor(t *testing.T) {
	f := start(t)
	image := f.host + "/fns/set-namespace:v0.4.5"

	// Cold call: a pod and a Service from the templates, overrides applied.
	resp, err := f.call(t, image)
	require.NoError(t, err, "cold call")
	assert.Contains(t, string(resp.GetResourceList()), "namespace: from-a-pod", "cold call output")
	pods := f.pods(t)
	require.Len(t, pods, 1, "pods after the cold call")
	p := pods[0]
	fn := p.Spec.Containers[0]
	assert.Equal(t, f.host+"/fns/set-namespace:v0.4.5@"+f.digest.String(), fn.Image, "pod image is not pinned to the digest, or does not show the tag")
	assert.Equal(t, "fn-runner", p.Spec.ServiceAccountName, "overrides not applied: serviceAccountName")
	// The template's (porch's OpenTelemetry settings), then the override's.
	var env []string
	for _, e := range fn.Env {
		env = append(env, e.Name+"="+e.Value)
	}
	assert.Equal(t, []string{"OTEL_METRICS_EXPORTER=prometheus", "OTEL_TRACES_EXPORTER=none", "OTEL_EXPORTER_PROMETHEUS_HOST=0.0.0.0", "FROM_FUNCTIONCONFIG=yes"}, env, "overrides not applied: env")
	assert.Equal(t, "256Mi", fn.Resources.Limits.Memory().String(), "overrides not applied: memory limit in %v", fn.Resources)
	got := strings.Join(fn.Args, " ")
	assert.True(t, strings.HasSuffix(got, "-- /fn/set-namespace"), "function container args = %q", got)
	assert.Contains(t, got, "--max-request-body-size 6291456", "function container args")
	if assert.Len(t, p.Spec.ImagePullSecrets, 1, "pull secret not on the pod") {
		assert.Equal(t, "fn-pull", p.Spec.ImagePullSecrets[0].Name, "pull secret not on the pod")
	}
	var secret corev1.Secret
	assert.NoError(t, f.env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "fn-pull"}, &secret), "pull secret")
	assert.Equal(t, corev1.SecretTypeDockerConfigJson, secret.Type, "pull secret type")
	assert.NotEmpty(t, p.Annotations["fn.kpt.dev/template-version"], "template not used: annotations=%v", p.Annotations)
	assert.Len(t, p.Spec.InitContainers, 1, "template not used: init containers")
	svcs := f.services(t)
	if assert.Len(t, svcs, 1, "services") {
		svc := svcs[0]
		assert.Equal(t, p.Name, svc.Name, "service name")
		assert.Equal(t, p.Name, svc.Spec.Selector["fn.kpt.dev/pod"], "service selector")
		if assert.NotEmpty(t, svc.Spec.Ports, "service ports") {
			assert.Equal(t, int32(9446), svc.Spec.Ports[0].Port, "service port")
		}
	}

	// Warm call, through the gateway this time (go → binary → pod): the same pod.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	resp, err = f.gateway.EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: image, ResourceList: []byte(input)})
	cancel()
	require.NoError(t, err, "warm call through the gateway")
	require.Contains(t, string(resp.GetResourceList()), "namespace: from-a-pod", "warm call through the gateway")
	assert.Len(t, f.kubelet.StartedPods(), 1, "warm call started a pod")

	// The pod's wrapper-server serves its metrics on the template's port
	// named metrics, as the monitoring overlay's PodMonitor scrapes it: both
	// calls, counted under the function's image.
	var metricsPort int32
	for _, port := range fn.Ports {
		if port.Name == "metrics" {
			metricsPort = port.ContainerPort
		}
	}
	require.NotZero(t, metricsPort, "function container ports %v", fn.Ports)
	pods = f.pods(t)
	require.Len(t, pods, 1)
	metrics := scrape(t, "http://"+net.JoinHostPort(pods[0].Status.PodIP, strconv.Itoa(int(metricsPort)))+"/metrics")
	assert.Regexp(t, `fnrunner_evaluations_total\{[^}]*code="OK"[^}]*executor="wrapper"[^}]*function="`+regexp.QuoteMeta(image)+`"[^}]*\} 2\n`, metrics)

	// 8 parallel calls, maxParallelExecutions 2, preferredMaxQueueLength 1:
	// exactly 2 pods, every call answered.
	slowImage := f.host + "/fns/slow:v1"
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := f.call(t, slowImage)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err, "parallel call")
	}
	// Count the pods ever started for it (an idle one may already be collected).
	slowPods := 0
	for _, name := range f.kubelet.StartedPods() {
		if strings.HasPrefix(name, "slow-") {
			slowPods++
		}
	}
	assert.Equal(t, 2, slowPods, "pods started for 8 parallel calls")

	// Idle pods go after their TTL (1s), with their Services.
	harness.WaitFor(t, "idle pods and services deleted", func() bool { return len(f.pods(t)) == 0 && len(f.services(t)) == 0 })
	harness.WaitFor(t, "wrapper-servers stopped", func() bool { return len(f.kubelet.Running()) == 0 })

	// A pod that fails while calls wait on it is replaced, and the calls are
	// answered by the replacement.
	var flaky sync.WaitGroup
	flakyErrs := make(chan error, 3)
	for i := 0; i < 3; i++ {
		flaky.Add(1)
		go func() {
			defer flaky.Done()
			_, err := f.call(t, f.host+"/fns/flaky:v1")
			flakyErrs <- err
		}()
	}
	flaky.Wait()
	close(flakyErrs)
	for err := range flakyErrs {
		assert.NoError(t, err, "call waiting on a failed pod")
	}
	flakyPods := 0
	for _, n := range f.kubelet.StartedPods() {
		if strings.HasPrefix(n, "flaky-") {
			flakyPods++
		}
	}
	assert.Equal(t, 1, flakyPods, "flaky pods ran, want the one replacement")

	// A crash-looping pod is reported at once with the container's reason.
	_, err = f.call(t, f.host+"/fns/crashy:v1")
	assert.ErrorContains(t, err, "CrashLoopBackOff", "crash-looping function")
}

// scrape reads a Prometheus /metrics page.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, url)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// A restarted pod-manager adopts its pods of the current template, deletes
// stale ones and orphaned Services, and warms up after the first snapshot.
func TestRestartAdoptsAndWarmsUp(t *testing.T) {
	f := start(t)
	ctx := context.Background()
	_, err := f.call(t, f.host+"/fns/steady:v1")
	require.NoError(t, err)
	before := f.kubelet.StartedPods()
	require.Len(t, before, 1, "started pods, want one steady pod")
	// A pod of an older template version, and a Service whose pod is gone.
	labels := map[string]string{"app.kubernetes.io/managed-by": "fnrunner-pod-manager", "fn.kpt.dev/owner": "replica-0"}
	stale := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "stale-pod", Namespace: ns, Labels: labels, Annotations: map[string]string{"fn.kpt.dev/template-version": "0"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "function", Image: "example.com/old:v1"}}},
	}
	orphan := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "orphan-svc", Namespace: ns, Labels: labels},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 9446}}},
	}
	for _, o := range []client.Object{stale, orphan} {
		require.NoError(t, f.env.Client.Create(ctx, o))
	}

	f.restartPodManager(t, "--warm-up-pod-cache=true")
	logs := f.log("pod-manager")
	exists := func(o client.Object) bool {
		return f.env.Client.Get(ctx, client.ObjectKeyFromObject(o), o) == nil
	}
	harness.WaitFor(t, "stale pod and orphaned service deleted", func() bool { return !exists(stale) && !exists(orphan) }, logs)
	// Warm-up starts pods for set-namespace and slow (exact tags); steady's
	// pod was adopted, so it gets none.
	harness.WaitFor(t, "warm-up pods", func() bool {
		var sn, slow int
		for _, n := range f.kubelet.StartedPods() {
			switch {
			case strings.HasPrefix(n, "set-namespace-"):
				sn++
			case strings.HasPrefix(n, "slow-"):
				slow++
			}
		}
		return sn == 1 && slow == 1
	}, logs)
	_, err = f.call(t, f.host+"/fns/steady:v1")
	require.NoError(t, err, "call after restart\n%s", logs())
	steady := 0
	for _, n := range f.kubelet.StartedPods() {
		if strings.HasPrefix(n, "steady-") {
			steady++
		}
	}
	assert.Equal(t, 1, steady, "steady pods started, want the one adopted")

	// A template change rolls the pods: the idle steady pod goes, the next
	// call gets a pod of the new version.
	var oldPod corev1.Pod
	var pods corev1.PodList
	require.NoError(t, f.env.Client.List(ctx, &pods, client.InNamespace(ns)))
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Name, "steady-") {
			oldPod = p
		}
	}
	var pt corev1.PodTemplate
	require.NoError(t, f.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "base-pod-template"}, &pt))
	if pt.Template.Labels == nil {
		pt.Template.Labels = map[string]string{}
	}
	pt.Template.Labels["rolled"] = "yes"
	require.NoError(t, f.env.Client.Update(ctx, &pt))
	harness.WaitFor(t, "the old steady pod retired", func() bool { return !exists(&oldPod) }, logs)
	_, err = f.call(t, f.host+"/fns/steady:v1")
	require.NoError(t, err, "call after the template change")
	require.NoError(t, f.env.Client.List(ctx, &pods, client.InNamespace(ns)))
	rolled := false
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Name, "steady-") && p.Labels["rolled"] == "yes" &&
			p.Annotations["fn.kpt.dev/template-version"] != oldPod.Annotations["fn.kpt.dev/template-version"] {
			rolled = true
		}
	}
	assert.True(t, rolled, "no steady pod of the new template version")
}

// Two pod-manager replicas behind the gateway: each function is owned by
// one replica, and restarting one never touches the other's pods.
func TestTwoReplicasNeverFight(t *testing.T) {
	f := start(t)
	ctx := context.Background()
	second, stopSecond := f.startPodManager(t, "replica-1")
	gw := f.startGateway(t, f.stack.PodManagerAddress, second)
	images := []string{"set-namespace:v0.4.5", "steady:v1", "slow:v1"}
	for round := 0; round < 2; round++ {
		for _, img := range images {
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			_, err := gw.EvaluateFunction(cctx, &pb.EvaluateFunctionRequest{Image: f.host + "/fns/" + img, ResourceList: []byte(input)})
			cancel()
			require.NoError(t, err, img)
		}
	}
	byFunction := map[string]map[string]int{} // function → owner → pods
	for _, p := range f.pods(t) {
		fn := p.Name[:strings.LastIndex(p.Name, "-")]
		if byFunction[fn] == nil {
			byFunction[fn] = map[string]int{}
		}
		byFunction[fn][p.Labels["fn.kpt.dev/owner"]]++
	}
	owned := map[string][]string{}
	for fn, owners := range byFunction {
		assert.Len(t, owners, 1, "function %s has pods of several replicas: %v", fn, owners)
		for o := range owners {
			owned[o] = append(owned[o], fn)
		}
	}
	// Restarting replica-1 leaves replica-0's pods alone: those of
	// functions with the default TTL (the FunctionConfigs above give 1 s,
	// and replica-0 itself removes those while replica-1 restarts).
	spread := f.spread(t, gw, 2, "replica-0", "replica-1")
	var before []string
	for _, p := range f.pods(t) {
		if p.Labels["fn.kpt.dev/owner"] == "replica-0" && strings.HasPrefix(p.Name, "spread-") {
			before = append(before, p.Name)
		}
	}
	require.NotEmpty(t, before, "replica-0 owns none of %v", spread)
	stopSecond()
	_, stopAgain := f.startPodManager(t, "replica-1")
	defer stopAgain()
	// It reconciles its own pods before it serves.
	wctx, cancel := context.WithTimeout(ctx, harness.Wait)
	defer cancel()
	require.NoError(t, f.stack.WaitHealthy(wctx, "pod-manager-replica-1"), "replica-1 SERVING after its restart")
	for _, name := range before {
		var p corev1.Pod
		err := f.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p)
		assert.NoError(t, err, "replica-0's pod %s is gone after replica-1 restarted", name)
	}
	t.Logf("functions per replica: %v", owned)
}

// A function in a pod runs with its container's environment and working
// directory, as in porch's pods: the image's ENV and WORKDIR, and the
// FunctionConfig's env override over the image's value.
func TestFunctionEnvironmentInAPod(t *testing.T) {
	f := start(t)
	resp, err := f.call(t, f.host+"/fns/env:v1")
	require.NoError(t, err)
	out := string(resp.GetResourceList())
	assert.Regexp(t, `image: "?from-image"?\n`, out, "the image's ENV")
	assert.Regexp(t, `functionconfig: "?from-functionconfig"?\n`, out, "the FunctionConfig's env override")
	workdir := f.kubelet.Images[f.host+"/fns/env"].WorkingDir
	assert.Regexp(t, `cwd: "?`+regexp.QuoteMeta(workdir)+`"?\n`, out, "the image's WORKDIR")
}

// The pod executor on a real kube-apiserver: the real config-reconciler and
// pod-manager binaries, a registry on loopback, and a test kubelet that runs
// the real wrapper-server with the real set-namespace binary for each pod.
package pods_test

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fnrunner/fnrunner/libs/apis/config/v1alpha1"
	pb "github.com/fnrunner/fnrunner/protos/evaluator"
	"github.com/fnrunner/fnrunner/tests/kubelet"
	"github.com/fnrunner/fnrunner/tests/kubetest"
	"github.com/fnrunner/fnrunner/tests/stack"
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

type fixture struct {
	env     *kubetest.Environment
	kubelet *kubelet.Kubelet
	client  pb.FunctionEvaluatorClient // the pod-manager
	gateway pb.FunctionEvaluatorClient
	host    string // the registry
	// registry reaches host (TLS, self-signed), for pushing more images.
	registry http.RoundTripper
	digest   v1.Hash
	// restartPodManager stops the pod-manager and starts it again with extra flags.
	restartPodManager func(extra ...string) *logBuf
	// startPodManager starts another replica with owner; it returns its address and a stop func.
	startPodManager func(owner string) (string, func())
	// startGateway starts a gateway in front of the given pod-manager replicas.
	startGateway func(podManagers ...string) pb.FunctionEvaluatorClient
	pmAddress    string
	// gatewayLog and podManagerLog are the first gateway's and pod-manager's.
	gatewayLog, podManagerLog *logBuf
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type logBuf struct {
	mu sync.Mutex
	b  strings.Builder
	// pid of the process writing it (for /proc readings).
	pid int
}

func (l *logBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *logBuf) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// startBinary runs a service until the test ends (or stop is called) and
// checks it stops cleanly on SIGTERM.
func startBinary(t testing.TB, env string, args ...string) (*logBuf, func()) {
	t.Helper()
	out := &logBuf{}
	cmd := exec.Command(stack.Binary(t, env), args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out.pid = cmd.Process.Pid
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("%s exit: %v\n%s", env, err, out.String())
				}
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				t.Errorf("%s did not stop\n%s", env, out.String())
			}
		})
	}
	t.Cleanup(stop)
	return out, stop
}

func start(t testing.TB) *fixture {
	t.Helper()
	env := kubetest.Start(t, kubetest.Options{CRDDirectoryPaths: []string{stack.Path(t, os.Getenv("FNRUNNER_CRDS"))}, AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}

	// A private registry: TLS with a self-signed certificate, basic auth.
	handler := registry.New()
	reg := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != regUser || p != regPass {
			w.Header().Set("WWW-Authenticate", `Basic realm="fnrunner-test"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(reg.Close)
	host := strings.TrimPrefix(reg.URL, "https://")
	tr := reg.Client().Transport
	digest := push(t, tr, host+"/fns/set-namespace:v0.4.5", "/fn/set-namespace")
	push(t, tr, host+"/fns/crashy:v1", "/fn/set-namespace")
	push(t, tr, host+"/fns/slow:v1", "/fn/slow")
	push(t, tr, host+"/fns/steady:v1", "/fn/set-namespace")
	push(t, tr, host+"/fns/flaky:v1", "/fn/set-namespace")

	dir := t.TempDir()
	tlsDir := filepath.Join(dir, "tls-secret")
	if err := os.MkdirAll(tlsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tlsDir, "ca.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: reg.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	dockerConfig := filepath.Join(dir, ".dockerconfigjson")
	auth := base64.StdEncoding.EncodeToString([]byte(regUser + ":" + regPass))
	if err := os.WriteFile(dockerConfig, []byte(`{"auths":{"`+host+`":{"auth":"`+auth+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	configs := filepath.Join(dir, "configs")
	if err := os.MkdirAll(configs, 0o755); err != nil {
		t.Fatal(err)
	}
	fc := `apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata:
  name: set-namespace
spec:
  image: set-namespace
  prefixes: [` + host + `/fns]
  podExecutor:
    tags: [v0.4.5]
    timeToLive: 1s
    maxParallelExecutions: 2
    preferredMaxQueueLength: 1
    templateOverrides:
      serviceAccountName: fn-runner
      container:
        env:
        - name: FROM_FUNCTIONCONFIG
          value: "yes"
        resources:
          limits:
            memory: 256Mi
`
	slow := `apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata:
  name: slow
spec:
  image: slow
  prefixes: [` + host + `/fns]
  podExecutor:
    tags: [v1]
    timeToLive: 1s
    maxParallelExecutions: 2
    preferredMaxQueueLength: 1
`
	steady := `apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata:
  name: steady
spec:
  image: steady
  prefixes: [` + host + `/fns]
  podExecutor:
    tags: [v1]
    timeToLive: 10m
`
	if err := os.WriteFile(filepath.Join(configs, "fc.yaml"), []byte(fc+"---\n"+slow+"---\n"+steady), 0o644); err != nil {
		t.Fatal(err)
	}
	// A function that takes half a second, so that parallel calls overlap.
	slowFn := filepath.Join(dir, "slow")
	script := "#!/bin/sh\nsleep 0.5\nexec " + stack.Binary(t, "FNRUNNER_SET_NAMESPACE") + "\n"
	if err := os.WriteFile(slowFn, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}

	cfgPort, pmPort, gwPort := freePort(t), freePort(t), freePort(t)
	_, _ = startBinary(t, "FNRUNNER_CONFIG_RECONCILER", "--config-dir="+configs, "--port="+strconv.Itoa(cfgPort), "--metrics-address=", "--log-level=WARN")
	pmArgs := []string{"--kubeconfig=" + kubeconfig, "--pod-namespace=" + ns, "--owner=replica-0",
		"--config-address=127.0.0.1:" + strconv.Itoa(cfgPort), "--port=" + strconv.Itoa(pmPort), "--pod-address=pod-ip",
		"--wrapper-server-image=example.com/fnrunner/wrapper-server:test", "--scan-interval=100ms", "--metrics-address=", "--log-level=WARN",
		"--enable-private-registries", "--registry-auth-secret-path=" + dockerConfig, "--registry-auth-secret-name=fn-pull",
		"--enable-private-registries-tls", "--tls-secret-path=" + tlsDir}
	pmLog, stopPM := startBinary(t, "FNRUNNER_POD_MANAGER", append(pmArgs, "--warm-up-pod-cache=false")...)

	gwLog, _ := startBinary(t, "FNRUNNER_GATEWAY", "--port="+strconv.Itoa(gwPort), "--config-address=127.0.0.1:"+strconv.Itoa(cfgPort),
		"--binary-runner-address=127.0.0.1:1", "--pod-manager-address=127.0.0.1:"+strconv.Itoa(pmPort),
		"--metrics-address=", "--log-level=WARN", "--health-interval=100ms")

	k := &kubelet.Kubelet{Client: env.Client, Namespace: ns, WrapperServer: stack.Binary(t, "FNRUNNER_WRAPPER_SERVER"),
		Entrypoints: map[string]string{"/fn/set-namespace": stack.Binary(t, "FNRUNNER_SET_NAMESPACE"), "/fn/slow": slowFn,
			"/fn/starlark": stack.Binary(t, "FNRUNNER_STARLARK")}}
	k.FailImages("crashy", "CrashLoopBackOff")
	k.FailFirstImage("/fns/flaky", "ImagePullBackOff")
	go k.Run(ctx)

	conn, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(pmPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	waitFor(t, "pod-manager SERVING", func() bool {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		r, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{})
		return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING
	}, pmLog)
	gwConn, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(gwPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gwConn.Close() })
	waitFor(t, "gateway SERVING", func() bool {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		r, err := healthpb.NewHealthClient(gwConn).Check(cctx, &healthpb.HealthCheckRequest{})
		return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING
	}, pmLog)
	return &fixture{env: env, kubelet: k, client: pb.NewFunctionEvaluatorClient(conn), gateway: pb.NewFunctionEvaluatorClient(gwConn), host: host, digest: digest,
		pmAddress: "127.0.0.1:" + strconv.Itoa(pmPort), gatewayLog: gwLog, podManagerLog: pmLog, registry: tr,
		restartPodManager: func(extra ...string) *logBuf {
			stopPM()
			l, s := startBinary(t, "FNRUNNER_POD_MANAGER", append(append([]string(nil), pmArgs...), extra...)...)
			stopPM = s
			return l
		},
		startPodManager: func(owner string) (string, func()) {
			port := freePort(t)
			var args []string
			for _, a := range pmArgs {
				switch {
				case strings.HasPrefix(a, "--owner="):
					a = "--owner=" + owner
				case strings.HasPrefix(a, "--port="):
					a = "--port=" + strconv.Itoa(port)
				}
				args = append(args, a)
			}
			_, stop := startBinary(t, "FNRUNNER_POD_MANAGER", append(args, "--warm-up-pod-cache=false")...)
			return "127.0.0.1:" + strconv.Itoa(port), stop
		},
		startGateway: func(podManagers ...string) pb.FunctionEvaluatorClient {
			port := freePort(t)
			_, _ = startBinary(t, "FNRUNNER_GATEWAY", "--port="+strconv.Itoa(port), "--config-address=127.0.0.1:"+strconv.Itoa(cfgPort),
				"--binary-runner-address=127.0.0.1:1", "--pod-manager-address="+strings.Join(podManagers, ","),
				"--metrics-address=", "--log-level=WARN", "--health-interval=100ms")
			conn, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(port), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			waitFor(t, "second gateway SERVING", func() bool {
				cctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				r, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{})
				return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING
			})
			return pb.NewFunctionEvaluatorClient(conn)
		}}
}

const regUser, regPass = "porch", "s3cret"

func push(t testing.TB, tr http.RoundTripper, ref, entrypoint string) v1.Hash {
	t.Helper()
	img, err := random.Image(128, 1)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, v1.Config{Entrypoint: []string{entrypoint}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img, remote.WithTransport(tr), remote.WithAuth(&authn.Basic{Username: regUser, Password: regPass})); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	return d
}

func waitFor(t testing.TB, what string, cond func() bool, logs ...*logBuf) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i == 1500 {
			var l string
			for _, b := range logs {
				l += b.String()
			}
			t.Fatalf("gave up waiting for %s\n%s", what, l)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (f *fixture) call(t testing.TB, image string) (*pb.EvaluateFunctionResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return f.client.EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: image, ResourceList: []byte(input)})
}

func (f *fixture) pods(t testing.TB) []corev1.Pod {
	t.Helper()
	var list corev1.PodList
	if err := f.env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func (f *fixture) services(t testing.TB) []corev1.Service {
	t.Helper()
	var list corev1.ServiceList
	if err := f.env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func TestPodExecutor(t *testing.T) {
	f := start(t)
	image := f.host + "/fns/set-namespace:v0.4.5"

	// Cold call: a pod and a Service from the templates, overrides applied.
	resp, err := f.call(t, image)
	if err != nil {
		t.Fatalf("cold call: %v", err)
	}
	if !strings.Contains(string(resp.GetResourceList()), "namespace: from-a-pod") {
		t.Errorf("cold call output:\n%s", resp.GetResourceList())
	}
	pods := f.pods(t)
	if len(pods) != 1 {
		t.Fatalf("%d pods after the cold call, want 1", len(pods))
	}
	p := pods[0]
	fn := p.Spec.Containers[0]
	if fn.Image != f.host+"/fns/set-namespace@"+f.digest.String() {
		t.Errorf("pod image %q is not pinned to the digest %s", fn.Image, f.digest)
	}
	if p.Spec.ServiceAccountName != "fn-runner" || len(fn.Env) != 1 || fn.Env[0].Name != "FROM_FUNCTIONCONFIG" || fn.Resources.Limits.Memory().String() != "256Mi" {
		t.Errorf("overrides not applied: sa=%q env=%v resources=%v", p.Spec.ServiceAccountName, fn.Env, fn.Resources)
	}
	if got := strings.Join(fn.Args, " "); !strings.HasSuffix(got, "-- /fn/set-namespace") || !strings.Contains(got, "--max-request-body-size 6291456") {
		t.Errorf("function container args = %q", got)
	}
	if len(p.Spec.ImagePullSecrets) != 1 || p.Spec.ImagePullSecrets[0].Name != "fn-pull" {
		t.Errorf("pull secret not on the pod: %v", p.Spec.ImagePullSecrets)
	}
	var secret corev1.Secret
	if err := f.env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "fn-pull"}, &secret); err != nil || secret.Type != corev1.SecretTypeDockerConfigJson {
		t.Errorf("pull secret: %v %v", secret.Type, err)
	}
	if p.Annotations["fn.kpt.dev/template-version"] == "" || len(p.Spec.InitContainers) != 1 {
		t.Errorf("template not used: annotations=%v init=%v", p.Annotations, p.Spec.InitContainers)
	}
	svcs := f.services(t)
	if len(svcs) != 1 || svcs[0].Name != p.Name || svcs[0].Spec.Selector["fn.kpt.dev/pod"] != p.Name || svcs[0].Spec.Ports[0].Port != 9446 {
		t.Errorf("services = %+v", svcs)
	}

	// Warm call, through the gateway this time (go → binary → pod): the same pod.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	resp, err = f.gateway.EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: image, ResourceList: []byte(input)})
	cancel()
	if err != nil || !strings.Contains(string(resp.GetResourceList()), "namespace: from-a-pod") {
		t.Fatalf("warm call through the gateway: %v", err)
	}
	if started := f.kubelet.StartedPods(); len(started) != 1 {
		t.Errorf("warm call started a pod: %v", started)
	}

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
		if err != nil {
			t.Errorf("parallel call: %v", err)
		}
	}
	// Count the pods ever started for it (an idle one may already be collected).
	slowPods := 0
	for _, name := range f.kubelet.StartedPods() {
		if strings.HasPrefix(name, "slow-") {
			slowPods++
		}
	}
	if slowPods != 2 {
		t.Errorf("%d pods started for 8 parallel calls, want exactly 2", slowPods)
	}

	// Idle pods go after their TTL (1s), with their Services.
	waitFor(t, "idle pods and services deleted", func() bool { return len(f.pods(t)) == 0 && len(f.services(t)) == 0 })
	waitFor(t, "wrapper-servers stopped", func() bool { return len(f.kubelet.Running()) == 0 })

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
		if err != nil {
			t.Errorf("call waiting on a failed pod: %v", err)
		}
	}
	flakyPods := 0
	for _, n := range f.kubelet.StartedPods() {
		if strings.HasPrefix(n, "flaky-") {
			flakyPods++
		}
	}
	if flakyPods != 1 {
		t.Errorf("%d flaky pods ran, want the one replacement", flakyPods)
	}

	// A crash-looping pod is reported at once with the container's reason.
	_, err = f.call(t, f.host+"/fns/crashy:v1")
	if err == nil || !strings.Contains(err.Error(), "CrashLoopBackOff") {
		t.Errorf("crash-looping function: %v, want an error naming CrashLoopBackOff", err)
	}
}

// A restarted pod-manager adopts its pods of the current template, deletes
// stale ones and orphaned Services, and warms up after the first snapshot.
func TestRestartAdoptsAndWarmsUp(t *testing.T) {
	f := start(t)
	ctx := context.Background()
	if _, err := f.call(t, f.host+"/fns/steady:v1"); err != nil {
		t.Fatal(err)
	}
	before := f.kubelet.StartedPods()
	if len(before) != 1 {
		t.Fatalf("started %v, want one steady pod", before)
	}
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
		if err := f.env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	logs := f.restartPodManager("--warm-up-pod-cache=true")
	exists := func(o client.Object) bool {
		return f.env.Client.Get(ctx, client.ObjectKeyFromObject(o), o) == nil
	}
	waitFor(t, "stale pod and orphaned service deleted", func() bool { return !exists(stale) && !exists(orphan) }, logs)
	// Warm-up starts pods for set-namespace and slow (exact tags); steady's
	// pod was adopted, so it gets none.
	waitFor(t, "warm-up pods", func() bool {
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
	if _, err := f.call(t, f.host+"/fns/steady:v1"); err != nil {
		t.Fatalf("call after restart: %v\n%s", err, logs.String())
	}
	steady := 0
	for _, n := range f.kubelet.StartedPods() {
		if strings.HasPrefix(n, "steady-") {
			steady++
		}
	}
	if steady != 1 {
		t.Errorf("%d steady pods started, want the one adopted", steady)
	}

	// A template change rolls the pods: the idle steady pod goes, the next
	// call gets a pod of the new version.
	var oldPod corev1.Pod
	var pods corev1.PodList
	if err := f.env.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Name, "steady-") {
			oldPod = p
		}
	}
	var pt corev1.PodTemplate
	if err := f.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "base-pod-template"}, &pt); err != nil {
		t.Fatal(err)
	}
	if pt.Template.Labels == nil {
		pt.Template.Labels = map[string]string{}
	}
	pt.Template.Labels["rolled"] = "yes"
	if err := f.env.Client.Update(ctx, &pt); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the old steady pod retired", func() bool { return !exists(&oldPod) }, logs)
	if _, err := f.call(t, f.host+"/fns/steady:v1"); err != nil {
		t.Fatalf("call after the template change: %v", err)
	}
	if err := f.env.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	rolled := false
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Name, "steady-") && p.Labels["rolled"] == "yes" &&
			p.Annotations["fn.kpt.dev/template-version"] != oldPod.Annotations["fn.kpt.dev/template-version"] {
			rolled = true
		}
	}
	if !rolled {
		t.Errorf("no steady pod of the new template version")
	}
}

// Two pod-manager replicas behind the gateway: each function is owned by
// one replica, and restarting one never touches the other's pods.
func TestTwoReplicasNeverFight(t *testing.T) {
	f := start(t)
	ctx := context.Background()
	second, stopSecond := f.startPodManager("replica-1")
	gw := f.startGateway(f.pmAddress, second)
	images := []string{"set-namespace:v0.4.5", "steady:v1", "slow:v1"}
	for round := 0; round < 2; round++ {
		for _, img := range images {
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			_, err := gw.EvaluateFunction(cctx, &pb.EvaluateFunctionRequest{Image: f.host + "/fns/" + img, ResourceList: []byte(input)})
			cancel()
			if err != nil {
				t.Fatalf("%s: %v", img, err)
			}
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
		if len(owners) != 1 {
			t.Errorf("function %s has pods of several replicas: %v", fn, owners)
		}
		for o := range owners {
			owned[o] = append(owned[o], fn)
		}
	}
	// Restarting replica-1 leaves replica-0's pods alone. slow's pods are
	// left out: with a 1 s timeToLive, replica-0 itself removes them while
	// replica-1 restarts.
	var before []string
	for _, p := range f.pods(t) {
		if p.Labels["fn.kpt.dev/owner"] == "replica-0" && !strings.HasPrefix(p.Name, "slow-") {
			before = append(before, p.Name)
		}
	}
	stopSecond()
	again, stopAgain := f.startPodManager("replica-1")
	defer stopAgain()
	// It reconciles its own pods before it serves.
	waitServing(t, again)
	for _, name := range before {
		var p corev1.Pod
		if err := f.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
			t.Errorf("replica-0's pod %s is gone after replica-1 restarted: %v", name, err)
		}
	}
	t.Logf("functions per replica: %v", owned)
}

func waitServing(t testing.TB, address string) {
	t.Helper()
	conn, err := grpc.NewClient(address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	waitFor(t, address+" SERVING", func() bool {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		r, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{})
		return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING
	})
}

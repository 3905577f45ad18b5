package monitoring_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fnrunner/fnrunner/libs/apis/config/v1alpha1"
	pb "github.com/fnrunner/fnrunner/protos/evaluator"
	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tests/kubelet"
	"github.com/fnrunner/fnrunner/tests/kubetest"
	"github.com/fnrunner/fnrunner/tests/stack"
)

// The pod-manager runs as it does in a cluster, against a real
// kube-apiserver (envtest), with the test kubelet playing the node (each
// function pod a wrapper-server process running set-namespace) and its
// images in a registry on loopback: its metrics are the real service's.

// podNamespace is the function pods' namespace.
const podNamespace = "fn-pods"

// podSide is the pod-manager's world: its flags, its FunctionConfigs and
// the registry its images are in.
type podSide struct {
	// args are the pod-manager's flags, but --metrics-address.
	args []string
	// configs claim pod-fn (pods that become ready, and live a second) and
	// pod-failing (pods that fail as an image that cannot be pulled) in
	// the registry, for the pod executor.
	configs string
	// functions are the function labels of their calls.
	functions []string
	registry  string
	round     int
}

// startPodSide starts the apiserver, the registry and the test kubelet.
func startPodSide(t *testing.T) *podSide {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	env := kubetest.Start(t, kubetest.Options{CRDDirectoryPaths: []string{harness.Runfile(t, os.Getenv("FNRUNNER_CRDS"))},
		AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	require.NoError(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: podNamespace}}))
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, env.KubeConfig, 0o600))

	regSrv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(regSrv.Close)
	p := &podSide{registry: strings.TrimPrefix(regSrv.URL, "http://")}
	for _, image := range []string{"pod-fn:v1", "pod-steady:v1", "pod-failing:v1"} {
		p.push(t, image)
	}
	p.configs = fmt.Sprintf(`apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata:
  name: monitoring-pod
spec:
  image: pod-fn
  prefixes: [%[1]s/monitoring]
  podExecutor:
    # absent is not in the registry: its image metadata lookups fail.
    tags: [v1, absent]
    timeToLive: 1s
    maxParallelExecutions: 1
---
apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata:
  name: monitoring-pod-steady
spec:
  image: pod-steady
  prefixes: [%[1]s/monitoring]
  podExecutor:
    # Its pod stays, so that the pods' gauges have it when queried (a
    # function without pods is forgotten).
    tags: [v1]
    timeToLive: 1h
---
apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata:
  name: monitoring-pod-failing
spec:
  image: pod-failing
  prefixes: [%[1]s/monitoring]
  podExecutor:
    tags: [v1]
`, p.registry)
	p.functions = []string{p.registry + "/monitoring/pod-fn:v1", p.registry + "/monitoring/pod-steady:v1", p.registry + "/monitoring/pod-failing:v1"}

	k := &kubelet.Kubelet{Client: env.Client, Namespace: podNamespace, WrapperServer: harness.Binary(t, "FNRUNNER_WRAPPER_SERVER"),
		SandboxHelper: harness.Binary(t, "FNRUNNER_FNSANDBOX"),
		Entrypoints:   map[string]string{"/fn/set-namespace": harness.Binary(t, "FNRUNNER_SET_NAMESPACE")}}
	k.FailImages("pod-failing", "ImagePullBackOff")
	go k.Run(ctx)

	p.args = []string{"--kubeconfig=" + kubeconfig, "--pod-namespace=" + podNamespace, "--owner=replica-0", "--pod-address=pod-ip",
		"--wrapper-server-image=example.com/fnrunner/wrapper-server:test", "--scan-interval=100ms", "--warm-up-pod-cache=false",
		"--allowed-registries=" + p.registry,
		// Unclaimed images are the gateway's NotFound, as the rest of the
		// test expects, not a lookup of example.com.
		"--run-unclaimed-images=false"}
	return p
}

// push puts a small image whose entrypoint is set-namespace in the
// registry as image (name:tag below monitoring/).
func (p *podSide) push(t *testing.T, image string) {
	t.Helper()
	ref, err := name.ParseReference(p.registry + "/monitoring/" + image)
	require.NoError(t, err)
	img, err := random.Image(512, 1)
	require.NoError(t, err)
	img, err = mutate.Config(img, v1.Config{Entrypoint: []string{"/fn/set-namespace"}})
	require.NoError(t, err)
	require.NoError(t, remote.Write(ref, img))
}

// drive is one round of pod calls through the gateway, and returns how
// many it sent by code: a call of pod-fn starts a pod (a cold start: the
// last round's went after its second of TTL) and the next finds it warm;
// pod-steady's pod, started in the first round, serves every round; a
// call of pod-failing gets a pod that fails; the image metadata of a tag
// the registry has not is looked up twice (an error, then a cached one).
func (p *podSide) drive(t *testing.T, s *stack.Stack) map[string]int {
	t.Helper()
	p.round++
	sent := map[string]int{}
	call := func(image string, wantOK bool) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := s.Client().EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: p.registry + "/monitoring/" + image, ResourceList: []byte(stack.Input)})
		if wantOK {
			require.NoError(t, err, "round %d: %s\n%s", p.round, image, s.Log("pod-manager"))
		} else {
			require.Error(t, err, "round %d: %s", p.round, image)
		}
		sent[status.Code(err).String()]++
	}
	call("pod-fn:v1", true)
	call("pod-fn:v1", true)
	call("pod-steady:v1", true)
	call("pod-failing:v1", false)
	call("pod-fn:absent", false)
	call("pod-fn:absent", false)
	return sent
}

package porch_test

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/fnrunner/fnrunner/protos/evaluator"
	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tests/node"
	"github.com/fnrunner/fnrunner/tests/porch"
)

// podFunctions are the function images porch's pod tests name, by name
// under KRM_FN_REGISTRY_URL, and the binaries pushed under those names
// (the variable naming each): fnrunner's builds, not the catalog's images.
var podFunctions = []struct{ image, binaryEnv string }{
	// TestPodEvaluator: fnrunner's set-annotations answers as v0.1.4.
	{"set-annotations:v0.1.4", "FNRUNNER_SET_ANNOTATIONS"},
	// TestPodEvaluatorSequentialParallel and ParallelExecution; no
	// source is published for porch's sleep:latest.
	{"sleep:latest", "FNRUNNER_TESTFN_SLEEP"},
	// TestMetricsEndpoint renders it to have a function pod: the
	// catalog's set-namespace v0.4.5 under v0.4.1's name.
	{"set-namespace:v0.4.1", "FNRUNNER_SET_NAMESPACE"},
}

// TestPodTestsOnTheNode runs porch's pod tests (porch.PodTests) on a real
// node (tests/node): porch-server and Gitea run beside the node's
// kube-apiserver, as in porch's deployments/local, and the function pods
// on the node. porch-server calls, through a NodePort, porch's own
// function-runner deployed on the node by porch's manifests, and then
// fnrunner deployed there (deploy/overlays/local). Every image the tests
// name is in the node's registry, which KRM_FN_REGISTRY_URL names, so that
// no binary claims it and the runner's pods serve it.
func TestPodTestsOnTheNode(t *testing.T) {
	bins := porch.FromEnv(t)
	n := node.StartWith(t, node.Options{
		APIServerArgs:     porch.AggregationArgs(t, t.TempDir()),
		CRDDirectoryPaths: bins.CRDs(),
	})
	registry := n.Registry + "/kptdev/krm-functions-catalog"
	for _, f := range podFunctions {
		if err := node.PushBinaryImage(registry+"/"+f.image, harness.Binary(t, f.binaryEnv), "/fn", []string{"/fn"}, nil); err != nil {
			t.Fatalf("pushing %s: %v", f.image, err)
		}
	}

	t.Run("porch", func(t *testing.T) {
		runner := porchRunnerOnNode(t, n, bins, registry)
		env := porch.StartOn(t, bins, n.Kube, runner, func(*porch.Env) error { return nil })
		porch.RunAndCheckSuites(t, env, "porch", harness.Runfile(t, "tests/porch/expected.yaml"), []porch.Suite{env.PodSuite(registry)})
		metricsWherePorchLooks(t, n, []scraped{
			{"porch's function-runner", "porch-system", client.MatchingLabels{"app": "function-runner"}},
			{"porch's function pod", "porch-fn-system", client.HasLabels{"fn.kpt.dev/image"}},
		})
	})

	t.Run("fnrunner", func(t *testing.T) {
		// Pods per function and calls per pod as porch's deployment sets
		// them for its runner (deployments/porch/2-function-runner.yaml):
		// the flags have porch's names, and porch's defaults.
		_, gateway := n.DeployOverlay(t, "deploy/overlays/local", nil, "--max-parallel-pods-per-function=2", "--max-waitlist-length=1")
		env := porch.StartOn(t, bins, n.Kube, gateway, func(e *porch.Env) error {
			return inClusterRunner(e, map[string]string{"app.kubernetes.io/name": "fnrunner-gateway"})
		})
		porch.RunAndCheckSuites(t, env, "fnrunner", harness.Runfile(t, "tests/porch/expected.yaml"), []porch.Suite{env.PodSuite(registry)})
		metricsWherePorchLooks(t, n, []scraped{
			{"fnrunner's gateway", "porch-fn-system", client.MatchingLabels{"app.kubernetes.io/name": "fnrunner-gateway"}},
			{"fnrunner's function pod", "porch-fn-system", client.HasLabels{"fn.kpt.dev/pod"}},
		})
	})
}

// inClusterRunner creates what porch's suites take for a function runner
// in the cluster, and run their pod tests only with: a Service named
// function-runner, with a selector, in porch's namespace.
func inClusterRunner(e *porch.Env, selector map[string]string) error {
	return e.Kube.Client.Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "porch-system", Name: "function-runner"},
		Spec: corev1.ServiceSpec{
			Selector: selector,
			Ports:    []corev1.ServicePort{{Name: "grpc", Port: 9445, TargetPort: intstr.FromInt32(9445)}},
		},
	})
}

// porchRunnerOnNode deploys porch's function-runner as porch's manifests
// do (deployments/porch: the namespaces, 2-function-runner.yaml, and the
// Role and RoleBinding that give porch-fn-runner the function pods), its
// image and its wrapper-server's laid out as porch's Dockerfiles lay them
// out under their docker.io names (the node mirrors docker.io). It returns
// porch-server's address for it, a NodePort. Its function pods, and the
// runner, are gone once t ends, for the next runner's tests to count pods.
func porchRunnerOnNode(t *testing.T, n *node.Node, bins porch.Binaries, registry string) string {
	ctx := context.Background()
	c := n.Kube.Client
	probe, busybox := harness.Binary(t, "FNRUNNER_PORCH_GRPC_HEALTH_PROBE"), harness.Binary(t, "FNRUNNER_BUSYBOX")
	wrapper, err := node.PorchWrapperImage(harness.Binary(t, "FNRUNNER_PORCH_WRAPPER_SERVER"), probe, busybox)
	require.NoError(t, err)
	require.NoError(t, node.PushImage(n.Registry+"/nephio/porch-wrapper-server:latest", wrapper))
	// The exec runtime with the binaries fnrunner's binary executor has
	// (porch.Functions), as in porch_runner_test: the packages' own
	// pipelines name them; the pod tests' images are under the node's
	// registry, which no exec entry names.
	functions := map[string]string{}
	for _, f := range porch.Functions() {
		functions[f.File()] = harness.Binary(t, f.Env)
	}
	server, err := node.PorchRunnerImage(bins.FunctionRunner, probe, busybox, []byte(porch.PorchRunnerConfig()), functions)
	require.NoError(t, err)
	require.NoError(t, node.PushImage(n.Registry+"/nephio/porch-function-runner:latest", server))

	objs := bins.Manifests(t, "1-namespace.yaml")
	for _, o := range bins.Manifests(t, "2-function-runner.yaml") {
		if o.GetKind() == "ConfigMap" && o.GetName() == "pod-cache-config" {
			warmPods(t, o, registry)
		}
		objs = append(objs, o)
	}
	for _, file := range []string{"5-rbac.yaml", "6-rbac-bind.yaml"} {
		for _, o := range bins.Manifests(t, file) {
			if o.GetNamespace() == "porch-fn-system" && o.GetName() == "porch-function-executor" {
				objs = append(objs, o)
			}
		}
	}
	node.Apply(t, c, objs)
	t.Cleanup(func() { removePorchRunner(t, c) })

	np := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "porch-system", Name: "function-runner-from-test"},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: map[string]string{"app": "function-runner"},
			Ports:    []corev1.ServicePort{{Name: "grpc", Port: 9445, TargetPort: intstr.FromInt32(9445)}},
		},
	}
	require.NoError(t, c.Create(ctx, np))
	addr := fmt.Sprintf("%s:%d", n.NodeIP, np.Spec.Ports[0].NodePort)
	untilExecFirst(t, c, addr)
	return addr
}

// untilExecFirst restarts porch's runner until it asks its exec runtime
// before its pod runtime. Porch v1.5.8's func/server/server.go builds the
// runtimes' order by ranging over a map, so either comes first, by chance,
// at each start; with the pod runtime first, an image the exec runtime has
// is tried as a pod, fails (it is on ghcr.io), and the error is not
// NotFound, so the exec runtime is never asked: porch's own deployment
// then fails every exec function, on one start in two. The probe is an
// exec image with a functionConfig: the exec runtime answers it (OK, or
// Internal when the function fails), the pod runtime with Unknown.
func untilExecFirst(t *testing.T, c client.Client, addr string) {
	ctx := context.Background()
	f := porch.Functions()[0]
	rl := []byte("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\nfunctionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: probe}\n  data: {}\n")
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	runner := evaluator.NewFunctionEvaluatorClient(conn)
	for start := 1; ; start++ {
		err := harness.Poll(4*time.Minute, time.Second, func() error {
			var d appsv1.Deployment
			if err := c.Get(ctx, client.ObjectKey{Namespace: "porch-system", Name: "function-runner"}, &d); err != nil {
				return err
			}
			if d.Status.AvailableReplicas < 1 || d.Status.Replicas != 1 {
				return fmt.Errorf("porch's function-runner: %d of %d available", d.Status.AvailableReplicas, d.Status.Replicas)
			}
			return nil
		})
		require.NoError(t, err, "%s%s", node.PodReport(ctx, c, "porch-system"), node.PodReport(ctx, c, "porch-fn-system"))
		// Unavailable until kube-proxy serves the NodePort and the pod.
		_ = harness.Poll(time.Minute, time.Second, func() error {
			callCtx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			_, err = runner.EvaluateFunction(callCtx, &evaluator.EvaluateFunctionRequest{Image: f.Image(), ResourceList: rl})
			if status.Code(err) == codes.Unavailable {
				return err
			}
			return nil
		})
		if code := status.Code(err); code == codes.OK || code == codes.Internal {
			t.Logf("porch's function-runner asks its exec runtime first on start %d", start)
			return
		}
		require.Less(t, start, 12, "porch's function-runner asked its pod runtime first on %d starts: %v", start, err)
		t.Logf("porch's function-runner asks its pod runtime first (start %d: %v): restarting it", start, err)
		require.NoError(t, c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace("porch-system"), client.MatchingLabels{"app": "function-runner"}, client.GracePeriodSeconds(0)))
		require.NoError(t, harness.Poll(2*time.Minute, time.Second, func() error {
			var pods corev1.PodList
			if err := c.List(ctx, &pods, client.InNamespace("porch-system"), client.MatchingLabels{"app": "function-runner"}); err != nil {
				return err
			}
			for _, p := range pods.Items {
				if p.DeletionTimestamp != nil {
					return fmt.Errorf("pod %s still terminating", p.Name)
				}
			}
			return nil
		}))
	}
}

// warmPods keeps, of porch's pod-cache-config, the images the tests name
// (podFunctions), under registry instead of ghcr.io: the others would be
// pulled from ghcr.io, which no packet of a test may reach.
func warmPods(t *testing.T, cm *unstructured.Unstructured, registry string) {
	const key = "pod-cache-config.yaml"
	data, _, _ := unstructured.NestedString(cm.Object, "data", key)
	var entries []map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(data), &entries))
	var kept []map[string]any
	for _, e := range entries {
		image, _ := e["name"].(string)
		for _, f := range podFunctions {
			if image == porch.Registry+"/"+f.image {
				e["name"] = registry + "/" + f.image
				kept = append(kept, e)
			}
		}
	}
	require.NotEmpty(t, kept, "porch's pod-cache-config names none of the tests' images")
	out, err := yaml.Marshal(kept)
	require.NoError(t, err)
	require.NoError(t, unstructured.SetNestedField(cm.Object, string(out), "data", key))
}

// removePorchRunner deletes porch's function-runner, its Services and its
// function pods (porch's label fn.kpt.dev/image), and waits until no pod
// of them is left: a terminating pod still counts as Running.
func removePorchRunner(t *testing.T, c client.Client) {
	ctx := context.Background()
	now := client.GracePeriodSeconds(0)
	for _, o := range []client.Object{
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "porch-system", Name: "function-runner"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "porch-system", Name: "function-runner"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "porch-system", Name: "function-runner-from-test"}},
	} {
		assert.NoError(t, client.IgnoreNotFound(c.Delete(ctx, o, now, client.PropagationPolicy(metav1.DeletePropagationBackground))))
	}
	var svcs corev1.ServiceList
	require.NoError(t, c.List(ctx, &svcs, client.InNamespace("porch-fn-system")))
	for i := range svcs.Items {
		if _, ok := svcs.Items[i].Spec.Selector["fn.kpt.dev/image"]; ok {
			assert.NoError(t, client.IgnoreNotFound(c.Delete(ctx, &svcs.Items[i])))
		}
	}
	fnPods := client.HasLabels{"fn.kpt.dev/image"}
	assert.NoError(t, c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace("porch-fn-system"), fnPods, now))
	err := harness.Poll(2*time.Minute, time.Second, func() error {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace("porch-system"), client.MatchingLabels{"app": "function-runner"}); err != nil {
			return err
		}
		var fns corev1.PodList
		if err := c.List(ctx, &fns, client.InNamespace("porch-fn-system"), fnPods); err != nil {
			return err
		}
		if left := len(pods.Items) + len(fns.Items); left > 0 {
			return fmt.Errorf("%d pods of porch's runner left", left)
		}
		return nil
	})
	assert.NoError(t, err)
}

// scraped is a pod porch's TestMetricsEndpoint scrapes: the first running
// one in namespace that selector selects.
type scraped struct {
	what, namespace string
	selector        client.ListOption
}

// metricsWherePorchLooks does what porch's TestMetricsEndpoint does for
// the runner's pod and a function pod: it reads port 9464's /metrics of
// each through the apiserver's pod proxy and matches the expressions the
// test has, go_* and rpc_server_*. (The test's porch-server and
// porch-controllers halves cannot pass here: porch-server runs outside the
// cluster. expected.yaml says so.)
func metricsWherePorchLooks(t *testing.T, n *node.Node, pods []scraped) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(n.Kube.Config)
	for _, p := range pods {
		var list corev1.PodList
		require.NoError(t, n.Kube.Client.List(ctx, &list, client.InNamespace(p.namespace), p.selector))
		var pod string
		for _, item := range list.Items {
			if item.Status.Phase == corev1.PodRunning && item.DeletionTimestamp == nil {
				pod = item.Name
				break
			}
		}
		if !assert.NotEmpty(t, pod, "no running pod of %s\n%s", p.what, node.PodReport(ctx, n.Kube.Client, p.namespace)) {
			continue
		}
		body, err := cs.CoreV1().Pods(p.namespace).ProxyGet("", pod, "9464", "metrics", nil).DoRaw(ctx)
		if !assert.NoError(t, err, "%s (%s): port 9464's /metrics", p.what, pod) {
			continue
		}
		// porch's regular expressions, as loose as porch has them ("go_*"
		// is "go" anywhere), and then the families by name, for the log.
		for _, re := range []string{"go_*", "rpc_server_*"} {
			assert.Regexp(t, re, string(body), "%s (%s): porch's %q on port 9464", p.what, pod, re)
		}
		for _, family := range []string{"go_", "rpc_server_"} {
			n := len(regexp.MustCompile(`(?m)^# TYPE `+family).FindAllIndex(body, -1))
			t.Logf("%s: %d %s* families on port 9464", p.what, n, family)
		}
	}
}

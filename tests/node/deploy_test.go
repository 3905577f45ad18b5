package node_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	ggcrtypes "github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fnrunner/fnrunner/libs/apis/config/v1alpha1"
	pb "github.com/fnrunner/fnrunner/protos/evaluator"
	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tests/node"
	"github.com/fnrunner/fnrunner/tests/porchfiles"
)

// namespace is deploy/base's.
const namespace = "porch-fn-system"

// setNamespaceInput asks set-namespace for namespace on-a-node.
const setNamespaceInput = "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: a\nfunctionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: fn\n  data:\n    namespace: on-a-node\n"

// TestHardenedOverlay: deploy/overlays/hardened on the node, where the
// apiserver enforces Pod Security: fnrunner's own pods and the function
// pods its template makes are admitted under "restricted" (a privileged pod
// is not), and calls go through the binary-runner and a function pod. Its
// NetworkPolicies are applied; the bridge CNI plugin does not enforce them.
func TestHardenedOverlay(t *testing.T) {
	n := node.Start(t)
	ctx := context.Background()
	c := n.Kube.Client
	conn := deployOverlay(t, n, "deploy/overlays/hardened", nil)

	var ns corev1.Namespace
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: namespace}, &ns))
	assert.Equal(t, "restricted", ns.Labels["pod-security.kubernetes.io/enforce"])
	privileged := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "privileged"}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "c", Image: n.Registry + "/fnrunner/pause:1", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}}}
	err := c.Create(ctx, privileged)
	require.Error(t, err, "a privileged pod was admitted: Pod Security is not enforced here")
	assert.Contains(t, err.Error(), "violates PodSecurity")

	var resp *pb.EvaluateFunctionResponse
	err = harness.Poll(time.Minute, time.Second, func() error {
		var err error
		resp, err = callClaimed(t, conn, "set-namespace:v0.4.5", setNamespaceInput, 20*time.Second, nil)
		return err
	})
	require.NoError(t, err, "a call through the binary-runner\n%s", podReport(ctx, c))
	assert.Contains(t, string(resp.GetResourceList()), "namespace: on-a-node")

	require.NoError(t, node.PushBinaryImage(n.Registry+"/fns/sn-hardened:node", harness.Binary(t, "FNRUNNER_SET_NAMESPACE"), "/set-namespace", []string{"/set-namespace"}, nil))
	image := claimForPods(t, n, "sn-hardened")
	resp, err = callClaimed(t, conn, image, setNamespaceInput, 2*time.Minute, nil)
	require.NoError(t, err, "a call through a function pod\n%s", podReport(ctx, c))
	assert.Contains(t, string(resp.GetResourceList()), "namespace: on-a-node")
	pods := functionPods(t, c, "sn-hardened")
	require.Len(t, pods, 1)
	sc := pods[0].Spec.SecurityContext
	require.NotNil(t, sc)
	assert.True(t, sc.RunAsNonRoot != nil && *sc.RunAsNonRoot, "the function pod runs as non-root")
	assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, sc.SeccompProfile.Type)
	assert.False(t, pods[0].Spec.AutomountServiceAccountToken == nil || *pods[0].Spec.AutomountServiceAccountToken, "no API credentials in function pods")

	var policies networkingv1.NetworkPolicyList
	require.NoError(t, c.List(ctx, &policies, client.InNamespace(namespace)))
	assert.NotEmpty(t, policies.Items, "the hardened NetworkPolicies are applied")
}

// TestDeployLocalOverlay: deploy/overlays/local applied as a user would
// (the images pushed by tools/release, the release path, to the node's
// registry and pinned by digest), every workload becomes ready under real
// probes, RBAC and Services, and a call through the gateway's Service
// (kube-proxy) reaches the binary-runner and the function.
func TestDeployLocalOverlay(t *testing.T) {
	n := node.Start(t)
	ctx := context.Background()
	priv, err := n.PrivateRegistry(t)
	require.NoError(t, err, "private registry")
	conn := deployOverlay(t, n, "deploy/overlays/local", priv)
	rl := setNamespaceInput
	var resp *pb.EvaluateFunctionResponse
	err = harness.Poll(time.Minute, time.Second, func() error {
		var err error
		resp, err = callClaimed(t, conn, "set-namespace:v0.4.5", rl, 20*time.Second, nil)
		return err
	})
	require.NoError(t, err, "a call through the gateway's NodePort\n%s", podReport(ctx, n.Kube.Client))
	assert.Contains(t, string(resp.GetResourceList()), "namespace: on-a-node")

	// The gateway found the pod-manager by the DNS SRV lookup deploy/
	// configures (--pod-manager-srv=_grpc._tcp.fnrunner-pod-manager): Go's
	// resolver in a pod, the pod's resolv.conf search path, CoreDNS and
	// the StatefulSet's headless Service with its EndpointSlices.
	var sts appsv1.StatefulSet
	require.NoError(t, n.Kube.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "fnrunner-pod-manager"}, &sts))
	metricsPage(t, n, "fnrunner-gateway", 9090, fmt.Sprintf("fnrunner_gateway_pod_manager_replicas %d\n", *sts.Spec.Replicas))

	// The pod executor on the node: set-namespace in images of its own,
	// built by Bazel (one with an entrypoint, one with only a command),
	// claimed by FunctionConfigs for pods. The first call starts a pod
	// (scheduled, its init container copying the wrapper-server from its
	// image, the function's image pulled, started, probed by the kubelet);
	// the second finds it warm.
	for _, fn := range []struct{ name, tarball string }{
		{"sn-entrypoint", "FNRUNNER_NODE_SN_ENTRYPOINT_IMAGE"},
		{"sn-cmd", "FNRUNNER_NODE_SN_CMD_IMAGE"},
	} {
		img, err := tarball.ImageFromPath(harness.Binary(t, fn.tarball), nil)
		require.NoError(t, err)
		require.NoError(t, node.PushImage(n.Registry+"/fns/"+fn.name+":node", img))
		image := claimForPods(t, n, fn.name)
		for _, round := range []string{"cold", "warm"} {
			start := time.Now()
			resp, err := callClaimed(t, conn, image, rl, 2*time.Minute, &start)
			require.NoError(t, err, "%s call of %s\n%s", round, image, podReport(ctx, n.Kube.Client))
			assert.Contains(t, string(resp.GetResourceList()), "namespace: on-a-node")
			t.Logf("%s: %s call in %v", fn.name, round, time.Since(start).Round(time.Millisecond))
		}
		var pods corev1.PodList
		require.NoError(t, n.Kube.Client.List(ctx, &pods, client.InNamespace(namespace)))
		var started []string
		for _, p := range pods.Items {
			if p.Labels["app.kubernetes.io/managed-by"] == "fnrunner-pod-manager" && strings.Contains(p.Annotations["fn.kpt.dev/image"], "/"+fn.name+"@") {
				started = append(started, p.Name)
			}
		}
		assert.Len(t, started, 1, "%s: function pods, want the one the warm call found", fn.name)
		// Where a cold start's time went, from the pod's own record
		// (seconds' resolution): scheduled, initialized (the
		// wrapper-server copied in), containers ready (pulled, started,
		// probed).
		for _, p := range pods.Items {
			if slices.Contains(started, p.Name) {
				var phases []string
				for _, c := range p.Status.Conditions {
					phases = append(phases, fmt.Sprintf("%s +%v", c.Type, c.LastTransitionTime.Sub(p.CreationTimestamp.Time)))
				}
				t.Logf("%s: pod %s: %s", fn.name, p.Name, strings.Join(phases, ", "))
			}
		}
	}

	t.Run("binary-runner under RuntimeDefault", func(t *testing.T) { binaryRunnerConfined(t, n) })
	t.Run("pod-manager pod deleted", func(t *testing.T) { podManagerPodDeleted(t, n, conn, rl, "sn-entrypoint") })
	t.Run("pod-manager switched to pod-ip", func(t *testing.T) { podManagerToPodIP(t, n, conn, rl, "sn-entrypoint") })
	t.Run("pod template changed", func(t *testing.T) { templateChanged(t, n, conn, rl, "sn-cmd") })
	t.Run("function container killed mid-call", func(t *testing.T) { containerKilledMidCall(t, n, conn) })
	t.Run("image that cannot be pulled", func(t *testing.T) { unpullableImage(t, n, conn, rl) })
	t.Run("private image with its pull secret", func(t *testing.T) { privateImage(t, n, conn, rl, priv) })
	t.Run("idle pod collected after its timeToLive", func(t *testing.T) { ttlCollects(t, n, conn, rl) })
	// Last: it replaces fnrunner's templates with porch's for good.
	t.Run("porch's own templates and wrapper-server", func(t *testing.T) { porchTemplates(t, n, conn, rl) })

	// Each binary-runner pod's report reached the config-reconciler with
	// the token the kubelet projected for it (checked by TokenReview) and
	// is stored, owned by the pod.
	err = harness.Poll(time.Minute, time.Second, func() error {
		var runners corev1.PodList
		if err := n.Kube.Client.List(ctx, &runners, client.InNamespace(namespace), client.MatchingLabels{"app.kubernetes.io/name": "fnrunner-binary-runner"}); err != nil {
			return err
		}
		var stored corev1.ConfigMapList
		if err := n.Kube.Client.List(ctx, &stored, client.InNamespace(namespace), client.MatchingLabels{"fnrunner.dev/runner-report": "true"}); err != nil {
			return err
		}
		owners := map[string]bool{}
		for _, cm := range stored.Items {
			for _, o := range cm.OwnerReferences {
				owners[string(o.UID)] = true
			}
		}
		for _, p := range runners.Items {
			if p.Status.Phase == corev1.PodRunning && !owners[string(p.UID)] {
				return fmt.Errorf("no report stored for binary-runner pod %s", p.Name)
			}
		}
		if len(runners.Items) == 0 {
			return fmt.Errorf("no binary-runner pod")
		}
		return nil
	})
	require.NoError(t, err, "the binary-runners' reports\n%s", podReport(ctx, n.Kube.Client))
}

// binaryRunnerConfined: the binary-runner as deploy/ runs it, non-root
// under the runtime's default seccomp profile (RuntimeDefault), reports on
// its metrics page which sandbox layers it gets there.
func binaryRunnerConfined(t *testing.T, n *node.Node) {
	ctx := context.Background()
	c := n.Kube.Client
	var pods corev1.PodList
	require.NoError(t, c.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{"app.kubernetes.io/name": "fnrunner-binary-runner"}))
	require.NotEmpty(t, pods.Items)
	procs := node.ContainerProcesses(containerID(pods.Items[0], "binary-runner"))
	require.NotEmpty(t, procs, "the binary-runner container's processes")
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", procs[0]))
	require.NoError(t, err)
	assert.Regexp(t, `(?m)^Seccomp:\s+2$`, string(st), "the binary-runner runs under a seccomp filter (RuntimeDefault)")
	assert.Regexp(t, `(?m)^Uid:\s+65532\s`, string(st), "the binary-runner runs as deploy/'s non-root uid")

	page := metricsPage(t, n, "fnrunner-binary-runner", 9092, "fnrunner_sandbox_layer_used")
	layers := grep(page, "fnrunner_sandbox_layer_")
	t.Logf("binary-runner's sandbox layers under RuntimeDefault:\n%s", layers)
	assert.Contains(t, layers, `fnrunner_sandbox_layer_used{layer="base"} 1`, "the always-on layer")
	assert.Contains(t, layers, `fnrunner_sandbox_layer_used{layer="landlock"} 1`, "Landlock needs no privilege")
}

// containerID is the runtime's ID of a container of p (without its
// "containerd://" scheme), "" before it started.
func containerID(p corev1.Pod, container string) string {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == container {
			_, id, _ := strings.Cut(cs.ContainerID, "://")
			return id
		}
	}
	return ""
}

// metricsPage reads the metrics page of a workload's pod (by its
// app.kubernetes.io/name) through a NodePort Service of the test's to its
// port named metrics, once it has want.
func metricsPage(t *testing.T, n *node.Node, app string, port int32, want string) string {
	t.Helper()
	ctx := context.Background()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: app + "-metrics-from-test"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app.kubernetes.io/name": app},
			Ports: []corev1.ServicePort{{Name: "metrics", Port: port, TargetPort: intstr.FromString("metrics")}}},
	}
	if err := n.Kube.Client.Create(ctx, svc); err != nil {
		require.NoError(t, n.Kube.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc))
	}
	var page string
	err := harness.Poll(time.Minute, time.Second, func() error {
		resp, err := http.Get(fmt.Sprintf("http://%s:%d/metrics", n.NodeIP, svc.Spec.Ports[0].NodePort))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		page = string(body)
		if err == nil && !strings.Contains(page, want) {
			err = fmt.Errorf("no %q on %s's metrics page", want, app)
		}
		return err
	})
	require.NoError(t, err, "%s", grep(page, strings.Fields(want)[0]))
	return page
}

// podManagerPodDeleted: the StatefulSet starts the pod-manager again under
// the same name, so it is the same owner; it adopts the function pods it
// had, and the function's next call finds its pod warm (none created).
func podManagerPodDeleted(t *testing.T, n *node.Node, conn *grpc.ClientConn, rl, fn string) {
	ctx := context.Background()
	c := n.Kube.Client
	before := functionPods(t, c, fn)
	require.Len(t, before, 1, "%s: its pod before", fn)
	var pm corev1.Pod
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "fnrunner-pod-manager-0"}, &pm))
	require.NoError(t, c.Delete(ctx, &pm))
	podManagerReplaced(t, n, conn, rl, fn, before[0], func(p corev1.Pod) bool { return p.UID != pm.UID })
}

// podManagerReplaced waits until the pod-manager's pod is one that replaced
// says is new and ready, calls fn until it answers, and checks that its pod
// before, and no other, served it: the new pod-manager adopted it. It
// returns the new pod-manager pod.
func podManagerReplaced(t testing.TB, n *node.Node, conn *grpc.ClientConn, rl, fn string, before corev1.Pod, replaced func(corev1.Pod) bool) corev1.Pod {
	t.Helper()
	ctx := context.Background()
	c := n.Kube.Client
	var pm corev1.Pod
	err := harness.Poll(3*time.Minute, time.Second, func() error {
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "fnrunner-pod-manager-0"}, &pm); err != nil {
			return err
		}
		if !replaced(pm) {
			return fmt.Errorf("pod-manager pod %s not replaced yet", pm.Name)
		}
		for _, cond := range pm.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("new pod-manager pod %s not ready", pm.Name)
	})
	require.NoError(t, err, "\n%s", podReport(ctx, c))
	// The gateway dials the replica again (its headless Service's SRV
	// record): Unavailable, not sent, until it does.
	var resp *pb.EvaluateFunctionResponse
	err = harness.Poll(time.Minute, time.Second, func() error {
		var err error
		resp, err = callClaimed(t, conn, n.Registry+"/fns/"+fn+":node", rl, time.Minute, nil)
		return err
	})
	require.NoError(t, err, "%s after the pod-manager's pod was replaced\n%s", fn, podReport(ctx, c))
	assert.Contains(t, string(resp.GetResourceList()), "namespace: on-a-node")
	after := functionPods(t, c, fn)
	require.Len(t, after, 1, "%s: its pods after the pod-manager's pod was replaced", fn)
	assert.Equal(t, before.UID, after[0].UID, "%s: the pod was not adopted (a new one served)", fn)
	return pm
}

// podManagerToPodIP: the pod-manager's StatefulSet changed to dial pods by
// their IP (--pod-address=pod-ip, its Service then unused): the roll
// replaces its pod, which adopts the function pods, and the function's next
// call is served by the same pod.
func podManagerToPodIP(t testing.TB, n *node.Node, conn *grpc.ClientConn, rl, fn string) {
	pm := podManagerRolled(t, n, conn, rl, fn, func(args []string) []string { return append(args, "--pod-address=pod-ip") })
	assert.Contains(t, n.PodLogs(&pm, "pod-manager"), `"podAddress":"pod-ip"`, "the rolled pod-manager's start line")
}

// podManagerRolled edits the pod-manager's arguments and returns its pod
// once one with them serves fn's calls (fn's pod adopted).
func podManagerRolled(t testing.TB, n *node.Node, conn *grpc.ClientConn, rl, fn string, edit func(args []string) []string) corev1.Pod {
	ctx := context.Background()
	c := n.Kube.Client
	before := functionPods(t, c, fn)
	require.Len(t, before, 1, "%s: its pod before", fn)
	key := client.ObjectKey{Namespace: namespace, Name: "fnrunner-pod-manager"}
	var want []string
	// The StatefulSet controller writes its status meanwhile: an update
	// on a stale read conflicts, and is read and made again.
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var sts appsv1.StatefulSet
		if err := c.Get(ctx, key, &sts); err != nil {
			return err
		}
		want = edit(slices.Clone(sts.Spec.Template.Spec.Containers[0].Args))
		sts.Spec.Template.Spec.Containers[0].Args = want
		return c.Update(ctx, &sts)
	}))
	return podManagerReplaced(t, n, conn, rl, fn, before[0], func(p corev1.Pod) bool {
		return slices.Equal(p.Spec.Containers[0].Args, want)
	})
}

// templateChanged: an edit of the base pod template (as an operator makes
// one) rolls the function's pod: the next call gets a pod of the new
// template, and the old pod goes.
func templateChanged(t *testing.T, n *node.Node, conn *grpc.ClientConn, rl, fn string) {
	ctx := context.Background()
	c := n.Kube.Client
	before := functionPods(t, c, fn)
	require.Len(t, before, 1, "%s: its pod before", fn)
	var tpl corev1.PodTemplate
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "base-pod-template"}, &tpl))
	for i, ctr := range tpl.Template.Spec.Containers {
		if ctr.Name == "function" {
			tpl.Template.Spec.Containers[i].Env = append(ctr.Env, corev1.EnvVar{Name: "EDITED_BY", Value: "an operator"})
		}
	}
	require.NoError(t, c.Update(ctx, &tpl))
	err := harness.Poll(2*time.Minute, time.Second, func() error {
		if _, err := callClaimed(t, conn, n.Registry+"/fns/"+fn+":node", rl, time.Minute, nil); err != nil {
			return err
		}
		for _, p := range functionPods(t, c, fn) {
			if p.UID == before[0].UID {
				return fmt.Errorf("the pod of the old template is still there")
			}
			for _, ctr := range p.Spec.Containers {
				for _, e := range ctr.Env {
					if e.Name == "EDITED_BY" {
						return nil
					}
				}
			}
		}
		return fmt.Errorf("no pod of the edited template serves %s yet", fn)
	})
	require.NoError(t, err, "\n%s", podReport(ctx, c))
}

// ttlCollects: a function whose FunctionConfig gives a short timeToLive
// loses its idle pod, and the pod's Service, at the pod-manager's next
// scan after it.
func ttlCollects(t *testing.T, n *node.Node, conn *grpc.ClientConn, rl string) {
	ctx := context.Background()
	c := n.Kube.Client
	require.NoError(t, node.PushBinaryImage(n.Registry+"/fns/sn-ttl:node", harness.Binary(t, "FNRUNNER_SET_NAMESPACE"), "/set-namespace", []string{"/set-namespace"}, nil))
	image := claimForPods(t, n, "sn-ttl", func(p *v1alpha1.PodExecutorConfig) { p.TimeToLive = metav1.Duration{Duration: 5 * time.Second} })
	// Twice: a call that reached a service whose table did not have the
	// FunctionConfig yet (the config-reconciler writes status and streams
	// the table at about the same time) ran it unclaimed; the next call's
	// TTL applies to the pod.
	for range 2 {
		_, err := callClaimed(t, conn, image, rl, 2*time.Minute, nil)
		require.NoError(t, err, "\n%s", podReport(ctx, c))
	}
	pods := functionPods(t, c, "sn-ttl")
	require.Len(t, pods, 1)
	err := harness.Poll(time.Minute, time.Second, func() error {
		if left := functionPods(t, c, "sn-ttl"); len(left) > 0 {
			return fmt.Errorf("pod %s still there", left[0].Name)
		}
		var svc corev1.Service
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: pods[0].Name}, &svc); err == nil {
			return fmt.Errorf("service %s still there", svc.Name)
		}
		return nil
	})
	if err != nil {
		fc := functionConfigRef("sn-ttl")
		_ = c.Get(ctx, client.ObjectKeyFromObject(fc), fc)
		spec, _, _ := unstructured.NestedMap(fc.Object, "spec")
		var pm corev1.Pod
		_ = c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "fnrunner-pod-manager-0"}, &pm)
		page := metricsPage(t, n, "fnrunner-pod-manager", 9093, "fnrunner_function_pods")
		require.NoError(t, err, "the idle pod after its timeToLive (created %v, now %v)\nFunctionConfig spec %v\npod-manager args %v\n%s\n%s\n%s",
			pods[0].CreationTimestamp, time.Now(), spec, pm.Spec.Containers[0].Args, podReport(ctx, c), grep(page, "fnrunner_function_pods"), grep(page, "fnrunner_pods_"))
	}
}

// recordInput asks tests/testfns/record to take sleep before answering.
const recordInput = "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\nfunctionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: fn\n  data:\n    ledger: /dev/null\n    callId: %s\n    sleep: %s\n"

// containerKilledMidCall: the function container dies under a call (every
// process of it SIGKILLed, as the runtime or the OOM killer ends it). The
// call fails Unavailable saying it was not repeated; the kubelet restarts
// the container and the function is served again.
func containerKilledMidCall(t *testing.T, n *node.Node, conn *grpc.ClientConn) {
	ctx := context.Background()
	c := n.Kube.Client
	require.NoError(t, node.PushBinaryImage(n.Registry+"/fns/record:node", harness.Binary(t, "FNRUNNER_RECORD"), "/record", []string{"/record"}, nil))
	image := claimForPods(t, n, "record")
	_, err := callClaimed(t, conn, image, fmt.Sprintf(recordInput, "first", "0s"), 2*time.Minute, nil)
	require.NoError(t, err, "\n%s", podReport(ctx, c))
	pods := functionPods(t, c, "record")
	require.Len(t, pods, 1)
	id := containerID(pods[0], "function")
	require.NotEmpty(t, id, "the function container's ID")

	answer := make(chan error, 1)
	go func() {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		_, err := pb.NewFunctionEvaluatorClient(conn).EvaluateFunction(cctx, &pb.EvaluateFunctionRequest{Image: image, ResourceList: []byte(fmt.Sprintf(recordInput, "killed", "10m"))})
		answer <- err
	}()
	// The call is in the container once the function runs there.
	err = harness.Poll(time.Minute, 100*time.Millisecond, func() error {
		for _, pid := range node.ContainerProcesses(id) {
			if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); string(cmd) == "/record\x00" {
				return nil
			}
		}
		return fmt.Errorf("no /record process in container %s", id)
	})
	require.NoError(t, err)
	require.NotZero(t, node.KillContainer(id))
	select {
	case err = <-answer:
	case <-time.After(2 * time.Minute):
		require.FailNow(t, "the call on the killed container was not answered")
	}
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	assert.ErrorContains(t, err, "not repeated")

	// Served again: the kubelet restarts the container (or the
	// pod-manager replaces the pod).
	err = harness.Poll(2*time.Minute, time.Second, func() error {
		_, err := callClaimed(t, conn, image, fmt.Sprintf(recordInput, "after", "0s"), time.Minute, nil)
		return err
	})
	require.NoError(t, err, "after the kill\n%s", podReport(ctx, c))
	for _, p := range functionPods(t, c, "record") {
		for _, cs := range p.Status.ContainerStatuses {
			t.Logf("record: pod %s container %s restarts %d", p.Name, cs.Name, cs.RestartCount)
		}
	}
}

// unpullableImage: an image whose manifest and config the registry serves
// (so the pod-manager finds its entrypoint and starts a pod) but whose
// layer it lost: containerd's pull fails, and the caller gets the
// container's reason at once, not a ready timeout; no pod of it is left.
func unpullableImage(t *testing.T, n *node.Node, conn *grpc.ClientConn, rl string) {
	ctx := context.Background()
	c := n.Kube.Client
	img, err := random.Image(1024, 1)
	require.NoError(t, err)
	img, err = mutate.Config(img, v1.Config{Entrypoint: []string{"/fn"}})
	require.NoError(t, err)
	ref, err := name.ParseReference(n.Registry+"/fns/unpullable:node", name.Insecure)
	require.NoError(t, err)
	require.NoError(t, remote.Write(ref, img))
	layers, err := img.Layers()
	require.NoError(t, err)
	digest, err := layers[0].Digest()
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodDelete, "http://"+n.Registry+"/v2/fns/unpullable/blobs/"+digest.String(), nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode, "deleting the layer")

	image := claimForPods(t, n, "unpullable")
	_, err = callClaimed(t, conn, image, rl, 2*time.Minute, nil)
	require.Error(t, err)
	assert.NotEqual(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
	assert.Regexp(t, "ErrImagePull|ImagePullBackOff", status.Convert(err).Message(), "the container's reason")
	// Not the --pod-ready-timeout's answer, which names the same reason as
	// why the pod was still waiting.
	assert.NotContains(t, status.Convert(err).Message(), "not ready after", "failed at the container's reason, not at --pod-ready-timeout")
	err = harness.Poll(time.Minute, time.Second, func() error {
		if pods := functionPods(t, c, "unpullable"); len(pods) > 0 {
			return fmt.Errorf("%d pods of the unpullable image left", len(pods))
		}
		return nil
	})
	assert.NoError(t, err, "\n%s", podReport(ctx, c))
}

// privateImage: a function image in a private registry (TLS with a
// self-signed CA, basic auth), given to the pod-manager as porch's runner
// is given one. The pod-manager looks the image up with the credentials and
// the CA, and makes the pull Secret its pods name; the kubelet hands the
// Secret's credentials to containerd, which trusts the CA by its certs.d
// and has no credentials of its own. The registry refuses every request
// without the credentials.
func privateImage(t *testing.T, n *node.Node, conn *grpc.ClientConn, rl string, priv *node.PrivateRegistry) {
	ctx := context.Background()
	c := n.Kube.Client
	img, err := node.BinaryImage(harness.Binary(t, "FNRUNNER_SET_NAMESPACE"), "/set-namespace", []string{"/set-namespace"}, nil)
	require.NoError(t, err)
	// A layer of its own: containerd has set-namespace's layer from the
	// other images already, and would fetch nothing.
	own, err := random.Layer(256, ggcrtypes.DockerLayer)
	require.NoError(t, err)
	img, err = mutate.AppendLayers(img, own)
	require.NoError(t, err)
	require.NoError(t, priv.Push(priv.Host+"/fns/sn-private:node", img))
	image := claimAt(t, n, priv.Host, "sn-private")
	resp, err := callClaimed(t, conn, image, rl, 2*time.Minute, nil)
	require.NoError(t, err, "a call of an image in the private registry\n%s", podReport(ctx, c))
	assert.Contains(t, string(resp.GetResourceList()), "namespace: on-a-node")

	pods := functionPods(t, c, "sn-private")
	require.Len(t, pods, 1)
	require.Equal(t, []corev1.LocalObjectReference{{Name: "auth-secret"}}, pods[0].Spec.ImagePullSecrets, "the pod names porch's pull Secret (--registry-auth-secret-name)")
	var secret corev1.Secret
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "auth-secret"}, &secret))
	assert.Equal(t, corev1.SecretTypeDockerConfigJson, secret.Type)
	assert.JSONEq(t, string(priv.DockerConfigJSON()), string(secret.Data[corev1.DockerConfigJsonKey]), "the pull Secret holds the mounted credentials")

	// Who fetched what: containerd (its own User-Agent) pulled the layer
	// with the credentials, over TLS it verified; the pod-manager read the
	// manifest with them.
	var pulledLayer, lookedUp bool
	var refused int
	for _, r := range priv.Requests() {
		switch {
		case !r.Authorized:
			refused++
		case strings.HasPrefix(r.UserAgent, "containerd/") && r.Method == http.MethodGet && strings.Contains(r.Path, "/fns/sn-private/blobs/"):
			pulledLayer = true
		case !strings.HasPrefix(r.UserAgent, "containerd/") && strings.Contains(r.Path, "/fns/sn-private/manifests/"):
			lookedUp = true
		}
	}
	assert.True(t, pulledLayer, "containerd pulled no layer with the credentials: %+v", priv.Requests())
	assert.True(t, lookedUp, "the pod-manager read no manifest with the credentials: %+v", priv.Requests())
	t.Logf("private registry: %d requests, %d refused for want of credentials (the anonymous first tries)", len(priv.Requests()), refused)
}

// porchTemplates: porch's own pod and Service templates
// (22-function-templates.yaml, unchanged) put in place of fnrunner's, as an
// operator switching from porch has them, with porch's function-pod image:
// porch's wrapper-server v1.5.8 and grpc-health-probe v0.4.11 built from the
// module proxy, laid out as porch's image (docker.io/nephio/porch-wrapper-server,
// which the node mirrors). The pod-manager starts pods of them: the init
// container copies porch's binaries with cp as user nonroot, the kubelet's
// exec probes run grpc-health-probe, and porch's wrapper-server, given only
// the flags it has, serves the call.
func porchTemplates(t *testing.T, n *node.Node, conn *grpc.ClientConn, rl string) {
	porchfiles.Require(t)
	ctx := context.Background()
	c := n.Kube.Client
	wrapperServer := harness.Binary(t, "FNRUNNER_PORCH_WRAPPER_SERVER")
	img, err := node.PorchWrapperImage(wrapperServer, harness.Binary(t, "FNRUNNER_PORCH_GRPC_HEALTH_PROBE"), harness.Binary(t, "FNRUNNER_BUSYBOX"))
	require.NoError(t, err)
	require.NoError(t, node.PushImage(n.Registry+"/nephio/porch-wrapper-server:latest", img))
	// Replaced whole (PUT), not merged into fnrunner's by an apply.
	for _, o := range porchfiles.Objects(t, "22-function-templates.yaml") {
		have := &unstructured.Unstructured{}
		have.SetGroupVersionKind(o.GroupVersionKind())
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(o), have), "%s %s", o.GetKind(), o.GetName())
		o.SetResourceVersion(have.GetResourceVersion())
		require.NoError(t, c.Update(ctx, o), "%s %s", o.GetKind(), o.GetName())
	}
	require.NoError(t, node.PushBinaryImage(n.Registry+"/fns/sn-porch:node", harness.Binary(t, "FNRUNNER_SET_NAMESPACE"), "/set-namespace", []string{"/set-namespace"}, nil))
	image := claimForPods(t, n, "sn-porch")
	for _, round := range []string{"cold", "warm"} {
		start := time.Now()
		resp, err := callClaimed(t, conn, image, rl, 2*time.Minute, &start)
		require.NoError(t, err, "%s call through porch's templates\n%s", round, podReport(ctx, c))
		assert.Contains(t, string(resp.GetResourceList()), "namespace: on-a-node")
		t.Logf("porch's templates: %s call in %v", round, time.Since(start).Round(time.Millisecond))
	}

	pods := functionPods(t, c, "sn-porch")
	require.Len(t, pods, 1)
	pod := pods[0]
	require.Len(t, pod.Spec.InitContainers, 1)
	assert.Equal(t, "docker.io/nephio/porch-wrapper-server:latest", pod.Spec.InitContainers[0].Image)
	assert.Equal(t, []string{"cp", "-a", "/home/nonroot/wrapper-server/.", "/wrapper-server-tools"}, pod.Spec.InitContainers[0].Command)
	var fnc corev1.Container
	for _, ctr := range pod.Spec.Containers {
		if ctr.Name == "function" {
			fnc = ctr
		}
	}
	assert.Equal(t, []string{"/wrapper-server-tools/wrapper-server"}, fnc.Command)
	assert.NotContains(t, fnc.Args, "--max-queue", "a flag porch's wrapper-server does not have")
	require.NotNil(t, fnc.ReadinessProbe)
	require.NotNil(t, fnc.ReadinessProbe.Exec, "porch's exec probe")
	assert.Equal(t, "/wrapper-server-tools/grpc-health-probe", fnc.ReadinessProbe.Exec.Command[0])

	// The process serving in the function container is porch's
	// wrapper-server: the file it runs is the one built from porch's module.
	want, err := os.ReadFile(wrapperServer)
	require.NoError(t, err)
	var found bool
	for _, pid := range node.ContainerProcesses(containerID(pod, "function")) {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if !strings.HasPrefix(string(cmdline), "/wrapper-server-tools/wrapper-server\x00") {
			continue
		}
		exe, err := os.ReadFile(fmt.Sprintf("/proc/%d/exe", pid))
		require.NoError(t, err)
		found = bytes.Equal(exe, want)
		assert.True(t, found, "pid %d runs /wrapper-server-tools/wrapper-server, but not porch's", pid)
	}
	assert.True(t, found, "no process of porch's wrapper-server in the function container\n%s", podReport(ctx, c))
}

// claimForPods makes a FunctionConfig claim the node registry's
// fns/<name>:node for the pod executor, and returns that image.
func claimForPods(t testing.TB, n *node.Node, name string, with ...func(*v1alpha1.PodExecutorConfig)) string {
	t.Helper()
	return claimAt(t, n, n.Registry, name, with...)
}

// claimAt makes a FunctionConfig claim registry's fns/<name>:node for the
// pod executor, and returns that image.
func claimAt(t testing.TB, n *node.Node, registry, name string, with ...func(*v1alpha1.PodExecutorConfig)) string {
	t.Helper()
	fc := &v1alpha1.FunctionConfig{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Spec: v1alpha1.FunctionConfigSpec{
		Image: name, Prefixes: []string{registry + "/fns"}, PodExecutor: &v1alpha1.PodExecutorConfig{Tags: []string{"node"}}}}
	for _, f := range with {
		f(fc.Spec.PodExecutor)
	}
	require.NoError(t, n.Kube.Client.Create(context.Background(), functionConfigObject(t, fc, name)))
	// Until the config-reconciler has seen it, a call would run the image
	// unclaimed, with the pod-manager's defaults (it runs unclaimed
	// images, as porch does).
	err := harness.Poll(time.Minute, 100*time.Millisecond, func() error {
		got := functionConfigRef(name)
		if err := n.Kube.Client.Get(context.Background(), client.ObjectKeyFromObject(got), got); err != nil {
			return err
		}
		if seen, _, _ := unstructured.NestedInt64(got.Object, "status", "functionRunnerObservedGeneration"); seen != got.GetGeneration() {
			return fmt.Errorf("FunctionConfig %s: generation %d not observed yet", name, got.GetGeneration())
		}
		return nil
	})
	require.NoError(t, err)
	return registry + "/fns/" + name + ":node"
}

// functionConfigRef is a FunctionConfig of the function namespace by its
// name only: to get or delete it by.
func functionConfigRef(name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("FunctionConfig"))
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}

// functionConfigObject is fc named name in the function namespace, as an
// object to create or apply.
func functionConfigObject(t testing.TB, fc *v1alpha1.FunctionConfig, name string) *unstructured.Unstructured {
	t.Helper()
	fc.Namespace, fc.Name = namespace, name
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(fc)
	require.NoError(t, err)
	u := &unstructured.Unstructured{Object: obj}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("FunctionConfig"))
	delete(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	return u
}

// callClaimed calls image through conn, again while the answer is NotFound
// (the FunctionConfig not yet in the gateway's table) for up to a minute;
// any other answer is returned. start, when given, is set to when the
// answered call began.
func callClaimed(t testing.TB, conn *grpc.ClientConn, image, rl string, timeout time.Duration, start *time.Time) (*pb.EvaluateFunctionResponse, error) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		if start != nil {
			*start = time.Now()
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		resp, err := pb.NewFunctionEvaluatorClient(conn).EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: image, ResourceList: []byte(rl)})
		cancel()
		if status.Code(err) != codes.NotFound || time.Now().After(deadline) {
			return resp, err
		}
	}
}

// functionPods lists the pod-manager's function pods of the function
// fns/<name> (by the image annotation, which names its digest).
func functionPods(t testing.TB, c client.Client, name string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	require.NoError(t, c.List(context.Background(), &pods, client.InNamespace(namespace), client.MatchingLabels{"app.kubernetes.io/managed-by": "fnrunner-pod-manager"}))
	var out []corev1.Pod
	for _, p := range pods.Items {
		if strings.Contains(p.Annotations["fn.kpt.dev/image"], "/fns/"+name+"@") {
			out = append(out, p)
		}
	}
	return out
}

// grep returns the lines of page that contain s.
func grep(page, s string) string {
	var out []string
	for _, l := range strings.Split(page, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// deployOverlay is n.DeployOverlay's connection to the gateway.
func deployOverlay(t testing.TB, n *node.Node, dir string, priv *node.PrivateRegistry) *grpc.ClientConn {
	t.Helper()
	conn, _ := n.DeployOverlay(t, dir, priv)
	return conn
}

func apply(t testing.TB, c client.Client, objs []*unstructured.Unstructured) { node.Apply(t, c, objs) }

func podReport(ctx context.Context, c client.Client) string { return node.PodReport(ctx, c, namespace) }

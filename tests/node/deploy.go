package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/fnrunner/fnrunner/tests/harness"
)

// namespace is deploy/base's: fnrunner's services and its function pods.
const namespace = "porch-fn-system"

// DeployOverlay applies the overlay at dir (a path in the runfiles, e.g.
// deploy/overlays/local) as a user would: every image pushed by
// tools/release (the release path) to the node's registry and pinned by
// digest in an overlay over it, kustomize build, server-side apply. It waits
// for every workload to be ready under real probes, RBAC and Services, and
// returns a connection to the gateway, and its address, through a NodePort
// Service of the test's (porch-server's view, from outside the node:
// kube-proxy's rules).
//
// podManagerArgs are added to the pod-manager's flags. With priv, the
// pod-manager is given the private registry as porch's
// function runner is given one: its credentials (a dockerconfigjson Secret
// at --registry-auth-secret-path, --enable-private-registries) and its CA
// (a Secret at --tls-secret-path, --enable-private-registries-tls).
func (n *Node) DeployOverlay(t testing.TB, dir string, priv *PrivateRegistry, podManagerArgs ...string) (*grpc.ClientConn, string) {
	t.Helper()
	ctx := context.Background()
	overlay := t.TempDir()
	local, err := filepath.Abs(harness.Runfile(t, dir))
	require.NoError(t, err)
	// kustomize takes a base by a relative path only.
	base, err := filepath.Rel(overlay, local)
	require.NoError(t, err)
	args := []string{"--repository", n.Registry + "/fnrunner", "--tag", "node", "--insecure", "--overlay", overlay, "--base", base}
	for _, kv := range strings.Fields(os.Getenv("FNRUNNER_RELEASE_IMAGES")) {
		name, path, _ := strings.Cut(kv, "=")
		args = append(args, "--image", name+"="+harness.Runfile(t, path))
	}
	out, err := exec.Command(harness.Binary(t, "FNRUNNER_RELEASE"), args...).CombinedOutput()
	require.NoError(t, err, "tools/release: %s", out)

	opts := krusty.MakeDefaultOptions()
	opts.LoadRestrictions = types.LoadRestrictionsNone // runfiles are links into the tree
	m, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), overlay)
	require.NoError(t, err, "kustomize build of the release overlay")
	var objs []*unstructured.Unstructured
	for _, r := range m.Resources() {
		data, err := r.MarshalJSON()
		require.NoError(t, err)
		u := &unstructured.Unstructured{}
		require.NoError(t, u.UnmarshalJSON(data))
		objs = append(objs, u)
	}
	// Function images are looked up at the node's registry, a private
	// address, which the pod-manager reaches only when told to.
	allowed := []string{n.Registry}
	if priv != nil {
		allowed = append(allowed, priv.Host)
		objs = append(objs, secretObject("fnrunner-registry-auth", corev1.SecretTypeDockerConfigJson, corev1.DockerConfigJsonKey, priv.DockerConfigJSON()),
			secretObject("fnrunner-registry-ca", corev1.SecretTypeOpaque, "ca.crt", priv.CA))
	}
	podManagerFlags(t, objs, allowed, priv != nil, podManagerArgs)
	Apply(t, n.Kube.Client, objs)

	var workloads []string
	for _, o := range objs {
		if o.GetKind() == "Deployment" || o.GetKind() == "StatefulSet" {
			workloads = append(workloads, o.GetKind()+"/"+o.GetName())
		}
	}
	sort.Strings(workloads)
	require.NotEmpty(t, workloads)
	err = harness.Poll(4*time.Minute, time.Second, func() error {
		for _, w := range workloads {
			kind, name, _ := strings.Cut(w, "/")
			if err := ready(ctx, n.Kube.Client, kind, name); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err, "workloads not ready\n%s", PodReport(ctx, n.Kube.Client, namespace))

	// The gateway's Service, reached as porch-server would reach it but
	// from outside the node: a NodePort on the node's address, through
	// kube-proxy's rules.
	var gw corev1.Service
	require.NoError(t, n.Kube.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "fnrunner-gateway"}, &gw))
	np := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "gateway-from-test"},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: gw.Spec.Selector,
			Ports:    []corev1.ServicePort{{Name: "grpc", Port: 9445, TargetPort: intstr.FromInt32(9445)}},
		},
	}
	require.NoError(t, n.Kube.Client.Create(ctx, np))
	addr := fmt.Sprintf("%s:%d", n.NodeIP, np.Spec.Ports[0].NodePort)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn, addr
}

// podManagerFlags gives the pod-manager of objs its registries, a short
// scan interval, the private registry's flags and mounts (priv), and args.
func podManagerFlags(t testing.TB, objs []*unstructured.Unstructured, allowed []string, priv bool, extra []string) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "StatefulSet" && o.GetName() == "fnrunner-pod-manager" {
			spec, _, err := unstructured.NestedMap(o.Object, "spec", "template", "spec")
			require.NoError(t, err)
			c := spec["containers"].([]any)[0].(map[string]any)
			// --scan-interval: TTL collection looked for every 5 s,
			// not every minute, for the TTL scenario.
			args := append(c["args"].([]any), "--allowed-registries="+strings.Join(allowed, ","), "--scan-interval=5s")
			for _, a := range extra {
				args = append(args, a)
			}
			if priv {
				// porch's flags, their paths porch's defaults.
				args = append(args, "--enable-private-registries", "--enable-private-registries-tls")
				mounts, _ := c["volumeMounts"].([]any)
				c["volumeMounts"] = append(mounts,
					map[string]any{"name": "registry-auth", "mountPath": "/var/tmp/config-secret", "readOnly": true},
					map[string]any{"name": "registry-ca", "mountPath": "/var/tmp/tls-secret", "readOnly": true})
				volumes, _ := spec["volumes"].([]any)
				spec["volumes"] = append(volumes,
					map[string]any{"name": "registry-auth", "secret": map[string]any{"secretName": "fnrunner-registry-auth"}},
					map[string]any{"name": "registry-ca", "secret": map[string]any{"secretName": "fnrunner-registry-ca"}})
			}
			c["args"] = args
			require.NoError(t, unstructured.SetNestedMap(o.Object, spec, "spec", "template", "spec"))
		}
	}
}

// secretObject is a Secret in namespace with one key.
func secretObject(name string, typ corev1.SecretType, key string, value []byte) *unstructured.Unstructured {
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Type: typ, Data: map[string][]byte{key: value}}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(sec)
	if err != nil {
		panic(err) // a Secret always converts
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetAPIVersion("v1")
	u.SetKind("Secret")
	return u
}

// Apply applies objs server-side: the CRDs and the namespace first, the
// rest once the CRDs serve.
func Apply(t testing.TB, c client.Client, objs []*unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	first := func(o *unstructured.Unstructured) bool {
		return o.GetKind() == "CustomResourceDefinition" || o.GetKind() == "Namespace"
	}
	for _, pass := range []bool{true, false} {
		for _, o := range objs {
			if first(o) != pass {
				continue
			}
			err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), client.FieldOwner("fnrunner-node-test"), client.ForceOwnership)
			require.NoError(t, err, "apply %s %s", o.GetKind(), o.GetName())
		}
		if !pass {
			continue
		}
		err := harness.Poll(time.Minute, 100*time.Millisecond, func() error {
			var crds apiextensionsv1.CustomResourceDefinitionList
			if err := c.List(ctx, &crds); err != nil {
				return err
			}
			for _, crd := range crds.Items {
				established := false
				for _, cond := range crd.Status.Conditions {
					established = established || (cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue)
				}
				if !established {
					return fmt.Errorf("CRD %s not established", crd.Name)
				}
			}
			return nil
		})
		require.NoError(t, err)
	}
}

// ready says why a Deployment or StatefulSet is not ready yet.
func ready(ctx context.Context, c client.Client, kind, name string) error {
	key := client.ObjectKey{Namespace: namespace, Name: name}
	switch kind {
	case "Deployment":
		var d appsv1.Deployment
		if err := c.Get(ctx, key, &d); err != nil {
			return err
		}
		if d.Status.AvailableReplicas < 1 {
			return fmt.Errorf("deployment %s: %d available", name, d.Status.AvailableReplicas)
		}
	case "StatefulSet":
		var s appsv1.StatefulSet
		if err := c.Get(ctx, key, &s); err != nil {
			return err
		}
		if s.Status.ReadyReplicas < 1 {
			return fmt.Errorf("statefulset %s: %d ready", name, s.Status.ReadyReplicas)
		}
	}
	return nil
}

// PodReport lists the namespace's pods and their containers' states, for
// a failure message.
func PodReport(ctx context.Context, c client.Client, namespace string) string {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(namespace)); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "pod %s: %s", p.Name, p.Status.Phase)
		for _, cond := range p.Status.Conditions {
			if cond.Status != corev1.ConditionTrue {
				fmt.Fprintf(&b, " %s=%s(%s)", cond.Type, cond.Status, cond.Message)
			}
		}
		for _, cs := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, " [%s ready=%v restarts=%d", cs.Name, cs.Ready, cs.RestartCount)
			if w := cs.State.Waiting; w != nil {
				fmt.Fprintf(&b, " waiting %s: %s", w.Reason, w.Message)
			}
			if l := cs.LastTerminationState.Terminated; l != nil {
				fmt.Fprintf(&b, " last exit %d %s: %s", l.ExitCode, l.Reason, l.Message)
			}
			b.WriteString("]")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// The Kubernetes manifests in deploy/, rendered with kustomize and applied
// with server-side apply to a real kube-apiserver; and each service's RBAC,
// checked by impersonating its ServiceAccount.
package deploy_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/fnrunner/fnrunner/libs/apis/config/v1alpha1"
	"github.com/fnrunner/fnrunner/services/pod-manager/templates"
	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tests/kubetest"
	"github.com/fnrunner/fnrunner/tests/porchfiles"
)

const ns = "porch-fn-system"

// workloadPods is a Deployment's or StatefulSet's pod template.
func workloadPods(t *testing.T, o *unstructured.Unstructured) *corev1.PodTemplateSpec {
	t.Helper()
	var w struct {
		Spec struct {
			Template corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &w))
	return &w.Spec.Template
}

// render builds deploy/overlays/<overlay>. "from-porch+hardened" is the
// overlay an operator beside porch writes: from-porch in porch-fn-system
// with deploy/components/hardened (each name after a "+" a component).
func render(t *testing.T, overlay string) []*unstructured.Unstructured {
	t.Helper()
	name, components, _ := strings.Cut(overlay, "+")
	dir := harness.Source(t, filepath.Join("deploy", "overlays", name))
	if components != "" {
		top := t.TempDir()
		rel := func(p string) string {
			abs, err := filepath.Abs(p)
			require.NoError(t, err)
			r, err := filepath.Rel(top, abs)
			require.NoError(t, err)
			return r
		}
		k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: porch-fn-system\nresources:\n- " + rel(dir) + "\ncomponents:\n"
		for _, c := range strings.Split(components, "+") {
			k += "- " + rel(harness.Source(t, filepath.Join("deploy", "components", c))) + "\n"
		}
		require.NoError(t, os.WriteFile(filepath.Join(top, "kustomization.yaml"), []byte(k), 0o644))
		dir = top
	}
	opts := krusty.MakeDefaultOptions()
	// Runfiles are symlinks into the source tree.
	opts.LoadRestrictions = types.LoadRestrictionsNone
	m, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	require.NoError(t, err, "kustomize %s", overlay)
	var out []*unstructured.Unstructured
	for _, r := range m.Resources() {
		data, err := r.MarshalJSON()
		require.NoError(t, err)
		u := &unstructured.Unstructured{}
		require.NoError(t, u.UnmarshalJSON(data))
		out = append(out, u)
	}
	return out
}

func apply(t *testing.T, c client.Client, objs []*unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	// CRDs and the namespace first; the rest once the CRDs serve.
	first := func(o *unstructured.Unstructured) bool {
		return o.GetKind() == "CustomResourceDefinition" || o.GetKind() == "Namespace"
	}
	for _, pass := range []bool{true, false} {
		for _, o := range objs {
			if first(o) != pass {
				continue
			}
			err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), client.FieldOwner("fnrunner-deploy-test"), client.ForceOwnership)
			assert.NoError(t, err, "apply %s %s", o.GetKind(), o.GetName())
		}
		if pass {
			waitCRDs(t, c)
		}
	}
}

func waitCRDs(t *testing.T, c client.Client) {
	t.Helper()
	for _, name := range []string{"functionconfigs.config.porch.kpt.dev", "servicetemplates.config.porch.kpt.dev"} {
		for i := 0; ; i++ {
			var crd apiextensionsv1.CustomResourceDefinition
			if err := c.Get(context.Background(), client.ObjectKey{Name: name}, &crd); err == nil {
				established := false
				for _, cond := range crd.Status.Conditions {
					if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
						established = true
					}
				}
				if established {
					break
				}
			}
			if i == 500 {
				require.Failf(t, "CRD not established", "CRD %s not established", name)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// shippedFunctionConfigs is the number of FunctionConfigs in
// deploy/local/functionconfigs, one per entry of functions/registry.yaml
// (tools/fnregistry writes them; its test holds them to the registry).
func shippedFunctionConfigs(t *testing.T) int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(harness.Source(t, filepath.Join("deploy", "local", "functionconfigs")), "*.yaml"))
	require.NoError(t, err)
	n := 0
	for _, f := range files {
		if filepath.Base(f) != "kustomization.yaml" {
			n++
		}
	}
	require.NotZero(t, n)
	return n
}

func TestOverlaysApply(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	functionConfigs := shippedFunctionConfigs(t)
	for _, overlay := range []string{"local", "ha", "hardened"} {
		objs := render(t, overlay)
		kinds := map[string]int{}
		for _, o := range objs {
			kinds[o.GetKind()]++
		}
		for kind, want := range map[string]int{"Deployment": 3, "StatefulSet": 1, "CustomResourceDefinition": 2, "FunctionConfig": functionConfigs,
			"HorizontalPodAutoscaler": 2, "PodDisruptionBudget": 4, "Role": 2, "ServiceAccount": 4, "PodTemplate": 1, "ServiceTemplate": 1} {
			assert.Equal(t, want, kinds[kind], "%s: number of %s", overlay, kind)
		}
		apply(t, env.Client, objs)
	}

	// The shipped templates are the pod-manager's built-in defaults (as
	// rendered, before the apiserver fills in its own defaults).
	for _, o := range render(t, "local") {
		switch o.GetKind() {
		case "PodTemplate":
			var pt corev1.PodTemplate
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &pt))
			def := templates.DefaultPodTemplate(ns, "fnrunner/wrapper-server")
			// Semantic equality, as the apiserver compares quantities.
			assert.True(t, equality.Semantic.DeepEqual(def.Template.Spec, pt.Template.Spec),
				"deploy/base/templates.yaml differs from templates.DefaultPodTemplate:\nshipped %+v\ndefault %+v", pt.Template.Spec, def.Template.Spec)
		case "ServiceTemplate":
			var st v1alpha1.ServiceTemplate
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &st))
			def := templates.DefaultServiceTemplate(ns)
			assert.True(t, equality.Semantic.DeepEqual(def.Template.Spec, st.Template.Spec),
				"the shipped ServiceTemplate differs from templates.DefaultServiceTemplate:\nshipped %+v\ndefault %+v", st.Template.Spec, def.Template.Spec)
		}
	}
}

// Under the hardened overlay the namespace enforces Pod Security
// "restricted", and every pod fnrunner would run there is admitted: its
// services' pods and function pods made from the shipped template (the
// kube-apiserver's own PodSecurity admission decides; a privileged pod is
// refused, to show that it is on).
func TestHardenedPodsAreAdmittedAsRestricted(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	objs := render(t, "hardened")
	apply(t, env.Client, objs)
	ctx := context.Background()
	admit := func(name string, spec corev1.PodSpec) error {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
		return env.Client.Create(ctx, pod, client.DryRunAll)
	}
	pods := 0
	for _, o := range objs {
		var spec *corev1.PodSpec
		switch o.GetKind() {
		case "Deployment", "StatefulSet":
			spec = &workloadPods(t, o).Spec
		case "PodTemplate":
			var pt corev1.PodTemplate
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &pt))
			spec = &pt.Template.Spec
			// As the pod-manager makes a function pod from it.
			spec.Containers[0].Image = "ghcr.io/kptdev/krm-functions-catalog/set-namespace@sha256:" + strings.Repeat("a", 64)
		default:
			continue
		}
		pods++
		assert.NoError(t, admit(strings.ToLower(o.GetKind()+"-"+o.GetName()), *spec), "%s %s under Pod Security restricted", o.GetKind(), o.GetName())
	}
	assert.Equal(t, 5, pods, "pod specs checked (4 services and the function pod template)")

	privileged := corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "example.com/x:v1",
		SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}}
	err := admit("privileged", privileged)
	require.Error(t, err, "a privileged pod was admitted: Pod Security is not enforced")
	assert.True(t, apierrors.IsForbidden(err), "%v", err)
}

// Each ServiceAccount may do what its service's code does, and no more.
func TestRBACIsLeastPrivilege(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	apply(t, env.Client, render(t, "local"))
	as := func(sa string) client.Client {
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + sa}
		c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
		require.NoError(t, err)
		return c
	}
	ctx := context.Background()
	type check struct {
		what    string
		allowed bool
		do      func(c client.Client) error
	}
	list := func(gvk schema.GroupVersionKind) func(client.Client) error {
		return func(c client.Client) error {
			l := &unstructured.UnstructuredList{}
			l.SetGroupVersionKind(gvk)
			return c.List(ctx, l, client.InNamespace(ns))
		}
	}
	pods := schema.GroupVersionKind{Version: "v1", Kind: "PodList"}
	secrets := schema.GroupVersionKind{Version: "v1", Kind: "SecretList"}
	fcs := schema.GroupVersionKind{Group: "config.porch.kpt.dev", Version: "v1alpha1", Kind: "FunctionConfigList"}
	createPod := func(c client.Client) error {
		return c.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "rbac-", Namespace: ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "function", Image: "example.com/fn:v1"}}}}, client.DryRunAll)
	}
	patchStatus := func(c client.Client) error {
		var fc v1alpha1.FunctionConfig
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "set-namespace"}, &fc); err != nil {
			return err
		}
		p := client.MergeFrom(fc.DeepCopy())
		fc.Status.Error = "rbac test"
		return c.Status().Patch(ctx, &fc, p, client.DryRunAll)
	}
	dry := client.DryRunAll
	create := func(o client.Object) func(client.Client) error {
		return func(c client.Client) error { return c.Create(ctx, o.DeepCopyObject().(client.Object), dry) }
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "rbac-svc", Namespace: ns}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 9446}}}}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "rbac-secret", Namespace: ns}}
	podTemplate := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: "rbac-pt", Namespace: ns}, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "function", Image: "x"}}}}}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "rbac-lease", Namespace: ns}}
	slices := schema.GroupVersionKind{Group: "discovery.k8s.io", Version: "v1", Kind: "EndpointSliceList"}
	sts := schema.GroupVersionKind{Group: "config.porch.kpt.dev", Version: "v1alpha1", Kind: "ServiceTemplateList"}
	report := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fnrunner-runner-report-rbac", Namespace: ns,
		Labels: map[string]string{"fnrunner.dev/runner-report": "true"}}}
	getPod := func(c client.Client) error {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fnrunner-binary-runner-rbac"}, &corev1.Pod{})
		if apierrors.IsNotFound(err) {
			return nil // allowed to look
		}
		return err
	}
	reviewToken := func(c client.Client) error {
		return c.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: "x"}})
	}
	configMaps := schema.GroupVersionKind{Version: "v1", Kind: "ConfigMapList"}
	deleteFC := func(c client.Client) error {
		return c.Delete(ctx, &v1alpha1.FunctionConfig{ObjectMeta: metav1.ObjectMeta{Name: "set-namespace", Namespace: ns}}, dry)
	}
	for sa, checks := range map[string][]check{
		"fnrunner-gateway": {
			{"list pods", false, list(pods)},
			{"list functionconfigs", false, list(fcs)},
		},
		"fnrunner-binary-runner": {
			{"list pods", false, list(pods)},
			{"list secrets", false, list(secrets)},
			{"review a token", false, reviewToken},
		},
		"fnrunner-config-reconciler": {
			{"list functionconfigs", true, list(fcs)},
			{"patch functionconfig status", true, patchStatus},
			{"create a leader election lease", true, create(lease)},
			{"create a runner report", true, create(report)},
			{"list runner reports", true, list(configMaps)},
			{"get a runner's pod", true, getPod},
			{"review a runner's token", true, reviewToken},
			{"delete functionconfigs", false, deleteFC},
			{"list pods", false, list(pods)},
			{"create pods", false, createPod},
			{"list secrets", false, list(secrets)},
		},
		"fnrunner-pod-manager": {
			{"create pods", true, createPod},
			{"list pods", true, list(pods)},
			{"create services", true, create(svc)},
			{"create the pull secret", true, create(secret)},
			{"create the pod template", true, create(podTemplate)},
			{"list service templates", true, list(sts)},
			{"list endpointslices", true, list(slices)},
			{"list secrets", false, list(secrets)},
			{"list functionconfigs", false, list(fcs)},
			{"patch functionconfig status", false, patchStatus},
			{"create its lease", true, create(lease)},
		},
	} {
		c := as(sa)
		for _, ch := range checks {
			err := ch.do(c)
			if ch.allowed {
				assert.NoError(t, err, "%s cannot %s", sa, ch.what)
			} else {
				assert.True(t, apierrors.IsForbidden(err), "%s can %s (err %v), and should not", sa, ch.what, err)
			}
		}
	}
}

// The from-porch overlay beside what porch installed: it holds none of
// porch's kinds (no Namespace, CRD, FunctionConfig or template), so applying
// it (and deleting it) leaves porch's objects exactly as they were.
func TestFromPorchOverlay(t *testing.T) {
	porchfiles.Require(t)
	env := kubetest.Start(t, kubetest.Options{AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	ctx := context.Background()
	var porch []*unstructured.Unstructured
	for _, name := range []string{"config.porch.kpt.dev_functionconfigs.yaml", "config.porch.kpt.dev_servicetemplates.yaml"} {
		porch = append(porch, porchfiles.Objects(t, name)...)
	}
	for _, o := range porch {
		require.NoError(t, env.Client.Create(ctx, o), "create %s", o.GetName())
	}
	waitCRDs(t, env.Client)
	require.NoError(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	objs := append(porchfiles.Objects(t, "22-function-templates.yaml"), porchfiles.Objects(t, "23-function-configurations.yaml")...)
	for i, o := range objs {
		if o.GetKind() == "FunctionConfig" && i%2 == 0 {
			o.SetFinalizers([]string{"config.porch.kpt.dev/functionconfig-porch-server", "config.porch.kpt.dev/functionconfig-function-runner"})
		}
		require.NoError(t, env.Client.Create(ctx, o), "create %s %s", o.GetKind(), o.GetName())
	}
	porch = append(porch, objs...)
	// As they are now (the apiserver has written the CRDs' status since).
	versions := map[string]string{}
	for _, o := range porch {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(o.GroupVersionKind())
		require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(o), got))
		versions[o.GetKind()+"/"+o.GetName()] = got.GetResourceVersion()
	}

	overlay := render(t, "from-porch")
	for _, o := range overlay {
		assert.NotContains(t, []string{"Namespace", "CustomResourceDefinition", "FunctionConfig", "PodTemplate", "ServiceTemplate"}, o.GetKind(),
			"from-porch holds porch's %s %s", o.GetKind(), o.GetName())
		if o.GetKind() != "ClusterRole" && o.GetKind() != "ClusterRoleBinding" {
			assert.Equal(t, ns, o.GetNamespace(), "%s %s", o.GetKind(), o.GetName())
		}
	}
	apply(t, env.Client, overlay)
	for _, o := range porch {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(o.GroupVersionKind())
		require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(o), got))
		assert.Equal(t, versions[o.GetKind()+"/"+o.GetName()], got.GetResourceVersion(), "%s %s changed", o.GetKind(), o.GetName())
	}
	for _, o := range overlay {
		require.NoError(t, client.IgnoreNotFound(env.Client.Delete(ctx, o)), "delete %s %s", o.GetKind(), o.GetName())
	}
	for _, o := range porch {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(o.GroupVersionKind())
		assert.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(o), got), "%s %s gone with the overlay", o.GetKind(), o.GetName())
	}
}

// The mtls overlay: every service mounts a Secret that one of the overlay's
// cert-manager Certificates fills, passes it with the three --tls-* flags,
// and every address a service dials another by is a name that service's
// certificate holds (TLS verifies the dialled name).
func TestMTLSOverlay(t *testing.T) {
	for _, overlay := range []string{"mtls", "from-porch+mtls", "from-porch+hardened+mtls"} {
		// from-porch's FunctionConfig CRD is porch's, installed before
		// it (TestFromPorchOverlay applies it so).
		t.Run(overlay, func(t *testing.T) { checkMTLS(t, render(t, overlay), overlay == "mtls") })
	}
}

func checkMTLS(t *testing.T, objs []*unstructured.Unstructured, applies bool) {
	certNames := map[string][]string{} // secret → dnsNames
	var workloads []*unstructured.Unstructured
	for _, o := range objs {
		switch o.GetKind() {
		case "Certificate":
			secret, _, _ := unstructured.NestedString(o.Object, "spec", "secretName")
			names, _, _ := unstructured.NestedStringSlice(o.Object, "spec", "dnsNames")
			certNames[secret] = names
		case "Deployment", "StatefulSet":
			workloads = append(workloads, o)
		}
	}
	require.Len(t, workloads, 4, "fnrunner's workloads")
	// service name → the names its certificate holds.
	serves := map[string][]string{}
	var dialled []string
	for _, w := range workloads {
		containers, _, _ := unstructured.NestedSlice(w.Object, "spec", "template", "spec", "containers")
		require.NotEmpty(t, containers)
		c := containers[0].(map[string]any)
		args, _, _ := unstructured.NestedStringSlice(c, "args")
		for _, flag := range []string{"--tls-cert=/etc/fnrunner/tls/tls.crt", "--tls-key=/etc/fnrunner/tls/tls.key", "--tls-ca=/etc/fnrunner/tls/ca.crt"} {
			assert.Contains(t, args, flag, "%s", w.GetName())
		}
		// Kubelet's gRPC probes present no client certificate: on a
		// port that requires one (every service's but the gateway's,
		// which porch dials in plaintext) they would fail, and the pod
		// never be Ready.
		pods := workloadPods(t, w)
		probePort := fmt.Sprint(pods.Spec.Containers[0].Ports[0].ContainerPort)
		if w.GetName() != "fnrunner-gateway" {
			probePort = ""
			for _, a := range args {
				if v, ok := strings.CutPrefix(a, "--health-port="); ok {
					probePort = v
				}
			}
			require.NotEmpty(t, probePort, "%s: no --health-port for its probes", w.GetName())
		}
		for _, p := range []*corev1.Probe{pods.Spec.Containers[0].ReadinessProbe, pods.Spec.Containers[0].LivenessProbe} {
			require.NotNil(t, p, w.GetName())
			require.NotNil(t, p.GRPC, w.GetName())
			assert.Equal(t, probePort, fmt.Sprint(p.GRPC.Port), "%s: probe port", w.GetName())
		}
		for _, a := range args {
			for _, f := range []string{"--config-address=", "--binary-runner-address=", "--pod-manager-address="} {
				if v, ok := strings.CutPrefix(a, f); ok {
					dialled = append(dialled, strings.Split(v, ",")...)
				}
			}
			// The SRV record's targets: each replica's name, fully
			// qualified in the cluster's domain.
			if v, ok := strings.CutPrefix(a, "--pod-manager-srv=_grpc._tcp."); ok {
				dialled = append(dialled, v+"-0."+v+"."+ns+".svc.cluster.local:9449")
			}
		}
		volumes, _, _ := unstructured.NestedSlice(w.Object, "spec", "template", "spec", "volumes")
		secret := ""
		for _, v := range volumes {
			if name, _, _ := unstructured.NestedString(v.(map[string]any), "name"); name == "tls" {
				secret, _, _ = unstructured.NestedString(v.(map[string]any), "secret", "secretName")
			}
		}
		require.Contains(t, certNames, secret, "%s mounts %q, which no Certificate fills", w.GetName(), secret)
		serves[w.GetName()] = certNames[secret]
	}
	require.NotEmpty(t, dialled)
	for _, addr := range dialled {
		host := strings.TrimPrefix(addr, "dns:///")
		host = host[:strings.LastIndex(host, ":")]
		covered := false
		for _, names := range serves {
			for _, n := range names {
				if n == host || strings.HasPrefix(n, "*.") && strings.HasSuffix(host, n[1:]) && !strings.Contains(strings.TrimSuffix(host, n[1:]), ".") {
					covered = true
				}
			}
		}
		assert.True(t, covered, "address %s: no certificate names %s", addr, host)
	}

	if !applies {
		return
	}
	// What is not cert-manager's applies to a real apiserver.
	env := kubetest.Start(t, kubetest.Options{AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	var plain []*unstructured.Unstructured
	for _, o := range objs {
		if !strings.HasPrefix(o.GetAPIVersion(), "cert-manager.io/") {
			plain = append(plain, o)
		}
	}
	apply(t, env.Client, plain)
}

// Every fnrunner container has a memory limit, and where the service
// bounds its calls' memory (--max-in-flight-bytes for the calls running,
// --max-queue-bytes for those waiting) the limit covers both bounds and
// 256 MiB more, so admission refuses work before the kernel kills the
// container: in every overlay that runs the services (monitoring adds only
// its own objects).
func TestMemoryLimitsCoverAdmission(t *testing.T) {
	const headroom = 256 << 20
	for _, overlay := range []string{"local", "ha", "hardened", "mtls", "from-porch", "from-porch+hardened", "from-porch+mtls", "from-porch+hardened+mtls"} {
		for _, o := range render(t, overlay) {
			if o.GetKind() != "Deployment" && o.GetKind() != "StatefulSet" {
				continue
			}
			var spec corev1.PodTemplateSpec
			raw, found, err := unstructured.NestedMap(o.Object, "spec", "template")
			require.NoError(t, err)
			require.True(t, found)
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &spec))
			for _, c := range spec.Spec.Containers {
				what := fmt.Sprintf("%s: %s %s container %s", overlay, o.GetKind(), o.GetName(), c.Name)
				limit, ok := c.Resources.Limits[corev1.ResourceMemory]
				if !assert.True(t, ok, "%s has no memory limit", what) {
					continue
				}
				if req, ok := c.Resources.Requests[corev1.ResourceMemory]; ok {
					assert.LessOrEqual(t, req.Value(), limit.Value(), "%s requests more memory than its limit", what)
				}
				budgets := map[string]int64{}
				for _, arg := range c.Args {
					for _, flag := range []string{"--max-in-flight-bytes", "--max-queue-bytes"} {
						if v, ok := strings.CutPrefix(arg, flag+"="); ok {
							n, err := strconv.ParseInt(v, 10, 64)
							require.NoError(t, err, what)
							budgets[flag] = n
						}
					}
				}
				if len(budgets) > 0 {
					budget := budgets["--max-in-flight-bytes"] + budgets["--max-queue-bytes"]
					assert.GreaterOrEqual(t, limit.Value(), budget+headroom,
						"%s: memory limit %s under %v + 256 MiB", what, limit.String(), budgets)
				}
				if slices.Contains([]string{"gateway", "binary-runner", "pod-manager"}, c.Name) {
					assert.Len(t, budgets, 2, "%s: the services that admit calls by weight state their budgets (--max-in-flight-bytes=N, --max-queue-bytes=N) beside the limit", what)
				}
			}
		}
	}
}

// The switching runbook lists fnrunner's pods by label: every workload's
// pods carry app.kubernetes.io/part-of=fnrunner, its selector does not
// (a selector cannot change on an installed Deployment).
func TestPodsCarryPartOf(t *testing.T) {
	for _, overlay := range []string{"local", "ha", "hardened", "mtls", "from-porch", "from-porch+hardened", "from-porch+mtls", "from-porch+hardened+mtls"} {
		for _, o := range render(t, overlay) {
			if o.GetKind() != "Deployment" && o.GetKind() != "StatefulSet" {
				continue
			}
			what := fmt.Sprintf("%s: %s %s", overlay, o.GetKind(), o.GetName())
			assert.Equal(t, "fnrunner", workloadPods(t, o).Labels["app.kubernetes.io/part-of"], what)
			selector, _, err := unstructured.NestedStringMap(o.Object, "spec", "selector", "matchLabels")
			require.NoError(t, err, what)
			assert.NotContains(t, selector, "app.kubernetes.io/part-of", what)
		}
	}
}

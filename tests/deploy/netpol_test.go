package deploy_test

import (
	"fmt"
	"testing"

	"github.com/mattfenwick/cyclonus/pkg/matcher"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fnrunner/fnrunner/services/pod-manager/kube"
)

// The hardened overlay's NetworkPolicies, judged flow by flow by cyclonus's
// policy engine (the NetworkPolicy semantics Kubernetes' network policy
// conformance work checks CNI plugins against), with the pods' labels and
// ports as the overlay renders them: the flows fnrunner needs are allowed,
// and what function code and other tenants could try is denied. The node's
// bridge CNI does not enforce NetworkPolicies, so this is where their
// flows are checked.
func TestHardenedNetworkPolicyFlows(t *testing.T) {
	for _, overlay := range []string{"hardened", "from-porch+hardened"} {
		t.Run(overlay, func(t *testing.T) { checkFlows(t, render(t, overlay)) })
	}
}

func checkFlows(t *testing.T, objs []*unstructured.Unstructured) {
	var policies []*networkingv1.NetworkPolicy
	labels := map[string]map[string]string{} // workload → its pods' labels
	ports := map[string]map[string]int{}     // workload → port name → number
	for _, o := range objs {
		switch o.GetKind() {
		case "NetworkPolicy":
			var np networkingv1.NetworkPolicy
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &np))
			policies = append(policies, &np)
		case "Deployment", "StatefulSet":
			pods := workloadPods(t, o)
			labels[o.GetName()] = pods.Labels
			ports[o.GetName()] = map[string]int{}
			for _, p := range pods.Spec.Containers[0].Ports {
				ports[o.GetName()][p.Name] = int(p.ContainerPort)
			}
		}
	}
	require.NotEmpty(t, policies, "the hardened overlay's NetworkPolicies")
	for _, name := range []string{"fnrunner-gateway", "fnrunner-binary-runner", "fnrunner-config-reconciler", "fnrunner-pod-manager"} {
		require.Contains(t, labels, name, "workload")
		require.NotZero(t, ports[name]["grpc"], "%s: its grpc port", name)
	}
	for _, np := range policies {
		if np.Namespace == "" {
			np.Namespace = ns
		}
		assert.Equal(t, ns, np.Namespace, "NetworkPolicy %s", np.Name)
	}
	policy := matcher.BuildNetworkPolicies(false, policies)

	nsLabels := func(name string) map[string]string { return map[string]string{"kubernetes.io/metadata.name": name} }
	pod := func(namespace string, podLabels map[string]string) *matcher.TrafficPeer {
		return &matcher.TrafficPeer{Internal: &matcher.InternalPeer{Namespace: namespace, NamespaceLabels: nsLabels(namespace), PodLabels: podLabels}, IP: "10.244.0.10"}
	}
	service := func(name string) *matcher.TrafficPeer { return pod(ns, labels[name]) }
	var (
		gateway          = service("fnrunner-gateway")
		binaryRunner     = service("fnrunner-binary-runner")
		configReconciler = service("fnrunner-config-reconciler")
		podManager       = service("fnrunner-pod-manager")
		// A function pod as the pod-manager labels it.
		functionPod = pod(ns, map[string]string{kube.LabelManagedBy: kube.ManagedBy, kube.LabelOwner: "fnrunner-pod-manager-0", kube.LabelPod: "set-namespace-0a1b2c"})
		porchServer = pod("porch-system", map[string]string{"app": "porch-server"})
		prometheus  = pod("monitoring", map[string]string{"app.kubernetes.io/name": "prometheus"})
		kubeDNS     = pod("kube-system", map[string]string{"k8s-app": "kube-dns"})
		tenant      = pod("tenant", map[string]string{"app": "anything"})
		apiserver   = &matcher.TrafficPeer{IP: "10.96.0.1"}
		metadata    = &matcher.TrafficPeer{IP: "169.254.169.254"}
		internet    = &matcher.TrafficPeer{IP: "203.0.113.7"}
	)
	grpc := func(name string) int { return ports[name]["grpc"] }
	const wrapper, wrapperMetrics, otelMetrics = 9446, 9094, 9464
	for _, tc := range []struct {
		from, to string
		src, dst *matcher.TrafficPeer
		port     int
		protocol corev1.Protocol
		allowed  bool
	}{
		// What fnrunner needs.
		{"porch-server", "gateway", porchServer, gateway, grpc("fnrunner-gateway"), corev1.ProtocolTCP, true},
		{"gateway", "binary-runner", gateway, binaryRunner, grpc("fnrunner-binary-runner"), corev1.ProtocolTCP, true},
		{"gateway", "pod-manager", gateway, podManager, grpc("fnrunner-pod-manager"), corev1.ProtocolTCP, true},
		{"gateway", "config-reconciler", gateway, configReconciler, grpc("fnrunner-config-reconciler"), corev1.ProtocolTCP, true},
		{"binary-runner", "config-reconciler", binaryRunner, configReconciler, grpc("fnrunner-config-reconciler"), corev1.ProtocolTCP, true},
		{"pod-manager", "config-reconciler", podManager, configReconciler, grpc("fnrunner-config-reconciler"), corev1.ProtocolTCP, true},
		{"pod-manager", "a function pod", podManager, functionPod, wrapper, corev1.ProtocolTCP, true},
		{"pod-manager", "the apiserver", podManager, apiserver, 443, corev1.ProtocolTCP, true},
		{"pod-manager", "a registry", podManager, internet, 443, corev1.ProtocolTCP, true},
		{"config-reconciler", "the apiserver", configReconciler, apiserver, 443, corev1.ProtocolTCP, true},
		{"gateway", "cluster DNS", gateway, kubeDNS, 53, corev1.ProtocolUDP, true},
		{"pod-manager", "cluster DNS", podManager, kubeDNS, 53, corev1.ProtocolUDP, true},
		{"prometheus", "gateway's metrics", prometheus, gateway, ports["fnrunner-gateway"]["metrics"], corev1.ProtocolTCP, true},
		{"prometheus", "a function pod's metrics", prometheus, functionPod, wrapperMetrics, corev1.ProtocolTCP, true},
		{"prometheus", "gateway's metrics on porch's port", prometheus, gateway, otelMetrics, corev1.ProtocolTCP, true},
		{"prometheus", "a function pod's metrics on porch's port", prometheus, functionPod, otelMetrics, corev1.ProtocolTCP, true},
		{"another namespace's pod", "a function pod's metrics on porch's port", tenant, functionPod, otelMetrics, corev1.ProtocolTCP, false},
		// What function code could try: from a function pod, and from the
		// binary-runner's pod (its binary functions run there).
		{"a function pod", "the apiserver", functionPod, apiserver, 443, corev1.ProtocolTCP, false},
		{"a function pod", "the metadata endpoint", functionPod, metadata, 80, corev1.ProtocolTCP, false},
		{"a function pod", "the internet", functionPod, internet, 443, corev1.ProtocolTCP, false},
		{"a function pod", "gateway", functionPod, gateway, grpc("fnrunner-gateway"), corev1.ProtocolTCP, false},
		{"a function pod", "config-reconciler", functionPod, configReconciler, grpc("fnrunner-config-reconciler"), corev1.ProtocolTCP, false},
		{"a function pod", "pod-manager", functionPod, podManager, grpc("fnrunner-pod-manager"), corev1.ProtocolTCP, false},
		{"a function pod", "another function pod", functionPod, functionPod, wrapper, corev1.ProtocolTCP, false},
		{"a function pod", "cluster DNS", functionPod, kubeDNS, 53, corev1.ProtocolUDP, false},
		{"binary-runner", "the apiserver", binaryRunner, apiserver, 443, corev1.ProtocolTCP, false},
		{"binary-runner", "the metadata endpoint", binaryRunner, metadata, 80, corev1.ProtocolTCP, false},
		{"binary-runner", "the internet", binaryRunner, internet, 443, corev1.ProtocolTCP, false},
		{"binary-runner", "pod-manager", binaryRunner, podManager, grpc("fnrunner-pod-manager"), corev1.ProtocolTCP, false},
		{"binary-runner", "a function pod", binaryRunner, functionPod, wrapper, corev1.ProtocolTCP, false},
		// Other tenants and porch-server beyond the gateway.
		{"another namespace's pod", "gateway", tenant, gateway, grpc("fnrunner-gateway"), corev1.ProtocolTCP, false},
		{"another namespace's pod", "binary-runner", tenant, binaryRunner, grpc("fnrunner-binary-runner"), corev1.ProtocolTCP, false},
		{"another namespace's pod", "pod-manager", tenant, podManager, grpc("fnrunner-pod-manager"), corev1.ProtocolTCP, false},
		{"another namespace's pod", "config-reconciler", tenant, configReconciler, grpc("fnrunner-config-reconciler"), corev1.ProtocolTCP, false},
		{"another namespace's pod", "a function pod", tenant, functionPod, wrapper, corev1.ProtocolTCP, false},
		{"another namespace's pod", "gateway's metrics", tenant, gateway, ports["fnrunner-gateway"]["metrics"], corev1.ProtocolTCP, false},
		{"another namespace's pod", "binary-runner's metrics", tenant, binaryRunner, ports["fnrunner-binary-runner"]["metrics"], corev1.ProtocolTCP, false},
		{"another namespace's pod", "a function pod's metrics", tenant, functionPod, wrapperMetrics, corev1.ProtocolTCP, false},
		{"porch-server", "binary-runner", porchServer, binaryRunner, grpc("fnrunner-binary-runner"), corev1.ProtocolTCP, false},
		{"porch-server", "a function pod", porchServer, functionPod, wrapper, corev1.ProtocolTCP, false},
		{"gateway", "a function pod", gateway, functionPod, wrapper, corev1.ProtocolTCP, false},
		{"gateway", "the apiserver", gateway, apiserver, 443, corev1.ProtocolTCP, false},
	} {
		t.Run(fmt.Sprintf("%s to %s port %d", tc.from, tc.to, tc.port), func(t *testing.T) {
			require.NotZero(t, tc.port, "port")
			got := policy.IsTrafficAllowed(&matcher.Traffic{Source: tc.src, Destination: tc.dst, ResolvedPort: tc.port, Protocol: tc.protocol})
			assert.Equal(t, tc.allowed, got.IsAllowed(), "allowed (ingress %v, egress %v)", got.Ingress.IsAllowed(), got.Egress.IsAllowed())
		})
	}
}

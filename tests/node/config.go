package node

import (
	"fmt"
	"os"
	"path/filepath"
)

func (n *Node) writeContainerdConfig(root, pauseImage, sock string) error {
	certs := filepath.Join(n.dir, "certs.d", n.Registry)
	if err := os.MkdirAll(certs, 0o755); err != nil {
		return err
	}
	hosts := fmt.Sprintf("server = \"http://%[1]s\"\n\n[host.\"http://%[1]s\"]\n  capabilities = [\"pull\", \"resolve\"]\n  skip_verify = true\n", n.Registry)
	if err := os.WriteFile(filepath.Join(certs, "hosts.toml"), []byte(hosts), 0o644); err != nil {
		return err
	}
	// docker.io is mirrored by the node's registry, as an air-gapped
	// cluster mirrors it: porch's own templates name
	// docker.io/nephio/porch-wrapper-server, unchanged.
	mirror := filepath.Join(n.dir, "certs.d", "docker.io")
	if err := os.MkdirAll(mirror, 0o755); err != nil {
		return err
	}
	// The mirror is the only host: nothing is fetched from Docker Hub.
	mirrorHosts := fmt.Sprintf("server = \"http://%[1]s\"\n\n[host.\"http://%[1]s\"]\n  capabilities = [\"pull\", \"resolve\"]\n  skip_verify = true\n", n.Registry)
	if err := os.WriteFile(filepath.Join(mirror, "hosts.toml"), []byte(mirrorHosts), 0o644); err != nil {
		return err
	}
	cniConf := filepath.Join(n.dir, "cni")
	if err := os.MkdirAll(cniConf, 0o755); err != nil {
		return err
	}
	bridge := fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "fnrunner-node",
  "type": "bridge",
  "bridge": "cni0",
  "isGateway": true,
  "isDefaultGateway": true,
  "ipMasq": true,
  "hairpinMode": true,
  "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "dataDir": %q}
}
`, PodCIDR, filepath.Join(n.dir, "ipam"))
	if err := os.WriteFile(filepath.Join(cniConf, "10-bridge.conf"), []byte(bridge), 0o644); err != nil {
		return err
	}
	cfg := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.internal.v1.opt", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = %[6]q
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[7]q
    conf_dir = %[8]q
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %[9]q
`, filepath.Join(n.dir, "containerd/root"), filepath.Join(n.dir, "containerd/state"), sock, sock+".ttrpc",
		pauseImage, filepath.Join(root, "usr/sbin/runc"), filepath.Join(root, "usr/lib/cni"), cniConf, filepath.Join(n.dir, "certs.d"))
	return os.WriteFile(filepath.Join(n.dir, "containerd.toml"), []byte(cfg), 0o644)
}

// CgroupRoot is the cgroup the node's pods live under, in every hierarchy.
func (n *Node) CgroupRoot() string { return "/fnrunner-" + n.id }

func (n *Node) writeKubeletConfig(sock string) error {
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
authorization:
  mode: Webhook
cgroupDriver: cgroupfs
cgroupRoot: %[2]s
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%[3]s
imageServiceEndpoint: unix://%[3]s
clusterDomain: %[4]s
clusterDNS: [%[1]s]
resolvConf: ""
staticPodPath: ""
registerNode: true
serializeImagePulls: false
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  imagefs.available: "1%%"
  nodefs.inodesFree: "1%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
localStorageCapacityIsolation: false
protectKernelDefaults: true
volumePluginDir: %[5]s
nodeStatusUpdateFrequency: 2s
syncFrequency: 5s
fileCheckFrequency: 5s
`, n.NodeIP, n.CgroupRoot(), sock, ClusterDomain, filepath.Join(n.dir, "volume-plugins"))
	return os.WriteFile(filepath.Join(n.dir, "kubelet.yaml"), []byte(cfg), 0o644)
}

func (n *Node) writeKubeProxyConfig(kubeconfig string) error {
	cfg := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: %[1]s
hostnameOverride: %[2]s
bindAddress: %[3]s
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
clientConnection:
  kubeconfig: %[4]s
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, PodCIDR, n.Name, n.NodeIP, kubeconfig)
	return os.WriteFile(filepath.Join(n.dir, "kube-proxy.yaml"), []byte(cfg), 0o644)
}

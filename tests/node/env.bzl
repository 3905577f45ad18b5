"""tests/node's environment and runfiles, for its go_test and for
tools/bench:node (the same binary run as a benchmark)."""

load("//deploy:images.bzl", "RELEASE_IMAGES")

NODE_DATA = [
    "//:WORKSPACE",
    "//crds",
    "//deploy:manifests",
    "//deploy/local/functionconfigs",
    "//functions:set-namespace",
    "//tests/node/pause",
    "//tests/node:set_namespace_cmd_image",
    "//tests/node:set_namespace_entrypoint_image",
    "//tests/testfns/record",
    "//tools/release",
    "@busybox_package//:root/bin/busybox",
    "@envtest//:bin/etcd",
    "@envtest//:bin/kube-apiserver",
    "@node_binaries//:bin/coredns",
    "@node_binaries//:bin/kube-controller-manager",
    "@node_binaries//:bin/kube-proxy",
    "@node_binaries//:bin/kube-scheduler",
    "@node_binaries//:bin/kubelet",
    "@node_packages//:root",
    "@node_packages//:root/usr/bin/containerd",
    "@porchrender//:bin/grpc-health-probe",
    "@porchrender//:bin/wrapper-server",
] + sorted(RELEASE_IMAGES.values())

NODE_ENV = {
    "FNRUNNER_BUSYBOX": "$(rootpath @busybox_package//:root/bin/busybox)",
    "FNRUNNER_COREDNS": "$(rootpath @node_binaries//:bin/coredns)",
    "FNRUNNER_KUBELET": "$(rootpath @node_binaries//:bin/kubelet)",
    "FNRUNNER_KUBE_CONTROLLER_MANAGER": "$(rootpath @node_binaries//:bin/kube-controller-manager)",
    "FNRUNNER_KUBE_PROXY": "$(rootpath @node_binaries//:bin/kube-proxy)",
    "FNRUNNER_KUBE_SCHEDULER": "$(rootpath @node_binaries//:bin/kube-scheduler)",
    "FNRUNNER_NODE_PAUSE": "$(rootpath //tests/node/pause)",
    "FNRUNNER_NODE_SN_CMD_IMAGE": "$(rootpath //tests/node:set_namespace_cmd_image)",
    "FNRUNNER_NODE_SN_ENTRYPOINT_IMAGE": "$(rootpath //tests/node:set_namespace_entrypoint_image)",
    "FNRUNNER_NODE_ROOT": "$(rootpath @node_packages//:root/usr/bin/containerd)",
    "FNRUNNER_PORCH_GRPC_HEALTH_PROBE": "$(rootpath @porchrender//:bin/grpc-health-probe)",
    "FNRUNNER_PORCH_WRAPPER_SERVER": "$(rootpath @porchrender//:bin/wrapper-server)",
    "FNRUNNER_RECORD": "$(rootpath //tests/testfns/record)",
    "FNRUNNER_RELEASE": "$(rootpath //tools/release)",
    "FNRUNNER_SET_NAMESPACE": "$(rootpath //functions:set-namespace)",
    "FNRUNNER_WORKSPACE_FILE": "$(rootpath //:WORKSPACE)",
    "FNRUNNER_RELEASE_IMAGES": " ".join(["%s=$(rootpath %s)" % (image, label) for image, label in sorted(RELEASE_IMAGES.items())]),
    "TEST_ASSET_ETCD": "$(rootpath @envtest//:bin/etcd)",
    "TEST_ASSET_KUBE_APISERVER": "$(rootpath @envtest//:bin/kube-apiserver)",
}

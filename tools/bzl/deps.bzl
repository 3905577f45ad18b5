"""The repositories fnrunner's BUILD files refer to, declared once for both
WORKSPACE (fnrunner_dependencies) and MODULE.bazel (extensions.bzl), so every
label is the same in both."""

load(":envtest.bzl", "envtest_assets")
load(":go_repos.bzl", "go_mod_deps")
load(":host_protoc.bzl", "host_protoc")

# The Kubernetes version of the kube-apiserver tests run against.
KUBERNETES_VERSION = "v1.36.3"

def fnrunner_dependencies():
    """Declares @gomod, @com_google_protobuf and @envtest."""

    # Every module of go.mod, verified against go.sum: @gomod//<import path>:go_default_library.
    go_mod_deps(
        name = "gomod",
        go_mod = Label("//:go.mod"),
        go_sum = Label("//:go.sum"),
        # Embedded by //tools/codegen:controller-gen to stamp its version.
        public_main_libraries = ["sigs.k8s.io/controller-tools/cmd/controller-gen"],
    )

    # Debian's protoc and well-known type protos.
    host_protoc(name = "com_google_protobuf")

    # kube-apiserver and etcd for envtest, built from the Go module proxy.
    envtest_assets(
        name = "envtest",
        kubernetes_version = KUBERNETES_VERSION,
        kube_apiserver_go_mod = Label("//tools/envtest:kube-apiserver.go.mod"),
        kube_apiserver_go_sum = Label("//tools/envtest:kube-apiserver.go.sum"),
        etcd_go_mod = Label("//tools/envtest:etcd.go.mod"),
        etcd_go_sum = Label("//tools/envtest:etcd.go.sum"),
    )

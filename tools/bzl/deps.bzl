"""The repositories fnrunner's BUILD files refer to, declared once for both
WORKSPACE (fnrunner_dependencies) and MODULE.bazel (extensions.bzl), so every
label is the same in both."""

load(":envtest.bzl", "envtest_assets")
load(":go_repos.bzl", "go_mod_deps")
load(":host_file.bzl", "host_file")
load(":host_protoc.bzl", "host_protoc")
load(":porchrender.bzl", "porchrender_binary")

# The Kubernetes version of the kube-apiserver tests run against.
KUBERNETES_VERSION = "v1.36.3"

def fnrunner_dependencies():
    """Declares @gomod, @com_google_protobuf, @envtest, @porchrender and @ca_certificates."""

    # Every module of go.mod, verified against go.sum: @gomod//<import path>:go_default_library.
    go_mod_deps(
        name = "gomod",
        go_mod = Label("//:go.mod"),
        go_sum = Label("//:go.sum"),
        # Main packages embedded by our own go_binary targets (to stamp a
        # version, or to build them pure for images).
        public_main_libraries = [
            "sigs.k8s.io/controller-tools/cmd/controller-gen",
            "github.com/kptdev/krm-functions-catalog/functions/go/apply-replacements",
            "github.com/kptdev/krm-functions-catalog/functions/go/set-namespace",
        ],
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

    # porch's render path (kptops + porch's gRPC runtime), from its own module.
    porchrender_binary(
        name = "porchrender",
        go_mod = Label("//tools/porchrender:go.mod"),
        go_sum = Label("//tools/porchrender:go.sum"),
        main = Label("//tools/porchrender:main.go"),
    )

    # Debian's CA bundle, put into every image.
    host_file(
        name = "ca_certificates",
        path = "/etc/ssl/certs/ca-certificates.crt",
        file = "ca-certificates.crt",
    )

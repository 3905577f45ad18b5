"""The repositories fnrunner's BUILD files refer to, declared once for both
WORKSPACE (fnrunner_dependencies) and MODULE.bazel (extensions.bzl), so every
label is the same in both."""

load("//functions:registry.bzl", "MODULE_MAINS")
load(":envtest.bzl", "envtest_assets")
load(":gitea.bzl", "gitea_binary")
load(":go_repos.bzl", "go_mod_deps")
load(":host_file.bzl", "host_file")
load(":host_protoc.bzl", "host_protoc")
load(":module_binaries.bzl", "module_binaries")
load(":node.bzl", "node_binaries", "node_packages")
load(":porch.bzl", "porch_release")
load(":porchrender.bzl", "porchrender_binary")

# The Kubernetes version of the kube-apiserver tests run against.
KUBERNETES_VERSION = "v1.36.3"

def fnrunner_dependencies():
    """Declares @gomod, @com_google_protobuf, @envtest, @node_binaries, @node_packages, @prometheus_package, @busybox_package, @porchrender, @porch, @gitea, @upstreamfns, @linttools and @ca_certificates."""

    # Every module of go.mod, verified against go.sum: @gomod//<import path>:go_default_library.
    go_mod_deps(
        name = "gomod",
        go_mod = Label("//:go.mod"),
        go_sum = Label("//:go.sum"),
        # Main packages embedded by our own go_binary targets (to stamp a
        # version, or to build them pure for images).
        # The catalog functions' come from functions/registry.yaml.
        public_main_libraries = [
            "sigs.k8s.io/controller-tools/cmd/controller-gen",
        ] + sorted(MODULE_MAINS.values()),
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

    # tests/node's kubelet, kube-proxy, kube-scheduler and
    # kube-controller-manager: the same release as envtest's kube-apiserver.
    node_binaries(
        name = "node_binaries",
        kubernetes_version = KUBERNETES_VERSION,
        go_mod = Label("//tools/envtest:node.go.mod"),
        go_sum = Label("//tools/envtest:node.go.sum"),
        # The node's cluster DNS.
        coredns_go_mod = Label("//tools/envtest:coredns.go.mod"),
        coredns_go_sum = Label("//tools/envtest:coredns.go.sum"),
        # After kube-apiserver: the same modules at the same versions, so
        # most packages come from the build cache (tools/envtest/update.sh
        # derives node.go.mod from kube-apiserver's).
        after = ["@envtest//:version.txt"],
    )

    # tests/node's container runtime, CNI plugins and iptables: Debian 12's
    # packages, unpacked, never installed. containerd 1.6 speaks CRI v1.
    node_packages(
        name = "node_packages",
        packages = {
            "conntrack": ["1:1.4.7-1+b2", "9827d60b60c1b5673e97f34db48d9db79e9f9ef807ee998320f6dafc80711e82"],
            "containerd": ["1.6.20~ds1-1+deb12u3", "8669d264eeb0fcdb4a0b1ba436ab88ec5dafde4a66e1278ec279d830db4c2216"],
            "containernetworking-plugins": ["1.1.1+ds1-3+b5", "4cac8143474d1249b19f7b0e80b8d0daaa6dfdaa8bd514bc468d38d4a108099f"],
            "iptables": ["1.8.9-2", "2928d3ca6ca8a3dc3f423f6752822b1f3614a5ba609ff7806bcba4449ffe90e1"],
            "libip4tc2": ["1.8.9-2", "f2c48b367f9ec13f9aa577e7ccf81b371ce5d5fe22dddf9d7aa99f1e0bb7cfc4"],
            "libip6tc2": ["1.8.9-2", "be88db3dfa2fe3345ea343207f7c75345602686121e579023d021c348b9b4f4d"],
            "libmnl0": ["1.0.4-3", "4581f42e3373cb72f9ea4e88163b17873afca614a6c6f54637e95aa75983ea7c"],
            "libnetfilter-conntrack3": ["1.0.9-3", "65f1539238f60fcc85d115acd640474f45c77bfddcf402eb7d75965a783c2bc8"],
            "libnetfilter-cthelper0": ["1.0.1-1", "d083424653a438138cc88c728a6d7230fbef2a3a2fd56089958f2715247eb54c"],
            "libnetfilter-cttimeout1": ["1.0.1-1", "b2240cfc7c0b3cd483dc09767c09c6f109ffa682ca15b4783d58ab006f01c87b"],
            "libnetfilter-queue1": ["1.0.5-3", "390768d0b9895c1493ab4d716588eb4402fcfced8b2e2cbc015d04c8a1151081"],
            "libnfnetlink0": ["1.0.2-2", "ae5cbba417ea48f34c1f72c27e8146a81f20614c1296bca2cd7234c8215fddcc"],
            "libnftnl11": ["1.2.4-2", "9e619e1470a1915264e906020f3bfc046fd8458043b1342686d997b5078213af"],
            "libxtables12": ["1.8.9-2", "cb841d66950a43af4a398625313d2f3da9065299c9738538de6c2c3495857040"],
            "runc": ["1.1.5+ds1-1+deb12u1", "a00351f8c0318de0b424ecf5cd0fdb69880a89f3511cae4f6fff7de3e57881c5"],
        },
    )

    # tests/monitoring's Prometheus and promtool: Debian 12's package,
    # unpacked, never installed.
    node_packages(
        name = "prometheus_package",
        packages = {
            "prometheus": ["2.42.0+ds-5+b6", "3b0e0255b059a7696bd4a139a4a4eb24d71df067936a61ece5093559cbc7991c"],
        },
        exports = ["root/usr/bin/prometheus", "root/usr/bin/promtool"],
    )

    # The cp of porch's function-pod image (alpine's busybox there), for
    # tests/node's image of porch's wrapper-server: Debian's static busybox.
    node_packages(
        name = "busybox_package",
        packages = {
            "busybox-static": ["1:1.35.0-4+deb12u1+b1", "3d3fdbe91d4660c873e14b092c213fe81c1da6362daa236eb25d0171eb108744"],
        },
        exports = ["root/bin/busybox"],
    )

    # porch's render path (kptops + porch's gRPC runtime) and kpt's fn eval
    # over porch's client, from its own module; porch's wrapper-server and
    # grpc-health-probe from the same module.
    porchrender_binary(
        name = "porchrender",
        go_mod = Label("//tools/porchrender:go.mod"),
        go_sum = Label("//tools/porchrender:go.sum"),
        srcs = [
            Label("//tools/porchrender:eval.go"),
            Label("//tools/porchrender:main.go"),
        ],
    )

    # porch itself at the same pin, built in its own module: porch-server,
    # its function-runner and its e2e suites (//tests/porch).
    porch_release(
        name = "porch",
        pin_go_mod = Label("//tools/porchrender:go.mod"),
        pin_go_sum = Label("//tools/porchrender:go.sum"),
        patches = [
            Label("//tools/porch:patches/apiserver-request-timeout.patch"),
            Label("//tools/porch:patches/e2e-api-save-on-render-failure.patch"),
        ],
        # After porchrender: kpt and porch's own packages at the same pin.
        after = ["@porchrender//:bin/porchrender"],
    )

    # Gitea, the git server porch's e2e suites use, from its own module.
    gitea_binary(
        name = "gitea",
        go_mod = Label("//tools/gitea:go.mod"),
        go_sum = Label("//tools/gitea:go.sum"),
    )

    # Catalog releases as porch runs them, built from their own modules:
    # starlark v0.3.0 reserves 4 GiB of address space at start; apply-setters
    # v0.2.0 is what porch's suites name.
    module_binaries(
        name = "upstreamfns",
        go_mod = Label("//tools/upstreamfns:go.mod"),
        go_sum = Label("//tools/upstreamfns:go.sum"),
        tools = {
            # porch's e2e suites name it (//tests/porch).
            "apply-setters-v0.2.0": "github.com/GoogleContainerTools/kpt-functions-catalog/functions/go/apply-setters",
            "starlark-v0.3.0": "github.com/GoogleContainerTools/kpt-functions-catalog/functions/go/starlark",
        },
        what = "Catalog function binaries of releases fnrunner does not link",
        cache = "upstreamfns",
    )

    # staticcheck, pinned in its own module (it would move the root
    # module's golang.org/x/tools), for //tools/lint:vet_test.
    module_binaries(
        name = "linttools",
        go_mod = Label("//tools/lint/staticcheck:go.mod"),
        go_sum = Label("//tools/lint/staticcheck:go.sum"),
        tools = {"staticcheck": "honnef.co/go/tools/cmd/staticcheck"},
        what = "Linters",
        cache = "linttools",
    )

    # doublestar v4.0.2, which search-replace v0.2.0 is built with (the
    # root module has v4.9), answering Match for the search-replace glob
    # test (functions/search-replace/searchreplace).
    module_binaries(
        name = "doublestar402",
        go_mod = Label("//tools/doublestar402:go.mod"),
        go_sum = Label("//tools/doublestar402:go.sum"),
        srcs = {Label("//tools/doublestar402:main.go"): "match/main.go"},
        tools = {"doublestar402": "github.com/fnrunner/fnrunner/tools/doublestar402/match"},
        what = "doublestar v4.0.2's Match",
        cache = "doublestar402",
    )

    # Debian's CA bundle, put into every image.
    host_file(
        name = "ca_certificates",
        path = "/etc/ssl/certs/ca-certificates.crt",
        file = "ca-certificates.crt",
    )

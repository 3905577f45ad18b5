"""envtest_assets: kube-apiserver and etcd for controller-runtime's envtest,
built from source through the Go module proxy (no downloads from Google
storage or GitHub).

Each binary is built from a small wrapper module whose go.mod and go.sum are
checked in under tools/envtest/; `go build -mod=readonly` verifies every module
against that go.sum. The binaries are built once per machine into the fnrunner
cache (keyed by the wrapper modules and the Go version) and copied into the
repository, so a fresh clone or a new output base reuses them.
"""

load(":go_repos.bzl", "ENV_PASSTHROUGH", "execute", "fnrunner_cache_dir", "go_env", "host_go", "sha256_of", "verified_download")

def _build(rctx, name, go_mod, go_sum, pkg, ldflags, out):
    work = "_work_" + name
    rctx.file(work + "/go.mod", go_mod)
    rctx.file(work + "/go.sum", go_sum)
    verified_download(rctx, work, go_sum)
    rctx.report_progress("building %s (once per machine; several minutes on 2 cores)" % name)
    execute(
        rctx,
        [host_go(rctx), "build", "-trimpath", "-ldflags=" + ldflags, "-o", out, pkg],
        "build " + name,
        working_directory = work,
        environment = go_env(rctx),
        timeout = 3600,
    )
    rctx.delete(work)

def _version_ldflags(version):
    minor = version.split(".")[1]
    flags = ["-s", "-w"]
    for p in ["k8s.io/component-base/version", "k8s.io/client-go/pkg/version"]:
        flags += [
            "-X %s.gitVersion=%s" % (p, version),
            "-X %s.gitMajor=1" % p,
            "-X %s.gitMinor=%s" % (p, minor),
            "-X %s.gitTreeState=clean" % p,
            "-X %s.buildDate=1970-01-01T00:00:00Z" % p,
        ]
    return " ".join(flags)

def _envtest_assets_impl(rctx):
    api_mod = rctx.read(rctx.attr.kube_apiserver_go_mod)
    api_sum = rctx.read(rctx.attr.kube_apiserver_go_sum)
    etcd_mod = rctx.read(rctx.attr.etcd_go_mod)
    etcd_sum = rctx.read(rctx.attr.etcd_go_sum)
    goversion = execute(rctx, [host_go(rctx), "env", "GOVERSION"], "go env GOVERSION").stdout.strip()
    key = sha256_of(rctx, [api_mod, api_sum, etcd_mod, etcd_sum, goversion, rctx.attr.kubernetes_version])
    cached = "%s/envtest/k8s-%s-%s" % (fnrunner_cache_dir(rctx), rctx.attr.kubernetes_version, key)

    if not rctx.path(cached + "/.built").exists:
        tmp = cached + ".tmp"
        execute(rctx, ["rm", "-rf", tmp], "clean")
        execute(rctx, ["mkdir", "-p", tmp], "mkdir")
        _build(
            rctx,
            "etcd",
            etcd_mod,
            etcd_sum,
            "go.etcd.io/etcd/server/v3",
            "-s -w",
            tmp + "/etcd",
        )
        _build(
            rctx,
            "kube-apiserver",
            api_mod,
            api_sum,
            "k8s.io/kubernetes/cmd/kube-apiserver",
            _version_ldflags(rctx.attr.kubernetes_version),
            tmp + "/kube-apiserver",
        )
        execute(rctx, ["touch", tmp + "/.built"], "stamp")
        res = rctx.execute(["mv", "-T", tmp, cached])
        if res.return_code != 0:
            execute(rctx, ["rm", "-rf", tmp], "clean")

    # Copies, not links: the test data must not change under Bazel if the cache is cleaned.
    execute(rctx, ["mkdir", "-p", "bin"], "mkdir bin")
    for b in ["etcd", "kube-apiserver"]:
        execute(rctx, ["cp", cached + "/" + b, "bin/" + b], "copy " + b)
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    rctx.file("BUILD.bazel", """package(default_visibility = ["//visibility:public"])

# The binaries controller-runtime's envtest starts. Point KUBEBUILDER_ASSETS at
# the directory holding them (tests/kubetest does this from Bazel runfiles).
exports_files(["bin/etcd", "bin/kube-apiserver"])

filegroup(
    name = "bin",
    srcs = ["bin/etcd", "bin/kube-apiserver"],
)
""")
    rctx.file("version.txt", "kube-apiserver %s\n" % rctx.attr.kubernetes_version)

envtest_assets = repository_rule(
    implementation = _envtest_assets_impl,
    doc = "kube-apiserver and etcd for envtest, built from the Go module proxy and cached per machine.",
    attrs = {
        "kubernetes_version": attr.string(mandatory = True),
        "kube_apiserver_go_mod": attr.label(mandatory = True, allow_single_file = True),
        "kube_apiserver_go_sum": attr.label(mandatory = True, allow_single_file = True),
        "etcd_go_mod": attr.label(mandatory = True, allow_single_file = True),
        "etcd_go_sum": attr.label(mandatory = True, allow_single_file = True),
    },
    environ = ENV_PASSTHROUGH,
)

"""The parts of tests/node's real node that are not ours.

node_binaries: kubelet, kube-proxy, kube-scheduler and kube-controller-manager
built from the Go module proxy, from the same Kubernetes release as envtest's
kube-apiserver (the wrapper module tools/envtest/node.go.mod and node.go.sum;
`go build -mod=readonly` checks every module against that go.sum), and
CoreDNS, the node's cluster DNS (tools/envtest/coredns.go.mod and .go.sum).
Built once per machine into the fnrunner cache (about 15 minutes on 2
cores), keyed by the module files and the Go version.

node_packages: Debian's containerd, runc, CNI plugins, iptables and conntrack
(and the libraries iptables needs), fetched with `apt-get download` at pinned
versions, checked against pinned sha256 sums and unpacked with `dpkg -x` into
the fnrunner cache: never installed, so no service starts and a developer's
own container runtime is left alone.
"""

load(":go_repos.bzl", "AFTER_ATTR", "ENV_PASSTHROUGH", "execute", "fnrunner_cache_dir", "go_env", "host_go", "sha256_of", "verified_download")

_COMMANDS = ["kubelet", "kube-proxy", "kube-scheduler", "kube-controller-manager"]

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

def _node_binaries_impl(rctx):
    go_mod = rctx.read(rctx.attr.go_mod)
    go_sum = rctx.read(rctx.attr.go_sum)
    coredns_mod = rctx.read(rctx.attr.coredns_go_mod)
    coredns_sum = rctx.read(rctx.attr.coredns_go_sum)
    goversion = execute(rctx, [host_go(rctx), "env", "GOVERSION"], "go env GOVERSION").stdout.strip()
    key = sha256_of(rctx, [go_mod, go_sum, coredns_mod, coredns_sum, goversion, rctx.attr.kubernetes_version])
    cached = "%s/node/k8s-%s-%s" % (fnrunner_cache_dir(rctx), rctx.attr.kubernetes_version, key)
    if not rctx.path(cached + "/.built").exists:
        work = "_work"
        rctx.file(work + "/go.mod", go_mod)
        rctx.file(work + "/go.sum", go_sum)
        verified_download(rctx, work, go_sum)
        tmp = cached + ".tmp"
        execute(rctx, ["rm", "-rf", tmp], "clean")
        execute(rctx, ["mkdir", "-p", tmp], "mkdir")
        for cmd in _COMMANDS:
            rctx.report_progress("building %s (once per machine; minutes on 2 cores)" % cmd)
            execute(
                rctx,
                [host_go(rctx), "build", "-trimpath", "-ldflags=" + _version_ldflags(rctx.attr.kubernetes_version), "-o", tmp + "/" + cmd, "k8s.io/kubernetes/cmd/" + cmd],
                "build " + cmd,
                working_directory = work,
                environment = go_env(rctx),
                timeout = 3600,
            )
        rctx.delete(work)
        work = "_work_coredns"
        rctx.file(work + "/go.mod", coredns_mod)
        rctx.file(work + "/go.sum", coredns_sum)
        verified_download(rctx, work, coredns_sum)
        rctx.report_progress("building coredns (once per machine; minutes on 2 cores)")
        execute(
            rctx,
            [host_go(rctx), "build", "-trimpath", "-ldflags=-s -w", "-o", tmp + "/coredns", "github.com/coredns/coredns"],
            "build coredns",
            working_directory = work,
            environment = go_env(rctx),
            timeout = 3600,
        )
        rctx.delete(work)
        execute(rctx, ["touch", tmp + "/.built"], "stamp")
        res = rctx.execute(["mv", "-T", tmp, cached])
        if res.return_code != 0:
            execute(rctx, ["rm", "-rf", tmp], "clean")

    # Copies, not links: the test data must not change under Bazel if the cache is cleaned.
    execute(rctx, ["mkdir", "-p", "bin"], "mkdir bin")
    for cmd in _COMMANDS + ["coredns"]:
        execute(rctx, ["cp", cached + "/" + cmd, "bin/" + cmd], "copy " + cmd)
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    rctx.file("BUILD.bazel", """package(default_visibility = ["//visibility:public"])

# kubelet, kube-proxy, kube-scheduler and kube-controller-manager %s; coredns.
exports_files([%s])
""" % (rctx.attr.kubernetes_version, ", ".join(['"bin/%s"' % c for c in _COMMANDS + ["coredns"]])))

node_binaries = repository_rule(
    implementation = _node_binaries_impl,
    doc = "kubelet, kube-proxy, kube-scheduler, kube-controller-manager and coredns built from the Go module proxy, cached per machine.",
    attrs = {
        "kubernetes_version": attr.string(mandatory = True),
        "go_mod": attr.label(mandatory = True, allow_single_file = True),
        "go_sum": attr.label(mandatory = True, allow_single_file = True),
        "coredns_go_mod": attr.label(mandatory = True, allow_single_file = True),
        "coredns_go_sum": attr.label(mandatory = True, allow_single_file = True),
        "after": AFTER_ATTR,
    },
    environ = ENV_PASSTHROUGH,
)

def _node_packages_impl(rctx):
    pins = sorted(["%s=%s %s" % (p, v[0], v[1]) for p, v in rctx.attr.packages.items()])
    key = sha256_of(rctx, pins)
    cached = "%s/node/debs-%s" % (fnrunner_cache_dir(rctx), key)
    if not rctx.path(cached + "/.built").exists:
        tmp = cached + ".tmp"
        execute(rctx, ["rm", "-rf", tmp], "clean")
        execute(rctx, ["mkdir", "-p", tmp + "/debs", tmp + "/root"], "mkdir")
        wanted = ["%s=%s" % (p, v[0]) for p, v in sorted(rctx.attr.packages.items())]
        rctx.report_progress("downloading Debian packages: " + " ".join(wanted))
        res = rctx.execute(["apt-get", "download", "-q"] + wanted, working_directory = tmp + "/debs", timeout = 600)
        if res.return_code != 0:
            # A machine whose package lists were never fetched.
            execute(rctx, ["apt-get", "update", "-q"], "apt-get update", timeout = 600)
            execute(rctx, ["apt-get", "download", "-q"] + wanted, "apt-get download (the pinned versions in tools/bzl/deps.bzl may have left the archive: update them)", working_directory = tmp + "/debs", timeout = 600)
        for p, v in sorted(rctx.attr.packages.items()):
            res = execute(rctx, ["sh", "-c", "ls %s_*.deb" % p], "find %s's .deb" % p, working_directory = tmp + "/debs")
            deb = res.stdout.strip()
            got = execute(rctx, ["sha256sum", deb], "sha256sum", working_directory = tmp + "/debs").stdout.split(" ")[0]
            if got != v[1]:
                fail("%s %s: sha256 %s, pinned %s" % (p, v[0], got, v[1]))
            execute(rctx, ["dpkg-deb", "-x", deb, tmp + "/root"], "dpkg-deb -x " + deb, working_directory = tmp + "/debs")
        execute(rctx, ["rm", "-rf", tmp + "/debs"], "clean")
        execute(rctx, ["touch", tmp + "/.built"], "stamp")
        res = rctx.execute(["mv", "-T", tmp, cached])
        if res.return_code != 0:
            execute(rctx, ["rm", "-rf", tmp], "clean")

    # A copy, as for the binaries.
    execute(rctx, ["cp", "-a", cached + "/root", "root"], "copy the packages")
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    rctx.file("BUILD.bazel", """package(default_visibility = ["//visibility:public"])

# Debian's packages unpacked (dpkg -x): %s
filegroup(
    name = "root",
    srcs = glob(["root/**"]),
)

# Files whose paths name the unpacked root for the tests that use it.
exports_files(%s)
""" % (", ".join(["%s %s" % (p, v[0]) for p, v in sorted(rctx.attr.packages.items())]), repr(rctx.attr.exports)))

node_packages = repository_rule(
    implementation = _node_packages_impl,
    doc = "Debian packages fetched at pinned versions and sha256 sums and unpacked, never installed.",
    attrs = {
        "packages": attr.string_list_dict(mandatory = True, doc = "package → [version, sha256]"),
        "exports": attr.string_list(default = ["root/usr/bin/containerd"], doc = "files under root/ exported, e.g. a binary whose path names the root"),
    },
    environ = ENV_PASSTHROUGH,
)

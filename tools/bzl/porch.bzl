"""porch_release: porch itself, as porch builds it, for //tests/porch.

porch-server, porch's function-runner and the test binaries of porch's
end-to-end suites test/e2e/api and test/e2e/fn_runner, built in porch's own
module from its source zip with its own go.mod and go.sum, at the one porch
version the repository pins: tools/porchrender/go.mod's (its go.sum's hash
checks the zip). Porch's go.mod is changed in two ways, both checked in
under tools/porch/ and explained there:

  - github.com/kptdev/kpt v1.0.0-beta.61.1 is replaced by v1.0.0-beta.61,
    as in tools/porchrender (the proxy refuses beta.61.1); its hashes come
    from tools/porchrender/go.sum.
  - porch's go.mod points k8s.io/apiserver at a nested module the zip does
    not carry (third_party/k8s.io/apiserver-v0.34.1): it is made here from
    upstream v0.34.1, checked against tools/porchrender/go.sum, with the one change
    porch's third_party/README.md describes (patches/apiserver-request-timeout.patch).

and one test file is patched (patches/e2e-api-save-on-render-failure.patch):
test/e2e/api names a constant only beta.61.1 has. The whole source tree is
exported as src/ beside the binaries: the suites read their test data and
the Gitea bundle from it, and porch's CRDs are applied from it.

Built once per machine into the fnrunner cache, keyed by the pins, the
patches and the Go version.
"""

load(":go_repos.bzl", "AFTER_ATTR", "ENV_PASSTHROUGH", "execute", "fnrunner_cache_dir", "go_env", "host_go", "sha256_of", "verified_download")

PORCH = "github.com/nephio-project/porch"
KPT = "github.com/kptdev/kpt"
APISERVER = "k8s.io/apiserver"

# What porch's go.mod names, and what this build gives instead.
_KPT_FROM = "v1.0.0-beta.61.1"
_KPT_TO = "v1.0.0-beta.61"
_APISERVER_VERSION = "v0.34.1"
_APISERVER_DIR = "third_party/k8s.io/apiserver-v0.34.1"

# out name → (go build or go test -c, package)
_BINARIES = {
    "porch-server": ("build", "./cmd/porch"),
    "function-runner": ("build", "./func/server"),
    "e2e-api.test": ("test", "./test/e2e/api"),
    "e2e-fn-runner.test": ("test", "./test/e2e/fn_runner"),
}

def _required_version(go_mod, path):
    for line in go_mod.splitlines():
        f = line.strip().split(" ")
        if len(f) >= 2 and f[0] == path:
            return f[1]
        if len(f) >= 3 and f[0] == "require" and f[1] == path:
            return f[2]
    fail("%s is not required in tools/porchrender/go.mod" % path)

def _sum_lines(go_sum, path, version):
    lines = [line for line in go_sum.splitlines() if line.startswith("%s %s " % (path, version)) or line.startswith("%s %s/go.mod " % (path, version))]
    if len(lines) != 2:
        fail("tools/porchrender/go.sum has no hashes for %s@%s" % (path, version))
    return lines

def _porch_release_impl(rctx):
    pin_mod = rctx.read(rctx.attr.pin_go_mod)
    pin_sum = rctx.read(rctx.attr.pin_go_sum)
    version = _required_version(pin_mod, PORCH)
    kpt_sums = _sum_lines(pin_sum, KPT, _KPT_TO)
    patches = {p.name: rctx.read(p) for p in rctx.attr.patches}
    goversion = execute(rctx, [host_go(rctx), "env", "GOVERSION"], "go env GOVERSION").stdout.strip()
    key = sha256_of(rctx, [version] + _sum_lines(pin_sum, PORCH, version) + kpt_sums + [n + "\n" + patches[n] for n in sorted(patches)] + [goversion] + ["%s=%s %s" % (o, _BINARIES[o][0], _BINARIES[o][1]) for o in sorted(_BINARIES)])
    cached = "%s/porch/%s" % (fnrunner_cache_dir(rctx), key)
    if not rctx.path(cached + "/.built").exists:
        # porch's zip, checked against the pin's go.sum.
        rctx.file("_pin/go.mod", pin_mod)
        rctx.file("_pin/go.sum", pin_sum)
        mods = verified_download(rctx, "_pin", pin_sum)
        porch = [m for m in mods if m["Path"] == PORCH]
        if len(porch) != 1:
            fail("tools/porchrender/go.mod does not bring %s" % PORCH)
        rctx.delete("_pin")
        execute(rctx, ["rm", "-rf", "src", "bin"], "clean")
        execute(rctx, ["cp", "-R", porch[0]["Dir"], "src"], "copy porch")
        execute(rctx, ["chmod", "-R", "u+w", "src"], "chmod")
        env = go_env(rctx)

        # kpt: the version the proxy serves.
        execute(rctx, [host_go(rctx), "mod", "edit", "-replace=%s@%s=%s@%s" % (KPT, _KPT_FROM, KPT, _KPT_TO)], "go mod edit", working_directory = "src", environment = env)
        go_sum = rctx.read("src/go.sum")
        rctx.file("src/go.sum", go_sum + "\n".join(kpt_sums) + "\n")

        # k8s.io/apiserver: upstream (porch's go.sum has no hash for it: tools/porchrender's has), patched as porch's is.
        want = _sum_lines(pin_sum, APISERVER, _APISERVER_VERSION)[0].split(" ")[2]
        rctx.file("_apiserver/go.mod", "module fetch\n")
        res = execute(rctx, [host_go(rctx), "mod", "download", "-json", "%s@%s" % (APISERVER, _APISERVER_VERSION)], "go mod download " + APISERVER, working_directory = "_apiserver", environment = env, timeout = 600)
        api = json.decode(res.stdout)
        if api.get("Sum") != want:
            fail("checksum mismatch for %s@%s: tools/porchrender/go.sum has %s, the proxy served %s" % (APISERVER, _APISERVER_VERSION, want, api.get("Sum")))
        rctx.delete("_apiserver")
        execute(rctx, ["mkdir", "-p", "src/third_party/k8s.io"], "mkdir")
        execute(rctx, ["cp", "-R", api["Dir"], "src/" + _APISERVER_DIR], "copy apiserver")
        execute(rctx, ["chmod", "-R", "u+w", "src/third_party"], "chmod")
        for p in rctx.attr.patches:
            _patch_in(rctx, "src", p)

        rctx.report_progress("building porch %s: porch-server, function-runner, e2e suites (once per machine, minutes on 2 cores)" % version)
        for out in sorted(_BINARIES):
            verb, pkg = _BINARIES[out]
            args = [host_go(rctx), verb] + (["-c"] if verb == "test" else []) + ["-trimpath", "-ldflags=-s -w", "-o", "../bin/" + out, pkg]
            execute(rctx, args, "build " + out, working_directory = "src", environment = env, timeout = 3600)
        tmp = cached + ".tmp"
        execute(rctx, ["rm", "-rf", tmp], "clean")
        execute(rctx, ["mkdir", "-p", tmp], "mkdir")
        execute(rctx, ["cp", "-R", "src", "bin", tmp + "/"], "cache")
        execute(rctx, ["touch", tmp + "/.built"], "stamp")
        res = rctx.execute(["mv", "-T", tmp, cached])
        if res.return_code != 0:
            execute(rctx, ["rm", "-rf", tmp], "clean")
    else:
        # Copies, not links: the test data must not change under Bazel if the cache is cleaned.
        execute(rctx, ["rm", "-rf", "src", "bin"], "clean")
        execute(rctx, ["cp", "-R", cached + "/src", cached + "/bin", "."], "copy from the cache")
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    rctx.file("BUILD.bazel", """package(default_visibility = ["//visibility:public"])

# porch %s: its server, its function-runner and its e2e suites' test binaries.
exports_files(%s)

# porch's source as built (patched): the suites' data, porch's CRDs and manifests.
filegroup(
    name = "src",
    srcs = glob(["src/**"], exclude = ["src/**/*.go"]),
)

# The version, for the test logs and the bench table.
genrule(
    name = "version",
    outs = ["version.txt"],
    cmd = "echo %s > $@",
)
""" % (version, repr(["bin/" + o for o in sorted(_BINARIES)]), version))

def _patch_in(rctx, root, patch):
    # rctx.patch applies relative to the repository root; the patches name
    # paths inside porch's tree.
    text = rctx.read(patch)
    rctx.file("_p/" + patch.name, text.replace("--- a/", "--- a/%s/" % root).replace("+++ b/", "+++ b/%s/" % root))
    rctx.patch("_p/" + patch.name, strip = 1)
    rctx.delete("_p")

porch_release = repository_rule(
    implementation = _porch_release_impl,
    doc = "porch-server, porch's function-runner and porch's e2e test binaries at the pinned porch version, built in porch's own module.",
    attrs = {
        "pin_go_mod": attr.label(mandatory = True, allow_single_file = True, doc = "tools/porchrender/go.mod: the porch pin."),
        "pin_go_sum": attr.label(mandatory = True, allow_single_file = True, doc = "tools/porchrender/go.sum: porch's and kpt's hashes."),
        "patches": attr.label_list(allow_files = [".patch"], doc = "Patches to porch's tree (strip 1)."),
        "after": AFTER_ATTR,
    },
    environ = ENV_PASSTHROUGH,
)

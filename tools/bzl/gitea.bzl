"""gitea_binary: Gitea, built from tools/gitea's wrapper module through the
Go module proxy, for porch's e2e suites (//tests/porch).

As porch's image has it: sqlite (cgo, build tags sqlite and
sqlite_unlock_notify), no bindata (that needs a front-end build): Gitea
reads options/ and templates/ from STATIC_ROOT_PATH at run time, so the
module's copies are exported beside the binary. `go build -mod=readonly`
checks every module against the checked-in go.sum. Built once per machine
into the fnrunner cache, keyed by the module's files and the Go version.
"""

load(":go_repos.bzl", "ENV_PASSTHROUGH", "execute", "fnrunner_cache_dir", "go_env", "host_go", "sha256_of")

GITEA = "code.gitea.io/gitea"
_TAGS = "sqlite sqlite_unlock_notify"

def _gitea_binary_impl(rctx):
    files = {"go.mod": rctx.read(rctx.attr.go_mod), "go.sum": rctx.read(rctx.attr.go_sum)}
    version = None
    for line in files["go.mod"].splitlines():
        f = line.strip().split(" ")
        if len(f) == 3 and f[0] == "require" and f[1] == GITEA:
            version = f[2]
    if not version:
        fail("tools/gitea/go.mod must require %s on one line" % GITEA)
    goversion = execute(rctx, [host_go(rctx), "env", "GOVERSION"], "go env GOVERSION").stdout.strip()
    key = sha256_of(rctx, [name + "\n" + files[name] for name in sorted(files)] + [goversion, _TAGS])
    cached = "%s/gitea/%s" % (fnrunner_cache_dir(rctx), key)
    env = go_env(rctx, {"CGO_ENABLED": "1"})
    if not rctx.path(cached + "/.built").exists:
        work = "_work"
        for name, text in files.items():
            rctx.file(work + "/" + name, text)
        res = execute(rctx, [host_go(rctx), "mod", "download", "-json", GITEA], "go mod download " + GITEA, working_directory = work, environment = env, timeout = 1800)
        src = json.decode(res.stdout)["Dir"]
        rctx.report_progress("building Gitea %s (once per machine, minutes on 2 cores)" % version)
        tmp = cached + ".tmp"
        execute(rctx, ["rm", "-rf", tmp], "clean")
        execute(rctx, ["mkdir", "-p", tmp + "/bin", tmp + "/static"], "mkdir")
        execute(
            rctx,
            [host_go(rctx), "build", "-trimpath", "-tags", _TAGS, "-ldflags=-s -w -X main.Version=" + version.lstrip("v"), "-o", tmp + "/bin/gitea", GITEA],
            "build gitea",
            working_directory = work,
            environment = env,
            timeout = 3600,
        )
        execute(rctx, ["cp", "-R", src + "/options", src + "/templates", tmp + "/static/"], "copy options and templates")
        execute(rctx, ["chmod", "-R", "u+w", tmp + "/static"], "chmod")
        execute(rctx, ["touch", tmp + "/.built"], "stamp")
        res = rctx.execute(["mv", "-T", tmp, cached])
        if res.return_code != 0:
            execute(rctx, ["rm", "-rf", tmp], "clean")
        rctx.delete(work)

    # Copies, not links: the test data must not change under Bazel if the cache is cleaned.
    execute(rctx, ["cp", "-R", cached + "/bin", cached + "/static", "."], "copy from the cache")
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    rctx.file("BUILD.bazel", """package(default_visibility = ["//visibility:public"])

# Gitea %s with sqlite; static/ is its STATIC_ROOT_PATH (options, templates):
# a test finds it from the one file named here.
exports_files(["bin/gitea", "static/options/readme/Default"])

filegroup(
    name = "static",
    srcs = glob(["static/**"]),
)
""" % version)

gitea_binary = repository_rule(
    implementation = _gitea_binary_impl,
    doc = "Gitea from tools/gitea's module, with sqlite, and its options and templates.",
    attrs = {
        "go_mod": attr.label(mandatory = True, allow_single_file = True),
        "go_sum": attr.label(mandatory = True, allow_single_file = True),
    },
    environ = ENV_PASSTHROUGH,
)

"""module_binaries: binaries built from a Go module of their own, kept out of
the root go.mod: catalog function releases fnrunner does not link
(tools/upstreamfns, as porch's runner runs them), the linters
(tools/lint/staticcheck), and test oracles built on a release of a library
the root module has at another version (tools/doublestar402).

Each such directory is a Go module with one tool line per binary; its go.mod
and go.sum are checked in and `go build -mod=readonly` verifies every module
against that go.sum. Each binary is built once per machine into the fnrunner
cache, keyed by the module's files and the Go version. The repository also
carries go_env.sh: the fnrunner cache's module and build caches, for a test
that runs the go command over the root module offline (the lint test).
"""

load(":go_repos.bzl", "ENV_PASSTHROUGH", "execute", "fnrunner_cache_dir", "go_env", "host_go", "sha256_of", "verified_download")

def _module_binaries_impl(rctx):
    files = {"go.mod": rctx.read(rctx.attr.go_mod), "go.sum": rctx.read(rctx.attr.go_sum)}
    for label, name in rctx.attr.srcs.items():
        files[name] = rctx.read(label)
    goversion = execute(rctx, [host_go(rctx), "env", "GOVERSION"], "go env GOVERSION").stdout.strip()
    tools = rctx.attr.tools
    key = sha256_of(rctx, [name + "\n" + files[name] for name in sorted(files)] + [goversion] + ["%s=%s" % (out, tools[out]) for out in sorted(tools)])
    cached = "%s/%s/%s" % (fnrunner_cache_dir(rctx), rctx.attr.cache, key)
    if not rctx.path(cached + "/.built").exists:
        work = "_work"
        for name, text in files.items():
            rctx.file(work + "/" + name, text)
        if "tools.go" not in files:
            rctx.file(work + "/tools.go", "package tools\n")
        verified_download(rctx, work, files["go.sum"])
        rctx.report_progress("building %s (once per machine)" % rctx.attr.what)
        tmp = cached + ".tmp"
        execute(rctx, ["rm", "-rf", tmp], "clean")
        execute(rctx, ["mkdir", "-p", tmp], "mkdir")
        for out in sorted(tools):
            execute(
                rctx,
                [host_go(rctx), "build", "-trimpath", "-ldflags=-s -w", "-o", tmp + "/" + out, tools[out]],
                "build " + out,
                working_directory = work,
                environment = go_env(rctx),
                timeout = 3600,
            )
        execute(rctx, ["touch", tmp + "/.built"], "stamp")
        res = rctx.execute(["mv", "-T", tmp, cached])
        if res.return_code != 0:
            execute(rctx, ["rm", "-rf", tmp], "clean")
        rctx.delete(work)

    # A copy, not a link: the test data must not change under Bazel if the cache is cleaned.
    execute(rctx, ["mkdir", "-p", "bin"], "mkdir bin")
    for out in sorted(tools):
        execute(rctx, ["cp", cached + "/" + out, "bin/" + out], "copy " + out)
    env = go_env(rctx)
    rctx.file("go_env.sh", "".join(["export %s='%s'\n" % (k, env[k]) for k in ["GOMODCACHE", "GOCACHE", "GOFLAGS", "GOSUMDB", "GOTOOLCHAIN", "GOWORK", "CGO_ENABLED"]]) + "export GOPROXY=off\n")
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    rctx.file("BUILD.bazel", """package(default_visibility = ["//visibility:public"])

# %s, built from their own module.
exports_files(%s)
""" % (rctx.attr.what, repr(["go_env.sh"] + ["bin/" + out for out in sorted(tools)])))

module_binaries = repository_rule(
    implementation = _module_binaries_impl,
    doc = "Binaries built from a Go module of their own (go.mod's tool lines) through the Go module proxy, cached per machine.",
    attrs = {
        "go_mod": attr.label(mandatory = True, allow_single_file = True),
        "go_sum": attr.label(mandatory = True, allow_single_file = True),
        "tools": attr.string_dict(mandatory = True, doc = "Output name to main package: one of go.mod's tool lines, or a package of srcs."),
        "srcs": attr.label_keyed_string_dict(allow_files = True, doc = "Go files of the module's own, each to its path in the module."),
        "what": attr.string(mandatory = True, doc = "What the binaries are, for progress and the BUILD file."),
        "cache": attr.string(mandatory = True, doc = "The directory of the fnrunner cache the builds are kept in."),
    },
    environ = ENV_PASSTHROUGH,
)

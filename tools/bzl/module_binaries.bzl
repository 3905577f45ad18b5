"""upstream_functions: catalog function binaries of releases fnrunner does not
link, built from their own modules as porch's runner runs them.

tools/upstreamfns is a Go module with one tool line per function; its go.mod
and go.sum are checked in and `go build -mod=readonly` verifies every module
against that go.sum. Each binary is built once per machine into the fnrunner
cache, keyed by the module's files and the Go version.
"""

load(":go_repos.bzl", "ENV_PASSTHROUGH", "execute", "fnrunner_cache_dir", "go_env", "host_go", "sha256_of", "verified_download")

def _upstream_functions_impl(rctx):
    files = {"go.mod": rctx.read(rctx.attr.go_mod), "go.sum": rctx.read(rctx.attr.go_sum)}
    goversion = execute(rctx, [host_go(rctx), "env", "GOVERSION"], "go env GOVERSION").stdout.strip()
    tools = rctx.attr.tools
    key = sha256_of(rctx, [name + "\n" + files[name] for name in sorted(files)] + [goversion] + ["%s=%s" % (out, tools[out]) for out in sorted(tools)])
    cached = "%s/upstreamfns/%s" % (fnrunner_cache_dir(rctx), key)
    if not rctx.path(cached + "/.built").exists:
        work = "_work"
        for name, text in files.items():
            rctx.file(work + "/" + name, text)
        rctx.file(work + "/tools.go", "package tools\n")
        verified_download(rctx, work, files["go.sum"])
        rctx.report_progress("building upstream catalog functions (once per machine)")
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
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    rctx.file("BUILD.bazel", """package(default_visibility = ["//visibility:public"])

# Catalog function binaries built from their own modules (tools/upstreamfns).
exports_files(%s)
""" % repr(["bin/" + out for out in sorted(tools)]))

upstream_functions = repository_rule(
    implementation = _upstream_functions_impl,
    doc = "Catalog function binaries built from tools/upstreamfns's module through the Go module proxy, cached per machine.",
    attrs = {
        "go_mod": attr.label(mandatory = True, allow_single_file = True),
        "go_sum": attr.label(mandatory = True, allow_single_file = True),
        "tools": attr.string_dict(mandatory = True, doc = "Output name to main package, each one of go.mod's tool lines."),
    },
    environ = ENV_PASSTHROUGH,
)

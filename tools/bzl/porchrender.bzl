"""porchrender_binary: tools/porchrender, porch's render path (kpt's kptops
with porch's gRPC function runtime), built from its own wrapper module.

The module's go.mod and go.sum are checked in under tools/porchrender/;
`go build -mod=readonly` verifies every module against that go.sum (sums of
github.com/kptdev modules are not in the checksum database, so go.sum is the
only check, as for the root module). The binary is built once per machine
into the fnrunner cache, keyed by the module's files and the Go version.
"""

load(":go_repos.bzl", "ENV_PASSTHROUGH", "execute", "fnrunner_cache_dir", "go_env", "host_go", "sha256_of", "verified_download")

def _porchrender_binary_impl(rctx):
    files = {name: rctx.read(label) for name, label in [("go.mod", rctx.attr.go_mod), ("go.sum", rctx.attr.go_sum), ("main.go", rctx.attr.main)]}
    goversion = execute(rctx, [host_go(rctx), "env", "GOVERSION"], "go env GOVERSION").stdout.strip()
    key = sha256_of(rctx, [files["go.mod"], files["go.sum"], files["main.go"], goversion])
    cached = "%s/porchrender/%s" % (fnrunner_cache_dir(rctx), key)
    if not rctx.path(cached + "/.built").exists:
        work = "_work"
        for name, text in files.items():
            rctx.file(work + "/" + name, text)
        verified_download(rctx, work, files["go.sum"])
        rctx.report_progress("building porchrender (kpt and porch; once per machine, minutes on 2 cores)")
        tmp = cached + ".tmp"
        execute(rctx, ["rm", "-rf", tmp], "clean")
        execute(rctx, ["mkdir", "-p", tmp], "mkdir")
        execute(
            rctx,
            [host_go(rctx), "build", "-trimpath", "-ldflags=-s -w", "-o", tmp + "/porchrender", "."],
            "build porchrender",
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
    execute(rctx, ["cp", cached + "/porchrender", "bin/porchrender"], "copy porchrender")
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    rctx.file("BUILD.bazel", """package(default_visibility = ["//visibility:public"])

# porch's render path as a command (tools/porchrender).
exports_files(["bin/porchrender"])
""")

porchrender_binary = repository_rule(
    implementation = _porchrender_binary_impl,
    doc = "tools/porchrender built from its wrapper module through the Go module proxy, cached per machine.",
    attrs = {
        "go_mod": attr.label(mandatory = True, allow_single_file = True),
        "go_sum": attr.label(mandatory = True, allow_single_file = True),
        "main": attr.label(mandatory = True, allow_single_file = True),
    },
    environ = ENV_PASSTHROUGH,
)

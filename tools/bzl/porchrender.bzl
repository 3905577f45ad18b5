"""porchrender_binary: tools/porchrender, porch's render path (kpt's kptops
with porch's gRPC function runtime) and kpt's fn eval over porch's client,
built from its own wrapper module, and from the same module the two binaries
porch's function-pod image holds: porch's wrapper-server and
grpc-health-probe (its go.mod's tool lines).

The module's go.mod and go.sum are checked in under tools/porchrender/;
`go build -mod=readonly` verifies every module against that go.sum (sums of
github.com/kptdev modules are not in the checksum database, so go.sum is the
only check, as for the root module). The binary is built once per machine
into the fnrunner cache, keyed by the module's files and the Go version.
"""

load(":go_repos.bzl", "ENV_PASSTHROUGH", "execute", "fnrunner_cache_dir", "go_env", "host_go", "sha256_of", "verified_download")

# The main packages of porch's function-pod image (func/Dockerfile-wrapperserver).
PORCH_WRAPPER_SERVER = "github.com/nephio-project/porch/func/wrapper-server"
GRPC_HEALTH_PROBE = "github.com/grpc-ecosystem/grpc-health-probe"

def _porchrender_binary_impl(rctx):
    files = {"go.mod": rctx.read(rctx.attr.go_mod), "go.sum": rctx.read(rctx.attr.go_sum)}
    for src in rctx.attr.srcs:
        files[src.name] = rctx.read(src)
    goversion = execute(rctx, [host_go(rctx), "env", "GOVERSION"], "go env GOVERSION").stdout.strip()
    key = sha256_of(rctx, [name + "\n" + files[name] for name in sorted(files)] + [goversion, PORCH_WRAPPER_SERVER, GRPC_HEALTH_PROBE])
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

        # porch's image builds both with CGO_ENABLED=0, as go_env has it.
        for out, pkg in [("porchrender", "."), ("wrapper-server", PORCH_WRAPPER_SERVER), ("grpc-health-probe", GRPC_HEALTH_PROBE)]:
            execute(
                rctx,
                [host_go(rctx), "build", "-trimpath", "-ldflags=-s -w", "-o", tmp + "/" + out, pkg],
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
    for out in ["porchrender", "wrapper-server", "grpc-health-probe"]:
        execute(rctx, ["cp", cached + "/" + out, "bin/" + out], "copy " + out)
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    rctx.file("BUILD.bazel", """package(default_visibility = ["//visibility:public"])

# porch's render path as a command (tools/porchrender); porch's wrapper-server
# (v1.5.8) and grpc-health-probe (v0.4.11), as porch's function-pod image has them.
exports_files(["bin/porchrender", "bin/wrapper-server", "bin/grpc-health-probe"])
""")

porchrender_binary = repository_rule(
    implementation = _porchrender_binary_impl,
    doc = "tools/porchrender, porch's wrapper-server and grpc-health-probe, built from tools/porchrender's module through the Go module proxy, cached per machine.",
    attrs = {
        "go_mod": attr.label(mandatory = True, allow_single_file = True),
        "go_sum": attr.label(mandatory = True, allow_single_file = True),
        "srcs": attr.label_list(mandatory = True, allow_files = [".go"], doc = "The module's Go files (package main)."),
    },
    environ = ENV_PASSTHROUGH,
)

"""host_protoc: Debian's protoc (protobuf-compiler) as @com_google_protobuf//:protoc,
so nothing has to download or compile protobuf."""

_DEFS = """
def _host_executable_impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name + ".exe/protoc")
    ctx.actions.symlink(output = out, target_file = ctx.file.src, is_executable = True)
    return [DefaultInfo(executable = out, files = depset([out]))]

# A single-file executable target (an sh_binary wrapper would bring runfiles
# that tools run from other rules do not get).
host_executable = rule(
    implementation = _host_executable_impl,
    attrs = {"src": attr.label(allow_single_file = True)},
    executable = True,
)
"""

def _host_protoc_impl(rctx):
    protoc = rctx.os.environ.get("PROTOC") or rctx.which("protoc")
    if not protoc:
        fail("protoc not found on PATH (apt-get install protobuf-compiler; tools/bazel does this)")
    res = rctx.execute([str(protoc), "--version"])
    if res.return_code != 0:
        fail("cannot run %s: %s" % (protoc, res.stderr))
    rctx.symlink(protoc, "protoc.bin")
    rctx.file("defs.bzl", _DEFS)
    rctx.file("BUILD.bazel", """# %s from %s
load(":defs.bzl", "host_executable")

package(default_visibility = ["//visibility:public"])

host_executable(
    name = "protoc",
    src = "protoc.bin",
)
""" % (res.stdout.strip(), protoc))
    rctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % rctx.name)

host_protoc = repository_rule(
    implementation = _host_protoc_impl,
    doc = "The host's protoc as @com_google_protobuf//:protoc.",
    environ = ["PROTOC"],
    local = True,
)

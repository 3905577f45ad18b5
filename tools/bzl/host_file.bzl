"""host_file: one file of the host (installed by a Debian package) as a repository."""

def _host_file_impl(rctx):
    src = rctx.path(rctx.attr.path)
    if not src.exists:
        fail("%s not found (tools/bazel installs the Debian package that provides it)" % rctx.attr.path)
    rctx.file(rctx.attr.file, rctx.read(src))
    rctx.file("BUILD.bazel", 'exports_files(["%s"])\n' % rctx.attr.file)
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)

host_file = repository_rule(
    implementation = _host_file_impl,
    doc = "Copies a host file into a repository, e.g. the CA bundle for images.",
    attrs = {
        "path": attr.string(mandatory = True, doc = "Absolute path on the host."),
        "file": attr.string(mandatory = True, doc = "Name of the copy in the repository."),
    },
)

"""Module extension for Bazel 7+ (MODULE.bazel): declares the same
repositories, with the same rules and names, as WORKSPACE does."""

load(":deps.bzl", "fnrunner_dependencies")

def _deps_impl(_module_ctx):
    fnrunner_dependencies()

deps = module_extension(
    implementation = _deps_impl,
    doc = "@gomod (go.mod's modules), @com_google_protobuf (host protoc), @envtest, @node_binaries, @node_packages, @prometheus_package, @busybox_package, @porchrender, @porch, @gitea, @upstreamfns and @linttools.",
)

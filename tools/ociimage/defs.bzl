"""fnrunner_image: a service's OCI image (:image, a reproducible tarball) and :push."""

_CA = "@ca_certificates//:ca-certificates.crt"
_SOURCE = "https://github.com/fnrunner/fnrunner"

def _args(expand, all_files, entrypoint, cmd, title):
    a = ["--file=$(%s %s)=%s:0755" % (expand, label, dst) for dst, label in sorted(all_files.items())]
    a.append("--file=$(%s %s)=/etc/ssl/certs/ca-certificates.crt:0644" % (expand, _CA))
    a += ["--entrypoint=" + e for e in entrypoint]
    a += ["--cmd=" + c for c in cmd]
    a += [
        "--label=org.opencontainers.image.title=" + title,
        "--label=org.opencontainers.image.source=" + _SOURCE,
    ]
    return a

def fnrunner_image(name, title, binary = None, path = None, files = {}, entrypoint = None, cmd = [], testonly = False):
    """Declares :<name> (image tarball) and its push target.

    The push target is :push for an image named "image" (every service's, so
    `bazel run //services/<service>:push` works), else :<name>_push.

    Args:
      name: name of the tarball target, usually "image".
      title: the image's org.opencontainers.image.title label.
      binary: the go_binary put at path and used as entrypoint.
      path: where binary goes in the image, e.g. "/gateway".
      files: more executables: {image path: label}.
      entrypoint: the entrypoint (default: [path]).
      cmd: the image's command (default: none).
      testonly: for images only tests use.
    """
    all_files = dict(files)
    if binary:
        all_files[path] = binary
    if entrypoint == None:
        entrypoint = [path] if path else []

    srcs = sorted(all_files.values()) + [_CA]
    native.genrule(
        name = name,
        srcs = srcs,
        outs = [name + ".tar"],
        # No revision label here: the tarball depends on its inputs only.
        cmd = "$(location //tools/ociimage) %s --revision-from= --tarball=$@ > /dev/null" % " ".join(_args("location", all_files, entrypoint, cmd, title)),
        testonly = testonly,
        tools = ["//tools/ociimage"],
        visibility = ["//visibility:public"],
    )
    native.sh_binary(
        name = "push" if name == "image" else name + "_push",
        srcs = ["//tools/ociimage:push.sh"],
        args = ["$(rootpath //tools/ociimage)"] + _args("rootpath", all_files, entrypoint, cmd, title),
        data = srcs + ["//tools/ociimage"],
        testonly = testonly,
    )

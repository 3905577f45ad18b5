"""pb_go_test: fails when checked-in generated Go is stale."""

_PROTOC_TOOLS = [
    "@com_google_protobuf//:protoc",
    "@gomod//google.golang.org/protobuf/cmd/protoc-gen-go",
    "@gomod//google.golang.org/grpc/cmd/protoc-gen-go-grpc",
]

def pb_go_test(name, protos, generated):
    """Regenerates the Go for protos and compares it with the checked-in files.

    Args:
      name: the test's name.
      protos: .proto files of this package.
      generated: the checked-in *.pb.go files they produce.
    """
    native.sh_test(
        name = name,
        srcs = ["//tools/proto:protoc.sh"],
        args = ["check"] + ["$(rootpath %s)" % t for t in _PROTOC_TOOLS] + ["$(rootpath %s)" % p for p in protos],
        data = _PROTOC_TOOLS + protos + generated,
    )

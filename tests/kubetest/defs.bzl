"""kube_go_test: a go_test that starts a real kube-apiserver and etcd.

Packages whose tests use tests/kubetest map go_test onto it in their BUILD
file, so gazelle keeps generating them:

    # gazelle:map_kind go_test kube_go_test //tests/kubetest:defs.bzl
"""

load("@io_bazel_rules_go//go:def.bzl", "go_test")

def kube_go_test(name, data = [], env = {}, tags = [], **kwargs):
    """go_test with @envtest's kube-apiserver and etcd.

    Args:
      name: the test's name.
      data: more runfiles.
      env: more environment variables.
      tags: more tags.
      **kwargs: passed to go_test.
    """
    assets = {
        "TEST_ASSET_ETCD": "$(rootpath @envtest//:bin/etcd)",
        "TEST_ASSET_KUBE_APISERVER": "$(rootpath @envtest//:bin/kube-apiserver)",
    }
    assets.update(env)
    go_test(
        name = name,
        data = data + [
            "@envtest//:bin/etcd",
            "@envtest//:bin/kube-apiserver",
        ],
        env = assets,
        # Each test starts its own apiserver and etcd: two at a time on two cores.
        tags = tags + ["cpu:2"],
        **kwargs
    )

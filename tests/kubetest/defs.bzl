"""kube_go_test: a go_test that starts a real kube-apiserver and etcd.

Packages whose tests use tests/kubetest map go_test onto it in their BUILD
file, so gazelle keeps generating them:

    # gazelle:map_kind go_test kube_go_test //tests/kubetest:defs.bzl
"""

load("@io_bazel_rules_go//go:def.bzl", "go_test")
load("//tools/bzl:testenv.bzl", "ENVTEST")

def kube_go_test(name, data = [], env = {}, tags = [], **kwargs):
    """go_test with @envtest's kube-apiserver and etcd.

    Args:
      name: the test's name.
      data: more runfiles.
      env: more environment variables.
      tags: more tags.
      **kwargs: passed to go_test.
    """
    assets = {k: "$(rootpath %s)" % label for k, label in ENVTEST.items()}
    assets.update(env)
    go_test(
        name = name,
        data = data + sorted(ENVTEST.values()),
        env = assets,
        # Each test starts its own apiserver and etcd: two at a time on two cores.
        tags = tags + ["cpu:2"],
        **kwargs
    )

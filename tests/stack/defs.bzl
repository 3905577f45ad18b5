"""stack_go_test: a go_test that runs fnrunner's real services (tests/stack).

Packages whose tests use tests/stack map go_test onto it in their BUILD file:

    # gazelle:map_kind go_test stack_go_test //tests/stack:defs.bzl
"""

load("@io_bazel_rules_go//go:def.bzl", "go_test")
load("//tools/bzl:testenv.bzl", "test_env")

# The service binaries (the pod executor's included), the catalog's and the test functions, and the local
# FunctionConfigs.
_ENV = test_env(pod_executor = True, test_functions = True)

def stack_go_test(name, data = [], env = {}, **kwargs):
    """go_test with the service binaries, function binaries and local FunctionConfigs.

    Args:
      name: the test's name.
      data: more runfiles.
      env: more environment variables.
      **kwargs: passed to go_test.
    """
    stack_env = dict(_ENV.env)
    stack_env.update(env)
    go_test(
        name = name,
        data = data + _ENV.data,
        env = stack_env,
        **kwargs
    )

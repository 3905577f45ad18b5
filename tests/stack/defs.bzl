"""stack_go_test: a go_test that runs fnrunner's real services (tests/stack).

Packages whose tests use tests/stack map go_test onto it in their BUILD file:

    # gazelle:map_kind go_test stack_go_test //tests/stack:defs.bzl
"""

load("@io_bazel_rules_go//go:def.bzl", "go_test")
load("//tools/bzl:binaries.bzl", "FUNCTIONS", "SERVICES")

# Function binaries in the binary-runner's functions directory, by name.
# The test functions come on top of the catalog's.
_FUNCTIONS = dict(FUNCTIONS, **{
    "crash": "//tests/testfns/crash",
    "flood": "//tests/testfns/flood",
    "hang": "//tests/testfns/hang",
    "orphan": "//tests/testfns/orphan",
})

_SERVICES = {"FNRUNNER_" + name.upper().replace("-", "_"): label for name, label in SERVICES.items()}

def stack_go_test(name, data = [], env = {}, **kwargs):
    """go_test with the service binaries, function binaries and local FunctionConfigs.

    Args:
      name: the test's name.
      data: more runfiles.
      env: more environment variables.
      **kwargs: passed to go_test.
    """
    stack_env = {k: "$(rootpath %s)" % v for k, v in _SERVICES.items()}
    stack_env["FNRUNNER_FUNCTIONS"] = " ".join(["%s=$(rootpath %s)" % (fn, label) for fn, label in _FUNCTIONS.items()])
    stack_env["FNRUNNER_LOCAL_CONFIGS"] = "$(rootpaths //deploy/local/functionconfigs)"
    stack_env.update(env)
    go_test(
        name = name,
        data = data + _SERVICES.values() + _FUNCTIONS.values() + ["//deploy/local/functionconfigs"],
        env = stack_env,
        **kwargs
    )

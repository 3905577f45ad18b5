"""The FNRUNNER_* environment of the tests and the bench: one definition.

The Go side reads it through tests/harness (Binary, Runfile) and tests/stack:

    FNRUNNER_<SERVICE>        a service binary: FNRUNNER_GATEWAY, FNRUNNER_BINARY_RUNNER,
                              FNRUNNER_CONFIG_RECONCILER; with pod_executor also
                              FNRUNNER_POD_MANAGER, FNRUNNER_WRAPPER_SERVER
    FNRUNNER_<FUNCTION>       a function binary: FNRUNNER_SET_NAMESPACE, FNRUNNER_STARLARK, ...
    FNRUNNER_FUNCTIONS        space-separated name=path of the function binaries
    FNRUNNER_LOCAL_CONFIGS    space-separated FunctionConfig files of deploy/local
    FNRUNNER_CRDS             the CRD directory (with crds)
    TEST_ASSET_ETCD, TEST_ASSET_KUBE_APISERVER   envtest's binaries (with envtest)

Usage:

    load("//tools/bzl:testenv.bzl", "test_env")

    _ENV = test_env(pod_executor = True, crds = True)
    go_test(name = ..., data = _ENV.data, env = _ENV.env, ...)
"""

load(":binaries.bzl", "FUNCTIONS", "POD_SERVICES", "SERVICES", "TEST_FUNCTIONS")

# envtest's kube-apiserver and etcd, as controller-runtime's envtest reads them.
ENVTEST = {
    "TEST_ASSET_ETCD": "@envtest//:bin/etcd",
    "TEST_ASSET_KUBE_APISERVER": "@envtest//:bin/kube-apiserver",
}

def env_name(name):
    """The variable that names a binary: set-namespace → FNRUNNER_SET_NAMESPACE.

    Args:
      name: a key of SERVICES, POD_SERVICES, FUNCTIONS or TEST_FUNCTIONS.

    Returns:
      The environment variable's name.
    """
    return "FNRUNNER_" + name.upper().replace("-", "_")

def test_env(pod_executor = False, test_functions = False, crds = False, envtest = False):
    """The environment and runfiles that name fnrunner's binaries to a test.

    Args:
      pod_executor: add the pod-manager and the wrapper-server.
      test_functions: add the hostile test functions (tests/testfns) to the
        binary-runner's functions.
      crds: add FNRUNNER_CRDS (//crds).
      envtest: add envtest's kube-apiserver and etcd (kube_go_test adds them itself).

    Returns:
      struct(env = {name: value with $(rootpath) expansions}, data = [labels]),
      for a go_test's env and data (or, as NAME=VALUE args, tools/bench/gobench.sh).
    """
    services = dict(SERVICES)
    if pod_executor:
        services.update(POD_SERVICES)
    functions = dict(FUNCTIONS)
    if test_functions:
        functions.update(TEST_FUNCTIONS)
    env = {}
    for name, label in services.items() + functions.items():
        env[env_name(name)] = "$(rootpath %s)" % label
    env["FNRUNNER_FUNCTIONS"] = " ".join(["%s=$(rootpath %s)" % (name, label) for name, label in sorted(functions.items())])
    env["FNRUNNER_LOCAL_CONFIGS"] = "$(rootpaths //deploy/local/functionconfigs)"
    data = sorted(services.values() + functions.values()) + ["//deploy/local/functionconfigs"]
    if crds:
        env["FNRUNNER_CRDS"] = "crds"
        data.append("//crds")
    if envtest:
        for name, label in ENVTEST.items():
            env[name] = "$(rootpath %s)" % label
        data.extend(sorted(ENVTEST.values()))
    return struct(env = env, data = data)

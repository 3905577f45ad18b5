"""The binaries fnrunner runs: services and functions, by name.
Used by tools/local (the run command) and tools/bzl/testenv.bzl (the
environment of the tests and the bench)."""

load("//functions:registry.bzl", _FUNCTIONS = "FUNCTIONS")

# The local stack's services (tools/local): each is a --<name>-binary flag.
# fnsandbox is the helper the binary-runner and the wrapper-server run each
# function binary in (libs/sandbox).
SERVICES = {
    "binary-runner": "//services/binary-runner",
    "config-reconciler": "//services/config-reconciler",
    "fnsandbox": "//libs/sandbox/fnsandbox",
    "gateway": "//services/gateway",
}

# The pod executor's services, on top of SERVICES.
POD_SERVICES = {
    "pod-manager": "//services/pod-manager",
    "wrapper-server": "//services/wrapper-server",
}

# The catalog function binaries, by file name: functions/registry.yaml's
# list (functions/registry.bzl is written from it by tools/fnregistry).
FUNCTIONS = _FUNCTIONS

# Hostile test functions (tests/testfns), on top of FUNCTIONS.
TEST_FUNCTIONS = {
    "crash": "//tests/testfns/crash",
    "flood": "//tests/testfns/flood",
    "hang": "//tests/testfns/hang",
    "orphan": "//tests/testfns/orphan",
    "record": "//tests/testfns/record",
    "reserve": "//tests/testfns/reserve",
}

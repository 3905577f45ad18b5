"""The binaries fnrunner runs: services and functions, by name.
Used by tools/local (the run command) and tools/bzl/testenv.bzl (the
environment of the tests and the bench)."""

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

# Function binaries of the binary-runner's functions directory, by file name.
FUNCTIONS = {
    "apply-replacements": "//functions:apply-replacements",
    "apply-setters": "//functions/apply-setters",
    "ensure-name-substring": "//functions/ensure-name-substring",
    "search-replace": "//functions/search-replace",
    "set-annotations": "//functions/set-annotations",
    "set-image": "//functions/set-image",
    "set-labels": "//functions/set-labels",
    "set-namespace": "//functions:set-namespace",
    "starlark": "//functions/starlark",
    "upsert-resource": "//functions/upsert-resource",
}

# Hostile test functions (tests/testfns), on top of FUNCTIONS.
TEST_FUNCTIONS = {
    "crash": "//tests/testfns/crash",
    "flood": "//tests/testfns/flood",
    "hang": "//tests/testfns/hang",
    "orphan": "//tests/testfns/orphan",
    "record": "//tests/testfns/record",
    "reserve": "//tests/testfns/reserve",
}

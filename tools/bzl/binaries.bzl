"""The binaries the local stack runs: services and catalog functions, by name.
Used by tests/stack (the e2e harness) and tools/local (the run command)."""

SERVICES = {
    "binary-runner": "//services/binary-runner",
    "config-reconciler": "//services/config-reconciler",
    "gateway": "//services/gateway",
}

# Function binaries of the binary-runner's functions directory, by file name.
FUNCTIONS = {
    "apply-replacements": "//services/binary-runner/functions:apply-replacements",
    "apply-setters": "//services/binary-runner/functions/apply-setters",
    "set-namespace": "//services/binary-runner/functions:set-namespace",
    "starlark": "//services/binary-runner/functions:starlark",
}

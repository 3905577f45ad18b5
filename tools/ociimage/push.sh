#!/usr/bin/env bash
# bazel run //services/<name>:push -- --repository REGISTRY/fnrunner/<name> --tag v0.1.0
# Runs tools/ociimage with the service's files and the caller's flags.
set -euo pipefail
tool=$1
shift
exec "$tool" "$@"

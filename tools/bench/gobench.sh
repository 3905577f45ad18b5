#!/usr/bin/env bash
# Runs one benchmark of a Go test binary with the environment bazel test
# would give it; see tools/bench/BUILD.bazel for the targets. Prints; asserts
# nothing.
#   usage (from the Bazel targets): gobench.sh TEST_BINARY BENCH NAME=VALUE [WORD...]... [-- flags]
# A WORD without NAME= continues the previous variable's value (space-
# separated lists such as $(rootpaths ...) arrive as separate arguments).
# Like bazel test, it runs the binary in its package's directory, with
# TEST_SRCDIR and TEST_WORKSPACE set, so that relative test data (testdata/)
# and runfile paths resolve as they do under bazel test.
set -euo pipefail
test_binary=$1
bench=$2
shift 2
name=
while [[ $# -gt 0 && $1 != -- && $1 != -* ]]; do
  if [[ $1 =~ ^[A-Z][A-Z0-9_]*= ]]; then
    name=${1%%=*}
    export "$name=${1#*=}"
  elif [[ -n $name ]]; then
    export "$name=${!name} $1"
  fi
  shift
done
[[ ${1:-} == -- ]] && shift
# bazel run starts here, in the workspace's runfiles directory.
export TEST_SRCDIR=${TEST_SRCDIR:-$(dirname "$PWD")}
export TEST_WORKSPACE=${TEST_WORKSPACE:-$(basename "$PWD")}
binary=$PWD/$test_binary
# tests/pods/pods_test_/pods_test runs in tests/pods.
cd "$(dirname "$(dirname "$test_binary")")"
exec "$binary" -test.run='^$' -test.bench="^Benchmark${bench}\$" -test.benchtime=1x -test.timeout=2h "$@"

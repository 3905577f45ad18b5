#!/usr/bin/env bash
# tools/bazel run //tools/bench:pods — the pod path: cold pod to first result,
# and the warm overhead of gateway → pod-manager → wrapper-server over calling
# the pod's wrapper-server directly. Runs BenchmarkPodPath (tests/pods) on a
# real kube-apiserver with the test kubelet. Prints; asserts nothing.
#   usage (from the Bazel target): pods.sh TEST_BINARY NAME=PATH... [-- go test flags]
set -euo pipefail
test_binary=$1
shift
while [[ $# -gt 0 && $1 != -- ]]; do
  export "${1%%=*}=${1#*=}"
  shift
done
[[ ${1:-} == -- ]] && shift
exec "$test_binary" -test.run='^$' -test.bench=PodPath -test.benchtime=1x "$@"

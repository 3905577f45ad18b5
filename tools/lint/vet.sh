#!/usr/bin/env bash
# The vet analyzers and staticcheck find nothing in the root module.
#   check WORKSPACE GO_ENV STATICCHECK SDK_FILES...  (bazel test //tools/lint:vet_test)
# The go command runs offline over the fnrunner cache's module and build
# caches (GO_ENV, written by @linttools), which @gomod filled from go.sum.
set -euo pipefail
[[ ${1:-} == check ]] || { echo "usage: $0 check WORKSPACE GO_ENV STATICCHECK SDK_FILES..." >&2; exit 2; }
# The test runs unsandboxed (tags: local) and reaches the source tree
# through the runfiles link of //:WORKSPACE.
root=$(dirname "$(readlink -f "$2")")
# shellcheck source=/dev/null
source "$3"
staticcheck=$(readlink -f "$4")
go=
for f in "${@:5}"; do
  [[ $f == */bin/go ]] && go=$(readlink -f "$f")
done
[[ -n $go ]] || { echo "no bin/go among the Go SDK's files" >&2; exit 2; }
export PATH=$(dirname "$go"):$PATH
export HOME=${TEST_TMPDIR:-/tmp}
# staticcheck's own cache of facts, beside the go command's build cache.
export STATICCHECK_CACHE=$(dirname "$GOCACHE")/staticcheck
cd "$root"
status=0
echo "go vet ./..."
go vet ./... || status=1
echo "staticcheck ./..."
"$staticcheck" ./... || status=1
if [[ $status != 0 ]]; then
  echo "fix the findings above, or, where a finding is wrong, say why with a //lint:ignore comment (staticcheck) beside it." >&2
  exit 1
fi
echo "go vet and staticcheck find nothing"

#!/usr/bin/env bash
# Go sources are as gofmt writes them.
#   check WORKSPACE SDK_TOOLS...  (bazel test //tools/lint:gofmt_test) fail if gofmt would change any
set -euo pipefail
[[ ${1:-} == check ]] || { echo "usage: $0 check WORKSPACE SDK_TOOLS..." >&2; exit 2; }
# The test runs unsandboxed (tags: local) and reaches the source tree
# through the runfiles link of //:WORKSPACE.
root=$(dirname "$(readlink -f "$2")")
gofmt=
for f in "${@:3}"; do
  [[ $f == */bin/gofmt ]] && gofmt=$(readlink -f "$f")
done
[[ -n $gofmt ]] || { echo "no bin/gofmt among the Go SDK's tools" >&2; exit 2; }
cd "$root"
out=$(find . -name '*.go' -not -path './bazel-*' -not -path './.git/*' -print0 | xargs -0 "$gofmt" -l)
if [[ -n $out ]]; then
  printf '%s\n' "$out"
  echo "these Go files are not gofmt'd: run 'gofmt -w' on them and commit the result." >&2
  exit 1
fi
echo "Go sources are gofmt'd"

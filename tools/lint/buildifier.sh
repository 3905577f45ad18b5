#!/usr/bin/env bash
# BUILD, WORKSPACE and .bzl files are formatted and linted by buildifier
# (settings in .buildifier.json).
#   fix   BUILDIFIER            (bazel run //:buildifier) format and apply lint fixes in the workspace
#   check BUILDIFIER WORKSPACE  (bazel test //tools/lint:buildifier_test) fail on any finding
set -euo pipefail
mode=$1
buildifier=$(readlink -f "$2")
case $mode in
fix)
  cd "${BUILD_WORKSPACE_DIRECTORY:?run this with bazel run //:buildifier}"
  exec "$buildifier" -config=.buildifier.json -mode=fix -lint=fix -r .
  ;;
check)
  root=$(dirname "$(readlink -f "$3")")
  cd "$root"
  if ! "$buildifier" -config=.buildifier.json -mode=check -lint=warn -r .; then
    echo "buildifier found problems: run 'tools/bazel run //:buildifier' and commit the result." >&2
    exit 1
  fi
  echo "BUILD and .bzl files are formatted and lint-clean"
  ;;
*)
  echo "usage: $0 fix|check BUILDIFIER [WORKSPACE]" >&2
  exit 2
  ;;
esac

#!/usr/bin/env bash
# BUILD files are kept by gazelle.
#   fix   GAZELLE            (bazel run //:gazelle) rewrite BUILD files in the workspace
#   check GAZELLE WORKSPACE  (bazel test //tools/lint:gazelle_test) fail if gazelle would change any
set -euo pipefail
mode=$1
gazelle=$(readlink -f "$2")
case $mode in
fix)
  cd "${BUILD_WORKSPACE_DIRECTORY:?run this with bazel run //:gazelle}"
  exec "$gazelle" -repo_root=. "${@:3}"
  ;;
check)
  # The test runs unsandboxed (tags: local) and reaches the source tree
  # through the runfiles link of //:WORKSPACE.
  root=$(dirname "$(readlink -f "$3")")
  cd "$root"
  rc=0
  out=$("$gazelle" -repo_root=. -mode=diff 2>&1) || rc=$?
  if [[ $rc -ne 0 || -n $out ]]; then
    printf '%s\n' "$out"
    echo "BUILD files are not what gazelle generates: run 'tools/bazel run //:gazelle' and commit the result." >&2
    exit 1
  fi
  echo "BUILD files match gazelle's output"
  ;;
*)
  echo "usage: $0 fix|check GAZELLE [WORKSPACE]" >&2
  exit 2
  ;;
esac

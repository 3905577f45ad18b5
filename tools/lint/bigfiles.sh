#!/usr/bin/env bash
# No build outputs in git: a tracked file over 1 MiB is refused unless it is
# listed here, with why it must be in the tree.
#   check WORKSPACE  (bazel test //tools/lint:bigfiles_test)
set -euo pipefail
[[ ${1:-} == check ]] || { echo "usage: $0 check WORKSPACE" >&2; exit 2; }
# The test runs unsandboxed (tags: local) and reaches the source tree
# through the runfiles link of //:WORKSPACE.
root=$(dirname "$(readlink -f "$2")")
readonly LIMIT=$((1 << 20))
# path<TAB>reason, one per line. Empty today.
readonly ALLOWED=""
cd "$root"
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  # As tests/harness.Need: a skip, listed by tools/bazel; a failure under
  # FNRUNNER_REQUIRE_ALL=1.
  why="tracked files' sizes not checked: not a git checkout"
  if [[ ${FNRUNNER_REQUIRE_ALL:-} == 1 ]]; then
    echo "$why (FNRUNNER_REQUIRE_ALL=1: nothing may be skipped)" >&2
    exit 1
  fi
  echo "FNRUNNER_SKIPPED bigfiles_test: $why" >&2
  exit 0
fi
bad=()
while IFS= read -r -d '' f; do
  [[ -f $f && ! -L $f ]] || continue
  size=$(stat -c %s -- "$f")
  (( size > LIMIT )) || continue
  grep -qxF -- "$f" <<<"$(cut -f1 <<<"$ALLOWED")" && continue
  bad+=("$f ($size bytes)")
done < <(git ls-files -z)
if (( ${#bad[@]} )); then
  printf '%s\n' "${bad[@]}"
  echo "tracked files over 1 MiB: a build output? 'git rm --cached' it and extend .gitignore, or list it in tools/lint/bigfiles.sh with why." >&2
  exit 1
fi
echo "no tracked file over 1 MiB"

#!/usr/bin/env bash
# Generated Go for protos/ is checked in; this script makes it and checks it.
#   check PROTOC GEN_GO GEN_GRPC PROTO...  (a sh_test per proto package) fail when
#                                          the checked-in .pb.go differ from fresh output
#   regen PROTOC GEN_GO GEN_GRPC           (bazel run //tools/proto:regen) rewrite every
#                                          .pb.go under protos/ in the workspace
# protoc is Debian's (its version is recorded in the generated headers);
# protoc-gen-go and protoc-gen-go-grpc are built from the versions pinned in go.mod.
set -euo pipefail
mode=$1
protoc=$(readlink -f "$2")
gen_go=$(readlink -f "$3")
gen_grpc=$(readlink -f "$4")
shift 4

generate() { # OUTDIR PROTO... (paths relative to protos/)
  local out=$1
  shift
  (cd protos && "$protoc" -I . -I /usr/include \
    --plugin=protoc-gen-go="$gen_go" --plugin=protoc-gen-go-grpc="$gen_grpc" \
    --go_out="$out" --go_opt=paths=source_relative \
    --go-grpc_out="$out" --go-grpc_opt=paths=source_relative "$@")
}

case $mode in
check)
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
  rels=()
  for p in "$@"; do rels+=("${p#protos/}"); done
  generate "$out" "${rels[@]}"
  stale=0
  while IFS= read -r f; do
    if ! diff -u "protos/$f" "$out/$f"; then stale=1; fi
  done < <(cd "$out" && find . -name '*.go' | sed 's|^\./||' | sort)
  if [[ $stale -ne 0 ]]; then
    echo "generated Go is stale: run 'tools/bazel run //tools/proto:regen' and commit the result" >&2
    exit 1
  fi
  echo "generated Go is up to date for: $*"
  ;;
regen)
  cd "${BUILD_WORKSPACE_DIRECTORY:?run this with bazel run //tools/proto:regen}"
  mapfile -t protos < <(cd protos && find . -name '*.proto' | sed 's|^\./||' | sort)
  generate . "${protos[@]}"
  echo "regenerated Go for ${protos[*]}"
  ;;
*)
  echo "usage: $0 check|regen PROTOC GEN_GO GEN_GRPC [PROTO...]" >&2
  exit 2
  ;;
esac

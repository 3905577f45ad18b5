#!/usr/bin/env bash
# Regenerates the wrapper modules @envtest builds kube-apiserver and etcd from,
# and the one @node_binaries builds kubelet, kube-proxy, kube-scheduler and
# kube-controller-manager from (tests/node).
#
#   tools/envtest/update.sh KUBERNETES_VERSION ETCD_VERSION   e.g. v1.36.3 v3.6.8
#
# then set KUBERNETES_VERSION in tools/bzl/deps.bzl and commit. Pick the etcd
# version that k8s.io/kubernetes' go.mod requires for its etcd client.
#
# k8s.io/kubernetes requires its staging modules (k8s.io/api, ...) at v0.0.0
# and replaces them with local paths; a wrapper must replace each of them with
# the published v0.<minor>.<patch> instead.
set -euo pipefail
k8s=${1:?kubernetes version, e.g. v1.36.3}
etcd=${2:?etcd version, e.g. v3.6.8}
here=$(cd "$(dirname "$0")" && pwd)
staging="v0.${k8s#v1.}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GOTOOLCHAIN=local GOFLAGS=-mod=mod GOWORK=off

mkdir -p "$work/kube-apiserver" "$work/etcd" "$work/node"
go mod download -json "k8s.io/kubernetes@$k8s" >"$work/k8s.json"
kmod=$(sed -n 's/.*"GoMod": "\(.*\)",*/\1/p' "$work/k8s.json")
{
  printf 'module fnrunner.local/envtest/kube-apiserver\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$k8s"
  for m in $(sed -n '/^replace (/,/^)/p' "$kmod" | awk '/=>/{print $1}'); do
    if grep -q "^	$m v0.0.0" "$kmod"; then printf '\t%s => %s %s\n' "$m" "$m" "$staging"; fi
  done
  printf ')\n'
} >"$work/kube-apiserver/go.mod"
printf '//go:build tools\n\npackage tools\n\nimport _ "k8s.io/kubernetes/cmd/kube-apiserver"\n' >"$work/kube-apiserver/tools.go"
sed 's|^module .*|module fnrunner.local/node|' "$work/kube-apiserver/go.mod" >"$work/node/go.mod"
printf '//go:build tools\n\npackage tools\n\nimport (\n\t_ "k8s.io/kubernetes/cmd/kube-controller-manager"\n\t_ "k8s.io/kubernetes/cmd/kube-proxy"\n\t_ "k8s.io/kubernetes/cmd/kube-scheduler"\n\t_ "k8s.io/kubernetes/cmd/kubelet"\n)\n' >"$work/node/tools.go"
printf 'module fnrunner.local/envtest/etcd\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$etcd" >"$work/etcd/go.mod"
printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3/etcdmain"\n' >"$work/etcd/tools.go"

for b in kube-apiserver etcd node; do
  (cd "$work/$b" && go mod tidy)
  cp "$work/$b/go.mod" "$here/$b.go.mod"
  cp "$work/$b/go.sum" "$here/$b.go.sum"
done
echo "updated $here: kube-apiserver $k8s, etcd $etcd; now set KUBERNETES_VERSION = \"$k8s\" in tools/bzl/deps.bzl"

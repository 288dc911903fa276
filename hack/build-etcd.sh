#!/usr/bin/env bash
# Builds etcd (an envtest asset) from the go.etcd.io/etcd/server/v3 Go
# module into bin/k8s/etcd.
#
# The wrapper module in hack/tools/etcd requires the server module and names
# its main package as a tool; its go.mod and go.sum are committed, so a
# build checks every download against go.sum. Debian's etcd-server (3.4) is
# older than kube-apiserver 1.3x expects (watch progress notifications), so
# the module build is used instead.
#
# Usage:
#   hack/build-etcd.sh [output]          build from the committed wrapper
#   hack/build-etcd.sh --update v3.Y.Z   rewrite the wrapper for another release
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
wrapper="$root/hack/tools/etcd"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

die() { echo "build-etcd: $*" >&2; exit 1; }

if [ "${1:-}" = "--update" ]; then
  version="${2:-}"
  [[ "$version" =~ ^v3\.[0-9]+\.[0-9]+$ ]] || die "--update wants a release such as v3.7.3, got ${version:-nothing}"
  {
    echo "// Wrapper module that builds etcd for envtest; written by"
    echo "// hack/build-etcd.sh --update ${version}. Do not edit by hand."
    echo "module github.com/mongoferry/mongoferry/hack/tools/etcd"
    echo
    echo "go 1.26.0"
    echo
    echo "tool go.etcd.io/etcd/server/v3"
    echo
    echo "require go.etcd.io/etcd/server/v3 ${version}"
  } > "$wrapper/go.mod"
  rm -f "$wrapper/go.sum"
  (cd "$wrapper" && GOFLAGS=-mod=mod go mod tidy)
  echo "hack/tools/etcd now builds etcd ${version}; commit go.mod and go.sum"
  exit 0
fi

out="${1:-$root/bin/k8s/etcd}"
version="$(cd "$wrapper" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)" || die "cannot read the go.etcd.io/etcd/server/v3 version from $wrapper/go.mod"

echo "building etcd ${version} into ${out}"
mkdir -p "$(dirname "$out")"
start=$SECONDS
(cd "$wrapper" && go build -trimpath -ldflags "-s -w" -o "$out" go.etcd.io/etcd/server/v3)
echo "built in $((SECONDS - start))s: $("$out" --version | sed -n 1p)"

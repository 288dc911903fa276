#!/usr/bin/env bash
# Builds kube-apiserver (an envtest asset) from the k8s.io/kubernetes Go
# module into bin/k8s/kube-apiserver.
#
# k8s.io/kubernetes is not meant to be required as a module: its go.mod
# replaces every k8s.io/<staging> module with ./staging/src/..., and those
# replaces do not apply outside its own repository. The wrapper module in
# hack/tools/kube-apiserver therefore requires k8s.io/kubernetes at
# KUBE_VERSION and replaces each staging module with the published v0.Y.Z of
# the same release (sample-* modules are left out: nothing imports them).
# Its go.mod and go.sum are committed, so a build checks every download
# against go.sum; GONOSUMDB=k8s.io is only needed when the wrapper is
# regenerated, since the checksum database does not answer for k8s.io
# modules here.
#
# Usage:
#   hack/build-kube-apiserver.sh [output]          build from the committed wrapper
#   hack/build-kube-apiserver.sh --update v1.Y.Z   rewrite the wrapper for another release
#
# The minor version must match k8s.io/api in the repository's go.mod, so
# the control plane the tests run against is the one the client was built
# for. The module proxy refuses some releases ("not available"); pick one
# whose zip downloads (go mod download -json k8s.io/kubernetes@v1.Y.Z).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
wrapper="$root/hack/tools/kube-apiserver"
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}k8s.io"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

die() { echo "build-kube-apiserver: $*" >&2; exit 1; }

# minor prints the minor number of a v1.Y.Z or v0.Y.Z version.
minor() { echo "$1" | sed -n 's/^v[01]\.\([0-9][0-9]*\)\..*/\1/p'; }

update() {
  local version="$1"
  [[ "$version" =~ ^v1\.[0-9]+\.[0-9]+$ ]] || die "--update wants a release such as v1.37.1, got ${version:-nothing}"
  local staging="v0.${version#v1.}"
  local gomod
  gomod="$(cd "$wrapper" && go mod download -json "k8s.io/kubernetes@${version}" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')" || true
  [ -n "$gomod" ] && [ -f "$gomod" ] || die "the module proxy did not serve k8s.io/kubernetes@${version}; try another patch release"
  local mods
  mods="$(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\1#p' "$gomod" | grep -v '^k8s.io/sample-' | sort -u)"
  [ -n "$mods" ] || die "found no staging replaces in the go.mod of k8s.io/kubernetes@${version}"
  {
    echo "// Wrapper module that builds kube-apiserver for envtest; written by"
    echo "// hack/build-kube-apiserver.sh --update ${version}. Do not edit by hand."
    echo "module github.com/mongoferry/mongoferry/hack/tools/kube-apiserver"
    echo
    echo "go $(sed -n 's/^go //p' "$gomod")"
    echo
    echo "tool k8s.io/kubernetes/cmd/kube-apiserver"
    echo
    echo "require k8s.io/kubernetes ${version}"
    echo
    echo "replace ("
    for m in $mods; do printf '\t%s => %s %s\n' "$m" "$m" "$staging"; done
    echo ")"
  } > "$wrapper/go.mod"
  rm -f "$wrapper/go.sum"
  (cd "$wrapper" && GOFLAGS=-mod=mod go mod tidy)
  echo "hack/tools/kube-apiserver now builds k8s.io/kubernetes ${version} (staging ${staging}); commit go.mod and go.sum"
}

if [ "${1:-}" = "--update" ]; then
  update "${2:-}"
  exit 0
fi

out="${1:-$root/bin/k8s/kube-apiserver}"
version="$(cd "$wrapper" && go list -m -f '{{.Version}}' k8s.io/kubernetes)" || die "cannot read the k8s.io/kubernetes version from $wrapper/go.mod"
api="$(cd "$root" && go list -m -f '{{.Version}}' k8s.io/api 2>/dev/null || true)"
if [ -n "$api" ] && [ "$(minor "$api")" != "$(minor "$version")" ]; then
  die "k8s.io/api is ${api} in go.mod but the wrapper builds kube-apiserver ${version}: run hack/build-kube-apiserver.sh --update v1.$(minor "$api").Z with a patch release the proxy serves"
fi

major=1
minor="$(minor "$version")"
ldflags=""
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  ldflags+=" -X ${pkg}.gitVersion=${version} -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor} -X ${pkg}.gitTreeState=clean"
done

echo "building kube-apiserver ${version} into ${out} (about 5 minutes on two cores with a cold build cache)"
mkdir -p "$(dirname "$out")"
start=$SECONDS
(cd "$wrapper" && go build -trimpath -ldflags "-s -w${ldflags}" -o "$out" k8s.io/kubernetes/cmd/kube-apiserver)
echo "built in $((SECONDS - start))s: $("$out" --version)"

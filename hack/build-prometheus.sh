#!/usr/bin/env bash
# Builds the Prometheus server and promtool from the
# github.com/prometheus/prometheus Go module into bin/ (the monitoring
# tests: `promtool check rules`, `promtool test rules`, and a real server
# that scrapes an end-to-end SyncTask and evaluates the chart's alerts and
# the dashboard's queries).
#
# The wrapper module in hack/tools/prometheus requires the module at the
# version the test module's go.mod (test/go.mod) uses (the tests parse
# PromQL with it; the root module does not require it), so
# the rules are checked by the same PromQL the tests compile. Its go.mod and
# go.sum are committed; a build checks every download against go.sum. The
# build leaves out what the tests do not need: every service discovery but
# the static, file and HTTP ones (tag remove_all_sd) and the web UI's assets
# (no builtinassets tag: the HTTP API answers, the UI pages do not).
#
# Usage:
#   hack/build-prometheus.sh [bin-dir]   build bin/prometheus and bin/promtool
#   hack/build-prometheus.sh --update    rewrite the wrapper for test/go.mod's version
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
wrapper="$root/hack/tools/prometheus"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
tags="remove_all_sd"

die() { echo "build-prometheus: $*" >&2; exit 1; }

want="$(cd "$root/test" && go list -m -f '{{.Version}}' github.com/prometheus/prometheus)" || die "github.com/prometheus/prometheus is not in test/go.mod"

if [ "${1:-}" = "--update" ]; then
  {
    echo "// Wrapper module that builds the Prometheus server and promtool for the"
    echo "// monitoring tests; written by hack/build-prometheus.sh --update. Do not"
    echo "// edit by hand."
    echo "module github.com/mongoferry/mongoferry/hack/tools/prometheus"
    echo
    echo "go $(sed -n 's/^go //p' "$root/go.mod")"
    echo
    echo "tool ("
    echo "	github.com/prometheus/prometheus/cmd/prometheus"
    echo "	github.com/prometheus/prometheus/cmd/promtool"
    echo ")"
    echo
    echo "require github.com/prometheus/prometheus ${want}"
  } > "$wrapper/go.mod"
  rm -f "$wrapper/go.sum"
  # A build with -mod=mod records what the tagged build needs (go mod tidy
  # would fetch every service discovery's SDK, which the build leaves out).
  (cd "$wrapper" && go build -mod=mod -tags "$tags" -o /dev/null github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool)
  echo "hack/tools/prometheus now builds github.com/prometheus/prometheus ${want}; commit go.mod and go.sum"
  exit 0
fi

version="$(cd "$wrapper" && go list -m -f '{{.Version}}' github.com/prometheus/prometheus)" || die "cannot read the github.com/prometheus/prometheus version from $wrapper/go.mod"
[ "$version" = "$want" ] || die "test/go.mod uses github.com/prometheus/prometheus ${want} but the wrapper builds ${version}: run hack/build-prometheus.sh --update"

out="${1:-$root/bin}"
# Module v0.3XX.Y is Prometheus 3.XX.Y.
release="$(echo "$version" | sed -n 's/^v0\.3\([0-9][0-9]\)\.\([0-9]*\)$/3.\1.\2/p' | sed 's/^3\.0/3./')"
ldflags="-s -w -X github.com/prometheus/common/version.Version=${release:-$version} -X github.com/prometheus/common/version.Branch=module"
mkdir -p "$out"
start=$SECONDS
for cmd in prometheus promtool; do
  echo "building ${cmd} (github.com/prometheus/prometheus ${version}) into ${out}/${cmd}"
  (cd "$wrapper" && go build -trimpath -tags "$tags" -ldflags "$ldflags" -o "$out/$cmd" "github.com/prometheus/prometheus/cmd/$cmd")
done
echo "built in $((SECONDS - start))s: $("$out/prometheus" --version 2>&1 | sed -n 1p)"

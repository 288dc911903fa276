#!/usr/bin/env bash
# Builds FerretDB from the Go module proxy into bin/ferretdb.
#
# FerretDB panics at start unless build/version/version.txt holds a version,
# and the module as published does not carry that file, so the module is
# copied out of the module cache, the file is written, and the copy is built.
set -euo pipefail

version="${FERRETDB_VERSION:-v1.24.0}"
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/bin/ferretdb}"
work="$root/bin/.ferretdb-src"

dir="$(go mod download -json "github.com/FerretDB/FerretDB@${version}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
if [ -z "$dir" ] || [ ! -d "$dir" ]; then
  echo "build-ferretdb: could not download github.com/FerretDB/FerretDB@${version} from the Go module proxy" >&2
  exit 1
fi

rm -rf "$work"
mkdir -p "$(dirname "$work")"
cp -r "$dir" "$work"
chmod -R u+w "$work"
printf '%s\n' "$version" > "$work/build/version/version.txt"

echo "building FerretDB ${version} into ${out}"
(cd "$work" && GOFLAGS=-mod=mod go build -trimpath -o "$out" ./cmd/ferretdb)
rm -rf "$work"
"$out" --version | sed -n 1p

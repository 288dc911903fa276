#!/usr/bin/env bash
# Builds the operator's image with podman on a machine that reaches no image
# registry: `make image`.
#
#   hack/build-image.sh IMAGE [VERSION]
#
# The Dockerfile builds on golang and distroless/static:nonroot, pulled from
# registries. This script builds the same image from what it can reach here:
#   1. both binaries, by Go, with the Dockerfile's flags (static, stripped,
#      VERSION and IMAGE stamped);
#   2. a base image in place of distroless/static:nonroot (BASE below), FROM
#      scratch, with what distroless gives a static binary: /etc/passwd and
#      /etc/group with root, nobody and nonroot (65532), /etc/nsswitch.conf,
#      the CA bundle (/etc/ssl/certs/ca-certificates.crt, Debian's
#      ca-certificates), the time zones (/usr/share/zoneinfo, Debian's
#      tzdata), /tmp (1777), /home/nonroot (owned by 65532), and its PATH and
#      SSL_CERT_FILE;
#   3. the Dockerfile's final stage itself, word for word, on that base, with
#      `COPY --from=builder /out/...` reading the binaries of step 1: its
#      labels, user, working directory and entrypoint are those users get.
# test/containers compares the result with the Dockerfile.
set -euo pipefail

image="${1:?usage: build-image.sh IMAGE [VERSION]}"
version="${2:-${image##*:}}"
root="$(cd "$(dirname "$0")/.." && pwd)"
base="${BASE_IMAGE:-localhost/mongoferry-base:static-nonroot}"
podman="${PODMAN:-podman}"

for f in /etc/ssl/certs/ca-certificates.crt /usr/share/zoneinfo/UTC; do
  if [ ! -e "$f" ]; then
    echo "build-image: $f is missing: apt-get install -y ca-certificates tzdata" >&2
    exit 1
  fi
done
if ! command -v "$podman" >/dev/null; then
  echo "build-image: podman is missing: apt-get install -y podman runc (or make test-containers, which installs them)" >&2
  exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# 1. The binaries, as the Dockerfile's builder stage builds them.
echo "build-image: building manager and ferry ${version} (static)"
mkdir -p "$work/ctx/out"
pkg=github.com/mongoferry/mongoferry
(cd "$root" &&
  CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X ${pkg}/internal/version.Version=${version} -X main.defaultWorkerImage=${image}" \
    -o "$work/ctx/out/manager" ./cmd/manager &&
  CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X ${pkg}/internal/version.Version=${version}" \
    -o "$work/ctx/out/ferry" ./cmd/ferry)

# 2. The base: distroless/static:nonroot's files, from this machine.
fs="$work/base/rootfs"
mkdir -p "$fs/etc/ssl/certs" "$fs/usr/share" "$fs/tmp" "$fs/home/nonroot" "$fs/root" "$fs/var"
cat >"$fs/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
cat >"$fs/etc/group" <<'EOF'
root:x:0:
nobody:x:65534:
tty:x:5:
staff:x:50:
nonroot:x:65532:
EOF
printf 'hosts: files dns\n' >"$fs/etc/nsswitch.conf"
cp -L /etc/ssl/certs/ca-certificates.crt "$fs/etc/ssl/certs/ca-certificates.crt"
cp -rL /usr/share/zoneinfo "$fs/usr/share/zoneinfo"
chmod 0644 "$fs/etc/passwd" "$fs/etc/group" "$fs/etc/nsswitch.conf" "$fs/etc/ssl/certs/ca-certificates.crt"
chmod 1777 "$fs/tmp"
chmod 0700 "$fs/home/nonroot" "$fs/root"
tar --numeric-owner --owner=0 --group=0 -C "$fs" -cf "$work/base/rootfs.tar" --exclude=./home/nonroot .
tar --numeric-owner --owner=65532 --group=65532 -C "$fs" -rf "$work/base/rootfs.tar" ./home/nonroot
cat >"$work/base/Containerfile" <<'EOF'
FROM scratch
ADD rootfs.tar /
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
USER 65532
WORKDIR /home/nonroot
EOF
echo "build-image: building the base ${base} (distroless/static:nonroot's layout)"
"$podman" build --quiet --tag "$base" "$work/base" >/dev/null

# 3. The Dockerfile's final stage on that base.
awk -v base="$base" '
  /^FROM[[:space:]]/ { stage = ""; last = NR }
  { lines[NR] = $0 }
  END {
    for (i = last; i <= NR; i++) {
      l = lines[i]
      if (i == last) { l = "FROM " base }
      if (l ~ /^COPY[[:space:]]+--from=builder[[:space:]]/) {
        sub(/--from=builder[[:space:]]+/, "", l)
        gsub(/[[:space:]]\/out\//, " out/", l)
      }
      print l
    }
  }' "$root/Dockerfile" >"$work/ctx/Containerfile"
echo "build-image: building ${image} from the Dockerfile's final stage:"
sed 's/^/  /' "$work/ctx/Containerfile"
"$podman" build --quiet --tag "$image" "$work/ctx" >/dev/null
"$podman" image inspect --format '{{.Id}} {{.Config.User}} {{.Config.Entrypoint}}' "$image"

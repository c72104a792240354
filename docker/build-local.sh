#!/usr/bin/env bash
# Builds the strobe and etcd images with no registry access: nothing is pulled.
#
#   docker/build-local.sh            # cargo build --release --features cluster, then the images
#   STROBE_BIN=path/to/strobe docker/build-local.sh   # use a cluster build you already have
#
# 1. the strobe binary is built on the host (a `--features cluster` build);
# 2. a base root filesystem is assembled from the host (Debian bookworm): its
#    /bin/sh and curl (the health checks), the shared libraries that they,
#    strobe and etcd load (as ldd lists them), CA certificates, and the users;
#    `docker import` makes it the image strobe-base:local;
# 3. docker/local.Dockerfile builds strobe:$STROBE_TAG and strobe-etcd:$STROBE_TAG
#    FROM that base, copying the host's strobe and etcd (Debian's etcd-server).
# It takes seconds once the binary exists. On a machine that can pull,
# docker/Dockerfile (multi-stage) is the simpler path: docs/docker.md.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
TAG=${STROBE_TAG:-latest}
IMAGE=${STROBE_IMAGE:-strobe}
ETCD_IMAGE=${STROBE_ETCD_IMAGE:-strobe-etcd}
BASE=strobe-base:local

say() { printf '=== build-local: %s\n' "$*"; }
die() { printf 'build-local: %s\n' "$*" >&2; exit 1; }

command -v docker >/dev/null || die "docker is not installed"
docker info >/dev/null 2>&1 || die "the Docker engine does not answer (docker info)"
command -v ldd >/dev/null || die "ldd is missing (Debian: libc-bin)"

if [ -z "${STROBE_BIN:-}" ]; then
    say "cargo build --release --features cluster"
    cargo build --release --locked --features cluster --bin strobe
    STROBE_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/strobe"
fi
[ -x "$STROBE_BIN" ] || die "no strobe binary at $STROBE_BIN"
ETCD_BIN=${ETCD_BIN:-$(command -v etcd || echo /usr/bin/etcd)}
[ -x "$ETCD_BIN" ] || die "etcd not found (Debian: apt-get install etcd-server), or set ETCD_BIN"
CURL_BIN=$(command -v curl) || die "curl not found (Debian: apt-get install curl)"
SH_BIN=$(readlink -f /bin/sh)

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/rootfs
ctx=$stage/ctx
mkdir -p "$root"/{bin,usr/bin,etc/ssl/certs,tmp,var/lib/strobe/data,var/lib/strobe/shared,var/lib/etcd} "$ctx/bin"

# A file and, at the same paths, every shared library it loads.
with_libs() {
    local file=$1 dest=$2 lib
    install -D -m 0755 "$file" "$root$dest"
    for lib in $(ldd "$file" 2>/dev/null | grep -o '/[^ ]*' || true); do
        [ -e "$root$lib" ] || install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
    done
}
with_libs "$SH_BIN" /bin/sh
with_libs "$CURL_BIN" /usr/bin/curl
with_libs "$STROBE_BIN" /usr/local/bin/strobe
with_libs "$ETCD_BIN" /usr/bin/etcd
# The binaries themselves come with the images' own layers.
rm -f "$root/usr/local/bin/strobe" "$root/usr/bin/etcd"
rmdir "$root/usr/local/bin" "$root/usr/local" 2>/dev/null || true
[ -f /etc/ssl/certs/ca-certificates.crt ] && cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
cat >"$root/etc/passwd" <<'P'
root:x:0:0:root:/root:/bin/sh
strobe:x:10001:10001:strobe:/var/lib/strobe:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/sh
P
printf 'root:x:0:\nstrobe:x:10001:\nnogroup:x:65534:\n' >"$root/etc/group"
printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
chmod 1777 "$root/tmp"
chmod 700 "$root/var/lib/etcd"

# Owners set in the archive, so this needs no root: system files root's,
# the data directories the images' user's (uid 10001).
say "importing $BASE"
(
    cd "$root"
    tar --numeric-owner --owner=0 --group=0 -cf "$stage/base.tar" bin etc lib* usr tmp
    tar --numeric-owner --owner=0 --group=0 --no-recursion -rf "$stage/base.tar" var var/lib
    tar --numeric-owner --owner=10001 --group=10001 -rf "$stage/base.tar" var/lib/strobe var/lib/etcd
)
old_base=$(docker image inspect -f '{{.Id}}' "$BASE" 2>/dev/null || true)
docker import -m "strobe base: host /bin/sh, curl and shared libraries" "$stage/base.tar" "$BASE" >/dev/null

cp "$STROBE_BIN" "$ctx/bin/strobe"
# Debug info is most of the release binary's size (the line tables for
# backtraces); STROBE_STRIP=0 keeps it.
if [ "${STROBE_STRIP:-1}" = 1 ] && command -v strip >/dev/null; then strip --strip-debug "$ctx/bin/strobe"; fi
cp "$ETCD_BIN" "$ctx/bin/etcd"
cp docker/entrypoint.sh docker/strobe.toml docker/local.Dockerfile "$ctx/"
build() {
    local target=$1 image=$2 old
    old=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
    say "building $image ($target)"
    # (the legacy builder, all an engine without buildx has, warns that it is deprecated)
    docker build -q --build-arg BASE="$BASE" --target "$target" -f "$ctx/local.Dockerfile" -t "$image" "$ctx" \
        >/dev/null 2>"$stage/build.err" || { cat "$stage/build.err" >&2; die "docker build of $image failed"; }
    # The image this replaced, if nothing else uses it.
    [ -z "$old" ] || [ "$old" = "$(docker image inspect -f '{{.Id}}' "$image")" ] || docker rmi "$old" >/dev/null 2>&1 || true
}
build etcd "$ETCD_IMAGE:$TAG"
build strobe "$IMAGE:$TAG"
[ -z "$old_base" ] || [ "$old_base" = "$(docker image inspect -f '{{.Id}}' "$BASE")" ] || docker rmi "$old_base" >/dev/null 2>&1 || true
say "done: $IMAGE:$TAG $ETCD_IMAGE:$TAG"

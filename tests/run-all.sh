#!/usr/bin/env bash
# Strobe's test command: installs what the tests need when it is missing, then
# runs every test. Works on a fresh Debian machine that has only the Rust
# toolchain (run as root, or with sudo available for apt-get; the full-disk tests mount
# tmpfs volumes and need root themselves: crates/{ledger,metadata}/tests/no_space.rs and
# tests/conformance/test_disk_full.py fail without it).
#
#   - Debian packages: protobuf-compiler (the cluster build's etcd client),
#     etcd-server (the metadata tests run against a real etcd)
#     and openssl (the security tests make their certificates)
#   - a Python venv in .venv with the official client, pulsar-client[avro]==3.13.0
#   - starts a private etcd on a free port and exports ETCD_ENDPOINTS
#   - cargo fmt --check, the module-cycle check, clippy (warnings are errors),
#     cargo test, pytest, the interop test, a 3-minute fault campaign
#   - with a Docker engine: tests/docker/run.sh (the images and the compose cluster)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

say() { printf '\n=== %s\n' "$*"; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"
    elif command -v sudo >/dev/null; then sudo "$@"
    else echo "tests/run-all.sh: need root or sudo to run: $*" >&2; exit 1
    fi
}

need_pkgs=()
command -v protoc >/dev/null || need_pkgs+=(protobuf-compiler)
command -v openssl >/dev/null || need_pkgs+=(openssl)
command -v etcd >/dev/null || [ -x /usr/bin/etcd ] || need_pkgs+=(etcd-server)
python3 -c 'import venv, ensurepip' 2>/dev/null || need_pkgs+=(python3-venv)
command -v python3 >/dev/null || need_pkgs+=(python3 python3-venv)
# libfaketime: the fault campaign runs brokers on skewed clocks.
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1 ] || need_pkgs+=(faketime)
if [ ${#need_pkgs[@]} -gt 0 ]; then
    say "installing Debian packages: ${need_pkgs[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi
ETCD_BIN=$(command -v etcd || echo /usr/bin/etcd)
# Debian's etcd-server ships etcd; fail loudly if that changed.
[ -x "$ETCD_BIN" ] || { echo "tests/run-all.sh: etcd not found after installing etcd-server" >&2; exit 1; }

PY_CLIENT=3.13.0
if ! .venv/bin/python -c "import pulsar, fastavro, sys; sys.exit(pulsar.__version__ != '$PY_CLIENT')" 2>/dev/null; then
    say "creating .venv with pulsar-client[avro]==$PY_CLIENT"
    python3 -m venv .venv
    .venv/bin/pip install -q --disable-pip-version-check "pulsar-client[avro]==$PY_CLIENT" pytest pytest-xdist
fi
# pytest-xdist: the conformance tests run in several processes (below).
.venv/bin/python -c 'import pytest, xdist' 2>/dev/null || .venv/bin/pip install -q --disable-pip-version-check pytest pytest-xdist
# An S3 server for the object-store backend's tests (moto honours create-only
# puts, If-None-Match: *, since 5.2.5).
[ -x .venv/bin/moto_server ] || .venv/bin/pip install -q --disable-pip-version-check 'moto[server]>=5.2.5'

# A private etcd for the metadata tests.
ETCD_DIR=$(mktemp -d)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ETCD_PORT=$(free_port); ETCD_PEER=$(free_port)
"$ETCD_BIN" --name strobe-test --data-dir "$ETCD_DIR/data" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER" \
    --initial-cluster "strobe-test=http://127.0.0.1:$ETCD_PEER" >"$ETCD_DIR/etcd.log" 2>&1 &
ETCD_PID=$!
MOTO_PID=
BG_PIDS=()
cleanup() {
    kill "$ETCD_PID" $MOTO_PID "${BG_PIDS[@]}" 2>/dev/null || true
    wait "$ETCD_PID" $MOTO_PID "${BG_PIDS[@]}" 2>/dev/null || true
    rm -rf "$ETCD_DIR"
}
trap cleanup EXIT
export ETCD_ENDPOINTS="http://127.0.0.1:$ETCD_PORT"
for _ in $(seq 1 100); do
    python3 - "$ETCD_PORT" <<'PY' && break
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=0.2).close()
except OSError:
    sys.exit(1)
PY
    sleep 0.1
done
say "etcd at $ETCD_ENDPOINTS"

MOTO_PORT=$(free_port)
.venv/bin/moto_server -H 127.0.0.1 -p "$MOTO_PORT" >"$ETCD_DIR/moto.log" 2>&1 &
MOTO_PID=$!
for _ in $(seq 1 100); do
    python3 -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=0.2).close()' "$MOTO_PORT" 2>/dev/null && break
    kill -0 "$MOTO_PID" 2>/dev/null || { cat "$ETCD_DIR/moto.log"; echo "tests/run-all.sh: moto did not start" >&2; exit 1; }
    sleep 0.1
done
export STROBE_TEST_S3_ENDPOINT="http://127.0.0.1:$MOTO_PORT"
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_DEFAULT_REGION=us-east-1
say "moto (S3) at $STROBE_TEST_S3_ENDPOINT"

# A build in the background, niced so that what runs in the foreground keeps the
# cores it needs; its output goes to a log that is shown if it fails.
# Each starts once the one begun before it has ended (ok or not: its own wait says).
bg_build() {
    local what=$1 log=$2 target=$3 after=
    [ ${#BG_PIDS[@]} -eq 0 ] || after=${BG_PIDS[${#BG_PIDS[@]}-1]}
    shift 3
    say "$what: building in the background (log: $ETCD_DIR/$log.log)"
    (
        if [ -n "$after" ]; then
            while kill -0 "$after" 2>/dev/null; do sleep 1; done
        fi
        exec env CARGO_TARGET_DIR="$target" nice -n 19 cargo "$@"
    ) >"$ETCD_DIR/$log.log" 2>&1 &
    BG_PIDS+=($!)
}
bg_wait() {
    wait "$1" || { tail -40 "$ETCD_DIR/$2.log"; echo "tests/run-all.sh: the background build $2 failed" >&2; exit 1; }
}
say "cargo fmt --check"
cargo fmt --all -- --check

say "module cycles: no file imports one that imports it back (tests/module_cycles.py)"
python3 tests/module_cycles.py --self-test
python3 tests/module_cycles.py

say "cargo clippy"
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
# The fault campaign is not a default test target (test = false in Cargo.toml),
# so --all-targets leaves it out: checked on its own, so that it cannot rot.
cargo clippy --workspace --all-features --locked --test nemesis -- -D warnings

say "cargo test"
cargo test --workspace --all-features --locked --no-run
# Three builds go on in the background, niced, while the Rust tests run (they wait on
# brokers and etcd more than they compute) and then the conformance tests, each in its
# own target dir because cargo locks a target dir for a whole build:
#  - the release build the conformance tests run (the cluster build: standalone runs
#    on it too, and the cluster tests need it). It is what the run waits for, so it
#    goes alone: begun at the top, it got little of the cores clippy and the test
#    build kept busy, and built beside the other two it ended later (docs/performance.md,
#    "The test command's own time");
#  - then the fuzz targets (their own workspace, fuzz/README.md says how to run them),
#    checked so that an API change cannot leave them broken;
#  - and the magnetar-driver interop client (its own workspace: its dependencies stay
#    out of strobe's build).
# Each is waited for, and its failure fails the run, before what needs it.
RELEASE_TARGET="$ROOT/target/ci-release"
bg_build "release build (cluster features) for the conformance tests" release-build "$RELEASE_TARGET" \
    build --release --locked --features cluster --bin strobe
RELEASE_PID=$!
bg_build "fuzz targets, after the release build" fuzz-check "$ROOT/fuzz/target" \
    check --locked --manifest-path fuzz/Cargo.toml --bins
FUZZ_PID=$!
bg_build "interop client, after the fuzz targets" interop-build "$ROOT/target/interop" \
    build --release --locked -q --manifest-path tests/interop/magnetar/Cargo.toml
INTEROP_BUILD_PID=$!
cargo test --workspace --all-features --locked

say "conformance: the official Python client against strobe"
bg_wait "$RELEASE_PID" release-build
export STROBE_BIN="$RELEASE_TARGET/release/strobe"
# Four processes (pytest-xdist), a test file to each at a time: the tests wait on
# brokers, timeouts and redeliveries far more than they compute (one process left
# the machine mostly idle: docs/performance.md), and every test makes its own brokers,
# ports and directories.
.venv/bin/python -m pytest -q -n 4 --dist loadfile tests/conformance

# Built after the release build, while the conformance tests ran.
say "fuzz targets compile (fuzz/README.md says how to run them)"
bg_wait "$FUZZ_PID" fuzz-check

say "interop: magnetar-driver (an independent Rust client with transactions) against strobe standalone"
bg_wait "$INTEROP_BUILD_PID" interop-build
INTEROP_DIR=$(mktemp -d)
"$STROBE_BIN" standalone --data-dir "$INTEROP_DIR/data" --broker-port 0 --http-port 0 \
    --bind-address 127.0.0.1 --advertised-address 127.0.0.1 >"$INTEROP_DIR/log" 2>&1 &
INTEROP_PID=$!
INTEROP_PORT=
for _ in $(seq 1 200); do
    INTEROP_PORT=$(grep -m1 "strobe standalone is ready" "$INTEROP_DIR/log" | sed -n 's/.* addr=[^ ]*:\([0-9]*\).*/\1/p' || true)
    [ -n "$INTEROP_PORT" ] && break
    sleep 0.1
done
[ -n "$INTEROP_PORT" ] || { cat "$INTEROP_DIR/log"; echo "tests/run-all.sh: strobe did not start for the interop test" >&2; exit 1; }
interop_rc=0
"$ROOT/target/interop/release/strobe-interop-magnetar" "pulsar://127.0.0.1:$INTEROP_PORT" || interop_rc=$?
kill "$INTEROP_PID"; wait "$INTEROP_PID" 2>/dev/null || true
rm -rf "$INTEROP_DIR"
[ "$interop_rc" = 0 ] || { echo "tests/run-all.sh: the magnetar-driver interop test failed" >&2; exit 1; }

say "fault campaign: 3 minutes of seeded faults on a 3-broker cluster, history checked (tests/nemesis)"
# Seed 42, release brokers (STROBE_BIN above). docs/reliability.md has what the
# campaigns found and the longer runs; another seed or length is one command:
# STROBE_NEMESIS_SEED=7 STROBE_NEMESIS_SECS=600 cargo test --workspace --all-features --test nemesis
STROBE_NEMESIS_SEED=42 STROBE_NEMESIS_SECS=180 \
    cargo test --workspace --all-features --locked --test nemesis -- --nocapture

# The image and the compose cluster, built and driven for real (tests/docker/run.sh,
# docs/docker.md). Needs a Docker engine; on this project's machines there is one.
if docker info >/dev/null 2>&1; then
    say "docker: the images (built without a registry) and the etcd + 3-broker compose cluster"
    # docker/build-local.sh puts the host's curl into the images (their health checks).
    command -v curl >/dev/null || { as_root apt-get update -qq; as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl >/dev/null; }
    STROBE_BIN="$STROBE_BIN" PYTHON="$ROOT/.venv/bin/python" tests/docker/run.sh
else
    say "SKIPPED the docker tests (tests/docker/run.sh): no Docker engine answers 'docker info'"
fi

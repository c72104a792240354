#!/usr/bin/env bash
# Instructions a broker build executes for a fixed produce workload, counted by
# callgrind: repeatable to about 1% for one binary, whatever else the host is
# doing (wall-clock phases on the shared VM vary by a factor of two within an
# hour). For comparing two builds where run.sh cannot tell them apart.
#
#   benches/perf/callgrind_produce.sh BROKER_BINARY [MESSAGES]
#
# Runs `BROKER standalone` (sync = never, so no time goes to the disk) under
# valgrind --tool=callgrind, produces MESSAGES (30000) 1 KiB messages with
# batching (1 ms) through this checkout's target/release/strobe perf, stops the
# broker and prints its total instruction count (start-up included, the same
# for every run of one build).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 BROKER_BINARY [MESSAGES]" >&2; exit 2; }
BIN=$(realpath "$1"); MESSAGES=${2:-30000}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PERF="$ROOT/target/release/strobe"
command -v valgrind >/dev/null || { echo "$0: valgrind is needed (Debian package valgrind)" >&2; exit 1; }
[ -x "$PERF" ] || { echo "$0: build the perf client first: cargo build --release --bin strobe" >&2; exit 1; }
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
printf 'sync = "never"\n' > "$D/strobe.toml"
valgrind --tool=callgrind --callgrind-out-file="$D/cg.out" "$BIN" standalone --config "$D/strobe.toml" \
  --data-dir "$D/data" --broker-port 0 --http-port 0 --bind-address 127.0.0.1 --advertised-address 127.0.0.1 \
  2> "$D/broker.log" &
VG=$!
for _ in $(seq 1 600); do grep -q 'standalone is ready' "$D/broker.log" && break; sleep 0.2; done
PORT=$(sed -n 's/.*standalone is ready.* addr=[0-9.]*:\([0-9]*\).*/\1/p' "$D/broker.log" | head -1)
[ -n "$PORT" ] || { cat "$D/broker.log" >&2; echo "$0: the broker did not start" >&2; exit 1; }
"$PERF" perf produce -u "pulsar://127.0.0.1:$PORT" --topic callgrind -m "$MESSAGES" -s 1024 --batch-delay-ms 1 > "$D/perf.log" 2>&1
kill -INT "$VG"; wait "$VG" || true
total=$(callgrind_annotate "$D/cg.out" 2>/dev/null | sed -n 's/^ *\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p')
echo "$BIN: $total instructions for $MESSAGES messages"

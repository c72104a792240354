#!/usr/bin/env bash
# Alternating A/B runs of run.sh: two strobe binaries, PAIRS pairs, the order
# flipped every pair (A B, B A, ...), each run with BROKERS=strobe and the same
# perf client (this checkout's target/release/strobe). On a shared VM one run
# says as much about the host as about the broker: compare pairs, not runs.
#
#   benches/perf/ab.sh /tmp/strobe-old /tmp/strobe-new            # 3 pairs, every scenario
#   PAIRS=4 SCENARIOS="produce e2e" OUT=/tmp/ab benches/perf/ab.sh A_BIN B_BIN
#
# Prints each run's rows; raw results stay under OUT (A-<n>, B-<n>).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 A_BINARY B_BINARY" >&2; exit 2; }
A=$(realpath "$1"); B=$(realpath "$2")
for bin in "$A" "$B"; do [ -x "$bin" ] || { echo "$0: $bin is not an executable" >&2; exit 2; }; done
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PAIRS=${PAIRS:-3}
OUT=${OUT:-$(mktemp -d /tmp/strobe-ab.XXXXXX)}
mkdir -p "$OUT"
for i in $(seq 1 "$PAIRS"); do
  if [ $((i % 2)) = 1 ]; then order="A B"; else order="B A"; fi
  for w in $order; do
    bin=$A; [ "$w" = B ] && bin=$B
    SKIP_BUILD=1 STROBE_BROKER="$bin" OUT="$OUT/$w-$i" BROKERS=strobe \
      "$ROOT/benches/perf/run.sh" > "$OUT/$w-$i.log" 2>&1 || echo "$w-$i: run.sh failed (see $OUT/$w-$i.log)"
    echo "== $w-$i ($bin)"
    grep -E '^(produce|consume|e2e|lat10k|topics100) +strobe ' "$OUT/$w-$i.log" || true
  done
done
echo "raw results: $OUT"

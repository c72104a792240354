#!/usr/bin/env bash
# Runs run.sh RUNS times (default 3) and counts, goal by goal, in how many
# runs it was met. On the shared VM a single run says as much about the host
# (steal, a neighbour's disk traffic) as about the broker; a goal met in
# every run, or in most, is a statement about the broker.
#
#   benches/perf/repeat.sh                     # 3 full runs, ~8 minutes
#   RUNS=5 SCENARIOS="lat10k topics100" BROKERS=strobe benches/perf/repeat.sh
#
# Every other variable goes to run.sh as it is (SKIP_BUILD, DURATION, ...);
# the build, if any, happens in the first run only. Results: $OUT/r<k>/.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
RUNS=${RUNS:-3}
OUT=${OUT:-$(mktemp -d /tmp/strobe-repeat.XXXXXX)}
mkdir -p "$OUT"
for ((k = 1; k <= RUNS; k++)); do
  echo "[$(date +%T)] run $k of $RUNS: $OUT/r$k" >&2
  OUT="$OUT/r$k" "$HERE/run.sh" > "$OUT/r$k.txt"
  export SKIP_BUILD=1
done
python3 - "$OUT" "$RUNS" <<'PY'
import re, sys
out, runs = sys.argv[1], int(sys.argv[2])
goals = {}
for k in range(1, runs + 1):
    for line in open(f"{out}/r{k}.txt"):
        if not line.startswith("goal: "):
            continue
        text = line[len("goal: "):].strip()
        m = re.match(r"(.*): (met|NOT met)( \(.*\))?$", text)
        if not m:
            continue
        # The goal without this run's figures: numbers (not the digits of
        # names such as lat10k or p99) become '#'.
        key = re.sub(r"(?<![A-Za-z\d])\d[\d,.]*", "#", m.group(1))
        goals.setdefault(key, []).append((k, m.group(2) == "met", m.group(1)))
for key, seen in goals.items():
    met = sum(ok for _, ok, _ in seen)
    print(f"{met} of {len(seen)} runs met: {key}")
    for k, ok, text in seen:
        print(f"    run {k}: {text}: {'met' if ok else 'NOT met'}")
print(f"\nper-run tables: {out}/r<k>.txt")
PY

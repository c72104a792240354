#!/usr/bin/env bash
# Scalable topics under a load step and a migration (docs/scalable-topics.md):
#  1. a one-segment topic gets 1,000 msg/s, then 40,000 msg/s, then nothing:
#     the active segments over time (autoscaling) and the publish latency
#     after the step;
#  2. a 4-partition v4 topic written at 10,000 msg/s through its synthetic
#     layout (PIP-475) is migrated mid-run: the producer's pause.
# Usage: benches/perf/scalable_autoscale.sh [STROBE_BIN]  (default target/release/strobe)
# AUTOSCALE_INTERVAL, SPLIT_COOLDOWN, MERGE_COOLDOWN, MERGE_WINDOW (seconds) tune the broker.
set -euo pipefail
BIN=${1:-target/release/strobe}
[ -x "$BIN" ] || { echo "no $BIN: cargo build --release first" >&2; exit 1; }
WORK=$(mktemp -d)
# LOG_TO=FILE keeps the broker's log.
# The broker is waited for after the kill: it may still be writing its data.
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; [ -n "${LOG_TO:-}" ] && cp "$WORK/broker.log" "$LOG_TO"; rm -rf "$WORK"' EXIT
cat > "$WORK/strobe.toml" <<EOF
stats_update_interval_secs = 1
scalable_topic_gc_interval_secs = 0
scalable_topic_auto_scale_interval_secs = ${AUTOSCALE_INTERVAL:-5}
scalable_topic_split_cooldown_secs = ${SPLIT_COOLDOWN:-5}
scalable_topic_merge_cooldown_secs = ${MERGE_COOLDOWN:-5}
scalable_topic_merge_window_secs = ${MERGE_WINDOW:-10}
EOF
"$BIN" standalone --config "$WORK/strobe.toml" --data-dir "$WORK/data" \
  --broker-port 6650 --http-port 8080 > "$WORK/broker.log" 2>&1 &
for _ in $(seq 1 100); do
  curl -sf http://127.0.0.1:8080/admin/v2/clusters > /dev/null && break
  sleep 0.2
done
curl -sf http://127.0.0.1:8080/admin/v2/clusters > /dev/null || { cat "$WORK/broker.log"; exit 1; }

echo "== load step: 1k -> 40k msg/s at 20 s, stop at 80 s, watch until 140 s"
curl -sf -X PUT http://127.0.0.1:8080/admin/v2/scalable/public/default/step
"$BIN" perf produce --scalable --topic topic://public/default/step -s 100 --keys 1000 \
  -r 1000 --step-rate 40000 --step-after 20 --idle-after 80 -d 140 --json

echo "== migration of a 4-partition topic at 10k msg/s, at 15 s of 30 s"
curl -sf -X PUT -H 'content-type: application/json' -d 4 \
  http://127.0.0.1:8080/admin/v2/persistent/public/default/mig4/partitions
"$BIN" perf produce --scalable --topic persistent://public/default/mig4 -s 100 --keys 1000 \
  -r 10000 -d 30 --migrate-after 15 --json

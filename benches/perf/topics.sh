#!/usr/bin/env bash
# Topic scale (issue 47): one standalone broker, N topics each with a producer
# and a consumer over C connections, at an aggregate rate; then a restart with
# the same data and the time until every topic answers a producer again.
#
#   TOPICS=10000 RATE=20000 DURATION=30 CONNECTIONS=50 benches/perf/topics.sh
#
# Figures (one JSON line per phase in $OUT/summary.jsonl, and on stdout):
#  - setup_s: from the first request to every producer and consumer answered
#    (every topic loaded), as `strobe perf` measures it;
#  - publish / end-to-end latency and rates under the rate;
#  - broker RSS (now and peak), open descriptors and segment files, broker
#    and client CPU seconds, sampled around each phase;
#  - restart: the broker's start to listening, then setup_s of one producer per
#    topic (every topic loaded again from the disk).
# STROBE_BIN (default target/release/strobe), STROBE_CONFIG (extra config
# lines, e.g. 'max_open_segment_files = 0' for the A/B), OUT (kept).
set -euo pipefail

TOPICS=${TOPICS:-10000}
RATE=${RATE:-20000}
DURATION=${DURATION:-30}
CONNECTIONS=${CONNECTIONS:-50}
SIZE=${SIZE:-1024}
CONCURRENCY=${CONCURRENCY:-256}
STROBE_BIN=${STROBE_BIN:-target/release/strobe}
OUT=${OUT:-$(mktemp -d /tmp/strobe-topics.XXXXXX)}
mkdir -p "$OUT"
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cpu_s() { awk '{ print ($14 + $15) / 100 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
status_kib() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
fds() { ls "/proc/$1/fd" 2>/dev/null | wc -l; }
# Segment files among them (from the links, not /metrics: with 100,000
# topics the metrics page is large enough that polling it loads the broker).
seg_fds() { find "/proc/$1/fd" -lname '*.seg' 2>/dev/null | wc -l; }

PID="" PORT="" HTTP_PORT=""
start_broker() {
  local dir="$OUT/broker"
  mkdir -p "$dir"
  [[ -n "$PORT" ]] || { PORT=$(free_port); HTTP_PORT=$(free_port); }
  printf 'sync = "always"\n' > "$dir/strobe.toml"
  [[ -z "${STROBE_CONFIG:-}" ]] || printf '%s\n' "$STROBE_CONFIG" >> "$dir/strobe.toml"
  local t0=${EPOCHREALTIME/./}
  STROBE_LOG=${STROBE_LOG:-info} "$STROBE_BIN" standalone --config "$dir/strobe.toml" --data-dir "$dir/data" \
    --broker-port "$PORT" --http-port "$HTTP_PORT" \
    --bind-address 127.0.0.1 --advertised-address 127.0.0.1 >> "$dir/broker.log" 2>&1 &
  PID=$!
  until { exec 3<>"/dev/tcp/127.0.0.1/$PORT"; } 2>/dev/null; do
    kill -0 "$PID" 2>/dev/null || { log "the broker exited"; tail -20 "$dir/broker.log" >&2; exit 1; }
    sleep 0.05
  done
  exec 3>&-
  STARTUP_MS=$(( (${EPOCHREALTIME/./} - t0) / 1000 ))
  log "broker pid $PID listening after ${STARTUP_MS} ms"
}
stop_broker() { [[ -z "$PID" ]] || { kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; PID=""; }; }
trap stop_broker EXIT

# phase NAME PERF-ARGS...: runs `strobe perf` and prints one JSON line with
# the broker's figures around it.
phase() {
  local name=$1; shift
  local cpu0; cpu0=$(cpu_s "$PID")
  local peak_fds=0 peak_segs=0
  ( while kill -0 "$PID" 2>/dev/null; do
      echo "$(fds "$PID") $(seg_fds "$PID")"; sleep 1
    done ) > "$OUT/$name.fds" &
  local sampler=$!
  "$STROBE_BIN" perf "$@" --json > "$OUT/$name.json" 2> "$OUT/$name.log" || { log "perf $name failed"; tail -5 "$OUT/$name.log" >&2; }
  kill "$sampler" 2>/dev/null || true; wait "$sampler" 2>/dev/null || true
  read -r peak_fds peak_segs < <(awk '{ if ($1 > f) f = $1; if ($2 > s) s = $2 } END { print f + 0, s + 0 }' "$OUT/$name.fds")
  local line
  line=$(python3 - "$OUT/$name.json" <<EOF
import json, sys
try:
    p = json.load(open(sys.argv[1]))
except Exception:
    p = {"error": "no summary"}
p.update({"phase": "$name", "topics": $TOPICS, "broker_cpu_s": round($(cpu_s "$PID") - $cpu0, 2),
          "broker_rss_mib": $(status_kib "$PID" VmRSS) // 1024, "broker_peak_rss_mib": $(status_kib "$PID" VmHWM) // 1024,
          "broker_fds_now": $(fds "$PID"), "broker_fds_peak": $peak_fds, "segment_files_peak": $peak_segs,
          "startup_ms": $STARTUP_MS})
print(json.dumps(p))
EOF
)
  echo "$line" | tee -a "$OUT/summary.jsonl"
}

log "output in $OUT"
start_broker
common=(-u "pulsar://127.0.0.1:$PORT" --topic "scale" -t "$TOPICS" -s "$SIZE"
        --connections "$CONNECTIONS" --setup-concurrency "$CONCURRENCY")
phase load e2e "${common[@]}" -r "$RATE" -d "$DURATION" --receiver-queue 10
sleep 2
log "idle: RSS $(( $(status_kib "$PID" VmRSS) / 1024 )) MiB, $(fds "$PID") descriptors"
stop_broker
start_broker
phase restart produce "${common[@]}" -m "$TOPICS" --batch-delay-ms 0

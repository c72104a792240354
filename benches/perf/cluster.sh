#!/usr/bin/env bash
# The cluster's storage side by side with standalone's, in one run: the same
# `strobe perf produce` (1 KiB messages, one producer, batching 1 ms) against
#   standalone   strobe standalone, local file ledger, sync = always
#   shared-dir   one `strobe broker` on etcd + a shared directory (file://)
#   s3           one `strobe broker` on etcd + a moto S3 server
# first at a fixed rate (RATE msg/s, publish p50/p99 are the figures that
# matter) and then as fast as it goes (throughput). Object puts per second come
# from the broker's /metrics (strobe_storage_object_puts_total) before and after.
#
#   benches/perf/cluster.sh                       # ~2 minutes
#   RATE=5000 DURATION=20 benches/perf/cluster.sh
#   TARGETS="standalone shared-dir" benches/perf/cluster.sh
#   BROKER_CONFIG='storage_flush_delay_ms = 5' TARGETS=s3 benches/perf/cluster.sh
#
# Needs: target/release/strobe built with --features cluster (built here unless
# SKIP_BUILD=1), etcd, and for s3 the moto server (pip-installed into
# $MOTO_VENV on first use).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
STROBE="$ROOT/target/release/strobe"
RATE=${RATE:-5000}
DURATION=${DURATION:-20}
TARGETS=${TARGETS:-"standalone shared-dir s3"}
MOTO_VENV=${MOTO_VENV:-$HOME/.cache/strobe-bench/moto-venv}
OUT=${OUT:-$(mktemp -d /tmp/strobe-cluster-bench.XXXXXX)}
mkdir -p "$OUT"
rm -f "$OUT"/*.json

log() { echo "[$(date +%T)] $*" >&2; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  (cd "$ROOT" && cargo build --release --features cluster --bin strobe >&2)
fi
ETCD=$(command -v etcd || echo /usr/bin/etcd)
[[ -x "$ETCD" ]] || { echo "etcd is not installed (Debian: etcd-server)" >&2; exit 1; }

PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

wait_port() {
  for _ in $(seq 1 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "nothing listens on $1" >&2; return 1
}

# The ports a strobe log's ready line names: "<port> <http port>".
ready_ports() {
  for _ in $(seq 1 400); do
    line=$(grep -m1 "is ready" "$1" || true)
    if [[ -n "$line" ]]; then
      addr=$(sed -E 's/.* addr=([^ ]+).*/\1/' <<<"$line"); http=$(sed -E 's/.* http=([^ ]+).*/\1/' <<<"$line")
      echo "${addr##*:} ${http##*:}"; return 0
    fi
    sleep 0.05
  done
  echo "strobe did not start: $(tail -20 "$1")" >&2; return 1
}

puts() { curl -s "http://127.0.0.1:$1/metrics" | awk '/^strobe_storage_object_puts_total[{ ]/ { print $2 }'; }

start_etcd() {
  EP=$(free_port); PEER=$(free_port)
  "$ETCD" --name bench --data-dir "$1/etcd" --listen-client-urls "http://127.0.0.1:$EP" \
    --advertise-client-urls "http://127.0.0.1:$EP" --listen-peer-urls "http://127.0.0.1:$PEER" \
    --initial-advertise-peer-urls "http://127.0.0.1:$PEER" --initial-cluster "bench=http://127.0.0.1:$PEER" \
    > "$1/etcd.log" 2>&1 &
  PIDS+=($!)
  wait_port "$EP"
}

start_moto() {
  if [[ ! -x "$MOTO_VENV/bin/moto_server" ]]; then
    log "installing moto[server] into $MOTO_VENV"
    python3 -m venv "$MOTO_VENV"
    "$MOTO_VENV/bin/pip" install -q 'moto[server]>=5.2.5'
  fi
  MP=$(free_port)
  "$MOTO_VENV/bin/moto_server" -H 127.0.0.1 -p "$MP" > "$1/moto.log" 2>&1 &
  PIDS+=($!)
  wait_port "$MP"
  curl -sf -X PUT "http://127.0.0.1:$MP/bench" > /dev/null
}

run_target() {
  local t=$1 dir="$OUT/$1"
  mkdir -p "$dir"
  case $t in
    standalone)
      "$STROBE" standalone --data-dir "$dir/data" --broker-port 0 --http-port 0 \
        --bind-address 127.0.0.1 --advertised-address 127.0.0.1 > "$dir/strobe.log" 2>&1 &
      ;;
    shared-dir|s3)
      start_etcd "$dir"
      local storage="file://$dir/shared" env=()
      mkdir -p "$dir/shared"
      if [[ $t == s3 ]]; then
        start_moto "$dir"
        storage="s3://bench/strobe"
        env=(AWS_ENDPOINT_URL="http://127.0.0.1:$MP" AWS_ALLOW_HTTP=true AWS_ACCESS_KEY_ID=test
             AWS_SECRET_ACCESS_KEY=test AWS_DEFAULT_REGION=us-east-1)
      fi
      printf '%s\n' "${BROKER_CONFIG:-}" > "$dir/broker.toml"
      env "${env[@]}" "$STROBE" broker --config "$dir/broker.toml" --metadata-store "etcd:http://127.0.0.1:$EP" --storage "$storage" \
        --broker-id bench --data-dir "$dir/data" --broker-port 0 --http-port 0 \
        --bind-address 127.0.0.1 --advertised-address 127.0.0.1 > "$dir/strobe.log" 2>&1 &
      ;;
  esac
  local pid=$!
  PIDS+=($pid)
  read -r PORT HTTP < <(ready_ports "$dir/strobe.log")
  local url="pulsar://127.0.0.1:$PORT"
  for phase in rate max; do
    local rate=$RATE
    [[ $phase == max ]] && rate=0
    local before; before=$(puts "$HTTP"); before=${before:-0}
    local start; start=$(date +%s.%N)
    "$STROBE" perf produce -u "$url" --topic "bench-$phase" -r "$rate" -d "$DURATION" --json \
      > "$dir/$phase.json" 2> "$dir/$phase.log"
    local end; end=$(date +%s.%N)
    local after; after=$(puts "$HTTP"); after=${after:-0}
    python3 - "$dir/$phase.json" "$before" "$after" "$start" "$end" <<'PY'
import json, sys
path, before, after, start, end = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
d = json.load(open(path))
d["object_puts_per_s"] = (after - before) / (end - start) if after else None
json.dump(d, open(path, "w"))
PY
  done
  kill "$pid"; wait "$pid" 2>/dev/null || true
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  PIDS=()
}

for t in $TARGETS; do
  log "running $t"
  run_target "$t"
done

python3 - "$OUT" "$RATE" $TARGETS <<'PY'
import json, os, sys
out, rate, targets = sys.argv[1], sys.argv[2], sys.argv[3:]
print(f"| storage | publish p50 / p99 ms at {rate} msg/s | msg/s achieved | puts/s | max msg/s | puts/s at max |")
print("|---|---|---|---|---|---|")
for t in targets:
    def load(p):
        try:
            return json.load(open(os.path.join(out, t, p + ".json")))
        except (OSError, ValueError):
            return {}
    r, m = load("rate"), load("max")
    lat = r.get("publish_latency_ms") or {}
    f = lambda v, d=0: "-" if v is None else f"{v:,.{d}f}"
    print(f"| {t} | {f(lat.get('p50'), 2)} / {f(lat.get('p99'), 2)} | {f(r.get('publish_rate'))} | {f(r.get('object_puts_per_s'))} "
          f"| {f(m.get('publish_rate'))} | {f(m.get('object_puts_per_s'))} |")
print(f"(figures in {out})")
PY

#!/usr/bin/env bash
# Topic scale in a cluster (issue 47): etcd, a shared directory (file://) and three
# `strobe broker`s on one machine. Creates TOPICS topics with a producer each over
# CONNECTIONS connections (lookups follow the bundle owners), then kill -9s the broker
# that holds the most and measures how long until every topic takes a producer again
# (the survivors take its bundles once its session expires, then load its topics).
#
#   TOPICS=30000 CONNECTIONS=100 benches/perf/cluster_topics.sh
#   LOAD_LIMIT=100 TOPICS=30000 benches/perf/cluster_topics.sh   # max_concurrent_topic_load_request
#   BUNDLES=48 STOP=term TOPICS=30000 benches/perf/cluster_topics.sh
#
# BUNDLES: public/default's bundles (default_number_of_namespace_bundles; Pulsar's
# default 4 spreads unevenly over three brokers, two on one). STOP=kill (default):
# kill -9 of the fullest broker with no client connected, then a client makes every
# producer again; STOP=term: SIGTERM of it while every producer is connected and
# sending, its bundles handed over by PIP-307 transfers, the producers following.
#
# Figures (stdout, and $OUT/summary.json):
#  - create_s / lookups_per_s: `strobe perf`'s setup time for every producer (a lookup
#    and, at the owner, a topic load each), and topics / that;
#  - topics per broker before the kill (pulsar_topics_count);
#  - lookup_s / lookups_per_s: `strobe perf lookup`, every topic looked up once (owned
#    and loaded: the lookups alone);
#  - reload_s: from the kill -9 to every producer answered again (`strobe perf` setup
#    time, started at the kill), with the session TTL (SESSION_S) part of it;
#  - STOP=term: handover_s (SIGTERM to the broker's exit), moved_s (SIGTERM to every
#    topic loaded on the survivors again), the producers' publish latency max and
#    errors over the run;
#  - the survivors' and etcd's CPU seconds and RSS during the reload (and the topics each
#    serves after it: how the lost bundles were shared), the machine's busy
#    share over it (machine_busy, all cores), the client's CPU seconds in each setup
#    (client_setup_cpu_s: create, reload), the survivors' puts to the shared store and
#    the mean time of a create-only one (a log's seal), peak topic loads
#    waiting (strobe_topic_loads_waiting, sampled every SAMPLE_S s), one /metrics
#    scrape's time on the fullest broker, and etcd's requests by
#    kind in each phase (etcd_mvcc_*_total).
# SWEEP (default true): the brokers' inactive-topic sweep (broker_delete_inactive_topics_enabled).
# STROBE_BIN (default target/release/strobe, built with --features cluster), OUT (kept).
set -euo pipefail

TOPICS=${TOPICS:-30000}
CONNECTIONS=${CONNECTIONS:-100}
CONCURRENCY=${CONCURRENCY:-256}
LOAD_LIMIT=${LOAD_LIMIT:-5000}
SESSION_S=${SESSION_S:-5}
BUNDLES=${BUNDLES:-4}
STOP=${STOP:-kill}
SWEEP=${SWEEP:-true}
# The loads-waiting sampler's period. Every figure read from /metrics asks for its family
# alone (`?name[]=`): a whole page renders every topic's series, and sampling it every 5 s
# was a tenth of a survivor's CPU during a reload.
SAMPLE_S=${SAMPLE_S:-5}
[[ $STOP == kill || $STOP == term ]] || { echo "STOP is kill or term" >&2; exit 2; }
STROBE_BIN=${STROBE_BIN:-target/release/strobe}
OUT=${OUT:-$(mktemp -d /tmp/strobe-cluster-topics.XXXXXX)}
mkdir -p "$OUT/shared"
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# The machine's busy and idle jiffies (all cores), to tell a CPU-bound phase from a waiting one.
jiffies() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6 }' /proc/stat; }
cpu_s() { awk '{ print ($14 + $15) / 100 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
rss_mb() { awk '$1 == "VmRSS:" { print int($2 / 1024) }' "/proc/$1/status" 2>/dev/null || echo 0; }
metric() { curl -sg "http://127.0.0.1:$1/metrics?name[]=$2" | awk -v m="$2" '$1 == m || index($1, m "{") == 1 { s += $2 } END { print s + 0 }'; }

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

ETCD=$(command -v etcd || echo /usr/bin/etcd)
EP=$(free_port); PEER=$(free_port)
"$ETCD" --name bench --data-dir "$OUT/etcd" --listen-client-urls "http://127.0.0.1:$EP" \
  --advertise-client-urls "http://127.0.0.1:$EP" --listen-peer-urls "http://127.0.0.1:$PEER" \
  --initial-advertise-peer-urls "http://127.0.0.1:$PEER" --initial-cluster "bench=http://127.0.0.1:$PEER" \
  --quota-backend-bytes 8589934592 > "$OUT/etcd.log" 2>&1 &
ETCD_PID=$!; PIDS+=("$ETCD_PID")
until (exec 3<>"/dev/tcp/127.0.0.1/$EP") 2>/dev/null; do sleep 0.05; done

BPIDS=() BPORTS=() BHTTP=()
for i in 0 1 2; do
  port=$(free_port); http=$(free_port)
  # SWEEP=false: no inactive-topic sweep. The creating client leaves, so its topics
  # become inactive; a sweep during a long reload deletes those the reload's client has
  # not reached yet (8,001 in one 300,000-topic run), and each is then made again: the
  # slower the reload, the more it has to do, which is not what a broker's loss costs.
  printf 'max_concurrent_topic_load_request = %s\nmetadata_session_timeout_secs = %s\nload_balancer_enabled = false\ndefault_number_of_namespace_bundles = %s\nbroker_delete_inactive_topics_enabled = %s\n' \
    "$LOAD_LIMIT" "$SESSION_S" "$BUNDLES" "$SWEEP" > "$OUT/b$i.toml"
  STROBE_LOG=${STROBE_LOG:-warn} "$STROBE_BIN" broker --config "$OUT/b$i.toml" --metadata-store "etcd:http://127.0.0.1:$EP" \
    --storage "file://$OUT/shared" --broker-id "b$i" --data-dir "$OUT/b$i" --broker-port "$port" --http-port "$http" \
    --bind-address 127.0.0.1 --advertised-address 127.0.0.1 > "$OUT/b$i.log" 2>&1 &
  BPIDS+=($!); BPORTS+=("$port"); BHTTP+=("$http"); PIDS+=($!)
done
for i in 0 1 2; do until (exec 3<>"/dev/tcp/127.0.0.1/${BPORTS[$i]}") 2>/dev/null; do sleep 0.05; done; done
sleep 2
log "etcd :$EP, brokers ${BPORTS[*]}, load limit $LOAD_LIMIT"

perf() { # perf NAME URL: one producer per topic, no consumers; setup_s is the figure
  "$STROBE_BIN" perf produce -u "$2" --topic "persistent://public/default/scale" -t "$TOPICS" -c 0 \
    -r 200 -d 2 -s 64 --max-pending 10 --connections "$CONNECTIONS" --setup-concurrency "$CONCURRENCY" \
    --json > "$OUT/$1.json" 2> "$OUT/$1.log" || { log "perf $1 failed"; tail -5 "$OUT/$1.log" >&2; }
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("setup_s", -1))' "$OUT/$1.json"
}

# etcd's requests by kind (mvcc puts, ranges, txns, deletes), for the per-topic cost of each phase.
etcd_ops() { curl -s "http://127.0.0.1:$EP/metrics" | awk '$1 ~ /^etcd_mvcc_(put|range|txn|delete)_total$/ { sub("etcd_mvcc_", "", $1); sub("_total", "", $1); printf "%s=%d ", $1, $2 }'; }
ops_delta() { python3 -c 'import sys
a = dict(kv.split("=") for kv in sys.argv[1].split()); b = dict(kv.split("=") for kv in sys.argv[2].split())
print(", ".join(f"\"{k}\": {int(b[k]) - int(a.get(k, 0))}" for k in sorted(b)))' "$1" "$2"; }
log "creating $TOPICS topics"
OPS0=$(etcd_ops)
if [[ $STOP == kill ]]; then
  CREATE_S=$(perf create "pulsar://127.0.0.1:${BPORTS[0]}")
else
  # The producers stay connected and sending through the SIGTERM (RUN_S after their setup).
  # Their service URL names all three brokers, as a client of a cluster's would: the stopped
  # broker may be the first, and a lookup after it is gone goes to the next.
  RUN_S=${RUN_S:-120}
  "$STROBE_BIN" perf produce -u "pulsar://127.0.0.1:${BPORTS[0]},127.0.0.1:${BPORTS[1]},127.0.0.1:${BPORTS[2]}" --topic "persistent://public/default/scale" -t "$TOPICS" \
    -c 0 -r 200 -d "$RUN_S" -s 64 --max-pending 10 --connections "$CONNECTIONS" --setup-concurrency "$CONCURRENCY" \
    --json > "$OUT/create.json" 2> "$OUT/create.log" &
  PERF_PID=$!; PIDS+=("$PERF_PID")
  until grep -q "ready in" "$OUT/create.log"; do
    kill -0 "$PERF_PID" 2>/dev/null || { log "perf create failed"; tail -5 "$OUT/create.log" >&2; exit 1; }
    sleep 0.5
  done
  CREATE_S=$(sed -n 's/.* ready in \([0-9.]*\) s.*/\1/p' "$OUT/create.log" | head -1)
fi
OPS1=$(etcd_ops)
"$STROBE_BIN" perf lookup -u "pulsar://127.0.0.1:${BPORTS[0]}" --topic "persistent://public/default/scale" -t "$TOPICS" \
  --connections "$CONNECTIONS" --concurrency "$CONCURRENCY" --json > "$OUT/lookup.json" 2> "$OUT/lookup.log"
LOOKUP=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(round(j["seconds"], 2), round(j["lookups_per_s"]), j["errors"], j["latency_ms"]["p99"])' "$OUT/lookup.json")
read -r LOOKUP_S LOOKUPS_PER_S LOOKUP_ERRORS LOOKUP_P99 <<< "$LOOKUP"
log "looked up every topic in $LOOKUP_S s ($LOOKUPS_PER_S/s, p99 $LOOKUP_P99 ms, $LOOKUP_ERRORS errors)"
OPS1L=$(etcd_ops)
COUNTS=(); VICTIM=0; MOST=-1
for i in 0 1 2; do
  c=$(metric "${BHTTP[$i]}" pulsar_topics_count); COUNTS+=("$c")
  if (( c > MOST )); then MOST=$c; VICTIM=$i; fi
done
t0=$(date +%s.%N); curl -s -o /dev/null "http://127.0.0.1:${BHTTP[$VICTIM]}/metrics"
SCRAPE_MS=$(python3 -c "print(round(($(date +%s.%N) - $t0) * 1000))")
log "created in ${CREATE_S} s; topics per broker ${COUNTS[*]}; a /metrics scrape of b$VICTIM took $SCRAPE_MS ms; stopping ($STOP) b$VICTIM ($MOST topics)"
SURV=(); for i in 0 1 2; do [[ $i == "$VICTIM" ]] || SURV+=("$i"); done
c0=(); for i in "${SURV[@]}"; do c0+=("$(cpu_s "${BPIDS[$i]}")"); done
e0=$(cpu_s "$ETCD_PID")
read -r J0B J0I <<< "$(jiffies)"
# The survivors' create-only puts on the shared store (a log's seal at every load).
puts_s() { local n=0 t=0; for i in "${SURV[@]}"; do
    n=$(python3 -c "print($n + $(metric "${BHTTP[$i]}" strobe_storage_object_puts_total))")
    t=$(python3 -c "print($t + $(metric "${BHTTP[$i]}" strobe_storage_object_create_put_seconds_total))"); done; echo "$n $t"; }
read -r P0N P0T <<< "$(puts_s)"
( peak=0; while true; do
    w=0; for i in "${SURV[@]}"; do w=$(( w + $(metric "${BHTTP[$i]}" strobe_topic_loads_waiting) )); done
    (( w > peak )) && peak=$w; echo "$peak" > "$OUT/peak_waiting"; sleep "$SAMPLE_S"
  done ) &
SAMPLER=$!; PIDS+=("$SAMPLER")
HANDOVER_S=null MOVED_S=null PUB_MAX=null PUB_ERRORS=null
if [[ $STOP == kill ]]; then
  kill -9 "${BPIDS[$VICTIM]}"
  RELOAD_S=$(perf reload "pulsar://127.0.0.1:${BPORTS[${SURV[0]}]}")
else
  RELOAD_S=null
  t0=$(date +%s.%N); kill -TERM "${BPIDS[$VICTIM]}"
  while true; do
    now=$(date +%s.%N)
    if [[ $HANDOVER_S == null ]] && ! kill -0 "${BPIDS[$VICTIM]}" 2>/dev/null; then
      HANDOVER_S=$(python3 -c "print(round($now - $t0, 2))")
    fi
    n=0; for i in "${SURV[@]}"; do n=$(( n + $(metric "${BHTTP[$i]}" pulsar_topics_count) )); done
    if (( n >= TOPICS )); then MOVED_S=$(python3 -c "print(round($now - $t0, 2))"); break; fi
    python3 -c "import sys; sys.exit($now - $t0 < 600)" && { log "not every topic moved in 600 s ($n)"; break; }
    sleep 0.2
  done
  wait "${BPIDS[$VICTIM]}" 2>/dev/null || true
  [[ $HANDOVER_S != null ]] || HANDOVER_S=$(python3 -c "print(round($(date +%s.%N) - $t0, 2))")
  log "SIGTERM: every topic served by the survivors after ${MOVED_S} s, the broker gone after ${HANDOVER_S} s"
  wait "$PERF_PID" || true
  read -r PUB_MAX PUB_ERRORS <<< "$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["publish_latency_ms"]["max"], j["errors"])' "$OUT/create.json")"
fi
OPS2=$(etcd_ops)
read -r J1B J1I <<< "$(jiffies)"
read -r P1N P1T <<< "$(puts_s)"
AFTER=(); for i in "${SURV[@]}"; do AFTER+=("$(metric "${BHTTP[$i]}" pulsar_topics_count)"); done
PUT_MS=$(python3 -c "print(round(1000 * ($P1T - $P0T) / max(1, $P1N - $P0N), 2))")
BUSY=$(python3 -c "print(round(($J1B - $J0B) / max(1, $J1B - $J0B + $J1I - $J0I), 3))")
setup_cpu() { python3 -c 'import json,sys
try: print(round(json.load(open(sys.argv[1])).get("setup_cpu_s"), 1))
except Exception: print("null")' "$OUT/$1.json"; }
CLIENT_CREATE_CPU=$(setup_cpu create); CLIENT_RELOAD_CPU=$(setup_cpu reload)
kill "$SAMPLER" 2>/dev/null || true
cpu=(); rss=(); for k in "${!SURV[@]}"; do
  i=${SURV[$k]}; cpu+=("$(python3 -c "print(round($(cpu_s "${BPIDS[$i]}") - ${c0[$k]}, 1))")"); rss+=("$(rss_mb "${BPIDS[$i]}")")
done
ECPU=$(python3 -c "print(round($(cpu_s "$ETCD_PID") - $e0, 1))")
PEAK=$(cat "$OUT/peak_waiting" 2>/dev/null || echo 0)
python3 - "$OUT/summary.json" <<EOF
import json, sys
null, true, false = None, True, False
s = {"topics": $TOPICS, "connections": $CONNECTIONS, "load_limit": $LOAD_LIMIT, "session_s": $SESSION_S,
     "bundles": $BUNDLES, "stop": "$STOP", "sweep": $SWEEP,
     "create_s": $CREATE_S, "created_per_s": round($TOPICS / max($CREATE_S, 1e-9)),
     "lookup_s": $LOOKUP_S, "lookups_per_s": $LOOKUPS_PER_S, "lookup_p99_ms": $LOOKUP_P99, "lookup_errors": $LOOKUP_ERRORS,
     "topics_per_broker": [${COUNTS[0]}, ${COUNTS[1]}, ${COUNTS[2]}], "stopped": $MOST,
     "reload_s": $RELOAD_S, "handover_s": $HANDOVER_S, "moved_s": $MOVED_S,
     "publish_max_ms": $PUB_MAX, "publish_errors": $PUB_ERRORS,
     "survivor_cpu_s": [${cpu[0]}, ${cpu[1]}], "survivor_topics_after": [${AFTER[0]}, ${AFTER[1]}], "survivor_rss_mb": [${rss[0]}, ${rss[1]}],
     "etcd_cpu_s": $ECPU, "machine_busy": $BUSY,
     "survivor_puts": $(python3 -c "print(int($P1N - $P0N))"), "survivor_create_put_ms_mean": $PUT_MS,
     "client_setup_cpu_s": {"create": $CLIENT_CREATE_CPU, "reload": $CLIENT_RELOAD_CPU}, "peak_loads_waiting": $PEAK, "metrics_scrape_ms": $SCRAPE_MS,
     "etcd_ops_create": {$(ops_delta "$OPS0" "$OPS1")}, "etcd_ops_lookup": {$(ops_delta "$OPS1" "$OPS1L")},
     "etcd_ops_reload": {$(ops_delta "$OPS1L" "$OPS2")}}
json.dump(s, open(sys.argv[1], "w"))
print(json.dumps(s))
EOF

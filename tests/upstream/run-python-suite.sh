#!/usr/bin/env bash
# Runs apache/pulsar-client-python's own test suite against strobe, set up the
# way that suite's start-up script (build-support/start-test-service-inside-
# container.sh) sets up Pulsar: the same ports (6650, 6651, 8080, 8443), its
# test certificates, token, TLS and basic authentication, authorization with
# the same roles, and the same tenants and namespaces.
#
#   tests/upstream/run-python-suite.sh DIR [TEST_FILE...] [-- PYTEST_ARGS...]
#
# DIR is that repository's tests/ folder (e.g. from `git clone
# https://github.com/apache/pulsar-client-python` — its files are not part of
# this repository). The default test files are pulsar_test.py, schema_test.py,
# reader_test.py, table_view_test.py and asyncio_test.py. STROBE_BIN names the
# binary (default target/release/strobe) and PYTHON the interpreter with
# pulsar-client and pytest (default .venv/bin/python). The last line printed
# is pytest's "N passed, M failed" summary.
#
# STROBE_CLUSTER=1 runs the suite against a cluster instead: a private etcd, a
# shared directory and three `strobe broker`s (the cluster build) with the same
# configuration; the suite talks to the first (ports 6650, 6651, 8080, 8443)
# and lookups send it to the others.
set -euo pipefail

die() { echo "run-python-suite: $*" >&2; exit 2; }
[ $# -ge 1 ] || die "usage: $0 DIR [TEST_FILE...] [-- PYTEST_ARGS...]"
DIR=$(cd "$1" && pwd) || die "no such directory: $1"
shift
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
STROBE=${STROBE_BIN:-$ROOT/target/release/strobe}
PY=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$STROBE" ] || die "no strobe binary at $STROBE (cargo build --release)"
[ -x "$PY" ] || die "no python at $PY (tests/run-all.sh makes the venv)"
[ -f "$DIR/pulsar_test.py" ] && [ -d "$DIR/test-conf" ] || die "$DIR is not pulsar-client-python's tests/ folder"
"$PY" -c 'import pulsar, pytest, fastavro, requests, google.protobuf' 2>/dev/null \
  || die "$PY needs pulsar-client, pytest, fastavro, requests and protobuf (pip install 'pulsar-client[avro]' requests protobuf pytest pytest-timeout)"

# Pulsar's own test certificates through strobe's TLS code first (an opt-in
# test of crates/security: the certificates are that repository's).
echo "-- strobe-security with $DIR/test-conf"
(cd "$ROOT" && PULSAR_TEST_CONF="$DIR/test-conf" cargo test -q -p strobe-security --test tls \
  upstream_pulsar_test_certificates -- --ignored) || die "Pulsar's test certificates failed strobe-security's TLS test"

FILES=()
PYTEST_ARGS=()
while [ $# -gt 0 ]; do
  if [ "$1" = "--" ]; then shift; PYTEST_ARGS=("$@"); break; fi
  FILES+=("$1"); shift
done
[ ${#FILES[@]} -gt 0 ] || FILES=(pulsar_test.py schema_test.py reader_test.py table_view_test.py asyncio_test.py)

for port in 6650 6651 8080 8443; do
  if (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; then die "port $port is in use"; fi
done

WORK=$(mktemp -d /tmp/strobe-upstream-XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do
    if kill -0 "$p" 2>/dev/null; then kill "$p"; wait "$p" || true; fi
  done
  if [ -n "${KEEP_WORK:-}" ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# Keys and tokens, as `pulsar tokens` makes them there.
"$STROBE" tokens create-secret-key --output "$WORK/secret.key"
"$STROBE" tokens create --subject token-principal --secret-key "file://$WORK/secret.key" > "$DIR/.test-token.txt"
SUPER=$("$STROBE" tokens create --subject superUser --secret-key "file://$WORK/secret.key")

# tests/test-conf/standalone-ssl.conf, in strobe's keys. $1: the file, then
# the binary, HTTP, binary TLS and HTTPS ports.
write_config() {
cat > "$1" <<CONF
cluster_name = "standalone"
bind_address = "0.0.0.0"
advertised_address = "localhost"
broker_port = $2
http_port = $3
broker_port_tls = $4
http_port_tls = $5
data_dir = "$WORK/data-$2"
max_message_size = 1024000
max_unacked_messages_per_consumer = 50000
key_shared_use_consistent_hashing = false
allow_auto_topic_creation = true
auto_topic_creation_type = "non-partitioned"
tls_certificate_file = "$DIR/test-conf/broker-cert.pem"
tls_key_file = "$DIR/test-conf/broker-key.pem"
tls_trust_certs_file = "$DIR/test-conf/cacert.pem"
authentication_enabled = true
authentication_providers = ["tls", "token", "basic"]
token_secret_key = "file://$WORK/secret.key"
basic_auth_htpasswd_file = "$DIR/test-conf/.htpasswd"
anonymous_user_role = "anonymous"
authorization_enabled = true
superuser_roles = ["localhost", "superUser", "admin"]
CONF
}
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() {
  for _ in $(seq 1 200); do
    curl -sf "http://localhost:$1/metrics" > /dev/null && return 0
    kill -0 "$2" 2>/dev/null || { cat "$3"; die "strobe exited"; }
    sleep 0.1
  done
  cat "$3"; die "strobe did not answer on $1"
}

if [ -z "${STROBE_CLUSTER:-}" ]; then
  write_config "$WORK/strobe.toml" 6650 8080 6651 8443
  "$STROBE" standalone --config "$WORK/strobe.toml" > "$WORK/strobe.log" 2>&1 &
  PID=$!
  PIDS+=("$PID")
  wait_http 8080 "$PID" "$WORK/strobe.log"
else
  ETCD=$(command -v etcd || echo /usr/bin/etcd)
  [ -x "$ETCD" ] || die "STROBE_CLUSTER needs etcd (Debian: etcd-server)"
  EP=$(free_port); PEER=$(free_port)
  "$ETCD" --name upstream --data-dir "$WORK/etcd" --listen-client-urls "http://127.0.0.1:$EP" \
    --advertise-client-urls "http://127.0.0.1:$EP" --listen-peer-urls "http://127.0.0.1:$PEER" \
    --initial-advertise-peer-urls "http://127.0.0.1:$PEER" --initial-cluster "upstream=http://127.0.0.1:$PEER" \
    > "$WORK/etcd.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$EP") 2>/dev/null && break; sleep 0.1; done
  mkdir -p "$WORK/shared"
  for i in 0 1 2; do
    if [ "$i" = 0 ]; then ports=(6650 8080 6651 8443); else ports=($(free_port) $(free_port) $(free_port) $(free_port)); fi
    write_config "$WORK/broker-$i.toml" "${ports[@]}"
    "$STROBE" broker --config "$WORK/broker-$i.toml" --metadata-store "etcd:http://127.0.0.1:$EP" \
      --storage "file://$WORK/shared" --broker-id "broker-$i" > "$WORK/strobe-$i.log" 2>&1 &
    PID=$!
    PIDS+=("$PID")
    wait_http "${ports[1]}" "$PID" "$WORK/strobe-$i.log"
  done
  cat "$WORK"/strobe-*.log > "$WORK/strobe.log"
fi

# The setup calls of their script, with the superUser token. Pulsar answers
# 409 to re-creating what standalone made at start (tenant public and
# namespace public/default), so those are updated instead.
call() {
  local method=$1 path=$2 body=$3
  curl -s -o /dev/null -w '%{http_code}' -X "$method" -H "Authorization: Bearer $SUPER" \
    -H 'Content-Type: application/json' "http://localhost:8080/admin/v2/$path" -d "$body"
}
expect() {
  local want=$1; shift
  local got; got=$(call "$@")
  case " $want " in *" $got "*) ;; *) die "$* answered $got, not $want";; esac
}
expect "204" PUT clusters/standalone '{"serviceUrl":"http://localhost:8080/","serviceUrlTls":"https://localhost:8443/","brokerServiceUrl":"pulsar://localhost:6650/","brokerServiceUrlTls":"pulsar+ssl://localhost:6651/"}'
expect "204 409" PUT tenants/public '{"adminRoles":["anonymous"],"allowedClusters":["standalone"]}'
expect "204" POST tenants/public '{"adminRoles":["anonymous"],"allowedClusters":["standalone"]}'
for ns in public/default public/default-2; do
  expect "204 409" PUT "namespaces/$ns" '{"auth_policies":{"namespace_auth":{"anonymous":["produce","consume"]}},"replication_clusters":["standalone"]}'
  expect "204" POST "namespaces/$ns/permissions/anonymous" '["produce","consume"]'
done
expect "204 409" PUT tenants/private '{"adminRoles":[],"allowedClusters":["standalone"]}'
expect "204 409" PUT namespaces/private/auth '{"auth_policies":{"namespace_auth":{"token-principal":["produce","consume"]}},"replication_clusters":["standalone"]}'

echo "-- strobe is ready (log: $WORK/strobe.log); running ${FILES[*]}"
cd "$DIR"
set +e
"$PY" -m pytest -q -p no:cacheprovider --timeout 60 "${FILES[@]}" "${PYTEST_ARGS[@]}" 2>&1 | tee "$WORK/pytest.log" \
  | grep -E '^(FAILED|ERROR)|passed|failed'
status=${PIPESTATUS[0]}
set -e
for p in "${PIDS[@]}"; do
  if ! kill -0 "$p" 2>/dev/null; then echo "a strobe or etcd process died during the suite:"; tail -50 "$WORK"/strobe*.log; fi
done
tail -1 "$WORK/pytest.log"
exit "$status"

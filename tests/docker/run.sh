#!/usr/bin/env bash
# The Docker test: builds the images with no registry access, brings the
# etcd + 3-broker compose cluster up, drives it from the host with the
# official Python client (tests/docker/traffic.py: partitions spread over the
# brokers, docker kill of an owner, a broker cut off from etcd, a rolling
# restart under load), and tears everything down. Prints each phase's
# duration; any failure is loud and leaves nothing behind.
#
#   tests/docker/run.sh                       # builds strobe (cargo) and the images
#   STROBE_BIN=target/release/strobe tests/docker/run.sh   # a cluster build you have
#   PYTHON=.venv/bin/python (default: the repository's .venv, made by tests/run-all.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)

PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
PROJECT=strobe-test-$$
SESSION_TIMEOUT=${STROBE_SESSION_TIMEOUT_SECS:-6}
export STROBE_TAG=${STROBE_TAG:-test}

say() { printf '\n=== docker test: %s\n' "$*"; }
fail() { printf '\ndocker test FAILED: %s\n' "$*" >&2; exit 1; }

docker info >/dev/null 2>&1 || fail "the Docker engine does not answer (docker info)"
"$PYTHON" -c 'import pulsar' 2>/dev/null || fail "$PYTHON has no pulsar client (tests/run-all.sh makes .venv)"
if docker compose version >/dev/null 2>&1; then COMPOSE="docker compose"
elif command -v docker-compose >/dev/null; then COMPOSE="docker-compose"
else fail "neither 'docker compose' nor docker-compose is installed"
fi

free_ports() {
    "$PYTHON" - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}
read -r P1 P2 P3 H1 H2 H3 <<<"$(free_ports 6)"
export STROBE_PORT_1=$P1 STROBE_PORT_2=$P2 STROBE_PORT_3=$P3
export STROBE_HTTP_PORT_1=$H1 STROBE_HTTP_PORT_2=$H2 STROBE_HTTP_PORT_3=$H3
export STROBE_SESSION_TIMEOUT_SECS=$SESSION_TIMEOUT STROBE_RESTART=no
compose() { $COMPOSE -p "$PROJECT" -f docker/compose.yaml "$@"; }
CLIENT_LOG=$(mktemp)
export STROBE_DOCKER_CLIENT_LOG=$CLIENT_LOG

secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
T0=$EPOCHREALTIME
PHASE_T=$T0
durations=()
phase_done() {
    local now=$EPOCHREALTIME
    durations+=("$(printf '%-10s %6s s' "$1" "$(secs "$PHASE_T" "$now")")")
    printf '=== docker test: %s took %s s\n' "$1" "$(secs "$PHASE_T" "$now")"
    PHASE_T=$now
}

leftovers() {
    local f="label=com.docker.compose.project=$PROJECT"
    { docker ps -aq --filter "$f"; docker network ls -q --filter "$f"; docker volume ls -q --filter "$f"; } | wc -l
}

teardown() {
    local rc=$?
    trap - EXIT INT TERM
    if [ "$rc" != 0 ]; then
        printf '\n=== docker test: failed (exit %s); the containers said:\n' "$rc" >&2
        compose ps >&2 || true
        compose logs --no-color --tail=60 >&2 || true
        printf '\n=== docker test: the client log (last 40 lines):\n' >&2
        tail -40 "$CLIENT_LOG" >&2 || true
    fi
    rm -f "$CLIENT_LOG"
    say "tearing down $PROJECT"
    compose down -v --remove-orphans --timeout 10 >/dev/null 2>&1 || true
    local left; left=$(leftovers)
    if [ "$left" != 0 ]; then
        printf 'docker test FAILED: %s containers, networks or volumes of %s left behind\n' "$left" "$PROJECT" >&2
        rc=1
    fi
    if [ "$rc" = 0 ]; then
        phase_done teardown
        say "durations"
        printf '  %s\n' "${durations[@]}"
        printf '  %-10s %6s s\n' total "$(secs "$T0" "$EPOCHREALTIME")"
        say "passed (nothing left behind)"
    fi
    exit "$rc"
}
trap teardown EXIT
trap 'exit 130' INT TERM

say "building the images without a registry (docker/build-local.sh)"
docker/build-local.sh
phase_done build

say "compose up ($COMPOSE, project $PROJECT, brokers on localhost:$P1,$P2,$P3)"
compose up -d --no-build
"$PYTHON" - "$PROJECT" <<'PY'
import subprocess, sys, time
project = sys.argv[1]
deadline = time.time() + 120
while True:
    ids = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={project}"],
                         check=True, capture_output=True, text=True).stdout.split()
    states = {}
    for i in ids:
        states[i] = subprocess.run(["docker", "inspect", "-f", "{{.Name}} {{.State.Status}}/{{if .State.Health}}{{.State.Health.Status}}{{end}}", i],
                                   check=True, capture_output=True, text=True).stdout.strip()
    if len(ids) == 4 and all(s.endswith("running/healthy") for s in states.values()):
        print("  all healthy: " + ", ".join(sorted(s.split()[0].lstrip("/") for s in states.values())))
        break
    if time.time() > deadline:
        sys.exit(f"not all healthy after 120 s: {sorted(states.values())}")
    time.sleep(0.5)
PY
phase_done up

for phase in spread inside kill cutoff rolling; do
    "$PYTHON" tests/docker/traffic.py --project "$PROJECT" --compose "$COMPOSE" \
        --ports "$P1" "$P2" "$P3" --http-ports "$H1" "$H2" "$H3" --session-timeout "$SESSION_TIMEOUT" "$phase"
    phase_done "$phase"
done

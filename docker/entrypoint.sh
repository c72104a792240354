#!/bin/sh
# The strobe image's entry point: runs `strobe broker` (or `strobe standalone`
# with STROBE_MODE=standalone) with the mounted configuration file and the
# common keys taken from the environment. Flags given to `docker run` after
# the image name are passed on; a first argument that is not a flag is run as
# a command instead (`docker run --rm strobe strobe admin ...`, `sh`).
set -eu

if [ "$#" -gt 0 ] && [ "${1#-}" = "$1" ]; then
    exec "$@"
fi

mode=${STROBE_MODE:-broker}
case "$mode" in
    broker|standalone) ;;
    *) echo "strobe entrypoint: STROBE_MODE must be broker or standalone, not '$mode'" >&2; exit 2 ;;
esac

# Each variable, when set and not empty, becomes the flag next to it (flags
# override the configuration file's keys); a flag given on the command line
# wins over its variable.
given() {
    flag=$1
    shift
    for a in "$@"; do
        case "$a" in "$flag"|"$flag"=*) return 0 ;; esac
    done
    return 1
}
if [ "$mode" = broker ]; then
    [ -z "${STROBE_METADATA_SESSION_TIMEOUT_SECS:-}" ] || given --metadata-session-timeout-secs "$@" || set -- --metadata-session-timeout-secs "$STROBE_METADATA_SESSION_TIMEOUT_SECS" "$@"
    [ -z "${STROBE_CLUSTER_NAME:-}" ] || given --cluster-name "$@" || set -- --cluster-name "$STROBE_CLUSTER_NAME" "$@"
    [ -z "${STROBE_BROKER_ID:-}" ] || given --broker-id "$@" || set -- --broker-id "$STROBE_BROKER_ID" "$@"
    [ -z "${STROBE_STORAGE:-}" ] || given --storage "$@" || set -- --storage "$STROBE_STORAGE" "$@"
    [ -z "${STROBE_METADATA_STORE:-}" ] || given --metadata-store "$@" || set -- --metadata-store "$STROBE_METADATA_STORE" "$@"
fi
[ -z "${STROBE_INTERNAL_LISTENER_NAME:-}" ] || given --internal-listener-name "$@" || set -- --internal-listener-name "$STROBE_INTERNAL_LISTENER_NAME" "$@"
[ -z "${STROBE_ADVERTISED_LISTENERS:-}" ] || given --advertised-listeners "$@" || set -- --advertised-listeners "$STROBE_ADVERTISED_LISTENERS" "$@"
[ -z "${STROBE_ADVERTISED_ADDRESS:-}" ] || given --advertised-address "$@" || set -- --advertised-address "$STROBE_ADVERTISED_ADDRESS" "$@"
[ -z "${STROBE_BIND_ADDRESS:-}" ] || given --bind-address "$@" || set -- --bind-address "$STROBE_BIND_ADDRESS" "$@"
[ -z "${STROBE_HTTP_PORT:-}" ] || given --http-port "$@" || set -- --http-port "$STROBE_HTTP_PORT" "$@"
[ -z "${STROBE_BROKER_PORT:-}" ] || given --broker-port "$@" || set -- --broker-port "$STROBE_BROKER_PORT" "$@"
[ -z "${STROBE_DATA_DIR:-}" ] || given --data-dir "$@" || set -- --data-dir "$STROBE_DATA_DIR" "$@"

config=${STROBE_CONFIG:-/etc/strobe/strobe.toml}
exec /usr/local/bin/strobe "$mode" --config "$config" "$@"

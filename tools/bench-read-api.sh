#!/usr/bin/env bash
# Read-API benchmark: starts build/meshgate on DB (loopback only) and runs wrk against
# /api/nodes?limit=50, /api/packets?limit=50 and /api/packets?limit=50&expand=observations
# at each connection count; prints one markdown row per (path, connections).
#
#   tools/bench-read-api.sh DB [SECONDS] [WORKERS] [CONNECTIONS...]
#
# Bounded: each wrk run lasts SECONDS (default 5); the server it started is stopped by pid.
set -euo pipefail
db=${1:?usage: $0 DB [SECONDS] [WORKERS] [CONNECTIONS...]}
secs=${2:-5}
workers=${3:-4}
shift $(( $# < 3 ? $# : 3 ))
conns=("$@")
[ ${#conns[@]} -gt 0 ] || conns=(16 64)
bin=${MESHGATE_BIN:-build/meshgate}
port=$(( 20000 + RANDOM % 20000 ))
name=/meshgate-bench-$$
env -u MESHGATE_BIN MESHGATE_DB=$db MESHGATE_LISTEN=127.0.0.1:$port MESHGATE_WORKERS=$workers MESHGATE_MAX_CONNS_PER_CLIENT=0 \
  MESHGATE_SHM_NAME=$name MESHGATE_LOG_LEVEL=warning "$bin" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/api/healthz" >/dev/null && break; sleep 0.05; done
for path in '/api/nodes?limit=50' '/api/packets?limit=50' '/api/packets?limit=50&expand=observations'; do
  curl -sf "http://127.0.0.1:$port$path" >/dev/null  # warm the page cache
  for c in "${conns[@]}"; do
    out=$(wrk -t 2 -c "$c" -d "${secs}s" --latency "http://127.0.0.1:$port$path")
    rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
    p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
    p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
    errs=$(awk '/Non-2xx|Socket errors/ {print}' <<<"$out" | tr '\n' ' ')
    printf '| `%s` | %s | %s | %s | %s | %s |\n' "$path" "$c" "$rps" "$p50" "$p99" "${errs:-none}"
  done
done

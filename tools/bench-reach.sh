#!/usr/bin/env bash
# The cold-scan proof (issue 4), A/B: starts build/meshgate on DB (loopback only) once with
# MESHGATE_REACH_COLD_MAX=0 (no gate) and once with the defaults, and for each runs:
#   1. idle probes: /api/nodes and /api/packets back to back, 5 s;
#   2. 48 distinct cold reach keys at once while the same probes run for 12 s;
#   3. 6 other distinct cold keys at once;  4. the same 6 again (warm).
#
#   tools/bench-reach.sh DB KEYS_FILE   (KEYS_FILE: at least 54 node keys, one a line)
#
# Bounded: every meshgate-bench run ends by itself; the servers it started are stopped by pid.
set -euo pipefail
db=${1:?usage: $0 DB KEYS_FILE}
keys=${2:?usage: $0 DB KEYS_FILE}
bin=${MESHGATE_BUILD:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
head -48 "$keys" > "$tmp/cold48"
sed -n '49,54p' "$keys" > "$tmp/cold6"
[ "$(wc -l < "$tmp/cold6")" = 6 ] || { echo "need 54 keys in $keys" >&2; exit 64; }

run() { # label, then extra environment
  local label=$1; shift
  local port=$(( 20000 + RANDOM % 20000 )) name=/meshgate-bench-reach-$$
  cat "$db" > /dev/null # the same warm page cache for both runs
  env "$@" MESHGATE_DB="$db" MESHGATE_LISTEN=127.0.0.1:$port MESHGATE_SHM_NAME=$name \
    MESHGATE_LOG_LEVEL=error MESHGATE_MAX_CONNS_PER_CLIENT=0 "$bin/meshgate" &
  local pid=$!
  for _ in $(seq 200); do curl -sf "http://127.0.0.1:$port/api/healthz" >/dev/null && break; sleep 0.05; done
  local b=("$bin/meshgate-bench" --target 127.0.0.1:$port --label "$label")
  local probes=(--stream 'nodes:/api/nodes?limit=50:closed:1' --stream 'packets:/api/packets?limit=50:closed:1')
  echo "### $label"
  echo; echo "1. idle probes"; "${b[@]}" --duration 5 "${probes[@]}" | sed -n '/^stream/,/^$/p'
  echo "2. 48 distinct cold keys at once, probes meanwhile"
  "${b[@]}" --duration 12 --keys "$tmp/cold48" "${probes[@]}" \
    --stream 'cold:/api/nodes/{key}/reach?days=7:once:48' | sed -n '/^stream/,/^sent =/p'
  echo "3. 6 distinct cold keys at once"
  "${b[@]}" --duration 8 --keys "$tmp/cold6" --stream 'burst:/api/nodes/{key}/reach?days=7:once:6' | sed -n '/^stream/,/^$/p'
  echo "4. the same 6 again (warm)"
  "${b[@]}" --duration 2 --keys "$tmp/cold6" --stream 'warm:/api/nodes/{key}/reach?days=7:once:6' | sed -n '/^stream/,/^$/p'
  "$bin/meshgate-shm" --name $name | sed -n '/reach_cold/,/cache:/p'
  kill -TERM $pid; wait $pid || true
}
run "A: no cold gate (MESHGATE_REACH_COLD_MAX=0)" MESHGATE_REACH_COLD_MAX=0
run "B: defaults (cap 2, wait 3 s, queue auto)"

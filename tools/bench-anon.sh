#!/usr/bin/env bash
# The anonymous-line proof (issue 6), A/B: starts build/meshgate on DB (loopback only) with a
# key file, and for each configuration runs
#   1. idle: a signed-in client fetches /api/nodes and a heavy page (/api/packets), each every
#      50 ms on its own kept-alive connection, for 10 s;
#   2. flood: the same signed-in client while anonymous heavy requests
#      (/api/packets?limit=500&expand=observations) arrive open-loop at RATE a second, sent on
#      schedule whatever the answers (meshgate-bench's open streams; latency counts from the
#      scheduled time), for SECONDS.
# The per-client rate limit is off in A-C (the flood comes from one address, which the limit
# alone would turn away: that is D), so A-C measure the line and the anonymous helpers' lower
# CPU priority (MESHGATE_ANON_NICE) one step at a time.
#
#   tools/bench-anon.sh DB [SECONDS] [RATE]
#
# Bounded: every meshgate-bench run ends by itself; the servers it started are stopped by pid.
set -euo pipefail
db=${1:?usage: $0 DB [SECONDS] [RATE]}
secs=${2:-20}
rate=${3:-500}
bin=${MESHGATE_BUILD:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
key=bench-$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
printf '%s\n' "$key" > "$tmp/keys"
chmod 600 "$tmp/keys"

run() { # label, then extra environment
  local label=$1; shift
  local port=$(( 20000 + RANDOM % 20000 )) name=/meshgate-bench-anon-$$
  cat "$db" > /dev/null # the same warm page cache for every run
  env "$@" MESHGATE_DB="$db" MESHGATE_LISTEN=127.0.0.1:$port MESHGATE_SHM_NAME=$name \
    MESHGATE_API_KEYS_FILE="$tmp/keys" MESHGATE_LOG_LEVEL=error MESHGATE_MAX_CONNS_PER_CLIENT=0 "$bin/meshgate" &
  local pid=$!
  for _ in $(seq 200); do curl -sf "http://127.0.0.1:$port/api/healthz" >/dev/null && break; sleep 0.05; done
  local b=("$bin/meshgate-bench" --target 127.0.0.1:$port --label "$label" --timeout-ms 30000)
  local user=(--stream 'user-nodes:/api/nodes?limit=50:closed:1:50'
              --header "user-nodes:Authorization: Bearer $key"
              --stream 'user-heavy:/api/packets?limit=50:closed:1:50'
              --header "user-heavy:Authorization: Bearer $key")
  echo "### $label"
  echo; echo "1. idle: the signed-in client alone"
  "${b[@]}" --duration 10 "${user[@]}" | sed -n '/^stream/,/^$/p' | sed "s/$key/KEY/g"
  echo "2. flood: anonymous heavy requests at $rate/s, open loop, meanwhile"
  "${b[@]}" --duration "$secs" --max-outstanding 4000 "${user[@]}" \
    --stream "flood:/api/packets?limit=500&expand=observations:open:$rate" \
    | sed -n '/^stream/,$p' | sed "s/$key/KEY/g"
  "$bin/meshgate-shm" --name $name | sed -n '/anon_line/,/anon_rate/p'
  kill -TERM $pid; wait $pid || true
  echo
}
run "A: no line, same CPU priority (MESHGATE_ANON_CONCURRENCY=0, MESHGATE_ANON_NICE=0)" \
  MESHGATE_ANON_CONCURRENCY=0 MESHGATE_ANON_NICE=0 MESHGATE_ANON_RATE=0
run "B: the line (half the workers), same CPU priority (MESHGATE_ANON_NICE=0)" \
  MESHGATE_ANON_NICE=0 MESHGATE_ANON_RATE=0
run "C: the line and the lower priority (defaults but MESHGATE_ANON_RATE=0)" MESHGATE_ANON_RATE=0
run "D: every default (the line, the priority and the per-client rate limit)"

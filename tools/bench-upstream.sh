#!/usr/bin/env bash
# SPDX-License-Identifier: ISC
# The upstream proof (issue 15), A/B. An upstream that plays CoreScope's server
# (tests/upstream/mg-test-upstream: 200 ms per analytics request, at most 4 at once, the rest
# waiting in its own queue) is flooded, open loop, with anonymous analytics requests
# (/api/analytics/topology at RATE a second, sent on schedule whatever the answers) for
# SECONDS, while a signed-in client loads a native page (/api/nodes?limit=50) and a proxied
# page (/api/analytics/rf), each every 50 ms on its own kept-alive connection:
#   A. the upstream reached directly (both of the client's pages are the upstream's);
#   B. through meshgate, every default (MESHGATE_UPSTREAM set, nothing else);
#   C. through meshgate with MESHGATE_UPSTREAM_CONCURRENCY=4, the upstream's own capacity;
#   D. as B but MESHGATE_ANON_RATE=0: the flood as if from many addresses, which the
#      per-client rate limit cannot turn away, so the anonymous line and the gate do it.
# Each run restarts the upstream and reports its peak concurrency from its /_stats.
# Expected answers: 2xx for the signed-in client (A: timeouts too, err); the flood 200 and
# err (A), 200, 429 and 503 (B, C), 200 and 503 (D).
#
#   tools/bench-upstream.sh DB [SECONDS] [RATE]
#   PORT, MESHGATE_BUILD, MAX_UNEXPECTED_PCT, BENCH_SMOKE: see tools/bench-common.sh
#   (smoke: 1 s windows, a flood of 20 a second)
set -euo pipefail
db=${1:?usage: $0 DB [SECONDS] [RATE]}
secs=${2:-20}
rate=${3:-100}
. "$(dirname "$0")/bench-common.sh"
[ -x "$bin/mg-test-upstream" ] || { echo "$(basename "$0"): $bin/mg-test-upstream is missing: run make $bin/tests" >&2; exit 64; }
if [ "$smoke" = 1 ]; then secs=1 rate=20; fi

start_upstream() {
  rm -f "$bench_tmp/upstream.port"
  "$bin/mg-test-upstream" --port-file "$bench_tmp/upstream.port" --analytics-ms 200 --max-concurrent 4 &
  upstream_pid=$!
  other_pids+=("$upstream_pid")
  local i
  for i in $(seq 300); do [ -s "$bench_tmp/upstream.port" ] && break; sleep 0.05; done
  upstream_port=$(cat "$bench_tmp/upstream.port")
  echo "(test upstream on 127.0.0.1:$upstream_port, pid $upstream_pid)" >&2
}
stop_upstream() {
  kill -TERM "$upstream_pid"; wait "$upstream_pid" 2>/dev/null || true
  local keep=() p
  for p in "${other_pids[@]}"; do [ "$p" = "$upstream_pid" ] || keep+=("$p"); done
  other_pids=("${keep[@]}")
}

run() { # label, what the client may answer, what the flood may answer; then the environment
  local label=$1 user_ok=$2 flood_ok=$3 direct=0; shift 3
  [ "${1:-}" = direct ] && { direct=1; shift; }
  start_upstream
  local auth
  mapfile -d '' auth < <(signed_in user-native user-proxied)
  if [ $direct = 1 ]; then
    bench_port=$upstream_port
  else
    # meshgate serves /api/analytics/rf and topology itself: preferred, they stay the
    # upstream's to answer.
    start_server "$db" MESHGATE_UPSTREAM=127.0.0.1:$upstream_port \
      MESHGATE_UPSTREAM_PREFER=/api/analytics/rf,/api/analytics/topology "$@"
    bench_port=
  fi
  echo "### $label"
  bench --label "$label" --timeout-ms 30000 --duration "$secs" --max-outstanding 4000 \
    --stream 'user-native:/api/nodes?limit=50:closed:1:50' \
    --stream 'user-proxied:/api/analytics/rf:closed:1:50' "${auth[@]}" \
    --stream "flood:/api/analytics/topology:open:$rate" \
    --expect "user-native:$user_ok" --expect "user-proxied:$user_ok" --expect "flood:$flood_ok" \
    | sed -n '/^stream/,$p'
  echo "upstream: $(curl -s "http://127.0.0.1:$upstream_port/_stats")"
  if [ $direct = 0 ]; then
    "$bin/meshgate-shm" --name "$server_name" | sed -n '/upstream 127/,/breaker/p'
    stop_server
  fi
  bench_port=
  stop_upstream
  echo
}
run "A: the upstream reached directly" 2xx,err 200,err direct
run "B: through meshgate, every default" 2xx 200,429,503
run "C: through meshgate, MESHGATE_UPSTREAM_CONCURRENCY=4" 2xx 200,429,503 MESHGATE_UPSTREAM_CONCURRENCY=4
run "D: through meshgate, every default but MESHGATE_ANON_RATE=0" 2xx 200,503 MESHGATE_ANON_RATE=0

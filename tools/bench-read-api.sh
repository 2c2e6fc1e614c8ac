#!/usr/bin/env bash
# Read-API benchmark: starts build/meshgate on DB (loopback only) and runs a closed loop of
# CONNECTIONS kept-alive connections (meshgate-bench closed:C, each sending its next request
# when the answer is in, as wrk does) against /api/nodes?limit=50, /api/packets?limit=50 and
# /api/packets?limit=50&expand=observations at each connection count; prints one markdown row
# per (path, connections): requests/s, p50, p99 (ms) and the answers that were not 2xx.
#
# The client signs in (an API key file of its own): /api/packets is a heavy request, and an
# anonymous client would meet the anonymous line (503 past half the workers and 32 waiting)
# and the per-client rate limit (429 past 300 a minute), which would then be what is
# measured. Any answer other than 2xx above MAX_UNEXPECTED_PCT (1 %) fails the script (exit 2).
#
#   tools/bench-read-api.sh DB [SECONDS] [WORKERS] [CONNECTIONS...]
#   PORT, MESHGATE_BUILD, MAX_UNEXPECTED_PCT, BENCH_SMOKE: see tools/bench-common.sh
#   (smoke: 1 s a run, 4 connections)
#
# Bounded: each run lasts SECONDS (default 5); the server it started is stopped by pid.
set -euo pipefail
db=${1:?usage: $0 DB [SECONDS] [WORKERS] [CONNECTIONS...]}
secs=${2:-5}
workers=${3:-4}
shift $(( $# < 3 ? $# : 3 ))
conns=("$@")
[ ${#conns[@]} -gt 0 ] || conns=(16 64)
. "$(dirname "$0")/bench-common.sh"
if [ "$smoke" = 1 ]; then secs=1 conns=(4); fi

start_server "$db" MESHGATE_WORKERS=$workers
echo "| path | conns | requests/s | p50 ms | p99 ms | not 2xx |"
echo "|---|---:|---:|---:|---:|---:|"
for path in '/api/nodes?limit=50' '/api/packets?limit=50' '/api/packets?limit=50&expand=observations'; do
  curl -sf -H "Authorization: Bearer $bench_key" "http://127.0.0.1:$server_port$path" >/dev/null \
    || die "GET $path did not answer 2xx" # and it warms the page cache
  for c in "${conns[@]}"; do
    out=$(bench --threads 2 --duration "$secs" --stream "read:$path:closed:$c" \
          --header "read:Authorization: Bearer $bench_key")
    # stream sent 200 429 503 other err p50 p95 p99 max rps
    awk -v path="$path" -v c="$c" '$1 == "read" && NF == 12 {
      printf "| `%s` | %s | %.0f | %s | %s | %d |\n", path, c, $12, $8, $10, $2 - $3 }' <<<"$out"
  done
done

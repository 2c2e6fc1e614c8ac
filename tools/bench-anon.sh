#!/usr/bin/env bash
# SPDX-License-Identifier: ISC
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
# Expected answers: 2xx for the signed-in client, always; the flood 200, and what each
# configuration refuses with: A nothing (but timeouts: no line is the point of A), B and C
# 503 (the line), D 429 and 503 (the limit, then the line). Anything else above
# MAX_UNEXPECTED_PCT (1 %) of a stream fails the script (exit 2). Dropped flood requests (the
# outstanding cap) were never sent and do not count.
#
#   tools/bench-anon.sh DB [SECONDS] [RATE]
#   PORT, MESHGATE_BUILD, MAX_UNEXPECTED_PCT, BENCH_SMOKE: see tools/bench-common.sh
#   MESHGATE_BEFORE, ROUNDS, CONFIGS (A to D), WARM_S: before/after in one run, see there
#   (smoke: 1 s windows, a flood of 20 a second)
set -euo pipefail
db=${1:?usage: $0 DB [SECONDS] [RATE]}
secs=${2:-20}
rate=${3:-500}
. "$(dirname "$0")/bench-common.sh"
idle_s=10
if [ "$smoke" = 1 ]; then secs=1 rate=20 idle_s=1; fi

run() { # label, what the flood may answer, then extra environment
  local label=$1 flood_ok=$2; shift 2
  start_server "$db" "$@"
  warm_server
  local auth user
  mapfile -d '' auth < <(signed_in user-nodes user-heavy)
  user=(--stream 'user-nodes:/api/nodes?limit=50:closed:1:50'
        --stream 'user-heavy:/api/packets?limit=50:closed:1:50' "${auth[@]}")
  echo "### $label$(side_label)"
  echo; echo "1. idle: the signed-in client alone"
  bench --label "$label" --timeout-ms 30000 --duration $idle_s "${user[@]}" | record idle | sed -n '/^stream/,/^$/p'
  echo "2. flood: anonymous heavy requests at $rate/s, open loop, meanwhile"
  bench --label "$label" --timeout-ms 30000 --duration "$secs" --max-outstanding 4000 "${user[@]}" \
    --stream "flood:/api/packets?limit=500&expand=observations:open:$rate" --expect "flood:$flood_ok" \
    | record flood | sed -n '/^stream/,$p'
  shm_tool --name "$server_name" | sed -n '/anon_line/,/anon_rate/p'
  stop_server
  echo
}
for_each_side A run "A: no line, same CPU priority (MESHGATE_ANON_CONCURRENCY=0, MESHGATE_ANON_NICE=0)" 200,err \
  MESHGATE_ANON_CONCURRENCY=0 MESHGATE_ANON_NICE=0 MESHGATE_ANON_RATE=0
for_each_side B run "B: the line (half the workers), same CPU priority (MESHGATE_ANON_NICE=0)" 200,503 \
  MESHGATE_ANON_NICE=0 MESHGATE_ANON_RATE=0
for_each_side C run "C: the line and the lower priority (defaults but MESHGATE_ANON_RATE=0)" 200,503 MESHGATE_ANON_RATE=0
for_each_side D run "D: every default (the line, the priority and the per-client rate limit)" 200,429,503
run_summary

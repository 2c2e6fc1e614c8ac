#!/usr/bin/env bash
# SPDX-License-Identifier: ISC
# The cold-scan proof (issue 4), A/B: starts build/meshgate on DB (loopback only) once with
# MESHGATE_REACH_COLD_MAX=0 (no gate) and once with the defaults, and for each runs:
#   1. idle probes: /api/nodes and /api/packets back to back, 5 s;
#   2. 48 distinct cold reach keys at once while the same probes run for 12 s;
#   3. 6 other distinct cold keys at once;  4. the same 6 again (warm).
# Every client signs in (an API key file of its own), so the anonymous line and the
# per-client rate limit, which came after this proof, stay out of it: it measures the cold
# gate alone. Expected answers: 2xx for the probes; the cold keys 200 (and, without the gate,
# timeouts, which are the point of A); with the gate also 429. Anything else above
# MAX_UNEXPECTED_PCT (1 %) fails the script (exit 2).
#
#   tools/bench-reach.sh DB KEYS_FILE   (KEYS_FILE: at least 54 node keys, one a line)
#   PORT, MESHGATE_BUILD, MAX_UNEXPECTED_PCT, BENCH_SMOKE: see tools/bench-common.sh
#   MESHGATE_BEFORE, ROUNDS, CONFIGS (A, B), WARM_S: before/after in one run, see there
#   (smoke: 4 + 2 cold keys, windows of a second or less)
set -euo pipefail
db=${1:?usage: $0 DB KEYS_FILE}
keys=${2:?usage: $0 DB KEYS_FILE}
. "$(dirname "$0")/bench-common.sh"
if [ "$smoke" = 1 ]; then cold=4 burst=2 idle_s=0.5 burst_s=1.5 other_s=1.5 warm_s=0.5
else cold=48 burst=6 idle_s=5 burst_s=12 other_s=8 warm_s=2; fi
head -$cold "$keys" > "$bench_tmp/cold"
sed -n "$((cold + 1)),$((cold + burst))p" "$keys" > "$bench_tmp/burst"
[ "$(wc -l < "$bench_tmp/burst")" = $burst ] || { echo "need $((cold + burst)) keys in $keys" >&2; exit 64; }

run() { # label, what the cold streams may answer, then extra environment
  local label=$1 cold_ok=$2; shift 2
  start_server "$db" "$@"
  warm_server
  local probes=(--stream 'nodes:/api/nodes?limit=50:closed:1' --stream 'packets:/api/packets?limit=50:closed:1')
  local probe_auth; mapfile -d '' probe_auth < <(signed_in nodes packets)
  echo "### $label$(side_label)"
  echo; echo "1. idle probes"
  bench --label "$label" --duration $idle_s "${probes[@]}" "${probe_auth[@]}" | record idle | sed -n '/^stream/,/^$/p'
  echo "2. $cold distinct cold keys at once, probes meanwhile"
  local cold_auth; mapfile -d '' cold_auth < <(signed_in nodes packets cold)
  bench --label "$label" --duration $burst_s --keys "$bench_tmp/cold" "${probes[@]}" "${cold_auth[@]}" \
    --stream "cold:/api/nodes/{key}/reach?days=7:once:$cold" --expect "cold:$cold_ok" | record cold | sed -n '/^stream/,/^sent =/p'
  echo "3. $burst distinct cold keys at once"
  local burst_auth; mapfile -d '' burst_auth < <(signed_in burst)
  bench --label "$label" --duration $other_s --keys "$bench_tmp/burst" "${burst_auth[@]}" \
    --stream "burst:/api/nodes/{key}/reach?days=7:once:$burst" --expect "burst:$cold_ok" | record burst | sed -n '/^stream/,/^$/p'
  echo "4. the same $burst again (warm)"
  local warm_auth; mapfile -d '' warm_auth < <(signed_in warm)
  bench --label "$label" --duration $warm_s --keys "$bench_tmp/burst" "${warm_auth[@]}" \
    --stream "warm:/api/nodes/{key}/reach?days=7:once:$burst" --expect "warm:$cold_ok" | record warm | sed -n '/^stream/,/^$/p'
  shm_tool --name "$server_name" | sed -n '/reach_cold/,/cache:/p'
  stop_server
}
for_each_side A run "A: no cold gate (MESHGATE_REACH_COLD_MAX=0)" 200,err MESHGATE_REACH_COLD_MAX=0
for_each_side B run "B: defaults (cap 2, wait 3 s, queue auto)" 200,429
run_summary

#!/usr/bin/env bash
# SPDX-License-Identifier: ISC
# The diagnostic-gate proof (issue 5), A/B: starts build/meshgate on DB (loopback only) once
# with MESHGATE_PERF_MEM_GATE=0 (no gate) and once with the defaults; each time a client
# polls /api/perf?mem=1 in a tight loop from 8 connections for SECONDS while /api/nodes is
# probed back to back. Prints the walk's duration, walks run, the server's CPU time, and
# the probe latencies. Both clients sign in (an API key file of its own), so the anonymous
# line and the per-client rate limit stay out of it: it measures the diagnostic gate alone.
# Expected answers: 2xx for the probe; the walks 200, and timeouts without the gate (eight
# walks at once on a loaded machine can pass the 30 s timeout: that is what A shows), 429
# with it; anything else above MAX_UNEXPECTED_PCT (1 %) fails the script (exit 2).
#
#   tools/bench-perf-mem.sh DB [SECONDS]
#   PORT, MESHGATE_BUILD, MAX_UNEXPECTED_PCT, BENCH_SMOKE: see tools/bench-common.sh
#   (smoke: 1 s windows, and a 500 ms cooldown in B so it needs no 5 s pause)
set -euo pipefail
db=${1:?usage: $0 DB [SECONDS]}
secs=${2:-15}
. "$(dirname "$0")/bench-common.sh"
cooldown_ms=5000
if [ "$smoke" = 1 ]; then secs=1 cooldown_ms=500; fi

cpu_ticks() { # utime + stime of a process and its children so far, in clock ticks
  local total=0
  for p in "$@"; do
    [ -r /proc/$p/stat ] || continue
    total=$(( total + $(awk '{print $14 + $15 + $16 + $17}' /proc/$p/stat) ))
  done
  echo $total
}

run() { # label, what the walks may answer, then extra environment
  local label=$1 mem_ok=$2; shift 2
  start_server "$db" MESHGATE_PERF_MEM_COOLDOWN_MS=$cooldown_ms "$@"
  local t0 t1
  t0=$(date +%s%N)
  curl -sf -H "Authorization: Bearer $bench_key" "http://127.0.0.1:$server_port/api/perf?mem=1" > /dev/null \
    || die "the first walk alone did not answer 200"
  t1=$(date +%s%N)
  echo "### $label"
  echo "one walk alone: $(awk -v ns=$((t1 - t0)) 'BEGIN {printf "%.2f", ns / 1e9}') s"
  sleep "$(awk -v ms=$cooldown_ms 'BEGIN {print ms / 1000 + 0.2}')" # past the cooldown of that walk
  local kids before after auth
  kids=$(pgrep -P $server_pid | tr '\n' ' ')
  before=$(cpu_ticks $server_pid $kids)
  mapfile -d '' auth < <(signed_in mem nodes)
  bench --label "$label" --duration "$secs" "${auth[@]}" --expect "mem:$mem_ok" \
    --stream 'mem:/api/perf?mem=1:closed:8' --stream 'nodes:/api/nodes?limit=50:closed:1' \
    | sed -n '/^stream/,/^$/p'
  after=$(cpu_ticks $server_pid $kids)
  echo "server CPU during the run: $(awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.1f", t / hz}') s of ${secs} s"
  "$bin/meshgate-shm" --name "$server_name" | sed -n '/perf_mem/,/admitted/p'
  stop_server
}
run "A: no diagnostic gate (MESHGATE_PERF_MEM_GATE=0)" 200,err MESHGATE_PERF_MEM_GATE=0
run "B: defaults (one walk at a time, 5 s cooldown)" 200,429

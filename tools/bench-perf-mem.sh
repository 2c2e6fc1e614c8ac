#!/usr/bin/env bash
# The diagnostic-gate proof (issue 5), A/B: starts build/meshgate on DB (loopback only) once
# with MESHGATE_PERF_MEM_GATE=0 (no gate) and once with the defaults; each time a client
# polls /api/perf?mem=1 in a tight loop from 8 connections for SECONDS while /api/nodes is
# probed back to back. Prints the walk's duration, walks run, the server's CPU time, and
# the probe latencies.
#
#   tools/bench-perf-mem.sh DB [SECONDS]
set -euo pipefail
db=${1:?usage: $0 DB [SECONDS]}
secs=${2:-15}
bin=${MESHGATE_BUILD:-build}

cpu_ticks() { # utime + stime of a process and its children so far, in clock ticks
  local total=0
  for p in "$@"; do
    [ -r /proc/$p/stat ] || continue
    total=$(( total + $(awk '{print $14 + $15 + $16 + $17}' /proc/$p/stat) ))
  done
  echo $total
}

run() {
  local label=$1; shift
  local port=$(( 20000 + RANDOM % 20000 )) name=/meshgate-bench-mem-$$
  cat "$db" > /dev/null
  env "$@" MESHGATE_DB="$db" MESHGATE_LISTEN=127.0.0.1:$port MESHGATE_SHM_NAME=$name \
    MESHGATE_LOG_LEVEL=error MESHGATE_MAX_CONNS_PER_CLIENT=0 "$bin/meshgate" &
  local pid=$!
  for _ in $(seq 200); do curl -sf "http://127.0.0.1:$port/api/healthz" >/dev/null && break; sleep 0.05; done
  local t0=$(date +%s.%N)
  curl -s "http://127.0.0.1:$port/api/perf?mem=1" > /dev/null
  local t1=$(date +%s.%N)
  echo "### $label"
  echo "one walk alone: $(echo "$t1 - $t0" | bc) s"
  sleep 5.2 # past the cooldown of the walk above
  local kids=$(pgrep -P $pid | tr '\n' ' ')
  local before=$(cpu_ticks $pid $kids)
  "$bin/meshgate-bench" --target 127.0.0.1:$port --label "$label" --duration "$secs" \
    --stream 'mem:/api/perf?mem=1:closed:8' --stream 'nodes:/api/nodes?limit=50:closed:1' \
    | sed -n '/^stream/,/^$/p'
  local after=$(cpu_ticks $pid $kids)
  echo "server CPU during the run: $(echo "scale=1; ($after - $before) / $(getconf CLK_TCK)" | bc) s of ${secs} s"
  "$bin/meshgate-shm" --name $name | sed -n '/perf_mem/,/admitted/p'
  kill -TERM $pid; wait $pid || true
}
run "A: no diagnostic gate (MESHGATE_PERF_MEM_GATE=0)" MESHGATE_PERF_MEM_GATE=0
run "B: defaults (one walk at a time, 5 s cooldown)"

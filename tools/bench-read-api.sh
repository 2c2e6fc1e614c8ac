#!/usr/bin/env bash
# SPDX-License-Identifier: ISC
# Read-API benchmark: starts build/meshgate on DB (loopback only) and runs a closed loop of
# CONNECTIONS kept-alive connections (meshgate-bench closed:C, each sending its next request
# when the answer is in, as wrk does) against each path (default /api/nodes?limit=50,
# /api/packets?limit=50 and /api/packets?limit=50&expand=observations) at each connection
# count; prints one markdown row per (path, connections): requests/s, p50, p99 (ms) and the
# answers that were not 2xx.
#
# Sides, alternating in the same run on the same file (each run of a row goes meshgate,
# then each other side, REPEAT times, the order reversed in every second run so that no side
# always runs first; the row shows each side's median requests/s and the
# p50/p99 of that median run, and the answers that were not 2xx summed over its runs):
#   PEER_DIR=DIR            CoreScope's own server too (see bench-common.sh): both then read a
#                           copy of DB migrated by CoreScope's tool, and the row adds its
#                           numbers and meshgate's ratio to it. That build uses the system
#                           SQLite through cgo (mattn/go-sqlite3), not upstream's pure-Go driver.
#   MESHGATE_BEFORE=FILE    another meshgate binary (an older build, for an A/B), run the same way.
#
# The client signs in (an API key file of its own): /api/packets is a heavy request, and an
# anonymous client would meet the anonymous line (503 past half the workers and 32 waiting)
# and the per-client rate limit (429 past 300 a minute), which would then be what is
# measured. Any answer other than 2xx above MAX_UNEXPECTED_PCT (1 %) from meshgate (or the
# "before" binary) fails the script (exit 2). CoreScope's server is a side measured, not the
# subject: past that limit its cell says so ("not 2xx": N of M, unanswered counted apart, and
# "over 1 %") and the ratio is marked with "!", as it compares with the answers it did give;
# the script goes on with the next cell.
#
#   tools/bench-read-api.sh DB [SECONDS] [WORKERS] [CONNECTIONS...]
#   PATHS="p1 p2"  the paths (space-separated); REPEAT=N runs per side and row (default 1);
#   SETTLE_S=N     seconds of rest before each run (default 3)
#   PORT, MESHGATE_BUILD, MAX_UNEXPECTED_PCT, BENCH_SMOKE, PEER_DIR: see tools/bench-common.sh
#   (smoke: 1 s a run, 4 connections)
#
# Bounded: each run lasts SECONDS (default 5); every server it started is stopped by pid.
set -euo pipefail
db=${1:?usage: $0 DB [SECONDS] [WORKERS] [CONNECTIONS...]}
secs=${2:-5}
workers=${3:-4}
shift $(( $# < 3 ? $# : 3 ))
conns=("$@")
[ ${#conns[@]} -gt 0 ] || conns=(16 64)
read -r -a paths <<< "${PATHS:-/api/nodes?limit=50 /api/packets?limit=50 /api/packets?limit=50&expand=observations}"
repeat=${REPEAT:-1}
. "$(dirname "$0")/bench-common.sh"
if [ "$smoke" = 1 ]; then secs=1 conns=(4) repeat=1; fi

sides=(meshgate) ports=()
if peer_available; then
  db=$(migrated_copy "$db")
fi
start_server "$db" MESHGATE_WORKERS=$workers
keep_server
ports+=("$kept_port")
if [ -n "${MESHGATE_BEFORE:-}" ]; then
  MESHGATE_EXE=$MESHGATE_BEFORE start_server "$db" MESHGATE_WORKERS=$workers
  keep_server
  ports+=("$kept_port") sides+=(before)
fi
if peer_available; then
  start_peer "$db"
  ports+=("$peer_port") sides+=(corescope)
fi

# One run: prints "rps p50 p99 not2xx sent unanswered".
run_one() {
  local port=$1 path=$2 c=$3 side=$4 out chunked=() limit=$max_unexpected
  if [ "$side" = corescope ]; then
    chunked=(--chunked) # Go's server sends large bodies in chunks
    limit=100           # its failures are shown in its cell (see above), not fatal
  fi
  out=$(max_unexpected=$limit bench_port=$port bench --threads 2 --duration "$secs" \
        --stream "read:$path:closed:$c" --header "read:Authorization: Bearer $bench_key" \
        "${chunked[@]}") || return 2
  # stream sent 200 429 503 other err p50 p95 p99 max rps
  awk '$1 == "read" && NF == 12 { printf "%.0f %s %s %d %d %d\n", $12, $8, $10, $2 - $3, $2, $7 }' <<<"$out"
}

# The "not 2xx" cell of a side from its runs' lines: the sum over the runs, "N of M" when
# some failed, how many of them had no answer at all, and "over P %" past the limit.
not_2xx_cell() {
  awk -v limit="$max_unexpected" '
    { bad += $4; sent += $5; lost += $6 }
    END {
      if (bad == 0) { print 0; exit }
      cell = bad " of " sent
      if (lost > 0) cell = cell " (" lost " unanswered)"
      if (bad * 100 > limit * sent) cell = cell ", **over " limit " %**"
      print cell
    }' <<<"$1"
}

loads=
header="| path | conns |"
rule="|---|---:|"
for s in "${sides[@]}"; do header+=" $s req/s | p50 / p99 ms | not 2xx |"; rule+="---:|---:|---:|"; done
for s in "${sides[@]:1}"; do header+=" meshgate ÷ $s |"; rule+="---:|"; done
echo "$header"
echo "$rule"
for path in "${paths[@]}"; do
  for port in "${ports[@]}"; do # each warms its caches
    curl -sf -H "Authorization: Bearer $bench_key" "http://127.0.0.1:$port$path" >/dev/null \
      || die "GET $path on port $port did not answer 2xx"
  done
  for c in "${conns[@]}"; do
    declare -A runs=()
    for r in $(seq "$repeat"); do
      order=("${!ports[@]}")
      (( r % 2 )) || order=($(printf '%s\n' "${order[@]}" | tac))
      for i in "${order[@]}"; do
        # A side left with a backlog (CoreScope's server finishes requests whose clients
        # are gone) must not take the CPU from the next side's run.
        [ "$smoke" = 1 ] || sleep "${SETTLE_S:-3}"
        load=$(cut -d' ' -f1-3 /proc/loadavg)
        one=$(run_one "${ports[$i]}" "$path" "$c" "${sides[$i]}") || exit 2
        loads+="| run, \`$path\` | $c | ${sides[$i]} | $r | $load | ${one%% *} |"$'\n'
        runs[$i]+="$one"$'\n'
      done
    done
    row="| \`$path\` | $c |"
    medians=() over=()
    for i in "${!ports[@]}"; do
      m=$(sort -n <<<"${runs[$i]%$'\n'}" | awk '{ a[NR] = $0 } END { print a[int((NR + 1) / 2)] }')
      read -r rps p50 p99 _ <<<"$m"
      medians+=("$rps")
      cell=$(not_2xx_cell "${runs[$i]}")
      if [[ $cell == *over* ]]; then over+=('!'); else over+=(''); fi
      row+=" $rps | $p50 / $p99 | $cell |"
    done
    for i in "${!medians[@]}"; do
      [ "$i" = 0 ] && continue
      row+=" $(awk -v a="${medians[0]}" -v b="${medians[$i]}" 'BEGIN { if (b > 0) printf "%.1f×", a / b; else print "—" }')${over[$i]} |"
    done
    echo "$row"
    unset runs
  done
done

# Each run in the order run, with the load average at its start (1, 5, 15 min): the machine
# each number met, and the spread behind each median.
echo
echo "| each run | conns | side | run | load 1 / 5 / 15 min | req/s |"
echo "|---|---:|---|---:|---|---:|"
printf '%s' "$loads"

# The memory of each side after the load: PSS summed over the server's processes (a
# meshgate master and its workers; CoreScope's one process). PSS shares each shared page
# among the processes that map it, so the sum counts the segment and the summaries once.
echo
echo "| after the load | PSS MB | anonymous | file-backed (binary, libraries, mapped database) | shared memory (segment, summaries) | processes |"
echo "|---|---:|---:|---:|---:|---:|"
pids_of_side() { echo "$1"; pgrep -P "$1" || true; }
side_pids=("${other_pids[@]}")
for i in "${!sides[@]}"; do
  pid=${side_pids[$i]}
  awk -v side="${sides[$i]}" '
    /^Pss:/ { pss += $2 } /^Pss_Anon:/ { anon += $2 } /^Pss_File:/ { file += $2 }
    /^Pss_Shmem:/ { shm += $2 } FNR == 1 { n++ }
    END { printf "| %s | %.1f | %.1f | %.1f | %.1f | %d |\n", side, pss / 1024, anon / 1024,
          file / 1024, shm / 1024, n }' \
    $(for p in $(pids_of_side "$pid"); do echo "/proc/$p/smaps_rollup"; done) 2>/dev/null || true
done

# Where each meshgate side's PSS goes, mapping by mapping (tools/mem-breakdown.sh).
for i in "${!sides[@]}"; do
  [ "${sides[$i]}" = corescope ] && continue
  echo
  "$(dirname "$0")/mem-breakdown.sh" "${side_pids[$i]}" "${sides[$i]}"
done

#!/usr/bin/env bash
# SPDX-License-Identifier: ISC
# The first seconds after a start (issue 28, item 5). For each path (default
# /api/packets?limit=50 and /api/nodes?limit=50) and each connection count (default 16 and
# 64), in turn:
#   1. meshgate (WORKERS workers, default 2) is started afresh on DB; the script asks
#      /api/packets?limit=50 every 0.05 s until its first 200, then at once loads PATH with a
#      closed loop of C kept-alive signed-in connections for SECONDS (default 30) and counts
#      the 200s completed in each second (meshgate-bench --per-second); meshgate is stopped;
#   2. with PEER_DIR, CoreScope's server is started FIRST, once, on the same migrated copy of
#      DB, and waited for until it is loaded: "ready":true on /api/healthz and a 200 of both
#      /api/packets?limit=50 and /api/nodes?limit=50 (each asked again every 2 s, at most
#      PEER_WAIT_S seconds in all, default 2400; the time to each is printed). When it has not
#      by then, the script fails loudly (exit 2) with those timings: there is no ratio without
#      it. Only then is meshgate started for the first series. Each meshgate series is followed
#      at once by CoreScope's on the same path and connection count (alternating in one run).
#      PEER_PORT=N: CoreScope's server already runs on 127.0.0.1:N over DB (then DB is the
#      migrated copy it reads; no copy is made): the same wait, from the script's start.
# Then one markdown table per (path, C): second by second meshgate's 200s, CoreScope's and
# the ratio, and a line with the lowest and the median ratio in a second and how many seconds
# were below the issue's bound (packets 5x, nodes 10x; a second in which meshgate answered
# nothing is below it, whatever CoreScope did). The load average is printed around each
# series, meshgate's group PSS after each.
#
# Every measured answer must be a 200: any other status fails the script (exit 2, with the
# series named and the report's line naming the status). Requests still unanswered 60 s after they were sent (either side) are no answer:
# they count in no second, and each series' line says how many there were. The client signs in (a key file of the script's own) so the
# per-client rate limit and the anonymous line never turn it away.
#
#   tools/bench-startup.sh DB [SECONDS] [CONNECTIONS...]
#
# DB against CoreScope's server: a file whose hashes are CoreScope's content hashes, else that
# server rewrites them all when it loads it (minutes at 2M, answering next to nothing), e.g.
#   build/meshgate-fixture --out /tmp/x/2m.db --observations 2000000 --seed 7 --corescope-hashes
#   /work/peer/corescope-migrate -db /tmp/x/2m.db
#   PATHS="p1 p2"   the paths loaded (space-separated)
#   WORKERS=N       meshgate's workers (default 2)
#   BUSY="N..."     N busy loops (shell loops) run beside everything, to keep the cores busy
#                   (default 0); they are started by the script and stopped by pid at its end.
#                   Several values ("0 4"): every series is run once for each, in that order,
#                   against the one CoreScope server (one load for a quiet and a busy run)
#   PEER_WAIT_S=N   how long CoreScope's server may take to load (default 2400)
#   PEER_READY=lists  loaded is a 200 of both lists alone, healthz not asked: CoreScope's
#                   healthz takes its store's read lock, and while its content-hash migration
#                   runs (every start on a file whose hashes are not its formula's, 100 batches
#                   of 5 000 at 2M) it can stay unanswered for many minutes
#   STATE_DIR=DIR   every start keeps its tables in DIR (MESHGATE_STATE_DIR, an existing
#                   directory of this user's, mode 0700): before the first series meshgate is
#                   started once and stopped when DIR holds the hash sizes and the relay probe
#                   or table (hashsizes.v1, relayprobe.v1 or relay.v1; at most STATE_WAIT_S,
#                   default 900), so each series' start finds them (a restart with them)
#   PORT, MESHGATE_BUILD, BENCH_SMOKE, PEER_DIR: see tools/bench-common.sh (smoke: 2 s series,
#   4 connections)
#
# Bounded: each series lasts SECONDS plus the timeout of what is still out; every process it
# started (servers, busy loops) is stopped by pid on exit.
set -euo pipefail
db=${1:?usage: $0 DB [SECONDS] [CONNECTIONS...]}
secs=${2:-30}
shift $(($# < 2 ? $# : 2))
conns=("$@")
[ ${#conns[@]} -gt 0 ] || conns=(16 64)
read -r -a paths <<<"${PATHS:-/api/packets?limit=50 /api/nodes?limit=50}"
workers=${WORKERS:-2}
read -r -a busies <<<"${BUSY:-0}"
peer_wait=${PEER_WAIT_S:-2400}
state_dir=${STATE_DIR:-}
state_wait=${STATE_WAIT_S:-900}
state_env=()
[ -z "$state_dir" ] || state_env=(MESHGATE_STATE_DIR="$state_dir")
# Without STATE_DIR every start is a first start: no state directory from the caller's
# environment reaches meshgate.
[ -n "$state_dir" ] || unset MESHGATE_STATE_DIR
first_path='/api/packets?limit=50'
. "$(dirname "$0")/bench-common.sh"
if [ "$smoke" = 1 ]; then secs=2 conns=(4); fi

loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

# first_200 PORT SINCE CAP: asks $first_path every 0.05 s until a 200; prints the seconds
# from SINCE ($EPOCHREALTIME) to it, or returns 1 after CAP seconds.
first_200() {
  local port=$1 since=$2 cap=$3 code
  while :; do
    code=$(curl -s -o /dev/null -w '%{http_code}' -m 60 -H "Authorization: Bearer $bench_key" \
      "http://127.0.0.1:$port$first_path" || true)
    if [ "$code" = 200 ]; then
      elapsed "$since" "$EPOCHREALTIME"
      return 0
    fi
    [ "$(elapsed "$since" "$EPOCHREALTIME" | cut -d. -f1)" -lt "$cap" ] || return 1
    sleep 0.05
  done
}

# series PORT PATH C SIDE: one closed-loop run with --per-second; prints one line: the 200s
# of each second, then "| N" (requests unanswered within 60 s). Any status but 200 fails the
# script (bench dies).
series() {
  local port=$1 path=$2 c=$3 side=$4 extra=() out
  [ "$side" = corescope ] && extra=(--chunked)
  out=$(max_unexpected=0 bench_port=$port bench --threads 2 --duration "$secs" --per-second \
    --timeout-ms 60000 --expect s:200,err --stream "s:$path:closed:$c" --header "s:Authorization: Bearer $bench_key" \
    "${extra[@]}") || {
    echo "$out" >&2
    echo "$(basename "$0"): FAILED: the $side series of $path at $c connections had an answer that was not a 200 (the line above names it)" >&2
    exit 2
  }
  awk '/^per second/ { on = 1; next } on && $1 ~ /^[0-9]+$/ && NF == 3 { printf "%s ", $2 }
       $1 == "s" && NF == 12 { err = $7 } END { printf "| %d\n", err }' <<<"$out"
}

# pss_mb PID: PSS of PID and its children, in MB.
pss_mb() {
  local p files=()
  for p in "$1" $(pgrep -P "$1" || true); do files+=("/proc/$p/smaps_rollup"); done
  awk '/^Pss:/ { kb += $2 } END { printf "%.1f", kb / 1024 }' "${files[@]}" 2>/dev/null || echo "?"
}

echo "bench-startup: $(basename "$db"), $workers workers, $secs s series, connections ${conns[*]}," \
  "busy loops ${busies[*]}, load average $(loadavg), $(date -u +%FT%TZ)"
script_t0=$EPOCHREALTIME
peer=0
if [ -n "${PEER_PORT:-}" ]; then
  peer=1
elif peer_available; then
  peer=1
  db=$(migrated_copy "$db")
fi
busy_pids=()
# busy_loops N: N shell busy loops beside everything (the last N stopped first).
busy_loops() {
  local p
  for p in "${busy_pids[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null || true; done
  busy_pids=()
  for _ in $(seq "$1"); do
    (while :; do :; done) &
    busy_pids+=("$!")
    other_pids+=("$!")
  done
}

# kept: the state files a start would take (the hash sizes, and the relay probe or table).
kept() { [ -s "$state_dir/hashsizes.v1" ] && { [ -s "$state_dir/relayprobe.v1" ] || [ -s "$state_dir/relay.v1" ]; }; }
if [ -n "$state_dir" ] && ! kept; then
  t0=$EPOCHREALTIME
  start_server "$db" MESHGATE_WORKERS="$workers" "${state_env[@]}"
  until kept; do
    [ "$(elapsed "$t0" "$EPOCHREALTIME" | cut -d. -f1)" -lt "$state_wait" ] || die "no state kept in $state_dir within $state_wait s"
    sleep 1
  done
  stop_server
  echo "state kept in $state_dir after $(elapsed "$t0" "$EPOCHREALTIME") s: $(cd "$state_dir" && ls -l | awk 'NR > 1 { printf "%s (%s B) ", $9, $5 }')"
fi

# peer_200 PATH: whether CoreScope's server answers PATH with a 200 now.
peer_200() {
  [ "$(curl -s -o /dev/null -w '%{http_code}' -m 60 "http://127.0.0.1:$peer_port$1" || true)" = 200 ]
}
peer_answered=0
if [ $peer = 1 ]; then
  t0=$script_t0
  if [ -n "${PEER_PORT:-}" ]; then
    peer_port=$PEER_PORT
    peer_pid=$(ss -Hltnp "sport = :$peer_port" 2>/dev/null | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2 || true)
    echo "CoreScope's server: already running on port $peer_port (pid ${peer_pid:-?})"
  else
    cat "$db" >/dev/null
    peer_port=$(free_port)
    t0=$EPOCHREALTIME
    bash "${PEER_RUN:-$(dirname "$0")/../../shared/corescope/peer/run.sh}" "$PEER_DIR" "$db" "$peer_port" \
      >"$bench_tmp/peer.log" 2>&1 &
    peer_pid=$!
    other_pids+=("$peer_pid")
  fi
  # Loaded: healthz says ready, and both list paths answer 200 (each timed from the start).
  ready= first_packets= first_nodes=
  while :; do
    if [ -z "${PEER_PORT:-}" ] && ! kill -0 "$peer_pid" 2>/dev/null; then
      tail -20 "$bench_tmp/peer.log" >&2
      die "CoreScope's server exited at start"
    fi
    [ -n "$ready" ] || [ "${PEER_READY:-}" != lists ] || ready="not asked (PEER_READY=lists)"
    [ -n "$ready" ] || ! curl -s -m 30 "http://127.0.0.1:$peer_port/api/healthz" 2>/dev/null | grep -q '"ready":true' ||
      ready="after $(elapsed "$t0" "$EPOCHREALTIME") s"
    [ -n "$first_packets" ] || ! peer_200 '/api/packets?limit=50' || first_packets=$(elapsed "$t0" "$EPOCHREALTIME")
    [ -n "$first_nodes" ] || ! peer_200 '/api/nodes?limit=50' || first_nodes=$(elapsed "$t0" "$EPOCHREALTIME")
    [ -z "$ready" ] || [ -z "$first_packets" ] || [ -z "$first_nodes" ] || break
    [ "$(elapsed "$t0" "$EPOCHREALTIME" | cut -d. -f1)" -lt "$peer_wait" ] ||
      die "CoreScope's server did not load within PEER_WAIT_S=$peer_wait s: ready ${ready:-never}," \
        "first 200 of /api/packets?limit=50 ${first_packets:-never}, of /api/nodes?limit=50" \
        "${first_nodes:-never} (s from its start; load average $(loadavg))"
    sleep 2
  done
  peer_answered=1
  echo "CoreScope's server (pid ${peer_pid:-?}): ready $ready, first 200 of /api/packets?limit=50" \
    "after $first_packets s, of /api/nodes?limit=50 after $first_nodes s (from its start; load average $(loadavg))"
fi

for busy in "${busies[@]}"; do
busy_loops "$busy"
echo
echo "## $busy busy loops"
for path in "${paths[@]}"; do
  for c in "${conns[@]}"; do
    before_load=$(loadavg)
    cat "$db" >/dev/null # the same warm page cache for every start
    t0=$EPOCHREALTIME
    start_server "$db" MESHGATE_WORKERS="$workers" "${state_env[@]}"
    up=$(elapsed "$t0" "$EPOCHREALTIME")
    first=$(first_200 "$server_port" "$t0" 300) || die "meshgate gave no 200 of $first_path within 300 s"
    mg=$(series "$server_port" "$path" "$c" meshgate)
    mg_pss=$(pss_mb "$server_pid")
    stop_server
    echo
    echo "### \`$path\`, $c connections"
    echo
    echo "meshgate: /api/healthz after $up s, first 200 of $first_path after $first s; group PSS after the series $mg_pss MB; load average $before_load, then $(loadavg); ${mg##*| } requests with no answer (none within 60 s, or the connection failed)"
    cs=
    if [ $peer_answered = 1 ]; then
      [ "$smoke" = 1 ] || sleep 3
      cs_load=$(loadavg)
      cs=$(series "$peer_port" "$path" "$c" corescope)
      echo "CoreScope's server: load average $cs_load, then $(loadavg); ${cs##*| } requests with no answer (none within 60 s, or the connection failed); PSS $([ -n "${peer_pid:-}" ] && pss_mb "$peer_pid" || echo "?") MB"
    fi
    bound=10
    [[ $path == /api/packets* ]] && bound=5
    echo
    echo "| second | meshgate 200s | CoreScope 200s | ratio |"
    echo "|---:|---:|---:|---:|"
    awk -v mg="${mg% |*}" -v cs="${cs% |*}" -v peer=$peer -v bound=$bound '
      # A second passes when meshgate answered in it and at least bound times CoreScope did
      # (CoreScope none: "∞"; neither: "—", below the bound, as meshgate answered nothing).
      # CoreScope answering in no second of a series of its own (it was loaded and answered
      # both lists before the first series) is its measure, said beside the verdict.
      function fmt(v) { return v >= 1e300 ? "∞" : sprintf("%.1f×", v) }
      BEGIN {
        n = split(mg, m, " "); split(cs, k, " "); below = 0; none = 0
        for (i = 1; i <= n; i++) {
          c = peer ? k[i] + 0 : 0
          if (!peer) r = "—"
          else {
            v = c > 0 ? m[i] / c : (m[i] > 0 ? 1e300 : 0)
            r = c > 0 || m[i] > 0 ? fmt(v) : "—"
            if (m[i] == 0 || v < bound) below++
            if (m[i] == 0 && c == 0) none++
            for (j = i - 1; j >= 1 && rs[j] > v; j--) rs[j + 1] = rs[j]
            rs[j + 1] = v
          }
          printf "| %d | %d | %s | %s |\n", i, m[i], peer ? c : "—", r
          tm += m[i]; tc += c
        }
        if (!peer || n == 0) exit
        printf "\nlowest ratio in a second: %s; median (the lower middle) %s; seconds below the bound %d×: %d of %d%s (%s); over the whole series %s\n",
          fmt(rs[1]), fmt(rs[int((n + 1) / 2)]), bound, below, n, none ? sprintf(", %d of them with no answer on either side", none) : "",
          (below == 0 ? "met" : "NOT met") (tc == 0 ? "; CoreScope answered in no second of its series" : ""),
          (tc > 0 ? sprintf("%.1f×", tm / tc) : "∞")
      }'
  done
done
done

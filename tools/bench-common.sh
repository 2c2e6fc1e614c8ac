# SPDX-License-Identifier: ISC
# What the benchmark scripts share; sourced by tools/bench-*.sh, not run.
#
# Environment every script takes:
#   PORT=N               the port of the server it starts (default: a free one on 127.0.0.1)
#   MESHGATE_BUILD=DIR   where meshgate, meshgate-bench and meshgate-shm are (default build)
#   MAX_UNEXPECTED_PCT=P fail (exit 2, with a line naming the stream) when more than P % of a
#                        stream's requests end in an answer its scenario does not ask for
#                        (default 1): a benchmark of 429s is not a benchmark
#   BENCH_SMOKE=1        a run of a few seconds with tiny sizes, to prove the script works
#                        (make check runs each script so, from tests/test_bench_scripts.c)
#   PEER_DIR=DIR         where CoreScope's own server was built (../shared/corescope/peer/
#                        build.sh DIR: corescope-server, corescope-migrate). Scripts that
#                        support it then also run CoreScope's server, alternating with meshgate
#                        in the same run, on the same migrated copy of the database. That build
#                        reads SQLite through cgo (mattn/go-sqlite3, the system's SQLite), not
#                        upstream's pure-Go driver (modernc.org/sqlite): say so beside its numbers.
#
# Two builds in one run (tools/bench-reach.sh, tools/bench-anon.sh; bench-read-api.sh has its own):
#   MESHGATE_BEFORE=FILE another meshgate binary (an older build, for a before/after), with its
#                        meshgate-shm beside it. Each configuration then runs ROUNDS times a
#                        side, the sides alternating (before first in odd rounds, after first in
#                        even ones: a side that always ran second would meet a different machine),
#                        and the script ends with each side's medians (run_summary). The load
#                        generator is MESHGATE_BUILD's meshgate-bench for both sides.
#   ROUNDS=N             rounds a side (default 3 with MESHGATE_BEFORE, else 1)
#   CONFIGS="B C"        only these configurations (their letters; default every one)
#   WARM_S=N             after each start, wait up to N s until a signed-in /api/nodes?limit=50
#                        and /api/packets?limit=50 answer 200 (the group's start-up tables) and
#                        fail loudly when they do not; default 0, no wait (the first requests
#                        then meet the start-up passes, as a client after a restart does)
#
# Every server is started on 127.0.0.1 only and stopped by its pid on exit; every load run
# ends by itself.
bin=${MESHGATE_BUILD:-build}
max_unexpected=${MAX_UNEXPECTED_PCT:-1}
smoke=${BENCH_SMOKE:-0}
bench_tmp=$(mktemp -d)
server_pid=
server_port=
server_name=

other_pids=()
bench_cleanup() {
  if [ -n "$server_pid" ]; then kill -TERM "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null || true; fi
  for p in "${other_pids[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null || true; done
  rm -rf "$bench_tmp"
}
trap bench_cleanup EXIT

die() { echo "$(basename "$0"): FAILED: $*" >&2; exit 2; }

for b in meshgate meshgate-bench meshgate-shm; do
  [ -x "$bin/$b" ] || { echo "$(basename "$0"): $bin/$b is missing: run make (or set MESHGATE_BUILD)" >&2; exit 64; }
done

before_exe=${MESHGATE_BEFORE:-}
if [ -n "$before_exe" ]; then
  for b in "$before_exe" "$(dirname "$before_exe")/meshgate-shm"; do
    [ -x "$b" ] || { echo "$(basename "$0"): MESHGATE_BEFORE: $b is missing or not executable" >&2; exit 64; }
  done
fi
rounds=${ROUNDS:-$([ -n "$before_exe" ] && echo 3 || echo 1)}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "$(basename "$0"): ROUNDS=$rounds: a whole number from 1" >&2; exit 64; }
[[ ${WARM_S:-0} =~ ^[0-9]+$ ]] || { echo "$(basename "$0"): WARM_S=$WARM_S: whole seconds" >&2; exit 64; }
side=      # the side being run: before, after, or empty without MESHGATE_BEFORE
side_exe=  # its meshgate (empty: MESHGATE_EXE or MESHGATE_BUILD's)
round=1
cur_config=

# A port nothing listens on now (PORT wins when set).
free_port() {
  if [ -n "${PORT:-}" ]; then echo "$PORT"; return; fi
  local p
  for _ in $(seq 50); do
    # Below the kernel's ephemeral range (32768 and up), where outgoing connections take ports.
    p=$(( 20000 + RANDOM % 12000 ))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
  die "no free port found on 127.0.0.1"
}

# A signed-in client: the key file the servers load, and the key.
bench_key=bench-$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
printf '%s\n' "$bench_key" > "$bench_tmp/keys"
chmod 600 "$bench_tmp/keys"

# start_server DB [NAME=value]...: starts meshgate on a free port with the key file, waits
# until /api/healthz answers 200, and fails loudly when it does not within 30 s. A port that
# another program took between the probe and the bind is replaced by another (unless PORT
# names it). All load comes from 127.0.0.1, so the per-client connection cap is off.
start_server() {
  local db=$1; shift
  local exe=${side_exe:-${MESHGATE_EXE:-$bin/meshgate}}
  cat "$db" > /dev/null # the same warm page cache for every run
  local attempt
  for attempt in 1 2 3 4 5; do
    server_port=$(free_port)
    server_name=/meshgate-bench-$$-$server_port
    # The scripts' own MESHGATE_BUILD, MESHGATE_EXE and MESHGATE_BEFORE are not meshgate's:
    # it refuses an unknown MESHGATE_ variable at start.
    env -u MESHGATE_BUILD -u MESHGATE_EXE -u MESHGATE_BEFORE "$@" MESHGATE_DB="$db" MESHGATE_LISTEN=127.0.0.1:$server_port MESHGATE_SHM_NAME=$server_name \
      MESHGATE_API_KEYS_FILE="$bench_tmp/keys" MESHGATE_LOG_LEVEL=error MESHGATE_MAX_CONNS_PER_CLIENT=0 \
      "$exe" 2> "$bench_tmp/server.err" &
    server_pid=$!
    local i
    for i in $(seq 600); do
      if curl -sf "http://127.0.0.1:$server_port/api/healthz" >/dev/null; then
        echo "(meshgate on 127.0.0.1:$server_port, pid $server_pid)" >&2
        ( tail -f --pid="$server_pid" "$bench_tmp/server.err" >&2 & )
        return 0
      fi
      if ! kill -0 "$server_pid" 2>/dev/null; then
        wait "$server_pid" 2>/dev/null || true
        server_pid=
        cat "$bench_tmp/server.err" >&2
        if [ -z "${PORT:-}" ] && grep -q "Address already in use" "$bench_tmp/server.err"; then
          continue 2 # another program took the port: try another
        fi
        die "meshgate exited at start (port $server_port; see above)"
      fi
      sleep 0.05
    done
    die "meshgate on port $server_port did not answer /api/healthz within 30 s"
  done
  die "no port could be bound after 5 attempts"
}

# warm_server: with WARM_S, waits until the running server answers a signed-in
# /api/nodes?limit=50 and /api/packets?limit=50 with 200, at most WARM_S s, and fails loudly
# when it does not.
warm_server() {
  [ "${WARM_S:-0}" -gt 0 ] || return 0
  local t0=$SECONDS p code
  for p in '/api/nodes?limit=50' '/api/packets?limit=50'; do
    while :; do
      code=$(curl -s -m 30 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $bench_key" \
        "http://127.0.0.1:$server_port$p" || true)
      [ "$code" = 200 ] && break
      (( SECONDS - t0 < WARM_S )) || die "GET $p did not answer 200 within WARM_S=$WARM_S s of the start (last: ${code:-none})"
      sleep 1
    done
  done
  echo "(warm: /api/nodes and /api/packets answered 200 $((SECONDS - t0)) s after the start)" >&2
}

# shm_tool ARGS...: the running side's meshgate-shm (its segment's layout is its build's).
shm_tool() {
  if [ "$side" = before ]; then "$(dirname "$before_exe")/meshgate-shm" "$@"; else "$bin/meshgate-shm" "$@"; fi
}

# side_label: what a run's heading adds with MESHGATE_BEFORE: the side, the round and the
# load average (1, 5, 15 min) at its start; empty without.
side_label() {
  [ -n "$side" ] || return 0
  printf ' [%s, round %s, load %s]' "$side" "$round" "$(cut -d' ' -f1-3 /proc/loadavg)"
}

# for_each_side LETTER COMMAND...: runs COMMAND (one configuration, LETTER) unless CONFIGS
# leaves it out; with MESHGATE_BEFORE, ROUNDS times a side, alternating.
for_each_side() {
  local letter=$1 r s; shift
  if [ -n "${CONFIGS:-}" ] && [[ " $CONFIGS " != *" $letter "* ]]; then return 0; fi
  cur_config=$letter
  if [ -z "$before_exe" ]; then
    for r in $(seq "$rounds"); do round=$r; "$@"; done
    return 0
  fi
  for r in $(seq "$rounds"); do
    local order=(before after)
    (( r % 2 )) || order=(after before)
    for s in "${order[@]}"; do
      side=$s round=$r
      if [ "$s" = before ]; then side_exe=$before_exe; else side_exe=; fi
      "$@"
    done
  done
  side= side_exe= round=1
}

# record STEP: passes meshgate-bench's report through and keeps its stream rows (stream sent
# 200 429 503 other err p50 p95 p99 max rps) for run_summary, with the configuration, the
# step, the side and the load average (1 min) now.
record() {
  local load; load=$(cut -d' ' -f1 /proc/loadavg)
  awk -v c="$cur_config" -v st="$1" -v sd="${side:--}" -v ld="$load" -v out="$bench_tmp/rows" '
    { print }
    NF == 12 && $2 ~ /^[0-9]+$/ && $12 ~ /^[0-9.]+$/ {
      $1 = $1; print c "\t" st "\t" sd "\t" ld "\t" $0 >> out; fflush(out)
    }'
}

# run_summary: with MESHGATE_BEFORE or ROUNDS > 1, one markdown table of every recorded stream:
# each side's median over its rounds, column by column (so a cell's numbers may come from
# different rounds), and after ÷ before of the p95.
run_summary() {
  [ -n "$before_exe" ] || [ "$rounds" -gt 1 ] || return 0
  [ -s "$bench_tmp/rows" ] || return 0
  echo
  echo "## Medians over $rounds round(s) a side (each number the median of the rounds' own)"
  echo
  awk -F'\t' -v have_before="$([ -n "$before_exe" ] && echo 1)" '
    function median(key,   n, i, j, t, a) {
      n = split(vals[key], a, " ")
      for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    function ms(x) { return sprintf(x >= 100 ? "%.0f" : x >= 10 ? "%.1f" : "%.2f", x) }
    function cell(k,   m) {
      if (!((k SUBSEP 2) in vals)) return "—"
      return median(k SUBSEP 2) " sent: " median(k SUBSEP 3) " × 200, " median(k SUBSEP 4) " × 429, " \
        median(k SUBSEP 5) " × 503, " median(k SUBSEP 7) " err; " ms(median(k SUBSEP 8)) " / " ms(median(k SUBSEP 9)) \
        " / " ms(median(k SUBSEP 11)) " ms; load " median(k SUBSEP "load")
    }
    {
      split($5, f, " ")
      row = $1 SUBSEP $2 SUBSEP f[1]
      if (!(row in seen)) { seen[row] = 1; order[++n] = row }
      k = row SUBSEP $3
      for (i = 2; i <= 12; i++) vals[k SUBSEP i] = vals[k SUBSEP i] " " f[i]
      vals[k SUBSEP "load"] = vals[k SUBSEP "load"] " " $4
    }
    END {
      if (have_before) {
        print "| config | step | stream | before: sent, answers; p50 / p95 / max; load (1 min) | after | p95 after ÷ before |"
        print "|---|---|---|---|---|---:|"
      } else {
        print "| config | step | stream | sent, answers; p50 / p95 / max; load (1 min) |"
        print "|---|---|---|---|"
      }
      for (r = 1; r <= n; r++) {
        split(order[r], p, SUBSEP)
        if (have_before) {
          b = order[r] SUBSEP "before"; a = order[r] SUBSEP "after"
          ratio = "—"
          if ((b SUBSEP 9) in vals && (a SUBSEP 9) in vals && median(b SUBSEP 9) > 0)
            ratio = sprintf("%.2f×", median(a SUBSEP 9) / median(b SUBSEP 9))
          printf "| %s | %s | %s | %s | %s | %s |\n", p[1], p[2], p[3], cell(b), cell(a), ratio
        } else
          printf "| %s | %s | %s | %s |\n", p[1], p[2], p[3], cell(order[r] SUBSEP "-")
      }
    }' "$bench_tmp/rows"
}

stop_server() {
  kill -TERM "$server_pid"; wait "$server_pid" || true
  server_pid=
}

# bench ARGS...: meshgate-bench at the running server, failing the script (exit 2) when a
# stream has more unexpected answers than MAX_UNEXPECTED_PCT.
# The key never reaches the output: the report quotes the command line, so it is redacted.
bench() {
  local rc=0
  "$bin/meshgate-bench" --target "127.0.0.1:${bench_port:-$server_port}" --max-unexpected-pct "$max_unexpected" \
    "$@" > "$bench_tmp/report" || rc=$?
  sed "s/$bench_key/KEY/g" "$bench_tmp/report"
  [ $rc = 0 ] || die "meshgate-bench exited $rc$([ $rc = 2 ] && echo ': answers nobody asked for (its line above)')"
}

# signed_in NAME...: the --header arguments that sign each named stream in.
signed_in() { for s in "$@"; do printf '%s\0' --header "$s:Authorization: Bearer $bench_key"; done; }

# keep_server: the running server stays up (stopped on exit, its pid last in other_pids) and
# the next start_server starts another; kept_port is its port.
keep_server() { other_pids+=("$server_pid"); kept_port=$server_port; server_pid=; }

# peer_available: PEER_DIR has CoreScope's server and migration tool.
peer_available() { [ -n "${PEER_DIR:-}" ] && [ -x "$PEER_DIR/corescope-server" ] && [ -x "$PEER_DIR/corescope-migrate" ]; }

# migrated_copy DB: a copy of DB (with its -wal) migrated by CoreScope's own tool, as its
# ingestor does at start; prints its path. Both servers then read this same file.
migrated_copy() {
  local out=$bench_tmp/peer/db.sqlite
  mkdir -p "$bench_tmp/peer"
  sqlite3 "$1" ".backup '$out'" || die "cannot copy $1"
  "$PEER_DIR/corescope-migrate" -db "$out" > "$bench_tmp/peer/migrate.log" 2>&1 \
    || { cat "$bench_tmp/peer/migrate.log" >&2; die "corescope-migrate failed on the copy of $1"; }
  sqlite3 "$out" "PRAGMA journal_mode=WAL" > /dev/null
  echo "$out"
}

# start_peer DB: CoreScope's server on a free port over DB, up when /api/healthz says
# "ready":true (it loads every packet first; 300 s at most); sets peer_port and peer_pid.
# A port that another program took between the probe and the bind is replaced by another.
start_peer() {
  local attempt i
  for attempt in 1 2 3 4 5; do
    peer_port=$(free_port)
    bash "${PEER_RUN:-$(dirname "$0")/../../shared/corescope/peer/run.sh}" "$PEER_DIR" "$1" "$peer_port" \
      > "$bench_tmp/peer.log" 2>&1 &
    peer_pid=$!
    other_pids+=("$peer_pid")
    for i in $(seq 3000); do
      if curl -s "http://127.0.0.1:$peer_port/api/healthz" 2>/dev/null | grep -q '"ready":true'; then
        echo "(CoreScope's server on 127.0.0.1:$peer_port, pid $peer_pid)" >&2
        return 0
      fi
      if ! kill -0 "$peer_pid" 2>/dev/null; then
        if [ -z "${PORT:-}" ] && grep -qi "address already in use" "$bench_tmp/peer.log"; then
          continue 2 # another program took the port: try another
        fi
        tail -20 "$bench_tmp/peer.log" >&2; die "CoreScope's server exited at start"
      fi
      sleep 0.1
    done
    die "CoreScope's server on port $peer_port was not ready within 300 s"
  done
  die "CoreScope's server: no port could be bound after 5 attempts"
}

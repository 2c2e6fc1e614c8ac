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
  local exe=${MESHGATE_EXE:-$bin/meshgate}
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

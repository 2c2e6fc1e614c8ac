#!/usr/bin/env bash
# SPDX-License-Identifier: ISC
# Soak: meshgate beside a live writer (docs/benchmarks.md, "Soak beside a live writer").
#
# A writer shaped like CoreScope's ingestor (tools/soak-live.py writer: transmissions and
# observations several times a second, node and observer updates, autocheckpoint and explicit
# PASSIVE/FULL/RESTART/TRUNCATE checkpoints, connections opened and closed as a Go pool does)
# writes a WAL copy of a generated database, while WORKERS workers serve every native route to
# THREADS clients (half signed in), with the background passes running, a worker killed with
# -9 every KILL_EVERY seconds and the group reloaded by SIGHUP every HUP_EVERY seconds. At the
# end it counts every 5xx and every SQLite error in the log and the writer, and fails (exit 2)
# on any. Connections cut by a kill -9 or a reload are counted, not failures, and so are a
# line's refusals (503 with Retry-After and the line's own message: load shed as designed,
# like the cold gate's 429s).
#
#   SOAK_SECONDS=N    how long (default 1800)
#   WORKERS=N         4 to 8 (default 4)
#   THREADS=N         clients (default 4)
#   KILL_EVERY=S      seconds between kill -9 of a random worker (default 20; 0: never)
#   HUP_EVERY=S       seconds between SIGHUP reloads (default 45; 0: never)
#   OBSERVATIONS=N    size of the generated database (default 50000)
#   INJECT_EVERY=N    every Nth request of each client asks for a connection fault
#                     (X-Test-Db-Break: 1, with MESHGATE_TEST_HOOKS=park: the test build,
#                     meshgate-hooks, runs then; `make build/tests` builds it): the heal must answer
#                     every one of them without a 5xx (db_faults > 0, db_faults_unhealed = 0)
#   MESHGATE_BUILD=DIR  where meshgate and meshgate-fixture are (default build)
set -u
bin=${MESHGATE_BUILD:-build}
seconds=${SOAK_SECONDS:-1800}
workers=${WORKERS:-4}
threads=${THREADS:-4}
kill_every=${KILL_EVERY:-20}
hup_every=${HUP_EVERY:-45}
observations=${OBSERVATIONS:-50000}
inject=${INJECT_EVERY:-0}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
server_pid= writer_pid= load_pid=

cleanup() {
  for p in $load_pid $writer_pid; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  if [ -n "$server_pid" ]; then kill -TERM "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
die() { echo "soak-live: FAILED: $*" >&2; exit 2; }
for b in meshgate meshgate-fixture; do
  [ -x "$bin/$b" ] || { echo "soak-live: $bin/$b is missing: run make" >&2; exit 64; }
done

db=$tmp/live.db
"$bin/meshgate-fixture" --out "$db" --observations "$observations" --seed 7 > /dev/null ||
  die "meshgate-fixture"
key=soak-$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
printf '%s\n' "$key" > "$tmp/keys"
chmod 600 "$tmp/keys"

# The writer first: it keeps the -wal and -shm, as the ingestor does.
python3 "$here/soak-live.py" writer "$db" "$tmp/writer.json" &
writer_pid=$!
for _ in $(seq 200); do [ -e "$db-shm" ] && break; sleep 0.05; done

hooks=() server=meshgate
[ "$inject" -gt 0 ] && hooks=(MESHGATE_TEST_HOOKS=park) server=meshgate-hooks
[ -x "$bin/$server" ] || { echo "soak-live: $bin/$server is missing: run make $bin/$server" >&2; exit 64; }
for attempt in 1 2 3 4 5; do
  port=$(( 20000 + RANDOM % 12000 )) # below the ephemeral range (32768 and up)
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue
  env -u MESHGATE_BUILD "${hooks[@]}" MESHGATE_DB="$db" MESHGATE_LISTEN=127.0.0.1:$port \
    MESHGATE_SHM_NAME=/meshgate-soak-$$-$port MESHGATE_API_KEYS_FILE="$tmp/keys" \
    MESHGATE_WORKERS="$workers" MESHGATE_LOG_LEVEL=warn MESHGATE_MAX_CONNS_PER_CLIENT=0 \
    MESHGATE_ANON_RATE=0 "$bin/$server" 2> "$tmp/server.log" &
  server_pid=$!
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$port/api/healthz" > /dev/null && break 2
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.05
  done
  kill -TERM "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null; server_pid=
  grep -q "Address already in use" "$tmp/server.log" || { cat "$tmp/server.log" >&2; die "meshgate did not start"; }
done
[ -n "$server_pid" ] || die "no port could be bound"
echo "soak-live: meshgate pid $server_pid on 127.0.0.1:$port, $workers workers, $threads clients, ${seconds}s" >&2

python3 "$here/soak-live.py" load "$port" "$db" "$key" "$tmp/load.json" "$threads" "$inject" &
load_pid=$!

start=$SECONDS kills=0 hups=0 next_kill=$kill_every next_hup=$hup_every
while [ $(( SECONDS - start )) -lt "$seconds" ]; do
  sleep 1
  t=$(( SECONDS - start ))
  kill -0 "$server_pid" 2>/dev/null || die "meshgate exited"
  if [ "$kill_every" -gt 0 ] && [ "$t" -ge "$next_kill" ]; then
    next_kill=$(( t + kill_every ))
    mapfile -t pids < <(pgrep -P "$server_pid")
    if [ "${#pids[@]}" -gt 0 ]; then
      kill -KILL "${pids[RANDOM % ${#pids[@]}]}" 2>/dev/null && kills=$(( kills + 1 ))
    fi
  fi
  if [ "$hup_every" -gt 0 ] && [ "$t" -ge "$next_hup" ]; then
    next_hup=$(( t + hup_every ))
    kill -HUP "$server_pid" && hups=$(( hups + 1 ))
  fi
done

kill -TERM "$load_pid"; wait "$load_pid"; load_pid=
kill -TERM "$writer_pid"; wait "$writer_pid"; writer_pid=
metrics=$(curl -sf "http://127.0.0.1:$port/metrics")
counter() { printf '%s\n' "$metrics" | awk -v n="meshgate_$1_total" '$1 == n {print $2}'; }
faults=$(counter db_faults) unhealed=$(counter db_faults_unhealed)
integrity=$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('PRAGMA integrity_check').fetchone()[0])" "$db")
kill -TERM "$server_pid"; wait "$server_pid"; server_pid=

# Every SQLite error meshgate logged; with INJECT_EVERY, the injected faults are the test's
# own and not counted: each one's heal, and what the failed first try of its request logged
# (an injected fault is a disk I/O error); that each was healed is what db_faults_unhealed and
# the 5xx count check. Without INJECT_EVERY every such line counts.
sqlite_errors=$(grep -iE "malformed|disk I/O|not a database|cannot prepare|sqlite|database .*(error|failed)|corrupt" "$tmp/server.log" |
  { if [ "$inject" -gt 0 ]; then
      grep -v -e "closed, opened again, and the work is run again" \
              -e ": disk I/O error$"
    else cat; fi; } | tee "$tmp/sqlite-errors" | wc -l)

python3 - "$tmp/load.json" "$tmp/writer.json" "$kills" "$hups" "$faults" "$unhealed" \
  "$sqlite_errors" "$integrity" "$seconds" "$inject" <<'EOF'
import json, sys
load, writer = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
kills, hups, faults, unhealed, errors = (int(x or 0) for x in sys.argv[3:8])
integrity, seconds, inject = sys.argv[8], int(sys.argv[9]), int(sys.argv[10])
print(f"soak-live: {seconds} s: {load['requests']} requests over {load['routes']} targets "
      f"(status {dict(sorted(load['status'].items()))}), {load['conn_errors']} connections cut, "
      f"{load['5xx_count']} 5xx, {load.get('line_refusals', 0)} refusals of a line (503, Retry-After); writer {writer['commits']} commits "
      f"({writer['transmissions']} transmissions, {writer['observations']} observations, "
      f"{writer['node_updates']} node updates), checkpoints {writer['checkpoints']}, "
      f"{writer['reopens']} connections opened, {writer['errors']} errors; "
      f"{kills} kill -9, {hups} SIGHUP; db_faults {faults} (injected {load['injected']}), "
      f"unhealed {unhealed}; SQLite errors in the log {errors}; integrity_check {integrity}")
for status, samples in sorted(load.get("samples", {}).items()):
    print(f"soak-live: {status} e.g. {samples[:2]}")
bad = []
if load["5xx_count"]: bad.append(f"{load['5xx_count']} 5xx: {load['5xx'][:5]}")
if errors: bad.append(f"{errors} SQLite errors in the log")
if writer["errors"]: bad.append(f"writer errors: {writer['error_samples']}")
if unhealed: bad.append(f"{unhealed} unhealed faults")
if inject and not faults: bad.append("no injected fault reached a connection")
if not inject and faults: bad.append(f"{faults} connection faults")
if integrity != "ok": bad.append(f"integrity_check: {integrity}")
if load["requests"] < seconds: bad.append("fewer requests than seconds: the load did not run")
if bad:
    print("soak-live: FAILED: " + "; ".join(bad), file=sys.stderr)
    sys.exit(2)
EOF
rc=$?
[ "$sqlite_errors" -gt 0 ] && head -20 "$tmp/sqlite-errors" >&2
exit $rc

#!/usr/bin/env bash
# SPDX-License-Identifier: ISC
# Where a meshgate group's memory goes: PSS from /proc/PID/smaps (each mapping, not only the
# rollup) of the master and every process whose parent it is, summed by what each mapping is.
# PSS divides a shared page among the processes that map it, so the sum counts the segment,
# the summaries and the binary's pages once.
#
#   tools/mem-breakdown.sh MASTER_PID [LABEL]
#
# Prints one markdown row per process (master, worker pids) and a row "group" with the sums,
# in MB, by kind:
#   heap       the main thread's malloc heap ([heap]: response and connection buffers, the
#              loop's SQLite page cache)
#   anon       other private anonymous mappings: the helper threads' malloc arenas (their
#              SQLite page caches), their stacks, large allocations (mmap'ed chunks)
#   stack      [stack]
#   db map     the database file through SQLite's memory map (MAP_SHARED of the file)
#   wal index  the database's -shm file (SQLite's WAL index)
#   segment    /dev/shm/meshgate-* (the shared segment)
#   summaries  the shared anonymous mapping of the per-transmission summaries (/dev/zero)
#   binary     the meshgate executable
#   libraries  shared libraries and everything else file-backed
# Also prints the number of open SQLite connections per process (open file descriptors of the
# database file) as "db fds".
set -euo pipefail
master=${1:?usage: $0 MASTER_PID [LABEL]}
label=${2:-}
pids=("$master")
while read -r p; do pids+=("$p"); done < <(pgrep -P "$master" || true)

echo "| ${label:+$label }process | PSS MB | heap | anon | stack | db map | wal index | segment | summaries | binary | libraries | db fds |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for p in "${pids[@]}"; do
  exe=$(readlink "/proc/$p/exe" 2>/dev/null || true)
  dbfds=0
  for fd in /proc/"$p"/fd/*; do
    t=$(readlink "$fd" 2>/dev/null || true)
    case $t in *.db | *.sqlite | *.sqlite3) dbfds=$((dbfds + 1)) ;; esac
  done
  name=worker
  [ "$p" = "$master" ] && name=master
  awk -v name="$name $p" -v exe="$exe" -v dbfds="$dbfds" '
    /^[0-9a-f]+-[0-9a-f]+ / {
      path = ""
      for (i = 6; i <= NF; i++) path = path (i > 6 ? " " : "") $i
      if (path == "[heap]") kind = "heap"
      else if (path == "[stack]") kind = "stack"
      else if (path == "") kind = "anon"
      else if (path ~ /^\/dev\/shm\/meshgate/) kind = "segment"
      else if (path ~ /^\/dev\/zero/ || path ~ /^\[anon_shmem/ || path ~ /^\/SYSV/) kind = "summaries"
      else if (path == exe) kind = "binary"
      else if (path ~ /-shm$/) kind = "wal"
      else if (path ~ /\.(db|sqlite|sqlite3)$/) kind = "db"
      else if (path ~ /^\[/) kind = "anon"
      else kind = "lib"
      next
    }
    /^Pss:/ { pss[kind] += $2; total += $2 }
    END {
      printf "| %s | %.1f |", name, total / 1024
      n = split("heap anon stack db wal segment summaries binary lib", k, " ")
      for (i = 1; i <= n; i++) printf " %.1f |", pss[k[i]] / 1024
      printf " %d |\n", dbfds
    }' "/proc/$p/smaps" 2>/dev/null || true
done | tee "${TMPDIR:-/tmp}/mem-breakdown.$$"
awk -F'|' -v label="$label" '
  { for (i = 3; i <= 13; i++) s[i] += $i; n++ }
  END {
    printf "| %sgroup (%d processes) |", (label != "" ? label " " : ""), n
    printf " **%.1f** |", s[3]
    for (i = 4; i <= 12; i++) printf " %.1f |", s[i]
    printf " %d |\n", s[13]
  }' "${TMPDIR:-/tmp}/mem-breakdown.$$"
rm -f "${TMPDIR:-/tmp}/mem-breakdown.$$"

#!/bin/sh
# SPDX-License-Identifier: ISC
#
# check-callers: every function the production build exports has a caller outside the tests
# (make check runs it). Reads the objects of build/meshgate and the tools (not tests/, not
# fuzz/, not the test build's obj-hooks/): a function defined in one (nm: T) is called when
# another refers to it (nm: U) or its own source names it again outside comments. A function
# with neither is dead: delete it (and its declaration), or, when the tests need it to look
# inside, name it in SEAMS below with the reason.
#
# usage: check-callers.sh OBJDIR OBJECT...   (OBJDIR: build/obj; each OBJECT under it)
set -eu
export LC_ALL=C
objdir=$1
shift

# Functions production does not call that the tests use to look inside or to drive a part
# alone; one per line: name, then why.
SEAMS='
mg_segment_attach          tests and the harness read a running server'"'"'s segment
mg_segment_detach          tests and the harness read a running server'"'"'s segment
mg_segment_lock_range      the test build'"'"'s X-Test-Stop-In-Lock, tests/test_stall.c
mg_corescope_load_text     CoreScope'"'"'s config.json from memory: fuzz/corescope_config.c
mg_shmdump_from_bytes      the dump of a segment copied to memory: tests, fuzz/shmdump.c
mg_db_vm_steps             tests/test_cost.c: rows a request stepped
mg_db_pages_fetched        tests/test_cost.c: pages a request read
mg_cached_bytes_copied     tests/test_cost.c: bytes a cached answer copied
mg_nodes_answers_rendered  tests/test_nodes_answers.c: renders counted
mg_packets_last_used_summaries  tests/test_summaries.c: which path a request took
mg_packets_summaries_pass  tests/test_summaries.c: a whole pass at once (the server runs it in chunks)
mg_packets_totals_forget   tests: per-process table dropped to test its rebuild
mg_neighbor_graph_forget   tests: per-process table dropped to test its rebuild
mg_node_hash_sizes_forget  tests: per-process table dropped to test its rebuild
mg_node_relay_forget       tests: per-process table dropped to test its rebuild
mg_region_map_forget       tests: per-process table dropped to test its rebuild
mg_node_hash_sizes_exist   tests: whether the table was built
mg_node_hash_sizes_fresh   tests: whether the table is fresh
mg_node_relay_exist        tests: whether the table was built
mg_process_table_file_looks  tests/test_reach_gate.c: the file check alone
mg_jobs_threads            tests/test_reach_gate.c: helper threads started
mg_lock_wake_calls         tests/test_lock.c: wake-ups made
mg_futex_wait_calls        tests/test_result_cache.c: sleeps of a build follower
mg_conn_limit_clients      tests/test_conn_limit.c: clients tracked
mg_fifo_gate_acquire       tests/test_gate_fifo.c: the blocking form of the gate
mg_keys_match              tests/test_keys.c: the key comparison alone
mg_cidr_list_format        tests/test_netaddr.c, fuzz/netaddr.c: a parsed list printed back
'
seams=$(printf '%s\n' "$SEAMS" | awk 'NF { print $1 }')

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nm -A --defined-only "$@" | awk '$2 == "T" && $3 != "main" { sub(/:[^:]*$/, "", $1); print $3, $1 }' |
    sort > "$tmp/defined"
nm --undefined-only "$@" | awk 'NF == 2 { print $2 }' | sort -u > "$tmp/referred"
printf '%s\n' "$seams" | sort > "$tmp/seams"

status=0
# Named by no other object and not a seam: does its own source name it again, outside
# comments? (one preprocessor run over those sources, comments removed, nothing expanded)
join -v 1 "$tmp/defined" "$tmp/referred" | join -v 1 - "$tmp/seams" |
    awk -v objdir="$objdir/" '{ src = substr($2, length(objdir) + 1); sub(/\.o$/, ".c", src); print $1, src }' \
    > "$tmp/alone"
if [ -s "$tmp/alone" ]; then
    gcc -fpreprocessed -dD -E $(cut -d' ' -f2 "$tmp/alone" | sort -u) > "$tmp/sources"
    awk 'NR == FNR { want[$1 " " $2] = 1; next }
         /^# [0-9]+ "/ { src = $3; gsub(/"/, "", src); next }
         { n = split($0, w, /[^A-Za-z0-9_]+/); for (i = 1; i <= n; i++) if ((w[i] " " src) in want) seen[w[i] " " src]++ }
         END { for (k in want) if (seen[k] <= 1) print k }' "$tmp/alone" "$tmp/sources" | sort > "$tmp/dead"
    while read -r fn src; do
        echo "check-callers: $fn ($src) is exported and nothing outside the tests calls it: delete it, or name it in tools/check-callers.sh's SEAMS" >&2
        status=1
    done < "$tmp/dead"
fi
# A seam that is no longer defined is a stale line.
cut -d' ' -f1 "$tmp/defined" | sort -u | join -v 1 "$tmp/seams" - > "$tmp/stale" || true
while read -r fn; do
    echo "check-callers: SEAMS names $fn, which no object defines: remove the line" >&2
    status=1
done < "$tmp/stale"
[ "$status" = 0 ] && echo "check-callers: $(wc -l < "$tmp/defined") exported functions, each called outside the tests ($(wc -l < "$tmp/seams") test seams listed)"
exit "$status"

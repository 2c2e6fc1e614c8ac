/* SPDX-License-Identifier: ISC */
/*
 * db_counts: the database's row counts, computed at most once per MG_DB_COUNTS_INTERVAL_NS
 * for the whole process group (a group value, MG_VALUE_DB_COUNTS). /api/healthz reports
 * transmissions and observations; /api/perf reports all four under sqlite.rows. Counting
 * every row of a large table takes time (29 ms at 2M observations: count(*) walks every page
 * of an index), which is why no request does it: a worker computes them when it starts
 * (before it serves), and a request that finds them stale asks the worker's helper thread to
 * refresh them (mg_db_counts_current) and answers with what it has, at most an interval and
 * a refresh old.
 */
#ifndef MESHGATE_DB_COUNTS_H
#define MESHGATE_DB_COUNTS_H

#include "env.h"

#include <stdbool.h>
#include <stdint.h>

#define MG_DB_COUNTS_INTERVAL_NS (10 * 1000000000LL)

/* Stored as these bytes in the shared value: fixed-size, no pointers. */
struct mg_db_counts {
    int64_t transmissions;
    int64_t observations;
    int64_t nodes;
    int64_t observers;
};

/* Fills out with the group's counts (perhaps up to an interval old); false when the
 * database does not answer. */
bool mg_db_counts_get(struct mg_env *env, struct mg_db_counts *out);

/* The group's counts whatever their age, never computed here; false when there are none. */
bool mg_db_counts_peek(struct mg_env *env, struct mg_db_counts *out);

/* What requests read: the group's last counts (false when there are none). When they are
 * stale and nobody refreshes them, the worker's helper thread is asked to (once at a time per
 * process) and this returns at once; without a helper (in-process tests) they are computed
 * here. */
bool mg_db_counts_current(struct mg_env *env, struct mg_db_counts *out);

#endif

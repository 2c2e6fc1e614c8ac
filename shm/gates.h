/* SPDX-License-Identifier: ISC */
/*
 * gates: every part of the segment that admits or limits, one row of one table. A row says
 *   name      the gate (conn_cap, rate_limit, anon_line, cold, diag, upstream, breaker)
 *   sections  the segment's sections that hold its records (segment.h), space-separated
 *   title     its lock's name for people (a table of sets: "title N" for set N)
 *   status, retry_after_s, refusal
 *             what a refused request is answered: the status (0: the connection is closed
 *             unanswered), Retry-After (0: worked out from the gate's state) and the message
 *             (a %s names the work, for the cold gate)
 *   counters  its X-macro counter list (X(field, json key, what))
 *   snapshot  the struct its read function fills
 * and, by name, shm/gates.c holds its lock (name_lock: lock i, NULL past the last), its
 * reclaim (name_reclaim: what a dead worker's records release) and its read (name_read).
 *
 * The parts of the segment that neither admit nor limit are rows of the second table
 * (MG_SEGMENT_PART_TABLE: name, sections, title), with a lock and a reclaim the same way.
 * Between them the two tables name every section of the segment once (test_counter_lists
 * checks this against the segment's own section table), and reclaim (reclaim.h), the lock
 * sweep and names, and the readers walk them: adding a gate is adding a row here (and its
 * three functions, which the compiler asks for).
 */
#ifndef MESHGATE_GATES_H
#define MESHGATE_GATES_H

#include "client_limit.h"
#include "conn_limit.h"
#include "gate_diag.h"
#include "gate_fifo.h"
#include "lock.h"
#include "segment.h"
#include "upstream_gate.h"

#include <stdbool.h>
#include <stdint.h>

/* The connection table's state (the conn_cap row's snapshot). */
struct mg_conn_snapshot {
    uint32_t cap; /* connections per client; 0: no cap */
    uint32_t sets;
#define MG_CONN_SNAPSHOT_COUNTER(field, json, what) uint64_t field;
    MG_CONN_COUNTER_LIST(MG_CONN_SNAPSHOT_COUNTER)
#undef MG_CONN_SNAPSHOT_COUNTER
};

/* One row each, so a reader can take one row (MG_GATE_ROW_cold(X)) or the whole table. */
#define MG_GATE_ROW_conn_cap(X)                                                                    \
    X(conn_cap, "conns connsets connholds", "connection table set", 0, 0,                          \
      "the client holds its share of connections (MESHGATE_MAX_CONNS_PER_CLIENT)",                 \
      MG_CONN_COUNTER_LIST, struct mg_conn_snapshot)
#define MG_GATE_ROW_rate_limit(X)                                                                  \
    X(rate_limit, "clients clientsets", "rate table set", 429, 0,                                  \
      "too many heavy requests from this address; retry after Retry-After",                        \
      MG_CLIENT_COUNTER_LIST, struct mg_client_snapshot)
#define MG_GATE_ROW_anon_line(X)                                                                   \
    X(anon_line, "anon", "anonymous line", 503, 1,                                                 \
      "the line for anonymous heavy requests is full; retry after Retry-After, or sign in with "   \
      "an API key",                                                                                \
      MG_FIFO_COUNTER_LIST, struct mg_fifo_snapshot)
#define MG_GATE_ROW_cold(X)                                                                        \
    X(cold, "cold", "cold-scan gate", 429, 2,                                                      \
      "too many %ss are being built; retry after Retry-After", MG_FIFO_COUNTER_LIST,               \
      struct mg_fifo_snapshot)
#define MG_GATE_ROW_diag(X)                                                                        \
    X(diag, "diag", "diagnostic gate", 429, 0,                                                     \
      "a memory breakdown is running; ask again after Retry-After", MG_DIAG_COUNTER_LIST,          \
      struct mg_diag_snapshot)
#define MG_GATE_ROW_upstream(X)                                                                    \
    X(upstream, "upstream", "upstream gate", 503, 1,                                               \
      "the line for the upstream is full; retry after Retry-After", MG_FIFO_COUNTER_LIST,          \
      struct mg_fifo_snapshot)
#define MG_GATE_ROW_breaker(X)                                                                     \
    X(breaker, "", "", 502, 0,                                                                     \
      "the upstream is failing: its breaker is open; retry after Retry-After",                     \
      MG_BREAKER_COUNTER_LIST, struct mg_upstream_snapshot)

#define MG_GATE_TABLE(X)                                                                           \
    MG_GATE_ROW_conn_cap(X) MG_GATE_ROW_rate_limit(X) MG_GATE_ROW_anon_line(X) MG_GATE_ROW_cold(X) \
        MG_GATE_ROW_diag(X) MG_GATE_ROW_upstream(X) MG_GATE_ROW_breaker(X)

/* The rest of the segment: X(name, sections, title). The header is no section. */
#define MG_SEGMENT_PART_TABLE(X)                                                                   \
    X(config, "config", "")                                                                        \
    X(counters, "counters", "")                                                                    \
    X(routes, "routes", "")                                                                        \
    X(slow, "slow", "")                                                                            \
    X(values, "values", "")                                                                        \
    X(cache, "cache cacheentries cachepages", "result cache")                                      \
    X(slots, "slots", "")                                                                          \
    X(live, "live liveslots", "")

enum mg_gate_row {
#define MG_GATE_ROW_ENUM(name, ...) MG_GATE_ROW_##name,
    MG_GATE_TABLE(MG_GATE_ROW_ENUM)
#undef MG_GATE_ROW_ENUM
        MG_GATE_ROWS
};

enum mg_segment_part_row {
#define MG_PART_ROW_ENUM(name, ...) MG_PART_ROW_##name,
    MG_SEGMENT_PART_TABLE(MG_PART_ROW_ENUM)
#undef MG_PART_ROW_ENUM
        MG_PART_ROWS
};

/* A row as data, for walks that need no type (reclaim, the lock sweep, the tests). */
struct mg_gate_info {
    const char *name;
    const char *sections;
    const char *title;
    int status;
    int retry_after_s;
    const char *refusal;
    struct mg_lock *(*lock)(const struct mg_segment *seg, uint32_t i);
    unsigned (*reclaim)(struct mg_segment *seg, unsigned slot, int pid, int64_t now_ns);
};
extern const struct mg_gate_info mg_gates[MG_GATE_ROWS];
extern const struct mg_gate_info mg_segment_parts[MG_PART_ROWS];

/* Every gate's state at one moment: one snapshot per row, filled by its read function. */
struct mg_gate_snapshots {
#define MG_GATE_SNAPSHOT_FIELD(name, sections, title, status, retry, refusal, counters, snapshot)  \
    snapshot name;
    MG_GATE_TABLE(MG_GATE_SNAPSHOT_FIELD)
#undef MG_GATE_SNAPSHOT_FIELD
};

/*
 * Reads every gate by walking the table: under each gate's lock (locked, pid: the reader), or
 * as a private copy of the segment holds them (locked false: the dump tool, which never locks).
 */
void mg_gates_read(const struct mg_segment *seg, int pid, bool locked, int64_t now_ns,
                   struct mg_gate_snapshots *out);

#endif

/* SPDX-License-Identifier: ISC */
/*
 * table_stats: what every shared table reports, the same set for each, in every output
 * (/metrics, /api/perf, /server-status, meshgate-shm): the transmission summaries
 * (tx_summary.h), the relay table (node_relay.h), the neighbour graph (neighbor_graph.h), the
 * node list's hash sizes (node_hash_sizes.h), the region map (region_map.h), the usefulness
 * scores (node_usefulness.h) and the multi-byte capability (node_multibyte.h).
 *
 * The tables are listed once (MG_TABLE_LIST) and so are their numbers (MG_TABLE_STAT_LIST);
 * every output walks both lists (tests/test_counter_lists.c fails when one misses a table or
 * a number). The numbers are the group's: one record per table in the segment (in the result
 * cache's block, struct mg_result_cache), written with relaxed atomics by whichever process
 * makes a pass or serves rows. A pass is background work, not a request: `building` says one
 * is under way (the dump and /server-status show it so, never as a permit's holder).
 */
#ifndef MESHGATE_TABLE_STATS_H
#define MESHGATE_TABLE_STATS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* X(id, name, what): id names the enum (MG_TABLE_id), name the label in every output. */
#define MG_TABLE_LIST(X)                                                                           \
    X(summaries, "summaries", "the transmission summaries of /api/packets (tx_summary.h)")         \
    X(relay, "relay", "the relay table of /api/nodes (node_relay.h)")                              \
    X(relay_probe, "relay_probe", "whether /api/nodes needs the relay table (node_relay.c)")       \
    X(neighbors, "neighbors", "the neighbour graph (neighbor_graph.h)")                            \
    X(hash_sizes, "hash_sizes", "the node list's hash sizes (node_hash_sizes.h)")                  \
    X(regions, "regions", "the region map of ?region= (region_map.h)")                             \
    X(usefulness, "usefulness", "the nodes' usefulness scores (node_usefulness.h)")                \
    X(multibyte, "multibyte", "the nodes' multi-byte capability (node_multibyte.h)")

enum mg_table_id {
#define MG_TABLE_ENUM(id, name, what) MG_TABLE_##id,
    MG_TABLE_LIST(MG_TABLE_ENUM)
#undef MG_TABLE_ENUM
        MG_TABLE_COUNT
};

/* X(field, json, type, what): type is the Prometheus type. */
#define MG_TABLE_STAT_LIST(X)                                                                      \
    X(size_bytes, "sizeBytes", "gauge", "bytes of the table as last built")                        \
    X(generation, "generation", "counter", "passes that built the table (its generation)")         \
    X(last_pass_unix_ms, "lastPassUnixMs", "gauge", "when the last pass ended (Unix ms, 0: none)") \
    X(last_pass_ms, "lastPassMs", "gauge", "how long the last pass took (ms)")                     \
    X(rows_served, "rowsServed", "counter", "rows answered from the table")                        \
    X(rows_direct, "rowsDirect", "counter", "rows read directly from the database instead")        \
    X(failures, "failures", "counter", "passes that failed")                                       \
    X(building, "building", "gauge", "passes under way now (background work, no permit)")          \
    X(low_water, "lowWater", "gauge",                                                              \
      "the lowest key covered from the newest up, for a table filled newest first (0: none)")

struct mg_table_stats {
#define MG_TABLE_STAT_FIELD(field, json, type, what) _Atomic uint64_t field;
    MG_TABLE_STAT_LIST(MG_TABLE_STAT_FIELD)
#undef MG_TABLE_STAT_FIELD
};

/* A reader's copy. */
struct mg_table_snapshot {
#define MG_TABLE_SNAPSHOT_FIELD(field, json, type, what) uint64_t field;
    MG_TABLE_STAT_LIST(MG_TABLE_SNAPSHOT_FIELD)
#undef MG_TABLE_SNAPSHOT_FIELD
};

extern const char *const mg_table_names[MG_TABLE_COUNT];

/* This process's records (the segment's; NULL: none, in-process tests, and nothing is
 * counted). Set once at a worker's start. */
void mg_table_stats_bind(struct mg_table_stats *records);

/* A pass of table id begins: returns its start (CLOCK_MONOTONIC ns). */
int64_t mg_table_pass_begin(enum mg_table_id id);
/* It ended: ok with the table's size in bytes (0: unknown, the last size kept), or failed. */
void mg_table_pass_end(enum mg_table_id id, int64_t began_ns, bool ok, uint64_t size_bytes);
/* A table filled newest first in chunks, maybe by several processes in turn (the summaries):
 * whether a pass is under way and the lowest key it covers (a transmission id), set outright
 * after each chunk, so a pass left by processes that stopped (a reload) shows only until the
 * next one's first chunk. */
void mg_table_progress(enum mg_table_id id, bool building, uint64_t low_water);
/* Rows a request answered from the table, and rows it read directly instead. */
void mg_table_rows(enum mg_table_id id, uint64_t served, uint64_t direct);

/* Reads records (the segment's, or a copy of it) into out[MG_TABLE_COUNT]. */
void mg_table_stats_read(const struct mg_table_stats *records, struct mg_table_snapshot *out);

#endif

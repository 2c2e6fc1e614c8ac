/* SPDX-License-Identifier: ISC */
/*
 * perf_mem: the walk behind /api/perf?mem=1. One read transaction over every transmission
 * and every observation, estimating what CoreScope's in-memory packet store would hold. It
 * is deliberately expensive (it reads every row): the diagnostic gate (shm/gate_diag.h)
 * decides whether it may run at all, before it touches the database.
 */
#ifndef MESHGATE_PERF_MEM_H
#define MESHGATE_PERF_MEM_H

#include "db.h"
#include "json.h"

#include <stdint.h>

struct mg_perf_mem {
    int64_t total_tx;
    int64_t flood_tx; /* route_type 0 or 1 */
    int64_t observations;
    int64_t tx_raw_hex_bytes;
    int64_t tx_decoded_json_bytes;
    int64_t tx_path_json_bytes;
    int64_t obs_path_json_bytes;
    int64_t obs_strings_bytes;
    int64_t flood_tx_estimated_bytes;
    int64_t total_tx_estimated_bytes;
};

/* Walks the database; returns 0, or -1 with a message in err. */
int mg_perf_mem_walk(struct mg_db *db, struct mg_perf_mem *out, char *err, size_t errlen);

/* CoreScope's per-transmission cost model, in bytes. */
int64_t mg_perf_mem_tx_estimate(int64_t raw_hex_len, int64_t hash_len, int64_t decoded_json_len,
                                int64_t path_json_len, int64_t hops);

/* Writes the "memoryBreakdown" object's value and nothing else. */
void mg_perf_mem_json(struct mg_json *j, const struct mg_perf_mem *m);

/* The sentence that goes with it ("memoryBreakdownNote"). */
extern const char mg_perf_mem_note[];

#endif

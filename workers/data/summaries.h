/* SPDX-License-Identifier: ISC */
/*
 * summaries: maps the group's per-transmission summaries and runs their pass in the
 * background, newest first, in chunks (see shm/tx_summary.h for the records, packet_scan.h for the
 * pass and how a page reads them).
 */
#ifndef MESHGATE_SUMMARIES_H
#define MESHGATE_SUMMARIES_H

#include "env.h"
#include "tx_summary.h"

#include <stddef.h>
#include <stdint.h>

/* Master, before forking: maps the summaries, sized from the database's transmissions (see
 * shm/tx_summary.h). 0, or -1 with err set. */
int mg_summaries_open(const char *db_path, int busy_timeout_ms, struct mg_tx_summaries *s,
                      char *err, size_t errlen);

/* A permit for background work, given from above (admission.h: mg_background_cold, the cold
 * gate's, taken only when one is free and no request waits, never joining its line). */
struct mg_background_permit {
    bool (*take)(struct mg_env *env, const char *what, uint64_t *token);
    void (*give)(struct mg_env *env, uint64_t token);
};

/*
 * A worker's loop, each turn: while a pass is due (the first, the periodic re-validation, or
 * one under way in any worker), starts its next chunk on the worker's helper thread under a
 * permit of `permit` and the writer lease when both are free, and gives them back when the
 * chunk is done (then starts the next at once, unless a request waits for the permit). Cheap
 * when there is nothing to do.
 */
void mg_summaries_tick(struct mg_env *env, const struct mg_background_permit *permit,
                       int64_t now_ns);

#endif

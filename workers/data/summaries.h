/* SPDX-License-Identifier: ISC */
/*
 * summaries: maps the group's per-transmission summaries and runs their pass in the
 * background, newest first, in chunks (see shm/tx_summary.h for the records, ep_packets.h for the
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

/*
 * A worker's loop, each turn: while a pass is due (the first, the periodic re-validation, or
 * one under way in any worker), starts its next chunk on the worker's helper thread under a
 * cold-gate permit and the writer lease when both are free, and gives them back when the chunk
 * is done (then starts the next at once, unless a request waits for the permit). Cheap when
 * there is nothing to do.
 */
void mg_summaries_tick(struct mg_env *env, int64_t now_ns);

#endif

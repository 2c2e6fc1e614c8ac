/* SPDX-License-Identifier: ISC */
/*
 * live_watch: the one watcher of the group that finds new rows for the live feed
 * (docs/architecture.md, "The live feed"). The worker that takes the ring's lease
 * (shm/live_ring.h) runs it on a thread of its own with a connection of its own, so no
 * request waits on it: every MESHGATE_LIVE_POLL_MS it asks PRAGMA data_version whether
 * another connection committed, and if so reads the observations above the high-water id
 * (at most MG_LIVE_STEP_ROWS a step; a full step is followed by the next one soon), writes
 * each as one message into the ring, raises the high-water id, and wakes the workers that
 * have live clients (shm/wake.h). Another worker takes the lease when this one drains or
 * dies (the master gives a dead holder's lease back), and goes on from the high-water ids.
 *
 * One message per new observation, as CoreScope's poller sends one per observation:
 * {"type":"packet","data":{...}} with the observation's transmission and observer fields at
 * the top, "decoded" ({"header":{"payloadTypeName"},"payload":the decoded JSON}) and the same
 * fields again under "packet", keys in Go's bytewise order. Where meshgate differs:
 * observation_count is the transmission's observations up to this one (CoreScope: its count
 * in memory after the poll), messages go in observation order (CoreScope: the poll's new
 * transmissions first), an observation that repeats one of its transmission's (same
 * observer and path) is sent (CoreScope drops it), and there is no resolved_path and no
 * decoded.path of TRACE packets. CoreScope's configuration hides nodes, not traffic: no
 * message is filtered (node_visibility.h).
 */
#ifndef MESHGATE_LIVE_WATCH_H
#define MESHGATE_LIVE_WATCH_H

#include "buf.h"
#include "env.h"

#include <sqlite3.h>
#include <stdint.h>

#define MG_LIVE_STEP_ROWS 256

struct mg_live_watch;

/* Worker, each turn: when nobody holds the lease, takes it and starts the thread (NULL in
 * *w meanwhile). Cheap when someone holds it: one atomic load. */
void mg_live_watch_tick(struct mg_live_watch **w, struct mg_env *env, int64_t now_ns);
/* Stops the thread (waits for its step) and gives the lease back. */
void mg_live_watch_stop(struct mg_live_watch **w, struct mg_env *env);

/* The statement a step runs (?1: the high-water id, ?2: the most rows), and the message of
 * the row it is on, into out (reset first). */
extern const char mg_live_step_sql[];
void mg_live_message(struct mg_buf *out, sqlite3_stmt *st);

#endif

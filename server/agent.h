/* SPDX-License-Identifier: ISC */
/*
 * agent: HAProxy's agent-check port (MESHGATE_AGENT_LISTEN), answered by the master alone.
 * Each connection gets one line and is closed; nothing is read, no worker is involved, so
 * the answer comes even when every worker is busy. The line, first match wins:
 *
 *   maint          the operator's file MESHGATE_AGENT_MAINT_FILE exists (HAProxy puts the
 *                  server in maintenance: no traffic, health checks stop)
 *   down           the database does not answer (the master opens it read-only once a
 *                  second and reads its header)
 *   drain          the server is draining (SIGTERM) or reloading on SIGHUP, or its replica
 *                  copy is older than MESHGATE_REPLICA_MAX_LAG_MS. A reload because the copy
 *                  was replaced is not a drain: it is routine (every few seconds while the
 *                  primary is written), the listening socket stays open and the other
 *                  workers serve; drained hosts all at once would leave HAProxy none.
 *   ready up W%    otherwise, W from mg_agent_weight
 *
 * "ready" and "up" are always said with the weight, so a server HAProxy had put in
 * maintenance, drained or marked down by an earlier answer comes back with the next one.
 *
 * The weight (mg_agent_weight, a pure function of what the segment shows):
 *
 *   workers = (alive + free) / (2 x configured)   free: alive and not reading, handling or
 *                                                 writing a request; a busy worker still
 *                                                 serves its other connections, so it
 *                                                 counts half
 *   room(g) = 1 - (in_flight + waiting) / (cap + queue_max), at least 0; 1 when cap is 0
 *   W       = round(100 x workers x min(room(cold-scan gate), room(anonymous line)))
 *             clamped to 1..100
 *
 * The fuller gate decides: a request that needs it is refused there (503 or 429) while the
 * others are served, and HAProxy cannot tell the requests apart when it picks a server. W
 * never falls to 0 while the server is up: light requests are still answered, and a weight
 * of 0 would look like a drain. The diagnostic gate (one memory walk at a time) is not
 * capacity and is left out.
 *
 * Gate state is read as every other reader reads it, with the gate's read function
 * (mg_fifo_gate_read: under the gate's lock, so in_flight, waiting and the bounds agree).
 */
#ifndef MESHGATE_AGENT_H
#define MESHGATE_AGENT_H

#include "segment.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mg_agent_gate {
    uint32_t cap; /* 0: no limit */
    uint32_t in_flight;
    uint32_t queue_max;
    uint32_t waiting;
};

struct mg_agent_load {
    unsigned workers_configured;
    unsigned workers_alive; /* serving: idle, reading, handling, writing or kept alive */
    unsigned workers_busy;  /* reading, handling or writing a request */
    struct mg_agent_gate cold;
    struct mg_agent_gate anon;
};

struct mg_agent_status {
    bool maint;     /* the maintenance file exists */
    bool db_down;   /* the database did not answer the last probe */
    bool draining;  /* SIGTERM */
    bool reloading; /* on SIGHUP (not for a replaced replica copy) */
    int64_t replica_lag_ms;
    int32_t replica_max_lag_ms; /* 0: not a replica */
    struct mg_agent_load load;
};

/* The weight in percent, 1..100 (see above). */
unsigned mg_agent_weight(const struct mg_agent_load *load);

/* The line for HAProxy, with its '\n', into out; returns its length. */
size_t mg_agent_answer(const struct mg_agent_status *status, char *out, size_t cap);

/* What the segment shows now: the scoreboard and the two FIFO gates (pid: the reader, for the
 * gates' locks). */
void mg_agent_read_load(const struct mg_segment *seg, int pid, unsigned workers_configured,
                        struct mg_agent_load *out);

/* Opens MESHGATE_AGENT_LISTEN (text as configured, not empty). Returns the listening socket,
 * or -1 with a message naming the variable. */
int mg_agent_listen(const char *address, char *err, size_t errlen);

/* Accepts every pending connection (at most 64 a call) and writes line to each, then closes
 * it. Never blocks. Returns the number answered. */
unsigned mg_agent_serve(int listen_fd, const char *line, size_t len);

/* Does the database answer? Opens path read-only, reads its schema version, closes it
 * (nothing is kept, so no connection crosses the master's forks). A database locked by a
 * writer answers. Returns true, or false with why in err. */
bool mg_agent_probe_db(const char *path, char *err, size_t errlen);

#endif

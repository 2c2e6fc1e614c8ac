/* SPDX-License-Identifier: ISC */
/*
 * worker: one request-serving process. It accepts from the listening socket it shares with
 * the other workers, and serves many connections at once from one epoll loop:
 *
 *   - a request head is read without blocking, under its deadline and size limits, and only
 *     a complete request reaches a handler (a slow or silent client costs a connection
 *     record, never the process);
 *   - handlers run one at a time, to completion, and their response is written without
 *     blocking; what the socket does not take at once is sent as the client reads it, under
 *     the send deadline;
 *   - each connection gets at most one request handled per turn of the loop, so a busy
 *     kept-alive connection cannot starve the others of the same worker.
 *
 * SIGTERM (from the master) drains: stop accepting, close idle connections, finish requests
 * that are arriving or being sent, each answered with "Connection: close", up to the drain
 * deadline; then exit 0.
 */
#ifndef MESHGATE_WORKER_H
#define MESHGATE_WORKER_H

#include "segment.h"
#include "tx_summary.h"

/*
 * Runs worker slot_index until it is told to stop; returns the process's exit code. cfg is
 * the worker's own copy (the master's, as it was at the fork): a reload reaches a worker by
 * replacing it, never by changing what it reads mid-request. summaries (may be NULL: pages
 * are read directly) is the group's shared mapping of per-transmission summaries.
 */
int mg_worker_run(struct mg_segment *seg, const struct mg_config *cfg,
                  struct mg_tx_summaries *summaries, unsigned slot_index, int listen_fd,
                  int master_pid);

#endif

/* SPDX-License-Identifier: ISC */
/*
 * result_body: the shared result cache (shm/result_cache.h) read into a worker's buffer. A
 * hit is pinned under the cache's lock and copied here after it; a copy that the entry's
 * rebuild overtook (its reader was stopped longer than a pin lasts) is dropped and the key
 * looked up again.
 */
#ifndef MESHGATE_RESULT_BODY_H
#define MESHGATE_RESULT_BODY_H

#include "buf.h"
#include "result_cache.h"

/* Looks key up at now: HIT appends the body to out; CLAIMED, BUSY as mg_result_cache_look.
 * Counts the hit, miss or coalesced request. */
enum mg_cache_outcome mg_result_cache_lookup(struct mg_cache_view *v, int pid, unsigned slot,
                                             const char *key, int64_t now, struct mg_buf *out,
                                             uint64_t *build_id);
/* The same, for a request that already counted (asking again while it follows a build): it
 * changes no counter but takeovers. */
enum mg_cache_outcome mg_result_cache_relook(struct mg_cache_view *v, int pid, unsigned slot,
                                             const char *key, int64_t now, struct mg_buf *out,
                                             uint64_t *build_id);
/* mg_result_cache_wait_pin, with a hit appended to out. */
enum mg_cache_outcome mg_result_cache_wait(struct mg_cache_view *v, int pid, unsigned slot,
                                           const char *key, int64_t deadline,
                                           mg_fifo_cancel_fn cancel, void *cancel_arg,
                                           struct mg_buf *out, uint64_t *build_id);

#endif

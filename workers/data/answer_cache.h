/* SPDX-License-Identifier: ISC */
/*
 * answer_cache: the last few answers one thread rendered for an endpoint, each kept with the
 * key of its request and the stamps of everything the answer was derived from, so that the
 * same request asked again while none of them changed is answered by one copy.
 *
 * Why: a hot list endpoint (/api/nodes, which the front end polls) spent 70 % of its time in
 * SQLite sorting the whole table for a page that had not changed since the last request. A
 * server that only reads can tell cheaply whether anything changed: the database's
 * data version (SQLITE_FCNTL_DATA_VERSION moves whenever another connection commits), plus the
 * age stamps of the process-local tables an answer also reads. The endpoint puts all of
 * them in the stamps; an entry is used only when key and every stamp are equal, so a hit is
 * byte for byte what the endpoint would render at that moment.
 *
 * Bounds: MG_ANSWER_CACHE_ENTRIES entries, each body at most MG_ANSWER_CACHE_BODY_MAX_BYTES
 * (larger answers are not kept: every node of a 2 000-node list, 0.8 to 1.1 MB, is) and all of them
 * at most MG_ANSWER_CACHE_TOTAL_MAX_BYTES, each key at most MG_ANSWER_CACHE_KEY_MAX_BYTES; one
 * cache per thread that serves the endpoint. The least recently used entries make room.
 * Nothing here is shared between threads or processes.
 */
#ifndef MESHGATE_ANSWER_CACHE_H
#define MESHGATE_ANSWER_CACHE_H

#include "buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MG_ANSWER_CACHE_ENTRIES 4
#define MG_ANSWER_CACHE_BODY_MAX_BYTES (2 * 1024 * 1024)
#define MG_ANSWER_CACHE_TOTAL_MAX_BYTES (3 * 1024 * 1024)
#define MG_ANSWER_CACHE_KEY_MAX_BYTES 512
#define MG_ANSWER_STAMPS 9

/* What an answer was derived from; unused stamps stay 0. */
struct mg_answer_stamps {
    uint64_t v[MG_ANSWER_STAMPS];
};

struct mg_answer_cache {
    uint64_t clock;
    struct {
        uint64_t used; /* 0: empty */
        size_t key_len;
        char key[MG_ANSWER_CACHE_KEY_MAX_BYTES];
        struct mg_answer_stamps stamps;
        struct mg_buf body;
    } entry[MG_ANSWER_CACHE_ENTRIES];
};

void mg_answer_cache_init(struct mg_answer_cache *c);
/* Frees every body; the cache is empty and usable again. */
void mg_answer_cache_clear(struct mg_answer_cache *c);

/* The body kept for key with exactly these stamps, or NULL. */
const struct mg_buf *mg_answer_cache_get(struct mg_answer_cache *c, const char *key, size_t key_len,
                                         const struct mg_answer_stamps *stamps);
/* Whether get would find it (nothing is counted or reordered). */
bool mg_answer_cache_has(const struct mg_answer_cache *c, const char *key, size_t key_len,
                         const struct mg_answer_stamps *stamps);

/* The bytes of kept answers this thread copied, ever: bodies handed out by answer caches
 * (mg_answer_cache_get) and by the shared result cache (result_body.c). A copy is not
 * rendering (tests/test_cost.c bounds what a light request renders). */
uint64_t mg_cached_bytes_copied(void);
void mg_cached_bytes_copied_add(uint64_t n);

/* Keeps body for key and stamps (replacing what key had), unless key or body is over its
 * bound or memory runs out; returns whether it was kept. */
bool mg_answer_cache_put(struct mg_answer_cache *c, const char *key, size_t key_len,
                         const struct mg_answer_stamps *stamps, const char *body, size_t body_len);

#endif

/* SPDX-License-Identifier: ISC */
#include "answer_cache.h"

#include <stdlib.h>
#include <string.h>

static _Thread_local uint64_t bytes_served;

uint64_t mg_cached_bytes_copied(void)
{
    return bytes_served;
}

void mg_cached_bytes_copied_add(uint64_t n)
{
    bytes_served += n;
}

void mg_answer_cache_init(struct mg_answer_cache *c)
{
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < MG_ANSWER_CACHE_ENTRIES; i++)
        mg_buf_init(&c->entry[i].body);
}

void mg_answer_cache_clear(struct mg_answer_cache *c)
{
    for (size_t i = 0; i < MG_ANSWER_CACHE_ENTRIES; i++)
        mg_buf_free(&c->entry[i].body);
    mg_answer_cache_init(c);
}

static bool same_key(const struct mg_answer_cache *c, size_t i, const char *key, size_t key_len)
{
    return c->entry[i].used && c->entry[i].key_len == key_len &&
           memcmp(c->entry[i].key, key, key_len) == 0;
}

const struct mg_buf *mg_answer_cache_get(struct mg_answer_cache *c, const char *key, size_t key_len,
                                         const struct mg_answer_stamps *stamps)
{
    for (size_t i = 0; i < MG_ANSWER_CACHE_ENTRIES; i++) {
        if (!same_key(c, i, key, key_len))
            continue;
        if (memcmp(&c->entry[i].stamps, stamps, sizeof *stamps) != 0)
            return NULL;
        c->entry[i].used = ++c->clock;
        bytes_served += c->entry[i].body.len;
        return &c->entry[i].body;
    }
    return NULL;
}

bool mg_answer_cache_has(const struct mg_answer_cache *c, const char *key, size_t key_len,
                         const struct mg_answer_stamps *stamps)
{
    for (size_t i = 0; i < MG_ANSWER_CACHE_ENTRIES; i++)
        if (same_key(c, i, key, key_len))
            return memcmp(&c->entry[i].stamps, stamps, sizeof *stamps) == 0;
    return false;
}

/* Empties the least recently used entries but slot until body_len more fits the total (of
 * storage held, not only used). */
static void make_room(struct mg_answer_cache *c, size_t slot, size_t body_len)
{
    for (;;) {
        size_t total = body_len, oldest = MG_ANSWER_CACHE_ENTRIES;
        for (size_t i = 0; i < MG_ANSWER_CACHE_ENTRIES; i++) {
            if (i == slot || !c->entry[i].used)
                continue;
            total += c->entry[i].body.cap;
            if (oldest == MG_ANSWER_CACHE_ENTRIES || c->entry[i].used < c->entry[oldest].used)
                oldest = i;
        }
        if (total <= MG_ANSWER_CACHE_TOTAL_MAX_BYTES || oldest == MG_ANSWER_CACHE_ENTRIES)
            return;
        mg_buf_free(&c->entry[oldest].body);
        c->entry[oldest].used = 0;
    }
}

bool mg_answer_cache_put(struct mg_answer_cache *c, const char *key, size_t key_len,
                         const struct mg_answer_stamps *stamps, const char *body, size_t body_len)
{
    if (key_len > MG_ANSWER_CACHE_KEY_MAX_BYTES || body_len > MG_ANSWER_CACHE_BODY_MAX_BYTES)
        return false;
    size_t slot = 0; /* the key's own entry, else the least recently used */
    for (size_t i = 0; i < MG_ANSWER_CACHE_ENTRIES; i++) {
        if (same_key(c, i, key, key_len)) {
            slot = i;
            break;
        }
        if (c->entry[i].used < c->entry[slot].used)
            slot = i;
    }
    make_room(c, slot, body_len);
    struct mg_buf *b = &c->entry[slot].body;
    mg_buf_shrink(b, 2 * body_len + 4096); /* a small answer does not keep a large one's room */
    if (b->cap < body_len + 1) { /* exactly its size (a buffer's growth would double it) */
        char *p = realloc(b->data, body_len + 1);
        if (p)
            b->data = p, b->cap = body_len + 1;
    }
    mg_buf_append(b, body, body_len);
    if (b->failed) {
        mg_buf_free(b);
        c->entry[slot].used = 0;
        return false;
    }
    c->entry[slot].used = ++c->clock;
    c->entry[slot].key_len = key_len;
    memcpy(c->entry[slot].key, key, key_len);
    c->entry[slot].stamps = *stamps;
    return true;
}

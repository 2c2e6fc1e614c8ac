/* SPDX-License-Identifier: ISC */
#include "answer_cache.h"

#include <string.h>

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
        return &c->entry[i].body;
    }
    return NULL;
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
    struct mg_buf *b = &c->entry[slot].body;
    mg_buf_reset(b);
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

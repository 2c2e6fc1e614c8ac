/* SPDX-License-Identifier: ISC */
#include "result_cache.h"

#include "buf.h"
#include "clock.h"
#include "segment.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define CANCEL_POLL_NS (20 * MG_NS_PER_MS)

void mg_result_cache_init(struct mg_cache_view *v, uint32_t entries, uint32_t pages_per_entry,
                          int64_t ttl_ns)
{
    memset(v->cache, 0, sizeof *v->cache);
    v->cache->entries = entries;
    v->cache->pages_per_entry = pages_per_entry;
    v->cache->ttl_ns = ttl_ns;
    memset(v->entry, 0, sizeof *v->entry * entries);
}

void mg_result_cache_set_ttl(struct mg_cache_view *v, int pid, int64_t ttl_ns)
{
    mg_lock_acquire(&v->cache->lock, pid);
    v->cache->ttl_ns = ttl_ns;
    mg_lock_release(&v->cache->lock, pid);
}

static unsigned char *body_of(struct mg_cache_view *v, unsigned i)
{
    return v->pages + (size_t)i * v->cache->pages_per_entry * MG_CACHE_PAGE;
}

static size_t body_cap(const struct mg_cache_view *v)
{
    return (size_t)v->cache->pages_per_entry * MG_CACHE_PAGE;
}

static int find(struct mg_cache_view *v, const char *key)
{
    for (unsigned i = 0; i < v->cache->entries; i++)
        if (v->entry[i].state != MG_CACHE_FREE &&
            strncmp(v->entry[i].key, key, MG_CACHE_KEY_MAX) == 0)
            return (int)i;
    return -1;
}

/* A free entry; else an expired one; else the least recently used READY one; else -1. */
static int victim(struct mg_cache_view *v, int64_t now)
{
    int lru = -1;
    for (unsigned i = 0; i < v->cache->entries; i++) {
        struct mg_cache_entry *e = &v->entry[i];
        if (e->state == MG_CACHE_FREE)
            return (int)i;
        if (e->state == MG_CACHE_READY && e->expires_monotonic_ns <= now)
            return (int)i;
        if (e->state == MG_CACHE_READY &&
            (lru < 0 || e->used_monotonic_ns < v->entry[lru].used_monotonic_ns))
            lru = (int)i;
    }
    if (lru >= 0)
        atomic_fetch_add(&v->cache->evicted, 1);
    return lru;
}

static void claim(struct mg_cache_view *v, unsigned i, int pid, unsigned slot, const char *key,
                  int64_t now, uint64_t *build_id)
{
    struct mg_cache_entry *e = &v->entry[i];
    e->state = MG_CACHE_BUILDING;
    e->body_len = 0;
    snprintf(e->key, sizeof e->key, "%s", key);
    e->builder_pid = pid;
    e->builder_slot = slot;
    e->build_id = *build_id = ++v->cache->next_build_id;
    e->since_monotonic_ns = now;
    e->used_monotonic_ns = now;
}

static void wake(struct mg_cache_view *v)
{
    atomic_fetch_add(&v->cache->wake_seq, 1);
    mg_futex_wake_all(&v->cache->wake_seq);
}

/* Under lock. */
static enum mg_cache_outcome look(struct mg_cache_view *v, int pid, unsigned slot, const char *key,
                                  int64_t now, struct mg_buf *out, uint64_t *build_id,
                                  bool *took_over)
{
    *took_over = false;
    int i = find(v, key);
    if (i >= 0) {
        struct mg_cache_entry *e = &v->entry[i];
        if (e->state == MG_CACHE_READY && e->expires_monotonic_ns > now) {
            e->used_monotonic_ns = now;
            mg_buf_append(out, body_of(v, (unsigned)i), e->body_len);
            return MG_CACHE_HIT;
        }
        if (e->state == MG_CACHE_BUILDING && mg_process_alive(e->builder_pid, 0))
            return MG_CACHE_BUSY;
        /* Expired, or its builder died before the master noticed: build it again here. */
        *took_over = e->state == MG_CACHE_BUILDING;
        claim(v, (unsigned)i, pid, slot, key, now, build_id);
        return MG_CACHE_CLAIMED;
    }
    i = victim(v, now);
    if (i < 0) {
        /* Every entry is being built: build without a cache entry (nothing to coalesce on). */
        *build_id = 0;
        return MG_CACHE_CLAIMED;
    }
    claim(v, (unsigned)i, pid, slot, key, now, build_id);
    return MG_CACHE_CLAIMED;
}

enum mg_cache_outcome mg_result_cache_lookup(struct mg_cache_view *v, int pid, unsigned slot,
                                             const char *key, int64_t now, struct mg_buf *out,
                                             uint64_t *build_id)
{
    bool took_over;
    mg_lock_acquire(&v->cache->lock, pid);
    enum mg_cache_outcome r = look(v, pid, slot, key, now, out, build_id, &took_over);
    mg_lock_release(&v->cache->lock, pid);
    if (r == MG_CACHE_HIT)
        atomic_fetch_add(&v->cache->hits, 1);
    else if (r == MG_CACHE_CLAIMED)
        atomic_fetch_add(&v->cache->misses, 1);
    else
        atomic_fetch_add(&v->cache->coalesced, 1);
    if (took_over)
        atomic_fetch_add(&v->cache->takeovers, 1);
    return r;
}

bool mg_result_cache_warm(struct mg_cache_view *v, int pid, const char *key, int64_t now)
{
    mg_lock_acquire(&v->cache->lock, pid);
    int i = find(v, key);
    bool warm =
        i >= 0 && v->entry[i].state == MG_CACHE_READY && v->entry[i].expires_monotonic_ns > now;
    mg_lock_release(&v->cache->lock, pid);
    return warm;
}

bool mg_result_cache_building(struct mg_cache_view *v, int pid, const char *key)
{
    mg_lock_acquire(&v->cache->lock, pid);
    int i = find(v, key);
    int builder = i >= 0 && v->entry[i].state == MG_CACHE_BUILDING ? v->entry[i].builder_pid : 0;
    mg_lock_release(&v->cache->lock, pid);
    return builder != 0 && mg_process_alive(builder, 0);
}

enum mg_cache_outcome mg_result_cache_relook(struct mg_cache_view *v, int pid, unsigned slot,
                                             const char *key, int64_t now, struct mg_buf *out,
                                             uint64_t *build_id)
{
    bool took_over;
    mg_lock_acquire(&v->cache->lock, pid);
    enum mg_cache_outcome r = look(v, pid, slot, key, now, out, build_id, &took_over);
    mg_lock_release(&v->cache->lock, pid);
    if (took_over)
        atomic_fetch_add(&v->cache->takeovers, 1);
    return r;
}

enum mg_cache_outcome mg_result_cache_wait(struct mg_cache_view *v, int pid, unsigned slot,
                                           const char *key, int64_t deadline,
                                           mg_fifo_cancel_fn cancel, void *cancel_arg,
                                           struct mg_buf *out, uint64_t *build_id)
{
    for (;;) {
        uint32_t seq = atomic_load(&v->cache->wake_seq);
        int64_t now = mg_monotonic_ns();
        bool took_over = false;
        enum mg_cache_outcome r = MG_CACHE_BUSY;
        mg_lock_acquire(&v->cache->lock, pid);
        int i = find(v, key);
        if (i < 0 || v->entry[i].state != MG_CACHE_BUILDING ||
            !mg_process_alive(v->entry[i].builder_pid, 0))
            r = look(v, pid, slot, key, now, out, build_id, &took_over);
        mg_lock_release(&v->cache->lock, pid);
        if (took_over)
            atomic_fetch_add(&v->cache->takeovers, 1);
        if (r != MG_CACHE_BUSY || now >= deadline || (cancel && cancel(cancel_arg)))
            return r;
        int64_t until = now + CANCEL_POLL_NS < deadline ? now + CANCEL_POLL_NS : deadline;
        mg_futex_wait(&v->cache->wake_seq, seq, until);
    }
}

static int find_build(struct mg_cache_view *v, int pid, uint64_t build_id)
{
    if (build_id == 0)
        return -1;
    for (unsigned i = 0; i < v->cache->entries; i++)
        if (v->entry[i].state == MG_CACHE_BUILDING && v->entry[i].build_id == build_id &&
            v->entry[i].builder_pid == pid)
            return (int)i;
    return -1;
}

void mg_result_cache_store(struct mg_cache_view *v, int pid, uint64_t build_id, const char *body,
                           size_t len, int64_t now)
{
    bool too_large = len > body_cap(v);
    mg_lock_acquire(&v->cache->lock, pid);
    int i = find_build(v, pid, build_id);
    if (i >= 0) {
        struct mg_cache_entry *e = &v->entry[i];
        if (too_large) {
            memset(e, 0, sizeof *e);
        } else {
            memcpy(body_of(v, (unsigned)i), body, len);
            e->body_len = (uint32_t)len;
            e->state = MG_CACHE_READY;
            e->builder_pid = 0;
            e->since_monotonic_ns = now;
            e->used_monotonic_ns = now;
            e->expires_monotonic_ns = now + v->cache->ttl_ns;
        }
    }
    mg_lock_release(&v->cache->lock, pid);
    if (i >= 0)
        atomic_fetch_add(too_large ? &v->cache->too_large : &v->cache->stored, 1);
    wake(v);
}

void mg_result_cache_abandon(struct mg_cache_view *v, int pid, uint64_t build_id)
{
    mg_lock_acquire(&v->cache->lock, pid);
    int i = find_build(v, pid, build_id);
    if (i >= 0)
        memset(&v->entry[i], 0, sizeof v->entry[i]);
    mg_lock_release(&v->cache->lock, pid);
    wake(v);
}

unsigned mg_result_cache_reclaim(struct mg_cache_view *v, int pid)
{
    mg_lock_reclaim(&v->cache->lock, pid);
    int self = getpid();
    unsigned freed = 0;
    mg_lock_acquire(&v->cache->lock, self);
    for (unsigned i = 0; i < v->cache->entries; i++) {
        if (v->entry[i].state == MG_CACHE_BUILDING && v->entry[i].builder_pid == pid) {
            memset(&v->entry[i], 0, sizeof v->entry[i]);
            freed++;
        }
    }
    mg_lock_release(&v->cache->lock, self);
    if (freed) {
        atomic_fetch_add(&v->cache->reclaimed, freed);
        wake(v);
    }
    return freed;
}

unsigned mg_result_cache_ready(const struct mg_cache_view *v, int64_t now)
{
    unsigned n = 0;
    for (unsigned i = 0; i < v->cache->entries; i++)
        n += v->entry[i].state == MG_CACHE_READY && v->entry[i].expires_monotonic_ns > now;
    return n;
}

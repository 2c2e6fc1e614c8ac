/* SPDX-License-Identifier: ISC */
#include "reclaim.h"

#include "client_limit.h"
#include "clock.h"
#include "conn_limit.h"
#include "gate_diag.h"
#include "gate_fifo.h"
#include "result_cache.h"
#include "shared_value.h"
#include "upstream_gate.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

unsigned mg_segment_reclaim(struct mg_segment *seg, unsigned slot, int pid)
{
    /* Every walk below is bounded by the tables' sizes: a segment written over is not walked
     * (the master stops on it, server/master.c). */
    char why[256];
    if (mg_segment_check_shape(seg, why, sizeof why) < 0 || slot >= seg->slot_count)
        return 0;
    unsigned freed = 0;
    for (unsigned i = 0; i < MG_VALUE_COUNT; i++)
        freed += mg_shared_value_reclaim(&seg->values[i], pid) ? 1u : 0u;
    freed += mg_diag_gate_reclaim(seg->diag, pid, mg_monotonic_ns()) ? 1u : 0u;
    /* Its claims before its place at the cold gate, whose reclaim wakes the followers: they
     * find the build theirs to do. A claim alone (no place, no permit) wakes them here. */
    unsigned claims = mg_result_cache_reclaim(&seg->cache, pid);
    freed += claims + mg_fifo_gate_reclaim(seg->cold, pid);
    if (claims)
        mg_fifo_gate_wake_followers(seg->cold, getpid());
    freed += mg_fifo_gate_reclaim(seg->anon, pid);
    freed += mg_client_limit_reclaim(&seg->clients, pid);
    freed += mg_conn_limit_reclaim(&seg->conns, pid, slot);
    freed += mg_upstream_shm_reclaim(seg->upstream, slot, pid, mg_monotonic_ns());
    return freed;
}

void mg_segment_for_each_lock(struct mg_segment *seg, mg_segment_lock_fn fn, void *arg)
{
    fn(arg, &seg->diag->lock, "diagnostic gate");
    fn(arg, &seg->cold->lock, "cold-scan gate");
    fn(arg, &seg->cache.cache->lock, "result cache");
    fn(arg, &seg->anon->lock, "anonymous line");
    fn(arg, &seg->upstream->gate.lock, "upstream gate");
    char name[48];
    for (uint32_t i = 0; i < seg->client_sets; i++) {
        snprintf(name, sizeof name, "rate table set %u", i);
        fn(arg, &seg->clients.sets[i].lock, name);
    }
    for (uint32_t i = 0; i < seg->conn_sets; i++) {
        snprintf(name, sizeof name, "connection table set %u", i);
        fn(arg, &seg->conns.sets[i].lock, name);
    }
}

struct lock_find {
    const struct mg_lock *want;
    char *name;
    size_t cap;
    bool found;
};

static void find_lock(void *arg, struct mg_lock *l, const char *name)
{
    struct lock_find *f = arg;
    if (l == f->want && !f->found) {
        f->found = true;
        snprintf(f->name, f->cap, "%s", name);
    }
}

struct mg_lock *mg_segment_lock_at(struct mg_segment *seg, uint64_t offset, char *name, size_t cap)
{
    if (offset >= seg->size || offset % _Alignof(struct mg_lock))
        return NULL;
    struct mg_lock *l = (struct mg_lock *)((char *)seg->base + offset);
    char scratch[48];
    struct lock_find f = {l, name ? name : scratch, name ? cap : sizeof scratch, false};
    /* The rate table's sets are many: find a set by arithmetic, the rest by the list. */
    const char *sets = (const char *)seg->clients.sets;
    size_t set_bytes = sizeof(struct mg_client_set);
    size_t span = set_bytes * seg->client_sets;
    if ((const char *)l >= sets && (const char *)l < sets + span) {
        size_t i = (size_t)((const char *)l - sets) / set_bytes;
        if (l != &seg->clients.sets[i].lock)
            return NULL;
        snprintf(f.name, f.cap, "rate table set %zu", i);
        return l;
    }
    const char *csets = (const char *)seg->conns.sets;
    size_t cset_bytes = sizeof(struct mg_conn_set);
    size_t cspan = cset_bytes * seg->conn_sets;
    if ((const char *)l >= csets && (const char *)l < csets + cspan) {
        size_t i = (size_t)((const char *)l - csets) / cset_bytes;
        if (l != &seg->conns.sets[i].lock)
            return NULL;
        snprintf(f.name, f.cap, "connection table set %zu", i);
        return l;
    }
    find_lock(&f, &seg->diag->lock, "diagnostic gate");
    find_lock(&f, &seg->cold->lock, "cold-scan gate");
    find_lock(&f, &seg->cache.cache->lock, "result cache");
    find_lock(&f, &seg->anon->lock, "anonymous line");
    find_lock(&f, &seg->upstream->gate.lock, "upstream gate");
    return f.found ? l : NULL;
}

bool mg_segment_lock_range(struct mg_segment *seg, const char *part, const void **lo,
                           const void **hi)
{
    const struct mg_lock *l = NULL;
    if (strcmp(part, "anon") == 0)
        l = &seg->anon->lock;
    else if (strcmp(part, "cold") == 0)
        l = &seg->cold->lock;
    else if (strcmp(part, "diag") == 0)
        l = &seg->diag->lock;
    else if (strcmp(part, "cache") == 0)
        l = &seg->cache.cache->lock;
    if (l) {
        *lo = l;
        *hi = l + 1;
        return true;
    }
    if (strcmp(part, "clients") == 0) {
        *lo = seg->clients.sets;
        *hi = seg->clients.sets + seg->client_sets;
        return true;
    }
    return false;
}

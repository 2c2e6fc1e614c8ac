/* SPDX-License-Identifier: ISC */
#include "stats.h"

#include "segment_layout.h"

#include <stdio.h>
#include <string.h>

const char *const mg_counter_names[MG_CTR_COUNT] = {
#define MG_COUNTER_NAME(id, name, help) name,
    MG_COUNTER_LIST(MG_COUNTER_NAME)
#undef MG_COUNTER_NAME
};

const char *const mg_counter_help[MG_CTR_COUNT] = {
#define MG_COUNTER_HELP(id, name, help) help,
    MG_COUNTER_LIST(MG_COUNTER_HELP)
#undef MG_COUNTER_HELP
};

void mg_counter_add(struct mg_segment *seg, enum mg_counter c, uint64_t n)
{
    atomic_fetch_add_explicit(&seg->counters->value[c], n, memory_order_relaxed);
}

uint64_t mg_counter_get(const struct mg_segment *seg, enum mg_counter c)
{
    return atomic_load_explicit(&seg->counters->value[c], memory_order_relaxed);
}

/*
 * Buckets: values below 2 * MG_HIST_SUB_BUCKETS us have a bucket each; above, each power of
 * two is split into MG_HIST_SUB_BUCKETS equal parts.
 */
unsigned mg_hist_bucket(uint64_t us)
{
    const unsigned sub = MG_HIST_SUB_BUCKETS; /* 8 = 2^3 */
    if (us < 2 * sub)
        return (unsigned)us;
    unsigned e = 63u - (unsigned)__builtin_clzll(us); /* e >= 4 */
    unsigned part = (unsigned)(us >> (e - 3)) & (sub - 1);
    unsigned b = 2 * sub + (e - 4) * sub + part;
    return b < MG_HIST_BUCKETS ? b : MG_HIST_BUCKETS - 1;
}

uint64_t mg_hist_bucket_upper_us(unsigned b)
{
    const unsigned sub = MG_HIST_SUB_BUCKETS;
    if (b < 2 * sub)
        return b;
    unsigned e = (b - 2 * sub) / sub + 4;
    unsigned part = (b - 2 * sub) % sub;
    uint64_t step = 1ull << (e - 3);
    return ((uint64_t)(sub + part) << (e - 3)) + step - 1;
}

uint64_t mg_hist_quantile_us(const struct mg_route_stats *r, double q)
{
    uint64_t total = 0;
    for (unsigned b = 0; b < MG_HIST_BUCKETS; b++)
        total += atomic_load_explicit(&r->bucket[b], memory_order_relaxed);
    if (total == 0)
        return 0;
    uint64_t rank = (uint64_t)(q * (double)total + 0.999999);
    if (rank < 1)
        rank = 1;
    uint64_t seen = 0;
    uint64_t max = atomic_load_explicit(&r->max_us, memory_order_relaxed);
    for (unsigned b = 0; b < MG_HIST_BUCKETS; b++) {
        seen += atomic_load_explicit(&r->bucket[b], memory_order_relaxed);
        if (seen >= rank) {
            uint64_t v = mg_hist_bucket_upper_us(b);
            return v < max ? v : max;
        }
    }
    return max;
}

int mg_status_class(int status)
{
    if (status == 501 || status == 505)
        return 4;
    return status / 100;
}

void mg_route_record(struct mg_segment *seg, unsigned route, int status, int64_t duration_us)
{
    if (route >= seg->route_count)
        return;
    struct mg_route_stats *r = &seg->routes[route];
    uint64_t us = duration_us > 0 ? (uint64_t)duration_us : 0;
    atomic_fetch_add_explicit(&r->count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->sum_us, us, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->bucket[mg_hist_bucket(us)], 1, memory_order_relaxed);
    if (mg_status_class(status) == 5)
        atomic_fetch_add_explicit(&r->errors, 1, memory_order_relaxed);
    uint64_t old = atomic_load_explicit(&r->max_us, memory_order_relaxed);
    while (us > old && !atomic_compare_exchange_weak_explicit(
                           &r->max_us, &old, us, memory_order_relaxed, memory_order_relaxed))
        ;
}

void mg_slow_record(struct mg_segment *seg, const char *path, int status, int64_t duration_us,
                    int64_t time_realtime_ns)
{
    if (duration_us < MG_SLOW_THRESHOLD_US)
        return;
    struct mg_slow_ring *ring = seg->slow;
    uint64_t n = atomic_fetch_add(&ring->next, 1);
    struct mg_slow_entry *e = &ring->entry[n % MG_SLOW_MAX];
    /* Two writers on one entry would need 20 slow requests finishing at once; the second
     * one simply gives up its record rather than wait. */
    uint32_t seq = atomic_load(&e->seq);
    if (seq & 1 || !atomic_compare_exchange_strong(&e->seq, &seq, seq + 1))
        return;
    e->status = (uint32_t)status;
    e->duration_us = duration_us;
    e->time_realtime_ns = time_realtime_ns;
    snprintf(e->path, sizeof e->path, "%s", path);
    atomic_store(&e->seq, seq + 2);
}

unsigned mg_slow_snapshot(const struct mg_segment *seg, struct mg_slow_entry *out)
{
    const struct mg_slow_ring *ring = seg->slow;
    uint64_t next = atomic_load(&ring->next);
    unsigned have = next < MG_SLOW_MAX ? (unsigned)next : MG_SLOW_MAX;
    unsigned n = 0;
    for (unsigned i = 0; i < have; i++) {
        const struct mg_slow_entry *e = &ring->entry[(next - 1 - i) % MG_SLOW_MAX];
        for (int tries = 0; tries < 4; tries++) {
            uint32_t before = atomic_load(&e->seq);
            if (before & 1)
                continue;
            memcpy(&out[n], e, sizeof *e);
            atomic_thread_fence(memory_order_acquire);
            if (atomic_load(&e->seq) == before && before != 0) {
                out[n].path[MG_SLOW_PATH_MAX - 1] = '\0';
                n++;
                break;
            }
        }
    }
    return n;
}

/* SPDX-License-Identifier: ISC */
#include "gates.h"
#include "live_ring.h"

#include "result_cache.h"
#include "shared_value.h"

#include <stdatomic.h>
#include <unistd.h>

/* Each row's lock i (NULL past the last), reclaim and read, by the row's name. */

static struct mg_lock *conn_cap_lock(const struct mg_segment *seg, uint32_t i)
{
    return i < seg->conn_sets ? &seg->conns.sets[i].lock : NULL;
}

static unsigned conn_cap_reclaim(struct mg_segment *seg, unsigned slot, int pid, int64_t now_ns)
{
    (void)now_ns;
    return mg_conn_limit_reclaim(&seg->conns, pid, slot);
}

static void conn_cap_read(const struct mg_segment *seg, int pid, bool locked, int64_t now_ns,
                          struct mg_conn_snapshot *out)
{
    (void)pid, (void)locked, (void)now_ns;
    const struct mg_conn_table *t = seg->conns.table;
    out->cap = atomic_load(&t->cap);
    out->sets = seg->conn_sets;
#define READ_COUNTER(field, json, what) out->field = atomic_load(&t->field);
    MG_CONN_COUNTER_LIST(READ_COUNTER)
#undef READ_COUNTER
}

static struct mg_lock *rate_limit_lock(const struct mg_segment *seg, uint32_t i)
{
    return i < seg->client_sets ? &seg->clients.sets[i].lock : NULL;
}

static unsigned rate_limit_reclaim(struct mg_segment *seg, unsigned slot, int pid, int64_t now_ns)
{
    (void)slot, (void)now_ns;
    return mg_client_limit_reclaim(&seg->clients, pid);
}

static void rate_limit_read(const struct mg_segment *seg, int pid, bool locked, int64_t now_ns,
                            struct mg_client_snapshot *out)
{
    (void)pid, (void)locked;
    mg_client_limit_read(&seg->clients, now_ns, out);
}

static struct mg_lock *anon_line_lock(const struct mg_segment *seg, uint32_t i)
{
    return i == 0 ? &seg->anon->lock : NULL;
}

static unsigned anon_line_reclaim(struct mg_segment *seg, unsigned slot, int pid, int64_t now_ns)
{
    (void)slot, (void)now_ns;
    return mg_fifo_gate_reclaim(seg->anon, pid);
}

static void anon_line_read(const struct mg_segment *seg, int pid, bool locked, int64_t now_ns,
                           struct mg_fifo_snapshot *out)
{
    (void)now_ns;
    mg_fifo_gate_read(seg->anon, pid, locked, out);
}

static struct mg_lock *cold_lock(const struct mg_segment *seg, uint32_t i)
{
    return i == 0 ? &seg->cold->lock : NULL;
}

static unsigned cold_reclaim(struct mg_segment *seg, unsigned slot, int pid, int64_t now_ns)
{
    (void)slot, (void)now_ns;
    return mg_fifo_gate_reclaim(seg->cold, pid);
}

static void cold_read(const struct mg_segment *seg, int pid, bool locked, int64_t now_ns,
                      struct mg_fifo_snapshot *out)
{
    (void)now_ns;
    mg_fifo_gate_read(seg->cold, pid, locked, out);
}

static struct mg_lock *diag_lock(const struct mg_segment *seg, uint32_t i)
{
    return i == 0 ? &seg->diag->lock : NULL;
}

static unsigned diag_reclaim(struct mg_segment *seg, unsigned slot, int pid, int64_t now_ns)
{
    (void)slot;
    return mg_diag_gate_reclaim(seg->diag, pid, now_ns) ? 1u : 0u;
}

static void diag_read(const struct mg_segment *seg, int pid, bool locked, int64_t now_ns,
                      struct mg_diag_snapshot *out)
{
    mg_diag_gate_read(seg->diag, pid, locked, now_ns, out);
}

static struct mg_lock *upstream_lock(const struct mg_segment *seg, uint32_t i)
{
    return i == 0 ? &seg->upstream->gate.lock : NULL;
}

/* The upstream's records (its gate's permits and places, the tunnels and anonymous permits a
 * slot counted, a probe of the breaker) are given back together. */
static unsigned upstream_reclaim(struct mg_segment *seg, unsigned slot, int pid, int64_t now_ns)
{
    return mg_upstream_shm_reclaim(seg->upstream, slot, pid, now_ns);
}

static void upstream_read(const struct mg_segment *seg, int pid, bool locked, int64_t now_ns,
                          struct mg_fifo_snapshot *out)
{
    (void)now_ns;
    mg_fifo_gate_read(&seg->upstream->gate, pid, locked, out);
}

/* The breaker lives in the upstream's section, without a lock (compare-and-swap); its probe
 * is given back with the upstream's records. */
static struct mg_lock *breaker_lock(const struct mg_segment *seg, uint32_t i)
{
    (void)seg, (void)i;
    return NULL;
}

static unsigned breaker_reclaim(struct mg_segment *seg, unsigned slot, int pid, int64_t now_ns)
{
    (void)seg, (void)slot, (void)pid, (void)now_ns;
    return 0;
}

static void breaker_read(const struct mg_segment *seg, int pid, bool locked, int64_t now_ns,
                         struct mg_upstream_snapshot *out)
{
    (void)pid, (void)locked;
    mg_upstream_shm_read(seg->upstream, now_ns, out);
}

/* The parts that neither admit nor limit: only the values and the cache hold records. */
static struct mg_lock *no_lock(const struct mg_segment *seg, uint32_t i)
{
    (void)seg, (void)i;
    return NULL;
}

static unsigned no_reclaim(struct mg_segment *seg, unsigned slot, int pid, int64_t now_ns)
{
    (void)seg, (void)slot, (void)pid, (void)now_ns;
    return 0;
}

#define config_lock no_lock
#define config_reclaim no_reclaim
#define counters_lock no_lock
#define counters_reclaim no_reclaim
#define routes_lock no_lock
#define routes_reclaim no_reclaim
#define slow_lock no_lock
#define slow_reclaim no_reclaim
#define slots_lock no_lock
#define slots_reclaim no_reclaim
#define values_lock no_lock
#define live_lock no_lock

/* The live feed's lease and the slot's WebSocket clients. */
static unsigned live_reclaim(struct mg_segment *seg, unsigned slot, int pid, int64_t now_ns)
{
    (void)now_ns;
    return mg_live_ring_reclaim(seg->live, slot, pid);
}

/* A refresh lease of each shared value. */
static unsigned values_reclaim(struct mg_segment *seg, unsigned slot, int pid, int64_t now_ns)
{
    (void)slot, (void)now_ns;
    unsigned freed = 0;
    for (unsigned i = 0; i < MG_VALUE_COUNT; i++)
        freed += mg_shared_value_reclaim(&seg->values[i], pid) ? 1u : 0u;
    return freed;
}

static struct mg_lock *cache_lock(const struct mg_segment *seg, uint32_t i)
{
    return i == 0 ? &seg->cache.cache->lock : NULL;
}

static unsigned cache_reclaim(struct mg_segment *seg, unsigned slot, int pid, int64_t now_ns)
{
    (void)slot, (void)now_ns;
    /* Before the cold gate's row (the parts come first): a dead builder's claims are given
     * back, then its followers are woken to find the build theirs to do. */
    unsigned claims = mg_result_cache_reclaim(&seg->cache, pid);
    if (claims)
        mg_fifo_gate_wake_followers(seg->cold, getpid());
    return claims;
}

const struct mg_gate_info mg_gates[MG_GATE_ROWS] = {
#define GATE_INFO(name, sections, title, status, retry, refusal, counters, snapshot)               \
    {#name, sections, title, status, retry, refusal, name##_lock, name##_reclaim},
    MG_GATE_TABLE(GATE_INFO)
#undef GATE_INFO
};

const struct mg_gate_info mg_segment_parts[MG_PART_ROWS] = {
#define PART_INFO(name, sections, title)                                                           \
    {#name, sections, title, 0, 0, "", name##_lock, name##_reclaim},
    MG_SEGMENT_PART_TABLE(PART_INFO)
#undef PART_INFO
};

void mg_gates_read(const struct mg_segment *seg, int pid, bool locked, int64_t now_ns,
                   struct mg_gate_snapshots *out)
{
#define GATE_READ(name, sections, title, status, retry, refusal, counters, snapshot)               \
    name##_read(seg, pid, locked, now_ns, &out->name);
    MG_GATE_TABLE(GATE_READ)
#undef GATE_READ
}

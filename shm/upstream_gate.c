/* SPDX-License-Identifier: ISC */
#include "upstream_gate.h"

#include "clock.h"

void mg_upstream_shm_init(struct mg_upstream_shm *u, const struct mg_config *cfg)
{
    mg_fifo_gate_init(&u->gate, (uint32_t)cfg->upstream_concurrency, (uint32_t)cfg->upstream_queue,
                      (int64_t)cfg->upstream_wait_ms * MG_NS_PER_MS);
    mg_breaker_init(&u->breaker, (uint32_t)cfg->upstream_breaker_failures,
                    (int64_t)cfg->upstream_breaker_open_ms * MG_NS_PER_MS);
    atomic_store(&u->tunnel_cap, (uint32_t)cfg->upstream_websockets);
}

void mg_upstream_shm_configure(struct mg_upstream_shm *u, int pid, const struct mg_config *cfg)
{
    mg_fifo_gate_configure(&u->gate, pid, (uint32_t)cfg->upstream_concurrency,
                           (uint32_t)cfg->upstream_queue,
                           (int64_t)cfg->upstream_wait_ms * MG_NS_PER_MS);
    mg_breaker_configure(&u->breaker, (uint32_t)cfg->upstream_breaker_failures,
                         (int64_t)cfg->upstream_breaker_open_ms * MG_NS_PER_MS);
    atomic_store(&u->tunnel_cap, (uint32_t)cfg->upstream_websockets);
}

bool mg_upstream_tunnel_open(struct mg_upstream_shm *u, unsigned slot)
{
    if (slot >= MG_WORKERS_MAX)
        return false;
    uint32_t open = atomic_load(&u->tunnels_open);
    do {
        if (open >= atomic_load(&u->tunnel_cap))
            return false;
    } while (!atomic_compare_exchange_weak(&u->tunnels_open, &open, open + 1));
    atomic_fetch_add(&u->tunnels_by_slot[slot], 1);
    uint32_t peak = atomic_load(&u->tunnels_peak);
    while (open + 1 > peak && !atomic_compare_exchange_weak(&u->tunnels_peak, &peak, open + 1))
        ;
    return true;
}

void mg_upstream_tunnel_close(struct mg_upstream_shm *u, unsigned slot)
{
    if (slot >= MG_WORKERS_MAX)
        return;
    atomic_fetch_sub(&u->tunnels_by_slot[slot], 1);
    atomic_fetch_sub(&u->tunnels_open, 1);
}

unsigned mg_upstream_shm_reclaim(struct mg_upstream_shm *u, unsigned slot, int pid, int64_t now_ns)
{
    unsigned freed = mg_fifo_gate_reclaim(&u->gate, pid);
    freed += mg_breaker_reclaim(&u->breaker, pid, now_ns) ? 1u : 0u;
    if (slot < MG_WORKERS_MAX) {
        uint32_t tunnels = atomic_exchange(&u->tunnels_by_slot[slot], 0);
        atomic_fetch_sub(&u->tunnels_open, tunnels);
        freed += tunnels;
    }
    return freed;
}

void mg_upstream_shm_read(const struct mg_upstream_shm *u, int64_t now_ns,
                          struct mg_upstream_snapshot *out)
{
    const struct mg_breaker *b = &u->breaker;
    out->breaker_state = atomic_load(&b->state);
    out->breaker_failures = atomic_load(&b->failures);
    int64_t until = atomic_load(&b->open_until_ns);
    out->breaker_open_remaining_ns =
        out->breaker_state == MG_BREAKER_OPEN && until > now_ns ? until - now_ns : 0;
    out->tunnels_open = atomic_load(&u->tunnels_open);
    out->tunnel_cap = atomic_load(&u->tunnel_cap);
    out->tunnels_peak = atomic_load(&u->tunnels_peak);
#define READ_COUNTER(field, json, what) out->field = atomic_load(&b->field);
    MG_BREAKER_COUNTER_LIST(READ_COUNTER)
#undef READ_COUNTER
}

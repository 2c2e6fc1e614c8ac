/* SPDX-License-Identifier: ISC */
#include "upstream_gate.h"

#include "clock.h"

/* What anonymous requests may hold: the cap less the reserve, at least 1. */
static uint32_t anon_max_of(const struct mg_config *cfg)
{
    int32_t cap = cfg->upstream_concurrency, reserve = cfg->upstream_signed_in_reserve;
    if (cap == 0 || reserve == 0)
        return UINT32_MAX;
    return cap > reserve ? (uint32_t)(cap - reserve) : 1u;
}

/* Counts one for slot in total and by_slot, while total stays under max. */
static bool count_up(_Atomic uint32_t *total, _Atomic uint32_t *by_slot, _Atomic uint32_t *peak,
                     uint32_t max)
{
    uint32_t now = atomic_load(total);
    do {
        if (now >= max)
            return false;
    } while (!atomic_compare_exchange_weak(total, &now, now + 1));
    atomic_fetch_add(by_slot, 1);
    uint32_t seen = atomic_load(peak);
    while (now + 1 > seen && !atomic_compare_exchange_weak(peak, &seen, now + 1))
        ;
    return true;
}

void mg_upstream_shm_init(struct mg_upstream_shm *u, const struct mg_config *cfg)
{
    mg_fifo_gate_init(&u->gate, (uint32_t)cfg->upstream_concurrency, (uint32_t)cfg->upstream_queue,
                      (int64_t)cfg->upstream_wait_ms * MG_NS_PER_MS);
    mg_breaker_init(&u->breaker, (uint32_t)cfg->upstream_breaker_failures,
                    (int64_t)cfg->upstream_breaker_open_ms * MG_NS_PER_MS);
    atomic_store(&u->tunnel_cap, (uint32_t)cfg->upstream_websockets);
    atomic_store(&u->anon_max, anon_max_of(cfg));
}

void mg_upstream_shm_configure(struct mg_upstream_shm *u, int pid, const struct mg_config *cfg)
{
    mg_fifo_gate_configure(&u->gate, pid, (uint32_t)cfg->upstream_concurrency,
                           (uint32_t)cfg->upstream_queue,
                           (int64_t)cfg->upstream_wait_ms * MG_NS_PER_MS);
    mg_breaker_configure(&u->breaker, (uint32_t)cfg->upstream_breaker_failures,
                         (int64_t)cfg->upstream_breaker_open_ms * MG_NS_PER_MS);
    atomic_store(&u->tunnel_cap, (uint32_t)cfg->upstream_websockets);
    atomic_store(&u->anon_max, anon_max_of(cfg));
}

bool mg_upstream_tunnel_open(struct mg_upstream_shm *u, unsigned slot)
{
    return slot < MG_WORKERS_MAX && count_up(&u->tunnels_open, &u->tunnels_by_slot[slot],
                                             &u->tunnels_peak, atomic_load(&u->tunnel_cap));
}

void mg_upstream_tunnel_close(struct mg_upstream_shm *u, unsigned slot)
{
    if (slot >= MG_WORKERS_MAX)
        return;
    atomic_fetch_sub(&u->tunnels_by_slot[slot], 1);
    atomic_fetch_sub(&u->tunnels_open, 1);
}

bool mg_upstream_anon_claim(struct mg_upstream_shm *u, unsigned slot)
{
    if (slot >= MG_WORKERS_MAX)
        return false;
    if (count_up(&u->anon_held, &u->anon_by_slot[slot], &u->anon_peak, atomic_load(&u->anon_max)))
        return true;
    atomic_fetch_add(&u->anon_held_back, 1);
    return false;
}

void mg_upstream_anon_unclaim(struct mg_upstream_shm *u, unsigned slot)
{
    if (slot >= MG_WORKERS_MAX)
        return;
    atomic_fetch_sub(&u->anon_by_slot[slot], 1);
    atomic_fetch_sub(&u->anon_held, 1);
}

unsigned mg_upstream_shm_reclaim(struct mg_upstream_shm *u, unsigned slot, int pid, int64_t now_ns)
{
    unsigned freed = 0;
    if (slot < MG_WORKERS_MAX) {
        uint32_t tunnels = atomic_exchange(&u->tunnels_by_slot[slot], 0);
        atomic_fetch_sub(&u->tunnels_open, tunnels);
        freed += tunnels;
        uint32_t anon = atomic_exchange(&u->anon_by_slot[slot], 0);
        atomic_fetch_sub(&u->anon_held, anon);
    }
    /* After the claims: the gate's reclaim wakes the next in line, which may need one. */
    freed += mg_fifo_gate_reclaim(&u->gate, pid);
    freed += mg_breaker_reclaim(&u->breaker, pid, now_ns) ? 1u : 0u;
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
    out->anon_max = atomic_load(&u->anon_max);
    out->anon_held = atomic_load(&u->anon_held);
    out->anon_peak = atomic_load(&u->anon_peak);
    out->anon_held_back = atomic_load(&u->anon_held_back);
#define READ_COUNTER(field, json, what) out->field = atomic_load(&b->field);
    MG_BREAKER_COUNTER_LIST(READ_COUNTER)
#undef READ_COUNTER
}

/* SPDX-License-Identifier: ISC */
#include "live_ring.h"

#include <string.h>

uint32_t mg_live_clients_cap(const struct mg_config *cfg)
{
    int64_t conns = (int64_t)cfg->workers * cfg->max_conns_per_worker;
    int64_t room = conns - conns / 4;
    return (uint32_t)(cfg->live_clients < room ? cfg->live_clients : room);
}

void mg_live_ring_init(struct mg_live_ring *r, struct mg_live_slot *slots, uint32_t cap)
{
    r->slots = MG_LIVE_SLOTS;
    r->slot_bytes = MG_LIVE_SLOT_BYTES;
    atomic_store(&r->head, 1);
    atomic_store(&r->clients_cap, cap);
    /* The slots are zero (a new segment, or the caller's): seq 0, no event. Not touched
     * here, so their pages cost nothing until events are written. */
    (void)slots;
}

void mg_live_ring_configure(struct mg_live_ring *r, uint32_t cap)
{
    atomic_store(&r->clients_cap, cap);
}

bool mg_live_lease_take(struct mg_live_ring *r, int pid, unsigned slot)
{
    int32_t holder = 0;
    if (!atomic_compare_exchange_strong(&r->writer_pid, &holder, pid))
        return holder == pid;
    atomic_store(&r->writer_slot, slot);
    return true;
}

void mg_live_lease_release(struct mg_live_ring *r, int pid)
{
    int32_t holder = pid;
    atomic_compare_exchange_strong(&r->writer_pid, &holder, 0);
}

uint64_t mg_live_publish(struct mg_live_ring *r, struct mg_live_slot *slots, const char *data,
                         size_t len)
{
    if (len > MG_LIVE_EVENT_MAX)
        return 0;
    uint64_t seq = atomic_load_explicit(&r->head, memory_order_relaxed);
    struct mg_live_slot *s = &slots[seq % MG_LIVE_SLOTS];
    atomic_store_explicit(&s->seq, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release); /* seq 0 is seen before any new byte */
    memcpy(s->data, data, len);
    atomic_store_explicit(&s->len, (uint32_t)len, memory_order_relaxed);
    atomic_store_explicit(&s->seq, seq, memory_order_release);
    atomic_store_explicit(&r->head, seq + 1, memory_order_release);
    return seq;
}

uint64_t mg_live_head(const struct mg_live_ring *r)
{
    return atomic_load_explicit(&r->head, memory_order_acquire);
}

enum mg_live_read_result mg_live_read(const struct mg_live_ring *r,
                                      const struct mg_live_slot *slots, uint64_t seq, char *out,
                                      size_t *len)
{
    uint64_t head = mg_live_head(r);
    if (seq >= head)
        return MG_LIVE_NONE;
    if (seq == 0 || head - seq > MG_LIVE_SLOTS)
        return MG_LIVE_LOST;
    const struct mg_live_slot *s = &slots[seq % MG_LIVE_SLOTS];
    if (atomic_load_explicit(&s->seq, memory_order_acquire) != seq)
        return MG_LIVE_LOST;
    uint32_t n = atomic_load_explicit(&s->len, memory_order_relaxed);
    if (n > MG_LIVE_EVENT_MAX)
        return MG_LIVE_LOST;
    memcpy(out, s->data, n);
    atomic_thread_fence(memory_order_acquire); /* the copy is done before seq is read again */
    if (atomic_load_explicit(&s->seq, memory_order_relaxed) != seq)
        return MG_LIVE_LOST;
    *len = n;
    return MG_LIVE_OK;
}

bool mg_live_client_open(struct mg_live_ring *r, unsigned slot)
{
    if (slot >= MG_WORKERS_MAX)
        return false;
    uint32_t now = atomic_load(&r->clients_open);
    do {
        if (now >= atomic_load(&r->clients_cap))
            return false;
    } while (!atomic_compare_exchange_weak(&r->clients_open, &now, now + 1));
    atomic_fetch_add(&r->clients_by_slot[slot], 1);
    uint32_t peak = atomic_load(&r->clients_peak);
    while (now + 1 > peak && !atomic_compare_exchange_weak(&r->clients_peak, &peak, now + 1))
        ;
    return true;
}

void mg_live_client_close(struct mg_live_ring *r, unsigned slot)
{
    if (slot >= MG_WORKERS_MAX)
        return;
    uint32_t mine = atomic_load(&r->clients_by_slot[slot]);
    while (mine > 0 && !atomic_compare_exchange_weak(&r->clients_by_slot[slot], &mine, mine - 1))
        ;
    if (mine > 0)
        atomic_fetch_sub(&r->clients_open, 1);
}

unsigned mg_live_ring_reclaim(struct mg_live_ring *r, unsigned slot, int pid)
{
    unsigned freed = 0;
    int32_t holder = pid;
    if (atomic_compare_exchange_strong(&r->writer_pid, &holder, 0))
        freed++;
    if (slot < MG_WORKERS_MAX) {
        uint32_t clients = atomic_exchange(&r->clients_by_slot[slot], 0);
        if (clients)
            atomic_fetch_sub(&r->clients_open, clients);
        freed += clients;
    }
    return freed;
}

void mg_live_ring_read(const struct mg_live_ring *r, struct mg_live_snapshot *out)
{
    memset(out, 0, sizeof *out);
    uint64_t head = mg_live_head(r);
    out->events = head > 0 ? head - 1 : 0;
    out->slots = r->slots;
    out->fill = out->events < r->slots ? (uint32_t)out->events : r->slots;
    out->clients_open = atomic_load(&r->clients_open);
    out->clients_cap = atomic_load(&r->clients_cap);
    out->clients_peak = atomic_load(&r->clients_peak);
    out->writer_pid = atomic_load(&r->writer_pid);
    out->hw_obs = atomic_load(&r->hw_obs);
}

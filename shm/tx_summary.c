/* SPDX-License-Identifier: ISC */
#include "tx_summary.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

uint64_t mg_tx_summary_capacity(int64_t span_ids)
{
    uint64_t want = (uint64_t)(span_ids > 0 ? span_ids : 0);
    want = want + want / 4 + 16384;
    uint64_t cap = 16384;
    while (cap < want)
        cap <<= 1;
    return cap;
}

int mg_tx_summaries_create(struct mg_tx_summaries *s, uint64_t capacity, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    if (capacity == 0 || (capacity & (capacity - 1)) != 0) {
        snprintf(err, errlen, "transmission summaries: capacity %llu is not a power of two",
                 (unsigned long long)capacity);
        return -1;
    }
    size_t header = (sizeof(struct mg_tx_summary_header) + 63) & ~(size_t)63;
    size_t bytes = header + (size_t)capacity * sizeof(struct mg_tx_summary_record);
    void *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        snprintf(err, errlen, "transmission summaries: cannot map %zu bytes: %s", bytes,
                 strerror(errno));
        return -1;
    }
    s->header = base;
    s->records = (struct mg_tx_summary_record *)((char *)base + header);
    s->map_bytes = bytes;
    memcpy(s->header->magic, MG_TX_SUMMARY_MAGIC, sizeof s->header->magic);
    s->header->record_size = sizeof(struct mg_tx_summary_record);
    s->header->capacity = capacity;
    atomic_store(&s->header->high_water, -1);
    atomic_store(&s->header->low_water, -1);
    atomic_store(&s->header->cursor, -1);
    return 0;
}

void mg_tx_summaries_destroy(struct mg_tx_summaries *s)
{
    if (s->header)
        munmap(s->header, s->map_bytes);
    memset(s, 0, sizeof *s);
}

static bool pid_gone(int pid)
{
    return pid > 0 && kill(pid, 0) < 0 && errno == ESRCH;
}

bool mg_tx_summary_lease_take(struct mg_tx_summaries *s, int pid, int64_t now_ns)
{
    struct mg_tx_summary_header *h = s->header;
    int32_t holder = atomic_load(&h->lease_pid);
    /* Not re-entrant: a worker's loop and its helper threads share a pid, and only one of
     * them may write. */
    if (holder == pid)
        return false;
    if (holder != 0 && now_ns < atomic_load(&h->lease_until_ns) && !pid_gone(holder))
        return false;
    if (!atomic_compare_exchange_strong(&h->lease_pid, &holder, pid))
        return false;
    atomic_store(&h->lease_until_ns, now_ns + MG_TX_SUMMARY_LEASE_NS);
    return true;
}

void mg_tx_summary_lease_renew(struct mg_tx_summaries *s, int pid, int64_t now_ns)
{
    if (atomic_load(&s->header->lease_pid) == pid)
        atomic_store(&s->header->lease_until_ns, now_ns + MG_TX_SUMMARY_LEASE_NS);
}

void mg_tx_summary_lease_release(struct mg_tx_summaries *s, int pid)
{
    int32_t holder = pid;
    atomic_compare_exchange_strong(&s->header->lease_pid, &holder, 0);
}

static struct mg_tx_summary_record *slot_of(const struct mg_tx_summaries *s, int64_t tx_id)
{
    return &s->records[(uint64_t)tx_id & (s->header->capacity - 1)];
}

/* The record's turn for tx_id (its id / the capacity, plus 1); 0: no record can hold it. */
static uint32_t turn_of(const struct mg_tx_summaries *s, int64_t tx_id)
{
    if (tx_id < 0)
        return 0;
    uint64_t turn = (uint64_t)tx_id / s->header->capacity + 1;
    return turn < UINT32_MAX ? (uint32_t)turn : 0;
}

void mg_tx_summary_write(struct mg_tx_summaries *s, int64_t tx_id, int64_t best_obs_id,
                         uint32_t observation_count, uint32_t observer_count, int64_t last_obs_id)
{
    uint32_t turn = turn_of(s, tx_id);
    if (turn == 0)
        return;
    struct mg_tx_summary_record *r = slot_of(s, tx_id);
    /* Odd while written; a number left odd by a writer that died becomes odd again. */
    uint32_t seq = (atomic_load_explicit(&r->seq, memory_order_relaxed) | 1u) + 2u;
    atomic_store_explicit(&r->seq, seq, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&r->turn, turn, memory_order_relaxed);
    atomic_store_explicit(&r->best_obs_id, best_obs_id, memory_order_relaxed);
    atomic_store_explicit(&r->observation_count, observation_count, memory_order_relaxed);
    atomic_store_explicit(&r->observer_count, observer_count, memory_order_relaxed);
    atomic_store_explicit(&r->last_obs_id, last_obs_id, memory_order_relaxed);
    atomic_store_explicit(&r->seq, seq + 1u, memory_order_release);
}

void mg_tx_summary_publish(struct mg_tx_summaries *s, int64_t high_water)
{
    atomic_store_explicit(&s->header->high_water, high_water, memory_order_release);
}

int64_t mg_tx_summary_high_water(const struct mg_tx_summaries *s)
{
    return atomic_load_explicit(&s->header->high_water, memory_order_acquire);
}

bool mg_tx_summary_read(const struct mg_tx_summaries *s, int64_t tx_id, struct mg_tx_summary *out)
{
    uint32_t turn = turn_of(s, tx_id);
    struct mg_tx_summary_record *r = slot_of(s, tx_id);
    uint32_t before = atomic_load_explicit(&r->seq, memory_order_acquire);
    if (turn == 0 || before == 0 || (before & 1u))
        return false;
    uint32_t held = atomic_load_explicit(&r->turn, memory_order_relaxed);
    out->tx_id = tx_id;
    out->best_obs_id = atomic_load_explicit(&r->best_obs_id, memory_order_relaxed);
    out->observation_count = atomic_load_explicit(&r->observation_count, memory_order_relaxed);
    out->observer_count = atomic_load_explicit(&r->observer_count, memory_order_relaxed);
    out->last_obs_id = atomic_load_explicit(&r->last_obs_id, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    uint32_t after = atomic_load_explicit(&r->seq, memory_order_relaxed);
    return after == before && held == turn;
}

/* SPDX-License-Identifier: ISC */
#include "breaker.h"

#include <string.h>

void mg_breaker_init(struct mg_breaker *b, uint32_t threshold, int64_t open_ns)
{
    atomic_store(&b->threshold, threshold);
    atomic_store(&b->open_ns, open_ns);
    atomic_store(&b->state, MG_BREAKER_CLOSED);
    atomic_store(&b->failures, 0);
    atomic_store(&b->probe_pid, 0);
    atomic_store(&b->open_until_ns, 0);
    atomic_store(&b->opened, 0);
    atomic_store(&b->fast_fails, 0);
    atomic_store(&b->probes, 0);
    atomic_store(&b->opened_by_one_address, 0);
    for (int i = 0; i < 2; i++) {
        atomic_store(&b->last_addr[i], 0);
        atomic_store(&b->opened_by[i], 0);
    }
    atomic_store(&b->last_addr_run, 0);
}

void mg_breaker_configure(struct mg_breaker *b, uint32_t threshold, int64_t open_ns)
{
    atomic_store(&b->threshold, threshold);
    atomic_store(&b->open_ns, open_ns);
}

enum mg_breaker_verdict mg_breaker_allow(struct mg_breaker *b, int pid, int64_t now_ns,
                                         int64_t *retry_ns)
{
    (void)pid;
    uint32_t state = atomic_load(&b->state);
    if (state == MG_BREAKER_CLOSED)
        return MG_BREAKER_PASS;
    int64_t until = atomic_load(&b->open_until_ns);
    atomic_fetch_add(&b->fast_fails, 1);
    /* Half-open, or open: at least a second, so a client does not come back at once. */
    *retry_ns = until > now_ns ? until - now_ns : 0;
    return MG_BREAKER_REFUSE;
}

int64_t mg_breaker_probe_due(const struct mg_breaker *b)
{
    return atomic_load(&b->state) == MG_BREAKER_OPEN ? atomic_load(&b->open_until_ns) : INT64_MAX;
}

bool mg_breaker_take_probe(struct mg_breaker *b, int pid, int64_t now_ns)
{
    if (atomic_load(&b->state) != MG_BREAKER_OPEN || now_ns < atomic_load(&b->open_until_ns))
        return false;
    int32_t none = 0;
    if (!atomic_compare_exchange_strong(&b->probe_pid, &none, pid))
        return false;
    atomic_store(&b->state, MG_BREAKER_HALF_OPEN);
    atomic_fetch_add(&b->probes, 1);
    return true;
}

static void open_breaker(struct mg_breaker *b, int64_t now_ns)
{
    atomic_store(&b->open_until_ns, now_ns + atomic_load(&b->open_ns));
    atomic_store(&b->state, MG_BREAKER_OPEN);
    atomic_fetch_add(&b->opened, 1);
}

void mg_breaker_success(struct mg_breaker *b, int pid, bool probe)
{
    atomic_store(&b->failures, 0);
    atomic_store(&b->last_addr_run, 0);
    if (!probe)
        return;
    int32_t mine = pid;
    if (atomic_compare_exchange_strong(&b->probe_pid, &mine, 0))
        atomic_store(&b->state, MG_BREAKER_CLOSED);
}

bool mg_breaker_failure(struct mg_breaker *b, int pid, bool probe, int64_t now_ns,
                        const uint8_t *addr)
{
    if (probe) {
        int32_t mine = pid;
        if (atomic_load(&b->probe_pid) == pid) {
            open_breaker(b, now_ns);
            atomic_compare_exchange_strong(&b->probe_pid, &mine, 0);
        }
        return false;
    }
    /* Who failed: the run of failures from one address (two racing workers may at worst
     * mix two addresses' words; the counts stay whole). */
    uint64_t words[2] = {0, 0};
    if (addr)
        memcpy(words, addr, sizeof words);
    bool same =
        atomic_load(&b->last_addr[0]) == words[0] && atomic_load(&b->last_addr[1]) == words[1];
    if (same) {
        atomic_fetch_add(&b->last_addr_run, 1);
    } else {
        atomic_store(&b->last_addr[0], words[0]);
        atomic_store(&b->last_addr[1], words[1]);
        atomic_store(&b->last_addr_run, 1);
    }
    uint32_t failures = atomic_fetch_add(&b->failures, 1) + 1;
    uint32_t threshold = atomic_load(&b->threshold);
    uint32_t closed = MG_BREAKER_CLOSED;
    if (threshold > 0 && failures >= threshold &&
        atomic_compare_exchange_strong(&b->state, &closed, MG_BREAKER_HALF_OPEN)) {
        /* HALF_OPEN while open_until_ns is written, so nobody probes with an old one. */
        atomic_store(&b->failures, 0);
        atomic_store(&b->opened_by[0], words[0]);
        atomic_store(&b->opened_by[1], words[1]);
        if (atomic_load(&b->last_addr_run) >= failures)
            atomic_fetch_add(&b->opened_by_one_address, 1);
        open_breaker(b, now_ns);
        return true;
    }
    return false;
}

void mg_breaker_abandon(struct mg_breaker *b, int pid, int64_t now_ns)
{
    if (atomic_load(&b->probe_pid) != pid)
        return;
    atomic_store(&b->open_until_ns, now_ns);
    atomic_store(&b->state, MG_BREAKER_OPEN);
    int32_t mine = pid;
    atomic_compare_exchange_strong(&b->probe_pid, &mine, 0);
}

bool mg_breaker_reclaim(struct mg_breaker *b, int pid, int64_t now_ns)
{
    if (pid == 0 || atomic_load(&b->probe_pid) != pid)
        return false;
    mg_breaker_abandon(b, pid, now_ns);
    return true;
}

const char *mg_breaker_state_name(uint32_t state)
{
    switch (state) {
    case MG_BREAKER_CLOSED:
        return "closed";
    case MG_BREAKER_OPEN:
        return "open";
    case MG_BREAKER_HALF_OPEN:
        return "half-open";
    }
    return "?";
}

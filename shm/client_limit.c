/* SPDX-License-Identifier: ISC */
#include "client_limit.h"

#include "clock.h"

#include <limits.h>
#include <stdlib.h> /* arc4random_buf: libbsd's overlay (pkg-config libbsd-overlay) */
#include <string.h>

/* The largest tolerance: about 73 years, far beyond any real limit, and small enough that
 * now + tolerance + T cannot overflow an int64 on CLOCK_MONOTONIC. */
#define TOLERANCE_MAX (INT64_MAX / 4)

_Static_assert(sizeof(struct mg_client_set) == 64 + MG_CLIENT_WAYS * 32,
               "a set is one line of lock and 32-byte entries");

void mg_client_limit_init(struct mg_client_view *v, uint32_t sets, uint32_t per_minute,
                          uint32_t burst)
{
    struct mg_client_table *t = v->table;
    memset(t, 0, sizeof *t);
    memset(v->sets, 0, (size_t)sets * sizeof *v->sets);
    t->sets = sets;
    mg_client_limit_set_rate(v, per_minute, burst);
    arc4random_buf(t->seed, sizeof t->seed);
}

void mg_client_limit_set_rate(struct mg_client_view *v, uint32_t per_minute, uint32_t burst)
{
    struct mg_client_table *t = v->table;
    int64_t interval = per_minute ? 60 * MG_NS_PER_SEC / per_minute : 0, tolerance = 0;
    burst = burst ? burst : 1;
    if (per_minute) {
        uint64_t extra = burst - 1;
        tolerance = extra > (uint64_t)(TOLERANCE_MAX / interval) ? TOLERANCE_MAX
                                                                 : (int64_t)extra * interval;
    }
    /* The switch last, so a limit turned on finds its times in place. */
    atomic_store(&t->interval_ns, interval);
    atomic_store(&t->tolerance_ns, tolerance);
    atomic_store(&t->burst, burst);
    atomic_store(&t->per_minute, per_minute);
}

uint32_t mg_client_limit_sets_for(uint32_t entries)
{
    uint32_t sets = entries / MG_CLIENT_WAYS + (entries % MG_CLIENT_WAYS != 0);
    return sets ? sets : 1;
}

/* A multiply-xorshift round: every input bit reaches every output bit. */
static uint64_t scramble(uint64_t x)
{
    x ^= x >> 33;
    x *= 0x9e3779b97f4a7c15u; /* 2^64 / golden ratio, odd */
    x ^= x >> 29;
    x *= 0xc2b2ae3d27d4eb4fu;
    x ^= x >> 32;
    return x;
}

/* Both halves of the key mixed with the secret seed: without the seed, which keys share a
 * set cannot be known, so they cannot be chosen. */
static uint64_t key_hash(const struct mg_client_table *t, const uint8_t key[MG_CLIENT_KEY_BYTES])
{
    uint64_t lo, hi;
    memcpy(&lo, key, sizeof lo);
    memcpy(&hi, key + sizeof lo, sizeof hi);
    uint64_t h = scramble(lo ^ t->seed[0]);
    return scramble(h + (hi ^ t->seed[1]));
}

uint32_t mg_client_limit_set_of(const struct mg_client_view *v,
                                const uint8_t key[MG_CLIENT_KEY_BYTES])
{
    uint32_t sets = v->table->sets ? v->table->sets : 1;
    return (uint32_t)(key_hash(v->table, key) % sets);
}

/*
 * Under the set's lock: the entry of key, else the one a new client takes (free, else
 * recovered, else the one used longest ago; *evicting says it was still limiting).
 */
static struct mg_client_entry *find_entry(struct mg_client_set *s,
                                          const uint8_t key[MG_CLIENT_KEY_BYTES], int64_t now,
                                          bool *found, bool *evicting)
{
    struct mg_client_entry *free_entry = NULL, *recovered = NULL, *oldest = NULL;
    for (unsigned i = 0; i < MG_CLIENT_WAYS; i++) {
        struct mg_client_entry *e = &s->entry[i];
        if (e->tat_ns == 0) {
            if (!free_entry)
                free_entry = e;
            continue;
        }
        if (memcmp(e->key, key, MG_CLIENT_KEY_BYTES) == 0) {
            *found = true;
            return e;
        }
        if (e->tat_ns <= now && (!recovered || e->last_ns < recovered->last_ns))
            recovered = e;
        if (!oldest || e->last_ns < oldest->last_ns)
            oldest = e;
    }
    *found = false;
    *evicting = !free_entry && !recovered;
    return free_entry ? free_entry : recovered ? recovered : oldest;
}

bool mg_client_limit_take(struct mg_client_view *v, int pid, const uint8_t key[MG_CLIENT_KEY_BYTES],
                          int64_t now_ns, int64_t *retry_after_ns)
{
    struct mg_client_table *t = v->table;
    if (retry_after_ns)
        *retry_after_ns = 0;
    if (t->per_minute == 0 || t->sets == 0)
        return true;
    struct mg_client_set *s = &v->sets[mg_client_limit_set_of(v, key)];
    bool found = false, evicting = false, allowed = true;
    int64_t wait = 0;

    mg_lock_acquire(&s->lock, pid);
    struct mg_client_entry *e = find_entry(s, key, now_ns, &found, &evicting);
    int64_t tat = found && e->tat_ns > now_ns ? e->tat_ns : now_ns;
    int64_t tolerance = atomic_load(&t->tolerance_ns), interval = atomic_load(&t->interval_ns);
    if (tat - now_ns > tolerance) {
        /* Only a known client can be refused: a new one starts from a full burst. */
        allowed = false;
        wait = tat - now_ns - tolerance;
    } else {
        if (!found)
            memcpy(e->key, key, MG_CLIENT_KEY_BYTES);
        e->tat_ns = tat + interval;
        e->last_ns = now_ns;
    }
    mg_lock_release(&s->lock, pid);

    if (!allowed) {
        atomic_fetch_add(&t->limited, 1);
        if (retry_after_ns)
            *retry_after_ns = wait;
        return false;
    }
    atomic_fetch_add(&t->allowed, 1);
    if (!found && evicting)
        atomic_fetch_add(&t->evicted, 1);
    return true;
}

unsigned mg_client_limit_reclaim(struct mg_client_view *v, int pid)
{
    unsigned freed = 0;
    for (uint32_t i = 0; i < v->table->sets; i++)
        freed += mg_lock_reclaim(&v->sets[i].lock, pid);
    return freed;
}

uint32_t mg_client_limit_tracked(const struct mg_client_view *v, int64_t now_ns)
{
    uint32_t tracked = 0;
    for (uint32_t i = 0; i < v->table->sets; i++)
        for (unsigned w = 0; w < MG_CLIENT_WAYS; w++)
            tracked += v->sets[i].entry[w].tat_ns > now_ns;
    return tracked;
}

void mg_client_limit_read(const struct mg_client_view *v, int64_t now_ns,
                          struct mg_client_snapshot *out)
{
    const struct mg_client_table *t = v->table;
    out->per_minute = atomic_load(&t->per_minute);
    out->burst = atomic_load(&t->burst);
    out->entries = t->sets * MG_CLIENT_WAYS;
    out->tracked = mg_client_limit_tracked(v, now_ns);
#define READ_COUNTER(field, json, what) out->field = atomic_load(&t->field);
    MG_CLIENT_COUNTER_LIST(READ_COUNTER)
#undef READ_COUNTER
}

int mg_client_limit_retry_after_s(int64_t retry_after_ns)
{
    if (retry_after_ns <= MG_NS_PER_SEC)
        return 1;
    int64_t s = retry_after_ns / MG_NS_PER_SEC + (retry_after_ns % MG_NS_PER_SEC != 0);
    return s > INT_MAX ? INT_MAX : (int)s;
}

/* SPDX-License-Identifier: ISC */
#include "conn_limit.h"

#include "config_values.h"

#include <stdlib.h> /* arc4random_buf: libbsd's overlay */
#include <string.h>
#include <unistd.h>

_Static_assert(sizeof(struct mg_conn_set) == 64 + MG_CONN_WAYS * 24,
               "a set is one line of lock and 24-byte entries");

uint32_t mg_conn_limit_sets_for(uint64_t connections)
{
    uint64_t entries = 2 * connections;
    uint64_t sets = entries / MG_CONN_WAYS + (entries % MG_CONN_WAYS != 0);
    return sets ? (uint32_t)sets : 1;
}

uint32_t mg_conn_limit_holds_for(uint32_t slots, uint32_t conns_per_worker, uint32_t tarpit,
                                 bool capped)
{
    if (!capped || slots == 0)
        return 0;
    uint64_t room = MG_CONNS_TRACKED_MAX / slots;
    uint64_t held = room > conns_per_worker ? room - conns_per_worker : 0;
    return conns_per_worker + (uint32_t)(tarpit < held ? tarpit : held);
}

void mg_conn_limit_init(struct mg_conn_view *v, uint32_t sets, uint32_t slots,
                        uint32_t holds_per_slot, uint32_t cap)
{
    struct mg_conn_table *t = v->table;
    memset(t, 0, sizeof *t);
    memset(v->sets, 0, (size_t)sets * sizeof *v->sets);
    memset(v->holds, 0, (size_t)slots * holds_per_slot * sizeof *v->holds);
    t->sets = sets ? sets : 1;
    t->slots = slots;
    t->holds_per_slot = holds_per_slot;
    t->cap = cap;
    arc4random_buf(t->seed, sizeof t->seed);
}

void mg_conn_limit_set_cap(struct mg_conn_view *v, uint32_t cap)
{
    atomic_store(&v->table->cap, cap);
}

static uint64_t scramble(uint64_t x)
{
    x ^= x >> 33;
    x *= 0x9e3779b97f4a7c15u;
    x ^= x >> 29;
    x *= 0xc2b2ae3d27d4eb4fu;
    x ^= x >> 32;
    return x;
}

static uint32_t set_of(const struct mg_conn_table *t, const uint8_t key[MG_CONN_KEY_BYTES])
{
    uint64_t lo, hi;
    memcpy(&lo, key, sizeof lo);
    memcpy(&hi, key + sizeof lo, sizeof hi);
    uint64_t h = scramble(scramble(lo ^ t->seed[0]) + (hi ^ t->seed[1]));
    return (uint32_t)(h % t->sets);
}

/* Under the set's lock: the entry of key, else NULL (*free_entry: a free one, if any). */
static struct mg_conn_entry *find(struct mg_conn_set *s, const uint8_t key[MG_CONN_KEY_BYTES],
                                  struct mg_conn_entry **free_entry)
{
    if (free_entry)
        *free_entry = NULL;
    for (unsigned i = 0; i < MG_CONN_WAYS; i++) {
        struct mg_conn_entry *e = &s->entry[i];
        if (e->count == 0) {
            if (free_entry && !*free_entry)
                *free_entry = e;
        } else if (memcmp(e->key, key, MG_CONN_KEY_BYTES) == 0) {
            return e;
        }
    }
    return NULL;
}

static struct mg_conn_hold *hold_of(struct mg_conn_view *v, uint32_t slot, uint32_t hold)
{
    const struct mg_conn_table *t = v->table;
    if (slot >= t->slots || hold >= t->holds_per_slot)
        return NULL;
    return &v->holds[(size_t)slot * t->holds_per_slot + hold];
}

enum mg_conn_verdict mg_conn_limit_open(struct mg_conn_view *v, int pid, uint32_t slot,
                                        uint32_t hold, const uint8_t key[MG_CONN_KEY_BYTES])
{
    struct mg_conn_table *t = v->table;
    struct mg_conn_hold *h = hold_of(v, slot, hold);
    uint32_t cap = atomic_load(&t->cap);
    if (cap == 0 || !h || h->set_plus_one != 0)
        return MG_CONN_UNTRACKED;
    uint32_t set = set_of(t, key);
    struct mg_conn_set *s = &v->sets[set];
    enum mg_conn_verdict verdict = MG_CONN_COUNTED;

    mg_lock_acquire(&s->lock, pid);
    struct mg_conn_entry *free_entry;
    struct mg_conn_entry *e = find(s, key, &free_entry);
    if (e && e->count >= cap) {
        verdict = MG_CONN_OVER_CAP;
    } else if (!e && !free_entry) {
        verdict = MG_CONN_UNTRACKED;
    } else {
        if (!e) {
            e = free_entry;
            memcpy(e->key, key, MG_CONN_KEY_BYTES);
        }
        e->count++;
        memcpy(h->key, key, MG_CONN_KEY_BYTES);
        h->set_plus_one = set + 1;
    }
    mg_lock_release(&s->lock, pid);

    atomic_fetch_add(verdict == MG_CONN_COUNTED    ? &t->counted
                     : verdict == MG_CONN_OVER_CAP ? &t->refused
                                                   : &t->untracked,
                     1);
    return verdict;
}

/* Under the set's lock: one connection of h's key goes back (its tunnel too), and h is freed. */
static void give_back(struct mg_conn_set *s, struct mg_conn_hold *h)
{
    struct mg_conn_entry *e = find(s, h->key, NULL);
    if (e) {
        e->count--;
        if (h->tunnel && e->tunnels > 0)
            e->tunnels--;
        if (e->count == 0)
            e->tunnels = 0;
    }
    h->set_plus_one = 0;
    h->tunnel = 0;
}

/* The set of slot's counted hold record `hold`, or NULL when it holds nothing. */
static struct mg_conn_set *set_of_hold(struct mg_conn_view *v, struct mg_conn_hold *h)
{
    if (!h || h->set_plus_one == 0 || h->set_plus_one > v->table->sets)
        return NULL;
    return &v->sets[h->set_plus_one - 1];
}

bool mg_conn_limit_tunnel_open(struct mg_conn_view *v, int pid, uint32_t slot, uint32_t hold,
                               uint32_t share)
{
    struct mg_conn_hold *h = hold_of(v, slot, hold);
    struct mg_conn_set *s = set_of_hold(v, h);
    if (!s)
        return true; /* not counted: no share to apply */
    bool admitted = true;
    mg_lock_acquire(&s->lock, pid);
    struct mg_conn_entry *e = find(s, h->key, NULL);
    if (e && !h->tunnel) {
        if (share > 0 && e->tunnels >= share) {
            admitted = false;
        } else {
            e->tunnels++;
            h->tunnel = 1;
        }
    }
    mg_lock_release(&s->lock, pid);
    return admitted;
}

void mg_conn_limit_tunnel_close(struct mg_conn_view *v, int pid, uint32_t slot, uint32_t hold)
{
    struct mg_conn_hold *h = hold_of(v, slot, hold);
    struct mg_conn_set *s = set_of_hold(v, h);
    if (!s || !h->tunnel)
        return;
    mg_lock_acquire(&s->lock, pid);
    struct mg_conn_entry *e = find(s, h->key, NULL);
    if (e && e->tunnels > 0)
        e->tunnels--;
    h->tunnel = 0;
    mg_lock_release(&s->lock, pid);
}

void mg_conn_limit_close(struct mg_conn_view *v, int pid, uint32_t slot, uint32_t hold)
{
    struct mg_conn_hold *h = hold_of(v, slot, hold);
    struct mg_conn_set *s = set_of_hold(v, h);
    if (!s)
        return;
    mg_lock_acquire(&s->lock, pid);
    give_back(s, h);
    mg_lock_release(&s->lock, pid);
}

/* Under set's lock: every count rebuilt from the hold records of every slot but skip_slot. */
static void recount(struct mg_conn_view *v, uint32_t set, uint32_t skip_slot)
{
    const struct mg_conn_table *t = v->table;
    struct mg_conn_set *s = &v->sets[set];
    for (unsigned i = 0; i < MG_CONN_WAYS; i++)
        s->entry[i].count = s->entry[i].tunnels = 0;
    for (uint32_t slot = 0; slot < t->slots; slot++) {
        if (slot == skip_slot)
            continue;
        for (uint32_t i = 0; i < t->holds_per_slot; i++) {
            struct mg_conn_hold *h = &v->holds[(size_t)slot * t->holds_per_slot + i];
            if (h->set_plus_one != set + 1)
                continue;
            struct mg_conn_entry *free_entry;
            struct mg_conn_entry *e = find(s, h->key, &free_entry);
            if (!e && free_entry) {
                e = free_entry;
                memcpy(e->key, h->key, MG_CONN_KEY_BYTES);
            }
            if (e) {
                e->count++;
                e->tunnels += h->tunnel != 0;
            }
        }
    }
}

unsigned mg_conn_limit_reclaim(struct mg_conn_view *v, int pid, uint32_t slot)
{
    struct mg_conn_table *t = v->table;
    /* A set whose lock pid held may have an entry and a hold record that disagree: it is
     * recounted from the live workers' records rather than decremented. */
    uint32_t died_in = UINT32_MAX;
    for (uint32_t i = 0; i < t->sets; i++)
        if (mg_lock_reclaim(&v->sets[i].lock, pid))
            died_in = i; /* a process holds one set lock at a time */
    unsigned given = 0;
    for (uint32_t i = 0; slot < t->slots && i < t->holds_per_slot; i++) {
        struct mg_conn_hold *h = &v->holds[(size_t)slot * t->holds_per_slot + i];
        uint32_t set = h->set_plus_one - 1;
        if (h->set_plus_one == 0 || h->set_plus_one > t->sets) {
            h->set_plus_one = 0;
            continue;
        }
        given++;
        if (set == died_in) {
            h->set_plus_one = 0;
            h->tunnel = 0;
            continue;
        }
        struct mg_conn_set *s = &v->sets[set];
        mg_lock_acquire(&s->lock, getpid());
        give_back(s, h);
        mg_lock_release(&s->lock, getpid());
    }
    if (died_in != UINT32_MAX) {
        struct mg_conn_set *s = &v->sets[died_in];
        mg_lock_acquire(&s->lock, getpid());
        recount(v, died_in, slot);
        mg_lock_release(&s->lock, getpid());
    }
    atomic_fetch_add(&t->reclaimed, given);
    return given;
}

uint32_t mg_conn_limit_count(const struct mg_conn_view *v, const uint8_t key[MG_CONN_KEY_BYTES])
{
    const struct mg_conn_set *s = &v->sets[set_of(v->table, key)];
    for (unsigned i = 0; i < MG_CONN_WAYS; i++)
        if (s->entry[i].count && memcmp(s->entry[i].key, key, MG_CONN_KEY_BYTES) == 0)
            return s->entry[i].count;
    return 0;
}

uint32_t mg_conn_limit_clients(const struct mg_conn_view *v)
{
    uint32_t clients = 0;
    for (uint32_t i = 0; i < v->table->sets; i++)
        for (unsigned w = 0; w < MG_CONN_WAYS; w++)
            clients += v->sets[i].entry[w].count != 0;
    return clients;
}

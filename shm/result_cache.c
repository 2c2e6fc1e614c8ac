/* SPDX-License-Identifier: ISC */
#include "result_cache.h"

#include "clock.h"
#include "process.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CANCEL_POLL_NS (20 * MG_NS_PER_MS)
/* A waiter without a cancel function sleeps until the build ends (wake_seq) or this long:
 * only a builder that died before the master reclaimed its build (which wakes too) is found
 * by the timeout, when the look after it asks whether the builder lives. */
#define SAFETY_WAIT_NS (5 * MG_NS_PER_SEC)

void mg_result_cache_init(struct mg_cache_view *v, uint32_t entries, uint32_t pages, int64_t ttl_ns)
{
    memset(v->cache, 0, sizeof *v->cache);
    v->cache->entries = entries;
    v->cache->pages = pages;
    v->cache->ttl_ns = ttl_ns;
    memset(v->entry, 0, sizeof *v->entry * entries);
}

void mg_result_cache_set_ttl(struct mg_cache_view *v, int pid, int64_t ttl_ns)
{
    mg_lock_acquire(&v->cache->lock, pid);
    v->cache->ttl_ns = ttl_ns;
    mg_lock_release(&v->cache->lock, pid);
}

static uint32_t max_body_pages(const struct mg_result_cache *c)
{
    uint32_t share = c->pages / MG_CACHE_POOL_SHARE;
    return share > 0 ? share : (c->pages > 0 ? 1 : 0);
}

size_t mg_result_cache_max_body(const struct mg_result_cache *c)
{
    return (size_t)max_body_pages(c) * MG_CACHE_PAGE;
}

static unsigned char *page_at(struct mg_cache_view *v, uint32_t page)
{
    return v->pages + (size_t)page * MG_CACHE_PAGE;
}

static int find(struct mg_cache_view *v, const char *key)
{
    for (unsigned i = 0; i < v->cache->entries; i++)
        if (v->entry[i].state != MG_CACHE_FREE &&
            strncmp(v->entry[i].key, key, MG_CACHE_KEY_MAX) == 0)
            return (int)i;
    return -1;
}

/* Under lock: someone copies this entry's body now (a pin that is not stale). */
static bool pinned(const struct mg_cache_entry *e, int64_t now)
{
    return e->pins > 0 && (uint32_t)(now / MG_NS_PER_SEC) - e->pinned_s < MG_CACHE_PIN_STALE_S;
}

/* A free entry; else an expired one; else the least recently used READY one; else -1. A
 * pinned entry is never chosen. */
static int victim(struct mg_cache_view *v, int64_t now)
{
    int lru = -1;
    for (unsigned i = 0; i < v->cache->entries; i++) {
        struct mg_cache_entry *e = &v->entry[i];
        if (e->state == MG_CACHE_FREE)
            return (int)i;
        if (e->state != MG_CACHE_READY || pinned(e, now))
            continue;
        if (e->expires_monotonic_ns <= now)
            return (int)i;
        if (lru < 0 || e->used_monotonic_ns < v->entry[lru].used_monotonic_ns)
            lru = (int)i;
    }
    if (lru >= 0)
        atomic_fetch_add(&v->cache->evicted, 1);
    return lru;
}

void mg_result_cache_expire(struct mg_cache_view *v, int pid, const char *key)
{
    mg_lock_acquire(&v->cache->lock, pid);
    int i = find(v, key);
    if (i >= 0 && v->entry[i].state == MG_CACHE_READY)
        v->entry[i].expires_monotonic_ns = 0;
    mg_lock_release(&v->cache->lock, pid);
}

static void claim(struct mg_cache_view *v, unsigned i, int pid, unsigned slot, const char *key,
                  int64_t now, uint64_t *build_id)
{
    struct mg_cache_entry *e = &v->entry[i];
    e->state = MG_CACHE_BUILDING;
    e->body_len = 0;
    snprintf(e->key, sizeof e->key, "%s", key);
    e->builder_pid = pid;
    e->builder_slot = slot;
    e->build_id = *build_id = ++v->cache->next_build_id;
    e->since_monotonic_ns = now;
    e->used_monotonic_ns = now;
    e->pins = 0;
    e->first_page = e->page_count = 0; /* its pages, if it had any, go free */
}

static void wake(struct mg_cache_view *v)
{
    atomic_fetch_add(&v->cache->wake_seq, 1);
    mg_futex_wake_all(&v->cache->wake_seq);
}

/* What one look under the lock found. */
struct found {
    enum mg_cache_outcome outcome;
    bool ask_builder;       /* BUSY if builder_pid is alive: ask, after the lock */
    int32_t builder_pid;    /* with ask_builder */
    uint64_t builder_build; /* with ask_builder: the build it runs */
    bool took_over;
};

/* Under lock. dead_build: a build whose builder was found dead after the previous look (0:
 * none); it is taken over if it is still there. */
static struct found look_locked(struct mg_cache_view *v, int pid, unsigned slot, const char *key,
                                int64_t now, uint64_t dead_build, struct mg_cache_pin *pin,
                                uint64_t *build_id)
{
    struct found f = {.outcome = MG_CACHE_CLAIMED};
    int i = find(v, key);
    if (i >= 0) {
        struct mg_cache_entry *e = &v->entry[i];
        if (e->state == MG_CACHE_READY && e->expires_monotonic_ns > now) {
            e->used_monotonic_ns = now;
            e->pins = pinned(e, now) ? e->pins + 1 : 1;
            e->pinned_s = (uint32_t)(now / MG_NS_PER_SEC);
            *pin = (struct mg_cache_pin){(uint32_t)i, e->body_len, e->build_id, e->first_page};
            f.outcome = MG_CACHE_HIT;
            return f;
        }
        if (e->state == MG_CACHE_BUILDING && e->build_id != dead_build) {
            f.outcome = MG_CACHE_BUSY;
            f.ask_builder = true;
            f.builder_pid = e->builder_pid;
            f.builder_build = e->build_id;
            return f;
        }
        if (e->state == MG_CACHE_BUILDING || !pinned(e, now)) {
            /* Its builder died before the master noticed, or it expired: build it again. */
            f.took_over = e->state == MG_CACHE_BUILDING;
            claim(v, (unsigned)i, pid, slot, key, now, build_id);
            return f;
        }
        /* Expired while a reader copies it: hidden from lookups, reused once unpinned. */
        e->key[0] = '\0';
    }
    i = victim(v, now);
    if (i < 0)
        *build_id = 0; /* every entry is being built or read: build without an entry */
    else
        claim(v, (unsigned)i, pid, slot, key, now, build_id);
    return f;
}

enum mg_cache_outcome mg_result_cache_look(struct mg_cache_view *v, int pid, unsigned slot,
                                           const char *key, int64_t now, bool count,
                                           struct mg_cache_pin *pin, uint64_t *build_id)
{
    uint64_t dead_build = 0;
    struct found f;
    for (;;) {
        mg_lock_acquire(&v->cache->lock, pid);
        f = look_locked(v, pid, slot, key, now, dead_build, pin, build_id);
        mg_lock_release(&v->cache->lock, pid);
        /* kill(2) is a system call: never under the lock. */
        if (!f.ask_builder || mg_process_alive(f.builder_pid, 0))
            break;
        dead_build = f.builder_build;
    }
    if (count && f.outcome == MG_CACHE_HIT)
        atomic_fetch_add(&v->cache->hits, 1);
    else if (count && f.outcome == MG_CACHE_CLAIMED)
        atomic_fetch_add(&v->cache->misses, 1);
    else if (count)
        atomic_fetch_add(&v->cache->coalesced, 1);
    if (f.took_over)
        atomic_fetch_add(&v->cache->takeovers, 1);
    return f.outcome;
}

bool mg_result_cache_copy(struct mg_cache_view *v, int pid, const struct mg_cache_pin *pin,
                          void *dst)
{
    if (dst && pin->len)
        memcpy(dst, page_at(v, pin->first_page), pin->len);
    mg_lock_acquire(&v->cache->lock, pid);
    struct mg_cache_entry *e = &v->entry[pin->index];
    bool same = e->build_id == pin->build_id;
    bool whole = same && e->state == MG_CACHE_READY;
    if (same && e->pins > 0)
        e->pins--;
    mg_lock_release(&v->cache->lock, pid);
    return whole;
}

bool mg_result_cache_warm(struct mg_cache_view *v, int pid, const char *key, int64_t now)
{
    mg_lock_acquire(&v->cache->lock, pid);
    int i = find(v, key);
    bool warm =
        i >= 0 && v->entry[i].state == MG_CACHE_READY && v->entry[i].expires_monotonic_ns > now;
    mg_lock_release(&v->cache->lock, pid);
    return warm;
}

bool mg_result_cache_building(struct mg_cache_view *v, int pid, const char *key)
{
    mg_lock_acquire(&v->cache->lock, pid);
    int i = find(v, key);
    int builder = i >= 0 && v->entry[i].state == MG_CACHE_BUILDING ? v->entry[i].builder_pid : 0;
    mg_lock_release(&v->cache->lock, pid);
    return builder != 0 && mg_process_alive(builder, 0);
}

bool mg_result_cache_pin_newest(struct mg_cache_view *v, int pid, const char *prefix,
                                const char *except, int64_t oldest, int64_t now,
                                struct mg_cache_pin *pin, int64_t *stored)
{
    size_t len = strlen(prefix);
    int best = -1;
    mg_lock_acquire(&v->cache->lock, pid);
    for (unsigned i = 0; i < v->cache->entries; i++) {
        const struct mg_cache_entry *e = &v->entry[i];
        if (e->state == MG_CACHE_READY && e->expires_monotonic_ns > now &&
            e->since_monotonic_ns >= oldest && strncmp(e->key, prefix, len) == 0 &&
            strncmp(e->key, except, MG_CACHE_KEY_MAX) != 0 &&
            (best < 0 || e->since_monotonic_ns > v->entry[best].since_monotonic_ns))
            best = (int)i;
    }
    if (best >= 0) {
        struct mg_cache_entry *e = &v->entry[best];
        e->used_monotonic_ns = now;
        e->pins = pinned(e, now) ? e->pins + 1 : 1;
        e->pinned_s = (uint32_t)(now / MG_NS_PER_SEC);
        *pin = (struct mg_cache_pin){(uint32_t)best, e->body_len, e->build_id, e->first_page};
        *stored = e->since_monotonic_ns;
    }
    mg_lock_release(&v->cache->lock, pid);
    return best >= 0;
}

enum mg_cache_outcome mg_result_cache_wait_pin(struct mg_cache_view *v, int pid, unsigned slot,
                                               const char *key, int64_t deadline,
                                               mg_fifo_cancel_fn cancel, void *cancel_arg,
                                               struct mg_cache_pin *pin, uint64_t *build_id)
{
    for (;;) {
        uint32_t seq = atomic_load(&v->cache->wake_seq);
        int64_t now = mg_monotonic_ns();
        enum mg_cache_outcome r =
            mg_result_cache_look(v, pid, slot, key, now, false, pin, build_id);
        if (r != MG_CACHE_BUSY || now >= deadline || (cancel && cancel(cancel_arg)))
            return r;
        int64_t step = cancel ? CANCEL_POLL_NS : SAFETY_WAIT_NS;
        int64_t until = now + step < deadline ? now + step : deadline;
        mg_futex_wait(&v->cache->wake_seq, seq, until);
    }
}

static int find_build(struct mg_cache_view *v, int pid, uint64_t build_id)
{
    if (build_id == 0)
        return -1;
    for (unsigned i = 0; i < v->cache->entries; i++)
        if (v->entry[i].state == MG_CACHE_BUILDING && v->entry[i].build_id == build_id &&
            v->entry[i].builder_pid == pid)
            return (int)i;
    return -1;
}

/* One entry's run, as the search for a free run sees it. */
struct extent {
    uint32_t first, end; /* pages [first, end) */
    uint32_t index;
};

static int by_first_page(const void *a, const void *b)
{
    const struct extent *x = a, *y = b;
    return (x->first > y->first) - (x->first < y->first);
}

/* What taking a run costs, compared in this order (lower is better). */
struct run_cost {
    int64_t newest_used; /* the most recent use among the live entries it evicts; INT64_MIN:
                            it evicts none */
    uint32_t victims;    /* entries it evicts, live or expired */
    uint32_t stretch;    /* a run of free pages: the free stretch it starts (best fit) */
};

static bool cheaper(const struct run_cost *a, const struct run_cost *b)
{
    if (a->newest_used != b->newest_used)
        return a->newest_used < b->newest_used;
    if (a->victims != b->victims)
        return a->victims < b->victims;
    return a->stretch < b->stretch;
}

/*
 * Under lock: the cheapest run of need pages (struct run_cost), with its victims evicted;
 * false when every run holds a pinned entry or one being copied into. ext has room for every
 * entry. A run can always be moved left until it starts at page 0, at the end of an entry's
 * run or at the start of one, without taking in another entry, so only those starts are
 * tried; entries are sorted by their first page, so each try walks only the entries in its
 * way, and a try stops as soon as it is dearer than the best one so far.
 */
static bool take_run(struct mg_cache_view *v, uint32_t need, int64_t now, struct extent *ext,
                     uint32_t *first_page)
{
    uint32_t n = 0, pool = v->cache->pages;
    for (uint32_t i = 0; i < v->cache->entries; i++) {
        const struct mg_cache_entry *e = &v->entry[i];
        if (e->state != MG_CACHE_FREE && e->page_count > 0)
            ext[n++] = (struct extent){e->first_page, e->first_page + e->page_count, i};
    }
    qsort(ext, n, sizeof *ext, by_first_page);
    bool found = false;
    struct run_cost best = {0};
    uint32_t best_start = 0, lo = 0;
    for (uint32_t c = 0; c <= 2 * n; c++) {
        uint32_t start = c == 0 ? 0 : (c & 1 ? ext[c / 2].first : ext[c / 2 - 1].end);
        if ((uint64_t)start + need > pool)
            break; /* the starts only grow */
        while (lo < n && ext[lo].end <= start)
            lo++;
        struct run_cost cost = {INT64_MIN, 0, 0};
        bool usable = true;
        uint32_t k;
        for (k = lo; usable && k < n && ext[k].first < start + need; k++) {
            const struct mg_cache_entry *e = &v->entry[ext[k].index];
            if (e->state != MG_CACHE_READY || pinned(e, now)) {
                usable = false; /* being copied into, or read */
            } else if (e->key[0] != '\0' && e->expires_monotonic_ns > now &&
                       e->used_monotonic_ns > cost.newest_used) {
                cost.newest_used = e->used_monotonic_ns;
            }
            cost.victims++;
            if (found && cost.newest_used > best.newest_used)
                usable = false;
        }
        if (!usable)
            continue;
        if (cost.victims == 0)
            cost.stretch = (lo < n ? ext[lo].first : pool) - start;
        if (!found || cheaper(&cost, &best)) {
            found = true;
            best = cost;
            best_start = start;
        }
    }
    if (!found)
        return false;
    for (uint32_t k = 0; k < n; k++) {
        if (ext[k].end <= best_start || ext[k].first >= best_start + need)
            continue;
        struct mg_cache_entry *e = &v->entry[ext[k].index];
        if (e->key[0] != '\0' && e->expires_monotonic_ns > now)
            atomic_fetch_add(&v->cache->evicted, 1);
        memset(e, 0, sizeof *e);
    }
    *first_page = best_start;
    return true;
}

enum put { PUT_NONE = 0, PUT_STORED, PUT_TOO_LARGE };

static enum put put_body(struct mg_cache_view *v, int pid, uint64_t build_id, const char *body,
                         size_t len, int64_t now)
{
    bool too_large = len > mg_result_cache_max_body(v->cache);
    uint32_t need = (uint32_t)((len + MG_CACHE_PAGE - 1) / MG_CACHE_PAGE);
    /* The search's scratch, allocated before the lock (malloc may make a system call). */
    struct extent *ext =
        build_id != 0 && !too_large && need > 0 ? malloc(sizeof *ext * v->cache->entries) : NULL;
    bool reserved = false;
    uint32_t first_page = 0;
    mg_lock_acquire(&v->cache->lock, pid);
    int i = find_build(v, pid, build_id);
    if (i >= 0 && !too_large && (need == 0 || (ext && take_run(v, need, now, ext, &first_page)))) {
        v->entry[i].first_page = first_page;
        v->entry[i].page_count = need;
        reserved = true;
    } else if (i >= 0) {
        memset(&v->entry[i], 0, sizeof v->entry[i]); /* not stored: the claim ends */
    }
    mg_lock_release(&v->cache->lock, pid);
    free(ext);
    /* The run is ours while the entry is BUILDING: nobody reads or writes those pages until it
     * is READY, and only our death (then the master's reclaim) can take it. So the copy needs
     * no lock. */
    if (reserved) {
        memcpy(page_at(v, first_page), body, len);
        mg_lock_acquire(&v->cache->lock, pid);
        if (find_build(v, pid, build_id) == i) {
            struct mg_cache_entry *e = &v->entry[i];
            e->body_len = (uint32_t)len;
            e->state = MG_CACHE_READY;
            e->builder_pid = 0;
            e->since_monotonic_ns = now;
            e->used_monotonic_ns = now;
            e->expires_monotonic_ns = now + v->cache->ttl_ns;
        } else {
            reserved = false;
        }
        mg_lock_release(&v->cache->lock, pid);
    }
    wake(v);
    return i >= 0 && too_large ? PUT_TOO_LARGE : reserved ? PUT_STORED : PUT_NONE;
}

void mg_result_cache_store(struct mg_cache_view *v, int pid, uint64_t build_id, const char *body,
                           size_t len, int64_t now)
{
    enum put r = put_body(v, pid, build_id, body, len, now);
    if (r == PUT_TOO_LARGE)
        atomic_fetch_add(&v->cache->too_large, 1);
    else if (r == PUT_STORED)
        atomic_fetch_add(&v->cache->stored, 1);
}

bool mg_result_cache_store_uncounted(struct mg_cache_view *v, int pid, uint64_t build_id,
                                     const void *body, size_t len, int64_t now)
{
    return put_body(v, pid, build_id, body, len, now) == PUT_STORED;
}

void mg_result_cache_abandon(struct mg_cache_view *v, int pid, uint64_t build_id)
{
    mg_lock_acquire(&v->cache->lock, pid);
    int i = find_build(v, pid, build_id);
    if (i >= 0)
        memset(&v->entry[i], 0, sizeof v->entry[i]);
    mg_lock_release(&v->cache->lock, pid);
    wake(v);
}

unsigned mg_result_cache_reclaim(struct mg_cache_view *v, int pid)
{
    mg_lock_reclaim(&v->cache->lock, pid);
    int self = getpid();
    unsigned freed = 0;
    mg_lock_acquire(&v->cache->lock, self);
    for (unsigned i = 0; i < v->cache->entries; i++) {
        if (v->entry[i].state == MG_CACHE_BUILDING && v->entry[i].builder_pid == pid) {
            memset(&v->entry[i], 0, sizeof v->entry[i]);
            freed++;
        }
    }
    mg_lock_release(&v->cache->lock, self);
    if (freed) {
        atomic_fetch_add(&v->cache->reclaimed, freed);
        wake(v);
    }
    return freed;
}

void mg_result_cache_read(const struct mg_cache_view *v, int pid, bool locked, int64_t now,
                          struct mg_cache_snapshot *out)
{
    const struct mg_result_cache *c = v->cache;
    /* The lock word is the only thing written here. */
    struct mg_lock *lock = (struct mg_lock *)&c->lock;
    if (locked)
        mg_lock_acquire(lock, pid);
    out->entries = c->entries;
    out->pages = c->pages;
    out->ttl_ns = c->ttl_ns;
    out->ready = out->building = 0;
    out->pages_used = 0;
    for (unsigned i = 0; i < c->entries; i++) {
        const struct mg_cache_entry *e = &v->entry[i];
        out->ready += e->state == MG_CACHE_READY && e->expires_monotonic_ns > now;
        out->building += e->state == MG_CACHE_BUILDING;
        out->pages_used += e->state != MG_CACHE_FREE ? e->page_count : 0;
    }
    if (locked)
        mg_lock_release(lock, pid);
#define READ_COUNTER(field, json, what) out->field = atomic_load(&c->field);
    MG_CACHE_COUNTER_LIST(READ_COUNTER)
#undef READ_COUNTER
}

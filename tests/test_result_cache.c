/* SPDX-License-Identifier: ISC */
/*
 * The result cache's pool of pages (shm/result_cache.h): bodies of any size up to a quarter
 * of the pool, each in one run of pages chosen at store time (free pages, then expired
 * entries, then the least recently used, never a pinned entry or one being copied into).
 * Real processes share the cache through MAP_SHARED memory where it matters (a reader's pin,
 * a builder killed inside its store). Every stored body carries a pattern of its own key, so
 * a run given to two entries at once shows up as a wrong byte.
 */
#include "buf.h"
#include "clock.h"
#include "fixture.h"
#include "harness.h"
#include "lock.h"
#include "result_body.h"
#include "result_cache.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The suite (its timeout) is declared with the cache's other tests, in test_gate_fifo.c. */

#define T0 (1000 * MG_NS_PER_SEC) /* a monotonic time for tests that pass the clock in */

/* Pages that entries own now, as the cache's read function counts them. */
static uint64_t pages_used(struct mg_cache_view *v)
{
    struct mg_cache_snapshot snap;
    mg_result_cache_read(v, getpid(), true, mg_monotonic_ns(), &snap);
    return snap.pages_used;
}

static struct mg_cache_view pool_cache(uint32_t entries, uint32_t pages, int64_t ttl_ns)
{
    size_t head = sizeof(struct mg_result_cache) + sizeof(struct mg_cache_entry) * entries;
    size_t bytes = head + (size_t)pages * MG_CACHE_PAGE;
    unsigned char *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(m, MAP_FAILED);
    struct mg_cache_view v = {(struct mg_result_cache *)m,
                              (struct mg_cache_entry *)(m + sizeof(struct mg_result_cache)),
                              m + head};
    mg_result_cache_init(&v, entries, pages, ttl_ns);
    return v;
}

/* The body stored under key: len bytes that depend on the key and the offset. */
static char *pattern(const char *key, size_t len)
{
    unsigned seed = 0;
    for (const char *c = key; *c; c++)
        seed = seed * 31 + (unsigned char)*c;
    char *body = malloc(len ? len : 1);
    cr_assert_not_null(body);
    for (size_t i = 0; i < len; i++)
        body[i] = (char)(seed + i * 7 + i / 4096);
    return body;
}

static size_t pages_bytes(unsigned pages)
{
    return (size_t)pages * MG_CACHE_PAGE - 100; /* the last page not quite full */
}

/* Claims key at now and stores its pattern of len bytes. */
static void put(struct mg_cache_view *v, const char *key, size_t len, int64_t now)
{
    struct mg_buf out;
    mg_buf_init(&out);
    uint64_t id;
    cr_assert_eq(mg_result_cache_lookup(v, getpid(), 0, key, now, &out, &id), MG_CACHE_CLAIMED,
                 "%s was already there", key);
    char *body = pattern(key, len);
    mg_result_cache_store(v, getpid(), id, body, len, now);
    free(body);
    mg_buf_free(&out);
}

/* True when key is a hit at now whose body is its whole pattern of len bytes; a miss's claim
 * is given up. */
static bool holds(struct mg_cache_view *v, const char *key, size_t len, int64_t now)
{
    struct mg_buf out;
    mg_buf_init(&out);
    uint64_t id;
    enum mg_cache_outcome r = mg_result_cache_relook(v, getpid(), 0, key, now, &out, &id);
    if (r == MG_CACHE_CLAIMED)
        mg_result_cache_abandon(v, getpid(), id);
    char *want = pattern(key, len);
    bool same = r == MG_CACHE_HIT && out.len == len && memcmp(out.data, want, len) == 0;
    free(want);
    mg_buf_free(&out);
    return same;
}

static const struct mg_cache_entry *entry_of(const struct mg_cache_view *v, const char *key)
{
    for (uint32_t i = 0; i < v->cache->entries; i++)
        if (v->entry[i].state != MG_CACHE_FREE && strcmp(v->entry[i].key, key) == 0)
            return &v->entry[i];
    return NULL;
}

/* Every run lies in the pool, holds its body, and shares no page with another run. */
static void assert_runs_apart(const struct mg_cache_view *v)
{
    uint32_t pages = v->cache->pages;
    unsigned char *owner = calloc(pages, 1);
    cr_assert_not_null(owner);
    for (uint32_t i = 0; i < v->cache->entries; i++) {
        const struct mg_cache_entry *e = &v->entry[i];
        if (e->state == MG_CACHE_FREE || e->page_count == 0)
            continue;
        cr_assert_leq((uint64_t)e->first_page + e->page_count, pages, "entry %u runs past", i);
        cr_assert_geq((uint64_t)e->page_count * MG_CACHE_PAGE, e->body_len);
        for (uint32_t p = e->first_page; p < e->first_page + e->page_count; p++) {
            cr_assert_eq(owner[p], 0, "page %u is in two runs", p);
            owner[p] = 1;
        }
    }
    free(owner);
}

/* fork(), with the child bound to end within 20 s whatever happens to this process. */
static pid_t fork_child(void)
{
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0)
        alarm(20);
    return pid;
}

/* 8 entries and a pool of 16 pages, full: a, b, c, d of 4 pages each, used in that order. */
static struct mg_cache_view full_of_four(int64_t ttl_ns)
{
    struct mg_cache_view v = pool_cache(8, 16, ttl_ns);
    for (int i = 0; i < 4; i++)
        put(&v, (const char[]){(char)('a' + i), 0}, pages_bytes(4), T0 + i);
    return v;
}

Test(result_cache, a_body_of_several_entries_worth_is_stored_and_served)
{
    /* 16 entries in 64 pages: the old fixed share was 4 pages (16 KiB) an entry. */
    struct mg_cache_view v = pool_cache(16, 64, 100 * MG_NS_PER_SEC);
    size_t len = 45000;
    put(&v, "paths|busy", len, T0);
    cr_expect_eq(atomic_load(&v.cache->stored), 1);
    cr_expect_eq(atomic_load(&v.cache->too_large), 0);
    const struct mg_cache_entry *e = entry_of(&v, "paths|busy");
    cr_assert_not_null(e);
    cr_expect_eq(e->page_count, (len + MG_CACHE_PAGE - 1) / MG_CACHE_PAGE);
    cr_expect(holds(&v, "paths|busy", len, T0 + 1));
    cr_expect_eq(atomic_load(&v.cache->hits), 0, "a relook counts nothing");
    struct mg_buf out;
    mg_buf_init(&out);
    uint64_t id;
    cr_expect_eq(mg_result_cache_lookup(&v, getpid(), 1, "paths|busy", T0 + 2, &out, &id),
                 MG_CACHE_HIT);
    cr_expect_eq(out.len, len);
    cr_expect_eq(atomic_load(&v.cache->hits), 1);
    mg_buf_free(&out);
}

Test(result_cache, a_body_longer_than_a_quarter_of_the_pool_is_served_but_not_stored)
{
    struct mg_cache_view v = pool_cache(16, 64, 100 * MG_NS_PER_SEC);
    cr_assert_eq(mg_result_cache_max_body(v.cache), 16 * MG_CACHE_PAGE);
    put(&v, "big", 16 * MG_CACHE_PAGE + 1, T0);
    cr_expect_eq(atomic_load(&v.cache->too_large), 1);
    cr_expect_eq(atomic_load(&v.cache->stored), 0);
    cr_expect_null(entry_of(&v, "big"), "a claim that stored nothing stays behind");
    cr_expect_eq(pages_used(&v), 0);
    put(&v, "big", 16 * MG_CACHE_PAGE, T0 + 1); /* the bound itself is stored */
    cr_expect_eq(atomic_load(&v.cache->stored), 1);
    cr_expect(holds(&v, "big", 16 * MG_CACHE_PAGE, T0 + 2));
    /* A pool too small for a quarter still keeps one page. */
    struct mg_cache_view tiny = pool_cache(1, 1, MG_NS_PER_SEC);
    cr_expect_eq(mg_result_cache_max_body(tiny.cache), MG_CACHE_PAGE);
}

Test(result_cache, a_store_takes_free_pages_before_evicting_anything)
{
    struct mg_cache_view v = full_of_four(100 * MG_NS_PER_SEC);
    cr_expect_eq(pages_used(&v), 16);
    cr_expect_eq(atomic_load(&v.cache->evicted), 0);
    cr_expect_eq(atomic_load(&v.cache->stored), 4);
    assert_runs_apart(&v);
    for (int i = 0; i < 4; i++)
        cr_expect(holds(&v, (const char[]){(char)('a' + i), 0}, pages_bytes(4), T0 + 10));
}

/* Free stretches of 3, 2 and 2 pages: a 2-page body goes into a 2-page one, so a 3-page body
 * after it still finds room without evicting anything (first fit would have split the 3). */
Test(result_cache, a_body_goes_into_the_smallest_free_stretch_that_holds_it)
{
    int64_t ttl = 100 * MG_NS_PER_SEC;
    struct mg_cache_view v = pool_cache(8, 16, ttl);
    put(&v, "a", pages_bytes(3), T0 + 50 * MG_NS_PER_SEC); /* pages 0-2 */
    put(&v, "b", pages_bytes(3), T0);                      /* 3-5, expires first */
    put(&v, "c", pages_bytes(2), T0 + 50 * MG_NS_PER_SEC); /* 6-7 */
    put(&v, "d", pages_bytes(2), T0);                      /* 8-9, expires first */
    put(&v, "e", pages_bytes(4), T0 + 50 * MG_NS_PER_SEC); /* 10-13; 14-15 free */
    cr_assert_eq(entry_of(&v, "b")->first_page, 3);
    cr_assert_eq(entry_of(&v, "d")->first_page, 8);
    /* b and d expire; looking them up again frees their pages, and nothing is built. */
    int64_t later = T0 + ttl + 1;
    cr_assert_not(holds(&v, "b", pages_bytes(3), later));
    cr_assert_not(holds(&v, "d", pages_bytes(2), later));
    cr_assert_eq(pages_used(&v), 9);
    put(&v, "f", pages_bytes(2), later);
    uint32_t f_at = entry_of(&v, "f")->first_page;
    cr_expect(f_at == 8 || f_at == 14, "f went to page %u", f_at);
    put(&v, "g", pages_bytes(3), later);
    cr_expect_eq(entry_of(&v, "g")->first_page, 3);
    cr_expect_eq(atomic_load(&v.cache->evicted), 0);
    assert_runs_apart(&v);
    cr_expect(holds(&v, "a", pages_bytes(3), later));
    cr_expect(holds(&v, "c", pages_bytes(2), later));
    cr_expect(holds(&v, "e", pages_bytes(4), later));
    cr_expect(holds(&v, "f", pages_bytes(2), later));
    cr_expect(holds(&v, "g", pages_bytes(3), later));
}

/* The pool is full; b expired, though it was used after the others: its pages go, and no
 * live entry is evicted. (The first entry is left free, so that the new key takes it and not
 * b's entry, which would free b's pages on its own.) */
Test(result_cache, a_store_evicts_expired_entries_before_live_ones)
{
    int64_t ttl = 100 * MG_NS_PER_SEC;
    struct mg_cache_view v = pool_cache(8, 16, ttl);
    struct mg_cache_pin unused;
    uint64_t first;
    cr_assert_eq(mg_result_cache_look(&v, getpid(), 0, "x", T0, true, &unused, &first),
                 MG_CACHE_CLAIMED);
    put(&v, "b", pages_bytes(4), T0);
    put(&v, "a", pages_bytes(4), T0 + 50 * MG_NS_PER_SEC);
    put(&v, "c", pages_bytes(4), T0 + 50 * MG_NS_PER_SEC);
    put(&v, "d", pages_bytes(4), T0 + 50 * MG_NS_PER_SEC);
    cr_assert(holds(&v, "b", pages_bytes(4), T0 + 99 * MG_NS_PER_SEC)); /* b: the newest use */
    mg_result_cache_abandon(&v, getpid(), first);
    int64_t later = T0 + 120 * MG_NS_PER_SEC;
    put(&v, "e", pages_bytes(4), later);
    cr_expect_eq(atomic_load(&v.cache->stored), 5);
    cr_expect_eq(atomic_load(&v.cache->evicted), 0, "a live entry was evicted");
    cr_expect_null(entry_of(&v, "b"));
    assert_runs_apart(&v);
    cr_expect(holds(&v, "a", pages_bytes(4), later));
    cr_expect(holds(&v, "c", pages_bytes(4), later));
    cr_expect(holds(&v, "d", pages_bytes(4), later));
    cr_expect(holds(&v, "e", pages_bytes(4), later));
}

/*
 * A forked reader pins b, the least recently used entry, and holds the pin (its copy not
 * made) while this process stores a body that needs an entry's pages: c, the least recently
 * used unpinned one, is evicted; b's pages are left alone, and the reader's late copy is
 * whole.
 */
Test(result_cache, a_store_evicts_the_least_recently_used_and_never_a_pinned_entry)
{
    struct mg_cache_view v = full_of_four(100 * MG_NS_PER_SEC);
    cr_assert(holds(&v, "a", pages_bytes(4), T0 + 10)); /* now b, c, d is the LRU order */
    int pinned[2], go[2];
    cr_assert_eq(pipe(pinned), 0);
    cr_assert_eq(pipe(go), 0);
    pid_t reader = fork_child();
    if (reader == 0) {
        struct mg_cache_pin pin;
        uint64_t id;
        if (mg_result_cache_look(&v, getpid(), 1, "b", T0 + 11, true, &pin, &id) != MG_CACHE_HIT)
            _exit(2);
        char c = 'p';
        if (write(pinned[1], &c, 1) != 1 || read(go[0], &c, 1) != 1)
            _exit(3);
        char *body = malloc(pin.len), *want = pattern("b", pages_bytes(4));
        bool whole = body && mg_result_cache_copy(&v, getpid(), &pin, body);
        _exit(whole && pin.len == pages_bytes(4) && memcmp(body, want, pin.len) == 0 ? 0 : 4);
    }
    char c;
    cr_assert_eq(read(pinned[0], &c, 1), 1);
    struct mg_cache_entry *b = (struct mg_cache_entry *)entry_of(&v, "b");
    cr_assert_eq(b->pins, 1);
    b->used_monotonic_ns = T0 + 1; /* the reader's hit made b the newest: make it the LRU again */
    uint32_t b_first = b->first_page;
    put(&v, "e", pages_bytes(4), T0 + 12);
    cr_expect_eq(atomic_load(&v.cache->evicted), 1);
    cr_expect_null(entry_of(&v, "c"), "c, the least recently used unpinned entry, stays");
    cr_expect_eq(entry_of(&v, "b"), b, "the pinned entry was evicted");
    cr_expect_eq(b->first_page, b_first);
    cr_assert_eq(write(go[1], &c, 1), 1);
    int status;
    cr_assert_eq(waitpid(reader, &status, 0), reader);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the reader's copy was damaged (%d)",
              status);
    assert_runs_apart(&v);
    cr_expect(holds(&v, "a", pages_bytes(4), T0 + 13));
    cr_expect(holds(&v, "b", pages_bytes(4), T0 + 13));
    cr_expect(holds(&v, "d", pages_bytes(4), T0 + 13));
    cr_expect(holds(&v, "e", pages_bytes(4), T0 + 13));
}

/* A reader gone longer than a pin lasts holds nothing: its pages may go to another entry,
 * and its late copy says it is not valid. */
Test(result_cache, a_copy_whose_pages_went_to_another_entry_is_refused)
{
    struct mg_cache_view v = full_of_four(1000 * MG_NS_PER_SEC);
    struct mg_cache_pin pin;
    uint64_t id;
    cr_assert_eq(mg_result_cache_look(&v, getpid(), 0, "a", T0 + 4, true, &pin, &id), MG_CACHE_HIT);
    ((struct mg_cache_entry *)entry_of(&v, "a"))->used_monotonic_ns = T0; /* the LRU again */
    put(&v, "e", pages_bytes(4), T0 + (MG_CACHE_PIN_STALE_S + 1) * MG_NS_PER_SEC);
    cr_expect_null(entry_of(&v, "a"), "a stale pin still held its entry");
    char *body = malloc(pin.len);
    cr_expect_not(mg_result_cache_copy(&v, getpid(), &pin, body));
    free(body);
}

/*
 * Fragmentation: a full pool of small bodies, then many more small ones (each takes an
 * entry from the least recently used and a run wherever it fits), then a large body that
 * needs a run across several of them: every store is kept, no two runs share a page, and
 * every body still cached reads back whole.
 */
Test(result_cache, many_small_and_a_large_store_after_evictions_succeed)
{
    struct mg_cache_view v = pool_cache(32, 64, 1000 * MG_NS_PER_SEC);
    char key[16];
    int64_t t = T0;
    unsigned stores = 0;
    for (int i = 0; i < 96; i++, stores++) {
        snprintf(key, sizeof key, "s%d", i);
        put(&v, key, pages_bytes(1 + (unsigned)(i * 7 % 5) % 3), t++);
        assert_runs_apart(&v);
    }
    cr_expect_gt(atomic_load(&v.cache->evicted), 0);
    put(&v, "large", pages_bytes(16), t++);
    stores++;
    cr_expect_eq(atomic_load(&v.cache->stored), stores, "a store was dropped");
    cr_expect_eq(atomic_load(&v.cache->too_large), 0);
    assert_runs_apart(&v);
    cr_expect(holds(&v, "large", pages_bytes(16), t));
    unsigned kept = 0;
    for (int i = 0; i < 96; i++) {
        snprintf(key, sizeof key, "s%d", i);
        if (entry_of(&v, key)) {
            cr_expect(holds(&v, key, pages_bytes(1 + (unsigned)(i * 7 % 5) % 3), t), "%s", key);
            kept++;
        }
    }
    cr_expect_gt(kept, 0);
    /* And small ones again, around the large run. */
    for (int i = 0; i < 40; i++) {
        snprintf(key, sizeof key, "t%d", i);
        put(&v, key, pages_bytes(2), t++);
    }
    assert_runs_apart(&v);
    cr_expect_eq(atomic_load(&v.cache->stored), stores + 40);
}

/* The builder's store stops inside its last critical section (its run reserved, its body
 * copied, not yet READY), as a worker killed -9 there would: the lock and the run go back. */
static const void *stop_lo, *stop_hi;

static void stop_again(int sig)
{
    (void)sig;
    mg_lock_test_stop_inside(stop_lo, stop_hi);
}

static pid_t wait_stopped(pid_t pid)
{
    int status;
    pid_t r = waitpid(pid, &status, WUNTRACED);
    cr_assert(r == pid && WIFSTOPPED(status), "the builder did not stop (%d)", status);
    return r;
}

Test(result_cache, a_builder_killed_inside_its_store_is_reclaimed_with_its_pages)
{
    struct mg_cache_view v = pool_cache(8, 16, 100 * MG_NS_PER_SEC);
    pid_t builder = fork_child();
    if (builder == 0) {
        struct mg_cache_pin pin;
        uint64_t id;
        if (mg_result_cache_look(&v, getpid(), 0, "big", mg_monotonic_ns(), true, &pin, &id) !=
            MG_CACHE_CLAIMED)
            _exit(2);
        /* Stops in the store's first critical section; SIGCONT arms the next one. */
        stop_lo = &v.cache->lock;
        stop_hi = &v.cache->lock + 1;
        struct sigaction sa = {.sa_handler = stop_again};
        sigaction(SIGCONT, &sa, NULL);
        mg_lock_test_stop_inside(stop_lo, stop_hi);
        char *body = pattern("big", pages_bytes(4));
        mg_result_cache_store(&v, getpid(), id, body, pages_bytes(4), mg_monotonic_ns());
        _exit(0);
    }
    wait_stopped(builder);
    cr_assert_eq(kill(builder, SIGCONT), 0);
    wait_stopped(builder);
    const struct mg_cache_entry *e = entry_of(&v, "big");
    cr_assert_not_null(e);
    cr_expect_eq(e->state, MG_CACHE_BUILDING);
    cr_expect_eq(e->page_count, 4, "the run is reserved");
    cr_expect_eq(atomic_load(&v.cache->lock.owner_pid), builder);
    cr_assert_eq(kill(builder, SIGKILL), 0);
    int status;
    cr_assert_eq(waitpid(builder, &status, 0), builder);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

    cr_expect_eq(mg_result_cache_reclaim(&v, builder), 1);
    cr_expect_eq(atomic_load(&v.cache->lock.owner_pid), 0);
    cr_expect_null(entry_of(&v, "big"));
    cr_expect_eq(pages_used(&v), 0);
    cr_expect_eq(atomic_load(&v.cache->reclaimed), 1);
    /* All 16 pages are free again: four 4-page bodies fit without an eviction. */
    int64_t now = mg_monotonic_ns();
    put(&v, "big", pages_bytes(4), now);
    put(&v, "x", pages_bytes(4), now);
    put(&v, "y", pages_bytes(4), now);
    put(&v, "z", pages_bytes(4), now);
    cr_expect_eq(atomic_load(&v.cache->evicted), 0);
    cr_expect(holds(&v, "big", pages_bytes(4), now + 1));
}

/* One worker's share of the stress below: ops lookups of 12 keys, each key's body always the
 * same size (1 to 8 pages), built on a miss, checked on a hit. Returns the exit code. */
static int stress_worker(struct mg_cache_view *v, unsigned seed, int ops)
{
    char key[16];
    struct mg_buf out;
    mg_buf_init(&out);
    for (int op = 0; op < ops; op++) {
        seed = seed * 1103515245u + 12345u;
        unsigned k = (seed >> 16) % 12;
        snprintf(key, sizeof key, "k%u", k);
        size_t len = pages_bytes(1 + k % 8);
        uint64_t id;
        out.len = 0;
        enum mg_cache_outcome r =
            mg_result_cache_lookup(v, getpid(), 0, key, mg_monotonic_ns(), &out, &id);
        if (r == MG_CACHE_BUSY)
            r = mg_result_cache_wait(v, getpid(), 0, key, mg_monotonic_ns() + 5 * MG_NS_PER_SEC,
                                     NULL, NULL, &out, &id);
        char *want = pattern(key, len);
        if (r == MG_CACHE_HIT && (out.len != len || memcmp(out.data, want, len) != 0))
            return 1; /* a torn or foreign body */
        if (r == MG_CACHE_CLAIMED)
            mg_result_cache_store(v, getpid(), id, want, len, mg_monotonic_ns());
        free(want);
    }
    mg_buf_free(&out);
    return 0;
}

/* Three processes look up, build and read 12 keys of 1 to 8 pages in a pool of 24 (entries
 * expire after 20 ms): runs are taken from under each other all the time, and no hit is ever
 * anything but its key's whole body. */
Test(result_cache, concurrent_builders_and_readers_never_see_a_torn_body)
{
    struct mg_cache_view v = pool_cache(8, 32, 20 * MG_NS_PER_MS);
    pid_t kids[3];
    for (unsigned i = 0; i < 3; i++) {
        kids[i] = fork_child();
        if (kids[i] == 0)
            _exit(stress_worker(&v, 7 + i, 400));
    }
    for (unsigned i = 0; i < 3; i++) {
        int status;
        cr_assert_eq(waitpid(kids[i], &status, 0), kids[i]);
        cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "worker %u: status %d", i, status);
    }
    cr_expect_gt(atomic_load(&v.cache->stored), 0);
    cr_expect_gt(atomic_load(&v.cache->hits), 0);
    cr_expect_eq(atomic_load(&v.cache->too_large), 0);
    assert_runs_apart(&v);
}

/* A helper thread that follows another worker's build (group_table.c: a table being built,
 * no cancel function) sleeps until the build lands, instead of waking every 20 ms: while the
 * builder takes 2 s, the follower sleeps a handful of times (it used to wake 100 times), and
 * it is answered with the stored body as soon as it is stored. */
Test(result_cache, a_follower_sleeps_until_the_build_lands_and_is_answered_then)
{
    struct mg_cache_view v = pool_cache(8, 16, 60 * MG_NS_PER_SEC);
    _Atomic int64_t *stored_at =
        mmap(NULL, sizeof *stored_at, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(stored_at, MAP_FAILED);
    int go[2];
    cr_assert_eq(pipe(go), 0);
    pid_t builder = fork_child();
    if (builder == 0) {
        struct mg_buf out;
        mg_buf_init(&out);
        uint64_t id;
        if (mg_result_cache_lookup(&v, getpid(), 1, "slow", mg_monotonic_ns(), &out, &id) !=
            MG_CACHE_CLAIMED)
            _exit(1);
        if (write(go[1], "c", 1) != 1)
            _exit(2);
        struct timespec hold = {2, 0};
        nanosleep(&hold, NULL); /* the build takes long */
        char *body = pattern("slow", pages_bytes(2));
        atomic_store(stored_at, mg_monotonic_ns());
        mg_result_cache_store(&v, getpid(), id, body, pages_bytes(2), mg_monotonic_ns());
        _exit(0);
    }
    char c;
    cr_assert_eq(read(go[0], &c, 1), 1, "the builder did not claim the key");
    struct mg_buf out;
    mg_buf_init(&out);
    uint64_t id = 0;
    uint64_t sleeps = mg_futex_wait_calls();
    enum mg_cache_outcome r = mg_result_cache_wait(
        &v, getpid(), 0, "slow", mg_monotonic_ns() + 60 * MG_NS_PER_SEC, NULL, NULL, &out, &id);
    int64_t answered = mg_monotonic_ns();
    uint64_t woke = mg_futex_wait_calls() - sleeps;
    cr_assert_eq(r, MG_CACHE_HIT, "outcome %d", (int)r);
    char *want = pattern("slow", pages_bytes(2));
    cr_expect(out.len == pages_bytes(2) && memcmp(out.data, want, out.len) == 0);
    free(want);
    cr_expect_leq(woke, 5, "the follower woke %llu times during the build",
                  (unsigned long long)woke);
    cr_expect_lt(answered - atomic_load(stored_at), 2 * MG_NS_PER_SEC,
                 "answered %lld ms after the store",
                 (long long)((answered - atomic_load(stored_at)) / MG_NS_PER_MS));
    int status;
    cr_assert_eq(waitpid(builder, &status, 0), builder);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "builder status %d", status);
    mg_buf_free(&out);
    close(go[0]);
    close(go[1]);
    munmap(stored_at, sizeof *stored_at);
}

/* --- end to end: the real server on CoreScope's fixture ---------------------------------- */

#define FIXTURE_DB MESHGATE_SOURCE_DIR "/../shared/data/corescope-e2e-fixture.db"

/* The value of a metric without labels in a /metrics body; -1 when absent. */
static long long metric(const char *body, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = body; (p = strstr(p, name)) != NULL; p += n)
        if ((p == body || p[-1] == '\n') && p[n] == ' ')
            return strtoll(p + n + 1, NULL, 10);
    return -1;
}

struct relay_wait {
    int port;
};

/* The start-up builds of the relay table and the hash-size table are stored (their counters
 * in /metrics). */
static bool relay_stored(void *arg)
{
    const struct relay_wait *w = arg;
    struct mg_test_response r;
    if (!mg_test_get(w->port, "/metrics", NULL, &r))
        return false;
    bool stored = r.status == 200 &&
                  metric(r.body, "meshgate_reach_cache_relay_builds_total") >= 1 &&
                  metric(r.body, "meshgate_reach_cache_hash_size_builds_total") >= 1 &&
                  metric(r.body, "meshgate_reach_cache_relay_probe_builds_total") >= 1 &&
                  metric(r.body, "meshgate_reach_cache_usefulness_builds_total") >= 1 &&
                  metric(r.body, "meshgate_reach_cache_multibyte_builds_total") >= 1;
    mg_test_response_free(&r);
    return stored;
}

/*
 * The fleet clock-skew list of the fixture (some 60 KB) in a 512 KiB pool of 128 entries:
 * four times what an entry's fixed share was (4 KiB, a body outgrew it and was rebuilt per
 * request), within a quarter of the pool. The second request is a hit, and the dump shows
 * the entry's run of pages.
 */
Test(result_cache, a_report_larger_than_an_entrys_share_of_the_pool_is_a_hit_the_second_time)
{
    if (access(FIXTURE_DB, R_OK) != 0)
        cr_skip_test("%s not present: the report comes from CoreScope's end-to-end database, "
                     "which CI provides (see ../shared/data/README.md)",
                     FIXTURE_DB);
    char dir[128], db[256], err[512] = "";
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/fresh.db", dir);
    cr_assert_eq(mg_fixture_freshen(FIXTURE_DB, db, (int64_t)time(NULL), err, sizeof err), 0, "%s",
                 err);
    const char *env[] = {"MESHGATE_REACH_CACHE_BYTES=524288", "MESHGATE_REACH_CACHE_ENTRIES=128",
                         NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db, env));
    size_t share = 524288 / 128, pool_max = 524288 / MG_CACHE_POOL_SHARE;
    /* The relay, hash-size, usefulness and multi-byte tables the first worker builds at its
     * start (group_table.h) are stored first. */
    struct relay_wait rw = {s.port};
    cr_assert(mg_test_wait_until(relay_stored, &rw, 60000, 20), "no relay or hash-size table");

    struct mg_test_response first, second, metrics;
    cr_assert(mg_test_get(s.port, "/api/nodes/clock-skew", NULL, &first));
    cr_assert_eq(first.status, 200, "%s", first.body);
    cr_assert_gt(first.body_len, share, "the report fits an entry's old share: no proof");
    cr_assert_leq(first.body_len, pool_max, "the report outgrew a quarter of the pool");
    cr_assert(mg_test_get(s.port, "/api/nodes/clock-skew", NULL, &second));
    cr_expect_eq(second.status, 200);
    cr_expect(second.body_len == first.body_len &&
                  memcmp(second.body, first.body, first.body_len) == 0,
              "the cached body differs from the built one");
    cr_assert(mg_test_get(s.port, "/metrics", NULL, &metrics));
    cr_expect_eq(metric(metrics.body, "meshgate_reach_cache_hits_total"), 1, "%s", metrics.body);
    cr_expect_eq(metric(metrics.body, "meshgate_reach_cache_stored_total"), 1);
    cr_expect_eq(metric(metrics.body, "meshgate_reach_cache_too_large_total"), 0);

    char cmd[512], want[160];
    static char out[1 << 17];
    snprintf(cmd, sizeof cmd, "'%s/meshgate-shm' --json --name '%s' 2>&1", MESHGATE_BUILD_DIR,
             s.shm_name);
    cr_expect_eq(mg_test_shell(cmd, out, sizeof out), 0, "%s", out);
    /* Every stored entry's run of pages: the group's tables (whichever else the group stored
     * meanwhile, in whatever order their builds ended) and the report's. The runs do not
     * overlap, the report's is as long as its body, and the pages in use are the runs' sum. */
    static const char *const tables[] = {"\"key\":\"relay|", "\"key\":\"hashsizes|",
                                         "\"key\":\"relayprobe|", "\"key\":\"usefulness|",
                                         "\"key\":\"multibyte|"};
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++)
        cr_expect(strstr(out, tables[i]), "no %s in %s", tables[i], out);
    enum { RUNS_MAX = 128 };
    unsigned run_first[RUNS_MAX], run_pages[RUNS_MAX], runs = 0;
    size_t used = 0;
    for (const char *at = strstr(out, "\"first_page\":"); at && runs < RUNS_MAX;
         at = strstr(at + 1, "\"first_page\":")) {
        cr_assert_eq(
            sscanf(at, "\"first_page\":%u,\"pages\":%u", &run_first[runs], &run_pages[runs]), 2,
            "%s", out);
        used += run_pages[runs];
        for (unsigned k = 0; k < runs; k++)
            cr_expect(run_first[runs] + run_pages[runs] <= run_first[k] ||
                          run_first[k] + run_pages[k] <= run_first[runs],
                      "runs %u+%u and %u+%u overlap in %s", run_first[runs], run_pages[runs],
                      run_first[k], run_pages[k], out);
        runs++;
    }
    const char *report = strstr(out, "\"key\":\"nodes|clock-skew|");
    unsigned report_first = 0, report_pages = 0;
    cr_assert(report && sscanf(strstr(report, "\"first_page\":"), "\"first_page\":%u,\"pages\":%u",
                               &report_first, &report_pages) == 2,
              "no report in %s", out);
    cr_expect_eq(report_pages, (first.body_len + MG_CACHE_PAGE - 1) / MG_CACHE_PAGE);
    snprintf(want, sizeof want, "\"pages\":128,\"pages_used\":%zu,\"max_body_bytes\":%zu,", used,
             pool_max);
    cr_expect(strstr(out, want), "no %s in %s", want, out);
    mg_test_response_free(&first);
    mg_test_response_free(&second);
    mg_test_response_free(&metrics);
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
    mg_test_rmdir(dir);
}

/* SPDX-License-Identifier: ISC */
/*
 * Reach reports through the cold-scan gate and the shared cache, with real worker
 * processes. Builds are made slow, deterministically, by holding the database with an
 * exclusive lock: a builder then waits on the lock while holding its permit.
 */
#include "harness.h"
#include "inproc.h"
#include "jobs.h"
#include "node_hash_sizes.h"
#include "process_table.h"

#include "gate_fifo.h"
#include "result_cache.h"
#include "segment.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The summaries' first pass takes a cold permit too; these tests count reach builds' permits. */
#define NO_SUMMARIES "MESHGATE_TX_SUMMARIES=0"

TestSuite(reach_gate, .timeout = 90);

#define KEYS 12
static char dir[128], db_path[256];
static char keys[KEYS][65];

/* Twelve repeaters with distinct first bytes (so each has a reliable token), heard along
 * paths through each other within the last hour. */
static void make_db(void)
{
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db_path, sizeof db_path, "%s/reach.db", dir);
    mg_test_make_reach_db(db_path, keys, KEYS);
}

static void remove_db(void)
{
    mg_test_rmdir(dir);
}

static void reach_path(char *out, size_t cap, int key)
{
    snprintf(out, cap, "/api/nodes/%s/reach?days=7", keys[key]);
}

struct call {
    int port;
    int key;
    int status;
    char retry_after[16];
    char cache_control[32];
    char *body;
};

static void *call(void *p)
{
    struct call *c = p;
    char path[128];
    reach_path(path, sizeof path, c->key);
    struct mg_test_response r;
    if (!mg_test_get(c->port, path, NULL, &r)) {
        c->status = -1;
        return NULL;
    }
    c->status = r.status;
    mg_test_header(&r, "Retry-After", c->retry_after, sizeof c->retry_after);
    mg_test_header(&r, "Cache-Control", c->cache_control, sizeof c->cache_control);
    c->body = r.body;
    return NULL;
}

static sqlite3 *lock_db(void)
{
    sqlite3 *w;
    cr_assert_eq(mg_test_sqlite_open(db_path, &w), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(w, "BEGIN EXCLUSIVE", NULL, NULL, NULL), SQLITE_OK);
    return w;
}

static void unlock_db(sqlite3 *w)
{
    sqlite3_exec(w, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(w);
}

static void attach(struct mg_test_server *s, struct mg_segment *seg)
{
    char err[256];
    cr_assert_eq(mg_segment_attach(seg, s->shm_name, true, err, sizeof err), 0, "%s", err);
}

struct refusals_wait {
    struct mg_fifo_gate *gate;
    uint64_t want;
};

static bool refusals_reached(void *arg)
{
    const struct refusals_wait *w = arg;
    return atomic_load(&w->gate->refused_full) + atomic_load(&w->gate->refused_timeout) >= w->want;
}

static bool wait_until(volatile uint32_t *value, uint32_t want, int ms)
{
    int64_t give_up = mg_test_now_ms() + ms;
    while (*value != want && mg_test_now_ms() < give_up)
        mg_test_sleep_ms(2);
    return *value == want;
}

/* The body without its "window" (whose "since" moves with the clock). */
static void strip_window(char *body)
{
    char *w = strstr(body, "\"window\":{");
    char *end = w ? strchr(w, '}') : NULL;
    if (w && end)
        memmove(w, end + 1, strlen(end + 1) + 1);
}

/* These tests measure the cold gate alone: the anonymous line in front of it (issue 6) is
 * off, as it is tested on its own and together with this gate in test_anon.c. */
#define ANON_LINE_OFF "MESHGATE_ANON_CONCURRENCY=0"

Test(reach_gate, many_distinct_cold_keys_never_exceed_the_cap, .init = make_db, .fini = remove_db)
{
    const char *env[] = {NO_SUMMARIES,
                         ANON_LINE_OFF,
                         "MESHGATE_WORKERS=16",
                         "MESHGATE_REACH_COLD_QUEUE=12",
                         "MESHGATE_REACH_COLD_WAIT_MS=20000",
                         "MESHGATE_DB_BUSY_TIMEOUT_MS=20000",
                         NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db_path, env));
    struct mg_segment seg;
    attach(&s, &seg);
    sqlite3 *w = lock_db();
    struct call calls[KEYS];
    pthread_t t[KEYS];
    for (int i = 0; i < KEYS; i++) {
        calls[i] = (struct call){.port = s.port, .key = i};
        pthread_create(&t[i], NULL, call, &calls[i]);
    }
    /* Two hold permits (waiting on the lock), the rest wait in line. */
    cr_expect(wait_until(&seg.cold->in_flight, 2, 30000));
    cr_expect(wait_until(&seg.cold->waiting, KEYS - 2, 30000), "waiting %u", seg.cold->waiting);
    unlock_db(w);
    for (int i = 0; i < KEYS; i++) {
        pthread_join(t[i], NULL);
        cr_expect_eq(calls[i].status, 200, "key %d: %d %s", i, calls[i].status, calls[i].body);
        free(calls[i].body);
    }
    cr_expect_eq(atomic_load(&seg.cold->peak), 2, "peak %u", atomic_load(&seg.cold->peak));
    cr_expect_eq(atomic_load(&seg.cold->acquired), KEYS);
    cr_expect_eq(seg.cold->in_flight, 0);
    mg_segment_detach(&seg);
    mg_test_server_stop(&s, 5000);
}

Test(reach_gate, identical_keys_in_different_workers_take_one_permit, .init = make_db,
     .fini = remove_db)
{
    const char *env[] = {NO_SUMMARIES,
                         ANON_LINE_OFF,
                         "MESHGATE_WORKERS=12",
                         "MESHGATE_REACH_COLD_QUEUE=8",
                         "MESHGATE_REACH_COLD_WAIT_MS=20000",
                         "MESHGATE_DB_BUSY_TIMEOUT_MS=20000",
                         NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db_path, env));
    struct mg_segment seg;
    attach(&s, &seg);
    sqlite3 *w = lock_db();
    enum { SAME = 6 };
    struct call calls[SAME];
    pthread_t t[SAME];
    for (int i = 0; i < SAME; i++) {
        calls[i] = (struct call){.port = s.port, .key = 3};
        pthread_create(&t[i], NULL, call, &calls[i]);
    }
    cr_expect(wait_until(&seg.cold->waiting, SAME - 1, 30000), "followers %u", seg.cold->waiting);
    unlock_db(w);
    for (int i = 0; i < SAME; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < SAME; i++) {
        cr_expect_eq(calls[i].status, 200);
        cr_expect_str_eq(calls[i].body, calls[0].body, "every request answers the same body");
    }
    for (int i = 0; i < SAME; i++)
        free(calls[i].body);
    cr_expect_eq(atomic_load(&seg.cold->acquired), 1, "one build for one key");
    cr_expect_eq(atomic_load(&seg.cache.cache->misses), 1);
    cr_expect_eq(atomic_load(&seg.cache.cache->coalesced), SAME - 1);
    mg_segment_detach(&seg);
    mg_test_server_stop(&s, 5000);
}

Test(reach_gate, saturation_answers_429_warm_keys_answer_and_nothing_refused_is_cached,
     .init = make_db, .fini = remove_db)
{
    const char *env[] = {NO_SUMMARIES,
                         ANON_LINE_OFF,
                         "MESHGATE_WORKERS=8",
                         "MESHGATE_REACH_COLD_QUEUE=2",
                         "MESHGATE_REACH_COLD_WAIT_MS=400",
                         "MESHGATE_DB_BUSY_TIMEOUT_MS=20000",
                         NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db_path, env));
    struct mg_segment seg;
    attach(&s, &seg);
    /* Key 0 warm, and the unsaturated body of key 5 for later. */
    struct call warmup = {.port = s.port, .key = 0}, before = {.port = s.port, .key = 5};
    call(&warmup);
    cr_assert_eq(warmup.status, 200);
    free(warmup.body);

    sqlite3 *w = lock_db();
    enum { COLD = 6 };
    struct call calls[COLD];
    pthread_t t[COLD];
    for (int i = 0; i < COLD; i++) {
        calls[i] = (struct call){.port = s.port, .key = 4 + i};
        pthread_create(&t[i], NULL, call, &calls[i]);
    }
    cr_expect(wait_until(&seg.cold->in_flight, 2, 30000));
    /* Every permit is held: a warm key still answers at once. */
    int64_t t0 = mg_test_now_ms();
    struct call warm = {.port = s.port, .key = 0};
    call(&warm);
    cr_expect_eq(warm.status, 200);
    /* A warm answer that went to the full line would be a 429: the status tells. The bound
     * only says it did not wait for the builds (held on the lock for as long as we like). */
    cr_expect_lt(mg_test_now_ms() - t0, 20000, "the warm answer waited");
    free(warm.body);
    /* Every request past the two permits is refused: line full, or its 400 ms wait ran out. */
    struct refusals_wait rw = {seg.cold, COLD - 2};
    cr_expect(mg_test_wait_until(refusals_reached, &rw, 30000, 5), "the line was not refused");
    uint64_t stored_before = atomic_load(&seg.cache.cache->stored);
    int refused = 0;
    unlock_db(w);
    for (int i = 0; i < COLD; i++) {
        pthread_join(t[i], NULL);
        if (calls[i].status == 429) {
            refused++;
            cr_expect_str_eq(calls[i].retry_after, "2");
            cr_expect_str_eq(calls[i].cache_control, "no-store");
            cr_expect(strstr(calls[i].body, "\"retryAfter\":2}"), "%s", calls[i].body);
        } else {
            cr_expect_eq(calls[i].status, 200, "key %d: %d", 4 + i, calls[i].status);
        }
    }
    cr_expect_eq(refused, COLD - 2, "2 built, the rest refused (line full or wait ran out)");
    cr_expect_eq(atomic_load(&seg.cold->peak), 2);
    cr_expect_geq(atomic_load(&seg.cold->refused_full), 1);
    cr_expect_geq(atomic_load(&seg.cold->refused_timeout), 1);
    cr_expect_eq(atomic_load(&seg.cache.cache->stored), stored_before + 2,
                 "refused requests stored something");

    /* After recovery, a refused key answers the same body as an unsaturated build. */
    int refused_key = -1;
    for (int i = 0; i < COLD; i++)
        if (calls[i].status == 429)
            refused_key = 4 + i;
    cr_assert_geq(refused_key, 0);
    struct call again = {.port = s.port, .key = refused_key};
    call(&again);
    cr_expect_eq(again.status, 200);
    mg_segment_detach(&seg);
    mg_test_server_stop(&s, 5000);

    /* The unsaturated body: a fresh server, nothing held. */
    struct mg_test_server fresh;
    cr_assert(mg_test_server_start(&fresh, db_path, NULL));
    before.port = fresh.port;
    before.key = refused_key;
    call(&before);
    cr_expect_eq(before.status, 200);
    strip_window(again.body);
    strip_window(before.body);
    cr_expect_str_eq(again.body, before.body);
    free(again.body);
    free(before.body);
    for (int i = 0; i < COLD; i++)
        free(calls[i].body);
    mg_test_server_stop(&fresh, 5000);
}

Test(reach_gate, a_waiter_whose_client_leaves_frees_its_place, .init = make_db, .fini = remove_db)
{
    const char *env[] = {NO_SUMMARIES,
                         ANON_LINE_OFF,
                         "MESHGATE_WORKERS=8",
                         "MESHGATE_REACH_COLD_QUEUE=2",
                         "MESHGATE_REACH_COLD_WAIT_MS=20000",
                         "MESHGATE_DB_BUSY_TIMEOUT_MS=20000",
                         NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db_path, env));
    struct mg_segment seg;
    attach(&s, &seg);
    sqlite3 *w = lock_db();
    struct call holders[2];
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        holders[i] = (struct call){.port = s.port, .key = i};
        pthread_create(&t[i], NULL, call, &holders[i]);
    }
    cr_assert(wait_until(&seg.cold->in_flight, 2, 30000));
    int fd = mg_test_connect(s.port);
    char req[256], path[128];
    reach_path(path, sizeof path, 7);
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
    cr_assert(mg_test_send(fd, req, strlen(req)));
    cr_assert(wait_until(&seg.cold->waiting, 1, 30000), "the third request is not in line");
    close(fd);
    cr_expect(wait_until(&seg.cold->waiting, 0, 2000), "the place was not freed");
    cr_expect_eq(atomic_load(&seg.cold->cancelled), 1);
    unlock_db(w);
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        cr_expect_eq(holders[i].status, 200);
        free(holders[i].body);
    }
    mg_segment_detach(&seg);
    mg_test_server_stop(&s, 5000);
}

Test(reach_gate, a_failed_build_gives_its_permit_back_and_caches_nothing, .init = make_db,
     .fini = remove_db)
{
    const char *env[] = {NO_SUMMARIES, "MESHGATE_DB_BUSY_TIMEOUT_MS=200", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db_path, env));
    struct mg_segment seg;
    attach(&s, &seg);
    sqlite3 *w = lock_db();
    struct call c = {.port = s.port, .key = 2};
    call(&c); /* the database stays busy past the busy timeout: the build fails */
    cr_expect(c.status == 500 || c.status == 503, "status %d", c.status);
    free(c.body);
    cr_expect_eq(seg.cold->in_flight, 0, "the failed build kept its permit");
    cr_expect_eq(atomic_load(&seg.cold->acquired), 1);
    cr_expect_eq(atomic_load(&seg.cache.cache->stored), 0);
    unlock_db(w);
    c = (struct call){.port = s.port, .key = 2};
    call(&c);
    cr_expect_eq(c.status, 200, "the error was cached");
    free(c.body);
    mg_segment_detach(&seg);
    mg_test_server_stop(&s, 5000);
}

Test(reach_gate, killing_a_builder_returns_its_permit_and_its_follower_still_gets_the_answer,
     .init = make_db, .fini = remove_db)
{
    /* With the anonymous line on and the workers outnumbering every helper the gates can
     * keep busy (12 > 8 + 2 + 1), the builder's worker leaves new connections to the others,
     * so followers land elsewhere and survive it (see worker.c, yield_when_busy). */
    const char *env[] = {NO_SUMMARIES,
                         "MESHGATE_WORKERS=12",
                         "MESHGATE_ANON_CONCURRENCY=8",
                         "MESHGATE_ANON_WAIT_MS=20000",
                         "MESHGATE_REACH_COLD_QUEUE=6",
                         "MESHGATE_REACH_COLD_WAIT_MS=20000",
                         "MESHGATE_DB_BUSY_TIMEOUT_MS=20000",
                         NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db_path, env));
    struct mg_segment seg;
    attach(&s, &seg);
    sqlite3 *w = lock_db();
    struct call builder = {.port = s.port, .key = 9};
    pthread_t tb;
    pthread_create(&tb, NULL, call, &builder);
    cr_assert(wait_until(&seg.cold->in_flight, 1, 30000));
    int victim = 0;
    for (int i = 0; i < MG_FIFO_HOLDERS_MAX && !victim; i++)
        victim = seg.cold->holder[i].pid;
    cr_assert_gt(victim, 0);
    /* Identical requests follow the build; keep adding until one is in another worker
     * (a worker serves many connections, and one in the victim dies with it). */
    enum { MOST = 6 };
    struct call followers[MOST];
    pthread_t tf[MOST];
    int started = 0, survivor = -1;
    while (started < MOST && survivor < 0) {
        followers[started] = (struct call){.port = s.port, .key = 9};
        pthread_create(&tf[started], NULL, call, &followers[started]);
        started++;
        cr_assert(wait_until(&seg.cold->waiting, (uint32_t)started, 30000), "no follower");
        for (int i = 0; i < MG_FIFO_WAITERS_MAX; i++)
            if (seg.cold->waiter[i].pid != 0 && seg.cold->waiter[i].pid != victim)
                survivor = 1;
    }
    cr_assert_eq(survivor, 1, "every follower landed in the builder's worker");
    kill(victim, SIGKILL);
    pthread_join(tb, NULL);
    cr_expect_neq(builder.status, 200);
    /* The master reclaims the permit; a follower takes the build over. */
    int64_t give_up = mg_test_now_ms() + 5000;
    while (atomic_load(&seg.cold->reclaimed) == 0 && mg_test_now_ms() < give_up)
        mg_test_sleep_ms(2);
    cr_expect_geq(atomic_load(&seg.cold->reclaimed), 1);
    unlock_db(w);
    int answered = 0;
    for (int i = 0; i < started; i++) {
        pthread_join(tf[i], NULL);
        /* Those in the killed worker lost their connection; the others get the report. */
        cr_expect(followers[i].status == 200 || followers[i].status == -1, "follower %d: %d", i,
                  followers[i].status);
        answered += followers[i].status == 200;
        free(followers[i].body);
    }
    cr_expect_geq(answered, 1);
    cr_expect_eq(seg.cold->in_flight, 0);
    free(builder.body);
    mg_segment_detach(&seg);
    mg_test_server_stop(&s, 5000);
}

Test(reach_gate, with_defaults_a_burst_of_six_distinct_cold_keys_is_fully_served, .init = make_db,
     .fini = remove_db)
{
    struct mg_test_server s;
    const char *env[] = {NO_SUMMARIES, "MESHGATE_WORKERS=16",
                         NULL}; /* the default, said out loud */
    cr_assert(mg_test_server_start(&s, db_path, env));
    struct mg_segment seg;
    attach(&s, &seg);
    cr_expect_eq(seg.cold->cap, 2);
    cr_expect_eq(seg.cold->queue_max, 6);
    cr_expect_eq(seg.cold->wait_ns, 3000 * 1000000LL);
    /* Each build is slowed to about a second by holding the database. */
    sqlite3 *w = lock_db();
    struct call calls[6];
    pthread_t t[6];
    for (int i = 0; i < 6; i++) {
        calls[i] = (struct call){.port = s.port, .key = i};
        pthread_create(&t[i], NULL, call, &calls[i]);
    }
    mg_test_sleep_ms(1000);
    unlock_db(w);
    for (int i = 0; i < 6; i++) {
        pthread_join(t[i], NULL);
        cr_expect_eq(calls[i].status, 200, "key %d: %d", i, calls[i].status);
        free(calls[i].body);
    }
    mg_segment_detach(&seg);
    mg_test_server_stop(&s, 5000);
}

Test(reach_gate, a_worker_building_a_report_still_answers_its_other_connections, .init = make_db,
     .fini = remove_db)
{
    const char *env[] = {NO_SUMMARIES, "MESHGATE_WORKERS=1", "MESHGATE_DB_BUSY_TIMEOUT_MS=20000",
                         NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db_path, env));
    struct mg_segment seg;
    attach(&s, &seg);
    /* A light answer that reads no database (healthz does: under the lock it says 503). */
    struct mg_test_response r;
    int keep = mg_test_connect(s.port);
    const char *health = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    cr_assert(mg_test_send(keep, health, strlen(health)) &&
              mg_test_read_response(keep, &r, false, 5000));
    mg_test_response_free(&r);

    sqlite3 *w = lock_db();
    struct call cold = {.port = s.port, .key = 6};
    pthread_t t;
    pthread_create(&t, NULL, call, &cold);
    cr_assert(wait_until(&seg.cold->in_flight, 1, 30000), "the build did not start");
    /* The only worker is building (its helper thread waits on the lock): its loop answers. */
    for (int i = 0; i < 5; i++) {
        int64_t t0 = mg_test_now_ms();
        cr_assert(mg_test_send(keep, health, strlen(health)));
        /* The build waits on the lock until we release it: any answer meanwhile is one the
         * loop gave while building (the bound is only a ceiling for a loaded machine). */
        cr_assert(mg_test_read_response(keep, &r, false, 30000), "no answer while building");
        cr_expect_eq(r.status, 200);
        cr_expect_lt(mg_test_now_ms() - t0, 10000);
        mg_test_response_free(&r);
    }
    cr_expect_eq(seg.cold->in_flight, 1, "the build ended early: the test proved nothing");
    unlock_db(w);
    pthread_join(t, NULL);
    cr_expect_eq(cold.status, 200);
    free(cold.body);
    close(keep);
    mg_segment_detach(&seg);
    mg_test_server_stop(&s, 5000);
}

/* Issue 13: with the default anonymous line on 4 workers (2 permits, no place in the cold
 * line), identical anonymous requests follow the one build instead of being refused. */
Test(reach_gate, identical_anonymous_requests_on_four_workers_share_one_build_with_the_default_line,
     .init = make_db, .fini = remove_db)
{
    const char *env[] = {NO_SUMMARIES, "MESHGATE_WORKERS=4", "MESHGATE_DB_BUSY_TIMEOUT_MS=20000",
                         NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db_path, env));
    struct mg_segment seg;
    attach(&s, &seg);
    cr_assert_eq(seg.cold->queue_max, 0, "the default line on 4 workers has no cold place");
    sqlite3 *w = lock_db();
    enum { SAME = 4 };
    struct call calls[SAME];
    pthread_t t[SAME];
    calls[0] = (struct call){.port = s.port, .key = 5};
    pthread_create(&t[0], NULL, call, &calls[0]);
    cr_assert(wait_until(&seg.cold->in_flight, 1, 5000), "the first request does not build");
    for (int i = 1; i < SAME; i++) {
        calls[i] = (struct call){.port = s.port, .key = 5};
        pthread_create(&t[i], NULL, call, &calls[i]);
    }
    cr_expect(wait_until(&seg.cold->waiting, SAME - 1, 5000), "followers %u", seg.cold->waiting);
    unlock_db(w);
    for (int i = 0; i < SAME; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < SAME; i++) {
        cr_expect_eq(calls[i].status, 200, "request %d: %d %s", i, calls[i].status,
                     calls[i].body ? calls[i].body : "");
        if (calls[i].body && calls[0].body)
            cr_expect_str_eq(calls[i].body, calls[0].body);
    }
    for (int i = 0; i < SAME; i++)
        free(calls[i].body);
    cr_expect_eq(atomic_load(&seg.cold->acquired), 1, "one build for one key");
    cr_expect_eq(atomic_load(&seg.cache.cache->coalesced), SAME - 1, "coalesced %llu",
                 (unsigned long long)atomic_load(&seg.cache.cache->coalesced));
    cr_expect_eq(atomic_load(&seg.anon->acquired), 1,
                 "only the builder is anonymous heavy work: %llu permits",
                 (unsigned long long)atomic_load(&seg.anon->acquired));
    mg_segment_detach(&seg);
    mg_test_server_stop(&s, 5000);
}

static int64_t ms_since(const struct timespec *a)
{
    struct timespec b;
    clock_gettime(CLOCK_MONOTONIC, &b);
    return (int64_t)(b.tv_sec - a->tv_sec) * 1000 + (b.tv_nsec - a->tv_nsec) / 1000000;
}

/* Issue 13: under a writer's exclusive lock (a rollback-journal database in BEGIN EXCLUSIVE,
 * held by this process) healthz says 503 at once, not 200 from cached counts nor after the
 * whole busy timeout, and light requests answer 503 with Retry-After instead of holding
 * their worker's loop for it. */
Test(reach_gate, under_a_writers_exclusive_lock_healthz_and_light_requests_answer_503_quickly,
     .init = make_db, .fini = remove_db)
{
    const char *env[] = {NO_SUMMARIES, "MESHGATE_WORKERS=2", "MESHGATE_DB_BUSY_TIMEOUT_MS=20000",
                         NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db_path, env));
    struct mg_test_response r;
    cr_assert(mg_test_get(s.port, "/api/healthz", NULL, &r));
    cr_expect_eq(r.status, 200, "%s", r.body);
    free(r.body);
    /* The node list is light once the group's relay and hash-size tables are built (their
     * start-up passes would otherwise wait for the writer too, and the list with them, as
     * heavy work); a worker without its copy takes the group's without the database. */
    struct mg_segment seg;
    attach(&s, &seg);
    int64_t give_up = mg_test_now_ms() + 60000;
    while ((atomic_load(&seg.cache.cache->relay_builds) == 0 ||
            atomic_load(&seg.cache.cache->hash_size_builds) == 0) &&
           mg_test_now_ms() < give_up)
        mg_test_sleep_ms(5);
    cr_assert_gt(atomic_load(&seg.cache.cache->relay_builds), 0, "no relay table within 60 s");
    cr_assert_gt(atomic_load(&seg.cache.cache->hash_size_builds), 0,
                 "no hash-size table within 60 s");
    mg_segment_detach(&seg);
    sqlite3 *w = lock_db();
    /* A probe that succeeded answers for 100 ms on its worker (ep_health.c): past that, every
     * healthz reads the database again. */
    mg_test_sleep_ms(300);
    const char *const light[] = {"/api/healthz", "/api/nodes", "/api/nodes?search=a", NULL};
    for (int round = 0; round < 2; round++) {
        for (int i = 0; light[i]; i++) {
            struct timespec t0;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            cr_assert(mg_test_get(s.port, light[i], NULL, &r));
            int64_t ms = ms_since(&t0);
            char retry[16] = "";
            mg_test_header(&r, "Retry-After", retry, sizeof retry);
            cr_expect_eq(r.status, 503, "%s under the lock: %d %s", light[i], r.status, r.body);
            cr_expect_str_eq(retry, "1", "%s: Retry-After", light[i]);
            /* The busy timeout is 20 s; the light wait is 100 ms. */
            cr_expect_lt(ms, 5000, "%s took %lld ms under the lock", light[i], (long long)ms);
            if (i == 0)
                cr_expect(strstr(r.body, "\"ready\":false"), "%s", r.body);
            free(r.body);
        }
    }
    unlock_db(w);
    cr_assert(mg_test_get(s.port, "/api/healthz", NULL, &r));
    cr_expect_eq(r.status, 200, "after the lock: %s", r.body);
    cr_expect(strstr(r.body, "\"ready\":true"), "%s", r.body);
    free(r.body);
    mg_test_server_stop(&s, 5000);
}

static int statements_run;

static int count_statement(unsigned type, void *ctx, void *p, void *x)
{
    (void)type, (void)ctx, (void)p, (void)x;
    statements_run++;
    return 0;
}

/* Issue 28: health checkers ask many times a second; healthz reads the database at most once
 * per probe interval (100 ms) on a thread, not on every request. */
Test(reach_gate, healthz_reads_the_database_at_most_once_per_probe_interval, .init = make_db,
     .fini = remove_db)
{
    struct mg_test_ctx t;
    cr_assert(mg_test_ctx_open(&t, db_path));
    cr_assert_eq(mg_test_ctx_get(&t, "/api/healthz"), 200, "%s", t.res.body.data);
    sqlite3_trace_v2(t.db.conn, SQLITE_TRACE_STMT, count_statement, NULL);
    int64_t t0 = mg_test_now_ms();
    for (int i = 0; i < 200; i++)
        cr_assert_eq(mg_test_ctx_get(&t, "/api/healthz"), 200);
    int64_t took_ms = mg_test_now_ms() - t0;
    /* One probe per 100 ms at most (and the row counts' refresh, once): far fewer than 200. */
    cr_expect_leq(statements_run, 2 + took_ms / 100 * 2, "%d statements for 200 healthz in %lld ms",
                  statements_run, (long long)took_ms);
    cr_expect_lt(statements_run, 100);
    sqlite3_trace_v2(t.db.conn, 0, NULL, NULL);
    mg_test_ctx_close(&t);
}

/* Issue 28: a request whose answer is kept asks whether the tables it reads are fresh; that
 * costs no stat() of the database each time (once a second per table and process). */
Test(reach_gate, a_kept_node_list_looks_at_the_file_at_most_once_a_second_per_table,
     .init = make_db, .fini = remove_db)
{
    struct mg_test_ctx t;
    cr_assert(mg_test_ctx_open(&t, db_path));
    cr_assert_eq(mg_test_ctx_get(&t, "/api/nodes?limit=5"), 200, "%s", t.res.body.data);
    cr_assert_eq(mg_test_ctx_get(&t, "/api/nodes?limit=5"), 200);
    uint64_t before = mg_process_table_file_looks();
    int64_t t0 = mg_test_now_ms();
    for (int i = 0; i < 200; i++)
        cr_assert_eq(mg_test_ctx_get(&t, "/api/nodes?limit=5"), 200);
    int64_t took_ms = mg_test_now_ms() - t0;
    uint64_t looks = mg_process_table_file_looks() - before;
    /* Two tables (hash sizes, relay activity), each once a second at most. */
    cr_expect_leq(looks, (uint64_t)(2 + took_ms / 1000 * 2 + 2), "%llu looks in %lld ms",
                  (unsigned long long)looks, (long long)took_ms);
    cr_expect_lt(looks, 100u);
    mg_test_ctx_close(&t);
}

static bool sizes_exist(void *conn)
{
    return mg_node_hash_sizes_exist(conn);
}

/* Issue 27: on a worker's loop (a helper to hand work to) a request that finds no table of
 * hash sizes does not build it there: the helper does, behind the request, which is answered
 * without it (issue 28: node_hash_sizes.h). */
Test(reach_gate, a_node_list_without_hash_sizes_has_them_built_on_the_helper, .init = make_db,
     .fini = remove_db)
{
    struct mg_test_ctx t;
    cr_assert(mg_test_ctx_open(&t, db_path));
    cr_assert_eq(mg_test_ctx_get(&t, "/api/nodes?limit=5"), 200, "%s", t.res.body.data);
    char err[256];
    int fd;
    struct mg_jobs *jobs = mg_jobs_start(&t.cfg, &t.db, 0, 1, &fd, NULL, 0, err, sizeof err);
    cr_assert(jobs, "%s", err);
    t.env.jobs = jobs;
    mg_node_hash_sizes_forget(&t.env); /* and the group's copy, which the loop would take */
    cr_assert_eq(mg_test_ctx_get(&t, "/api/nodes?limit=6"), 200, "%s", t.res.body.data);
    cr_expect(mg_test_wait_until(sizes_exist, t.db.conn, 60000, 10), "the helper built none");
    cr_expect_eq(mg_jobs_threads(jobs), 1u, "the build did not run on the helper");
    t.env.jobs = NULL;
    mg_jobs_stop(jobs);
    mg_test_ctx_close(&t);
}

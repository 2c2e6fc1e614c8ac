/* SPDX-License-Identifier: ISC */
/*
 * Refusals paced per client address (workers/core/pacing.h), against the real server: an
 * address that keeps being refused (here the rate limit's 429 on an anonymous heavy route) has
 * each further refusal held before it is written, its connections not read meanwhile, so a
 * closed-loop flood from it costs the workers a few answers a second instead of as many as
 * their loops can write; another address's /api/healthz is answered as when idle; the held
 * refusals are counted (refusals_paced); a connection refused MG_PACE_CLOSE_AFTER times in a
 * row is closed. MESHGATE_REFUSAL_PACE_MAX_MS=0 turns it off: the same flood is answered as
 * fast as it asks.
 */
#include "harness.h"
#include "pacing.h"
#include "upstream_proc.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TestSuite(pacing, .timeout = 180);

/* Ceilings for a loaded machine under ASan; a pass never waits for them. */
#define READ_CEILING_MS 20000
#define FLOOD_CONNECTIONS 8
#define FLOOD_MS 3000
#define HEALTHZ_ASKS 40
/* What the flood is answered, at most paced (4 at once per worker, a doubling delay, then
 * one a second per connection: about 60) and at least unpaced (thousands when idle, 735 at a
 * load average of 30 on 2 cores). */
#define FLOOD_BOUND 120

struct flood {
    int port;
    int64_t until_ms;
    _Atomic long answers, refused, lost, max_wait_ms;
};

/* One kept-alive connection from 127.0.0.1 asking an anonymous heavy route until until_ms. */
static void *flood_loop(void *p)
{
    struct flood *f = p;
    int fd = -1;
    static const char req[] =
        "GET /api/packets?limit=3&expand=observations HTTP/1.1\r\nHost: t\r\n\r\n";
    while (mg_test_now_ms() < f->until_ms) {
        if (fd < 0 && (fd = mg_test_connect_from("127.0.0.1", f->port)) < 0) {
            atomic_fetch_add(&f->lost, 1);
            mg_test_sleep_ms(10);
            continue;
        }
        int64_t asked = mg_test_now_ms();
        struct mg_test_response r;
        if (!mg_test_send(fd, req, sizeof req - 1) ||
            !mg_test_read_response(fd, &r, false, READ_CEILING_MS)) {
            close(fd); /* closed after its refusals in a row: a new connection, as a flooder */
            fd = -1;
            continue;
        }
        long waited = (long)(mg_test_now_ms() - asked);
        long seen = atomic_load(&f->max_wait_ms);
        while (waited > seen && !atomic_compare_exchange_weak(&f->max_wait_ms, &seen, waited))
            ;
        atomic_fetch_add(&f->answers, 1);
        if (r.status == 429)
            atomic_fetch_add(&f->refused, 1);
        bool closing = strstr(r.head, "Connection: close") != NULL;
        mg_test_response_free(&r);
        if (closing) {
            close(fd);
            fd = -1;
        }
    }
    if (fd >= 0)
        close(fd);
    return NULL;
}

static int compare_long(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

/* HEALTHZ_ASKS /api/healthz from 127.0.0.2 on one kept-alive connection, 20 ms apart; the
 * median time to answer in microseconds. Every one must be 200. */
static long healthz_median_us(int port)
{
    int fd = mg_test_connect_from("127.0.0.2", port);
    cr_assert_geq(fd, 0);
    static const char req[] = "GET /api/healthz HTTP/1.1\r\nHost: t\r\n\r\n";
    long us[HEALTHZ_ASKS];
    for (int i = 0; i < HEALTHZ_ASKS; i++) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        struct mg_test_response r;
        cr_assert(mg_test_send(fd, req, sizeof req - 1));
        cr_assert(mg_test_read_response(fd, &r, false, READ_CEILING_MS), "healthz %d", i);
        clock_gettime(CLOCK_MONOTONIC, &b);
        cr_assert_eq(r.status, 200, "healthz %d: %d", i, r.status);
        mg_test_response_free(&r);
        us[i] = (b.tv_sec - a.tv_sec) * 1000000L + (b.tv_nsec - a.tv_nsec) / 1000;
        mg_test_sleep_ms(20);
    }
    close(fd);
    qsort(us, HEALTHZ_ASKS, sizeof us[0], compare_long);
    return us[HEALTHZ_ASKS / 2];
}

/* A flood of FLOOD_CONNECTIONS from 127.0.0.1 for FLOOD_MS, the victim's healthz asked
 * meanwhile (its median in *healthz_us, when not NULL). */
static void run_flood(int port, struct flood *f, long *healthz_us)
{
    f->port = port;
    f->until_ms = mg_test_now_ms() + FLOOD_MS;
    pthread_t t[FLOOD_CONNECTIONS];
    for (int i = 0; i < FLOOD_CONNECTIONS; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, flood_loop, f), 0);
    if (healthz_us)
        *healthz_us = healthz_median_us(port);
    for (int i = 0; i < FLOOD_CONNECTIONS; i++)
        pthread_join(t[i], NULL);
}

/* One 200 a minute for anonymous heavy requests: the flood is refused from its second. */
#define RATE_ENV "MESHGATE_ANON_RATE=1", "MESHGATE_ANON_BURST=1"

Test(pacing, a_flooding_address_is_paced_while_another_is_answered_as_when_idle)
{
    const char *env[] = {RATE_ENV, NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    long idle_us = healthz_median_us(s.port);
    struct flood f = {0};
    long flood_us;
    run_flood(s.port, &f, &flood_us);
    long paced = mg_test_metric(s.port, "refusals_paced");
    cr_log_info("paced: %ld answers (%ld refused, %ld paced, longest %ld ms); healthz median %ld "
                "us in the flood, %ld idle",
                f.answers, f.refused, paced, f.max_wait_ms, flood_us, idle_us);
    /* Paced: 4 refusals at once a worker, then 4 ms doubling to 1 s per refusal, each
     * connection waiting for its own. Unpaced, the same flood gets more (the next
     * test). */
    cr_expect_lt(f.answers, FLOOD_BOUND, "the flood got %ld answers in %d ms", f.answers, FLOOD_MS);
    cr_expect_geq(f.answers, FLOOD_CONNECTIONS, "each connection was answered");
    cr_expect_eq(f.lost, 0);
    cr_expect_geq(f.refused, f.answers - 2, "%ld of %ld refused", f.refused, f.answers);
    /* each worker's first MG_PACE_FREE at once, and as many again after the one 200 halved
     * a streak */
    cr_expect_geq(paced, f.refused - 4 * MG_PACE_FREE, "%ld paced of %ld refused", paced,
                  f.refused);
    /* Held at most MESHGATE_REFUSAL_PACE_MAX_MS (1 s), whatever the streak. */
    cr_expect_lt(f.max_wait_ms, 1000 + 5000, "a refusal held %ld ms", f.max_wait_ms);
    /* The other address is never paced: its healthz is answered as when idle (a bound
     * generous for a loaded machine: the flood's few answers cost the loops nothing). */
    cr_expect_leq(flood_us, 3 * idle_us + 50000, "healthz median %ld us in the flood, %ld idle",
                  flood_us, idle_us);
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
}

Test(pacing, turned_off_the_same_flood_is_answered_as_fast_as_it_asks)
{
    const char *env[] = {RATE_ENV, "MESHGATE_REFUSAL_PACE_MAX_MS=0", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    struct flood f = {0};
    run_flood(s.port, &f, NULL);
    cr_log_info("unpaced: %ld answers (%ld refused)", f.answers, f.refused);
    cr_expect_gt(f.answers, FLOOD_BOUND, "the flood got %ld answers in %d ms", f.answers, FLOOD_MS);
    cr_expect_eq(mg_test_metric(s.port, "refusals_paced"), 0);
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
}

/* A connection refused MG_PACE_CLOSE_AFTER times in a row is told so (Connection: close) and
 * closed after that refusal; its address may connect again. */
Test(pacing, a_connection_refused_again_and_again_is_closed)
{
    const char *env[] = {RATE_ENV, "MESHGATE_WORKERS=1", "MESHGATE_REFUSAL_PACE_MAX_MS=5", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    int fd = mg_test_connect_from("127.0.0.1", s.port);
    cr_assert_geq(fd, 0);
    static const char req[] =
        "GET /api/packets?limit=3&expand=observations HTTP/1.1\r\nHost: t\r\n\r\n";
    int refused = 0, answers = 0;
    bool closing = false;
    while (!closing && answers < 2 * MG_PACE_CLOSE_AFTER) {
        struct mg_test_response r;
        cr_assert(mg_test_send(fd, req, sizeof req - 1));
        cr_assert(mg_test_read_response(fd, &r, false, READ_CEILING_MS), "answer %d", answers);
        answers++;
        refused += r.status == 429;
        closing = strstr(r.head, "Connection: close") != NULL;
        mg_test_response_free(&r);
    }
    cr_expect(closing, "%d answers, none closing", answers);
    cr_expect_eq(refused, MG_PACE_CLOSE_AFTER, "%d refused of %d", refused, answers);
    cr_expect(mg_test_wait_closed(fd, READ_CEILING_MS));
    close(fd);
    struct mg_test_response r;
    cr_assert(mg_test_get(s.port, "/api/healthz", NULL, &r));
    cr_expect_eq(r.status, 200);
    mg_test_response_free(&r);
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
}

/* The table alone: free refusals, then a doubling delay up to the most; an answer that is
 * not a refusal halves the streak; a streak is forgotten MG_PACE_FORGET_NS after its last
 * refusal; another address has a streak of its own. */
Test(pacing, the_delay_doubles_after_the_free_refusals_up_to_the_most)
{
    static struct mg_pacing p;
    memset(&p, 0, sizeof p);
    const uint8_t a[16] = {[10] = 0xff, [11] = 0xff, [12] = 127, [15] = 1};
    const uint8_t b[16] = {[10] = 0xff, [11] = 0xff, [12] = 127, [15] = 2};
    const int64_t most = 1000 * 1000 * 1000LL, t = 5 * most;
    for (int i = 0; i < MG_PACE_FREE; i++)
        cr_expect_eq(mg_pacing_answer(&p, a, true, most, t), 0, "free refusal %d", i);
    cr_expect_eq(mg_pacing_answer(&p, a, true, most, t), MG_PACE_BASE_NS);
    cr_expect_eq(mg_pacing_answer(&p, a, true, most, t), 2 * MG_PACE_BASE_NS);
    cr_expect_eq(mg_pacing_answer(&p, b, true, most, t), 0, "another address: its own streak");
    for (int i = 0; i < 40; i++)
        mg_pacing_answer(&p, a, true, most, t);
    cr_expect_eq(mg_pacing_answer(&p, a, true, most, t), most, "never past the most");
    /* 47 refusals; an answer that is not a refusal halves it (23), and is never held */
    cr_expect_eq(mg_pacing_answer(&p, a, false, most, t), 0);
    cr_expect_eq(mg_pacing_answer(&p, a, true, most, t), most, "24 in the streak");
    for (int i = 0; i < 5; i++)
        mg_pacing_answer(&p, a, false, most, t);
    /* 24 halved five times: 0; the next refusal starts a streak */
    cr_expect_eq(mg_pacing_answer(&p, a, true, most, t), 0);
    for (int i = 0; i < 10; i++)
        mg_pacing_answer(&p, a, true, most, t);
    cr_expect_eq(mg_pacing_answer(&p, a, true, most, t + MG_PACE_FORGET_NS), 0, "forgotten");
    cr_expect_eq(mg_pacing_answer(&p, a, true, 0, t), 0, "pacing off");
}

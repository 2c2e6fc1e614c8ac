/* SPDX-License-Identifier: ISC */
/*
 * A freed permit wakes its next waiter (issue 25, item 3), with real processes and sockets.
 * A parked request used to be asked again every 2 ms by its worker's loop, whatever it
 * waited for; now the gate that frees a permit picks the next place in line and wakes that
 * worker through its slot's eventfd (shm/wake.h), so a worker whose requests wait makes no
 * timer turns. The tests read the group's counters from the segment: parked_timer_turns
 * (turns of a loop woken by its timer while it had parked requests) and park_wakes.
 *
 * Builds are made to last with the test hooks (MESHGATE_TEST_HOOKS=park): a reach build that
 * carries "X-Test-Hold-Ms: N" sleeps N ms on its helper thread, holding its permit.
 */
#include "harness.h"

#include "gate_fifo.h"
#include "scoreboard.h"
#include "segment.h"
#include "stats.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TestSuite(handoff, .timeout = 180);

#define KEYS 8
#define API_KEY "handoff-0123456789abcdef"

static char dir[128], db_path[256], keys_setting[300];
static char keys[KEYS][65];

static void make_db(void)
{
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db_path, sizeof db_path, "%s/handoff.db", dir);
    mg_test_make_reach_db(db_path, keys, KEYS);
    mg_test_write_keys_file(dir, API_KEY, keys_setting, sizeof keys_setting);
}

static void remove_db(void)
{
    mg_test_rmdir(dir);
}

/* One request for a cold reach report on its own connection, on a thread. */
struct ask {
    int port;
    int key;
    int hold_ms;
    bool signed_in;
    int fd;
    int status;          /* -1: no answer */
    int64_t answered_ms; /* mg_test_now_ms when its answer was in */
    pthread_t thread;
};

static void *run_ask(void *arg)
{
    struct ask *a = arg;
    char req[512];
    snprintf(req, sizeof req,
             "GET /api/nodes/%s/reach?days=%d HTTP/1.1\r\nHost: t\r\nX-Test-Hold-Ms: %d\r\n%s\r\n",
             keys[a->key], 1 + a->key, a->hold_ms,
             a->signed_in ? "Authorization: Bearer " API_KEY "\r\n" : "");
    struct mg_test_response r;
    a->status = -1;
    if (a->fd >= 0 && mg_test_send(a->fd, req, strlen(req)) &&
        mg_test_read_response(a->fd, &r, false, 90000)) {
        a->status = r.status;
        mg_test_response_free(&r);
    }
    a->answered_ms = mg_test_now_ms();
    return NULL;
}

static void ask_start(struct ask *a, int port, int key, int hold_ms, bool signed_in)
{
    *a = (struct ask){.port = port, .key = key, .hold_ms = hold_ms, .signed_in = signed_in};
    a->fd = mg_test_connect(port);
    cr_assert_geq(a->fd, 0);
    pthread_create(&a->thread, NULL, run_ask, a);
}

static void ask_end(struct ask *a)
{
    pthread_join(a->thread, NULL);
    if (a->fd >= 0)
        close(a->fd);
    a->fd = -1;
}

/* A server whose gates have one permit and long lines, every reach request a cold build;
 * attached to its segment. */
static void start(struct mg_test_server *s, struct mg_segment *seg, const char *workers,
                  const char *extra)
{
    const char *env[] = {extra ? extra : "MESHGATE_TX_SUMMARIES=0",
                         "MESHGATE_TX_SUMMARIES=0",
                         workers,
                         "MESHGATE_REACH_COLD_MAX=1",
                         "MESHGATE_REACH_COLD_QUEUE=8",
                         "MESHGATE_REACH_COLD_WAIT_MS=60000",
                         "MESHGATE_REACH_CACHE_TTL_MS=0",
                         "MESHGATE_ANON_CONCURRENCY=1",
                         "MESHGATE_ANON_QUEUE=8",
                         "MESHGATE_ANON_WAIT_MS=60000",
                         "MESHGATE_TEST_HOOKS=park",
                         keys_setting,
                         NULL};
    cr_assert(mg_test_server_start(s, db_path, env));
    char err[256];
    cr_assert_eq(mg_segment_attach(seg, s->shm_name, true, err, sizeof err), 0, "%s", err);
}

/* A gate's places and permits, as its records show them (the test reads without the lock:
 * counts that settle are all it needs). */
struct line_count {
    struct mg_fifo_gate *g;
    unsigned held, waiting;
};

static bool line_reaches(void *arg)
{
    struct line_count *want = arg;
    unsigned held = 0, waiting = 0;
    for (unsigned i = 0; i < MG_FIFO_HOLDERS_MAX; i++)
        held += want->g->holder[i].pid != 0;
    for (unsigned i = 0; i < MG_FIFO_WAITERS_MAX; i++)
        waiting += want->g->waiter[i].pid != 0 && !want->g->waiter[i].follower;
    return held == want->held && waiting == want->waiting;
}

static void wait_line(struct mg_fifo_gate *g, unsigned held, unsigned waiting)
{
    struct line_count want = {g, held, waiting};
    cr_assert(mg_test_wait_until(line_reaches, &want, 60000, 2),
              "the line never held %u permits and %u places", held, waiting);
}

/*
 * One worker, one permit: a build holds it while another request waits in line on the same
 * worker. The release wakes the worker and the waiter is answered, while the loop made no
 * timer turns (at most one a second, the safety bound) where it used to turn every 2 ms.
 */
static void one_worker_hand_off(bool signed_in)
{
    struct mg_test_server s;
    struct mg_segment seg;
    start(&s, &seg, "MESHGATE_WORKERS=1", NULL);
    /* Anonymous: the anonymous line's permit is held through the build (one helper). */
    struct mg_fifo_gate *line = signed_in ? seg.cold : seg.anon;
    struct ask holder, waiter;
    ask_start(&holder, s.port, 0, 900, signed_in);
    wait_line(line, 1, 0);
    ask_start(&waiter, s.port, 1, 0, signed_in);
    wait_line(line, 1, 1);
    uint64_t turns = mg_counter_get(&seg, MG_CTR_PARKED_TIMER_TURNS);
    uint64_t wakes = mg_counter_get(&seg, MG_CTR_PARK_WAKES);
    int64_t parked_ms = mg_test_now_ms();
    ask_end(&holder);
    ask_end(&waiter);
    cr_expect_eq(holder.status, 200);
    cr_expect_eq(waiter.status, 200);
    int64_t waited_ms = waiter.answered_ms - parked_ms;
    uint64_t timer_turns = mg_counter_get(&seg, MG_CTR_PARKED_TIMER_TURNS) - turns;
    /* The safety bound: a turn a second at most; before, one every 2 ms. */
    cr_expect_leq(timer_turns, (uint64_t)(waited_ms / 1000 + 2),
                  "the loop turned %llu times on its timer while the request waited %lld ms",
                  (unsigned long long)timer_turns, (long long)waited_ms);
    cr_expect_geq(mg_counter_get(&seg, MG_CTR_PARK_WAKES) - wakes, 1,
                  "the release woke the worker through its slot");
    cr_expect_eq(atomic_load(&line->refused_timeout), 0);
    mg_segment_detach(&seg);
    mg_test_server_stop(&s, 5000);
}

Test(handoff, a_released_cold_permit_wakes_the_waiter_without_timer_turns, .init = make_db,
     .fini = remove_db)
{
    one_worker_hand_off(true);
}

Test(handoff, a_released_anonymous_permit_wakes_the_waiter_without_timer_turns, .init = make_db,
     .fini = remove_db)
{
    one_worker_hand_off(false);
}

/* The worker of the first permit, and of the first place in line. */
static int holder_pid(struct mg_fifo_gate *g)
{
    for (unsigned i = 0; i < MG_FIFO_HOLDERS_MAX; i++)
        if (g->holder[i].pid != 0)
            return g->holder[i].pid;
    return 0;
}

static int waiter_pid(struct mg_fifo_gate *g)
{
    for (unsigned i = 0; i < MG_FIFO_WAITERS_MAX; i++)
        if (g->waiter[i].pid != 0 && !g->waiter[i].follower)
            return g->waiter[i].pid;
    return 0;
}

/*
 * A holder killed with SIGKILL: the master's reclaim hands its permit to the next in line
 * and wakes that worker, which is answered without polling.
 */
Test(handoff, kill_9_of_a_holder_hands_its_permit_to_the_next_waiter, .init = make_db,
     .fini = remove_db)
{
    struct mg_test_server s;
    struct mg_segment seg;
    start(&s, &seg, "MESHGATE_WORKERS=3", "MESHGATE_MAX_CONNS_PER_WORKER=1");
    struct ask holder, waiter;
    ask_start(&holder, s.port, 0, 30000, true);
    wait_line(seg.cold, 1, 0);
    int victim = holder_pid(seg.cold);
    cr_assert_gt(victim, 0);
    /* One connection per worker: the holder's is full, another takes the waiter. */
    ask_start(&waiter, s.port, 1, 0, true);
    wait_line(seg.cold, 1, 1);
    cr_assert_neq(waiter_pid(seg.cold), victim, "the waiter landed on the holder's worker");
    uint64_t turns = mg_counter_get(&seg, MG_CTR_PARKED_TIMER_TURNS);
    uint64_t wakes = mg_counter_get(&seg, MG_CTR_PARK_WAKES);
    int64_t parked_ms = mg_test_now_ms();
    mg_test_sleep_ms(300); /* a while in line, for the loop to show how it waits */
    kill(victim, SIGKILL);
    ask_end(&waiter);
    ask_end(&holder);
    cr_expect_eq(waiter.status, 200, "the next waiter was answered");
    cr_expect_eq(holder.status, -1, "the holder's connection died with its worker");
    int64_t waited_ms = waiter.answered_ms - parked_ms;
    uint64_t timer_turns = mg_counter_get(&seg, MG_CTR_PARKED_TIMER_TURNS) - turns;
    cr_expect_leq(timer_turns, (uint64_t)(waited_ms / 1000 + 2),
                  "the loop turned %llu times on its timer while the request waited %lld ms",
                  (unsigned long long)timer_turns, (long long)waited_ms);
    cr_expect_geq(mg_counter_get(&seg, MG_CTR_PARK_WAKES) - wakes, 1,
                  "the reclaim woke the waiter's worker");
    cr_expect_geq(atomic_load(&seg.cold->reclaimed), 1);
    mg_segment_detach(&seg);
    mg_test_server_stop(&s, 5000);
}

/*
 * First come, first served across workers: places taken one after another (each once the one
 * before is in line) are admitted in that order, whichever worker holds them. With one
 * permit, builds end in the order they were admitted.
 */
Test(handoff, places_on_several_workers_are_served_in_arrival_order, .init = make_db,
     .fini = remove_db)
{
    struct mg_test_server s;
    struct mg_segment seg;
    start(&s, &seg, "MESHGATE_WORKERS=3", NULL);
    enum { WAITERS = 5 };
    struct ask holder, w[WAITERS];
    ask_start(&holder, s.port, 0, 800, true);
    wait_line(seg.cold, 1, 0);
    uint64_t turns = mg_counter_get(&seg, MG_CTR_PARKED_TIMER_TURNS);
    int64_t start_ms = mg_test_now_ms();
    for (int i = 0; i < WAITERS; i++) {
        ask_start(&w[i], s.port, 1 + i, 100, true);
        wait_line(seg.cold, 1, (unsigned)i + 1);
    }
    ask_end(&holder);
    cr_expect_eq(holder.status, 200);
    for (int i = 0; i < WAITERS; i++) {
        ask_end(&w[i]);
        cr_expect_eq(w[i].status, 200, "waiter %d", i);
        if (i > 0)
            cr_expect_lt(w[i - 1].answered_ms, w[i].answered_ms,
                         "waiter %d was answered before waiter %d, which came first", i, i - 1);
    }
    /* Three workers, each a turn a second at most while it has a request parked. */
    int64_t took_ms = mg_test_now_ms() - start_ms;
    uint64_t timer_turns = mg_counter_get(&seg, MG_CTR_PARKED_TIMER_TURNS) - turns;
    cr_expect_leq(timer_turns, (uint64_t)(3 * (took_ms / 1000 + 2)),
                  "the loops turned %llu times on their timers in %lld ms",
                  (unsigned long long)timer_turns, (long long)took_ms);
    mg_segment_detach(&seg);
    mg_test_server_stop(&s, 5000);
}

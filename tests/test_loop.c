/* SPDX-License-Identifier: ISC */
/*
 * What one turn of a worker's loop costs (issue 23: a slowloris keeps hundreds of
 * connections open on each worker), against the real server of the test build, whose
 * answers carry X-Test-Loop (workers/data/test_hooks.h): the loop's turns, the connections
 * its own passes visited, its recv calls and its checks of the master's pid so far.
 *
 *   - a turn visits what it handles (the requests ready or parked, the deadlines that came),
 *     not every open connection;
 *   - a request that arrived whole is read with one recv, not one more that says EAGAIN;
 *   - a connection closed leaves the poll set with its close, not an epoll_ctl of its own;
 *   - the master's pid is asked once a second at most, not every turn, and a worker whose
 *     master is killed still exits at once (its parent-death signal);
 *   - the deadlines are kept in order (workers/core/deadline_heap.h): each connection is still
 *     cut at its own, never before;
 *   - a large answer is written over several turns, at most 256 KiB of it to its connection a
 *     turn, so the loop serves its other connections between (issue 23: a packet detail of
 *     2.9 MB went out in one send of 6 to 11 ms).
 */
#include "deadline_heap.h"
#include "fixture.h"
#include "harness.h"
#include "process.h"
#include "scoreboard.h"
#include "segment.h"
#include "stats.h"
#include "upstream_proc.h"

#include <criterion/criterion.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

TestSuite(loop, .timeout = 180);

#define CEILING_MS 60000
/* Connections that send half a head and wait, as a slowloris's do. */
#define IDLE_CONNS 200

struct loop_counts {
    unsigned long long turns, steps, recvs, parent_checks, poll_ctls, sends, max_turn_write, gzips,
        out_bytes;
};

static void start(struct mg_test_server *s, struct mg_segment *seg)
{
    const char *env[] = {"MESHGATE_WORKERS=1", "MESHGATE_TEST_HOOKS=park",
                         "MESHGATE_MAX_CONNS_PER_CLIENT=0", "MESHGATE_HEADER_TIMEOUT_MS=600000",
                         NULL};
    cr_assert(mg_test_server_start(s, NULL, env));
    char err[256];
    cr_assert_eq(mg_segment_attach(seg, s->shm_name, true, err, sizeof err), 0, "%s", err);
}

/* One healthz on the kept-alive connection fd, and its worker's loop counts. */
static struct loop_counts healthz(int fd)
{
    static const char req[] = "GET /api/healthz HTTP/1.1\r\nHost: t\r\n\r\n";
    cr_assert(mg_test_send(fd, req, sizeof req - 1));
    struct mg_test_response r;
    cr_assert(mg_test_read_response(fd, &r, false, CEILING_MS), "healthz was not answered");
    cr_assert_eq(r.status, 200);
    char v[256];
    cr_assert(mg_test_header(&r, "X-Test-Loop", v, sizeof v), "no X-Test-Loop:\n%s", r.head);
    struct loop_counts c;
    cr_assert_eq(sscanf(v,
                        "turns=%llu steps=%llu recvs=%llu parent_checks=%llu poll_ctls=%llu "
                        "sends=%llu max_turn_write=%llu gzips=%llu out_bytes=%llu",
                        &c.turns, &c.steps, &c.recvs, &c.parent_checks, &c.poll_ctls, &c.sends,
                        &c.max_turn_write, &c.gzips, &c.out_bytes),
                 9, "X-Test-Loop: %s", v);
    mg_test_response_free(&r);
    return c;
}

/* What the loop did for n healthz on fd after a first one (counted from its answer). */
static struct loop_counts over_requests(int fd, int n)
{
    struct loop_counts first = healthz(fd), last = first;
    for (int i = 0; i < n; i++)
        last = healthz(fd);
    return (struct loop_counts){last.turns - first.turns,
                                last.steps - first.steps,
                                last.recvs - first.recvs,
                                last.parent_checks - first.parent_checks,
                                last.poll_ctls - first.poll_ctls,
                                last.sends - first.sends,
                                last.max_turn_write,
                                last.gzips - first.gzips,
                                last.out_bytes - first.out_bytes};
}

/* IDLE_CONNS connections from 127.0.0.1 with half a head each, once the worker holds them. */
static void open_idle(const struct mg_segment *seg, int port, int *fds)
{
    for (int i = 0; i < IDLE_CONNS; i++) {
        fds[i] = mg_test_connect(port);
        cr_assert_geq(fds[i], 0);
        static const char half[] = "GET /api/healthz HTTP/1.1\r\nHost: t\r\nX-Slow: ";
        cr_assert(mg_test_send(fds[i], half, sizeof half - 1));
    }
    int64_t give_up = mg_test_now_ms() + CEILING_MS;
    while (mg_counter_get(seg, MG_CTR_CONNECTIONS_ACCEPTED) < IDLE_CONNS &&
           mg_test_now_ms() < give_up)
        mg_test_sleep_ms(10);
    cr_assert_geq(mg_counter_get(seg, MG_CTR_CONNECTIONS_ACCEPTED), IDLE_CONNS);
}

/*
 * 200 connections wait with half a head; 100 requests on another one. Before, every turn
 * walked every connection three times (serving, deadlines, the slot's state): 600 steps a
 * turn. Now a turn visits the requests it serves and the deadlines that came.
 */
Test(loop, a_turn_visits_what_it_handles_not_every_open_connection)
{
    struct mg_test_server s;
    struct mg_segment seg;
    start(&s, &seg);
    int fds[IDLE_CONNS];
    open_idle(&seg, s.port, fds);
    int fd = mg_test_connect_from("127.0.0.2", s.port);
    cr_assert_geq(fd, 0);
    struct loop_counts d = over_requests(fd, 100);
    unsigned long long turns = d.turns, steps = d.steps;
    cr_log_info("%llu turns, %llu steps, with %d connections open", turns, steps, IDLE_CONNS + 1);
    cr_expect_geq(turns, 100);
    cr_expect_lt(steps, turns * 8, "%llu steps in %llu turns with %d connections open", steps,
                 turns, IDLE_CONNS + 1);
    close(fd);
    for (int i = 0; i < IDLE_CONNS; i++)
        close(fds[i]);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, CEILING_MS), 0);
}

/* A server of its own, a connection and n healthz on it after a first one: what the loop did
 * for them, and how long they took in whole seconds rounded up. */
static struct loop_counts on_a_server_of_its_own(int n, long long *seconds)
{
    struct mg_test_server s;
    struct mg_segment seg;
    start(&s, &seg);
    int fd = mg_test_connect(s.port);
    cr_assert_geq(fd, 0);
    int64_t begin = mg_test_now_ms();
    struct loop_counts d = over_requests(fd, n);
    *seconds = (mg_test_now_ms() - begin) / 1000 + 1;
    close(fd);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, CEILING_MS), 0);
    return d;
}

/* A request sent whole is read with one recv: a short read emptied the socket, and the poll
 * (level-triggered) says when more comes. */
Test(loop, a_request_that_arrived_whole_is_read_with_one_recv)
{
    long long seconds;
    unsigned long long recvs = on_a_server_of_its_own(100, &seconds).recvs;
    cr_log_info("%llu recv calls for 100 requests", recvs);
    /* A request split by the network costs one more; 100 requests of one segment each. */
    cr_expect_leq(recvs, 110, "%llu recv calls for 100 requests", recvs);
}

/*
 * 50 connections with one request each ("Connection: close"), between two requests on a kept-
 * alive connection: each costs its ADD and the MOD that stops reading while it is answered,
 * and its close takes it out of the poll set (before, a DEL more: 3 each).
 */
Test(loop, a_closed_connection_leaves_the_poll_set_with_its_close)
{
    struct mg_test_server s;
    struct mg_segment seg;
    start(&s, &seg);
    int fd = mg_test_connect(s.port);
    cr_assert_geq(fd, 0);
    struct loop_counts first = healthz(fd);
    for (int i = 0; i < 50; i++) {
        struct mg_test_response r;
        cr_assert(mg_test_get(s.port, "/api/healthz", NULL, &r));
        cr_assert_eq(r.status, 200);
        mg_test_response_free(&r);
    }
    struct loop_counts last = healthz(fd);
    unsigned long long ctls = last.poll_ctls - first.poll_ctls;
    cr_log_info("%llu epoll_ctl calls for 50 connections and one request", ctls);
    /* The kept-alive request's own MOD calls: 2. */
    cr_expect_leq(ctls, 50 * 2 + 4, "%llu epoll_ctl calls for 50 connections", ctls);
    close(fd);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, CEILING_MS), 0);
}

/* The master's pid is asked once a second at most, however fast the loop turns. */
Test(loop, the_master_is_asked_about_once_a_second_not_every_turn)
{
    long long seconds;
    struct loop_counts d = on_a_server_of_its_own(200, &seconds);
    cr_log_info("%llu checks of the master in %llu turns, %lld s", d.parent_checks, d.turns,
                seconds);
    cr_expect_geq(d.turns, 200);
    cr_expect_leq(d.parent_checks, (unsigned long long)seconds + 1,
                  "%llu checks in %llu turns, %lld s", d.parent_checks, d.turns, seconds);
}

/* The master killed outright: its workers exit (the parent-death signal, not a poll). */
Test(loop, workers_exit_when_their_master_is_killed)
{
    struct mg_test_server s;
    const char *env[] = {"MESHGATE_WORKERS=2", NULL};
    cr_assert(mg_test_server_start(&s, NULL, env));
    struct mg_segment seg;
    char err[256];
    cr_assert_eq(mg_segment_attach(&seg, s.shm_name, true, err, sizeof err), 0, "%s", err);
    int pids[8];
    unsigned n = 0;
    for (unsigned i = 0; i < seg.slot_count && n < 8; i++) {
        int pid = atomic_load(&seg.slots[i].pid);
        if (pid > 0)
            pids[n++] = pid;
    }
    cr_assert_eq(n, 2);
    mg_segment_detach(&seg);
    int64_t begin = mg_test_now_ms();
    kill(s.pid, SIGKILL);
    int64_t give_up = begin + CEILING_MS;
    unsigned gone = 0;
    while (mg_test_now_ms() < give_up) {
        gone = 0;
        for (unsigned i = 0; i < n; i++)
            gone += mg_process_state(pids[i], NULL) == MG_PROCESS_GONE;
        if (gone == n)
            break;
        mg_test_sleep_ms(10);
    }
    cr_log_info("the workers were gone %lld ms after the master",
                (long long)(mg_test_now_ms() - begin));
    cr_expect_eq(gone, n, "a worker outlived its master by %d s", CEILING_MS / 1000);
    for (unsigned i = 0; i < n; i++)
        if (mg_process_state(pids[i], NULL) != MG_PROCESS_GONE)
            kill(pids[i], SIGKILL);
    mg_test_server_stop(&s, 10000);
}

/* A small generator, so the heap's test is the same on every run. */
static uint32_t next_random(uint32_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    return *x;
}

/* Entries set, moved and removed at random come out in deadline order, each once. */
Test(loop, the_deadline_heap_gives_the_earliest_first_through_moves_and_removals)
{
    enum { N = 500 };
    static struct mg_deadline d[N];
    static bool in[N];
    struct mg_deadline_heap h = {0};
    cr_assert(mg_deadline_reserve(&h, N));
    uint32_t x = 2463534242u;
    for (int step = 0; step < 20000; step++) {
        int i = (int)(next_random(&x) % N);
        if (next_random(&x) % 4 == 0) {
            mg_deadline_remove(&h, &d[i]);
            in[i] = false;
        } else {
            mg_deadline_set(&h, &d[i], (int64_t)(next_random(&x) % 100000));
            in[i] = true;
        }
    }
    unsigned count = 0;
    for (int i = 0; i < N; i++)
        count += in[i];
    cr_expect_eq(h.len, count);
    int64_t last = -1;
    struct mg_deadline *first;
    while ((first = mg_deadline_first(&h))) {
        cr_assert_geq(first->at_ns, last, "out of order: %lld after %lld", (long long)first->at_ns,
                      (long long)last);
        last = first->at_ns;
        int i = (int)(first - d);
        cr_assert(in[i], "entry %d came out twice or was removed", i);
        in[i] = false;
        mg_deadline_remove(&h, first);
        cr_assert_eq(first->place, 0);
        count--;
    }
    cr_expect_eq(count, 0, "%u entries never came out", count);
    mg_deadline_heap_free(&h);
}

/*
 * Two waves of connections with half a head, the second a second after the first, and more
 * kept alive between requests (the idle timeout): each is cut at its own deadline, the first
 * wave's before the second's, and none before it.
 */
Test(loop, each_connection_is_cut_at_its_own_deadline_in_order)
{
    struct mg_test_server s;
    const char *env[] = {"MESHGATE_WORKERS=1", "MESHGATE_MAX_CONNS_PER_CLIENT=0",
                         "MESHGATE_HEADER_TIMEOUT_MS=3000", "MESHGATE_IDLE_TIMEOUT_MS=1500", NULL};
    cr_assert(mg_test_server_start(&s, NULL, env));
    enum { WAVE = 20 };
    int fds[3][WAVE];
    int64_t opened[3];
    static const char half[] = "GET /api/healthz HTTP/1.1\r\nHost: t\r\nX-Slow: ";
    static const char whole[] = "GET /api/healthz HTTP/1.1\r\nHost: t\r\n\r\n";
    for (int wave = 0; wave < 3; wave++) {
        if (wave == 1)
            mg_test_sleep_ms(1000);
        opened[wave] = mg_test_now_ms();
        for (int i = 0; i < WAVE; i++) {
            fds[wave][i] = mg_test_connect(s.port);
            cr_assert_geq(fds[wave][i], 0);
            if (wave < 2) {
                cr_assert(mg_test_send(fds[wave][i], half, sizeof half - 1));
                continue;
            }
            /* The third: one answer each, then kept alive (idle) until their idle timeout. */
            struct mg_test_response r;
            cr_assert(mg_test_send(fds[wave][i], whole, sizeof whole - 1));
            cr_assert(mg_test_read_response(fds[wave][i], &r, false, CEILING_MS));
            mg_test_response_free(&r);
        }
    }
    /* When each was closed, as first seen: all of them polled at once. */
    const int timeout_ms[3] = {3000, 3000, 1500};
    struct pollfd p[3 * WAVE];
    int64_t closed[3 * WAVE];
    for (int k = 0; k < 3 * WAVE; k++) {
        p[k] = (struct pollfd){.fd = fds[k / WAVE][k % WAVE], .events = POLLIN};
        closed[k] = -1;
    }
    int left = 3 * WAVE;
    int64_t give_up = mg_test_now_ms() + CEILING_MS;
    while (left > 0 && mg_test_now_ms() < give_up) {
        if (poll(p, 3 * WAVE, 100) <= 0)
            continue;
        int64_t now = mg_test_now_ms();
        for (int k = 0; k < 3 * WAVE; k++) {
            char byte;
            if (p[k].fd < 0 || !p[k].revents || recv(p[k].fd, &byte, 1, MSG_DONTWAIT) > 0)
                continue;
            closed[k] = now;
            p[k].fd = -1;
            left--;
        }
    }
    cr_expect_eq(left, 0, "%d connections were not cut", left);
    int64_t last[3] = {0, 0, 0};
    for (int k = 0; k < 3 * WAVE; k++) {
        int wave = k / WAVE;
        long long after = (long long)(closed[k] - opened[wave]);
        if (closed[k] >= 0)
            cr_expect_geq(after, timeout_ms[wave] - 10, "wave %d #%d cut after %lld ms", wave,
                          k % WAVE, after);
        if (closed[k] > last[wave])
            last[wave] = closed[k];
        close(fds[wave][k % WAVE]);
    }
    cr_log_info("cut at last %lld ms (header), %lld ms (header, a second later), %lld ms (idle) "
                "after their waves opened",
                (long long)(last[0] - opened[0]), (long long)(last[1] - opened[1]),
                (long long)(last[2] - opened[2]));
    cr_expect_eq(mg_test_server_stop(&s, CEILING_MS), 0);
}

/* workers/core/worker.c's TURN_WRITE_BYTES: the most of an answer one connection gets a turn. */
#define TURN_WRITE_BYTES (256 * 1024)

/* A server of one worker on a database of two transmissions heard 1 000 times each, in dir
 * (made here; the caller removes it): a packet detail of 1.4 MB, built on a helper (heavy).
 * Returns a connection to it. */
static int start_heard(struct mg_test_server *s, char *dir, size_t cap)
{
    char db[256], err[512];
    mg_test_tmpdir(dir, cap);
    cr_assert(dir[0], "no temporary directory");
    snprintf(db, sizeof db, "%s/heard.db", dir);
    struct mg_fixture_options o;
    mg_fixture_options_default(&o);
    o.seed = 23;
    o.observations = 2000;
    o.obs_per_tx = 1000;
    o.observers = 1000;
    cr_assert_eq(mg_fixture_generate(db, &o, err, sizeof err), 0, "%s", err);
    const char *env[] = {"MESHGATE_WORKERS=1", "MESHGATE_TEST_HOOKS=park",
                         "MESHGATE_TX_SUMMARIES=0", NULL};
    cr_assert(mg_test_server_start(s, db, env));
    int fd = mg_test_connect(s->port);
    cr_assert_geq(fd, 0);
    return fd;
}

/* The packet detail on fd, with extra headers (or none); its body and head in r. */
static void packet(int fd, const char *extra, struct mg_test_response *r)
{
    char req[256];
    int n = snprintf(req, sizeof req, "GET /api/packets/1 HTTP/1.1\r\nHost: t\r\n%s\r\n",
                     extra ? extra : "");
    cr_assert(mg_test_send(fd, req, (size_t)n));
    cr_assert(mg_test_read_response(fd, r, false, CEILING_MS), "the packet was not answered");
    cr_assert_eq(r->status, 200, "%s", r->head);
}

/*
 * A packet detail of 1 000 observations (1.4 MB; 2.9 MB for 800 on the heavy shape) read by a
 * client as fast as it can. Before, the loop sent the whole answer in one turn for as long as
 * the socket took it (one send of 2.9 MB, 6 to 11 ms, on the heavy shape); now at most
 * TURN_WRITE_BYTES a turn, the rest on the next turns, which serve the other connections too;
 * and the body is sent from the buffer it was built in, not copied behind its head.
 */
Test(loop, a_large_answer_is_written_over_several_turns)
{
    char dir[128];
    struct mg_test_server s;
    int fd = start_heard(&s, dir, sizeof dir);
    struct loop_counts before = healthz(fd);
    struct mg_test_response r;
    packet(fd, NULL, &r);
    size_t len = r.body_len;
    mg_test_response_free(&r);
    cr_assert_gt(len, 4u * TURN_WRITE_BYTES, "only %zu bytes: not a large answer", len);
    struct loop_counts after = healthz(fd);
    unsigned long long turns = after.turns - before.turns, sends = after.sends - before.sends;
    cr_log_info("%zu bytes in %llu sends over %llu turns, at most %llu bytes a turn", len, sends,
                turns, after.max_turn_write);
    cr_expect_leq(after.max_turn_write, TURN_WRITE_BYTES, "%llu bytes written in one turn",
                  after.max_turn_write);
    cr_expect_geq(turns, len / TURN_WRITE_BYTES, "%zu bytes in %llu turns", len, turns);
    /* And the body went out of the buffer the helper built it in: the loop serialized the
     * heads and the healthz answers, not a copy of the body (before: all of it). */
    unsigned long long copied = after.out_bytes - before.out_bytes;
    cr_expect_lt(copied, 64 * 1024, "%llu bytes serialized for a body of %zu", copied, len);
    close(fd);
    cr_expect_eq(mg_test_server_stop(&s, CEILING_MS), 0);
    mg_test_rmdir(dir);
}

/*
 * The same detail for a client that takes gzip: compressed on the helper that built it, not on
 * the loop (level 4 of 2.9 MB is tens of ms of the loop's time, once per request of a flood),
 * and it inflates to exactly the plain answer.
 */
Test(loop, a_heavy_answer_is_compressed_on_its_helper_not_on_the_loop)
{
    char dir[128];
    struct mg_test_server s;
    int fd = start_heard(&s, dir, sizeof dir);
    struct mg_test_response plain, zipped;
    packet(fd, NULL, &plain);
    struct loop_counts before = healthz(fd);
    packet(fd, "Accept-Encoding: gzip\r\n", &zipped);
    struct loop_counts after = healthz(fd);
    char v[64];
    cr_expect(mg_test_header(&zipped, "Content-Encoding", v, sizeof v) && strcmp(v, "gzip") == 0,
              "%s", zipped.head);
    size_t len = 0;
    char *inflated = mg_test_gunzip(zipped.body, zipped.body_len, &len);
    cr_assert(inflated, "not one whole gzip stream (%zu bytes)", zipped.body_len);
    cr_expect_eq(len, plain.body_len);
    cr_expect(len == plain.body_len && memcmp(inflated, plain.body, len) == 0,
              "inflates to exactly the plain answer");
    cr_log_info("%zu bytes, %zu compressed; the loop compressed %llu answers meanwhile",
                plain.body_len, zipped.body_len, after.gzips - before.gzips);
    cr_expect_eq(after.gzips, before.gzips, "the loop compressed %llu answers",
                 after.gzips - before.gzips);
    free(inflated);
    mg_test_response_free(&plain);
    mg_test_response_free(&zipped);
    close(fd);
    cr_expect_eq(mg_test_server_stop(&s, CEILING_MS), 0);
    mg_test_rmdir(dir);
}

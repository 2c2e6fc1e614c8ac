/* SPDX-License-Identifier: ISC */
/*
 * The anonymous line, the per-client rate limit and the gates together (issue 6), against
 * the real binary with real worker processes.
 *
 * Heavy work is made to last with the test hooks (MESHGATE_TEST_HOOKS, dispatch.c): a heavy
 * request carrying "X-Test-Hold-Ms: N" is held N ms after its admission: on the helper thread
 * that runs it (anonymous heavy requests, reach builds), or else parked ("park") or blocking its
 * worker as a long inline scan would ("block"). Light requests read the database freely meanwhile,
 * which a database lock (the technique of test_reach_gate.c) would not allow.
 */
#include "harness.h"

#include "gate_diag.h"
#include "gate_fifo.h"
#include "scoreboard.h"
#include "segment.h"
#include "stats.h"
#include "upstream_gate.h"
#include "upstream_proc.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <sys/resource.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

TestSuite(anon, .timeout = 90);

#define KEY "operator-0123456789abcdef"
#define SIGNED_IN "Authorization: Bearer " KEY "\r\n"
#define HOLD(ms) "X-Test-Hold-Ms: " #ms "\r\n"
#define OTHER_KEY "second-operator-0123456789abcdef"

static char dir[128], keys_setting[300];

static void make_dir(void)
{
    mg_test_tmpdir(dir, sizeof dir);
    mg_test_write_keys_file(dir, KEY, keys_setting, sizeof keys_setting);
}

static void remove_dir(void)
{
    mg_test_rmdir(dir);
}

/* One request on its own connection, maybe on a thread of its own. */
struct call {
    int port;
    const char *path;
    const char *headers;
    int status; /* -1: no answer (the connection broke) */
    char retry_after[16];
    char cache_control[32];
    char body[512];
    int64_t ms;
    int64_t end_ms; /* mg_test_now_ms when it ended; 0: running */
    pthread_t thread;
};

static void *run_call(void *p)
{
    struct call *c = p;
    int64_t start = mg_test_now_ms();
    struct mg_test_response r;
    c->status = -1;
    c->retry_after[0] = c->cache_control[0] = c->body[0] = '\0';
    if (mg_test_get(c->port, c->path, c->headers, &r)) {
        c->status = r.status;
        mg_test_header(&r, "Retry-After", c->retry_after, sizeof c->retry_after);
        mg_test_header(&r, "Cache-Control", c->cache_control, sizeof c->cache_control);
        snprintf(c->body, sizeof c->body, "%s", r.body ? r.body : "");
        mg_test_response_free(&r);
    }
    c->end_ms = mg_test_now_ms();
    c->ms = c->end_ms - start;
    return NULL;
}

static void call_now(struct call *c, int port, const char *path, const char *headers)
{
    c->port = port;
    c->path = path;
    c->headers = headers;
    run_call(c);
}

static void call_start(struct call *c, int port, const char *path, const char *headers)
{
    c->port = port;
    c->path = path;
    c->headers = headers;
    cr_assert_eq(pthread_create(&c->thread, NULL, run_call, c), 0);
}

static void call_join(struct call *c)
{
    pthread_join(c->thread, NULL);
}

static void attach(struct mg_test_server *s, struct mg_segment *seg)
{
    char err[256];
    cr_assert_eq(mg_segment_attach(seg, s->shm_name, true, err, sizeof err), 0, "%s", err);
}

/* How long a wait for a state of the gates may take before the test fails: generous, for a
 * busy machine under ASan; a pass never waits for it. */
#define WAIT_CEILING_MS 30000

/* GET path now from another address (127.0.0.2), on a connection of its own. */
static void call_from_other(struct call *c, int port, const char *path)
{
    memset(c, 0, sizeof *c);
    c->status = -1;
    int fd = mg_test_connect_from("127.0.0.2", port);
    cr_assert_geq(fd, 0);
    char req[256];
    int n =
        snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", path);
    int64_t start = mg_test_now_ms();
    cr_assert(mg_test_send(fd, req, (size_t)n));
    struct mg_test_response r;
    cr_assert(mg_test_read_response(fd, &r, false, WAIT_CEILING_MS), "no answer");
    c->end_ms = mg_test_now_ms();
    c->ms = c->end_ms - start;
    close(fd);
    c->status = r.status;
    snprintf(c->body, sizeof c->body, "%s", r.body ? r.body : "");
    mg_test_response_free(&r);
}

static bool wait_for(const volatile uint32_t *value, uint32_t want, int ms)
{
    int64_t give_up = mg_test_now_ms() + ms;
    while (*value != want && mg_test_now_ms() < give_up)
        mg_test_sleep_ms(2);
    return *value == want;
}

static bool wait_for64(const _Atomic uint64_t *value, uint64_t want, int ms)
{
    int64_t give_up = mg_test_now_ms() + ms;
    while (atomic_load(value) < want && mg_test_now_ms() < give_up)
        mg_test_sleep_ms(2);
    return atomic_load(value) >= want;
}

/* What meshgate-shm prints for the server's segment (args: "" or "--json"). */
static void tool_output(const struct mg_test_server *s, const char *args, char *out, size_t cap)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s/meshgate-shm --name %s %s", MESHGATE_BUILD_DIR, s->shm_name,
             args);
    FILE *p = popen(cmd, "r");
    cr_assert(p, "%s", cmd);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    cr_expect_eq(pclose(p), 0, "%s", cmd);
}

static void expect_line_refusal(const struct call *c, const char *why)
{
    cr_expect_eq(c->status, 503, "%d %s", c->status, c->body);
    cr_expect_str_eq(c->retry_after, "1");
    cr_expect_str_eq(c->cache_control, "no-store");
    cr_expect(strncmp(c->body, "{\"error\":\"", 10) == 0, "%s", c->body);
    cr_expect(strstr(c->body, "\",\"retryAfter\":1}"), "%s", c->body);
    cr_expect(strstr(c->body, why), "%s", c->body);
}

Test(anon, with_every_permit_held_anonymous_heavy_waits_while_signed_in_and_light_answer,
     .init = make_dir, .fini = remove_dir)
{
    const char *env[] = {"MESHGATE_WORKERS=4",
                         "MESHGATE_ANON_CONCURRENCY=2",
                         "MESHGATE_ANON_QUEUE=4",
                         "MESHGATE_ANON_WAIT_MS=20000",
                         "MESHGATE_ANON_RATE=0",
                         "MESHGATE_ANON_PER_CLIENT=0",
                         "MESHGATE_TEST_HOOKS=park",
                         keys_setting,
                         NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    struct mg_segment seg;
    attach(&s, &seg);
    struct call holder[2], waiter;
    for (int i = 0; i < 2; i++)
        call_start(&holder[i], s.port, "/api/packets?expand=observations", HOLD(2500));
    cr_assert(wait_for(&seg.anon->in_flight, 2, WAIT_CEILING_MS), "both permits held");
    call_start(&waiter, s.port, "/api/packets?expand=observations&limit=1", NULL);
    cr_assert(wait_for(&seg.anon->waiting, 1, WAIT_CEILING_MS),
              "the third anonymous request waits");

    /* Signed in: never waits in the line; light: never touches it. */
    struct call c;
    call_now(&c, s.port, "/api/packets?expand=observations&limit=2", SIGNED_IN);
    cr_expect_eq(c.status, 200, "%s", c.body);
    cr_expect_lt(c.ms, 1000, "signed-in heavy took %lld ms", (long long)c.ms);
    call_now(&c, s.port, "/api/packets?expand=observations&limit=3", "X-API-Key: " KEY "\r\n");
    cr_expect_eq(c.status, 200, "%s", c.body);
    cr_expect_lt(c.ms, 1000);
    call_now(&c, s.port, "/api/nodes", NULL);
    cr_expect_eq(c.status, 200, "%s", c.body);
    cr_expect_lt(c.ms, 1000, "anonymous light took %lld ms", (long long)c.ms);
    call_now(&c, s.port, "/api/perf", NULL);
    cr_expect_eq(c.status, 200);
    cr_expect_lt(c.ms, 1000);
    cr_expect_eq(seg.anon->waiting, 1, "the anonymous request still waits");
    cr_expect_eq(seg.anon->in_flight, 2);
    cr_expect_eq(mg_counter_get(&seg, MG_CTR_ANON_BYPASSED), 2);

    for (int i = 0; i < 2; i++) {
        call_join(&holder[i]);
        cr_expect_eq(holder[i].status, 200, "%s", holder[i].body);
    }
    call_join(&waiter);
    cr_expect_eq(waiter.status, 200, "%s", waiter.body);
    cr_expect_geq(waiter.ms, 1500, "admitted only when a permit came back (%lld ms)",
                  (long long)waiter.ms);
    cr_expect_eq(atomic_load(&seg.anon->acquired), 3);
    cr_expect_eq(atomic_load(&seg.anon->waited), 1);
    cr_expect_eq(atomic_load(&seg.anon->refused_full) + atomic_load(&seg.anon->refused_timeout), 0);
    cr_expect_eq(atomic_load(&seg.anon->peak), 2);
    cr_expect(wait_for(&seg.anon->in_flight, 0, 2000), "every permit is back");
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
}

/* A page of /api/packets the summaries answer (no filter, at most MG_PACKETS_LIGHT_LIMIT rows)
 * is light: signed in, it is answered on the worker's loop, not handed to its signed-in helper
 * (the bypass counter does not move); anonymous, it never meets the line. Once the group's
 * summaries and total are made (the first such page may be admitted again, heavy, while they
 * are not), every one is. A longer page, an expanded one, goes to the helper. */
Test(anon, a_signed_in_page_the_summaries_answer_runs_on_the_loop_not_its_helper, .init = make_dir,
     .fini = remove_dir)
{
    const char *env[] = {"MESHGATE_WORKERS=1", "MESHGATE_ANON_RATE=0", keys_setting, NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    struct mg_segment seg;
    attach(&s, &seg);
    struct call c;
    bool light = false;
    int64_t give_up = mg_test_now_ms() + 60000; /* the suite's timeout is 90 s */
    while (!light && mg_test_now_ms() < give_up) {
        uint64_t bypassed = mg_counter_get(&seg, MG_CTR_ANON_BYPASSED);
        call_now(&c, s.port, "/api/packets?limit=50", SIGNED_IN);
        cr_assert_eq(c.status, 200, "%d %s", c.status, c.body);
        light = mg_counter_get(&seg, MG_CTR_ANON_BYPASSED) == bypassed;
        if (!light)
            mg_test_sleep_ms(50);
    }
    cr_assert(light, "a signed-in /api/packets?limit=50 always went to the helper");
    uint64_t bypassed = mg_counter_get(&seg, MG_CTR_ANON_BYPASSED);
    uint64_t acquired = atomic_load(&seg.anon->acquired);
    for (int i = 0; i < 5; i++) {
        call_now(&c, s.port, i % 2 ? "/api/packets?limit=50" : "/api/packets", SIGNED_IN);
        cr_expect_eq(c.status, 200, "%d %s", c.status, c.body);
        call_now(&c, s.port, "/api/packets?limit=50", NULL);
        cr_expect_eq(c.status, 200, "%d %s", c.status, c.body);
    }
    cr_expect_eq(mg_counter_get(&seg, MG_CTR_ANON_BYPASSED), bypassed, "one went to the helper");
    cr_expect_eq(atomic_load(&seg.anon->acquired), acquired, "an anonymous page met the line");
    call_now(&c, s.port, "/api/packets?limit=51", SIGNED_IN);
    cr_expect_eq(c.status, 200, "%d %s", c.status, c.body);
    call_now(&c, s.port, "/api/packets?limit=50&expand=observations", SIGNED_IN);
    cr_expect_eq(c.status, 200, "%d %s", c.status, c.body);
    cr_expect_eq(mg_counter_get(&seg, MG_CTR_ANON_BYPASSED), bypassed + 2,
                 "a page past the bounds was not handed to the helper");
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 20000), 0);
}

Test(anon, a_full_line_answers_503_with_retry_after_and_does_not_grow, .init = make_dir,
     .fini = remove_dir)
{
    const char *env[] = {"MESHGATE_WORKERS=4",       "MESHGATE_ANON_CONCURRENCY=1",
                         "MESHGATE_ANON_QUEUE=2",    "MESHGATE_ANON_WAIT_MS=20000",
                         "MESHGATE_ANON_RATE=0",     "MESHGATE_ANON_PER_CLIENT=0",
                         "MESHGATE_TEST_HOOKS=park", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    struct mg_segment seg;
    attach(&s, &seg);
    struct call holder, waiter[2];
    call_start(&holder, s.port, "/api/packets?expand=observations", HOLD(2000));
    cr_assert(wait_for(&seg.anon->in_flight, 1, WAIT_CEILING_MS));
    for (int i = 0; i < 2; i++)
        call_start(&waiter[i], s.port, "/api/packets?expand=observations", NULL);
    cr_assert(wait_for(&seg.anon->waiting, 2, WAIT_CEILING_MS));
    for (int i = 0; i < 5; i++) {
        struct call c;
        call_now(&c, s.port, "/api/packets?expand=observations&limit=5", NULL);
        expect_line_refusal(&c, "line for anonymous heavy requests is full");
        cr_expect_lt(c.ms, 1000, "a refusal is immediate (%lld ms)", (long long)c.ms);
        cr_expect_eq(seg.anon->waiting, 2, "the line grew");
    }
    cr_expect_eq(atomic_load(&seg.anon->refused_full), 5);
    /* Every view shows the line and its counters: the dump tool, /api/perf, /metrics. */
    char text[65536];
    tool_output(&s, "", text, sizeof text);
    cr_expect(strstr(text, "anon_line (anonymous heavy requests): cap 1, 1 in flight, 2 waiting "
                           "of 2 places"),
              "%s", text);
    cr_expect(strstr(text, "refused full 5, refused timeout 0"), "%s", text);
    cr_expect(strstr(text, "holder    worker"), "%s", text);
    cr_expect(strstr(text, "127.0.0.1 /api/packets"), "%s", text);
    tool_output(&s, "--json", text, sizeof text);
    cr_expect(strstr(text, "\"anon_line\":{\"cap\":1,\"in_flight\":1,\"waiting\":2,"), "%s", text);
    cr_expect(strstr(text, "\"refused_full\":5,"), "%s", text);
    struct mg_test_response m;
    cr_assert(mg_test_get(s.port, "/api/perf", NULL, &m));
    cr_expect(strstr(m.body, "\"anonLine\":{\"cap\":1,\"inFlight\":1,\"queueMax\":2,"
                             "\"waiting\":2,"),
              "%s", m.body);
    cr_expect(strstr(m.body, "\"refusedFull\":5,\"refusedTimeout\":0,"), "%s", m.body);
    mg_test_response_free(&m);
    cr_assert(mg_test_get(s.port, "/metrics", NULL, &m));
    cr_expect(strstr(m.body, "\nmeshgate_anon_line_refused_full_total 5\n"), "%s", m.body);
    mg_test_response_free(&m);
    call_join(&holder);
    cr_expect_eq(holder.status, 200);
    for (int i = 0; i < 2; i++) {
        call_join(&waiter[i]);
        cr_expect_eq(waiter[i].status, 200, "%s", waiter[i].body);
    }
    cr_expect_eq(atomic_load(&seg.anon->acquired), 3);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
}

Test(anon, thirty_at_once_against_two_permits_and_three_places_admit_five, .init = make_dir,
     .fini = remove_dir)
{
    const char *env[] = {"MESHGATE_WORKERS=4",       "MESHGATE_ANON_CONCURRENCY=2",
                         "MESHGATE_ANON_QUEUE=3",    "MESHGATE_ANON_WAIT_MS=20000",
                         "MESHGATE_ANON_RATE=0",     "MESHGATE_ANON_PER_CLIENT=0",
                         "MESHGATE_TEST_HOOKS=park", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    struct mg_segment seg;
    attach(&s, &seg);
    enum { N = 30 };
    struct call c[N];
    for (int i = 0; i < N; i++)
        call_start(&c[i], s.port, "/api/packets?expand=observations", HOLD(1500));
    int ok = 0, refused = 0;
    for (int i = 0; i < N; i++) {
        call_join(&c[i]);
        if (c[i].status == 200) {
            ok++;
        } else {
            refused++;
            expect_line_refusal(&c[i], "is full");
        }
    }
    cr_expect_eq(ok, 5, "admitted or waiting: %d", ok);
    cr_expect_eq(refused, 25);
    cr_expect_eq(atomic_load(&seg.anon->acquired), 5);
    cr_expect_eq(atomic_load(&seg.anon->waited), 3);
    cr_expect_eq(atomic_load(&seg.anon->refused_full), 25);
    cr_expect_eq(atomic_load(&seg.anon->peak), 2, "the cap was exceeded");
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
}

Test(anon, the_wait_in_line_is_bounded, .init = make_dir, .fini = remove_dir)
{
    const char *env[] = {"MESHGATE_ANON_CONCURRENCY=1",
                         "MESHGATE_ANON_QUEUE=4",
                         "MESHGATE_ANON_WAIT_MS=400",
                         "MESHGATE_ANON_RATE=0",
                         "MESHGATE_ANON_PER_CLIENT=0",
                         "MESHGATE_TEST_HOOKS=park",
                         NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    struct mg_segment seg;
    attach(&s, &seg);
    struct call holder, c;
    call_start(&holder, s.port, "/api/packets?expand=observations", HOLD(3000));
    cr_assert(wait_for(&seg.anon->in_flight, 1, WAIT_CEILING_MS));
    call_now(&c, s.port, "/api/packets?expand=observations", NULL);
    expect_line_refusal(&c, "ran out");
    cr_expect_geq(c.ms, 380, "refused before its wait (%lld ms)", (long long)c.ms);
    cr_expect_lt(c.ms, 1500, "waited past its bound (%lld ms)", (long long)c.ms);
    cr_expect_eq(atomic_load(&seg.anon->refused_timeout), 1);
    cr_expect_eq(seg.anon->waiting, 0, "the place was given up");
    call_join(&holder);
    cr_expect_eq(holder.status, 200);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
}

Test(anon, a_worker_killed_holding_an_anonymous_permit_gives_it_back, .init = make_dir,
     .fini = remove_dir)
{
    /* The holder keeps its worker's anonymous helper busy, and with four workers against one
     * anonymous permit and one cold permit that worker leaves new connections to the others:
     * the waiter is surely read by another worker. */
    const char *env[] = {
        "MESHGATE_WORKERS=4",         "MESHGATE_ANON_CONCURRENCY=1", "MESHGATE_REACH_COLD_MAX=1",
        "MESHGATE_ANON_QUEUE=4",      "MESHGATE_ANON_WAIT_MS=20000", "MESHGATE_ANON_RATE=0",
        "MESHGATE_ANON_PER_CLIENT=0", "MESHGATE_TEST_HOOKS=park",    NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    struct mg_segment seg;
    attach(&s, &seg);
    struct call holder, waiter;
    call_start(&holder, s.port, "/api/packets?expand=observations", HOLD(30000));
    cr_assert(wait_for(&seg.anon->in_flight, 1, WAIT_CEILING_MS));
    int pid = 0;
    for (int i = 0; i < MG_FIFO_HOLDERS_MAX && !pid; i++)
        pid = seg.anon->holder[i].pid;
    cr_assert_gt(pid, 0, "the permit names its holder");
    cr_expect(strstr(seg.anon->holder[0].key, "127.0.0.1 /api/packets") ||
                  strstr(seg.anon->holder[1].key, "127.0.0.1 /api/packets"),
              "the record names the client and the path");
    call_start(&waiter, s.port, "/api/packets?expand=observations", NULL);
    cr_assert(wait_for(&seg.anon->waiting, 1, WAIT_CEILING_MS));
    int64_t killed = mg_test_now_ms();
    cr_assert_eq(kill(pid, SIGKILL), 0);
    cr_expect(wait_for64(&seg.anon->reclaimed, 1, 3000), "the permit was not reclaimed");
    call_join(&waiter);
    cr_expect_eq(waiter.status, 200, "%s", waiter.body);
    cr_expect_lt(mg_test_now_ms() - killed, 3000, "the waiter got the permit late");
    call_join(&holder);
    cr_expect_eq(holder.status, -1, "the killed worker's client got no answer");
    cr_expect(wait_for(&seg.anon->in_flight, 0, 2000));
    struct call c;
    call_now(&c, s.port, "/api/packets?expand=observations", NULL);
    cr_expect_eq(c.status, 200);
    cr_expect_lt(c.ms, 1000);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
}

Test(anon, the_rate_limit_lets_the_burst_through_then_says_when_to_come_back, .init = make_dir,
     .fini = remove_dir)
{
    /* 30 a minute: one every 2 s after a burst of 3. */
    const char *env[] = {"MESHGATE_ANON_RATE=30", "MESHGATE_ANON_BURST=3", keys_setting, NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    struct mg_segment seg;
    attach(&s, &seg);
    struct call c;
    for (int i = 0; i < 3; i++) {
        call_now(&c, s.port, "/api/packets?expand=observations", NULL);
        cr_expect_eq(c.status, 200, "request %d of the burst: %d %s", i + 1, c.status, c.body);
    }
    call_now(&c, s.port, "/api/packets?expand=observations", NULL);
    cr_expect_eq(c.status, 429, "%d %s", c.status, c.body);
    cr_expect_str_eq(c.retry_after, "2");
    cr_expect_str_eq(c.cache_control, "no-store");
    cr_expect(strstr(c.body, "\"retryAfter\":2}"), "%s", c.body);
    int64_t refused_at = mg_test_now_ms();
    /* Light requests and signed-in clients are not counted against it. */
    call_now(&c, s.port, "/api/nodes", NULL);
    cr_expect_eq(c.status, 200);
    call_now(&c, s.port, "/api/packets?expand=observations", SIGNED_IN);
    cr_expect_eq(c.status, 200);
    /* A refusal takes nothing: the next is refused with the same wait, no longer. */
    call_now(&c, s.port, "/api/packets?expand=observations&limit=1", NULL);
    cr_expect_eq(c.status, 429);
    cr_expect(strcmp(c.retry_after, "1") == 0 || strcmp(c.retry_after, "2") == 0, "%s",
              c.retry_after);
    mg_test_sleep_ms((int)(2050 - (mg_test_now_ms() - refused_at)));
    call_now(&c, s.port, "/api/packets?expand=observations", NULL);
    cr_expect_eq(c.status, 200, "after Retry-After one passes again: %d %s", c.status, c.body);
    call_now(&c, s.port, "/api/packets?expand=observations", NULL);
    cr_expect_eq(c.status, 429, "and only one");
    cr_expect_eq(mg_counter_get(&seg, MG_CTR_ANON_RATE_LIMITED), 3);
    cr_expect_eq(mg_counter_get(&seg, MG_CTR_ANON_BYPASSED), 1);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
}

static int status_from(int port, const char *xff)
{
    char headers[256] = "";
    if (xff)
        snprintf(headers, sizeof headers, "X-Forwarded-For: %s\r\n", xff);
    struct call c;
    call_now(&c, port, "/api/packets?expand=observations&limit=1", headers);
    return c.status;
}

static bool log_has_both_lines(void *arg)
{
    char *log = mg_test_server_log(arg);
    bool both =
        log &&
        strstr(
            log,
            "access 198.51.100.2 (via 127.0.0.1) \"GET /api/packets?expand=observations&limit=1") &&
        strstr(log, "access 127.0.0.1 \"GET /api/packets?expand=observations&limit=1");
    free(log);
    return both;
}

Test(anon, x_forwarded_for_counts_only_from_a_trusted_proxy, .init = make_dir, .fini = remove_dir)
{
    /* One request a minute: a second from the same client is refused. */
    const char *untrusted[] = {"MESHGATE_ANON_RATE=1", "MESHGATE_ANON_BURST=1", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, untrusted));
    cr_expect_eq(status_from(s.port, "198.51.100.1"), 200);
    cr_expect_eq(status_from(s.port, "198.51.100.2"), 429, "a client chose its address");
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);

    const char *trusted[] = {"MESHGATE_ANON_RATE=1", "MESHGATE_ANON_BURST=1",
                             "MESHGATE_TRUSTED_PROXIES=10.0.0.0/8, 127.0.0.1",
                             "MESHGATE_ACCESS_LOG=1", NULL};
    cr_assert(mg_test_server_start(&s, NULL, trusted));
    cr_expect_eq(status_from(s.port, "198.51.100.1"), 200);
    cr_expect_eq(status_from(s.port, "198.51.100.2"), 200, "another client behind the proxy");
    cr_expect_eq(status_from(s.port, "198.51.100.1"), 429, "the same client again");
    cr_expect_eq(status_from(s.port, NULL), 200, "the proxy's own requests are its own");
    /* Entries a client puts in front forge nothing; trusted hops are skipped. */
    cr_expect_eq(status_from(s.port, "203.0.113.9, 198.51.100.3"), 200);
    cr_expect_eq(status_from(s.port, "203.0.113.7, 198.51.100.3"), 429);
    cr_expect_eq(status_from(s.port, "198.51.100.4, 10.1.2.3"), 200);
    cr_expect_eq(status_from(s.port, "198.51.100.4"), 429);
    /* An IPv6 /64 is one client. */
    cr_expect_eq(status_from(s.port, "2001:db8::1"), 200);
    cr_expect_eq(status_from(s.port, "2001:db8::ffff:2"), 429);
    cr_expect_eq(status_from(s.port, "2001:db8:0:1::1"), 200);
    /* The access log names the client, and the proxy it came through (once it is written). */
    cr_expect(mg_test_wait_until(log_has_both_lines, &s, WAIT_CEILING_MS, 10));
    char *log = mg_test_server_log(&s);
    cr_expect(
        strstr(
            log,
            "access 198.51.100.2 (via 127.0.0.1) \"GET /api/packets?expand=observations&limit=1"),
        "%s", log);
    cr_expect(strstr(log, "access 127.0.0.1 \"GET /api/packets?expand=observations&limit=1"), "%s",
              log);
    free(log);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
}

/* One client (behind a trusted proxy, as the rate limit knows it) holds at most its share of
 * the line's permits and places: past it, 503 at once, and another client still gets a place
 * and its answer. */
Test(anon, one_client_holds_only_its_share_of_the_line_and_another_is_answered, .init = make_dir,
     .fini = remove_dir)
{
    const char *env[] = {"MESHGATE_WORKERS=2",
                         "MESHGATE_ANON_CONCURRENCY=1",
                         "MESHGATE_ANON_QUEUE=8",
                         "MESHGATE_ANON_PER_CLIENT=3",
                         "MESHGATE_ANON_WAIT_MS=20000",
                         "MESHGATE_ANON_RATE=0",
                         "MESHGATE_TRUSTED_PROXIES=127.0.0.1",
                         "MESHGATE_TEST_HOOKS=park",
                         NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    struct mg_segment seg;
    attach(&s, &seg);
#define CLIENT_A "X-Forwarded-For: 198.51.100.1\r\n"
#define CLIENT_B "X-Forwarded-For: 198.51.100.2\r\n"
    struct call a[3], b;
    call_start(&a[0], s.port, "/api/packets?expand=observations", CLIENT_A HOLD(1500));
    cr_assert(wait_for(&seg.anon->in_flight, 1, WAIT_CEILING_MS));
    for (int i = 1; i < 3; i++)
        call_start(&a[i], s.port, "/api/packets?expand=observations", CLIENT_A HOLD(200));
    cr_assert(wait_for(&seg.anon->waiting, 2, WAIT_CEILING_MS), "a's share: a permit, 2 places");
    for (int i = 0; i < 3; i++) {
        struct call c;
        call_now(&c, s.port, "/api/packets?expand=observations&limit=5", CLIENT_A);
        expect_line_refusal(&c, "this address holds its share of the line");
        cr_expect_lt(c.ms, 1000, "a refusal is immediate (%lld ms)", (long long)c.ms);
        cr_expect_eq(seg.anon->waiting, 2, "a took more than its share");
    }
    call_start(&b, s.port, "/api/packets?expand=observations&limit=1", CLIENT_B);
    cr_assert(wait_for(&seg.anon->waiting, 3, WAIT_CEILING_MS), "b waits in line");
    cr_expect_eq(atomic_load(&seg.anon->refused_share), 3);
    cr_expect_eq(atomic_load(&seg.anon->refused_full), 0);
    struct mg_test_response m;
    cr_assert(mg_test_get(s.port, "/metrics", NULL, &m));
    cr_expect(strstr(m.body, "\nmeshgate_anon_line_refused_share_total 3\n"), "%s", m.body);
    mg_test_response_free(&m);
    for (int i = 0; i < 3; i++) {
        call_join(&a[i]);
        cr_expect_eq(a[i].status, 200, "%s", a[i].body);
    }
    call_join(&b);
    cr_expect_eq(b.status, 200, "%d %s", b.status, b.body);
    cr_expect_eq(atomic_load(&seg.anon->acquired), 4);
    /* The share is free again once a's requests are answered. */
    struct call c;
    call_now(&c, s.port, "/api/packets?expand=observations&limit=2", CLIENT_A);
    cr_expect_eq(c.status, 200, "%d %s", c.status, c.body);
#undef CLIENT_A
#undef CLIENT_B
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
}

/* One anonymous client flooding a slow heavy route from 127.0.0.1: 16 connections, each
 * asking again as soon as it is answered (after a refused one, 50 ms later). Its slowness is
 * the hold alone: each request a hash no transmission has (a new key: no answer is shared or
 * cached), so its work stays a lookup however many it sends; a growing page made the work of
 * each admitted request grow with the flood, on the anonymous helper at nice 10 behind busy
 * cores (a fresh clone's four busy loops: the line's wait ran out). */
#define FLOOD_CONNECTIONS 16
struct flood {
    int port;
    _Atomic bool stop;
    _Atomic int next; /* each request a new key */
    _Atomic int answered, refused;
    pthread_t thread[FLOOD_CONNECTIONS];
};

static void *flood_loop(void *p)
{
    struct flood *f = p;
    while (!atomic_load(&f->stop)) {
        char target[64];
        snprintf(target, sizeof target, "/api/packets?expand=observations&hash=flood%d",
                 atomic_fetch_add(&f->next, 1));
        struct mg_test_response r;
        int status = 0;
        if (mg_test_get(f->port, target, HOLD(2000), &r)) {
            status = r.status;
            mg_test_response_free(&r);
        }
        atomic_fetch_add(status == 200 ? &f->answered : &f->refused, 1);
        if (status != 200)
            mg_test_sleep_ms(50);
    }
    return NULL;
}

/* The fair hand-off (shm/gate_fifo.h): while one address keeps its whole share of the line
 * (a permit held 2 s and five places, each 2 s of work), another address's anonymous heavy
 * request is served next, not after the flooder's five places: between its arrival and its
 * answer the flooder is given at most two permits (one handed on before it joined the line,
 * one after its own was given back), where a line in arrival order gives five first. The
 * count, not a time, tells the two apart, so a loaded machine cannot; the wait is long
 * enough (20 s) that only a line that never serves it runs it out. */
Test(anon, a_flood_from_one_address_does_not_keep_another_out_of_the_line, .init = make_dir,
     .fini = remove_dir)
{
    const char *env[] = {"MESHGATE_WORKERS=2",          "MESHGATE_ANON_CONCURRENCY=1",
                         "MESHGATE_ANON_QUEUE=16",      "MESHGATE_ANON_PER_CLIENT=6",
                         "MESHGATE_ANON_WAIT_MS=20000", "MESHGATE_ANON_RATE=0",
                         "MESHGATE_TEST_HOOKS=park",    NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    struct mg_segment seg;
    attach(&s, &seg);
    struct flood *f = calloc(1, sizeof *f);
    cr_assert(f);
    f->port = s.port;
    for (int i = 0; i < FLOOD_CONNECTIONS; i++)
        cr_assert_eq(pthread_create(&f->thread[i], NULL, flood_loop, f), 0);
    /* The flooder holds its share: the permit and five places. */
    cr_assert(wait_for(&seg.anon->waiting, 5, WAIT_CEILING_MS), "waiting %u", seg.anon->waiting);
    cr_assert(wait_for64(&seg.anon->refused_share, 1, WAIT_CEILING_MS));
    struct call other;
    uint64_t given_before = atomic_load(&seg.anon->acquired);
    call_from_other(&other, s.port, "/api/packets?expand=observations&limit=3");
    uint64_t given = atomic_load(&seg.anon->acquired) - given_before;
    cr_expect_eq(other.status, 200, "the other address got %d after %lld ms: %s", other.status,
                 (long long)other.ms, other.body);
    cr_expect_leq(given, 3, "%llu permits given while the other address waited (its own one)",
                  (unsigned long long)given);
    atomic_store(&f->stop, true);
    for (int i = 0; i < FLOOD_CONNECTIONS; i++)
        pthread_join(f->thread[i], NULL);
    cr_expect_gt(atomic_load(&f->answered), 0, "the flooder was served too");
    cr_expect_gt(atomic_load(&seg.anon->refused_share), 0, "the flood never reached its share");
    free(f);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
}

/* A request for the upstream never meets the anonymous line, whose permit is a build on the
 * anonymous helper: while one address's build holds the line's one permit (held 8 s, past the
 * line's wait of 3 s), another address's anonymous request for a heavy upstream route passes
 * its rate limit and the upstream's gate and is answered, without a place in the line. With a
 * place in it, it waited out the 3 s and got 503. */
Test(anon, a_slow_anonymous_build_does_not_hold_another_address_s_upstream_request,
     .init = make_dir, .fini = remove_dir)
{
    struct mg_test_upstream up = {0};
    mg_test_upstream_start(&up, 0, NULL);
    char upstream[64];
    snprintf(upstream, sizeof upstream, "MESHGATE_UPSTREAM=127.0.0.1:%d", up.port);
    const char *env[] = {"MESHGATE_WORKERS=2",
                         "MESHGATE_ANON_CONCURRENCY=1",
                         "MESHGATE_ANON_WAIT_MS=3000",
                         "MESHGATE_ANON_RATE=0",
                         "MESHGATE_TEST_HOOKS=park",
                         upstream,
                         "MESHGATE_UPSTREAM_HEAVY=/slow",
                         NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    struct mg_segment seg;
    attach(&s, &seg);
    struct call build;
    call_start(&build, s.port, "/api/packets?expand=observations&limit=77", HOLD(8000));
    cr_assert(wait_for(&seg.anon->in_flight, 1, WAIT_CEILING_MS), "the build never held the line");
    struct call other;
    call_from_other(&other, s.port, "/slow?ms=1");
    cr_expect_eq(other.status, 200, "the upstream request got %d after %lld ms: %s", other.status,
                 (long long)other.ms, other.body);
    cr_expect_eq(atomic_load(&seg.anon->waited), 0, "the upstream request waited in the line");
    cr_expect_eq(atomic_load(&seg.anon->refused_timeout), 0);
    cr_expect_eq(atomic_load(&seg.anon->acquired), 1, "only the build took the line's permit");
    cr_expect_geq(atomic_load(&seg.upstream->gate.acquired), 1, "it passed the upstream's gate");
    cr_expect_eq(seg.anon->in_flight, 1, "the build still holds the line");
    call_join(&build);
    cr_expect_eq(build.status, 200, "%s", build.body);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
    mg_test_upstream_stop(&up);
}

Test(anon, with_every_gate_full_light_requests_still_find_a_worker, .init = make_dir,
     .fini = remove_dir)
{
    /* Six workers: the anonymous line holds at most three (auto: half), whose holders keep
     * their workers' anonymous helpers busy; the cold gate's one permit keeps a helper busy;
     * each of those workers leaves new connections to the others (six workers outnumber the
     * four helpers the gates can keep busy). The diagnostic gate is cooling; the lines are
     * full. */
    const char *env[] = {"MESHGATE_WORKERS=6",
                         "MESHGATE_ANON_QUEUE=3",
                         "MESHGATE_ANON_WAIT_MS=60000",
                         "MESHGATE_ANON_RATE=0",
                         "MESHGATE_ANON_PER_CLIENT=0",
                         "MESHGATE_REACH_COLD_MAX=1",
                         "MESHGATE_REACH_COLD_QUEUE=2",
                         "MESHGATE_REACH_COLD_WAIT_MS=60000",
                         "MESHGATE_PERF_MEM_COOLDOWN_MS=60000",
                         "MESHGATE_TEST_HOOKS=park",
                         keys_setting,
                         NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    struct mg_segment seg;
    attach(&s, &seg);
    cr_assert_eq(seg.anon->cap, 3);
    struct call c;

    /* The diagnostic gate: one walk, then the cooldown refuses the next at once. */
    call_now(&c, s.port, "/api/perf?mem=1", SIGNED_IN);
    cr_expect_eq(c.status, 200, "%s", c.body);
    call_now(&c, s.port, "/api/perf?mem=1", NULL);
    cr_expect_eq(c.status, 429, "%s", c.body);

    /* The cold gate: one build held on a helper thread, two more keys waiting. */
    static char reach[4][128];
    for (int i = 0; i < 4; i++) {
        char key[65];
        memset(key, "abcd"[i], 64);
        key[64] = '\0';
        snprintf(reach[i], sizeof reach[i], "/api/nodes/%s/reach", key);
    }
    struct call cold[3];
    call_start(&cold[0], s.port, reach[0], SIGNED_IN HOLD(15000));
    cr_assert(wait_for(&seg.cold->in_flight, 1, WAIT_CEILING_MS));
    call_start(&cold[1], s.port, reach[1], SIGNED_IN);
    call_start(&cold[2], s.port, reach[2], SIGNED_IN);
    cr_assert(wait_for(&seg.cold->waiting, 2, WAIT_CEILING_MS));
    call_now(&c, s.port, reach[3], SIGNED_IN);
    cr_expect_eq(c.status, 429, "the cold line is full: %s", c.body);

    /* The anonymous line: three holders running on helpers, three waiting. */
    struct call holder[3], waiter[3];
    for (int i = 0; i < 3; i++) {
        call_start(&holder[i], s.port, "/api/packets?expand=observations", HOLD(15000));
        cr_assert(wait_for(&seg.anon->in_flight, (uint32_t)i + 1, WAIT_CEILING_MS));
    }
    for (int i = 0; i < 3; i++)
        call_start(&waiter[i], s.port, "/api/packets?expand=observations", NULL);
    cr_assert(wait_for(&seg.anon->waiting, 3, WAIT_CEILING_MS));
    call_now(&c, s.port, "/api/packets?expand=observations", NULL);
    expect_line_refusal(&c, "is full");

    /* Every gate is full; light requests are answered at once all the same. */
    int64_t worst = 0;
    for (int i = 0; i < 10; i++) {
        call_now(&c, s.port, i % 2 ? "/api/nodes" : "/api/nodes?limit=5", NULL);
        cr_expect_eq(c.status, 200, "%s", c.body);
        worst = c.ms > worst ? c.ms : worst;
    }
    /* Stuck behind a gate, it would wait for the 15 s holds: a sixth of that tells them apart.
     * The holds outlast the set-up by far (a fresh clone's plain stage with four busy loops
     * and a benchmark beside it took over 5 s to get here, and the 5 s holds had ended). */
    cr_expect_lt(worst, 2500, "a light request took %lld ms", (long long)worst);
    cr_expect_eq(seg.anon->in_flight, 3, "%u", seg.anon->in_flight);
    cr_expect_eq(seg.anon->waiting, 3, "%u", seg.anon->waiting);
    cr_expect_eq(seg.cold->in_flight, 1, "%u", seg.cold->in_flight);
    cr_expect_eq(seg.cold->waiting, 2, "%u", seg.cold->waiting);

    for (int i = 0; i < 3; i++) {
        call_join(&holder[i]);
        call_join(&waiter[i]);
        call_join(&cold[i]);
        cr_expect_eq(holder[i].status, 200, "holder %d: %d %s", i, holder[i].status,
                     holder[i].body);
        cr_expect_eq(waiter[i].status, 200, "waiter %d: %d %s", i, waiter[i].status,
                     waiter[i].body);
        cr_expect_eq(cold[i].status, 404, "no such node %d: %d %s (after %lld ms)", i,
                     cold[i].status, cold[i].body, (long long)cold[i].ms);
    }
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
}

Test(anon, warm_answers_and_refused_walks_do_not_wait_in_the_line, .init = make_dir,
     .fini = remove_dir)
{
    const char *env[] = {"MESHGATE_WORKERS=4",
                         "MESHGATE_ANON_CONCURRENCY=1",
                         "MESHGATE_ANON_QUEUE=1",
                         "MESHGATE_ANON_WAIT_MS=20000",
                         "MESHGATE_ANON_RATE=0",
                         "MESHGATE_ANON_PER_CLIENT=0",
                         "MESHGATE_PERF_MEM_COOLDOWN_MS=60000",
                         "MESHGATE_TEST_HOOKS=park",
                         NULL};
    char db[256];
    snprintf(db, sizeof db, "%s/nodes.db", dir);
    char key[65];
    memset(key, 'e', 64);
    key[64] = '\0';
    char sql[512];
    snprintf(sql, sizeof sql,
             "INSERT INTO nodes (public_key, name, role, first_seen) VALUES ('%s', 'R', "
             "'repeater', '2026-01-01T00:00:00Z');",
             key);
    cr_assert_eq(mg_test_make_db(db, false, sql), 0);
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db, env));
    struct mg_segment seg;
    attach(&s, &seg);
    char path[160];
    snprintf(path, sizeof path, "/api/nodes/%s/reach", key);
    struct call c;
    call_now(&c, s.port, path, NULL); /* cold: through the line, then cached */
    cr_expect_eq(c.status, 200, "%s", c.body);
    call_now(&c, s.port, "/api/perf?mem=1", NULL); /* a walk: through the line */
    cr_expect_eq(c.status, 200);
    cr_expect_eq(atomic_load(&seg.anon->acquired), 2);

    struct call holder, waiter;
    call_start(&holder, s.port, "/api/packets?expand=observations", HOLD(2000));
    cr_assert(wait_for(&seg.anon->in_flight, 1, WAIT_CEILING_MS));
    call_start(&waiter, s.port, "/api/packets?expand=observations", NULL);
    cr_assert(wait_for(&seg.anon->waiting, 1, WAIT_CEILING_MS));
    call_now(&c, s.port, path, NULL);
    cr_expect_eq(c.status, 200, "a warm report: %d %s", c.status, c.body);
    cr_expect_lt(c.ms, 1000);
    call_now(&c, s.port, "/api/perf?mem=1", NULL);
    cr_expect_eq(c.status, 429, "the cooling walk is refused by its own gate: %s", c.body);
    cr_expect_lt(c.ms, 1000);
    cr_expect_eq(atomic_load(&seg.anon->refused_full), 0);
    call_join(&holder);
    call_join(&waiter);
    cr_expect_eq(waiter.status, 200);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
}

/* The nice value (field 19 of /proc/PID/task/TID/stat) of each thread of pid, in out; how many. */
static int thread_nices(int pid, int *out, int cap)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    DIR *d = opendir(path);
    cr_assert(d, "%s", path);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL && n < cap;) {
        if (e->d_name[0] == '.')
            continue;
        char stat_path[512], text[1024];
        snprintf(stat_path, sizeof stat_path, "%s/%s/stat", path, e->d_name);
        FILE *f = fopen(stat_path, "r");
        if (!f)
            continue;
        size_t len = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        text[len] = '\0';
        const char *p = strrchr(text, ')'); /* fields restart after the command name */
        for (int field = 3; p && field <= 19; field++)
            p = strchr(p + 1, ' ');
        if (p)
            out[n++] = atoi(p + 1);
    }
    closedir(d);
    return n;
}

/* The threads of a worker, read until one has the anonymous pool's nice value (a helper sets
 * it as it starts, just after the request is admitted). */
struct nices_seen {
    int pid, base, low, nice[16], n; /* base: the server's own nice; low: its helper's */
};

static bool one_thread_lowered(void *arg)
{
    struct nices_seen *seen = arg;
    seen->n = thread_nices(seen->pid, seen->nice, 16);
    for (int i = 0; i < seen->n; i++)
        if (seen->nice[i] == seen->low)
            return true;
    return false;
}

Test(anon, anonymous_heavy_work_runs_on_a_low_priority_helper_and_the_loop_stays_free,
     .init = make_dir, .fini = remove_dir)
{
    /* One worker; "block" would stop its loop if the request ran there. */
    const char *env[] = {
        "MESHGATE_WORKERS=1",        "MESHGATE_ANON_RATE=0", "MESHGATE_ANON_PER_CLIENT=0",
        "MESHGATE_TEST_HOOKS=block", keys_setting,           NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    struct mg_segment seg;
    attach(&s, &seg);
    int worker = atomic_load(&seg.slots[0].pid);
    cr_assert_gt(worker, 0);
    struct call heavy, c;
    /* The node list is heavy until the group's tables exist (mg_nodes_is_heavy): a loaded
     * machine under ASan may still be building them. Wait until an anonymous one is answered
     * without a permit of the line, so that the one asked below tests the loop. */
    bool light = false;
    for (int64_t give_up = mg_test_now_ms() + WAIT_CEILING_MS;
         !light && mg_test_now_ms() < give_up;) {
        uint64_t acquired = atomic_load(&seg.anon->acquired);
        call_now(&c, s.port, "/api/nodes", NULL);
        light = c.status == 200 && atomic_load(&seg.anon->acquired) == acquired;
        if (!light)
            mg_test_sleep_ms(50);
    }
    cr_assert(light, "the node list did not become light (the group's tables)");
    call_start(&heavy, s.port, "/api/packets?expand=observations", HOLD(8000));
    cr_assert(wait_for(&seg.anon->in_flight, 1, WAIT_CEILING_MS));
    /* Helpers start with their pool's first job (jobs.h): while the anonymous request runs,
     * its pool has one thread, at the lower priority; the loop (and a signed-in helper, if
     * the row counts' refresh started one) stay at 0. */
    /* The server inherits this process's nice value (a suite run under nice); the helper
     * adds MESHGATE_ANON_NICE (10) to it, up to 19. */
    errno = 0;
    int base = getpriority(PRIO_PROCESS, 0);
    cr_assert(errno == 0 && base < 19, "the suite runs at nice %d", base);
    struct nices_seen seen = {.pid = worker, .base = base, .low = base + 10 > 19 ? 19 : base + 10};
    mg_test_wait_until(one_thread_lowered, &seen, WAIT_CEILING_MS, 10);
    int *nice = seen.nice, n = seen.n, low = 0, normal = 0;
    for (int i = 0; i < n; i++)
        low += nice[i] == seen.low, normal += nice[i] == base;
    /* The loop, this helper, and any of the group's background passes still running on a
     * loaded machine: how many is not the point, only that one thread is lowered. */
    cr_expect(n >= 2, "the loop and its helpers: %d threads", n);
    cr_expect_eq(low, 1, "one helper at MESHGATE_ANON_NICE (10) above the server's %d", base);
    cr_expect_eq(normal, n - 1);
    /* Both are answered while the anonymous request still holds its helper (8 s): a loop
     * held by it would answer them only after. Shares of the hold, not fixed times, so that
     * a loaded machine does not fail it. */
    call_now(&c, s.port, "/api/nodes", NULL);
    cr_expect_eq(c.status, 200);
    cr_expect_eq(seg.anon->in_flight, 1,
                 "/api/nodes was answered only after the anonymous request");
    cr_expect_lt(c.ms, 4000, "the worker's loop was held for %lld ms", (long long)c.ms);
    call_now(&c, s.port, "/api/packets?expand=observations&limit=1", SIGNED_IN);
    cr_expect_eq(c.status, 200);
    cr_expect_lt(c.ms, 4000, "a signed-in heavy request waited %lld ms", (long long)c.ms);
    cr_expect_eq(seg.anon->in_flight, 1, "the anonymous request is still running");
    call_join(&heavy);
    cr_expect_eq(heavy.status, 200, "%s", heavy.body);
    cr_expect(strstr(heavy.body, "\"packets\":["), "%s", heavy.body);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
}

/* Issue 27, item 1: no request waits on the loop, signed in or not. A signed-in heavy request
 * runs whole on the worker's signed-in helper (at the worker's priority), so one that takes
 * long leaves healthz and the worker's other connections answered meanwhile. */
Test(anon, signed_in_heavy_work_runs_on_a_helper_and_the_loop_stays_free, .init = make_dir,
     .fini = remove_dir)
{
    /* One worker; "block" would stop its loop if the request ran there, as a long scan does. */
    char keys[300];
    mg_test_write_keys_file(dir, KEY "\n" OTHER_KEY, keys, sizeof keys);
    const char *env[] = {"MESHGATE_WORKERS=1", "MESHGATE_TEST_HOOKS=block", keys, NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    struct mg_segment seg;
    attach(&s, &seg);
    struct call heavy, c;
    call_start(&heavy, s.port, "/api/packets?expand=observations", SIGNED_IN HOLD(8000));
    /* The worker has taken it up (its slot shows it) before healthz is asked. */
    int64_t t0 = mg_test_now_ms();
    while (atomic_load(&seg.slots[0].request_started_monotonic_ns) == 0 &&
           mg_test_now_ms() - t0 < WAIT_CEILING_MS)
        mg_test_sleep_ms(2);
    cr_assert_neq(atomic_load(&seg.slots[0].request_started_monotonic_ns), 0);
    /* Shares of the hold, not fixed times, so that a loaded machine does not fail it. */
    call_now(&c, s.port, "/api/healthz", NULL);
    cr_expect_eq(c.status, 200);
    cr_expect_lt(c.ms, 4000, "the worker's loop was held for %lld ms", (long long)c.ms);
    /* Another client's (its own key: one key's requests run one at a time, see below). */
    call_now(&c, s.port, "/api/packets?expand=observations&limit=1",
             "Authorization: Bearer " OTHER_KEY "\r\n");
    cr_expect_eq(c.status, 200, "%s", c.body);
    cr_expect_lt(c.ms, 4000, "another signed-in heavy request waited %lld ms", (long long)c.ms);
    call_join(&heavy);
    cr_expect_eq(heavy.status, 200, "%s", heavy.body);
    cr_expect(strstr(heavy.body, "\"packets\":["), "%s", heavy.body);
    cr_expect_geq(heavy.ms, 7000, "the hold was not kept: %lld ms", (long long)heavy.ms);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
}

/* The signed-in helpers' jobs in hand on slot 0, at most, read until every call is done. */
struct busy_watch {
    struct mg_segment *seg;
    struct call *calls;
    int n;
    uint32_t most;
};

static bool calls_done_watching(void *arg)
{
    struct busy_watch *w = arg;
    uint32_t busy = atomic_load(&w->seg->slots[0].helpers_busy) & 0xffffu;
    w->most = busy > w->most ? busy : w->most;
    for (int i = 0; i < w->n; i++)
        if (w->calls[i].end_ms == 0)
            return false;
    return true;
}

/* Issue 27, item 1: a signed-in client's heavy work is bounded on the helpers as its answers
 * are: one request of its key runs on a worker's helpers at a time (dispatch.c, client_jobs),
 * the next parked until that answer is taken, and woken then. Another key's request, and
 * healthz, are answered meanwhile. */
Test(anon, a_signed_in_client_runs_one_heavy_request_on_the_helpers_at_a_time, .init = make_dir,
     .fini = remove_dir)
{
    char keys[300];
    mg_test_write_keys_file(dir, KEY "\n" OTHER_KEY, keys, sizeof keys);
    const char *env[] = {"MESHGATE_WORKERS=1", "MESHGATE_TX_SUMMARIES=0",
                         "MESHGATE_TEST_HOOKS=block", keys, NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    struct mg_segment seg;
    attach(&s, &seg);
    enum { HOLD_MS = 2500, N = 3 };
    /* The start-up's own work on the signed-in helpers (the group's tables) is over first. */
    int64_t t0 = mg_test_now_ms();
    while (atomic_load(&seg.slots[0].helpers_busy) != 0 && mg_test_now_ms() - t0 < WAIT_CEILING_MS)
        mg_test_sleep_ms(5);
    struct call mine[N], c;
    memset(mine, 0, sizeof mine);
    for (int i = 0; i < N; i++)
        call_start(&mine[i], s.port, "/api/packets?expand=observations", SIGNED_IN HOLD(2500));
    /* The first is on a helper: another client's request and healthz do not wait for it. */
    t0 = mg_test_now_ms();
    while ((atomic_load(&seg.slots[0].helpers_busy) & 0xffffu) == 0 &&
           mg_test_now_ms() - t0 < WAIT_CEILING_MS)
        mg_test_sleep_ms(2);
    cr_assert_neq(atomic_load(&seg.slots[0].helpers_busy) & 0xffffu, 0, "no job on a helper");
    call_now(&c, s.port, "/api/healthz", NULL);
    cr_expect_eq(c.status, 200);
    cr_expect_lt(c.ms, HOLD_MS / 2, "healthz waited %lld ms", (long long)c.ms);
    call_now(&c, s.port, "/api/packets?expand=observations&limit=1",
             "Authorization: Bearer " OTHER_KEY "\r\n");
    cr_expect_eq(c.status, 200, "%s", c.body);
    cr_expect_lt(c.ms, HOLD_MS / 2, "another key's request waited %lld ms", (long long)c.ms);
    /* The client's own: one at a time, each after the one before. */
    struct busy_watch watch = {&seg, mine, N, 0};
    cr_assert(mg_test_wait_until(calls_done_watching, &watch, 4 * WAIT_CEILING_MS, 5));
    int64_t ms[N];
    for (int i = 0; i < N; i++) {
        call_join(&mine[i]);
        cr_expect_eq(mine[i].status, 200, "%s", mine[i].body);
        ms[i] = mine[i].end_ms;
        for (int j = i; j > 0 && ms[j] < ms[j - 1]; j--) {
            int64_t t = ms[j];
            ms[j] = ms[j - 1];
            ms[j - 1] = t;
        }
    }
    /* Jobs in hand on the signed-in helpers (a refresh of the worker's own may add one). */
    cr_expect_lt(watch.most, N, "%u of the client's jobs on the helpers at once", watch.most);
    /* Each after the one before, woken when that answer was taken: a request left to the
     * safety bound (asked again a second after the job's end woke it) would start 1 s late. */
    for (int i = 1; i < N; i++) {
        cr_expect_geq(ms[i] - ms[i - 1], HOLD_MS - 300, "answers %d and %d %lld ms apart", i - 1, i,
                      (long long)(ms[i] - ms[i - 1]));
        cr_expect_lt(ms[i] - ms[i - 1], HOLD_MS + 700, "answers %d and %d %lld ms apart", i - 1, i,
                     (long long)(ms[i] - ms[i - 1]));
    }
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
}

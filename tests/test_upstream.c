/* SPDX-License-Identifier: ISC */
/*
 * The reverse proxy to MESHGATE_UPSTREAM (issue 15), against real processes: meshgate, and
 * the test upstream (tests/upstream/mg-test-upstream.c), which can be slow, fail, close in
 * the middle of a body, stream chunks, echo a WebSocket, and logs every byte it receives.
 */
#include "harness.h"
#include "segment.h"
#include "stats.h"
#include "upstream_gate.h"
#include "upstream_proc.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(upstream, .timeout = 120);

#ifndef MESHGATE_NPM_DIR
#define MESHGATE_NPM_DIR MESHGATE_SOURCE_DIR "/build/npm"
#endif

#define CEILING_MS 30000

/* The test upstream as a process (tests/upstream_proc.h), under this file's names. */
#define upstream_proc mg_test_upstream

static void upstream_start(struct upstream_proc *u, int port, const char *const *args)
{
    mg_test_upstream_start(u, port, args);
}

static void upstream_stop(struct upstream_proc *u)
{
    mg_test_upstream_stop(u);
}

static size_t upstream_log_size(const struct upstream_proc *u)
{
    struct stat st;
    return stat(u->log, &st) == 0 ? (size_t)st.st_size : 0;
}

/* meshgate in front of the upstream at port, with more settings. */
static void start_meshgate(struct mg_test_server *s, int port, const char *const *more)
{
    char setting[64];
    snprintf(setting, sizeof setting, "MESHGATE_UPSTREAM=127.0.0.1:%d", port);
    const char *env[24] = {setting, "MESHGATE_TEST_HOOKS=park"};
    int n = 2;
    for (int i = 0; more && more[i] && n < 22; i++)
        env[n++] = more[i];
    env[n] = NULL;
    cr_assert(mg_test_server_start(s, NULL, env));
}

/* One raw exchange: sends request, reads until the server closes (or timeout_ms). */
static size_t raw_exchange(int port, const char *request, size_t request_len, char *out, size_t cap,
                           int timeout_ms)
{
    int fd = mg_test_connect(port);
    cr_assert_geq(fd, 0);
    cr_assert(mg_test_send(fd, request, request_len));
    size_t got = 0;
    int64_t give_up = mg_test_now_ms() + timeout_ms;
    while (got < cap && mg_test_now_ms() < give_up) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t n = recv(fd, out + got, cap - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    return got;
}

static int status_of(int port, const char *request)
{
    int fd = mg_test_connect(port);
    if (fd < 0)
        return -1;
    struct mg_test_response r;
    int status = -1;
    if (mg_test_send(fd, request, strlen(request)) &&
        mg_test_read_response(fd, &r, false, CEILING_MS)) {
        status = r.status;
        mg_test_response_free(&r);
    }
    close(fd);
    return status;
}

static unsigned char pattern(uint64_t i)
{
    return (unsigned char)((i * 7 + 3) & 0xff);
}

static void attach(struct mg_test_server *s, struct mg_segment *seg)
{
    char err[256];
    cr_assert_eq(mg_segment_attach(seg, s->shm_name, true, err, sizeof err), 0, "%s", err);
}

static bool wait_u32(const volatile uint32_t *value, uint32_t want, int ms)
{
    int64_t give_up = mg_test_now_ms() + ms;
    while (*value != want && mg_test_now_ms() < give_up)
        mg_test_sleep_ms(2);
    return *value == want;
}

static bool wait_atomic(_Atomic uint32_t *value, uint32_t want, int ms)
{
    int64_t give_up = mg_test_now_ms() + ms;
    while (atomic_load(value) != want && mg_test_now_ms() < give_up)
        mg_test_sleep_ms(2);
    return atomic_load(value) == want;
}

/* A request in a thread of its own: GET target with headers, its status and timing. */
struct call {
    int port;
    char request[512];
    int status;
    char retry_after[16];
    char cache_control[64];
    char *body;
    int64_t done_ms;
    pthread_t thread;
};

static void *call_run(void *arg)
{
    struct call *c = arg;
    c->status = -1;
    int fd = mg_test_connect(c->port);
    struct mg_test_response r;
    if (fd >= 0 && mg_test_send(fd, c->request, strlen(c->request)) &&
        mg_test_read_response(fd, &r, false, 60000)) {
        c->status = r.status;
        mg_test_header(&r, "Retry-After", c->retry_after, sizeof c->retry_after);
        mg_test_header(&r, "Cache-Control", c->cache_control, sizeof c->cache_control);
        c->body = r.body;
        r.body = NULL;
        mg_test_response_free(&r);
    }
    if (fd >= 0)
        close(fd);
    c->done_ms = mg_test_now_ms();
    return NULL;
}

static void call_start(struct call *c, int port, const char *target, const char *headers)
{
    memset(c, 0, sizeof *c);
    c->port = port;
    snprintf(c->request, sizeof c->request,
             "GET %s HTTP/1.1\r\nHost: t\r\n%sConnection: close\r\n\r\n", target,
             headers ? headers : "");
    pthread_create(&c->thread, NULL, call_run, c);
}

static void call_join(struct call *c)
{
    pthread_join(c->thread, NULL);
}

Test(upstream, bodies_are_byte_identical_both_ways_under_backpressure)
{
    struct upstream_proc up = {0};
    upstream_start(&up, 0, NULL);
    struct mg_test_server s;
    const char *env[] = {"MESHGATE_UPSTREAM_MAX_BODY_BYTES=8388608", NULL};
    start_meshgate(&s, up.port, env);

    /* Up: 3 MiB posted to /echo comes back whole; the client sends all of it before it reads
     * a byte, so both directions fill their bounded buffers and wait for each other. */
    size_t body_len = 3 * 1024 * 1024;
    char *request = malloc(body_len + 256);
    int head = snprintf(request, 256,
                        "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %zu\r\n"
                        "Connection: close\r\n\r\n",
                        body_len);
    for (size_t i = 0; i < body_len; i++)
        request[head + (int)i] = (char)pattern(i);
    int fd = mg_test_connect(s.port);
    cr_assert(mg_test_send(fd, request, (size_t)head + body_len));
    struct mg_test_response r;
    cr_assert(mg_test_read_response(fd, &r, false, CEILING_MS));
    close(fd);
    cr_expect_eq(r.status, 200);
    cr_assert_eq(r.body_len, body_len);
    cr_expect(memcmp(r.body, request + head, body_len) == 0, "the echoed body differs");
    mg_test_response_free(&r);
    free(request);

    /* Down: 32 MiB to a client that reads nothing at first. meshgate stops reading the
     * upstream once its buffer for this client is full: what it has taken stays far below
     * the body while the client waits. Then the client reads it all, byte for byte. */
    struct mg_segment seg;
    attach(&s, &seg);
    uint64_t before = mg_counter_get(&seg, MG_CTR_UPSTREAM_BYTES_RECEIVED);
    size_t big = 32 * 1024 * 1024;
    char get[128];
    snprintf(get, sizeof get, "GET /big?bytes=%zu HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
             big);
    fd = mg_test_connect(s.port);
    int small = 65536;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    cr_assert(mg_test_send(fd, get, strlen(get)));
    /* First the upstream's answer starts to arrive (however slow the machine), then it
     * stops growing: meshgate's buffer for this client is full. */
    uint64_t taken = 0, last = UINT64_MAX;
    int64_t settle_by = mg_test_now_ms() + CEILING_MS;
    while (taken == 0 && mg_test_now_ms() < settle_by) {
        mg_test_sleep_ms(20);
        taken = mg_counter_get(&seg, MG_CTR_UPSTREAM_BYTES_RECEIVED) - before;
    }
    while (taken != last && mg_test_now_ms() < settle_by) {
        last = taken;
        mg_test_sleep_ms(300);
        taken = mg_counter_get(&seg, MG_CTR_UPSTREAM_BYTES_RECEIVED) - before;
    }
    cr_expect_gt(taken, 0);
    cr_expect_lt(taken, big / 2,
                 "meshgate read %llu bytes of the upstream for a client that "
                 "reads nothing",
                 (unsigned long long)taken);
    mg_segment_detach(&seg);
    char *all = malloc(big + 65536);
    size_t got = 0;
    int64_t give_up = mg_test_now_ms() + 60000;
    while (mg_test_now_ms() < give_up) {
        ssize_t n = recv(fd, all + got, big + 65536 - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    char *body = memmem(all, got, "\r\n\r\n", 4);
    cr_assert(body);
    body += 4;
    size_t len = got - (size_t)(body - all);
    cr_assert_eq(len, big);
    bool same = true;
    for (size_t i = 0; i < big && same; i++)
        same = (unsigned char)body[i] == pattern(i);
    cr_expect(same, "the relayed body differs");
    free(all);
    mg_test_server_stop(&s, 10000);
    upstream_stop(&up);
}

Test(upstream, hop_by_hop_headers_are_stripped_and_forwarded_headers_added)
{
    struct upstream_proc up = {0};
    upstream_start(&up, 0, NULL);
    struct mg_test_server s;
    const char *env[] = {"MESHGATE_TRUSTED_PROXIES=127.0.0.1", NULL};
    start_meshgate(&s, up.port, env);
    static char out[65536];
    const char *req = "GET /headers HTTP/1.1\r\nHost: example.org\r\n"
                      "Connection: close, X-Secret-Hop\r\nX-Secret-Hop: 1\r\nKeep-Alive: 5\r\n"
                      "TE: trailers\r\nProxy-Connection: keep-alive\r\nUpgrade: h2c\r\n"
                      "X-Forwarded-For: 198.51.100.7, 203.0.113.9\r\nX-Forwarded-Proto: https\r\n"
                      "Via: 1.1 edge\r\nX-End-To-End: kept\r\n\r\n";
    size_t n = raw_exchange(s.port, req, strlen(req), out, sizeof out - 1, CEILING_MS);
    out[n] = '\0';
    char *seen = strstr(out, "\r\n\r\n");
    cr_assert(seen, "%s", out);
    seen += 4; /* the upstream's body: the head it received */
    cr_expect(strstr(seen, "GET /headers HTTP/1.1\r\n") == seen, "%s", seen);
    cr_expect(strstr(seen, "Host: example.org\r\n"), "%s", seen);
    cr_expect(strstr(seen, "X-End-To-End: kept\r\n"), "%s", seen);
    const char *gone[] = {"Connection:",      "X-Secret-Hop", "Keep-Alive",  "TE:",
                          "Proxy-Connection", "Upgrade",      "198.51.100.7"};
    for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++)
        cr_expect(!strstr(seen, gone[i]), "%s reached the upstream: %s", gone[i], seen);
    /* The client as the trusted proxy names it, the scheme it saw, and the chain of Via. */
    cr_expect(strstr(seen, "X-Forwarded-For: 203.0.113.9\r\n"), "%s", seen);
    cr_expect(strstr(seen, "X-Forwarded-Proto: https\r\n"), "%s", seen);
    cr_expect(strstr(seen, "Via: 1.1 edge, 1.1 meshgate\r\n"), "%s", seen);
    /* The response: meshgate's Via, and no hop-by-hop header of the upstream's. */
    cr_expect(strstr(out, "Via: 1.1 meshgate\r\n"), "%s", out);
    cr_expect(!strstr(out, "Keep-Alive"), "%s", out);
    mg_test_server_stop(&s, 10000);

    /* Without trusted proxies the peer is the client, whatever the header says. */
    start_meshgate(&s, up.port, NULL);
    n = raw_exchange(s.port, req, strlen(req), out, sizeof out - 1, CEILING_MS);
    out[n] = '\0';
    cr_expect(strstr(out, "X-Forwarded-For: 127.0.0.1\r\n"), "%s", out);
    cr_expect(strstr(out, "X-Forwarded-Proto: http\r\n"), "%s", out);
    mg_test_server_stop(&s, 10000);
    upstream_stop(&up);
}

Test(upstream, smuggling_attempts_are_refused_before_the_upstream_sees_a_byte)
{
    struct upstream_proc up = {0};
    upstream_start(&up, 0, NULL);
    struct mg_test_server s;
    start_meshgate(&s, up.port, NULL);
    static const struct {
        const char *request;
        int status;
    } cases[] = {
        {"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
         "0\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n",
         400},
        {"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"
         "0\r\n\r\n",
         400},
        {"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nabcdef",
         400},
        {"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nabcde",
         400},
        {"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5, 5\r\n\r\nabcde", 400},
        {"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: +5\r\n\r\nabcde", 400},
        {"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: "
         "chunked\r\n\r\n5\r\nabcde\r\n0\r\n\r\n",
         411},
        {"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
         411},
        {"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: identity\r\n\r\n", 501},
        {"POST /echo HTTP/1.0\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
        {"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n", 400},
        {"POST /echo HTTP/1.1\r\nHost: t\r\nX: y\r\n Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
         400},
        {"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 2000000\r\n\r\nabc", 413},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_expect_eq(status_of(s.port, cases[i].request), cases[i].status, "case %zu: %s", i,
                     cases[i].request);
        cr_expect_eq(upstream_log_size(&up), 0, "case %zu reached the upstream", i);
    }
    /* The log does record what does reach it. */
    cr_expect_eq(status_of(s.port, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
                                   "Connection: close\r\n\r\nabcde"),
                 200);
    cr_expect_gt(upstream_log_size(&up), 0);
    mg_test_server_stop(&s, 10000);
    upstream_stop(&up);
}

/* Decodes a chunked body; returns its length, or -1 when malformed. */
static long dechunk(const char *in, size_t len, char *out)
{
    size_t i = 0, o = 0;
    for (;;) {
        char *end;
        unsigned long size = strtoul(in + i, &end, 16);
        const char *crlf = memmem(in + i, len - i, "\r\n", 2);
        if (!crlf || end == in + i)
            return -1;
        i = (size_t)(crlf - in) + 2;
        if (size == 0)
            return (long)o;
        if (i + size + 2 > len)
            return -1;
        memcpy(out + o, in + i, size);
        o += size;
        i += size + 2;
    }
}

Test(upstream, chunked_responses_reach_http10_and_http11_clients)
{
    struct upstream_proc up = {0};
    upstream_start(&up, 0, NULL);
    struct mg_test_server s;
    start_meshgate(&s, up.port, NULL);
    static char out[1 << 20], data[1 << 20];
    long chunks = 40, size = 5000;
    const char *req11 =
        "GET /chunked?chunks=40&size=5000 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    size_t n = raw_exchange(s.port, req11, strlen(req11), out, sizeof out, CEILING_MS);
    char *body = memmem(out, n, "\r\n\r\n", 4);
    cr_assert(body);
    *body = '\0';
    cr_expect(strstr(out, "Transfer-Encoding: chunked"), "%s", out);
    cr_expect(!strstr(out, "Content-Length"), "%s", out);
    body += 4;
    long len = dechunk(body, n - (size_t)(body - out), data);
    cr_assert_eq(len, chunks * size);
    for (long i = 0; i < len; i++)
        cr_assert_eq((unsigned char)data[i], pattern((uint64_t)i), "byte %ld", i);
    /* The trailer part is relayed with the chunks, unchanged. */
    const char *last = "0\r\nX-Checksum: 1\r\n\r\n";
    cr_expect(memmem(body, n - (size_t)(body - out), last, strlen(last)));

    /* HTTP/1.0 knows no chunks: the body is decoded and ends with the connection. */
    const char *req10 = "GET /chunked?chunks=40&size=5000 HTTP/1.0\r\nHost: t\r\n\r\n";
    n = raw_exchange(s.port, req10, strlen(req10), out, sizeof out, CEILING_MS);
    body = memmem(out, n, "\r\n\r\n", 4);
    cr_assert(body);
    *body = '\0';
    cr_expect(!strstr(out, "Transfer-Encoding"), "%s", out);
    cr_expect(strstr(out, "Connection: close"), "%s", out);
    body += 4;
    cr_assert_eq((long)(n - (size_t)(body - out)), chunks * size);
    for (long i = 0; i < chunks * size; i++)
        cr_assert_eq((unsigned char)body[i], pattern((uint64_t)i), "byte %ld", i);

    /* A body the upstream breaks off in the middle is never passed off as whole. */
    const char *mid = "GET /close-mid?bytes=100000 HTTP/1.1\r\nHost: t\r\n\r\n";
    n = raw_exchange(s.port, mid, strlen(mid), out, sizeof out, CEILING_MS);
    body = memmem(out, n, "\r\n\r\n", 4);
    cr_assert(body);
    cr_expect(strstr(out, "Content-Length: 200000"), "%.200s", out);
    cr_expect_lt(n - (size_t)(body + 4 - out), 200000, "a short body, then the close");
    mg_test_server_stop(&s, 10000);
    upstream_stop(&up);
}

Test(upstream, a_slow_upstream_does_not_slow_native_routes)
{
    struct upstream_proc up = {0};
    upstream_start(&up, 0, NULL);
    struct mg_test_server s;
    const char *env[] = {"MESHGATE_WORKERS=1", NULL};
    start_meshgate(&s, up.port, env);
    struct mg_segment seg;
    attach(&s, &seg);
    enum { SLOW = 4 };
    struct call slow[SLOW];
    for (int i = 0; i < SLOW; i++)
        call_start(&slow[i], s.port, "/slow?ms=4000", NULL);
    cr_assert(wait_u32(&seg.upstream->gate.in_flight, SLOW, CEILING_MS));
    /* The one worker holds four proxied requests; its native routes answer meanwhile. */
    for (int i = 0; i < 5; i++) {
        struct mg_test_response r;
        cr_assert(mg_test_get(s.port, "/api/healthz", NULL, &r));
        cr_expect_eq(r.status, 200);
        cr_expect(strstr(r.body, "\"upstream\":{"), "%s", r.body);
        mg_test_response_free(&r);
        cr_assert(mg_test_get(s.port, "/api/nodes?limit=3", NULL, &r));
        cr_expect_eq(r.status, 200);
        mg_test_response_free(&r);
    }
    int64_t native_done = mg_test_now_ms();
    for (int i = 0; i < SLOW; i++) {
        call_join(&slow[i]);
        cr_expect_eq(slow[i].status, 200);
        cr_expect_gt(slow[i].done_ms, native_done, "the native requests waited for the slow ones");
        free(slow[i].body);
    }
    mg_segment_detach(&seg);
    mg_test_server_stop(&s, 10000);
    upstream_stop(&up);
}

static int get_status_and_retry(int port, const char *target, char *retry, size_t cap)
{
    struct mg_test_response r;
    if (!mg_test_get(port, target, NULL, &r))
        return -1;
    int status = r.status;
    if (retry && !mg_test_header(&r, "Retry-After", retry, cap))
        retry[0] = '\0';
    mg_test_response_free(&r);
    return status;
}

Test(upstream, upstream_down_then_up_again_through_the_breaker)
{
    /* A port nobody listens on yet. */
    int port = mg_test_free_port();
    struct mg_test_server s;
    const char *env[] = {"MESHGATE_UPSTREAM_BREAKER_FAILURES=3",
                         "MESHGATE_UPSTREAM_BREAKER_OPEN_MS=800", NULL};
    start_meshgate(&s, port, env);
    struct mg_segment seg;
    attach(&s, &seg);
    char retry[16];
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(get_status_and_retry(s.port, UPSTREAM_ONLY, retry, sizeof retry), 502);
        cr_expect_str_eq(retry, "1");
    }
    cr_assert_eq(atomic_load(&seg.upstream->breaker.state), MG_BREAKER_OPEN);
    uint64_t connects = mg_counter_get(&seg, MG_CTR_UPSTREAM_CONNECTS);
    /* Open: 502 at once, and the upstream is not even asked. */
    cr_expect_eq(get_status_and_retry(s.port, UPSTREAM_ONLY, retry, sizeof retry), 502);
    cr_expect_eq(mg_counter_get(&seg, MG_CTR_UPSTREAM_CONNECTS), connects);
    cr_expect_geq(atomic_load(&seg.upstream->breaker.fast_fails), 1);
    /* Native routes answer, and healthz says what the upstream is doing. */
    struct mg_test_response r;
    cr_assert(mg_test_get(s.port, "/api/healthz", NULL, &r));
    cr_expect_eq(r.status, 200);
    cr_expect(strstr(r.body, "\"breaker\":\"open\""), "%s", r.body);
    mg_test_response_free(&r);

    /* The upstream comes up; after the open time one request probes and closes it. */
    struct upstream_proc up = {0};
    upstream_start(&up, port, NULL);
    int status = 0;
    int64_t give_up = mg_test_now_ms() + CEILING_MS;
    while (status != 200 && mg_test_now_ms() < give_up) {
        status = get_status_and_retry(s.port, UPSTREAM_ONLY, NULL, 0);
        if (status != 200)
            mg_test_sleep_ms(50);
    }
    cr_expect_eq(status, 200);
    cr_expect_eq(atomic_load(&seg.upstream->breaker.state), MG_BREAKER_CLOSED);
    cr_expect_geq(atomic_load(&seg.upstream->breaker.probes), 1);
    /* No answer in time: 504, with Retry-After. */
    mg_segment_detach(&seg);
    mg_test_server_stop(&s, 10000);
    const char *env2[] = {"MESHGATE_UPSTREAM_TIMEOUT_MS=300", NULL};
    start_meshgate(&s, up.port, env2);
    cr_expect_eq(get_status_and_retry(s.port, "/slow?ms=3000", retry, sizeof retry), 504);
    cr_expect_str_eq(retry, "1");
    cr_expect_eq(get_status_and_retry(s.port, "/no-answer", retry, sizeof retry), 502);
    mg_test_server_stop(&s, 10000);
    upstream_stop(&up);
}

Test(upstream, the_gate_caps_the_upstream_lines_up_the_rest_and_refuses_with_503)
{
    struct upstream_proc up = {0};
    upstream_start(&up, 0, NULL);
    struct mg_test_server s;
    /* Anonymous requests, all of the cap theirs (the reserve has a test of its own). */
    const char *env[] = {"MESHGATE_UPSTREAM_CONCURRENCY=2",       "MESHGATE_UPSTREAM_QUEUE=2",
                         "MESHGATE_UPSTREAM_WAIT_MS=30000",       "MESHGATE_ACCESS_LOG=1",
                         "MESHGATE_UPSTREAM_SIGNED_IN_RESERVE=0", NULL};
    start_meshgate(&s, up.port, env);
    struct mg_segment seg;
    attach(&s, &seg);
    struct call held[4];
    for (int i = 0; i < 2; i++)
        call_start(&held[i], s.port, "/slow?ms=3000", NULL);
    cr_assert(wait_u32(&seg.upstream->gate.in_flight, 2, CEILING_MS));
    for (int i = 2; i < 4; i++)
        call_start(&held[i], s.port, "/slow?ms=100", NULL);
    cr_assert(wait_u32(&seg.upstream->gate.waiting, 2, CEILING_MS));
    /* Line full: 503 at once, with Retry-After, no-store and a JSON body. */
    struct call refused;
    call_start(&refused, s.port, "/slow?ms=1", NULL);
    call_join(&refused);
    cr_expect_eq(refused.status, 503);
    cr_expect_str_eq(refused.retry_after, "1");
    cr_expect(strstr(refused.cache_control, "no-store"));
    cr_expect(refused.body && strstr(refused.body, "\"retryAfter\":1"), "%s", refused.body);
    free(refused.body);
    for (int i = 0; i < 4; i++) {
        call_join(&held[i]);
        cr_expect_eq(held[i].status, 200, "request %d", i);
        free(held[i].body);
    }
    cr_expect_eq(atomic_load(&seg.upstream->gate.peak), 2, "the cap held");
    /* The access log names the upstream's gate: two admitted at once, two after waiting,
     * one refused. */
    char *log = mg_test_server_log(&s);
    cr_assert(log);
    cr_expect(strstr(log, "gate=admitted:upstream-gate"), "%s", log);
    cr_expect(strstr(log, "gate=waited:upstream-gate"), "%s", log);
    cr_expect(strstr(log, "gate=refused:upstream-gate"), "%s", log);
    free(log);
    cr_expect_eq(atomic_load(&seg.upstream->gate.refused_full), 1);
    cr_expect_eq(atomic_load(&seg.upstream->gate.waited), 2);
    cr_expect(wait_u32(&seg.upstream->gate.in_flight, 0, CEILING_MS), "every permit came back");
    mg_segment_detach(&seg);
    mg_test_server_stop(&s, 10000);
    upstream_stop(&up);
}

Test(upstream, anonymous_analytics_pass_the_rate_limit_and_signed_in_clients_bypass_it)
{
    char dir[128], keys[256], setting[300];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(keys, sizeof keys, "%s/keys", dir);
    FILE *f = fopen(keys, "w");
    cr_assert(f);
    fputs("upstream-test-key-0123456789\n", f);
    fclose(f);
    chmod(keys, 0600);
    snprintf(setting, sizeof setting, "MESHGATE_API_KEYS_FILE=%s", keys);
    struct upstream_proc up = {0};
    upstream_start(&up, 0, NULL);
    struct mg_test_server s;
    /* The analytics routes meshgate serves natively stay the upstream's when preferred. */
    const char *env[] = {setting, "MESHGATE_ANON_RATE=1", "MESHGATE_ANON_BURST=2",
                         "MESHGATE_UPSTREAM_PREFER=" UPSTREAM_ANALYTICS, NULL};
    start_meshgate(&s, up.port, env);
    char retry[16];
    cr_expect_eq(get_status_and_retry(s.port, "/api/analytics/rf", NULL, 0), 200);
    cr_expect_eq(get_status_and_retry(s.port, "/api/nodes/abc/analytics", NULL, 0), 200);
    cr_expect_eq(get_status_and_retry(s.port, "/api/analytics/topology", retry, sizeof retry), 429);
    cr_expect_gt(atoi(retry), 0);
    /* Light upstream routes are not limited; signed-in clients are not either. */
    cr_expect_eq(get_status_and_retry(s.port, UPSTREAM_ONLY, NULL, 0), 200);
    struct mg_test_response r;
    cr_assert(mg_test_get(s.port, "/api/analytics/topology",
                          "Authorization: Bearer upstream-test-key-0123456789\r\n", &r));
    cr_expect_eq(r.status, 200);
    mg_test_response_free(&r);
    /* A key meshgate does not know is the upstream's to judge: it goes up, anonymous here. */
    cr_assert(mg_test_get(s.port, UPSTREAM_ONLY, "X-API-Key: corescope-own-key\r\n", &r));
    cr_expect_eq(r.status, 200);
    mg_test_response_free(&r);
    mg_test_server_stop(&s, 10000);
    upstream_stop(&up);
}

Test(upstream, a_worker_killed_in_a_proxied_request_has_its_permit_reclaimed)
{
    struct upstream_proc up = {0};
    upstream_start(&up, 0, NULL);
    struct mg_test_server s;
    const char *env[] = {"MESHGATE_WORKERS=1", "MESHGATE_UPSTREAM_CONCURRENCY=1", NULL};
    start_meshgate(&s, up.port, env);
    struct mg_segment seg;
    attach(&s, &seg);
    struct call victim;
    call_start(&victim, s.port, "/slow?ms=20000", NULL);
    cr_assert(wait_u32(&seg.upstream->gate.in_flight, 1, CEILING_MS));
    int pid = seg.upstream->gate.holder[0].pid;
    for (int i = 1; i < MG_FIFO_HOLDERS_MAX && pid == 0; i++)
        pid = seg.upstream->gate.holder[i].pid;
    cr_assert_gt(pid, 0);
    kill(pid, SIGKILL);
    call_join(&victim);
    cr_expect_neq(victim.status, 200);
    free(victim.body);
    cr_expect(wait_u32(&seg.upstream->gate.in_flight, 0, CEILING_MS), "the permit came back");
    cr_expect_geq(atomic_load(&seg.upstream->gate.reclaimed), 1);
    cr_expect(wait_atomic(&seg.upstream->anon_held, 0, CEILING_MS),
              "its anonymous claim came back");
    /* The respawned worker gets the permit at once. */
    cr_expect_eq(get_status_and_retry(s.port, "/slow?ms=10", NULL, 0), 200);
    mg_segment_detach(&seg);
    mg_test_server_stop(&s, 10000);
    upstream_stop(&up);
}

/* ---- WebSocket ---- */

static int ws_open(int port, const char *path, char *head, size_t cap)
{
    return mg_test_ws_open_from("127.0.0.1", port, path, head, cap);
}

static void ws_send_text(int fd, const char *text)
{
    unsigned char frame[256];
    size_t n = strlen(text);
    const unsigned char mask[4] = {1, 2, 3, 4};
    frame[0] = 0x81;
    frame[1] = (unsigned char)(0x80 | n);
    memcpy(frame + 2, mask, 4);
    for (size_t i = 0; i < n; i++)
        frame[6 + i] = (unsigned char)text[i] ^ mask[i % 4];
    cr_assert(mg_test_send(fd, (const char *)frame, 6 + n));
}

static size_t ws_read(int fd, unsigned char *out, size_t want)
{
    size_t got = 0;
    int64_t give_up = mg_test_now_ms() + CEILING_MS;
    while (got < want && mg_test_now_ms() < give_up) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t n = recv(fd, out + got, want - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    return got;
}

Test(upstream, a_websocket_is_echoed_through_the_tunnel_while_other_requests_are_served)
{
    struct upstream_proc up = {0};
    upstream_start(&up, 0, NULL);
    struct mg_test_server s;
    const char *env[] = {"MESHGATE_WORKERS=1", "MESHGATE_UPSTREAM_WEBSOCKETS=2", NULL};
    start_meshgate(&s, up.port, env);
    char head[2048];
    int a = ws_open(s.port, "/", head, sizeof head);
    cr_expect(strstr(head, "HTTP/1.1 101"), "%s", head);
    /* The accept key of RFC 6455's own example, computed by the upstream, passed unchanged. */
    cr_expect(strstr(head, "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"), "%s", head);
    cr_expect(strstr(head, "Upgrade: websocket"), "%s", head);
    int b = ws_open(s.port, "/ws", head, sizeof head);
    cr_expect(strstr(head, "HTTP/1.1 101"), "%s", head);
    /* Past MESHGATE_UPSTREAM_WEBSOCKETS: 503. */
    int c = ws_open(s.port, "/ws", head, sizeof head);
    cr_expect(strstr(head, "HTTP/1.1 503"), "%s", head);
    close(c);
    for (int round = 0; round < 3; round++) {
        ws_send_text(a, "ping through meshgate");
        unsigned char echo[64];
        cr_assert_eq(ws_read(a, echo, 23), 23);
        cr_expect_eq(echo[0], 0x81);
        cr_expect_eq(echo[1], 21);
        cr_expect(memcmp(echo + 2, "ping through meshgate", 21) == 0);
        /* The worker holding both tunnels serves its other connections. */
        struct mg_test_response r;
        cr_assert(mg_test_get(s.port, "/api/healthz", NULL, &r));
        cr_expect_eq(r.status, 200);
        mg_test_response_free(&r);
        cr_assert(mg_test_get(s.port, UPSTREAM_ONLY, NULL, &r));
        cr_expect_eq(r.status, 200);
        mg_test_response_free(&r);
    }
    /* SIGTERM: each tunnel gets a close frame, 1001 (going away), then the end. */
    kill(s.pid, SIGTERM);
    unsigned char frame[4];
    cr_assert_eq(ws_read(a, frame, 4), 4);
    cr_expect(frame[0] == 0x88 && frame[1] == 2 && frame[2] == 0x03 && frame[3] == 0xe9,
              "%02x %02x %02x %02x", frame[0], frame[1], frame[2], frame[3]);
    cr_assert_eq(ws_read(b, frame, 4), 4);
    cr_expect(frame[0] == 0x88 && frame[2] == 0x03 && frame[3] == 0xe9);
    cr_expect(mg_test_wait_closed(a, CEILING_MS));
    close(a);
    close(b);
    cr_expect_eq(mg_test_server_stop(&s, CEILING_MS), 0);
    upstream_stop(&up);
}

Test(upstream, without_an_upstream_other_methods_get_405_and_unknown_paths_404)
{
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, NULL));
    /* A POST to a path only the upstream has (no native route of any method). */
    cr_expect_eq(status_of(s.port, "POST " UPSTREAM_ONLY " HTTP/1.1\r\nHost: t\r\n"
                                   "Content-Length: 2\r\nConnection: close\r\n\r\n{}"),
                 405);
    cr_expect_eq(
        status_of(s.port, "GET " UPSTREAM_ONLY " HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"),
        404);
    mg_test_server_stop(&s, 10000);
    /* With one, a native route still refuses other methods itself. */
    struct upstream_proc up = {0};
    upstream_start(&up, 0, NULL);
    start_meshgate(&s, up.port, NULL);
    cr_expect_eq(status_of(s.port, "POST /api/nodes HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n"
                                   "Connection: close\r\n\r\n{}"),
                 405);
    cr_expect_eq(status_of(s.port, "POST " UPSTREAM_ONLY " HTTP/1.1\r\nHost: t\r\n"
                                   "Content-Length: 2\r\nConnection: close\r\n\r\n{}"),
                 200);
    cr_expect_eq(upstream_log_size(&up) > 0, true);
    mg_test_server_stop(&s, 10000);
    upstream_stop(&up);
}

Test(upstream, an_upstream_that_cannot_be_resolved_stops_the_start_and_the_check)
{
    char dir[128], db[256], db_setting[300], out[4096];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/db.sqlite", dir);
    cr_assert_eq(mg_test_make_db(db, true, NULL), 0);
    snprintf(db_setting, sizeof db_setting, "MESHGATE_DB=%s", db);
    const char *check[] = {db_setting, "MESHGATE_UPSTREAM=no-such-host.invalid:3000",
                           "MG_TEST_ARG=--check", NULL};
    int st = mg_test_run_expect_exit(check, out, sizeof out, 30000);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 78, "%d: %s", st, out);
    cr_expect(strstr(out, "MESHGATE_UPSTREAM=no-such-host.invalid:3000: cannot resolve"), "%s",
              out);
    const char *bad[] = {db_setting, "MESHGATE_UPSTREAM=127.0.0.1", NULL};
    st = mg_test_run_expect_exit(bad, out, sizeof out, 30000);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 78, "%d: %s", st, out);
    cr_expect(strstr(out, "MESHGATE_UPSTREAM=127.0.0.1: must be empty (off), HOST:PORT"), "%s",
              out);
    const char *tls[] = {db_setting, "MESHGATE_UPSTREAM=https://127.0.0.1:8443", NULL};
    st = mg_test_run_expect_exit(tls, out, sizeof out, 30000);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 78, "%d: %s", st, out);
    cr_expect(strstr(out, "MESHGATE_UPSTREAM=https://127.0.0.1:8443: must be plain HTTP"), "%s",
              out);
}

/* As an operator pastes it (http://HOST:PORT/), the address names the upstream; /api/perf and
 * /api/healthz show it to admins only (the test's client, 127.0.0.1, is not one here). */
Test(upstream, an_http_url_names_the_upstream_and_only_admins_see_its_address)
{
    struct upstream_proc up = {0};
    upstream_start(&up, 0, NULL);
    char setting[96], address[64];
    snprintf(setting, sizeof setting, "MESHGATE_UPSTREAM=http://127.0.0.1:%d/", up.port);
    snprintf(address, sizeof address, "127.0.0.1:%d", up.port);
    struct mg_test_server s;
    cr_assert(mg_test_server_start(
        &s, NULL, (const char *[]){setting, "MESHGATE_ADMIN_NETWORKS=192.0.2.0/24", NULL}));
    cr_expect_eq(get_status_and_retry(s.port, "/big?bytes=1000", NULL, 0), 200);
    static const char *const targets[] = {"/api/perf", "/api/healthz"};
    for (size_t i = 0; i < 2; i++) {
        struct mg_test_response r;
        cr_assert(mg_test_get(s.port, targets[i], NULL, &r));
        cr_expect(strstr(r.body, "\"upstream\":{\"address\":\"hidden\""), "%s: %s", targets[i],
                  r.body);
        cr_expect(!strstr(r.body, address), "%s shows the upstream's address: %s", targets[i],
                  r.body);
        mg_test_response_free(&r);
    }
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
    upstream_stop(&up);
}

/* The text meshgate-shm prints for the server's segment. */
static const char *dump_text(const struct mg_test_server *s)
{
    char cmd[512];
    static char out[1 << 17];
    snprintf(cmd, sizeof cmd, "'%s/meshgate-shm' --name '%s' 2>&1", MESHGATE_BUILD_DIR,
             s->shm_name);
    cr_assert_eq(mg_test_shell(cmd, out, sizeof out), 0, "%s", out);
    return out;
}

/* target's answer holds text. */
static void expect_answer_holds(int port, const char *target, const char *text)
{
    struct mg_test_response r;
    cr_assert(mg_test_get(port, target, NULL, &r));
    cr_expect(strstr(r.body, text), "%s has no %s: %s", target, text, r.body);
    mg_test_response_free(&r);
}

Test(upstream, the_counters_appear_in_metrics_perf_and_the_dump_tool)
{
    struct upstream_proc up = {0};
    upstream_start(&up, 0, NULL);
    struct mg_test_server s;
    start_meshgate(&s, up.port, NULL);
    /* Three requests, two workers: one worker served two, on one kept-alive connection. */
    for (int i = 0; i < 3; i++)
        cr_expect_eq(get_status_and_retry(s.port, "/big?bytes=1000", NULL, 0), 200);
    struct mg_test_response r;
    cr_assert(mg_test_get(s.port, "/metrics", NULL, &r));
    cr_expect(strstr(r.body, "meshgate_upstream_requests_total 3\n"), "%s", r.body);
    cr_expect(strstr(r.body, "meshgate_upstream_reused_total 1\n") ||
                  strstr(r.body, "meshgate_upstream_reused_total 2\n"),
              "no kept-alive upstream connection was reused");
    cr_expect(strstr(r.body, "meshgate_upstream_bytes_received_total "));
    cr_expect(strstr(r.body, "meshgate_upstream_gate_cap 8\n"));
    cr_expect(strstr(r.body, "meshgate_upstream_breaker_open 0\n"));
    cr_expect(strstr(r.body, "route=\"(upstream)\""));
    mg_test_response_free(&r);
    expect_answer_holds(s.port, "/api/perf", "\"upstream\":{\"address\":\"127.0.0.1:");
    expect_answer_holds(s.port, "/api/perf", "\"requests\":3");
    expect_answer_holds(s.port, "/server-status", "<tr id=\"upstream\">");
    const char *out = dump_text(&s);
    cr_expect(strstr(out, "upstream 127.0.0.1:"), "%s", out);
    cr_expect(strstr(out, "breaker closed"), "%s", out);
    mg_test_server_stop(&s, 10000);
    upstream_stop(&up);
}

/* CoreScope's front end in headless Chromium (tests/upstream/browser-check.js), skipped with
 * a message when node, playwright-core (NPM_DIR, where make installs the browser tests'
 * packages, or BUILD/npm) or chromium is missing. */
Test(upstream, corescope_front_end_renders_upstream_data_and_its_websocket_connects)
{
    const char *public_dir = MESHGATE_SOURCE_DIR "/../shared/corescope/public";
    struct stat st;
    if (stat(public_dir, &st) != 0) {
        cr_skip_test("CoreScope's front end is not at %s", public_dir);
        return;
    }
    char which[256];
    if (mg_test_shell("command -v node", which, sizeof which) != 0) {
        cr_skip_test("node is missing");
        return;
    }
    struct upstream_proc up = {0};
    upstream_start(&up, 0, NULL);
    struct mg_test_server s;
    char setting[512];
    snprintf(setting, sizeof setting, "MESHGATE_PUBLIC_DIR=%s", public_dir);
    /* write-sources is native; the Perf page asks the test upstream for it all the same. */
    const char *env[] = {setting, "MESHGATE_ACCESS_LOG=1",
                         "MESHGATE_UPSTREAM_PREFER=/api/perf/write-sources", NULL};
    start_meshgate(&s, up.port, env);
    char dir[128], cmd[1024];
    static char out[1 << 16];
    mg_test_tmpdir(dir, sizeof dir);
    /* A short TMPDIR: Chromium's socket paths must fit. */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && TMPDIR='%s' NODE_PATH='%s/node_modules:%s/npm/node_modules' "
             "timeout 180 node tests/upstream/browser-check.js http://127.0.0.1:%d 2>&1",
             MESHGATE_SOURCE_DIR, dir, MESHGATE_NPM_DIR, MESHGATE_BUILD_DIR, s.port);
    int rc = mg_test_shell(cmd, out, sizeof out);
    if (rc != 0 && rc != 77) {
        /* What meshgate did with the page's requests and the socket, for the failure. */
        char *log = mg_test_server_log(&s);
        for (char *line = log ? strtok(log, "\n") : NULL; line; line = strtok(NULL, "\n"))
            if (strstr(line, "/api/") || strstr(line, "GET / ") || strstr(line, "error") ||
                strstr(line, "warning"))
                cr_log_error("%s", line);
        free(log);
    }
    mg_test_server_stop(&s, 10000);
    upstream_stop(&up);
    if (rc == 77) {
        cr_skip_test("%s", out);
        return;
    }
    cr_expect_eq(rc, 0, "%s", out);
    cr_log_info("%s", out);
}

Test(upstream, pipelined_requests_after_a_proxied_one_are_each_answered_once)
{
    /* Nothing listens on the upstream's port: the proxied request ends at once with 502. */
    int down = mg_test_free_port();
    struct upstream_proc up = {0};
    upstream_start(&up, 0, NULL);
    for (int round = 0; round < 2; round++) {
        struct mg_test_server s;
        start_meshgate(&s, round == 0 ? up.port : down, NULL);
        const char *pipelined = "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello"
                                "GET /api/healthz HTTP/1.1\r\nHost: t\r\n\r\n"
                                "GET /headers HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
        int fd = mg_test_connect(s.port);
        cr_assert(mg_test_send(fd, pipelined, strlen(pipelined)));
        int want[3][2] = {{200, 502}, {200, 200}, {200, 502}};
        for (int i = 0; i < 3; i++) {
            struct mg_test_response r;
            cr_assert(mg_test_read_response(fd, &r, false, CEILING_MS), "round %d, answer %d",
                      round, i);
            cr_expect_eq(r.status, want[i][round], "round %d, answer %d", round, i);
            if (round == 0 && i == 0)
                cr_expect_str_eq(r.body, "hello");
            if (round == 0 && i == 2)
                cr_expect(strstr(r.body, "GET /headers HTTP/1.1\r\n"), "%s", r.body);
            mg_test_response_free(&r);
        }
        cr_expect(mg_test_wait_closed(fd, CEILING_MS), "a fourth answer, or no close");
        close(fd);
        mg_test_server_stop(&s, 10000);
    }
    upstream_stop(&up);
}

/* The upstream closes each kept-alive connection when the next request on it arrives (read
 * and logged, never answered), as when its idle timeout crosses that request. */
Test(upstream, a_stale_kept_alive_connection_resends_a_get_once_and_never_a_post)
{
    struct upstream_proc up = {0};
    const char *args[] = {"--stale-after", "1", NULL};
    upstream_start(&up, 0, args);
    struct mg_test_server s;
    const char *env[] = {"MESHGATE_WORKERS=1", NULL};
    start_meshgate(&s, up.port, env);
    cr_assert_eq(status_of(s.port, "GET /headers?first HTTP/1.1\r\nHost: x\r\n\r\n"), 200);
    /* On the first one's kept-alive connection, which the upstream drops: sent again. */
    cr_expect_eq(status_of(s.port, "GET /headers?second HTTP/1.1\r\nHost: x\r\n\r\n"), 200);
    /* On the second one's new connection, dropped too: a POST may have been acted on. */
    cr_expect_eq(status_of(s.port, "POST /echo?third HTTP/1.1\r\nHost: x\r\n"
                                   "Content-Length: 0\r\n\r\n"),
                 502);
    char *log = mg_test_read_file(up.log);
    cr_assert(log);
    cr_expect_eq(mg_test_count(log, "GET /headers?first "), 1, "%s", log);
    cr_expect_eq(mg_test_count(log, "GET /headers?second "), 2, "the GET was not sent again");
    cr_expect_eq(mg_test_count(log, "POST /echo?third "), 1, "the POST was sent twice");
    free(log);
    expect_answer_holds(s.port, "/metrics", "meshgate_upstream_retries_total 1\n");
    expect_answer_holds(s.port, "/api/perf", "\"retries\":1");
    cr_expect(strstr(dump_text(&s), "upstream_retries"), "no upstream_retries in meshgate-shm");
    mg_test_server_stop(&s, 10000);
    upstream_stop(&up);
}

/* An anonymous address holds at most its share (MESHGATE_ANON_PER_CLIENT) of the upstream's
 * permits and places: of three long requests from 127.0.0.1, two hold permits and the third is
 * refused at once, and another address's request takes a free permit and is answered. */
Test(upstream, one_address_holds_only_its_share_of_the_upstream_gate)
{
    struct upstream_proc up = {0};
    upstream_start(&up, 0, NULL);
    struct mg_test_server s;
    const char *env[] = {"MESHGATE_UPSTREAM_CONCURRENCY=4", "MESHGATE_UPSTREAM_SIGNED_IN_RESERVE=0",
                         "MESHGATE_ANON_PER_CLIENT=2", "MESHGATE_UPSTREAM_WAIT_MS=60000", NULL};
    start_meshgate(&s, up.port, env);
    struct mg_segment seg;
    attach(&s, &seg);
    struct call flood[2];
    for (int i = 0; i < 2; i++)
        call_start(&flood[i], s.port, "/slow?ms=60000", NULL);
    cr_assert(wait_u32(&seg.upstream->gate.in_flight, 2, CEILING_MS));
    struct call third;
    call_start(&third, s.port, "/slow?ms=60000", NULL);
    call_join(&third);
    cr_expect_eq(third.status, 503, "the third of one address got %d", third.status);
    cr_expect_str_eq(third.retry_after, "1");
    cr_expect(third.body && strstr(third.body, "MESHGATE_ANON_PER_CLIENT"), "%s", third.body);
    free(third.body);
    cr_expect_eq(atomic_load(&seg.upstream->gate.refused_share), 1);
    cr_expect_eq(seg.upstream->gate.in_flight, 2, "one address took more than its share");
    int fd = mg_test_connect_from("127.0.0.2", s.port);
    cr_assert_geq(fd, 0);
    const char req[] = "GET /slow?ms=1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    cr_assert(mg_test_send(fd, req, sizeof req - 1));
    struct mg_test_response r;
    cr_assert(mg_test_read_response(fd, &r, false, CEILING_MS), "no answer");
    close(fd);
    cr_expect_eq(r.status, 200, "another address got %d", r.status);
    mg_test_response_free(&r);
    cr_expect_eq(atomic_load(&seg.upstream->gate.waited), 0);
    upstream_stop(&up);
    for (int i = 0; i < 2; i++) {
        call_join(&flood[i]);
        free(flood[i].body);
    }
    cr_expect(wait_u32(&seg.upstream->gate.in_flight, 0, CEILING_MS));
    mg_segment_detach(&seg);
    mg_test_server_stop(&s, 10000);
}

/* Concurrency 3, one permit reserved: four long anonymous requests hold two permits and wait
 * for the rest, and a signed-in request behind them is admitted at once. */
Test(upstream, an_anonymous_flood_leaves_the_signed_in_reserve_of_upstream_permits)
{
    char dir[128], setting[300];
    mg_test_tmpdir(dir, sizeof dir);
    mg_test_write_keys_file(dir, "upstream-reserve-key-0123456789", setting, sizeof setting);
    struct upstream_proc up = {0};
    upstream_start(&up, 0, NULL);
    struct mg_test_server s;
    const char *env[] = {setting, "MESHGATE_UPSTREAM_CONCURRENCY=3",
                         "MESHGATE_UPSTREAM_SIGNED_IN_RESERVE=1", "MESHGATE_UPSTREAM_WAIT_MS=60000",
                         NULL};
    start_meshgate(&s, up.port, env);
    struct mg_segment seg;
    attach(&s, &seg);
    struct call flood[4];
    for (int i = 0; i < 4; i++)
        call_start(&flood[i], s.port, "/slow?ms=60000", NULL);
    cr_assert(wait_atomic(&seg.upstream->anon_held, 2, CEILING_MS));
    cr_assert(wait_u32(&seg.upstream->gate.waiting, 2, CEILING_MS));
    cr_expect_eq(seg.upstream->gate.in_flight, 2, "an anonymous request took the reserve");
    struct call member;
    call_start(&member, s.port, "/slow?ms=1",
               "Authorization: Bearer upstream-reserve-key-0123456789\r\n");
    call_join(&member);
    cr_expect_eq(member.status, 200);
    free(member.body);
    for (int i = 0; i < 4; i++)
        cr_expect_eq(flood[i].done_ms, 0, "anonymous request %d ended before the signed-in one", i);
    cr_expect_eq(atomic_load(&seg.upstream->anon_peak), 2);
    cr_expect_geq(atomic_load(&seg.upstream->anon_held_back), 2);
    expect_answer_holds(s.port, "/metrics", "meshgate_upstream_anonymous_held 2\n");
    cr_expect(strstr(dump_text(&s), "anonymous 2 held (peak 2)"), "not in meshgate-shm");
    /* The upstream goes away: every exchange ends, and every claim comes back. */
    upstream_stop(&up);
    for (int i = 0; i < 4; i++) {
        call_join(&flood[i]);
        free(flood[i].body);
    }
    cr_expect(wait_atomic(&seg.upstream->anon_held, 0, CEILING_MS), "an anonymous claim was kept");
    cr_expect(wait_u32(&seg.upstream->gate.in_flight, 0, CEILING_MS));
    mg_segment_detach(&seg);
    mg_test_server_stop(&s, 10000);
}

/* No native route goes to the upstream by default (the node detail has CoreScope's relay and
 * usefulness fields natively); a route MESHGATE_UPSTREAM_PREFER names does, and the node's
 * other routes stay native. */
Test(upstream, preferred_native_routes_go_to_the_upstream_and_the_others_stay_native)
{
    struct upstream_proc up = {0};
    upstream_start(&up, 0, NULL);
    struct mg_test_server s;
    start_meshgate(&s, up.port, NULL);
    const char *detail =
        "/api/nodes/ec3433bb3adf1acaee0ce117600b0ca473705486ec666137379a1e8cbb7e75f4";
    char health[160];
    snprintf(health, sizeof health, "%s/health", detail);
    struct mg_test_response r;
    cr_assert(mg_test_get(s.port, detail, NULL, &r));
    cr_expect_null(strstr(r.body, "\"path\":"), "the node's detail went up: %s", r.body);
    mg_test_response_free(&r);
    mg_test_server_stop(&s, 10000);
    const char *env[] = {"MESHGATE_UPSTREAM_PREFER=/api/nodes/:pubkey", NULL};
    start_meshgate(&s, up.port, env);
    expect_answer_holds(s.port, detail, "{\"path\":\"/api/nodes/ec3433bb");
    cr_assert(mg_test_get(s.port, health, NULL, &r));
    cr_expect_null(strstr(r.body, "\"path\":"), "the node's health went up: %s", r.body);
    mg_test_response_free(&r);
    mg_test_server_stop(&s, 10000);
    upstream_stop(&up);
}

/* ---- the access log of every kind of request ------------------------------------------- */

/* What the client got of the proxied GET: every byte, and the body's. */
struct logged_kinds {
    char *log;
    size_t proxied_bytes, proxied_body;
};

/*
 * One worker in front of the test upstream, logging in format fmt: a native POST with a body
 * (405), two native GETs pipelined on one connection, a proxied GET with a User-Agent and a
 * Referer, and a WebSocket tunnel opened and closed. Returns the log once every line is in.
 */
static struct logged_kinds log_every_kind(const char *fmt)
{
    struct upstream_proc up = {0};
    upstream_start(&up, 0, NULL);
    char setting[64];
    snprintf(setting, sizeof setting, "MESHGATE_ACCESS_LOG=%s", fmt);
    const char *env[] = {setting, "MESHGATE_WORKERS=1", NULL};
    struct mg_test_server s;
    start_meshgate(&s, up.port, env);
    cr_expect_eq(status_of(s.port, "POST /api/nodes HTTP/1.1\r\nHost: t\r\nUser-Agent: poster/1\r\n"
                                   "Content-Length: 20\r\n\r\n{\"pr fixes\":[\"2c\"]}x"),
                 405);
    const char *pipelined = "GET /api/healthz?n=1 HTTP/1.1\r\nHost: t\r\nUser-Agent: pipe/1\r\n\r\n"
                            "GET /api/healthz?n=2 HTTP/1.1\r\nHost: t\r\nUser-Agent: pipe/2\r\n"
                            "Referer: https://two.example/\r\nConnection: close\r\n\r\n";
    int fd = mg_test_connect(s.port);
    cr_assert(mg_test_send(fd, pipelined, strlen(pipelined)));
    for (int i = 0; i < 2; i++) {
        struct mg_test_response r;
        cr_assert(mg_test_read_response(fd, &r, false, CEILING_MS));
        cr_expect_eq(r.status, 200);
        mg_test_response_free(&r);
    }
    close(fd);
    const char *proxied = "GET /headers?from=log HTTP/1.1\r\nHost: t\r\nUser-Agent: proxied/1\r\n"
                          "Referer: https://r.example/page\r\nConnection: close\r\n\r\n";
    char out[8192];
    struct logged_kinds k = {0};
    k.proxied_bytes = raw_exchange(s.port, proxied, strlen(proxied), out, sizeof out, CEILING_MS);
    const char *end = memmem(out, k.proxied_bytes, "\r\n\r\n", 4);
    cr_assert(end, "%.*s", (int)k.proxied_bytes, out);
    k.proxied_body = k.proxied_bytes - (size_t)(end + 4 - out);
    char head[2048];
    int ws = ws_open(s.port, "/ws", head, sizeof head);
    cr_expect(strstr(head, "HTTP/1.1 101"), "%s", head);
    close(ws);
    k.log = mg_test_wait_log(&s, "/ws", 1, CEILING_MS);
    cr_expect_eq(mg_test_server_stop(&s, CEILING_MS), 0);
    upstream_stop(&up);
    return k;
}

/* The log's one line holding needle (malloc'ed; "" when none or more than one). */
static char *line_with(const char *log, const char *needle)
{
    const char *at = strstr(log, needle);
    if (!at || strstr(at + 1, needle))
        return strdup("");
    const char *start = at, *stop = strchr(at, '\n');
    while (start > log && start[-1] != '\n')
        start--;
    return strndup(start, stop ? (size_t)(stop - start) : strlen(start));
}

Test(upstream, access_log_1_names_posts_pipelined_proxied_and_tunnelled_requests)
{
    struct logged_kinds k = log_every_kind("1");
    char *post = line_with(k.log, "\"POST /api/nodes HTTP/1.1\" 405 ");
    cr_expect(post[0], "%s", k.log);
    char *one = line_with(k.log, "\"GET /api/healthz?n=1 HTTP/1.1\" 200 ");
    char *two = line_with(k.log, "\"GET /api/healthz?n=2 HTTP/1.1\" 200 ");
    cr_expect(one[0] && two[0], "%s", k.log);
    /* BYTES: everything the client got, head and body. */
    char want[128];
    snprintf(want, sizeof want, "\"GET /headers?from=log HTTP/1.1\" 200 %zu ", k.proxied_bytes);
    char *proxied = line_with(k.log, want);
    cr_expect(proxied[0], "want %s in %s", want, k.log);
    cr_expect_null(strstr(proxied, " 0.000ms "), "%s", proxied);
    char *ws = line_with(k.log, "\"GET /ws HTTP/1.1\" 101 ");
    cr_expect(ws[0], "%s", k.log);
    free(post), free(one), free(two), free(proxied), free(ws);
    free(k.log);
}

Test(upstream, access_log_combined_names_posts_pipelined_proxied_and_tunnelled_requests)
{
    struct logged_kinds k = log_every_kind("combined");
    char *post = line_with(k.log, "\"POST /api/nodes HTTP/1.1\" 405 ");
    cr_expect(strstr(post, "\"-\" \"poster/1\" "), "%s", k.log);
    char *one = line_with(k.log, "\"GET /api/healthz?n=1 HTTP/1.1\" 200 ");
    cr_expect(strstr(one, "\"-\" \"pipe/1\" "), "%s", k.log);
    char *two = line_with(k.log, "\"GET /api/healthz?n=2 HTTP/1.1\" 200 ");
    cr_expect(strstr(two, "\"https://two.example/\" \"pipe/2\" "), "%s", k.log);
    /* BYTES: the body only, as Apache's %b. */
    char want[160];
    snprintf(want, sizeof want,
             "\"GET /headers?from=log HTTP/1.1\" 200 %zu \"https://r.example/page\" "
             "\"proxied/1\" ",
             k.proxied_body);
    char *proxied = line_with(k.log, want);
    cr_expect(proxied[0], "want %s in %s", want, k.log);
    cr_expect_null(strstr(proxied, "\" 0 gate="), "a duration of 0: %s", proxied);
    char *ws = line_with(k.log, "\"GET /ws HTTP/1.1\" 101 ");
    cr_expect(ws[0], "%s", k.log);
    free(post), free(one), free(two), free(proxied), free(ws);
    free(k.log);
}

Test(upstream, access_log_json_names_posts_pipelined_proxied_and_tunnelled_requests)
{
    struct logged_kinds k = log_every_kind("json");
    char *post = line_with(k.log, "\"method\":\"POST\",\"target\":\"/api/nodes\",\"status\":405");
    cr_expect(strstr(post, "\"user_agent\":\"poster/1\""), "%s", k.log);
    char *one = line_with(k.log, "\"target\":\"/api/healthz?n=1\"");
    cr_expect(strstr(one, "\"user_agent\":\"pipe/1\""), "%s", k.log);
    char *two = line_with(k.log, "\"target\":\"/api/healthz?n=2\"");
    cr_expect(strstr(two, "\"referer\":\"https://two.example/\",\"user_agent\":\"pipe/2\""), "%s",
              k.log);
    char *proxied = line_with(k.log, "\"target\":\"/headers?from=log\"");
    char want[64];
    snprintf(want, sizeof want, "\"status\":200,\"bytes\":%zu,", k.proxied_body);
    cr_expect(strstr(proxied, want), "want %s in %s", want, proxied);
    cr_expect(
        strstr(proxied, "\"referer\":\"https://r.example/page\",\"user_agent\":\"proxied/1\""),
        "%s", proxied);
    cr_expect_null(strstr(proxied, "\"duration_ms\":0,"), "%s", proxied);
    char *ws = line_with(k.log, "\"target\":\"/ws\",\"status\":101");
    cr_expect(ws[0], "%s", k.log);
    free(post), free(one), free(two), free(proxied), free(ws);
    free(k.log);
}

/* The test upstream with a log of the requests it reads as requests (--requests), at log. */
static void upstream_start_logging_requests(struct upstream_proc *up, char *log, size_t cap)
{
    mg_test_tmpdir(up->dir, sizeof up->dir);
    snprintf(log, cap, "%s/requests.log", up->dir);
    const char *args[] = {"--requests", log, NULL};
    upstream_start(up, 0, args);
}

/* A client of the pooled connections: GET /headers with its own marks, on one kept-alive
 * connection; every answer must be the head of its own request. */
static void headers_request(const struct mg_test_pooled_client *c, int round, char *out, size_t cap)
{
    snprintf(out, cap, "GET /headers?client=%d&n=%d HTTP/1.1\r\nHost: t\r\n\r\n", c->id, round);
}

static bool headers_own(const struct mg_test_pooled_client *c, int round, const char *request,
                        const struct mg_test_response *r)
{
    (void)c;
    (void)round;
    const char *line_end = strstr(request, "\r\n");
    return r->status == 200 && r->body &&
           strncmp(r->body, request, (size_t)(line_end + 2 - request)) == 0;
}

/* Issue 23, item 1: one anonymous POST whose Connection header named Content-Length had the
 * length dropped on the way up while its body, 200 pipelined GETs, still went: the upstream
 * answered each, past the rate limit, and the pooled connection then gave other clients the
 * attacker's answers. Now the upstream sees one request per admitted request, and the
 * connection pool never mixes answers. */
Test(upstream, a_body_of_pipelined_requests_reaches_the_upstream_as_one_body_never_as_requests)
{
    struct upstream_proc up = {0};
    char requests_log[256];
    upstream_start_logging_requests(&up, requests_log, sizeof requests_log);
    struct mg_test_server s;
    /* Every client here is 127.0.0.1: no per-address share of the upstream's permits (its own
     * test below), or six pooled clients and the attacker's POST meet it. */
    const char *env[] = {"MESHGATE_WORKERS=1", "MESHGATE_ANON_PER_CLIENT=0", NULL};
    start_meshgate(&s, up.port, env);

    static char body[32768], request[40000], out[65536];
    size_t body_len = 0;
    for (int i = 0; i < 200; i++)
        body_len += (size_t)snprintf(body + body_len, sizeof body - body_len,
                                     "GET /api/analytics/rf HTTP/1.1\r\nHost: t\r\n"
                                     "X-Forwarded-For: 203.0.113.66\r\n\r\n");
    /* Naming a framing header in Connection: 400, and the upstream hears nothing. */
    static const char *const framing[] = {"Content-Length", "content-length, keep-alive",
                                          "Transfer-Encoding", "Host", "X-Forwarded-For"};
    for (size_t i = 0; i < sizeof framing / sizeof framing[0]; i++) {
        int n = snprintf(request, sizeof request,
                         "POST /echo HTTP/1.1\r\nHost: t\r\nConnection: %s\r\n"
                         "Content-Length: %zu\r\n\r\n%s",
                         framing[i], body_len, body);
        size_t got = raw_exchange(s.port, request, (size_t)n, out, sizeof out - 1, CEILING_MS);
        out[got] = '\0';
        cr_expect(strncmp(out, "HTTP/1.1 400 ", 13) == 0, "Connection: %s: %.200s", framing[i],
                  out);
        cr_expect(strstr(out, "Connection header names"), "%.400s", out);
    }
    cr_expect_eq(upstream_log_size(&up), 0, "a refused request reached the upstream");

    /* Clients on the pooled connections while the attacker sends admitted POSTs (its own
     * end-to-end header named in Connection, dropped): each gets its own answers. */
    struct mg_test_pooled_client clients[6];
    for (int i = 0; i < 6; i++) {
        clients[i] = (struct mg_test_pooled_client){
            .port = s.port, .id = i, .rounds = 25, .request = headers_request, .own = headers_own};
        pthread_create(&clients[i].thread, NULL, mg_test_pooled_client_run, &clients[i]);
    }
    int n = snprintf(request, sizeof request,
                     "POST /echo HTTP/1.1\r\nHost: t\r\nConnection: X-Attack, close\r\n"
                     "X-Attack: 1\r\nContent-Length: %zu\r\n\r\n%s",
                     body_len, body);
    int posts = 0;
    for (int i = 0; i < 12; i++) {
        size_t got = raw_exchange(s.port, request, (size_t)n, out, sizeof out - 1, CEILING_MS);
        out[got] = '\0';
        char *seen = strstr(out, "\r\n\r\n");
        cr_expect(strncmp(out, "HTTP/1.1 200 ", 13) == 0 && seen && strlen(seen + 4) == body_len &&
                      memcmp(seen + 4, body, body_len) == 0,
                  "the echo of the body: %.300s", out);
        posts++;
    }
    for (int i = 0; i < 6; i++) {
        pthread_join(clients[i].thread, NULL);
        cr_expect_eq(clients[i].wrong, 0, "client %d got %d answers not its own", i,
                     clients[i].wrong);
        cr_expect_eq(clients[i].right, 25, "client %d", i);
    }
    char *log = mg_test_read_file(requests_log);
    cr_assert(log);
    cr_expect_eq(mg_test_count(log, "GET /api/analytics/rf"), 0,
                 "the upstream took the body for requests");
    cr_expect_eq(mg_test_count(log, "POST /echo"), posts);
    cr_expect_eq(mg_test_count(log, "GET /headers?"), 6 * 25);
    free(log);
    mg_test_server_stop(&s, 10000);
    upstream_stop(&up);
}

/* Issue 23, item 7: a response head that does not end within 64 KiB is 502 at once, not a
 * wait for the rest of it until the timeout's 504. */
Test(upstream, a_response_head_over_64_kib_is_502_at_once)
{
    struct upstream_proc up = {0};
    upstream_start(&up, 0, NULL);
    struct mg_test_server s;
    const char *env[] = {"MESHGATE_UPSTREAM_TIMEOUT_MS=600000", NULL};
    start_meshgate(&s, up.port, env);
    static char out[80000];
    const char *fits =
        "GET /huge-head?bytes=60000 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    size_t n = raw_exchange(s.port, fits, strlen(fits), out, sizeof out - 1, CEILING_MS);
    out[n] = '\0';
    cr_expect(strncmp(out, "HTTP/1.1 200 ", 13) == 0, "%.100s", out);
    cr_expect(n > 60000 && strcmp(out + n - 6, "\r\n\r\nok") == 0, "%zu bytes", n);
    /* Waited for, it would be 504 after ten minutes: raw_exchange gives up after 30 s. */
    const char *huge =
        "GET /huge-head?bytes=70000 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    n = raw_exchange(s.port, huge, strlen(huge), out, sizeof out - 1, CEILING_MS);
    out[n] = '\0';
    cr_expect(strncmp(out, "HTTP/1.1 502 ", 13) == 0, "%.300s", out);
    cr_expect(strstr(out, "larger than 64 KiB"), "%.300s", out);
    mg_test_server_stop(&s, 10000);
    upstream_stop(&up);
}

struct hanging_client {
    int port;
    atomic_bool *stop;
    int sent;
    pthread_t thread;
};

static void *hanging_client_run(void *arg)
{
    struct hanging_client *c = arg;
    int64_t give_up = mg_test_now_ms() + 2 * CEILING_MS;
    while (!atomic_load(c->stop) && mg_test_now_ms() < give_up) {
        status_of(c->port, "GET /slow?ms=3000 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        c->sent++;
    }
    return NULL;
}

/* Issue 23, item 4: one client's hanging requests open the breaker; the probe is then a
 * health request of meshgate's own, which the client cannot take, so the breaker closes while
 * the client goes on, and other clients are served. The opening names the address. */
Test(upstream, the_breaker_probes_on_its_own_while_one_client_sends_hanging_requests)
{
    struct upstream_proc up = {0};
    char requests_log[256];
    upstream_start_logging_requests(&up, requests_log, sizeof requests_log);
    struct mg_test_server s;
    const char *env[] = {"MESHGATE_UPSTREAM_TIMEOUT_MS=300", "MESHGATE_UPSTREAM_BREAKER_FAILURES=3",
                         "MESHGATE_UPSTREAM_BREAKER_OPEN_MS=500", NULL};
    start_meshgate(&s, up.port, env);
    struct mg_segment seg;
    attach(&s, &seg);
    struct mg_breaker *b = &seg.upstream->breaker;
    atomic_bool stop = false;
    struct hanging_client attackers[3];
    for (int i = 0; i < 3; i++) {
        attackers[i] = (struct hanging_client){.port = s.port, .stop = &stop};
        pthread_create(&attackers[i].thread, NULL, hanging_client_run, &attackers[i]);
    }
    int64_t give_up = mg_test_now_ms() + CEILING_MS;
    while (atomic_load(&b->opened) == 0 && mg_test_now_ms() < give_up)
        mg_test_sleep_ms(10);
    cr_expect_geq(atomic_load(&b->opened), 1, "the hanging requests did not open the breaker");
    /* While they go on: other clients' requests are answered, after a probe closed it. */
    int served = 0;
    give_up = mg_test_now_ms() + CEILING_MS;
    while (served < 3 && mg_test_now_ms() < give_up) {
        if (status_of(s.port, "GET /api/legit HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n") ==
            200)
            served++;
        else
            mg_test_sleep_ms(20);
    }
    atomic_store(&stop, true);
    for (int i = 0; i < 3; i++)
        pthread_join(attackers[i].thread, NULL);
    cr_expect_eq(served, 3, "other clients were not served while one sent hanging requests");
    cr_expect_geq(atomic_load(&b->probes), 1);
    cr_expect_geq(atomic_load(&b->opened_by_one_address), 1);
    /* The probes were meshgate's own health requests (a client's /api/healthz is answered
     * natively and never reaches the upstream). */
    char *log = mg_test_read_file(requests_log);
    cr_assert(log);
    cr_expect_geq(mg_test_count(log, "GET /api/healthz"), 1, "no probe of meshgate's own");
    free(log);
    char *text = mg_test_server_log(&s);
    cr_expect(text && strstr(text, "breaker opened") && strstr(text, "from 127.0.0.1"), "%s",
              text ? text : "");
    free(text);
    mg_segment_detach(&seg);
    mg_test_server_stop(&s, 10000);
    upstream_stop(&up);
}

/* SPDX-License-Identifier: ISC */
/*
 * The reverse proxy in front of CoreScope's real server (issue 23, item 1: the smuggling
 * attack replayed against it). CoreScope's own /api/perf counts every request it parsed, by
 * route: a request smuggled in a body would be counted there. Skipped, saying why, when
 * CoreScope's server (../shared/corescope/peer/build.sh) or its fixture is not there.
 */
#include "harness.h"
#include "upstream_proc.h"

#include <criterion/criterion.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

TestSuite(upstream_corescope, .timeout = 300);

#define CEILING_MS 60000
#define ATTACK_REQUESTS 200
#define CLIENTS 6
#define ROUNDS 25
#define POSTS 12

/* Sends request on a new connection and reads until the server closes it (or the ceiling);
 * out is NUL-terminated. */
static size_t exchange(int port, const char *request, size_t len, char *out, size_t cap)
{
    int fd = mg_test_connect(port);
    cr_assert_geq(fd, 0);
    cr_assert(mg_test_send(fd, request, len));
    size_t got = 0;
    int64_t give_up = mg_test_now_ms() + CEILING_MS;
    while (got < cap - 1 && mg_test_now_ms() < give_up) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t n = recv(fd, out + got, cap - 1 - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    out[got] = '\0';
    close(fd);
    return got;
}

/* ATTACK_REQUESTS pipelined GETs of target, each with a forged X-Forwarded-For. */
static size_t pipelined(const char *target, char *body, size_t cap)
{
    size_t len = 0;
    for (int i = 0; i < ATTACK_REQUESTS; i++)
        len += (size_t)snprintf(
            body + len, cap - len,
            "GET %s HTTP/1.1\r\nHost: t\r\nX-Forwarded-For: 203.0.113.66\r\n\r\n", target);
    cr_assert_lt(len, cap);
    return len;
}

/* The pooled clients ask /api/nodes/network-status (passed up: MESHGATE_UPSTREAM_PREFER); an answer
 * is their own when it has network-status's shape, not topology's (the attacker's). */
static void status_request(const struct mg_test_pooled_client *c, int round, char *out, size_t cap)
{
    (void)c;
    (void)round;
    snprintf(out, cap, "GET /api/nodes/network-status HTTP/1.1\r\nHost: t\r\n\r\n");
}

static bool status_own(const struct mg_test_pooled_client *c, int round, const char *request,
                       const struct mg_test_response *r)
{
    (void)c;
    (void)round;
    (void)request;
    return r->status == 200 && r->body && strncmp(r->body, "{\"active\":", 10) == 0 &&
           strstr(r->body, "\"roleCounts\"") && !strstr(r->body, "bestPathList");
}

Test(upstream_corescope, smuggled_requests_never_reach_corescope_and_pooled_clients_keep_theirs)
{
    struct mg_test_corescope cs;
    char why[512];
    if (!mg_test_corescope_start(&cs, why, sizeof why)) {
        cr_skip_test("%s", why);
        return;
    }
    static char body[32768], request[40000], out[1 << 20];

    /* The control: straight to CoreScope, a POST without a length is followed by its body's
     * requests, and /api/perf counts each. */
    long rf = mg_test_corescope_count(&cs, "/api/analytics/rf");
    int n = snprintf(request, sizeof request,
                     "POST /api/smuggle-probe HTTP/1.1\r\nHost: t\r\n\r\n"
                     "GET /api/analytics/rf HTTP/1.1\r\nHost: t\r\n\r\n"
                     "GET /api/analytics/rf HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    exchange(cs.port, request, (size_t)n, out, sizeof out);
    cr_assert_eq(mg_test_corescope_count(&cs, "/api/analytics/rf"), rf + 2,
                 "CoreScope's /api/perf did not count the smuggled requests: the test is blind");

    char setting[64];
    snprintf(setting, sizeof setting, "MESHGATE_UPSTREAM=127.0.0.1:%d", cs.port);
    /* network-status and /api/analytics/rf are native; preferred, the pooled clients and the
     * attack still reach CoreScope. */
    /* Every client here is 127.0.0.1: no per-address share of the upstream's permits (its
     * own tests), so the pooled clients and the attacker's POSTs all go through. */
    const char *env[] = {setting, "MESHGATE_WORKERS=1", "MESHGATE_ANON_PER_CLIENT=0",
                         "MESHGATE_UPSTREAM_PREFER=/api/nodes/network-status," UPSTREAM_ANALYTICS,
                         NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));

    /* The attack: an anonymous POST whose Connection header names a framing header, its body
     * 200 pipelined GETs of a rate-limited analytics route. 400, and CoreScope hears none. */
    rf = mg_test_corescope_count(&cs, "/api/analytics/rf");
    long root = mg_test_corescope_count(&cs, "/");
    size_t body_len = pipelined("/api/analytics/rf", body, sizeof body);
    static const char *const framing[] = {"Content-Length", "content-length, keep-alive",
                                          "Transfer-Encoding", "Host"};
    for (size_t i = 0; i < sizeof framing / sizeof framing[0]; i++) {
        n = snprintf(request, sizeof request,
                     "POST /api/analytics/rf HTTP/1.1\r\nHost: t\r\nConnection: %s\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     framing[i], body_len, body);
        exchange(s.port, request, (size_t)n, out, sizeof out);
        cr_expect(strncmp(out, "HTTP/1.1 400 ", 13) == 0, "Connection: %s: %.300s", framing[i],
                  out);
    }
    cr_expect_eq(mg_test_corescope_count(&cs, "/api/analytics/rf"), rf,
                 "CoreScope answered smuggled requests");
    cr_expect_eq(mg_test_corescope_count(&cs, "/"), root, "a refused POST reached CoreScope");

    /* Pooled clients while the attacker sends admitted POSTs (naming only its own header in
     * Connection) whose bodies are pipelined GETs of another route: each client gets its own
     * answers, and CoreScope sees each POST as one request with a body. */
    long topology = mg_test_corescope_count(&cs, "/api/analytics/topology");
    long status = mg_test_corescope_count(&cs, "/api/nodes/network-status");
    body_len = pipelined("/api/analytics/topology", body, sizeof body);
    struct mg_test_pooled_client clients[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        clients[i] = (struct mg_test_pooled_client){.port = s.port,
                                                    .id = i,
                                                    .rounds = ROUNDS,
                                                    .request = status_request,
                                                    .own = status_own};
        pthread_create(&clients[i].thread, NULL, mg_test_pooled_client_run, &clients[i]);
    }
    n = snprintf(request, sizeof request,
                 "POST /api/smuggle-probe HTTP/1.1\r\nHost: t\r\nConnection: X-Attack, close\r\n"
                 "X-Attack: 1\r\nContent-Length: %zu\r\n\r\n%s",
                 body_len, body);
    for (int i = 0; i < POSTS; i++) {
        exchange(s.port, request, (size_t)n, out, sizeof out);
        cr_expect(strncmp(out, "HTTP/1.1 200 ", 13) == 0, "POST %d: %.300s", i, out);
    }
    for (int i = 0; i < CLIENTS; i++) {
        pthread_join(clients[i].thread, NULL);
        cr_expect_eq(clients[i].wrong, 0, "client %d got %d answers not its own", i,
                     clients[i].wrong);
        cr_expect_eq(clients[i].right, ROUNDS, "client %d", i);
    }
    cr_expect_eq(mg_test_corescope_count(&cs, "/api/analytics/topology"), topology,
                 "CoreScope took a body for requests");
    cr_expect_eq(mg_test_corescope_count(&cs, "/"), root + POSTS,
                 "each admitted POST reached CoreScope as one request");
    cr_expect_geq(mg_test_corescope_count(&cs, "/api/nodes/network-status"),
                  status + CLIENTS * ROUNDS);
    mg_test_server_stop(&s, 10000);
    mg_test_corescope_stop(&cs);
}

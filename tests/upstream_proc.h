/* SPDX-License-Identifier: ISC */
/*
 * upstream_proc: the test upstream (tests/upstream/mg-test-upstream.c) as a process of a
 * test, and clients that come from other loopback addresses (127.0.0.x), for the tests of
 * per-address shares.
 */
#ifndef MESHGATE_TEST_UPSTREAM_PROC_H
#define MESHGATE_TEST_UPSTREAM_PROC_H

#include "harness.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* MESHGATE_UPSTREAM_PREFER for the tests whose example of a proxied analytics route is one
 * meshgate now serves itself: the default (the node detail) and those routes. */
#define UPSTREAM_ANALYTICS                                                                         \
    "/api/nodes/:pubkey,/api/nodes/:pubkey/analytics,/api/analytics/rf,/api/analytics/topology"
/* A light route of the upstream that meshgate never serves itself (CoreScope has no such
 * path either; the test upstream answers every path), for the tests of proxied requests. */
#define UPSTREAM_ONLY "/api/only-the-upstream"

struct mg_test_upstream {
    pid_t pid;
    int port;
    char dir[128];
    char log[256]; /* every byte it received */
    char port_file[256];
};

/* Starts it (on port, or a free one when 0) with extra arguments (NULL-terminated, may be
 * NULL); fails the test when it does not start. */
void mg_test_upstream_start(struct mg_test_upstream *u, int port, const char *const *args);
/* SIGKILL and reap. */
void mg_test_upstream_stop(struct mg_test_upstream *u);

/* A blocking connection to 127.0.0.1:port from the address from (e.g. "127.0.0.2"), with
 * send and receive timeouts of 10 s; -1 on failure. */
int mg_test_connect_from(const char *from, int port);

/* A WebSocket handshake on path from the address from; head gets the response head (read
 * byte by byte: frames follow it). Returns the connection. */
int mg_test_ws_open_from(const char *from, int port, const char *path, char *head, size_t cap);

/*
 * A client of the pooled upstream connections: rounds requests on one kept-alive
 * connection, each built by request (for round i) and judged by own (whether the answer is
 * the one to that request); counts right and wrong (a failed exchange is wrong and ends it).
 * Run as a thread: pthread_create(&c->thread, NULL, mg_test_pooled_client_run, c).
 */
struct mg_test_pooled_client {
    int port, id, rounds;
    void (*request)(const struct mg_test_pooled_client *c, int round, char *out, size_t cap);
    bool (*own)(const struct mg_test_pooled_client *c, int round, const char *request,
                const struct mg_test_response *r);
    int right, wrong;
    pthread_t thread;
};
void *mg_test_pooled_client_run(void *arg);

/*
 * CoreScope's own server (../shared/corescope/peer/build.sh builds it into /work/peer), over a
 * freshened copy of CoreScope's migrated fixture (../shared/data), with an empty
 * configuration, on a free port of 127.0.0.1; ready when its /api/healthz says so. Returns
 * false with the reason in why when the server or the fixture is not there (the caller
 * skips); fails the test when it does not start.
 */
struct mg_test_corescope {
    pid_t pid;
    int port;
    char dir[128];
};
bool mg_test_corescope_start(struct mg_test_corescope *c, char *why, size_t cap);
/* SIGTERM, then SIGKILL after a while; reaps it and removes its directory. */
void mg_test_corescope_stop(struct mg_test_corescope *c);
/* How many requests of path (e.g. "/api/analytics/rf") CoreScope's /api/perf has counted. */
long mg_test_corescope_count(const struct mg_test_corescope *c, const char *path);

#endif

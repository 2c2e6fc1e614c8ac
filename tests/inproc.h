/* SPDX-License-Identifier: ISC */
/*
 * inproc: calling endpoints in-process, without sockets: a private segment, a read-only
 * connection to a test database, and the same dispatch the worker uses. For endpoint tests
 * with known answers; end-to-end behaviour is tested against the real binary (harness.h).
 */
#ifndef MESHGATE_TEST_INPROC_H
#define MESHGATE_TEST_INPROC_H

#include "config.h"
#include "db.h"
#include "dispatch.h"
#include "handler.h"
#include "segment.h"

struct mg_test_ctx {
    struct mg_config cfg;
    struct mg_segment seg;
    struct mg_db db;
    struct mg_env env;
    struct mg_dispatch_buffers bufs;
    struct mg_response res;
    char shm_name[64];
    bool light; /* the last request was admitted as light (router.h) */
    /* The last request's turns, and the times its handler was entered at its top (a request
     * that parked and continued at its handler's step: 1). */
    unsigned turns, handler_tops;
};

/* Opens db_path read-only with a fresh segment (one slot); false on failure. */
bool mg_test_ctx_open(struct mg_test_ctx *t, const char *db_path);
void mg_test_ctx_close(struct mg_test_ctx *t);

/* A request for hr from a client on loopback (an admin by default), with a fresh park. */
void mg_test_request_init(struct mg_request *req, const struct mg_http_request *hr,
                          struct mg_park *park);

/*
 * Runs "GET target" (or HEAD) through the real parser and dispatch; t->res holds the
 * response, its body NUL-terminated. Returns the status.
 */
int mg_test_ctx_get(struct mg_test_ctx *t, const char *target);
/* The same for "METHOD target" with a body (NULL: none; else sent with its Content-Length),
 * as the worker hands it over once read whole. target may also be "METHOD /path" in
 * mg_test_ctx_get, or "METHOD /path BODY" (the body after the path's first space). */
int mg_test_ctx_request(struct mg_test_ctx *t, const char *method, const char *target,
                        const char *body);

#endif

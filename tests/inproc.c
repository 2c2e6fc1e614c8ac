/* SPDX-License-Identifier: ISC */
#include "inproc.h"

#include "clock.h"
#include "http.h"
#include "netaddr.h"
#include "router.h"
#include "wiring.h"
#include "stats.h"
#include "scoreboard.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int ctx_counter;

static const char *defaults_only(const char *name, void *arg)
{
    (void)arg;
    return strcmp(name, "MESHGATE_DB") == 0 ? "unused" : NULL;
}

bool mg_test_ctx_open(struct mg_test_ctx *t, const char *db_path)
{
    memset(t, 0, sizeof *t);
    char err[512];
    /* Defaults from the table, whatever the test's own environment holds. */
    mg_config_load(&t->cfg, defaults_only, NULL, err, sizeof err);
    snprintf(t->cfg.db_path, sizeof t->cfg.db_path, "%s", db_path);
    snprintf(t->cfg.listen_host, sizeof t->cfg.listen_host, "127.0.0.1");
    t->cfg.listen_port = 1;
    t->cfg.workers = 1;
    t->cfg.max_uri_bytes = 4096;
    t->cfg.max_header_bytes = 8192;
    t->cfg.db_busy_timeout_ms = 1000;
    t->cfg.gzip_min_bytes = 1024;
    char warning[256];
    mg_config_resolve(&t->cfg, warning, sizeof warning);
    snprintf(t->shm_name, sizeof t->shm_name, "/mgtest-inproc-%d-%d", (int)getpid(), ++ctx_counter);
    snprintf(t->cfg.shm_name, sizeof t->cfg.shm_name, "%s", t->shm_name);
    const char *routes[MG_ROUTES_MAX];
    unsigned n = mg_route_names(routes, MG_ROUTES_MAX);
    if (mg_segment_create(&t->seg, t->shm_name, &t->cfg, 1, routes, n, err, sizeof err) < 0) {
        fprintf(stderr, "mg_test_ctx_open: %s\n", err);
        return false;
    }
    /* Like a worker: the segment is shared, its name need not stay. */
    mg_segment_unlink(t->shm_name);
    struct mg_slot *slot = mg_slot_get(&t->seg, 0);
    mg_slot_prepare(slot);
    mg_slot_set_pid(slot, getpid());
    mg_slot_set_state(slot, MG_SLOT_IDLE);
    if (mg_db_open(&t->db, db_path, 1000, err, sizeof err) != 0) {
        fprintf(stderr, "mg_test_ctx_open: %s\n", err);
        mg_segment_detach(&t->seg);
        return false;
    }
    mg_site_wire();
    t->env.cfg = t->seg.config;
    t->env.seg = &t->seg;
    t->env.db = &t->db;
    t->env.slot = 0;
    t->env.pid = getpid();
    mg_response_init(&t->res);
    return mg_dispatch_buffers_init(&t->bufs, t->seg.config);
}

void mg_test_ctx_close(struct mg_test_ctx *t)
{
    mg_response_free(&t->res);
    mg_dispatch_buffers_free(&t->bufs);
    mg_db_close(&t->db);
    mg_segment_detach(&t->seg);
}

void mg_test_request_init(struct mg_request *req, const struct mg_http_request *hr,
                          struct mg_park *park)
{
    memset(req, 0, sizeof *req);
    req->http = hr;
    req->start_monotonic_ns = mg_monotonic_ns();
    req->start_realtime_ns = mg_realtime_ns();
    req->client_addr = "127.0.0.1";
    mg_addr_parse("127.0.0.1", 9, req->peer); /* a client on loopback: an admin by default */
    memset(park, 0, sizeof *park);
    req->park = park;
}

int mg_test_ctx_get(struct mg_test_ctx *t, const char *target)
{
    /* "POST /api/..." (a route of another method, router.h), and after one more space the
     * request's body (a route's light case of a POST tool: "POST /api/decode {...}"). */
    size_t m = target[0] == '/' ? 0 : strcspn(target, " ");
    if (m && target[m] == ' ') {
        char method[16], path[2048];
        snprintf(method, sizeof method, "%.*s", (int)m, target);
        const char *path_at = target + m + 1;
        size_t p = strcspn(path_at, " ");
        if (path_at[p] != ' ')
            return mg_test_ctx_request(t, method, path_at, NULL);
        snprintf(path, sizeof path, "%.*s", (int)p, path_at);
        return mg_test_ctx_request(t, method, path, path_at + p + 1);
    }
    return mg_test_ctx_request(t, "GET", target, NULL);
}

int mg_test_ctx_request(struct mg_test_ctx *t, const char *method, const char *target,
                        const char *body)
{
    char head[8192];
    size_t body_len = body ? strlen(body) : 0;
    char length[48] = "";
    if (body)
        snprintf(length, sizeof length, "Content-Length: %zu\r\n", body_len);
    int n = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: test\r\n%s\r\n", method, target,
                     length);
    struct mg_http_request hr;
    struct mg_http_limits limits = {sizeof head, 4096};
    int status = 0;
    const char *why = NULL;
    mg_response_reset(&t->res);
    if (n < 0 || (size_t)n >= sizeof head ||
        mg_http_parse_request(head, (size_t)n, &limits, &hr, &status, &why) != MG_HTTP_OK) {
        mg_response_error(&t->res, status ? status : 400, "%s", why ? why : "bad test request");
        return t->res.status;
    }
    struct mg_request req;
    struct mg_park park;
    mg_test_request_init(&req, &hr, &park);
    req.body = (struct mg_str){body, body_len}; /* as the worker reads it whole */
    /* A parked request is asked again, as the worker's loop would. */
    for (;;) {
        park.turns++;
        enum mg_turn turn = park.turns > 1 ? mg_dispatch_resume(&t->env, &req, &t->bufs, &t->res)
                                           : mg_dispatch(&t->env, &req, &t->bufs, &t->res);
        /* The turn that answers says: a request admitted light may be admitted again,
         * heavy (cold_report.c, when the report it found warm is gone). */
        t->light = mg_dispatch_was_light(&park);
        if (turn != MG_PARK)
            break;
        mg_response_reset(&t->res);
        /* Meanwhile the worker's other requests reuse its dispatch buffers. */
        memset(t->bufs.path, 'x', t->bufs.path_cap - 1);
        memset(t->bufs.query, 'y', t->bufs.query_cap);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    t->turns = park.turns;
    t->handler_tops = park.handler_tops;
    /* A file body is what the worker would send after the head: read it in here. */
    if (t->res.file_fd >= 0) {
        mg_buf_reset(&t->res.body);
        if (mg_buf_reserve(&t->res.body, t->res.file_length + 1)) {
            ssize_t got = pread(t->res.file_fd, t->res.body.data, t->res.file_length,
                                (off_t)t->res.file_offset);
            t->res.body.len = got > 0 ? (size_t)got : 0;
        }
        mg_response_drop_file(&t->res);
    }
    mg_buf_cstr(&t->res.body);
    return t->res.status;
}

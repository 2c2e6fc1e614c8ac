/* SPDX-License-Identifier: ISC */
/*
 * Dispatch's own decisions (workers/core/dispatch.c), in process: the answers it gives before
 * any handler (404, 405 with its Allow, a refused parameter's 400 before any gate, an admin
 * page's 404 to others), where admitted work runs (light on the loop, heavy through the
 * anonymous line), and a parked request's later turns (continued from what was kept, or
 * prepared again from its head when nothing was, and refused when that head routes
 * elsewhere). The end-to-end counterparts are in test_prepared.c and test_params.c.
 */
#include "harness.h"
#include "inproc.h"

#include "gate_fifo.h"
#include "router.h"
#include "stats.h"

#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

TestSuite(dispatch, .timeout = 60);

static char dir[128], db_path[256];
static struct mg_test_ctx t;

static void open_ctx(void)
{
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db_path, sizeof db_path, "%s/dispatch.db", dir);
    cr_assert_eq(mg_test_make_db(db_path, true, NULL), 0);
    cr_assert(mg_test_ctx_open(&t, db_path));
}

static void close_ctx(void)
{
    mg_test_ctx_close(&t);
    mg_test_rmdir(dir);
}

/* One request of head (a whole request head) from peer, its park's counts in *park:
 * dispatched, then resumed while it parks, as the worker's loop would. Returns the status. */
static int drive(const char *head, const char *peer, struct mg_park *park)
{
    struct mg_http_request hr;
    struct mg_http_limits limits = {8192, 4096};
    int status = 0;
    const char *why = NULL;
    cr_assert_eq(mg_http_parse_request(head, strlen(head), &limits, &hr, &status, &why), MG_HTTP_OK,
                 "%s", head);
    struct mg_request req;
    mg_test_request_init(&req, &hr, park);
    if (peer)
        cr_assert(mg_addr_parse(peer, strlen(peer), req.peer));
    enum mg_turn turn = MG_PARK;
    for (unsigned n = 1; turn == MG_PARK && n < 1000; n++) {
        park->turns = n;
        mg_response_reset(&t.res);
        turn = n == 1 ? mg_dispatch(&t.env, &req, &t.bufs, &t.res)
                      : mg_dispatch_resume(&t.env, &req, &t.bufs, &t.res);
    }
    cr_assert_eq(turn, MG_DONE, "%s", head);
    mg_buf_cstr(&t.res.body);
    mg_buf_cstr(&t.res.headers);
    return t.res.status;
}

static int get(const char *target, struct mg_park *park)
{
    char head[1024];
    snprintf(head, sizeof head, "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", target);
    return drive(head, NULL, park);
}

static const char *headers(void)
{
    return t.res.headers.len ? (const char *)t.res.headers.data : "";
}

Test(dispatch, an_unknown_path_is_404_and_one_of_another_method_405_with_its_allow,
     .init = open_ctx, .fini = close_ctx)
{
    struct mg_park park;
    cr_expect_eq(get("/api/no-such-route", &park), 404, "%s", t.res.body.data);
    cr_expect_eq(park.handler_tops, 0, "a handler ran for a path no route has");
    cr_expect_eq(park.admissions, 0, "a path no route has met gates");
    /* /api/decode is POST only: GET is not allowed, and the answer says what is. */
    cr_expect_eq(get("/api/decode", &park), 405, "%s", t.res.body.data);
    cr_expect(strstr(headers(), "Allow: POST"), "%s", headers());
    cr_expect(strstr((const char *)t.res.body.data, "use POST"), "%s", t.res.body.data);
    cr_expect_eq(park.handler_tops, 0);
    /* An encoded slash is part of a segment: "/api%2Fhealthz" is no route. */
    cr_expect_eq(get("/api%2Fhealthz", &park), 404, "%s", t.res.body.data);
    cr_expect_eq(get("/api/healthz", &park), 200, "%s", t.res.body.data);
}

Test(dispatch, a_refused_parameter_is_400_before_any_gate, .init = open_ctx, .fini = close_ctx)
{
    uint64_t acquired = atomic_load(&t.seg.anon->acquired);
    struct mg_park park;
    cr_expect_eq(get("/api/packets?offset=-1", &park), 400, "%s", t.res.body.data);
    cr_expect(strstr((const char *)t.res.body.data, "offset"), "%s", t.res.body.data);
    cr_expect_eq(park.param_parses, 1, "parsed %u times", park.param_parses);
    cr_expect_eq(park.admissions, 0, "the route's gates were met before its 400");
    cr_expect_eq(park.handler_tops, 0);
    cr_expect_eq(atomic_load(&t.seg.anon->acquired), acquired, "a permit was taken for a 400");
}

Test(dispatch, light_work_runs_on_the_loop_and_heavy_work_meets_the_anonymous_line,
     .init = open_ctx, .fini = close_ctx)
{
    uint64_t acquired = atomic_load(&t.seg.anon->acquired);
    struct mg_park park;
    cr_expect_eq(get("/api/healthz", &park), 200, "%s", t.res.body.data);
    cr_expect(mg_dispatch_was_light(&park), "the health check was not admitted light");
    cr_expect_eq(park.admissions, 1);
    cr_expect_eq(park.handler_tops, 1);
    cr_expect_eq(atomic_load(&t.seg.anon->acquired), acquired, "light work took a permit");
    /* An anonymous page of packets is heavy: it takes a permit of the line, once, and gives
     * it back once answered. Its parameters are parsed once, for the check and the handler. */
    cr_expect_eq(get("/api/packets?limit=1", &park), 200, "%s", t.res.body.data);
    cr_expect_not(mg_dispatch_was_light(&park), "a page of packets was admitted light");
    cr_expect_eq(park.admissions, 1);
    cr_expect_eq(park.param_parses, 1, "parsed %u times", park.param_parses);
    cr_expect_eq(park.dispatches, 1);
    cr_expect_eq(atomic_load(&t.seg.anon->acquired), acquired + 1,
                 "the anonymous line's permit was not taken once");
    cr_expect_eq(t.seg.anon->in_flight, 0u, "the permit was not given back");
}

Test(dispatch, an_admin_page_is_404_to_a_client_outside_the_admin_networks, .init = open_ctx,
     .fini = close_ctx)
{
    static const char head[] = "GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n";
    struct mg_park park;
    cr_expect_eq(drive(head, NULL, &park), 200, "loopback is an admin: %s", t.res.body.data);
    cr_expect_eq(drive(head, "192.0.2.7", &park), 404, "%s", t.res.body.data);
    cr_expect_eq(park.handler_tops, 0, "the admin page's handler ran for another client");
    cr_expect_eq(park.admissions, 0);
}

/* CoreScope's key-protected routes (upstream_first) with no upstream configured: answered
 * here, light, by their handler's 403, never parked. */
Test(dispatch, an_upstream_first_route_without_an_upstream_is_answered_here, .init = open_ctx,
     .fini = close_ctx)
{
    cr_assert_eq(t.env.cfg->upstream[0], '\0');
    struct mg_park park;
    cr_expect_eq(get("/api/backup", &park), 403, "%s", t.res.body.data);
    cr_expect(mg_dispatch_was_light(&park));
    cr_expect_eq(park.turns, 1);
    cr_expect_eq(park.handler_tops, 1);
}

/* Every anonymous permit taken by others: a heavy request waits in line, parked. */
static void fill_line(uint64_t *tokens)
{
    struct mg_fifo_gate *line = t.seg.anon;
    cr_assert_gt(line->cap, 0);
    cr_assert_leq(line->cap, 64);
    for (uint32_t i = 0; i < line->cap; i++) {
        int place;
        uint64_t ticket;
        cr_assert_eq(mg_fifo_gate_join(line, 999999, 0, "other", &tokens[i], &place, &ticket),
                     MG_FIFO_ADMITTED);
    }
}

static void empty_line(const uint64_t *tokens)
{
    for (uint32_t i = 0; i < t.seg.anon->cap; i++)
        mg_fifo_gate_release(t.seg.anon, 999999, tokens[i]);
}

/* A parked request whose kept preparation is gone (no memory when it parked) is prepared
 * again from its head on its next turn and continues where it stopped; if that head now
 * routes elsewhere, it is answered 500, not run as another route. */
static void park_then_resume_unkept(const char *later_head, int want)
{
    uint64_t tokens[64];
    fill_line(tokens);
    uint64_t acquired = atomic_load(&t.seg.anon->acquired);
    struct mg_http_request packets, later;
    struct mg_http_limits limits = {8192, 4096};
    int status = 0;
    const char *why = NULL;
    static const char head[] = "GET /api/packets?limit=1 HTTP/1.1\r\nHost: t\r\n\r\n";
    cr_assert_eq(mg_http_parse_request(head, strlen(head), &limits, &packets, &status, &why),
                 MG_HTTP_OK);
    cr_assert_eq(
        mg_http_parse_request(later_head, strlen(later_head), &limits, &later, &status, &why),
        MG_HTTP_OK);
    struct mg_park park;
    struct mg_request req;
    mg_test_request_init(&req, &packets, &park);
    mg_response_reset(&t.res);
    cr_assert_eq(mg_dispatch(&t.env, &req, &t.bufs, &t.res), MG_PARK, "it did not wait in line");
    cr_assert_not_null(park.prepared);
    mg_dispatch_forget(&park); /* as if keep_prepared had found no memory */
    cr_assert_null(park.prepared);
    req.http = &later;
    /* Its next turn, still in line: prepared again; parked again, it is kept again. */
    mg_response_reset(&t.res);
    enum mg_turn turn = mg_dispatch_resume(&t.env, &req, &t.bufs, &t.res);
    cr_expect_eq(park.preparations, 2, "it was not prepared again");
    if (want != 200) {
        empty_line(tokens);
        cr_expect_eq(turn, MG_DONE);
        cr_expect_eq(t.res.status, want, "%.*s", (int)t.res.body.len, t.res.body.data);
        cr_expect_null(park.prepared);
        return;
    }
    cr_expect_eq(turn, MG_PARK, "it left the full line: %d", t.res.status);
    cr_expect_not_null(park.prepared, "parked again, nothing was kept");
    empty_line(tokens);
    for (unsigned n = 3; turn == MG_PARK && n < 1000; n++) {
        mg_response_reset(&t.res);
        turn = mg_dispatch_resume(&t.env, &req, &t.bufs, &t.res);
    }
    cr_expect_eq(turn, MG_DONE);
    cr_expect_eq(t.res.status, want, "%.*s", (int)t.res.body.len, t.res.body.data);
    cr_expect_eq(park.dispatches, 1, "a later turn entered dispatch from the top");
    cr_expect_eq(park.preparations, 2, "a kept preparation was prepared again");
    cr_expect_null(park.prepared, "what was kept is freed once answered");
    cr_expect_eq(atomic_load(&t.seg.anon->acquired), acquired + 1, "not one permit");
    cr_expect_eq(t.seg.anon->in_flight, 0u, "its permit was not given back");
}

Test(dispatch, a_parked_request_with_nothing_kept_is_prepared_again_and_continues, .init = open_ctx,
     .fini = close_ctx)
{
    park_then_resume_unkept("GET /api/packets?limit=1 HTTP/1.1\r\nHost: t\r\n\r\n", 200);
    cr_expect(strstr((const char *)t.res.body.data, "\"packets\""), "%s", t.res.body.data);
}

Test(dispatch, a_parked_request_whose_head_routes_elsewhere_when_prepared_again_is_500,
     .init = open_ctx, .fini = close_ctx)
{
    park_then_resume_unkept("GET /api/healthz HTTP/1.1\r\nHost: t\r\n\r\n", 500);
}

/* A body dispatch will not read is answered before any handler, and the connection closes
 * after it (the body would be taken for the next request). */
Test(dispatch, a_body_the_route_does_not_take_is_refused_and_closes, .init = open_ctx,
     .fini = close_ctx)
{
    cr_expect_eq(mg_test_ctx_request(&t, "GET", "/api/healthz", "x"), 413, "%s", t.res.body.data);
    cr_expect(t.res.close, "a refused body left the connection open");
    cr_expect(strstr((const char *)t.res.body.data, "must not carry a body"), "%s",
              t.res.body.data);
    cr_expect_eq(t.handler_tops, 0);
    cr_expect_eq(mg_test_ctx_request(&t, "GET", "/no-such-page", "x"), 413, "%s", t.res.body.data);
    cr_expect(t.res.close);
    /* A route that takes a body, at most its row's bound. */
    static char big[MG_DECODE_BODY_MAX + 2];
    memset(big, 'a', sizeof big - 1);
    cr_expect_eq(mg_test_ctx_request(&t, "POST", "/api/decode", big), 413, "%s", t.res.body.data);
    cr_expect(t.res.close);
    cr_expect_eq(t.handler_tops, 0);
}

/* ---- a light route whose work turns heavy (MG_READMIT_HEAVY) ------------------------------ */

/* The site as wired, with /api/healthz's row made a heavy route's (the anonymous line among
 * its gates) whose heavy check says light, and whose handler turns heavy readmits_left
 * times before it answers. */
static struct mg_route rows[MG_ROUTES_MAX];
static struct mg_site readmit_site;
static const struct mg_site *wired_site;
static unsigned readmits_left, readmit_calls;

static bool never_heavy(struct mg_env *env, const struct mg_request *req)
{
    (void)env, (void)req;
    return false;
}

static enum mg_turn readmit_handler(struct mg_env *env, const struct mg_request *req,
                                    struct mg_response *res)
{
    (void)env, (void)req;
    readmit_calls++;
    if (readmits_left) {
        readmits_left--;
        return MG_READMIT_HEAVY;
    }
    mg_response_json(res, 200);
    mg_buf_puts(&res->body, "{\"ok\":true}");
    return MG_DONE;
}

static void open_readmit_site(void)
{
    open_ctx();
    wired_site = mg_site;
    cr_assert_leq(mg_site->routes_len, MG_ROUTES_MAX);
    memcpy(rows, mg_site->routes, mg_site->routes_len * sizeof rows[0]);
    readmit_site = *mg_site;
    readmit_site.routes = rows;
    char param[MG_PATH_PARAM_MAX];
    unsigned health = mg_site->match_method("GET", 3, "/api/healthz", param, sizeof param, NULL);
    unsigned packets = mg_site->match_method("GET", 3, "/api/packets", param, sizeof param, NULL);
    cr_assert_lt(health, mg_site->routes_len);
    cr_assert_lt(packets, mg_site->routes_len);
    rows[health].gates = rows[packets].gates;
    rows[health].cost = MG_COST_HEAVY;
    rows[health].heavy_when = never_heavy;
    rows[health].handler = readmit_handler;
    rows[health].own_jobs = false;
    mg_site = &readmit_site;
    readmit_calls = 0;
}

static void close_readmit_site(void)
{
    mg_site = wired_site;
    close_ctx();
}

Test(dispatch, a_light_request_whose_work_turns_heavy_is_admitted_again_heavy_once,
     .init = open_readmit_site, .fini = close_readmit_site)
{
    uint64_t acquired = atomic_load(&t.seg.anon->acquired);
    readmits_left = 1;
    struct mg_park park;
    cr_expect_eq(get("/api/healthz", &park), 200, "%s", t.res.body.data);
    cr_expect_eq(readmit_calls, 2, "its handler ran %u times", readmit_calls);
    cr_expect_eq(park.admissions, 2, "its gates were met %u times", park.admissions);
    cr_expect_not(mg_dispatch_was_light(&park), "not admitted again heavy");
    cr_expect_eq(park.turns, 1, "not answered in the turn it turned heavy");
    cr_expect_eq(atomic_load(&t.seg.anon->acquired), acquired + 1,
                 "the anonymous line's permit was not taken once");
    cr_expect_eq(t.seg.anon->in_flight, 0u, "the permit was not given back");
}

Test(dispatch, work_that_turns_heavy_a_second_time_is_500, .init = open_readmit_site,
     .fini = close_readmit_site)
{
    readmits_left = 2;
    struct mg_park park;
    cr_expect_eq(get("/api/healthz", &park), 500, "%s", t.res.body.data);
    cr_expect(strstr((const char *)t.res.body.data, "could not be handled"), "%s", t.res.body.data);
    cr_expect_eq(readmit_calls, 2, "its handler ran %u times", readmit_calls);
    cr_expect_eq(park.admissions, 2);
    cr_expect_eq(t.seg.anon->in_flight, 0u, "the permit was not given back");
}

/* A route the site guards (the routes of one node: hidden nodes answer 404) is run through
 * the site's guard, never its own handler directly. */
static unsigned guarded_route, guard_calls;

static bool guards_one(unsigned route)
{
    return route == guarded_route;
}

static enum mg_turn hiding_guard(struct mg_env *env, const struct mg_request *req,
                                 struct mg_response *res)
{
    (void)env, (void)req;
    guard_calls++;
    mg_response_error(res, 404, "Not found");
    return MG_DONE;
}

Test(dispatch, a_guarded_route_runs_through_the_guard, .init = open_readmit_site,
     .fini = close_readmit_site)
{
    char param[MG_PATH_PARAM_MAX];
    guarded_route = mg_site->match_method("GET", 3, "/api/healthz", param, sizeof param, NULL);
    readmit_site.guards = guards_one;
    readmit_site.guard = hiding_guard;
    guard_calls = 0;
    readmits_left = 0;
    struct mg_park park;
    cr_expect_eq(get("/api/healthz", &park), 404, "%s", t.res.body.data);
    cr_expect_eq(guard_calls, 1);
    cr_expect_eq(readmit_calls, 0, "the route's handler ran past its guard");
    /* Another route is not guarded. */
    cr_expect_eq(get("/api/stats", &park), 200, "%s", t.res.body.data);
    cr_expect_eq(guard_calls, 1);
}

/* SPDX-License-Identifier: ISC */
/*
 * A request is prepared once (issue 12, item 2): decoded, routed and its credentials checked
 * on its first turn; a parked request resumes from what its park kept and is never
 * dispatched again, so what the worker's shared buffers or the head hold on a later turn
 * does not matter to it.
 */
#include "harness.h"
#include "inproc.h"

#include "clock.h"
#include "gate_fifo.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

TestSuite(prepared, .timeout = 60);

static char dir[128], db_path[256];

static void make_db(void)
{
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db_path, sizeof db_path, "%s/prepared.db", dir);
    cr_assert_eq(mg_test_make_db(db_path, true, NULL), 0);
}

static void remove_db(void)
{
    mg_test_rmdir(dir);
}

static void parse(const char *head, struct mg_http_request *hr)
{
    struct mg_http_limits limits = {8192, 4096};
    int status = 0;
    const char *why = NULL;
    cr_assert_eq(mg_http_parse_request(head, strlen(head), &limits, hr, &status, &why), MG_HTTP_OK);
}

Test(prepared, a_parked_request_resumes_as_prepared_whatever_the_buffers_hold_later,
     .init = make_db, .fini = remove_db)
{
    struct mg_test_ctx t;
    cr_assert(mg_test_ctx_open(&t, db_path));
    struct mg_fifo_gate *line = t.seg.anon;
    cr_assert_gt(line->cap, 0);
    cr_assert_gt(line->queue_max, 0);
    /* Every anonymous permit taken by others: the request waits in line, parked. */
    uint64_t tokens[64];
    for (uint32_t i = 0; i < line->cap; i++) {
        int place;
        uint64_t ticket;
        cr_assert_eq(mg_fifo_gate_join(line, 999999, 0, "other", &tokens[i], &place, &ticket),
                     MG_FIFO_ADMITTED);
    }
    struct mg_http_request packets, health;
    parse("GET /api/packets?limit=1 HTTP/1.1\r\nHost: t\r\n\r\n", &packets);
    parse("GET /api/healthz HTTP/1.1\r\nHost: t\r\n\r\n", &health);
    struct mg_park park;
    struct mg_request req;
    mg_test_request_init(&req, &packets, &park);
    park.turns = 1;
    mg_response_reset(&t.res);
    unsigned route = mg_dispatch(&t.env, &req, &t.bufs, &t.res);
    cr_assert(t.res.parked, "the request did not wait in line");
    cr_assert_not_null(park.prepared, "nothing was kept of its preparation");
    /* Another request used the worker's buffers meanwhile, and the head reads otherwise. */
    memset(t.bufs.path, 'x', t.bufs.path_cap - 1);
    memset(t.bufs.query, 'y', t.bufs.query_cap);
    req.http = &health;
    for (uint32_t i = 0; i < line->cap; i++)
        mg_fifo_gate_release(line, 999999, tokens[i]);
    unsigned again = route;
    for (int turn = 2; t.res.parked && turn < 1000; turn++) {
        park.turns = (unsigned)turn;
        mg_response_reset(&t.res);
        again = mg_dispatch(&t.env, &req, &t.bufs, &t.res);
    }
    cr_expect_not(t.res.parked);
    cr_expect_eq(again, route, "a later turn was routed again");
    cr_expect_eq(t.res.status, 200, "%.*s", (int)t.res.body.len, t.res.body.data);
    cr_expect(t.res.body.len && strstr(mg_buf_cstr(&t.res.body), "\"packets\""),
              "not the packets page: %.*s", (int)t.res.body.len, t.res.body.data);
    cr_expect_null(park.prepared, "what was kept is freed once answered");
    mg_test_ctx_close(&t);
}

/* With the real server: a request parked for many turns (its heavy work held on the helper
 * for a while) had its head parsed once and was prepared once; the test hooks report the
 * counts in X-Test-Prepared. */
Test(prepared, a_parked_request_is_parsed_and_prepared_once_however_many_turns_it_waits)
{
    const char *env[] = {"MESHGATE_TEST_HOOKS=park", "MESHGATE_ANON_RATE=0", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    struct mg_test_response r;
    cr_assert(mg_test_get(s.port, "/api/packets?limit=1", "X-Test-Hold-Ms: 300\r\n", &r));
    cr_expect_eq(r.status, 200, "%d %s", r.status, r.body);
    char counts[96] = "";
    cr_assert(mg_test_header(&r, "X-Test-Prepared", counts, sizeof counts), "%s", r.head);
    unsigned turns = 0, heads = 0, preparations = 0;
    cr_assert_eq(sscanf(counts, "turns=%u heads=%u preparations=%u", &turns, &heads, &preparations),
                 3, "%s", counts);
    cr_expect_gt(turns, 1, "the request was not parked: %s", counts);
    cr_expect_eq(heads, 1, "its head was parsed again while parked: %s", counts);
    cr_expect_eq(preparations, 1, "it was prepared again while parked: %s", counts);
    mg_test_response_free(&r);
    cr_expect_eq(mg_test_server_stop(&s, 20000), 0);
}

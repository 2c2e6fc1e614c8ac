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
#include "jobs.h"
#include "neighbor_graph.h"
#include "region_map.h"
#include "result_body.h"
#include "shared_value.h"

#include <criterion/criterion.h>
#include <stdatomic.h>
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
    enum mg_turn turn = mg_dispatch(&t.env, &req, &t.bufs, &t.res);
    unsigned route = park.route;
    cr_assert_eq(turn, MG_PARK, "the request did not wait in line");
    cr_assert_not_null(park.prepared, "nothing was kept of its preparation");
    /* Another request used the worker's buffers meanwhile, and the head reads otherwise. */
    memset(t.bufs.path, 'x', t.bufs.path_cap - 1);
    memset(t.bufs.query, 'y', t.bufs.query_cap);
    req.http = &health;
    for (uint32_t i = 0; i < line->cap; i++)
        mg_fifo_gate_release(line, 999999, tokens[i]);
    for (unsigned n = 2; turn == MG_PARK && n < 1000; n++) {
        park.turns = n;
        mg_response_reset(&t.res);
        turn = mg_dispatch_resume(&t.env, &req, &t.bufs, &t.res);
    }
    cr_expect_eq(turn, MG_DONE);
    cr_expect_eq(park.route, route, "a later turn was routed again");
    cr_expect_eq(park.dispatches, 1, "a later turn entered dispatch from the top");
    cr_expect_eq(park.preparations, 1, "a later turn was prepared again");
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
    cr_assert(mg_test_get(s.port, "/api/packets?expand=observations&limit=1",
                          "X-Test-Hold-Ms: 300\r\n", &r));
    cr_expect_eq(r.status, 200, "%d %s", r.status, r.body);
    char counts[128] = "";
    cr_assert(mg_test_header(&r, "X-Test-Prepared", counts, sizeof counts), "%s", r.head);
    unsigned turns = 0, heads = 0, preparations = 0, dispatches = 0, admissions = 0, parses = 0,
             tops = 0;
    cr_assert_eq(sscanf(counts,
                        "turns=%u heads=%u preparations=%u dispatches=%u admissions=%u parses=%u "
                        "tops=%u",
                        &turns, &heads, &preparations, &dispatches, &admissions, &parses, &tops),
                 7, "%s", counts);
    cr_expect_gt(turns, 1, "the request was not parked: %s", counts);
    cr_expect_eq(heads, 1, "its head was parsed again while parked: %s", counts);
    cr_expect_eq(preparations, 1, "it was prepared again while parked: %s", counts);
    /* Woken, it continues at its work (its helper's job): it enters dispatch once and passes
     * its route's gates (the rate limit, the anonymous line) once. */
    cr_expect_eq(dispatches, 1, "it entered dispatch from the top again when woken: %s", counts);
    cr_expect_eq(admissions, 1, "it passed its route's gates again when woken: %s", counts);
    /* Its parameters were parsed once (kept, and moved into the helper's copy), and its
     * handler was entered once, on the helper. */
    cr_expect_eq(parses, 1, "its parameters were parsed again: %s", counts);
    cr_expect_eq(tops, 1, "its handler was entered at its top again: %s", counts);
    mg_test_response_free(&r);
    cr_expect_eq(mg_test_server_stop(&s, 20000), 0);
}

/* A request admitted light (its cold report was being built by another) whose work turns
 * heavy (that build was given up: it must build the report itself) is admitted again, heavy,
 * in the same turn (MG_READMIT_HEAVY): it passes its route's gates once more, the anonymous
 * line's permit is taken once, and it is answered without another turn or dispatch. */
Test(prepared, a_request_whose_work_turns_heavy_is_admitted_again_in_the_same_turn, .init = make_db,
     .fini = remove_db)
{
    struct mg_test_ctx t;
    cr_assert(mg_test_ctx_open(&t, db_path));
    cr_assert_gt(t.seg.config->reach_cache_ttl_ms, 0);
    /* Another worker builds the report: the request is light and follows that build. */
    uint64_t other = 0;
    struct mg_buf none;
    mg_buf_init(&none);
    cr_assert_eq(mg_result_cache_lookup(&t.seg.cache, getpid(), 1, "observers|clock-skew",
                                        mg_monotonic_ns(), &none, &other),
                 MG_CACHE_CLAIMED);
    mg_buf_free(&none);
    uint64_t acquired = atomic_load(&t.seg.anon->acquired);
    struct mg_http_request hr;
    parse("GET /api/observers/clock-skew HTTP/1.1\r\nHost: t\r\n\r\n", &hr);
    struct mg_park park;
    struct mg_request req;
    mg_test_request_init(&req, &hr, &park);
    park.turns = 1;
    mg_response_reset(&t.res);
    enum mg_turn turn = mg_dispatch(&t.env, &req, &t.bufs, &t.res);
    cr_assert_eq(turn, MG_PARK, "it did not follow the other build: %d %.*s", t.res.status,
                 (int)t.res.body.len, t.res.body.data);
    cr_assert(mg_dispatch_was_light(&park));
    cr_expect_eq(park.admissions, 1);
    /* The other build is given up: the follower must build the report now. */
    mg_result_cache_abandon(&t.seg.cache, getpid(), other);
    park.turns = 2;
    mg_response_reset(&t.res);
    turn = mg_dispatch_resume(&t.env, &req, &t.bufs, &t.res);
    cr_expect_eq(turn, MG_DONE, "not answered on the turn it was admitted again");
    cr_expect_eq(t.res.status, 200, "%.*s", (int)t.res.body.len, t.res.body.data);
    cr_expect_not(mg_dispatch_was_light(&park), "not admitted again as heavy");
    cr_expect_eq(park.admissions, 2, "its gates were passed %u times", park.admissions);
    cr_expect_eq(park.dispatches, 1);
    cr_expect_eq(atomic_load(&t.seg.anon->acquired), acquired + 1,
                 "the anonymous line's permit was not taken once");
    cr_expect_null(park.prepared, "what was kept is freed once answered");
    mg_test_ctx_close(&t);
}

/* A node's analytics (a cold report with arguments: the node and days=) admitted heavy, which
 * finds its report being built by another worker when its handler first runs: it follows that
 * build, parked, for several turns; the build is given up, and it builds the report itself
 * from the arguments its handler gave on its first turn. Its later turns continue at the
 * report's step (mg_park_at): its handler is entered once and its parameters parsed once,
 * and the answer is byte for byte the one a request that never parked gets. */
#define ANALYTICS_NODE "aa11aa11aa11aa11aa11aa11aa11aa11aa11aa11aa11aa11aa11aa11aa11aa11"
#define ANALYTICS_TARGET "/api/nodes/" ANALYTICS_NODE "/analytics?days=3"

static void make_node_db(void)
{
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db_path, sizeof db_path, "%s/prepared.db", dir);
    cr_assert_eq(
        mg_test_make_db(
            db_path, true,
            "INSERT INTO nodes (public_key, name, role, first_seen) VALUES ('" ANALYTICS_NODE
            "', 'Kept', 'repeater', '2026-01-01T00:00:00Z');"),
        0);
}

Test(prepared, a_parked_report_continues_at_its_step_with_its_handlers_arguments,
     .init = make_node_db, .fini = remove_db)
{
    /* The answer of a request that never parked, from a segment of its own. */
    struct mg_test_ctx fresh;
    cr_assert(mg_test_ctx_open(&fresh, db_path));
    cr_assert_eq(mg_test_ctx_get(&fresh, ANALYTICS_TARGET), 200, "%s",
                 mg_buf_cstr(&fresh.res.body));
    char *expected = strdup(mg_buf_cstr(&fresh.res.body));
    mg_test_ctx_close(&fresh);
    cr_assert(strstr(expected, "Kept"), "%s", expected);

    struct mg_test_ctx t;
    cr_assert(mg_test_ctx_open(&t, db_path));
    cr_assert_gt(t.seg.config->reach_cache_ttl_ms, 0);
    /* Held before its work (test hooks), so the build can start elsewhere meanwhile. */
    t.env.test_hooks = MG_TEST_HOOKS_PARK;
    struct mg_http_request hr;
    parse("GET " ANALYTICS_TARGET " HTTP/1.1\r\nHost: t\r\nX-Test-Hold-Ms: 1\r\n\r\n", &hr);
    struct mg_park park;
    struct mg_request req;
    mg_test_request_init(&req, &hr, &park);
    park.turns = 1;
    mg_response_reset(&t.res);
    enum mg_turn turn = mg_dispatch(&t.env, &req, &t.bufs, &t.res);
    cr_assert_eq(turn, MG_PARK, "it was not held: %d", t.res.status);
    cr_assert_not(mg_dispatch_was_light(&park), "not admitted heavy");
    cr_expect_eq(park.handler_tops, 0, "its handler ran before its hold");
    /* Another worker builds the report now. */
    uint64_t other = 0;
    struct mg_buf none;
    mg_buf_init(&none);
    cr_assert_eq(mg_result_cache_lookup(&t.seg.cache, getpid(), 1, "analytics|" ANALYTICS_NODE "|3",
                                        mg_monotonic_ns(), &none, &other),
                 MG_CACHE_CLAIMED);
    mg_buf_free(&none);
    /* Its hold passes; it follows that build, parked, turn after turn. */
    unsigned n = 2;
    for (; n < 12; n++) {
        park.turns = n;
        mg_response_reset(&t.res);
        usleep(2000);
        turn = mg_dispatch_resume(&t.env, &req, &t.bufs, &t.res);
        cr_assert_eq(turn, MG_PARK, "turn %u: %d %s", n, t.res.status, mg_buf_cstr(&t.res.body));
    }
    cr_expect_eq(park.handler_tops, 1, "its handler was entered %u times", park.handler_tops);
    cr_expect_not_null(park.resume, "it named no step to continue at");
    /* The other build is given up: this one builds it, from its kept arguments. */
    mg_result_cache_abandon(&t.seg.cache, getpid(), other);
    for (; turn == MG_PARK && n < 1000; n++) {
        park.turns = n;
        mg_response_reset(&t.res);
        turn = mg_dispatch_resume(&t.env, &req, &t.bufs, &t.res);
    }
    cr_expect_eq(turn, MG_DONE);
    cr_expect_eq(t.res.status, 200, "%s", mg_buf_cstr(&t.res.body));
    cr_expect_str_eq(mg_buf_cstr(&t.res.body), expected);
    cr_expect_eq(park.handler_tops, 1, "its handler was entered %u times", park.handler_tops);
    cr_expect_eq(park.param_parses, 1, "its parameters were parsed %u times", park.param_parses);
    cr_expect_eq(park.dispatches, 1);
    cr_expect_eq(park.admissions, 1);
    cr_expect_null(park.kept, "what its handler kept is freed once answered");
    cr_expect_null(park.prepared, "what was kept is freed once answered");
    free(expected);
    mg_test_ctx_close(&t);
}

/*
 * The handlers that park for what another thread makes (the list for a group table, the path
 * inspector and resolve-hops for the neighbour graph, both fetched by the worker's helper;
 * /api/stats for another worker's value; /api/perf?mem=1 for its walk) continue at their step
 * on their later turns (mg_park_at), with what their first turn read and computed: their
 * handler is entered at its top once, and the answer is byte for byte the one a request that
 * never parked gets (the inspector's elapsedMs aside).
 */
#define STEP_A "aa11111111111111111111111111111111111111111111111111111111111111"
#define STEP_B "bb22222222222222222222222222222222222222222222222222222222222222"
#define INSPECT_BODY "{\"prefixes\":[\"aa\",\"bb\"]}"

static void make_step_db(void)
{
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db_path, sizeof db_path, "%s/prepared.db", dir);
    cr_assert_eq(mg_test_make_db(db_path, true,
                                 "INSERT INTO nodes (public_key, name, role, lat, lon, first_seen)"
                                 " VALUES ('" STEP_A "', 'Alpha', 'repeater', 37.0, -122.0,"
                                 " '2026-01-01T00:00:00Z'), ('" STEP_B "', 'Bravo', 'repeater',"
                                 " 37.1, -122.0, '2026-01-01T00:00:00Z');"
                                 /* both heard by an observer in SJC (the region map) */
                                 "INSERT INTO observers (rowid, id, name, iata) VALUES"
                                 " (1, 'OBS-SJC', 'o', 'SJC');"
                                 "INSERT INTO transmissions (id, raw_hex, hash, first_seen,"
                                 " payload_type, decoded_json) VALUES (1, '00', 'h1',"
                                 " '2026-05-17T00:00:01Z', 4, '{\"pubKey\":\"" STEP_A "\"}'),"
                                 " (2, '00', 'h2', '2026-05-17T00:00:02Z', 4,"
                                 " '{\"pubKey\":\"" STEP_B "\"}');"
                                 "INSERT INTO observations (transmission_id, observer_idx,"
                                 " timestamp) VALUES (1, 1, 1), (2, 1, 2);"),
                 0);
}

/* t with a helper pool as env->jobs (a worker's loop), or without it (jobs false: in process,
 * nothing parks for a table); heavy requests one after another. */
static void step_open(struct mg_test_ctx *t, bool jobs)
{
    cr_assert(mg_test_ctx_open(t, db_path));
    t->seg.clients.table->per_minute = 0;
    if (!jobs)
        return;
    char err[256];
    int fd;
    t->env.jobs = mg_jobs_start(&t->cfg, &t->db, 0, 1, &fd, NULL, 0, err, sizeof err);
    cr_assert(t->env.jobs, "%s", err);
}

static void step_close(struct mg_test_ctx *t)
{
    struct mg_jobs *jobs = t->env.jobs;
    t->env.jobs = NULL;
    if (jobs)
        mg_jobs_stop(jobs);
    mg_test_ctx_close(t);
}

/* target's answer without a helper, nothing parked (the table made in process), then, in
 * another context (with no answer kept), forget() having dropped the table, with the helper:
 * it parks while the helper fetches it. */
/* The last request parked (the answer is not its first turn's) and its handler was entered
 * at its top once. */
static void expect_continued(const struct mg_test_ctx *t, const char *target)
{
    cr_expect_gt(t->turns, 1, "%s did not park", target);
    cr_expect_eq(t->handler_tops, 1, "%s: its handler was entered at its top %u times in %u turns",
                 target, t->handler_tops, t->turns);
}

/* target's answer from a context of its own without a helper (nothing parks): the caller's
 * context is opened first, so its connection (by which an answer is kept) is not this one's.
 * It must hold `holds`. Malloc'ed. */
static char *answer_without_parking(const char *target, const char *holds)
{
    struct mg_test_ctx fresh;
    step_open(&fresh, false);
    cr_assert_eq(mg_test_ctx_get(&fresh, target), 200, "%s", mg_buf_cstr(&fresh.res.body));
    cr_expect_eq(fresh.turns, 1, "%s parked without a helper", target);
    char *expected = strdup(mg_buf_cstr(&fresh.res.body));
    step_close(&fresh);
    cr_assert(strstr(expected, holds), "%s: %s", target, expected);
    return expected;
}

/* target's answer without a helper, then with one, forget() having dropped the table: it
 * parks while the helper fetches it. */
static void expect_step(const char *target, void (*forget)(struct mg_env *env), const char *holds)
{
    struct mg_test_ctx t;
    step_open(&t, true);
    char *expected = answer_without_parking(target, holds);
    forget(&t.env);
    cr_assert_eq(mg_test_ctx_get(&t, target), 200, "%s", mg_buf_cstr(&t.res.body));
    expect_continued(&t, target);
    /* The inspector's time of its search is its own. */
    char *got = strdup(mg_buf_cstr(&t.res.body));
    for (char *s[] = {expected, got}, **p = s; p < s + 2; p++) {
        char *at = strstr(*p, "\"elapsedMs\":");
        if (at)
            memset(at + 12, '0', strspn(at + 12, "0123456789"));
    }
    cr_expect_str_eq(got, expected, "%s", target);
    free(got);
    free(expected);
    step_close(&t);
}

static void forget_region_map(struct mg_env *env)
{
    mg_region_map_forget(env);
}

static void forget_graph(struct mg_env *env)
{
    mg_neighbor_graph_forget(env);
}

Test(prepared, the_node_list_parked_for_a_table_continues_at_its_step, .init = make_step_db,
     .fini = remove_db)
{
    /* Alpha, of the two nodes of the region */
    expect_step("/api/nodes?region=SJC&search=lph", forget_region_map, "\"total\":1,");
}

Test(prepared, resolve_hops_parked_for_the_graph_continues_at_its_step, .init = make_step_db,
     .fini = remove_db)
{
    expect_step("/api/resolve-hops?hops=bb,aa&from_node=" STEP_A, forget_graph, "Bravo");
}

Test(prepared, the_path_inspector_parked_for_the_graph_continues_at_its_step, .init = make_step_db,
     .fini = remove_db)
{
    expect_step("POST /api/paths/inspect " INSPECT_BODY, forget_graph, "\"hops\":2");
}

/* /api/stats while another worker (the test's parent, alive) holds the value's lease and none
 * is stored: it parks until the lease ends or its wait's bound, then computes its own. */
Test(prepared, stats_parked_for_another_workers_value_continues_at_its_step, .init = make_step_db,
     .fini = remove_db)
{
    struct mg_test_ctx t;
    step_open(&t, true);
    char *expected = answer_without_parking("/api/stats", "\"totalNodes\"");
    cr_assert(mg_shared_value_try_lease(&t.seg.values[MG_VALUE_STATS], (int)getppid(),
                                        mg_monotonic_ns()));
    cr_assert_eq(mg_test_ctx_get(&t, "/api/stats"), 200, "%s", mg_buf_cstr(&t.res.body));
    expect_continued(&t, "/api/stats");
    cr_expect_str_eq(mg_buf_cstr(&t.res.body), expected);
    free(expected);
    step_close(&t);
}

/* /api/perf?mem=1 parks while the helper walks the database (and before, for a thread). */
Test(prepared, the_memory_breakdown_parked_for_its_walk_continues_at_its_step, .init = make_step_db,
     .fini = remove_db)
{
    struct mg_test_ctx t;
    step_open(&t, true);
    cr_assert_eq(mg_test_ctx_get(&t, "/api/perf?mem=1"), 200, "%s", mg_buf_cstr(&t.res.body));
    cr_expect(strstr(mg_buf_cstr(&t.res.body), "\"memoryBreakdown\""), "%s",
              mg_buf_cstr(&t.res.body));
    expect_continued(&t, "/api/perf?mem=1");
    step_close(&t);
}

static unsigned drops;

static void count_drop(void *kept)
{
    (void)kept;
    drops++;
}

/* What a handler keeps for its step is freed, through its drop function (for what it owns),
 * when the request ends or, parked, its connection closes (worker.c: mg_dispatch_forget), and
 * when it keeps anew; resolve-hops, parked for the graph, keeps its hops and relays so. */
Test(prepared, what_a_parked_step_kept_is_dropped_when_its_connection_closes, .init = make_step_db,
     .fini = remove_db)
{
    struct mg_park park;
    struct mg_request req;
    mg_test_request_init(&req, NULL, &park);
    drops = 0;
    cr_assert_not_null(mg_park_keep(&req, 16, count_drop));
    cr_assert_not_null(mg_park_keep(&req, 16, count_drop));
    cr_expect_eq(drops, 1, "what was kept before was not dropped");
    mg_dispatch_forget(&park);
    cr_expect_eq(drops, 2, "what was kept was not dropped when its connection closed");
    cr_expect_null(park.kept);

    struct mg_test_ctx t;
    step_open(&t, true);
    mg_neighbor_graph_forget(&t.env);
    struct mg_http_request hr;
    parse("GET /api/resolve-hops?hops=bb,aa&from_node=" STEP_A " HTTP/1.1\r\nHost: t\r\n\r\n", &hr);
    mg_test_request_init(&req, &hr, &park);
    park.turns = 1;
    mg_response_reset(&t.res);
    cr_assert_eq(mg_dispatch(&t.env, &req, &t.bufs, &t.res), MG_PARK);
    cr_assert_not_null(park.kept, "it kept nothing for its step");
    cr_expect_not_null(park.kept_drop, "what it kept owns its hops, with nothing to free them");
    mg_dispatch_forget(&park);
    cr_expect_null(park.kept);
    cr_expect_null(park.resume);
    step_close(&t);
}

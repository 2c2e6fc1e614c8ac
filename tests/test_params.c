/* SPDX-License-Identifier: ISC */
/*
 * Every native route's parameters, walked with missing, empty, malformed and out-of-range
 * values (and path parameters that are not keys), against CoreScope's answers recorded in
 * tests/params-corescope.tsv (how they were recorded: the file's head). meshgate answers each
 * with CoreScope's status and as many entries, or with the deliberate difference the file's
 * fifth column names (docs/api-parameters.md says why each). The walk runs on CoreScope's real
 * migrated end-to-end database, freshened into a private copy and served by the real binary;
 * without the file it skips and says why.
 *
 * The parameter tables themselves (workers/params.[ch]) are checked too: each route's struct
 * fits the request, and each table names its parameters once.
 */
#include "fixture.h"
#include "harness.h"
#include "router.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FIXTURE_MIGRATED_DB MESHGATE_SOURCE_DIR "/../shared/data/corescope-e2e-fixture-migrated.db"
#define WALK MESHGATE_SOURCE_DIR "/tests/params-corescope.tsv"

static struct {
    char dir[128];
    char db[256];
    struct mg_test_server server;
    bool running;
} e;

static void cleanup(void)
{
    if (e.running)
        mg_test_server_stop(&e.server, 5000);
    e.running = false;
    if (e.dir[0])
        mg_test_rmdir(e.dir);
    e.dir[0] = '\0';
}

TestSuite(params, .fini = cleanup, .timeout = 240);

/* What tools/params-record.py writes for an answer: the status, and the number of entries of
 * the counted key ("." the whole answer), "-" when nothing is counted or the status is not 200. */
static void shape_of(const struct mg_test_response *r, const char *count, char *out, size_t cap)
{
    snprintf(out, cap, "%d -", r->status);
    if (r->status != 200 || strcmp(count, "-") == 0)
        return;
    json_error_t err;
    json_t *doc = json_loadb(r->body, r->body_len, 0, &err);
    json_t *v = doc && strcmp(count, ".") != 0 ? json_object_get(doc, count) : doc;
    if (json_is_array(v))
        snprintf(out, cap, "200 %zu", json_array_size(v));
    else if (json_is_object(v))
        snprintf(out, cap, "200 %zu", json_object_size(v));
    json_decref(doc);
}

Test(params, every_routes_parameters_answer_as_corescope_or_as_documented)
{
    if (access(FIXTURE_MIGRATED_DB, R_OK) != 0)
        cr_skip_test("%s not present: this walk compares meshgate with CoreScope's answers on "
                     "its real end-to-end database (see ../shared/data/README.md)",
                     FIXTURE_MIGRATED_DB);
    char *walk = mg_test_read_file(WALK);
    cr_assert(walk, "cannot read %s", WALK);
    mg_test_tmpdir(e.dir, sizeof e.dir);
    snprintf(e.db, sizeof e.db, "%s/fresh.db", e.dir);
    char err[512] = "";
    cr_assert_eq(
        mg_fixture_freshen(FIXTURE_MIGRATED_DB, e.db, (int64_t)time(NULL), err, sizeof err), 0,
        "freshening: %s", err);
    /* No rate limit and no line: the walk is some 230 requests, many of them heavy. */
    static const char *const env[] = {"MESHGATE_WORKERS=2", "MESHGATE_ANON_RATE=0",
                                      "MESHGATE_ANON_CONCURRENCY=0", NULL};
    cr_assert(mg_test_server_start(&e.server, e.db, env), "meshgate did not start");
    cr_assert(mg_test_wait_node_list(e.server.port), "the node list never answered 200");
    e.running = true;
    int walked = 0, documented = 0;
    for (char *save = NULL, *line = strtok_r(walk, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#' || line[0] == '\0')
            continue;
        char *cols[5] = {0};
        int n = 0;
        for (char *c = line; c && n < 5; n++) {
            cols[n] = c;
            c = strchr(c, '\t');
            if (c)
                *c++ = '\0';
        }
        cr_assert_geq(n, 4, "a line of %s has fewer than 4 columns: %s", WALK, cols[0]);
        char want[96];
        if (n == 5) { /* meshgate's deliberate difference: "STATUS SHAPE: why" */
            const char *colon = strchr(cols[4], ':');
            cr_assert(colon && colon[1] == ' ' && colon[2], "%s: the difference gives no reason",
                      cols[0]);
            snprintf(want, sizeof want, "%.*s", (int)(colon - cols[4]), cols[4]);
            documented++;
        } else {
            snprintf(want, sizeof want, "%s %s", strcmp(cols[2], "closed") == 0 ? "?" : cols[2],
                     cols[3]);
            cr_assert(strcmp(cols[2], "closed") != 0,
                      "%s: CoreScope gave no answer, and meshgate's is not documented", cols[0]);
        }
        struct mg_test_response r;
        cr_assert(mg_test_get(e.server.port, cols[0], NULL, &r), "GET %s: no complete response",
                  cols[0]);
        char got[96];
        shape_of(&r, cols[1], got, sizeof got);
        cr_expect_str_eq(got, want, "GET %s: %s, want %s (%s); body %.300s", cols[0], got, want,
                         n == 5 ? cols[4] : "CoreScope's answer", r.body);
        if (r.status == 400)
            cr_expect(strncmp(r.body, "{\"error\":\"", 10) == 0, "GET %s: a 400 names no error",
                      cols[0]);
        mg_test_response_free(&r);
        walked++;
    }
    free(walk);
    cr_expect_geq(walked, 200, "the walk holds %d requests", walked);
    cr_expect_geq(documented, 5, "the walk documents %d differences", documented);
}

/* Each table names a parameter once, and its struct fits the request's room. */
Test(params, each_routes_table_names_each_parameter_once)
{
    int tables = 0;
    for (unsigned i = 0; i < mg_route_table_len; i++) {
        const struct mg_param_table *t = mg_routes[i].params;
        if (!t)
            continue;
        tables++;
        cr_expect_leq(t->size, (size_t)MG_PARAMS_BYTES, "%s", mg_routes[i].template);
        for (unsigned a = 0; a < t->count; a++) {
            const struct mg_param *p = &t->params[a];
            cr_expect(p->offset < t->size, "%s: %s lies outside its struct", mg_routes[i].template,
                      p->name);
            cr_expect(p->kind != MG_PARAM_CHOICE || p->choices, "%s: %s has no choices",
                      mg_routes[i].template, p->name);
            for (unsigned b = a + 1; b < t->count; b++)
                cr_expect(strcmp(p->name, t->params[b].name) != 0, "%s: %s twice",
                          mg_routes[i].template, p->name);
        }
    }
    cr_expect_geq(tables, 10, "%d routes declare parameters", tables);
}

/* A parameter the table refuses is answered 400 by dispatch before the route's heavy check
 * and its handler, with the parameter named. */
Test(params, a_refused_value_is_400_naming_the_parameter)
{
    static const struct {
        const char *target, *names;
    } cases[] = {
        {"/api/packets?offset=-1", "offset"},
        {"/api/scope-stats?window=2h", "window must be 1h, 24h, or 7d"},
        {"/api/packets/timestamps", "since required"},
        {"/api/packets/timestamps?since=", "since required"},
    };
    char dir[128];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(e.db, sizeof e.db, "%s/empty.db", dir);
    cr_assert_eq(mg_test_make_db(e.db, true, NULL), 0);
    static const char *const env[] = {"MESHGATE_WORKERS=1", NULL};
    cr_assert(mg_test_server_start(&e.server, e.db, env), "meshgate did not start");
    cr_assert(mg_test_wait_node_list(e.server.port), "the node list never answered 200");
    e.running = true;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct mg_test_response r;
        cr_assert(mg_test_get(e.server.port, cases[i].target, NULL, &r), "%s", cases[i].target);
        cr_expect_eq(r.status, 400, "%s: %d %s", cases[i].target, r.status, r.body);
        cr_expect(strstr(r.body, cases[i].names), "%s: %s", cases[i].target, r.body);
        mg_test_response_free(&r);
    }
    mg_test_rmdir(dir);
}

/* ---- the parser, in-process ------------------------------------------------------------ */

struct every {
    int64_t limit, offset, bounded;
    int order, window;
    const char *text;
    double score;
    struct mg_param_list region, nodes;
};
static const char *const orders[] = {"desc", "asc", NULL};
static const char *const windows[] = {"1h", "24h", "7d", NULL};
#define P(field) .offset = offsetof(struct every, field)
static const struct mg_param every_param[] = {
    {.name = "limit", .kind = MG_PARAM_LIMIT, P(limit), .def = 50, .min = 1, .max = 2000},
    {.name = "offset",
     .kind = MG_PARAM_INT,
     P(offset),
     .min = 0,
     .max = INT64_MAX,
     .flags = MG_PARAM_RANGE_400},
    {.name = "days", .kind = MG_PARAM_INT, P(bounded), .def = 7, .min = 1, .max = 30},
    {.name = "order", .kind = MG_PARAM_CHOICE, P(order), .choices = orders},
    {.name = "window",
     .kind = MG_PARAM_CHOICE,
     P(window),
     .choices = windows,
     .def = 1,
     .flags = MG_PARAM_BAD_400},
    {.name = "text", .kind = MG_PARAM_TEXT, P(text)},
    {.name = "score", .kind = MG_PARAM_REAL, P(score), .real_def = 0},
    {.name = "region", .kind = MG_PARAM_LIST, P(region), .flags = MG_LIST_SKIP_ALL},
    {.name = "nodes", .kind = MG_PARAM_LIST, P(nodes), .flags = MG_LIST_KEEP_EMPTY},
};
#undef P
static const struct mg_param_table every = MG_PARAM_TABLE(struct every, every_param);

/* Parses query through the table; the status (200 when accepted) and the body into err. */
static int parse(const char *query, struct every *v, char *err, size_t cap)
{
    static char storage[4096];
    struct mg_request req;
    memset(&req, 0, sizeof req);
    const char *why = NULL;
    cr_assert_eq(mg_query_parse(&req.query, query, strlen(query), storage, sizeof storage, &why), 0,
                 "%s: %s", query, why);
    struct mg_response res;
    mg_response_init(&res);
    bool ok = mg_params_parse(&every, &req, &res, v);
    snprintf(err, cap, "%s", ok ? "" : mg_buf_cstr(&res.body));
    int status = ok ? 200 : res.status;
    mg_response_free(&res);
    return status;
}

Test(params, each_kind_reads_a_bad_value_as_corescopes_reader)
{
    struct every v;
    char err[256];
    static const struct {
        const char *query;
        int64_t limit, offset, days;
        int order, window;
        double score;
    } cases[] = {
        {"", 50, 0, 7, 0, 1, 0},
        {"limit=&offset=&days=&order=&window=&score=", 50, 0, 7, 0, 1, 0},
        {"limit=abc&offset=abc&days=abc&order=ASC&score=abc", 50, 0, 7, 0, 1, 0},
        {"limit=0&days=0", 50, 0, 1, 0, 1, 0},   /* clampLimit: 0 is the default */
        {"limit=-1&days=-5", 50, 0, 1, 0, 1, 0}, /* ... and so is a negative one */
        {"limit=99999&days=99", 2000, 0, 30, 0, 1, 0},
        {"limit=99999999999999999999", 50, 0, 7, 0, 1, 0}, /* past 64 bits: Atoi refuses */
        {"limit=%2B5&offset=3&order=asc&window=7d", 5, 3, 7, 1, 2, 0},
        {"limit=+5", 50, 0, 7, 0, 1, 0},    /* "+" is a blank in a query, as in Go: malformed */
        {"score=1e999", 50, 0, 7, 0, 1, 0}, /* ParseFloat: out of range is an error */
        {"score=%201", 50, 0, 7, 0, 1, 0},  /* ... and so is a leading blank */
        {"score=NaN", 50, 0, 7, 0, 1, 0},
        {"score=-2.5", 50, 0, 7, 0, 1, -2.5},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_assert_eq(parse(cases[i].query, &v, err, sizeof err), 200, "%s: %s", cases[i].query,
                     err);
        cr_expect_eq(v.limit, cases[i].limit, "%s: limit %lld", cases[i].query, (long long)v.limit);
        cr_expect_eq(v.offset, cases[i].offset, "%s: offset", cases[i].query);
        cr_expect_eq(v.bounded, cases[i].days, "%s: days %lld", cases[i].query,
                     (long long)v.bounded);
        cr_expect_eq(v.order, cases[i].order, "%s: order", cases[i].query);
        cr_expect_eq(v.window, cases[i].window, "%s: window", cases[i].query);
        cr_expect_eq(v.score, cases[i].score, "%s: score %g", cases[i].query, v.score);
    }
    /* Refused: out of range where the table says so, an unknown strict choice. */
    cr_expect_eq(parse("offset=-1", &v, err, sizeof err), 400);
    cr_expect(strstr(err, "offset"), "%s", err);
    cr_expect_eq(parse("window=2h", &v, err, sizeof err), 400);
    cr_expect(strstr(err, "window must be 1h, 24h, or 7d"), "%s", err);
    /* Lists: trimmed, blanks (and ALL for region) dropped; none left: absent, unless kept. */
    cr_expect_eq(parse("region=%20sjc%20,,ALL,oak&nodes=,,", &v, err, sizeof err), 200);
    cr_expect_eq(v.region.count, 2);
    cr_expect_eq(v.nodes.count, 0);
    cr_expect(v.nodes.text != NULL, "nodes=,, is kept: the listing of no node");
    struct mg_list_item items[4];
    cr_expect_eq(mg_param_list_split(v.region.text, MG_LIST_SKIP_ALL, items, 4), 2);
    cr_expect(items[0].len == 3 && strncmp(items[0].ptr, "sjc", 3) == 0);
    cr_expect(items[1].len == 3 && strncmp(items[1].ptr, "oak", 3) == 0);
    cr_expect_eq(parse("region=ALL,,&text=", &v, err, sizeof err), 200);
    cr_expect(v.region.text == NULL && v.text == NULL);
    char query[1024] = "region=";
    for (int i = 0; i <= MG_PARAM_LIST_MAX; i++)
        strcat(query, "X,");
    cr_expect_eq(parse(query, &v, err, sizeof err), 400);
    cr_expect(strstr(err, "region"), "%s", err);
    query[strlen(query) - 2] = '\0'; /* one fewer: 64 */
    cr_expect_eq(parse(query, &v, err, sizeof err), 200, "%s", err);
    cr_expect_eq(v.region.count, MG_PARAM_LIST_MAX);
}

/* The home page's link for a route that needs a parameter comes from its table's sample. */
Test(params, a_samples_query_is_the_home_pages_link)
{
    struct tm tm = {.tm_year = 126, .tm_mon = 11, .tm_mday = 5, .tm_hour = 20};
    char query[96];
    unsigned timestamps = mg_route_by_template("/api/packets/timestamps", 23);
    cr_assert_lt(timestamps, mg_route_table_len);
    mg_params_sample_query(mg_routes[timestamps].params, &tm, query, sizeof query);
    cr_expect_str_eq(query, "?since=2026-12-05T20:00:00Z");
    unsigned nodes = mg_route_by_template("/api/nodes", 10);
    mg_params_sample_query(mg_routes[nodes].params, &tm, query, sizeof query);
    cr_expect_str_eq(query, "");
}

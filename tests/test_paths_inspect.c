/* SPDX-License-Identifier: ISC */
/*
 * POST /api/paths/inspect, CoreScope's path inspector (issue 26, item 1: inspect):
 *
 *   - on CoreScope's real migrated database, freshened: equal to CoreScope's own answers,
 *     recorded in tests/corescope-paths-inspect.json (how: its _comment): real paths of the
 *     fixture, ambiguous prefixes (equal scores in CoreScope's order: its sort's), prefixes no
 *     relay has, limits, and bodies refused or taken as CoreScope's decoder does. A score
 *     decays with the time since its edges were last seen: the copy is freshened to the
 *     recording's now plus the time since it was asked, and the unrounded edgeWeight compared
 *     to 1e-4, the rounded scores to one step of their last place;
 *   - without a row in neighbor_edges, the edges are the built neighbour graph's: each hop's
 *     edgeWeight is worked out from the pair's score and last sighting as
 *     /api/nodes/{pubkey}/neighbors lists them, and the positions in nodes;
 *   - on a small database, values worked out from its rows: the edge's count and age, the
 *     recency and geo factors, the selectivity, a pair stored both ways, the alternatives;
 *   - the cost: one hop (or a refused body) is light, more heavy, and a hostile body (64 hops
 *     of a prefix 60 relays share) answers at once with its bound;
 *   - the real binary, with an upstream set: the route is answered natively (not passed up),
 *     its body read whole, and one over 64 KiB refused with 413.
 * Without ../shared the recorded comparisons skip and say why.
 */
#include "fixture.h"
#include "harness.h"
#include "inproc.h"
#include "time_parse.h"
#include "upstream_proc.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define FIXTURE_MIGRATED_DB MESHGATE_SOURCE_DIR "/../shared/data/corescope-e2e-fixture-migrated.db"
#define EXPECTED MESHGATE_SOURCE_DIR "/tests/corescope-paths-inspect.json"
#define INSPECT "/api/paths/inspect"

static struct {
    char dir[128];
    char db[256];
    struct mg_test_ctx t;
    bool open;
    struct mg_test_upstream up; /* pid 0: none */
} fx;

static void cleanup(void)
{
    if (fx.open)
        mg_test_ctx_close(&fx.t);
    fx.open = false;
    if (fx.up.pid > 0)
        mg_test_upstream_stop(&fx.up); /* a test that failed before it stopped it */
    fx.up.pid = 0;
    if (fx.dir[0])
        mg_test_rmdir(fx.dir);
    fx.dir[0] = '\0';
}

TestSuite(paths_inspect, .fini = cleanup, .timeout = 300);

static void exec_on(const char *db, const char *sql)
{
    sqlite3 *conn = NULL;
    cr_assert_eq(sqlite3_open(db, &conn), SQLITE_OK);
    sqlite3_busy_timeout(conn, 30000);
    char *err = NULL;
    cr_assert_eq(sqlite3_exec(conn, sql, NULL, NULL, &err), SQLITE_OK, "%s: %s", sql,
                 err ? err : "");
    sqlite3_close(conn);
}

/* A private copy of CoreScope's fixture freshened to now (sql run on it first, NULL: none). */
static void serve_fixture(int64_t now, const char *sql)
{
    if (access(FIXTURE_MIGRATED_DB, R_OK) != 0 || access(EXPECTED, R_OK) != 0)
        cr_skip_test("%s not present: this test reads CoreScope's real database (../shared, "
                     "see ../shared/data/README.md)",
                     FIXTURE_MIGRATED_DB);
    mg_test_tmpdir(fx.dir, sizeof fx.dir);
    cr_assert(fx.dir[0], "no temporary directory under /tmp");
    snprintf(fx.db, sizeof fx.db, "%s/fresh.db", fx.dir);
    char err[512] = "";
    cr_assert_eq(mg_fixture_freshen(FIXTURE_MIGRATED_DB, fx.db, now, err, sizeof err), 0,
                 "freshening: %s", err);
    if (sql)
        exec_on(fx.db, sql);
    cr_assert(mg_test_ctx_open(&fx.t, fx.db));
    fx.t.seg.clients.table->per_minute = 0; /* heavy requests one after another */
    fx.open = true;
}

/* POST body; its status, and its answer as JSON in *out (the caller frees). */
static int inspect(const char *body, json_t **out)
{
    int status = mg_test_ctx_request(&fx.t, "POST", INSPECT, body);
    json_error_t err;
    *out = json_loadb((const char *)fx.t.res.body.data, fx.t.res.body.len, 0, &err);
    cr_assert_not_null(*out, "%s: not JSON (%s): %.300s", body ? body : "(none)", err.text,
                       (const char *)fx.t.res.body.data);
    return status;
}

/* ---- CoreScope's recorded answers ---- */

/* A body CoreScope takes where jansson, meshgate's JSON reader, does not: a number past a
 * double's range in a field CoreScope ignores (it skips the field unread). meshgate refuses
 * it, 400 "invalid JSON". */
static bool jansson_refuses(const char *body)
{
    return body && strstr(body, "1e400");
}

static void expect_same(json_t *mine, json_t *want, const char *where);

static void expect_same_number(json_t *mine, json_t *want, const char *key, const char *where)
{
    double m = json_number_value(mine), w = json_number_value(want);
    /* the unrounded edgeWeight drifts with the seconds between the two askings; a rounded
     * score may cross a step of its last place */
    double tolerance = !strcmp(key, "edgeWeight") ? 1e-4 : !strcmp(key, "score") ? 1.0001e-3 : 0;
    cr_expect(json_is_number(mine) && fabs(m - w) <= tolerance, "%s.%s: %.17g, CoreScope %.17g",
              where, key, m, w);
}

static void expect_same(json_t *mine, json_t *want, const char *where)
{
    if (json_is_object(want)) {
        cr_expect(json_is_object(mine), "%s: not an object", where);
        cr_expect_eq(json_object_size(mine), json_object_size(want), "%s: keys", where);
        const char *key;
        json_t *w;
        json_object_foreach(want, key, w)
        {
            json_t *m = json_object_get(mine, key);
            char at[512];
            snprintf(at, sizeof at, "%.400s.%s", where, key);
            cr_expect_not_null(m, "%s: missing", at);
            if (!m || !strcmp(key, "elapsedMs"))
                continue;
            if (json_is_real(w) || (json_is_number(w) && json_is_real(m)))
                expect_same_number(m, w, key, where);
            else
                expect_same(m, w, at);
        }
        return;
    }
    if (json_is_array(want)) {
        cr_expect_eq(json_array_size(mine), json_array_size(want), "%s: entries", where);
        for (size_t i = 0; i < json_array_size(want) && i < json_array_size(mine); i++) {
            char at[512];
            snprintf(at, sizeof at, "%.400s[%zu]", where, i);
            expect_same(json_array_get(mine, i), json_array_get(want, i), at);
        }
        return;
    }
    cr_expect(json_equal(mine, want), "%s: differs", where);
}

static void expect_recorded(json_t *expected, const char *set)
{
    json_t *list = json_object_get(expected, set);
    cr_assert(json_is_array(list) && json_array_size(list) > 0, "%s has no \"%s\"", EXPECTED, set);
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e)
    {
        const char *body = json_string_value(json_object_get(e, "body"));
        int want = (int)json_integer_value(json_object_get(e, "status"));
        json_t *mine = NULL;
        int status = inspect(body, &mine);
        char where[160];
        snprintf(where, sizeof where, "%s[%zu] %.100s", set, i, body ? body : "(none)");
        if (jansson_refuses(body)) {
            cr_expect_eq(status, 400, "%s", where);
            cr_expect_str_eq(json_string_value(json_object_get(mine, "error")), "invalid JSON");
        } else {
            cr_expect_eq(status, want, "%s: %d, CoreScope %d: %.300s", where, status, want,
                         (const char *)fx.t.res.body.data);
            expect_same(mine, json_object_get(e, "answer"), where);
        }
        json_decref(mine);
    }
}

Test(paths_inspect, answers_equal_corescopes_on_its_database)
{
    if (access(EXPECTED, R_OK) != 0)
        cr_skip_test("%s not present", EXPECTED);
    json_error_t jerr;
    json_t *expected = json_load_file(EXPECTED, 0, &jerr);
    cr_assert_not_null(expected, "%s: %s", EXPECTED, jerr.text);
    int64_t now = json_integer_value(json_object_get(expected, "now"));
    json_t *first = json_array_get(json_object_get(expected, "real"), 0);
    double asked = json_number_value(json_object_get(first, "asked"));
    cr_assert(now > 0 && asked >= (double)now, "no now or asked in %s", EXPECTED);
    /* each edge as old, when asked here, as it was when CoreScope was asked */
    serve_fixture((int64_t)time(NULL) - (int64_t)llround(asked - (double)now), NULL);
    static const char *const sets[] = {"real", "ambiguous", "unknown", "limits", "refused"};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
        expect_recorded(expected, sets[i]);
    json_decref(expected);
}

/* ---- without neighbor_edges: the built neighbour graph ---- */

static double haversine(double lat1, double lon1, double lat2, double lon2)
{
    double r = M_PI / 180, a = sin((lat2 - lat1) * r / 2), b = sin((lon2 - lon1) * r / 2);
    double h = a * a + cos(lat1 * r) * cos(lat2 * r) * b * b;
    return 6371.0 * 2 * atan2(sqrt(h), sqrt(1 - h));
}

static bool position(const char *key, double *lat, double *lon)
{
    sqlite3 *conn = NULL;
    sqlite3_stmt *st = NULL;
    bool has = false;
    cr_assert_eq(sqlite3_open_v2(fx.db, &conn, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_prepare_v2(conn, "SELECT lat, lon FROM nodes WHERE lower(public_key) = ?1", -1, &st,
                       NULL);
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    while (sqlite3_step(st) == SQLITE_ROW) { /* the last row of the key */
        has =
            sqlite3_column_type(st, 0) != SQLITE_NULL && sqlite3_column_type(st, 1) != SQLITE_NULL;
        *lat = sqlite3_column_double(st, 0);
        *lon = sqlite3_column_double(st, 1);
        has = has && !(*lat == 0 && *lon == 0);
    }
    sqlite3_finalize(st);
    sqlite3_close(conn);
    return has;
}

Test(paths_inspect, without_neighbor_edges_the_built_graphs_edges_score_each_hop)
{
    serve_fixture((int64_t)time(NULL), "DELETE FROM neighbor_edges");
    /* the relay with the most neighbours, and its resolved neighbours */
    const char *hub = "1000009e310d729534b70faa33a1abe5cd5e45d594f72f786febccbb770b7e74";
    char target[256];
    snprintf(target, sizeof target, "/api/nodes/%s/neighbors", hub);
    cr_assert_eq(mg_test_ctx_get(&fx.t, target), 200);
    json_error_t jerr;
    json_t *nb = json_loadb((const char *)fx.t.res.body.data, fx.t.res.body.len, 0, &jerr);
    cr_assert_not_null(nb, "%s", jerr.text);
    size_t i, checked = 0;
    json_t *n;
    json_array_foreach(json_object_get(nb, "neighbors"), i, n)
    {
        const char *peer = json_string_value(json_object_get(n, "pubkey"));
        if (!peer || json_is_true(json_object_get(n, "ambiguous")))
            continue;
        char body[128];
        snprintf(body, sizeof body, "{\"prefixes\":[\"%.6s\",\"%.6s\"],\"limit\":50}", hub, peer);
        json_t *got = NULL;
        cr_assert_eq(inspect(body, &got), 200, "%s", body);
        /* the path hub -> peer among the candidates, and its second hop's weight */
        json_t *c, *hop = NULL;
        size_t k;
        json_array_foreach(json_object_get(got, "candidates"), k, c)
        {
            json_t *path = json_object_get(c, "path");
            if (!strcasecmp(json_string_value(json_array_get(path, 0)), hub) &&
                !strcasecmp(json_string_value(json_array_get(path, 1)), peer))
                hop = json_array_get(json_object_get(json_object_get(c, "evidence"), "perHop"), 1);
        }
        if (!hop) { /* a peer that cannot relay is no candidate */
            json_decref(got);
            continue;
        }
        double score = json_number_value(json_object_get(n, "score"));
        int64_t last_ms = 0;
        cr_assert(mg_rfc3339_parse_ms(json_string_value(json_object_get(n, "last_seen")),
                                      strlen(json_string_value(json_object_get(n, "last_seen"))),
                                      &last_ms));
        double hours = (double)((int64_t)time(NULL) * 1000 - last_ms) / 3.6e6;
        double recency = hours <= 24 ? 1 : fmax(0.1, 24 / hours);
        double lat1, lon1, lat2, lon2, geo = 1;
        if (position(hub, &lat1, &lon1) && position(peer, &lat2, &lon2)) {
            double km = haversine(lat1, lon1, lat2, lon2);
            geo = km > 50 ? fmax(0.1, 50 / km) : 1;
        }
        double candidates = json_number_value(json_object_get(hop, "candidatesConsidered"));
        double want = 0.35 * score + 0.2 * geo + 0.15 * recency + 0.3 / candidates;
        cr_expect(fabs(json_number_value(json_object_get(hop, "edgeWeight")) - fmax(want, 0.05)) <
                      1e-4,
                  "%s: edgeWeight %.9g, worked out %.9g", body,
                  json_number_value(json_object_get(hop, "edgeWeight")), want);
        checked++;
        json_decref(got);
    }
    cr_expect_gt(checked, 2, "too few of the hub's neighbours checked");
    json_decref(nb);
}

/* ---- a small database, worked out from its rows ---- */

#define KEY_A "aa11111111111111111111111111111111111111111111111111111111111111"
#define KEY_B1 "bb22222222222222222222222222222222222222222222222222222222222222"
#define KEY_B2 "bb33333333333333333333333333333333333333333333333333333333333333"
#define KEY_B3 "bb44444444444444444444444444444444444444444444444444444444444444"
#define KEY_C "cc55555555555555555555555555555555555555555555555555555555555555"

/* A small database of these rows, served in process. */
static void serve_rows(const char *sql)
{
    mg_test_tmpdir(fx.dir, sizeof fx.dir);
    snprintf(fx.db, sizeof fx.db, "%s/small.db", fx.dir);
    cr_assert_eq(mg_test_make_db(fx.db, true, sql), 0);
    cr_assert(mg_test_ctx_open(&fx.t, fx.db));
    fx.t.seg.clients.table->per_minute = 0; /* heavy requests one after another */
    fx.open = true;
}

static void iso(char *out, size_t cap, int64_t unix_s)
{
    time_t t = (time_t)unix_s;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Relays A (37.0, -122.0), B1 11 km north, B2 111 km north, companion B3, room C without a
 * position; edges A-B1 (50, 2 h ago), B2-A stored both ways (30 and 90: 120, the later of 48
 * and 72 h ago), B1-C (10, no time). */
static int64_t serve_small(void)
{
    int64_t now = (int64_t)time(NULL);
    char h2[32], h48[32], h72[32], sql[4096];
    iso(h2, sizeof h2, now - 2 * 3600);
    iso(h48, sizeof h48, now - 48 * 3600);
    iso(h72, sizeof h72, now - 72 * 3600);
    snprintf(sql, sizeof sql,
             "INSERT INTO nodes (public_key, name, role, lat, lon) VALUES"
             " ('" KEY_A "', 'Alpha', 'repeater', 37.0, -122.0),"
             " ('" KEY_B1 "', 'Bravo', 'Repeater', 37.1, -122.0),"
             " ('" KEY_B2 "', 'Bravo2', 'repeater', 38.0, -122.0),"
             " ('" KEY_B3 "', 'Bravo3', 'companion', 37.2, -122.0),"
             " ('" KEY_C "', NULL, 'room', NULL, NULL);"
             "INSERT INTO neighbor_edges (node_a, node_b, count, last_seen) VALUES"
             " ('" KEY_A "', '" KEY_B1 "', 50, '%s'),"
             " ('" KEY_B2 "', '" KEY_A "', 30, '%s'),"
             " ('" KEY_A "', '" KEY_B2 "', 90, '%s'),"
             " ('" KEY_B1 "', '" KEY_C "', 10, NULL);",
             h2, h72, h48);
    serve_rows(sql);
    return now;
}

static double number_at(json_t *v, const char *path)
{
    /* "candidates.0.evidence.perHop.1.edgeWeight" */
    char copy[256];
    snprintf(copy, sizeof copy, "%s", path);
    for (char *save = NULL, *t = strtok_r(copy, ".", &save); t && v; t = strtok_r(NULL, ".", &save))
        v = json_is_array(v) ? json_array_get(v, strtoul(t, NULL, 10)) : json_object_get(v, t);
    cr_assert(json_is_number(v), "%s: not a number", path);
    return json_number_value(v);
}

Test(paths_inspect, scores_are_worked_out_from_the_rows)
{
    serve_small();
    json_t *got = NULL;
    cr_assert_eq(inspect("{\"prefixes\":[\"AA\",\" bb\",\"cc\"]}", &got), 200);
    double lambda = log(2.0) / 168;
    double km = haversine(37.0, -122.0, 38.0, -122.0);
    double b1 = 0.35 * (0.5 * exp(-lambda * 2)) + 0.2 + 0.15 + 0.3 / 2;
    double b2 = 0.35 * exp(-lambda * 48) + 0.2 * (50 / km) + 0.15 * (24.0 / 48) + 0.3 / 2;
    double c_after_b1 = 0 + 0.2 + 0.15 * 0.1 + 0.3; /* an edge seen at no time: 0, 0.1 */
    double c_after_b2 = 0 + 0.2 + 0 + 0.3;          /* no edge */
    double first = cbrt(b1 * c_after_b1), second = cbrt(b2 * c_after_b2);
    cr_assert(first > second);
    json_t *cands = json_object_get(got, "candidates");
    cr_assert_eq(json_array_size(cands), 2, "%s", (const char *)fx.t.res.body.data);
    cr_expect_str_eq(
        json_string_value(json_array_get(json_object_get(json_array_get(cands, 0), "path"), 1)),
        KEY_B1);
    cr_expect_str_eq(
        json_string_value(json_array_get(json_object_get(json_array_get(cands, 0), "names"), 2)),
        "");
    cr_expect_eq(number_at(got, "candidates.0.score"), round(first * 1000) / 1000);
    cr_expect_eq(number_at(got, "candidates.1.score"), round(second * 1000) / 1000);
    cr_expect(fabs(number_at(got, "candidates.0.evidence.perHop.0.edgeWeight") - 1) < 1e-12);
    cr_expect(fabs(number_at(got, "candidates.0.evidence.perHop.1.edgeWeight") - b1) < 1e-6);
    cr_expect(fabs(number_at(got, "candidates.0.evidence.perHop.2.edgeWeight") - c_after_b1) <
              1e-9);
    cr_expect(fabs(number_at(got, "candidates.1.evidence.perHop.1.edgeWeight") - b2) < 1e-6);
    cr_expect(fabs(number_at(got, "candidates.1.evidence.perHop.2.edgeWeight") - c_after_b2) <
              1e-9);
    cr_expect_eq(number_at(got, "candidates.0.evidence.perHop.1.candidatesConsidered"), 2);
    /* the other candidate of the hop, scored after the path's first hop, rounded */
    cr_expect_eq(number_at(got, "candidates.0.evidence.perHop.1.alternatives.0.score"),
                 round(b2 * 1000) / 1000);
    cr_expect_null(json_object_get(
        json_array_get(
            json_object_get(json_object_get(json_array_get(cands, 0), "evidence"), "perHop"), 0),
        "alternatives"));
    cr_expect(json_is_true(json_object_get(json_array_get(cands, 1), "speculative")) ==
              (second < 0.7));
    cr_expect_eq(number_at(got, "input.hops"), 3);
    cr_expect_str_eq(json_string_value(json_array_get(
                         json_object_get(json_object_get(got, "input"), "prefixes"), 1)),
                     "bb");
    cr_expect_eq(number_at(got, "stats.expansionsRun"), 60);
    json_decref(got);
    /* limit 1: the best path only */
    cr_assert_eq(inspect("{\"prefixes\":[\"aa\",\"bb\",\"cc\"],\"limit\":1}", &got), 200);
    cr_expect_eq(json_array_size(json_object_get(got, "candidates")), 1);
    json_decref(got);
}

Test(paths_inspect, bodies_are_refused_as_corescope_refuses_them)
{
    serve_small();
    static const struct {
        const char *body, *error;
    } cases[] = {
        {"", "invalid JSON"},
        {"[\"aa\"]", "invalid JSON"},
        {"{\"prefixes\":[\"aa\",1]}", "invalid JSON"},
        {"{\"prefixes\":[\"aa\"],\"limit\":2.5}", "invalid JSON"},
        {"{\"prefixes\":[\"aa\"],\"context\":\"x\"}", "invalid JSON"},
        {"null", "prefixes required"},
        {"{\"prefixes\":[]}", "prefixes required"},
        {"{\"prefixes\":[\"aa\",null]}", "prefixes must be even-length hex"},
        {"{\"prefixes\":[\"aab\"]}", "prefixes must be even-length hex"},
        {"{\"prefixes\":[\"ag\"]}", "prefixes must be valid hex"},
        {"{\"prefixes\":[\"aabbccdd\"]}", "prefix exceeds 3 bytes"},
        {"{\"prefixes\":[\"aa\",\"bbcc\"]}", "mixed prefix lengths not allowed"},
        /* an escaped surrogate alone is U+FFFD (3 bytes), as Go reads it; a pair one rune */
        {"{\"prefixes\":[\"\\ud800a\"]}", "prefixes must be valid hex"},
        {"{\"prefixes\":[\"\\udc00\"]}", "prefixes must be even-length hex"},
        {"{\"prefixes\":[\"\\ud83d\\ude00\"]}", "prefixes must be valid hex"},
        {"{\"prefixes\":[\"\\ud83d\\u0041\"]}", "prefixes must be valid hex"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *got = NULL;
        cr_expect_eq(inspect(cases[i].body, &got), 400, "%s", cases[i].body);
        cr_expect_str_eq(json_string_value(json_object_get(got, "error")), cases[i].error, "%s",
                         cases[i].body);
        cr_expect(fx.t.light, "%s: a refused body is light", cases[i].body);
        json_decref(got);
    }
    /* 65 prefixes; what follows the first 4096 bytes is not read */
    char big[8192];
    size_t n = (size_t)snprintf(big, sizeof big, "{\"prefixes\":[");
    for (int i = 0; i < 65; i++)
        n += (size_t)snprintf(big + n, sizeof big - n, "%s\"aa\"", i ? "," : "");
    snprintf(big + n, sizeof big - n, "]}");
    json_t *got = NULL;
    cr_expect_eq(inspect(big, &got), 400);
    cr_expect_str_eq(json_string_value(json_object_get(got, "error")),
                     "too many prefixes (max 64)");
    json_decref(got);
    n = (size_t)snprintf(big, sizeof big, "{\"prefixes\":[\"aa\"],\"pad\":\"");
    memset(big + n, 'x', 4200);
    snprintf(big + n + 4200, sizeof big - n - 4200, "\"}");
    cr_expect_eq(inspect(big, &got), 400);
    json_decref(got);
    n = (size_t)snprintf(big, sizeof big, "{\"prefixes\":[\"aa\"]}");
    memset(big + n, ' ', 5000);
    big[n + 5000] = '\0';
    cr_expect_eq(inspect(big, &got), 200);
    json_decref(got);
}

Test(paths_inspect, one_hop_is_light_more_are_heavy)
{
    serve_small();
    json_t *got = NULL;
    cr_assert_eq(inspect("{\"prefixes\":[\"bb\"]}", &got), 200);
    cr_expect(fx.t.light);
    cr_expect_eq(json_array_size(json_object_get(got, "candidates")), 2);
    json_decref(got);
    cr_assert_eq(inspect("{\"prefixes\":[\"aa\",\"bb\"]}", &got), 200);
    cr_expect(!fx.t.light);
    json_decref(got);
}

Test(paths_inspect, a_hostile_body_is_bounded_by_the_beam)
{
    /* 60 relays under one prefix, and 64 hops of it: at most 20 paths a hop */
    char sql[16384];
    size_t n = (size_t)snprintf(sql, sizeof sql,
                                "INSERT INTO nodes (public_key, name, role, lat,"
                                " lon) VALUES");
    for (int i = 0; i < 60; i++)
        n += (size_t)snprintf(sql + n, sizeof sql - n,
                              "%s('ab%062d', 'R%d', 'repeater', %f, -122.0)", i ? "," : "", i, i,
                              37.0 + i * 0.01);
    snprintf(sql + n, sizeof sql - n, ";");
    serve_rows(sql);
    char body[1024];
    n = (size_t)snprintf(body, sizeof body, "{\"limit\":50,\"prefixes\":[");
    for (int i = 0; i < 64; i++)
        n += (size_t)snprintf(body + n, sizeof body - n, "%s\"AB\"", i ? "," : "");
    snprintf(body + n, sizeof body - n, "]}");
    json_t *got = NULL;
    cr_assert_eq(inspect(body, &got), 200);
    json_t *cands = json_object_get(got, "candidates");
    cr_expect_eq(json_array_size(cands), 20, "the beam's width");
    cr_expect_eq(number_at(got, "stats.expansionsRun"), 64 * 20);
    json_t *hops = json_object_get(json_object_get(json_array_get(cands, 0), "evidence"), "perHop");
    cr_expect_eq(json_array_size(hops), 64);
    cr_expect_eq(number_at(got, "candidates.0.evidence.perHop.63.candidatesConsidered"), 60);
    cr_expect_eq(json_array_size(json_object_get(json_array_get(hops, 5), "alternatives")), 5);
    json_decref(got);
}

/* ---- the real binary ---- */

static int status_of(int port, const char *request, char **body)
{
    int fd = mg_test_connect(port);
    cr_assert(fd >= 0);
    cr_assert(mg_test_send(fd, request, strlen(request)));
    struct mg_test_response r;
    cr_assert(mg_test_read_response(fd, &r, false, 30000), "no answer to %.80s", request);
    close(fd);
    int status = r.status;
    if (body)
        *body = strdup(r.body ? r.body : "");
    mg_test_response_free(&r);
    return status;
}

Test(paths_inspect, the_real_server_answers_it_natively_with_an_upstream_set)
{
    struct mg_test_upstream *up = &fx.up;
    mg_test_upstream_start(up, 0, NULL);
    int64_t now = (int64_t)time(NULL);
    char h2[32], sql[1024];
    iso(h2, sizeof h2, now - 2 * 3600);
    snprintf(sql, sizeof sql,
             "INSERT INTO nodes (public_key, name, role, lat, lon) VALUES"
             " ('" KEY_A "', 'Alpha', 'repeater', 37.0, -122.0),"
             " ('" KEY_B1 "', 'Bravo', 'repeater', 37.1, -122.0);"
             "INSERT INTO neighbor_edges (node_a, node_b, count, last_seen) VALUES"
             " ('" KEY_A "', '" KEY_B1 "', 50, '%s');",
             h2);
    mg_test_tmpdir(fx.dir, sizeof fx.dir);
    snprintf(fx.db, sizeof fx.db, "%s/small.db", fx.dir);
    cr_assert_eq(mg_test_make_db(fx.db, true, sql), 0);
    char upstream[64];
    snprintf(upstream, sizeof upstream, "MESHGATE_UPSTREAM=127.0.0.1:%d", up->port);
    const char *env[] = {"MESHGATE_WORKERS=1", upstream, NULL};
    struct mg_test_server srv;
    cr_assert(mg_test_server_start(&srv, fx.db, env));
    static const char body[] = "{\"prefixes\":[\"aa\",\"bb\"]}";
    char req[512];
    snprintf(req, sizeof req,
             "POST " INSPECT " HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
             strlen(body), body);
    char *answer = NULL;
    cr_expect_eq(status_of(srv.port, req, &answer), 200);
    cr_expect(strstr(answer, "\"chosen\":\"" KEY_B1 "\""), "%s", answer);
    free(answer);
    const char *big = "POST " INSPECT " HTTP/1.1\r\nHost: t\r\nContent-Length: 65537\r\n"
                      "Connection: close\r\n\r\n{";
    cr_expect_eq(status_of(srv.port, big, NULL), 413);
    char *log = mg_test_read_file(up->log);
    cr_expect_eq(mg_test_count(log, INSPECT), 0, "passed up: %s", log ? log : "");
    free(log);
    cr_expect_eq(mg_test_server_stop(&srv, 30000), 0);
    mg_test_upstream_stop(up);
    up->pid = 0;
}

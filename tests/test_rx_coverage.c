/* SPDX-License-Identifier: ISC */
/*
 * Node analytics (workers/api/ep_node_analytics.c) and CoreScope's mobile RX coverage
 * (workers/api/ep_rx_coverage.c) on CoreScope's real migrated end-to-end database, freshened
 * into a private copy whose newest times are the top of the current hour, with CoreScope's
 * config.example.json (clientRxCoverage turned on where a test says so), SNR and RSSI given to
 * its observations (tests/node-analytics.sql: the fixture has none) and, for the coverage, the
 * receptions of tests/rx-coverage.sql added to the copy.
 *
 * What each answer must hold is what CoreScope's own server answered for such a copy,
 * recorded in tests/corescope-rx-coverage.json (how: its _comment). The recording's copy was
 * freshened to another hour, so every time in it is shifted by whole hours: the test moves
 * each recorded time (and each heatmap cell) by that many hours, compares numbers to 1e-9 of
 * their size (a cell's corners come from another libm), sorts the lists CoreScope leaves in a
 * Go map's order, and checks the window (timeRange) against its own clock. A node's clockSkew
 * moves with the copy's times (its ADVERTs' own clocks do not), so it is compared with
 * meshgate's /clock-skew answer for the node, which tests/test_reach.c's neighbours check
 * against CoreScope. Values are also worked out from the data. Without ../shared every test
 * skips and says why.
 */
#include "corescope_config.h"
#include "fixture.h"
#include "harness.h"
#include "hexgrid.h"
#include "inproc.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FIXTURE_MIGRATED_DB MESHGATE_SOURCE_DIR "/../shared/data/corescope-e2e-fixture-migrated.db"
#define EXAMPLE_CONFIG MESHGATE_SOURCE_DIR "/../shared/corescope/server/config.example.json"
#define EXPECTED MESHGATE_SOURCE_DIR "/tests/corescope-rx-coverage.json"
#define RX_SQL MESHGATE_SOURCE_DIR "/tests/rx-coverage.sql"
#define SIGNAL_SQL MESHGATE_SOURCE_DIR "/tests/node-analytics.sql"

#define N6IJ "ec3433bb3adf1acaee0ce117600b0ca473705486ec666137379a1e8cbb7e75f4"
#define BUSIEST "1000009e310d729534b70faa33a1abe5cd5e45d594f72f786febccbb770b7e74"
#define MOBILE_ONE "c0ffee00000000000000000000000000000000000000000000000000000000c0"
#define HIDDEN_MOBILE "abad1dea00000000000000000000000000000000000000000000000000000000"

static struct {
    char dir[128];
    char db[256];
    char config[256];
    struct mg_test_ctx t;
    bool open;
    json_t *expected;
    int64_t now; /* the copy's newest time: the top of the hour */
} fx;

static void cleanup(void)
{
    if (fx.open)
        mg_test_ctx_close(&fx.t);
    fx.open = false;
    mg_corescope_free(&mg_corescope);
    json_decref(fx.expected);
    fx.expected = NULL;
    if (fx.dir[0])
        mg_test_rmdir(fx.dir);
    fx.dir[0] = '\0';
}

TestSuite(node_analytics, .fini = cleanup, .timeout = 120);
TestSuite(rx_coverage, .fini = cleanup, .timeout = 120);

static void exec_rw(const char *sql)
{
    sqlite3 *db;
    cr_assert_eq(mg_test_sqlite_open(fx.db, &db), SQLITE_OK);
    char *err = NULL;
    cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &err), SQLITE_OK, "%.200s: %s", sql, err);
    sqlite3_close(db);
}

/* config.example.json with clientRxCoverage.enabled = rx and nodeBlacklist = blacklist (NULL:
 * as it is) as this process's configuration. */
static void configure(bool rx, const char *blacklist)
{
    json_error_t jerr;
    json_t *root = json_load_file(EXAMPLE_CONFIG, 0, &jerr);
    cr_assert_not_null(root, "%s: %s", EXAMPLE_CONFIG, jerr.text);
    json_object_set_new(root, "clientRxCoverage", json_pack("{s:b}", "enabled", rx));
    if (blacklist)
        json_object_set_new(root, "nodeBlacklist", json_pack("[s]", blacklist));
    cr_assert_eq(json_dump_file(root, fx.config, 0), 0);
    json_decref(root);
    char err[512] = "";
    mg_corescope_free(&mg_corescope);
    cr_assert_eq(mg_corescope_load(&mg_corescope, fx.config, err, sizeof err), 0, "%s", err);
}

static void reopen(void)
{
    if (fx.open)
        mg_test_ctx_close(&fx.t);
    cr_assert(mg_test_ctx_open(&fx.t, fx.db));
    fx.open = true;
}

/* A private copy, freshened (with the receptions when receptions), and the configuration. */
static void start(bool rx, bool receptions)
{
    if (access(FIXTURE_MIGRATED_DB, R_OK) != 0 || access(EXAMPLE_CONFIG, R_OK) != 0)
        cr_skip_test("%s or %s not present: these tests compare with CoreScope's answers on its "
                     "real database and example configuration (../shared, see "
                     "../shared/data/README.md)",
                     FIXTURE_MIGRATED_DB, EXAMPLE_CONFIG);
    mg_test_tmpdir(fx.dir, sizeof fx.dir);
    snprintf(fx.db, sizeof fx.db, "%s/fresh.db", fx.dir);
    snprintf(fx.config, sizeof fx.config, "%s/config.json", fx.dir);
    fx.now = (int64_t)time(NULL) / 3600 * 3600;
    char err[512] = "";
    cr_assert_eq(mg_fixture_freshen(FIXTURE_MIGRATED_DB, fx.db, fx.now, err, sizeof err), 0,
                 "freshening: %s", err);
    json_error_t jerr;
    fx.expected = json_load_file(EXPECTED, 0, &jerr);
    cr_assert_not_null(fx.expected, "%s: %s", EXPECTED, jerr.text);
    char *signal = mg_test_read_file(SIGNAL_SQL);
    cr_assert_not_null(signal, "%s", SIGNAL_SQL);
    exec_rw(signal);
    free(signal);
    if (receptions) {
        char head[128];
        snprintf(head, sizeof head, "CREATE TABLE rx_now(t); INSERT INTO rx_now VALUES (%lld);",
                 (long long)fx.now);
        exec_rw(head);
        char *sql = mg_test_read_file(RX_SQL);
        cr_assert_not_null(sql, "%s", RX_SQL);
        exec_rw(sql);
        free(sql);
        exec_rw("DROP TABLE rx_now");
    }
    configure(rx, NULL);
    reopen();
}

static double number_of(const char *sql)
{
    sqlite3 *db;
    cr_assert_eq(mg_test_sqlite_open(fx.db, &db), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s", sql);
    double v = sqlite3_column_double(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

static json_t *get(const char *target, int want_status)
{
    int status = mg_test_ctx_get(&fx.t, target);
    const char *body = (const char *)fx.t.res.body.data;
    cr_assert_eq(status, want_status, "GET %s: status %d, want %d: %.300s", target, status,
                 want_status, body);
    json_error_t jerr;
    json_t *v = json_loadb(body, fx.t.res.body.len, 0, &jerr);
    cr_assert_not_null(v, "GET %s: not JSON (%s): %.300s", target, jerr.text, body);
    return v;
}

/* The status, content type and body of target. */
static void expect_text(const char *target, int status, const char *body)
{
    cr_expect_eq(mg_test_ctx_get(&fx.t, target), status, "%s: %d", target, fx.t.res.status);
    cr_expect_str_eq(fx.t.res.content_type ? fx.t.res.content_type : "",
                     "text/plain; charset=utf-8", "%s", target);
    cr_expect_eq(fx.t.res.body.len, strlen(body), "%s: %.*s", target, (int)fx.t.res.body.len,
                 fx.t.res.body.data);
    cr_expect(fx.t.res.body.len == strlen(body) &&
                  memcmp(fx.t.res.body.data, body, strlen(body)) == 0,
              "%s: %.*s", target, (int)fx.t.res.body.len, fx.t.res.body.data);
}

/* ---- comparing with CoreScope's recorded answer ---- */

/* Seconds of an RFC 3339 time, INT64_MIN for anything else. */
static int64_t seconds_of(const char *s)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    int used = 0;
    if (!s || strlen(s) < 19 || s[10] != 'T' ||
        sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
               &tm.tm_min, &tm.tm_sec, &used) != 6 ||
        used != 19)
        return INT64_MIN;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (int64_t)timegm(&tm);
}

static int by_json(const void *a, const void *b)
{
    char *x = json_dumps(*(json_t *const *)a, JSON_SORT_KEYS | JSON_COMPACT);
    char *y = json_dumps(*(json_t *const *)b, JSON_SORT_KEYS | JSON_COMPACT);
    int c = strcmp(x, y);
    free(x);
    free(y);
    return c;
}

/* A copy of list sorted by each entry's text (for the lists in a Go map's order); heatmap
 * cells moved by shift hours first. */
static json_t *sorted_copy(json_t *list, int64_t shift_hours)
{
    size_t n = json_array_size(list);
    json_t **e = calloc(n ? n : 1, sizeof *e);
    for (size_t i = 0; i < n; i++) {
        e[i] = json_deep_copy(json_array_get(list, i));
        json_t *d = json_object_get(e[i], "dayOfWeek"), *h = json_object_get(e[i], "hour");
        if (d && h) {
            int64_t at =
                ((json_integer_value(d) * 24 + json_integer_value(h) + shift_hours) % 168 + 168) %
                168;
            json_object_set_new(e[i], "dayOfWeek", json_integer(at / 24));
            json_object_set_new(e[i], "hour", json_integer(at % 24));
        }
    }
    qsort(e, n, sizeof *e, by_json);
    json_t *out = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(out, e[i]);
    free(e);
    return out;
}

static bool unordered(const char *key)
{
    return strcmp(key, "packetTypeBreakdown") == 0 || strcmp(key, "uptimeHeatmap") == 0 ||
           strcmp(key, "observerCoverage") == 0 || strcmp(key, "peerInteractions") == 0;
}

static void expect_same(json_t *want, json_t *got, const char *where, int64_t shift_hours)
{
    if (json_is_number(want) && json_is_number(got)) {
        double a = json_number_value(want), b = json_number_value(got);
        cr_expect_leq(fabs(a - b), 1e-9 * fmax(1, fabs(a)), "%s: %.17g, CoreScope %.17g", where, b,
                      a);
        return;
    }
    cr_assert_eq(json_typeof(want), json_typeof(got), "%s: another type than CoreScope's", where);
    char inner[512];
    if (json_is_object(want)) {
        cr_expect_eq(json_object_size(want), json_object_size(got), "%s: %zu keys, CoreScope %zu",
                     where, json_object_size(got), json_object_size(want));
        void *wi = json_object_iter(want), *gi = json_object_iter(got);
        for (; wi && gi; wi = json_object_iter_next(want, wi), gi = json_object_iter_next(got, gi))
            cr_expect_str_eq(json_object_iter_key(gi), json_object_iter_key(wi),
                             "%s: keys in another order than CoreScope's", where);
        const char *key;
        json_t *v;
        json_object_foreach(want, key, v)
        {
            json_t *g = json_object_get(got, key);
            snprintf(inner, sizeof inner, "%s.%s", where, key);
            cr_expect_not_null(g, "%s missing", inner);
            if (!g || strcmp(key, "timeRange") == 0 || strcmp(key, "clockSkew") == 0)
                continue; /* the clock's: checked apart */
            if (unordered(key) && json_is_array(v) && json_is_array(g)) {
                json_t *sw = sorted_copy(v, shift_hours), *sg = sorted_copy(g, 0);
                expect_same(sw, sg, inner, shift_hours);
                json_decref(sw);
                json_decref(sg);
                continue;
            }
            expect_same(v, g, inner, shift_hours);
        }
    } else if (json_is_array(want)) {
        cr_expect_eq(json_array_size(want), json_array_size(got), "%s: %zu entries, CoreScope %zu",
                     where, json_array_size(got), json_array_size(want));
        for (size_t i = 0; i < json_array_size(want) && i < json_array_size(got); i++) {
            snprintf(inner, sizeof inner, "%s[%zu]", where, i);
            expect_same(json_array_get(want, i), json_array_get(got, i), inner, shift_hours);
        }
    } else if (json_is_string(want) && seconds_of(json_string_value(want)) != INT64_MIN) {
        cr_expect_eq(seconds_of(json_string_value(got)),
                     seconds_of(json_string_value(want)) + shift_hours * 3600,
                     "%s: %s, CoreScope %s", where, json_string_value(got),
                     json_string_value(want));
    } else {
        cr_expect(json_equal(want, got), "%s differs from CoreScope's", where);
    }
}

/* Every recorded answer whose target starts with route and holds part. */
static void expect_recorded(const char *route, const char *part)
{
    int64_t recorded_now = json_integer_value(json_object_get(fx.expected, "now"));
    cr_assert_eq(recorded_now % 3600, 0, "the recording's copy is not at the top of an hour");
    int64_t shift = (fx.now - recorded_now) / 3600;
    json_t *answers = json_object_get(fx.expected, "answers");
    const char *target;
    json_t *want;
    int compared = 0;
    json_object_foreach(answers, target, want)
    {
        if (strncmp(target, route, strlen(route)) != 0 || !strstr(target, part))
            continue;
        json_t *got = get(target, 200);
        expect_same(want, got, target, shift);
        json_decref(got);
        compared++;
    }
    cr_expect_gt(compared, 0, "no recorded answer of %s", route);
}

/* ---- node analytics ---- */

Test(node_analytics, answers_equal_corescopes_on_the_freshened_fixture)
{
    start(false, false);
    expect_recorded("/api/nodes/", "/analytics");
}

static json_int_t int_at(json_t *o, const char *a, const char *b)
{
    json_t *v = json_object_get(o, a);
    return json_integer_value(b ? json_object_get(v, b) : v);
}

static json_int_t sum_of(json_t *list, const char *field)
{
    json_int_t s = 0;
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) s += json_integer_value(json_object_get(e, field));
    return s;
}

/* The window is the request's clock's; every list sums to the node's packets, which are those
 * /health counts (the fixture's two hours lie inside any window); its clock skew is its own
 * route's answer. */
Test(node_analytics, figures_agree_with_the_data_and_the_nodes_other_routes)
{
    start(false, false);
    static const char *const keys[] = {N6IJ, BUSIEST, NULL};
    for (int k = 0; keys[k]; k++) {
        char target[160];
        snprintf(target, sizeof target, "/api/nodes/%s/analytics", keys[k]);
        time_t before = time(NULL);
        json_t *a = get(target, 200);
        time_t after = time(NULL);
        json_t *range = json_object_get(a, "timeRange");
        int64_t to = seconds_of(json_string_value(json_object_get(range, "to")));
        int64_t from = seconds_of(json_string_value(json_object_get(range, "from")));
        cr_expect(to >= before && to <= after, "to %lld", (long long)to);
        cr_expect_eq(to - from, 7 * 86400);
        cr_expect_eq(int_at(range, "days", NULL), 7);
        snprintf(target, sizeof target, "/api/nodes/%s/health", keys[k]);
        json_t *h = get(target, 200);
        json_int_t total = int_at(a, "computedStats", "totalPackets");
        cr_expect_eq(total, int_at(h, "stats", "totalPackets"), "%s", keys[k]);
        cr_expect_gt(total, 0);
        cr_expect_eq(sum_of(json_object_get(a, "activityTimeline"), "count"), total);
        cr_expect_eq(sum_of(json_object_get(a, "hopDistribution"), "count"), total);
        cr_expect_eq(sum_of(json_object_get(a, "uptimeHeatmap"), "count"), total);
        cr_expect_eq(sum_of(json_object_get(a, "packetTypeBreakdown"), "count"), total);
        cr_expect_eq(int_at(a, "computedStats", "uniqueObservers"),
                     (json_int_t)json_array_size(json_object_get(a, "observerCoverage")));
        /* distinct active hours over the window's 168 */
        double hours = (double)json_array_size(json_object_get(a, "activityTimeline"));
        cr_expect_leq(fabs(json_number_value(json_object_get(json_object_get(a, "computedStats"),
                                                             "availabilityPct")) -
                           floor(hours * 1000 / 168 + 0.5) / 10),
                      1e-9);
        snprintf(target, sizeof target, "/api/nodes/%s/clock-skew", keys[k]);
        int status = mg_test_ctx_get(&fx.t, target);
        json_t *skew =
            status == 200 ? json_loadb(fx.t.res.body.data, fx.t.res.body.len, 0, NULL) : NULL;
        json_t *in = json_object_get(a, "clockSkew");
        if (skew)
            cr_expect(json_equal(skew, in), "%s: clockSkew is not its /clock-skew answer", keys[k]);
        else
            cr_expect_null(in, "%s: a clockSkew without a /clock-skew answer", keys[k]);
        json_decref(skew);
        json_decref(h);
        json_decref(a);
    }
    /* the node's SNR samples: its packets' best observations with one */
    json_t *a = get("/api/nodes/" N6IJ "/analytics?days=30", 200);
    json_t *trend = json_object_get(a, "snrTrend");
    size_t i;
    json_t *e;
    double sum = 0;
    json_array_foreach(trend, i, e) sum += json_number_value(json_object_get(e, "snr"));
    double mean = json_array_size(trend) ? sum / (double)json_array_size(trend) : 0;
    cr_expect_leq(
        fabs(json_number_value(json_object_get(json_object_get(a, "computedStats"), "snrMean")) -
             floor(mean * 10 + 0.5) / 10),
        1e-9);
    json_decref(a);
}

/* days as CoreScope's queryInt and clamp: 1..365, 7 for anything not an integer. */
Test(node_analytics, days_are_read_and_clamped_as_corescope_does)
{
    start(false, false);
    static const struct {
        const char *query;
        int days;
    } cases[] = {{"", 7},
                 {"?days=", 7},
                 {"?days=abc", 7},
                 {"?days=0", 1},
                 {"?days=-5", 1},
                 {"?days=365", 365},
                 {"?days=366", 365},
                 {"?days=30", 30},
                 {"?days=99999999999", 365}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char target[200];
        snprintf(target, sizeof target, "/api/nodes/%s/analytics%s", N6IJ, cases[c].query);
        json_t *a = get(target, 200);
        cr_expect_eq(int_at(a, "timeRange", "days"), cases[c].days, "%s", target);
        double hours = (double)json_array_size(json_object_get(a, "activityTimeline"));
        double pct = floor(hours * 1000 / (cases[c].days * 24.0) + 0.5) / 10;
        cr_expect_leq(fabs(json_number_value(json_object_get(json_object_get(a, "computedStats"),
                                                             "availabilityPct")) -
                           (pct > 100 ? 100 : pct)),
                      1e-9, "%s", target);
        json_decref(a);
    }
}

/* No such node, a key longer than any, and a hidden node: 404 "Not found", as CoreScope. */
Test(node_analytics, unknown_and_hidden_nodes_are_not_found)
{
    start(false, false);
    json_t *a = get("/api/nodes/0000000000000000000000000000000000000000000000000000000000000000"
                    "/analytics",
                    404);
    cr_expect_str_eq(json_string_value(json_object_get(a, "error")), "Not found");
    json_decref(a);
    char longer[300];
    memset(longer, 'a', sizeof longer);
    memcpy(longer, "/api/nodes/", 11);
    snprintf(longer + 11 + 200, sizeof longer - 211, "/analytics");
    a = get(longer, 404);
    json_decref(a);
    /* an ADVERT's key whose packets exist but which nodes lacks: CoreScope needs the row */
    exec_rw("DELETE FROM nodes WHERE public_key = '" BUSIEST "'");
    reopen();
    json_decref(get("/api/nodes/" BUSIEST "/analytics", 404));
    configure(false, N6IJ);
    reopen();
    a = get("/api/nodes/" N6IJ "/analytics", 404);
    cr_expect_str_eq(json_string_value(json_object_get(a, "error")), "Not found");
    json_decref(a);
}

/* ---- mobile RX coverage ---- */

Test(rx_coverage, answers_equal_corescopes_with_the_feature_on)
{
    start(true, true);
    expect_recorded("/api/nodes/", "/rx-coverage");
    expect_recorded("/api/rx-coverage", "");
    expect_recorded("/api/rx-leaderboard", "");
}

/* CoreScope's default: the feature off, every route 404 whatever its parameters. */
Test(rx_coverage, with_the_feature_off_every_route_is_not_found)
{
    start(false, true);
    static const char *const targets[] = {"/api/rx-coverage",
                                          "/api/rx-coverage?bbox=-90,-180,90,180&z=5",
                                          "/api/rx-leaderboard",
                                          "/api/rx-leaderboard?days=3&limit=5",
                                          "/api/nodes/" N6IJ "/rx-coverage?bbox=1,2,3,4",
                                          "/api/nodes/zz/rx-coverage",
                                          NULL};
    for (int i = 0; targets[i]; i++)
        expect_text(targets[i], 404, "404 page not found\n");
}

/* Bad parameters, as CoreScope's http.Error lines; no tables: its query fails. */
Test(rx_coverage, bad_parameters_and_a_database_without_the_tables)
{
    start(true, false);
    expect_text("/api/rx-coverage", 400, "bbox required as minLat,minLon,maxLat,maxLon\n");
    expect_text("/api/rx-coverage?bbox=1,2,3", 400,
                "bbox required as minLat,minLon,maxLat,maxLon\n");
    expect_text("/api/rx-coverage?bbox=1,2,3,4,5", 400,
                "bbox required as minLat,minLon,maxLat,maxLon\n");
    expect_text("/api/rx-coverage?bbox=1,2,x,4", 400,
                "bbox required as minLat,minLon,maxLat,maxLon\n");
    expect_text("/api/rx-coverage?bbox=1,2,1e999,4", 400,
                "bbox required as minLat,minLon,maxLat,maxLon\n");
    expect_text("/api/nodes/abc/rx-coverage?bbox=1,2,3,4", 400,
                "invalid pubkey: expected 64 hex chars\n");
    expect_text("/api/nodes/" N6IJ "/rx-coverage", 400,
                "bbox required as minLat,minLon,maxLat,maxLon\n");
    expect_text("/api/rx-coverage?bbox=%201,2%20,3,4", 500, "query failed\n");
    expect_text("/api/nodes/" N6IJ "/rx-coverage?bbox=1,2,3,4", 500, "query failed\n");
    expect_text("/api/rx-leaderboard", 500, "query failed\n");
}

/* The hex grid worked out by hand: San Jose's cell at zoom 13 and its corners. */
Test(rx_coverage, cells_and_counts_are_those_of_the_rows)
{
    start(true, true);
    /* every reception of the last 30 days inside the box, counted once */
    json_t *c = get("/api/rx-coverage?bbox=37,-122.5,38,-121&z=12&days=30", 200);
    double rows = number_of("SELECT count(*) FROM client_receptions WHERE lat BETWEEN 37 AND 38"
                            " AND lon BETWEEN -122.5 AND -121 AND rx_at >= strftime("
                            "'%Y-%m-%dT%H:%M:%SZ', 'now', '-30 days')");
    json_t *features = json_object_get(c, "features");
    json_int_t total = 0;
    size_t i;
    json_t *f;
    const char *last = "";
    json_array_foreach(features, i, f)
    {
        json_t *p = json_object_get(f, "properties");
        total += json_integer_value(json_object_get(p, "count"));
        const char *cell = json_string_value(json_object_get(p, "cell"));
        cr_expect_gt(strcmp(cell, last), 0, "cells out of order");
        last = cell;
        cr_expect_eq(strncmp(cell, "12:", 3), 0, "%s", cell);
        cr_expect_leq(json_array_size(json_object_get(p, "nodes")), 25);
        json_t *ring =
            json_array_get(json_object_get(json_object_get(f, "geometry"), "coordinates"), 0);
        cr_expect_eq(json_array_size(ring), 7);
        cr_expect(json_equal(json_array_get(ring, 0), json_array_get(ring, 6)));
    }
    cr_expect_eq(total, (json_int_t)rows);
    json_decref(c);
    /* the spot heard by 30 nodes keeps 25, strongest first */
    c = get("/api/rx-coverage?bbox=37.49,-121.51,37.51,-121.49&z=18&days=1", 200);
    f = json_array_get(json_object_get(c, "features"), 0);
    json_t *p = json_object_get(f, "properties");
    cr_expect_eq(json_integer_value(json_object_get(p, "count")), 30);
    cr_expect(json_is_true(json_object_get(p, "nodes_truncated")));
    cr_expect_eq(json_array_size(json_object_get(p, "nodes")), 25);
    cr_expect_eq(json_number_value(json_object_get(p, "best_snr")), 4);
    /* San Jose at zoom 13: x = R lon pi/180, y = R ln tan(pi/4 + lat pi/360), hexes of
     * 14 * 156543.03392 / 2^13 m, axial q = (sqrt(3)/3 x - y/3) / size, r = 2/3 y / size */
    double size = 14 * 156543.03392 / 8192, lat = 37.5, lon = -121.5;
    double x = 6378137.0 * lon * M_PI / 180, y = 6378137.0 * log(tan(M_PI / 4 + lat * M_PI / 360));
    char want[64];
    snprintf(want, sizeof want, "13:%.0f:%.0f", round((sqrt(3) / 3 * x - y / 3) / size),
             round(2.0 / 3 * y / size));
    json_decref(c);
    c = get("/api/rx-coverage?bbox=37.49,-121.51,37.51,-121.49&z=13&days=1", 200);
    p = json_object_get(json_array_get(json_object_get(c, "features"), 0), "properties");
    cr_expect_str_eq(json_string_value(json_object_get(p, "cell")), want);
    json_decref(c);
    /* the node's totals are everywhere's: its key and its 2- and 3-byte prefixes, lower case */
    c = get("/api/nodes/" N6IJ "/rx-coverage?bbox=0,0,1,1", 200);
    cr_expect_eq(json_array_size(json_object_get(c, "features")), 0);
    cr_expect_eq(json_integer_value(json_object_get(c, "mobile_receptions")),
                 (json_int_t)number_of("SELECT count(*) FROM client_receptions WHERE heard_key IN"
                                       " ('" N6IJ "', 'ec3433', 'ec34')"));
    cr_expect_eq(json_integer_value(json_object_get(c, "mobile_clients")), 4);
    json_decref(c);
}

/* The score of a companion: each of its cells weighs 1 / (companions that reached it); a
 * blacklisted one's cells weigh as if it had not been there, and it keeps its place. */
Test(rx_coverage, leaderboard_scores_and_hiding)
{
    start(true, true);
    json_t *lb = get("/api/rx-leaderboard?days=30&limit=100", 200);
    cr_expect_eq(json_integer_value(json_object_get(lb, "days")), 30);
    json_t *obs = json_object_get(lb, "observers");
    cr_expect_eq(json_array_size(obs), 4);
    double score = 0, cells = 0;
    size_t i;
    json_t *o;
    json_array_foreach(obs, i, o)
    {
        score += json_number_value(json_object_get(o, "score"));
        cells += (double)json_integer_value(json_object_get(o, "cells"));
        const char *pk = json_string_value(json_object_get(o, "pubkey"));
        const char *name = json_string_value(json_object_get(o, "name"));
        if (strcmp(pk, N6IJ) == 0)
            cr_expect_str_eq(name, "N6IJ Repeater");
        if (strcmp(pk, MOBILE_ONE) == 0)
            cr_expect_str_eq(name, "Mobile One");
        if (strcmp(pk, HIDDEN_MOBILE) == 0)
            cr_expect_str_eq(name, "", "a hidden name is blanked");
    }
    /* the scores share out the distinct cells (those of the coverage at zoom 13): each
     * counts 1 in all */
    json_t *c = get("/api/rx-coverage?bbox=-90,-180,90,180&z=13&days=30", 200);
    double distinct = (double)json_array_size(json_object_get(c, "features"));
    json_decref(c);
    cr_expect_gt(distinct, 0);
    cr_expect_leq(fabs(score - distinct), 1e-9, "scores %.17g, cells %.0f", score, distinct);
    cr_expect_geq(cells, distinct);
    json_decref(lb);
    lb = get("/api/rx-leaderboard?limit=0", 200); /* outside 1..100: 20 */
    cr_expect_eq(json_integer_value(json_object_get(lb, "days")), 7);
    json_decref(lb);
    /* an observer-blacklisted companion is left out, and its cells weigh for the others */
    mg_corescope_free(&mg_corescope);
    json_error_t jerr;
    json_t *root = json_load_file(EXAMPLE_CONFIG, 0, &jerr);
    json_object_set_new(root, "clientRxCoverage", json_pack("{s:b}", "enabled", 1));
    json_object_set_new(root, "observerBlacklist", json_pack("[s]", MOBILE_ONE));
    cr_assert_eq(json_dump_file(root, fx.config, 0), 0);
    json_decref(root);
    char err[256];
    cr_assert_eq(mg_corescope_load(&mg_corescope, fx.config, err, sizeof err), 0, "%s", err);
    reopen();
    lb = get("/api/rx-leaderboard?days=30&limit=100", 200);
    obs = json_object_get(lb, "observers");
    cr_expect_eq(json_array_size(obs), 3);
    json_array_foreach(obs, i, o)
        cr_expect_str_neq(json_string_value(json_object_get(o, "pubkey")), MOBILE_ONE);
    json_decref(lb);
}

/* The box as CoreScope's parseBBox reads it: four parts split on commas, each trimmed and read
 * by Go's ParseFloat (which takes hex floats, "inf" and "NaN", and refuses what overflows). */
Test(rx_coverage, the_box_is_read_as_corescopes_parsebbox)
{
    static const struct {
        const char *text;
        bool ok;
    } cases[] = {
        {"37,-122.5,38,-121", true},
        {" 1 , 2,3 ,4 ", true},
        {"+1,-2,.5,5.", true},
        {"0x1p3,1,2,3", true},
        {"inf,-Inf,NaN,1e-400", true},
        {"1,2,3", false},
        {"1,2,3,4,", false},
        {"1,2,3,4,5", false},
        {",1,2,3", false},
        {"1_0,2,3,4", false},
        {"1e400,2,3,4", false},
        {"nan(1),2,3,4", false},
        {"a,b,c,d", false},
        {"", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double box[4];
        cr_expect_eq(mg_hex_parse_bbox(cases[i].text, box), cases[i].ok, "\"%s\"", cases[i].text);
    }
    double box[4];
    cr_assert(mg_hex_parse_bbox(" 1 , 2,3 ,4 ", box));
    cr_expect(box[0] == 1 && box[1] == 2 && box[2] == 3 && box[3] == 4);
    cr_expect(!mg_hex_parse_bbox(NULL, box));
    /* the origin is cell 0:0 at every resolution; the poles clamp to Mercator's edge */
    char id[48];
    struct mg_hex_cell c = mg_hex_cell_at(0, 0, 3);
    mg_hex_cell_id(&c, id, sizeof id);
    cr_expect_str_eq(id, "3:0:0");
    struct mg_hex_cell north = mg_hex_cell_at(90, 10, 12),
                       edge = mg_hex_cell_at(85.05112878, 10, 12);
    cr_expect(north.q == edge.q && north.r == edge.r);
}

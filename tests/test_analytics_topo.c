/* SPDX-License-Identifier: ISC */
/*
 * The Analytics page's topology and distance tabs (workers/api/ep_analytics_topo.c) on
 * CoreScope's real migrated end-to-end database, freshened into a private copy whose newest
 * times are the top of the current hour, with CoreScope's config.example.json. CoreScope's own
 * answers for such a copy are in tests/corescope-analytics-topo.json (how: its _comment); the
 * recording's copy was freshened to another hour, so its times are shifted by whole hours.
 * What is compared is what CoreScope fixes: every count, average and distance, key order, and
 * the entries of each top list above the count (or distance) where its cut falls; the order
 * of ties, the observers' list, which of equally near observers is a hop's nearest, and so
 * which tied entries make a cut, are Go's map order there (ep_analytics_topo.c). Values are
 * also worked out from the data with the test's own SQL. Without ../shared every test skips.
 */
#include "corescope_config.h"
#include "fixture.h"
#include "harness.h"
#include "inproc.h"
#include "recorded.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXPECTED MESHGATE_SOURCE_DIR "/tests/corescope-analytics-topo.json"

static struct mg_recorded fx;

static void cleanup(void)
{
    mg_recorded_cleanup(&fx);
}

TestSuite(analytics_topo, .fini = cleanup, .timeout = 120);

/* A private copy, freshened, and config.example.json as this process's configuration. */
static void start(void)
{
    mg_recorded_start(&fx, EXPECTED);
}

static void exec_rw(const char *sql)
{
    mg_recorded_exec(&fx, sql);
}

static double number_of(const char *sql)
{
    return mg_recorded_number(&fx, sql);
}

static json_t *get(const char *target, int want_status)
{
    return mg_recorded_get(&fx, target, want_status);
}

static char *body_of(const char *target)
{
    cr_assert_eq(mg_test_ctx_get(&fx.t, target), 200, "%s", target);
    return strndup(fx.t.res.body.data, fx.t.res.body.len);
}

/* ---- comparing with CoreScope's recorded answer ---- */

static int64_t seconds_of(const char *s, int len)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    int n = s ? sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                       &tm.tm_hour, &tm.tm_min, &tm.tm_sec)
              : 0;
    if (n < len)
        return INT64_MIN;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (int64_t)timegm(&tm);
}

/* Equal, numbers to 1e-9 of their size, times ("hour", "timestamp") shifted by the hours
 * between the two copies, keys in the same order. */
static void expect_same(json_t *want, json_t *got, const char *where, int64_t shift)
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
            if (!g)
                continue;
            bool hour = strcmp(key, "hour") == 0, stamp = strcmp(key, "timestamp") == 0;
            if ((hour || stamp) && json_is_string(v) && json_is_string(g)) {
                int parts = hour ? 4 : 6;
                cr_expect_eq(seconds_of(json_string_value(g), parts),
                             seconds_of(json_string_value(v), parts) + shift * 3600,
                             "%s: %s, CoreScope %s", inner, json_string_value(g),
                             json_string_value(v));
                continue;
            }
            expect_same(v, g, inner, shift);
        }
    } else if (json_is_array(want)) {
        cr_expect_eq(json_array_size(want), json_array_size(got), "%s: %zu entries, CoreScope %zu",
                     where, json_array_size(got), json_array_size(want));
        for (size_t i = 0; i < json_array_size(want) && i < json_array_size(got); i++) {
            snprintf(inner, sizeof inner, "%s[%zu]", where, i);
            expect_same(json_array_get(want, i), json_array_get(got, i), inner, shift);
        }
    } else {
        cr_expect(json_equal(want, got), "%s differs from CoreScope's", where);
    }
}

static double num(json_t *o, const char *key)
{
    return json_number_value(json_object_get(o, key));
}

/* Whether a and b have equal values in the fields of keys ("hopA,hopB"). */
static bool same_key(json_t *a, json_t *b, const char *keys)
{
    char copy[64];
    snprintf(copy, sizeof copy, "%s", keys);
    for (char *save = NULL, *k = strtok_r(copy, ",", &save); k; k = strtok_r(NULL, ",", &save)) {
        json_t *x = json_object_get(a, k), *y = json_object_get(b, k);
        if (!x || !y || !json_equal(x, y))
            return false;
    }
    return true;
}

/* The entry of list with e's key fields, or NULL. */
static json_t *find_by(json_t *list, const char *keys, json_t *e)
{
    for (size_t i = 0; i < json_array_size(list); i++)
        if (same_key(json_array_get(list, i), e, keys))
            return json_array_get(list, i);
    return NULL;
}

/* A top list ordered by field (descending when desc): the same size and the same sequence of
 * field; each entry strictly past the cut's value (whose ties CoreScope orders at random) is
 * in ours, found by key, and equal but for entry_skip (a field chosen among ties). */
static void expect_same_top(json_t *want, json_t *got, const char *where, const char *field,
                            const char *key, const char *entry_skip, int64_t shift)
{
    size_t n = json_array_size(want);
    cr_expect_eq(json_array_size(got), n, "%s: %zu entries, CoreScope %zu", where,
                 json_array_size(got), n);
    if (!n || json_array_size(got) != n)
        return;
    double last = num(json_array_get(want, n - 1), field);
    char inner[512];
    for (size_t i = 0; i < n; i++) {
        json_t *w = json_array_get(want, i);
        snprintf(inner, sizeof inner, "%s[%zu].%s", where, i, field);
        expect_same(json_object_get(w, field), json_object_get(json_array_get(got, i), field),
                    inner, shift);
        if (num(w, field) == last)
            continue;
        json_t *g = find_by(got, key, w);
        char *id = json_dumps(w, JSON_COMPACT | JSON_SORT_KEYS);
        snprintf(inner, sizeof inner, "%s[%.200s]", where, id);
        free(id);
        cr_expect_not_null(g, "%s missing", inner);
        if (!g)
            continue;
        json_t *wc = json_deep_copy(w), *gc = json_deep_copy(g);
        if (entry_skip) {
            json_object_del(wc, entry_skip);
            json_object_del(gc, entry_skip);
        }
        expect_same(wc, gc, inner, shift);
        json_decref(wc);
        json_decref(gc);
    }
}

static int by_text_field(const void *a, const void *b, const char *field)
{
    const char *x = json_string_value(json_object_get(*(json_t *const *)a, field));
    const char *y = json_string_value(json_object_get(*(json_t *const *)b, field));
    return strcmp(x ? x : "", y ? y : "");
}
static int by_hop(const void *a, const void *b)
{
    return by_text_field(a, b, "hop");
}
static int by_id(const void *a, const void *b)
{
    return by_text_field(a, b, "id");
}
static int by_dist_then_observer(const void *a, const void *b)
{
    double x = num(*(json_t *const *)a, "minDist"), y = num(*(json_t *const *)b, "minDist");
    if (x != y)
        return x < y ? -1 : 1;
    return by_text_field(a, b, "observer_id");
}

/* A copy of list sorted with cmp. */
static json_t *sorted(json_t *list, int (*cmp)(const void *, const void *))
{
    size_t n = json_array_size(list);
    json_t **v = calloc(n + 1, sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = json_array_get(list, i);
    qsort(v, n, sizeof *v, cmp);
    json_t *out = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append(out, v[i]);
    free(v);
    return out;
}

static void expect_same_sorted(json_t *want, json_t *got, const char *where,
                               int (*cmp)(const void *, const void *))
{
    json_t *sw = sorted(want, cmp), *sg = sorted(got, cmp);
    expect_same(sw, sg, where, 0);
    json_decref(sw);
    json_decref(sg);
}

static void expect_same_keys(json_t *want, json_t *got, const char *where)
{
    cr_expect_eq(json_object_size(want), json_object_size(got), "%s: %zu keys, CoreScope %zu",
                 where, json_object_size(got), json_object_size(want));
    void *wi = json_object_iter(want), *gi = json_object_iter(got);
    for (; wi && gi; wi = json_object_iter_next(want, wi), gi = json_object_iter_next(got, gi))
        cr_expect_str_eq(json_object_iter_key(gi), json_object_iter_key(wi),
                         "%s: keys in another order than CoreScope's", where);
}

static void expect_topology(json_t *want, json_t *got, const char *where)
{
    expect_same_keys(want, got, where);
    char inner[512];
    static const char *const exact[] = {"avgHops",     "medianHops", "maxHops",
                                        "uniqueNodes", "hopsVsSnr",  "hopDistribution"};
    for (size_t i = 0; i < sizeof exact / sizeof *exact; i++) {
        snprintf(inner, sizeof inner, "%s.%s", where, exact[i]);
        expect_same(json_object_get(want, exact[i]), json_object_get(got, exact[i]), inner, 0);
    }
    snprintf(inner, sizeof inner, "%s.observers", where);
    expect_same_sorted(json_object_get(want, "observers"), json_object_get(got, "observers"), inner,
                       by_id);
    snprintf(inner, sizeof inner, "%s.topRepeaters", where);
    expect_same_top(json_object_get(want, "topRepeaters"), json_object_get(got, "topRepeaters"),
                    inner, "count", "hop", NULL, 0);
    snprintf(inner, sizeof inner, "%s.topPairs", where);
    expect_same_top(json_object_get(want, "topPairs"), json_object_get(got, "topPairs"), inner,
                    "count", "hopA,hopB", NULL, 0);
    /* each observer's rings: the same distances, each with the same hops */
    json_t *wr = json_object_get(want, "perObserverReach"),
           *gr = json_object_get(got, "perObserverReach");
    snprintf(inner, sizeof inner, "%s.perObserverReach", where);
    expect_same_keys(wr, gr, inner);
    const char *obs;
    json_t *w;
    json_object_foreach(wr, obs, w)
    {
        json_t *g = json_object_get(gr, obs);
        snprintf(inner, sizeof inner, "%s.perObserverReach[%s]", where, obs);
        cr_expect_not_null(g, "%s missing", inner);
        if (!g)
            continue;
        expect_same(json_object_get(w, "observer_name"), json_object_get(g, "observer_name"), inner,
                    0);
        json_t *wrings = json_object_get(w, "rings"), *grings = json_object_get(g, "rings");
        cr_expect_eq(json_array_size(grings), json_array_size(wrings), "%s: rings", inner);
        for (size_t i = 0; i < json_array_size(wrings) && i < json_array_size(grings); i++) {
            json_t *a = json_array_get(wrings, i), *b = json_array_get(grings, i);
            char ring[600];
            snprintf(ring, sizeof ring, "%s.rings[%zu]", inner, i);
            cr_expect_eq(num(a, "hops"), num(b, "hops"), "%s.hops", ring);
            expect_same_sorted(json_object_get(a, "nodes"), json_object_get(b, "nodes"), ring,
                               by_hop);
        }
    }
    /* the hops heard by several observers (whole when CoreScope cut none) */
    json_t *wm = json_object_get(want, "multiObsNodes"),
           *gm = json_object_get(got, "multiObsNodes");
    snprintf(inner, sizeof inner, "%s.multiObsNodes", where);
    cr_expect_eq(json_array_size(gm), json_array_size(wm), "%s: %zu, CoreScope %zu", inner,
                 json_array_size(gm), json_array_size(wm));
    if (json_array_size(wm) < 50) {
        size_t i;
        json_t *e;
        json_array_foreach(wm, i, e)
        {
            json_t *g = find_by(gm, "hop", e);
            char one[600];
            snprintf(one, sizeof one, "%s[%s]", inner,
                     json_string_value(json_object_get(e, "hop")));
            cr_expect_not_null(g, "%s missing", one);
            if (!g)
                continue;
            json_t *wc = json_deep_copy(e), *gc = json_deep_copy(g);
            json_object_set_new(wc, "observers",
                                sorted(json_object_get(e, "observers"), by_dist_then_observer));
            json_object_set_new(gc, "observers",
                                sorted(json_object_get(g, "observers"), by_dist_then_observer));
            expect_same(wc, gc, one, 0);
            json_decref(wc);
            json_decref(gc);
        }
    }
    /* each hop's nearest: the observer may be any of equally near ones */
    snprintf(inner, sizeof inner, "%s.bestPathList", where);
    json_t *wb = json_object_get(want, "bestPathList"), *gb = json_object_get(got, "bestPathList");
    json_t *wc = json_deep_copy(wb), *gc = json_deep_copy(gb);
    size_t i;
    json_t *e;
    json_array_foreach(wc, i, e)
    {
        json_object_del(e, "observer_id");
        json_object_del(e, "observer_name");
    }
    json_array_foreach(gc, i, e)
    {
        json_object_del(e, "observer_id");
        json_object_del(e, "observer_name");
    }
    /* minDist ascending: flip it so the cut's helper reads it */
    json_array_foreach(wc, i, e) json_object_set_new(e, "minDist", json_real(-num(e, "minDist")));
    json_array_foreach(gc, i, e) json_object_set_new(e, "minDist", json_real(-num(e, "minDist")));
    expect_same_top(wc, gc, inner, "minDist", "hop", NULL, 0);
    json_decref(wc);
    json_decref(gc);
}

static void expect_distance(json_t *want, json_t *got, const char *where, int64_t shift)
{
    expect_same_keys(want, got, where);
    char inner[512];
    static const char *const exact[] = {"summary", "catStats", "distHistogram", "distOverTime"};
    for (size_t i = 0; i < sizeof exact / sizeof *exact; i++) {
        snprintf(inner, sizeof inner, "%s.%s", where, exact[i]);
        expect_same(json_object_get(want, exact[i]), json_object_get(got, exact[i]), inner, shift);
    }
    /* the longest links: the representative hop of a pair may be any of its longest */
    snprintf(inner, sizeof inner, "%s.topHops", where);
    expect_same_top(json_object_get(want, "topHops"), json_object_get(got, "topHops"), inner,
                    "dist", "fromPk,toPk", "hash", shift);
    snprintf(inner, sizeof inner, "%s.topPaths", where);
    expect_same_top(json_object_get(want, "topPaths"), json_object_get(got, "topPaths"), inner,
                    "totalDist", "totalDist,hopCount", "hash", shift);
}

static void expect_recorded(const char *route)
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
        if (strncmp(target, route, strlen(route)) != 0)
            continue;
        json_t *got = get(target, 200);
        if (strstr(route, "topology"))
            expect_topology(want, got, target);
        else
            expect_distance(want, got, target, shift);
        json_decref(got);
        compared++;
    }
    cr_expect_gt(compared, 0, "no recorded answer of %s", route);
}

Test(analytics_topo, topology_answers_equal_corescopes_on_the_freshened_fixture)
{
    start();
    expect_recorded("/api/analytics/topology");
}

Test(analytics_topo, distance_answers_equal_corescopes_on_the_freshened_fixture)
{
    start();
    expect_recorded("/api/analytics/distance");
}

/* ---- values worked out from the data ---- */

/* Each transmission's display path length: its observation with the most hops. */
#define PATH_LENGTHS                                                                               \
    "(SELECT t.id, max(CASE WHEN json_valid(o.path_json) AND json_type(o.path_json) = 'array'"     \
    " THEN json_array_length(o.path_json) ELSE 0 END) AS n FROM transmissions t JOIN"              \
    " observations o ON o.transmission_id = t.id GROUP BY t.id)"

Test(analytics_topo, hop_counts_are_those_of_each_transmissions_longest_path)
{
    start();
    json_t *a = get("/api/analytics/topology", 200);
    /* CoreScope's distribution stops at 25 hops */
    double paths = number_of("SELECT count(*) FROM " PATH_LENGTHS " WHERE n > 0 AND n <= 25");
    cr_assert_gt(paths, 0, "the fixture has paths");
    json_int_t total = 0;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(a, "hopDistribution"), i, e) total +=
        json_integer_value(json_object_get(e, "count"));
    cr_expect_eq(total, (json_int_t)paths);
    cr_expect_eq(json_integer_value(json_object_get(a, "maxHops")),
                 (json_int_t)number_of("SELECT max(n) FROM " PATH_LENGTHS));
    cr_expect_leq(
        fabs(num(a, "avgHops") - number_of("SELECT avg(n) FROM " PATH_LENGTHS " WHERE n > 0")),
        1e-9);
    cr_expect_eq(json_integer_value(json_object_get(a, "uniqueNodes")),
                 (json_int_t)number_of("SELECT count(*) FROM nodes WHERE last_seen >"
                                       " strftime('%Y-%m-%dT%H:%M:%SZ', 'now', '-7 days')"));
    json_decref(a);
}

/* The display observation is the one with the most hops: a longer path heard later makes the
 * transmission's hop count. */
Test(analytics_topo, a_longer_observation_makes_the_transmissions_path)
{
    start();
    mg_test_ctx_close(&fx.t);
    fx.open = false;
    /* 40 hops, more than any path of the fixture, heard a minute before another copy */
    exec_rw("INSERT INTO observations (transmission_id, observer_idx, direction, snr, rssi, score,"
            " path_json, timestamp) SELECT transmission_id, observer_idx, direction, snr, rssi,"
            " score, '[' || (WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k"
            " WHERE i < 40) SELECT group_concat('\"' || printf('%02X', i) || '\"', ',') FROM k)"
            " || ']', timestamp - 60 FROM observations LIMIT 1");
    cr_assert(mg_test_ctx_open(&fx.t, fx.db));
    fx.open = true;
    json_t *a = get("/api/analytics/topology", 200);
    cr_expect_eq(json_integer_value(json_object_get(a, "maxHops")), 40);
    json_decref(a);
}

static double haversine(double lat1, double lon1, double lat2, double lon2)
{
    double dlat = (lat2 - lat1) * M_PI / 180, dlon = (lon2 - lon1) * M_PI / 180;
    double x = sin(dlat / 2) * sin(dlat / 2) +
               cos(lat1 * M_PI / 180) * cos(lat2 * M_PI / 180) * sin(dlon / 2) * sin(dlon / 2);
    return 6371.0 * 2 * atan2(sqrt(x), sqrt(1 - x));
}

static bool position_of(const char *key, double *lat, double *lon)
{
    sqlite3 *db;
    cr_assert_eq(mg_test_sqlite_open(fx.db, &db), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(
        sqlite3_prepare_v2(db, "SELECT lat, lon FROM nodes WHERE public_key = ?1", -1, &st, NULL),
        SQLITE_OK);
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    bool found = sqlite3_step(st) == SQLITE_ROW;
    if (found)
        *lat = sqlite3_column_double(st, 0), *lon = sqlite3_column_double(st, 1);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return found;
}

/* Every link is the great-circle distance between its two nodes' positions, 300 km or less;
 * the kinds add up to the hops, and a path is the sum of its links. */
Test(analytics_topo, distances_are_those_of_the_nodes_positions)
{
    start();
    json_t *a = get("/api/analytics/distance", 200);
    json_t *summary = json_object_get(a, "summary");
    json_int_t hops = json_integer_value(json_object_get(summary, "totalHops"));
    cr_assert_gt(hops, 0, "the fixture has links between located nodes");
    json_int_t kinds = 0;
    const char *kind;
    json_t *c;
    json_object_foreach(json_object_get(a, "catStats"), kind, c) kinds +=
        json_integer_value(json_object_get(c, "count"));
    cr_expect_eq(kinds, hops);
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(a, "topHops"), i, e)
    {
        double la, oa, lb, ob;
        cr_assert(position_of(json_string_value(json_object_get(e, "fromPk")), &la, &oa));
        cr_assert(position_of(json_string_value(json_object_get(e, "toPk")), &lb, &ob));
        double d = round(haversine(la, oa, lb, ob) * 100) / 100;
        cr_expect_leq(fabs(num(e, "dist") - d), 1e-9, "topHops[%zu]: %g, positions %g", i,
                      num(e, "dist"), d);
        cr_expect_leq(num(e, "dist"), 300);
    }
    json_array_foreach(json_object_get(a, "topPaths"), i, e)
    {
        double sum = 0;
        size_t k;
        json_t *h;
        json_array_foreach(json_object_get(e, "hops"), k, h) sum += num(h, "dist");
        cr_expect_leq(fabs(num(e, "totalDist") - sum), 0.01 * (double)(k + 1), "topPaths[%zu]", i);
        cr_expect_eq(json_integer_value(json_object_get(e, "hopCount")), (json_int_t)k);
    }
    json_decref(a);
}

/* A region no observer has, "ALL", an unknown window or area, and a window holding every
 * transmission filter nothing, as in CoreScope. */
Test(analytics_topo, filters_that_match_everything_or_nothing_known_change_nothing)
{
    start();
    char *all = body_of("/api/analytics/topology");
    static const char *const same[] = {
        "/api/analytics/topology?region=ZZZ",   "/api/analytics/topology?region=ALL",
        "/api/analytics/topology?window=bogus", "/api/analytics/topology?area=nowhere",
        "/api/analytics/topology?window=30d",   NULL};
    for (int i = 0; same[i]; i++) {
        char *b = body_of(same[i]);
        cr_expect_str_eq(b, all, "%s", same[i]);
        free(b);
    }
    free(all);
    all = body_of("/api/analytics/distance");
    static const char *const dsame[] = {"/api/analytics/distance?region=ZZZ",
                                        "/api/analytics/distance?area=nowhere", NULL};
    for (int i = 0; dsame[i]; i++) {
        char *b = body_of(dsame[i]);
        cr_expect_str_eq(b, all, "%s", dsame[i]);
        free(b);
    }
    free(all);
}

Test(analytics_topo, a_region_list_too_long_for_a_key_is_refused)
{
    start();
    char target[400] = "/api/analytics/distance?region=";
    for (int i = 0; i < 30; i++)
        strcat(target, "ABCD,");
    json_t *e = get(target, 400);
    cr_expect(json_is_string(json_object_get(e, "error")));
    json_decref(e);
    memcpy(target, "/api/analytics/topology", strlen("/api/analytics/topology"));
    e = get(target, 400);
    json_decref(e);
}

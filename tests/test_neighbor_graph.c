/* SPDX-License-Identifier: ISC */
/*
 * The Analytics page's neighbour graph (/api/analytics/neighbor-graph) on CoreScope's real
 * migrated database, freshened into a private copy:
 *   - equal to CoreScope's own answer, recorded in tests/corescope-analytics-graph.json (how:
 *     its _comment), as sets: CoreScope lists nodes and edges in Go's map order, and an edge's
 *     score depends on the second it is asked (compared to 1e-6);
 *   - the same edges as the nodes' own neighbour lists (/api/nodes/{pubkey}/neighbors, which
 *     reads the same group graph and is checked against CoreScope elsewhere), each node's
 *     neighbor_count the edges that name it, and the stats those of the lists;
 *   - each filter keeps what it says: min_count and min_score, role, region, and CoreScope's
 *     bad values (defaults, "NaN" keeps everything, "ALL" or an unknown code filters nothing);
 *   - a node the configuration hides is left out with its edges.
 * Without ../shared every test skips and says why.
 */
#include "corescope_config.h"
#include "fixture.h"
#include "harness.h"
#include "inproc.h"

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
#define EXPECTED MESHGATE_SOURCE_DIR "/tests/corescope-analytics-graph.json"
#define FULL "/api/analytics/neighbor-graph?min_count=1&min_score=0"

static struct {
    char dir[128];
    char db[256];
    struct mg_test_ctx t;
    bool open;
} fx;

static void cleanup(void)
{
    if (fx.open)
        mg_test_ctx_close(&fx.t);
    fx.open = false;
    mg_corescope_free(&mg_corescope);
    if (fx.dir[0])
        mg_test_rmdir(fx.dir);
    fx.dir[0] = '\0';
}

TestSuite(neighbor_graph, .fini = cleanup, .timeout = 300);

static void start(int64_t now)
{
    if (access(FIXTURE_MIGRATED_DB, R_OK) != 0)
        cr_skip_test("%s not present: these tests read CoreScope's real database (../shared, "
                     "see ../shared/data/README.md)",
                     FIXTURE_MIGRATED_DB);
    mg_test_tmpdir(fx.dir, sizeof fx.dir);
    cr_assert(fx.dir[0], "no temporary directory under /tmp");
    snprintf(fx.db, sizeof fx.db, "%s/fresh.db", fx.dir);
    char err[512] = "";
    cr_assert_eq(mg_fixture_freshen(FIXTURE_MIGRATED_DB, fx.db, now ? now : (int64_t)time(NULL),
                                    err, sizeof err),
                 0, "freshening: %s", err);
    cr_assert(mg_test_ctx_open(&fx.t, fx.db));
    fx.open = true;
}

static json_t *get(const char *target)
{
    int status = mg_test_ctx_get(&fx.t, target);
    const char *body = (const char *)fx.t.res.body.data;
    cr_assert_eq(status, 200, "GET %s: status %d: %.300s", target, status, body);
    json_error_t jerr;
    json_t *v = json_loadb(body, fx.t.res.body.len, 0, &jerr);
    cr_assert_not_null(v, "GET %s: not JSON (%s): %.300s", target, jerr.text, body);
    return v;
}

static json_t *edges(json_t *g)
{
    json_t *e = json_object_get(g, "edges");
    cr_assert(json_is_array(e));
    return e;
}

static json_t *nodes(json_t *g)
{
    json_t *n = json_object_get(g, "nodes");
    cr_assert(json_is_array(n));
    return n;
}

static const char *str(json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

static long long stat_of(json_t *g, const char *key)
{
    return json_integer_value(json_object_get(json_object_get(g, "stats"), key));
}

/* The node entry of key in g's nodes, or NULL. */
static json_t *node_of(json_t *g, const char *key)
{
    size_t i;
    json_t *n;
    json_array_foreach(nodes(g), i, n) if (!strcmp(str(n, "pubkey"), key)) return n;
    return NULL;
}

/* An edge's identity: its ends and whether ambiguous. */
static void edge_id(json_t *e, char *out, size_t cap)
{
    snprintf(out, cap, "%s %s %d", str(e, "source"), str(e, "target"),
             json_is_true(json_object_get(e, "ambiguous")));
}

static json_t *edge_index(json_t *g)
{
    json_t *ix = json_object();
    size_t i;
    json_t *e;
    json_array_foreach(edges(g), i, e)
    {
        char id[400];
        edge_id(e, id, sizeof id);
        cr_expect_null(json_object_get(ix, id), "edge %s listed twice", id);
        json_object_set(ix, id, e);
    }
    return ix;
}

/* Stats, node counts and the node list as the edges make them. */
static void expect_consistent(json_t *g)
{
    size_t n_edges = json_array_size(edges(g)), n_nodes = json_array_size(nodes(g));
    cr_expect_eq(stat_of(g, "total_edges"), (long long)n_edges);
    cr_expect_eq(stat_of(g, "total_nodes"), (long long)n_nodes);
    long long ambiguous = 0;
    json_t *count = json_object();
    size_t i;
    json_t *e;
    json_array_foreach(edges(g), i, e)
    {
        ambiguous += json_is_true(json_object_get(e, "ambiguous"));
        cr_expect(json_is_true(json_object_get(e, "bidirectional")));
        const char *ends[2] = {str(e, "source"), str(e, "target")};
        for (int k = 0; k < 2; k++) {
            json_t *c = json_object_get(count, ends[k]);
            json_object_set_new(count, ends[k], json_integer(c ? json_integer_value(c) + 1 : 1));
            if (strncmp(ends[k], "prefix:", 7) != 0)
                cr_expect_not_null(node_of(g, ends[k]), "%s names a node not listed", ends[k]);
        }
    }
    cr_expect_eq(stat_of(g, "ambiguous_edges"), ambiguous);
    json_t *n;
    json_array_foreach(nodes(g), i, n)
    {
        json_t *c = json_object_get(count, str(n, "pubkey"));
        cr_expect_eq(json_integer_value(json_object_get(n, "neighbor_count")),
                     c ? json_integer_value(c) : 0, "%s", str(n, "pubkey"));
        cr_expect_not_null(c, "node %s has no edge", str(n, "pubkey"));
    }
    double avg = json_real_value(json_object_get(json_object_get(g, "stats"), "avg_cluster_size"));
    cr_expect(fabs(avg - (n_nodes ? 2.0 * (double)n_edges / (double)n_nodes : 0)) < 1e-9);
    json_decref(count);
}

Test(neighbor_graph, edges_are_those_of_the_nodes_own_neighbour_lists)
{
    start(0);
    json_t *g = get(FULL);
    expect_consistent(g);
    cr_assert_gt(json_array_size(edges(g)), 10, "the fixture's graph has edges");
    /* Every node's resolved neighbours are its edges, with the same counts. */
    size_t i;
    json_t *n;
    size_t checked = 0;
    json_array_foreach(nodes(g), i, n)
    {
        const char *key = str(n, "pubkey");
        if (strlen(key) != 64 || !strcmp(str(n, "role"), "observer") ||
            json_integer_value(json_object_get(n, "neighbor_count")) < 2)
            continue; /* the node route answers for a node's key */
        if (checked == 3)
            break; /* more heavy requests from one client are refused at once (429) */
        char target[256];
        snprintf(target, sizeof target,
                 "/api/nodes/%s/neighbors?min_count=1&min_score=0&include_ambiguous=false", key);
        json_t *mine = get(target);
        json_t *want = json_object();
        size_t k;
        json_t *x;
        json_array_foreach(json_object_get(mine, "neighbors"), k, x)
            json_object_set(want, str(x, "pubkey"), json_object_get(x, "count"));
        json_t *have = json_object();
        json_t *e;
        json_array_foreach(edges(g), k, e)
        {
            if (json_is_true(json_object_get(e, "ambiguous")))
                continue;
            const char *other = !strcmp(str(e, "source"), key)   ? str(e, "target")
                                : !strcmp(str(e, "target"), key) ? str(e, "source")
                                                                 : NULL;
            if (other)
                json_object_set(have, other, json_object_get(e, "weight"));
        }
        if (!json_equal(have, want)) {
            char *h = json_dumps(have, JSON_COMPACT | JSON_SORT_KEYS),
                 *w = json_dumps(want, JSON_COMPACT | JSON_SORT_KEYS);
            cr_expect_fail("%s: graph %.1500s\nneighbours %.1500s", key, h, w);
            free(h), free(w);
        }
        json_decref(have), json_decref(want), json_decref(mine);
        checked++;
    }
    cr_expect_eq(checked, 3);
    json_decref(g);
}

Test(neighbor_graph, filters_keep_what_they_say)
{
    start(0);
    json_t *all = get(FULL);
    json_t *ix = edge_index(all);
    /* The default: at least 5 observations and a score of 0.1. */
    json_t *def = get("/api/analytics/neighbor-graph");
    expect_consistent(def);
    size_t want = 0, i;
    json_t *e;
    json_array_foreach(edges(all), i, e)
    {
        bool strong = json_integer_value(json_object_get(e, "weight")) >= 5;
        want += strong && json_real_value(json_object_get(e, "score")) >= 0.1 - 1e-9;
    }
    cr_expect_eq(json_array_size(edges(def)), want);
    json_array_foreach(edges(def), i, e)
    {
        char id[400];
        edge_id(e, id, sizeof id);
        cr_expect_not_null(json_object_get(ix, id), "%s: not in the whole graph", id);
        cr_expect_geq(json_integer_value(json_object_get(e, "weight")), 5);
    }
    /* CoreScope's bad values: the defaults; NaN filters nothing. */
    static const char *const as_default[] = {
        "/api/analytics/neighbor-graph?min_count=0",
        "/api/analytics/neighbor-graph?min_count=abc&min_score=abc",
        "/api/analytics/neighbor-graph?min_count=-3&min_score=",
        "/api/analytics/neighbor-graph?region=ALL",
        "/api/analytics/neighbor-graph?region=ZZZ",
        "/api/analytics/neighbor-graph?role=",
        NULL,
    };
    for (int k = 0; as_default[k]; k++) {
        json_t *g = get(as_default[k]);
        cr_expect_eq(json_array_size(edges(g)), json_array_size(edges(def)), "%s", as_default[k]);
        json_decref(g);
    }
    json_t *nan = get("/api/analytics/neighbor-graph?min_count=1&min_score=NaN");
    cr_expect_eq(json_array_size(edges(nan)), json_array_size(edges(all)));
    json_decref(nan);
    /* role: each edge has an end of that role (any case). */
    json_t *rep = get("/api/analytics/neighbor-graph?min_count=1&min_score=0&role=REPEATER");
    expect_consistent(rep);
    size_t reps = 0;
    json_array_foreach(edges(all), i, e)
    {
        json_t *s = node_of(all, str(e, "source")), *t = node_of(all, str(e, "target"));
        bool ambiguous = json_is_true(json_object_get(e, "ambiguous"));
        reps += (s && !strcasecmp(str(s, "role"), "repeater")) ||
                (!ambiguous && t && !strcasecmp(str(t, "role"), "repeater"));
    }
    cr_expect_eq(json_array_size(edges(rep)), reps);
    cr_expect_gt(reps, 0);
    json_decref(rep);
    /* region: the edges one of whose observers is the region's; fewer than all. */
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(fx.t.db.conn,
                                    "SELECT upper(trim(iata)) FROM observers WHERE iata IS NOT NULL"
                                    " AND trim(iata) <> '' GROUP BY 1 ORDER BY count(*) LIMIT 1",
                                    -1, &st, NULL),
                 SQLITE_OK);
    if (sqlite3_step(st) == SQLITE_ROW) {
        char target[256];
        snprintf(target, sizeof target, FULL "&region=%s", sqlite3_column_text(st, 0));
        json_t *r = get(target);
        expect_consistent(r);
        cr_expect_leq(json_array_size(edges(r)), json_array_size(edges(all)));
        json_array_foreach(edges(r), i, e)
        {
            char id[400];
            edge_id(e, id, sizeof id);
            cr_expect_not_null(json_object_get(ix, id), "%s: not in the whole graph", id);
        }
        json_decref(r);
    }
    sqlite3_finalize(st);
    /* A key too long for a cache key is refused, before any build. */
    char target[400] = "/api/analytics/neighbor-graph?role=";
    memset(target + strlen(target), 'r', 60);
    cr_expect_eq(mg_test_ctx_get(&fx.t, target), 400);
    json_decref(ix), json_decref(def), json_decref(all);
}

Test(neighbor_graph, a_hidden_node_is_left_out_with_its_edges)
{
    start(0);
    json_t *all = get(FULL);
    /* The node with the most edges. */
    const char *busiest = NULL;
    long long most = 0;
    size_t i;
    json_t *n;
    json_array_foreach(nodes(all), i, n)
    {
        long long c = json_integer_value(json_object_get(n, "neighbor_count"));
        if (c > most && strlen(str(n, "pubkey")) == 64)
            most = c, busiest = str(n, "pubkey");
    }
    cr_assert_not_null(busiest);
    char text[256], err[256] = "";
    snprintf(text, sizeof text, "{\"nodeBlacklist\": [\" %s \"]}", busiest);
    mg_corescope_free(&mg_corescope);
    cr_assert_eq(
        mg_corescope_load_text(&mg_corescope, "t", text, strlen(text), NULL, 0, err, sizeof err), 0,
        "%s", err);
    json_t *hidden = get(FULL);
    expect_consistent(hidden);
    cr_expect_null(node_of(hidden, busiest), "%s still listed", busiest);
    json_t *e;
    json_array_foreach(edges(hidden), i, e)
    {
        cr_expect(strcmp(str(e, "source"), busiest) && strcmp(str(e, "target"), busiest));
    }
    cr_expect_eq(json_array_size(edges(hidden)), json_array_size(edges(all)) - (size_t)most);
    json_decref(hidden), json_decref(all);
}

/* ---- CoreScope's own answers ------------------------------------------------------------- */

/* g's nodes and edges keyed by identity, for comparing as sets. */
static json_t *keyed(json_t *g)
{
    json_t *out = json_object(), *n, *e;
    size_t i;
    json_array_foreach(nodes(g), i, n)
    {
        char id[300];
        snprintf(id, sizeof id, "node %s", str(n, "pubkey"));
        json_object_set(out, id, n);
    }
    json_array_foreach(edges(g), i, e)
    {
        char id[400];
        edge_id(e, id, sizeof id);
        json_object_set(out, id, e);
    }
    return out;
}

/* Equal but for each edge's score, which is compared to 1% (it decays with the second it is
 * asked; the test's copy is freshened to its own now, as CoreScope's was to its). */
static void expect_same(const char *target, json_t *got, json_t *want)
{
    cr_assert_not_null(want, "%s: nothing recorded for %s", EXPECTED, target);
    json_t *g = keyed(got), *w = keyed(want);
    const char *id;
    json_t *wv;
    size_t differ = 0;
    json_object_foreach(w, id, wv)
    {
        json_t *gv = json_object_get(g, id);
        if (!gv) {
            if (differ++ < 10)
                cr_expect_fail("%s: %s missing", target, id);
            continue;
        }
        json_t *a = json_deep_copy(gv), *b = json_deep_copy(wv);
        double sa = json_number_value(json_object_get(a, "score")),
               sb = json_number_value(json_object_get(b, "score"));
        json_object_del(a, "score"), json_object_del(b, "score");
        double snr_a = json_number_value(json_object_get(a, "avg_snr")),
               snr_b = json_number_value(json_object_get(b, "avg_snr"));
        bool snr_same = json_is_null(json_object_get(a, "avg_snr")) ==
                            json_is_null(json_object_get(b, "avg_snr")) &&
                        fabs(snr_a - snr_b) < 1e-9;
        json_object_del(a, "avg_snr"), json_object_del(b, "avg_snr");
        if (!json_equal(a, b) || fabs(sa - sb) > 0.01 * fabs(sb) + 1e-12 || !snr_same) {
            char *x = json_dumps(gv, JSON_COMPACT), *y = json_dumps(wv, JSON_COMPACT);
            if (differ++ < 10)
                cr_expect_fail("%s: %s\n got: %s\nwant: %s", target, id, x, y);
            free(x), free(y);
        }
        json_decref(a), json_decref(b);
    }
    json_object_foreach(g, id, wv) if (!json_object_get(w, id) && differ++ < 10)
        cr_expect_fail("%s: %s not in CoreScope's answer", target, id);
    cr_expect_eq(differ, 0, "%s: %zu differences", target, differ);
    json_t *gs = json_deep_copy(json_object_get(got, "stats")),
           *ws = json_deep_copy(json_object_get(want, "stats"));
    double ga = json_number_value(json_object_get(gs, "avg_cluster_size")),
           wa = json_number_value(json_object_get(ws, "avg_cluster_size"));
    json_object_del(gs, "avg_cluster_size"), json_object_del(ws, "avg_cluster_size");
    char *x = json_dumps(gs, JSON_COMPACT | JSON_SORT_KEYS),
         *y = json_dumps(ws, JSON_COMPACT | JSON_SORT_KEYS);
    cr_expect(json_equal(gs, ws) && fabs(ga - wa) < 1e-9, "%s: stats %s, CoreScope's %s", target, x,
              y);
    free(x), free(y);
    json_decref(gs), json_decref(ws), json_decref(g), json_decref(w);
}

Test(neighbor_graph, answers_equal_corescopes_on_the_freshened_fixture)
{
    if (access(EXPECTED, R_OK) != 0)
        cr_skip_test("%s not present", EXPECTED);
    json_error_t jerr;
    json_t *expected = json_load_file(EXPECTED, 0, &jerr);
    cr_assert_not_null(expected, "%s: %s", EXPECTED, jerr.text);
    start(0);
    const char *target;
    json_t *want;
    size_t asked = 0;
    json_object_foreach(json_object_get(expected, "answers"), target, want)
    {
        json_t *got = get(target);
        expect_consistent(got);
        expect_same(target, got, want);
        json_decref(got);
        asked++;
    }
    cr_expect_geq(asked, 3);
    json_decref(expected);
}

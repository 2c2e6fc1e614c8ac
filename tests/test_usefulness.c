/* SPDX-License-Identifier: ISC */
/*
 * The usefulness axes of repeaters and rooms on /api/nodes and /api/nodes/{pubkey}
 * (workers/data/node_usefulness.c) and every node's multi-byte capability
 * (workers/data/node_multibyte.c): on small databases whose rows give answers worked out here by
 * hand (shortest paths, betweenness, harmonic reach and cut vertices of a graph drawn in the
 * comment; ADVERTs and paths of each capability), and on CoreScope's migrated end-to-end database
 * freshened into a private copy, against what CoreScope's own server answered for the same copy
 * (tests/corescope-usefulness.json; how it was recorded: its _comment). Without ../shared
 * those skip and say why.
 */
#include "corescope_config.h"
#include "fixture.h"
#include "harness.h"
#include "inproc.h"
#include "jsoncheck.h"
#include "result_cache.h"
#include "segment.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FIXTURE_MIGRATED_DB MESHGATE_SOURCE_DIR "/../shared/data/corescope-e2e-fixture-migrated.db"
#define EXPECTED MESHGATE_SOURCE_DIR "/tests/corescope-usefulness.json"

static struct {
    char dir[128];
    char db[256];
    struct mg_test_ctx t;
    bool open;
    json_t *expected;
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

TestSuite(usefulness, .fini = cleanup, .timeout = 120);

static void defaults(void)
{
    char err[512] = "";
    mg_corescope_free(&mg_corescope);
    cr_assert_eq(mg_corescope_load(&mg_corescope, "", err, sizeof err), 0, "%s", err);
}

static const char *get(const char *target)
{
    int status = mg_test_ctx_get(&fx.t, target);
    const char *body = (const char *)fx.t.res.body.data;
    cr_assert_eq(status, 200, "GET %s: status %d: %.300s", target, status, body);
    return body;
}

/* ---- a small graph, worked out by hand ------------------------------------------------------ */

#define KEY(p) p "00000000000000000000000000000000000000000000000000000000"
#define A KEY("aa000001")
#define B KEY("aa000002")
#define C KEY("aa000003")
#define D KEY("aa000004")
#define E KEY("aa000005")
#define F KEY("aa000006")
#define G KEY("aa000007")

/*
 * A repeater, B a companion (in the graph, without fields), C, D, E repeaters, F a room, G a
 * repeater with no edge. Edge weights: count 100 (or more) and a last_seen to come weigh 1/3
 * (distance 3), count 50 1/6 (distance 6), count 2 1/150 (distance 150):
 *
 *       A
 *      3| \3           D-E 6 (last_seen as "YYYY-MM-DD HH:MM:SS": UTC)
 *       B--C--D--E--F  E-F 150
 *         3  3  6  150
 *
 * and a weak C-E: count 1, 30 days old (weight 1/300 x 2^-30/7, below one fresh sighting's
 * 1/300): far too long to be a shortest path, and no edge for the cut vertices, so D still
 * separates {A, B, C} from {E, F}. Rows that count for nothing: an empty end, a NULL
 * last_seen and one that is not a time (each would otherwise join A to F), and a space with a
 * zone, which is neither of CoreScope's forms (B-F). A-C comes as two
 * rows, (A, C) and (C, A), their counts summed; B-C names B in upper case.
 */
static const char small_graph[] =
    "INSERT INTO nodes (public_key, name, role, last_seen) VALUES"
    " ('" A "', 'A', 'repeater', '2026-01-01T00:00:00Z'), ('" B "', 'B', 'companion', NULL),"
    " ('" C "', 'C', 'repeater', NULL), ('" D "', 'D', 'repeater', NULL),"
    " ('" E "', 'E', 'repeater', NULL), ('" F "', 'F', 'room', NULL),"
    " ('" G "', 'G', 'repeater', NULL);"
    "INSERT INTO neighbor_edges (node_a, node_b, count, last_seen) VALUES"
    " ('" A "', '" B "', 100, '2099-01-01T00:00:00Z'),"
    " (upper('" B "'), '" C "', 300, '2099-01-01T00:00:00.000Z'),"
    " ('" A "', '" C "', 40, '2099-01-01T00:00:00Z'),"
    " ('" C "', '" A "', 60, '2098-01-01T00:00:00Z'),"
    " ('" C "', '" D "', 100, '2099-01-01T00:00:00+02:00'),"
    " ('" E "', '" D "', 50, '2099-01-01 00:00:00'),"
    " ('" E "', '" F "', 2, '2099-01-01T00:00:00Z'),"
    " ('" C "', '" E "', 1, strftime('%Y-%m-%dT%H:%M:%SZ', 'now', '-30 days')),"
    " ('', '" F "', 100, '2099-01-01T00:00:00Z'),"
    " ('" A "', '" F "', 100, NULL),"
    " ('" F "', '" A "', 100, 'soon'),"
    " ('" B "', '" F "', 100, '2099-01-01 00:00:00Z');";

struct want {
    const char *key;
    double bridge, coverage, redundancy;
    const char *grade;
};

static double harmonic(const double *d, int n)
{
    double h = 0;
    for (int i = 0; i < n; i++)
        h += 1.0 / d[i];
    return h;
}

static void expect_scores(const char *node, const struct want *w)
{
    cr_assert_not_null(node, "%.8s: no node", w->key);
    double b = json_double_at(node, "bridge_score"), c = json_double_at(node, "coverage_score"),
           r = json_double_at(node, "redundancy_score"),
           u = json_double_at(node, "usefulness_score");
    cr_expect(fabs(b - w->bridge) < 1e-12, "%.8s bridge %.17g, want %.17g", w->key, b, w->bridge);
    cr_expect(fabs(c - w->coverage) < 1e-12, "%.8s coverage %.17g, want %.17g", w->key, c,
              w->coverage);
    cr_expect(fabs(r - w->redundancy) < 1e-12, "%.8s redundancy %.17g, want %.17g", w->key, r,
              w->redundancy);
    double composite = 0.30 * w->bridge + 0.25 * w->coverage + 0.25 * w->redundancy;
    cr_expect(fabs(u - composite) < 1e-12, "%.8s usefulness %.17g, want %.17g", w->key, u,
              composite);
    cr_expect(json_str_at_eq(node, "usefulness_grade", w->grade), "%.8s: grade, want %s: %.400s",
              w->key, w->grade, node);
}

static const char *listed(const char *body, const char *key)
{
    for (const char *n = json_first(json_get(body, "nodes")); n; n = json_next(n))
        if (json_str_at_eq(n, "public_key", key))
            return n;
    return NULL;
}

Test(usefulness, a_small_graph_scored_by_hand_in_the_list_and_the_detail)
{
    mg_test_tmpdir(fx.dir, sizeof fx.dir);
    snprintf(fx.db, sizeof fx.db, "%s/small.db", fx.dir);
    cr_assert_eq(mg_test_make_db(fx.db, true, small_graph), 0);
    defaults();
    cr_assert(mg_test_ctx_open(&fx.t, fx.db));
    fx.open = true;

    /* The shortest distances from each node, in the order A B C D E F. */
    const double from_a[] = {3, 3, 6, 12, 162}, from_c[] = {3, 3, 3, 9, 159},
                 from_d[] = {3, 6, 6, 6, 156}, from_e[] = {6, 9, 12, 12, 150},
                 from_f[] = {150, 156, 159, 162, 162};
    double best = harmonic(from_c, 5); /* C reaches the most */
    /* Betweenness: C lies on the 6 paths {A, B} x {D, E, F}, D on {A, B, C} x {E, F}, E on
     * {A, B, C, D} x {F}. Cut vertices: C leaves pieces of 2 and 3 ((25 - 4 - 9) / 2 = 6
     * pairs), D 3 and 2 (6), E 4 and 1 (4). */
    const struct want want[] = {
        {A, 0, harmonic(from_a, 5) / best, 0, "D"},
        {C, 1, 1, 1, "A"},
        {D, 1, harmonic(from_d, 5) / best, 1, "A"},
        {E, 4.0 / 6, harmonic(from_e, 5) / best, 4.0 / 6, "B"},
        {F, 0, harmonic(from_f, 5) / best, 0, "F"},
        {G, 0, 0, 0, "F"}, /* in no edge: all 0, and graded */
    };
    const char *list = get("/api/nodes?limit=50");
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        expect_scores(listed(list, want[i].key), &want[i]);
    const char *b = listed(list, B);
    cr_assert_not_null(b);
    cr_expect_null(json_get(b, "bridge_score"), "a companion has no usefulness: %.300s", b);
    cr_expect_null(json_get(b, "usefulness_grade"));
    /* The detail gives the same. */
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char target[128];
        snprintf(target, sizeof target, "/api/nodes/%s", want[i].key);
        expect_scores(json_get(get(target), "node"), &want[i]);
    }
    char target[128];
    snprintf(target, sizeof target, "/api/nodes/%s", B);
    cr_expect_null(json_get(json_get(get(target), "node"), "coverage_score"));
}

Test(usefulness, keys_in_order_and_a_database_without_edges_grades_every_repeater_f)
{
    mg_test_tmpdir(fx.dir, sizeof fx.dir);
    snprintf(fx.db, sizeof fx.db, "%s/small.db", fx.dir);
    cr_assert_eq(mg_test_make_db(fx.db, true,
                                 "INSERT INTO nodes (public_key, name, role) VALUES"
                                 " ('" A "', 'A', 'repeater');"),
                 0);
    defaults();
    cr_assert(mg_test_ctx_open(&fx.t, fx.db));
    fx.open = true;
    const char *list = get("/api/nodes");
    /* CoreScope's keys, bytewise, as its JSON encoder writes a node's map. */
    const char *n = listed(list, A);
    cr_assert_not_null(n);
    const char *order[] = {"\"bridge_score\":0,", "\"coverage_score\":0,",
                           "\"redundancy_score\":0,", "\"usefulness_grade\":\"F\",",
                           "\"usefulness_score\":0"};
    const char *at = n;
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        const char *next = strstr(at, order[i]);
        cr_expect_not_null(next, "%s not after the last: %.600s", order[i], n);
        at = next ? next : at;
    }
}

/* ---- multi-byte capability, worked out by hand ----------------------------------------------- */

#define K1 KEY("b1b10000")
#define K2 KEY("b2b20000")
#define K3 KEY("b3b30000")
#define K4 KEY("b4b40000")
#define K5 KEY("b5b50000")
#define K6 KEY("b6b60000")
#define K7 KEY("b7b70000")
#define DAYS_AGO(n) "strftime('%Y-%m-%dT%H:%M:%SZ', 'now', '-" n " days')"

/*
 * ADVERTs (header 11: flood ADVERT; the path byte's top bits the hash size, 41: 2 bytes, 81: 3,
 * 01: 1; header 12 with path byte 00: a direct zero-hop one), and paths (15: a flood text
 * message, 21: a TRACE; path byte 42: 2-byte hops):
 *   K1  an ADVERT of this week said 2 bytes               confirmed, advert, 2
 *   K2  2 bytes 30 days ago, 1 byte yesterday (newest)    unknown, "", 1
 *   K3  3 bytes 30 days ago, nothing since                confirmed, advert, 3
 *   K4  its first 2 bytes a hop of a 2-byte text message  suspected, path, 2
 *   K5  its first 2 bytes a hop of a TRACE only           unknown
 *   K6  a hop of an observation shorter than the longest  unknown
 *   K7  2 bytes 30 days ago, a zero-hop one yesterday     confirmed, advert, 2
 */
static const char multibyte_rows[] =
    "INSERT INTO nodes (public_key, name, role) VALUES ('" K1 "', 'K1', 'repeater'),"
    " ('" K2 "', 'K2', 'repeater'), ('" K3 "', 'K3', 'companion'), ('" K4 "', 'K4', 'repeater'),"
    " ('" K5 "', 'K5', 'repeater'), ('" K6 "', 'K6', 'room'), ('" K7 "', 'K7', 'sensor');"
    "INSERT INTO transmissions (id, raw_hex, hash, first_seen, route_type, payload_type,"
    " decoded_json) VALUES"
    " (1, '1141aa', 'h1', " DAYS_AGO(
        "1") ", 1, 4, '{\"pubKey\":\"" K1 "\"}'),"
             " (2, '1141aa', 'h2', " DAYS_AGO(
                 "30") ", 1, 4, '{\"pubKey\":\"" K2 "\"}'),"
                       " (3, '1101aa', 'h3', " DAYS_AGO(
                           "1") ", 1, 4, '{\"pubKey\":\"" K2 "\"}'),"
                                " (4, '1181aa', 'h4', " DAYS_AGO(
                                    "30") ", 1, 4, '{\"public_key\":\"" K3 "\"}'),"
                                          " (5, '1542b4b4e0e0', 'h5', " DAYS_AGO(
                                              "2") ", 1, 5, NULL),"
                                                   " (6, '2142b5b5e0e0', 'h6', " DAYS_AGO(
                                                       "2") ", 1, 8, NULL),"
                                                            " (7, '1542e0e0e1e1', 'h7', " DAYS_AGO(
                                                                "2") ", 1, 5, NULL),"
                                                                     " (8, '1141aa', "
                                                                     "'h8', " DAYS_AGO(
                                                                         "30") ", 1, 4, "
                                                                               "'{\"pubKey\":\"" K7
                                                                               "\"}'),"
                                                                               " (9, '1200aa', "
                                                                               "'h9', " DAYS_AGO(
                                                                                   "1") ", 2, 4, "
                                                                                        "'{"
                                                                                        "\"pubKey\""
                                                                                        ":\"" K7
                                                                                        "\"}');"
                                                                                        "INSERT "
                                                                                        "INTO "
                                                                                        "observatio"
                                                                                        "ns "
                                                                                        "(transmiss"
                                                                                        "ion_id, "
                                                                                        "observer_"
                                                                                        "idx, "
                                                                                        "path_json,"
                                                                                        " timestamp"
                                                                                        ") VALUES"
                                                                                        " (5, 1, "
                                                                                        "'["
                                                                                        "\"B4B4\","
                                                                                        "\"e0e0\"]'"
                                                                                        ", 1), (6, "
                                                                                        "1, "
                                                                                        "'["
                                                                                        "\"b5b5\","
                                                                                        "\"e0e0\"]'"
                                                                                        ", 2),"
                                                                                        " (7, 1, "
                                                                                        "'["
                                                                                        "\"b6b6\"]'"
                                                                                        ", 3), (7, "
                                                                                        "1, "
                                                                                        "'["
                                                                                        "\"e0e0\","
                                                                                        "\"e1e1\"]'"
                                                                                        ", 4);";

static void expect_multibyte(const char *node, const char *key, const char *status,
                             const char *evidence, int size)
{
    cr_assert_not_null(node, "%.8s: no node", key);
    cr_expect(json_str_at_eq(node, "multi_byte_status", status) &&
                  json_str_at_eq(node, "multi_byte_evidence", evidence) &&
                  json_int_at(node, "multi_byte_max_hash_size") == size,
              "%.8s: want %s, \"%s\", %d: %.700s", key, status, evidence, size, node);
}

Test(usefulness, multi_byte_capability_of_every_node_worked_out_by_hand)
{
    mg_test_tmpdir(fx.dir, sizeof fx.dir);
    snprintf(fx.db, sizeof fx.db, "%s/small.db", fx.dir);
    cr_assert_eq(mg_test_make_db(fx.db, true, multibyte_rows), 0);
    defaults();
    cr_assert(mg_test_ctx_open(&fx.t, fx.db));
    fx.open = true;
    const struct {
        const char *key, *status, *evidence;
        int size;
    } want[] = {
        {K1, "confirmed", "advert", 2}, {K2, "unknown", "", 1}, {K3, "confirmed", "advert", 3},
        {K4, "suspected", "path", 2},   {K5, "unknown", "", 1}, {K6, "unknown", "", 1},
        {K7, "confirmed", "advert", 2},
    };
    const char *list = get("/api/nodes?limit=50");
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        expect_multibyte(listed(list, want[i].key), want[i].key, want[i].status, want[i].evidence,
                         want[i].size);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char target[128];
        snprintf(target, sizeof target, "/api/nodes/%s", want[i].key);
        expect_multibyte(json_get(get(target), "node"), want[i].key, want[i].status,
                         want[i].evidence, want[i].size);
    }
}

/* ---- CoreScope's answers on its fixture ------------------------------------------------------ */

static void need_shared(void)
{
    if (access(FIXTURE_MIGRATED_DB, R_OK) != 0)
        cr_skip_test("%s not present: this test compares with CoreScope's answers on its real "
                     "database (../shared, see ../shared/data/README.md)",
                     FIXTURE_MIGRATED_DB);
}

static const char *const fields[] = {
    "bridge_score",        "coverage_score",           "redundancy_score",
    "usefulness_score",    "usefulness_grade",         "multi_byte_status",
    "multi_byte_evidence", "multi_byte_max_hash_size", NULL};

/* The node's usefulness fields against CoreScope's: the same present, numbers within 1e-9
 * (the edges decay with the time each server scored them, a factor every weight shares, which
 * the normalization takes out to rounding), grades the same. */
static int compare_node(const char *where, const char *got, json_t *want)
{
    int differ = 0;
    for (size_t i = 0; fields[i]; i++) {
        json_t *w = json_object_get(want, fields[i]);
        const char *g = json_get(got, fields[i]);
        if (!w || !g) {
            differ += !w != !g;
            cr_expect(!w == !g, "%s %s: CoreScope %s, meshgate %s", where, fields[i],
                      w ? "has it" : "has none", g ? "has it" : "has none");
            continue;
        }
        if (json_is_string(w)) {
            bool same = json_str_at_eq(got, fields[i], json_string_value(w));
            differ += !same;
            cr_expect(same, "%s %s: want %s: %.80s", where, fields[i], json_string_value(w), g);
        } else {
            double gv = json_double_at(got, fields[i]), wv = json_number_value(w);
            differ += !(fabs(gv - wv) < 1e-9);
            cr_expect(fabs(gv - wv) < 1e-9, "%s %s: %.17g, CoreScope %.17g", where, fields[i], gv,
                      wv);
        }
    }
    return differ;
}

Test(usefulness, the_fixture_as_corescope_scores_it)
{
    need_shared();
    json_error_t jerr;
    fx.expected = json_load_file(EXPECTED, 0, &jerr);
    cr_assert_not_null(fx.expected, "%s: %s", EXPECTED, jerr.text);
    mg_test_tmpdir(fx.dir, sizeof fx.dir);
    snprintf(fx.db, sizeof fx.db, "%s/fixture.db", fx.dir);
    char err[256] = "";
    cr_assert_eq(
        mg_fixture_freshen(FIXTURE_MIGRATED_DB, fx.db, (int64_t)time(NULL), err, sizeof err), 0,
        "freshening: %s", err);
    defaults();
    cr_assert(mg_test_ctx_open(&fx.t, fx.db));
    fx.open = true;

    json_t *nodes = json_object_get(fx.expected, "list");
    cr_assert(json_is_object(nodes));
    const char *list = get("/api/nodes?limit=5000");
    size_t seen = 0, scored = 0, nonzero = 0;
    int differ = 0;
    for (const char *n = json_first(json_get(list, "nodes")); n; n = json_next(n)) {
        char *key = json_str_at(n, "public_key");
        json_t *want = json_object_get(nodes, key);
        cr_expect_not_null(want, "%.8s not in CoreScope's list", key);
        if (want) {
            differ += compare_node(key, n, want);
            seen++;
            scored += json_object_get(want, "usefulness_score") != NULL;
            nonzero += json_number_value(json_object_get(want, "bridge_score")) > 0;
        }
        free(key);
    }
    cr_expect_eq(seen, json_object_size(nodes), "%zu nodes, CoreScope %zu", seen,
                 json_object_size(nodes));
    cr_expect_gt(scored, 100, "the fixture's repeaters and rooms are scored");
    cr_expect_gt(nonzero, 5, "some lie on shortest paths");
    cr_expect_eq(differ, 0);

    json_t *details = json_object_get(fx.expected, "detail");
    cr_assert(json_is_object(details) && json_object_size(details) >= 5);
    const char *key;
    json_t *want;
    json_object_foreach(details, key, want)
    {
        char target[160];
        snprintf(target, sizeof target, "/api/nodes/%s", key);
        cr_expect_eq(compare_node(target, json_get(get(target), "node"), want), 0);
    }
}

/* ---- the real binary: the list and the detail do not wait for the passes ------------------- */

struct built_wait {
    _Atomic uint64_t *a, *b;
};

static bool both_built(void *arg)
{
    const struct built_wait *w = arg;
    return atomic_load(w->a) >= 1 && atomic_load(w->b) >= 1;
}

/* GET target on port: 200, its body (malloc'ed) and whether it was answered in its first
 * turn (it never parked). */
static char *answered(int port, const char *target, bool *first_turn)
{
    int status;
    char *body = mg_test_get_turn(port, target, &status, first_turn);
    cr_assert_eq(status, 200, "GET %s: %d %.300s", target, status, body ? body : "");
    return body;
}

Test(usefulness, the_list_and_the_detail_answer_at_once_while_the_passes_run_then_score)
{
    /* Two workers, the usefulness and multi-byte passes 20 s longer (a test hook), every
     * other table built at once: /api/nodes?limit=50 and a repeater's detail are answered in
     * their first turn while those passes run, with what CoreScope gives before its own (axes
     * 0, no grade without traffic; the capability the nodes table keeps: A's row says 2,
     * "advert"), and with the scores and the computed capability once the group's tables land. */
    mg_test_tmpdir(fx.dir, sizeof fx.dir);
    snprintf(fx.db, sizeof fx.db, "%s/small.db", fx.dir);
    char sql[sizeof small_graph + 200];
    snprintf(sql, sizeof sql,
             "%sUPDATE nodes SET multibyte_sup = 2, multibyte_evidence = 'advert'"
             " WHERE public_key = '" A "';",
             small_graph);
    cr_assert_eq(mg_test_make_db(fx.db, true, sql), 0);
    const char *env[] = {"MESHGATE_WORKERS=2", "MESHGATE_TEST_HOOKS=park",
                         "MESHGATE_TEST_GROUP_PASS_MS=20000",
                         "MESHGATE_TEST_GROUP_PASS_ONLY=usefulness,multibyte", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, fx.db, env));
    struct mg_segment seg;
    char err[256];
    cr_assert_eq(mg_segment_attach(&seg, s.shm_name, true, err, sizeof err), 0, "%s", err);
    struct mg_result_cache *c = seg.cache.cache;
    /* The tables the list still needs (hash sizes, relay activity): their passes are quick. */
    struct built_wait others = {&c->hash_size_builds, &c->relay_builds};
    cr_assert(mg_test_wait_until(both_built, &others, 60000, 10), "no hash sizes or relay table");
    bool first_turn = false;
    for (int i = 0; i < 4; i++) { /* over both workers */
        char *list = answered(s.port, "/api/nodes?limit=50", &first_turn);
        cr_expect(first_turn, "the list parked");
        cr_expect_eq(atomic_load(&c->usefulness_builds) + atomic_load(&c->multibyte_builds), 0,
                     "the list was answered after a pass");
        const char *cn = listed(list, C);
        cr_assert_not_null(cn);
        cr_expect(json_double_at(cn, "bridge_score") == 0 &&
                      json_double_at(cn, "coverage_score") == 0 &&
                      json_double_at(cn, "usefulness_score") == 0,
                  "%.400s", cn);
        cr_expect_null(json_get(cn, "usefulness_grade"), "graded before the scores: %.400s", cn);
        const char *an = listed(list, A);
        cr_assert_not_null(an);
        cr_expect(json_str_at_eq(an, "multi_byte_status", "confirmed"), "%.600s", an);
        cr_expect(json_str_at_eq(an, "multi_byte_evidence", "advert"), "%.600s", an);
        cr_expect(json_double_at(an, "multi_byte_max_hash_size") == 0, "%.600s", an);
        cr_expect_null(json_get(listed(list, D), "multi_byte_status"), "kept for D? %.600s", list);
        free(list);
    }
    char *detail = answered(s.port, "/api/nodes/" C, &first_turn);
    cr_expect(first_turn, "the detail parked");
    cr_expect_null(json_get(json_get(detail, "node"), "usefulness_grade"), "%.400s", detail);
    free(detail);
    cr_expect_eq(atomic_load(&c->usefulness_builds) + atomic_load(&c->multibyte_builds), 0,
                 "the passes ended before the test could ask");

    /* The passes land: the scores and the computed capability (A: no ADVERT, unknown). */
    struct built_wait passes = {&c->usefulness_builds, &c->multibyte_builds};
    cr_assert(mg_test_wait_until(both_built, &passes, 100000, 10), "the passes never ended");
    int scored = 0;
    int64_t t0 = mg_test_now_ms();
    while (scored < 4 && mg_test_now_ms() - t0 < 30000) {
        char *list = answered(s.port, "/api/nodes?limit=50", &first_turn);
        bool graded = json_str_at_eq(listed(list, C), "usefulness_grade", "A") &&
                      json_str_at_eq(listed(list, A), "multi_byte_status", "unknown");
        scored = graded ? scored + 1 : 0;
        free(list);
        if (!graded)
            mg_test_sleep_ms(50);
    }
    cr_expect_eq(scored, 4, "the list never switched to the scores");
    detail = answered(s.port, "/api/nodes/" C, &first_turn);
    cr_expect(json_str_at_eq(json_get(detail, "node"), "usefulness_grade", "A"), "%.400s", detail);
    free(detail);
    cr_expect_eq(atomic_load(&c->usefulness_builds), 1, "one pass for the group");
    cr_expect_eq(atomic_load(&c->multibyte_builds), 1, "one pass for the group");
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
}

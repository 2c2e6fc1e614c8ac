/* SPDX-License-Identifier: ISC */
/*
 * The Analytics page's roles (/api/analytics/roles) on CoreScope's real migrated end-to-end
 * database, freshened into a private copy:
 *   - equal to CoreScope's own answer, recorded in tests/corescope-analytics.json (how: the
 *     file's _comment) on a copy freshened to the recorded "now": the test freshens its copy
 *     to the same second, so both servers read the same rows (the skews are advert times
 *     against when the shifted observations were heard, so they depend on that second);
 *   - worked out from the data on a copy freshened to the current time: the nodes table by
 *     role, and each role's skews from the fleet list (/api/nodes/clock-skew, which meshgate
 *     checks against the node's own samples elsewhere).
 * Without ../shared every test skips and says why.
 */
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
#define EXPECTED MESHGATE_SOURCE_DIR "/tests/corescope-analytics.json"

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
    json_decref(fx.expected);
    fx.expected = NULL;
    if (fx.dir[0])
        mg_test_rmdir(fx.dir);
    fx.dir[0] = '\0';
}

TestSuite(analytics_hash, .fini = cleanup, .timeout = 120);

/* A private copy of the fixture with its newest times at now (0: the current time), opened
 * in-process. */
static void start(int64_t now)
{
    if (access(FIXTURE_MIGRATED_DB, R_OK) != 0)
        cr_skip_test("%s not present: these tests compare with CoreScope's answers on its real "
                     "database (../shared, see ../shared/data/README.md)",
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

static void load_expected(void)
{
    json_error_t jerr;
    fx.expected = json_load_file(EXPECTED, 0, &jerr);
    cr_assert_not_null(fx.expected, "%s: %s", EXPECTED, jerr.text);
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

static void expect_equal(const char *target, json_t *got, json_t *want)
{
    cr_assert_not_null(want, "%s: nothing recorded for %s", EXPECTED, target);
    if (!json_equal(got, want)) {
        char *g = json_dumps(got, JSON_COMPACT), *w = json_dumps(want, JSON_COMPACT);
        cr_expect_fail("GET %s differs from CoreScope's answer\n got: %.2000s\nwant: %.2000s",
                       target, g, w);
        free(g), free(w);
    }
}

static long long db_count_nodes(void)
{
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(fx.t.db.conn, "SELECT count(*) FROM nodes", -1, &st, NULL),
                 SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    long long n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return n;
}

/* ---- roles ---------------------------------------------------------------------------------- */

Test(analytics_hash, roles_equal_corescopes_answer)
{
    if (access(EXPECTED, R_OK) != 0)
        cr_skip_test("%s not present", EXPECTED);
    load_expected();
    start(json_integer_value(json_object_get(fx.expected, "now")));
    json_t *got = get("/api/analytics/roles");
    expect_equal("/api/analytics/roles", got,
                 json_object_get(json_object_get(fx.expected, "answers"), "/api/analytics/roles"));
    /* Warm: the same bytes again from the shared cache. */
    json_t *again = get("/api/analytics/roles");
    cr_expect(json_equal(got, again));
    json_decref(again);
    json_decref(got);
}

/* The role as CoreScope buckets it, in SQL. */
#define ROLE_SQL                                                                                   \
    "coalesce(nullif(lower(trim(coalesce(role, ''), ' ' || char(9, 10, 11, 12, 13))), ''),"        \
    " 'unknown')"

struct expect_role {
    char role[64];
    long long nodes, with_skew, ok, warning, critical, absurd, no_clock;
    double abs[4096];
    size_t n_abs;
};

static int by_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double round2(double v)
{
    return (double)(long long)(v * 100 + 0.5) / 100;
}

Test(analytics_hash, roles_count_the_nodes_table_and_the_fleets_skews)
{
    start(0);
    /* The nodes table by role. */
    static struct expect_role want[32];
    size_t n_want = 0;
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(fx.t.db.conn,
                                    "SELECT " ROLE_SQL ", count(*) FROM nodes GROUP BY 1"
                                    " ORDER BY 2 DESC, 1",
                                    -1, &st, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(fx.t.db.conn));
    long long total = 0;
    while (sqlite3_step(st) == SQLITE_ROW && n_want < 32) {
        snprintf(want[n_want].role, sizeof want[n_want].role, "%s", sqlite3_column_text(st, 0));
        want[n_want].nodes = sqlite3_column_int64(st, 1);
        total += want[n_want++].nodes;
    }
    sqlite3_finalize(st);
    cr_assert_gt(n_want, 1, "the fixture has nodes of several roles");

    /* Each role's skews: the fleet's entries whose key is a node's (none is hidden here). */
    json_t *fleet = get("/api/nodes/clock-skew");
    cr_assert(json_is_array(fleet));
    cr_assert_eq(sqlite3_prepare_v2(fx.t.db.conn,
                                    "SELECT " ROLE_SQL " FROM nodes WHERE public_key = ?1", -1, &st,
                                    NULL),
                 SQLITE_OK);
    size_t i;
    json_t *entry;
    size_t counted = 0;
    json_array_foreach(fleet, i, entry)
    {
        sqlite3_bind_text(st, 1, json_string_value(json_object_get(entry, "pubkey")), -1,
                          SQLITE_TRANSIENT);
        if (sqlite3_step(st) == SQLITE_ROW) {
            const char *role = (const char *)sqlite3_column_text(st, 0);
            struct expect_role *r = NULL;
            for (size_t k = 0; k < n_want && !r; k++)
                if (strcmp(want[k].role, role) == 0)
                    r = &want[k];
            cr_assert_not_null(r, "%s", role);
            const char *sev = json_string_value(json_object_get(entry, "severity"));
            double recent = json_number_value(json_object_get(entry, "recentMedianSkewSec"));
            double last = json_number_value(json_object_get(entry, "lastSkewSec"));
            r->with_skew++;
            cr_assert_lt(r->n_abs, 4096);
            r->abs[r->n_abs++] = fabs(recent) != 0 ? fabs(recent) : fabs(last);
            r->ok += strcmp(sev, "ok") == 0;
            r->warning += strcmp(sev, "warning") == 0;
            r->critical += strcmp(sev, "critical") == 0;
            r->absurd += strcmp(sev, "absurd") == 0;
            r->no_clock += strcmp(sev, "no_clock") == 0;
            counted++;
        }
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    cr_assert_gt(counted, 10, "the fixture's nodes have clock skews");

    json_t *roles = get("/api/analytics/roles");
    cr_expect_eq(json_integer_value(json_object_get(roles, "totalNodes")), total);
    json_t *list = json_object_get(roles, "roles");
    cr_assert_eq(json_array_size(list), n_want);
    json_array_foreach(list, i, entry)
    {
        struct expect_role *r = &want[i];
        cr_expect_str_eq(json_string_value(json_object_get(entry, "role")), r->role, "role %zu", i);
        cr_expect_eq(json_integer_value(json_object_get(entry, "nodeCount")), r->nodes, "%s",
                     r->role);
        cr_expect_eq(json_integer_value(json_object_get(entry, "withSkew")), r->with_skew, "%s",
                     r->role);
        cr_expect_eq(json_integer_value(json_object_get(entry, "okCount")), r->ok, "%s", r->role);
        cr_expect_eq(json_integer_value(json_object_get(entry, "warningCount")), r->warning);
        cr_expect_eq(json_integer_value(json_object_get(entry, "criticalCount")), r->critical);
        cr_expect_eq(json_integer_value(json_object_get(entry, "absurdCount")), r->absurd, "%s",
                     r->role);
        cr_expect_eq(json_integer_value(json_object_get(entry, "noClockCount")), r->no_clock, "%s",
                     r->role);
        double mean = 0, median = 0;
        if (r->n_abs) {
            for (size_t k = 0; k < r->n_abs; k++)
                mean += r->abs[k];
            mean = round2(mean / (double)r->n_abs);
            qsort(r->abs, r->n_abs, sizeof r->abs[0], by_double);
            size_t n = r->n_abs;
            median = round2(n % 2 ? r->abs[n / 2] : (r->abs[n / 2 - 1] + r->abs[n / 2]) / 2);
        }
        cr_expect(fabs(json_number_value(json_object_get(entry, "meanAbsSkewSec")) - mean) < 0.011,
                  "%s: mean %g, want %g", r->role,
                  json_number_value(json_object_get(entry, "meanAbsSkewSec")), mean);
        cr_expect_eq(json_number_value(json_object_get(entry, "medianAbsSkewSec")), median,
                     "%s: median", r->role);
    }
    json_decref(roles);
    json_decref(fleet);
}

/* No nodes: no roles (CoreScope's answer, a list, never null). */
Test(analytics_hash, roles_of_an_empty_database)
{
    mg_test_tmpdir(fx.dir, sizeof fx.dir);
    cr_assert(fx.dir[0]);
    snprintf(fx.db, sizeof fx.db, "%s/empty.db", fx.dir);
    cr_assert_eq(mg_test_make_db(fx.db, true, NULL), 0);
    cr_assert(mg_test_ctx_open(&fx.t, fx.db));
    fx.open = true;
    cr_assert_eq(mg_test_ctx_get(&fx.t, "/api/analytics/roles"), 200, "%s", fx.t.res.body.data);
    cr_expect_str_eq((const char *)fx.t.res.body.data, "{\"totalNodes\":0,\"roles\":[]}\n");
}

/* Roles are trimmed and lowercased, none is "unknown"; equal populations go by role. */
Test(analytics_hash, roles_bucket_as_corescope_normalises_them)
{
    mg_test_tmpdir(fx.dir, sizeof fx.dir);
    cr_assert(fx.dir[0]);
    snprintf(fx.db, sizeof fx.db, "%s/roles.db", fx.dir);
    cr_assert_eq(
        mg_test_make_db(fx.db, true,
                        "INSERT INTO nodes (public_key, role) VALUES ('aa', ' Repeater'),"
                        " ('bb', 'repeater'), ('cc', NULL), ('dd', ''), ('ee', 'Companion'),"
                        " ('ff', char(9) || 'UNKNOWN ');"),
        0);
    cr_assert(mg_test_ctx_open(&fx.t, fx.db));
    fx.open = true;
    cr_assert_eq(mg_test_ctx_get(&fx.t, "/api/analytics/roles"), 200, "%s", fx.t.res.body.data);
    const char *zero =
        "\"withSkew\":0,\"meanAbsSkewSec\":0,\"medianAbsSkewSec\":0,\"okCount\":0,"
        "\"warningCount\":0,\"criticalCount\":0,\"absurdCount\":0,\"noClockCount\":0}";
    char want[1024];
    snprintf(
        want, sizeof want,
        "{\"totalNodes\":6,\"roles\":[{\"role\":\"unknown\",\"nodeCount\":3,%s,"
        "{\"role\":\"repeater\",\"nodeCount\":2,%s,{\"role\":\"companion\",\"nodeCount\":1,%s]}\n",
        zero, zero, zero);
    cr_expect_str_eq((const char *)fx.t.res.body.data, want);
}

/* ---- hash collisions ------------------------------------------------------------------------ */

/* Equal as JSON, reals within a billionth (CoreScope's trigonometry is Go's own, which may
 * differ from libm's in the last bit). */
static bool near_equal(json_t *a, json_t *b, char *where, size_t cap)
{
    if (json_is_number(a) && json_is_number(b)) {
        double x = json_number_value(a), y = json_number_value(b);
        return fabs(x - y) <= 1e-9 * (fabs(x) > 1 ? fabs(x) : 1);
    }
    if (json_typeof(a) != json_typeof(b))
        return false;
    if (json_is_object(a)) {
        if (json_object_size(a) != json_object_size(b))
            return false;
        const char *k;
        json_t *v;
        json_object_foreach(a, k, v)
        {
            json_t *w = json_object_get(b, k);
            if (!w || !near_equal(v, w, where, cap)) {
                size_t len = strlen(where);
                snprintf(where + len, cap - len, " <- %s", k);
                return false;
            }
        }
        return true;
    }
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b))
            return false;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!near_equal(json_array_get(a, i), json_array_get(b, i), where, cap)) {
                size_t len = strlen(where);
                snprintf(where + len, cap - len, " <- [%zu]", i);
                return false;
            }
        return true;
    }
    return json_equal(a, b);
}

static int class_rank(json_t *c)
{
    static const char *const order[] = {"local", "regional", "distant", "incomplete", "unknown"};
    const char *s = json_string_value(json_object_get(c, "classification"));
    for (int i = 0; i < 5; i++)
        if (s && strcmp(s, order[i]) == 0)
            return i;
    return 5;
}

static int by_collision_order(const void *x, const void *y)
{
    json_t *a = *(json_t *const *)x, *b = *(json_t *const *)y;
    int ca = class_rank(a), cb = class_rank(b);
    if (ca != cb)
        return ca - cb;
    json_int_t na = json_integer_value(json_object_get(a, "appearances")),
               nb = json_integer_value(json_object_get(b, "appearances"));
    if (na != nb)
        return na > nb ? -1 : 1;
    return strcmp(json_string_value(json_object_get(a, "prefix")),
                  json_string_value(json_object_get(b, "prefix")));
}

/* CoreScope orders collisions of one class and size in no particular order: by prefix here,
 * as meshgate does. */
static void order_collisions(json_t *answer)
{
    const char *size;
    json_t *entry;
    json_object_foreach(json_object_get(answer, "by_size"), size, entry)
    {
        json_t *list = json_object_get(entry, "collisions");
        size_t n = json_array_size(list);
        json_t **v = calloc(n + 1, sizeof *v);
        for (size_t i = 0; i < n; i++)
            v[i] = json_incref(json_array_get(list, i));
        qsort(v, n, sizeof *v, by_collision_order);
        json_array_clear(list);
        for (size_t i = 0; i < n; i++)
            json_array_append_new(list, v[i]);
        free(v);
    }
}

static void expect_collisions_equal(const char *target)
{
    json_t *got = get(target);
    json_t *want = json_deep_copy(json_object_get(json_object_get(fx.expected, "answers"), target));
    cr_assert_not_null(want, "%s: nothing recorded for %s", EXPECTED, target);
    order_collisions(want);
    char where[512] = "";
    if (!near_equal(got, want, where, sizeof where)) {
        char *g = json_dumps(got, JSON_COMPACT), *w = json_dumps(want, JSON_COMPACT);
        cr_expect_fail("GET %s differs from CoreScope's answer at%s\n got: %.1500s\nwant: %.1500s",
                       target, where, g, w);
        free(g), free(w);
    }
    json_decref(want);
    json_decref(got);
}

/* The hash sizes are those of the week's ADVERTs before now: a copy freshened to the current
 * time has the same week as CoreScope's freshened to the time of recording. */
Test(analytics_hash, hash_collisions_equal_corescopes_answers)
{
    if (access(EXPECTED, R_OK) != 0)
        cr_skip_test("%s not present", EXPECTED);
    load_expected();
    start(0);
    expect_collisions_equal("/api/analytics/hash-collisions");
    expect_collisions_equal("/api/analytics/hash-collisions?region=SJC");
    expect_collisions_equal("/api/analytics/hash-collisions?region=sjc,%20MRY");
    /* codes no observer has: no filter, the whole answer */
    expect_collisions_equal("/api/analytics/hash-collisions?region=XXX");
}

/* Worked out from the node list (whose hash sizes are checked against CoreScope's elsewhere):
 * the counts of each size, and every collision's nodes sharing its prefix. */
Test(analytics_hash, hash_collisions_count_the_node_lists_hash_sizes)
{
    start(0);
    json_t *list = get("/api/nodes?limit=2000");
    json_t *nodes = json_object_get(list, "nodes");
    long long total = 0, using[4] = {0}, repeaters[4] = {0}, inconsistent = 0;
    size_t i;
    json_t *n;
    json_array_foreach(nodes, i, n)
    {
        const char *role = json_string_value(json_object_get(n, "role"));
        json_int_t hs = json_integer_value(json_object_get(n, "hash_size"));
        total++;
        if (hs >= 1 && hs <= 3) {
            using[hs]++;
            repeaters[hs] += role && strcmp(role, "repeater") == 0;
        }
        inconsistent += json_is_true(json_object_get(n, "hash_size_inconsistent")) && role &&
                        (strcmp(role, "repeater") == 0 || strcmp(role, "room_server") == 0);
    }
    cr_assert_eq(total, db_count_nodes(), "the node list has every node");
    json_t *answer = get("/api/analytics/hash-collisions");
    cr_expect_eq((long long)json_array_size(json_object_get(answer, "inconsistent_nodes")),
                 inconsistent);
    long long all_repeaters = 0;
    for (int b = 1; b <= 3; b++) {
        char name[2] = {(char)('0' + b), 0};
        json_t *size = json_object_get(json_object_get(answer, "by_size"), name);
        json_t *stats = json_object_get(size, "stats");
        cr_expect_eq(json_integer_value(json_object_get(stats, "total_nodes")), total);
        cr_expect_eq(json_integer_value(json_object_get(stats, "using_this_size")), using[b],
                     "size %d", b);
        cr_expect_eq(json_integer_value(json_object_get(stats, "nodes_for_byte")), repeaters[b],
                     "size %d", b);
        all_repeaters += repeaters[b];
        json_t *c;
        size_t k;
        long long in_collisions = 0;
        json_array_foreach(json_object_get(size, "collisions"), k, c)
        {
            const char *prefix = json_string_value(json_object_get(c, "prefix"));
            cr_expect_eq(strlen(prefix), (size_t)b * 2);
            json_t *members = json_object_get(c, "nodes");
            cr_expect_eq(json_integer_value(json_object_get(c, "appearances")),
                         (json_int_t)json_array_size(members));
            cr_expect_gt(json_array_size(members), 1);
            size_t m;
            json_t *node;
            json_array_foreach(members, m, node)
            {
                const char *key = json_string_value(json_object_get(node, "public_key"));
                cr_expect(strncasecmp(key, prefix, (size_t)b * 2) == 0, "%s in %s", key, prefix);
                cr_expect_eq(json_integer_value(json_object_get(node, "hash_size")), b);
            }
            in_collisions += (long long)json_array_size(members);
        }
        cr_expect_leq(in_collisions, repeaters[b]);
        /* unique prefixes + the repeaters beyond the first of each collision = repeaters */
        long long extra = 0;
        json_array_foreach(json_object_get(size, "collisions"), k, c) extra +=
            json_integer_value(json_object_get(c, "appearances")) - 1;
        cr_expect_eq(json_integer_value(json_object_get(stats, "unique_prefixes")) + extra,
                     repeaters[b], "size %d", b);
    }
    /* The 1-byte cells hold every repeater of 1 to 3 bytes once. */
    long long in_cells = 0;
    const char *hex;
    json_t *cell;
    json_object_foreach(
        json_object_get(json_object_get(json_object_get(answer, "by_size"), "1"), "one_byte_cells"),
        hex, cell) in_cells += (long long)json_array_size(cell);
    cr_expect_eq(in_cells, all_repeaters);
    cr_expect_eq(json_object_size(json_object_get(
                     json_object_get(json_object_get(answer, "by_size"), "2"), "two_byte_cells")),
                 256);
    json_decref(answer);
    json_decref(list);
}

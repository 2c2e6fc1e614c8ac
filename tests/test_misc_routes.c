/* SPDX-License-Identifier: ISC */
/*
 * The small routes of CoreScope's server that meshgate serves itself (issue 26, misc): each on
 * a small database whose answer is worked out here from the rows written, and where the
 * answer is the data's, on CoreScope's migrated end-to-end database freshened into a private
 * copy, against what CoreScope's own server answered for the same copy
 * (tests/corescope-misc.json; how it was recorded: its _comment). Without ../shared those
 * skip and say why.
 */
#include "corescope_config.h"
#include "fixture.h"
#include "harness.h"
#include "inproc.h"
#include "router.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FIXTURE_MIGRATED_DB MESHGATE_SOURCE_DIR "/../shared/data/corescope-e2e-fixture-migrated.db"
#define EXPECTED MESHGATE_SOURCE_DIR "/tests/corescope-misc.json"

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

TestSuite(misc_routes, .fini = cleanup, .timeout = 120);

/* CoreScope's config.json as text (NULL: none, its defaults), loaded as this process's. */
static void configure(const char *config)
{
    char err[512] = "";
    mg_corescope_free(&mg_corescope);
    if (config)
        cr_assert_eq(mg_corescope_load_text(&mg_corescope, "config.json", config, strlen(config),
                                            NULL, 0, err, sizeof err),
                     0, "%s", err);
    else
        cr_assert_eq(mg_corescope_load(&mg_corescope, "", err, sizeof err), 0, "%s", err);
}

static const char *get(const char *target, int want_status)
{
    int status = mg_test_ctx_get(&fx.t, target);
    const char *body = (const char *)fx.t.res.body.data;
    cr_assert_eq(status, want_status, "GET %s: status %d, want %d: %.300s", target, status,
                 want_status, body);
    return body;
}

static void expect_body(const char *target, int want_status, const char *want)
{
    const char *body = get(target, want_status);
    cr_expect_str_eq(body, want, "GET %s", target);
}

/* ---- a small database, its answers worked out from its rows ---- */

#define KEY(p) p "00000000000000000000000000000000000000000000000000000000"

/* Each node: key, name, role and last_seen (SQL expressions), and what CoreScope makes of its
 * last_seen with the default thresholds (infra: 24 h / 72 h; others: 1 h / 24 h). */
static const char small_nodes[] =
    "INSERT INTO nodes (public_key, name, role, last_seen) VALUES"
    /* active: a repeater 2 h ago */
    " ('aaaa0001', 'R1', 'repeater', strftime('%Y-%m-%dT%H:%M:%SZ', 'now', '-2 hours')),"
    /* degraded: a repeater 30 h ago */
    " ('aaaa0002', 'R2', 'repeater', strftime('%Y-%m-%dT%H:%M:%SZ', 'now', '-30 hours')),"
    /* silent: a room 100 h ago */
    " ('aaaa0003', 'Room <&>', 'room', strftime('%Y-%m-%dT%H:%M:%SZ', 'now', '-100 hours')),"
    /* active: a companion 30 min ago */
    " ('aaaa0004', 'C4', 'companion', strftime('%Y-%m-%dT%H:%M:%SZ', 'now', '-30 minutes')),"
    /* degraded: 2 h ago in CoreScope's second form (a space, no zone: UTC) */
    " ('aaaa0005', '', 'companion', strftime('%Y-%m-%d %H:%M:%S', 'now', '-2 hours')),"
    /* silent: a space and a zone is neither of CoreScope's forms */
    " ('bbbb0006', 'C6', 'companion', strftime('%Y-%m-%d %H:%M:%SZ', 'now', '-10 minutes')),"
    /* active: an offset, 10 min ago; no role: "unknown" */
    " ('bbbb0007', 'U7', NULL,"
    "  strftime('%Y-%m-%dT%H:%M:%S+02:00', 'now', '+2 hours', '-10 minutes')),"
    /* silent: never seen */
    " ('bbbb0008', 'S8', 'sensor', NULL),"
    /* active: an hour in the future; an empty role is its own */
    " ('bbbb0009', 'E9', '', strftime('%Y-%m-%dT%H:%M:%SZ', 'now', '+1 hours')),"
    /* silent: not a time */
    " ('bbbb0010', 'C10', 'companion', 'yesterday'),"
    /* silent: a lowercase t is not RFC 3339 as CoreScope's server reads it */
    " ('bbbb0011', 'R11', 'repeater', strftime('%Y-%m-%dt%H:%M:%SZ', 'now', '-1 hours')),"
    /* active: a fraction of a second */
    " ('bbbb0012', 'R12', 'repeater', strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 hours'));"
    /* each key made whole: KEY(its first 8 digits) */
    "UPDATE nodes SET public_key = public_key || substr(printf('%056d', 0), 1, 56);";

/* A database of CoreScope's schema holding what sql writes, served with config. */
static void serve_db(const char *sql, const char *config)
{
    mg_test_tmpdir(fx.dir, sizeof fx.dir);
    snprintf(fx.db, sizeof fx.db, "%s/small.db", fx.dir);
    cr_assert_eq(mg_test_make_db(fx.db, true, sql), 0);
    configure(config);
    cr_assert(mg_test_ctx_open(&fx.t, fx.db));
    fx.open = true;
}

static void small_db(const char *config)
{
    serve_db(small_nodes, config);
}

Test(misc_routes, network_status_counts_every_node_by_its_age_and_role)
{
    small_db(NULL);
    expect_body("/api/nodes/network-status", 200,
                "{\"active\":5,\"degraded\":2,\"roleCounts\":{\"\":1,\"companion\":4,"
                "\"repeater\":4,\"room\":1,\"sensor\":1,\"unknown\":1},\"silent\":5,"
                "\"total\":12}\n");
    /* Parameters change nothing, as CoreScope reads none. */
    expect_body("/api/nodes/network-status?region=SJC&limit=1", 200,
                "{\"active\":5,\"degraded\":2,\"roleCounts\":{\"\":1,\"companion\":4,"
                "\"repeater\":4,\"room\":1,\"sensor\":1,\"unknown\":1},\"silent\":5,"
                "\"total\":12}\n");
}

Test(misc_routes, network_status_uses_the_configured_thresholds_and_counts_hidden_nodes)
{
    /* A companion is active for 3 h, a room degraded up to 200 h; hiding changes no count. */
    small_db("{\"healthThresholds\":{\"nodeDegradedHours\":3,\"infraSilentHours\":200},"
             "\"nodeBlacklist\":[\"" KEY("aaaa0001") "\"],\"hiddenNamePrefixes\":[\"C\"]}");
    expect_body("/api/nodes/network-status", 200,
                "{\"active\":6,\"degraded\":2,\"roleCounts\":{\"\":1,\"companion\":4,"
                "\"repeater\":4,\"room\":1,\"sensor\":1,\"unknown\":1},\"silent\":4,"
                "\"total\":12}\n");
}

Test(misc_routes, network_status_of_an_empty_table)
{
    serve_db(NULL, NULL);
    expect_body("/api/nodes/network-status", 200,
                "{\"active\":0,\"degraded\":0,\"roleCounts\":{},\"silent\":0,\"total\":0}\n");
}

Test(misc_routes, resolve_names_the_one_node_a_prefix_starts)
{
    small_db(NULL);
    expect_body("/api/nodes/resolve?prefix=aaaa0001", 200,
                "{\"prefix\":\"aaaa0001\",\"pubkey\":\"" KEY("aaaa0001") "\",\"name\":\"R1\","
                                                                         "\"ambiguous\":false}\n");
    /* Trimmed and lowercased; a name escaped as CoreScope's encoder does. */
    expect_body("/api/nodes/resolve?prefix=%20AAAA0003%09", 200,
                "{\"prefix\":\"aaaa0003\",\"pubkey\":\"" KEY(
                    "aaaa0003") "\","
                                "\"name\":\"Room \\u003c\\u0026\\u003e\",\"ambiguous\":false}\n");
    /* No name: the key alone. */
    expect_body("/api/nodes/resolve?prefix=aaaa0005", 200,
                "{\"prefix\":\"aaaa0005\",\"pubkey\":\"" KEY("aaaa0005") "\","
                                                                         "\"ambiguous\":false}\n");
    /* A whole key. */
    expect_body("/api/nodes/resolve?prefix=" KEY("bbbb0012"), 200,
                "{\"prefix\":\"" KEY("bbbb0012") "\",\"pubkey\":\"" KEY(
                    "bbbb0012") "\","
                                "\"name\":\"R12\",\"ambiguous\":false}\n");
    /* Two or more: ambiguous, no key. */
    expect_body("/api/nodes/resolve?prefix=aaaa", 200,
                "{\"prefix\":\"aaaa\",\"ambiguous\":true}\n");
    expect_body("/api/nodes/resolve?prefix=bbbb001", 200,
                "{\"prefix\":\"bbbb001\",\"ambiguous\":true}\n");
    /* None. */
    expect_body("/api/nodes/resolve?prefix=ffff", 200,
                "{\"prefix\":\"ffff\",\"ambiguous\":false}\n");
    expect_body("/api/nodes/resolve?prefix=aaaa0001f", 200,
                "{\"prefix\":\"aaaa0001f\",\"ambiguous\":false}\n");
}

Test(misc_routes, resolve_refuses_what_corescope_refuses)
{
    small_db(NULL);
    static const struct {
        const char *target, *error;
    } bad[] = {
        {"/api/nodes/resolve", "prefix must be hex"},
        {"/api/nodes/resolve?prefix=", "prefix must be hex"},
        {"/api/nodes/resolve?prefix=%20%20", "prefix must be hex"},
        {"/api/nodes/resolve?prefix=a", "prefix must be hex"},
        {"/api/nodes/resolve?prefix=zzzz", "prefix must be hex"},
        {"/api/nodes/resolve?prefix=aaaa%25", "prefix must be hex"},
        {"/api/nodes/resolve?prefix=aa_a", "prefix must be hex"},
        {"/api/nodes/resolve?prefix=" KEY("aaaa0001") "0", "prefix must be hex"},
        {"/api/nodes/resolve?prefix=aa", "prefix must be at least 4 hex chars"},
        {"/api/nodes/resolve?prefix=AbC", "prefix must be at least 4 hex chars"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char want[128];
        snprintf(want, sizeof want, "{\"error\":\"%s\"}\n", bad[i].error);
        expect_body(bad[i].target, 400, want);
    }
}

Test(misc_routes, resolve_never_names_a_hidden_node)
{
    small_db("{\"nodeBlacklist\":[\" " KEY("AAAA0001") " \"],\"hiddenNamePrefixes\":[\"R1\"]}");
    expect_body("/api/nodes/resolve?prefix=aaaa0001", 200,
                "{\"prefix\":\"aaaa0001\",\"ambiguous\":false}\n");
    expect_body("/api/nodes/resolve?prefix=bbbb0012", 200,
                "{\"prefix\":\"bbbb0012\",\"ambiguous\":false}\n");
    expect_body("/api/nodes/resolve?prefix=bbbb0011", 200,
                "{\"prefix\":\"bbbb0011\",\"ambiguous\":false}\n");
    expect_body("/api/nodes/resolve?prefix=aaaa0002", 200,
                "{\"prefix\":\"aaaa0002\",\"pubkey\":\"" KEY("aaaa0002") "\",\"name\":\"R2\","
                                                                         "\"ambiguous\":false}\n");
}

/* ---- CoreScope's own answers on its real database ---- */

static void freshened_fixture(void)
{
    if (access(FIXTURE_MIGRATED_DB, R_OK) != 0 || access(EXPECTED, R_OK) != 0)
        cr_skip_test("%s not present: these tests compare with CoreScope's answers on its real "
                     "database (../shared, see ../shared/data/README.md)",
                     FIXTURE_MIGRATED_DB);
    mg_test_tmpdir(fx.dir, sizeof fx.dir);
    snprintf(fx.db, sizeof fx.db, "%s/fresh.db", fx.dir);
    char err[512] = "";
    cr_assert_eq(
        mg_fixture_freshen(FIXTURE_MIGRATED_DB, fx.db, (int64_t)time(NULL), err, sizeof err), 0,
        "freshening: %s", err);
    configure(NULL);
    cr_assert(mg_test_ctx_open(&fx.t, fx.db));
    fx.open = true;
    json_error_t jerr;
    fx.expected = json_load_file(EXPECTED, 0, &jerr);
    cr_assert_not_null(fx.expected, "%s: %s", EXPECTED, jerr.text);
}

/* Every target of the recorded set answers CoreScope's status and body (compared as JSON). */
static void expect_recorded(const char *set)
{
    json_t *answers = json_object_get(fx.expected, set);
    cr_assert(json_is_object(answers), "%s has no \"%s\"", EXPECTED, set);
    const char *target;
    json_t *want;
    int compared = 0;
    json_object_foreach(answers, target, want)
    {
        int want_status = (int)json_integer_value(json_object_get(want, "status"));
        const char *body = get(target, want_status);
        json_t *want_body = json_object_get(want, "body");
        if (want_status == 200) {
            json_error_t jerr;
            json_t *got = json_loads(body, 0, &jerr);
            cr_assert_not_null(got, "GET %s: not JSON (%s): %.300s", target, jerr.text, body);
            char *w = json_dumps(want_body, JSON_SORT_KEYS | JSON_COMPACT);
            char *g = json_dumps(got, JSON_SORT_KEYS | JSON_COMPACT);
            cr_expect_str_eq(g, w, "GET %s", target);
            free(w);
            free(g);
            json_decref(got);
        }
        compared++;
    }
    cr_expect_geq(compared, 1);
}

Test(misc_routes, network_status_and_resolve_answer_as_corescope_on_its_database)
{
    freshened_fixture();
    expect_recorded("network-status");
    expect_recorded("resolve");
}

/* ---- the Perf page's disk cards ---- */

static long long pragma_of(const char *path, const char *sql)
{
    sqlite3 *db;
    cr_assert_eq(mg_test_sqlite_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    long long v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

static json_t *get_json(const char *target)
{
    const char *body = get(target, 200);
    json_error_t jerr;
    json_t *v = json_loads(body, 0, &jerr);
    cr_assert_not_null(v, "GET %s: not JSON (%s): %.300s", target, jerr.text, body);
    return v;
}

Test(misc_routes, perf_sqlite_gives_the_files_figures_in_corescopes_shape)
{
    small_db(NULL);
    /* A -wal of a known size beside the configured path, which the route only looks at (a
     * path of its own, so that SQLite never reads the made-up file). */
    struct mg_config *cfg = fx.t.seg.config; /* what the route reads (env->cfg) */
    char wal[sizeof cfg->db_path + 8];
    snprintf(cfg->db_path, sizeof cfg->db_path, "%s/served.db", fx.dir);
    snprintf(wal, sizeof wal, "%s-wal", cfg->db_path);
    FILE *f = fopen(wal, "w");
    cr_assert_not_null(f);
    for (int i = 0; i < 3000; i++)
        fputc('x', f);
    fclose(f);
    json_t *v = get_json("/api/perf/sqlite");
    const char *body = (const char *)fx.t.res.body.data;
    cr_expect(strncmp(body, "{\"walSizeMB\":", 13) == 0 && strstr(body, "\"walSize\":3000,"
                                                                        "\"pageCount\":"),
              "CoreScope's field order: %s", body);
    cr_expect_eq(json_integer_value(json_object_get(v, "walSize")), 3000);
    cr_expect_float_eq(json_real_value(json_object_get(v, "walSizeMB")), 3000 / 1048576.0, 1e-12);
    cr_expect_eq(json_integer_value(json_object_get(v, "pageCount")),
                 pragma_of(fx.db, "PRAGMA page_count"));
    cr_expect_eq(json_integer_value(json_object_get(v, "pageSize")),
                 pragma_of(fx.db, "PRAGMA page_size"));
    /* The worker connection's own setting (negative: KiB). */
    cr_expect_eq(json_integer_value(json_object_get(v, "cacheSize")), -MG_DB_CACHE_KIB);
    json_t *rate = json_object_get(v, "cacheHitRate");
    cr_expect(json_is_number(rate) && json_number_value(rate) >= 0 && json_number_value(rate) <= 1,
              "%s", body);
    json_decref(v);
    unlink(wal);
    v = get_json("/api/perf/sqlite");
    cr_expect_eq(json_integer_value(json_object_get(v, "walSize")), 0);
    json_decref(v);
}

Test(misc_routes, perf_write_sources_is_corescopes_answer_without_an_ingestor_file)
{
    small_db(NULL);
    expect_body("/api/perf/write-sources", 200, "{\"sampleAt\":\"\",\"sources\":{}}\n");
}

static double number_at(json_t *v, const char *key)
{
    json_t *n = json_object_get(v, key);
    cr_assert(json_is_number(n), "no number %s", key);
    return json_number_value(n);
}

/* The group's I/O on the real binary: the master and its workers are read, the first answer
 * of a worker is zero, a later one counts what the group read in between. */
Test(misc_routes, perf_io_sums_the_groups_processes_between_two_answers)
{
    mg_test_tmpdir(fx.dir, sizeof fx.dir);
    snprintf(fx.db, sizeof fx.db, "%s/small.db", fx.dir);
    cr_assert_eq(mg_test_make_db(fx.db, true, small_nodes), 0);
    const char *env[] = {"MESHGATE_WORKERS=1", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, fx.db, env), "meshgate did not start");
    static const char *const keys[] = {"readBytesPerSec", "writeBytesPerSec",
                                       "cancelledWriteBytesPerSec", "syscallsRead",
                                       "syscallsWrite"};
    double syscalls_read = 0;
    for (int round = 0; round < 3; round++) {
        struct mg_test_response r;
        cr_assert(mg_test_get(s.port, "/api/perf/io", NULL, &r));
        cr_assert_eq(r.status, 200, "%s", r.body);
        json_error_t jerr;
        json_t *v = json_loads(r.body, 0, &jerr);
        cr_assert_not_null(v, "%s", r.body);
        cr_expect(strncmp(r.body, "{\"readBytesPerSec\":", 19) == 0, "%s", r.body);
        cr_expect_eq(json_integer_value(json_object_get(v, "processes")), 2,
                     "the master and one worker: %s", r.body);
        cr_expect_null(json_object_get(v, "ingestor"), "no ingestor file is read");
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
            double x = number_at(v, keys[k]);
            if (round == 0)
                cr_expect_eq(x, 0.0, "the first answer: %s", r.body);
            cr_expect_geq(x, 0.0, "%s", r.body);
        }
        if (round > 0)
            syscalls_read += number_at(v, "syscallsRead");
        json_decref(v);
        mg_test_response_free(&r);
        /* Reads in between: the worker reads the file and /proc. */
        cr_assert(mg_test_get(s.port, "/api/nodes?limit=200", NULL, &r));
        mg_test_response_free(&r);
    }
    cr_expect_gt(syscalls_read, 0.0, "the group read nothing between two answers");
    mg_test_server_stop(&s, 10000);
}

/* ---- meshgate's own API description ---- */

static json_t *operation_of(json_t *spec, const char *path, const char *method)
{
    json_t *op = json_object_get(json_object_get(json_object_get(spec, "paths"), path), method);
    cr_assert(json_is_object(op), "the spec has no %s %s", method, path);
    return op;
}

static json_t *operation(json_t *spec, const char *path)
{
    json_t *op = operation_of(spec, path, "get");
    return op;
}

/* The parameter of op named name, in `in`; NULL when it has none. */
static json_t *parameter(json_t *op, const char *name, const char *in)
{
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(op, "parameters"), i, p)
    {
        if (strcmp(json_string_value(json_object_get(p, "name")), name) == 0 &&
            strcmp(json_string_value(json_object_get(p, "in")), in) == 0)
            return p;
    }
    return NULL;
}

Test(misc_routes, spec_describes_every_route_from_the_tables)
{
    small_db(NULL);
    json_t *spec = get_json("/api/spec");
    cr_expect_str_eq(json_string_value(json_object_get(spec, "openapi")), "3.0.3");
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(spec, "info"), "title")),
                     "meshgate API");
    size_t described = 0;
    for (unsigned i = 0; i < mg_route_table_len; i++) {
        const struct mg_route *r = &mg_routes[i];
        if (strcmp(r->template, "/api/spec") == 0 || strcmp(r->template, "/api/docs") == 0)
            continue;
        char path[256], method[8];
        size_t n = 0;
        /* A path of several methods is one entry, with an operation for each. */
        bool again = false;
        for (unsigned e = 0; e < i; e++)
            again = again || strcmp(mg_route_path(e), mg_route_path(i)) == 0;
        snprintf(method, sizeof method, "%s", mg_route_method(i));
        for (char *c = method; *c; c++)
            *c = (char)(*c - 'A' + 'a');
        for (const char *c = mg_route_path(i); *c; c++) { /* ":name" as "{name}" */
            if (*c == ':') {
                path[n++] = '{';
                while (c[1] && c[1] != '/')
                    path[n++] = *++c;
                path[n++] = '}';
            } else {
                path[n++] = *c;
            }
        }
        path[n] = '\0';
        json_t *op = operation_of(spec, path, method);
        described += !again;
        cr_expect_str_eq(json_string_value(json_object_get(op, "x-meshgate-cost")),
                         r->cost == MG_COST_LIGHT ? "light" : "heavy", "%s", path);
        size_t gates = 0;
        for (const enum mg_gate_row *g = r->gates; *g != MG_GATE_ROWS; g++)
            gates++;
        cr_expect_eq(json_array_size(json_object_get(op, "x-meshgate-gates")), gates, "%s", path);
        const char *colon = strchr(mg_route_path(i), ':');
        if (colon) {
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)strcspn(colon + 1, "/"), colon + 1);
            json_t *p = parameter(op, name, "path");
            cr_expect(p && json_is_true(json_object_get(p, "required")), "%s: {%s}", path, name);
        }
        for (unsigned k = 0; r->params && k < r->params->count; k++)
            cr_expect_not_null(parameter(op, r->params->params[k].name, "query"), "%s: %s", path,
                               r->params->params[k].name);
        cr_expect_eq(json_object_get(json_object_get(op, "responses"), "400") != NULL,
                     r->params != NULL, "%s: a 400 exactly where parameters are read", path);
    }
    cr_expect_eq(json_object_size(json_object_get(spec, "paths")), described,
                 "a path that is no route");
    cr_expect_null(json_object_get(json_object_get(spec, "paths"), "/api/spec"));

    /* What the tables say, written out. */
    json_t *reach = operation(spec, "/api/nodes/{pubkey}/reach");
    json_t *days = parameter(reach, "days", "query");
    cr_assert_not_null(days);
    json_t *schema = json_object_get(days, "schema");
    cr_expect_str_eq(json_string_value(json_object_get(schema, "type")), "integer");
    cr_expect_eq(json_integer_value(json_object_get(schema, "default")), 7);
    cr_expect_eq(json_integer_value(json_object_get(schema, "minimum")), 1);
    cr_expect_eq(json_integer_value(json_object_get(schema, "maximum")), 30);
    json_t *gates = json_object_get(reach, "x-meshgate-gates");
    cr_expect_str_eq(json_string_value(json_array_get(gates, 2)), "cold");
    cr_expect_not_null(json_object_get(json_object_get(reach, "responses"), "429"));
    json_t *scope = parameter(operation(spec, "/api/scope-stats"), "window", "query");
    cr_expect_str_eq(json_string_value(json_array_get(
                         json_object_get(json_object_get(scope, "schema"), "enum"), 2)),
                     "7d");
    cr_expect_str_eq(
        json_string_value(json_object_get(json_object_get(scope, "schema"), "default")), "24h");
    json_t *since = parameter(operation(spec, "/api/packets/timestamps"), "since", "query");
    cr_expect(json_is_true(json_object_get(since, "required")));
    json_t *region = parameter(operation(spec, "/api/nodes"), "region", "query");
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(region, "schema"), "type")),
                     "array");
    json_t *light = operation(spec, "/api/nodes/network-status");
    cr_expect_str_eq(json_string_value(json_object_get(light, "x-meshgate-cost")), "light");
    cr_expect_eq(json_array_size(json_object_get(light, "x-meshgate-gates")), 0);
    json_t *metrics = operation(spec, "/metrics");
    cr_expect(json_is_true(json_object_get(metrics, "x-meshgate-admin-only")));
    cr_expect_not_null(json_object_get(json_object_get(metrics, "responses"), "404"));
    json_decref(spec);

    /* Rendered once: the second answer is the same bytes. */
    char *first = strdup((const char *)fx.t.res.body.data);
    get("/api/spec", 200);
    cr_expect_str_eq((const char *)fx.t.res.body.data, first);
    free(first);
}

Test(misc_routes, docs_is_a_page_of_our_own_that_reads_the_spec)
{
    small_db(NULL);
    const char *body = get("/api/docs", 200);
    cr_expect_str_eq(fx.t.res.content_type, "text/html; charset=utf-8");
    cr_expect(strstr(body, "fetch('/api/spec')"), "%.300s", body);
    cr_expect_null(strstr(body, "://"), "the page loads nothing from elsewhere");
    cr_expect_null(strstr(body, "innerHTML"), "text from the spec is set as text");
}

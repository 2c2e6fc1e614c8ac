/* SPDX-License-Identifier: ISC */
/*
 * CoreScope's node visibility (nodeBlacklist, hiddenNamePrefixes, geo_filter) and its areas,
 * on CoreScope's real migrated end-to-end database, freshened into a private copy, with
 * CoreScope's config.example.json (as shipped, and with a blacklisted key and a hidden
 * prefix added). What every answer must hold is what CoreScope's own server answered for the
 * same copy and files, recorded in tests/visibility-corescope.json (how: in that file). Where
 * meshgate differs on purpose, the test says so (docs/architecture.md, "CoreScope's
 * configuration"). Without ../shared every test skips and says why.
 */
#include "corescope_config.h"
#include "fixture.h"
#include "harness.h"
#include "inproc.h"
#include "node_visibility.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FIXTURE_MIGRATED_DB MESHGATE_SOURCE_DIR "/../shared/data/corescope-e2e-fixture-migrated.db"
#define EXAMPLE_CONFIG MESHGATE_SOURCE_DIR "/../shared/corescope/server/config.example.json"
#define EXPECTED MESHGATE_SOURCE_DIR "/tests/visibility-corescope.json"

/* The nodes the test configuration hides or the example's geo_filter leaves out. */
#define HIDDEN                                                                                     \
    "b3a462eb724b927b31ace57dac7c4fef397efdfeb0b7c86208372eedc9fdee9c" /* EW-HomeBase              \
                                                                        */
#define BLACKLISTED                                                                                \
    "d3e18e324db56f7be472dbbc267ecca54bc87892f42b2614977b069672a7ae61"             /* GOONIES      \
                                                                                    */
#define OUTSIDE "27d7e95231632b41b8c63a6bcdd16afed5a19c5516cf728cde15756262f89adb" /* Hollister */

static struct {
    char dir[128];
    char db[256];
    char config[256];
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

TestSuite(visibility, .fini = cleanup, .timeout = 120);

static void need_shared(void)
{
    if (access(FIXTURE_MIGRATED_DB, R_OK) != 0 || access(EXAMPLE_CONFIG, R_OK) != 0)
        cr_skip_test("%s or %s not present: these tests compare with CoreScope's answers on its "
                     "real database and example configuration (../shared, see "
                     "../shared/data/README.md)",
                     FIXTURE_MIGRATED_DB, EXAMPLE_CONFIG);
}

/* Writes config.example.json, with the test's hidden prefix and blacklisted key when test
 * is set, into the private directory, and loads it as this process's configuration. */
static void load_config(bool test)
{
    json_error_t jerr;
    json_t *root = json_load_file(EXAMPLE_CONFIG, 0, &jerr);
    cr_assert_not_null(root, "%s: %s", EXAMPLE_CONFIG, jerr.text);
    if (test) {
        json_object_set_new(root, "hiddenNamePrefixes",
                            json_pack("[ss]", "\xf0\x9f\x9a\xab", "EW-"));
        /* as an operator may paste it: upper case, spaces around */
        json_object_set_new(root, "nodeBlacklist",
                            json_pack("[s]", " D3E18E324DB56F7BE472DBBC267ECCA54BC87892F42B2614977B"
                                             "069672A7AE61 "));
    }
    snprintf(fx.config, sizeof fx.config, "%s/config.json", fx.dir);
    cr_assert_eq(json_dump_file(root, fx.config, 0), 0);
    json_decref(root);
    char err[512] = "";
    mg_corescope_free(&mg_corescope);
    cr_assert_eq(mg_corescope_load(&mg_corescope, fx.config, err, sizeof err), 0, "%s", err);
}

static void start(bool test_config)
{
    need_shared();
    mg_test_tmpdir(fx.dir, sizeof fx.dir);
    snprintf(fx.db, sizeof fx.db, "%s/fresh.db", fx.dir);
    char err[512] = "";
    cr_assert_eq(
        mg_fixture_freshen(FIXTURE_MIGRATED_DB, fx.db, (int64_t)time(NULL), err, sizeof err), 0,
        "freshening: %s", err);
    cr_assert(mg_test_ctx_open(&fx.t, fx.db));
    fx.open = true;
    json_error_t jerr;
    fx.expected = json_load_file(EXPECTED, 0, &jerr);
    cr_assert_not_null(fx.expected, "%s: %s", EXPECTED, jerr.text);
    load_config(test_config);
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

static int by_text(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The sorted values (as text) of `field` of the answer's entries (the "nodes" or "packets"
 * of an object, else the array), joined by commas; malloc'ed. */
static char *field_list(json_t *answer, const char *field)
{
    json_t *list = json_is_object(answer) ? json_object_get(answer, "nodes") : answer;
    if (!list)
        list = json_object_get(answer, "packets");
    if (!list)
        list = json_object_get(answer, "observers");
    cr_assert(json_is_array(list));
    size_t n = json_array_size(list), i;
    const char **v = calloc(n + 1, sizeof *v);
    char(*number)[24] = calloc(n + 1, sizeof *number);
    json_t *e;
    json_array_foreach(list, i, e)
    {
        json_t *x = json_object_get(e, field);
        if (json_is_integer(x))
            snprintf(number[i], sizeof number[i], "%lld", (long long)json_integer_value(x));
        v[i] = json_is_integer(x) ? number[i] : json_string_value(x);
    }
    qsort(v, n, sizeof *v, by_text);
    size_t cap = 1;
    for (i = 0; i < n; i++)
        cap += (v[i] ? strlen(v[i]) : 4) + 1;
    char *out = calloc(1, cap);
    for (i = 0; i < n; i++) {
        if (i)
            strcat(out, ",");
        strcat(out, v[i] ? v[i] : "null");
    }
    free(v);
    free(number);
    return out;
}

static char *recorded(const char *config, const char *target)
{
    json_t *list = json_object_get(json_object_get(fx.expected, config), target);
    cr_assert(json_is_array(list), "no recorded answer for %s %s", config, target);
    size_t i, cap = 1;
    json_t *e;
    json_array_foreach(list, i, e) cap += strlen(json_string_value(e)) + 1;
    char *out = calloc(1, cap);
    json_array_foreach(list, i, e)
    {
        if (i)
            strcat(out, ",");
        strcat(out, json_string_value(e));
    }
    return out;
}

static void expect_recorded(const char *config, const char *target, const char *field)
{
    json_t *answer = get(target, 200);
    char *got = field_list(answer, field), *want = recorded(config, target);
    cr_expect_str_eq(got, want, "%s (%s): meshgate's set differs from CoreScope's:\n%.300s\n%.300s",
                     target, config, got, want);
    free(got);
    free(want);
    json_decref(answer);
}

static json_int_t total_of(const char *target)
{
    json_t *a = get(target, 200);
    json_int_t total = json_integer_value(json_object_get(a, "total"));
    json_decref(a);
    return total;
}

Test(visibility, the_example_config_lists_corescopes_156_nodes)
{
    start(false);
    expect_recorded("example", "/api/nodes?limit=5000", "public_key");
    cr_expect_eq(total_of("/api/nodes?limit=5000"), 156);
    /* Where meshgate differs on purpose: the filter comes before the page, so the default
     * page holds 50 nodes and the total is the list's (CoreScope filters the page it read:
     * 38 nodes, "total": 38). */
    json_t *a = get("/api/nodes", 200);
    cr_expect_eq(json_array_size(json_object_get(a, "nodes")), 50);
    cr_expect_eq(json_integer_value(json_object_get(a, "total")), 156);
    /* The role counts count every node, as CoreScope's. */
    json_t *counts = json_object_get(a, "counts");
    cr_expect_eq(json_integer_value(json_object_get(counts, "repeaters")) +
                     json_integer_value(json_object_get(counts, "rooms")) +
                     json_integer_value(json_object_get(counts, "companions")) +
                     json_integer_value(json_object_get(counts, "sensors")),
                 200);
    json_decref(a);
    /* An outside node is left out of the list only. */
    json_decref(get("/api/nodes/" OUTSIDE, 200));
    a = get("/api/nodes/search?q=Hollister", 200);
    char *found = field_list(a, "public_key");
    cr_expect(strstr(found, OUTSIDE), "search finds the outside node: %s", found);
    free(found);
    json_decref(a);
}

Test(visibility, areas_hold_the_nodes_corescope_puts_in_them)
{
    start(false);
    expect_recorded("example", "/api/nodes?limit=5000&area=BAY", "public_key");
    expect_recorded("example", "/api/nodes?limit=5000&area=SJC", "public_key");
    cr_expect_eq(total_of("/api/nodes?limit=5000&area=BAY"), 98);
    cr_expect_eq(total_of("/api/nodes?area=BAY&limit=10"), 98);
    expect_recorded("example", "/api/nodes/clock-skew", "pubkey");
    expect_recorded("example", "/api/nodes/clock-skew?area=BAY", "pubkey");
    expect_recorded("example", "/api/nodes/clock-skew?area=SJC", "pubkey");
    expect_recorded("example", "/api/packets?limit=1000&area=BAY", "id");
    expect_recorded("example", "/api/packets?limit=1000&area=SJC", "id");
    cr_expect_eq(total_of("/api/packets?limit=5&area=SJC"), 17);
    /* An area the file does not have filters nothing. */
    cr_expect_eq(total_of("/api/nodes?area=NOWHERE"), 156);
    cr_expect_eq(total_of("/api/packets?area=NOWHERE"), total_of("/api/packets"));
}

/* The test configuration's answers for each node route: CoreScope's statuses. */
Test(visibility, hidden_blacklisted_and_outside_nodes_answer_as_corescope)
{
    start(true);
    expect_recorded("test", "/api/nodes?limit=5000", "public_key");
    expect_recorded("test", "/api/nodes/search?q=EW", "public_key");
    expect_recorded("test", "/api/nodes/search?q=GOON", "public_key");
    expect_recorded("test", "/api/nodes/bulk-health?limit=200", "public_key");
    static const char *const routes[] = {"",           "/health", "/paths",
                                         "/neighbors", "/reach",  "/clock-skew"};
    static const struct {
        const char *key;
        int status; /* on every route */
    } nodes[] = {
        {HIDDEN, 404},
        {BLACKLISTED, 404},
        {"D3E18E324DB56F7BE472DBBC267ECCA54BC87892F42B2614977B069672A7AE61", 404},
        {OUTSIDE, 200},
    };
    for (size_t n = 0; n < sizeof nodes / sizeof nodes[0]; n++)
        for (size_t r = 0; r < sizeof routes / sizeof routes[0]; r++) {
            char target[200];
            snprintf(target, sizeof target, "/api/nodes/%s%s", nodes[n].key, routes[r]);
            json_t *a = get(target, nodes[n].status);
            if (nodes[n].status == 404)
                cr_expect_str_eq(json_string_value(json_object_get(a, "error")), "Not found", "%s",
                                 target);
            json_decref(a);
        }
    /* A short link to a hidden node (CoreScope resolves it, then answers 404). */
    json_decref(get("/api/nodes/b3a462eb", 404));
    /* No hop resolves to a hidden node. */
    json_t *a = get("/api/resolve-hops?hops=b3a4,d3e1,27d7", 200);
    json_t *resolved = json_object_get(a, "resolved");
    cr_expect_str_eq(
        json_string_value(json_object_get(json_object_get(resolved, "b3a4"), "confidence")),
        "no_match");
    cr_expect_str_eq(
        json_string_value(json_object_get(json_object_get(resolved, "d3e1"), "confidence")),
        "no_match");
    cr_expect_str_eq(
        json_string_value(json_object_get(json_object_get(resolved, "27d7"), "pubkey")), OUTSIDE);
    json_decref(a);
    /* Where meshgate differs on purpose: CoreScope's clock-skew routes show a hidden node
     * (its /clock-skew answers 200, the fleet lists it); meshgate leaves it out of both. */
    char *want = recorded("test", "/api/nodes/clock-skew");
    a = get("/api/nodes/clock-skew", 200);
    char *got = field_list(a, "pubkey");
    cr_expect(strstr(want, HIDDEN) && !strstr(got, HIDDEN));
    size_t hidden_with_skew = 0;
    for (char *k = strtok(want, ","); k; k = strtok(NULL, ","))
        if (!strstr(got, k))
            hidden_with_skew++;
    cr_expect_eq(hidden_with_skew, 5, "the 5 EW- nodes with a skew are all that is left out");
    cr_expect_eq(json_array_size(a), 137 - 5);
    free(want);
    free(got);
    json_decref(a);
}

/* ---- the predicate itself ---- */

Test(visibility, the_geo_filter_buffer_is_corescopes_flat_distance_to_an_edge)
{
    char dir[128], path[256], err[512] = "";
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    /* The example's polygon: its south edge at 37.2 (lon -122.52 to -121.8), bufferKm 20. */
    fputs("{\"geo_filter\": {\"polygon\": [[37.8,-122.52],[37.8,-121.8],[37.2,-121.8],"
          "[37.2,-122.52]], \"bufferKm\": 20}, \"hiddenNamePrefixes\": [\"\", \"X-\"],"
          " \"nodeBlacklist\": [\"  \", \"AbC\"]}",
          f);
    fclose(f);
    mg_corescope_free(&mg_corescope);
    cr_assert_eq(mg_corescope_load(&mg_corescope, path, err, sizeof err), 0, "%s", err);
    /* 111 km a degree of latitude: 0.17 degrees south is 18.9 km, 0.19 is 21.1 km. */
    cr_expect(mg_node_listed("k", "n", true, 37.2 - 0.17, -122.0, false));
    cr_expect(!mg_node_listed("k", "n", true, 37.2 - 0.19, -122.0, false));
    cr_expect(mg_node_listed("k", "n", true, 37.5, -122.0, false), "inside");
    cr_expect(mg_node_listed("k", "n", true, 0, 0, false), "(0, 0): no fix");
    cr_expect(mg_node_listed("k", "n", false, 0, 0, false), "no position");
    cr_expect(mg_node_listed("k", "n", true, 40.0, -100.0, true), "foreign");
    /* The empty prefix and the blank key hide nothing; keys compare trimmed, any case. */
    cr_expect(!mg_node_hidden("k", "n"));
    cr_expect(mg_node_hidden("k", "X-ray"));
    cr_expect(!mg_node_hidden("k", "x-ray"), "a prefix compares exactly");
    cr_expect(mg_node_hidden(" abc ", NULL) && mg_node_hidden("ABC", NULL));
    cr_expect(!mg_node_listed("abc", "n", true, 37.5, -122.0, true), "hidden beats foreign");
    /* A key of any length is hidden (found by fuzz/corescope_config.c: 160 bytes were not). */
    char long_key[300];
    memset(long_key, 'F', 200);
    long_key[200] = '\0';
    char text[400];
    snprintf(text, sizeof text, "{\"nodeBlacklist\": [\" %s \"]}", long_key);
    mg_corescope_free(&mg_corescope);
    cr_assert_eq(
        mg_corescope_load_text(&mg_corescope, "t", text, strlen(text), NULL, 0, err, sizeof err), 0,
        "%s", err);
    cr_expect(mg_node_hidden(long_key, NULL), "a 200-byte key is hidden");
    long_key[199] = '\0';
    cr_expect(!mg_node_hidden(long_key, NULL), "and only that key");
    /* A wrong type is refused, naming the key. */
    f = fopen(path, "w");
    fputs("{\"nodeBlacklist\": \"abc\"}", f);
    fclose(f);
    mg_corescope_free(&mg_corescope);
    cr_expect_neq(mg_corescope_load(&mg_corescope, path, err, sizeof err), 0);
    cr_expect(strstr(err, "nodeBlacklist"), "%s", err);
    mg_corescope_free(&mg_corescope);
    mg_test_rmdir(dir);
}

/* ---- a reload ---- */

/* ---- observerBlacklist ---- */

#define BLACKLISTED_OBSERVER "1E598D0F11783A33C04D701FF3151FD8D8C0A96686D88267DF70993F59EF760C"

/* Sets observerBlacklist in the private config.json (as an operator may write it: lowercase,
 * spaces around, an empty entry) and loads it. */
static void blacklist_observers(void)
{
    json_error_t jerr;
    json_t *root = json_load_file(fx.config, 0, &jerr);
    cr_assert_not_null(root, "%s: %s", fx.config, jerr.text);
    json_object_set_new(
        root, "observerBlacklist",
        json_pack("[sss]",
                  " 1e598d0f11783a33c04d701ff3151fd8d8c0a96686d88267df70993f59ef760c"
                  " ",
                  "kpabap", ""));
    cr_assert_eq(json_dump_file(root, fx.config, 0), 0);
    json_decref(root);
    char err[512] = "";
    mg_corescope_free(&mg_corescope);
    cr_assert_eq(mg_corescope_load(&mg_corescope, fx.config, err, sizeof err), 0, "%s", err);
}

static json_int_t int_at(const char *target, const char *key)
{
    json_t *a = get(target, 200);
    json_int_t v = json_integer_value(json_object_get(a, key));
    json_decref(a);
    return v;
}

/* Route by route, as CoreScope's server answers with the same file: the list leaves a
 * blacklisted observer out, its own record is 404; the rest still name it. */
Test(visibility, a_blacklisted_observer_answers_as_corescope)
{
    start(false);
    json_int_t observers = int_at("/api/stats", "totalObservers");
    cr_expect_eq(observers, 31);
    json_t *before = get("/api/observers/" BLACKLISTED_OBSERVER "/analytics", 200);
    blacklist_observers();
    expect_recorded("observer_blacklist", "/api/observers", "id");
    static const char *const gone[] = {
        BLACKLISTED_OBSERVER, "1e598d0f11783a33c04d701ff3151fd8d8c0a96686d88267df70993f59ef760c",
        "kpabap", "KPABAP", "%20KPABAP%20"};
    for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++) {
        char target[160];
        snprintf(target, sizeof target, "/api/observers/%s", gone[i]);
        json_t *a = get(target, 404);
        cr_expect_str_eq(json_string_value(json_object_get(a, "error")), "Observer not found", "%s",
                         target);
        json_decref(a);
    }
    json_decref(get(
        "/api/observers/D5EF2ED77CEABCB22082F8794D5F9D89F2257E70533863E924DEBE6EBDDA312A", 200));
    /* Its analytics, its packets and the counts still answer, as CoreScope's do. */
    json_t *after = get("/api/observers/" BLACKLISTED_OBSERVER "/analytics", 200);
    cr_expect(json_array_size(json_object_get(after, "timeline")) > 0);
    cr_expect(json_equal(json_object_get(before, "timeline"), json_object_get(after, "timeline")));
    json_decref(before);
    json_decref(after);
    expect_recorded("observer_blacklist",
                    "/api/packets?observer=" BLACKLISTED_OBSERVER "&limit=1000", "id");
    cr_expect_eq(int_at("/api/stats", "totalObservers"), observers);
}

static struct mg_test_server server;

static int status_of(const char *target)
{
    struct mg_test_response r;
    int status = mg_test_get(server.port, target, NULL, &r) ? r.status : -1;
    mg_test_response_free(&r);
    return status;
}

static bool outside_is_gone(void *arg)
{
    (void)arg;
    return status_of("/api/nodes/" OUTSIDE) == 404;
}

Test(visibility, a_reload_applies_the_files_new_blacklist)
{
    need_shared();
    mg_test_tmpdir(fx.dir, sizeof fx.dir);
    snprintf(fx.db, sizeof fx.db, "%s/fresh.db", fx.dir);
    char err[512] = "", setting[320];
    cr_assert_eq(
        mg_fixture_freshen(FIXTURE_MIGRATED_DB, fx.db, (int64_t)time(NULL), err, sizeof err), 0,
        "%s", err);
    load_config(false);
    snprintf(setting, sizeof setting, "MESHGATE_CORESCOPE_CONFIG=%s", fx.config);
    const char *env[] = {setting, NULL};
    cr_assert(mg_test_server_start(&server, fx.db, env));
    cr_expect_eq(status_of("/api/nodes/" OUTSIDE), 200);
    cr_expect_eq(status_of("/api/nodes/" HIDDEN), 200);
    cr_expect_eq(status_of("/api/observers/" BLACKLISTED_OBSERVER), 200);
    /* The operator blacklists the outside node and an observer, and hides EW-. */
    FILE *f = fopen(fx.config, "r");
    json_error_t jerr;
    json_t *root = json_loadf(f, 0, &jerr);
    fclose(f);
    json_object_set_new(root, "nodeBlacklist", json_pack("[s]", OUTSIDE));
    json_object_set_new(root, "hiddenNamePrefixes", json_pack("[s]", "EW-"));
    json_object_set_new(root, "observerBlacklist", json_pack("[s]", BLACKLISTED_OBSERVER));
    cr_assert_eq(json_dump_file(root, fx.config, 0), 0);
    json_decref(root);
    cr_assert_eq(kill(server.pid, SIGHUP), 0);
    cr_expect(mg_test_wait_until(outside_is_gone, NULL, 30000, 50),
              "the reloaded workers still describe the blacklisted node");
    char *log = mg_test_wait_log(&server, "reload done", 1, 30000);
    free(log);
    cr_expect_eq(status_of("/api/nodes/" OUTSIDE), 404);
    cr_expect_eq(status_of("/api/nodes/" HIDDEN), 404);
    cr_expect_eq(status_of("/api/nodes/" OUTSIDE "/health"), 404);
    cr_expect_eq(status_of("/api/observers/" BLACKLISTED_OBSERVER), 404);
    mg_test_server_stop(&server, 10000);
}

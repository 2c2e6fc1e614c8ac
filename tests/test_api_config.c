/* SPDX-License-Identifier: ISC */
/*
 * CoreScope's configuration endpoints (/api/config/NAME), /api/health and /api/scope-stats.
 *
 * The configuration bodies are checked first where they are made (corescope_config.h), against
 * what CoreScope's own server answers for the same file: the exact bodies below were read from
 * CoreScope's server (its peer build, ../shared/corescope/peer) over the same files, and agree
 * with its source (server/cmd/server/config.go, routes.go). Then with the real binary: a
 * malformed file stops the start (78) and fails --check, naming the file, line and column;
 * SIGHUP reads the file again and keeps the old one when the new one is malformed; /regions,
 * /health and /scope-stats answer on CoreScope's fixture (freshened), checked with SQL.
 */
#include "corescope_config.h"
#include "fixture.h"
#include "harness.h"
#include "jsoncheck.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FIXTURE_DB MESHGATE_SOURCE_DIR "/../shared/data/corescope-e2e-fixture.db"
#define FIXTURE_MIGRATED_DB MESHGATE_SOURCE_DIR "/../shared/data/corescope-e2e-fixture-migrated.db"
#define EXAMPLE_CONFIG MESHGATE_SOURCE_DIR "/../shared/corescope/server/config.example.json"

static char dir[128];

static void make_dir(void)
{
    mg_test_tmpdir(dir, sizeof dir);
    cr_assert(dir[0], "no temporary directory");
}

static void remove_dir(void)
{
    if (dir[0])
        mg_test_rmdir(dir);
    dir[0] = '\0';
}

TestSuite(api_config, .init = make_dir, .fini = remove_dir, .timeout = 90);

/* Writes text to dir/name (as an editor saves: a new file moved over the old); its path. */
static const char *write_file(const char *name, const char *text)
{
    static char path[300];
    char tmp[320];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.new", path);
    FILE *f = fopen(tmp, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    cr_assert_eq(rename(tmp, path), 0);
    return path;
}

static struct mg_corescope_config load_ok(const char *path)
{
    struct mg_corescope_config c;
    char err[1024];
    cr_assert_eq(mg_corescope_load(&c, path, err, sizeof err), 0, "loading %s: %s", path, err);
    return c;
}

static void expect_body(const struct mg_corescope_config *c, enum mg_corescope_body b,
                        const char *name, const char *want)
{
    cr_assert_not_null(c->body[b], "%s: no body", name);
    cr_expect_eq(c->body_len[b], strlen(c->body[b]), "%s: a NUL inside", name);
    cr_expect_str_eq(c->body[b], want, "%s differs from CoreScope's answer", name);
    cr_expect(json_body_is_strict(c->body[b], c->body_len[b]), "%s is not strict JSON", name);
}

/* ---- the bodies, without a server ---- */

Test(api_config, without_a_file_every_body_is_corescopes_builtin_default)
{
    struct mg_corescope_config c = load_ok("");
    expect_body(&c, MG_CS_CACHE, "cache", "{}\n");
    expect_body(
        &c, MG_CS_CLIENT, "client",
        "{\"roles\":null,\"healthThresholds\":{\"infraDegradedMs\":86400000,\"infraSilentMs\":"
        "259200000,\"nodeDegradedMs\":3600000,\"nodeSilentMs\":86400000,\"observerOnlineMs\":"
        "3600000,\"observerStaleMs\":86400000},\"map\":{\"tiles\":{}},\"tiles\":null,"
        "\"snrThresholds\":null,\"distThresholds\":null,\"maxHopDist\":null,\"limits\":null,"
        "\"perfSlowMs\":null,\"wsReconnectMs\":null,\"cacheInvalidateMs\":null,\"externalUrls\":"
        "null,\"propagationBufferMs\":5000,\"liveMapMaxNodes\":2000,\"timestamps\":{"
        "\"defaultMode\":\"ago\",\"timezone\":\"local\",\"formatPreset\":\"iso\","
        "\"customFormat\":\"\",\"allowCustomFormat\":false},\"customizer\":{\"disabledTabs\":[]},"
        "\"clientRxCoverage\":false}\n");
    expect_body(&c, MG_CS_MAP, "map", "{\"center\":[37.45,-122],\"zoom\":9}\n");
    expect_body(&c, MG_CS_GEO_FILTER, "geo-filter",
                "{\"bufferKm\":0,\"polygon\":null,\"writeEnabled\":false}\n");
    expect_body(&c, MG_CS_AREAS, "areas", "[]\n");
    expect_body(&c, MG_CS_AREAS_POLYGONS, "areas/polygons", "[]\n");
    cr_expect_eq(c.region_count, 0u);
    /* The theme: CoreScope's defaults (a few, and the order of its parts). */
    const char *t = c.body[MG_CS_THEME];
    cr_assert(json_body_is_strict(t, c.body_len[MG_CS_THEME]));
    char keys[256];
    json_keys(t, "", keys, sizeof keys);
    cr_expect_str_eq(keys, "branding,theme,themeDark,nodeColors,typeColors,home,markerStroke");
    cr_expect(json_str_at_eq(t, "branding.siteName", "CoreScope"));
    cr_expect(json_str_at_eq(t, "theme.accent", "#4a9eff"));
    cr_expect(json_str_at_eq(t, "themeDark.background", "#0f0f23"));
    cr_expect(json_str_at_eq(t, "nodeColors.observer", "#8b5cf6"));
    cr_expect(json_str_at_eq(t, "typeColors.REQ", "#a855f7"));
    cr_expect(json_str_at_eq(t, "typeColors.REQUEST", "#a855f7"), "REQ is also sent as REQUEST");
    cr_expect(json_str_at_eq(t, "home.heroTitle", "CoreScope"));
    cr_expect_eq(json_length(json_at(t, "home.steps")), 4);
    cr_expect_eq(json_length(json_at(t, "home.footerLinks")), 2);
    cr_expect(json_str_at_eq(t, "markerStroke.color", "rgba(255,255,255,0.85)"));
    cr_expect_eq(json_int_at(t, "markerStroke.width"), 1);
    for (const char *part = json_first(t); part; part = json_next(part))
        cr_expect(json_keys_sorted(part), "a part of the theme has unsorted keys");
    mg_corescope_free(&c);
}

/* Every rule of CoreScope's loading at once, the answers read from CoreScope's server. */
static const char odd_config[] =
    "{\"mapDarkTileProvider\":\"stadia-dark\",\"tiles\":{\"lightDefault\":\"osm\",\"x\":1},\n"
    " \"map\":{\"tiles\":{\"lightDefault\":\"carto-light\"},\"other\":[1,2.5,1e-7,1e21]},\n"
    " \"timestamps\":{\"defaultMode\":\" ABSOLUTE \",\"timezone\":\"mars\",\"formatPreset\":"
    "\"Locale\",\"customFormat\":\"%Y <b>&\",\"allowCustomFormat\":true},\n"
    " \"healthThresholds\":{\"infraDegradedHours\":0.5,\"nodeSilentHours\":2.25,"
    "\"observerOnlineMinutes\":5,\"observerStaleMinutes\":-3},\n"
    " \"liveMap\":{\"propagationBufferMs\":1234,\"maxNodes\":50},\n"
    " \"customizer\":{\"disabledTabs\":[\"branding\",\"export\"]},\n"
    " \"clientRxCoverage\":{\"enabled\":true},\"debugAffinity\":true,\n"
    " \"roles\":{\"repeater\":{\"label\":\"R\"}},\"maxHopDist\":12.5,\"perfSlowMs\":200,"
    "\"limits\":{\"a\":1},\n"
    " \"typeColors\":{\"REQUEST\":\"#000000\",\"ADVERT\":\"#111111\"},\n"
    " \"branding\":{\"siteName\":\"Mesh \\u2028 <X>\"},\n"
    " \"home\":{\"heroTitle\":\"Hi\"},\n"
    " \"mapDefaults\":{\"center\":[51.5,-0.12,9],\"zoom\":0},\n"
    " \"geo_filter\":{\"polygon\":[[1,2],[3],[5,6,7]],\"bufferKm\":1.5},\n"
    " \"areas\":{\"Z\":{\"label\":\"Zed\",\"latMin\":1},\"A\":{\"polygon\":[[1,2]]},"
    "\"M\":{\"label\":\"Em\",\"polygon\":[]},\"_comment\":\"text\"},\n"
    " \"regions\":{\"XYZ\":\"Somewhere\",\"SJC\":\"San Jos\\u00e9\"},\n"
    " \"cacheTTL\":{\"stats\":5,\"b\":{\"z\":1,\"a\":2}}\n"
    "}\n";

Test(api_config, a_file_is_read_as_corescope_reads_it)
{
    char path[300];
    snprintf(path, sizeof path, "%s", write_file("config.json", odd_config));
    write_file("theme.json", "{\"theme\":{\"accent\":\"#123456\"},\"typeColors\":{\"REQ\":"
                             "\"#222222\"},\"markerStroke\":{\"width\":3}}");
    struct mg_corescope_config c = load_ok(path);
    expect_body(&c, MG_CS_CACHE, "cache", "{\"b\":{\"a\":2,\"z\":1},\"stats\":5}\n");
    expect_body(
        &c, MG_CS_CLIENT, "client",
        "{\"roles\":{\"repeater\":{\"label\":\"R\"}},\"healthThresholds\":{\"infraDegradedMs\":"
        "1800000,\"infraSilentMs\":259200000,\"nodeDegradedMs\":3600000,\"nodeSilentMs\":8100000,"
        "\"observerOnlineMs\":300000,\"observerStaleMs\":86400000},\"map\":{\"other\":[1,2.5,"
        "1e-7,1e+21],\"tiles\":{\"darkDefault\":\"stadia-dark\",\"lightDefault\":\"carto-light\","
        "\"x\":1}},\"tiles\":{\"lightDefault\":\"osm\",\"x\":1},\"snrThresholds\":null,"
        "\"distThresholds\":null,\"maxHopDist\":12.5,\"limits\":{\"a\":1},\"perfSlowMs\":200,"
        "\"wsReconnectMs\":null,\"cacheInvalidateMs\":null,\"externalUrls\":null,"
        "\"propagationBufferMs\":1234,\"liveMapMaxNodes\":100,\"timestamps\":{\"defaultMode\":"
        "\"absolute\",\"timezone\":\"local\",\"formatPreset\":\"locale\",\"customFormat\":\"%Y "
        "\\u003cb\\u003e\\u0026\",\"allowCustomFormat\":true},\"debugAffinity\":true,"
        "\"mapDarkTileProvider\":\"stadia-dark\",\"customizer\":{\"disabledTabs\":[\"branding\","
        "\"export\"]},\"clientRxCoverage\":true}\n");
    expect_body(&c, MG_CS_MAP, "map", "{\"center\":[51.5,-0.12,9],\"zoom\":9}\n");
    expect_body(&c, MG_CS_GEO_FILTER, "geo-filter",
                "{\"bufferKm\":1.5,\"polygon\":[[1,2],[3,0],[5,6]],\"writeEnabled\":false}\n");
    /* Sorted by key (CoreScope: in Go's random map order); no label: not listed. */
    expect_body(&c, MG_CS_AREAS, "areas",
                "[{\"key\":\"M\",\"label\":\"Em\"},{\"key\":\"Z\",\"label\":\"Zed\"}]\n");
    expect_body(&c, MG_CS_AREAS_POLYGONS, "areas/polygons",
                "[{\"key\":\"A\",\"label\":\"\",\"polygon\":[[1,2]]},{\"key\":\"M\",\"label\":"
                "\"Em\"},{\"key\":\"Z\",\"label\":\"Zed\",\"latMin\":1},{\"key\":\"_comment\","
                "\"label\":\"\"}]\n");
    cr_assert_eq(c.region_count, 2u);
    cr_expect_str_eq(c.regions[0].code, "SJC");
    cr_expect_str_eq(c.regions[0].name, "San Jos\xc3\xa9");
    cr_expect_str_eq(c.regions[1].code, "XYZ");
    const char *t = c.body[MG_CS_THEME];
    cr_expect(json_str_at_eq(t, "theme.accent", "#123456"), "theme.json wins");
    cr_expect(json_str_at_eq(t, "theme.navBg", "#0f0f23"), "defaults stay under overlays");
    cr_expect(json_str_at_eq(t, "typeColors.REQ", "#222222"));
    cr_expect(json_str_at_eq(t, "typeColors.REQUEST", "#222222"));
    cr_expect(json_str_at_eq(t, "typeColors.ADVERT", "#111111"));
    cr_expect(json_str_at_eq(t, "branding.siteName", "Mesh \xe2\x80\xa8 <X>"));
    cr_expect(strstr(t, "Mesh \\u2028 \\u003cX\\u003e"), "escaped as CoreScope escapes");
    cr_expect(json_str_at_eq(t, "home.heroTitle", "Hi"));
    cr_expect_eq(json_length(json_at(t, "home.steps")), 4, "home is merged key by key");
    cr_expect_eq(json_int_at(t, "markerStroke.width"), 3);
    cr_expect(json_str_at_eq(t, "markerStroke.color", "rgba(255,255,255,0.85)"));
    mg_corescope_free(&c);
}

/* CoreScope's own example file, when ../shared has it. */
Test(api_config, corescopes_example_file)
{
    if (access(EXAMPLE_CONFIG, R_OK) != 0)
        cr_skip_test("%s not present (../shared/corescope, which CI provides)", EXAMPLE_CONFIG);
    struct mg_corescope_config c = load_ok(EXAMPLE_CONFIG);
    expect_body(&c, MG_CS_MAP, "map", "{\"center\":[37.45,-122],\"zoom\":9}\n");
    expect_body(&c, MG_CS_GEO_FILTER, "geo-filter",
                "{\"bufferKm\":20,\"polygon\":[[37.8,-122.52],[37.8,-121.8],[37.2,-121.8],[37.2,"
                "-122.52]],\"writeEnabled\":false}\n");
    expect_body(&c, MG_CS_AREAS, "areas",
                "[{\"key\":\"BAY\",\"label\":\"Bay Area\"},{\"key\":\"SJC\",\"label\":\"San "
                "Jose\"}]\n");
    const char *client = c.body[MG_CS_CLIENT];
    cr_expect(json_str_at_eq(client, "map.tiles.darkDefault", "carto-dark"));
    cr_expect(json_is_at(client, "map.tiles.providers.carto.enabled", "true"));
    cr_expect_eq(json_int_at(client, "healthThresholds.observerStaleMs"), 1440 * 60000);
    cr_expect_eq(json_int_at(c.body[MG_CS_CACHE], "nodeDetail"), 300);
    cr_expect(json_str_at_eq(c.body[MG_CS_THEME], "theme.statusGreen", "#45644c"));
    cr_expect_eq(c.region_count, 4u);
    mg_corescope_free(&c);
}

static void expect_refused(const char *path, const char *want)
{
    struct mg_corescope_config c;
    char err[1024];
    cr_expect_eq(mg_corescope_load(&c, path, err, sizeof err), -1, "%s was accepted", path);
    cr_expect(strstr(err, "MESHGATE_CORESCOPE_CONFIG="), "no variable named: %s", err);
    cr_expect(strstr(err, path), "no file named: %s", err);
    cr_expect(strstr(err, want), "want \"%s\" in: %s", want, err);
    cr_expect_eq(c.body[MG_CS_CLIENT], NULL, "a refused file left a body behind");
}

Test(api_config, a_malformed_file_is_refused_with_its_line_and_column)
{
    expect_refused(write_file("a.json", "{\n  \"regions\": {\"SJC\": \"x\",}\n}\n"),
                   "line 2, column 26");
    expect_refused(write_file("b.json", "[1, 2]"), "must hold one JSON object");
    expect_refused(write_file("c.json", ""), "line 1");
    expect_refused(write_file("d.json", "{\"liveMap\":{\"maxNodes\":\"x\"}}"),
                   "\"liveMap.maxNodes\" must be a whole number");
    expect_refused(write_file("e.json", "{\"regions\":{\"SJC\":7}}"), "\"regions\" must be");
    expect_refused(write_file("f.json", "{\"geo_filter\":{\"polygon\":[\"x\"]}}"),
                   "\"geo_filter.polygon\" must be a list of [lat, lon] pairs");
    expect_refused(write_file("g.json", "{\"cacheTTL\":[]}"), "\"cacheTTL\" must be an object");
    expect_refused(write_file("h.json", "{\"perfSlowMs\":1.5}"), "\"perfSlowMs\"");
    /* Durations whose milliseconds would not fit (found by fuzz/corescope_config.c). */
    expect_refused(write_file("i.json", "{\"healthThresholds\":{\"nodeSilentHours\":1e300}}"),
                   "\"healthThresholds.nodeSilentHours\" must be a number of hours up to");
    expect_refused(
        write_file("j.json", "{\"healthThresholds\":{\"observerOnlineMinutes\":"
                             "9223372036854775807}}"),
        "\"healthThresholds.observerOnlineMinutes\" must be a whole number of minutes up to");
    expect_refused(write_file("k.json", "{\"healthThresholds\":{\"relayActiveHours\":2e9}}"),
                   "\"healthThresholds.relayActiveHours\"");
    char missing[300];
    snprintf(missing, sizeof missing, "%s/none.json", dir);
    expect_refused(missing, "cannot read it");
    char path[300];
    snprintf(path, sizeof path, "%s", write_file("config.json", "{}"));
    write_file("theme.json", "{\"theme\":");
    expect_refused(path, "theme.json");
}

/* ---- the real binary ---- */

static int run_exit(const char *config, bool check, char *out, size_t cap)
{
    char v_db[300], v_cfg[400], v_listen[64];
    snprintf(v_db, sizeof v_db, "MESHGATE_DB=%s/t.db", dir);
    if (access(v_db + strlen("MESHGATE_DB="), F_OK) != 0)
        cr_assert_eq(mg_test_make_db(v_db + strlen("MESHGATE_DB="), false, NULL), 0);
    snprintf(v_cfg, sizeof v_cfg, "MESHGATE_CORESCOPE_CONFIG=%s", config);
    snprintf(v_listen, sizeof v_listen, "MESHGATE_LISTEN=127.0.0.1:%d", mg_test_free_port());
    const char *env[] = {
        v_db, v_cfg, v_listen, "MESHGATE_WORKERS=1", check ? "MG_TEST_ARG=--check" : NULL, NULL};
    int status = mg_test_run_expect_exit(env, out, cap, 20000);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

Test(api_config, a_malformed_file_stops_the_start_and_fails_the_check)
{
    char path[300];
    snprintf(path, sizeof path, "%s", write_file("config.json", "{\"map\": {\"tiles\": }}"));
    static char out[16384];
    cr_expect_eq(run_exit(path, false, out, sizeof out), 78, "the start: %s", out);
    cr_expect(strstr(out, path) && strstr(out, "line 1, column 19"), "the start said: %s", out);
    cr_expect_eq(run_exit(path, true, out, sizeof out), 78, "--check: %s", out);
    cr_expect(strstr(out, path) && strstr(out, "line 1, column 19"), "--check said: %s", out);
    write_file("config.json", "{\"regions\":{\"AMS\":\"Amsterdam\"}}");
    cr_expect_eq(run_exit(path, true, out, sizeof out), 0, "--check of a good file: %s", out);
}

static char *get_body(const struct mg_test_server *s, const char *target, int want_status)
{
    struct mg_test_response r;
    cr_assert(mg_test_get(s->port, target, NULL, &r), "GET %s: no answer", target);
    cr_expect_eq(r.status, want_status, "GET %s: %d %s", target, r.status, r.body);
    char v[128];
    cr_expect(mg_test_header(&r, "Content-Type", v, sizeof v) && strcmp(v, "application/json") == 0,
              "GET %s: not JSON", target);
    cr_expect(mg_test_header(&r, "Cache-Control", v, sizeof v) && strcmp(v, "no-store") == 0,
              "GET %s: not no-store", target);
    cr_expect(json_body_is_strict(r.body, r.body_len), "GET %s: %s", target, r.body);
    char *body = strdup(r.body);
    mg_test_response_free(&r);
    return body;
}

static char *wait_log(const struct mg_test_server *s, const char *needle, int times)
{
    return mg_test_wait_log(s, needle, times, 30000);
}

Test(api_config, sighup_reads_the_file_again_and_keeps_the_old_one_when_it_is_malformed)
{
    const char *path =
        write_file("config.json", "{\"mapDefaults\":{\"center\":[52.37,4.9],\"zoom\":7}}");
    char v_cfg[400];
    snprintf(v_cfg, sizeof v_cfg, "MESHGATE_CORESCOPE_CONFIG=%s", path);
    const char *env[] = {v_cfg, NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    char *body = get_body(&s, "/api/config/map", 200);
    cr_expect_str_eq(body, "{\"center\":[52.37,4.9],\"zoom\":7}\n");
    free(body);

    write_file("config.json", "{\"mapDefaults\":{\"zoom\":3}}");
    cr_assert_eq(kill(s.pid, SIGHUP), 0);
    free(wait_log(&s, "reload done", 1));
    body = get_body(&s, "/api/config/map", 200);
    cr_expect_str_eq(body, "{\"center\":[37.45,-122],\"zoom\":3}\n", "after the reload");
    free(body);

    write_file("config.json", "{\"mapDefaults\":{\"zoom\":4}");
    cr_assert_eq(kill(s.pid, SIGHUP), 0);
    char *log = wait_log(&s, "nothing changed", 1);
    cr_expect(log && strstr(log, path) && strstr(log, "line 1, column"),
              "the refused reload does not say why: %s", log);
    free(log);
    body = get_body(&s, "/api/config/map", 200);
    cr_expect_str_eq(body, "{\"center\":[37.45,-122],\"zoom\":3}\n", "the old file is kept");
    free(body);
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
}

/* ---- on CoreScope's fixture, freshened ---- */

static struct mg_test_server fx;
static char fx_db[300];
static int64_t fx_now;

static void fixture_start(const char *source, const char *config, const char *sql)
{
    if (access(source, R_OK) != 0)
        cr_skip_test("%s not present: CI provides it (see ../shared/data/README.md)", source);
    snprintf(fx_db, sizeof fx_db, "%s/fresh.db", dir);
    fx_now = (int64_t)time(NULL);
    char err[512] = "";
    cr_assert_eq(mg_fixture_freshen(source, fx_db, fx_now, err, sizeof err), 0, "%s", err);
    if (sql) {
        sqlite3 *db;
        cr_assert_eq(mg_test_sqlite_open(fx_db, &db), SQLITE_OK);
        char *msg = NULL;
        cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &msg), SQLITE_OK, "%s", msg);
        sqlite3_close(db);
    }
    char v_cfg[400];
    snprintf(v_cfg, sizeof v_cfg, "MESHGATE_CORESCOPE_CONFIG=%s", config ? config : "");
    const char *env[] = {v_cfg, NULL};
    cr_assert(mg_test_server_start(&fx, fx_db, env), "meshgate did not start on %s", fx_db);
}

/* Rows of one SQL query on the copy, as text (first column); the count. */
static int sql_texts(char **out, int cap, const char *sql)
{
    sqlite3 *db;
    sqlite3_stmt *st;
    cr_assert_eq(mg_test_sqlite_open_v2(fx_db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s", sql);
    int n = 0;
    while (sqlite3_step(st) == SQLITE_ROW && n < cap) {
        const char *t = (const char *)sqlite3_column_text(st, 0);
        out[n++] = strdup(t ? t : "");
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

static long long sql_int(const char *sql)
{
    char *t[1];
    cr_assert_eq(sql_texts(t, 1, sql), 1, "%s: no row", sql);
    long long v = atoll(t[0]);
    free(t[0]);
    return v;
}

static void regions_on(const char *source)
{
    const char *config = write_file("config.json", "{\"regions\":{\"SJC\":\"San Jose, US\","
                                                   "\"AAA\":\"Nowhere Yet\"}}");
    fixture_start(source, config, NULL);
    char *body = get_body(&fx, "/api/config/regions", 200);
    cr_expect(json_keys_sorted(body), "keys not sorted: %s", body);
    char *codes[64];
    int n = sql_texts(codes, 64,
                      "SELECT DISTINCT iata FROM observers WHERE iata IS NOT NULL "
                      "AND iata NOT IN ('SJC', 'AAA')");
    cr_assert_gt(n, 0, "the fixture's observers have IATA codes");
    int members = 0;
    struct json_member m;
    json_members(body, &m);
    while (json_member_next(&m))
        members++;
    cr_expect_eq(members, n + 2, "%s", body);
    cr_expect(json_str_at_eq(body, "SJC", "San Jose, US"), "the configured name wins: %s", body);
    cr_expect(json_str_at_eq(body, "AAA", "Nowhere Yet"), "configured, unseen: %s", body);
    for (int i = 0; i < n; i++) {
        char path[80];
        snprintf(path, sizeof path, "%s", codes[i]);
        cr_expect(json_str_at_eq(body, path, codes[i]), "%s is not named by itself: %s", codes[i],
                  body);
        free(codes[i]);
    }
    free(body);
    cr_expect_eq(mg_test_server_stop(&fx, 10000), 0);
}

Test(api_config, regions_are_the_configured_ones_and_every_observers_iata_migrated)
{
    regions_on(FIXTURE_MIGRATED_DB);
}
Test(api_config, regions_are_the_configured_ones_and_every_observers_iata_base)
{
    regions_on(FIXTURE_DB);
}

Test(api_config, health_in_corescopes_shape_with_what_meshgate_knows)
{
    fixture_start(FIXTURE_MIGRATED_DB, NULL, NULL);
    cr_assert(mg_test_wait_node_list(fx.port), "the node list never answered 200");
    free(get_body(&fx, "/api/nodes?limit=1", 200)); /* one request counted before */
    char *body = get_body(&fx, "/api/health", 200);
    char keys[512];
    json_keys(body, "", keys, sizeof keys);
    cr_expect_str_eq(keys, "status,engine,version,commit,buildTime,uptime,uptimeHuman,memory,"
                           "eventLoop,cache,websocket,packetStore,perf");
    cr_expect(json_str_at_eq(body, "status", "ok"));
    cr_expect(json_str_at_eq(body, "engine", "meshgate"));
    long long uptime = json_int_at(body, "uptime");
    cr_expect(uptime >= 0 && uptime < 600, "uptime %lld", uptime);
    char human[32];
    snprintf(human, sizeof human, "%lldh %lldm", uptime / 3600, uptime % 3600 / 60);
    cr_expect(json_str_at_eq(body, "uptimeHuman", human), "%s", body);
    /* Three processes (the master, two workers), each resident: at least a megabyte in all. */
    long long rss = json_int_at(body, "memory.rss");
    cr_expect(rss >= 1 && rss < 4096, "memory.rss %lld MB", rss);
    json_keys(json_at(body, "memory"), "", keys, sizeof keys);
    cr_expect_str_eq(keys, "rss", "no heap figures meshgate does not have");
    json_keys(json_at(body, "cache"), "", keys, sizeof keys);
    cr_expect_str_eq(keys, "entries,hits,misses,staleHits,recomputes,hitRate");
    cr_expect_eq(json_int_at(body, "websocket.clients"), 0);
    cr_expect(json_is_at(body, "packetStore", "null"));
    cr_expect_geq(json_int_at(body, "perf.totalRequests"), 1, "%s", body);
    cr_expect_eq(json_length(json_at(body, "perf.recentSlow")),
                 json_int_at(body, "perf.slowQueries") < 5 ? json_int_at(body, "perf.slowQueries")
                                                           : 5);
    free(body);
    cr_expect_eq(mg_test_server_stop(&fx, 10000), 0);
}

/*
 * Scopes: the fixture carries no transport route, so a third of its transmissions are made
 * transport ones here (route_type 0 or 3), some named, some with an empty scope.
 */
static const char scope_sql[] =
    "UPDATE transmissions SET route_type = 0, scope_name = CASE id % 4 WHEN 0 THEN '#belgium' "
    "WHEN 1 THEN '#eu' WHEN 2 THEN '' ELSE NULL END WHERE id % 3 = 0;"
    "UPDATE transmissions SET route_type = 3, scope_name = '#eu' WHERE id % 7 = 1;";

static void expect_scope_window(const char *window, int64_t seconds, int bucket_chars)
{
    char target[64], since[32], sql[512];
    snprintf(target, sizeof target, "/api/scope-stats?window=%s", window);
    char *body = get_body(&fx, target, 200);
    int64_t answered = (int64_t)time(NULL);
    cr_expect(json_str_at_eq(body, "window", window));
    /* The server's now lies between the freshening and the answer: no row near either cut. */
    time_t cut = (time_t)(fx_now - seconds);
    struct tm tm;
    gmtime_r(&cut, &tm);
    strftime(since, sizeof since, "%Y-%m-%dT%H:%M:%SZ", &tm);
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM transmissions WHERE first_seen >= '%s' AND first_seen < "
             "strftime('%%Y-%%m-%%dT%%H:%%M:%%SZ', %lld, 'unixepoch')",
             since, (long long)(answered + 1 - seconds));
    if (sql_int(sql) != 0)
        cr_skip_test("a transmission lies at the window's edge; its count depends on the second");
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM transmissions WHERE route_type IN (0,3) AND first_seen >= '%s'",
             since);
    long long transport = sql_int(sql);
    cr_expect_eq(json_int_at(body, "summary.transportTotal"), transport, "%s", body);
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM transmissions WHERE route_type IN (0,3) AND scope_name IS NOT "
             "NULL AND first_seen >= '%s'",
             since);
    cr_expect_eq(json_int_at(body, "summary.scoped"), sql_int(sql));
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM transmissions WHERE (route_type IN (1,2) OR scope_name IS "
             "NULL) AND first_seen >= '%s'",
             since);
    cr_expect_eq(json_int_at(body, "summary.unscoped"), sql_int(sql));
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM transmissions WHERE route_type IN (0,3) AND scope_name = '' "
             "AND first_seen >= '%s'",
             since);
    cr_expect_eq(json_int_at(body, "summary.unknownScope"), sql_int(sql));
    /* byRegion: named scopes, most first. */
    const char *first = json_first(json_get(body, "byRegion"));
    if (transport > 0) {
        cr_assert_not_null(first, "%s", body);
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM transmissions WHERE route_type IN (0,3) AND scope_name = "
                 "'#eu' AND first_seen >= '%s'",
                 since);
        long long eu = sql_int(sql);
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM transmissions WHERE route_type IN (0,3) AND scope_name = "
                 "'#belgium' AND first_seen >= '%s'",
                 since);
        long long belgium = sql_int(sql);
        cr_expect(json_str_at_eq(first, "name", eu >= belgium ? "#eu" : "#belgium"), "%s", body);
        cr_expect_eq(json_int_at(first, "count"), eu >= belgium ? eu : belgium);
        cr_expect_eq(json_length(json_get(body, "byRegion")), (eu > 0) + (belgium > 0));
    }
    /* timeSeries: bucket every transport transmission here, in C, and compare. */
    char *seen[1000];
    snprintf(sql, sizeof sql,
             "SELECT first_seen || '|' || (scope_name IS NULL) FROM transmissions WHERE "
             "route_type IN (0,3) AND first_seen >= '%s' ORDER BY first_seen",
             since);
    int n = sql_texts(seen, 1000, sql);
    long long total = 0;
    for (const char *p = json_first(json_get(body, "timeSeries")); p; p = json_next(p)) {
        char *t = json_str_at(p, "t");
        long long scoped = 0, unscoped = 0;
        for (int i = 0; i < n; i++) {
            char bucket[32];
            if (bucket_chars == 13)
                snprintf(bucket, sizeof bucket, "%.13s:00:00Z", seen[i]);
            else if (bucket_chars == 16) /* 5 minutes */
                snprintf(bucket, sizeof bucket, "%.14s%02d:00Z", seen[i],
                         atoi(seen[i] + 14) / 5 * 5);
            else /* 6 hours */
                snprintf(bucket, sizeof bucket, "%.11s%02d:00:00Z", seen[i],
                         atoi(seen[i] + 11) / 6 * 6);
            if (strcmp(bucket, t) == 0)
                *(strchr(seen[i], '|')[1] == '1' ? &unscoped : &scoped) += 1;
        }
        cr_expect_eq(json_int_at(p, "scoped"), scoped, "bucket %s", t);
        cr_expect_eq(json_int_at(p, "unscoped"), unscoped, "bucket %s", t);
        total += scoped + unscoped;
        free(t);
    }
    cr_expect_eq(total, transport, "the buckets hold every transport transmission: %s", body);
    for (int i = 0; i < n; i++)
        free(seen[i]);
    free(body);
}

Test(api_config, scope_stats_counted_as_corescope_counts)
{
    fixture_start(FIXTURE_MIGRATED_DB, NULL, scope_sql);
    expect_scope_window("1h", 3600, 16);
    expect_scope_window("24h", 24 * 3600, 13);
    expect_scope_window("7d", 7 * 24 * 3600, 11);
    char *body = get_body(&fx, "/api/scope-stats", 200);
    cr_expect(json_str_at_eq(body, "window", "24h"), "the default window: %s", body);
    free(body);
    body = get_body(&fx, "/api/scope-stats?window=2d", 400);
    cr_expect(json_str_at_eq(body, "error", "window must be 1h, 24h, or 7d"), "%s", body);
    free(body);
    cr_expect_eq(mg_test_server_stop(&fx, 10000), 0);
}

Test(api_config, scope_stats_without_the_scope_column_is_501)
{
    fixture_start(FIXTURE_DB, NULL, NULL);
    char *body = get_body(&fx, "/api/scope-stats", 501);
    cr_expect(strstr(body, "scope_name column not present"), "%s", body);
    free(body);
    cr_expect_eq(mg_test_server_stop(&fx, 10000), 0);
}

/* Every configuration route answers through the server, with its rendered body. */
Test(api_config, every_config_route_answers_the_rendered_body)
{
    const char *path = write_file("config.json", odd_config);
    struct mg_corescope_config c = load_ok(path);
    char v_cfg[400];
    snprintf(v_cfg, sizeof v_cfg, "MESHGATE_CORESCOPE_CONFIG=%s", path);
    const char *env[] = {v_cfg, NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    static const struct {
        const char *target;
        enum mg_corescope_body body;
    } routes[] = {
        {"/api/config/cache", MG_CS_CACHE},
        {"/api/config/client", MG_CS_CLIENT},
        {"/api/config/theme", MG_CS_THEME},
        {"/api/config/map", MG_CS_MAP},
        {"/api/config/geo-filter", MG_CS_GEO_FILTER},
        {"/api/config/areas", MG_CS_AREAS},
        {"/api/config/areas/polygons", MG_CS_AREAS_POLYGONS},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        char *body = get_body(&s, routes[i].target, 200);
        cr_expect_str_eq(body, c.body[routes[i].body], "GET %s", routes[i].target);
        free(body);
    }
    free(get_body(&s, "/api/config/nothing", 404));
    /* What CoreScope answers without its ingestor's MQTT status file. */
    char *mqtt = get_body(&s, "/api/mqtt/status", 200);
    cr_expect_str_eq(mqtt, "{\"sources\":[],\"sampleAt\":\"\"}\n");
    free(mqtt);
    mg_corescope_free(&c);
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
}

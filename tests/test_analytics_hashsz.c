/* SPDX-License-Identifier: ISC */
/*
 * The Analytics page's hash sizes (/api/analytics/hash-sizes, workers/api/ep_analytics_hashsz.c)
 * on CoreScope's real migrated end-to-end database, freshened into a private copy whose newest
 * times are the top of the current hour, with CoreScope's config.example.json:
 *   - equal to CoreScope's own answers, recorded in tests/corescope-analytics-hashsz.json (how:
 *     its _comment) on a copy freshened to another hour: the recorded hours and times are moved
 *     by the whole hours between, and the lists whose ties CoreScope leaves to Go's map order
 *     are put in meshgate's order (multiByteNodes by packets then key, multiByteCapability by
 *     status, name then key; topHops by count then hex, the hops of the last count, where
 *     CoreScope cuts the list at 50 in map order, compared by count only);
 *   - worked out from the data with the test's own SQL: totals, sizes, every node's capability.
 * Without ../shared every test skips and says why.
 */
#include "corescope_config.h"
#include "fixture.h"
#include "harness.h"
#include "inproc.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define FIXTURE_MIGRATED_DB MESHGATE_SOURCE_DIR "/../shared/data/corescope-e2e-fixture-migrated.db"
#define EXAMPLE_CONFIG MESHGATE_SOURCE_DIR "/../shared/corescope/server/config.example.json"
#define EXPECTED MESHGATE_SOURCE_DIR "/tests/corescope-analytics-hashsz.json"

static struct {
    char dir[128];
    char db[256];
    char config[256];
    struct mg_test_ctx t;
    bool open;
    json_t *expected;
    int64_t now;
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

TestSuite(analytics_hashsz, .fini = cleanup, .timeout = 120);

static void start(void)
{
    if (access(FIXTURE_MIGRATED_DB, R_OK) != 0 || access(EXAMPLE_CONFIG, R_OK) != 0)
        cr_skip_test("%s or %s not present: these tests compare with CoreScope's answers on its "
                     "real database and example configuration (../shared, see "
                     "../shared/data/README.md)",
                     FIXTURE_MIGRATED_DB, EXAMPLE_CONFIG);
    mg_test_tmpdir(fx.dir, sizeof fx.dir);
    cr_assert(fx.dir[0], "no temporary directory under /tmp");
    snprintf(fx.db, sizeof fx.db, "%s/fresh.db", fx.dir);
    fx.now = (int64_t)time(NULL) / 3600 * 3600;
    char err[512] = "";
    cr_assert_eq(mg_fixture_freshen(FIXTURE_MIGRATED_DB, fx.db, fx.now, err, sizeof err), 0,
                 "freshening: %s", err);
    json_error_t jerr;
    snprintf(fx.config, sizeof fx.config, "%s/config.json", fx.dir);
    json_t *root = json_load_file(EXAMPLE_CONFIG, 0, &jerr);
    cr_assert_not_null(root, "%s: %s", EXAMPLE_CONFIG, jerr.text);
    cr_assert_eq(json_dump_file(root, fx.config, 0), 0);
    json_decref(root);
    mg_corescope_free(&mg_corescope);
    cr_assert_eq(mg_corescope_load(&mg_corescope, fx.config, err, sizeof err), 0, "%s", err);
    cr_assert(mg_test_ctx_open(&fx.t, fx.db));
    fx.open = true;
}

static void reopen_after(const char *sql)
{
    mg_test_ctx_close(&fx.t);
    fx.open = false;
    sqlite3 *db;
    cr_assert_eq(mg_test_sqlite_open(fx.db, &db), SQLITE_OK);
    char *err = NULL;
    cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &err), SQLITE_OK, "%s: %s", sql, err);
    sqlite3_close(db);
    cr_assert(mg_test_ctx_open(&fx.t, fx.db));
    fx.open = true;
}

static long long count_of(const char *sql)
{
    sqlite3 *db;
    cr_assert_eq(mg_test_sqlite_open(fx.db, &db), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s", sql);
    long long v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

static json_t *get(const char *target, int want)
{
    int status = mg_test_ctx_get(&fx.t, target);
    const char *body = (const char *)fx.t.res.body.data;
    cr_assert_eq(status, want, "GET %s: %d, want %d: %.300s", target, status, want, body);
    json_error_t jerr;
    json_t *v = json_loadb(body, fx.t.res.body.len, 0, &jerr);
    cr_assert_not_null(v, "GET %s: not JSON (%s): %.300s", target, jerr.text, body);
    return v;
}

/* ---- CoreScope's recorded answers, moved to this copy's hour and put in meshgate's order ---- */

/* text (RFC 3339, or its first 13 characters) moved by hours, the rest of it kept. */
static json_t *moved(const char *text, int64_t hours)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    int fields = sscanf(text, "%4d-%2d-%2dT%2d:%2d:%2d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                        &tm.tm_hour, &tm.tm_min, &tm.tm_sec);
    if (fields < 4)
        return json_string(text);
    tm.tm_year -= 1900, tm.tm_mon -= 1;
    time_t t = timegm(&tm) + (time_t)(hours * 3600);
    gmtime_r(&t, &tm);
    char out[64];
    size_t head = fields == 6 ? 19 : 13;
    strftime(out, sizeof out, fields == 6 ? "%Y-%m-%dT%H:%M:%S" : "%Y-%m-%dT%H", &tm);
    snprintf(out + strlen(out), sizeof out - strlen(out), "%s",
             strlen(text) > head ? text + head : "");
    return json_string(out);
}

static void move_field(json_t *list, const char *field, int64_t hours)
{
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e)
    {
        const char *s = json_string_value(json_object_get(e, field));
        if (s && s[0])
            json_object_set_new(e, field, moved(s, hours));
    }
}

static json_int_t int_of(json_t *e, const char *k)
{
    return json_integer_value(json_object_get(e, k));
}

static const char *text_of(json_t *e, const char *k)
{
    const char *s = json_string_value(json_object_get(e, k));
    return s ? s : "";
}

static int by_packets(const void *x, const void *y)
{
    json_t *a = *(json_t *const *)x, *b = *(json_t *const *)y;
    if (int_of(a, "packets") != int_of(b, "packets"))
        return int_of(a, "packets") > int_of(b, "packets") ? -1 : 1;
    return strcmp(text_of(a, "pubkey"), text_of(b, "pubkey"));
}

static int status_rank(json_t *e)
{
    const char *s = text_of(e, "status");
    return strcmp(s, "confirmed") == 0 ? 0 : strcmp(s, "suspected") == 0 ? 1 : 2;
}

static int by_status(const void *x, const void *y)
{
    json_t *a = *(json_t *const *)x, *b = *(json_t *const *)y;
    if (status_rank(a) != status_rank(b))
        return status_rank(a) - status_rank(b);
    int c = strcasecmp(text_of(a, "name"), text_of(b, "name"));
    return c ? c : strcmp(text_of(a, "pubkey"), text_of(b, "pubkey"));
}

static int by_count(const void *x, const void *y)
{
    json_t *a = *(json_t *const *)x, *b = *(json_t *const *)y;
    if (int_of(a, "count") != int_of(b, "count"))
        return int_of(a, "count") > int_of(b, "count") ? -1 : 1;
    return strcmp(text_of(a, "hex"), text_of(b, "hex"));
}

static void sort_list(json_t *list, int (*cmp)(const void *, const void *))
{
    size_t n = json_array_size(list);
    json_t **v = calloc(n + 1, sizeof *v);
    cr_assert_not_null(v);
    for (size_t i = 0; i < n; i++)
        v[i] = json_incref(json_array_get(list, i));
    qsort(v, n, sizeof *v, cmp);
    json_array_clear(list);
    for (size_t i = 0; i < n; i++)
        json_array_append_new(list, v[i]);
    free(v);
}

/* topHops: the hops of the last count leave the list (CoreScope cuts among them in map
 * order); their count stays, as a number of entries. */
static void cut_last_count(json_t *answer)
{
    json_t *top = json_object_get(answer, "topHops");
    sort_list(top, by_count);
    size_t n = json_array_size(top);
    if (n < 50)
        return;
    json_int_t last = int_of(json_array_get(top, n - 1), "count");
    size_t keep = n;
    while (keep > 0 && int_of(json_array_get(top, keep - 1), "count") == last)
        keep--;
    while (json_array_size(top) > keep)
        json_array_remove(top, keep);
    json_object_set_new(answer, "topHopsOfLastCount", json_integer((json_int_t)(n - keep)));
}

static void canonical(json_t *answer)
{
    sort_list(json_object_get(answer, "multiByteNodes"), by_packets);
    sort_list(json_object_get(answer, "multiByteCapability"), by_status);
    cut_last_count(answer);
}

static void expect_recorded(const char *target)
{
    json_t *want = json_deep_copy(json_object_get(json_object_get(fx.expected, "answers"), target));
    cr_assert_not_null(want, "%s: nothing recorded for %s", EXPECTED, target);
    int64_t recorded_now = json_integer_value(json_object_get(fx.expected, "now"));
    cr_assert_eq(recorded_now % 3600, 0, "the recording's copy is not at the top of an hour");
    int64_t shift = (fx.now - recorded_now) / 3600;
    move_field(json_object_get(want, "hourly"), "hour", shift);
    move_field(json_object_get(want, "multiByteNodes"), "lastSeen", shift);
    move_field(json_object_get(want, "multiByteCapability"), "lastSeen", shift);
    json_t *got = get(target, 200);
    /* the keys in CoreScope's order: its maps' keys sorted */
    const char *prev = "";
    const char *key;
    json_t *v;
    json_object_foreach(got, key, v)
    {
        cr_expect_gt(strcmp(key, prev), 0, "%s: %s after %s", target, key, prev);
        prev = key;
    }
    canonical(want);
    canonical(got);
    json_object_foreach(want, key, v)
    {
        json_t *g = json_object_get(got, key);
        if (!json_equal(v, g)) {
            char *gs = json_dumps(g, JSON_COMPACT | JSON_ENCODE_ANY),
                 *ws = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
            cr_expect_fail("GET %s: %s differs from CoreScope's\n got: %.2000s\nwant: %.2000s",
                           target, key, gs ? gs : "(none)", ws);
            free(gs), free(ws);
        }
    }
    cr_expect_eq(json_object_size(got), json_object_size(want), "%s: keys", target);
    json_decref(got);
    json_decref(want);
}

/* ---- worked out from the data ---- */

/* A transmission's hash size from its raw path byte (after 4 transport bytes for route types 0
 * and 3), in SQL: the path byte's high hex digit over 4, plus 1. */
#define TX_SIZE                                                                                    \
    "(((instr('0123456789ABCDEF', upper(substr(t.raw_hex, CASE WHEN (instr('0123456789ABCDEF',"    \
    " upper(substr(t.raw_hex, 2, 1))) - 1) % 4 IN (0, 3) THEN 11 ELSE 3 END, 1))) - 1) / 4) + 1)"
/* Transmissions with a path: some observation's path_json has a hop. */
#define WITH_PATH                                                                                  \
    " EXISTS (SELECT 1 FROM observations o WHERE o.transmission_id = t.id AND"                     \
    " json_valid(o.path_json) AND json_array_length(o.path_json) > 0)"

Test(analytics_hashsz, totals_and_sizes_are_those_of_the_data)
{
    start();
    json_t *a = get("/api/analytics/hash-sizes", 200);
    long long total =
        count_of("SELECT count(*) FROM transmissions t WHERE" WITH_PATH " AND " TX_SIZE " <= 3");
    cr_assert_gt(total, 0);
    cr_expect_eq(int_of(a, "total"), total);
    json_t *dist = json_object_get(a, "distribution");
    for (int s = 1; s <= 3; s++) {
        char sql[1024], name[2] = {(char)('0' + s), 0};
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM transmissions t WHERE" WITH_PATH " AND %s = %d", TX_SIZE, s);
        cr_expect_eq(int_of(dist, name), count_of(sql), "distribution[%s]", name);
    }
    json_int_t per_hour = 0;
    size_t i;
    json_t *h;
    json_array_foreach(json_object_get(a, "hourly"), i, h) per_hour +=
        int_of(h, "1") + int_of(h, "2") + int_of(h, "3");
    cr_expect_eq(per_hour, total);
    /* every node once in the capability list; a confirmed one announced 2 or more bytes */
    json_t *cap = json_object_get(a, "multiByteCapability");
    cr_expect_eq((long long)json_array_size(cap), count_of("SELECT count(*) FROM nodes"));
    json_t *e;
    json_array_foreach(cap, i, e)
    {
        const char *status = text_of(e, "status");
        if (strcmp(status, "unknown") != 0)
            cr_expect_geq(int_of(e, "maxHashSize"), 2, "%s", text_of(e, "pubkey"));
        cr_expect_str_eq(text_of(e, "evidence"), strcmp(status, "confirmed") == 0   ? "advert"
                                                 : strcmp(status, "suspected") == 0 ? "path"
                                                                                    : "");
    }
    /* the top hop is met as often as the data's most frequent hop of the best paths can be:
     * no more than its count over every observation's path */
    json_t *top = json_array_get(json_object_get(a, "topHops"), 0);
    cr_assert_not_null(top);
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM observations o, json_each(CASE WHEN json_valid(o.path_json)"
             " THEN o.path_json END) j WHERE j.value = '%s'",
             text_of(top, "hex"));
    cr_expect_leq(int_of(top, "count"), count_of(sql));
    cr_expect_eq(int_of(top, "size"), (json_int_t)(strlen(text_of(top, "hex")) + 1) / 2);
    json_decref(a);
}

/* A node that ADVERTs through a 2-byte path is a multi-byte node and confirmed; a repeater whose
 * 2-byte prefix is a hop of a 2-byte path of a non-TRACE packet is suspected. */
Test(analytics_hashsz, adverts_confirm_and_paths_suspect)
{
    start();
    char sql[4096];
    snprintf(
        sql, sizeof sql,
        "INSERT INTO nodes (public_key, name, role, last_seen, first_seen) VALUES"
        " ('abcd%060d', 'Confirmed', 'repeater', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z'),"
        " ('fedc%060d', 'Suspect', 'repeater', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z');"
        /* FLOOD ADVERT (header 0x11), path byte 0x41: 2-byte hashes, one hop */
        "INSERT INTO transmissions (raw_hex, hash, first_seen, route_type, payload_type,"
        " decoded_json) VALUES ('1141AAAA00', 'hs-advert', strftime('%%Y-%%m-%%dT%%H:%%M:%%SZ',"
        " %lld, 'unixepoch'), 1, 4, '{\"pubKey\":\"abcd%060d\",\"name\":\"Confirmed\"}'),"
        /* FLOOD TXT_MSG (0x09), 2-byte path through FEDC */
        " ('0941FEDC00', 'hs-text', strftime('%%Y-%%m-%%dT%%H:%%M:%%SZ', %lld, 'unixepoch'), 1,"
        " 2, NULL);"
        "INSERT INTO observations (transmission_id, observer_idx, path_json, timestamp)"
        " SELECT id, 1, CASE hash WHEN 'hs-advert' THEN '[\"AAAA\"]' ELSE '[\"FEDC\"]' END, %lld"
        " FROM transmissions WHERE hash IN ('hs-advert', 'hs-text');",
        0, 0, (long long)fx.now - 60, 0, (long long)fx.now - 60, (long long)fx.now - 60);
    reopen_after(sql);
    json_t *a = get("/api/analytics/hash-sizes", 200);
    bool confirmed = false, suspected = false, listed = false;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(a, "multiByteCapability"), i, e)
    {
        if (strncmp(text_of(e, "pubkey"), "abcd", 4) == 0)
            confirmed =
                strcmp(text_of(e, "status"), "confirmed") == 0 && int_of(e, "maxHashSize") == 2;
        if (strncmp(text_of(e, "pubkey"), "fedc", 4) == 0)
            suspected =
                strcmp(text_of(e, "status"), "suspected") == 0 && int_of(e, "maxHashSize") == 2;
    }
    json_array_foreach(json_object_get(a, "multiByteNodes"), i,
                       e) if (strncmp(text_of(e, "pubkey"), "abcd", 4) == 0) listed =
        int_of(e, "hashSize") == 2 && int_of(e, "packets") == 1 &&
        strcmp(text_of(e, "name"), "Confirmed") == 0 && strcmp(text_of(e, "role"), "repeater") == 0;
    cr_expect(confirmed, "the ADVERT's node is confirmed with 2 bytes");
    cr_expect(suspected, "the hop's node is suspected with 2 bytes");
    cr_expect(listed, "the ADVERT's node is a multi-byte node");
    json_decref(a);
}

/* A region no observer has still filters no transmission; a list of codes too long for a key is
 * refused. */
Test(analytics_hashsz, regions_filter_as_corescopes)
{
    start();
    json_t *all = get("/api/analytics/hash-sizes", 200),
           *none = get("/api/analytics/hash-sizes?region=ZZZ", 200);
    cr_expect_eq(int_of(none, "total"), int_of(all, "total"));
    json_t *sjc = get("/api/analytics/hash-sizes?region=SJC", 200);
    cr_expect_lt(int_of(sjc, "total"), int_of(all, "total"));
    cr_expect_gt(int_of(sjc, "total"), 0);
    char target[400] = "/api/analytics/hash-sizes?region=";
    for (int i = 0; i < 30; i++)
        strcat(target, "ABCD,");
    json_t *e = get(target, 400);
    cr_expect(json_is_string(json_object_get(e, "error")));
    json_decref(e);
    json_decref(all), json_decref(none), json_decref(sjc);
}

/* ---- /api/analytics/relay-airtime-share ---- */

/* LoRa time on air in nanoseconds for CoreScope's default preset (SF 8, 62.5 kHz, CR 4/5, a
 * preamble of 32): worked out here from Semtech's closed form. */
static int64_t default_toa_ns(int64_t bytes)
{
    double symbol_s = 256.0 / 62500.0; /* 4.096 ms: no low data rate optimisation */
    int64_t num = 8 * bytes - 32 + 44, den = 32;
    double payload = num <= 0 ? 8 : 8 + (double)((num + den - 1) / den) * 5;
    return (int64_t)((32 + 4.25 + payload) * symbol_s * 1e9);
}

Test(analytics_hashsz, airtime_share_is_that_of_the_data)
{
    start();
    json_t *a = get("/api/analytics/relay-airtime-share", 200);
    cr_expect_eq(int_of(a, "total_count"),
                 count_of("SELECT count(*) FROM transmissions WHERE payload_type IS NOT NULL"));
    json_t *preset = json_object_get(a, "preset");
    cr_expect_eq(json_number_value(json_object_get(preset, "freq_hz")), 869600000.0);
    cr_expect_eq(json_number_value(json_object_get(preset, "bw_khz")), 62.5);
    cr_expect_eq(int_of(preset, "sf"), 8);
    cr_expect_eq(int_of(preset, "cr"), 5);
    cr_expect_eq(int_of(preset, "preamble"), 32);
    cr_expect_str_eq(text_of(a, "window"), "");
    /* the score: each transmission's time on air times its distinct resolved relays */
    sqlite3 *db;
    cr_assert_eq(mg_test_sqlite_open(fx.db, &db), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(
        sqlite3_prepare_v2(db,
                           "SELECT t.payload_type, length(t.raw_hex) / 2, (SELECT count(DISTINCT"
                           " lower(j.value)) FROM observations o, json_each(CASE WHEN"
                           " json_valid(o.resolved_path) THEN o.resolved_path END) j WHERE"
                           " o.transmission_id = t.id AND j.type = 'text' AND j.value <> '') FROM "
                           "transmissions t WHERE t.payload_type IS"
                           " NOT NULL",
                           -1, &st, NULL),
        SQLITE_OK);
    int64_t total = 0, by_type[16] = {0};
    while (sqlite3_step(st) == SQLITE_ROW) {
        int64_t s = default_toa_ns(sqlite3_column_int64(st, 1)) * sqlite3_column_int64(st, 2);
        total += s;
        int64_t t = sqlite3_column_int64(st, 0);
        if (t >= 0 && t < 16)
            by_type[t] += s;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    cr_assert_gt(total, 0, "the fixture's observations name relays");
    cr_expect_eq(int_of(a, "total_score"), total);
    size_t i;
    json_t *r;
    double prev = 101;
    json_array_foreach(json_object_get(a, "rows"), i, r)
    {
        json_int_t t = int_of(r, "type");
        if (t >= 0 && t < 16)
            cr_expect_eq(int_of(r, "score"), by_type[t], "type %lld", (long long)t);
        double pct = json_number_value(json_object_get(r, "airtime_pct"));
        cr_expect_leq(pct, prev, "rows by airtime share");
        prev = pct;
    }
    json_decref(a);
    /* a window with none of the copy's transmissions, and one with all of them */
    json_t *old = get("/api/analytics/relay-airtime-share?to=2000-01-01T00:00:00Z", 200);
    cr_expect_eq(int_of(old, "total_count"), 0);
    cr_expect_eq(json_array_size(json_object_get(old, "rows")), 0);
    json_t *week = get("/api/analytics/relay-airtime-share?window=1w", 200);
    cr_expect_str_eq(text_of(week, "window"), "1w");
    cr_expect_eq(int_of(week, "total_score"), total);
    json_decref(old), json_decref(week);
}

/* ---- /api/audio-lab/buckets ---- */

Test(analytics_hashsz, audio_lab_picks_eight_per_type_spread_by_length)
{
    start();
    json_t *a = get("/api/audio-lab/buckets", 200);
    json_t *buckets = json_object_get(a, "buckets");
    cr_assert(json_is_object(buckets));
    /* ADVERTs: their decoded type is "ADVERT"; 8 of them, by raw length */
    long long adverts = count_of("SELECT count(*) FROM transmissions WHERE raw_hex <> '' AND"
                                 " decoded_json ->> '$.type' = 'ADVERT'");
    cr_assert_gt(adverts, 8);
    json_t *list = json_object_get(buckets, "ADVERT");
    cr_assert_eq(json_array_size(list), 8);
    for (int i = 0; i < 8; i++) {
        char sql[512];
        snprintf(sql, sizeof sql,
                 "SELECT length(raw_hex) FROM transmissions WHERE raw_hex <> '' AND"
                 " decoded_json ->> '$.type' = 'ADVERT' ORDER BY length(raw_hex), id LIMIT 1"
                 " OFFSET %lld",
                 (long long)i * adverts / 8);
        cr_expect_eq((long long)strlen(text_of(json_array_get(list, (size_t)i), "raw_hex")),
                     count_of(sql), "ADVERT pick %d", i);
    }
    /* a decoded type "UNKNOWN" takes the payload type's name; every bucket at most 8 */
    const char *name;
    json_t *b;
    long long buckets_want =
        count_of("SELECT count(DISTINCT CASE WHEN coalesce(decoded_json ->> '$.type', '') IN"
                 " ('', 'UNKNOWN') THEN payload_type ELSE decoded_json ->> '$.type' END) FROM"
                 " transmissions WHERE raw_hex <> ''");
    cr_expect_eq((long long)json_object_size(buckets), buckets_want);
    cr_expect_null(json_object_get(buckets, "UNKNOWN"));
    json_object_foreach(buckets, name, b)
    {
        cr_expect_leq(json_array_size(b), 8, "%s", name);
        size_t k;
        json_t *p;
        json_array_foreach(b, k, p)
        {
            cr_expect_geq(int_of(p, "observation_count"), 1);
            cr_expect(json_is_string(json_object_get(p, "hash")));
        }
    }
    json_decref(a);
}

/* Equal to the recorded answer (cached: CoreScope's first answer says false, as meshgate's). */
static void expect_recorded_same(const char *target)
{
    json_t *want = json_deep_copy(json_object_get(json_object_get(fx.expected, "answers"), target));
    cr_assert_not_null(want, "%s: nothing recorded for %s", EXPECTED, target);
    json_t *got = get(target, 200);
    if (!json_equal(want, got)) {
        char *gs = json_dumps(got, JSON_COMPACT), *ws = json_dumps(want, JSON_COMPACT);
        cr_expect_fail("GET %s differs from CoreScope's\n got: %.3000s\nwant: %.3000s", target, gs,
                       ws);
        free(gs), free(ws);
    }
    json_decref(got), json_decref(want);
}

/* The Audio Lab's picks among packets of equal length are Go's unstable sort's: each bucket
 * has CoreScope's size and lengths, and a packet both picked is the same. */
static void expect_audio_lab_recorded(const char *target)
{
    json_t *want = json_deep_copy(json_object_get(json_object_get(fx.expected, "answers"), target));
    cr_assert_not_null(want, "%s: nothing recorded for %s", EXPECTED, target);
    int64_t shift = (fx.now - json_integer_value(json_object_get(fx.expected, "now"))) / 3600;
    json_t *got = get(target, 200);
    json_t *gb = json_object_get(got, "buckets"), *wb = json_object_get(want, "buckets");
    cr_expect_eq(json_object_size(gb), json_object_size(wb), "%s: buckets", target);
    const char *name;
    json_t *list;
    json_object_foreach(wb, name, list)
    {
        move_field(list, "timestamp", shift);
        json_t *mine = json_object_get(gb, name);
        cr_expect_eq(json_array_size(mine), json_array_size(list), "%s: bucket %s", target, name);
        for (size_t i = 0; i < json_array_size(list) && i < json_array_size(mine); i++) {
            json_t *w = json_array_get(list, i), *g = json_array_get(mine, i);
            cr_expect_eq(strlen(text_of(g, "raw_hex")), strlen(text_of(w, "raw_hex")),
                         "%s[%zu]: raw length", name, i);
            if (strcmp(text_of(g, "hash"), text_of(w, "hash")) == 0 && !json_equal(g, w)) {
                char *gs = json_dumps(g, JSON_COMPACT), *ws = json_dumps(w, JSON_COMPACT);
                cr_expect_fail("%s[%zu] differs from CoreScope's\n got: %s\nwant: %s", name, i, gs,
                               ws);
                free(gs), free(ws);
            }
        }
    }
    json_decref(got), json_decref(want);
}

Test(analytics_hashsz, answers_equal_corescopes_on_the_freshened_fixture)
{
    start();
    json_error_t jerr;
    fx.expected = json_load_file(EXPECTED, 0, &jerr);
    cr_assert_not_null(fx.expected, "%s: %s", EXPECTED, jerr.text);
    const char *target;
    json_t *answer;
    int compared = 0;
    json_object_foreach(json_object_get(fx.expected, "answers"), target, answer)
    {
        if (strncmp(target, "/api/analytics/hash-sizes", 25) == 0)
            expect_recorded(target);
        else if (strncmp(target, "/api/analytics/relay-airtime-share", 34) == 0)
            expect_recorded_same(target);
        else if (strncmp(target, "/api/audio-lab/buckets", 22) == 0)
            expect_audio_lab_recorded(target);
        else
            continue;
        compared++;
    }
    cr_expect_geq(compared, 3);
}

/* The configuration's analytics.loraPreset sets the preset; an out-of-range field keeps
 * CoreScope's default; a field of the wrong type refuses the file. */
Test(analytics_hashsz, airtime_preset_comes_from_the_configuration)
{
    start();
    static const char cfg[] = "{\"analytics\":{\"loraPreset\":{\"freq\":915000000,\"bw\":125,"
                              "\"sf\":9,\"cr\":9}}}";
    char err[512] = "";
    mg_corescope_free(&mg_corescope);
    cr_assert_eq(mg_corescope_load_text(&mg_corescope, "config.json", cfg, sizeof cfg - 1, NULL, 0,
                                        err, sizeof err),
                 0, "%s", err);
    json_t *a = get("/api/analytics/relay-airtime-share", 200);
    json_t *p = json_object_get(a, "preset");
    cr_expect_eq(json_number_value(json_object_get(p, "freq_hz")), 915000000.0);
    cr_expect_eq(json_number_value(json_object_get(p, "bw_khz")), 125.0);
    cr_expect_eq(int_of(p, "sf"), 9);
    cr_expect_eq(int_of(p, "cr"), 5, "out of range: the default");
    cr_expect_eq(int_of(p, "preamble"), 16);
    json_decref(a);
    static const char bad[] = "{\"analytics\":{\"loraPreset\":{\"sf\":\"eight\"}}}";
    struct mg_corescope_config c;
    memset(&c, 0, sizeof c);
    cr_expect_neq(
        mg_corescope_load_text(&c, "config.json", bad, sizeof bad - 1, NULL, 0, err, sizeof err),
        0);
    cr_expect(strstr(err, "analytics.loraPreset.sf") != NULL, "%s", err);
    mg_corescope_free(&c);
}

/* SPDX-License-Identifier: ISC */
/*
 * The observer_metrics routes (workers/api/ep_observer_metrics.c): /api/observers/metrics/summary,
 * /api/observers/{id}/metrics and /api/nodes/{pubkey}/battery, on CoreScope's real migrated
 * end-to-end database freshened into a private copy: first as it is (no observer_metrics
 * table: CoreScope's 500s and 400s), then with tests/observer-metrics.sql applied while the
 * connection stays open (the routes see the table the ingestor creates). Every answer is
 * compared with what CoreScope's own server answered for the same file and requests, recorded
 * in tests/corescope-observer-metrics.json (how: its _comment). The battery's samples are
 * relative to now, so their timestamps are compared as RFC 3339 text in order, not verbatim.
 * Without ../shared the fixture tests skip and say why; the Go duration tests always run.
 */
#include "corescope_config.h"
#include "fixture.h"
#include "go_duration.h"
#include "harness.h"
#include "inproc.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FIXTURE_MIGRATED_DB MESHGATE_SOURCE_DIR "/../shared/data/corescope-e2e-fixture-migrated.db"
#define METRICS_SQL MESHGATE_SOURCE_DIR "/tests/observer-metrics.sql"
#define EXPECTED MESHGATE_SOURCE_DIR "/tests/corescope-observer-metrics.json"

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

TestSuite(observer_metrics, .fini = cleanup, .timeout = 120);

static void start(void)
{
    if (access(FIXTURE_MIGRATED_DB, R_OK) != 0)
        cr_skip_test("%s not present: these tests compare with CoreScope's answers on its real "
                     "database (../shared, see ../shared/data/README.md)",
                     FIXTURE_MIGRATED_DB);
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
}

/* What the ingestor does: the table and its samples, written by another connection. */
static void add_metrics_table(void)
{
    char *sql = mg_test_read_file(METRICS_SQL);
    cr_assert_not_null(sql, "cannot read %s", METRICS_SQL);
    sqlite3 *rw;
    cr_assert_eq(mg_test_sqlite_open(fx.db, &rw), SQLITE_OK);
    char *msg = NULL;
    cr_assert_eq(sqlite3_exec(rw, sql, NULL, NULL, &msg), SQLITE_OK, "%s", msg ? msg : "");
    sqlite3_close(rw);
    free(sql);
}

static json_t *get(const char *target, int *status)
{
    *status = mg_test_ctx_get(&fx.t, target);
    const char *body = (const char *)fx.t.res.body.data;
    json_error_t jerr;
    json_t *v = json_loadb(body, fx.t.res.body.len, 0, &jerr);
    cr_assert_not_null(v, "GET %s: not JSON (%s): %.300s", target, jerr.text, body);
    return v;
}

/* The battery's timestamps are relative to now: each is checked as RFC 3339 and in order,
 * then blanked, so that the rest compares verbatim. */
static void blank_battery_times(json_t *a, const char *target)
{
    json_t *samples = json_object_get(a, "samples");
    if (!samples)
        return;
    size_t i;
    json_t *s;
    char before[64] = "";
    json_array_foreach(samples, i, s)
    {
        const char *ts = json_string_value(json_object_get(s, "timestamp"));
        cr_assert(ts && strlen(ts) == 20 && ts[10] == 'T' && ts[19] == 'Z', "%s: %s", target,
                  ts ? ts : "(none)");
        cr_expect(strcmp(before, ts) <= 0, "%s: samples out of order", target);
        snprintf(before, sizeof before, "%s", ts);
        json_object_set_new(s, "timestamp", json_string(""));
    }
    if (json_is_string(json_object_get(a, "latest_ts"))) {
        cr_expect_str_eq(json_string_value(json_object_get(a, "latest_ts")), before, "%s", target);
        json_object_set_new(a, "latest_ts", json_string(""));
    }
}

/* Every request recorded under phase: meshgate's status and answer are CoreScope's. */
static void expect_recorded(const char *phase)
{
    json_t *answers = json_object_get(fx.expected, phase);
    cr_assert(json_is_object(answers), "no recorded phase %s", phase);
    const char *target;
    json_t *want;
    size_t n = 0;
    json_object_foreach(answers, target, want)
    {
        int status;
        json_t *got = get(target, &status);
        cr_expect_eq(status, json_integer_value(json_object_get(want, "status")),
                     "%s %s: status %d", phase, target, status);
        json_t *body = json_deep_copy(json_object_get(want, "body"));
        blank_battery_times(got, target);
        blank_battery_times(body, target);
        char *g = json_dumps(got, JSON_SORT_KEYS | JSON_COMPACT);
        char *w = json_dumps(body, JSON_SORT_KEYS | JSON_COMPACT);
        cr_expect(json_equal(got, body),
                  "%s %s: meshgate's answer differs from CoreScope's:\n%s\n%s", phase, target, g,
                  w);
        free(g);
        free(w);
        json_decref(got);
        json_decref(body);
        n++;
    }
    cr_expect_geq(n, 5, "%s: %zu recorded requests", phase, n);
}

Test(observer_metrics, without_the_table_the_routes_answer_as_corescope)
{
    start();
    expect_recorded("without the table");
    int status;
    json_t *a = get("/api/observers/metrics/summary", &status);
    cr_expect_eq(status, 500);
    cr_expect_str_eq(json_string_value(json_object_get(a, "error")),
                     "no such table: observer_metrics");
    json_decref(a);
}

Test(observer_metrics, the_table_is_seen_once_the_ingestor_creates_it)
{
    start();
    int status;
    json_decref(get("/api/observers/metrics/summary?window=36500d", &status));
    cr_expect_eq(status, 500, "no table yet");
    add_metrics_table();
    expect_recorded("with the table");
}

/* The answers' values worked out from tests/observer-metrics.sql, apart from the recording. */
Test(observer_metrics, deltas_reboots_and_gaps_are_computed_from_the_samples)
{
    start();
    add_metrics_table();
    int status;
    json_t *a =
        get("/api/observers/D5EF2ED77CEABCB22082F8794D5F9D89F2257E70533863E924DEBE6EBDDA312A"
            "/metrics?since=2026-05-17T10:00:00Z&until=2026-05-17T10:10:00Z",
            &status);
    cr_assert_eq(status, 200);
    cr_expect_str_eq(json_string_value(json_object_get(a, "observer_name")), "Kennedy Repeater");
    json_t *m = json_object_get(a, "metrics");
    cr_assert_eq(json_array_size(m), 3);
    cr_expect(json_is_null(json_object_get(json_array_get(m, 0), "tx_airtime_pct")), "first");
    /* 10:05: tx 1007 -> 1019 in 300 s: 4 %; rx 5000 -> 5037: 12.33 %; errors 10 -> 13 of
     * 13 + 3 received: 18.75 % */
    json_t *s = json_array_get(m, 1);
    cr_expect_float_eq(json_number_value(json_object_get(s, "tx_airtime_pct")), 4.0, 1e-9);
    cr_expect_float_eq(json_number_value(json_object_get(s, "rx_airtime_pct")), 12.33, 1e-9);
    cr_expect_float_eq(json_number_value(json_object_get(s, "recv_error_rate")), 18.75, 1e-9);
    json_decref(a);
    /* 11:00 is a reboot (every counter went down); 11:25 -> 11:50 a gap (1500 s > 600 s) */
    a = get("/api/observers/D5EF2ED77CEABCB22082F8794D5F9D89F2257E70533863E924DEBE6EBDDA312A"
            "/metrics?since=2026-05-17T10:55:00Z&until=2026-05-17T11:50:00Z",
            &status);
    m = json_object_get(a, "metrics");
    cr_assert_eq(json_array_size(m), 8, "10:55 .. 11:25, then 11:50");
    cr_expect(json_is_true(json_object_get(json_array_get(m, 1), "is_reboot_sample")));
    cr_expect(json_is_null(json_object_get(json_array_get(m, 1), "tx_airtime_pct")));
    cr_expect_null(json_object_get(json_array_get(m, 2), "is_reboot_sample"), "only when set");
    cr_expect(json_is_number(json_object_get(json_array_get(m, 2), "tx_airtime_pct")));
    cr_expect(json_is_null(json_object_get(json_array_get(m, 7), "tx_airtime_pct")), "gap");
    json_t *reboots = json_object_get(a, "reboots");
    cr_expect_eq(json_array_size(reboots), 1);
    cr_expect_str_eq(json_string_value(json_array_get(reboots, 0)), "2026-05-17T11:00:00Z");
    json_decref(a);
    /* 12:15: 400 s of air time in 300 s: clamped to 100 */
    a = get("/api/observers/D5EF2ED77CEABCB22082F8794D5F9D89F2257E70533863E924DEBE6EBDDA312A"
            "/metrics?since=2026-05-17T12:10:00Z&until=2026-05-17T12:15:00Z",
            &status);
    m = json_object_get(a, "metrics");
    cr_assert_eq(json_array_size(m), 2);
    cr_expect(json_is_null(json_object_get(json_array_get(m, 0), "tx_airtime_pct")),
              "12:10 follows a sample without counters");
    cr_expect_float_eq(json_number_value(json_object_get(json_array_get(m, 1), "tx_airtime_pct")),
                       100.0, 1e-9);
    json_decref(a);
    /* An unknown resolution is refused before anything is read. */
    a = get("/api/observers/x/metrics?resolution=5M", &status);
    cr_expect_eq(status, 400);
    cr_expect_str_eq(json_string_value(json_object_get(a, "error")),
                     "invalid resolution: 5M. Must be 5m, 1h, or 1d");
    json_decref(a);
}

Test(observer_metrics, the_summary_ranks_by_highest_noise_floor_and_filters_by_region)
{
    start();
    add_metrics_table();
    int status;
    json_t *a = get("/api/observers/metrics/summary?window=36500d", &status);
    cr_assert_eq(status, 200);
    json_t *obs = json_object_get(a, "observers");
    cr_assert_eq(json_array_size(obs), 6);
    /* -95.5 twice (ties by id), -101, -109.5 twice (the node's key in two cases), then the
     * one without a noise floor */
    static const char *const order[] = {
        "1E598D0F11783A33C04D701FF3151FD8D8C0A96686D88267DF70993F59EF760C",
        "D5EF2ED77CEABCB22082F8794D5F9D89F2257E70533863E924DEBE6EBDDA312A",
        "EE550DE547D7B94848A952C98F585881FCF946A128E72905E95517475F83CFB1",
        "EC3433BB3ADF1ACAEE0CE117600B0CA473705486EC666137379A1E8CBB7E75F4",
        "ec3433bb3adf1acaee0ce117600b0ca473705486ec666137379a1e8cbb7e75f4",
        "ZZ-NO-OBSERVER",
    };
    for (size_t i = 0; i < 6; i++)
        cr_expect_str_eq(json_string_value(json_object_get(json_array_get(obs, i), "observer_id")),
                         order[i]);
    json_t *b = json_array_get(obs, 0);
    cr_expect_eq(json_integer_value(json_object_get(b, "sample_count")), 4);
    cr_expect_float_eq(json_number_value(json_object_get(b, "avg_noise_floor_24h")),
                       (-99.0 - 95.5 - 101.25 - 97.0) / 4, 1e-9);
    cr_expect_float_eq(json_number_value(json_object_get(b, "current_noise_floor")), -97.0, 1e-9);
    cr_expect_eq(json_integer_value(json_object_get(b, "battery_mv")), 3285);
    cr_expect_eq(json_array_size(json_object_get(b, "sparkline")), 4);
    json_t *none = json_array_get(obs, 5);
    cr_expect_null(json_object_get(none, "iata"), "an empty code is left out");
    cr_expect(json_is_null(json_object_get(none, "observer_name")));
    json_decref(a);
    a = get("/api/observers/metrics/summary?window=36500d&region=oak", &status);
    cr_expect_eq(json_array_size(json_object_get(a, "observers")), 2, "OAK in any case");
    json_decref(a);
    a = get("/api/observers/metrics/summary?window=1.5d", &status);
    cr_expect_eq(status, 400);
    cr_expect_str_eq(json_string_value(json_object_get(a, "error")), "invalid window: 1.5d");
    json_decref(a);
}

Test(observer_metrics, the_battery_merges_the_keys_cases_and_reads_the_thresholds)
{
    start();
    add_metrics_table();
    int status;
    const char *target =
        "/api/nodes/ec3433bb3adf1acaee0ce117600b0ca473705486ec666137379a1e8cbb7e75f4/battery";
    json_t *a = get(target, &status);
    cr_assert_eq(status, 200);
    /* -3 days (upper case), -2 days (lower case), -1 hour; the NULL one and -20 days left out */
    cr_expect_eq(json_array_size(json_object_get(a, "samples")), 3);
    cr_expect_eq(json_integer_value(json_object_get(a, "latest_mv")), 3250);
    cr_expect_str_eq(json_string_value(json_object_get(a, "status")), "low");
    json_decref(a);
    char more[200];
    snprintf(more, sizeof more, "%s?days=30", target);
    a = get(more, &status);
    cr_expect_eq(json_array_size(json_object_get(a, "samples")), 4);
    json_decref(a);
    /* config.json's batteryThresholds */
    char path[256], err[512] = "";
    snprintf(path, sizeof path, "%s/config.json", fx.dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("{\"batteryThresholds\": {\"lowMv\": 3500, \"criticalMv\": 3260}}", f);
    fclose(f);
    mg_corescope_free(&mg_corescope);
    cr_assert_eq(mg_corescope_load(&mg_corescope, path, err, sizeof err), 0, "%s", err);
    a = get(target, &status);
    cr_expect_str_eq(json_string_value(json_object_get(a, "status")), "critical");
    json_t *th = json_object_get(a, "thresholds");
    cr_expect_eq(json_integer_value(json_object_get(th, "low_mv")), 3500);
    cr_expect_eq(json_integer_value(json_object_get(th, "critical_mv")), 3260);
    json_decref(a);
    /* Where meshgate differs on purpose: a hidden node's battery is 404, as every route of a
     * hidden node (CoreScope's battery handler does not look). */
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("{\"nodeBlacklist\": "
          "[\"EC3433BB3ADF1ACAEE0CE117600B0CA473705486EC666137379A1E8CBB7E75F4\"]}",
          f);
    fclose(f);
    mg_corescope_free(&mg_corescope);
    cr_assert_eq(mg_corescope_load(&mg_corescope, path, err, sizeof err), 0, "%s", err);
    a = get(target, &status);
    cr_expect_eq(status, 404);
    cr_expect_str_eq(json_string_value(json_object_get(a, "error")), "Not found");
    json_decref(a);
}

/* ---- Go's durations ---- */

Test(observer_metrics, windows_are_read_as_corescope_reads_them)
{
    static const struct {
        const char *text;
        bool ok;
        int64_t ns;
    } cases[] = {
        {"24h", true, INT64_C(86400000000000)},
        {"1h30m", true, INT64_C(5400000000000)},
        {"1.5h", true, INT64_C(5400000000000)},
        {".5s", true, 500000000},
        {"5.s", true, 5000000000},
        {"1\xc2\xb5s", true, 1000},
        {"-1h", true, -INT64_C(3600000000000)},
        {"+1m", true, 60000000000},
        {"0", true, 0},
        {"-0", true, 0},
        {"7d", true, INT64_C(7) * 86400000000000},
        {"+2d", true, INT64_C(2) * 86400000000000},
        {"9223372036854775807ns", true, INT64_MAX},
        {"-9223372036854775808ns", true, INT64_MIN},
        {"9223372036854775808ns", false, 0},
        {"", false, 0},
        {"1", false, 0},
        {"h", false, 0},
        {".s", false, 0},
        {"1x", false, 0},
        {"0d", false, 0},
        {"-1d", false, 0},
        {"1.5d", false, 0},
        {"1h1d", false, 0},
        {" 1h", false, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t ns = 0;
        bool ok = mg_go_window_parse(cases[i].text, strlen(cases[i].text), &ns);
        cr_expect_eq(ok, cases[i].ok, "%s", cases[i].text);
        if (ok && cases[i].ok)
            cr_expect_eq(ns, cases[i].ns, "%s: %lld", cases[i].text, (long long)ns);
    }
    /* Go multiplies days in 64 bits: 2^48 days wrap to nothing at all. */
    int64_t ns = 1;
    cr_expect(mg_go_window_parse("281474976710656d", 16, &ns));
    cr_expect_eq(ns, 0);
}

/* ---- a generated database ---- */

static long long scalar(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s", sql);
    long long v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* The generator's default shape with a week of samples every 5 minutes for each of its
 * observers and for a node's key (what a live site's ingestor keeps): every route answers 200
 * with the counts the table holds, and the week's summary steps through each sample a bounded
 * number of times. */
Test(observer_metrics, a_generated_week_of_samples_answers_with_the_tables_counts, .timeout = 300)
{
    mg_test_tmpdir(fx.dir, sizeof fx.dir);
    snprintf(fx.db, sizeof fx.db, "%s/shape.db", fx.dir);
    struct mg_fixture_options o;
    mg_fixture_options_default(&o);
    o.observations = 20000;
    o.seed = 5;
    char err[512] = "";
    cr_assert_eq(mg_fixture_generate(fx.db, &o, err, sizeof err), 0, "%s", err);
    sqlite3 *rw;
    cr_assert_eq(mg_test_sqlite_open(fx.db, &rw), SQLITE_OK);
    char *msg = NULL;
    cr_assert_eq(
        sqlite3_exec(
            rw,
            "CREATE TABLE observer_metrics (observer_id TEXT NOT NULL, timestamp TEXT NOT NULL,"
            " noise_floor REAL, tx_air_secs INTEGER, rx_air_secs INTEGER, recv_errors INTEGER,"
            " battery_mv INTEGER, packets_sent INTEGER, packets_recv INTEGER,"
            " PRIMARY KEY (observer_id, timestamp));"
            "CREATE INDEX idx_observer_metrics_timestamp ON observer_metrics(timestamp);"
            "WITH RECURSIVE k(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM k WHERE n < 2015),"
            " ids(id) AS (SELECT id FROM observers UNION"
            " SELECT upper(public_key) FROM (SELECT public_key FROM nodes ORDER BY public_key"
            " LIMIT 1))"
            " INSERT INTO observer_metrics SELECT ids.id,"
            " strftime('%Y-%m-%dT%H:%M:00Z', (CAST(strftime('%s', 'now') AS INTEGER) / 300 - k.n) "
            "* 300, 'unixepoch'),"
            " -120 + (k.n * 7 + length(ids.id)) % 30, (2016 - k.n) * 3, (2016 - k.n) * 11,"
            " (2016 - k.n) / 9, 3000 + k.n % 900, 2016 - k.n, (2016 - k.n) * 4 FROM ids, k",
            NULL, NULL, &msg),
        SQLITE_OK, "%s", msg ? msg : "");
    long long observers = scalar(rw, "SELECT count(DISTINCT observer_id) FROM observer_metrics");
    char node[80], target[200];
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(rw, "SELECT public_key FROM nodes ORDER BY public_key LIMIT 1",
                                    -1, &st, NULL),
                 SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    snprintf(node, sizeof node, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(rw);
    cr_assert(mg_test_ctx_open(&fx.t, fx.db));
    fx.open = true;

    int status;
    int64_t before = mg_db_vm_steps(&fx.t.db);
    json_t *a = get("/api/observers/metrics/summary?window=7d", &status);
    int64_t steps = mg_db_vm_steps(&fx.t.db) - before;
    cr_assert_eq(status, 200);
    json_t *list = json_object_get(a, "observers");
    cr_expect_eq((long long)json_array_size(list), observers);
    size_t i;
    json_t *row;
    long long samples = 0;
    json_array_foreach(list, i, row)
    {
        long long n = json_integer_value(json_object_get(row, "sample_count"));
        cr_expect(n >= 2015 && n <= 2016, "a week of samples every 5 minutes: %lld", n);
        cr_expect_eq((long long)json_array_size(json_object_get(row, "sparkline")), n);
        samples += n;
    }
    /* the week's samples are read twice (the groups, the sparklines), their newest per
     * observer twice more: a few dozen steps each */
    cr_expect_lt(steps, samples * 60, "%lld steps for %lld samples", (long long)steps, samples);
    cr_log_info("summary of a week: %lld observers, %lld samples, %lld VM steps", observers,
                samples, (long long)steps);
    const char *first = json_string_value(json_object_get(json_array_get(list, 0), "observer_id"));
    snprintf(target, sizeof target, "/api/observers/%s/metrics", first);
    json_decref(get(target, &status));
    cr_expect_eq(status, 200);
    json_t *m = get(target, &status);
    size_t day = json_array_size(json_object_get(m, "metrics"));
    cr_expect(day >= 287 && day <= 289, "a day every 5 minutes: %zu", day);
    json_decref(m);
    snprintf(target, sizeof target, "/api/observers/%s/metrics?resolution=1h", first);
    m = get(target, &status);
    size_t hours = json_array_size(json_object_get(m, "metrics"));
    cr_expect(hours >= 24 && hours <= 25, "a day of hours: %zu", hours);
    cr_expect_eq(json_array_size(json_object_get(m, "reboots")), 0);
    json_decref(m);
    snprintf(target, sizeof target, "/api/nodes/%s/battery?days=3", node);
    m = get(target, &status);
    cr_expect_eq(status, 200);
    size_t battery = json_array_size(json_object_get(m, "samples"));
    cr_expect(battery >= 863 && battery <= 865, "three days every 5 minutes: %zu", battery);
    json_decref(m);
    json_decref(a);
}

/* SPDX-License-Identifier: ISC */
/*
 * The Analytics page's signal reports (workers/api/ep_analytics_rf.c) on CoreScope's real
 * migrated end-to-end database, freshened into a private copy whose newest times are the top of
 * the current hour, with CoreScope's config.example.json. What each answer must hold is what
 * CoreScope's own server answered for such a copy, recorded in tests/corescope-analytics-rf.json
 * (how: its _comment). The recording's copy was freshened to another hour, so every time in it
 * is shifted by whole hours: the test moves each recorded "hour" by that many hours, puts the
 * targets' {-N} (the copy's newest time minus N seconds) in place, compares numbers to 1e-9 of
 * their size (sums taken in another order) and sorts the lists whose ties CoreScope leaves to
 * Go's map order. Values are also worked out from the data with the test's own SQL. Without
 * ../shared every test skips and says why.
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

#define EXPECTED MESHGATE_SOURCE_DIR "/tests/corescope-analytics-rf.json"

static struct mg_recorded fx;

static void cleanup(void)
{
    mg_recorded_cleanup(&fx);
}

TestSuite(analytics_rf, .fini = cleanup, .timeout = 120);

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

/* target with each {-N} replaced by the copy's newest time minus N seconds (RFC 3339). */
static void expand(const char *target, int64_t now, char *out, size_t cap)
{
    size_t n = 0;
    for (const char *p = target; *p && n + 1 < cap;) {
        if (p[0] == '{' && p[1] == '-') {
            char *end;
            long long back = strtoll(p + 2, &end, 10);
            if (*end == '}') {
                time_t t = (time_t)(now - back);
                struct tm tm;
                gmtime_r(&t, &tm);
                n += strftime(out + n, cap - n, "%Y-%m-%dT%H:%M:%SZ", &tm);
                p = end + 1;
                continue;
            }
        }
        out[n++] = *p++;
    }
    out[n] = '\0';
}

/* ---- comparing with CoreScope's recorded answer ---- */

static int64_t hour_of(const char *s)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    if (!s || sscanf(s, "%4d-%2d-%2dT%2d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour) != 4)
        return INT64_MIN;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (int64_t)timegm(&tm) / 3600;
}

static int64_t seconds_of(const char *s)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    if (!s || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                     &tm.tm_hour, &tm.tm_min, &tm.tm_sec) != 6)
        return INT64_MIN;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (int64_t)timegm(&tm);
}

/* The sort key of a list's entry whose order CoreScope leaves to Go's map order. */
static const char *sort_field(const char *list)
{
    if (strcmp(list, "scatterData") == 0) /* with a region: observer by observer, unordered */
        return "snr";
    if (strcmp(list, "payloadTypes") == 0)
        return "type";
    if (strcmp(list, "snrByType") == 0)
        return "name";
    if (strcmp(list, "channels") == 0)
        return "hash";
    if (strcmp(list, "channelTimeline") == 0)
        return ""; /* the whole entry */
    return NULL;
}

static json_t *sorted_copy(json_t *list, const char *field)
{
    size_t n = json_array_size(list);
    json_t *out = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(list, i);
        size_t at = json_array_size(out);
        for (size_t k = 0; k < json_array_size(out); k++) {
            json_t *x = json_object_get(json_array_get(out, k), field);
            json_t *y = json_object_get(e, field);
            bool before = json_is_string(y) ? strcmp(json_string_value(y), json_string_value(x)) < 0
                                            : json_number_value(y) < json_number_value(x);
            if (!field[0]) {
                char *dx = json_dumps(json_array_get(out, k), JSON_SORT_KEYS | JSON_COMPACT);
                char *dy = json_dumps(e, JSON_SORT_KEYS | JSON_COMPACT);
                before = strcmp(dy, dx) < 0;
                free(dx);
                free(dy);
            }
            if (strcmp(field, "snr") == 0 && json_number_value(y) == json_number_value(x))
                before = json_number_value(json_object_get(e, "rssi")) <
                         json_number_value(json_object_get(json_array_get(out, k), "rssi"));
            if (before) {
                at = k;
                break;
            }
        }
        json_array_insert(out, at, e);
    }
    return out;
}

/* The most frequent senders: CoreScope cuts the list among equal counts in Go's map order, so
 * the counts must agree, and the names of those above the last count. */
static void expect_same_top(json_t *want, json_t *got, const char *where)
{
    cr_expect_eq(json_array_size(got), json_array_size(want), "%s: %zu, CoreScope %zu", where,
                 json_array_size(got), json_array_size(want));
    size_t n = json_array_size(want);
    if (!n || json_array_size(got) != n)
        return;
    json_int_t last = json_integer_value(json_object_get(json_array_get(want, n - 1), "count"));
    for (size_t i = 0; i < n; i++) {
        json_t *w = json_array_get(want, i), *g = json_array_get(got, i);
        json_int_t c = json_integer_value(json_object_get(w, "count"));
        cr_expect_eq(json_integer_value(json_object_get(g, "count")), c, "%s[%zu].count", where, i);
        if (c == last)
            continue;
        bool found = false;
        for (size_t k = 0; k < n && !found; k++)
            found = json_equal(json_array_get(got, k), w);
        cr_expect(found, "%s: %s (%lld) missing", where,
                  json_string_value(json_object_get(w, "name")), (long long)c);
    }
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
            if (!g)
                continue;
            if (strcmp(key, "lastActivity") == 0 && json_is_string(v)) {
                cr_expect_eq(seconds_of(json_string_value(g)),
                             seconds_of(json_string_value(v)) + shift_hours * 3600,
                             "%s: %s, CoreScope %s", inner, json_string_value(g),
                             json_string_value(v));
                continue;
            }
            if (strcmp(key, "hour") == 0 && json_is_string(v)) {
                cr_expect_eq(hour_of(json_string_value(g)),
                             hour_of(json_string_value(v)) + shift_hours, "%s: %s, CoreScope %s",
                             inner, json_string_value(g), json_string_value(v));
                continue;
            }
            if (strcmp(key, "topSenders") == 0 && json_is_array(v) && json_is_array(g)) {
                expect_same_top(v, g, inner);
                continue;
            }
            const char *field = sort_field(key);
            if (field && json_is_array(v) && json_is_array(g)) {
                json_t *sw = sorted_copy(v, field), *sg = sorted_copy(g, field);
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
    } else {
        cr_expect(json_equal(want, got), "%s differs from CoreScope's", where);
    }
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
        char expanded[512];
        expand(target, fx.now, expanded, sizeof expanded);
        json_t *got = get(expanded, 200);
        expect_same(want, got, target, shift);
        json_decref(got);
        compared++;
    }
    cr_expect_gt(compared, 0, "no recorded answer of %s", route);
}

Test(analytics_rf, answers_equal_corescopes_on_the_freshened_fixture)
{
    start();
    expect_recorded("/api/analytics/rf");
}

/* ---- values worked out from the data ---- */

/* The observations CoreScope's store keeps: per transmission, one per observer and path. */
#define KEPT                                                                                       \
    "(SELECT o.* FROM observations o LEFT JOIN observers ob ON ob.rowid = o.observer_idx"          \
    " GROUP BY o.transmission_id, coalesce(ob.id, ''), coalesce(o.path_json, ''))"

Test(analytics_rf, totals_and_signal_statistics_are_those_of_the_data)
{
    start();
    json_t *a = get("/api/analytics/rf", 200);
    double tx = number_of("SELECT count(*) FROM transmissions");
    double kept = number_of("SELECT count(*) FROM " KEPT);
    double bare = number_of("SELECT count(*) FROM transmissions t WHERE NOT EXISTS (SELECT 1 FROM"
                            " observations o WHERE o.transmission_id = t.id)");
    cr_expect_eq(json_integer_value(json_object_get(a, "totalTransmissions")), (json_int_t)tx);
    cr_expect_eq(json_integer_value(json_object_get(a, "totalAllPackets")),
                 (json_int_t)(kept + bare));
    cr_expect_eq(json_integer_value(json_object_get(a, "totalPackets")),
                 (json_int_t)number_of("SELECT count(snr) FROM " KEPT));
    json_t *snr = json_object_get(a, "snr");
    cr_expect_eq(json_number_value(json_object_get(snr, "min")),
                 number_of("SELECT min(snr) FROM " KEPT));
    cr_expect_eq(json_number_value(json_object_get(snr, "max")),
                 number_of("SELECT max(snr) FROM " KEPT));
    cr_expect_leq(fabs(json_number_value(json_object_get(snr, "avg")) -
                       number_of("SELECT avg(snr) FROM " KEPT)),
                  1e-9);
    cr_expect_eq(json_integer_value(json_object_get(a, "maxPacketSize")),
                 (json_int_t)number_of("SELECT max(length(raw_hex) / 2) FROM transmissions"));
    /* the scatter: every observation with both values, at most about 500 */
    double both = number_of("SELECT count(*) FROM " KEPT " WHERE snr IS NOT NULL AND rssi IS NOT"
                            " NULL");
    cr_expect_eq(json_array_size(json_object_get(a, "scatterData")),
                 (size_t)(both > 500 ? ceil(both / floor(both / 500)) : both));
    json_decref(a);
}

/* CoreScope's store keeps the newest of copies an observer heard along the same path. */
Test(analytics_rf, copies_with_the_same_observer_and_path_count_once)
{
    start();
    json_t *before = get("/api/analytics/rf", 200);
    mg_test_ctx_close(&fx.t);
    fx.open = false;
    exec_rw(
        "INSERT INTO observations (transmission_id, observer_idx, direction, snr, rssi, score,"
        " path_json, timestamp) SELECT transmission_id, observer_idx, direction, 99, -20, score,"
        " path_json, timestamp - 60 FROM observations LIMIT 20");
    cr_assert(mg_test_ctx_open(&fx.t, fx.db));
    fx.open = true;
    json_t *after = get("/api/analytics/rf?window=30d", 200); /* another key: built anew */
    cr_expect_eq(json_integer_value(json_object_get(after, "totalAllPackets")),
                 json_integer_value(json_object_get(before, "totalAllPackets")));
    cr_expect_eq(json_number_value(json_object_get(json_object_get(after, "snr"), "max")),
                 json_number_value(json_object_get(json_object_get(before, "snr"), "max")),
                 "an older copy's SNR was counted");
    json_decref(before);
    json_decref(after);
}

static char *body_of(const char *target)
{
    cr_assert_eq(mg_test_ctx_get(&fx.t, target), 200, "%s", target);
    return strndup(fx.t.res.body.data, fx.t.res.body.len);
}

/* A region no observer has, "ALL", an unknown window or area, and a window holding every
 * transmission filter nothing, as in CoreScope. */
Test(analytics_rf, filters_that_match_everything_or_nothing_known_change_nothing)
{
    start();
    char *all = body_of("/api/analytics/rf");
    static const char *const same[] = {"/api/analytics/rf?region=ZZZ",
                                       "/api/analytics/rf?region=ALL",
                                       "/api/analytics/rf?window=bogus",
                                       "/api/analytics/rf?area=nowhere",
                                       "/api/analytics/rf?window=30d",
                                       "/api/analytics/rf?from=bogus&window=1h",
                                       NULL};
    for (int i = 0; same[i]; i++) {
        char *b = body_of(same[i]);
        cr_expect_str_eq(b, all, "%s", same[i]);
        free(b);
    }
    free(all);
    /* one region's observations are fewer */
    json_t *sjc = get("/api/analytics/rf?region=sjc", 200), *every = get("/api/analytics/rf", 200);
    cr_expect_lt(json_integer_value(json_object_get(sjc, "totalAllPackets")),
                 json_integer_value(json_object_get(every, "totalAllPackets")));
    cr_expect_gt(json_integer_value(json_object_get(sjc, "totalAllPackets")), 0);
    json_decref(sjc);
    json_decref(every);
}

Test(analytics_rf, a_region_list_too_long_for_a_key_is_refused)
{
    start();
    char target[400] = "/api/analytics/rf?region=";
    for (int i = 0; i < 30; i++)
        strcat(target, "ABCD,");
    json_t *e = get(target, 400);
    cr_expect(json_is_string(json_object_get(e, "error")));
    json_decref(e);
}

/* The fixture carries no SNR or RSSI: a generated database does. Each figure against the test's
 * own SQL over the observations CoreScope's store keeps. */
Test(analytics_rf, signal_figures_of_a_generated_database_are_those_of_its_rows)
{
    mg_test_tmpdir(fx.dir, sizeof fx.dir);
    snprintf(fx.db, sizeof fx.db, "%s/generated.db", fx.dir);
    struct mg_fixture_options o;
    mg_fixture_options_default(&o);
    o.observations = 6000;
    o.obs_per_tx = 3;
    o.seed = 5;
    char err[512] = "";
    cr_assert_eq(mg_fixture_generate(fx.db, &o, err, sizeof err), 0, "%s", err);
    cr_assert(mg_test_ctx_open(&fx.t, fx.db));
    fx.open = true;
    json_t *a = get("/api/analytics/rf", 200);
    double kept_snr = number_of("SELECT count(snr) FROM " KEPT);
    cr_assert_gt(kept_snr, 500, "the generated database has SNR values");
    cr_expect_eq(json_integer_value(json_object_get(a, "totalPackets")), (json_int_t)kept_snr);
    static const char *const stats[][2] = {{"snr", "snr"}, {"rssi", "rssi"}};
    for (int i = 0; i < 2; i++) {
        json_t *s = json_object_get(a, stats[i][0]);
        char sql[512];
        snprintf(sql, sizeof sql, "SELECT min(%s) FROM " KEPT, stats[i][1]);
        cr_expect_eq(json_number_value(json_object_get(s, "min")), number_of(sql), "%s", sql);
        snprintf(sql, sizeof sql, "SELECT max(%s) FROM " KEPT, stats[i][1]);
        cr_expect_eq(json_number_value(json_object_get(s, "max")), number_of(sql), "%s", sql);
        snprintf(sql, sizeof sql, "SELECT avg(%s) FROM " KEPT, stats[i][1]);
        cr_expect_leq(fabs(json_number_value(json_object_get(s, "avg")) - number_of(sql)), 1e-9,
                      "%s", sql);
        /* the median: the value at index n / 2 of the sorted values */
        snprintf(sql, sizeof sql,
                 "SELECT %s FROM " KEPT " WHERE %s IS NOT NULL ORDER BY %s LIMIT 1 OFFSET"
                 " (SELECT count(%s) / 2 FROM " KEPT ")",
                 stats[i][1], stats[i][1], stats[i][1], stats[i][1]);
        cr_expect_eq(json_number_value(json_object_get(s, "median")), number_of(sql), "%s", sql);
        /* every value in one of the 20 bins */
        json_t *bins = json_object_get(json_object_get(a, i ? "rssiValues" : "snrValues"), "bins");
        cr_expect_eq(json_array_size(bins), 20);
        json_int_t in_bins = 0;
        size_t k;
        json_t *b;
        json_array_foreach(bins, k, b) in_bins += json_integer_value(json_object_get(b, "count"));
        snprintf(sql, sizeof sql, "SELECT count(%s) FROM " KEPT, stats[i][1]);
        cr_expect_eq(in_bins, (json_int_t)number_of(sql));
    }
    /* distinct transmissions per hour they were heard in */
    json_int_t per_hour = 0;
    size_t k;
    json_t *h;
    json_array_foreach(json_object_get(a, "packetsPerHour"), k, h) per_hour +=
        json_integer_value(json_object_get(h, "count"));
    cr_expect_eq(per_hour, (json_int_t)number_of("SELECT count(*) FROM (SELECT DISTINCT"
                                                 " transmission_id, strftime('%Y-%m-%dT%H',"
                                                 " timestamp, 'unixepoch') FROM " KEPT ")"));
    double both = number_of("SELECT count(*) FROM " KEPT " WHERE snr IS NOT NULL AND rssi IS NOT"
                            " NULL");
    cr_expect_eq(json_array_size(json_object_get(a, "scatterData")),
                 (size_t)(both > 500 ? ceil(both / floor(both / 500)) : both));
    json_decref(a);
}

/* ---- /api/analytics/channels ---- */

Test(analytics_rf, channels_answers_equal_corescopes_on_the_freshened_fixture)
{
    start();
    expect_recorded("/api/analytics/channels");
}

/* Messages and channels are those of the group texts, worked out with the test's own SQL. */
Test(analytics_rf, channels_count_the_group_texts_of_the_data)
{
    start();
    json_t *a = get("/api/analytics/channels", 200);
    json_t *channels = json_object_get(a, "channels");
    json_int_t messages = 0;
    size_t i;
    json_t *c;
    json_array_foreach(channels, i, c) messages +=
        json_integer_value(json_object_get(c, "messages"));
    cr_expect_eq(messages, (json_int_t)number_of("SELECT count(*) FROM transmissions WHERE"
                                                 " payload_type = 5 AND json_valid(decoded_json)"
                                                 " AND json_type(decoded_json) = 'object'"));
    cr_expect_eq(json_integer_value(json_object_get(a, "activeChannels")),
                 (json_int_t)json_array_size(channels));
    cr_expect_eq(json_array_size(json_object_get(a, "msgLengths")),
                 (size_t)number_of("SELECT count(*) FROM transmissions WHERE payload_type = 5 AND"
                                   " json_valid(decoded_json) AND json_type(decoded_json) ="
                                   " 'object' AND coalesce(json_extract(decoded_json, '$.text'),"
                                   " '') <> ''"));
    json_decref(a);
}

/* A name that does not hash to its channel's byte is a rainbow table's guess: the channel
 * keeps its placeholder and counts as encrypted, unless the ingestor decrypted it. */
Test(analytics_rf, channels_drop_a_name_that_does_not_match_its_hash)
{
    start();
    mg_test_ctx_close(&fx.t);
    fx.open = false;
    exec_rw("DELETE FROM transmissions WHERE payload_type = 5");
    /* "#test" hashes to 217 (SHA-256 of the first 16 bytes of SHA-256("#test")) */
    exec_rw("INSERT INTO transmissions (raw_hex, hash, first_seen, payload_type, decoded_json)"
            " VALUES ('00', 'a1', '2026-05-17T10:00:00Z', 5, '{\"channel\":\"test\","
            "\"channelHash\":217,\"text\":\"hi\",\"sender\":\"bob\"}'),"
            " ('00', 'a2', '2026-05-17T10:05:00Z', 5, '{\"channel\":\"guess\",\"channelHash\":9,"
            "\"text\":\"x\",\"sender\":\"al\"}'),"
            " ('00', 'a3', '2026-05-17T10:06:00Z', 5, '{\"channel\":\"Public\",\"channelHash\":17,"
            "\"text\":\"yo\",\"sender\":\"al\",\"decryptionStatus\":\"decrypted\"}'),"
            " ('00', 'a4', '2026-05-17T10:07:00Z', 5, '{\"channel\":5}')");
    cr_assert(mg_test_ctx_open(&fx.t, fx.db));
    fx.open = true;
    json_t *a = get("/api/analytics/channels", 200);
    json_t *channels = json_object_get(a, "channels");
    cr_assert_eq(json_array_size(channels), 3, "the one with a number for a name is skipped");
    size_t i;
    json_t *c;
    int seen = 0;
    json_array_foreach(channels, i, c)
    {
        const char *hash = json_string_value(json_object_get(c, "hash"));
        const char *name = json_string_value(json_object_get(c, "name"));
        bool encrypted = json_is_true(json_object_get(c, "encrypted"));
        if (strcmp(hash, "217") == 0) {
            seen++;
            cr_expect_str_eq(name, "test");
            cr_expect(!encrypted);
        }
        if (strcmp(hash, "9") == 0) {
            seen++;
            cr_expect_str_eq(name, "ch9");
            cr_expect(encrypted);
        }
        if (strcmp(hash, "17") == 0) {
            seen++;
            cr_expect_str_eq(name, "Public");
            cr_expect(!encrypted);
        }
    }
    cr_expect_eq(seen, 3);
    cr_expect_eq(json_integer_value(json_object_get(a, "decryptable")), 2);
    json_decref(a);
}

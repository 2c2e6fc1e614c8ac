/* SPDX-License-Identifier: ISC */
/*
 * The Route Patterns tab (workers/api/ep_analytics_subpaths.c) on CoreScope's real migrated
 * end-to-end database, freshened into a private copy whose newest times are the top of the
 * current hour, with CoreScope's config.example.json. CoreScope's own answers for such a copy
 * are in tests/corescope-analytics-subpaths.json (how: its _comment); the recording's copy was
 * freshened to another hour, so the detail's times and hours are shifted by whole hours. What
 * is compared is what CoreScope fixes: every count, share and total, key order, and each list's
 * entries above the count where its cut falls (the order of ties, which tied entries make a
 * cut, and which of the runs merged under one name gives rawHops are Go's map order there).
 * Values are also worked out from the data with the test's own SQL. Without ../shared every
 * test skips.
 */
#include "harness.h"
#include "inproc.h"
#include "recorded.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXPECTED MESHGATE_SOURCE_DIR "/tests/corescope-analytics-subpaths.json"

static struct mg_recorded fx;

static void cleanup(void)
{
    mg_recorded_cleanup(&fx);
}

TestSuite(analytics_subpaths, .fini = cleanup, .timeout = 120);

static int by_text(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A top list as far as CoreScope fixes it: its counts in order, and its entries (without
 * rawHops) above the last count, sorted. */
static json_t *top_of(json_t *list)
{
    size_t n = json_array_size(list);
    json_t *counts = json_array();
    json_int_t last =
        n ? json_integer_value(json_object_get(json_array_get(list, n - 1), "count")) : 0;
    char **above = calloc(n + 1, sizeof *above);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(list, i);
        json_int_t c = json_integer_value(json_object_get(e, "count"));
        json_array_append_new(counts, json_integer(c));
        if (c == last)
            continue;
        json_t *copy = json_deep_copy(e);
        json_object_del(copy, "rawHops");
        above[k++] = json_dumps(copy, JSON_COMPACT | JSON_SORT_KEYS);
        json_decref(copy);
    }
    qsort(above, k, sizeof *above, by_text);
    json_t *out = json_object();
    json_object_set_new(out, "counts", counts);
    json_t *a = json_array();
    for (size_t i = 0; i < k; i++) {
        json_array_append_new(a, json_string(above[i]));
        free(above[i]);
    }
    free(above);
    json_object_set_new(out, "above", a);
    return out;
}

static int64_t seconds_of(const char *s)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    if (!s || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                     &tm.tm_hour, &tm.tm_min, &tm.tm_sec) != 6)
        return 0;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (int64_t)timegm(&tm);
}

/* v with its top lists cut to what CoreScope fixes, and (shift hours later) its times. */
static json_t *normal(json_t *v, int64_t shift)
{
    if (json_is_array(v)) {
        json_t *out = json_array();
        for (size_t i = 0; i < json_array_size(v); i++)
            json_array_append_new(out, normal(json_array_get(v, i), shift));
        return out;
    }
    if (!json_is_object(v))
        return json_deep_copy(v);
    json_t *out = json_object();
    const char *key;
    json_t *x;
    json_object_foreach(v, key, x)
    {
        if (!strcmp(key, "subpaths") || !strcmp(key, "parentPaths") || !strcmp(key, "observers")) {
            json_object_set_new(out, key, top_of(x));
        } else if ((!strcmp(key, "firstSeen") || !strcmp(key, "lastSeen")) &&
                   json_string_length(x)) {
            time_t t = (time_t)(seconds_of(json_string_value(x)) + shift * 3600);
            char s[32];
            strftime(s, sizeof s, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
            json_object_set_new(out, key, json_string(s));
        } else if (!strcmp(key, "hourDistribution")) {
            json_t *h = json_array();
            for (int64_t i = 0; i < 24; i++)
                json_array_append(h, json_array_get(x, (size_t)(((i - shift) % 24 + 24) % 24)));
            json_object_set_new(out, key, h);
        } else {
            json_object_set_new(out, key, normal(x, shift));
        }
    }
    return out;
}

/* The keys of every object of got in the order of want's. */
static void expect_key_order(json_t *want, json_t *got, const char *where)
{
    if (json_is_array(want) && json_is_array(got)) {
        for (size_t i = 0; i < json_array_size(want) && i < json_array_size(got); i++)
            expect_key_order(json_array_get(want, i), json_array_get(got, i), where);
        return;
    }
    if (!json_is_object(want) || !json_is_object(got))
        return;
    void *wi = json_object_iter(want), *gi = json_object_iter(got);
    for (; wi && gi; wi = json_object_iter_next(want, wi), gi = json_object_iter_next(got, gi)) {
        cr_expect_str_eq(json_object_iter_key(gi), json_object_iter_key(wi),
                         "%s: keys in another order than CoreScope's", where);
        expect_key_order(json_object_iter_value(wi), json_object_iter_value(gi), where);
    }
    cr_expect(!wi && !gi, "%s: another number of keys than CoreScope's", where);
}

Test(analytics_subpaths, every_recorded_answer_matches_corescope)
{
    mg_recorded_start(&fx, EXPECTED);
    int64_t shift =
        (fx.now - (int64_t)json_integer_value(json_object_get(fx.expected, "now"))) / 3600;
    json_t *answers = json_object_get(fx.expected, "answers");
    cr_assert_geq(json_object_size(answers), 20);
    const char *target;
    json_t *want;
    json_object_foreach(answers, target, want)
    {
        json_t *got = mg_recorded_get(&fx, target, 200);
        expect_key_order(want, got, target);
        json_t *a = normal(want, shift), *b = normal(got, 0);
        char *as = json_dumps(a, JSON_COMPACT), *bs = json_dumps(b, JSON_COMPACT);
        cr_expect(json_equal(a, b), "%s:\n meshgate  %.1500s\n CoreScope %.1500s", target, bs, as);
        free(as), free(bs);
        json_decref(a), json_decref(b), json_decref(got);
    }
}

/* The paths with two hops or more: transmissions whose longest observed path (a JSON array)
 * has two elements or more; the index's runs are lowercased. */
Test(analytics_subpaths, totals_and_runs_worked_out_from_the_data)
{
    mg_recorded_start(&fx, EXPECTED);
    double paths = mg_recorded_number(
        &fx, "SELECT count(*) FROM transmissions t WHERE (SELECT max(json_array_length(path_json))"
             " FROM observations o WHERE o.transmission_id = t.id AND json_valid(path_json)"
             " AND json_type(path_json) = 'array') >= 2");
    cr_assert_gt(paths, 100);
    json_t *v = mg_recorded_get(&fx, "/api/analytics/subpaths?limit=200", 200);
    cr_expect_eq((double)json_integer_value(json_object_get(v, "totalPaths")), paths);
    json_t *list = json_object_get(v, "subpaths");
    cr_assert_gt(json_array_size(list), 10);
    json_int_t before = INT64_MAX;
    for (size_t i = 0; i < json_array_size(list); i++) {
        json_t *e = json_array_get(list, i);
        json_int_t c = json_integer_value(json_object_get(e, "count"));
        cr_expect_leq(c, before, "most first");
        before = c;
        json_t *raw = json_object_get(e, "rawHops");
        size_t n = json_array_size(raw);
        cr_expect(n >= 2 && n <= 8, "runs of 2 to 8 hops without a filter");
        for (size_t k = 0; k < n; k++) {
            const char *h = json_string_value(json_array_get(raw, k));
            for (const char *p = h; p && *p; p++)
                cr_expect(!(*p >= 'A' && *p <= 'Z'), "the index's hops are lowercased: %s", h);
        }
        double pct = json_number_value(json_object_get(e, "pct"));
        cr_expect_lt(pct - (double)c * 100 / paths, 0.051);
        cr_expect_gt(pct - (double)c * 100 / paths, -0.051);
    }
    /* the detail of the first run: each match counted, every hour and observer of them */
    json_t *raw = json_object_get(json_array_get(list, 0), "rawHops");
    char target[256] = "/api/analytics/subpath-detail?hops=";
    for (size_t k = 0; k < json_array_size(raw); k++) {
        strcat(target, json_string_value(json_array_get(raw, k)));
        if (k + 1 < json_array_size(raw))
            strcat(target, ",");
    }
    json_t *d = mg_recorded_get(&fx, target, 200);
    json_int_t total = json_integer_value(json_object_get(d, "totalMatches"));
    cr_expect_geq(total, json_integer_value(json_object_get(json_array_get(list, 0), "count")));
    json_int_t hours = 0;
    for (size_t h = 0; h < 24; h++)
        hours += json_integer_value(json_array_get(json_object_get(d, "hourDistribution"), h));
    cr_expect_eq(hours, total);
    json_decref(d);
    json_decref(v);
}

Test(analytics_subpaths, detail_of_a_hidden_node_is_not_found)
{
    mg_recorded_start(&fx, EXPECTED);
    mg_recorded_exec(&fx, "UPDATE nodes SET name = '\xf0\x9f\x9a\xab hidden' WHERE public_key ="
                          " '33333333ab5d31112de8b847a4cbab05f5e8e60deb4e91b8a464b1b5e0357549'");
    json_t *v = mg_recorded_get(&fx,
                                "/api/analytics/subpath-detail?hops=d6,"
                                "33333333ab5d31112de8b847a4cbab05f5e8e60deb4e91b8a464b1b5e0357549",
                                404);
    cr_expect_str_eq(json_string_value(json_object_get(v, "error")), "Not found");
    json_decref(v);
    /* its prefix is no key: answered */
    json_decref(mg_recorded_get(&fx, "/api/analytics/subpath-detail?hops=d6,33", 200));
}

Test(analytics_subpaths, a_request_past_its_bounds_is_400)
{
    mg_recorded_start(&fx, EXPECTED);
    char target[512] = "/api/analytics/subpaths-bulk?groups=2-2:1";
    for (int i = 0; i < 12; i++)
        strcat(target, ",2-2:1");
    json_decref(mg_recorded_get(&fx, target, 400));
    char hops[400] = "/api/analytics/subpath-detail?hops=aa";
    for (int i = 0; i < 60; i++)
        strcat(hops, ",bb");
    json_decref(mg_recorded_get(&fx, hops, 400));
    json_t *v = mg_recorded_get(&fx, "/api/analytics/subpaths-bulk?groups=2-8:5,2-3:x", 200);
    cr_expect_str_eq(json_string_value(json_object_get(v, "error")), "invalid group: 2-3:x");
    json_decref(v);
}

/* SPDX-License-Identifier: ISC */
/*
 * A cold report's last answer is served while its next one builds (workers/core/cold_report.h,
 * stale while revalidating): a report keyed by its interval ("|@SECONDS:INDEX") whose new
 * interval's key another request builds answers the previous interval's answer at once,
 * light, marked (Age:, X-Meshgate-Cache: stale, the cache's stale counter), and does not
 * build; with nothing kept it follows the build as before; an answer older than the bound is
 * not served. In-process, through the real dispatch of /api/analytics/topology; "the
 * interval turned" is made by moving the stored answer to the previous interval's key.
 */
#include "harness.h"
#include "inproc.h"

#include "clock.h"
#include "cold_report.h"
#include "result_body.h"

#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TestSuite(cold_stale, .timeout = 120);

#define TARGET "/api/analytics/topology"

static char dir[128], db_path[256];

static void make_db(void)
{
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db_path, sizeof db_path, "%s/stale.db", dir);
    cr_assert_eq(mg_test_make_db(db_path, true, NULL), 0);
}

static void remove_db(void)
{
    mg_test_rmdir(dir);
}

/* The READY entry whose key starts with prefix; -1: none. */
static int ready_entry(struct mg_test_ctx *t, const char *prefix)
{
    for (unsigned i = 0; i < t->seg.cache.cache->entries; i++) {
        const struct mg_cache_entry *e = &t->seg.cache.entry[i];
        if (e->state == MG_CACHE_READY && strncmp(e->key, prefix, strlen(prefix)) == 0)
            return (int)i;
    }
    return -1;
}

/*
 * Builds the report once (the current interval's answer, kept), then moves that answer to
 * the previous interval's key, aged by age_s, as if the interval had turned since; key: the
 * current interval's key (now absent), body: the answer.
 */
static void answer_of_the_previous_interval(struct mg_test_ctx *t, int64_t age_s, char *key,
                                            char **body)
{
    cr_assert_eq(mg_test_ctx_get(t, TARGET), 200, "%s", t->res.body.data);
    cr_assert_null(strstr(mg_buf_cstr(&t->res.headers), "stale"));
    *body = strdup(mg_buf_cstr(&t->res.body));
    int i = ready_entry(t, "topology|");
    cr_assert_geq(i, 0, "the answer was not kept");
    struct mg_cache_entry *e = &t->seg.cache.entry[i];
    snprintf(key, MG_CACHE_KEY_MAX, "%s", e->key);
    char *colon = strrchr(e->key, ':');
    cr_assert_not_null(colon, "the key names no interval: %s", e->key);
    cr_assert_not_null(strstr(e->key, "|@300:"), "%s", e->key);
    long long index = strtoll(colon + 1, NULL, 10);
    snprintf(colon + 1, MG_CACHE_KEY_MAX - (size_t)(colon + 1 - e->key), "%lld", index - 1);
    e->since_monotonic_ns -= age_s * MG_NS_PER_SEC;
}

/* Another worker builds key now: the one build of the new interval. */
static uint64_t another_builds(struct mg_test_ctx *t, const char *key)
{
    uint64_t other = 0;
    struct mg_buf none;
    mg_buf_init(&none);
    cr_assert_eq(
        mg_result_cache_lookup(&t->seg.cache, getpid(), 1, key, mg_monotonic_ns(), &none, &other),
        MG_CACHE_CLAIMED);
    mg_buf_free(&none);
    return other;
}

/* One request's first turn, as the worker's loop runs it. */
static enum mg_turn first_turn(struct mg_test_ctx *t, struct mg_http_request *hr,
                               struct mg_request *req, struct mg_park *park)
{
    struct mg_http_limits limits = {8192, 4096};
    const char *head = "GET " TARGET " HTTP/1.1\r\nHost: t\r\n\r\n";
    int status = 0;
    const char *why = NULL;
    cr_assert_eq(mg_http_parse_request(head, strlen(head), &limits, hr, &status, &why), MG_HTTP_OK);
    mg_test_request_init(req, hr, park);
    park->turns = 1;
    mg_response_reset(&t->res);
    return mg_dispatch(&t->env, req, &t->bufs, &t->res);
}

/* A parked request asked again, as the worker's loop would, until it is answered. */
static enum mg_turn finish(struct mg_test_ctx *t, struct mg_request *req, struct mg_park *park)
{
    enum mg_turn turn = MG_PARK;
    for (unsigned n = park->turns + 1; turn == MG_PARK && n < 100000; n++) {
        park->turns = n;
        mg_response_reset(&t->res);
        turn = mg_dispatch_resume(&t->env, req, &t->bufs, &t->res);
        if (turn == MG_PARK)
            usleep(1000);
    }
    return turn;
}

static bool still_building(struct mg_test_ctx *t, const char *key, uint64_t build_id)
{
    for (unsigned i = 0; i < t->seg.cache.cache->entries; i++) {
        const struct mg_cache_entry *e = &t->seg.cache.entry[i];
        if (e->state == MG_CACHE_BUILDING && strcmp(e->key, key) == 0)
            return e->build_id == build_id;
    }
    return false;
}

Test(cold_stale, the_previous_answer_is_served_at_once_while_one_build_of_the_new_runs,
     .init = make_db, .fini = remove_db)
{
    struct mg_test_ctx t;
    cr_assert(mg_test_ctx_open(&t, db_path));
    char key[MG_CACHE_KEY_MAX];
    char *body;
    answer_of_the_previous_interval(&t, 70, key, &body);
    uint64_t other = another_builds(&t, key);
    struct mg_result_cache *c = t.seg.cache.cache;
    uint64_t stored = atomic_load(&c->stored), stale = atomic_load(&c->stale);
    struct mg_http_request hr;
    struct mg_request req;
    struct mg_park park;
    enum mg_turn turn = first_turn(&t, &hr, &req, &park);
    cr_expect_eq(turn, MG_DONE, "it did not answer at once (it waited for the build)");
    cr_expect_eq(t.res.status, 200);
    cr_expect(mg_dispatch_was_light(&park), "a stale answer was admitted heavy");
    cr_expect_str_eq(mg_buf_cstr(&t.res.body), body, "not the previous answer");
    const char *headers = mg_buf_cstr(&t.res.headers);
    cr_expect_not_null(strstr(headers, "X-Meshgate-Cache: stale\r\n"), "%s", headers);
    long long age = -1;
    const char *at = strstr(headers, "Age: ");
    cr_expect(at && sscanf(at, "Age: %lld", &age) == 1 && age >= 70 && age < 300, "%s", headers);
    cr_expect_eq(atomic_load(&c->stale), stale + 1, "the stale answer was not counted");
    /* It built nothing: the one build is the other worker's, still under way. */
    cr_expect_eq(atomic_load(&c->stored), stored);
    cr_expect(still_building(&t, key, other), "the other build was disturbed");
    mg_result_cache_abandon(&t.seg.cache, getpid(), other);
    free(body);
    mg_test_ctx_close(&t);
}

Test(cold_stale, with_nothing_kept_a_request_follows_the_build_as_before, .init = make_db,
     .fini = remove_db)
{
    struct mg_test_ctx t;
    cr_assert(mg_test_ctx_open(&t, db_path));
    char key[MG_CACHE_KEY_MAX];
    char *body;
    answer_of_the_previous_interval(&t, 0, key, &body);
    /* Nothing kept: the previous answer is another report's. */
    int i = ready_entry(&t, "topology|");
    cr_assert_geq(i, 0);
    t.seg.cache.entry[i].key[0] = 'x';
    uint64_t other = another_builds(&t, key);
    uint64_t stale = atomic_load(&t.seg.cache.cache->stale);
    struct mg_http_request hr;
    struct mg_request req;
    struct mg_park park;
    cr_expect_eq(first_turn(&t, &hr, &req, &park), MG_PARK, "it did not wait for the build");
    cr_expect_eq(atomic_load(&t.seg.cache.cache->stale), stale);
    /* The other build ends with an answer: the follower is answered with it, fresh. */
    const char *fresh = "{\"fresh\":true}\n";
    mg_result_cache_store(&t.seg.cache, getpid(), other, fresh, strlen(fresh), mg_monotonic_ns());
    cr_expect_eq(finish(&t, &req, &park), MG_DONE);
    cr_expect_str_eq(mg_buf_cstr(&t.res.body), fresh);
    cr_expect_null(strstr(mg_buf_cstr(&t.res.headers), "stale"));
    free(body);
    mg_test_ctx_close(&t);
}

Test(cold_stale, an_answer_older_than_the_bound_is_not_served, .init = make_db, .fini = remove_db)
{
    struct mg_test_ctx t;
    cr_assert(mg_test_ctx_open(&t, db_path));
    char key[MG_CACHE_KEY_MAX];
    char *body;
    /* Stored one second longer ago than the bound, for a 300-second interval the hard cap
     * (and still kept: the cache's TTL is made long enough). */
    cr_assert_leq(MG_COLD_STALE_MAX_S, MG_COLD_STALE_INTERVALS * 300);
    answer_of_the_previous_interval(&t, MG_COLD_STALE_MAX_S + 1, key, &body);
    int i = ready_entry(&t, "topology|");
    cr_assert_geq(i, 0);
    t.seg.cache.entry[i].expires_monotonic_ns = mg_monotonic_ns() + 3600 * MG_NS_PER_SEC;
    uint64_t other = another_builds(&t, key);
    uint64_t stale = atomic_load(&t.seg.cache.cache->stale);
    struct mg_http_request hr;
    struct mg_request req;
    struct mg_park park;
    cr_expect_eq(first_turn(&t, &hr, &req, &park), MG_PARK,
                 "an answer past the bound was served: %s", mg_buf_cstr(&t.res.headers));
    cr_expect_eq(atomic_load(&t.seg.cache.cache->stale), stale);
    /* Nor one that expired (MESHGATE_REACH_CACHE_TTL_MS), however young. */
    t.seg.cache.entry[i].since_monotonic_ns = mg_monotonic_ns() - 10 * MG_NS_PER_SEC;
    t.seg.cache.entry[i].expires_monotonic_ns = mg_monotonic_ns() - 1;
    struct mg_park park2;
    struct mg_request req2;
    struct mg_http_request hr2;
    cr_expect_eq(first_turn(&t, &hr2, &req2, &park2), MG_PARK, "an expired answer was served");
    /* Within the bound and kept: served. */
    t.seg.cache.entry[i].expires_monotonic_ns = mg_monotonic_ns() + 3600 * MG_NS_PER_SEC;
    struct mg_park park3;
    struct mg_request req3;
    struct mg_http_request hr3;
    cr_expect_eq(first_turn(&t, &hr3, &req3, &park3), MG_DONE);
    cr_expect_str_eq(mg_buf_cstr(&t.res.body), body);
    /* The other build is given up: the two that waited build it and are answered. */
    mg_result_cache_abandon(&t.seg.cache, getpid(), other);
    cr_expect_eq(finish(&t, &req, &park), MG_DONE);
    cr_expect_eq(t.res.status, 200);
    cr_expect_eq(finish(&t, &req2, &park2), MG_DONE);
    cr_expect_eq(t.res.status, 200);
    free(body);
    mg_test_ctx_close(&t);
}

/* SPDX-License-Identifier: ISC */
/*
 * GET /api/perf: every figure comes from the shared segment, so it describes the whole
 * process group; sections in their fixed order, maps with sorted keys.
 */
#include "harness.h"
#include "inproc.h"

#include "router.h"
#include "shared_value.h"
#include "stats.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

TestSuite(perf, .timeout = 30);

struct fixture {
    char dir[128];
    char db[256];
    struct mg_test_ctx t;
};

static void open_fixture(struct fixture *f, const char *sql)
{
    mg_test_tmpdir(f->dir, sizeof f->dir);
    snprintf(f->db, sizeof f->db, "%s/perf.db", f->dir);
    cr_assert_eq(mg_test_make_db(f->db, false, sql), 0);
    cr_assert(mg_test_ctx_open(&f->t, f->db));
}

static void close_fixture(struct fixture *f)
{
    mg_test_ctx_close(&f->t);
    mg_test_rmdir(f->dir);
}

static const char *perf(struct fixture *f, const char *target)
{
    cr_assert_eq(mg_test_ctx_get(&f->t, target), 200);
    return f->t.res.body.data;
}

/* The text between "key": and the next ',' or '}' after anchor (NULL: from the start). */
static const char *value_after(const char *body, const char *anchor, const char *key, char *out,
                               size_t cap)
{
    const char *from = anchor ? strstr(body, anchor) : body;
    cr_assert(from, "no %s in %s", anchor, body);
    char quoted[128];
    snprintf(quoted, sizeof quoted, "\"%s\":", key);
    const char *p = strstr(from, quoted);
    cr_assert(p, "no %s after %s in %s", key, anchor ? anchor : "start", body);
    p += strlen(quoted);
    size_t n = strcspn(p, ",}]");
    cr_assert(n < cap);
    memcpy(out, p, n);
    out[n] = '\0';
    return out;
}

static long long int_after(const char *body, const char *anchor, const char *key)
{
    char text[64];
    return strtoll(value_after(body, anchor, key, text, sizeof text), NULL, 10);
}

Test(perf, top_level_sections_come_in_fixed_order)
{
    struct fixture f;
    open_fixture(&f, NULL);
    const char *body = perf(&f, "/api/perf");
    const char *keys[] = {"{\"uptime\":",          ",\"totalRequests\":",
                          ",\"avgMs\":",           ",\"endpoints\":",
                          ",\"slowQueries\":",     ",\"cache\":",
                          ",\"packetStore\":null", ",\"sqlite\":",
                          ",\"workers\":",         ",\"gates\":{\"anonLine\":{",
                          ",\"counters\":"};
    int missing = mg_test_missing_in_order(body, keys, sizeof keys / sizeof keys[0]);
    cr_assert_eq(missing, -1, "%s missing or out of order in %s", missing < 0 ? "" : keys[missing],
                 body);
    cr_expect(strncmp(body, "{\"uptime\":", 10) == 0);
    cr_expect_eq(body[f.t.res.body.len - 1], '\n');
    cr_expect(strstr(body, "memoryBreakdown") == NULL);
    cr_expect_str_eq(f.t.res.content_type, "application/json");
    close_fixture(&f);
}

Test(perf, endpoints_list_answered_routes_sorted_with_latency_in_ms)
{
    struct fixture f;
    open_fixture(&f, NULL);
    struct mg_segment *seg = &f.t.seg;
    /* Two routes answered; "(not found)" sorts before "/api/..." bytewise. */
    unsigned healthz = mg_route_match("/api/healthz", (char[8]){0}, 8);
    unsigned stats = mg_route_match("/api/stats", (char[8]){0}, 8);
    cr_assert_neq(healthz, MG_ROUTE_NOT_FOUND);
    mg_route_record(seg, stats, 200, 2000);
    mg_route_record(seg, stats, 200, 4000);
    mg_route_record(seg, healthz, 200, 1000);
    mg_route_record(seg, healthz, 200, 1000);
    mg_route_record(seg, healthz, 200, 1000);
    mg_route_record(seg, healthz, 200, 1000);
    mg_route_record(seg, MG_ROUTE_NOT_FOUND, 404, 100);
    mg_counter_add(seg, MG_CTR_REQUESTS, 7);

    const char *body = perf(&f, "/api/perf");
    /* sum 10100 us over 7 requests: 1.44 ms */
    cr_expect(strstr(body, ",\"totalRequests\":7,\"avgMs\":1.4,") != NULL, "%s", body);
    /* p95 of 4 samples at 1000 us: its bucket's upper bound capped by the maximum. */
    cr_expect(strstr(body, "\"endpoints\":{"
                           "\"(not found)\":{\"count\":1,\"avgMs\":0.1,\"p50Ms\":0.1,"
                           "\"p95Ms\":0.1,\"maxMs\":0.1},"
                           "\"/api/healthz\":{\"count\":4,\"avgMs\":1,\"p50Ms\":1,\"p95Ms\":1,"
                           "\"maxMs\":1},"
                           "\"/api/stats\":{\"count\":2,\"avgMs\":3,\"p50Ms\":2,\"p95Ms\":4,"
                           "\"maxMs\":4}},") != NULL,
              "%s", body);
    cr_expect(strstr(body, "\"/api/perf\"") == NULL, "a route that answered nothing is left out");
    close_fixture(&f);
}

Test(perf, slow_queries_are_newest_first_with_millisecond_utc_times)
{
    struct fixture f;
    open_fixture(&f, NULL);
    /* 2026-05-17T18:13:27.081Z */
    int64_t t0 = 1779041607LL * 1000000000LL + 81000000LL;
    mg_slow_record(&f.t.seg, "/api/nodes/x/reach", 200, 150000, t0);
    mg_slow_record(&f.t.seg, "/api/fast", 200, 99999, t0 + 1000000000LL); /* under 100 ms */
    mg_slow_record(&f.t.seg, "/api/packets", 500, 1234567, t0 + 2000000000LL);
    const char *body = perf(&f, "/api/perf");
    cr_expect(strstr(body, "\"slowQueries\":["
                           "{\"path\":\"/api/packets\",\"ms\":1234.6,"
                           "\"time\":\"2026-05-17T18:13:29.081Z\",\"status\":500},"
                           "{\"path\":\"/api/nodes/x/reach\",\"ms\":150,"
                           "\"time\":\"2026-05-17T18:13:27.081Z\",\"status\":200}],") != NULL,
              "%s", body);
    close_fixture(&f);
}

Test(perf, slow_queries_keep_only_the_last_twenty)
{
    struct fixture f;
    open_fixture(&f, NULL);
    for (int i = 0; i < 25; i++) {
        char path[32];
        snprintf(path, sizeof path, "/slow/%d", i);
        mg_slow_record(&f.t.seg, path, 200, 200000, 1779041607LL * 1000000000LL);
    }
    const char *body = perf(&f, "/api/perf");
    int n = 0;
    for (const char *p = strstr(body, "\"path\":\"/slow/"); p;
         p = strstr(p + 1, "\"path\":\"/slow/"))
        n++;
    cr_expect_eq(n, 20);
    cr_expect(strstr(body, "\"slowQueries\":[{\"path\":\"/slow/24\"") != NULL, "%s", body);
    cr_expect(strstr(body, "\"/slow/4\"") == NULL, "%s", body);
    close_fixture(&f);
}

Test(perf, counters_name_every_counter_in_bytewise_order)
{
    struct fixture f;
    open_fixture(&f, NULL);
    mg_counter_add(&f.t.seg, MG_CTR_BYTES_SENT, 12345);
    const char *body = perf(&f, "/api/perf");
    const char *counters = strstr(body, ",\"counters\":{");
    cr_assert(counters, "%s", body);
    /* Walk the keys of the (flat) counters object in the order they were written. */
    char prev[64] = "";
    int listed = 0;
    for (const char *p = counters + strlen(",\"counters\":{"); *p == '"';) {
        const char *end = strchr(p + 1, '"');
        cr_assert(end);
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(end - p - 1), p + 1);
        cr_expect(strcmp(prev, name) < 0, "%s comes after %s", name, prev);
        snprintf(prev, sizeof prev, "%s", name);
        listed++;
        p = end + strcspn(end, ",}");
        p += *p == ',';
    }
    cr_expect_eq(listed, MG_CTR_COUNT);
    for (int i = 0; i < MG_CTR_COUNT; i++) {
        char key[80];
        snprintf(key, sizeof key, "\"%s\":", mg_counter_names[i]);
        cr_expect(strstr(counters, key) != NULL, "counter %s missing", mg_counter_names[i]);
    }
    cr_expect(strstr(counters, "\"bytes_sent\":12345,") != NULL, "%s", counters);
    close_fixture(&f);
}

Test(perf, meshgate_cache_reports_how_often_group_values_were_recomputed)
{
    struct fixture f;
    open_fixture(&f, NULL);
    const char *body = perf(&f, "/api/perf");
    /* The first /api/perf computed the row counts; nobody asked for /api/stats yet. */
    cr_expect(strstr(body,
                     "\"meshgateCache\":{\"stats\":{\"refreshes\":0,\"ageMs\":null,"
                     "\"intervalMs\":10000},\"dbCounts\":{\"refreshes\":1,\"ageMs\":") != NULL,
              "%s", body);
    cr_assert_eq(mg_test_ctx_get(&f.t, "/api/stats"), 200);
    cr_assert_eq(mg_test_ctx_get(&f.t, "/api/stats"), 200);
    body = perf(&f, "/api/perf");
    cr_expect(strstr(body, "\"meshgateCache\":{\"stats\":{\"refreshes\":1,\"ageMs\":") != NULL,
              "%s", body);
    cr_expect_lt(int_after(body, "\"meshgateCache\":{\"stats\":", "ageMs"), 5000);
    cr_expect_eq(int_after(body, "\"dbCounts\":", "refreshes"), 1, "%s", body);
    cr_expect_eq(int_after(body, "\"meshgateCache\":", "groupValueHits"), 2, "%s", body);
    close_fixture(&f);
}

/*
 * "cache" has the keys and order CoreScope's Perf page reads (size, hits, misses, staleHits,
 * recomputes, hitRate), filled from the group values and the shared result cache.
 */
Test(perf, cache_has_the_shape_corescope_perf_page_reads)
{
    struct fixture f;
    open_fixture(&f, NULL);
    const char *body = perf(&f, "/api/perf");
    /* One group value computed (the row counts): one entry, one miss, no hit. */
    cr_expect(strstr(body, "\"cache\":{\"size\":1,\"hits\":0,\"misses\":1,\"staleHits\":0,"
                           "\"recomputes\":1,\"hitRate\":0},\"packetStore\":null,") != NULL,
              "%s", body);
    cr_assert_eq(mg_test_ctx_get(&f.t, "/api/stats"), 200); /* computed: a miss */
    cr_assert_eq(mg_test_ctx_get(&f.t, "/api/stats"), 200); /* fresh: a hit */
    body = perf(&f, "/api/perf");                           /* row counts fresh: a hit */
    cr_expect(strstr(body, "\"cache\":{\"size\":2,\"hits\":2,\"misses\":2,\"staleHits\":0,"
                           "\"recomputes\":2,\"hitRate\":50},") != NULL,
              "%s", body);
    close_fixture(&f);
}

static double mb2(double bytes)
{
    return round(bytes / (1024.0 * 1024.0) * 100.0) / 100.0;
}

Test(perf, sqlite_reports_file_sizes_and_row_counts)
{
    struct fixture f;
    mg_test_tmpdir(f.dir, sizeof f.dir);
    snprintf(f.db, sizeof f.db, "%s/perf.db", f.dir);
    cr_assert_eq(mg_test_make_db(f.db, false,
                                 "INSERT INTO nodes (public_key) VALUES ('a'), ('b'), ('c');"
                                 "INSERT INTO observers (id) VALUES ('O1'), ('O2');"),
                 0);
    /* An ingestor that keeps writing: WAL mode, the -wal file stays while it is open. */
    sqlite3 *writer;
    cr_assert_eq(mg_test_sqlite_open(f.db, &writer), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(writer,
                              "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0;"
                              "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                              "WHERE i < 3000) INSERT INTO transmissions (raw_hex, hash, "
                              "first_seen) SELECT printf('%0200d', i), printf('%016x', i), "
                              "'2026-05-17T00:00:00Z' FROM n;"
                              "INSERT INTO observations (transmission_id, timestamp) "
                              "SELECT id, 1 FROM transmissions WHERE id <= 7;",
                              NULL, NULL, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(writer));
    cr_assert(mg_test_ctx_open(&f.t, f.db));

    char wal[300];
    snprintf(wal, sizeof wal, "%s-wal", f.db);
    struct stat st;
    cr_assert_eq(stat(wal, &st), 0);
    cr_assert_gt(st.st_size, 100 * 1024, "a WAL big enough to show in MB");
    sqlite3_stmt *q;
    sqlite3_prepare_v2(writer,
                       "SELECT page_count * page_size, freelist_count * page_size "
                       "FROM pragma_page_count, pragma_page_size, pragma_freelist_count",
                       -1, &q, NULL);
    cr_assert_eq(sqlite3_step(q), SQLITE_ROW);
    double db_bytes = (double)sqlite3_column_int64(q, 0);
    double free_bytes = (double)sqlite3_column_int64(q, 1);
    sqlite3_finalize(q);

    const char *body = perf(&f, "/api/perf");
    char expect[512];
    char v1[32], v2[32], v3[32];
    mg_json_format_double(mb2(db_bytes), v1, sizeof v1);
    mg_json_format_double(mb2((double)st.st_size), v2, sizeof v2);
    mg_json_format_double(mb2(free_bytes), v3, sizeof v3);
    snprintf(expect, sizeof expect,
             "\"sqlite\":{\"dbSizeMB\":%s,\"walSizeMB\":%s,\"freelistMB\":%s,"
             "\"rows\":{\"transmissions\":3000,\"observations\":7,\"nodes\":3,\"observers\":2}}",
             v1, v2, v3);
    cr_expect(strstr(body, expect) != NULL, "expected %s in %s", expect, body);
    cr_expect_neq(strcmp(v2, "0"), 0, "the WAL's size is reported");

    sqlite3_close(writer); /* the last connection checkpoints and removes the WAL */
    close_fixture(&f);
}

Test(perf, wal_size_is_zero_without_a_wal_file)
{
    struct fixture f;
    open_fixture(&f, NULL);
    const char *body = perf(&f, "/api/perf");
    cr_expect(strstr(body, "\"walSizeMB\":0,\"freelistMB\":0,\"rows\":{\"transmissions\":0,"
                           "\"observations\":0,\"nodes\":0,\"observers\":0}}") != NULL,
              "%s", body);
    close_fixture(&f);
}

Test(perf, mem_other_than_exactly_1_is_plain_perf)
{
    struct fixture f;
    open_fixture(&f, NULL);
    const char *targets[] = {"/api/perf?mem=0", "/api/perf?mem=true",
                             "/api/perf?mem=", "/api/perf?mem=01", "/api/perf?mem=1.0"};
    for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++) {
        const char *body = perf(&f, targets[i]);
        cr_expect(strncmp(body, "{\"uptime\":", 10) == 0, "%s: %s", targets[i], body);
        cr_expect(strstr(body, "memoryBreakdown") == NULL, "%s", targets[i]);
    }
    close_fixture(&f);
}

Test(perf, workers_section_lists_each_slot_of_the_scoreboard)
{
    struct fixture f;
    open_fixture(&f, NULL);
    const char *body = perf(&f, "/api/perf");
    char expect[256];
    snprintf(expect, sizeof expect,
             "\"workers\":{\"configured\":1,\"alive\":1,\"slots\":[{\"slot\":0,\"pid\":%d,"
             "\"state\":\"handling\",\"requests\":0,\"requestsAllSpawns\":0,\"connections\":0,"
             "\"spawns\":1}]}",
             (int)getpid());
    cr_expect(strstr(body, expect) != NULL, "expected %s in %s", expect, body);
    close_fixture(&f);
}

/* Sends GET target on an open keep-alive connection and reads the answer. */
static void get_on(int fd, const char *target, struct mg_test_response *r)
{
    char req[256];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", target);
    cr_assert(mg_test_send(fd, req, (size_t)n));
    cr_assert(mg_test_read_response(fd, r, false, 5000));
}

Test(perf, totals_are_the_sum_over_every_worker_process)
{
    /* One connection per worker: a worker at its one connection stops accepting, so the
     * second connection must be taken by the other worker. */
    const char *env[] = {"MESHGATE_WORKERS=2", "MESHGATE_MAX_CONNS_PER_WORKER=1", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    int a = mg_test_connect(s.port);
    struct mg_test_response r;
    get_on(a, "/api/healthz", &r);
    mg_test_response_free(&r);
    int b = mg_test_connect(s.port);
    get_on(b, "/api/healthz", &r);
    mg_test_response_free(&r);
    for (int i = 0; i < 10; i++) {
        get_on(a, "/api/healthz", &r);
        mg_test_response_free(&r);
    }
    for (int i = 0; i < 15; i++) {
        get_on(b, i % 3 ? "/api/healthz" : "/api/nothing", &r);
        mg_test_response_free(&r);
    }
    /* 27 answered: 22 healthz on top of 2, 5 not found. */
    get_on(a, "/api/perf", &r);
    cr_assert_eq(r.status, 200);
    const char *body = r.body;
    cr_expect_eq(int_after(body, NULL, "totalRequests"), 27, "%s", body);
    cr_expect_eq(int_after(body, "\"/api/healthz\":", "count"), 22, "%s", body);
    cr_expect_eq(int_after(body, "\"(not found)\":", "count"), 5, "%s", body);
    cr_expect_eq(int_after(body, "\"counters\":", "requests"), 27, "%s", body);
    cr_expect_eq(int_after(body, "\"counters\":", "responses_4xx"), 5, "%s", body);
    cr_expect_eq(int_after(body, "\"workers\":", "alive"), 2, "%s", body);
    long long slot0 = int_after(body, "{\"slot\":0,", "requests");
    long long slot1 = int_after(body, "{\"slot\":1,", "requests");
    cr_expect_eq(slot0 + slot1, 27, "%s", body);
    cr_expect(slot0 > 0 && slot1 > 0, "both workers served: %s", body);
    mg_test_response_free(&r);
    close(a);
    close(b);
    mg_test_server_stop(&s, 5000);
}

/* Every route of the table and the counted extras fit the segment's route section: the names are
 * copied up to MG_ROUTES_MAX, so a route past it would be counted nowhere. */
Test(routes, every_route_and_extra_fits_the_segments_route_section)
{
    const char *names[MG_ROUTES_MAX + 64];
    unsigned n = mg_route_names(names, MG_ROUTES_MAX + 64);
    cr_assert_leq(n, MG_ROUTES_MAX, "%u routes and extras, MG_ROUTES_MAX is %d", n, MG_ROUTES_MAX);
    cr_assert_str_eq(names[n - 1], "(tunnel)");
}

/* CoreScope's literal routes beside /api/nodes/{pubkey} are not taken for a key: they are
 * their own routes, as CoreScope's server routes them, and a path below them is no node's. */
Test(routes, corescopes_literal_node_routes_are_not_keys)
{
    char param[80];
    unsigned status = mg_route_match("/api/nodes/network-status", param, sizeof param);
    cr_assert_neq(status, MG_ROUTE_NOT_FOUND);
    cr_expect_str_eq(mg_routes[status].template, "/api/nodes/network-status");
    unsigned resolve = mg_route_match("/api/nodes/resolve", param, sizeof param);
    cr_assert_neq(resolve, MG_ROUTE_NOT_FOUND);
    cr_expect_str_eq(mg_routes[resolve].template, "/api/nodes/resolve");
    cr_expect_eq(mg_route_match("/api/nodes/resolve/health", param, sizeof param),
                 MG_ROUTE_NOT_FOUND);
    unsigned detail = mg_route_match("/api/nodes/0123abcd", param, sizeof param);
    cr_assert_neq(detail, MG_ROUTE_NOT_FOUND);
    cr_expect_str_eq(mg_routes[detail].template, "/api/nodes/:pubkey");
    cr_expect_str_eq(param, "0123abcd");
    cr_expect_neq(mg_route_match("/api/nodes/search", param, sizeof param), detail);
}

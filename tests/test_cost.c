/* SPDX-License-Identifier: ISC */
/*
 * Cost classes are honest (issue 13): every request that the router classes light is run on
 * a generated database, and what it costs is counted in what SQLite does, not in time, so
 * the check holds on any machine: the virtual machine's steps (SQLITE_STMTSTATUS_VM_STEP of
 * every statement) and the pages fetched (page cache hits and misses, with the memory map
 * off, since a count(*) walks a whole b-tree in one step). A light request may read nodes,
 * observers and a few pages; a scan of observations or transmissions is far past the bounds.
 *
 * The requests come from the route table itself (router.c: light_cases, each route's worst
 * parameters), and a route that can be light without declaring them fails, so a new light
 * route cannot go unmeasured. Each case runs twice: the first may be heavy (a report, map or
 * group value to build, which is what the heavy class and its line are for); every run that
 * was admitted as light is bounded.
 *
 * With MESHGATE_COST_DB set to a database (say a 2M-observation one from meshgate-fixture),
 * the same walk, plus the heavy requests below, prints what each costs on it instead: the
 * table in docs/benchmarks.md.
 */
#include "db.h"
#include "db_counts.h"
#include "ep_node_detail.h"
#include "fixture.h"
#include "harness.h"
#include "inproc.h"
#include "region_map.h"
#include "router.h"
#include "stats.h"

#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

TestSuite(cost, .timeout = 300);

/* 200 000 observations, few nodes: light work is small and a scan is obvious. */
#define OBSERVATIONS 200000
#define NODES 100
/* Well above what light requests take on this database, far below a scan of observations
 * (the region map's build: ~2.4M steps, ~170 000 pages; count(*) of observations: ~560 pages). */
#define LIGHT_VM_STEPS_MAX 60000 /* a region=... request with every filter: ~12 000 */
#define LIGHT_PAGES_MAX 400

/* Measured only with MESHGATE_COST_DB: heavy requests, for the table. */
static const char *const heavy_targets[] = {
    "/api/packets",
    "/api/packets?limit=10000",
    "/api/packets?groupByHash=true",
    "/api/packets?node={node}",
    "/api/packets?region=SJC",
    "/api/packets?offset=400000",
    "/api/perf?mem=1",
    "/api/nodes/{node}/reach?days=30",
    "/api/nodes/{node}/neighbors",
    "/api/nodes/{node}/paths",
    "/api/nodes/bulk-health",
    "/api/nodes/bulk-health?limit=200",
    "/api/nodes/{node}",
    "/api/nodes/{node}/health",
    "/api/nodes/{node}/clock-skew",
    "/api/nodes/clock-skew",
    "/api/packets/timestamps?since={day_ago}",
    "/api/observers",
    "/api/observers/{observer}",
    "/api/channels",
    "/api/channels?includeEncrypted=true&region=SJC",
    "/api/channels/{channel}/messages",
    "/api/channels/{channel}/messages?region=SJC&offset=200",
    "/api/scope-stats?window=1h",
    "/api/scope-stats?window=7d",
    NULL,
};

/* Other placeholders of the cases: the transmission heard most often (by id, by hash, by
 * hash in upper case), the busiest observer, the busiest channel, a day ago (RFC 3339) and
 * the first node that cannot relay. */
static struct {
    const char *name, *sql;
    char value[160];
} records[] = {
    {"{packet}",
     "SELECT transmission_id FROM observations GROUP BY 1 ORDER BY count(*) DESC LIMIT 1", ""},
    {"{hash}",
     "SELECT hash FROM transmissions WHERE id = (SELECT transmission_id FROM observations"
     " GROUP BY 1 ORDER BY count(*) DESC LIMIT 1)",
     ""},
    {"{HASH}",
     "SELECT upper(hash) FROM transmissions WHERE id = (SELECT transmission_id FROM observations"
     " GROUP BY 1 ORDER BY count(*) DESC LIMIT 1)",
     ""},
    {"{observer}", "SELECT id FROM observers ORDER BY packet_count DESC LIMIT 1", ""},
    {"{channel}",
     "SELECT replace(channel_hash, '#', '%23') FROM transmissions WHERE payload_type = 5"
     " GROUP BY channel_hash ORDER BY count(*) DESC LIMIT 1",
     ""},
    {"{day_ago}", "SELECT strftime('%Y-%m-%dT%H:%M:%SZ', 'now', '-1 day')", ""},
    /* a node that cannot relay: few paths run through it, so its report fits the cache */
    {"{companion}",
     "SELECT public_key FROM nodes WHERE instr(lower(role), 'repeater') = 0"
     " AND instr(lower(role), 'room') = 0 ORDER BY public_key LIMIT 1",
     ""},
};

static void find_records(struct mg_test_ctx *t)
{
    for (size_t i = 0; i < sizeof records / sizeof records[0]; i++) {
        sqlite3_stmt *st = NULL;
        records[i].value[0] = '\0';
        cr_assert_eq(sqlite3_prepare_v2(t->db.conn, records[i].sql, -1, &st, NULL), SQLITE_OK, "%s",
                     records[i].sql);
        if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
            snprintf(records[i].value, sizeof records[i].value, "%s",
                     (const char *)sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
    }
}

static void expand_records(char *target, size_t cap)
{
    for (size_t i = 0; i < sizeof records / sizeof records[0]; i++) {
        char *at = strstr(target, records[i].name);
        if (!at)
            continue;
        char rest[512];
        snprintf(rest, sizeof rest, "%s", at + strlen(records[i].name));
        snprintf(at, cap - (size_t)(at - target), "%s%s", records[i].value, rest);
    }
}

/*
 * "{node}" is the busiest node's key; "{quiet}" the key of the node with the most
 * transmissions among those a node detail may have and stay light
 * (MG_NODE_DETAIL_LIGHT_ROWS), "{prefix}" its first 8 digits (a short link); then the
 * records above.
 */
struct case_keys {
    char node[128], quiet[128];
};

static void expand(const char *target, const struct case_keys *k, char *out, size_t cap)
{
    static const char *const names[] = {"{node}", "{quiet}", "{prefix}"};
    snprintf(out, cap, "%s", target);
    for (size_t i = 0; i < 3; i++) {
        const char *at = strstr(target, names[i]);
        if (!at)
            continue;
        const char *value = i == 0 ? k->node : k->quiet;
        snprintf(out, cap, "%.*s%.*s%s", (int)(at - target), target, i == 2 ? 8 : 64, value,
                 at + strlen(names[i]));
        break;
    }
    expand_records(out, cap);
}

struct measured {
    int status;
    bool light;
    int64_t vm_steps, pages;
    double ms;
};

static struct measured run(struct mg_test_ctx *t, const char *target)
{
    struct measured m;
    int64_t steps = mg_db_vm_steps(&t->db), pages = mg_db_pages_fetched(&t->db);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    m.status = mg_test_ctx_get(t, target);
    clock_gettime(CLOCK_MONOTONIC, &b);
    m.light = t->light;
    m.vm_steps = mg_db_vm_steps(&t->db) - steps;
    m.pages = mg_db_pages_fetched(&t->db) - pages;
    m.ms = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
    return m;
}

static void key_of(struct mg_test_ctx *t, const char *sql, char *out, size_t cap)
{
    sqlite3_stmt *st = NULL;
    out[0] = '\0';
    cr_assert_eq(sqlite3_prepare_v2(t->db.conn, sql, -1, &st, NULL), SQLITE_OK, "%s", sql);
    if (sqlite3_step(st) == SQLITE_ROW)
        snprintf(out, cap, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
}

/* The node with the most ADVERTs (the most observations to probe), and the quiet one. */
static void case_keys(struct mg_test_ctx *t, struct case_keys *k)
{
    key_of(t, "SELECT public_key FROM nodes ORDER BY advert_count DESC, public_key LIMIT 1",
           k->node, sizeof k->node);
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT public_key FROM (SELECT public_key, (SELECT count(*) FROM transmissions"
             " WHERE from_pubkey = nodes.public_key) AS sent FROM nodes) WHERE sent <= %d"
             " ORDER BY sent DESC, public_key LIMIT 1",
             MG_NODE_DETAIL_LIGHT_ROWS);
    key_of(t, sql, k->quiet, sizeof k->quiet);
}

static bool can_be_light(const struct mg_route *r)
{
    return r->cost == MG_COST_LIGHT || r->heavy_when != NULL;
}

static void open_ctx(struct mg_test_ctx *t, const char *db)
{
    cr_assert(mg_test_ctx_open(t, db));
    /* No anonymous rate limit in the way of the walk; every fetch counted. */
    t->seg.clients.table->per_minute = 0;
    mg_db_set_mmap(&t->db, 0);
    mg_region_map_forget();
    /* As a worker does before it serves (db_counts.h). */
    struct mg_db_counts counts;
    cr_assert(mg_db_counts_get(&t->env, &counts));
}

static void print_table(const char *db)
{
    struct mg_test_ctx t;
    open_ctx(&t, db);
    struct case_keys keys;
    char target[512];
    case_keys(&t, &keys);
    find_records(&t);
    printf("| route | request | run | class | status | ms | VM steps | pages |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    for (unsigned i = 0; i < mg_route_table_len; i++) {
        const char *const *cases = mg_routes[i].light_cases;
        for (size_t c = 0; cases && cases[c]; c++) {
            expand(cases[c], &keys, target, sizeof target);
            for (int round = 1; round <= 2; round++) {
                struct measured m = run(&t, target);
                printf("| %s | `%s` | %d | %s | %d | %.1f | %" PRId64 " | %" PRId64 " |\n",
                       mg_routes[i].template, target, round, m.light ? "light" : "heavy", m.status,
                       m.ms, m.vm_steps, m.pages);
            }
        }
    }
    for (size_t c = 0; heavy_targets[c]; c++) {
        expand(heavy_targets[c], &keys, target, sizeof target);
        struct measured m = run(&t, target);
        printf("| | `%s` | 1 | %s | %d | %.1f | %" PRId64 " | %" PRId64 " |\n", target,
               m.light ? "light" : "heavy", m.status, m.ms, m.vm_steps, m.pages);
    }
    fflush(stdout);
    mg_test_ctx_close(&t);
}

Test(cost, every_route_that_can_be_light_declares_its_worst_requests)
{
    for (unsigned i = 0; i < mg_route_table_len; i++) {
        const struct mg_route *r = &mg_routes[i];
        if (can_be_light(r))
            cr_expect(r->light_cases && r->light_cases[0],
                      "%s can be light but declares no worst case (router.c, light_cases)",
                      r->template);
        else
            cr_expect(r->light_cases == NULL, "%s is always heavy but declares light cases",
                      r->template);
    }
}

Test(cost, every_light_request_steps_through_few_rows_on_a_200k_observation_database)
{
    const char *measure = getenv("MESHGATE_COST_DB");
    if (measure && *measure) {
        print_table(measure);
        return;
    }
    char dir[128], db[256], err[512];
    mg_test_tmpdir(dir, sizeof dir);
    cr_assert(dir[0], "no temporary directory");
    snprintf(db, sizeof db, "%s/cost.db", dir);
    struct mg_fixture_options o;
    mg_fixture_options_default(&o);
    o.observations = OBSERVATIONS;
    o.nodes = NODES;
    cr_assert_eq(mg_fixture_generate(db, &o, err, sizeof err), 0, "%s", err);
    struct mg_test_ctx t;
    open_ctx(&t, db);
    struct case_keys keys;
    char target[512];
    case_keys(&t, &keys);
    cr_assert(keys.node[0] && keys.quiet[0], "the generated database has no (quiet) node");
    find_records(&t);
    for (unsigned i = 0; i < mg_route_table_len; i++) {
        const char *const *cases = mg_routes[i].light_cases;
        /* A worker's helper keeps the row counts fresh off the request path; the cold
         * reports before this route may have taken longer than their interval (slow builds,
         * sanitizers): refresh them as the helper would. */
        struct mg_db_counts counts;
        cr_assert(mg_db_counts_get(&t.env, &counts));
        for (size_t c = 0; cases && cases[c]; c++) {
            expand(cases[c], &keys, target, sizeof target);
            int light_runs = 0;
            for (int round = 1; round <= 2; round++) {
                struct measured m = run(&t, target);
                cr_expect_eq(m.status, 200, "%s answered %d: %s", target, m.status,
                             t.res.body.data);
                if (!m.light)
                    continue;
                light_runs++;
                cr_expect_leq(m.vm_steps, LIGHT_VM_STEPS_MAX,
                              "%s (run %d) is light but took %" PRId64 " VM steps", target, round,
                              m.vm_steps);
                cr_expect_leq(m.pages, LIGHT_PAGES_MAX,
                              "%s (run %d) is light but fetched %" PRId64 " pages", target, round,
                              m.pages);
            }
            cr_expect_gt(light_runs, 0, "%s was never light: declare it where it is", target);
        }
    }
    mg_test_ctx_close(&t);
    mg_test_rmdir(dir);
}

/* The check can fail: a scan on a light route is past both bounds. */
Test(cost, the_bounds_catch_a_scan_of_observations)
{
    char dir[128], db[256], err[512];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/cost.db", dir);
    struct mg_fixture_options o;
    mg_fixture_options_default(&o);
    o.observations = OBSERVATIONS;
    o.nodes = NODES;
    cr_assert_eq(mg_fixture_generate(db, &o, err, sizeof err), 0, "%s", err);
    struct mg_test_ctx t;
    open_ctx(&t, db);
    int64_t steps = mg_db_vm_steps(&t.db), pages = mg_db_pages_fetched(&t.db);
    cr_assert_geq(mg_db_scalar(&t.db, "SELECT count(*) FROM observations"), OBSERVATIONS);
    cr_expect_gt(mg_db_pages_fetched(&t.db) - pages, LIGHT_PAGES_MAX, "count(*) went unseen");
    steps = mg_db_vm_steps(&t.db);
    cr_assert_geq(mg_db_scalar(&t.db, "SELECT count(*) FROM observations WHERE snr IS NOT NULL"
                                      " OR snr IS NULL"),
                  OBSERVATIONS);
    cr_expect_gt(mg_db_vm_steps(&t.db) - steps, LIGHT_VM_STEPS_MAX, "a filtered scan went unseen");
    mg_test_ctx_close(&t);
    mg_test_rmdir(dir);
}

/* Every route is counted: the table and the three extras fit the segment's route records
 * (36 routes once outgrew 32, and "(not found)", "(bad request)" and "(static)" went
 * uncounted; "(upstream)" is the fourth, "(tunnel)" the fifth). */
Test(cost, every_route_has_a_record_in_the_segment)
{
    const char *names[MG_ROUTES_MAX + 8];
    cr_expect_leq(mg_route_table_len + 5, MG_ROUTES_MAX);
    unsigned n = mg_route_names(names, MG_ROUTES_MAX);
    cr_expect_eq(n, mg_route_table_len + 5);
    cr_expect_str_eq(names[n - 1], "(tunnel)");
}

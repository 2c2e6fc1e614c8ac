/* SPDX-License-Identifier: ISC */
/*
 * Cost classes are honest (issues 13 and 23): every request that the router classes light is
 * run on generated databases of two shapes, and what it costs is counted in what it reads and
 * writes, not in time, so the check holds on any machine: the virtual machine's steps
 * (SQLITE_STMTSTATUS_VM_STEP of every statement), the pages fetched (page cache hits and
 * misses, with the memory map off, since a count(*) walks a whole b-tree in one step) and the
 * bytes of body it rendered (a copy of an answer kept by an answer cache is not rendering). A
 * light request may read nodes, observers and a few pages and write at most 64 KiB; a scan of
 * observations or transmissions, or an answer of megabytes, is far past the bounds.
 *
 * The shapes: the default one (4 observations per transmission) with the 2M-observation
 * database's 2 000 nodes (the worst case of a request over nodes: the list, search, hops),
 * and the heavy one (800 observations per transmission: the worst case of a request over one
 * transmission's or one node's observations). Each is generated once and kept under the
 * build directory (named by its options and day), so later runs only open it.
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
#include "answer_cache.h"
#include "db.h"
#include "db_counts.h"
#include "ep_node_detail.h"
#include "ep_packets.h"
#include "packet_scan.h"
#include "fixture.h"
#include "harness.h"
#include "inproc.h"
#include "region_map.h"
#include "router.h"
#include "stats.h"
#include "summaries.h"
#include "tx_summary.h"

#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A ceiling, not a measure: each walk builds every cold report its light cases name (about 30 s
 * plain on a quiet machine, three to four times that under ASan); two engineers saw the ASan
 * walk pass 300 s at a load average of 26 to 40. */
TestSuite(cost, .timeout = 900);

/* 200 000 observations: light work is small and a scan is obvious. NODES: the node count of
 * the default shape at 2M observations (the generator's cap, 2 000), so requests over nodes
 * meet their 2M worst case; the heavy shape: a transmission heard by 800 observers, as the
 * 400k copy of issue 23 (a request's worst case there depends on the observations of one
 * transmission, not on how many transmissions there are). */
#define OBSERVATIONS 200000
#define NODES 2000
#define HEAVY_OBS_PER_TX 800
#define HEAVY_OBSERVATIONS (HEAVY_OBS_PER_TX * 60)
#define HEAVY_OBSERVERS 1000
/* Above what light requests take on these databases, below a scan of observations (the
 * region map's build: ~2.4M steps, ~170 000 pages; count(*) of observations' table: far more). A
 * pass over 2 000 nodes is 89 pages and some 20 000 steps: a node detail by a short key, two
 * passes and a quiet node's rows, is ~420 pages; every node in one page 118 000 steps. */
#define LIGHT_VM_STEPS_MAX 60000 /* a region=... request with every filter: ~12 000 */
#define LIGHT_PAGES_MAX 500
/* What a light request may render (the answer cache's former bound on a kept answer). */
#define LIGHT_BYTES_MAX (64 * 1024)

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
    "/api/analytics/roles",
    "/api/analytics/hash-collisions",
    "/api/analytics/hash-collisions?region=SJC",
    "/api/analytics/neighbor-graph",
    "/api/analytics/topology",
    "/api/analytics/distance",
    "/api/analytics/hash-sizes",
    "/api/analytics/hash-sizes?region=SJC",
    "/api/analytics/relay-airtime-share",
    "/api/audio-lab/buckets",
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

/*
 * The worst requests of routes that can be light, past what a light request of them may ask
 * (the most-heard transmission, the busiest node, every node in one page, hops by the
 * thousand): each must be classed heavy, or be light within the bounds.
 */
static const char *const worst_targets[] = {
    "/api/packets?limit=51",
    "/api/packets?limit=50&offset=1001",
    "/api/packets?limit=10000",
    "/api/packets?expand=observations",
    "/api/packets?groupByHash=true",
    "/api/packets?node={node}",
    "/api/packets?hash={hash}",
    "/api/packets?region=SJC",
    "/api/packets?observer={observer}",
    "/api/packets/{packet}",
    "/api/packets/{hash}",
    "/api/traces/{hash}",
    "/api/nodes/{node}",
    "/api/nodes/{loud}",
    "/api/nodes?limit=500",
    "/api/nodes?limit=2000",
    "/api/nodes?limit=2000&sortBy=name",
    "/api/resolve-hops?hops={manyhops}",
    NULL,
};

/* Other placeholders of the cases: the transmission heard most often (by id, by hash, by
 * hash in upper case), the busiest observer, the busiest channel, a day ago (RFC 3339) and
 * the first node that cannot relay. */
#define STR_(x) #x
#define STR(x) STR_(x)
/* A transmission with the most observations that its detail and trace may have and stay
 * light (router.h): the heavy shape has none. */
#define LIGHT_TX                                                                                   \
    "(SELECT transmission_id FROM observations GROUP BY 1 HAVING count(*) <= " STR(                \
        MG_PACKET_LIGHT_OBSERVATIONS) " ORDER BY count(*) DESC, 1 LIMIT 1)"

static struct {
    const char *name, *sql;
    char value[6400];
} records[] = {
    {"{lpacket}", "SELECT " LIGHT_TX, ""},
    {"{lhash}", "SELECT hash FROM transmissions WHERE id = " LIGHT_TX, ""},
    {"{LHASH}", "SELECT upper(hash) FROM transmissions WHERE id = " LIGHT_TX, ""},
    /* Two-digit hops, the first bytes a key may start with: as many as a light
     * request may ask about (MG_RESOLVE_HOPS_LIGHT_MAX), each with several candidates. */
    {"{hops}",
     "WITH RECURSIVE h(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM h WHERE i + 1 < " STR(
         MG_RESOLVE_HOPS_LIGHT_MAX) ") SELECT group_concat(printf('%02x', i), ',') FROM h",
     ""},
    /* The node a detail counted as quiet by its transmissions alone: the most observations
     * among nodes of few transmissions (2 heard 800 times each: 670 KB). */
    {"{loud}",
     "SELECT public_key FROM (SELECT public_key, (SELECT count(*) FROM transmissions WHERE"
     " from_pubkey = nodes.public_key) AS sent, (SELECT count(*) FROM transmissions t JOIN"
     " observations o ON o.transmission_id = t.id WHERE t.from_pubkey = nodes.public_key) AS"
     " heard FROM nodes) WHERE sent BETWEEN 1 AND " STR(
         MG_NODE_DETAIL_LIGHT_ROWS) " ORDER BY heard DESC, public_key LIMIT 1",
     ""},
    {"{manyhops}",
     "WITH RECURSIVE h(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM h WHERE i + 1 < 900)"
     " SELECT group_concat(printf('%02x', i % 256) || substr('abcdef', 1 + i / 256, 1), ',')"
     " FROM h",
     ""},
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
        char rest[8192];
        snprintf(rest, sizeof rest, "%s", at + strlen(records[i].name));
        snprintf(at, cap - (size_t)(at - target), "%s%s", records[i].value, rest);
    }
}

static bool has_empty_record(const char *target)
{
    for (size_t i = 0; i < sizeof records / sizeof records[0]; i++)
        if (strstr(target, records[i].name) && !records[i].value[0])
            return true;
    return false;
}

/*
 * "{node}" is the busiest node's key; "{quiet}" the key of the node with the most
 * observations among those a node detail may have and stay light
 * (MG_NODE_DETAIL_LIGHT_ROWS transmissions, MG_NODE_DETAIL_LIGHT_OBSERVATIONS observations of
 * them), "{prefix}" its first 8 digits (a short link); then the
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
    int64_t vm_steps, pages, bytes; /* bytes: of body rendered, not copied from a cache */
    double ms;
};

static struct measured run(struct mg_test_ctx *t, const char *target)
{
    struct measured m;
    int64_t steps = mg_db_vm_steps(&t->db), pages = mg_db_pages_fetched(&t->db);
    uint64_t copied = mg_cached_bytes_copied();
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    m.status = mg_test_ctx_get(t, target);
    clock_gettime(CLOCK_MONOTONIC, &b);
    m.light = t->light;
    m.vm_steps = mg_db_vm_steps(&t->db) - steps;
    m.pages = mg_db_pages_fetched(&t->db) - pages;
    m.bytes = (int64_t)t->res.body.len - (int64_t)(mg_cached_bytes_copied() - copied);
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
             " WHERE from_pubkey = nodes.public_key) AS sent, (SELECT count(*) FROM"
             " transmissions t JOIN observations o ON o.transmission_id = t.id WHERE"
             " t.from_pubkey = nodes.public_key) AS heard FROM nodes) WHERE sent <= %d AND"
             " heard <= %d ORDER BY heard DESC, sent DESC, public_key LIMIT 1",
             MG_NODE_DETAIL_LIGHT_ROWS, MG_NODE_DETAIL_LIGHT_OBSERVATIONS);
    key_of(t, sql, k->quiet, sizeof k->quiet);
}

static bool can_be_light(const struct mg_route *r)
{
    return r->cost == MG_COST_LIGHT || r->heavy_when != NULL;
}

/* The group's summaries of the context's database, made whole as a worker's helper makes
 * them (summaries.c), so that the pages of /api/packets they answer can be light. */
static struct mg_tx_summaries summaries;

static void open_ctx(struct mg_test_ctx *t, const char *db)
{
    cr_assert(mg_test_ctx_open(t, db));
    char err[512] = "";
    cr_assert_eq(mg_summaries_open(db, 1000, &summaries, err, sizeof err), 0, "%s", err);
    cr_assert(mg_tx_summary_lease_take(&summaries, getpid(), 1));
    cr_assert_eq(mg_packets_summaries_pass(&t->db, &summaries, getpid(), err, sizeof err), 0, "%s",
                 err);
    mg_tx_summary_lease_release(&summaries, getpid());
    t->env.summaries = &summaries;
    /* No anonymous rate limit in the way of the walk; every fetch counted. */
    t->seg.clients.table->per_minute = 0;
    mg_db_set_mmap(&t->db, 0);
    mg_region_map_forget(&t->env);
    /* As a worker does before it serves (db_counts.h). */
    struct mg_db_counts counts;
    cr_assert(mg_db_counts_get(&t->env, &counts));
}

static void close_ctx(struct mg_test_ctx *t)
{
    t->env.summaries = NULL;
    mg_tx_summaries_destroy(&summaries);
    mg_test_ctx_close(t);
}

static void print_table(const char *db)
{
    struct mg_test_ctx t;
    open_ctx(&t, db);
    struct case_keys keys;
    char target[8192];
    case_keys(&t, &keys);
    find_records(&t);
    printf("| route | request | run | class | status | ms | VM steps | pages | bytes |\n");
    printf("|---|---|---|---|---|---|---|---|---|\n");
    for (unsigned i = 0; i < mg_route_table_len; i++) {
        const char *const *cases = mg_routes[i].light_cases;
        for (size_t c = 0; cases && cases[c]; c++) {
            if (has_empty_record(cases[c]))
                continue;
            expand(cases[c], &keys, target, sizeof target);
            for (int round = 1; round <= 2; round++) {
                struct measured m = run(&t, target);
                printf("| %s | `%.120s` | %d | %s | %d | %.1f | %" PRId64 " | %" PRId64
                       " | %" PRId64 " |\n",
                       mg_routes[i].template, target, round, m.light ? "light" : "heavy", m.status,
                       m.ms, m.vm_steps, m.pages, m.bytes);
            }
        }
    }
    for (size_t c = 0; worst_targets[c]; c++) {
        if (has_empty_record(worst_targets[c]))
            continue;
        expand(worst_targets[c], &keys, target, sizeof target);
        for (int round = 1; round <= 2; round++) {
            struct measured m = run(&t, target);
            printf("| | `%.120s` | %d | %s | %d | %.1f | %" PRId64 " | %" PRId64 " | %" PRId64
                   " |\n",
                   target, round, m.light ? "light" : "heavy", m.status, m.ms, m.vm_steps, m.pages,
                   m.bytes);
        }
    }
    for (size_t c = 0; heavy_targets[c] && !getenv("MESHGATE_COST_LIGHT_ONLY"); c++) {
        expand(heavy_targets[c], &keys, target, sizeof target);
        struct measured m = run(&t, target);
        printf("| | `%s` | 1 | %s | %d | %.1f | %" PRId64 " | %" PRId64 " | %" PRId64 " |\n",
               target, m.light ? "light" : "heavy", m.status, m.ms, m.vm_steps, m.pages, m.bytes);
    }
    fflush(stdout);
    close_ctx(&t);
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

/* Answers whose size the program fixes, not the data: the segment's counters (85 KB of
 * /metrics for every route and gate), for admins only. Their steps and pages are bounded. */
static bool size_fixed_by_program(const char *target)
{
    return strcmp(target, "/metrics") == 0 || strcmp(target, "/server-status") == 0;
}

static void expect_bounded(const char *target, int round, const struct measured *m)
{
    cr_expect_leq(m->vm_steps, LIGHT_VM_STEPS_MAX,
                  "%.200s (run %d) is light but took %" PRId64 " VM steps", target, round,
                  m->vm_steps);
    cr_expect_leq(m->pages, LIGHT_PAGES_MAX,
                  "%.200s (run %d) is light but fetched %" PRId64 " pages", target, round,
                  m->pages);
    /* A light page of /api/packets may write MG_PACKETS_LIGHT_BYTES (packet_scan.h): 50 rows. */
    int64_t bytes_max = strncmp(target, "/api/packets", 12) == 0 && strchr("?", target[12])
                            ? MG_PACKETS_LIGHT_BYTES
                            : LIGHT_BYTES_MAX;
    if (!size_fixed_by_program(target))
        cr_expect_leq(m->bytes, bytes_max, "%.200s (run %d) is light but wrote %" PRId64 " bytes",
                      target, round, m->bytes);
}

/* Every light case and worst request on the database; every_case_light: each light case must
 * have been light at least once (a case a shape lacks, a transmission with few enough
 * observations on the heavy shape, is skipped there). */
static void walk(const char *db, bool every_case_light)
{
    struct mg_test_ctx t;
    open_ctx(&t, db);
    struct case_keys keys;
    char target[8192];
    case_keys(&t, &keys);
    cr_assert(keys.node[0] && keys.quiet[0], "the generated database has no (quiet) node");
    find_records(&t);
    for (unsigned i = 0; i < mg_route_table_len; i++) {
        const char *const *cases = mg_routes[i].light_cases;
        for (size_t c = 0; cases && cases[c]; c++) {
            if (has_empty_record(cases[c])) {
                cr_expect(!every_case_light, "%s: the database has no such record", cases[c]);
                continue;
            }
            expand(cases[c], &keys, target, sizeof target);
            /* Twice at least; more while never light, as an answer kept for its second may
             * have expired between two runs on a slow machine. */
            int light_runs = 0;
            for (int round = 1; round <= 2 || (light_runs == 0 && round <= 5); round++) {
                /* A worker's helper keeps the row counts fresh off the request path; the
                 * round before (a cold report's build) may have taken longer than their
                 * interval (slow builds, sanitizers): refresh them as the helper would, or
                 * the request counts the rows itself (651 pages for the audio lab's). */
                struct mg_db_counts counts;
                cr_assert(mg_db_counts_get(&t.env, &counts));
                struct measured m = run(&t, target);
                /* CoreScope's API-key routes answer 403 without an upstream (ep_keyed.c). */
                cr_expect_eq(m.status, mg_routes[i].upstream_first ? 403 : 200,
                             "%s answered %d: %.300s", target, m.status, t.res.body.data);
                if (!m.light)
                    continue;
                light_runs++;
                expect_bounded(target, round, &m);
            }
            if (every_case_light)
                cr_expect_gt(light_runs, 0, "%s was never light: declare it where it is", target);
        }
    }
    for (size_t c = 0; worst_targets[c]; c++) {
        if (has_empty_record(worst_targets[c]))
            continue;
        expand(worst_targets[c], &keys, target, sizeof target);
        for (int round = 1; round <= 2; round++) {
            struct mg_db_counts counts; /* as above */
            cr_assert(mg_db_counts_get(&t.env, &counts));
            struct measured m = run(&t, target);
            cr_expect_eq(m.status, 200, "%.200s answered %d: %.300s", target, m.status,
                         t.res.body.data);
            if (m.light)
                expect_bounded(target, round, &m);
        }
    }
    close_ctx(&t);
}

/* The shape's database under the build directory, generated when it is not there yet (its
 * name holds its options and the hour, so one older than an hour is never used; older ones
 * are removed). */
static void shape_db(const char *name, const struct mg_fixture_options *o, char *out, size_t cap)
{
    long hour = (long)(time(NULL) / 3600);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/cost-shapes", MESHGATE_BUILD_DIR);
    (void)mkdir(dir, 0755);
    snprintf(out, cap, "%s/%s-%ld-%ld-%ld-%ld-%ld.db", dir, name, o->observations, o->nodes,
             o->obs_per_tx, o->observers, hour);
    /* Tests run in parallel processes: one generates, the others wait for it. */
    char lock[700];
    snprintf(lock, sizeof lock, "%s/%s.lock", dir, name);
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    cr_assert_geq(fd, 0, "%s: %s", lock, strerror(errno));
    cr_assert_eq(flock(fd, LOCK_EX), 0);
    if (access(out, R_OK) != 0) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "rm -f '%s/%s-'*", dir, name);
        (void)system(cmd);
        struct mg_fixture_options g = *o;
        g.now_unix = (int64_t)hour * 3600; /* the hour's database, whatever its minute */
        char err[512] = "";
        int rc = mg_fixture_generate(out, &g, err, sizeof err);
        close(fd);
        cr_assert_eq(rc, 0, "%s", err);
        return;
    }
    close(fd);
}

static void default_shape(char *out, size_t cap)
{
    struct mg_fixture_options o;
    mg_fixture_options_default(&o);
    o.observations = OBSERVATIONS;
    o.nodes = NODES;
    shape_db("default", &o, out, cap);
}

static void heavy_shape(char *out, size_t cap)
{
    struct mg_fixture_options o;
    mg_fixture_options_default(&o);
    o.observations = HEAVY_OBSERVATIONS;
    o.obs_per_tx = HEAVY_OBS_PER_TX;
    o.observers = HEAVY_OBSERVERS;
    shape_db("heavy", &o, out, cap);
}

Test(cost, every_light_request_is_light_on_the_default_shape_with_2m_s_nodes)
{
    const char *measure = getenv("MESHGATE_COST_DB");
    if (measure && *measure) {
        print_table(measure);
        return;
    }
    char db[700];
    default_shape(db, sizeof db);
    walk(db, true);
}

Test(cost, every_light_request_is_light_on_the_heavy_shape)
{
    if (getenv("MESHGATE_COST_DB") && *getenv("MESHGATE_COST_DB"))
        return;
    char db[700];
    heavy_shape(db, sizeof db);
    walk(db, false);
}

/* The check can fail: a scan on a light route is past both bounds. */
Test(cost, the_bounds_catch_a_scan_of_observations)
{
    char db[700];
    default_shape(db, sizeof db);
    struct mg_test_ctx t;
    open_ctx(&t, db);
    int64_t steps = mg_db_vm_steps(&t.db), pages = mg_db_pages_fetched(&t.db);
    /* One VM step (OP_Count) over the whole table's b-tree. */
    cr_assert_geq(mg_db_scalar(&t.db, "SELECT count(*) FROM observations NOT INDEXED"),
                  OBSERVATIONS);
    cr_expect_gt(mg_db_pages_fetched(&t.db) - pages, LIGHT_PAGES_MAX, "count(*) went unseen");
    steps = mg_db_vm_steps(&t.db);
    cr_assert_geq(mg_db_scalar(&t.db, "SELECT count(*) FROM observations WHERE snr IS NOT NULL"
                                      " OR snr IS NULL"),
                  OBSERVATIONS);
    cr_expect_gt(mg_db_vm_steps(&t.db) - steps, LIGHT_VM_STEPS_MAX, "a filtered scan went unseen");
    close_ctx(&t);
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

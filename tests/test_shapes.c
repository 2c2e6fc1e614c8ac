/* SPDX-License-Identifier: ISC */
/*
 * Every endpoint on every shape of database a user has: the generator's default (CoreScope's
 * migrated schema, the shape of every live database), its pre-migration shape, CoreScope's own
 * end-to-end database as captured and as CoreScope's migration leaves it (when ../shared/data
 * has them), and the migrated shape with each optional column taken away in turn, and with
 * columns no CoreScope version has. Each request must answer as the contract says (never a
 * 500 for a column the schema lacks), and its figures must agree with what this suite counts
 * in the file with its own SQL.
 */
#include "client_limit.h"
#include "fixture.h"
#include "harness.h"
#include "inproc.h"

#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SHARED_DATA MESHGATE_SOURCE_DIR "/../shared/data/"

static struct {
    char dir[128];
    char db[300];
    struct mg_test_ctx t;
    bool open;
} s;

static void cleanup(void)
{
    if (s.open)
        mg_test_ctx_close(&s.t);
    s.open = false;
    if (s.dir[0])
        mg_test_rmdir(s.dir);
    s.dir[0] = '\0';
}

TestSuite(shapes, .fini = cleanup, .timeout = 120);

/* ---- the file, read with the suite's own SQL -------------------------------------------- */

static long long count_of(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *sql = sqlite3_vmprintf(fmt, ap);
    va_end(ap);
    sqlite3 *db;
    cr_assert_eq(mg_test_sqlite_open_v2(s.db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s", sql);
    long long v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    sqlite3_free(sql);
    return v;
}

static void text_of(char *out, size_t cap, const char *sql)
{
    sqlite3 *db;
    cr_assert_eq(mg_test_sqlite_open_v2(s.db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(db));
    out[0] = '\0';
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
        snprintf(out, cap, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(db);
}

static bool file_has_column(const char *table, const char *column)
{
    return count_of("SELECT count(*) FROM pragma_table_info(%Q) WHERE name = %Q", table, column) >
           0;
}

static void exec_rw(const char *sql)
{
    sqlite3 *db;
    cr_assert_eq(mg_test_sqlite_open(s.db, &db), SQLITE_OK);
    char *err = NULL;
    cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &err), SQLITE_OK, "%s: %s", sql, err);
    sqlite3_close(db);
}

/* ---- the databases ---------------------------------------------------------------------- */

static void make_dir(void)
{
    mg_test_tmpdir(s.dir, sizeof s.dir);
    cr_assert(s.dir[0], "no temporary directory");
    snprintf(s.db, sizeof s.db, "%s/shape.db", s.dir);
}

static void generate(bool migrated)
{
    make_dir();
    struct mg_fixture_options o;
    mg_fixture_options_default(&o);
    o.observations = 4000;
    o.seed = 11;
    o.schema = migrated ? MG_FIXTURE_MIGRATED : MG_FIXTURE_BASE;
    char err[512] = "";
    cr_assert_eq(mg_fixture_generate(s.db, &o, err, sizeof err), 0, "%s", err);
}

static void freshen_real(const char *file)
{
    if (access(file, R_OK) != 0)
        cr_skip_test("%s not present: this shape is CoreScope's own end-to-end database, which "
                     "CI provides (see ../shared/data/README.md)",
                     file);
    make_dir();
    char err[512] = "";
    cr_assert_eq(mg_fixture_freshen(file, s.db, (int64_t)time(NULL), err, sizeof err), 0, "%s",
                 err);
}

/* ---- the tour --------------------------------------------------------------------------- */

static const char *get(const char *target, int want)
{
    int status = mg_test_ctx_get(&s.t, target);
    const char *body = s.t.res.body.data ? s.t.res.body.data : "";
    cr_assert_eq(status, want, "GET %s answered %d, want %d: %.600s", target, status, want, body);
    if (strncmp(target, "/api/", 5) == 0) {
        size_t len = strlen(body);
        cr_expect(len > 1 && body[0] == '{' && body[len - 1] == '\n',
                  "GET %s: not a JSON object ending in a newline: %.300s", target, body);
    }
    return body;
}

static long long int_after(const char *body, const char *key)
{
    char quoted[96];
    snprintf(quoted, sizeof quoted, "\"%s\":", key);
    const char *p = strstr(body, quoted);
    cr_assert(p, "no %s in %.600s", key, body);
    return strtoll(p + strlen(quoted), NULL, 10);
}

static double double_after(const char *body, const char *key)
{
    char quoted[96];
    snprintf(quoted, sizeof quoted, "\"%s\":", key);
    const char *p = strstr(body, quoted);
    cr_assert(p, "no %s in %.600s", key, body);
    return strtod(p + strlen(quoted), NULL);
}

/* CoreScope's packet decoder (POST /api/decode, issue 26) on the shape's own packets (the
 * newest 2,000): each decodes as the payload type its row says, or is refused as CoreScope
 * refuses a packet the firmware would not send (its path encoding or a length); every type the
 * shape has decodes at least once. */
static void decode_stored_packets(void)
{
    sqlite3 *db;
    cr_assert_eq(mg_test_sqlite_open_v2(s.db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "SELECT raw_hex, payload_type FROM transmissions WHERE"
                                    " coalesce(raw_hex, '') <> '' ORDER BY id DESC LIMIT 2000",
                                    -1, &st, NULL),
                 SQLITE_OK);
    unsigned seen = 0, decoded = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *raw = (const char *)sqlite3_column_text(st, 0);
        int type = sqlite3_column_int(st, 1);
        seen |= 1u << (type & 15);
        char *body = sqlite3_mprintf("{\"hex\":\"%s\"}", raw);
        int status = mg_test_ctx_request(&s.t, "POST", "/api/decode", body);
        const char *got = s.t.res.body.data ? s.t.res.body.data : "";
        if (status == 200) {
            char want[32];
            snprintf(want, sizeof want, "\"payloadType\":%d,", type);
            cr_expect(strstr(got, want), "%s: %.300s", raw, got);
            decoded |= 1u << (type & 15);
        } else {
            cr_expect(status == 400 && (strstr(got, "{\"error\":\"invalid path encoding") == got ||
                                        strstr(got, "{\"error\":\"packet ") == got),
                      "%s: %d %.300s", raw, status, got);
        }
        sqlite3_free(body);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    cr_expect_eq(decoded, seen, "payload types decoded %x, in the shape %x", decoded, seen);
}

/*
 * Every endpoint, with every parameter that reads a column, on the database at s.db; the
 * figures that the file decides are checked against the suite's own counts.
 */
static void tour(void)
{
    cr_assert(mg_test_ctx_open(&s.t, s.db), "cannot serve %s", s.db);
    s.open = true;
    /* The tour checks answers, not admission: one client asks for every heavy route in turn,
     * more than the anonymous rate limit's burst (the refusals have suites of their own). */
    mg_client_limit_set_rate(&s.t.seg.clients, 0, 0);
    char repeater[80], observer[80], hash[40], name[120], channel_hash[40], target[512];
    text_of(repeater, sizeof repeater,
            "SELECT public_key FROM nodes WHERE role = 'repeater'"
            " ORDER BY advert_count DESC, public_key LIMIT 1");
    text_of(observer, sizeof observer, "SELECT id FROM observers ORDER BY rowid LIMIT 1");
    text_of(hash, sizeof hash, "SELECT hash FROM transmissions ORDER BY id DESC LIMIT 1");
    text_of(name, sizeof name,
            "SELECT name FROM nodes WHERE name GLOB '[A-Za-z]*' ORDER BY public_key LIMIT 1");
    text_of(channel_hash, sizeof channel_hash,
            "SELECT json_extract(decoded_json, '$.channelHashHex') FROM transmissions"
            " WHERE payload_type = 5 AND decoded_json IS NOT NULL LIMIT 1");

    get("/api/healthz", 200);
    const char *body = get("/api/nodes?limit=2000", 200);
    cr_expect_eq(int_after(body, "total"), count_of("SELECT count(*) FROM nodes"));
    bool scope = file_has_column("nodes", "default_scope");
    cr_expect_eq(strstr(body, "\"default_scope\":") != NULL, scope,
                 "default_scope in a node: %d, the column in the file: %d", !scope, scope);
    cr_expect(strstr(body, "configured_scope") == NULL, "a key no CoreScope has");
    /* Every repeater and room (those with relay fields) has its usefulness grade. */
    cr_expect_eq(mg_test_count(body, "\"usefulness_grade\":"),
                 mg_test_count(body, "\"relay_active\":"), "%.600s", body);
    static const char *const node_queries[] = {
        "sortBy=name",       "sortBy=packetCount", "role=repeater",  "search=a",
        "before=2100-01-01", "lastHeard=30d",      "region=SJC,OAK", "offset=5&limit=3",
    };
    for (size_t i = 0; i < sizeof node_queries / sizeof node_queries[0]; i++) {
        snprintf(target, sizeof target, "/api/nodes?%s", node_queries[i]);
        get(target, 200);
    }

    body = get("/api/packets?limit=1", 200);
    cr_expect_eq(int_after(body, "total"),
                 count_of("SELECT count(*) FROM transmissions"
                          " WHERE hash IS NOT NULL AND first_seen IS NOT NULL"));
    cr_expect(strstr(body, "\"scope_name\":"), "no scope_name: %.300s", body);
    const char *packet_queries[] = {
        "expand=observations&limit=20",
        "order=asc&limit=20",
        "type=4",
        "route=1",
        "since=2000-01-01&until=2100-01-01",
        "region=SJC",
        "groupByHash=true",
        "groupByHash=true&type=4&limit=10",
    };
    for (size_t i = 0; i < sizeof packet_queries / sizeof packet_queries[0]; i++) {
        snprintf(target, sizeof target, "/api/packets?%s", packet_queries[i]);
        get(target, 200);
    }
    snprintf(target, sizeof target, "/api/packets?hash=%s&expand=observations", hash);
    body = get(target, 200);
    cr_expect_eq(int_after(body, "total"), 1, "%s: %.300s", target, body);
    snprintf(target, sizeof target, "/api/packets?observer=%s", observer);
    get(target, 200);
    snprintf(target, sizeof target, "/api/packets?node=%s", repeater);
    get(target, 200);
    if (name[0]) {
        char *q = sqlite3_mprintf("/api/packets?node=%s", name);
        for (char *p = q; *p; p++)
            if (*p == ' ')
                *p = '+';
        get(q, 200);
        sqlite3_free(q);
    }
    snprintf(target, sizeof target, "/api/packets?nodes=%s,%s", repeater, repeater);
    get(target, 200);
    if (channel_hash[0]) {
        snprintf(target, sizeof target, "/api/packets?channel=enc_%s", channel_hash);
        get(target, 200);
    }

    body = get("/api/stats", 200);
    cr_expect_eq(int_after(body, "totalNodesAllTime"), count_of("SELECT count(*) FROM nodes"));
    cr_expect_eq(int_after(body, "totalObservations"),
                 count_of("SELECT count(*) FROM observations"));
    cr_expect_eq(int_after(body, "totalObservers"),
                 file_has_column("observers", "inactive")
                     ? count_of("SELECT count(*) FROM observers"
                                " WHERE inactive IS NULL OR inactive = 0")
                     : count_of("SELECT count(*) FROM observers"));
    get("/api/perf", 200);
    body = get("/api/perf?mem=1", 200);
    cr_expect_eq(int_after(body, "observations"), count_of("SELECT count(*) FROM observations"));

    /* The path inspector: two hops of the repeater's first byte; the hop's candidates are
     * the relays under it */
    if (repeater[0]) {
        snprintf(target, sizeof target,
                 "POST /api/paths/inspect {\"prefixes\":[\"%.2s\",\"%.2s\"]}", repeater, repeater);
        body = get(target, 200);
        cr_expect_eq(
            int_after(body, "candidatesConsidered"),
            count_of("SELECT count(*) FROM nodes WHERE lower(public_key) LIKE lower('%.2s%%')"
                     " AND (instr(lower(role), 'repeater') OR instr(lower(role), 'room_server')"
                     " OR lower(role) = 'room')",
                     repeater));
    }

    snprintf(target, sizeof target, "/api/nodes/%s/reach?days=30", repeater);
    get(target, 200);
    get("/api/nodes/" /* a key in no table */
        "0000000000000000000000000000000000000000000000000000000000000000/reach",
        404);
    /* Node analytics: the repeater's packets add up; CoreScope's opt-in RX coverage is off
     * (its default): 404 on every shape. */
    snprintf(target, sizeof target, "/api/nodes/%s/analytics?days=365", repeater);
    body = get(target, 200);
    cr_expect(strstr(body, "\"computedStats\":{") && strstr(body, "\"days\":365"), "%s: %.300s",
              target, body);
    cr_expect_eq(mg_test_ctx_get(&s.t, "/api/rx-leaderboard"), 404);
    snprintf(target, sizeof target, "/api/nodes/%s/rx-coverage?bbox=-90,-180,90,180", repeater);
    cr_expect_eq(mg_test_ctx_get(&s.t, target), 404);
    /* Node detail and search (scope_name in recentAdverts only with its column). */
    snprintf(target, sizeof target, "/api/nodes/%s", repeater);
    body = get(target, 200);
    cr_expect_eq(
        strstr(body, "\"scope_name\":") != NULL,
        file_has_column("transmissions", "scope_name") &&
            count_of("SELECT count(*) FROM transmissions WHERE from_pubkey = %Q", repeater) > 0,
        "%s: %.300s", target, body);
    if (repeater[0]) {
        double bridge = double_after(body, "bridge_score"),
               score = double_after(body, "usefulness_score");
        cr_expect(bridge >= 0 && bridge <= 1 && score >= 0 && score <= 1 &&
                      strstr(body, "\"usefulness_grade\":\""),
                  "%s: %.600s", target, body);
    }
    snprintf(target, sizeof target, "/api/nodes/%.8s", repeater);
    get(target, 200);
    get("/api/nodes/search?q=a", 200);
    snprintf(target, sizeof target, "/api/nodes/%s/health", repeater);
    body = get(target, 200);
    cr_expect(strstr(body, "\"totalTransmissions\":"), "%s: %.300s", target, body);
    cr_expect_eq(mg_test_ctx_get(&s.t, "/api/nodes/clock-skew"), 200, "%s",
                 (const char *)s.t.res.body.data);
    cr_expect(s.t.res.body.data[0] == '[', "the fleet is a list");
    /* The Analytics page's roles: every node counted once. */
    body = get("/api/analytics/roles", 200);
    cr_expect_eq(int_after(body, "totalNodes"), count_of("SELECT count(*) FROM nodes"));
    body = get("/api/analytics/hash-collisions", 200);
    cr_expect_eq(int_after(body, "total_nodes"), count_of("SELECT count(*) FROM nodes"));
    get("/api/analytics/hash-collisions?region=SJC", 200);
    snprintf(target, sizeof target, "/api/nodes/%s/clock-skew", repeater);
    int skew_status = mg_test_ctx_get(&s.t, target);
    cr_expect(skew_status == 200 || skew_status == 404, "%s: %d %s", target, skew_status,
              (const char *)s.t.res.body.data);
    get("/api/config/client", 200);
    get("/api/config/regions", 200);
    get("/api/health", 200);
    get("/api/mqtt/status", 200);
    /* Without transmissions.scope_name there are no scopes to count: 501. */
    bool scopes = file_has_column("transmissions", "scope_name");
    get("/api/scope-stats?window=7d", scopes ? 200 : 501);
    /* CoreScope's small routes (issue 26, misc). */
    body = get("/api/nodes/network-status", 200);
    cr_expect_eq(int_after(body, "total"), count_of("SELECT count(*) FROM nodes"));
    cr_expect_eq(int_after(body, "active") + int_after(body, "degraded") +
                     int_after(body, "silent"),
                 count_of("SELECT count(*) FROM nodes"));
    snprintf(target, sizeof target, "/api/nodes/resolve?prefix=%s", repeater);
    body = get(target, 200);
    cr_expect(strstr(body, repeater) && strstr(body, "\"ambiguous\":false"), "%s: %.300s", target,
              body);
    /* The Analytics page's RF report: every transmission, and each observation CoreScope's
     * store keeps (one per observer and path) plus one for a transmission without any. */
    body = get("/api/analytics/rf", 200);
    cr_expect_eq(int_after(body, "totalTransmissions"),
                 count_of("SELECT count(*) FROM transmissions"));
    cr_expect_eq(int_after(body, "totalAllPackets"),
                 count_of("SELECT count(*) FROM (SELECT 1 FROM observations o LEFT JOIN observers"
                          " ob ON ob.rowid = o.observer_idx GROUP BY o.transmission_id,"
                          " coalesce(ob.id, ''), coalesce(o.path_json, ''))") +
                     count_of("SELECT count(*) FROM transmissions t WHERE NOT EXISTS (SELECT 1"
                              " FROM observations o WHERE o.transmission_id = t.id)"));
    body = get("/api/analytics/channels", 200);
    cr_expect_eq(
        int_after(body, "activeChannels"),
        count_of("SELECT count(DISTINCT coalesce(CAST(json_extract(decoded_json,"
                 " '$.channelHash') AS TEXT), json_extract(decoded_json, '$.channel_hash'),"
                 " '?')) FROM transmissions WHERE payload_type = 5 AND"
                 " json_valid(decoded_json) AND json_type(decoded_json) = 'object'"));
    /* CoreScope's POST tools and API-key routes (issue 26, posttools): the batch lists the
     * newest transmission's observations as its detail counts them. */
    snprintf(target, sizeof target, "/api/packets/%s", hash);
    long long heard = int_after(get(target, 200), "observation_count");
    char batch[128];
    snprintf(batch, sizeof batch, "{\"hashes\":[\"%s\",\"none\"]}", hash);
    int status = mg_test_ctx_request(&s.t, "POST", "/api/packets/observations", batch);
    body = s.t.res.body.data ? s.t.res.body.data : "";
    cr_assert_eq(status, 200, "POST /api/packets/observations: %d %.300s", status, body);
    cr_expect(strstr(body, "\"none\":[]"), "%.300s", body);
    int listed = mg_test_count(body, "\"timestamp\":");
    cr_expect(listed == heard || (listed == 0 && heard == 1), "%d listed, %lld heard: %.300s",
              listed, heard, body);
    cr_expect_eq(mg_test_ctx_request(&s.t, "POST", "/api/perf/reset", NULL), 403);
    /* The Analytics page's neighbour graph: as many edges as it counts, each of them read from
     * the group's graph. */
    body = get("/api/analytics/neighbor-graph?min_count=1&min_score=0", 200);
    long long graph_edges = int_after(body, "total_edges");
    cr_expect_geq(graph_edges, 0, "%.300s", body);
    cr_expect_eq(mg_test_count(body, "\"bidirectional\":true"), graph_edges);
    get("/api/analytics/neighbor-graph", 200);
    /* The Analytics page's topology and distance: every transmission's longest path counted
     * once, the longest of them the maximum. */
    body = get("/api/analytics/topology", 200);
    cr_expect_eq(int_after(body, "maxHops"),
                 count_of("SELECT coalesce(max(json_array_length(path_json)), 0) FROM"
                          " observations WHERE json_valid(path_json) AND json_type(path_json) ="
                          " 'array'"));
    body = get("/api/analytics/distance", 200);
    cr_expect(strstr(body, "\"summary\":{\"avgDist\":"), "%.300s", body);
    get("/api/analytics/distance?region=SJC", 200);
    /* Hash sizes, relay airtime, the Audio Lab (issue 26): the transmissions with a path by
     * hash size, every transmission with a payload type in the airtime share. */
    body = get("/api/analytics/hash-sizes", 200);
    cr_expect(strstr(body, "\"multiByteCapability\":["), "%.300s", body);
    get("/api/analytics/hash-sizes?region=SJC", 200);
    body = get("/api/analytics/relay-airtime-share", 200);
    cr_expect_eq(int_after(body, "total_count"),
                 count_of("SELECT count(*) FROM transmissions WHERE payload_type IS NOT NULL"));
    body = get("/api/audio-lab/buckets", 200);
    cr_expect(strstr(body, "{\"buckets\":{\""), "%.300s", body);
    decode_stored_packets();
    get("/metrics", 200);
    get("/server-status", 200);
}

Test(shapes, generator_default_is_corescopes_migrated_schema)
{
    generate(true);
    cr_assert(file_has_column("nodes", "default_scope"));
    cr_assert(file_has_column("observations", "raw_hex"));
    tour();
}

Test(shapes, generator_pre_migration_shape)
{
    generate(false);
    cr_assert_not(file_has_column("nodes", "default_scope"));
    tour();
}

Test(shapes, corescope_fixture_as_captured)
{
    freshen_real(SHARED_DATA "corescope-e2e-fixture.db");
    tour();
}

Test(shapes, corescope_fixture_as_corescopes_migration_leaves_it)
{
    freshen_real(SHARED_DATA "corescope-e2e-fixture-migrated.db");
    cr_assert(file_has_column("nodes", "default_scope"));
    tour();
}

/* The migrated shape without one optional column at a time: each is detected on its own. */
Test(shapes, migrated_shape_without_any_one_optional_column)
{
    generate(true);
    char base[300];
    snprintf(base, sizeof base, "%s", s.db);
    for (size_t i = 0; i < mg_db_optionals_count; i++) {
        const struct mg_db_optional *o = &mg_db_optionals[i];
        snprintf(s.db, sizeof s.db, "%s/without-%zu.db", s.dir, i);
        char *copy = sqlite3_mprintf("VACUUM INTO %Q", s.db);
        sqlite3 *db;
        cr_assert_eq(mg_test_sqlite_open_v2(base, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
        cr_assert_eq(sqlite3_exec(db, copy, NULL, NULL, NULL), SQLITE_OK, "%s", copy);
        sqlite3_close(db);
        sqlite3_free(copy);
        bool present = o->column ? file_has_column(o->table, o->column)
                                 : count_of("SELECT count(*) FROM sqlite_master WHERE name = %Q",
                                            o->table) > 0;
        if (present) {
            char sql[512];
            if (o->column)
                snprintf(sql, sizeof sql,
                         "DROP INDEX IF EXISTS idx_tx_scope_name;"
                         "DROP INDEX IF EXISTS idx_tx_last_seen_zero;"
                         "DROP INDEX IF EXISTS idx_tx_channel_hash;"
                         "ALTER TABLE %s DROP COLUMN %s",
                         o->table, o->column);
            else
                snprintf(sql, sizeof sql, "DROP TABLE %s", o->table);
            exec_rw(sql);
        }
        cr_log_info("without %s.%s", o->table, o->column ? o->column : "*");
        tour();
        mg_test_ctx_close(&s.t);
        s.open = false;
    }
}

/* Columns and tables that no CoreScope version has (yet) are never a reason to fail. */
Test(shapes, unknown_extra_columns_and_tables_are_ignored)
{
    generate(true);
    exec_rw("ALTER TABLE nodes ADD COLUMN zz_future TEXT DEFAULT 'x';"
            "ALTER TABLE transmissions ADD COLUMN zz_future INTEGER;"
            "ALTER TABLE observations ADD COLUMN zz_future REAL;"
            "ALTER TABLE observers ADD COLUMN zz_future BLOB;"
            "ALTER TABLE neighbor_edges ADD COLUMN zz_future TEXT;"
            "CREATE TABLE zz_future_table (x)");
    tour();
    const char *body = get("/api/nodes?limit=1", 200);
    cr_expect(strstr(body, "zz_future") == NULL, "an unknown column leaked: %s", body);
}

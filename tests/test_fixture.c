/* SPDX-License-Identifier: ISC */
/*
 * Tests for tools/fixture/: the generated database has CoreScope's schema and the shape of
 * real data, the same options give the same rows, and freshening moves a copy's newest times
 * to "now" without touching the source. Every file goes into a fresh directory under /tmp
 * that the suite removes afterwards.
 */
#include <criterion/criterion.h>

#include "fixture.h"
#include "harness.h"
#include "time_parse.h"

#include <dirent.h>
#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NOW 1779041349 /* 2026-05-17T18:09:09Z */

static char dir[64];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/mg-fixture-test-XXXXXX");
    cr_assert_not_null(mkdtemp(dir), "mkdtemp failed");
}

static void remove_dir(void)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

TestSuite(fixture, .init = make_dir, .fini = remove_dir);

static const char *in_dir(const char *name)
{
    static char paths[8][512];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, sizeof paths[0], "%s/%s", dir, name);
    return p;
}

static struct mg_fixture_options small_options(uint64_t seed)
{
    struct mg_fixture_options o;
    mg_fixture_options_default(&o);
    o.seed = seed;
    o.observations = 3000;
    o.nodes = 60;
    o.observers = 8;
    o.now_unix = NOW;
    return o;
}

static const char *generate(const char *name, const struct mg_fixture_options *o)
{
    const char *path = in_dir(name);
    char err[512] = "";
    int rc = mg_fixture_generate(path, o, err, sizeof err);
    cr_assert_eq(rc, 0, "generate %s: %s", path, err);
    return path;
}

static sqlite3 *open_db(const char *path)
{
    sqlite3 *db = NULL;
    int rc = mg_test_sqlite_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL);
    cr_assert_eq(rc, SQLITE_OK, "open %s: %s", path, db ? sqlite3_errmsg(db) : "?");
    return db;
}

static int64_t query_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s: no row", sql);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* The first column of the first row as text ("" for NULL); valid until the next call. */
static const char *query_text(sqlite3 *db, const char *sql)
{
    static char out[4096];
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s: no row", sql);
    const unsigned char *t = sqlite3_column_text(st, 0);
    snprintf(out, sizeof out, "%s", t ? (const char *)t : "");
    sqlite3_finalize(st);
    return out;
}

static uint64_t fnv(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001B3u;
    }
    return h;
}

/* Every row of every table (in rowid order) and the schema, hashed with types. */
static uint64_t db_checksum(const char *path)
{
    sqlite3 *db = open_db(path);
    uint64_t h = 0xCBF29CE484222325u;
    sqlite3_stmt *tables = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "SELECT name, sql FROM sqlite_master WHERE type = 'table' "
                                    "ORDER BY name",
                                    -1, &tables, NULL),
                 SQLITE_OK);
    while (sqlite3_step(tables) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(tables, 0);
        const char *sql = (const char *)sqlite3_column_text(tables, 1);
        h = fnv(h, sql, strlen(sql));
        char select[256];
        snprintf(select, sizeof select, "SELECT * FROM \"%s\" ORDER BY rowid", name);
        sqlite3_stmt *rows = NULL;
        cr_assert_eq(sqlite3_prepare_v2(db, select, -1, &rows, NULL), SQLITE_OK);
        while (sqlite3_step(rows) == SQLITE_ROW) {
            for (int c = 0; c < sqlite3_column_count(rows); c++) {
                int type = sqlite3_column_type(rows, c);
                h = fnv(h, &type, sizeof type);
                const void *bytes = sqlite3_column_blob(rows, c);
                h = fnv(h, bytes, (size_t)sqlite3_column_bytes(rows, c));
            }
        }
        sqlite3_finalize(rows);
    }
    sqlite3_finalize(tables);
    sqlite3_close(db);
    return h;
}

static uint64_t file_checksum(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "open %s", path);
    uint64_t h = 0xCBF29CE484222325u;
    unsigned char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        h = fnv(h, buf, n);
    fclose(f);
    return h;
}

/* The columns of a table, comma-separated, in order. */
static const char *columns_of(sqlite3 *db, const char *table)
{
    static char out[1024];
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT group_concat(name, ',') FROM (SELECT name FROM pragma_table_info('%s') "
             "ORDER BY cid)",
             table);
    snprintf(out, sizeof out, "%s", query_text(db, sql));
    return out;
}

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* --- determinism ----------------------------------------------------------------------- */

Test(fixture, same_seed_sizes_and_now_give_identical_tables)
{
    struct mg_fixture_options o = small_options(7);
    uint64_t a = db_checksum(generate("a.db", &o));
    uint64_t b = db_checksum(generate("b.db", &o));
    cr_assert_eq(a, b, "two databases from the same options differ");
}

/* The rows of one table, hashed with their types. */
static uint64_t table_checksum(const char *path, const char *table)
{
    sqlite3 *db = open_db(path);
    char select[256];
    snprintf(select, sizeof select, "SELECT * FROM \"%s\" ORDER BY rowid", table);
    sqlite3_stmt *rows = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db, select, -1, &rows, NULL), SQLITE_OK);
    uint64_t h = 0xCBF29CE484222325u;
    while (sqlite3_step(rows) == SQLITE_ROW) {
        for (int c = 0; c < sqlite3_column_count(rows); c++) {
            int type = sqlite3_column_type(rows, c);
            h = fnv(h, &type, sizeof type);
            h = fnv(h, sqlite3_column_blob(rows, c), (size_t)sqlite3_column_bytes(rows, c));
        }
    }
    sqlite3_finalize(rows);
    sqlite3_close(db);
    return h;
}

Test(fixture, different_seeds_give_different_tables)
{
    struct mg_fixture_options o1 = small_options(1), o2 = small_options(2);
    const char *a = generate("a.db", &o1), *b = generate("b.db", &o2);
    static const char *const tables[] = {"nodes", "observers", "observations", "neighbor_edges"};
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++)
        cr_assert_neq(table_checksum(a, tables[i]), table_checksum(b, tables[i]),
                      "seeds 1 and 2 gave the same %s", tables[i]);
}

/* --- schema ---------------------------------------------------------------------------- */

Test(fixture, base_schema_is_corescope_base_schema_in_wal_mode)
{
    struct mg_fixture_options o = small_options(1);
    o.schema = MG_FIXTURE_BASE;
    sqlite3 *db = open_db(generate("base.db", &o));
    cr_assert_str_eq(columns_of(db, "nodes"),
                     "public_key,name,role,lat,lon,last_seen,first_seen,advert_count,"
                     "battery_mv,temperature_c,foreign_advert");
    cr_assert_str_eq(columns_of(db, "observers"),
                     "id,name,iata,last_seen,first_seen,packet_count,model,firmware,"
                     "client_version,radio,battery_mv,uptime_secs,noise_floor,inactive,"
                     "last_packet_at");
    cr_assert_str_eq(columns_of(db, "transmissions"),
                     "id,raw_hex,hash,first_seen,route_type,payload_type,payload_version,"
                     "decoded_json,created_at,channel_hash,from_pubkey");
    cr_assert_str_eq(columns_of(db, "observations"),
                     "id,transmission_id,observer_idx,direction,snr,rssi,score,path_json,"
                     "timestamp,resolved_path");
    cr_assert_str_eq(columns_of(db, "neighbor_edges"), "node_a,node_b,count,last_seen");
    cr_assert_str_eq(query_text(db, "SELECT group_concat(name, ',') FROM (SELECT name FROM "
                                    "sqlite_master WHERE type = 'table' ORDER BY name)"),
                     "neighbor_edges,nodes,observations,observers,sqlite_sequence,"
                     "transmissions");
    cr_assert_str_eq(query_text(db, "SELECT group_concat(name, ',') FROM (SELECT name FROM "
                                    "sqlite_master WHERE type = 'index' AND sql IS NOT NULL "
                                    "ORDER BY rowid)"),
                     "idx_tx_channel_hash,idx_transmissions_first_seen,idx_transmissions_hash,"
                     "idx_transmissions_payload_type,idx_observations_timestamp,"
                     "idx_observations_transmission_id,idx_observations_observer_idx,"
                     "idx_transmissions_from_pubkey");
    cr_assert_str_eq(query_text(db, "SELECT sql FROM sqlite_master WHERE name = 'transmissions'"),
                     "CREATE TABLE transmissions (\n"
                     "    id INTEGER PRIMARY KEY AUTOINCREMENT,\n"
                     "    raw_hex TEXT NOT NULL,\n"
                     "    hash TEXT NOT NULL UNIQUE,\n"
                     "    first_seen TEXT NOT NULL,\n"
                     "    route_type INTEGER,\n"
                     "    payload_type INTEGER,\n"
                     "    payload_version INTEGER,\n"
                     "    decoded_json TEXT,\n"
                     "    created_at TEXT DEFAULT (datetime('now'))\n"
                     ", channel_hash TEXT DEFAULT NULL, from_pubkey TEXT)");
    cr_assert_eq(query_int(db, "SELECT seq FROM sqlite_sequence WHERE name = 'observations'"),
                 3000);
    cr_assert_str_eq(query_text(db, "PRAGMA journal_mode"), "wal");
    sqlite3_close(db);
}

Test(fixture, migrated_schema_is_the_default_and_has_the_migration_tables_and_columns)
{
    struct mg_fixture_options o;
    mg_fixture_options_default(&o);
    cr_assert_eq(o.schema, MG_FIXTURE_MIGRATED);
    o = small_options(1);
    sqlite3 *db = open_db(generate("migrated.db", &o));
    cr_assert_str_eq(columns_of(db, "nodes"),
                     "public_key,name,role,lat,lon,last_seen,first_seen,advert_count,"
                     "battery_mv,temperature_c,foreign_advert,default_scope,multibyte_sup,"
                     "multibyte_evidence");
    cr_assert_str_eq(columns_of(db, "inactive_nodes"), columns_of(db, "nodes"));
    cr_assert_str_eq(columns_of(db, "observers"),
                     "id,name,iata,last_seen,first_seen,packet_count,model,firmware,"
                     "client_version,radio,battery_mv,uptime_secs,noise_floor,inactive,"
                     "last_packet_at,clock_skew_seconds,clock_skew_count_24h,"
                     "clock_last_naive_at,can_relay,can_relay_seen");
    cr_assert_str_eq(columns_of(db, "transmissions"),
                     "id,raw_hex,hash,first_seen,route_type,payload_type,payload_version,"
                     "decoded_json,created_at,channel_hash,from_pubkey,scope_name,last_seen");
    cr_assert_str_eq(columns_of(db, "observations"),
                     "id,transmission_id,observer_idx,direction,snr,rssi,score,path_json,"
                     "timestamp,resolved_path,raw_hex");
    cr_assert_str_eq(query_text(db, "SELECT group_concat(name, ',') FROM (SELECT name FROM "
                                    "sqlite_master WHERE type = 'table' ORDER BY name)"),
                     "_migrations,inactive_nodes,neighbor_edges,nodes,observations,observers,"
                     "sqlite_sequence,transmissions");
    cr_assert_str_eq(query_text(db, "SELECT group_concat(name, ',') FROM (SELECT name FROM "
                                    "_migrations ORDER BY rowid)"),
                     "scope_name_v1,nodes_default_scope_v1,observations_raw_hex_v1");
    cr_assert_str_eq(query_text(db, "PRAGMA journal_mode"), "wal");
    sqlite3_close(db);
}

Test(fixture, migrated_columns_hold_what_corescope_writes_there)
{
    struct mg_fixture_options o = small_options(1);
    o.observers = 40;
    sqlite3 *db = open_db(generate("values.db", &o));
    static const struct {
        const char *sql, *why;
    } none[] = {
        {"SELECT count(*) FROM transmissions t WHERE last_seen != (SELECT max(timestamp) FROM "
         "observations o WHERE o.transmission_id = t.id)",
         "transmissions.last_seen is the newest observation (the backfill is done)"},
        {"SELECT count(*) FROM transmissions WHERE scope_name IS NOT NULL AND route_type "
         "NOT IN (0, 3)",
         "only transport routes carry a scope"},
        {"SELECT count(*) FROM nodes WHERE multibyte_evidence IS NOT CASE multibyte_sup "
         "WHEN 2 THEN 'advert' WHEN 1 THEN 'path' END",
         "multibyte_sup 2 is confirmed by an advert, 1 suspected from paths, 0 unknown"},
        {"SELECT count(*) FROM observers WHERE can_relay_seen = 0 AND can_relay != 1",
         "an observer that never sent its repeat flag keeps can_relay's default 1"},
        {"SELECT count(*) FROM observers WHERE (clock_skew_seconds IS NULL) != "
         "(clock_last_naive_at IS NULL) OR (clock_skew_seconds IS NULL) != "
         "(clock_skew_count_24h = 0) OR abs(clock_skew_seconds) <= 900",
         "a naive clock has a skew beyond 15 minutes, a count and a time"},
        {"SELECT count(*) FROM inactive_nodes i WHERE i.public_key IN (SELECT public_key FROM "
         "nodes) OR unixepoch(i.last_seen) >= 1779041349 - 7 * 86400 OR i.first_seen > "
         "i.last_seen",
         "inactive nodes are not nodes and went quiet before the window"},
    };
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
        cr_expect_eq(query_int(db, none[i].sql), 0, "%s: %s", none[i].why, none[i].sql);
    static const struct {
        const char *sql, *what;
    } some[] = {
        {"SELECT count(*) FROM transmissions WHERE scope_name LIKE '#%'", "named scopes"},
        {"SELECT count(*) FROM transmissions WHERE scope_name = ''", "unknown scopes"},
        {"SELECT count(*) FROM nodes WHERE default_scope IS NOT NULL", "default scopes"},
        {"SELECT count(*) FROM nodes WHERE multibyte_sup = 2", "confirmed multi-byte nodes"},
        {"SELECT count(*) FROM nodes WHERE multibyte_sup = 1", "suspected multi-byte nodes"},
        {"SELECT count(*) FROM observations WHERE raw_hex IS NOT NULL", "observation raw_hex"},
        {"SELECT count(*) FROM observers WHERE clock_skew_seconds IS NOT NULL", "naive clocks"},
        {"SELECT count(*) FROM observers WHERE can_relay_seen = 1 AND can_relay = 0",
         "listener-only observers"},
        {"SELECT count(*) FROM observers WHERE can_relay_seen = 1 AND can_relay = 1",
         "relaying observers"},
        {"SELECT count(*) FROM inactive_nodes", "inactive nodes"},
    };
    for (size_t i = 0; i < sizeof some / sizeof some[0]; i++)
        cr_expect_gt(query_int(db, some[i].sql), 0, "no %s: %s", some[i].what, some[i].sql);
    sqlite3_close(db);
}

Test(fixture, migrated_schema_has_the_same_base_rows_as_base_schema)
{
    struct mg_fixture_options o = small_options(13);
    o.schema = MG_FIXTURE_BASE;
    const char *base = generate("base.db", &o);
    o.schema = MG_FIXTURE_MIGRATED;
    const char *migrated = generate("migrated.db", &o);
    sqlite3 *db = open_db(migrated);
    char sql[512];
    snprintf(sql, sizeof sql, "ATTACH '%s' AS b", base);
    cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    static const char *const checks[] = {
        "SELECT count(*) FROM (SELECT public_key, name, role, lat, lon, last_seen, first_seen, "
        "advert_count, battery_mv, temperature_c, foreign_advert FROM main.nodes EXCEPT "
        "SELECT * FROM b.nodes)",
        "SELECT count(*) FROM (SELECT id, raw_hex, hash, first_seen, route_type, payload_type, "
        "payload_version, decoded_json, created_at, channel_hash, from_pubkey FROM "
        "main.transmissions EXCEPT SELECT * FROM b.transmissions)",
        "SELECT count(*) FROM (SELECT id, transmission_id, observer_idx, direction, snr, rssi, "
        "score, path_json, timestamp, resolved_path FROM main.observations EXCEPT "
        "SELECT * FROM b.observations)",
        "SELECT count(*) FROM (SELECT id, name, iata, last_seen, first_seen, packet_count, "
        "model, firmware, client_version, radio, battery_mv, uptime_secs, noise_floor, "
        "inactive, last_packet_at FROM main.observers EXCEPT SELECT * FROM b.observers)",
        "SELECT count(*) FROM (SELECT * FROM main.neighbor_edges EXCEPT "
        "SELECT * FROM b.neighbor_edges)",
    };
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++)
        cr_assert_eq(query_int(db, checks[i]), 0, "%s", checks[i]);
    cr_assert_eq(query_int(db, "SELECT count(*) FROM main.observations"),
                 query_int(db, "SELECT count(*) FROM b.observations"));
    sqlite3_close(db);
}

/* --- the schema against CoreScope's own ------------------------------------------------- */

/* Every table's columns (name, type, NOT NULL, default, primary key) and every index (its
 * table, uniqueness, origin, partiality and key columns, and the SQL of one made by CREATE
 * INDEX with its white space made single spaces), one line each, sorted: two databases have
 * the same schema exactly when these texts are equal. Returns a malloc'ed string. */
static char *schema_of(sqlite3 *db)
{
    static const char sql[] =
        "SELECT group_concat(line, char(10)) FROM (SELECT line FROM ("
        " SELECT 'table ' || m.name || ' column ' || printf('%02d', c.cid) || ' ' || c.name ||"
        "  ' ' || c.type || ' notnull=' || c.\"notnull\" || ' default=' ||"
        "  coalesce(c.dflt_value, '-') || ' pk=' || c.pk || ' hidden=' || c.hidden AS line"
        "  FROM sqlite_master m, pragma_table_xinfo(m.name) c WHERE m.type = 'table'"
        " UNION ALL"
        " SELECT 'index ' || l.name || ' on ' || m.name || ' unique=' || l.\"unique\" ||"
        "  ' origin=' || l.origin || ' partial=' || l.partial || ' keys=' ||"
        "  (SELECT group_concat(k, ',') FROM (SELECT coalesce(x.name, x.cid) || ' desc=' ||"
        "   x.desc || ' ' || x.coll AS k FROM pragma_index_xinfo(l.name) x WHERE x.key"
        "   ORDER BY x.seqno))"
        "  FROM sqlite_master m, pragma_index_list(m.name) l WHERE m.type = 'table'"
        " UNION ALL"
        " SELECT 'index sql ' || replace(replace(replace(replace(replace(sql, char(10), ' '),"
        "  char(9), ' '), '    ', ' '), '  ', ' '), '  ', ' ')"
        "  FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
        ") ORDER BY line)";
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    const unsigned char *text = sqlite3_column_text(st, 0);
    char *out = strdup(text ? (const char *)text : "");
    sqlite3_finalize(st);
    cr_assert_not_null(out);
    return out;
}

#define SHARED_DATA MESHGATE_SOURCE_DIR "/../shared/data/"
#define CORESCOPE_SCHEMA SHARED_DATA "corescope-schema.sql"
#define COMMITTED_FIXTURE SHARED_DATA "corescope-e2e-fixture.db"
#define MIGRATED_FIXTURE SHARED_DATA "corescope-e2e-fixture-migrated.db"

static sqlite3 *open_read_only(const char *path)
{
    char uri[1024];
    snprintf(uri, sizeof uri, "file:%s?mode=ro&immutable=1", path);
    sqlite3 *db = NULL;
    int rc = mg_test_sqlite_open_v2(uri, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL);
    cr_assert_eq(rc, SQLITE_OK, "open %s: %s", path, db ? sqlite3_errmsg(db) : "?");
    return db;
}

/* The schema file is `sqlite3 .schema` of CoreScope's migrated database: run as SQL into a
 * database in memory, without the line that names sqlite_sequence (SQLite makes that table
 * itself, with the first AUTOINCREMENT table). */
static sqlite3 *load_schema_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "open %s", path);
    static char text[65536];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    cr_assert_lt(n, sizeof text - 1, "%s is larger than expected", path);
    text[n] = '\0';
    char *seq = strstr(text, "CREATE TABLE sqlite_sequence");
    if (seq != NULL)
        for (char *p = seq; *p != '\0' && *p != '\n'; p++)
            *p = ' ';
    sqlite3 *db = NULL;
    cr_assert_eq(mg_test_sqlite_open(":memory:", &db), SQLITE_OK);
    char *msg = NULL;
    cr_assert_eq(sqlite3_exec(db, text, NULL, NULL, &msg), SQLITE_OK, "%s: %s", path,
                 msg ? msg : "?");
    return db;
}

Test(fixture, migrated_schema_matches_corescope_schema_column_by_column)
{
    if (access(CORESCOPE_SCHEMA, R_OK) != 0)
        cr_skip_test("%s is not present (CI has it)", CORESCOPE_SCHEMA);
    sqlite3 *want_db = load_schema_file(CORESCOPE_SCHEMA);
    struct mg_fixture_options o = small_options(2);
    sqlite3 *got_db = open_db(generate("migrated.db", &o));
    char *want = schema_of(want_db), *got = schema_of(got_db);
    cr_assert_gt(strlen(want), 1000, "the schema file gave almost nothing: %s", want);
    cr_expect_str_eq(got, want);
    free(want);
    free(got);
    sqlite3_close(want_db);
    sqlite3_close(got_db);
}

Test(fixture, base_schema_matches_the_unmigrated_corescope_fixture_column_by_column)
{
    if (access(COMMITTED_FIXTURE, R_OK) != 0)
        cr_skip_test("%s is not present (CI has it)", COMMITTED_FIXTURE);
    sqlite3 *want_db = open_read_only(COMMITTED_FIXTURE);
    struct mg_fixture_options o = small_options(2);
    o.schema = MG_FIXTURE_BASE;
    sqlite3 *got_db = open_db(generate("base.db", &o));
    char *want = schema_of(want_db), *got = schema_of(got_db);
    cr_assert_gt(strlen(want), 1000, "the fixture gave almost nothing: %s", want);
    cr_expect_str_eq(got, want);
    free(want);
    free(got);
    sqlite3_close(want_db);
    sqlite3_close(got_db);
}

/* CoreScope has never had these; a generator that wrote them hid a server that asked for them. */
Test(fixture, no_shape_has_a_column_or_table_corescope_never_had)
{
    static const enum mg_fixture_schema shapes[] = {MG_FIXTURE_MIGRATED, MG_FIXTURE_BASE};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        struct mg_fixture_options o = small_options(3);
        o.schema = shapes[i];
        char name[32];
        snprintf(name, sizeof name, "shape%zu.db", i);
        sqlite3 *db = open_db(generate(name, &o));
        cr_expect_str_eq(
            query_text(db, "SELECT coalesce(group_concat(m.name || '.' || c.name), '') FROM "
                           "sqlite_master m, pragma_table_info(m.name) c WHERE m.type = "
                           "'table' AND c.name IN ('configured_scope', 'configured_scope_at', "
                           "'default_scope_confirmed_at')"),
            "", "shape %zu", i);
        cr_expect_eq(query_int(db, "SELECT count(*) FROM sqlite_master WHERE name = "
                                   "'dropped_packets'"),
                     0, "shape %zu has dropped_packets", i);
        sqlite3_close(db);
    }
}

/* --- sizes ----------------------------------------------------------------------------- */

Test(fixture, row_counts_match_the_options)
{
    struct mg_fixture_options o = small_options(3);
    o.transmissions = 900;
    sqlite3 *db = open_db(generate("counts.db", &o));
    cr_assert_eq(query_int(db, "SELECT count(*) FROM nodes"), 60);
    cr_assert_eq(query_int(db, "SELECT count(*) FROM observers"), 8);
    cr_assert_eq(query_int(db, "SELECT count(*) FROM transmissions"), 900);
    cr_assert_eq(query_int(db, "SELECT count(*) FROM observations"), 3000);
    cr_assert_eq(query_int(db, "SELECT count(DISTINCT hash) FROM transmissions"), 900);
    cr_assert_eq(query_int(db, "SELECT count(*) FROM transmissions t WHERE NOT EXISTS "
                               "(SELECT 1 FROM observations o WHERE o.transmission_id = t.id)"),
                 0, "every transmission is heard at least once");
    cr_assert_eq(query_int(db, "SELECT count(*) FROM observations o WHERE NOT EXISTS "
                               "(SELECT 1 FROM observers b WHERE b.rowid = o.observer_idx)"),
                 0, "observer_idx is an observers rowid");
    cr_assert_gt(query_int(db, "SELECT count(*) FROM neighbor_edges"), 0);
    sqlite3_close(db);
}

Test(fixture, unset_sizes_scale_from_observations)
{
    struct mg_fixture_options o, r;
    mg_fixture_options_default(&o);
    o.now_unix = NOW;
    char err[256];
    cr_assert_eq(mg_fixture_resolve(&o, &r, err, sizeof err), 0, "%s", err);
    cr_assert_eq(r.observations, 100000);
    cr_assert_eq(r.transmissions, 25000);
    cr_assert_eq(r.nodes, 400);
    cr_assert_eq(r.observers, 33);
    cr_assert_eq(r.days, 7);
    o.observations = 2000000;
    cr_assert_eq(mg_fixture_resolve(&o, &r, err, sizeof err), 0, "%s", err);
    cr_assert_eq(r.nodes, 2000);
    cr_assert_eq(r.observers, 150);
}

Test(fixture, impossible_sizes_are_refused_naming_the_option)
{
    struct mg_fixture_options o = small_options(1), r;
    char err[256] = "";
    o.transmissions = 3001;
    cr_assert_eq(mg_fixture_resolve(&o, &r, err, sizeof err), -1);
    cr_assert(strstr(err, "transmissions 3001") != NULL, "message: %s", err);
    o = small_options(1);
    o.nodes = 5;
    cr_assert_eq(mg_fixture_generate(in_dir("x.db"), &o, err, sizeof err), -1);
    cr_assert(strstr(err, "nodes 5") != NULL && strstr(err, "between") != NULL, "message: %s", err);
    cr_assert_not(file_exists(in_dir("x.db")), "a refused generation left a file");
    o = small_options(1);
    o.days = 400;
    cr_assert_eq(mg_fixture_resolve(&o, &r, err, sizeof err), -1);
    cr_assert(strstr(err, "days 400") != NULL, "message: %s", err);
}

Test(fixture, zero_observations_give_the_schema_and_nodes_without_traffic)
{
    struct mg_fixture_options o = small_options(1);
    o.observations = 0;
    sqlite3 *db = open_db(generate("empty.db", &o));
    cr_assert_eq(query_int(db, "SELECT count(*) FROM transmissions"), 0);
    cr_assert_eq(query_int(db, "SELECT count(*) FROM observations"), 0);
    cr_assert_eq(query_int(db, "SELECT count(*) FROM neighbor_edges"), 0);
    cr_assert_eq(query_int(db, "SELECT count(*) FROM nodes"), 60);
    cr_assert_eq(query_int(db, "SELECT count(*) FROM observers"), 8);
    sqlite3_close(db);
}

/* --- the shape of the data ------------------------------------------------------------- */

Test(fixture, roles_follow_corescope_mix)
{
    struct mg_fixture_options o = small_options(5);
    o.nodes = 1000;
    sqlite3 *db = open_db(generate("roles.db", &o));
    int64_t repeaters = query_int(db, "SELECT count(*) FROM nodes WHERE role = 'repeater'");
    int64_t rooms = query_int(db, "SELECT count(*) FROM nodes WHERE role = 'room'");
    int64_t companions = query_int(db, "SELECT count(*) FROM nodes WHERE role = 'companion'");
    int64_t sensors = query_int(db, "SELECT count(*) FROM nodes WHERE role = 'sensor'");
    cr_assert(repeaters >= 820 && repeaters <= 860, "repeaters %" PRId64, repeaters);
    cr_assert(rooms >= 95 && rooms <= 125, "rooms %" PRId64, rooms);
    cr_assert(companions >= 30 && companions <= 50, "companions %" PRId64, companions);
    cr_assert(sensors >= 5 && sensors <= 15, "sensors %" PRId64, sensors);
    cr_assert_eq(repeaters + rooms + companions + sensors, 1000);
    cr_assert_eq(query_int(db, "SELECT count(*) FROM nodes WHERE length(public_key) != 64 OR "
                               "public_key GLOB '*[^0-9a-f]*'"),
                 0, "keys are 64 lowercase hex");
    sqlite3_close(db);
}

Test(fixture, most_relays_have_a_unique_two_byte_prefix_but_some_collide)
{
    struct mg_fixture_options o = small_options(9);
    o.nodes = 600;
    sqlite3 *db = open_db(generate("prefixes.db", &o));
    const char *relays = "WITH r AS (SELECT substr(public_key, 1, 2) p1, "
                         "substr(public_key, 1, 4) p2, substr(public_key, 1, 6) p3 "
                         "FROM nodes WHERE role IN ('repeater', 'room')) ";
    char sql[1024];
    snprintf(sql, sizeof sql, "%sSELECT count(*) FROM r", relays);
    int64_t total = query_int(db, sql);
    snprintf(sql, sizeof sql,
             "%sSELECT count(*) FROM r a WHERE (SELECT count(*) FROM r b WHERE b.p2 = a.p2) = 1",
             relays);
    int64_t unique2 = query_int(db, sql);
    snprintf(sql, sizeof sql,
             "%sSELECT count(*) FROM r a WHERE (SELECT count(*) FROM r b WHERE b.p1 = a.p1) = 1",
             relays);
    int64_t unique1 = query_int(db, sql);
    snprintf(sql, sizeof sql,
             "%sSELECT count(*) FROM r a WHERE (SELECT count(*) FROM r b WHERE b.p3 = a.p3) > 1",
             relays);
    int64_t no_token = query_int(db, sql);
    cr_assert_gt(total, 500);
    cr_assert_geq(unique2 * 100, total * 90, "only %" PRId64 " of %" PRId64 " unique at 2 bytes",
                  unique2, total);
    /* Pairs forced to share exactly 2 bytes, one per 100 relays, on top of chance ones. */
    snprintf(sql, sizeof sql,
             "%sSELECT count(*) FROM r a WHERE (SELECT count(*) FROM r b WHERE b.p2 = a.p2) > 1 "
             "AND (SELECT count(*) FROM r b WHERE b.p3 = a.p3) = 1",
             relays);
    int64_t share2 = query_int(db, sql);
    cr_assert_geq(share2, 2 * (total / 100), "only %" PRId64 " relays share exactly 2 bytes",
                  share2);
    cr_assert_lt(unique1, total / 4, "1-byte prefixes cannot be unique for hundreds of relays");
    cr_assert_geq(no_token, 2, "some relays share all of their first 3 bytes");
    sqlite3_close(db);
}

/* path_json: a JSON array of "HEX" strings, all of 2, 4 or 6 upper-case hex digits, one size
 * per row. Returns the hop size in bytes, 0 for [], -1 when malformed. */
static int path_hop_size(const char *s, int *hops)
{
    *hops = 0;
    if (*s++ != '[')
        return -1;
    if (strcmp(s, "]") == 0)
        return 0;
    int size = -1;
    for (;;) {
        if (*s++ != '"')
            return -1;
        int n = 0;
        while ((*s >= '0' && *s <= '9') || (*s >= 'A' && *s <= 'F')) {
            s++;
            n++;
        }
        if (*s++ != '"' || (n != 2 && n != 4 && n != 6) || (size >= 0 && size != n / 2))
            return -1;
        size = n / 2;
        (*hops)++;
        if (*s == ']')
            return s[1] == '\0' ? size : -1;
        if (*s++ != ',')
            return -1;
    }
}

Test(fixture, path_json_is_an_array_of_uppercase_hex_hops_of_one_size)
{
    struct mg_fixture_options o = small_options(11);
    o.observations = 6000;
    o.nodes = 200;
    sqlite3 *db = open_db(generate("paths.db", &o));
    sqlite3_stmt *st = NULL;
    cr_assert_eq(
        sqlite3_prepare_v2(db, "SELECT path_json, resolved_path FROM observations", -1, &st, NULL),
        SQLITE_OK);
    int by_size[4] = {0}, nulls = 0, resolved_nulls = 0, long_paths = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *path = (const char *)sqlite3_column_text(st, 0);
        if (path == NULL) {
            nulls++;
            continue;
        }
        int hops;
        int size = path_hop_size(path, &hops);
        cr_assert(size >= 0, "malformed path_json: %s", path);
        by_size[size]++;
        long_paths += hops >= 5;
        const char *resolved = (const char *)sqlite3_column_text(st, 1);
        if (resolved == NULL) {
            resolved_nulls += hops > 0;
            continue;
        }
        /* Each resolved hop is null or the full key of a node with that prefix. */
        const char *p = path + 1, *q = resolved + 1;
        for (int h = 0; h < hops; h++) {
            if (strncmp(q, "null", 4) == 0) {
                q += 4;
            } else {
                cr_assert_eq(*q, '"', "resolved_path %s", resolved);
                for (int k = 0; k < 2 * size; k++)
                    cr_assert_eq(q[1 + k], p[1 + k] - (p[1 + k] >= 'A' ? 'A' - 'a' : 0),
                                 "hop %d of %s does not resolve %s", h, resolved, path);
                q += 66;
            }
            p += 2 * size + 3;
            q++;
        }
    }
    sqlite3_finalize(st);
    cr_assert_gt(by_size[0], 0, "no empty paths");
    cr_assert_gt(by_size[1], by_size[2], "1-byte hops should be the most common");
    cr_assert_gt(by_size[2], 0, "no 2-byte hops");
    cr_assert_gt(nulls, 0, "no NULL paths");
    cr_assert_gt(resolved_nulls, 0, "no NULL resolved_path for a non-empty path");
    cr_assert_gt(long_paths, 100, "paths of 5 hops and more should be common");
    cr_assert_gt(query_int(db, "SELECT count(*) FROM observations WHERE resolved_path LIKE "
                               "'%null%'"),
                 0, "no unresolved hop");
    sqlite3_close(db);
}

Test(fixture, observation_timestamps_fall_in_the_window_after_first_seen)
{
    struct mg_fixture_options o = small_options(4);
    o.days = 3;
    sqlite3 *db = open_db(generate("window.db", &o));
    cr_assert_geq(query_int(db, "SELECT min(timestamp) FROM observations"), NOW - 3 * 86400);
    cr_assert_leq(query_int(db, "SELECT max(timestamp) FROM observations"), NOW);
    cr_assert_eq(query_int(db, "SELECT count(*) FROM observations o JOIN transmissions t ON "
                               "t.id = o.transmission_id "
                               "WHERE o.timestamp < unixepoch(t.first_seen)"),
                 0);
    cr_assert_eq(query_int(db, "SELECT count(*) FROM transmissions WHERE first_seen NOT GLOB "
                               "'20[0-9][0-9]-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:"
                               "[0-5][0-9]Z'"),
                 0, "first_seen is RFC 3339 UTC");
    cr_assert_eq(query_int(db, "SELECT count(*) FROM nodes WHERE first_seen > last_seen"), 0);
    cr_assert_gt(query_int(db, "SELECT count(*) FROM nodes WHERE last_seen < "
                               "strftime('%Y-%m-%dT%H:%M:%SZ', 1779041349 - 3 * 86400, "
                               "'unixepoch')"),
                 0, "some nodes were last heard before the window");
    cr_assert_gt(
        query_int(db, "SELECT count(*) FROM nodes WHERE last_seen GLOB '*.[0-9][0-9][0-9]Z'"), 0,
        "some last_seen have milliseconds");
    sqlite3_close(db);
}

Test(fixture, adverts_name_their_sender_and_group_texts_their_channel)
{
    struct mg_fixture_options o = small_options(6);
    sqlite3 *db = open_db(generate("types.db", &o));
    cr_assert_gt(query_int(db, "SELECT count(*) FROM transmissions WHERE payload_type = 4"), 0);
    cr_assert_eq(query_int(db, "SELECT count(*) FROM transmissions WHERE payload_type = 4 AND "
                               "(from_pubkey IS NULL OR "
                               "json_extract(decoded_json, '$.pubKey') != from_pubkey OR "
                               "from_pubkey NOT IN (SELECT public_key FROM nodes))"),
                 0);
    cr_assert_eq(query_int(db, "SELECT count(*) FROM transmissions WHERE payload_type != 4 AND "
                               "from_pubkey IS NOT NULL"),
                 0);
    cr_assert_eq(query_int(db, "SELECT count(*) FROM transmissions WHERE payload_type = 5 AND "
                               "channel_hash IS NOT coalesce(json_extract(decoded_json, "
                               "'$.channel'), 'enc_' || json_extract(decoded_json, "
                               "'$.channelHashHex'))"),
                 0);
    cr_assert_gt(query_int(db, "SELECT count(*) FROM transmissions WHERE channel_hash LIKE "
                               "'enc\\_%' ESCAPE '\\'"),
                 0);
    cr_assert_gt(query_int(db, "SELECT count(*) FROM transmissions WHERE channel_hash LIKE '#%'"),
                 0);
    cr_assert_eq(query_int(db, "SELECT count(*) FROM transmissions WHERE NOT json_valid("
                               "decoded_json)"),
                 0);
    cr_assert_eq(query_int(db, "SELECT count(*) FROM transmissions WHERE length(hash) != 16 OR "
                               "hash GLOB '*[^0-9a-f]*'"),
                 0);
    cr_assert_gt(query_int(db, "SELECT count(DISTINCT payload_type) FROM transmissions"), 6);
    cr_assert_gt(query_int(db, "SELECT count(*) FROM transmissions WHERE route_type = 1"),
                 query_int(db, "SELECT count(*) FROM transmissions WHERE route_type != 1"));
    sqlite3_close(db);
}

Test(fixture, observers_are_uppercase_and_some_are_nodes)
{
    struct mg_fixture_options o = small_options(8);
    o.observers = 20;
    sqlite3 *db = open_db(generate("observers.db", &o));
    int64_t as_nodes = query_int(db, "SELECT count(*) FROM observers o JOIN nodes n ON "
                                     "n.public_key = lower(o.id)");
    cr_assert(as_nodes > 0 && as_nodes < 20, "%" PRId64 " of 20 observers are nodes", as_nodes);
    cr_assert_geq(query_int(db, "SELECT count(*) FROM observers WHERE length(id) = 64 AND "
                                "id NOT GLOB '*[^0-9A-F]*'"),
                  18);
    cr_assert_eq(query_int(db, "SELECT count(*) FROM observers WHERE iata NOT IN "
                               "('SFO', 'OAK', 'SJC', 'MRY')"),
                 0);
    cr_assert_lt(query_int(db, "SELECT sum(inactive) FROM observers"), 10);
    sqlite3_close(db);
}

Test(fixture, neighbor_edges_order_their_keys_and_include_unknown_ends)
{
    struct mg_fixture_options o = small_options(10);
    sqlite3 *db = open_db(generate("edges.db", &o));
    cr_assert_eq(query_int(db, "SELECT count(*) FROM neighbor_edges WHERE node_a >= node_b"), 0);
    cr_assert_gt(query_int(db, "SELECT count(*) FROM neighbor_edges WHERE node_a = ''"), 0);
    cr_assert_gt(query_int(db, "SELECT count(*) FROM neighbor_edges WHERE node_a != ''"), 0);
    cr_assert_eq(query_int(db, "SELECT count(*) FROM neighbor_edges WHERE count < 1"), 0);
    sqlite3_close(db);
}

/* --- files ----------------------------------------------------------------------------- */

Test(fixture, refuses_to_overwrite_an_existing_file_unless_told)
{
    struct mg_fixture_options o = small_options(1);
    const char *path = generate("same.db", &o);
    uint64_t before = file_checksum(path);
    char err[512] = "";
    o.seed = 2;
    cr_assert_eq(mg_fixture_generate(path, &o, err, sizeof err), -1);
    cr_assert(strstr(err, "already exists") != NULL, "message: %s", err);
    cr_assert_eq(file_checksum(path), before, "the refused run changed the file");
    o.overwrite = true;
    cr_assert_eq(mg_fixture_generate(path, &o, err, sizeof err), 0, "%s", err);
    cr_assert_neq(file_checksum(path), before, "overwrite kept the old file");
}

Test(fixture, freshen_leaves_the_source_alone_and_brings_newest_times_to_now)
{
    struct mg_fixture_options o = small_options(12);
    const char *src = generate("source.db", &o);
    const char *dst = in_dir("fresh.db");
    sqlite3 *db = open_db(src);
    int64_t spread = query_int(db, "SELECT max(timestamp) - min(timestamp) FROM observations");
    /* Gaps the shift must keep (to the second: a value without milliseconds rounds down). */
    static const char naive_gap[] =
        "SELECT sum(unixepoch(last_seen) - unixepoch(clock_last_naive_at)) FROM observers";
    static const char inactive_gap[] = "SELECT (SELECT max(unixepoch(last_seen)) FROM nodes) - "
                                       "(SELECT max(unixepoch(last_seen)) FROM inactive_nodes)";
    static const char newest_naive[] = "SELECT max(clock_last_naive_at) FROM observers";
    int64_t naive_before = query_int(db, naive_gap), inactive_before = query_int(db, inactive_gap);
    int64_t naive_count = query_int(db, "SELECT count(clock_last_naive_at) FROM observers");
    char naive_newest[64];
    snprintf(naive_newest, sizeof naive_newest, "%s", query_text(db, newest_naive));
    cr_assert_neq(naive_newest[0], '\0', "no observer has a naive clock to move");
    sqlite3_close(db);
    uint64_t before = file_checksum(src);

    const int64_t later = NOW + 40 * 86400 + 1234; /* 2026-06-26T18:29:43Z */
    char err[512] = "";
    cr_assert_eq(mg_fixture_freshen(src, dst, later, err, sizeof err), 0, "%s", err);
    cr_assert_eq(file_checksum(src), before, "the source changed");
    cr_assert_not(file_exists(in_dir("source.db-wal")), "a -wal appeared beside the source");

    db = open_db(dst);
    cr_assert_eq(query_int(db, "SELECT max(timestamp) FROM observations"), later);
    cr_assert_eq(query_int(db, "SELECT max(timestamp) - min(timestamp) FROM observations"), spread,
                 "relative times changed");
    cr_assert_eq(query_int(db, "SELECT max(last_seen) FROM transmissions"), later);
    cr_assert_eq(query_int(db, "SELECT count(*) FROM transmissions t WHERE last_seen != "
                               "(SELECT max(timestamp) FROM observations o "
                               "WHERE o.transmission_id = t.id)"),
                 0, "transmissions.last_seen moved with the observations");
    cr_assert_str_neq(query_text(db, newest_naive), naive_newest, "clock_last_naive_at stayed");
    int64_t naive_after = query_int(db, naive_gap), inactive_after = query_int(db, inactive_gap);
    cr_assert(llabs(naive_after - naive_before) <= naive_count + 1,
              "clock_last_naive_at did not follow observers.last_seen: gaps %" PRId64
              " then %" PRId64,
              naive_before, naive_after);
    cr_assert(llabs(inactive_after - inactive_before) <= 1,
              "inactive_nodes did not follow nodes: gap %" PRId64 " then %" PRId64, inactive_before,
              inactive_after);
    int64_t ms;
    const char *newest = query_text(db, "SELECT last_seen FROM nodes ORDER BY "
                                        "julianday(last_seen) DESC LIMIT 1");
    cr_assert(mg_rfc3339_parse_ms(newest, strlen(newest), &ms), "%s", newest);
    cr_assert_eq(ms, later * 1000, "newest nodes.last_seen is %s", newest);
    cr_assert(strncmp(newest, "2026-06-26T18:29:43", 19) == 0, "newest is %s", newest);
    cr_assert_str_eq(query_text(db, "SELECT max(first_seen) FROM transmissions"),
                     "2026-06-26T18:29:43Z");
    cr_assert_str_eq(query_text(db, "SELECT max(last_seen) FROM neighbor_edges"),
                     "2026-06-26T18:29:43Z");
    cr_assert_str_eq(query_text(db, "SELECT max(last_seen) FROM observers"),
                     "2026-06-26T18:29:43Z");
    cr_assert_eq(query_int(db, "SELECT count(*) FROM nodes WHERE first_seen > last_seen"), 0);
    cr_assert_eq(query_int(db, "SELECT count(*) FROM observers WHERE first_seen > last_seen"), 0);
    cr_assert_str_eq(query_text(db, "PRAGMA journal_mode"), "wal");
    sqlite3_close(db);
}

Test(fixture, freshen_of_a_missing_source_fails_and_names_it)
{
    char err[512] = "";
    const char *missing = in_dir("missing.db");
    cr_assert_eq(mg_fixture_freshen(missing, in_dir("out.db"), NOW, err, sizeof err), -1);
    cr_assert(strstr(err, missing) != NULL && strstr(err, "No such file") != NULL, "message: %s",
              err);
    cr_assert_not(file_exists(in_dir("out.db")));
}

Test(fixture, freshen_refuses_an_existing_destination_and_a_non_database)
{
    struct mg_fixture_options o = small_options(1);
    const char *src = generate("src.db", &o);
    const char *dst = generate("dst.db", &o);
    uint64_t before = file_checksum(dst);
    char err[512] = "";
    cr_assert_eq(mg_fixture_freshen(src, dst, NOW + 60, err, sizeof err), -1);
    cr_assert(strstr(err, "already exists") != NULL, "message: %s", err);
    cr_assert_eq(file_checksum(dst), before);

    const char *text = in_dir("notes.txt");
    FILE *f = fopen(text, "w");
    cr_assert_not_null(f);
    fputs("this is not a database, though it is long enough to look like a header......\n", f);
    fclose(f);
    cr_assert_eq(mg_fixture_freshen(text, in_dir("copy.db"), NOW, err, sizeof err), -1);
    cr_assert(strstr(err, "not an SQLite database") != NULL, "message: %s", err);
    cr_assert_not(file_exists(in_dir("copy.db")), "a failed freshen left its copy");
}

/* Each text value keeps its shape; each column's newest value lands on now. */
Test(fixture, freshen_keeps_the_shape_of_each_time_value)
{
    const char *src = in_dir("shapes.db");
    sqlite3 *db = NULL;
    cr_assert_eq(mg_test_sqlite_open(src, &db), SQLITE_OK);
    char *msg = NULL;
    int rc = sqlite3_exec(
        db,
        "CREATE TABLE nodes (public_key TEXT PRIMARY KEY, last_seen TEXT, first_seen TEXT);"
        "INSERT INTO nodes VALUES ('a', '2026-05-17T18:13:27Z', '2026-03-17T21:47:58.081Z');"
        "INSERT INTO nodes VALUES ('b', '2026-05-17T18:13:27.500Z', '2026-05-17 10:00:00');"
        "INSERT INTO nodes VALUES ('c', '2026-05-17T20:13:27+02:00', NULL);"
        "INSERT INTO nodes VALUES ('d', 'yesterday', '');"
        "INSERT INTO nodes VALUES ('e', '2026-05-17T18:00:00Z', '2026-05-17 10:00:00Z');"
        "CREATE TABLE observations (id INTEGER PRIMARY KEY, timestamp INTEGER);"
        "INSERT INTO observations VALUES (1, 1779041000), (2, 1779041349);",
        NULL, NULL, &msg);
    cr_assert_eq(rc, SQLITE_OK, "%s", msg ? msg : "");
    sqlite3_close(db);

    const char *dst = in_dir("shapes-fresh.db");
    char err[512] = "";
    /* The newest last_seen is b's 18:13:27.500Z, so nodes move 799.5 s on: b lands exactly on
     * now, whole-second values round down, and a value without a zone stays as it was. */
    cr_assert_eq(mg_fixture_freshen(src, dst, 1779042407 /* 18:26:47Z */, err, sizeof err), 0, "%s",
                 err);
    db = open_db(dst);
    static const struct {
        const char *key, *want;
    } rows[] = {
        {"a", "2026-05-17T18:26:46Z|2026-03-17T22:01:17.581Z"},
        {"b", "2026-05-17T18:26:47.000Z|2026-05-17 10:00:00"},
        {"c", "2026-05-17T20:26:46+02:00|NULL"},
        {"d", "yesterday|"},
        {"e", "2026-05-17T18:13:19Z|2026-05-17 10:13:19Z"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char sql[256];
        snprintf(sql, sizeof sql,
                 "SELECT last_seen || '|' || coalesce(first_seen, 'NULL') FROM nodes "
                 "WHERE public_key = '%s'",
                 rows[i].key);
        cr_assert_str_eq(query_text(db, sql), rows[i].want, "node %s", rows[i].key);
    }
    cr_assert_eq(query_int(db, "SELECT group_concat(timestamp) = '1779042058,1779042407' "
                               "FROM observations"),
                 1);
    sqlite3_close(db);
}

Test(fixture, rfc3339_parser_accepts_corescope_forms_only)
{
    static const struct {
        const char *text;
        bool ok;
        int64_t ms;
    } cases[] = {
        {"2026-05-17T18:13:27Z", true, 1779041607000},
        {"2026-05-17T18:13:27.081Z", true, 1779041607081},
        {"2026-05-17T18:13:27.5Z", true, 1779041607500},
        {"2026-05-17 18:13:27Z", true, 1779041607000},
        {"2026-05-17T20:13:27+02:00", true, 1779041607000},
        {"1970-01-01T00:00:00Z", true, 0},
        {"2024-02-29T00:00:00Z", true, 1709164800000},
        {"2026-02-29T00:00:00Z", false, 0},
        {"2026-05-17T18:13:27", false, 0},
        {"2026-05-17T24:00:00Z", false, 0},
        {"2026-05-17T18:13:27.Z", false, 0},
        {"2026-05-17T18:13:27Zjunk", false, 0},
        {"", false, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t ms = -1;
        bool ok = mg_rfc3339_parse_ms(cases[i].text, strlen(cases[i].text), &ms);
        cr_assert_eq(ok, cases[i].ok, "%s", cases[i].text);
        if (ok)
            cr_assert_eq(ms, cases[i].ms, "%s gave %" PRId64, cases[i].text, ms);
    }
}

Test(fixture, freshen_of_the_corescope_fixture_moves_its_newest_times_to_now)
{
    if (access(COMMITTED_FIXTURE, R_OK) != 0)
        cr_skip_test("%s is not present (CI has it)", COMMITTED_FIXTURE);
    uint64_t before = file_checksum(COMMITTED_FIXTURE);
    const char *dst = in_dir("corescope.db");
    char err[512] = "";
    cr_assert_eq(mg_fixture_freshen(COMMITTED_FIXTURE, dst, NOW + 86400 * 200, err, sizeof err), 0,
                 "%s", err);
    cr_assert_eq(file_checksum(COMMITTED_FIXTURE), before, "the fixture changed");
    sqlite3 *db = open_db(dst);
    cr_assert_eq(query_int(db, "SELECT max(timestamp) FROM observations"), NOW + 86400 * 200);
    cr_assert_str_eq(query_text(db, "SELECT max(last_seen) FROM nodes"), "2026-12-03T18:09:09Z");
    cr_assert_str_eq(query_text(db, "SELECT max(first_seen) FROM transmissions"),
                     "2026-12-03T18:09:09Z");
    cr_assert_eq(query_int(db, "SELECT count(*) FROM nodes"), 200);
    cr_assert_eq(query_int(db, "SELECT count(*) FROM nodes WHERE first_seen > last_seen"), 0);
    sqlite3_close(db);
}

/* The migrated file has the columns the migration adds; transmissions.last_seen is all 0
 * there (CoreScope's backfill had not run), which means "unknown" and must stay 0. */
Test(fixture, freshen_of_the_migrated_corescope_fixture_moves_times_and_keeps_its_shape)
{
    if (access(MIGRATED_FIXTURE, R_OK) != 0)
        cr_skip_test("%s is not present (CI has it)", MIGRATED_FIXTURE);
    uint64_t before = file_checksum(MIGRATED_FIXTURE);
    sqlite3 *src = open_read_only(MIGRATED_FIXTURE);
    char *schema_before = schema_of(src);
    int64_t unbackfilled = query_int(src, "SELECT count(*) FROM transmissions WHERE last_seen = 0");
    sqlite3_close(src);

    const char *dst = in_dir("migrated-fresh.db");
    char err[512] = "";
    const int64_t later = NOW + 86400 * 200;
    cr_assert_eq(mg_fixture_freshen(MIGRATED_FIXTURE, dst, later, err, sizeof err), 0, "%s", err);
    cr_assert_eq(file_checksum(MIGRATED_FIXTURE), before, "the fixture changed");
    sqlite3 *db = open_db(dst);
    char *schema_after = schema_of(db);
    cr_expect_str_eq(schema_after, schema_before, "freshen changed the schema");
    cr_assert_eq(query_int(db, "SELECT max(timestamp) FROM observations"), later);
    cr_assert_str_eq(query_text(db, "SELECT max(last_seen) FROM nodes"), "2026-12-03T18:09:09Z");
    cr_assert_str_eq(query_text(db, "SELECT max(last_seen) FROM observers"),
                     "2026-12-03T18:09:09Z");
    cr_assert_str_eq(query_text(db, "SELECT max(first_seen) FROM transmissions"),
                     "2026-12-03T18:09:09Z");
    /* A last_seen of 0 (not backfilled) is backfilled as CoreScope's ingestor does. */
    cr_assert_gt(unbackfilled, 0);
    cr_assert_eq(query_int(db, "SELECT count(*) FROM transmissions WHERE last_seen = 0"), 0);
    cr_assert_eq(query_int(db, "SELECT count(*) FROM _migrations"), 3);
    cr_assert_eq(query_int(db, "SELECT count(*) FROM observers WHERE first_seen > last_seen"), 0);
    free(schema_before);
    free(schema_after);
    sqlite3_close(db);
}

/* --- observations per transmission ------------------------------------------------------ */

Test(fixture, obs_per_tx_sets_transmissions_from_observations)
{
    struct mg_fixture_options o = small_options(14), r;
    char err[256] = "";
    o.obs_per_tx = 1;
    cr_assert_eq(mg_fixture_resolve(&o, &r, err, sizeof err), 0, "%s", err);
    cr_assert_eq(r.transmissions, 3000);
    cr_assert_eq(mg_fixture_resolve(&r, &r, err, sizeof err), 0, "resolving twice: %s", err);
    o.obs_per_tx = 6;
    sqlite3 *db = open_db(generate("per-tx.db", &o));
    cr_assert_eq(query_int(db, "SELECT count(*) FROM transmissions"), 500);
    cr_assert_eq(query_int(db, "SELECT count(*) FROM observations"), 3000);
    sqlite3_close(db);

    o.transmissions = 900;
    cr_assert_eq(mg_fixture_resolve(&o, &r, err, sizeof err), -1);
    cr_assert(strstr(err, "obs-per-tx 6") != NULL && strstr(err, "not both") != NULL, "message: %s",
              err);
    o.transmissions = 0;
    o.obs_per_tx = 1001;
    cr_assert_eq(mg_fixture_resolve(&o, &r, err, sizeof err), -1);
    cr_assert(strstr(err, "obs-per-tx 1001") != NULL, "message: %s", err);
}

/* Whether a column holds times: CoreScope names them so (corescope-schema.sql; not
 * observers.can_relay_seen, a flag). */
static bool time_column(const char *name)
{
    size_t n = strlen(name);
    return strcmp(name, "timestamp") == 0 || strcmp(name, "last_seen") == 0 ||
           strcmp(name, "first_seen") == 0 || (n > 3 && strcmp(name + n - 3, "_at") == 0);
}

/* The newest value of table.column in Unix seconds (text as RFC 3339 or SQLite's datetime,
 * integers as they are); -1 when it holds none. */
static int64_t newest_time(sqlite3 *db, const char *table, const char *column)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT coalesce(max(CASE typeof(\"%s\") WHEN 'integer' THEN \"%s\" "
             "ELSE unixepoch(\"%s\") END), -1) FROM \"%s\"",
             column, column, column, table);
    return query_int(db, sql);
}

/*
 * Every time column of every table moves (CoreScope's real migrated fixture) by about the
 * shift of the observations, and no transmission keeps
 * last_seen 0 ("not yet backfilled"), with which CoreScope's server loads no packet.
 */
Test(fixture, freshen_moves_every_time_column_of_the_real_fixture)
{
    const int64_t now = (int64_t)time(NULL);
    char err[512] = "";
    const char *dst = in_dir("fresh-real.db");
    cr_assert_eq(mg_fixture_freshen(MIGRATED_FIXTURE, dst, now, err, sizeof err), 0, "%s", err);
    sqlite3 *src = open_db(MIGRATED_FIXTURE), *db = open_db(dst);
    sqlite3_stmt *tables;
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "SELECT m.name, p.name FROM sqlite_master m, "
                                    "pragma_table_info(m.name) p WHERE m.type = 'table' "
                                    "ORDER BY 1, 2",
                                    -1, &tables, NULL),
                 SQLITE_OK);
    int64_t shift = now - query_int(src, "SELECT max(timestamp) FROM observations");
    int checked = 0;
    while (sqlite3_step(tables) == SQLITE_ROW) {
        char table[64], column[64];
        snprintf(table, sizeof table, "%s", (const char *)sqlite3_column_text(tables, 0));
        snprintf(column, sizeof column, "%s", (const char *)sqlite3_column_text(tables, 1));
        if (!time_column(column))
            continue;
        int64_t before = newest_time(src, table, column), after = newest_time(db, table, column);
        if (before < 0)
            continue; /* nothing to move (an empty table, a column all null) */
        checked++;
        /* Each moves by its group's offset (a follower keeps its gap to its lead), all near
         * the observations' in this fixture, whose newest times are within minutes. */
        cr_expect(after <= now &&
                      (before == 0 ? after > now - 86400 : after - before > shift - 7 * 86400),
                  "%s.%s: newest %lld before, %lld after the freshen at %lld", table, column,
                  (long long)before, (long long)after, (long long)now);
    }
    sqlite3_finalize(tables);
    /* nodes (2), observers (2 with values), transmissions (3), observations, neighbor_edges */
    cr_expect_geq(checked, 9, "only %d time columns checked", checked);
    cr_expect_eq(query_int(db, "SELECT count(*) FROM transmissions WHERE last_seen = 0"), 0);
    cr_expect_eq(query_int(db, "SELECT count(*) FROM transmissions t WHERE last_seen < "
                               "(SELECT max(timestamp) FROM observations o "
                               "WHERE o.transmission_id = t.id)"),
                 0, "last_seen is the newest observation");
    sqlite3_close(src);
    sqlite3_close(db);
}

/* CoreScope's own server (built by ../shared/corescope/peer/build.sh into /work/peer), with
 * its config.example.json (retentionHours 168: it loads the transmissions whose last_seen is
 * in the last week), loads packets from a freshened copy: its /api/packets lists some. */
#define CORESCOPE_EXAMPLE_CONFIG SHARED_DATA "../corescope/server/config.example.json"
Test(fixture, corescopes_server_sees_packets_in_a_freshened_copy, .timeout = 180)
{
    const char *server = "/work/peer/corescope-server";
    if (access(server, X_OK) != 0)
        cr_skip_test("CoreScope's server is not built at %s (../shared/corescope/peer/build.sh)",
                     server);
    if (access(CORESCOPE_EXAMPLE_CONFIG, R_OK) != 0)
        cr_skip_test("no %s", CORESCOPE_EXAMPLE_CONFIG);
    char err[512] = "";
    const char *dst = in_dir("fresh-peer.db");
    cr_assert_eq(mg_fixture_freshen(MIGRATED_FIXTURE, dst, 0, err, sizeof err), 0, "%s", err);
    int port = mg_test_free_port();
    char cmd[3072], out[4096];
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s/cfg' && cp '%s' '%s/cfg/config.json' && cd '%s' && "
             "{ CORESCOPE_LISTEN_HOST=127.0.0.1 timeout 150 '%s' -db '%s' -port %d -config-dir "
             "'%s/cfg' > '%s/peer.log' 2>&1 & pid=$!; "
             "for i in $(seq 1200); do curl -sf http://127.0.0.1:%d/api/healthz | "
             "grep -q '\"ready\":true' && break; sleep 0.1; done; "
             "curl -sf 'http://127.0.0.1:%d/api/packets?limit=5'; kill $pid; wait $pid; }",
             dir, CORESCOPE_EXAMPLE_CONFIG, dir, dir, server, dst, port, dir, dir, port, port);
    mg_test_shell(cmd, out, sizeof out);
    cr_expect(strstr(out, "\"packets\":[{"), "CoreScope's server listed no packets: %.1000s", out);
}

/* SPDX-License-Identifier: ISC */
/*
 * /api/nodes/search and /api/nodes/{pubkey} on CoreScope's real end-to-end database,
 * freshened into a private copy (both files a user may have: as captured, and as CoreScope's
 * migration leaves it), called in-process through the real dispatch. What each answer must
 * hold is worked out from the copy with this suite's own SQL, or is a fact checked by hand
 * against the data (../shared/data/README.md; CoreScope's own server gave the same on the
 * same copy). Without the fixture every test skips and says why.
 */
#include "clock.h"
#include "ep_node_detail.h"
#include "fixture.h"
#include "harness.h"
#include "inproc.h"
#include "jsoncheck.h"
#include "node_hash_sizes.h"

#include <criterion/criterion.h>
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FIXTURE_DB MESHGATE_SOURCE_DIR "/../shared/data/corescope-e2e-fixture.db"
#define FIXTURE_MIGRATED_DB MESHGATE_SOURCE_DIR "/../shared/data/corescope-e2e-fixture-migrated.db"
#define N6IJ_PUBKEY "ec3433bb3adf1acaee0ce117600b0ca473705486ec666137379a1e8cbb7e75f4"
#define BUSIEST_PUBKEY "1000009e310d729534b70faa33a1abe5cd5e45d594f72f786febccbb770b7e74"

static struct {
    char dir[128];
    char db[256];
    struct mg_test_ctx t;
    bool open;
} fx;

static void cleanup(void)
{
    if (fx.open)
        mg_test_ctx_close(&fx.t);
    fx.open = false;
    if (fx.dir[0])
        mg_test_rmdir(fx.dir);
    fx.dir[0] = '\0';
}

TestSuite(api_nodes, .fini = cleanup, .timeout = 60);
TestSuite(api_nodes_migrated, .fini = cleanup, .timeout = 60);

static const char *fixture_source = FIXTURE_DB;
#define FIXTURE_TEST(name)                                                                         \
    static void name(void);                                                                        \
    Test(api_nodes, name)                                                                          \
    {                                                                                              \
        fixture_source = FIXTURE_DB;                                                               \
        name();                                                                                    \
    }                                                                                              \
    Test(api_nodes_migrated, name)                                                                 \
    {                                                                                              \
        fixture_source = FIXTURE_MIGRATED_DB;                                                      \
        name();                                                                                    \
    }                                                                                              \
    static void name(void)

/* A freshened private copy of the fixture, opened in-process. */
static void start(void)
{
    if (access(fixture_source, R_OK) != 0)
        cr_skip_test("%s not present: this suite checks the node endpoints against CoreScope's "
                     "real end-to-end database, which CI provides (see ../shared/data/README.md)",
                     fixture_source);
    mg_test_tmpdir(fx.dir, sizeof fx.dir);
    cr_assert(fx.dir[0], "no temporary directory under /tmp");
    snprintf(fx.db, sizeof fx.db, "%s/fresh.db", fx.dir);
    char err[512] = "";
    cr_assert_eq(mg_fixture_freshen(fixture_source, fx.db, (int64_t)time(NULL), err, sizeof err), 0,
                 "freshening %s: %s", fixture_source, err);
    cr_assert(mg_test_ctx_open(&fx.t, fx.db));
    fx.open = true;
}

static const char *get(const char *target, int want_status)
{
    int status = mg_test_ctx_get(&fx.t, target);
    const char *body = (const char *)fx.t.res.body.data;
    cr_assert_eq(status, want_status, "GET %s: status %d, want %d: %.600s", target, status,
                 want_status, body);
    cr_assert(json_body_is_strict(body, fx.t.res.body.len), "GET %s: not strict JSON: %.600s",
              target, body);
    return body;
}

/* The first column of each row of a query on the copy (sqlite3_mprintf format), as text
 * joined by commas. */
static char *db_texts(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *sql = sqlite3_vmprintf(fmt, ap);
    va_end(ap);
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(fx.t.db.conn, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(fx.t.db.conn));
    size_t cap = 4096, used = 0;
    char *out = calloc(1, cap);
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *v = (const char *)sqlite3_column_text(st, 0);
        used += (size_t)snprintf(out + used, cap - used, "%s%s", used ? "," : "", v ? v : "null");
        cr_assert(used < cap, "%s: too many rows", sql);
    }
    sqlite3_finalize(st);
    sqlite3_free(sql);
    return out;
}

static long long db_int(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *sql = sqlite3_vmprintf(fmt, ap);
    va_end(ap);
    long long v = LLONG_MIN;
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(fx.t.db.conn, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(fx.t.db.conn));
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_free(sql);
    return v;
}

/* The public keys of an array of nodes, joined by commas. */
static void keys_of(const char *nodes, char *out, size_t cap)
{
    size_t used = 0;
    out[0] = '\0';
    for (const char *n = json_first(nodes); n; n = json_next(n)) {
        char *pk = json_str_at(n, "public_key");
        used += (size_t)snprintf(out + used, cap - used, "%s%s", used ? "," : "", pk ? pk : "?");
        free(pk);
    }
}

/* ---- search ------------------------------------------------------------------------------- */

/* Name contains q or key starts with it (LIKE), newest last_seen first, at most 10. */
static void expect_search(const char *q_encoded, const char *q)
{
    char target[256], got[4096];
    snprintf(target, sizeof target, "/api/nodes/search?q=%s", q_encoded);
    const char *b = get(target, 200);
    char keys[64];
    json_keys(b, NULL, keys, sizeof keys);
    cr_expect_str_eq(keys, "nodes", "GET %s: the envelope", target);
    keys_of(json_get(b, "nodes"), got, sizeof got);
    char *want = db_texts("SELECT public_key FROM nodes WHERE name LIKE '%%' || %Q || '%%'"
                          " OR public_key LIKE %Q || '%%' ORDER BY last_seen DESC LIMIT 10",
                          q, q);
    cr_expect_str_eq(got, want, "GET %s", target);
    free(want);
}

FIXTURE_TEST(search_finds_by_name_or_key_prefix_newest_first)
{
    start();
    expect_search("N6", "N6");
    expect_search("n6ij", "n6ij"); /* ASCII case-insensitive */
    expect_search("ec34", "ec34"); /* a key prefix */
    expect_search("%20%20N6IJ%20", "N6IJ");
    expect_search("repeater", "repeater"); /* more than 10 match: the 10 newest */
    /* % and _ are LIKE's wildcards, as CoreScope passes them. */
    expect_search("%25", "%");
    expect_search("_6", "_6");
    cr_expect_eq(db_int("SELECT count(*) FROM nodes WHERE name LIKE '%%repeater%%'") > 10, 1);
    /* The hand-checked node, with the list's keys. */
    const char *b = get("/api/nodes/search?q=N6IJ", 200);
    const char *n = json_first(json_get(b, "nodes"));
    cr_assert_not_null(n);
    cr_expect(json_str_at_eq(n, "public_key", N6IJ_PUBKEY) &&
                  json_str_at_eq(n, "name", "N6IJ Repeater") &&
                  json_int_at(n, "advert_count") == 22 && json_is_at(n, "hash_size", "null"),
              "N6IJ: %.300s", n);
    cr_expect(json_keys_sorted(n), "keys sorted");
    cr_expect_null(json_next(n), "one node is called N6IJ");
}

FIXTURE_TEST(search_without_a_query_or_with_no_match_is_empty)
{
    start();
    cr_expect_str_eq(get("/api/nodes/search", 200), "{\"nodes\":[]}\n");
    cr_expect_str_eq(get("/api/nodes/search?q=", 200), "{\"nodes\":[]}\n");
    cr_expect_str_eq(get("/api/nodes/search?q=%20%09", 200), "{\"nodes\":[]}\n");
    cr_expect_str_eq(get("/api/nodes/search?q=zzzz-no-such-node", 200), "{\"nodes\":[]}\n");
    /* A quote is a value, not SQL. */
    cr_expect_str_eq(get("/api/nodes/search?q=%27%22", 200), "{\"nodes\":[]}\n");
}

/* ---- detail ------------------------------------------------------------------------------- */

FIXTURE_TEST(detail_of_n6ij_matches_its_rows_and_adverts)
{
    start();
    const char *b = get("/api/nodes/" N6IJ_PUBKEY, 200);
    char keys[1024];
    json_keys(b, NULL, keys, sizeof keys);
    cr_expect_str_eq(keys, "node,recentAdverts", "the envelope");
    const char *n = json_get(b, "node");
    cr_assert_not_null(n);
    cr_expect(json_keys_sorted(n), "node keys sorted");
    cr_expect(json_str_at_eq(n, "name", "N6IJ Repeater") && json_int_at(n, "advert_count") == 22,
              "N6IJ's row: %.300s", n);
    /* Hand-checked: its one ADVERT of the week (id 92) is a flood with path byte 0x40,
     * 2-byte hashes; CoreScope says hash_size 2, confirmed by advert, 1 flood advert. */
    cr_expect_eq(json_int_at(n, "hash_size"), 2, "hash_size");
    cr_expect(json_is_at(n, "hash_size_inconsistent", "false"));
    cr_expect_null(json_get(n, "hash_sizes_seen"), "one size seen: no list");
    cr_expect(json_str_at_eq(n, "multi_byte_status", "confirmed") &&
                  json_str_at_eq(n, "multi_byte_evidence", "advert") &&
                  json_int_at(n, "multi_byte_max_hash_size") == 2,
              "multi-byte: %.600s", n);
    cr_expect_eq(json_int_at(n, "flood_advert_count_7d"),
                 db_int("SELECT count(DISTINCT hash) FROM transmissions WHERE from_pubkey = %Q"
                        " AND payload_type = 4 AND route_type = 1",
                        N6IJ_PUBKEY));
    cr_expect_eq(json_int_at(n, "flood_advert_count_7d"), 1);

    /* recentAdverts: its transmissions by id, newest first, each with all observations. */
    const char *recent = json_get(b, "recentAdverts");
    char got[4096] = "";
    size_t used = 0;
    for (const char *t = json_first(recent); t; t = json_next(t)) {
        used += (size_t)snprintf(got + used, sizeof got - used, "%s%lld", used ? "," : "",
                                 json_int_at(t, "id"));
        cr_expect_eq(json_length(json_get(t, "observations")), json_int_at(t, "observation_count"),
                     "transmission %lld: its observations", json_int_at(t, "id"));
        cr_expect(json_keys_sorted(t));
    }
    char *want = db_texts("SELECT id FROM transmissions WHERE from_pubkey = %Q ORDER BY id DESC"
                          " LIMIT 20",
                          N6IJ_PUBKEY);
    cr_expect_str_eq(got, want, "recentAdverts ids");
    free(want);
    const char *t = json_first(recent);
    cr_assert_not_null(t);
    json_keys(t, NULL, keys, sizeof keys);
    bool scope = fx.t.db.schema.tx_scope_name;
    cr_expect_str_eq(keys, scope ? "decoded_json,direction,first_seen,hash,id,observation_count,"
                                   "observations,observer_iata,observer_id,observer_name,path_json,"
                                   "payload_type,raw_hex,route_type,rssi,scope_name,snr,timestamp"
                                 : "decoded_json,direction,first_seen,hash,id,observation_count,"
                                   "observations,observer_iata,observer_id,observer_name,path_json,"
                                   "payload_type,raw_hex,route_type,rssi,snr,timestamp");
    /* Transmission 92, heard once by "Key Route Inspector-BRK" (OAK). */
    cr_expect_eq(json_int_at(t, "id"), 92);
    cr_expect(json_str_at_eq(t, "hash", "115ab84f6a2d0e76") &&
              json_str_at_eq(t, "observer_iata", "OAK"));
    const char *o = json_first(json_get(t, "observations"));
    cr_assert_not_null(o);
    json_keys(o, NULL, keys, sizeof keys);
    cr_expect_str_eq(keys, "id,observer_iata,observer_id,observer_name,path_json,rssi,snr,"
                           "timestamp,transmission_id");
    char *ts = db_texts("SELECT strftime('%%Y-%%m-%%dT%%H:%%M:%%fZ', timestamp, 'unixepoch')"
                        " FROM observations WHERE transmission_id = 92");
    cr_expect(json_str_at_eq(o, "timestamp", ts), "observation time, want %s", ts);
    cr_expect(json_str_at_eq(o, "path_json", "[\"1000\",\"D818\",\"7D1D\",\"1F5D\"]"));
    free(ts);
}

FIXTURE_TEST(detail_by_short_prefix_and_its_refusals)
{
    start();
    /* 8 hex digits or more, either case: CoreScope's short links. */
    const char *b = get("/api/nodes/ec3433bb", 200);
    cr_expect(json_str_at_eq(json_get(b, "node"), "public_key", N6IJ_PUBKEY));
    b = get("/api/nodes/EC3433BB3ADF", 200);
    cr_expect(json_str_at_eq(json_get(b, "node"), "public_key", N6IJ_PUBKEY));
    /* The busiest relay sent no ADVERT in the copy: no hash size, empty recentAdverts. */
    cr_expect_eq(
        db_int("SELECT count(*) FROM transmissions WHERE from_pubkey = %Q", BUSIEST_PUBKEY), 0);
    b = get("/api/nodes/1000009e", 200);
    cr_expect(json_is_at(json_get(b, "node"), "hash_size", "null"));
    cr_expect_null(json_get(json_get(b, "node"), "multi_byte_status"));
    cr_expect_eq(json_int_at(json_get(b, "node"), "flood_advert_count_7d"), 0);
    cr_expect_eq(json_length(json_get(b, "recentAdverts")), 0);

    /* Too short, not hex, unknown: 404 as CoreScope. */
    cr_expect_str_eq(get("/api/nodes/ec3433b", 404), "{\"error\":\"Not found\"}\n");
    cr_expect_str_eq(get("/api/nodes/ec3433zz", 404), "{\"error\":\"Not found\"}\n");
    cr_expect_str_eq(get("/api/nodes/ffffffffffffffff", 404), "{\"error\":\"Not found\"}\n");
    cr_expect_str_eq(get("/api/nodes/" N6IJ_PUBKEY "00", 404), "{\"error\":\"Not found\"}\n");
    cr_expect_str_eq(get("/api/nodes/%25%25%25%25%25%25%25%25", 404),
                     "{\"error\":\"Not found\"}\n");
    /* The full key is exact: the upper-case form is no prefix of 64 digits. */
    get("/api/nodes/EC3433BB3ADF1ACAEE0CE117600B0CA473705486EC666137379A1E8CBB7E75F4", 404);

    /* A prefix two nodes share: 409. */
    char *shared = db_texts("SELECT substr(a.public_key, 1, 8) FROM nodes a JOIN nodes b"
                            " ON substr(a.public_key, 1, 8) = substr(b.public_key, 1, 8)"
                            " AND a.public_key < b.public_key LIMIT 1");
    if (shared[0]) {
        char target[64];
        snprintf(target, sizeof target, "/api/nodes/%s", shared);
        cr_expect_str_eq(get(target, 409), "{\"error\":\"Ambiguous prefix: multiple nodes match. "
                                           "Use a longer prefix.\"}\n");
    }
    free(shared);
    /* Search and the other routes are not taken for a key. */
    get("/api/nodes/search?q=N6", 200);
    get("/api/nodes/" N6IJ_PUBKEY "/reach", 200);
}

/* ---- what the detail derives, on its own ---------------------------------------------------- */

Test(api_nodes_units, advert_hash_size_reads_the_path_byte)
{
    cr_expect_eq(mg_advert_hash_size("1140EC34"), 2);       /* flood, 0x40: 2 bytes */
    cr_expect_eq(mg_advert_hash_size("1100EC34"), 1);       /* flood, 0x00 */
    cr_expect_eq(mg_advert_hash_size("1180"), 3);           /* 0x80 */
    cr_expect_eq(mg_advert_hash_size("12C1"), 4);           /* direct with one hop: 0xC1 */
    cr_expect_eq(mg_advert_hash_size("1240"), 0);           /* direct zero-hop: says nothing */
    cr_expect_eq(mg_advert_hash_size("1000000000"), 0);     /* transport: too short */
    cr_expect_eq(mg_advert_hash_size("100102030440"), 2);   /* transport: byte 5 */
    cr_expect_eq(mg_advert_hash_size("13010203044000"), 0); /* transport direct zero-hop */
    cr_expect_eq(mg_advert_hash_size("zz40"), 0);
    cr_expect_eq(mg_advert_hash_size("11"), 0);
    cr_expect_eq(mg_advert_hash_size(NULL), 0);
}

Test(api_nodes_units, hash_sizes_flag_flip_flopping_until_settled)
{
    struct mg_node_hash_sizes hs;
    mg_node_hash_sizes_of(&hs, NULL, 0);
    cr_expect(!hs.known);
    mg_node_hash_sizes_of(&hs, (int[]){1, 2, 1, 2}, 4);
    cr_expect(hs.known && hs.size == 2 && hs.inconsistent && hs.seen_mask == 0x6);
    mg_node_hash_sizes_of(&hs, (int[]){1, 2, 1, 2, 2, 2}, 6); /* the last 3 agree */
    cr_expect(hs.size == 2 && !hs.inconsistent);
    mg_node_hash_sizes_of(&hs, (int[]){1, 1, 2}, 3); /* one change only */
    cr_expect(!hs.inconsistent);
    mg_node_hash_sizes_of(&hs, (int[]){2, 1}, 2); /* too few */
    cr_expect(hs.size == 1 && !hs.inconsistent);
}

FIXTURE_TEST(detail_is_heavy_only_for_a_node_that_sent_much)
{
    start();
    /* The node that sent the most, and one that sent a few: the bound decides. */
    char *busy = db_texts("SELECT from_pubkey FROM transmissions WHERE from_pubkey IS NOT NULL"
                          " GROUP BY from_pubkey ORDER BY count(*) DESC, from_pubkey LIMIT 1");
    long long sent = db_int("SELECT count(*) FROM transmissions WHERE from_pubkey = %Q", busy);
    char target[128];
    snprintf(target, sizeof target, "/api/nodes/%s", busy);
    get(target, 200);
    cr_expect_eq(fx.t.light, sent <= MG_NODE_DETAIL_LIGHT_ROWS, "%s sent %lld: light %d", busy,
                 sent, fx.t.light);
    free(busy);
    get("/api/nodes/" N6IJ_PUBKEY, 200);
    long long n6ij =
        db_int("SELECT count(*) FROM transmissions WHERE from_pubkey = %Q", N6IJ_PUBKEY);
    cr_expect_eq(fx.t.light, n6ij <= MG_NODE_DETAIL_LIGHT_ROWS, "N6IJ sent %lld", n6ij);
    get("/api/nodes/" BUSIEST_PUBKEY, 200); /* sent nothing */
    cr_expect(fx.t.light);
    get("/api/nodes/ffffffffffffffff", 404);
    cr_expect(fx.t.light);
}

/* On a generated database, where nodes send hundreds of ADVERTs a week. */
Test(api_nodes_units, detail_of_a_node_that_sent_much_is_heavy_and_still_right)
{
    mg_test_tmpdir(fx.dir, sizeof fx.dir);
    snprintf(fx.db, sizeof fx.db, "%s/gen.db", fx.dir);
    struct mg_fixture_options o;
    mg_fixture_options_default(&o);
    o.observations = 20000;
    o.nodes = 20;
    char err[512] = "";
    cr_assert_eq(mg_fixture_generate(fx.db, &o, err, sizeof err), 0, "%s", err);
    cr_assert(mg_test_ctx_open(&fx.t, fx.db));
    fx.open = true;
    char *busy = db_texts("SELECT from_pubkey FROM transmissions WHERE from_pubkey IS NOT NULL"
                          " GROUP BY from_pubkey ORDER BY count(*) DESC, from_pubkey LIMIT 1");
    cr_assert_gt(db_int("SELECT count(*) FROM transmissions WHERE from_pubkey = %Q", busy),
                 MG_NODE_DETAIL_LIGHT_ROWS);
    char target[128];
    snprintf(target, sizeof target, "/api/nodes/%s", busy);
    const char *b = get(target, 200);
    cr_expect(!fx.t.light, "a node that sent much is heavy");
    cr_expect_eq(json_length(json_get(b, "recentAdverts")), 20);
    /* flood_advert_count_7d: its distinct flood ADVERTs of the week. */
    char cut[32];
    time_t c = time(NULL) - 7 * 86400 + 5; /* a margin for the test's own time */
    strftime(cut, sizeof cut, "%Y-%m-%dT%H:%M:%SZ", gmtime(&c));
    long long lo = db_int("SELECT count(DISTINCT hash) FROM transmissions WHERE from_pubkey = %Q"
                          " AND payload_type = 4 AND route_type = 1 AND first_seen > %Q",
                          busy, cut);
    long long got = json_int_at(json_get(b, "node"), "flood_advert_count_7d");
    cr_expect(got >= lo && got <= lo + 1, "flood adverts %lld, the week has %lld", got, lo);
    free(busy);
}

/* ---- the list's hash sizes ---------------------------------------------------------------- */

FIXTURE_TEST(list_hash_sizes_come_from_the_weeks_adverts_as_in_the_detail)
{
    start();
    const char *b = get("/api/nodes?limit=2000", 200);
    /* Nodes named by an ADVERT of the week that says something of its size (not a direct
     * zero-hop one: path byte & 0x3f = 0 with route 2 or 3). */
    char cut[32];
    mg_node_hash_sizes_cutoff((int64_t)time(NULL), cut, sizeof cut);
    long long want =
        db_int("WITH a AS (SELECT decoded_json ->> '$.pubKey' AS k,"
               " (instr('0123456789ABCDEF', upper(substr(raw_hex, 2, 1))) - 1) %% 4 AS rt, raw_hex"
               " FROM transmissions WHERE payload_type = 4 AND first_seen >= %Q)"
               " SELECT count(DISTINCT k) FROM a WHERE k IN (SELECT public_key FROM nodes) AND NOT"
               " (rt IN (2, 3) AND upper(substr(raw_hex, CASE rt WHEN 3 THEN 11 ELSE 3 END, 2))"
               " IN ('00', '40', '80', 'C0'))",
               cut);
    cr_expect_gt(want, 0);
    char *list = strdup(b); /* get() reuses the response buffer */
    int with_size = 0;
    for (const char *n = json_first(json_get(list, "nodes")); n; n = json_next(n)) {
        if (json_is_at(n, "hash_size", "null"))
            continue;
        with_size++;
        /* The same as the node's own detail says. */
        char *pk = json_str_at(n, "public_key"), target[128];
        char *status = json_str_at(n, "multi_byte_status");
        snprintf(target, sizeof target, "/api/nodes/%s", pk);
        const char *d = json_get(get(target, 200), "node");
        cr_expect_eq(json_int_at(d, "hash_size"), json_int_at(n, "hash_size"), "%s", pk);
        char *detail_status = json_str_at(d, "multi_byte_status");
        cr_expect((status == NULL) == (detail_status == NULL), "%s: multi-byte", pk);
        free(status);
        free(detail_status);
        free(pk);
    }
    cr_expect_eq(with_size, want, "nodes with a hash size");
    free(list);
}

FIXTURE_TEST(list_is_heavy_only_when_there_is_no_hash_size_table)
{
    start();
    mg_node_hash_sizes_forget();
    get("/api/nodes", 200);
    cr_expect(!fx.t.light, "the request that builds the table is heavy");
    get("/api/nodes?limit=2000", 200);
    cr_expect(fx.t.light, "a table: light");
    int64_t now_ns = mg_monotonic_ns();
    cr_expect(mg_node_hash_sizes_fresh(fx.t.db.conn, now_ns));
    int64_t later = now_ns + MG_NODE_HASH_SIZES_INTERVAL_NS;
    cr_expect(!mg_node_hash_sizes_fresh(fx.t.db.conn, later), "stale after its interval");
    cr_expect(mg_node_hash_sizes_exist(fx.t.db.conn), "a stale table still serves");
    /* Without a helper thread (in-process) a stale table is rebuilt by the request. */
    cr_expect_eq(mg_node_hash_sizes_keep(&fx.t.env, later, (int64_t)time(NULL)), SQLITE_OK);
    cr_expect(mg_node_hash_sizes_fresh(fx.t.db.conn, later));
}

/* ---- health ---------------------------------------------------------------------------------- */

FIXTURE_TEST(health_of_n6ij_sums_up_the_packets_that_name_it)
{
    start();
    const char *b = get("/api/nodes/" N6IJ_PUBKEY "/health", 200);
    cr_expect(!fx.t.light, "health scans observations: heavy");
    char keys[256];
    json_keys(b, NULL, keys, sizeof keys);
    cr_expect_str_eq(keys, "node,observers,recentPackets,stats");
    cr_expect(json_str_at_eq(json_get(b, "node"), "name", "N6IJ Repeater"));
    /* Its packets: those whose decoded keys or resolved paths name it, or whose path (with
     * no resolved path) has one of its reliable tokens EC, EC34, EC3433 (README facts). */
    bool resolved = fx.t.db.schema.obs_resolved_path;
    long long want = db_int(
        "SELECT count(*) FROM transmissions WHERE id IN (SELECT transmission_id FROM observations"
        " WHERE %s) OR decoded_json LIKE '%%\"%s\"%%'",
        resolved ? "CASE WHEN coalesce(resolved_path, '') = '' THEN path_json LIKE '%\"EC\"%'"
                   " OR path_json LIKE '%\"EC34\"%' OR path_json LIKE '%\"EC3433\"%'"
                   " ELSE resolved_path LIKE '%" N6IJ_PUBKEY "%' END"
                 : "path_json LIKE '%\"EC\"%' OR path_json LIKE '%\"EC34\"%'"
                   " OR path_json LIKE '%\"EC3433\"%'",
        N6IJ_PUBKEY);
    const char *stats = json_get(b, "stats");
    cr_expect_eq(json_int_at(stats, "totalTransmissions"), want);
    cr_expect_eq(json_int_at(stats, "totalPackets"), want);
    /* Hand-checked with CoreScope's server on the migrated copy: 24 packets, 24
     * observations, 8 hops on average, 10 observers, no SNR. */
    if (resolved) {
        cr_expect_eq(want, 24);
        cr_expect_eq(json_int_at(stats, "totalObservations"), 24);
        cr_expect_eq(json_int_at(stats, "avgHops"), 8);
        cr_expect_eq(json_length(json_get(b, "observers")), 10);
    }
    cr_expect(json_is_at(stats, "avgSnr", "null"));
    /* recentPackets: the 20 newest by id, newest first, with the packet keys. */
    const char *recent = json_get(b, "recentPackets");
    cr_expect_eq(json_length(recent), want < 20 ? want : 20);
    long long prev = LLONG_MAX;
    for (const char *p = json_first(recent); p; p = json_next(p)) {
        long long id = json_int_at(p, "id");
        cr_expect_lt(id, prev, "recentPackets newest first");
        prev = id;
        json_keys(p, ",resolved_path,", keys, sizeof keys);
        cr_expect_str_eq(keys, "_parsedPath,decoded_json,direction,first_seen,hash,id,"
                               "observation_count,observer_iata,observer_id,observer_name,"
                               "path_json,payload_type,raw_hex,route_type,rssi,snr,timestamp");
    }
    /* Observers most packets first; their counts add up to the packets with an observer. */
    long long sum = 0, last = LLONG_MAX;
    for (const char *o = json_first(json_get(b, "observers")); o; o = json_next(o)) {
        long long c = json_int_at(o, "packetCount");
        cr_expect_leq(c, last);
        last = c;
        sum += c;
        cr_expect(json_is_at(o, "can_relay", "null"));
    }
    cr_expect_eq(sum, want);
}

FIXTURE_TEST(health_of_an_unknown_or_malformed_key_is_404)
{
    start();
    cr_expect_str_eq(get("/api/nodes/ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff"
                         "ffff/health",
                         404),
                     "{\"error\":\"Not found\"}\n");
    get("/api/nodes/zz/health", 404);
    get("/api/nodes/%27%20OR%201=1/health", 404);
    /* Keys are exact, as in CoreScope: the upper-case form is another key. */
    get("/api/nodes/EC3433BB3ADF1ACAEE0CE117600B0CA473705486EC666137379A1E8CBB7E75F4/health", 404);
    /* A node that names nothing still answers, with empty lists. */
    char *quiet = db_texts("SELECT public_key FROM nodes WHERE role = 'companion' AND public_key"
                           " NOT IN (SELECT from_pubkey FROM transmissions WHERE from_pubkey"
                           " IS NOT NULL) ORDER BY public_key LIMIT 1");
    if (quiet[0]) {
        char target[128];
        snprintf(target, sizeof target, "/api/nodes/%s/health", quiet);
        const char *b = get(target, 200);
        cr_expect(json_str_at_eq(json_get(b, "node"), "public_key", quiet));
    }
    free(quiet);
}

/* ---- clock skew ------------------------------------------------------------------------------ */

FIXTURE_TEST(clock_skew_of_n6ij_from_its_adverts)
{
    start();
    const char *b = get("/api/nodes/" N6IJ_PUBKEY "/clock-skew", 200);
    cr_expect(!fx.t.light, "every ADVERT's observations are read: heavy");
    char keys[512];
    json_keys(b, ",recentBadSamples,", keys, sizeof keys);
    cr_expect_str_eq(keys, "pubkey,meanSkewSec,medianSkewSec,lastSkewSec,recentMedianSkewSec,"
                           "driftPerDaySec,severity,sampleCount,calibrated,lastAdvertTS,"
                           "lastObservedTS,samples,goodFraction,recentBadSampleCount,"
                           "recentSampleCount,recentHashEvidence,calibrationSummary");
    /* Its packets that are ADVERTs with a plausible timestamp, one sample each: the same
     * ADVERTs /health lists (hand-checked with CoreScope's server on the migrated copy: 7
     * samples, none calibrated, severity no_clock). */
    const char *samples = json_get(b, "samples");
    long long n = json_length(samples);
    cr_expect_eq(json_int_at(b, "sampleCount") >= n, 1);
    if (fx.t.db.schema.obs_resolved_path) {
        cr_expect_eq(n, 7);
        cr_expect(json_str_at_eq(b, "severity", "no_clock"));
        cr_expect(json_is_at(b, "calibrated", "false"));
    }
    /* A skew is the ADVERT's timestamp minus when it was heard, checked for the latest (heard
     * once, no observer offset): lastAdvertTS - lastObservedTS, rounded as CoreScope rounds
     * (half up, then toward zero: -21341170 reads -21341169.9) per ADVERT, and again for the
     * node. */
    long long adv = json_int_at(b, "lastAdvertTS"), obs = json_int_at(b, "lastObservedTS");
    cr_expect_eq(db_int("SELECT count(*) FROM observations WHERE timestamp = %lld", obs) > 0, 1);
    double want = (double)(long long)((double)(adv - obs) * 10 + 0.5) / 10;
    want = (double)(long long)(want * 10 + 0.5) / 10;
    cr_expect(fabs(json_double_at(b, "lastSkewSec") - want) < 1e-6, "lastSkewSec %f, want %f",
              json_double_at(b, "lastSkewSec"), want);
    /* Samples in time order. */
    long long prev = 0;
    for (const char *s = json_first(samples); s; s = json_next(s)) {
        cr_expect_geq(json_int_at(s, "ts"), prev);
        prev = json_int_at(s, "ts");
    }
}

FIXTURE_TEST(clock_skew_without_adverts_is_404)
{
    start();
    /* The busiest relay sent no ADVERT, but relayed others': those count, as in CoreScope. */
    get("/api/nodes/" BUSIEST_PUBKEY "/clock-skew", 200);
    cr_expect_str_eq(get("/api/nodes/ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff"
                         "ffff/clock-skew",
                         404),
                     "{\"error\":\"No clock skew data for this node\"}\n");
    get("/api/nodes/not-a-key/clock-skew", 404);
}

FIXTURE_TEST(fleet_clock_skew_lists_each_nodes_skew_in_key_order)
{
    start();
    char *fleet = strdup(get("/api/nodes/clock-skew", 200));
    cr_expect(!fx.t.light, "heavy");
    int n = 0, n6ij = 0;
    char *prev = NULL;
    for (const char *c = json_first(fleet); c; c = json_next(c), n++) {
        char *pk = json_str_at(c, "pubkey"), target[128];
        cr_expect(!prev || strcmp(prev, pk) < 0, "key order: %s after %s", pk, prev);
        cr_expect_null(json_get(c, "samples"), "the fleet leaves samples out");
        cr_expect_null(json_get(c, "recentHashEvidence"));
        cr_expect_null(json_get(c, "calibrationSummary"));
        /* The same figures as the node's own answer, and the node's name from its row. */
        if (n < 15 || strcmp(pk, N6IJ_PUBKEY) == 0) {
            n6ij += strcmp(pk, N6IJ_PUBKEY) == 0;
            snprintf(target, sizeof target, "/api/nodes/%s/clock-skew", pk);
            const char *one = get(target, 200);
            char *severity = json_str_at(c, "severity");
            cr_expect(json_double_at(one, "medianSkewSec") == json_double_at(c, "medianSkewSec") &&
                          json_int_at(one, "sampleCount") == json_int_at(c, "sampleCount") &&
                          json_str_at_eq(one, "severity", severity),
                      "%s differs from its own answer", pk);
            free(severity);
            char *name = db_texts("SELECT name FROM nodes WHERE public_key = %Q", pk);
            if (name[0])
                cr_expect(json_str_at_eq(c, "nodeName", name), "%s: nodeName, want %s", pk, name);
            else
                cr_expect_null(json_get(c, "nodeName"));
            free(name);
        }
        free(prev);
        prev = pk;
    }
    free(prev);
    free(fleet);
    cr_expect_gt(n, 0);
    cr_expect_eq(n6ij, 1, "N6IJ is in the fleet");
}

/* ---- neighbors ---------------------------------------------------------------------------- */

/* The node of the fixture with the most rows in neighbor_edges. */
static char *busiest_neighbor_node(void)
{
    return db_texts("SELECT k FROM (SELECT node_a AS k FROM neighbor_edges UNION ALL"
                    " SELECT node_b FROM neighbor_edges) WHERE k <> '' GROUP BY k"
                    " ORDER BY count(*) DESC, k LIMIT 1");
}

FIXTURE_TEST(neighbors_are_the_nodes_rows_of_neighbor_edges_by_score)
{
    start();
    char *pk = busiest_neighbor_node();
    cr_assert(strlen(pk) == 64, "a node with edges: %s", pk);
    char target[256];
    snprintf(target, sizeof target, "/api/nodes/%s/neighbors", pk);
    const char *b = get(target, 200);
    char keys[256];
    json_keys(b, NULL, keys, sizeof keys);
    cr_expect_str_eq(keys, "node,neighbors,total_observations", "the envelope");
    cr_expect(json_str_at_eq(b, "node", pk));
    const char *list = json_get(b, "neighbors");
    cr_expect_eq(json_length(list),
                 db_int("SELECT count(*) FROM neighbor_edges WHERE (node_a = %Q OR node_b = %Q)"
                        " AND count IS NOT NULL",
                        pk, pk));
    cr_expect_eq(
        json_int_at(b, "total_observations"),
        db_int("SELECT sum(count) FROM neighbor_edges WHERE node_a = %Q OR node_b = %Q", pk, pk));
    double last_score = 2;
    long seen = 0;
    for (const char *e = json_first(list); e; e = json_next(e), seen++) {
        char *other = json_str_at(e, "pubkey");
        const char *o = other ? other : "";
        cr_expect_eq(json_int_at(e, "count"),
                     db_int("SELECT count FROM neighbor_edges WHERE (node_a = %Q AND node_b = %Q)"
                            " OR (node_a = %Q AND node_b = %Q)",
                            pk, o, o, pk),
                     "%s: count", o);
        char *last = db_texts("SELECT strftime('%%Y-%%m-%%dT%%H:%%M:%%SZ', last_seen) FROM"
                              " neighbor_edges WHERE (node_a = %Q AND node_b = %Q)"
                              " OR (node_a = %Q AND node_b = %Q)",
                              pk, o, o, pk);
        cr_expect(json_str_at_eq(e, "last_seen", last) && json_str_at_eq(e, "first_seen", last),
                  "%s: seen %s: %.300s", o, last, e);
        /* score = min(1, count/100) × 2^(−hours since last_seen / 168) */
        double hours = (double)db_int("SELECT strftime('%%s','now') - strftime('%%s', last_seen)"
                                      " FROM neighbor_edges WHERE (node_a = %Q AND node_b = %Q)"
                                      " OR (node_a = %Q AND node_b = %Q)",
                                      pk, o, o, pk) /
                       3600.0;
        double cf = (double)json_int_at(e, "count") / 100.0;
        double want = (cf > 1 ? 1 : cf) * pow(2.0, -(hours < 0 ? 0 : hours) / 168.0);
        double score = json_double_at(e, "score");
        cr_expect(fabs(score - want) < 1e-4, "%s: score %g, want %g", o, score, want);
        cr_expect(score <= last_score, "by score, highest first");
        last_score = score;
        if (other) {
            char *name = db_texts("SELECT coalesce(name, '') FROM nodes WHERE public_key = %Q", o);
            if (name[0])
                cr_expect(json_str_at_eq(e, "name", name), "%s: name %s", o, name);
            free(name);
        } else {
            cr_expect(json_is_at(e, "name", "null") && json_is_at(e, "role", "null"));
        }
        cr_expect_eq(json_int_at(e, "counts_by_mode.0"), json_int_at(e, "count"));
        cr_expect(json_is_at(e, "avg_snr", "null") && json_is_at(e, "ambiguous", "false") &&
                      json_str_at_eq(e, "prefix", "") && json_length(json_get(e, "observers")) == 0,
                  "%.300s", e);
        free(last);
        free(other);
    }
    cr_expect(seen > 1, "the busiest node has several neighbours");

    /* min_count leaves out the edges seen fewer times; the key's case does not matter. */
    snprintf(target, sizeof target, "/api/nodes/%s/neighbors?min_count=10", pk);
    b = get(target, 200);
    cr_expect_eq(json_length(json_get(b, "neighbors")),
                 db_int("SELECT count(*) FROM neighbor_edges WHERE (node_a = %Q OR node_b = %Q)"
                        " AND count >= 10",
                        pk, pk));
    char upper[65];
    for (int i = 0; i < 64; i++)
        upper[i] = (char)toupper((unsigned char)pk[i]);
    upper[64] = '\0';
    snprintf(target, sizeof target, "/api/nodes/%s/neighbors?min_score=2", upper);
    b = get(target, 200);
    cr_expect(json_str_at_eq(b, "node", pk) && json_length(json_get(b, "neighbors")) == 0 &&
                  json_int_at(b, "total_observations") == 0,
              "no score reaches 2: %.300s", b);
    free(pk);
}

FIXTURE_TEST(neighbors_of_an_unknown_key_are_none_and_bad_input_is_refused)
{
    start();
    static const char unknown[] =
        "0000000000000000000000000000000000000000000000000000000000000000";
    cr_assert_eq(db_int("SELECT count(*) FROM neighbor_edges WHERE node_a = %Q OR node_b = %Q",
                        unknown, unknown),
                 0);
    cr_expect_str_eq(
        get("/api/nodes/0000000000000000000000000000000000000000000000000000000000000000"
            "/neighbors",
            200),
        "{\"node\":\"0000000000000000000000000000000000000000000000000000000000000000"
        "\",\"neighbors\":[],\"total_observations\":0}\n");
    cr_expect(json_str_at_eq(get("/api/nodes/zz/neighbors", 400), "error",
                             "invalid pubkey: expected 64 hex chars"));
    cr_expect(json_str_at_eq(get("/api/nodes/" N6IJ_PUBKEY "/neighbors?min_count=x", 400), "error",
                             "min_count: expected an integer"));
    cr_expect(json_str_at_eq(get("/api/nodes/" N6IJ_PUBKEY "/neighbors?min_score=1x", 400), "error",
                             "min_score: expected a number"));
    /* CoreScope keeps 1 for a min_count below 1. */
    const char *b = get("/api/nodes/" N6IJ_PUBKEY "/neighbors?min_count=-5", 200);
    cr_expect_eq(json_length(json_get(b, "neighbors")),
                 db_int("SELECT count(*) FROM neighbor_edges WHERE node_a = %Q OR node_b = %Q",
                        N6IJ_PUBKEY, N6IJ_PUBKEY));
}

/* ---- paths -------------------------------------------------------------------------------- */

/* Checks GET /api/nodes/{pk}/paths against the rows; returns totalTransmissions. */
static long long check_paths(const char *pk, long long *total_paths)
{
    char target[160];
    snprintf(target, sizeof target, "/api/nodes/%s/paths", pk);
    const char *b = get(target, 200);
    char keys[256];
    json_keys(b, NULL, keys, sizeof keys);
    cr_expect_str_eq(keys, "node,paths,totalPaths,totalTransmissions", "the envelope");
    char *name = db_texts("SELECT name FROM nodes WHERE public_key = %Q", pk);
    cr_expect(json_str_at_eq(b, "node.public_key", pk) && json_str_at_eq(b, "node.name", name),
              "%.300s", b);
    free(name);
    const char *paths = json_get(b, "paths");
    long long sum = 0;
    char last[64] = "9999";
    for (const char *p = json_first(paths); p; p = json_next(p)) {
        sum += json_int_at(p, "count");
        char *seen = json_str_at(p, "lastSeen");
        char *hash = json_str_at(p, "sampleHash");
        cr_assert(seen && hash, "%.300s", p);
        cr_expect(strcmp(seen, last) <= 0, "newest first: %s after %s", seen, last);
        snprintf(last, sizeof last, "%s", seen);
        /* The sample went through the node: a hop of its paths is a prefix of the key, or
         * its resolved path names it; and it is the group's newest. */
        cr_expect_eq(db_int("SELECT count(*) FROM transmissions t JOIN observations o"
                            " ON o.transmission_id = t.id WHERE t.hash = %Q AND t.first_seen = %Q"
                            " AND (lower(o.path_json) LIKE '%%\"' || substr(%Q, 1, 2) || '\"%%'"
                            " OR lower(o.path_json) LIKE '%%\"' || substr(%Q, 1, 4) || '\"%%'"
                            " OR lower(o.path_json) LIKE '%%\"' || substr(%Q, 1, 6) || '\"%%'"
                            " OR o.resolved_path LIKE '%%' || %Q || '%%')",
                            hash, seen, pk, pk, pk, pk) > 0,
                     1, "sample %s (%s) goes through %s", hash, seen, pk);
        for (const char *h = json_first(json_get(p, "hops")); h; h = json_next(h)) {
            char *key = json_str_at(h, "pubkey");
            if (key && db_int("SELECT count(*) FROM nodes WHERE public_key = %Q", key) > 0) {
                char *nm =
                    db_texts("SELECT coalesce(name, '') FROM nodes WHERE public_key = %Q", key);
                cr_expect(json_str_at_eq(h, "name", nm), "hop %s: %s", key, nm);
                free(nm);
            }
            free(key);
        }
        free(seen);
        free(hash);
    }
    *total_paths = json_int_at(b, "totalPaths");
    long long total = json_int_at(b, "totalTransmissions");
    if (*total_paths <= 50)
        cr_expect_eq(sum, total, "the groups hold every transmission");
    cr_expect_eq(json_length(paths), *total_paths < 50 ? *total_paths : 50);
    return total;
}

FIXTURE_TEST(paths_through_a_node_are_grouped_newest_first)
{
    start();
    long long paths, busiest_paths;
    long long n6ij = check_paths(N6IJ_PUBKEY, &paths);
    long long busiest = check_paths(BUSIEST_PUBKEY, &busiest_paths);
    if (strstr(fixture_source, "migrated")) {
        /* CoreScope's server on the same freshened copy answers these. */
        cr_expect(n6ij == 23 && paths == 23, "N6IJ: %lld transmissions, %lld paths", n6ij, paths);
        cr_expect(busiest == 207 && busiest_paths == 206, "busiest: %lld, %lld", busiest,
                  busiest_paths);
    }
    cr_expect_gt(n6ij, 0);
}

FIXTURE_TEST(paths_of_an_unknown_or_malformed_key_are_refused)
{
    start();
    cr_expect(json_str_at_eq(get("/api/nodes/0000000000000000000000000000000000000000000000000000"
                                 "000000000000/paths",
                                 404),
                             "error", "Not found"));
    cr_expect(json_str_at_eq(get("/api/nodes/ec34/paths", 400), "error",
                             "invalid pubkey: expected 64 hex chars"));
}

/* ---- cold reports: a warm answer is light and the cold one ------------------------------- */

FIXTURE_TEST(cold_reports_answer_warm_what_they_built_cold_without_reading_a_row)
{
    start();
    static const char *const targets[] = {
        "/api/nodes/clock-skew",
        "/api/nodes/" N6IJ_PUBKEY "/clock-skew",
        "/api/nodes/" BUSIEST_PUBKEY "/paths",
        "/api/nodes/" BUSIEST_PUBKEY "/neighbors",
        "/api/scope-stats?window=7d", /* with scope_name (the migrated fixture) */
    };
    for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++) {
        if (strstr(targets[i], "scope") && !fx.t.db.schema.tx_scope_name)
            continue;
        int64_t steps = mg_db_vm_steps(&fx.t.db);
        char *cold = strdup(get(targets[i], 200));
        cr_expect_eq(fx.t.light, false, "%s: cold is heavy", targets[i]);
        cr_expect_gt(mg_db_vm_steps(&fx.t.db) - steps, 0, "%s: cold reads", targets[i]);
        steps = mg_db_vm_steps(&fx.t.db);
        int64_t pages = mg_db_pages_fetched(&fx.t.db);
        const char *warm = get(targets[i], 200);
        /* a node's clock skew stays heavy (router.c: it declares no warm case) */
        if (!strstr(targets[i], N6IJ_PUBKEY))
            cr_expect(fx.t.light, "%s: warm is light", targets[i]);
        cr_expect_eq(mg_db_vm_steps(&fx.t.db) - steps, 0, "%s: warm reads no row", targets[i]);
        cr_expect_eq(mg_db_pages_fetched(&fx.t.db) - pages, 0, "%s", targets[i]);
        cr_expect_str_eq(warm, cold, "%s: warm is the cold answer", targets[i]);
        free(cold);
    }
}

/* ---- bulk health -------------------------------------------------------------------------- */

FIXTURE_TEST(bulk_health_is_each_recent_nodes_health_in_one_answer)
{
    start();
    char *b = strdup(get("/api/nodes/bulk-health", 200));
    char got[16384] = "";
    size_t used = 0;
    long long total = 0;
    int compared = 0; /* the first three: more heavy requests are refused at once (429) */
    for (const char *e = json_first(b); e; e = json_next(e)) {
        char keys[256];
        json_keys(e, NULL, keys, sizeof keys);
        cr_expect_str_eq(keys, "lat,lon,name,observers,public_key,role,stats", "entry keys");
        char *pk = json_str_at(e, "public_key");
        used += (size_t)snprintf(got + used, sizeof got - used, "%s%s", used ? "," : "", pk);
        total += json_int_at(json_get(e, "stats"), "totalTransmissions");
        if (compared++ >= 3) {
            free(pk);
            continue;
        }
        /* The same transmissions, counts and observers as the node's own health. */
        char target[160];
        snprintf(target, sizeof target, "/api/nodes/%s/health", pk);
        char *h = strdup(get(target, 200));
        const char *s = json_get(e, "stats"), *hs = json_get(h, "stats");
        static const char *const same[] = {"totalTransmissions", "totalPackets",
                                           "totalObservations", "packetsToday"};
        for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
            cr_expect_eq(json_int_at(s, same[i]), json_int_at(hs, same[i]), "%s: %s", pk, same[i]);
        cr_expect_eq(json_length(json_get(e, "observers")), json_length(json_get(h, "observers")),
                     "%s: observers", pk);
        free(h);
        free(pk);
    }
    char *want = db_texts("SELECT public_key FROM nodes ORDER BY last_seen DESC LIMIT 50");
    cr_expect_str_eq(got, want, "the 50 most recently seen nodes");
    free(want);
    if (strstr(fixture_source, "migrated")) /* CoreScope's server on the same copy */
        cr_expect_eq(total, 759, "their transmissions");
    free(b);
}

FIXTURE_TEST(bulk_health_limit_is_clamped_as_corescope_and_filters_are_refused)
{
    start();
    long long nodes = db_int("SELECT count(*) FROM nodes");
    cr_expect_eq(json_length(get("/api/nodes/bulk-health?limit=abc", 200)),
                 nodes < 50 ? nodes : 50);
    cr_expect_eq(json_length(get("/api/nodes/bulk-health?limit=-3", 200)), nodes < 50 ? nodes : 50);
    cr_expect_eq(json_length(get("/api/nodes/bulk-health?limit=3", 200)), nodes < 3 ? nodes : 3);
    cr_expect_eq(json_length(get("/api/nodes/bulk-health?limit=100000", 200)),
                 nodes < 200 ? nodes : 200);
    cr_expect(json_str_at_eq(get("/api/nodes/bulk-health?region=SJC", 501), "error",
                             "bulk-health with region or area is not implemented: meshgate "
                             "answers it for all nodes only"));
    get("/api/nodes/bulk-health?area=x", 501);
}

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
#include "ep_nodes.h"
#include "corescope_config.h"
#include "ep_node_detail.h"
#include "fixture.h"
#include "harness.h"
#include "inproc.h"
#include "jsoncheck.h"
#include "neighbor_graph.h"
#include "node_hash_sizes.h"
#include "node_relay.h"

#include <criterion/criterion.h>
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
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
    size_t cap = 16384, used = 0;
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
    /* ...but its first bytes are a hop of 2-byte paths: "suspected", as CoreScope says
     * (tests/corescope-usefulness.json). */
    cr_expect(json_str_at_eq(json_get(b, "node"), "multi_byte_status", "suspected") &&
              json_str_at_eq(json_get(b, "node"), "multi_byte_evidence", "path"));
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

/* ---- relay activity (node_relay.h) --------------------------------------------------------- */

/* The copy opened read-write by the suite itself (meshgate's connection reads only, and its
 * authorizer refuses json_each). */
static sqlite3 *raw_copy(void)
{
    sqlite3 *conn = NULL;
    cr_assert_eq(mg_test_sqlite_open_v2(fx.db, &conn, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    return conn;
}

static long long raw_int(sqlite3 *conn, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *sql = sqlite3_vmprintf(fmt, ap);
    va_end(ap);
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(conn, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(conn));
    long long v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : LLONG_MIN;
    sqlite3_finalize(st);
    sqlite3_free(sql);
    return v;
}

/* The non-ADVERT transmissions whose longest path (its newest observation with the most hops)
 * has a hop equal to key or to its first byte, any case: CoreScope's relays of a node. */
#define RELAYS_SQL                                                                                 \
    "WITH best AS (SELECT tx, path_json FROM (SELECT transmission_id AS tx, path_json,"            \
    " row_number() OVER (PARTITION BY transmission_id ORDER BY json_array_length(path_json)"       \
    " DESC, timestamp DESC, id DESC) AS r FROM observations WHERE json_valid(path_json))"          \
    " WHERE r = 1),"                                                                               \
    " through AS (SELECT DISTINCT best.tx FROM best, json_each(best.path_json) h"                  \
    " WHERE lower(h.value) IN (lower(%Q), lower(substr(%Q, 1, 2))))"                               \
    " SELECT %s FROM through JOIN transmissions t ON t.id = through.tx"                            \
    " WHERE t.payload_type IS NOT 4"

/* How many of key's relays are younger than hours at Unix time now_s (route_type 1 only when
 * flood). */
static long long relays_within(sqlite3 *conn, const char *key, int hours, int64_t now_s, bool flood)
{
    char what[256];
    snprintf(what, sizeof what,
             "count(*) FILTER (WHERE julianday(t.first_seen) > julianday(%lld, 'unixepoch',"
             " '-%d hours')%s)",
             (long long)now_s, hours, flood ? " AND t.route_type = 1" : "");
    return raw_int(conn, RELAYS_SQL, key, key, what);
}

/* A count that must lie between its values at the two ends of the request (a relay may age
 * out of the window meanwhile). */
static void expect_relays(const char *node, const char *field, sqlite3 *conn, const char *key,
                          int hours, bool flood, int64_t before_s, int64_t after_s)
{
    long long got = json_int_at(node, field);
    long long most = relays_within(conn, key, hours, before_s, flood);
    long long least = relays_within(conn, key, hours, after_s + 1, flood);
    cr_expect(got >= least && got <= most, "%s of %.8s: %lld, want %lld..%lld", field, key, got,
              least, most);
}

static void expect_detail_relays(sqlite3 *conn, const char *key)
{
    char target[128];
    snprintf(target, sizeof target, "/api/nodes/%s", key);
    int64_t before_s = (int64_t)time(NULL);
    const char *n = json_get(get(target, 200), "node");
    int64_t after_s = (int64_t)time(NULL);
    cr_assert_not_null(n);
    cr_expect(json_keys_sorted(n), "keys sorted: %.900s", n);
    expect_relays(n, "relay_count_24h", conn, key, 24, false, before_s, after_s);
    expect_relays(n, "relay_count_1h", conn, key, 1, false, before_s, after_s);
    expect_relays(n, "unscoped_relay_count_24h", conn, key, 24, true, before_s, after_s);
    sqlite3_stmt *st = NULL;
    char *sql = sqlite3_mprintf(RELAYS_SQL, key, key, "max(t.first_seen)");
    cr_assert_eq(sqlite3_prepare_v2(conn, sql, -1, &st, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    const char *last = (const char *)sqlite3_column_text(st, 0);
    cr_assert_not_null(last, "%.8s relayed", key);
    cr_expect(json_str_at_eq(n, "last_relayed", last), "last_relayed, want %s: %.900s", last, n);
    sqlite3_finalize(st);
    sqlite3_free(sql);
    /* The freshened copy spans about two hours: its last relay is within the 24 h window. */
    cr_expect(json_is_at(n, "relay_active", "true"));
    cr_expect(json_is_at(n, "relay_window_hours", "24"));
    cr_expect(json_is_at(n, "traffic_share_score", "0"), "no hop is a whole key");
    cr_expect_null(json_get(n, "transported_scopes"), "the fixture has no scope names");
}

FIXTURE_TEST(repeater_detail_counts_the_relays_through_its_first_byte)
{
    start();
    sqlite3 *conn = raw_copy();
    expect_detail_relays(conn, N6IJ_PUBKEY);
    expect_detail_relays(conn, BUSIEST_PUBKEY);
    /* CoreScope's server on the same freshened copy: 17 and 146 relays in 24 hours, all
     * unscoped floods (its 2- and 3-byte hops "EC34", "1000" are not counted). */
    const char *n = json_get(get("/api/nodes/" BUSIEST_PUBKEY, 200), "node");
    cr_expect_eq(json_int_at(n, "relay_count_24h"), 146);
    cr_expect_eq(json_int_at(n, "unscoped_relay_count_24h"), 146);
    n = json_get(get("/api/nodes/" N6IJ_PUBKEY, 200), "node");
    cr_expect_eq(json_int_at(n, "relay_count_24h"), 17);
    /* A companion gets none of the fields. */
    char *companion = db_texts("SELECT public_key FROM nodes WHERE role = 'companion' LIMIT 1");
    char target[128];
    snprintf(target, sizeof target, "/api/nodes/%s", companion);
    n = json_get(get(target, 200), "node");
    cr_expect_null(json_get(n, "relay_count_24h"));
    cr_expect_null(json_get(n, "relay_active"));
    cr_expect_null(json_get(n, "traffic_share_score"));
    free(companion);
    sqlite3_close(conn);
}

FIXTURE_TEST(relay_active_follows_the_configured_window)
{
    start();
    /* healthThresholds.relayActiveHours of CoreScope's config.json: 0.001 h (3.6 s), so the
     * busiest relay's last relay (minutes ago in the freshened copy) is not active. */
    char dir[128], path[256], err[512] = "";
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("{\"healthThresholds\": {\"relayActiveHours\": 0.001}}", f);
    fclose(f);
    mg_corescope_free(&mg_corescope);
    cr_assert_eq(mg_corescope_load(&mg_corescope, path, err, sizeof err), 0, "%s", err);
    const char *n = json_get(get("/api/nodes/" BUSIEST_PUBKEY, 200), "node");
    cr_expect(json_is_at(n, "relay_window_hours", "0.001") &&
                  json_is_at(n, "relay_active", "false") && json_get(n, "last_relayed"),
              "%.900s", n);
    char *last = json_str_at(n, "last_relayed");
    cr_expect_gt(db_int("SELECT strftime('%%s','now') - strftime('%%s', %Q)", last ? last : ""), 4,
                 "its last relay (%s) is older than the window", last);
    free(last);
    mg_corescope_free(&mg_corescope);
    mg_test_rmdir(dir);
}

/* The node of the list with this key. */
static const char *listed(const char *body, const char *key)
{
    for (const char *n = json_first(json_get(body, "nodes")); n; n = json_next(n))
        if (json_str_at_eq(n, "public_key", key))
            return n;
    cr_assert_fail("%.8s not in the list", key);
    return NULL;
}

FIXTURE_TEST(list_gives_relays_only_to_a_key_that_is_a_hop_as_corescope)
{
    start();
    /* CoreScope's list reads a map of hop keys: no hop is a whole key, so every repeater and
     * room shows no relay (its detail does), and companions have no fields. */
    const char *b = get("/api/nodes?limit=2000", 200);
    int repeaters = 0;
    for (const char *n = json_first(json_get(b, "nodes")); n; n = json_next(n)) {
        char *role = json_str_at(n, "role");
        bool relays = role && (!strcmp(role, "repeater") || !strcmp(role, "room"));
        free(role);
        repeaters += relays;
        cr_expect_eq(json_get(n, "relay_active") != NULL, relays, "%.300s", n);
        if (!relays)
            continue;
        cr_expect(json_is_at(n, "relay_active", "false") &&
                      json_int_at(n, "relay_count_24h") == 0 &&
                      json_int_at(n, "relay_count_1h") == 0 &&
                      json_int_at(n, "unscoped_relay_count_24h") == 0 &&
                      json_is_at(n, "traffic_share_score", "0") && !json_get(n, "last_relayed") &&
                      !json_get(n, "relay_window_hours"),
                  "%.900s", n);
    }
    cr_expect_eq(repeaters, db_int("SELECT count(*) FROM nodes WHERE role IN ('repeater','room')"));

    /* Now one transmission's longest path names the busiest node by its whole key (upper
     * case), and, in a migrated copy, three transmissions carry scope names. */
    sqlite3 *conn = raw_copy();
    long long tx = raw_int(conn, "SELECT id FROM transmissions WHERE payload_type = 5 AND id NOT IN"
                                 " (SELECT transmission_id FROM observations WHERE path_json LIKE"
                                 " '%%\"10%%') ORDER BY id LIMIT 1");
    char *edit =
        sqlite3_mprintf("UPDATE observations SET path_json = '[\"AB\",\"%s\"]'"
                        " WHERE transmission_id = %lld",
                        "1000009E310D729534B70FAA33A1ABE5CD5E45D594F72F786FEBCCBB770B7E74", tx);
    cr_assert_eq(sqlite3_exec(conn, edit, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(conn));
    sqlite3_free(edit);
    bool scopes = fx.t.db.schema.tx_scope_name;
    if (scopes) {
        edit = sqlite3_mprintf("UPDATE transmissions SET scope_name = '#west' WHERE id = %lld;"
                               "UPDATE transmissions SET scope_name = '#east' WHERE id IN"
                               " (SELECT transmission_id FROM observations WHERE path_json LIKE"
                               " '%%\"10\"%%' ORDER BY id LIMIT 2)",
                               tx);
        cr_assert_eq(sqlite3_exec(conn, edit, NULL, NULL, NULL), SQLITE_OK, "%s",
                     sqlite3_errmsg(conn));
        sqlite3_free(edit);
    }
    mg_node_relay_forget(&fx.t.env);
    int64_t before_s = (int64_t)time(NULL);
    b = get("/api/nodes?limit=2000", 200);
    int64_t after_s = (int64_t)time(NULL);
    const char *n = listed(b, BUSIEST_PUBKEY);
    cr_expect(json_keys_sorted(n));
    /* Its relays are now those under its key and its first byte, each once. */
    expect_relays(n, "relay_count_24h", conn, BUSIEST_PUBKEY, 24, false, before_s, after_s);
    expect_relays(n, "relay_count_1h", conn, BUSIEST_PUBKEY, 1, false, before_s, after_s);
    expect_relays(n, "unscoped_relay_count_24h", conn, BUSIEST_PUBKEY, 24, true, before_s, after_s);
    cr_expect_eq(json_int_at(n, "relay_count_24h"), 147, "146 through 0x10, and this one");
    cr_expect(json_is_at(n, "relay_active", "true"));
    cr_expect_not_null(json_get(n, "last_relayed"));
    /* Its traffic share: one transmission under its whole key of every non-ADVERT one. */
    long long non_adverts = raw_int(conn, "SELECT count(*) FROM transmissions WHERE"
                                          " payload_type IS NOT NULL AND payload_type <> 4");
    cr_expect(fabs(json_double_at(n, "traffic_share_score") - 1.0 / (double)non_adverts) < 1e-15,
              "traffic share %.900s, want 1/%lld", n, non_adverts);
    if (scopes)
        cr_expect(json_is_at(n, "transported_scopes", "[\"#east\",\"#west\"]"), "%.900s", n);
    else
        cr_expect_null(json_get(n, "transported_scopes"));
    /* Another repeater still has none in the list. */
    cr_expect(json_is_at(listed(b, N6IJ_PUBKEY), "relay_count_24h", "0"));
    sqlite3_close(conn);
}

/* The relay table each worker reads is decoded from the group's copy in the result cache:
 * a process that drops its own and takes the stored one answers the same, byte for byte, and
 * the pass over the observations ran once. */
FIXTURE_TEST(relay_table_taken_from_the_groups_copy_answers_the_same)
{
    start();
    const struct mg_result_cache *c = fx.t.seg.cache.cache;
    char *list = strdup(get("/api/nodes?limit=2000", 200));
    char *detail = strdup(get("/api/nodes/" BUSIEST_PUBKEY, 200));
    cr_expect_eq(atomic_load(&c->relay_builds), 1, "the first request made the pass");
    cr_expect_eq(atomic_load(&c->relay_copies), 0);
    uint64_t generation = mg_node_relay_generation();
    mg_node_relay_forget(NULL); /* this process's table only: the group keeps its copy */
    cr_expect_neq(mg_node_relay_generation(), generation);
    cr_expect(!mg_node_relay_exist(fx.t.db.conn));
    cr_expect_str_eq(get("/api/nodes?limit=2000", 200), list);
    cr_expect_str_eq(get("/api/nodes/" BUSIEST_PUBKEY, 200), detail);
    cr_expect_eq(atomic_load(&c->relay_builds), 1, "no second pass");
    cr_expect_eq(atomic_load(&c->relay_copies), 1, "the table came from the cache");
    /* The copy holds what the pass found: the busiest repeater's 146 relays (see above). */
    cr_expect_eq(json_int_at(json_get(detail, "node"), "relay_count_24h"), 146);
    free(list);
    free(detail);
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
    /* Until the process has its relay table (node_relay.h), a detail would build it. */
    get("/api/nodes/" BUSIEST_PUBKEY, 200);
    cr_expect(!fx.t.light, "no relay table: heavy");
    cr_expect(mg_node_relay_exist(fx.t.db.conn), "that request built it (a worker does at start)");
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
    mg_node_hash_sizes_forget(NULL);
    get("/api/nodes", 200);
    cr_expect(!fx.t.light, "the request that builds the table is heavy");
    /* MG_NODES_LIGHT_LIMIT's page (a larger one is light only as a kept answer). */
    cr_assert_eq(MG_NODES_LIGHT_LIMIT, 100);
    get("/api/nodes?limit=100", 200);
    cr_expect(fx.t.light, "a table: light");
    int64_t now_ns = mg_monotonic_ns();
    cr_expect(mg_node_hash_sizes_fresh(fx.t.db.conn, now_ns));
    int64_t later = now_ns + MG_NODE_HASH_SIZES_INTERVAL_NS;
    cr_expect(!mg_node_hash_sizes_fresh(fx.t.db.conn, later), "stale after its interval");
    cr_expect(mg_node_hash_sizes_exist(fx.t.db.conn), "a stale table still serves");
    /* Without a helper thread (in-process) a stale table is rebuilt by the request. */
    cr_expect_eq(mg_node_hash_sizes_keep(&fx.t.env, later, (int64_t)time(NULL), NULL), SQLITE_OK);
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

/* The neighbour entry of list whose pubkey starts with prefix (or whose prefix is it, for an
 * ambiguous one). */
static const char *neighbor_starting(const char *list, const char *prefix, bool ambiguous)
{
    for (const char *e = json_first(list); e; e = json_next(e)) {
        char *pk = json_str_at(e, ambiguous ? "prefix" : "pubkey");
        bool hit = pk && (ambiguous ? !strcmp(pk, prefix) : !strncmp(pk, prefix, strlen(prefix)));
        free(pk);
        if (hit && json_is_at(e, "ambiguous", ambiguous ? "true" : "false"))
            return e;
    }
    return NULL;
}

FIXTURE_TEST(neighbors_are_corescopes_graph_built_from_the_observations)
{
    start();
    const char *b = get("/api/nodes/" N6IJ_PUBKEY "/neighbors", 200);
    char keys[256];
    json_keys(b, NULL, keys, sizeof keys);
    cr_expect_str_eq(keys, "node,neighbors,total_observations", "the envelope");
    const char *list = json_get(b, "neighbors");
    /* CoreScope's server on the same freshened migrated copy: 11 neighbours, 27 observations
     * (neighbor_edges has 3 rows for N6IJ: the graph is not that table). */
    cr_expect_eq(json_length(list), 11);
    cr_expect_eq(json_int_at(b, "total_observations"), 27);
    double last_score = 2;
    for (const char *e = json_first(list); e; e = json_next(e)) {
        double score = json_double_at(e, "score");
        cr_expect(score <= last_score, "by score, highest first");
        last_score = score;
    }
    /* N6IJ as observer, hearing packets whose last hop is A3: one relay has that prefix, so
     * each observation (one per observer and path) is an edge N6IJ - that relay. */
    long long via_a3 = db_int("SELECT count(*) FROM (SELECT DISTINCT o.transmission_id,"
                              " o.path_json FROM observations o JOIN observers obs ON obs.rowid ="
                              " o.observer_idx WHERE lower(obs.id) = %Q AND"
                              " lower(o.path_json ->> '$[#-1]') = 'a3')",
                              N6IJ_PUBKEY);
    cr_expect_eq(db_int("SELECT count(*) FROM nodes WHERE lower(public_key) LIKE 'a3%%' AND"
                        " (role LIKE '%%repeater%%' OR role = 'room')"),
                 1);
    const char *a3 = neighbor_starting(list, "a3", false);
    cr_assert_not_null(a3, "an edge to the A3 relay: %.900s", list);
    cr_expect_eq(json_int_at(a3, "count"), via_a3);
    cr_expect_eq(via_a3, 8, "CoreScope's server: 8");
    cr_expect_eq(json_int_at(a3, "counts_by_mode.1"), via_a3, "1-byte hops");
    cr_expect(json_str_at_eq(a3, "prefix", "a3") &&
                  json_is_at(a3, "observers", "[\"" N6IJ_PUBKEY "\"]"),
              "%.600s", a3);
    char *first = db_texts("SELECT strftime('%%Y-%%m-%%dT%%H:%%M:%%SZ', min(o.timestamp),"
                           " 'unixepoch') || ',' || strftime('%%Y-%%m-%%dT%%H:%%M:%%SZ',"
                           " max(o.timestamp), 'unixepoch') FROM observations o JOIN observers"
                           " obs ON obs.rowid = o.observer_idx WHERE lower(obs.id) = %Q AND"
                           " lower(o.path_json ->> '$[#-1]') = 'a3'",
                           N6IJ_PUBKEY);
    char *comma = strchr(first, ',');
    cr_assert_not_null(comma);
    *comma = '\0';
    cr_expect(json_str_at_eq(a3, "first_seen", first) && json_str_at_eq(a3, "last_seen", comma + 1),
              "seen %s to %s: %.600s", first, comma + 1, a3);
    /* score = min(1, count/100) x 2^(-hours since last seen / 168) */
    double hours = (double)db_int("SELECT strftime('%%s','now') - max(o.timestamp) FROM"
                                  " observations o JOIN observers obs ON obs.rowid ="
                                  " o.observer_idx WHERE lower(obs.id) = %Q AND"
                                  " lower(o.path_json ->> '$[#-1]') = 'a3'",
                                  N6IJ_PUBKEY) /
                   3600.0;
    double want = (double)via_a3 / 100.0 * pow(2.0, -(hours < 0 ? 0 : hours) / 168.0);
    cr_expect(fabs(json_double_at(a3, "score") - want) < 1e-4, "score %g, want %g",
              json_double_at(a3, "score"), want);
    free(first);
    /* No relay's key starts with BE: an unresolved edge of that prefix, without candidates. */
    const char *be = neighbor_starting(list, "be", true);
    cr_assert_not_null(be, "the unresolved BE edge: %.900s", list);
    cr_expect(json_is_at(be, "pubkey", "null") && json_is_at(be, "name", "null") &&
                  json_is_at(be, "unresolved", "true") && !json_get(be, "candidates"),
              "%.600s", be);
    cr_expect_eq(db_int("SELECT count(*) FROM nodes WHERE lower(public_key) LIKE 'be%%' AND"
                        " (role LIKE '%%repeater%%' OR role = 'room')"),
                 0);
    /* include_ambiguous=false leaves it out; min_count=3 keeps the edges seen 3 times. */
    b = get("/api/nodes/" N6IJ_PUBKEY "/neighbors?include_ambiguous=false", 200);
    cr_expect_eq(json_length(json_get(b, "neighbors")), 10);
    cr_expect_null(neighbor_starting(json_get(b, "neighbors"), "be", true));
    b = get("/api/nodes/" N6IJ_PUBKEY "/neighbors?min_count=3", 200);
    for (const char *e = json_first(json_get(b, "neighbors")); e; e = json_next(e))
        cr_expect_geq(json_int_at(e, "count"), 3);
    cr_expect_eq(json_length(json_get(b, "neighbors")), 2, "CoreScope: A3 (8) and 5B98 (6)");
    /* resolve-hops with a context reads the worker's graph: light while it is fresh (built
     * above), heavy when there is none (the request builds it). */
    get("/api/resolve-hops?hops=1F&observer=" N6IJ_PUBKEY, 200);
    cr_expect(fx.t.light, "the graph is fresh");
    mg_neighbor_graph_forget(&fx.t.env);
    get("/api/resolve-hops?hops=1F&observer=" N6IJ_PUBKEY, 200);
    cr_expect(!fx.t.light, "no graph: heavy");
    get("/api/resolve-hops?hops=1F", 200);
    cr_expect(fx.t.light, "no context: light");
    b = get("/api/nodes/EC3433BB3ADF1ACAEE0CE117600B0CA473705486EC666137379A1E8CBB7E75F4"
            "/neighbors?min_score=2",
            200);
    cr_expect(json_str_at_eq(b, "node", N6IJ_PUBKEY) &&
                  json_length(json_get(b, "neighbors")) == 0 &&
                  json_int_at(b, "total_observations") == 0,
              "no score reaches 2: %.300s", b);
}

FIXTURE_TEST(neighbors_of_an_unknown_key_or_odd_parameters_read_as_corescope)
{
    start();
    static const char unknown[] =
        "0000000000000000000000000000000000000000000000000000000000000000";
    cr_assert_eq(db_int("SELECT count(*) FROM observers WHERE id = %Q", unknown), 0);
    cr_expect_str_eq(
        get("/api/nodes/0000000000000000000000000000000000000000000000000000000000000000"
            "/neighbors",
            200),
        "{\"node\":\"0000000000000000000000000000000000000000000000000000000000000000"
        "\",\"neighbors\":[],\"total_observations\":0}\n");
    /* Not a key: CoreScope's answer for a node without edges, naming it in lower case. */
    cr_expect_str_eq(get("/api/nodes/ZZ/neighbors", 200),
                     "{\"node\":\"zz\",\"neighbors\":[],\"total_observations\":0}\n");
    cr_expect_str_eq(get("/api/nodes/d3e18e32/neighbors", 200),
                     "{\"node\":\"d3e18e32\",\"neighbors\":[],\"total_observations\":0}\n");
    /* CoreScope keeps 1 for a min_count below 1 or malformed, 0 for a malformed min_score. */
    size_t all =
        json_length(json_get(get("/api/nodes/" N6IJ_PUBKEY "/neighbors", 200), "neighbors"));
    cr_expect_eq(all, 11);
    static const char *const same[] = {"?min_count=-5", "?min_count=x", "?min_count=",
                                       "?min_score=1x", "?min_score=",  "?include_ambiguous=no"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        char target[160];
        snprintf(target, sizeof target, "/api/nodes/" N6IJ_PUBKEY "/neighbors%s", same[i]);
        cr_expect_eq(json_length(json_get(get(target, 200), "neighbors")), all, "%s", same[i]);
    }
    /* reach's days: 7 when missing, empty or malformed, clamped to 1..30 (CoreScope's). */
    static const struct {
        const char *query;
        long long days;
    } days[] = {{"", 7},        {"?days=", 7},   {"?days=abc", 7}, {"?days=2.5", 7},
                {"?days=0", 1}, {"?days=-4", 1}, {"?days=99", 30}, {"?days=3", 3}};
    for (size_t i = 0; i < sizeof days / sizeof days[0]; i++) {
        char target[160];
        snprintf(target, sizeof target, "/api/nodes/" N6IJ_PUBKEY "/reach%s", days[i].query);
        cr_expect_eq(json_int_at(json_get(get(target, 200), "window"), "days"), days[i].days, "%s",
                     days[i].query);
    }
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

FIXTURE_TEST(bulk_health_limit_is_clamped_as_corescope)
{
    start();
    long long nodes = db_int("SELECT count(*) FROM nodes");
    cr_expect_eq(json_length(get("/api/nodes/bulk-health?limit=abc", 200)),
                 nodes < 50 ? nodes : 50);
    cr_expect_eq(json_length(get("/api/nodes/bulk-health?limit=-3", 200)), nodes < 50 ? nodes : 50);
    cr_expect_eq(json_length(get("/api/nodes/bulk-health?limit=3", 200)), nodes < 3 ? nodes : 3);
    cr_expect_eq(json_length(get("/api/nodes/bulk-health?limit=100000", 200)),
                 nodes < 200 ? nodes : 200);
}

/* The public keys of an answer's entries, joined by commas. */
static char *entry_keys(const char *body)
{
    char *out = calloc(1, 32768);
    keys_of(body, out, 32768);
    return out;
}

FIXTURE_TEST(bulk_health_by_area_is_the_nodes_inside_it_as_corescope)
{
    start();
    char dir[128], path[256], err[512] = "";
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("{\"areas\": {\"south\": {\"label\": \"South Bay\", \"polygon\": [[37.0,-122.2],"
          "[37.0,-121.6],[37.45,-121.6],[37.45,-122.2]]}, \"box\": {\"label\": \"Box\","
          " \"latMin\": 37.7, \"latMax\": 38.0, \"lonMin\": -122.5, \"lonMax\": -122.1}}}",
          f);
    fclose(f);
    mg_corescope_free(&mg_corescope);
    cr_assert_eq(mg_corescope_load(&mg_corescope, path, err, sizeof err), 0, "%s", err);
    /* Every node inside, however many (no limit), most recently seen first. */
    char *got = entry_keys(get("/api/nodes/bulk-health?area=box&limit=3", 200));
    char *want = db_texts("SELECT public_key FROM nodes WHERE lat BETWEEN 37.7 AND 38.0 AND lon"
                          " BETWEEN -122.5 AND -122.1 AND NOT (lat = 0 AND lon = 0)"
                          " ORDER BY last_seen DESC");
    cr_expect_str_eq(got, want, "area=box");
    free(got);
    free(want);
    got = entry_keys(get("/api/nodes/bulk-health?area=south", 200));
    /* ray casting (CoreScope's PointInPolygon): the lower and left edges are inside */
    want = db_texts("SELECT public_key FROM nodes WHERE lat >= 37.0 AND lat < 37.45 AND"
                    " lon >= -122.2 AND lon < -121.6 ORDER BY last_seen DESC");
    cr_expect_str_eq(got, want, "area=south");
    /* CoreScope's server with the same file on the same copy: 65 and 39 nodes. */
    cr_expect_eq(db_int("SELECT count(*) FROM nodes WHERE lat >= 37.0 AND lat < 37.45 AND"
                        " lon >= -122.2 AND lon < -121.6"),
                 65);
    free(got);
    free(want);
    /* An area the file does not have filters nothing: the 50 most recent. */
    got = entry_keys(get("/api/nodes/bulk-health?area=nowhere", 200));
    want = db_texts("SELECT public_key FROM nodes ORDER BY last_seen DESC LIMIT 50");
    cr_expect_str_eq(got, want, "an unknown area");
    free(got);
    free(want);
    mg_corescope_free(&mg_corescope);
    mg_test_rmdir(dir);
}

/* Whether the node's own health lists an observer of that IATA code. */
static bool heard_in(const char *pk, const char *iata)
{
    char target[160];
    snprintf(target, sizeof target, "/api/nodes/%s/health", pk);
    const char *h = get(target, 200);
    for (const char *o = json_first(json_get(h, "observers")); o; o = json_next(o)) {
        char *id = json_str_at(o, "observer_id");
        bool hit = id && db_int("SELECT count(*) FROM observers WHERE id = %Q AND"
                                " upper(trim(iata)) = %Q",
                                id, iata) > 0;
        free(id);
        if (hit)
            return true;
    }
    return false;
}

FIXTURE_TEST(bulk_health_by_region_is_the_nodes_heard_there_as_corescope)
{
    start();
    /* The nodes with a packet an MRY observer heard, most recent first, at most limit. */
    /* a copy: heard_in's requests reuse the response */
    char *b = strdup(get("/api/nodes/bulk-health?region=%20mry&limit=5", 200));
    cr_expect_eq(json_length(b), 5);
    char *listed_keys = entry_keys(b);
    for (const char *e = json_first(b); e; e = json_next(e)) {
        char *pk = json_str_at(e, "public_key");
        cr_expect(heard_in(pk, "MRY"), "%s was heard in MRY", pk);
        free(pk);
    }
    /* A node seen more recently than the last listed one and left out was not heard there. */
    char *recent = db_texts("SELECT public_key FROM nodes ORDER BY last_seen DESC LIMIT 8");
    for (char *save = NULL, *k = strtok_r(recent, ",", &save); k; k = strtok_r(NULL, ",", &save))
        if (!strstr(listed_keys, k) && db_int("SELECT last_seen >= (SELECT last_seen FROM nodes"
                                              " WHERE public_key = %Q) FROM nodes WHERE"
                                              " public_key = %Q",
                                              k, strrchr(listed_keys, ',') + 1))
            cr_expect(!heard_in(k, "MRY"), "%s was heard in MRY and is not listed", k);
    free(recent);
    free(listed_keys);
    free(b);
    /* All of SFO's: CoreScope's server listed 103 of these 104 (it misses f00d1d18, whose only
     * packet it files under a hash it recomputed). */
    cr_expect_eq(json_length(get("/api/nodes/bulk-health?region=SFO&limit=200", 200)), 104);
    /* Codes no observer has, or none at all: no filter, the 50 most recent. */
    char *want = db_texts("SELECT public_key FROM nodes ORDER BY last_seen DESC LIMIT 50");
    char *got = entry_keys(get("/api/nodes/bulk-health?region=XXX", 200));
    cr_expect_str_eq(got, want, "region=XXX");
    free(got);
    got = entry_keys(get("/api/nodes/bulk-health?region=ALL,%20", 200));
    cr_expect_str_eq(got, want, "region=ALL");
    free(got);
    free(want);
}

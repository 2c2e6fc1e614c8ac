/* SPDX-License-Identifier: ISC */
/*
 * A first start without state files (issue 28): nothing the pages read first waits for a
 * group table's pass. The real binary, two workers, the hash sizes', relay probe's and relay
 * table's passes made 20 s longer by a test hook: the node list and a repeater's detail are
 * answered in their first turn (never parked) while those passes run, with the fields as
 * CoreScope has them before its own (hash_size null; no relay: counts 0), the detail's hash
 * sizes read directly; once the passes land, with the tables' values, worked out here from
 * the rows by queries of their own.
 */
#include "harness.h"
#include "hash_size.h"
#include "jsoncheck.h"
#include "result_cache.h"
#include "scoreboard.h"
#include "segment.h"

#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TestSuite(first_start, .timeout = 240);

/* R: a repeater whose whole key is a hop of one path (so the list needs the relay table). */
#define R "cc00000100000000000000000000000000000000000000000000000000000000"
#define Q "dd00000200000000000000000000000000000000000000000000000000000000"

/* Times relative to now, as SQL. */
#define NOW_LESS_1_MIN "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 minutes')"
#define NOW_LESS_2_MIN "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-2 minutes')"
#define NOW_LESS_30_MIN "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-30 minutes')"
#define NOW_LESS_1_DAY "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 days')"
#define NOW_LESS_2_DAYS "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-2 days')"
#define NOW_LESS_7_DAYS "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-7 days')"
#define ADVERT_OF_R "1, 4, '{\"pubKey\":\"" R "\"}', '" R "'"

/* R's two ADVERTs of the week (1 then 2 bytes), a relayed message 30 minutes ago, Q quiet. */
static const char rows[] =
    "INSERT INTO nodes (public_key, name, role, last_seen, first_seen) VALUES"
    " ('" R "', 'R', 'repeater', " NOW_LESS_1_MIN ", '2026-01-01'),"
    " ('" Q "', 'Q', 'repeater', " NOW_LESS_2_MIN ", '2026-01-01');"
    "INSERT INTO transmissions (id, raw_hex, hash, first_seen, route_type, payload_type,"
    " decoded_json, from_pubkey) VALUES"
    " (1, '1100EC34', 'h1', " NOW_LESS_2_DAYS ", " ADVERT_OF_R "),"
    " (2, '1140EC34', 'h2', " NOW_LESS_1_DAY ", " ADVERT_OF_R "),"
    " (3, '0A00', 'h3', " NOW_LESS_30_MIN ", 1, 2, NULL, NULL);"
    "INSERT INTO observations (transmission_id, observer_idx, path_json, timestamp) VALUES"
    " (1, 1, '[]', 1), (2, 1, '[]', 2), (3, 1, '[\"cc\",\"" R "\"]', 3);";

static const char *listed(const char *body, const char *key)
{
    for (const char *n = json_first(json_get(body, "nodes")); n; n = json_next(n))
        if (json_str_at_eq(n, "public_key", key))
            return n;
    return NULL;
}

/* GET target on port: 200, its body (malloc'ed) and whether it was answered in its first
 * turn (it never parked). */
static char *answered(int port, const char *target, bool *first_turn)
{
    int status = 0;
    char *body = NULL;
    /* No answer at all within a GET's socket timeout (a starved machine, an ASan build just
     * started) is asked again: each request is still judged on its own turns. */
    for (int attempt = 0; attempt < 12 && status == 0; attempt++) {
        free(body);
        body = mg_test_get_turn(port, target, &status, first_turn);
    }
    cr_assert_eq(status, 200, "GET %s: %d %.300s", target, status, body ? body : "");
    return body;
}

/* What the rows say, by queries of the test's own. */
struct truth {
    int hash_size;        /* of R's newest ADVERT of the week */
    long long relays_24h; /* non-ADVERTs of the last 24 h whose path names R's whole key */
    char last_relayed[40];
};

static void work_out(const char *db, struct truth *t)
{
    sqlite3 *conn;
    sqlite3_stmt *st;
    cr_assert_eq(mg_test_sqlite_open(db, &conn), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(
                     conn,
                     "SELECT raw_hex FROM transmissions WHERE payload_type = 4 AND from_pubkey = ?1"
                     " AND first_seen >= " NOW_LESS_7_DAYS " ORDER BY first_seen DESC LIMIT 1",
                     -1, &st, NULL),
                 SQLITE_OK);
    sqlite3_bind_text(st, 1, R, -1, SQLITE_STATIC);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    t->hash_size = mg_advert_hash_size((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    cr_assert_eq(sqlite3_prepare_v2(
                     conn,
                     "SELECT count(DISTINCT t.id), max(t.first_seen) FROM transmissions t JOIN"
                     " observations o ON o.transmission_id = t.id WHERE t.payload_type <> 4 AND"
                     " instr(lower(o.path_json), '\"' || lower(?1) || '\"') > 0 AND"
                     " t.first_seen > " NOW_LESS_1_DAY,
                     -1, &st, NULL),
                 SQLITE_OK);
    sqlite3_bind_text(st, 1, R, -1, SQLITE_STATIC);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    t->relays_24h = sqlite3_column_int64(st, 0);
    snprintf(t->last_relayed, sizeof t->last_relayed, "%s",
             (const char *)sqlite3_column_text(st, 1) ?: "");
    sqlite3_finalize(st);
    sqlite3_close(conn);
}

struct built_wait {
    _Atomic uint64_t *a, *b;
};

static bool both_built(void *arg)
{
    const struct built_wait *w = arg;
    return atomic_load(w->a) >= 1 && atomic_load(w->b) >= 1;
}

/* The list's R as the tables have it. */
static bool from_tables(const char *r, const struct truth *t)
{
    return r && json_int_at(r, "hash_size") == t->hash_size &&
           json_int_at(r, "relay_count_24h") == t->relays_24h &&
           json_str_at_eq(r, "last_relayed", t->last_relayed) &&
           json_is_at(r, "relay_active", "true");
}

Test(first_start, the_list_and_the_detail_wait_for_no_group_pass_then_switch_to_the_tables)
{
    char dir[128], db[256];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/first.db", dir);
    cr_assert_eq(mg_test_make_db(db, true, rows), 0);
    struct truth t;
    work_out(db, &t);
    cr_assert_eq(t.hash_size, 2);
    cr_assert_eq(t.relays_24h, 1);
    const char *env[] = {"MESHGATE_WORKERS=2", "MESHGATE_TEST_HOOKS=park",
                         "MESHGATE_TEST_GROUP_PASS_MS=20000",
                         "MESHGATE_TEST_GROUP_PASS_ONLY=hashsizes,relayprobe,relay", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db, env));
    struct mg_segment seg;
    char err[256];
    cr_assert_eq(mg_segment_attach(&seg, s.shm_name, true, err, sizeof err), 0, "%s", err);
    struct mg_result_cache *c = seg.cache.cache;
#define PASSES_LANDED                                                                              \
    (atomic_load(&c->hash_size_builds) + atomic_load(&c->relay_probe_builds) +                     \
     atomic_load(&c->relay_builds))

    /* While the passes run: in the first turn, as CoreScope has them before its own. */
    bool first_turn = false;
    for (int i = 0; i < 4; i++) { /* over both workers */
        char *list = answered(s.port, "/api/nodes?limit=50", &first_turn);
        cr_expect(first_turn, "the list parked");
        const char *r = listed(list, R);
        cr_assert_not_null(r, "%.400s", list);
        cr_expect(json_is_at(r, "hash_size", "null") &&
                      json_is_at(r, "hash_size_inconsistent", "false") &&
                      !json_get(r, "hash_sizes_seen"),
                  "%.600s", r);
        cr_expect(json_int_at(r, "relay_count_24h") == 0 && json_int_at(r, "relay_count_1h") == 0 &&
                      json_is_at(r, "relay_active", "false") && !json_get(r, "last_relayed"),
                  "%.600s", r);
        free(list);
    }
    char *detail = answered(s.port, "/api/nodes/" R, &first_turn);
    cr_expect(first_turn, "the detail parked");
    const char *node = json_get(detail, "node");
    /* The detail reads its own ADVERTs directly: its hash sizes are there at once. */
    cr_expect(json_int_at(node, "hash_size") == t.hash_size, "%.600s", detail);
    cr_expect(json_int_at(node, "relay_count_24h") == 0 && json_get(node, "relay_window_hours"),
              "%.600s", detail);
    free(detail);
    cr_expect_eq(PASSES_LANDED, 0, "the passes ended before the test could ask");

    /* The passes land: the list switches to the tables' values (no answer kept from before). */
    struct built_wait passes = {&c->hash_size_builds, &c->relay_builds};
    cr_assert(mg_test_wait_until(both_built, &passes, 150000, 10), "the passes never ended");
    int switched = 0;
    int64_t t0 = mg_test_now_ms();
    while (switched < 4 && mg_test_now_ms() - t0 < 60000) {
        char *list = answered(s.port, "/api/nodes?limit=50", &first_turn);
        const char *r = listed(list, R);
        bool now = from_tables(r, &t) && json_is_at(listed(list, Q), "hash_size", "null");
        switched = now ? switched + 1 : 0;
        free(list);
        if (!now)
            mg_test_sleep_ms(50);
    }
    cr_expect_eq(switched, 4, "the list never switched to the tables");
    detail = answered(s.port, "/api/nodes/" R, &first_turn);
    node = json_get(detail, "node");
    cr_expect(json_int_at(node, "hash_size") == t.hash_size &&
                  json_int_at(node, "relay_count_24h") == t.relays_24h,
              "%.600s", detail);
    free(detail);
    cr_expect_eq(atomic_load(&c->hash_size_builds), 1, "one pass for the group");
    cr_expect_eq(atomic_load(&c->relay_builds), 1, "one pass for the group");
#undef PASSES_LANDED
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
    mg_test_rmdir(dir);
}

/* Before the multi-byte pass lands, the list falls back to what the nodes table keeps; on a
 * database where no node keeps a capability that table is empty (no array at all), and the
 * lookup in it must not pass that null array on (UBSan's nonnull check, fatal in the ASan
 * build, killed the worker: one answer in 48 of a spread was lost in a stop's CI). */
Test(first_start, the_list_before_the_multibyte_pass_with_no_capability_kept)
{
    char dir[128], db[256];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/first.db", dir);
    cr_assert_eq(mg_test_make_db(db, true, rows), 0);
    const char *env[] = {"MESHGATE_WORKERS=1", "MESHGATE_TEST_HOOKS=park",
                         "MESHGATE_TEST_GROUP_PASS_MS=30000",
                         "MESHGATE_TEST_GROUP_PASS_ONLY=multibyte", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db, env));
    struct mg_segment seg;
    char err[256];
    cr_assert_eq(mg_segment_attach(&seg, s.shm_name, true, err, sizeof err), 0, "%s", err);
    struct mg_result_cache *c = seg.cache.cache;
    int worker = atomic_load(&seg.slots[0].pid);
    bool first_turn = false;
    for (int i = 0; i < 4; i++) {
        char *list = answered(s.port, "/api/nodes?limit=50", &first_turn);
        const char *q = listed(list, Q);
        cr_assert_not_null(q, "%.400s", list);
        cr_expect(!json_get(q, "multi_byte_status"), "%.600s", q);
        free(list);
    }
    cr_expect_eq(atomic_load(&c->multibyte_builds), 0, "the pass ended before the test could ask");
    cr_expect_eq(atomic_load(&seg.slots[0].pid), worker, "the worker died while answering");
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
    mg_test_rmdir(dir);
}

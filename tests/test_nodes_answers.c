/* SPDX-License-Identifier: ISC */
/*
 * The answer cache (answer_cache.h) and its use by GET /api/nodes: a query asked again while
 * nothing it derives from changed is answered by a copy, byte for byte the answer it would
 * render; a commit by another connection, a new hash-size or relay table, a new role count and the
 * next second each make it render again (new counts: test_nodes.c,
 * role_counts_are_reused_within_their_interval_while_the_total_is_fresh; the second is not
 * tested here, as the counts' interval renders the answer again too). Whether an answer was
 * rendered is read from mg_nodes_answers_rendered; what it holds is checked against SQL on the
 * copy.
 */
#include "answer_cache.h"
#include "clock.h"
#include "ep_nodes.h"
#include "harness.h"
#include "inproc.h"
#include "node_hash_sizes.h"
#include "node_relay.h"

#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

TestSuite(answer_cache, .timeout = 30);
TestSuite(nodes_answers, .timeout = 60);

/* --- the cache alone ---------------------------------------------------------------------- */

static struct mg_answer_stamps stamps_of(uint64_t a, uint64_t b)
{
    struct mg_answer_stamps s = {{0}};
    s.v[0] = a;
    s.v[MG_ANSWER_STAMPS - 1] = b;
    return s;
}

Test(answer_cache, a_body_is_found_only_with_its_key_and_every_stamp)
{
    struct mg_answer_cache c;
    mg_answer_cache_init(&c);
    struct mg_answer_stamps s = stamps_of(7, 9);
    cr_assert_null(mg_answer_cache_get(&c, "limit=5", 7, &s), "an empty cache found something");
    cr_assert(mg_answer_cache_put(&c, "limit=5", 7, &s, "{\"a\":1}", 7));
    const struct mg_buf *b = mg_answer_cache_get(&c, "limit=5", 7, &s);
    cr_assert_not_null(b);
    cr_expect_eq(b->len, 7);
    cr_expect(memcmp(b->data, "{\"a\":1}", 7) == 0);
    struct mg_answer_stamps first_moved = stamps_of(8, 9), last_moved = stamps_of(7, 10);
    cr_expect_null(mg_answer_cache_get(&c, "limit=5", 7, &first_moved), "a moved stamp matched");
    cr_expect_null(mg_answer_cache_get(&c, "limit=5", 7, &last_moved), "a moved stamp matched");
    cr_expect_null(mg_answer_cache_get(&c, "limit=50", 8, &s), "a longer key matched");
    cr_expect_null(mg_answer_cache_get(&c, "limit=", 6, &s), "a prefix of the key matched");
    cr_expect_null(mg_answer_cache_get(&c, "limit=6", 7, &s), "another key matched");
    /* The key's new answer replaces its old one. */
    cr_assert(mg_answer_cache_put(&c, "limit=5", 7, &last_moved, "{\"a\":2}", 7));
    cr_expect_null(mg_answer_cache_get(&c, "limit=5", 7, &s), "the replaced answer was kept");
    b = mg_answer_cache_get(&c, "limit=5", 7, &last_moved);
    cr_assert_not_null(b);
    cr_expect(memcmp(b->data, "{\"a\":2}", 7) == 0);
    mg_answer_cache_clear(&c);
    cr_expect_null(mg_answer_cache_get(&c, "limit=5", 7, &last_moved), "clear kept an answer");
}

Test(answer_cache, the_least_recently_used_entry_makes_room_and_oversized_ones_are_not_kept)
{
    struct mg_answer_cache c;
    mg_answer_cache_init(&c);
    struct mg_answer_stamps s = stamps_of(1, 1);
    char key[16];
    for (int i = 0; i < MG_ANSWER_CACHE_ENTRIES; i++) {
        int n = snprintf(key, sizeof key, "k%d", i);
        cr_assert(mg_answer_cache_put(&c, key, (size_t)n, &s, key, (size_t)n));
    }
    cr_assert_not_null(mg_answer_cache_get(&c, "k0", 2, &s)); /* k1 is now the oldest */
    cr_assert(mg_answer_cache_put(&c, "new", 3, &s, "new", 3));
    cr_expect_null(mg_answer_cache_get(&c, "k1", 2, &s), "the least recently used stayed");
    cr_expect_not_null(mg_answer_cache_get(&c, "k0", 2, &s), "a recently used one went");
    cr_expect_not_null(mg_answer_cache_get(&c, "new", 3, &s));

    size_t big = MG_ANSWER_CACHE_BODY_MAX_BYTES + 1;
    char *body = calloc(1, big);
    cr_assert_not_null(body);
    cr_expect_not(mg_answer_cache_put(&c, "big", 3, &s, body, big), "an oversized body was kept");
    cr_expect_null(mg_answer_cache_get(&c, "big", 3, &s));
    free(body);
    char long_key[MG_ANSWER_CACHE_KEY_MAX_BYTES + 1];
    memset(long_key, 'q', sizeof long_key);
    cr_expect_not(mg_answer_cache_put(&c, long_key, sizeof long_key, &s, "x", 1),
                  "an oversized key was kept");
    mg_answer_cache_clear(&c);
}

/* Large answers (every node of a 2 000-node list is about 1 MB) are kept within a total: the
 * least recently used make room. */
Test(answer_cache, large_answers_are_kept_within_the_total)
{
    struct mg_answer_cache c;
    mg_answer_cache_init(&c);
    struct mg_answer_stamps s = stamps_of(1, 1);
    size_t big = MG_ANSWER_CACHE_TOTAL_MAX_BYTES / 3 + 1; /* three do not fit */
    char *body = calloc(1, big);
    cr_assert_not_null(body);
    cr_assert(mg_answer_cache_put(&c, "a", 1, &s, body, big));
    cr_assert(mg_answer_cache_put(&c, "b", 1, &s, body, big));
    cr_expect_not_null(mg_answer_cache_get(&c, "a", 1, &s), "two large answers fit");
    cr_assert(mg_answer_cache_put(&c, "c", 1, &s, body, big));
    cr_expect_null(mg_answer_cache_get(&c, "b", 1, &s), "the least recently used stayed");
    cr_expect_not_null(mg_answer_cache_get(&c, "a", 1, &s));
    cr_expect_not_null(mg_answer_cache_get(&c, "c", 1, &s));
    size_t held = 0;
    for (size_t i = 0; i < MG_ANSWER_CACHE_ENTRIES; i++)
        held += c.entry[i].body.cap;
    cr_expect_leq(held, MG_ANSWER_CACHE_TOTAL_MAX_BYTES);
    free(body);
    mg_answer_cache_clear(&c);
}

/* --- /api/nodes ---------------------------------------------------------------------------- */

struct fixture {
    char dir[128];
    char db[256];
    struct mg_test_ctx t;
};

static void open_fixture(struct fixture *f, const char *sql)
{
    mg_test_tmpdir(f->dir, sizeof f->dir);
    cr_assert(f->dir[0], "no temporary directory");
    snprintf(f->db, sizeof f->db, "%s/nodes.db", f->dir);
    cr_assert_eq(mg_test_make_db(f->db, false, sql), 0);
    cr_assert(mg_test_ctx_open(&f->t, f->db));
}

static void close_fixture(struct fixture *f)
{
    mg_test_ctx_close(&f->t);
    mg_test_rmdir(f->dir);
}

/* The body of a 200 answer to target (a copy: the caller frees it). */
static char *get_ok(struct fixture *f, const char *target)
{
    int status = mg_test_ctx_get(&f->t, target);
    cr_assert_eq(status, 200, "%s answered %d: %s", target, status, f->t.res.body.data);
    cr_assert_str_eq(f->t.res.content_type, "application/json");
    cr_assert(f->t.res.no_store, "%s: no Cache-Control: no-store", target);
    return strdup(f->t.res.body.data);
}

static void writer_exec(struct fixture *f, const char *sql)
{
    sqlite3 *writer;
    cr_assert_eq(mg_test_sqlite_open(f->db, &writer), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(writer, sql, NULL, NULL, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(writer));
    sqlite3_close(writer);
}

static long long db_count(struct fixture *f, const char *sql)
{
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(f->t.db.conn, sql, -1, &st, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    long long n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return n;
}

static const char some_nodes[] =
    "INSERT INTO nodes (public_key, name, role, last_seen, first_seen, advert_count) VALUES"
    " ('k2', 'Alpha', 'repeater', '2026-05-17T12:00:00Z', '2026-05-01T00:00:00Z', 10),"
    " ('k1', 'Bravo', 'repeater', '2026-05-17T12:00:00Z', '2026-05-02T00:00:00Z', 10),"
    " ('k3', 'Charlie', 'companion', '2026-05-17T13:00:00Z', '2026-05-03T00:00:00Z', 3);";

/*
 * Asks target twice and expects the second answer to be the first, copied: rendered once.
 * The role counts are read again after MG_NODES_COUNTS_INTERVAL_NS, an answer is kept
 * within its second (relay_active is decided at it), and a new table of hash sizes or relay
 * activity is a new source: each rightly renders the answer again, so a pair that straddles
 * one is asked again.
 */
static void expect_second_answer_copied(struct fixture *f, const char *target)
{
    for (int attempt = 0; attempt < 20; attempt++) {
        int64_t start_ns = mg_monotonic_ns();
        time_t start_s = time(NULL);
        uint64_t hash_sizes = mg_node_hash_sizes_generation(), relay = mg_node_relay_generation();
        uint64_t rendered = mg_nodes_answers_rendered();
        char *first = get_ok(f, target);
        char *second = get_ok(f, target);
        uint64_t renders = mg_nodes_answers_rendered() - rendered;
        /* The first request of a pair may be the one that takes a table (the group's copy,
         * or a refresh that came due on a slow machine): a new table renders again, rightly. */
        bool within = mg_monotonic_ns() - start_ns < MG_NODES_COUNTS_INTERVAL_NS &&
                      time(NULL) == start_s && hash_sizes == mg_node_hash_sizes_generation() &&
                      relay == mg_node_relay_generation();
        cr_expect_str_eq(second, first, "%s: the copied answer differs", target);
        free(first);
        free(second);
        if (!within)
            continue;
        cr_expect_leq(renders, 1, "%s was rendered %llu times in a row with nothing changed",
                      target, (unsigned long long)renders);
        return;
    }
    cr_assert_fail("%s: never asked twice within one second", target);
}

Test(nodes_answers, a_query_asked_again_is_answered_by_a_copy_of_its_answer)
{
    struct fixture f;
    open_fixture(&f, some_nodes);
    expect_second_answer_copied(&f, "/api/nodes");
    expect_second_answer_copied(&f, "/api/nodes?limit=2&sortBy=name");
    expect_second_answer_copied(&f, "/api/nodes?role=repeater");
    /* Another query is another answer, rendered. */
    uint64_t rendered = mg_nodes_answers_rendered();
    char *all = get_ok(&f, "/api/nodes?limit=3");
    char *one = get_ok(&f, "/api/nodes?limit=1");
    cr_expect_eq(mg_nodes_answers_rendered() - rendered, 2);
    cr_expect_str_neq(one, all);
    free(all);
    free(one);
    close_fixture(&f);
}

Test(nodes_answers, a_commit_by_another_connection_renders_the_answer_again)
{
    struct fixture f;
    open_fixture(&f, some_nodes);
    expect_second_answer_copied(&f, "/api/nodes");
    writer_exec(&f, "INSERT INTO nodes (public_key, name, role, last_seen) VALUES"
                    " ('k9', 'Newest', 'room', '2026-05-18T00:00:00Z');");
    uint64_t rendered = mg_nodes_answers_rendered();
    char *body = get_ok(&f, "/api/nodes");
    cr_expect_eq(mg_nodes_answers_rendered() - rendered, 1, "the commit did not render it again");
    char want[64];
    snprintf(want, sizeof want, "],\"total\":%lld,", db_count(&f, "SELECT count(*) FROM nodes"));
    cr_expect(strstr(body, want), "want %s in %s", want, body);
    const char *k9 = strstr(body, "\"public_key\":\"k9\""),
               *k3 = strstr(body, "\"public_key\":\"k3\"");
    cr_expect(k9 && k3 && k9 < k3, "the newest node is not first: %s", body);
    free(body);
    /* An update that changes no count or order must be seen too. */
    writer_exec(&f, "UPDATE nodes SET name = 'Renamed' WHERE public_key = 'k3';");
    body = get_ok(&f, "/api/nodes");
    cr_expect(strstr(body, "\"name\":\"Renamed\""), "the update was not seen: %s", body);
    free(body);
    close_fixture(&f);
}

Test(nodes_answers, a_new_relay_table_renders_the_answer_again)
{
    struct fixture f;
    open_fixture(&f, some_nodes);
    expect_second_answer_copied(&f, "/api/nodes");
    mg_node_relay_forget(NULL); /* the next request takes another table: the group's copy */
    uint64_t rendered = mg_nodes_answers_rendered();
    free(get_ok(&f, "/api/nodes"));
    cr_expect_eq(mg_nodes_answers_rendered() - rendered, 1,
                 "an answer stamped with the old table was copied");
    close_fixture(&f);
}

Test(nodes_answers, a_new_hash_size_table_renders_the_answer_again)
{
    struct fixture f;
    open_fixture(&f, some_nodes);
    expect_second_answer_copied(&f, "/api/nodes");
    mg_node_hash_sizes_forget(NULL); /* the next request builds another table */
    uint64_t rendered = mg_nodes_answers_rendered();
    free(get_ok(&f, "/api/nodes"));
    cr_expect_eq(mg_nodes_answers_rendered() - rendered, 1,
                 "an answer stamped with the old table was copied");
    close_fixture(&f);
}

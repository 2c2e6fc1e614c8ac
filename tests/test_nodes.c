/* SPDX-License-Identifier: ISC */
/*
 * GET /api/nodes: small hand-built databases with known answers, called in-process through
 * the real parser and dispatch; the query plans of the statements the handler runs; and,
 * when ../shared/data has it, CoreScope's own end-to-end database.
 */
#include "ep_nodes.h"
#include "harness.h"
#include "inproc.h"

#include "clock.h"
#include "node_relay.h"
#include "region_map.h"
#include "router.h"

#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

TestSuite(nodes, .timeout = 60);

struct fixture {
    char dir[128];
    char db[256];
    struct mg_test_ctx t;
};

static void open_fixture_schema(struct fixture *f, bool migrated, const char *sql)
{
    mg_test_tmpdir(f->dir, sizeof f->dir);
    cr_assert(f->dir[0], "no temporary directory");
    snprintf(f->db, sizeof f->db, "%s/nodes.db", f->dir);
    cr_assert_eq(mg_test_make_db(f->db, migrated, sql), 0);
    cr_assert(mg_test_ctx_open(&f->t, f->db));
}

static void open_fixture(struct fixture *f, const char *sql)
{
    open_fixture_schema(f, false, sql);
}

static void close_fixture(struct fixture *f)
{
    mg_test_ctx_close(&f->t);
    mg_test_rmdir(f->dir);
}

/* The body of a 200 answer to target. */
static const char *get_ok(struct fixture *f, const char *target)
{
    int status = mg_test_ctx_get(&f->t, target);
    cr_assert_eq(status, 200, "%s answered %d: %s", target, status, f->t.res.body.data);
    return f->t.res.body.data;
}

/* The public keys of the nodes in the answer to target, in order, comma-separated. */
static const char *keys_of(struct fixture *f, const char *target)
{
    static char keys[65536];
    const char *body = get_ok(f, target);
    keys[0] = '\0';
    size_t used = 0;
    for (const char *p = strstr(body, "\"public_key\":\""); p; p = strstr(p, "\"public_key\":\"")) {
        p += strlen("\"public_key\":\"");
        size_t n = strcspn(p, "\"");
        cr_assert(used + n + 2 < sizeof keys);
        if (used)
            keys[used++] = ',';
        memcpy(keys + used, p, n);
        used += n;
        keys[used] = '\0';
        p += n;
    }
    return keys;
}

static long long total_of(struct fixture *f, const char *target)
{
    const char *body = get_ok(f, target);
    const char *p = strstr(body, "],\"total\":");
    cr_assert(p, "no total in %s", body);
    return strtoll(p + strlen("],\"total\":"), NULL, 10);
}

/* RFC 3339 UTC text for now + offset_s (whole seconds, then fraction as given: "" or ".081"). */
static void time_text(char *out, size_t cap, int64_t offset_s, const char *fraction)
{
    time_t t = time(NULL) + (time_t)offset_s;
    struct tm tm;
    gmtime_r(&t, &tm);
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, cap, "%s%sZ", base, fraction);
}

/* --- the body ------------------------------------------------------------------------- */

static const char one_node[] =
    "INSERT INTO nodes VALUES ('988396af0ff369c2178a8c2a303661bf26193257136ed4452b6eadd9547011e9',"
    " 'KN6PLV <Oxford & Co>', 'repeater', 37.888, -122.268, '2026-05-17T18:13:27Z',"
    " '2026-03-17T21:47:58.081Z', 61, 3712, 21.5, 1);";

Test(nodes, one_node_answer_is_exact_with_keys_sorted_and_envelope_in_fixed_order)
{
    struct fixture f;
    open_fixture(&f, one_node);
    cr_expect_str_eq(
        get_ok(&f, "/api/nodes"),
        "{\"nodes\":[{\"advert_count\":61,\"battery_mv\":3712,"
        /* a repeater's usefulness: in no neighbour edge (node_usefulness.h) */
        "\"bridge_score\":0,\"coverage_score\":0,"
        "\"first_seen\":\"2026-03-17T21:47:58.081Z\",\"foreign\":true,\"hash_size\":null,"
        "\"hash_size_inconsistent\":false,\"last_heard\":\"2026-05-17T18:13:27Z\","
        "\"last_seen\":\"2026-05-17T18:13:27Z\",\"lat\":37.888,\"lon\":-122.268,"
        /* every node's multi-byte capability (node_multibyte.h) */
        "\"multi_byte_evidence\":\"\",\"multi_byte_max_hash_size\":1,\"multi_byte_status\":"
        "\"unknown\","
        "\"name\":\"KN6PLV \\u003cOxford \\u0026 Co\\u003e\","
        "\"public_key\":\"988396af0ff369c2178a8c2a303661bf26193257136ed4452b6eadd9547011e9\","
        /* a repeater's relay activity: none (node_relay.h) */
        "\"redundancy_score\":0,\"relay_active\":false,\"relay_count_1h\":0,"
        "\"relay_count_24h\":0,"
        "\"role\":\"repeater\",\"temperature_c\":21.5,\"traffic_share_score\":0,"
        "\"unscoped_relay_count_24h\":0,\"usefulness_grade\":\"F\",\"usefulness_score\":0}],"
        "\"total\":1,"
        "\"counts\":{\"companions\":0,\"repeaters\":1,\"rooms\":0,\"sensors\":0}}\n");
    cr_expect_str_eq(f.t.res.content_type, "application/json");
    cr_expect(f.t.res.no_store, "no Cache-Control: no-store");
    close_fixture(&f);
}

/* CoreScope's migrated schema has default_scope and no other scope column of nodes. */
Test(nodes, migrated_schema_adds_default_scope_at_its_sorted_place)
{
    struct fixture f;
    open_fixture_schema(
        &f, true,
        "INSERT INTO nodes (public_key, name, role, last_seen, first_seen, advert_count,"
        " foreign_advert, default_scope, multibyte_sup, multibyte_evidence) VALUES ('k1', 'N',"
        " 'room', '2026-05-17T18:00:00Z', '2026-05-01T00:00:00Z', 2, 0, '#bay', 2, 'advert');");
    cr_expect_str_eq(
        get_ok(&f, "/api/nodes"),
        "{\"nodes\":[{\"advert_count\":2,\"battery_mv\":null,\"bridge_score\":0,"
        "\"coverage_score\":0,\"default_scope\":\"#bay\","
        "\"first_seen\":\"2026-05-01T00:00:00Z\","
        "\"foreign\":false,\"hash_size\":null,\"hash_size_inconsistent\":false,"
        "\"last_heard\":\"2026-05-17T18:00:00Z\",\"last_seen\":\"2026-05-17T18:00:00Z\","
        "\"lat\":null,\"lon\":null,"
        "\"multi_byte_evidence\":\"\",\"multi_byte_max_hash_size\":1,\"multi_byte_status\":"
        "\"unknown\","
        "\"name\":\"N\",\"public_key\":\"k1\","
        "\"redundancy_score\":0,\"relay_active\":false,"
        "\"relay_count_1h\":0,\"relay_count_24h\":0,\"role\":\"room\","
        "\"temperature_c\":null,\"traffic_share_score\":0,\"unscoped_relay_count_24h\":0,"
        "\"usefulness_grade\":\"F\",\"usefulness_score\":0}],"
        "\"total\":1,"
        "\"counts\":{\"companions\":0,\"repeaters\":0,\"rooms\":1,\"sensors\":0}}\n");
    close_fixture(&f);
}

Test(nodes, null_columns_are_null_and_a_null_foreign_advert_is_false)
{
    struct fixture f;
    open_fixture(&f, "INSERT INTO nodes (public_key, advert_count, foreign_advert)"
                     " VALUES ('k1', NULL, NULL);");
    cr_expect_str_eq(get_ok(&f, "/api/nodes"),
                     "{\"nodes\":[{\"advert_count\":null,\"battery_mv\":null,\"first_seen\":null,"
                     "\"foreign\":false,\"hash_size\":null,\"hash_size_inconsistent\":false,"
                     "\"last_heard\":null,\"last_seen\":null,\"lat\":null,\"lon\":null,"
                     "\"multi_byte_evidence\":\"\",\"multi_byte_max_hash_size\":1,\"multi_byte_"
                     "status\":\"unknown\","
                     "\"name\":null,\"public_key\":\"k1\",\"role\":null,\"temperature_c\":null}],"
                     "\"total\":1,\"counts\":{\"companions\":0,\"repeaters\":0,\"rooms\":0,"
                     "\"sensors\":0}}\n");
    close_fixture(&f);
}

Test(nodes, foreign_is_true_for_any_nonzero_foreign_advert)
{
    struct fixture f;
    open_fixture(&f, "INSERT INTO nodes (public_key, last_seen, foreign_advert) VALUES"
                     " ('k1', '3', 0), ('k2', '2', 2), ('k3', '1', -1);");
    const char *body = get_ok(&f, "/api/nodes");
    const char *k1 = strstr(body, "\"public_key\":\"k1\"");
    const char *k2 = strstr(body, "\"public_key\":\"k2\"");
    cr_assert(k1 && k2);
    cr_expect(strstr(body, "\"foreign\":false") < k1);
    cr_expect(strstr(k1, "\"foreign\":true") < k2, "k2 (2) should be foreign: %s", body);
    cr_expect(strstr(k2, "\"foreign\":true"), "k3 (-1) should be foreign: %s", body);
    close_fixture(&f);
}

Test(nodes, empty_table_answers_an_empty_list_not_null)
{
    struct fixture f;
    open_fixture(&f, NULL);
    cr_expect_str_eq(get_ok(&f, "/api/nodes"),
                     "{\"nodes\":[],\"total\":0,\"counts\":{\"companions\":0,\"repeaters\":0,"
                     "\"rooms\":0,\"sensors\":0}}\n");
    close_fixture(&f);
}

Test(nodes, route_is_registered_as_heavy_only_when_it_builds_the_region_map)
{
    bool found = false;
    for (unsigned i = 0; i < mg_route_table_len; i++) {
        if (strcmp(mg_routes[i].template, "/api/nodes") == 0) {
            found = true;
            cr_expect_eq(mg_routes[i].cost, MG_COST_HEAVY);
            cr_expect(mg_routes[i].heavy_when == mg_nodes_is_heavy);
            cr_expect(mg_routes[i].handler == mg_handle_nodes);
        }
    }
    cr_expect(found, "/api/nodes is not in the route table");
}

/* --- order and paging ------------------------------------------------------------------- */

/* Inserted out of order; ties on last_seen (k1, k2), name (k0, k2) and advert_count (k1, k2). */
static const char sorting_nodes[] =
    "INSERT INTO nodes (public_key, name, role, last_seen, first_seen, advert_count) VALUES"
    " ('k2', 'Alpha', 'repeater', '2026-05-17T12:00:00Z', '2026-05-01T00:00:00Z', 10),"
    " ('k4', NULL, 'room', NULL, NULL, NULL),"
    " ('k1', 'Bravo', 'repeater', '2026-05-17T12:00:00Z', '2026-05-02T00:00:00Z', 10),"
    " ('k3', 'Charlie', 'companion', '2026-05-17T13:00:00Z', '2026-05-03T00:00:00Z', 3),"
    " ('k0', 'Alpha', 'sensor', '2026-05-17T11:00:00Z', '2026-05-04T00:00:00Z', 20);";

Test(nodes, default_order_is_last_seen_newest_first_then_public_key)
{
    struct fixture f;
    open_fixture(&f, sorting_nodes);
    cr_expect_str_eq(keys_of(&f, "/api/nodes"), "k3,k1,k2,k0,k4");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?sortBy=lastSeen"), "k3,k1,k2,k0,k4");
    close_fixture(&f);
}

Test(nodes, sort_by_name_is_ascending_then_public_key)
{
    struct fixture f;
    open_fixture(&f, sorting_nodes);
    /* SQLite orders NULL first in ascending order. */
    cr_expect_str_eq(keys_of(&f, "/api/nodes?sortBy=name"), "k4,k0,k2,k1,k3");
    close_fixture(&f);
}

Test(nodes, sort_by_packet_count_is_advert_count_descending_then_public_key)
{
    struct fixture f;
    open_fixture(&f, sorting_nodes);
    cr_expect_str_eq(keys_of(&f, "/api/nodes?sortBy=packetCount"), "k0,k1,k2,k3,k4");
    close_fixture(&f);
}

Test(nodes, pages_follow_each_other_without_gaps_or_repeats)
{
    struct fixture f;
    open_fixture(&f, sorting_nodes);
    cr_expect_str_eq(keys_of(&f, "/api/nodes?limit=2"), "k3,k1");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?limit=2&offset=2"), "k2,k0");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?limit=2&offset=4"), "k4");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?sortBy=name&limit=2&offset=1"), "k0,k2");
    cr_expect_eq(total_of(&f, "/api/nodes?limit=2&offset=2"), 5);
    close_fixture(&f);
}

Test(nodes, offset_past_the_end_answers_an_empty_list_with_the_total)
{
    struct fixture f;
    open_fixture(&f, sorting_nodes);
    const char *body = get_ok(&f, "/api/nodes?offset=5");
    cr_expect(strncmp(body, "{\"nodes\":[],\"total\":5,", 22) == 0, "%s", body);
    cr_expect_eq(total_of(&f, "/api/nodes?offset=9223372036854775807"), 5);
    close_fixture(&f);
}

Test(nodes, out_of_range_limit_and_offset_are_clamped)
{
    struct fixture f;
    open_fixture(&f,
                 "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2100)"
                 " INSERT INTO nodes (public_key, name, role, last_seen)"
                 " SELECT printf('k%04d', i), 'node ' || i, 'repeater',"
                 " printf('2026-05-17T%02d:%02d:%02dZ', i / 3600, i / 60 % 60, i % 60) FROM n;");
    /* CoreScope's clampLimit: below 1, or not a number Go's Atoi takes, is the default 50 */
    static const char *const fifty[] = {"/api/nodes?limit=0", "/api/nodes?limit=-7",
                                        "/api/nodes?limit=99999999999999999999999",
                                        "/api/nodes?limit=abc", "/api/nodes"};
    for (size_t i = 0; i < sizeof fifty / sizeof fifty[0]; i++) {
        const char *page = keys_of(&f, fifty[i]);
        size_t n = 1;
        for (const char *p = page; *p; p++)
            n += *p == ',';
        cr_expect_eq(n, 50, "%s: %zu nodes", fifty[i], n);
        cr_expect(strncmp(page, "k2100,k2099,", 12) == 0, "%s", fifty[i]);
    }
    /* A negative offset reads as 0 (SQLite's OFFSET, which CoreScope's query passes it to). */
    cr_expect_str_eq(keys_of(&f, "/api/nodes?limit=1&offset=-3"), "k2100");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?limit=1&offset=1"), "k2099");
    cr_expect_eq(total_of(&f, "/api/nodes?limit=99999"), 2100);
    const char *keys = keys_of(&f, "/api/nodes?limit=99999");
    size_t commas = 0;
    for (const char *p = keys; *p; p++)
        commas += *p == ',';
    cr_expect_eq(commas + 1, 2000, "limit=99999 gave %zu nodes", commas + 1);
    cr_expect(strncmp(keys, "k2100,k2099,", 12) == 0);
    cr_expect_eq(strcmp(keys + strlen(keys) - 5, "k0101"), 0, "the 2000th is not k0101");
    close_fixture(&f);
}

/*
 * The parameters of /api/nodes with missing, empty, malformed and out-of-range values read as
 * CoreScope's handler reads them (ep_nodes.c, params.h): an odd value is the default.
 */
Test(nodes, parameters_read_as_corescopes_handler_reads_them)
{
    static const struct {
        const char *target;
        const char *keys;
    } cases[] = {
        {"/api/nodes", "k3,k1,k2,k0,k4"},
        {"/api/nodes?limit=&offset=&sortBy=&lastHeard=&role=&search=&before=&region=&area=",
         "k3,k1,k2,k0,k4"},
        {"/api/nodes?limit=abc", "k3,k1,k2,k0,k4"},
        {"/api/nodes?limit=1.5", "k3,k1,k2,k0,k4"},
        {"/api/nodes?limit=10x", "k3,k1,k2,k0,k4"},
        {"/api/nodes?limit=2", "k3,k1"},
        {"/api/nodes?offset=abc", "k3,k1,k2,k0,k4"},
        {"/api/nodes?offset=3", "k0,k4"},
        {"/api/nodes?offset=-3", "k3,k1,k2,k0,k4"},
        {"/api/nodes?sortBy=foo", "k3,k1,k2,k0,k4"},
        {"/api/nodes?sortBy=lastseen", "k3,k1,k2,k0,k4"},
        {"/api/nodes?lastHeard=2h", "k3,k1,k2,k0,k4"},
        {"/api/nodes?lastHeard=1H", "k3,k1,k2,k0,k4"},
        {"/api/nodes?area=NOWHERE", "k3,k1,k2,k0,k4"},
    };
    struct fixture f;
    open_fixture(&f, sorting_nodes);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_expect_str_eq(keys_of(&f, cases[i].target), cases[i].keys, "%s", cases[i].target);
    close_fixture(&f);
}

/* --- filters ---------------------------------------------------------------------------- */

Test(nodes, role_matches_exactly)
{
    struct fixture f;
    open_fixture(&f, sorting_nodes);
    cr_expect_str_eq(keys_of(&f, "/api/nodes?role=repeater"), "k1,k2");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?role=Repeater"), "");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?role=repeat"), "");
    cr_expect_eq(total_of(&f, "/api/nodes?role=repeater"), 2);
    cr_expect_eq(total_of(&f, "/api/nodes?role=repeater&offset=1&limit=1"), 2);
    cr_expect_eq(total_of(&f, "/api/nodes?role=repeater&offset=10"), 2);
    cr_expect_eq(total_of(&f, "/api/nodes?role=nobody"), 0);
    close_fixture(&f);
}

static const char search_nodes[] =
    "INSERT INTO nodes (public_key, name, last_seen) VALUES"
    " ('s1', '100% Coverage', '9'), ('s2', '100 Coverage', '8'), ('s3', 'my_node', '7'),"
    " ('s4', 'myXnode', '6'), ('s5', 'Twin PEAKS Rptr', '5'), ('s6', 'École Relay', '4'),"
    " ('s7', 'école relay', '3'), ('s8', NULL, '2');";

Test(nodes, search_is_an_ascii_case_insensitive_substring_of_the_name)
{
    struct fixture f;
    open_fixture(&f, search_nodes);
    cr_expect_str_eq(keys_of(&f, "/api/nodes?search=peaks"), "s5");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?search=tWiN%20pEaKs%20rPTR"), "s5");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?search=coverage"), "s1,s2");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?search=RELAY"), "s6,s7");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?search=zzz"), "");
    close_fixture(&f);
}

Test(nodes, search_takes_percent_and_underscore_literally)
{
    struct fixture f;
    open_fixture(&f, search_nodes);
    cr_expect_str_eq(keys_of(&f, "/api/nodes?search=100%25"), "s1");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?search=%25"), "s1");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?search=my_node"), "s3");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?search=_"), "s3");
    close_fixture(&f);
}

Test(nodes, search_folds_only_ascii_letters)
{
    struct fixture f;
    open_fixture(&f, search_nodes);
    /* "É" and "é" are different letters to an ASCII-only fold; "cole" matches both. */
    cr_expect_str_eq(keys_of(&f, "/api/nodes?search=%C3%89cole"), "s6");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?search=%C3%A9COLE"), "s7");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?search=COLE%20relay"), "s6,s7");
    close_fixture(&f);
}

Test(nodes, before_keeps_first_seen_up_to_and_including_the_value)
{
    struct fixture f;
    open_fixture(&f, sorting_nodes);
    cr_expect_str_eq(keys_of(&f, "/api/nodes?before=2026-05-02T00:00:00Z"), "k1,k2");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?before=2026-05-01T00:00:00Z"), "k2");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?before=2026-04-30"), "");
    /* A string comparison: the NULL first_seen of k4 is never before anything. */
    cr_expect_str_eq(keys_of(&f, "/api/nodes?before=9999"), "k3,k1,k2,k0");
    close_fixture(&f);
}

Test(nodes, last_heard_keeps_nodes_seen_within_the_window)
{
    char sql[2048], m30[40], h2[40], h23[40], d2[40], d8[40], d29[40], d31[40];
    time_text(m30, sizeof m30, -30 * 60, "");
    time_text(h2, sizeof h2, -2 * 3600, ".500");
    time_text(h23, sizeof h23, -23 * 3600, "");
    time_text(d2, sizeof d2, -2 * 86400, ".081");
    time_text(d8, sizeof d8, -8 * 86400, "");
    time_text(d29, sizeof d29, -29 * 86400, "");
    time_text(d31, sizeof d31, -31 * 86400, "");
    snprintf(sql, sizeof sql,
             "INSERT INTO nodes (public_key, last_seen) VALUES ('m30', '%s'), ('h02', '%s'),"
             " ('h23', '%s'), ('d02', '%s'), ('d08', '%s'), ('d29', '%s'), ('d31', '%s'),"
             " ('nul', NULL);",
             m30, h2, h23, d2, d8, d29, d31);
    struct fixture f;
    open_fixture(&f, sql);
    cr_expect_str_eq(keys_of(&f, "/api/nodes?lastHeard=1h"), "m30");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?lastHeard=6h"), "m30,h02");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?lastHeard=24h"), "m30,h02,h23");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?lastHeard=7d"), "m30,h02,h23,d02");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?lastHeard=30d"), "m30,h02,h23,d02,d08,d29");
    cr_expect_eq(total_of(&f, "/api/nodes?lastHeard=30d"), 6);
    cr_expect_eq(total_of(&f, "/api/nodes"), 8);
    close_fixture(&f);
}

/* Runs the handler's own page statement for q at a fixed now; the keys it selects. */
static const char *page_keys_at(struct fixture *f, const struct mg_nodes_query *q, int64_t now_s)
{
    static char keys[1024];
    struct mg_buf sql;
    mg_buf_init(&sql);
    mg_nodes_sql(&f->t.db.schema, q, MG_NODES_SQL_PAGE, &sql);
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(f->t.db.conn, mg_buf_cstr(&sql), -1, &st, NULL), SQLITE_OK,
                 "%s: %s", mg_buf_cstr(&sql), sqlite3_errmsg(f->t.db.conn));
    cr_assert_eq(mg_nodes_bind(st, q, now_s), SQLITE_OK);
    int key_col = -1;
    for (int c = 0; c < sqlite3_column_count(st); c++)
        if (strcmp(sqlite3_column_name(st, c), "public_key") == 0)
            key_col = c;
    cr_assert(key_col >= 0);
    keys[0] = '\0';
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (keys[0])
            strcat(keys, ",");
        strcat(keys, (const char *)sqlite3_column_text(st, key_col));
    }
    sqlite3_finalize(st);
    mg_buf_free(&sql);
    return keys;
}

Test(nodes, last_heard_cutoff_is_exact_to_the_second_with_and_without_milliseconds)
{
    /* now = 2026-05-17T19:00:00Z, window 1h: strictly newer than 18:00:00. In string order
     * "18:00:00.081Z" < "18:00:00Z", which a single comparison with the cutoff gets wrong. */
    struct fixture f;
    open_fixture(&f, "INSERT INTO nodes (public_key, last_seen) VALUES"
                     " ('at_cutoff', '2026-05-17T18:00:00Z'),"
                     " ('at_cutoff_zero_ms', '2026-05-17T18:00:00.000Z'),"
                     " ('ms_after', '2026-05-17T18:00:00.081Z'),"
                     " ('us_after', '2026-05-17T18:00:00.000001Z'),"
                     " ('ms_before', '2026-05-17T17:59:59.999Z'),"
                     " ('second_after', '2026-05-17T18:00:01Z'),"
                     " ('second_before', '2026-05-17T17:59:59Z'),"
                     " ('ms_next_second', '2026-05-17T18:00:01.000Z');");
    char cut[40], glob[40];
    int64_t now = 1779044400; /* 2026-05-17T19:00:00Z */
    mg_nodes_last_heard_cutoff(now, 3600, cut, glob);
    cr_expect_str_eq(cut, "2026-05-17T18:00:00Z");
    cr_expect_str_eq(glob, "2026-05-17T18:00:00.*[1-9]*");
    struct mg_nodes_query q;
    mg_nodes_query_init(&q);
    q.last_heard_s = 3600;
    q.sort = MG_NODES_SORT_NAME; /* names are NULL: by public_key */
    cr_expect_str_eq(page_keys_at(&f, &q, now), "ms_after,ms_next_second,second_after,us_after");
    mg_nodes_query_free(&q);
    close_fixture(&f);
}

/*
 * Observers in three regions (one stored as " sjc" with a space and lowercase, one as
 * "OAK,SFO", which is no region at all); ADVERTs name their node in decoded_json's pubKey
 * (from_pubkey deliberately says something else); a group text heard in SJC does not put
 * its sender there.
 */
static const char region_data[] =
    "INSERT INTO nodes (public_key, name, role, last_seen, first_seen, advert_count) VALUES"
    " ('n1', 'One', 'repeater', '2026-05-05T00:00:00Z', '2026-04-05', 1),"
    " ('n2', 'Two', 'repeater', '2026-05-04T00:00:00Z', '2026-04-04', 5),"
    " ('n3', 'Three', 'room', '2026-05-03T00:00:00Z', '2026-04-03', 3),"
    " ('n4', 'Four', 'companion', '2026-05-02T00:00:00Z', '2026-04-02', 2),"
    " ('n5', 'Five', 'repeater', '2026-05-01T00:00:00Z', '2026-04-01', 4);"
    "INSERT INTO observers (rowid, id, name, iata) VALUES (1, 'OBS-SJC', 'a', 'SJC'),"
    " (2, 'OBS-OAK', 'b', 'OAK'), (3, 'OBS-SFO', 'c', 'SFO'), (4, 'OBS-SJC2', 'd', ' sjc'),"
    " (5, 'OBS-NONE', 'e', NULL), (6, 'OBS-TWO', 'f', 'OAK,SFO');"
    "INSERT INTO transmissions (id, raw_hex, hash, first_seen, payload_type, decoded_json,"
    " from_pubkey) VALUES"
    " (1, '00', 'h1', '2026-05-17T00:00:01Z', 4, '{\"type\":\"ADVERT\",\"pubKey\":\"n1\"}', 'n5'),"
    " (2, '00', 'h2', '2026-05-17T00:00:02Z', 4, '{\"type\":\"ADVERT\",\"pubKey\":\"n2\"}', 'n2'),"
    " (3, '00', 'h3', '2026-05-17T00:00:03Z', 4, '{\"type\":\"ADVERT\",\"pubKey\":\"n3\"}', 'n3'),"
    " (4, '00', 'h4', '2026-05-17T00:00:04Z', 5, '{\"type\":\"GRP_TXT\",\"pubKey\":\"n4\"}', 'n4'),"
    " (5, '00', 'h5', '2026-05-17T00:00:05Z', 4, '{\"type\":\"ADVERT\",\"pubKey\":\"n5\"}', 'n1'),"
    " (6, '00', 'h6', '2026-05-17T00:00:06Z', 4, '{\"type\":\"ADVERT\",\"pubKey\":\"zz\"}', 'zz'),"
    " (7, '00', 'h7', '2026-05-17T00:00:07Z', 4, '{\"type\":\"ADVERT\",\"pubKey\":\"n4\"}', 'n4');"
    "INSERT INTO observations (transmission_id, observer_idx, timestamp) VALUES"
    " (1, 1, 1), (1, 2, 1)," /* n1: SJC and OAK */
    " (2, 2, 2),"            /* n2: OAK */
    " (3, 3, 3), (3, 4, 3)," /* n3: SFO and ' sjc' */
    " (4, 1, 4),"            /* n4: a group text in SJC: not an ADVERT */
    " (5, 5, 5),"            /* n5: an observer without a region */
    " (6, 1, 6),"            /* an ADVERT of a node that is not in nodes */
    " (7, 6, 7);";           /* n4: an observer whose stored code has a comma */

Test(nodes, region_keeps_nodes_whose_advert_an_observer_of_the_region_heard)
{
    struct fixture f;
    open_fixture(&f, region_data);
    cr_expect_str_eq(keys_of(&f, "/api/nodes?region=SJC"), "n1,n3");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?region=OAK"), "n1,n2");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?region=SFO"), "n3");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?region=LAX"), "");
    cr_expect_eq(total_of(&f, "/api/nodes?region=LAX"), 0);
    cr_expect_eq(total_of(&f, "/api/nodes?region=SJC"), 2);
    /* The total of a filter holds on every page, also past the last one. */
    cr_expect_str_eq(keys_of(&f, "/api/nodes?region=SJC&limit=1&offset=1"), "n3");
    cr_expect_eq(total_of(&f, "/api/nodes?region=SJC&limit=1&offset=1"), 2);
    cr_expect_str_eq(keys_of(&f, "/api/nodes?region=SJC&offset=2"), "");
    cr_expect_eq(total_of(&f, "/api/nodes?region=SJC&offset=2"), 2);
    close_fixture(&f);
}

Test(nodes, region_codes_are_trimmed_uppercased_and_all_or_empty_items_ignored)
{
    struct fixture f;
    open_fixture(&f, region_data);
    cr_expect_str_eq(keys_of(&f, "/api/nodes?region=sjc"), "n1,n3");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?region=%20sjc%20,%09oak"), "n1,n2,n3");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?region=SFO,,ALL,"), "n3");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?region=SFO,all"), "n3");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?region=ALL"), "n1,n2,n3,n4,n5");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?region=All,%20,"), "n1,n2,n3,n4,n5");
    /* A comma cannot join two codes into one, in the query or in the database. */
    cr_expect_str_eq(keys_of(&f, "/api/nodes?region=SJ,C"), "");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?region=OAK,SFO"), "n1,n2,n3");
    close_fixture(&f);
}

Test(nodes, filters_combine_with_and)
{
    struct fixture f;
    open_fixture(&f, region_data);
    cr_expect_str_eq(keys_of(&f, "/api/nodes?region=SJC,OAK&role=repeater"), "n1,n2");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?region=SJC,OAK&role=repeater&search=TW"), "n2");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?region=SJC&role=companion"), "");
    cr_expect_eq(total_of(&f, "/api/nodes?region=SJC,OAK&role=repeater&limit=1"), 2);
    close_fixture(&f);
}

Test(nodes, total_counts_the_filter_and_counts_every_node_of_the_four_roles)
{
    struct fixture f;
    open_fixture(&f, "INSERT INTO nodes (public_key, role, last_seen) VALUES"
                     " ('a', 'repeater', '1'), ('b', 'repeater', '2'), ('c', 'room', '3'),"
                     " ('d', 'companion', '4'), ('e', 'sensor', '5'), ('f', 'Repeater', '6'),"
                     " ('g', 'observer', '7'), ('h', NULL, '8');");
    const char *body = get_ok(&f, "/api/nodes?role=room&limit=1");
    cr_expect(strstr(body, "],\"total\":1,\"counts\":{\"companions\":1,\"repeaters\":2,"
                           "\"rooms\":1,\"sensors\":1}}\n"),
              "%s", body);
    body = get_ok(&f, "/api/nodes?limit=1");
    cr_expect(strstr(body, "],\"total\":8,\"counts\":{\"companions\":1,\"repeaters\":2,"
                           "\"rooms\":1,\"sensors\":1}}\n"),
              "%s", body);
    close_fixture(&f);
}

Test(nodes, role_counts_are_reused_within_their_interval_while_the_total_is_fresh)
{
    struct fixture f;
    open_fixture(&f, "INSERT INTO nodes (public_key, role, last_seen) VALUES ('a', 'room', '1');");
    const char *body = get_ok(&f, "/api/nodes");
    cr_expect(strstr(body, "\"total\":1,\"counts\":{\"companions\":0,\"repeaters\":0,\"rooms\":1,"),
              "%s", body);
    sqlite3 *writer;
    cr_assert_eq(mg_test_sqlite_open(f.db, &writer), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(writer,
                              "INSERT INTO nodes (public_key, role, last_seen) VALUES"
                              " ('b', 'room', '2');",
                              NULL, NULL, NULL),
                 SQLITE_OK);
    sqlite3_close(writer);
    body = get_ok(&f, "/api/nodes");
    cr_expect(strstr(body, "\"total\":2,\"counts\":{\"companions\":0,\"repeaters\":0,\"rooms\":1,"),
              "the counts should come from the last %lld ms: %s",
              MG_NODES_COUNTS_INTERVAL_NS / 1000000, body);
    mg_test_sleep_ms((int)(MG_NODES_COUNTS_INTERVAL_NS / 1000000) + 50);
    body = get_ok(&f, "/api/nodes");
    cr_expect(strstr(body, "\"total\":2,\"counts\":{\"companions\":0,\"repeaters\":0,\"rooms\":2,"),
              "the counts were not read again after their interval: %s", body);
    close_fixture(&f);
}

Test(nodes, every_shape_of_query_answers_right_after_the_statement_cache_turns_over)
{
    /* More shapes than the cache holds, twice over: evicted statements must not linger. */
    struct fixture f;
    open_fixture(&f, region_data);
    static const char *const targets[][2] = {
        {"/api/nodes", "n1,n2,n3,n4,n5"},
        {"/api/nodes?role=repeater", "n1,n2,n5"},
        {"/api/nodes?search=o", "n1,n2,n4"},
        {"/api/nodes?before=2026-04-03", "n3,n4,n5"},
        {"/api/nodes?lastHeard=1h", ""},
        {"/api/nodes?region=OAK", "n1,n2"},
        {"/api/nodes?sortBy=name", "n5,n4,n1,n3,n2"},
        {"/api/nodes?sortBy=packetCount", "n2,n5,n3,n4,n1"},
        {"/api/nodes?role=repeater&sortBy=name", "n5,n1,n2"},
        {"/api/nodes?role=room&search=t", "n3"},
        {"/api/nodes?region=SJC&sortBy=name", "n1,n3"},
        {"/api/nodes?region=SJC&role=room", "n3"},
        {"/api/nodes?region=OAK&search=w", "n2"},
        {"/api/nodes?before=2026-04-04&search=e", "n3,n5"},
        {"/api/nodes?before=2026-04-04&role=repeater", "n2,n5"},
        {"/api/nodes?before=2026-04-04&sortBy=packetCount", "n2,n5,n3,n4"},
        {"/api/nodes?region=SFO&before=2026-04-03", "n3"},
        {"/api/nodes?role=repeater&sortBy=packetCount", "n2,n5,n1"},
        {"/api/nodes?search=f&sortBy=name", "n5,n4"},
        {"/api/nodes?region=OAK&sortBy=packetCount", "n2,n1"},
    };
    for (int round = 0; round < 2; round++)
        for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++)
            cr_expect_str_eq(keys_of(&f, targets[i][0]), targets[i][1], "round %d: %s", round,
                             targets[i][0]);
    close_fixture(&f);
}

Test(nodes, a_second_database_opened_in_the_same_process_gets_its_own_answers)
{
    struct fixture a, b;
    open_fixture(&a, sorting_nodes);
    cr_expect_str_eq(keys_of(&a, "/api/nodes"), "k3,k1,k2,k0,k4");
    close_fixture(&a);
    open_fixture(&b, region_data);
    cr_expect_str_eq(keys_of(&b, "/api/nodes"), "n1,n2,n3,n4,n5");
    /* And back and forth while both are open. */
    open_fixture(&a, sorting_nodes);
    cr_expect_str_eq(keys_of(&a, "/api/nodes?limit=1"), "k3");
    cr_expect_str_eq(keys_of(&b, "/api/nodes?limit=1"), "n1");
    cr_expect_str_eq(keys_of(&a, "/api/nodes?limit=1"), "k3");
    close_fixture(&a);
    close_fixture(&b);
}

Test(nodes, no_transaction_or_statement_is_left_open_after_a_request)
{
    struct fixture f;
    open_fixture(&f, region_data);
    get_ok(&f, "/api/nodes?region=SJC&limit=1");
    cr_expect(sqlite3_get_autocommit(f.t.db.conn), "a transaction was left open");
    for (sqlite3_stmt *st = sqlite3_next_stmt(f.t.db.conn, NULL); st;
         st = sqlite3_next_stmt(f.t.db.conn, st))
        cr_expect_not(sqlite3_stmt_busy(st), "a statement is still running: %s", sqlite3_sql(st));
    close_fixture(&f);
}

/* --- query plans ------------------------------------------------------------------------ */

/* The EXPLAIN QUERY PLAN of one statement for q, one detail per line. */
static const char *plan_of(struct fixture *f, const struct mg_nodes_query *q,
                           enum mg_nodes_statement which)
{
    static char plan[4096];
    struct mg_buf sql;
    mg_buf_init(&sql);
    mg_buf_puts(&sql, "EXPLAIN QUERY PLAN ");
    mg_nodes_sql(&f->t.db.schema, q, which, &sql);
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(f->t.db.conn, mg_buf_cstr(&sql), -1, &st, NULL), SQLITE_OK,
                 "%s: %s", mg_buf_cstr(&sql), sqlite3_errmsg(f->t.db.conn));
    plan[0] = '\0';
    while (sqlite3_step(st) == SQLITE_ROW) {
        strncat(plan, (const char *)sqlite3_column_text(st, 3), sizeof plan - strlen(plan) - 2);
        strcat(plan, "\n");
    }
    sqlite3_finalize(st);
    mg_buf_free(&sql);
    return plan;
}

/*
 * Every table the plan reads (each SCAN or SEARCH line) is nodes, or the statement's own
 * intermediate results (page, matched); nodes itself is scanned.
 */
static void expect_only_nodes(struct fixture *f, const struct mg_nodes_query *q,
                              enum mg_nodes_statement which, const char *what)
{
    const char *plan = plan_of(f, q, which);
    cr_expect(strstr(plan, "SCAN nodes"), "%s: %s", what, plan);
    for (const char *line = plan; *line; line = strchr(line, '\n') + 1) {
        const char *name = NULL;
        if (strncmp(line, "SCAN ", 5) == 0)
            name = line + 5;
        else if (strncmp(line, "SEARCH ", 7) == 0)
            name = line + 7;
        if (!name)
            continue;
        size_t n = strcspn(name, " \n");
        bool ours = (n == 5 && strncmp(name, "nodes", 5) == 0) ||
                    (n == 4 && strncmp(name, "page", 4) == 0) ||
                    (n == 7 && strncmp(name, "matched", 7) == 0);
        cr_expect(ours, "%s reads %.*s:\n%s", what, (int)n, name, plan);
    }
}

Test(nodes, default_statements_read_only_the_nodes_table)
{
    struct fixture f;
    open_fixture(&f, NULL);
    struct mg_nodes_query q;
    mg_nodes_query_init(&q);
    expect_only_nodes(&f, &q, MG_NODES_SQL_PAGE, "the default page");
    expect_only_nodes(&f, &q, MG_NODES_SQL_TOTAL, "the default total");
    expect_only_nodes(&f, &q, MG_NODES_SQL_COUNTS, "the role counts");
    /* No filter: the total counts the primary key's index, not the table. */
    cr_expect(strstr(plan_of(&f, &q, MG_NODES_SQL_TOTAL), "USING COVERING INDEX"), "%s",
              plan_of(&f, &q, MG_NODES_SQL_TOTAL));
    q.role = "room";
    q.search = "x";
    q.before = "2026";
    q.last_heard_s = 3600;
    q.sort = MG_NODES_SORT_NAME;
    expect_only_nodes(&f, &q, MG_NODES_SQL_PAGE, "every nodes-only filter");
    expect_only_nodes(&f, &q, MG_NODES_SQL_TOTAL, "the total of every nodes-only filter");
    mg_nodes_query_free(&q);
    close_fixture(&f);
}

Test(nodes, region_statements_read_only_nodes_and_the_map_build_searches_by_index)
{
    struct fixture f;
    open_fixture(&f, NULL);
    struct mg_nodes_query q;
    mg_nodes_query_init(&q);
    mg_buf_puts(&q.regions, ",SJC,");
    /* The region comes from the region map: a request reads nodes only. */
    expect_only_nodes(&f, &q, MG_NODES_SQL_PAGE, "the page with a region");
    expect_only_nodes(&f, &q, MG_NODES_SQL_TOTAL, "the total with a region");
    expect_only_nodes(&f, &q, MG_NODES_SQL_COUNTS, "the role counts with a region");
    mg_nodes_query_free(&q);
    /* The map's one pass: ADVERTs by their index, each one's observations by theirs. */
    char sql[1024];
    snprintf(sql, sizeof sql, "EXPLAIN QUERY PLAN %s", mg_region_map_adverts_sql);
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(f.t.db.conn, sql, -1, &st, NULL), SQLITE_OK);
    char plan[2048] = "";
    while (sqlite3_step(st) == SQLITE_ROW) {
        strncat(plan, (const char *)sqlite3_column_text(st, 3), sizeof plan - strlen(plan) - 2);
        strcat(plan, "\n");
    }
    sqlite3_finalize(st);
    cr_expect(strstr(plan, "SEARCH t USING INDEX idx_transmissions_payload_type"), "%s", plan);
    cr_expect(strstr(plan, "SEARCH o USING INDEX idx_observations_transmission_id"), "%s", plan);
    cr_expect_not(strstr(plan, "SCAN o\n"), "%s", plan);
    close_fixture(&f);
}

Test(nodes, a_region_request_is_heavy_only_until_the_process_or_group_has_a_region_map)
{
    struct fixture f;
    open_fixture(&f, region_data);
    mg_region_map_forget(&f.t.env);
    cr_expect_str_eq(keys_of(&f, "/api/nodes?region=SJC"), "n1,n3");
    cr_expect_not(f.t.light, "the request that builds the map must be heavy");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?region=OAK"), "n1,n2");
    cr_expect(f.t.light, "a fresh map answers a region as a light request");
    cr_expect_str_eq(keys_of(&f, "/api/nodes?region=ALL"), "n1,n2,n3,n4,n5");
    cr_expect(f.t.light, "ALL is no region");
    close_fixture(&f);
}

/* --- the relay table's probe (node_relay.c) ---------------------------------------------- */

#define RELAY_KEY_A "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"
#define RELAY_KEY_B "b1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"

/* A repeater and a room with whole keys; every path of hops of 1 to 3 bytes. */
static const char relay_probe_data[] =
    "INSERT INTO nodes (public_key, name, role, last_seen, first_seen) VALUES"
    " ('" RELAY_KEY_A "', 'A', 'repeater', '2026-05-05T00:00:00Z', '2026-04-05'),"
    " ('" RELAY_KEY_B "', 'B', 'room', '2026-05-04T00:00:00Z', '2026-04-04');"
    "INSERT INTO transmissions (id, raw_hex, hash, first_seen, route_type, payload_type) VALUES"
    " (1, '01', 'h1', '2026-05-17T00:00:00Z', 1, 2), (2, '02', 'h2', '2026-05-17T01:00:00Z', 1, 2);"
    "INSERT INTO observations (transmission_id, observer_idx, path_json, timestamp) VALUES"
    " (1, 1, '[\"A1\",\"b1\"]', 1), (1, 1, '[\"A1B2C3\"]', 2), (2, 1, '[ \"a1\" , \"b1\" ]', 3);";

static void exec_on(const char *db, const char *sql)
{
    sqlite3 *conn;
    cr_assert_eq(sqlite3_open(db, &conn), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(conn, sql, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(conn));
    sqlite3_close(conn);
}

Test(nodes, the_list_waits_for_no_relay_table_while_no_key_can_be_a_hop)
{
    /* The list reads only a node's own entry (a hop equal to its whole key): with every hop
     * shorter than every key, it is answered without the table (no pass), light once the
     * probe is known, and byte for byte as the table answers it. */
    struct fixture f;
    open_fixture(&f, relay_probe_data);
    char *before = strdup(get_ok(&f, "/api/nodes"));
    cr_expect_not(mg_node_relay_exist(f.t.db.conn), "the list made the relay pass");
    cr_expect(strstr(before, "\"relay_count_24h\":0"), "%s", before);
    cr_expect_str_eq(get_ok(&f, "/api/nodes"), before);
    cr_expect(f.t.light, "the list is heavy while the relay pass has not run");
    cr_assert_eq(mg_node_relay_keep_behind(&f.t.env, mg_monotonic_ns(), mg_realtime_ns()),
                 SQLITE_OK);
    cr_assert(mg_node_relay_exist(f.t.db.conn));
    cr_expect_str_eq(get_ok(&f, "/api/nodes"), before, "the table answers otherwise");
    free(before);

    /* A path that names A by its whole key (7 characters or more): the list needs the table,
     * and is answered from it (A's last relay: under its key or its first byte, a1). */
    exec_on(f.db,
            "UPDATE observations SET path_json = '[\"A1\",\"" RELAY_KEY_A "\"]' WHERE id = 2");
    mg_node_relay_forget(&f.t.env);
    const char *after = get_ok(&f, "/api/nodes");
    cr_expect(mg_node_relay_exist(f.t.db.conn), "the list did not wait for the table");
    cr_expect(strstr(after, "\"last_relayed\":\"2026-05-17T01:00:00Z\""), "%s", after);
    close_fixture(&f);
}

Test(nodes, a_short_node_key_makes_the_list_wait_for_the_relay_table)
{
    /* A key of 2 characters can equal a 1-byte hop: the list's fields need the table. */
    struct fixture f;
    open_fixture(&f, relay_probe_data);
    exec_on(f.db, "UPDATE nodes SET public_key = 'a1' WHERE name = 'A'");
    const char *b = get_ok(&f, "/api/nodes");
    cr_expect(mg_node_relay_exist(f.t.db.conn), "the list answered without the table");
    cr_expect(strstr(b, "\"relay_count_24h\":0"), "%s", b);
    cr_expect(strstr(b, "\"last_relayed\":\"2026-05-17T01:00:00Z\""), "%s", b);
    close_fixture(&f);
}

/* --- CoreScope's own database ----------------------------------------------------------- */

#define COMMITTED_FIXTURE MESHGATE_SOURCE_DIR "/../shared/data/corescope-e2e-fixture.db"

Test(nodes, corescope_fixture_lists_its_200_nodes_and_counts_them_by_role)
{
    if (access(COMMITTED_FIXTURE, R_OK) != 0)
        cr_skip_test("%s is not here (CI has it)", COMMITTED_FIXTURE);
    struct mg_test_ctx t;
    cr_assert(mg_test_ctx_open(&t, COMMITTED_FIXTURE));
    cr_assert_eq(mg_test_ctx_get(&t, "/api/nodes?limit=2000"), 200);
    const char *body = t.res.body.data;
    cr_expect(strstr(body, "],\"total\":200,\"counts\":{\"companions\":9,\"repeaters\":168,"
                           "\"rooms\":23,\"sensors\":0}}\n"),
              "%.200s", body + (strlen(body) > 200 ? strlen(body) - 200 : 0));
    size_t nodes = 0;
    for (const char *p = strstr(body, "\"public_key\":"); p; p = strstr(p + 1, "\"public_key\":"))
        nodes++;
    cr_expect_eq(nodes, 200);
    cr_assert_eq(mg_test_ctx_get(&t, "/api/nodes?region=SJC&limit=1"), 200);
    cr_expect(strstr(t.res.body.data, "],\"total\":20,"), "%s", t.res.body.data);
    mg_test_ctx_close(&t);
}

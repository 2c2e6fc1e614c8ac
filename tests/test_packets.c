/* SPDX-License-Identifier: ISC */
/*
 * GET /api/packets: small hand-built databases with known answers, called in-process through
 * the real parser and dispatch; the query plans of the statements the handler runs; and,
 * when ../shared/data has it, CoreScope's own end-to-end database.
 */
#include "ep_packets.h"
#include "packet_scan.h"
#include "harness.h"
#include "inproc.h"

#include "router.h"

#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TestSuite(packets, .timeout = 60);

struct fixture {
    char dir[128];
    char db[256];
    struct mg_test_ctx t;
};

static void open_fixture_schema(struct fixture *f, bool migrated, const char *sql)
{
    mg_test_tmpdir(f->dir, sizeof f->dir);
    cr_assert(f->dir[0], "no temporary directory");
    snprintf(f->db, sizeof f->db, "%s/packets.db", f->dir);
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

/* The values of every "key":value in body, in order, comma-separated (strings unquoted). */
static const char *values_of(const char *body, const char *key)
{
    static char out[65536];
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    out[0] = '\0';
    size_t used = 0;
    for (const char *p = strstr(body, pattern); p; p = strstr(p, pattern)) {
        p += strlen(pattern);
        if (*p == '"')
            p++;
        size_t n = strcspn(p, "\",}]");
        cr_assert(used + n + 2 < sizeof out);
        if (used)
            out[used++] = ',';
        memcpy(out + used, p, n);
        used += n;
        out[used] = '\0';
        p += n;
    }
    return out;
}

/* The packet ids of the answer to target (a request without expand), in order. */
static const char *ids_of(struct fixture *f, const char *target)
{
    return values_of(get_ok(f, target), "id");
}

static long long total_of(struct fixture *f, const char *target)
{
    const char *body = get_ok(f, target);
    const char *p = strstr(body, "],\"total\":");
    cr_assert(p, "no total in %s", body);
    return strtoll(p + strlen("],\"total\":"), NULL, 10);
}

static void expect_bad_request(struct fixture *f, const char *target, const char *names)
{
    int status = mg_test_ctx_get(&f->t, target);
    const char *body = f->t.res.body.data;
    cr_expect_eq(status, 400, "%s answered %d: %s", target, status, body);
    cr_expect(strncmp(body, "{\"error\":\"", 10) == 0, "%s: not an error body: %s", target, body);
    cr_expect(strstr(body, names), "%s: the error does not name %s: %s", target, names, body);
}

/*
 * Walks a JSON text and checks that the keys of every object below the envelope (level 2
 * and deeper) are in strictly increasing bytewise order. Returns NULL when they are, else
 * the offending key.
 */
static const char *unsorted_key(const char *body)
{
    static char bad[128];
    enum { MAX_DEPTH = 16 };
    bool is_object[MAX_DEPTH];
    const char *last_key[MAX_DEPTH];
    size_t last_len[MAX_DEPTH];
    int depth = 0, objects = 0;
    int object_level[MAX_DEPTH];
    for (const char *p = body; *p; p++) {
        if (*p == '{' || *p == '[') {
            cr_assert(depth < MAX_DEPTH - 1);
            depth++;
            is_object[depth] = *p == '{';
            if (is_object[depth])
                objects++;
            object_level[depth] = objects;
            last_key[depth] = NULL;
            last_len[depth] = 0;
        } else if (*p == '}' || *p == ']') {
            if (is_object[depth])
                objects--;
            depth--;
        } else if (*p == '"') {
            const char *start = ++p;
            while (*p && *p != '"')
                p += *p == '\\' ? 2 : 1;
            size_t len = (size_t)(p - start);
            if (is_object[depth] && p[1] == ':') {
                if (object_level[depth] >= 2 && last_key[depth]) {
                    size_t n = len < last_len[depth] ? len : last_len[depth];
                    int c = memcmp(last_key[depth], start, n);
                    if (c > 0 || (c == 0 && last_len[depth] >= len)) {
                        snprintf(bad, sizeof bad, "%.*s after %.*s", (int)len, start,
                                 (int)last_len[depth], last_key[depth]);
                        return bad;
                    }
                }
                last_key[depth] = start;
                last_len[depth] = len;
            }
        }
    }
    return NULL;
}

#define PK_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define PK_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define PK_B_UPPER "BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"
#define PK_C "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"

/*
 * Six transmissions for the filters. Observer 3 has a lowercase id and an empty IATA;
 * transmission 4 has no observation; 6 has a decoded_json that is not JSON.
 */
static const char six_packets[] =
    "INSERT INTO observers (rowid, id, name, iata) VALUES"
    " (1, 'AAAA01', 'Alpha', 'SFO'), (2, 'BBBB02', 'Bravo', 'OAK'), (3, 'cccc03', 'Charlie', '');"
    "INSERT INTO nodes (public_key, name, role, last_seen) VALUES"
    " ('" PK_A "', 'Node A', 'repeater', '2026-05-10T00:00:00Z'),"
    " ('" PK_B "', 'Node B', 'companion', '2026-05-10T00:00:00Z');"
    "INSERT INTO transmissions (id, raw_hex, hash, first_seen, route_type, payload_type,"
    " decoded_json, from_pubkey) VALUES"
    " (1, '11', 'abcdef0000000001', '2026-05-01T00:00:00Z', 1, 4, '{\"type\":\"ADVERT\"}',"
    "  '" PK_A "'),"
    " (2, '22', 'abcdef0000000002', '2026-05-02T00:00:00Z', 2, 5,"
    "  '{\"type\":\"CHAN\",\"channelHashHex\":\"D9\",\"channel\":\"#test\"}', NULL),"
    " (3, '33', 'abcdef0000000003', '2026-05-03T00:00:00Z', 1, 5,"
    "  '{\"type\":\"GRP_TXT\",\"channelHashHex\":\"C3\"}', NULL),"
    " (4, '44', 'abcdef0000000004', '2026-05-04T00:00:00Z', 0, 2, '{\"type\":\"TXT_MSG\"}', NULL),"
    " (5, '55', 'abcdef0000000005', '2026-05-05T00:00:00Z', 1, 4, '{\"type\":\"ADVERT\"}',"
    "  '" PK_B "'),"
    " (6, '66', 'abcdef0000000006', '2026-05-06T00:00:00Z', 1, 5, 'not json {', NULL);"
    "INSERT INTO observations (id, transmission_id, observer_idx, direction, snr, rssi,"
    " path_json, timestamp, resolved_path) VALUES"
    " (1, 1, 1, 'rx', 1.5, -80, '[\"AA\"]', 1779041349, '[\"" PK_A "\"]'),"
    " (2, 2, 2, 'rx', 2, -81, '[\"AA\",\"BB\"]', 1779041350, '[null,\"" PK_B "\"]'),"
    " (3, 3, 3, 'rx', 3, -82, '[]', 1779041351, NULL),"
    " (4, 5, 1, 'rx', 4, -83, '[\"BB\"]', 1779041352, NULL),"
    " (5, 6, 2, 'rx', 5, -84, NULL, 1779041353, NULL);";

/* --- the body ------------------------------------------------------------------------- */

Test(packets, one_packet_answer_is_exact_with_keys_sorted_and_envelope_in_fixed_order)
{
    struct fixture f;
    open_fixture(&f, "INSERT INTO observers (rowid, id, name, iata) VALUES"
                     " (7, 'OBS1', 'Observer One', 'SFO');"
                     "INSERT INTO transmissions (id, raw_hex, hash, first_seen, route_type,"
                     " payload_type, decoded_json) VALUES (1, 'AABB', '0123456789abcdef',"
                     " '2026-05-17T18:13:27Z', 1, 4, '{\"type\":\"ADVERT\"}');"
                     "INSERT INTO observations (id, transmission_id, observer_idx, direction,"
                     " snr, rssi, path_json, timestamp, resolved_path) VALUES (1, 1, 7, 'rx',"
                     " 5.25, -90, '[\"7D1D\",\"DA2A\"]', 1779041349, '[\"" PK_A "\",null]');");
    cr_expect_str_eq(
        get_ok(&f, "/api/packets"),
        "{\"packets\":[{\"_parsedPath\":[\"7D1D\",\"DA2A\"],"
        "\"decoded_json\":\"{\\\"type\\\":\\\"ADVERT\\\"}\",\"direction\":\"rx\","
        "\"first_seen\":\"2026-05-17T18:13:27Z\",\"hash\":\"0123456789abcdef\",\"id\":1,"
        "\"observation_count\":1,\"observer_iata\":\"SFO\",\"observer_id\":\"OBS1\","
        "\"observer_name\":\"Observer One\",\"path_json\":\"[\\\"7D1D\\\",\\\"DA2A\\\"]\","
        "\"payload_type\":4,\"raw_hex\":\"AABB\",\"resolved_path\":[\"" PK_A "\",null],"
        "\"route_type\":1,\"rssi\":-90,\"scope_name\":null,\"snr\":5.25,"
        "\"timestamp\":\"2026-05-17T18:13:27Z\"}],\"total\":1,\"limit\":50,\"offset\":0}\n");
    cr_expect_str_eq(f.t.res.content_type, "application/json");
    cr_expect(f.t.res.no_store, "no Cache-Control: no-store");
    close_fixture(&f);
}

Test(packets, default_page_is_newest_first_with_every_object_keys_sorted)
{
    struct fixture f;
    open_fixture(&f, six_packets);
    const char *body = get_ok(&f, "/api/packets");
    cr_expect_str_eq(values_of(body, "id"), "6,5,4,3,2,1");
    cr_expect(strstr(body, "],\"total\":6,\"limit\":50,\"offset\":0}\n"), "%s", body);
    const char *bad = unsorted_key(body);
    cr_expect_null(bad, "keys out of order: %s in %s", bad, body);
    body = get_ok(&f, "/api/packets?expand=observations");
    bad = unsorted_key(body);
    cr_expect_null(bad, "keys out of order with expand: %s in %s", bad, body);
    close_fixture(&f);
}

Test(packets, route_is_registered_as_a_heavy_endpoint)
{
    bool found = false;
    for (unsigned i = 0; i < mg_route_table_len; i++) {
        if (strcmp(mg_routes[i].template, "/api/packets") == 0) {
            found = true;
            cr_expect_eq(mg_routes[i].cost, MG_COST_HEAVY);
            cr_expect(mg_routes[i].handler == mg_handle_packets);
        }
    }
    cr_expect(found, "/api/packets is not in the route table");
}

Test(packets, best_observation_has_the_most_hops_and_among_equal_times_the_highest_id)
{
    struct fixture f;
    open_fixture(&f, "INSERT INTO observers (rowid, id, name) VALUES (1, 'O1', 'One'),"
                     " (2, 'O2', 'Two'), (3, 'O3', 'Three');"
                     "INSERT INTO transmissions (id, raw_hex, hash, first_seen) VALUES"
                     " (1, '', 'h1', '2026-05-01T00:00:00Z');"
                     "INSERT INTO observations (id, transmission_id, observer_idx, snr,"
                     " path_json, timestamp) VALUES"
                     " (10, 1, 1, 10, '[\"A\",\"B\"]', 1),"
                     " (11, 1, 1, 11, '[\"C\",\"D\",\"E\"]', 2),"
                     " (12, 1, 2, 12, '[\"F\",\"G\",\"H\"]', 3),"
                     " (13, 1, 3, 13, '[\"I\"]', 4),"
                     " (14, 1, 3, 14, '[\"J\",\"K\",\"L\",\"M\",', 5);");
    const char *body = get_ok(&f, "/api/packets");
    cr_expect(strstr(body, "\"_parsedPath\":[\"F\",\"G\",\"H\"]"), "%s", body);
    cr_expect(strstr(body, "\"observer_name\":\"Two\""), "%s", body);
    cr_expect(strstr(body, "\"snr\":12"), "%s", body);
    cr_expect(strstr(body, "\"observation_count\":5"), "%s", body);
    close_fixture(&f);
}

Test(packets, observation_count_counts_distinct_observer_and_path_pairs)
{
    struct fixture f;
    open_fixture(&f, "INSERT INTO observers (rowid, id) VALUES (1, 'O1'), (2, 'O2');"
                     "INSERT INTO transmissions (id, raw_hex, hash, first_seen) VALUES"
                     " (1, '', 'h1', '2026-05-01T00:00:00Z');"
                     "INSERT INTO observations (transmission_id, observer_idx, path_json,"
                     " timestamp) VALUES"
                     " (1, 1, '[\"A\"]', 1), (1, 1, '[\"A\"]', 2), (1, 1, '[\"B\"]', 3),"
                     " (1, 2, '[\"A\"]', 4), (1, 2, NULL, 5), (1, 2, NULL, 6),"
                     " (1, NULL, NULL, 7), (1, NULL, NULL, 8), (1, 2, '', 9);");
    /* SQLite's own DISTINCT is the reference. */
    sqlite3 *db;
    cr_assert_eq(mg_test_sqlite_open_v2(f.db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    sqlite3_prepare_v2(db,
                       "SELECT count(*) FROM (SELECT DISTINCT observer_idx, path_json"
                       " FROM observations WHERE transmission_id = 1)",
                       -1, &st, NULL);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_eq(sqlite3_column_int(st, 0), 6);
    sqlite3_finalize(st);
    sqlite3_close(db);
    cr_expect_str_eq(values_of(get_ok(&f, "/api/packets"), "observation_count"), "6");
    close_fixture(&f);
}

Test(packets, transmission_without_observations_has_null_observation_fields)
{
    struct fixture f;
    open_fixture(&f, "INSERT INTO transmissions (id, raw_hex, hash, first_seen, route_type,"
                     " payload_type, decoded_json) VALUES (9, 'FF', 'h9', '2026-05-01T00:00:00Z',"
                     " 2, 1, NULL);");
    cr_expect_str_eq(
        get_ok(&f, "/api/packets"),
        "{\"packets\":[{\"_parsedPath\":null,\"decoded_json\":null,\"direction\":null,"
        "\"first_seen\":\"2026-05-01T00:00:00Z\",\"hash\":\"h9\",\"id\":9,"
        "\"observation_count\":0,\"observer_iata\":null,\"observer_id\":null,"
        "\"observer_name\":null,\"path_json\":null,\"payload_type\":1,\"raw_hex\":\"FF\","
        "\"route_type\":2,\"rssi\":null,\"scope_name\":null,\"snr\":null,"
        "\"timestamp\":\"2026-05-01T00:00:00Z\"}],\"total\":1,\"limit\":50,\"offset\":0}\n");
    get_ok(&f, "/api/packets?expand=observations");
    cr_expect(strstr(f.t.res.body.data, "\"observations\":[],"), "%s", f.t.res.body.data);
    close_fixture(&f);
}

Test(packets, empty_and_null_paths_give_a_null_parsed_path_and_an_empty_iata_is_null)
{
    struct fixture f;
    open_fixture(&f, six_packets);
    const char *body = get_ok(&f, "/api/packets?hash=abcdef0000000003");
    cr_expect(strstr(body, "\"_parsedPath\":null,"), "%s", body);
    cr_expect(strstr(body, "\"path_json\":\"[]\","), "%s", body);
    cr_expect(strstr(body, "\"observer_iata\":null,"), "%s", body);
    cr_expect(strstr(body, "\"observer_id\":\"cccc03\","), "%s", body);
    cr_expect_not(strstr(body, "resolved_path"), "%s", body);
    body = get_ok(&f, "/api/packets?hash=abcdef0000000006");
    cr_expect(strstr(body, "\"_parsedPath\":null,"), "%s", body);
    cr_expect(strstr(body, "\"path_json\":null,"), "%s", body);
    close_fixture(&f);
}

Test(packets, stored_arrays_are_parsed_and_written_again_escaped)
{
    struct fixture f;
    open_fixture(&f, "INSERT INTO transmissions (id, raw_hex, hash, first_seen) VALUES"
                     " (1, '', 'h1', '2026-05-01T00:00:00Z');"
                     "INSERT INTO observations (transmission_id, path_json, timestamp,"
                     " resolved_path) VALUES"
                     " (1, ' [ \"A\\\"B\" , \"\\u003c/x\\u003e\\ud83d\\ude00\" ] ', 1,"
                     " '[null, \"k\\\\\", null]');");
    const char *body = get_ok(&f, "/api/packets");
    cr_expect(strstr(body, "\"_parsedPath\":[\"A\\\"B\",\"\\u003c/x\\u003e\xF0\x9F\x98\x80\"],"),
              "%s", body);
    cr_expect(strstr(body, "\"resolved_path\":[null,\"k\\\\\",null],"), "%s", body);
    close_fixture(&f);
}

Test(packets, malformed_stored_arrays_count_as_absent)
{
    struct fixture f;
    open_fixture(&f, "INSERT INTO transmissions (id, raw_hex, hash, first_seen) VALUES"
                     " (1, '', 'h1', '2026-05-01T00:00:00Z');"
                     "INSERT INTO observations (transmission_id, path_json, timestamp,"
                     " resolved_path) VALUES (1, '[\"AB\",', 1, 'garbage'),"
                     " (1, '[\"AB\"] x', 2, '[1,2]'), (1, '{\"a\":1}', 3, '[\"a\" \"b\"]');");
    const char *body = get_ok(&f, "/api/packets?expand=observations");
    cr_expect(strstr(body, "\"_parsedPath\":null,"), "%s", body);
    cr_expect(strstr(body, "\"path_json\":\"{\\\"a\\\":1}\","), "%s", body);
    cr_expect_not(strstr(body, "resolved_path"), "%s", body);
    close_fixture(&f);
}

Test(packets, decoded_json_is_a_string_escaped_by_the_contract)
{
    struct fixture f;
    open_fixture(&f, "INSERT INTO transmissions (id, raw_hex, hash, first_seen, decoded_json)"
                     " VALUES (1, '', 'h1', '2026-05-01T00:00:00Z',"
                     " '{\"text\":\"<script>alert(1)</script>&\xE2\x80\xA8\"}');");
    const char *body = get_ok(&f, "/api/packets");
    cr_expect(strstr(body, "\"decoded_json\":\"{\\\"text\\\":\\\"\\u003cscript\\u003ealert(1)"
                           "\\u003c/script\\u003e\\u0026\\u2028\\\"}\","),
              "%s", body);
    cr_expect_not(strchr(body, '<'), "%s", body);
    close_fixture(&f);
}

Test(packets, migrated_schema_reports_scope_name)
{
    struct fixture f;
    open_fixture_schema(&f, true,
                        "INSERT INTO transmissions (id, raw_hex, hash, first_seen, scope_name)"
                        " VALUES (1, '', 'h1', '2026-05-01T00:00:00Z', '#bay'),"
                        " (2, '', 'h2', '2026-05-02T00:00:00Z', NULL);"
                        "INSERT INTO observations (transmission_id, path_json, timestamp,"
                        " raw_hex) VALUES (1, '[\"AA\"]', 1, 'ABCD');");
    const char *body = get_ok(&f, "/api/packets");
    cr_expect_str_eq(values_of(body, "scope_name"), "null,#bay");
    cr_expect_null(unsorted_key(body), "%s", body);
    close_fixture(&f);
}

Test(packets, empty_result_answers_an_empty_list_not_null)
{
    struct fixture f;
    open_fixture(&f, NULL);
    cr_expect_str_eq(get_ok(&f, "/api/packets"),
                     "{\"packets\":[],\"total\":0,\"limit\":50,\"offset\":0}\n");
    close_fixture(&f);
    open_fixture(&f, six_packets);
    cr_expect_str_eq(get_ok(&f, "/api/packets?type=99&limit=5&offset=3&expand=observations"),
                     "{\"packets\":[],\"total\":0,\"limit\":5,\"offset\":3}\n");
    close_fixture(&f);
}

/* --- expand=observations ------------------------------------------------------------------ */

Test(packets,
     expanded_observations_are_newest_first_with_formatted_time_and_resolved_path_where_present)
{
    struct fixture f;
    open_fixture(&f, "INSERT INTO observers (rowid, id, name, iata) VALUES (1, 'O1', 'One', 'SJC'),"
                     " (2, 'O2', NULL, '');"
                     "INSERT INTO transmissions (id, raw_hex, hash, first_seen) VALUES"
                     " (1, '', 'h1', '2026-05-01T00:00:00Z');"
                     "INSERT INTO observations (id, transmission_id, observer_idx, direction,"
                     " snr, rssi, path_json, timestamp, resolved_path) VALUES"
                     " (20, 1, 1, 'rx', -3.75, -90, '[\"AA\",\"BB\"]', 1779041349,"
                     "  '[\"" PK_A "\",null]'),"
                     " (22, 1, 2, NULL, NULL, NULL, '[\"CC\"]', 1779041351, NULL),"
                     " (21, 1, 1, 'tx', 0.5, -70, '[]', 1779041350, NULL);");
    const char *body = get_ok(&f, "/api/packets?expand=observations");
    const char *obs = strstr(body, "\"observations\":[");
    cr_assert(obs, "%s", body);
    cr_expect_str_eq(values_of(obs, "id"), "22,21,20");
    cr_expect(strstr(obs, "[{\"direction\":null,\"id\":22,\"observer_iata\":null,"
                          "\"observer_id\":\"O2\",\"observer_name\":null,"
                          "\"path_json\":\"[\\\"CC\\\"]\",\"rssi\":null,\"snr\":null,"
                          "\"timestamp\":\"2026-05-17T18:09:11.000Z\"},"),
              "%s", body);
    cr_expect(strstr(obs, "{\"direction\":\"rx\",\"id\":20,\"observer_iata\":\"SJC\","
                          "\"observer_id\":\"O1\",\"observer_name\":\"One\","
                          "\"path_json\":\"[\\\"AA\\\",\\\"BB\\\"]\","
                          "\"resolved_path\":[\"" PK_A "\",null],\"rssi\":-90,\"snr\":-3.75,"
                          "\"timestamp\":\"2026-05-17T18:09:09.000Z\"}],\"observer_iata\":"),
              "%s", body);
    /* Resolved paths: one in the list (id 20) and one for the packet (20 is the best). */
    cr_expect_str_eq(values_of(body, "resolved_path"), "[,[");
    cr_expect_null(unsorted_key(body), "%s", body);
    close_fixture(&f);
}

/* --- filters ------------------------------------------------------------------------------ */

Test(packets, type_and_route_filter_on_payload_and_route_type)
{
    struct fixture f;
    open_fixture(&f, six_packets);
    cr_expect_str_eq(ids_of(&f, "/api/packets?type=4"), "5,1");
    cr_expect_str_eq(ids_of(&f, "/api/packets?type=5"), "6,3,2");
    cr_expect_str_eq(ids_of(&f, "/api/packets?route=1"), "6,5,3,1");
    cr_expect_str_eq(ids_of(&f, "/api/packets?route=2"), "2");
    cr_expect_str_eq(ids_of(&f, "/api/packets?type=5&route=1"), "6,3");
    cr_expect_eq(total_of(&f, "/api/packets?type=5&route=1"), 2);
    close_fixture(&f);
}

Test(packets, observer_filter_is_case_insensitive_and_takes_a_comma_list)
{
    struct fixture f;
    open_fixture(&f, six_packets);
    cr_expect_str_eq(ids_of(&f, "/api/packets?observer=aaaa01"), "5,1");
    cr_expect_str_eq(ids_of(&f, "/api/packets?observer=%20BBBB02%20,CCCC03"), "6,3,2");
    cr_expect_str_eq(ids_of(&f, "/api/packets?observer=AAAA01,,cccc03"), "5,3,1");
    cr_expect_eq(total_of(&f, "/api/packets?observer=AAAA01,cccc03"), 3);
    cr_expect_str_eq(ids_of(&f, "/api/packets?observer=NOBODY"), "");
    cr_expect_eq(total_of(&f, "/api/packets?observer=NOBODY"), 0);
    close_fixture(&f);
}

Test(packets, hash_filter_matches_one_transmission_in_any_case)
{
    struct fixture f;
    open_fixture(&f, six_packets);
    cr_expect_str_eq(ids_of(&f, "/api/packets?hash=abcdef0000000003"), "3");
    cr_expect_str_eq(ids_of(&f, "/api/packets?hash=ABCDEF0000000004"), "4");
    cr_expect_str_eq(ids_of(&f, "/api/packets?hash=abcdef"), "");
    close_fixture(&f);
}

Test(packets, since_and_until_are_strict_string_comparisons_on_first_seen)
{
    struct fixture f;
    open_fixture(&f, six_packets);
    cr_expect_str_eq(ids_of(&f, "/api/packets?since=2026-05-03T00:00:00Z"), "6,5,4");
    cr_expect_str_eq(ids_of(&f, "/api/packets?until=2026-05-03T00:00:00Z"), "2,1");
    cr_expect_str_eq(ids_of(&f, "/api/packets?since=2026-05-01T00:00:00Z&until=2026-05-04"), "3,2");
    /* A string comparison: "2026-05-05" sorts before "2026-05-05T00:00:00Z". */
    cr_expect_str_eq(ids_of(&f, "/api/packets?since=2026-05-05"), "6,5");
    close_fixture(&f);
}

Test(packets, region_filter_trims_uppercases_and_ignores_all)
{
    struct fixture f;
    open_fixture(&f, six_packets);
    cr_expect_str_eq(ids_of(&f, "/api/packets?region=sfo"), "5,1");
    cr_expect_str_eq(ids_of(&f, "/api/packets?region=%20oak%20,ALL"), "6,2");
    cr_expect_str_eq(ids_of(&f, "/api/packets?region=SFO,oak"), "6,5,2,1");
    cr_expect_str_eq(ids_of(&f, "/api/packets?region=all"), "6,5,4,3,2,1");
    cr_expect_str_eq(ids_of(&f, "/api/packets?region=XXX"), "");
    cr_expect_eq(total_of(&f, "/api/packets?region=OAK"), 2);
    close_fixture(&f);
}

Test(packets, node_filter_takes_a_pubkey_or_a_name_and_looks_in_resolved_paths)
{
    struct fixture f;
    open_fixture(&f, six_packets);
    cr_expect_str_eq(ids_of(&f, "/api/packets?node=" PK_A), "1");
    /* B sent 5 and is a resolved hop of 2. */
    cr_expect_str_eq(ids_of(&f, "/api/packets?node=" PK_B), "5,2");
    cr_expect_str_eq(ids_of(&f, "/api/packets?node=BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"
                                "BBBBBBBBBBBBBBBBBB"),
                     "5,2");
    cr_expect_str_eq(ids_of(&f, "/api/packets?node=Node%20B"), "5,2");
    cr_expect_eq(total_of(&f, "/api/packets?node=Node%20B"), 2);
    cr_expect_str_eq(ids_of(&f, "/api/packets?node=" PK_C), "");
    cr_expect_str_eq(ids_of(&f, "/api/packets?node=node%20b"), "");
    cr_expect_eq(total_of(&f, "/api/packets?node=Nobody"), 0);
    close_fixture(&f);
}

Test(packets, channel_filter_matches_the_decoded_name_or_enc_and_the_hash_hex)
{
    struct fixture f;
    open_fixture(&f, six_packets);
    cr_expect_str_eq(ids_of(&f, "/api/packets?channel=%23test"), "2");
    cr_expect_str_eq(ids_of(&f, "/api/packets?channel=enc_C3"), "3");
    cr_expect_str_eq(ids_of(&f, "/api/packets?channel=enc_c3"), "3");
    /* The contract's rule: enc_ + channelHashHex, decrypted or not. */
    cr_expect_str_eq(ids_of(&f, "/api/packets?channel=enc_D9"), "2");
    cr_expect_str_eq(ids_of(&f, "/api/packets?channel=%23other"), "");
    cr_expect_str_eq(ids_of(&f, "/api/packets?channel=enc_"), "");
    cr_expect_eq(total_of(&f, "/api/packets?channel=%23test"), 1);
    close_fixture(&f);
}

Test(packets, filters_combine)
{
    struct fixture f;
    open_fixture(&f, six_packets);
    cr_expect_str_eq(ids_of(&f, "/api/packets?type=4&region=SFO&node=Node%20B"), "5");
    cr_expect_str_eq(ids_of(&f, "/api/packets?type=5&observer=BBBB02&since=2026-05-03"), "6");
    cr_expect_eq(total_of(&f, "/api/packets?route=1&region=OAK,SFO&order=asc"), 3);
    close_fixture(&f);
}

/* Every form of the observation filters gives the same rows and count. */
static const char *rows_of_form(struct fixture *f, struct mg_packets_filter *q,
                                enum mg_packets_statement which)
{
    static char out[256];
    struct mg_buf sql;
    mg_buf_init(&sql);
    mg_packets_sql(&f->t.db, q, which, &sql);
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(f->t.db.conn, mg_buf_cstr(&sql), -1, &st, NULL), SQLITE_OK,
                 "%s: %s", mg_buf_cstr(&sql), sqlite3_errmsg(f->t.db.conn));
    int n = mg_packets_bind(&f->t.db, q, st);
    cr_assert_geq(n, 0);
    if (which == MG_PACKETS_SQL_PAGE) {
        sqlite3_bind_int64(st, n + 1, q->limit);
        sqlite3_bind_int64(st, n + 2, q->offset);
    }
    out[0] = '\0';
    while (sqlite3_step(st) == SQLITE_ROW)
        snprintf(out + strlen(out), sizeof out - strlen(out), "%s%lld", out[0] ? "," : "",
                 (long long)sqlite3_column_int64(st, 0));
    sqlite3_finalize(st);
    mg_buf_free(&sql);
    return out;
}

Test(packets, probe_and_list_forms_of_observation_filters_agree)
{
    struct fixture f;
    open_fixture(&f, six_packets);
    static const struct {
        const char *observer, *region, *node, *rows;
    } cases[] = {
        {"aaaa01,CCCC03", NULL, NULL, "5,3,1"},
        {NULL, "oak", NULL, "6,2"},
        {NULL, NULL, PK_B, "5,2"},
        {"AAAA01", "SFO", PK_A, "1"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int form = MG_PACKETS_PROBE; form <= MG_PACKETS_LIST_SCAN; form++) {
            struct mg_packets_filter q = {.limit = 50};
            q.observer = cases[c].observer;
            q.region = cases[c].region;
            q.node = cases[c].node;
            if (q.node)
                snprintf(q.node_pubkey, sizeof q.node_pubkey, "%s", q.node);
            q.observer_form = q.region_form = q.node_form = (enum mg_packets_form)form;
            cr_expect_str_eq(rows_of_form(&f, &q, MG_PACKETS_SQL_PAGE), cases[c].rows,
                             "case %zu form %d", c, form);
            char count[32];
            snprintf(count, sizeof count, "%zu", (strlen(cases[c].rows) + 1) / 2);
            cr_expect_str_eq(rows_of_form(&f, &q, MG_PACKETS_SQL_COUNT), count, "case %zu form %d",
                             c, form);
        }
    }
    close_fixture(&f);
}

/* --- paging and order ------------------------------------------------------------------- */

Test(packets, pages_follow_each_other_and_keep_the_total)
{
    struct fixture f;
    open_fixture(&f, six_packets);
    cr_expect_str_eq(ids_of(&f, "/api/packets?limit=2"), "6,5");
    cr_expect_str_eq(ids_of(&f, "/api/packets?limit=2&offset=2"), "4,3");
    cr_expect_str_eq(ids_of(&f, "/api/packets?limit=2&offset=4"), "2,1");
    cr_expect_str_eq(ids_of(&f, "/api/packets?limit=2&offset=6"), "");
    const char *body = get_ok(&f, "/api/packets?limit=2&offset=6");
    cr_expect(strstr(body, "\"total\":6,\"limit\":2,\"offset\":6}"), "%s", body);
    close_fixture(&f);
}

Test(packets, order_asc_is_oldest_id_first)
{
    struct fixture f;
    open_fixture(&f, six_packets);
    cr_expect_str_eq(ids_of(&f, "/api/packets?order=asc"), "1,2,3,4,5,6");
    cr_expect_str_eq(ids_of(&f, "/api/packets?order=asc&limit=2&offset=1"), "2,3");
    cr_expect_str_eq(ids_of(&f, "/api/packets?order=desc&limit=2"), "6,5");
    close_fixture(&f);
}

/*
 * Every parameter of /api/packets with a missing, empty, malformed and out-of-range value, and
 * what CoreScope's handler answers for it (params.h, ep_packets.c): meshgate answers the same,
 * except where CoreScope crashes (a negative offset: its handler panics; meshgate answers 400)
 * or contradicts its other routes (region with no code left: no filter, as on its nodes).
 */
Test(packets, parameters_read_as_corescopes_handler_reads_them)
{
    static const struct {
        const char *target;
        const char *ids;  /* the page's ids */
        const char *tail; /* how the answer ends */
    } cases[] = {
        {"/api/packets", "6,5,4,3,2,1", "\"total\":6,\"limit\":50,\"offset\":0}"},
        {"/api/packets?limit=", "6,5,4,3,2,1", "\"limit\":50,\"offset\":0}"},
        {"/api/packets?limit=abc", "6,5,4,3,2,1", "\"limit\":50,\"offset\":0}"},
        {"/api/packets?limit=0", "6,5,4,3,2,1", "\"limit\":50,\"offset\":0}"},
        {"/api/packets?limit=-1", "6,5,4,3,2,1", "\"limit\":50,\"offset\":0}"},
        {"/api/packets?limit=2.5", "6,5,4,3,2,1", "\"limit\":50,\"offset\":0}"},
        {"/api/packets?limit=99999999999999999999999", "6,5,4,3,2,1", "\"limit\":50,\"offset\":0}"},
        {"/api/packets?limit=2", "6,5", "\"total\":6,\"limit\":2,\"offset\":0}"},
        {"/api/packets?limit=20000", "6,5,4,3,2,1", "\"limit\":10000,\"offset\":0}"},
        {"/api/packets?offset=", "6,5,4,3,2,1", "\"limit\":50,\"offset\":0}"},
        {"/api/packets?offset=ten", "6,5,4,3,2,1", "\"limit\":50,\"offset\":0}"},
        {"/api/packets?offset=99999999999999999999", "6,5,4,3,2,1", "\"offset\":0}"},
        {"/api/packets?offset=5", "1", "\"total\":6,\"limit\":50,\"offset\":5}"},
        {"/api/packets?order=up", "6,5,4,3,2,1", "\"total\":6,\"limit\":50,\"offset\":0}"},
        {"/api/packets?order=ASC", "6,5,4,3,2,1", "\"total\":6,\"limit\":50,\"offset\":0}"},
        {"/api/packets?order=asc", "1,2,3,4,5,6", "\"total\":6,\"limit\":50,\"offset\":0}"},
        {"/api/packets?expand=nodes", "6,5,4,3,2,1", "\"total\":6,\"limit\":50,\"offset\":0}"},
        {"/api/packets?groupByHash=yes", "6,5,4,3,2,1", "\"total\":6,\"limit\":50,\"offset\":0}"},
        {"/api/packets?groupByHash=TRUE", "6,5,4,3,2,1", "\"total\":6,\"limit\":50,\"offset\":0}"},
        /* Go's Atoi fails and CoreScope filters on 0 */
        {"/api/packets?type=abc", "", "\"total\":0,\"limit\":50,\"offset\":0}"},
        {"/api/packets?type=4", "5,1", "\"total\":2,\"limit\":50,\"offset\":0}"},
        {"/api/packets?route=1.5", "4", "\"total\":1,\"limit\":50,\"offset\":0}"},
        {"/api/packets?route=", "6,5,4,3,2,1", "\"total\":6,\"limit\":50,\"offset\":0}"},
        /* CoreScope's nodes listing with no key left: nothing */
        {"/api/packets?nodes=,,", "", "\"total\":0,\"limit\":50,\"offset\":0}"},
        {"/api/packets?nodes=,%20,", "", "\"total\":0,\"limit\":50,\"offset\":0}"},
        {"/api/packets?nodes=", "6,5,4,3,2,1", "\"total\":6,\"limit\":50,\"offset\":0}"},
        {"/api/packets?region=,ALL", "6,5,4,3,2,1", "\"total\":6,\"limit\":50,\"offset\":0}"},
        /* no observer has the id "" */
        {"/api/packets?observer=,,", "", "\"total\":0,\"limit\":50,\"offset\":0}"},
    };
    struct fixture f;
    open_fixture(&f, six_packets);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *body = get_ok(&f, cases[i].target);
        size_t len = strlen(body), tail = strlen(cases[i].tail);
        cr_expect(len > tail && strncmp(body + len - tail - 1, cases[i].tail, tail) == 0,
                  "%s: ends %s: %s", cases[i].target, cases[i].tail, body);
        cr_expect_str_eq(values_of(body, "id"), cases[i].ids, "%s", cases[i].target);
    }
    /* Refused: a negative offset (CoreScope's handler panics), too long a list (CoreScope would
     * take it; meshgate bounds a request's work). */
    expect_bad_request(&f, "/api/packets?offset=-10", "offset");
    char target[1024] = "/api/packets?observer=";
    for (int i = 0; i <= MG_PACKETS_LIST_MAX; i++)
        strcat(target, "O1,");
    expect_bad_request(&f, target, "observer");
    close_fixture(&f);
}

/* --- best observation and observation order (ids that do not follow timestamps) ---------- */

/* Observation 12 has the highest id of the two-hop ones, but 10 is newer. */
static const char unordered_observations[] =
    "INSERT INTO observers (rowid, id, name) VALUES (1, 'O1', 'One'), (2, 'O2', 'Two');"
    "INSERT INTO transmissions (id, raw_hex, hash, first_seen) VALUES"
    " (1, '', 'h1', '2026-05-01T00:00:00Z'), (2, '', 'h2', '2026-05-02T00:00:00Z');"
    "INSERT INTO observations (id, transmission_id, observer_idx, snr, path_json, timestamp)"
    " VALUES (10, 1, 1, 10, '[\"A\",\"B\"]', 9), (11, 1, 2, 11, '[\"C\",\"D\"]', 2),"
    " (12, 1, 2, 12, '[\"E\",\"F\"]', 4), (13, 1, 1, 13, '[\"G\"]', 1),"
    " (20, 2, 1, 20, '[\"A\"]', 5), (21, 2, 2, 21, '[\"B\"]', 5), (22, 2, 1, 22, '[]', 6);";

Test(packets, best_observation_among_equal_hops_is_the_newest_by_timestamp_not_the_highest_id)
{
    struct fixture f;
    open_fixture(&f, unordered_observations);
    const char *body = get_ok(&f, "/api/packets?hash=h1");
    cr_expect(strstr(body, "\"_parsedPath\":[\"A\",\"B\"]"), "%s", body);
    cr_expect(strstr(body, "\"snr\":10,"), "%s", body);
    /* Equal hops and equal times: the highest id. */
    body = get_ok(&f, "/api/packets?hash=h2");
    cr_expect(strstr(body, "\"_parsedPath\":[\"B\"]"), "%s", body);
    cr_expect(strstr(body, "\"snr\":21,"), "%s", body);
    /* The grouped row takes the same observation. */
    body = get_ok(&f, "/api/packets?hash=h1&groupByHash=true");
    cr_expect(strstr(body, "\"path_json\":\"[\\\"A\\\",\\\"B\\\"]\""), "%s", body);
    close_fixture(&f);
}

Test(packets, expanded_observations_are_listed_by_timestamp_desc_then_id_desc)
{
    struct fixture f;
    open_fixture(&f, unordered_observations);
    /* The packet's id comes first (keys sorted), then its observations'. */
    cr_expect_str_eq(values_of(get_ok(&f, "/api/packets?expand=observations&hash=h1"), "id"),
                     "1,10,12,11,13");
    cr_expect_str_eq(values_of(get_ok(&f, "/api/packets?expand=observations&hash=h2"), "id"),
                     "2,22,21,20");
    close_fixture(&f);
}

/* --- groupByHash ---------------------------------------------------------------------------- */

Test(packets, grouped_answer_is_exact_with_the_keys_corescope_gives_a_group)
{
    struct fixture f;
    open_fixture(&f,
                 "INSERT INTO observers (rowid, id, name, iata) VALUES (1, 'OBS1', 'One', 'SFO'),"
                 " (2, 'OBS2', '', 'OAK'), (3, 'OBS3', 'Three', 'SFO');"
                 "INSERT INTO transmissions (id, raw_hex, hash, first_seen, route_type,"
                 " payload_type, decoded_json) VALUES (1, 'AABB', '0123456789abcdef',"
                 " '2026-05-17T18:13:27Z', 1, 4, '{\"type\":\"ADVERT\"}');"
                 "INSERT INTO observations (id, transmission_id, observer_idx, direction, snr,"
                 " rssi, path_json, timestamp) VALUES"
                 " (1, 1, 1, 'rx', 5.25, -90, '[\"7D1D\"]', 1779041607),"
                 " (2, 1, 2, 'rx', 3, -95, '[\"7D1D\",\"DA2A\"]', 1779041608),"
                 " (3, 1, 3, 'rx', 1, -99, '[\"7D1D\"]', 1779041609),"
                 " (4, 1, 3, 'rx', 1, -99, '[\"7D1D\"]', 1779041610);");
    cr_expect_str_eq(
        get_ok(&f, "/api/packets?groupByHash=true"),
        "{\"packets\":[{\"count\":3,\"decoded_json\":\"{\\\"type\\\":\\\"ADVERT\\\"}\","
        "\"distinct_iatas\":[\"OAK\",\"SFO\"],\"first_seen\":\"2026-05-17T18:13:27Z\","
        "\"hash\":\"0123456789abcdef\",\"latest\":\"2026-05-17T18:13:30.000Z\","
        "\"observation_count\":3,\"observer_count\":3,\"observer_iata\":\"OAK\","
        "\"observer_id\":\"OBS2\",\"observer_name\":null,"
        "\"path_json\":\"[\\\"7D1D\\\",\\\"DA2A\\\"]\",\"payload_type\":4,\"raw_hex\":\"AABB\","
        "\"route_type\":1,\"rssi\":-95,\"snr\":3}],\"total\":1,\"limit\":50,\"offset\":0}\n");
    close_fixture(&f);
}

/*
 * Latest sightings that do not follow ids: 1 was heard last; 2 has no observation (its
 * first_seen counts); 3's first_seen is in the same second as its observation, and "…00Z"
 * is the greater string than "…00.000Z" (CoreScope compares the strings).
 */
static const char latest_packets[] =
    "INSERT INTO observers (rowid, id, iata) VALUES (1, 'O1', 'SFO');"
    "INSERT INTO transmissions (id, raw_hex, hash, first_seen, payload_type) VALUES"
    " (1, '', 'h1', '2026-05-01T00:00:00Z', 4), (2, '', 'h2', '2026-05-04T00:00:00Z', 5),"
    " (3, '', 'h3', '2026-05-03T00:00:00Z', 4), (4, '', 'h4', '2026-05-02T00:00:00Z', 5),"
    " (5, '', 'h5', '2026-05-02T12:00:00Z', 4);"
    "INSERT INTO observations (id, transmission_id, observer_idx, path_json, timestamp) VALUES"
    " (1, 1, 1, '[]', 1777593600), (2, 1, 1, '[\"A\"]', 1778025600)," /* 05-01, 05-06 */
    " (3, 3, 1, '[]', 1777766400),"                                   /* 05-03T00:00:00 */
    " (4, 4, 1, '[]', 1777852800),"                                   /* 05-04T00:00:00 */
    " (5, 5, 1, '[]', 1777723200);";                                  /* 05-02T12:00:00 */

Test(packets, grouped_rows_are_listed_by_latest_sighting_newest_first_not_by_id)
{
    struct fixture f;
    open_fixture(&f, latest_packets);
    const char *body = get_ok(&f, "/api/packets?groupByHash=true");
    cr_expect_str_eq(values_of(body, "hash"), "h1,h2,h4,h3,h5");
    cr_expect_str_eq(values_of(body, "latest"),
                     "2026-05-06T00:00:00.000Z,2026-05-04T00:00:00Z,2026-05-04T00:00:00.000Z,"
                     "2026-05-03T00:00:00Z,2026-05-02T12:00:00Z");
    cr_expect(strstr(body, "],\"total\":5,\"limit\":50,\"offset\":0}\n"), "%s", body);
    cr_expect_null(unsorted_key(body));
    close_fixture(&f);
}

Test(packets, grouped_pages_by_merge_and_by_sort_agree)
{
    struct fixture f;
    open_fixture(&f, latest_packets);
    /* limit=1 pages are merged (the page takes fewer rows than match); the whole list is
     * sorted; both must tell one order. */
    char pages[256] = "";
    for (int offset = 0; offset < 5; offset++) {
        char target[128];
        snprintf(target, sizeof target, "/api/packets?groupByHash=true&limit=1&offset=%d", offset);
        const char *body = get_ok(&f, target);
        cr_expect(strstr(body, "\"total\":5,"), "%s", body);
        if (offset)
            strcat(pages, ",");
        strcat(pages, values_of(body, "hash"));
    }
    cr_expect_str_eq(pages, "h1,h2,h4,h3,h5");
    cr_expect_str_eq(
        values_of(get_ok(&f, "/api/packets?groupByHash=true&limit=2&offset=1"), "hash"), "h2,h4");
    cr_expect_str_eq(values_of(get_ok(&f, "/api/packets?groupByHash=true&offset=5"), "hash"), "");
    /* Filters apply as in the listing, by either form. */
    cr_expect_str_eq(values_of(get_ok(&f, "/api/packets?groupByHash=true&type=4"), "hash"),
                     "h1,h3,h5");
    cr_expect_str_eq(
        values_of(get_ok(&f, "/api/packets?groupByHash=true&type=4&limit=1&offset=1"), "hash"),
        "h3");
    cr_expect_str_eq(values_of(get_ok(&f, "/api/packets?groupByHash=true&type=4&limit=1"), "hash"),
                     "h1");
    cr_expect_str_eq(values_of(get_ok(&f, "/api/packets?groupByHash=true&since="
                                          "2026-05-02T00:00:00Z&limit=2"),
                               "hash"),
                     "h2,h3");
    close_fixture(&f);
}

Test(packets, grouped_rows_count_observers_and_their_distinct_iatas)
{
    struct fixture f;
    open_fixture(&f, six_packets);
    const char *body = get_ok(&f, "/api/packets?groupByHash=true&observer=AAAA01,bbbb02");
    cr_expect_str_eq(values_of(body, "hash"),
                     "abcdef0000000006,abcdef0000000005,abcdef0000000002,abcdef0000000001");
    cr_expect(strstr(body, "\"distinct_iatas\":[\"OAK\"]"), "%s", body);
    cr_expect(strstr(body, "\"distinct_iatas\":[\"SFO\"]"), "%s", body);
    /* Observer 3 has an empty IATA: no entry; a missing path is null. */
    body = get_ok(&f, "/api/packets?groupByHash=true&hash=abcdef0000000003");
    cr_expect(strstr(body, "\"distinct_iatas\":[],"), "%s", body);
    cr_expect(strstr(body, "\"observer_count\":1,\"observer_iata\":null,"), "%s", body);
    body = get_ok(&f, "/api/packets?groupByHash=true&hash=abcdef0000000006");
    cr_expect(strstr(body, "\"path_json\":null,"), "%s", body);
    /* No observation: zero counts, null observer fields, latest = first_seen. */
    body = get_ok(&f, "/api/packets?groupByHash=true&hash=abcdef0000000004");
    cr_expect(strstr(body, "{\"count\":0,"), "%s", body);
    cr_expect(strstr(body, "\"latest\":\"2026-05-04T00:00:00Z\",\"observation_count\":0,"
                           "\"observer_count\":0,\"observer_iata\":null,\"observer_id\":null,"
                           "\"observer_name\":null,\"path_json\":null,"),
              "%s", body);
    cr_expect(strstr(body, "\"rssi\":null,\"snr\":null}"), "%s", body);
    close_fixture(&f);
}

/* --- nodes ------------------------------------------------------------------------------------ */

Test(packets, nodes_lists_packets_sent_or_relayed_by_any_of_the_named_nodes)
{
    struct fixture f;
    open_fixture(&f, six_packets);
    cr_expect_str_eq(ids_of(&f, "/api/packets?nodes=" PK_A), "1");
    cr_expect_str_eq(ids_of(&f, "/api/packets?nodes=" PK_A ",Node%20B"), "5,2,1");
    cr_expect_eq(total_of(&f, "/api/packets?nodes=%20" PK_A "%20,,Node%20B"), 3);
    cr_expect_str_eq(ids_of(&f, "/api/packets?nodes=" PK_A ",Node%20B&order=asc&limit=2"), "1,2");
    /* Upper-case keys are keys; a name no node has matches nothing. */
    cr_expect_str_eq(ids_of(&f, "/api/packets?nodes=nobody," PK_B_UPPER), "5,2");
    cr_expect_eq(total_of(&f, "/api/packets?nodes=nobody,nothing"), 0);
    /* Other filters narrow it (CoreScope ignores them there). */
    cr_expect_str_eq(ids_of(&f, "/api/packets?nodes=" PK_A "," PK_B "&type=4"), "5,1");
    cr_expect_str_eq(
        values_of(get_ok(&f, "/api/packets?nodes=" PK_A "," PK_B "&groupByHash=true"), "hash"),
        "abcdef0000000005,abcdef0000000002,abcdef0000000001");
    close_fixture(&f);
}

Test(packets, nodes_takes_since_and_until_inclusively_as_corescope_does)
{
    struct fixture f;
    open_fixture(&f, six_packets);
    cr_expect_str_eq(ids_of(&f, "/api/packets?nodes=" PK_A "," PK_B
                                "&since=2026-05-02T00:00:00Z&until=2026-05-05T00:00:00Z"),
                     "5,2");
    cr_expect_str_eq(ids_of(&f, "/api/packets?node=" PK_B
                                "&since=2026-05-02T00:00:00Z&until=2026-05-05T00:00:00Z"),
                     "");
    close_fixture(&f);
}

Test(packets, nodes_probe_and_list_forms_agree)
{
    struct fixture f;
    open_fixture(&f, six_packets);
    for (int form = MG_PACKETS_PROBE; form <= MG_PACKETS_LIST_SCAN; form++) {
        struct mg_packets_filter q = {.limit = 50, .nodes = "x", .nodes_count = 2};
        snprintf(q.nodes_pubkeys[0], 65, "%s", PK_A);
        snprintf(q.nodes_pubkeys[1], 65, "%s", PK_B);
        q.node_form = (enum mg_packets_form)form;
        struct mg_buf sql;
        mg_buf_init(&sql);
        mg_packets_sql(&f.t.db, &q, MG_PACKETS_SQL_COUNT, &sql);
        sqlite3_stmt *st = NULL;
        cr_assert_eq(sqlite3_prepare_v2(f.t.db.conn, mg_buf_cstr(&sql), -1, &st, NULL), SQLITE_OK,
                     "%s", mg_buf_cstr(&sql));
        cr_assert_eq(mg_packets_bind(&f.t.db, &q, st), 4);
        cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
        cr_expect_eq(sqlite3_column_int(st, 0), 3, "form %d: %s", form, mg_buf_cstr(&sql));
        sqlite3_finalize(st);
        mg_buf_free(&sql);
    }
    close_fixture(&f);
}

Test(packets, group_and_nodes_refuse_what_they_cannot_answer)
{
    struct fixture f;
    open_fixture(&f, six_packets);
    expect_bad_request(&f, "/api/packets?groupByHash=true&order=asc", "order=asc");
    expect_bad_request(&f, "/api/packets?groupByHash=true&expand=observations", "expand");
    /* An area the configuration does not have filters nothing, as in CoreScope. */
    char *all = strdup(ids_of(&f, "/api/packets"));
    cr_expect_str_eq(ids_of(&f, "/api/packets?area=bay"), all);
    free(all);
    char target[1024] = "/api/packets?nodes=";
    for (int i = 0; i <= MG_PACKETS_LIST_MAX; i++)
        strcat(target, "N1,");
    expect_bad_request(&f, target, "nodes");
    /* Accepted spellings. */
    cr_expect_str_eq(ids_of(&f, "/api/packets?groupByHash=false&limit=2"), "6,5");
    cr_expect_eq(total_of(&f, "/api/packets?groupByHash=true&order=desc"), 6);
    close_fixture(&f);
}

/* --- the database ------------------------------------------------------------------------ */

Test(packets, total_follows_rows_the_ingestor_writes_between_requests)
{
    struct fixture f;
    open_fixture(&f, six_packets);
    cr_expect_eq(total_of(&f, "/api/packets"), 6);
    cr_expect_eq(total_of(&f, "/api/packets?type=4"), 2);
    sqlite3 *writer;
    cr_assert_eq(mg_test_sqlite_open(f.db, &writer), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(writer,
                              "INSERT INTO transmissions (id, raw_hex, hash, first_seen,"
                              " payload_type) VALUES (7, '', 'h7', '2026-05-07T00:00:00Z', 4)",
                              NULL, NULL, NULL),
                 SQLITE_OK);
    sqlite3_close(writer);
    cr_expect_eq(total_of(&f, "/api/packets"), 7);
    cr_expect_str_eq(ids_of(&f, "/api/packets?type=4"), "7,5,1");
    cr_expect_eq(total_of(&f, "/api/packets?type=4"), 3);
    close_fixture(&f);
}

/* A schema where hash and first_seen may be NULL and observations has no resolved_path. */
static const char loose_schema[] =
    "CREATE TABLE nodes (public_key TEXT PRIMARY KEY, name TEXT, role TEXT, lat REAL, lon REAL,"
    " last_seen TEXT, first_seen TEXT, advert_count INTEGER, battery_mv INTEGER,"
    " temperature_c REAL);"
    "CREATE TABLE observers (id TEXT PRIMARY KEY, name TEXT, iata TEXT, last_seen TEXT,"
    " inactive INTEGER);"
    "CREATE TABLE transmissions (id INTEGER PRIMARY KEY, raw_hex TEXT, hash TEXT,"
    " first_seen TEXT, route_type INTEGER, payload_type INTEGER, decoded_json TEXT,"
    " from_pubkey TEXT);"
    "CREATE TABLE observations (id INTEGER PRIMARY KEY, transmission_id INTEGER,"
    " observer_idx INTEGER, direction TEXT, snr REAL, rssi REAL, path_json TEXT,"
    " timestamp INTEGER);"
    "CREATE TABLE neighbor_edges (node_a TEXT, node_b TEXT, count INTEGER);"
    "CREATE INDEX idx_observations_transmission_id ON observations(transmission_id);"
    "INSERT INTO nodes (public_key, name) VALUES ('" PK_A "', 'Node A');"
    "INSERT INTO transmissions (id, raw_hex, hash, first_seen, from_pubkey) VALUES"
    " (1, '', 'h1', '2026-05-01T00:00:00Z', '" PK_A "'), (2, '', NULL, '2026-05-02T00:00:00Z',"
    " NULL), (3, '', 'h3', NULL, NULL), (4, '', 'h4', '2026-05-04T00:00:00Z', NULL);"
    "INSERT INTO observations (transmission_id, path_json, timestamp) VALUES"
    " (4, '[\"AA\"]', 1);";

Test(packets, rows_without_hash_or_first_seen_are_not_packets_and_optional_columns_are_optional)
{
    char dir[128], path[256];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/loose.db", dir);
    sqlite3 *db;
    cr_assert_eq(mg_test_sqlite_open(path, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db, loose_schema, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    struct mg_test_ctx t;
    cr_assert(mg_test_ctx_open(&t, path));
    cr_assert_eq(mg_test_ctx_get(&t, "/api/packets?expand=observations"), 200);
    const char *body = t.res.body.data;
    cr_expect_str_eq(values_of(body, "hash"), "h4,h1");
    cr_expect(strstr(body, "\"total\":2,"), "%s", body);
    cr_expect_not(strstr(body, "resolved_path"), "%s", body);
    cr_assert_eq(mg_test_ctx_get(&t, "/api/packets?node=Node%20A"), 200);
    cr_expect_str_eq(values_of(t.res.body.data, "hash"), "h1");
    mg_test_ctx_close(&t);
    mg_test_rmdir(dir);
}

/* The EXPLAIN QUERY PLAN of one statement for q, one detail per line. */
static const char *plan_of(struct fixture *f, const struct mg_packets_filter *q,
                           enum mg_packets_statement which)
{
    static char plan[4096];
    struct mg_buf sql;
    mg_buf_init(&sql);
    mg_buf_puts(&sql, "EXPLAIN QUERY PLAN ");
    mg_packets_sql(&f->t.db, q, which, &sql);
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

static void expect_no_scan_of_observations_and_no_sort(const char *plan, const char *what)
{
    cr_expect_not(strstr(plan, "TEMP B-TREE"), "%s sorts:\n%s", what, plan);
    cr_expect_not(strstr(plan, "SCAN o\n"), "%s scans observations:\n%s", what, plan);
    cr_expect_not(strstr(plan, "SCAN o "), "%s scans observations:\n%s", what, plan);
    cr_expect_not(strstr(plan, "SCAN observations"), "%s scans observations:\n%s", what, plan);
}

Test(packets, default_and_expand_statements_use_indexes_and_never_sort)
{
    struct fixture f;
    open_fixture(&f, six_packets);
    for (int expand = 0; expand < 2; expand++) {
        for (int ascending = 0; ascending < 2; ascending++) {
            struct mg_packets_filter q = {.limit = 50};
            q.expand_observations = expand;
            q.ascending = ascending;
            const char *plan = plan_of(&f, &q, MG_PACKETS_SQL_PAGE);
            expect_no_scan_of_observations_and_no_sort(plan, "page");
            cr_expect_str_eq(plan, "SCAN t\n", "the page does not walk the primary key");
            plan = plan_of(&f, &q, MG_PACKETS_SQL_OBSERVATIONS);
            cr_expect(strstr(plan, "SEARCH o USING INDEX idx_observations_transmission_id "
                                   "(transmission_id=?)"),
                      "%s", plan);
            /* With expand, only the transmission's own observations are sorted. */
            if (expand)
                cr_expect(strstr(plan, "USE TEMP B-TREE FOR ORDER BY"), "%s", plan);
            else
                expect_no_scan_of_observations_and_no_sort(plan, "observations");
            plan = plan_of(&f, &q, MG_PACKETS_SQL_BEST);
            expect_no_scan_of_observations_and_no_sort(plan, "best");
            cr_expect(strstr(plan, "SEARCH o USING INTEGER PRIMARY KEY (rowid=?)"), "%s", plan);
            plan = plan_of(&f, &q, MG_PACKETS_SQL_COUNT);
            cr_expect(strstr(plan, "USING COVERING INDEX"), "count: %s", plan);
            cr_expect_not(strstr(plan, "observations"), "count: %s", plan);
        }
    }
    /* The usual filters keep rowid order through their index. */
    struct mg_packets_filter q = {.limit = 50, .has_type = true, .payload_type = 4};
    const char *plan = plan_of(&f, &q, MG_PACKETS_SQL_PAGE);
    expect_no_scan_of_observations_and_no_sort(plan, "type page");
    cr_expect(strstr(plan, "idx_transmissions_payload_type"), "%s", plan);
    q = (struct mg_packets_filter){.limit = 50, .observer = "AAAA01"};
    plan = plan_of(&f, &q, MG_PACKETS_SQL_PAGE);
    expect_no_scan_of_observations_and_no_sort(plan, "observer probe page");
    q.observer_form = MG_PACKETS_LIST_INDEX;
    plan = plan_of(&f, &q, MG_PACKETS_SQL_PAGE);
    expect_no_scan_of_observations_and_no_sort(plan, "observer list page");
    cr_expect(strstr(plan, "idx_observations_observer_idx"), "%s", plan);
    close_fixture(&f);
}

Test(packets, corescope_fixture_has_499_packets_and_a_sane_first_page)
{
    const char *path = MESHGATE_SOURCE_DIR "/../shared/data/corescope-e2e-fixture.db";
    if (access(path, R_OK) != 0)
        cr_skip_test("%s is not here", path);
    struct mg_test_ctx t;
    cr_assert(mg_test_ctx_open(&t, path));
    cr_assert_eq(mg_test_ctx_get(&t, "/api/packets"), 200);
    const char *body = t.res.body.data;
    cr_expect(strncmp(body, "{\"packets\":[{\"_parsedPath\":", 27) == 0, "%.200s", body);
    cr_expect(strstr(body, "],\"total\":499,\"limit\":50,\"offset\":0}\n"), "%.200s", body);
    const char *ids = values_of(body, "id");
    cr_expect(strncmp(ids, "500,499,", 8) == 0, "%s", ids);
    int packets = 0;
    for (const char *p = strstr(body, "\"timestamp\":"); p; p = strstr(p + 1, "\"timestamp\":"))
        packets++;
    cr_expect_eq(packets, 50);
    cr_expect_null(unsorted_key(body));
    cr_assert_eq(mg_test_ctx_get(&t, "/api/packets?channel=%23test&limit=1"), 200);
    cr_expect(strstr(t.res.body.data, "\"total\":35,"), "%.300s", t.res.body.data);
    cr_assert_eq(mg_test_ctx_get(&t, "/api/packets?expand=observations&limit=500"), 200);
    cr_expect(strstr(t.res.body.data, "\"total\":499,\"limit\":500,"));
    cr_expect_null(unsorted_key(t.res.body.data));
    mg_test_ctx_close(&t);
}

Test(packets, grouped_statements_walk_their_indexes)
{
    struct fixture f;
    open_fixture(&f, six_packets);
    struct mg_packets_filter q = {.limit = 50, .group_by_hash = true};
    const char *plan = plan_of(&f, &q, MG_PACKETS_SQL_LATEST_FIRST_SEEN);
    cr_expect(strstr(plan, "idx_transmissions_first_seen"), "%s", plan);
    cr_expect_not(strstr(plan, "TEMP B-TREE"), "%s", plan);
    plan = plan_of(&f, &q, MG_PACKETS_SQL_LATEST_OBSERVED);
    cr_expect(strstr(plan, "SCAN o USING INDEX idx_observations_timestamp"), "%s", plan);
    cr_expect(strstr(plan, "SEARCH t USING INTEGER PRIMARY KEY (rowid=?)"), "%s", plan);
    cr_expect_not(strstr(plan, "USE TEMP B-TREE FOR ORDER BY"), "%s", plan);
    plan = plan_of(&f, &q, MG_PACKETS_SQL_ROW);
    cr_expect(strstr(plan, "SEARCH t USING INTEGER PRIMARY KEY (rowid=?)"), "%s", plan);
    close_fixture(&f);
}

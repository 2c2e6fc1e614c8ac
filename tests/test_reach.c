/* SPDX-License-Identifier: ISC */
/*
 * reach: each rule of the contract's reach report (section 3) pinned on small hand-built
 * databases with known answers, then CoreScope's own end-to-end database (when
 * ../shared/data has it) checked against the facts its README states.
 */
#include "reach.h"

#include "fixture.h"
#include "harness.h"
#include "inproc.h"

#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

TestSuite(reach, .timeout = 120);

/* Every report here ends at NOW; a 7-day window starts at SINCE. */
#define NOW 1800000000
#define SINCE 1799395200 /* NOW - 7 * 86400 */
#define SINCE_TEXT "2027-01-08T08:00:00Z"

/* 64-hex keys: six chars that tell them apart, then zeros. */
#define Z58 "0000000000000000000000000000000000000000000000000000000000"
#define T "ab12cd" Z58   /* the target: a repeater; AB is shared with SIB */
#define SIB "ab99ee" Z58 /* a repeater at 0,0 (no GPS) */
#define N1 "111111" Z58  /* a repeater, also observer 2 */
#define N2 "222222" Z58  /* a room, no name, lat NULL */
#define N3 "333333" Z58  /* role "Room_Server" */
#define A4 "44aaaa" Z58  /* A4 and B4 share 44 */
#define B4 "44bbbb" Z58
#define C5 "555555" Z58 /* a companion: not in the prefix map */
#define N6 "666666" Z58
#define N7 "777777" Z58
#define N8 "888888" Z58
#define N9 "999999" Z58
#define SOLO "e0e0e0" Z58 /* only an observer */
#define NOBODY "f0f0f0" Z58

static const char base_sql[] =
    "INSERT INTO nodes (public_key, name, role, lat, lon, first_seen) VALUES"
    " ('" T "', 'Target', 'repeater', 37.0, -122.0, '2026-01-01T00:00:00Z'),"
    " ('" SIB "', 'Sibling', 'repeater', 0, 0, NULL),"
    " ('" N1 "', 'One', 'repeater', 37.1, -122.0, '2026-01-02T00:00:00Z'),"
    " ('" N2 "', NULL, 'room', NULL, -122.0, NULL),"
    " ('" N3 "', 'Three', 'Room_Server', 37.0, -121.9, NULL),"
    " ('" A4 "', 'Four A', 'repeater', NULL, NULL, NULL),"
    " ('" B4 "', 'Four B', 'repeater', NULL, NULL, NULL),"
    " ('" C5 "', 'Phone', 'companion', 37.2, -122.1, '2026-02-01T00:00:00Z'),"
    " ('" N6 "', 'Six', 'repeater', NULL, NULL, NULL),"
    " ('" N7 "', 'Seven', 'repeater', NULL, NULL, NULL),"
    " ('" N8 "', 'Eight', 'repeater', NULL, NULL, NULL),"
    " ('" N9 "', 'Nine', 'repeater', NULL, NULL, NULL);"
    "INSERT INTO observers (rowid, id, name) VALUES"
    " (1, 'OBS1', 'Obs One'), (2, upper('" N1 "'), 'One as observer'),"
    " (3, upper('" T "'), 'Target as observer'), (4, 'OBS4', NULL),"
    " (5, upper('" SOLO "'), 'Solo'), (6, 'obs6', 'Six obs');"
    "INSERT INTO transmissions (id, raw_hex, hash, first_seen, payload_type, from_pubkey) VALUES"
    " (1, '00', 'h1', '2027-01-14T00:00:00Z', 5, NULL),"
    " (2, '00', 'h2', '2027-01-14T00:00:00Z', 4, upper('" C5 "')),"
    " (3, '00', 'h3', '2027-01-14T00:00:00Z', 4, '" T "'),"
    " (4, '00', 'h4', '2027-01-14T00:00:00Z', 4, ''),"
    " (5, '00', 'h5', '2027-01-14T00:00:00Z', 4, 'DEADBEEF'),"
    " (6, '00', 'h6', '2027-01-14T00:00:00Z', NULL, NULL);";

/* An observation: transmission, observer rowid, snr, path_json (SQL literals), in the window. */
#define OBS(tx, observer, snr, path)                                                               \
    "INSERT INTO observations (transmission_id, observer_idx, snr, path_json, timestamp)"          \
    " VALUES (" #tx ", " #observer ", " #snr ", " path ", 1799999000);"

struct fixture {
    char dir[128];
    char db[256];
    struct mg_test_ctx t;
    struct mg_buf body;
    struct mg_reach_stats stats;
};

static void open_db(struct fixture *f, const char *observations_sql)
{
    mg_test_tmpdir(f->dir, sizeof f->dir);
    cr_assert(f->dir[0], "no temporary directory");
    snprintf(f->db, sizeof f->db, "%s/reach.db", f->dir);
    size_t n = strlen(base_sql) + (observations_sql ? strlen(observations_sql) : 0) + 1;
    char *sql = malloc(n);
    snprintf(sql, n, "%s%s", base_sql, observations_sql ? observations_sql : "");
    cr_assert_eq(mg_test_make_db(f->db, false, sql), 0);
    free(sql);
    cr_assert(mg_test_ctx_open(&f->t, f->db));
    mg_buf_init(&f->body);
}

static void close_db(struct fixture *f)
{
    mg_buf_free(&f->body);
    mg_test_ctx_close(&f->t);
    mg_test_rmdir(f->dir);
}

static enum mg_reach_result try_report(struct fixture *f, const char *key, int days, int64_t cap)
{
    char err[256];
    mg_buf_reset(&f->body);
    enum mg_reach_result r =
        mg_reach_build_capped(&f->t.db, key, days, NOW, cap, &f->body, &f->stats, err, sizeof err);
    cr_assert_neq(r, MG_REACH_ERROR, "reach failed: %s", err);
    return r;
}

/* The body of a successful report on key over days. */
static const char *report_days(struct fixture *f, const char *key, int days)
{
    cr_assert_eq(try_report(f, key, days, MG_REACH_ROW_CAP), MG_REACH_OK);
    return mg_buf_cstr(&f->body);
}

static const char *report(struct fixture *f, const char *key)
{
    return report_days(f, key, 7);
}

/* The value of "name" in body when it is an array or an object, as written; "" when absent. */
static const char *section(const char *body, const char *name)
{
    static char out[65536];
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":[", name);
    const char *p = strstr(body, pattern);
    if (!p) {
        snprintf(pattern, sizeof pattern, "\"%s\":{", name);
        p = strstr(body, pattern);
    }
    out[0] = '\0';
    if (!p)
        return out;
    p += strlen(pattern) - 1;
    int depth = 0;
    size_t n = 0;
    bool in_string = false;
    do {
        char c = p[n];
        if (c == '\0')
            break;
        if (in_string) {
            if (c == '\\')
                n++;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            depth++;
        } else if (c == ']' || c == '}') {
            depth--;
        }
        n++;
    } while (depth > 0);
    cr_assert(n < sizeof out);
    memcpy(out, p, n);
    out[n] = '\0';
    return out;
}

/* The object of key in the list named list ("links" or "direct_observers"), or "". */
static const char *entry(const char *body, const char *list, const char *key)
{
    static char out[4096];
    const char *s = section(body, list);
    char pattern[128];
    snprintf(pattern, sizeof pattern, "{\"pubkey\":\"%s\"", key);
    const char *p = strstr(s, pattern);
    out[0] = '\0';
    if (!p)
        return out;
    size_t n = strcspn(p, "}") + 1;
    cr_assert(n < sizeof out);
    memcpy(out, p, n);
    out[n] = '\0';
    return out;
}

/* The pubkeys of list in order, comma-separated; only the first six chars of each. */
static const char *order_of(const char *body, const char *list)
{
    static char out[4096];
    const char *s = section(body, list);
    size_t used = 0;
    out[0] = '\0';
    for (const char *p = strstr(s, "{\"pubkey\":\""); p; p = strstr(p + 1, "{\"pubkey\":\"")) {
        const char *k = p + strlen("{\"pubkey\":\"");
        size_t n = strcspn(k, "\"");
        n = n > 6 ? 6 : n;
        cr_assert(used + n + 2 < sizeof out);
        if (used)
            out[used++] = ',';
        memcpy(out + used, k, n);
        used += n;
        out[used] = '\0';
    }
    return out;
}

static long long number_of(const char *body, const char *name)
{
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":", name);
    const char *p = strstr(body, pattern);
    cr_assert(p, "no %s in %s", name, body);
    return atoll(p + strlen(pattern));
}

/* --- the pubkey ---------------------------------------------------------------------------- */

Test(reach, parse_pubkey_accepts_64_hex_chars_and_lowercases_them)
{
    char out[65];
    cr_assert(mg_reach_parse_pubkey(T, out));
    cr_assert_str_eq(out, T);
    cr_assert(mg_reach_parse_pubkey("AB12CD" Z58, out));
    cr_assert_str_eq(out, T);
    cr_assert_not(mg_reach_parse_pubkey("ab12c" Z58, out), "63 chars");
    cr_assert_not(mg_reach_parse_pubkey(T "0", out), "65 chars");
    cr_assert_not(mg_reach_parse_pubkey("ab12cg" Z58, out), "g is not hex");
    cr_assert_not(mg_reach_parse_pubkey("ab12c " Z58, out), "a space");
    cr_assert_not(mg_reach_parse_pubkey("", out));
    cr_assert_not(mg_reach_parse_pubkey(NULL, out));
}

Test(reach, malformed_key_is_refused_and_unknown_key_is_not_found)
{
    struct fixture f;
    open_db(&f, OBS(1, 1, 1.0, "'[\"AB12\"]'"));
    mg_buf_puts(&f.body, "kept");
    char err[64];
    cr_assert_eq(mg_reach_build(&f.t.db, "xyz", 7, NOW, &f.body, NULL, err, sizeof err),
                 MG_REACH_BAD_PUBKEY);
    cr_assert_eq(mg_reach_build(&f.t.db, NOBODY, 7, NOW, &f.body, NULL, err, sizeof err),
                 MG_REACH_NOT_FOUND);
    cr_assert_str_eq(mg_buf_cstr(&f.body), "kept", "a refusal appends nothing");
    close_db(&f);
}

/* --- the whole body ------------------------------------------------------------------------ */

Test(reach, body_has_the_contract_order_and_ends_with_a_newline)
{
    struct fixture f;
    open_db(&f,
            OBS(1, 1, 4.0, "'[\"11\",\"AB12\",\"22\"]'") OBS(
                1, 2, -3.25,
                "'[\"33\",\"AB12CD\"]'") "INSERT INTO neighbor_edges (node_a, node_b) VALUES ('" T
                                         "', '" N1 "');");
    const char *body = report(&f, T);
    cr_assert_str_eq(
        body,
        "{\"node\":{\"pubkey\":\"" T "\",\"name\":\"Target\",\"role\":\"repeater\",\"lat\":37,"
        "\"lon\":-122,\"first_seen\":\"2026-01-01T00:00:00Z\"},"
        "\"window\":{\"days\":7,\"since\":\"" SINCE_TEXT "\"},"
        "\"reliable_tokens\":[\"AB12\",\"AB12CD\"],"
        "\"importance\":{\"neighbor_degree\":1,\"degree_rank\":1,\"nodes_with_edges\":2,"
        "\"relay_observations\":2,\"bidirectional_links\":1,\"direct_observers\":1},"
        "\"direct_observers\":[{\"pubkey\":\"" N1 "\",\"name\":\"One\",\"count\":1,"
        "\"avg_snr\":-3.25,\"lat\":37.1,\"lon\":-122,\"distance_km\":11.11949266445603}],"
        "\"links\":["
        "{\"pubkey\":\"" N1 "\",\"name\":\"One\",\"role\":\"repeater\",\"lat\":37.1,\"lon\":-122,"
        "\"we_hear\":1,\"they_hear\":1,\"bottleneck\":1,\"bidir\":true,"
        "\"distance_km\":11.11949266445603},"
        "{\"pubkey\":\"" N2 "\",\"name\":\"\",\"role\":\"room\",\"lat\":null,\"lon\":null,"
        "\"we_hear\":0,\"they_hear\":1,\"bottleneck\":0,\"bidir\":false,\"distance_km\":null},"
        "{\"pubkey\":\"" N3 "\",\"name\":\"Three\",\"role\":\"Room_Server\",\"lat\":37,"
        "\"lon\":-121.9,\"we_hear\":1,\"they_hear\":0,\"bottleneck\":0,\"bidir\":false,"
        "\"distance_km\":8.880421287315945}]}\n");
    close_db(&f);
}

/* --- attribution ----------------------------------------------------------------------------- */

Test(reach, predecessor_is_heard_by_us_and_successor_hears_us)
{
    struct fixture f;
    open_db(&f, OBS(1, 1, NULL, "'[\"11\",\"AB12\",\"22\"]'")
                    OBS(1, 1, NULL, "'[\"33\",\"11\",\"AB12CD\",\"33\"]'"));
    const char *body = report(&f, T);
    cr_assert_str_eq(entry(body, "links", N1),
                     "{\"pubkey\":\"" N1 "\",\"name\":\"One\",\"role\":\"repeater\",\"lat\":37.1,"
                     "\"lon\":-122,\"we_hear\":2,\"they_hear\":0,\"bottleneck\":0,"
                     "\"bidir\":false,\"distance_km\":11.11949266445603}");
    cr_assert_str_eq(entry(body, "links", N2),
                     "{\"pubkey\":\"" N2 "\",\"name\":\"\",\"role\":\"room\",\"lat\":null,"
                     "\"lon\":null,\"we_hear\":0,\"they_hear\":1,\"bottleneck\":0,"
                     "\"bidir\":false,\"distance_km\":null}");
    cr_assert(strstr(entry(body, "links", N3), "\"we_hear\":0,\"they_hear\":1,"),
              "only the neighbour after the hit counts: %s", body);
    cr_assert_eq(number_of(body, "relay_observations"), 2);
    cr_assert_str_eq(section(body, "direct_observers"), "[]");
    close_db(&f);
}

Test(reach, first_hop_of_an_advert_credits_its_sender_lowercased)
{
    struct fixture f;
    /* tx 2 is an ADVERT from C5 (stored upper case), tx 1 a group text, tx 3 an ADVERT from
     * the target itself, tx 4 one with an empty sender, tx 5 one from a key in no table. */
    open_db(&f,
            OBS(2, 1, NULL, "'[\"AB12\",\"11\"]'") OBS(1, 1, NULL, "'[\"AB12\",\"11\"]'")
                OBS(3, 1, NULL, "'[\"AB12\",\"11\"]'") OBS(4, 1, NULL, "'[\"AB12\",\"11\"]'")
                    OBS(5, 1, NULL, "'[\"AB12\",\"11\"]'") OBS(6, 1, NULL, "'[\"AB12\",\"11\"]'")
                        OBS(2, 1, NULL, "'[\"22\",\"AB12\"]'"));
    const char *body = report(&f, T);
    cr_assert_str_eq(entry(body, "links", C5),
                     "{\"pubkey\":\"" C5 "\",\"name\":\"Phone\",\"role\":\"companion\","
                     "\"lat\":37.2,\"lon\":-122.1,\"we_hear\":1,\"they_hear\":0,"
                     "\"bottleneck\":0,\"bidir\":false,\"distance_km\":23.94215094931541}");
    cr_assert_str_eq(entry(body, "links", "deadbeef"),
                     "{\"pubkey\":\"deadbeef\",\"name\":\"\",\"role\":\"\",\"lat\":null,"
                     "\"lon\":null,\"we_hear\":1,\"they_hear\":0,\"bottleneck\":0,"
                     "\"bidir\":false,\"distance_km\":null}");
    cr_assert(strstr(entry(body, "links", N1), "\"we_hear\":0,\"they_hear\":6,"), "%s", body);
    cr_assert(strstr(entry(body, "links", N2), "\"we_hear\":1,\"they_hear\":0,"),
              "a hit after the first hop credits the predecessor, not the sender: %s", body);
    cr_assert_str_eq(order_of(body, "links"), "111111,222222,555555,deadbe,obs1");
    cr_assert_eq(number_of(body, "relay_observations"), 7);
    close_db(&f);
}

Test(reach, last_hop_credits_the_observer_and_its_direct_observers_entry)
{
    struct fixture f;
    open_db(&f, OBS(1, 1, 4.0, "'[\"11\",\"AB12\"]'") OBS(1, 1, 5.5, "'[\"AB12CD\"]'")
                    OBS(1, 1, NULL, "'[\"22\",\"AB12\"]'") OBS(1, 2, -3.25, "'[\"ab12\"]'")
                        OBS(1, 4, NULL, "'[\"AB12\"]'") OBS(1, 3, 1.0, "'[\"AB12\"]'")
                            OBS(1, NULL, 1.0, "'[\"AB12\"]'") OBS(1, 99, 1.0, "'[\"AB12\"]'"));
    const char *body = report(&f, T);
    cr_assert_str_eq(entry(body, "direct_observers", "obs1"),
                     "{\"pubkey\":\"obs1\",\"name\":\"Obs One\",\"count\":3,\"avg_snr\":4.75,"
                     "\"lat\":null,\"lon\":null,\"distance_km\":null}");
    cr_assert_str_eq(entry(body, "direct_observers", N1),
                     "{\"pubkey\":\"" N1 "\",\"name\":\"One\",\"count\":1,\"avg_snr\":-3.25,"
                     "\"lat\":37.1,\"lon\":-122,\"distance_km\":11.11949266445603}");
    cr_assert_str_eq(entry(body, "direct_observers", "obs4"),
                     "{\"pubkey\":\"obs4\",\"name\":\"\",\"count\":1,\"avg_snr\":null,"
                     "\"lat\":null,\"lon\":null,\"distance_km\":null}");
    cr_assert_str_eq(order_of(body, "direct_observers"), "obs1,111111,obs4",
                     "the target's own observer, a NULL and a dangling observer_idx count for "
                     "nobody");
    cr_assert_str_eq(entry(body, "links", "obs1"),
                     "{\"pubkey\":\"obs1\",\"name\":\"Obs One\",\"role\":\"observer\","
                     "\"lat\":null,\"lon\":null,\"we_hear\":0,\"they_hear\":3,\"bottleneck\":0,"
                     "\"bidir\":false,\"distance_km\":null}");
    cr_assert(strstr(entry(body, "links", N1), "\"we_hear\":1,\"they_hear\":1,"),
              "the node behind observer 2 is heard by us once and hears us once: %s", body);
    cr_assert_eq(number_of(body, "direct_observers"), 3);
    cr_assert_eq(number_of(body, "relay_observations"), 8);
    close_db(&f);
}

Test(reach, ambiguous_prefixes_resolve_to_nobody)
{
    struct fixture f;
    /* 44 names A4 and B4; 44AA and 44BBBB name one each; 55 names only a companion, AB99 the
     * sibling, 12 nobody. */
    open_db(&f, OBS(1, NULL, NULL, "'[\"44\",\"AB12\",\"44\"]'")
                    OBS(1, NULL, NULL, "'[\"44AA\",\"AB12\",\"44BBBB\"]'")
                        OBS(1, NULL, NULL, "'[\"55\",\"AB12\",\"12\"]'")
                            OBS(1, NULL, NULL, "'[\"ab99\",\"AB12\",\"44aaaa" Z58 "\"]'"));
    const char *body = report(&f, T);
    cr_assert_str_eq(order_of(body, "links"), "44aaaa,44bbbb,ab99ee");
    cr_assert(strstr(entry(body, "links", A4), "\"we_hear\":1,\"they_hear\":1,"), "%s", body);
    cr_assert(strstr(entry(body, "links", B4), "\"we_hear\":0,\"they_hear\":1,"), "%s", body);
    cr_assert(strstr(entry(body, "links", SIB), "\"we_hear\":1,\"they_hear\":0,"), "%s", body);
    cr_assert_eq(number_of(body, "relay_observations"), 4);
    close_db(&f);
}

Test(reach, self_gets_no_credit_and_a_repeated_token_counts_each_hit)
{
    struct fixture f;
    open_db(&f, OBS(1, 3, NULL, "'[\"AB12\",\"AB12CD\"]'")
                    OBS(1, 1, 2.0, "'[\"11\",\"AB12\",\"11\",\"ab12\",\"22\"]'")
                        OBS(3, 3, NULL, "'[\"AB12\"]'"));
    const char *body = report(&f, T);
    /* Row 2: the hit at 1 credits N1 both ways, the hit at 3 N1 (we) and N2 (they). */
    cr_assert(strstr(entry(body, "links", N1), "\"we_hear\":2,\"they_hear\":1,\"bottleneck\":1,"),
              "%s", body);
    cr_assert(strstr(entry(body, "links", N2), "\"we_hear\":0,\"they_hear\":1,"), "%s", body);
    cr_assert_str_eq(order_of(body, "links"), "111111,222222",
                     "the target next to itself, as its own observer or as an ADVERT's sender "
                     "is no link");
    cr_assert_eq(number_of(body, "relay_observations"), 3, "each row once");
    close_db(&f);
}

Test(reach, null_empty_and_foreign_paths_are_skipped)
{
    struct fixture f;
    open_db(&f, OBS(1, 1, 1.0, "NULL") OBS(1, 1, 1.0, "''") OBS(1, 1, 1.0, "'[]'")
                    OBS(1, 1, 1.0, "'[\"AB\"]'") OBS(1, 1, 1.0, "'[\"AB99\",\"AB12C\"]'")
                        OBS(1, 1, 1.0, "'[\"AB12CD00\"]'") OBS(1, 1, 1.0, "'AB12'"));
    const char *body = report(&f, T);
    cr_assert_eq(number_of(body, "relay_observations"), 0);
    cr_assert_str_eq(section(body, "links"), "[]");
    cr_assert_str_eq(section(body, "direct_observers"), "[]");
    close_db(&f);
}

Test(reach, tokens_are_every_quoted_substring_in_any_case)
{
    struct fixture f;
    open_db(&f, OBS(1, 1, NULL, "'[ \"11\" , \"aB12cD\" ,\"33\"]'")
                    OBS(1, 1, NULL, "'x\"22\"y\"Ab12\"z'"));
    const char *body = report(&f, T);
    cr_assert_str_eq(order_of(body, "links"), "111111,222222,333333,obs1", "%s", body);
    cr_assert_eq(number_of(body, "relay_observations"), 2);
    close_db(&f);
}

/* --- which rows ---------------------------------------------------------------------------- */

Test(reach, window_starts_at_now_minus_days_inclusive)
{
    struct fixture f;
    char sql[2048];
    /* Rowids out of time order: 1 and 3 are older than the window, 2 and 4 in it, 5 exactly
     * at its start. */
    snprintf(sql, sizeof sql,
             "INSERT INTO observations (transmission_id, observer_idx, path_json, timestamp)"
             " VALUES (1, 1, '[\"11\",\"AB12\"]', %d), (1, 1, '[\"22\",\"AB12\"]', %d),"
             " (1, 1, '[\"33\",\"AB12\"]', %d), (1, 1, '[\"44AA\",\"AB12\"]', %d),"
             " (1, 1, '[\"66\",\"AB12\"]', %d);",
             SINCE - 1, NOW, SINCE - 86400, NOW - 86400 + 1, SINCE);
    open_db(&f, sql);
    const char *body = report(&f, T);
    cr_assert(strstr(body, "\"window\":{\"days\":7,\"since\":\"" SINCE_TEXT "\"}"), "%s", body);
    cr_assert_str_eq(order_of(body, "links"), "obs1,222222,44aaaa,666666");
    cr_assert_eq(f.stats.rows_scanned, 4, "the scan starts at the window's first rowid");

    body = report_days(&f, T, 1);
    cr_assert(strstr(body, "\"window\":{\"days\":1,\"since\":\"2027-01-14T08:00:00Z\"}"), "%s",
              body);
    cr_assert_str_eq(order_of(body, "links"), "obs1,222222,44aaaa");
    cr_assert_eq(f.stats.rows_scanned, 4, "rowid 3 is out of the window but inside the range");

    mg_buf_reset(&f.body);
    char err[64];
    cr_assert_eq(mg_reach_build(&f.t.db, T, 7, (int64_t)SINCE - 86400 * 30, &f.body, &f.stats, err,
                                sizeof err),
                 MG_REACH_OK);
    cr_assert_eq(f.stats.rows_scanned, 5, "every row is in a window ending before them");
    mg_buf_reset(&f.body);
    cr_assert_eq(
        mg_reach_build(&f.t.db, T, 7, (int64_t)NOW + 86400 * 8, &f.body, &f.stats, err, sizeof err),
        MG_REACH_OK);
    cr_assert_eq(f.stats.rows_scanned, 0, "no row is that new");
    cr_assert(strstr(mg_buf_cstr(&f.body), "\"relay_observations\":0"));
    close_db(&f);
}

Test(reach, rows_without_a_transmission_do_not_count)
{
    struct fixture f;
    open_db(&f, OBS(999, 1, 1.0, "'[\"11\",\"AB12\"]'") OBS(1, 1, 1.0, "'[\"22\",\"AB12\"]'"));
    const char *body = report(&f, T);
    cr_assert_str_eq(order_of(body, "links"), "222222,obs1");
    cr_assert_eq(number_of(body, "relay_observations"), 1);
    close_db(&f);
}

Test(reach, row_cap_counts_matching_rows_and_reports_truncation)
{
    struct fixture f;
    /* Row 1 holds "AB12" quoted, as LIKE sees it, but no such token: it takes a place under
     * the cap all the same. */
    open_db(&f, OBS(1, 1, NULL, "'[\"Q\"AB12\"]'") OBS(1, 1, NULL, "'[\"11\",\"AB12\"]'")
                    OBS(1, 1, NULL, "'[\"22\",\"AB12\"]'") OBS(1, 1, NULL, "'[\"33\"]'"));
    cr_assert_eq(try_report(&f, T, 7, 1), MG_REACH_OK);
    cr_assert(f.stats.truncated);
    cr_assert_eq(number_of(mg_buf_cstr(&f.body), "relay_observations"), 0);
    cr_assert_eq(try_report(&f, T, 7, 2), MG_REACH_OK);
    cr_assert(f.stats.truncated);
    cr_assert_str_eq(order_of(mg_buf_cstr(&f.body), "links"), "111111,obs1");
    cr_assert_eq(try_report(&f, T, 7, 3), MG_REACH_OK);
    cr_assert_not(f.stats.truncated);
    cr_assert_eq(number_of(mg_buf_cstr(&f.body), "relay_observations"), 2);
    cr_assert_eq(f.stats.rows_scanned, 4);
    close_db(&f);
}

Test(reach, default_row_cap_is_corescopes_200000)
{
    struct fixture f;
    open_db(&f, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200001)"
                " INSERT INTO observations (transmission_id, observer_idx, path_json, timestamp)"
                " SELECT 1, 1, '[\"AB12\"]', 1799999000 FROM n;");
    const char *body = report(&f, T);
    cr_assert_eq(MG_REACH_ROW_CAP, 200000);
    cr_assert(f.stats.truncated);
    cr_assert_eq(number_of(body, "relay_observations"), 200000);
    cr_assert_eq(number_of(body, "count"), 200000);
    close_db(&f);
}

/* --- the prefix map and the tokens ---------------------------------------------------------- */

Test(reach, reliable_tokens_are_the_prefixes_only_the_target_has)
{
    struct fixture f;
    open_db(&f, "INSERT INTO nodes (public_key, role) VALUES"
                " ('55aaaa" Z58 "', 'Repeater'), ('"
                "ab12cc" Z58 "', 'ROOM'),"
                " ('"
                "33bbbb" Z58 "', 'bedroom'), ('"
                "33cccc" Z58 "', 'mobile_room_server');");
    cr_assert(strstr(report(&f, T), "\"reliable_tokens\":[\"AB12CD\"]"), "AB12 names ab12cc too");
    cr_assert(strstr(report(&f, SIB), "\"reliable_tokens\":[\"AB99\",\"AB99EE\"]"));
    cr_assert(strstr(report(&f, "55aaaa" Z58), "\"reliable_tokens\":[\"55\",\"55AA\",\"55AAAA\"]"),
              "a companion is not in the prefix map");
    cr_assert(strstr(report(&f, N3), "\"reliable_tokens\":[\"3333\",\"333333\"]"),
              "33cccc is a room_server, 33bbbb (a bedroom) is not a room");
    close_db(&f);
}

Test(reach, companion_target_gets_an_empty_report)
{
    struct fixture f;
    open_db(&f, OBS(1, 1, 1.0, "'[\"11\",\"55\",\"22\"]'")
                    OBS(1, 1, 1.0,
                        "'[\"5555\"]'") "INSERT INTO neighbor_edges (node_a, node_b) VALUES ('" C5
                                        "', '" N1 "');");
    const char *body = report(&f, C5);
    cr_assert_str_eq(body,
                     "{\"node\":{\"pubkey\":\"" C5 "\",\"name\":\"Phone\",\"role\":\"companion\","
                     "\"lat\":37.2,\"lon\":-122.1,\"first_seen\":\"2026-02-01T00:00:00Z\"},"
                     "\"window\":{\"days\":7,\"since\":\"" SINCE_TEXT "\"},"
                     "\"reliable_tokens\":[],"
                     "\"importance\":{\"neighbor_degree\":1,\"degree_rank\":1,"
                     "\"nodes_with_edges\":2,\"relay_observations\":0,\"bidirectional_links\":0,"
                     "\"direct_observers\":0},\"direct_observers\":[],\"links\":[]}\n");
    cr_assert_eq(f.stats.rows_scanned, 0, "no token, no scan");
    close_db(&f);
}

Test(reach, observer_only_key_is_found_with_empty_lists)
{
    struct fixture f;
    open_db(&f, OBS(1, 5, 1.0, "'[\"E0\"]'"));
    const char *body = report(&f, SOLO);
    cr_assert_str_eq(body,
                     "{\"node\":{\"pubkey\":\"" SOLO "\",\"name\":\"Solo\",\"role\":\"observer\","
                     "\"lat\":null,\"lon\":null,\"first_seen\":\"\"},"
                     "\"window\":{\"days\":7,\"since\":\"" SINCE_TEXT "\"},"
                     "\"reliable_tokens\":[],"
                     "\"importance\":{\"neighbor_degree\":0,\"degree_rank\":0,"
                     "\"nodes_with_edges\":0,\"relay_observations\":0,\"bidirectional_links\":0,"
                     "\"direct_observers\":0},\"direct_observers\":[],\"links\":[]}\n");
    close_db(&f);
}

Test(reach, node_wins_over_an_observer_with_the_same_key)
{
    struct fixture f;
    open_db(&f, NULL);
    const char *body = report(&f, N1);
    cr_assert(
        strstr(body, "\"node\":{\"pubkey\":\"" N1 "\",\"name\":\"One\",\"role\":\"repeater\""),
        "%s", body);
    close_db(&f);
}

Test(reach, a_key_stored_twice_in_two_cases_reads_its_last_row_and_is_ambiguous)
{
    struct fixture f;
    open_db(&f, "INSERT INTO nodes (public_key, name, role) VALUES"
                " (upper('" A4 "'), 'Four again', 'room');");
    const char *body = report(&f, A4);
    cr_assert(strstr(body, "\"node\":{\"pubkey\":\"" A4 "\",\"name\":\"Four again\","
                           "\"role\":\"room\","),
              "%s", body);
    cr_assert(strstr(body, "\"reliable_tokens\":[]"), "the prefix map lists both rows: %s", body);
    close_db(&f);
}

/* --- order and numbers ---------------------------------------------------------------------- */

Test(reach, links_sort_bidir_then_bottleneck_then_total_then_pubkey)
{
    struct fixture f;
    /* we/they: N7 2/2, N8 3/1, N6 1/1 and N9 1/1 (equal but for the key), N1 5/0, N3 0/2,
     * N2 0/1. No observer, so last hops credit nobody. */
    open_db(&f, "INSERT INTO observations (transmission_id, path_json, timestamp) VALUES"
                " (1, '[\"66\",\"AB12\",\"66\"]', 1799999000),"
                " (1, '[\"99\",\"AB12\",\"99\"]', 1799999000),"
                " (1, '[\"77\",\"AB12\",\"77\",\"AB12\",\"77\"]', 1799999000),"
                " (1, '[\"88\",\"AB12\",\"88\"]', 1799999000),"
                " (1, '[\"88\",\"AB12\"]', 1799999000), (1, '[\"88\",\"AB12\"]', 1799999000),"
                " (1, '[\"11\",\"AB12\"]', 1799999000), (1, '[\"11\",\"AB12\"]', 1799999000),"
                " (1, '[\"11\",\"AB12\"]', 1799999000), (1, '[\"11\",\"AB12\"]', 1799999000),"
                " (1, '[\"11\",\"AB12\"]', 1799999000), (1, '[\"AB12\",\"22\"]', 1799999000),"
                " (1, '[\"AB12\",\"33\"]', 1799999000), (1, '[\"AB12\",\"33\"]', 1799999000);");
    const char *body = report(&f, T);
    cr_assert_str_eq(order_of(body, "links"), "777777,888888,666666,999999,111111,333333,222222",
                     "%s", body);
    cr_assert(strstr(entry(body, "links", N8), "\"we_hear\":3,\"they_hear\":1,\"bottleneck\":1,"),
              "%s", body);
    cr_assert_eq(number_of(body, "bidirectional_links"), 4);
    close_db(&f);
}

Test(reach, direct_observers_sort_by_count_then_pubkey)
{
    struct fixture f;
    open_db(&f, OBS(1, 6, NULL, "'[\"AB12\"]'") OBS(1, 4, NULL, "'[\"AB12\"]'")
                    OBS(1, 1, NULL, "'[\"AB12\"]'") OBS(1, 2, NULL, "'[\"AB12\"]'")
                        OBS(1, 2, NULL, "'[\"AB12\"]'"));
    const char *body = report(&f, T);
    cr_assert_str_eq(order_of(body, "direct_observers"), "111111,obs1,obs4,obs6", "%s", body);
    close_db(&f);
}

Test(reach, distance_needs_gps_at_both_ends)
{
    struct fixture f;
    open_db(&f, OBS(1, NULL, NULL, "'[\"11\",\"AB99\",\"22\"]'")
                    OBS(1, NULL, NULL, "'[\"11\",\"AB12\",\"AB99\"]'"));
    /* SIB sits at 0,0: no GPS, so no distance from it even to N1. */
    const char *body = report(&f, SIB);
    cr_assert(strstr(body, "\"node\":{\"pubkey\":\"" SIB "\",\"name\":\"Sibling\","
                           "\"role\":\"repeater\",\"lat\":null,\"lon\":null,\"first_seen\":\"\"}"),
              "%s", body);
    cr_assert_str_eq(entry(body, "links", N1),
                     "{\"pubkey\":\"" N1 "\",\"name\":\"One\",\"role\":\"repeater\",\"lat\":37.1,"
                     "\"lon\":-122,\"we_hear\":1,\"they_hear\":0,\"bottleneck\":0,"
                     "\"bidir\":false,\"distance_km\":null}");
    body = report(&f, T);
    cr_assert(strstr(entry(body, "links", SIB), "\"lat\":null,\"lon\":null,"), "%s", body);
    cr_assert(strstr(entry(body, "links", SIB), "\"distance_km\":null}"), "%s", body);
    cr_assert(strstr(entry(body, "links", N1), "\"distance_km\":11.11949266445603}"), "%s", body);
    close_db(&f);
}

/* --- importance ---------------------------------------------------------------------------- */

Test(reach, neighbor_degree_counts_both_sides_case_folded_and_ranks_by_larger_degrees)
{
    struct fixture f;
    /* Degrees: T 4 (once as node_a, once upper case, twice in its self-row), '' 3, N1 2,
     * N2 2, N3 1. */
    open_db(&f, "INSERT INTO neighbor_edges (node_a, node_b) VALUES"
                " ('', '" T "'), (upper('" T "'), '" N1 "'), ('" T "', '" T "'),"
                " ('', '" N1 "'), ('" N2 "', ''), ('" N2 "', '" N3 "');");
    const char *body = report(&f, T);
    cr_assert(strstr(body, "\"importance\":{\"neighbor_degree\":4,\"degree_rank\":1,"
                           "\"nodes_with_edges\":5,"),
              "%s", body);
    body = report(&f, N1);
    cr_assert(strstr(body, "\"neighbor_degree\":2,\"degree_rank\":3,\"nodes_with_edges\":5,"), "%s",
              body);
    body = report(&f, N2);
    cr_assert(strstr(body, "\"neighbor_degree\":2,\"degree_rank\":3,"), "ties share a rank");
    body = report(&f, N3);
    cr_assert(strstr(body, "\"neighbor_degree\":1,\"degree_rank\":5,"), "%s", body);
    body = report(&f, N6);
    cr_assert(strstr(body, "\"neighbor_degree\":0,\"degree_rank\":0,\"nodes_with_edges\":5,"), "%s",
              body);
    close_db(&f);
}

/* --- the transaction ----------------------------------------------------------------------- */

Test(reach, leaves_the_connection_as_it_found_it)
{
    struct fixture f;
    open_db(&f, OBS(1, 1, NULL, "'[\"11\",\"AB12\"]'"));
    report(&f, T);
    cr_assert(sqlite3_get_autocommit(f.t.db.conn), "its own transaction is closed");
    cr_assert_eq(sqlite3_exec(f.t.db.conn, "BEGIN", NULL, NULL, NULL), SQLITE_OK);
    report(&f, T);
    cr_assert_not(sqlite3_get_autocommit(f.t.db.conn), "the caller's transaction stays open");
    cr_assert_eq(sqlite3_exec(f.t.db.conn, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    close_db(&f);
}

Test(reach, failure_names_what_failed_appends_nothing_and_ends_the_transaction)
{
    struct fixture f;
    /* A neighbor_edges whose rows cannot be read: abs() of the smallest integer overflows. */
    open_db(&f, OBS(1, 1, NULL,
                    "'[\"11\",\"AB12\"]'") "DROP TABLE neighbor_edges;"
                                           "CREATE VIEW neighbor_edges AS SELECT 'a' AS node_a,"
                                           " abs(-9223372036854775807 - 1) AS node_b, 1 AS count, "
                                           "NULL AS last_seen;");
    mg_buf_puts(&f.body, "kept");
    char err[256];
    cr_assert_eq(mg_reach_build(&f.t.db, T, 7, NOW, &f.body, &f.stats, err, sizeof err),
                 MG_REACH_ERROR);
    cr_assert(strstr(err, "neighbor_edges") && strstr(err, "integer overflow"), "%s", err);
    cr_assert_eq(f.stats.db_error, SQLITE_ERROR, "%d", f.stats.db_error);
    cr_assert_str_eq(mg_buf_cstr(&f.body), "kept");
    cr_assert(sqlite3_get_autocommit(f.t.db.conn));
    close_db(&f);
}

Test(reach, scan_walks_observations_by_rowid_and_joins_only_by_primary_key)
{
    struct fixture f;
    open_db(&f, OBS(1, 1, NULL, "'[\"11\",\"AB12\"]'"));
    report(&f, T); /* registers mg_reach_match on the connection */
    char sql[1024];
    snprintf(sql, sizeof sql, "EXPLAIN QUERY PLAN %s", mg_reach_scan_sql);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(f.t.db.conn, sql, -1, &st, NULL), SQLITE_OK, "%s",
                 sqlite3_errmsg(f.t.db.conn));
    char plan[1024] = "";
    while (sqlite3_step(st) == SQLITE_ROW) {
        strncat(plan, (const char *)sqlite3_column_text(st, 3), sizeof plan - strlen(plan) - 2);
        strncat(plan, ";", sizeof plan - strlen(plan) - 1);
    }
    sqlite3_finalize(st);
    cr_assert_str_eq(plan, "SEARCH o USING INTEGER PRIMARY KEY (rowid>?);"
                           "SEARCH t USING INTEGER PRIMARY KEY (rowid=?);"
                           "SEARCH obs USING INTEGER PRIMARY KEY (rowid=?) LEFT-JOIN;");
    close_db(&f);
}

/* --- CoreScope's own database ---------------------------------------------------------------- */

#define COMMITTED_FIXTURE MESHGATE_SOURCE_DIR "/../shared/data/corescope-e2e-fixture.db"

static long long count_of(const char *s, const char *needle)
{
    long long n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

Test(reach, committed_fixture_matches_its_readme)
{
    if (access(COMMITTED_FIXTURE, R_OK) != 0)
        cr_skip_test("%s is not here (CI has it)", COMMITTED_FIXTURE);
    struct fixture f;
    mg_test_tmpdir(f.dir, sizeof f.dir);
    snprintf(f.db, sizeof f.db, "%s/fresh.db", f.dir);
    char err[512];
    int64_t now = (int64_t)time(NULL);
    cr_assert_eq(mg_fixture_freshen(COMMITTED_FIXTURE, f.db, now, err, sizeof err), 0, "%s", err);
    struct mg_db db;
    cr_assert_eq(mg_db_open(&db, f.db, 5000, err, sizeof err), 0, "%s", err);
    struct mg_buf body;
    mg_buf_init(&body);

    const char *n6ij = "ec3433bb3adf1acaee0ce117600b0ca473705486ec666137379a1e8cbb7e75f4";
    cr_assert_eq(mg_reach_build(&db, n6ij, 7, now, &body, NULL, err, sizeof err), MG_REACH_OK, "%s",
                 err);
    const char *b = mg_buf_cstr(&body);
    cr_assert(strstr(b, "\"name\":\"N6IJ Repeater\""), "%s", b);
    cr_assert(strstr(b, "\"reliable_tokens\":[\"EC\",\"EC34\",\"EC3433\"]"), "%s", b);
    cr_assert(strstr(b, "\"importance\":{\"neighbor_degree\":3,\"degree_rank\":6,"
                        "\"nodes_with_edges\":107,\"relay_observations\":23,"
                        "\"bidirectional_links\":5,\"direct_observers\":2}"),
              "%s", b);
    cr_assert_eq(count_of(section(b, "links"), "\"we_hear\":"), 10);

    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db.conn, "SELECT public_key FROM nodes", -1, &st, NULL),
                 SQLITE_OK);
    int nodes = 0, with_links = 0, without_token = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        char key[65];
        cr_assert(mg_reach_parse_pubkey((const char *)sqlite3_column_text(st, 0), key));
        mg_buf_reset(&body);
        cr_assert_eq(mg_reach_build(&db, key, 7, now, &body, NULL, err, sizeof err), MG_REACH_OK,
                     "%s: %s", key, err);
        b = mg_buf_cstr(&body);
        nodes++;
        with_links += strcmp(section(b, "links"), "[]") != 0;
        without_token += strstr(b, "\"reliable_tokens\":[]") != NULL;
        if (strcmp(key, "1000009e310d729534b70faa33a1abe5cd5e45d594f72f786febccbb770b7e74") == 0) {
            cr_assert_eq(count_of(section(b, "links"), "\"we_hear\":"), 46);
            cr_assert_eq(count_of(section(b, "links"), "\"bidir\":true"), 12);
            cr_assert_eq(number_of(b, "relay_observations"), 207);
        }
    }
    sqlite3_finalize(st);
    cr_assert_eq(nodes, 200);
    cr_assert_eq(with_links, 115);
    cr_assert_eq(without_token, 9);

    mg_buf_free(&body);
    mg_db_close(&db);
    mg_test_rmdir(f.dir);
}

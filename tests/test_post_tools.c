/* SPDX-License-Identifier: ISC */
/*
 * CoreScope's POST tools and API-key routes on meshgate (issue 26, item 1: posttools).
 *
 *   post_tools    in-process, on a small database whose answers are worked out from its rows:
 *                 POST /api/packets/observations (every body CoreScope's decoder takes or
 *                 refuses, the results as /api/packets/{id} lists each transmission's
 *                 observations), the API-key routes without an upstream (CoreScope's 403
 *                 without an apiKey, meshgate's read-only 403 with one), and methods (405 with
 *                 Allow; a GET of a POST path goes where CoreScope's router takes it);
 *   post_bodies   the real binary: a native route's body is read whole within its cap and its
 *                 deadline before anything runs: over the cap 413 and close, chunked 411 and
 *                 close, Content-Length with Transfer-Encoding 400 and close, a trickle 408 and
 *                 close, Expect: 100-continue answered, and a body read whole leaves the next
 *                 request on the connection intact; with an upstream the API-key routes go
 *                 there, without one they answer 403.
 */
#include "corescope_config.h"
#include "fixture.h"
#include "harness.h"
#include "inproc.h"
#include "router.h"
#include "segment.h"
#include "stats.h"
#include "upstream_proc.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define CEILING_MS 30000

#define PK_A "aa11111111111111111111111111111111111111111111111111111111111111"

/* Three transmissions: 1 heard twice (two observers), 2 once, 3 never. */
static const char small_packets[] =
    "INSERT INTO observers (rowid, id, name, iata) VALUES"
    " (1, 'AAAA01', 'Alpha', 'SFO'), (2, 'BBBB02', 'Bravo', 'OAK');"
    "INSERT INTO transmissions (id, raw_hex, hash, first_seen, route_type, payload_type,"
    " decoded_json, from_pubkey) VALUES"
    " (1, '11', 'abcdef0000000001', '2026-05-01T00:00:00Z', 1, 4, '{\"type\":\"ADVERT\"}',"
    "  '" PK_A "'),"
    " (2, '22', 'abcdef0000000002', '2026-05-02T00:00:00Z', 1, 5, '{\"type\":\"GRP_TXT\"}', NULL),"
    " (3, '33', 'abcdef0000000003', '2026-05-03T00:00:00Z', 0, 2, '{\"type\":\"TXT_MSG\"}', NULL);"
    "INSERT INTO observations (id, transmission_id, observer_idx, direction, snr, rssi,"
    " path_json, timestamp, resolved_path) VALUES"
    " (1, 1, 1, 'rx', 1.5, -80, '[\"AA\"]', 1779041349, '[\"" PK_A "\"]'),"
    " (2, 1, 2, 'rx', 2, -81, '[\"AA\",\"BB\"]', 1779041350, NULL),"
    " (3, 2, 2, 'rx', 3, -82, '[]', 1779041351, NULL);";

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
    mg_corescope_free(&mg_corescope);
    if (fx.dir[0])
        mg_test_rmdir(fx.dir);
    fx.dir[0] = '\0';
}

TestSuite(post_tools, .fini = cleanup, .timeout = 120);

/* CoreScope's config.json as text (NULL: none), loaded as this process's. */
static void configure(const char *config)
{
    char err[512] = "";
    mg_corescope_free(&mg_corescope);
    if (config)
        cr_assert_eq(mg_corescope_load_text(&mg_corescope, "config.json", config, strlen(config),
                                            NULL, 0, err, sizeof err),
                     0, "%s", err);
    else
        cr_assert_eq(mg_corescope_load(&mg_corescope, "", err, sizeof err), 0, "%s", err);
}

static void serve_small(const char *config)
{
    mg_test_tmpdir(fx.dir, sizeof fx.dir);
    snprintf(fx.db, sizeof fx.db, "%s/small.db", fx.dir);
    cr_assert_eq(mg_test_make_db(fx.db, true, small_packets), 0);
    configure(config);
    cr_assert(mg_test_ctx_open(&fx.t, fx.db));
    fx.open = true;
}

static const char *post(const char *target, const char *body, int want_status)
{
    int status = mg_test_ctx_request(&fx.t, "POST", target, body);
    const char *got = (const char *)fx.t.res.body.data;
    cr_assert_eq(status, want_status, "POST %s %s: status %d, want %d: %.300s", target,
                 body ? body : "(no body)", status, want_status, got);
    return got;
}

/* The "observations" array of GET /api/packets/{id}, as JSON text (malloc'ed). */
static char *detail_observations(const char *id)
{
    char target[64];
    snprintf(target, sizeof target, "/api/packets/%s", id);
    cr_assert_eq(mg_test_ctx_get(&fx.t, target), 200, "%s", target);
    json_error_t err;
    json_t *detail = json_loads((const char *)fx.t.res.body.data, 0, &err);
    cr_assert(detail, "%s", err.text);
    char *text = json_dumps(json_object_get(detail, "observations"), JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(detail);
    return text;
}

Test(post_tools, batch_observations_lists_each_hash_as_the_packet_detail_does)
{
    serve_small(NULL);
    char *one = detail_observations("1");
    char *two = detail_observations("2");
    cr_assert(strstr(one, "AAAA01") && strstr(one, "BBBB02"), "%s", one);
    /* Given once each in bytewise order (a Go map's), looked up lowercased, the key as sent;
     * a hash no transmission has, and one never heard, list nothing. */
    const char *body = post("/api/packets/observations",
                            "{\"hashes\":[\"abcdef0000000002\",\"ABCDEF0000000001\",\"zz\","
                            "\"abcdef0000000002\",\"abcdef0000000003\"]}",
                            200);
    json_error_t err;
    json_t *got = json_loads(body, 0, &err);
    cr_assert(got, "%s: %s", err.text, body);
    json_t *results = json_object_get(got, "results");
    cr_assert_eq(json_object_size(got), 1, "%s", body);
    cr_assert_eq(json_object_size(results), 4, "%s", body);
    char *text =
        json_dumps(json_object_get(results, "ABCDEF0000000001"), JSON_COMPACT | JSON_SORT_KEYS);
    cr_expect_str_eq(text, one);
    free(text);
    text = json_dumps(json_object_get(results, "abcdef0000000002"), JSON_COMPACT | JSON_SORT_KEYS);
    cr_expect_str_eq(text, two);
    free(text);
    cr_expect_eq(json_array_size(json_object_get(results, "zz")), 0);
    cr_expect(json_is_array(json_object_get(results, "abcdef0000000003")));
    cr_expect_eq(json_array_size(json_object_get(results, "abcdef0000000003")), 0);
    const char *first = strstr(body, "\"ABCDEF0000000001\"");
    const char *second = strstr(body, "\"abcdef0000000002\"");
    const char *third = strstr(body, "\"abcdef0000000003\"");
    const char *last = strstr(body, "\"zz\"");
    cr_expect(first && second && third && last && first < second && second < third && third < last,
              "keys not in bytewise order: %s", body);
    json_decref(got);
    free(one);
    free(two);
}

Test(post_tools, batch_observations_takes_and_refuses_bodies_as_corescopes_decoder)
{
    serve_small(NULL);
    static const char *const refused[] = {"",
                                          "{",
                                          "[]",
                                          "1",
                                          "\"abc\"",
                                          "true",
                                          "{\"hashes\":5}",
                                          "{\"hashes\":[1]}",
                                          "{\"hashes\":{}}",
                                          "{\"hashes\":\"abc\"}",
                                          "{\"hashes\":[\"a\",{}]}",
                                          NULL};
    for (int i = 0; refused[i]; i++)
        cr_expect_str_eq(post("/api/packets/observations", refused[i], 400),
                         "{\"error\":\"invalid JSON body\"}\n", "body %s", refused[i]);
    cr_expect_str_eq(post("/api/packets/observations", NULL, 400),
                     "{\"error\":\"invalid JSON body\"}\n");
    static const char *const empty[] = {
        "null", "{}", "{\"hashes\":null}", "{\"hashes\":[]}", " \n{\"other\":[1,2]}", NULL};
    for (int i = 0; empty[i]; i++)
        cr_expect_str_eq(post("/api/packets/observations", empty[i], 200), "{\"results\":{}}\n",
                         "body %s", empty[i]);
    /* The key in any case, a null entry as "", and what follows the first value unread. */
    cr_expect_str_eq(post("/api/packets/observations", "{\"HASHES\":[\"zz\",null]} trailing", 200),
                     "{\"results\":{\"\":[],\"zz\":[]}}\n");
    /* At most 200 hashes. */
    char big[8192];
    size_t n = (size_t)snprintf(big, sizeof big, "{\"hashes\":[");
    for (int i = 0; i < 201; i++)
        n += (size_t)snprintf(big + n, sizeof big - n, "%s\"h%d\"", i ? "," : "", i);
    snprintf(big + n, sizeof big - n, "]}");
    cr_expect_str_eq(post("/api/packets/observations", big, 400),
                     "{\"error\":\"too many hashes (max 200)\"}\n");
    char *comma = strrchr(big, ',');
    snprintf(comma, sizeof big - (size_t)(comma - big), "]}");
    post("/api/packets/observations", big, 200);
}

static const char *const key_routes[][2] = {
    {"POST", "/api/packets"},
    {"POST", "/api/perf/reset"},
    {"PUT", "/api/config/geo-filter"},
    {"POST", "/api/admin/prune-geo-filter"},
    {"GET", "/api/admin/prune-geo-filter/status"},
    {"GET", "/api/debug/affinity"},
    {"GET", "/api/dropped-packets"},
    {"GET", "/api/backup"},
};

Test(post_tools, api_key_routes_answer_as_corescope_without_a_key)
{
    serve_small(NULL);
    for (size_t i = 0; i < sizeof key_routes / sizeof key_routes[0]; i++) {
        int status =
            mg_test_ctx_request(&fx.t, key_routes[i][0], key_routes[i][1], "{\"polygon\":[]}");
        cr_expect_eq(status, 403, "%s %s", key_routes[i][0], key_routes[i][1]);
        cr_expect_str_eq((const char *)fx.t.res.body.data,
                         "{\"error\":\"write endpoints disabled — set apiKey in config.json\"}\n",
                         "%s %s", key_routes[i][0], key_routes[i][1]);
        /* The body was not read: the connection would close after the answer. */
        cr_expect(fx.t.res.close, "%s %s", key_routes[i][0], key_routes[i][1]);
    }
    /* With an apiKey, no key can open them here: read-only, whatever the client sends. */
    configure("{\"apiKey\":\"a-long-enough-secret-key-1234\"}");
    for (size_t i = 0; i < sizeof key_routes / sizeof key_routes[0]; i++) {
        int status = mg_test_ctx_request(&fx.t, key_routes[i][0], key_routes[i][1], NULL);
        cr_expect_eq(status, 403, "%s %s", key_routes[i][0], key_routes[i][1]);
        cr_expect(strstr((const char *)fx.t.res.body.data, "meshgate is read-only"), "%s",
                  (const char *)fx.t.res.body.data);
        cr_expect(!fx.t.res.close);
    }
}

Test(post_tools, methods_are_matched_as_corescopes_router_does)
{
    serve_small(NULL);
    /* GET of the POST path: the packet detail route takes it, as in CoreScope's router. */
    cr_expect_eq(mg_test_ctx_get(&fx.t, "/api/packets/observations"), 404);
    /* Another method on a path of routes: 405 with every method it has. */
    cr_expect_eq(mg_test_ctx_request(&fx.t, "PUT", "/api/packets", NULL), 405);
    cr_expect(strstr(fx.t.res.headers.data, "Allow: GET, HEAD, POST\r\n"), "%s",
              fx.t.res.headers.data);
    cr_expect_eq(mg_test_ctx_get(&fx.t, "/api/perf/reset"), 405);
    cr_expect(strstr(fx.t.res.headers.data, "Allow: POST\r\n"), "%s", fx.t.res.headers.data);
    cr_expect_eq(mg_test_ctx_request(&fx.t, "HEAD", "/api/packets/observations", NULL), 404);
    cr_expect_eq(mg_test_ctx_request(&fx.t, "DELETE", "/api/nodes", NULL), 405);
    cr_expect(strstr(fx.t.res.headers.data, "Allow: GET, HEAD\r\n"), "%s", fx.t.res.headers.data);
    /* A GET route refuses a body it does not read. */
    cr_expect_eq(mg_test_ctx_request(&fx.t, "GET", "/api/healthz", "x"), 413);
    cr_expect(fx.t.res.close);
}

/* ---- CoreScope's own answers on its real database ---- */

#define FIXTURE_MIGRATED_DB MESHGATE_SOURCE_DIR "/../shared/data/corescope-e2e-fixture-migrated.db"
#define EXPECTED MESHGATE_SOURCE_DIR "/tests/corescope-post-tools.json"

/*
 * The one difference in the recording: CoreScope's store did not load the newest
 * transmission's one observation (its /api/healthz said loadedObs 499 of the file's 500; the
 * missing one is transmission 1's, 06001f5d97f8ed9e, the last row of its load), so it answers
 * [] for that hash; meshgate lists the observation the file holds. Checked as that.
 */
static bool newest_transmission(const char *hash)
{
    return strcasecmp(hash, "06001f5d97f8ed9e") == 0;
}

/* mine and CoreScope's answers compared as JSON (object keys in any order, arrays in theirs),
 * a batch's results key by key. */
static void expect_same_json(json_t *mine, json_t *answer, const char *what)
{
    json_t *results = json_object_get(answer, "results");
    if (json_is_object(results)) {
        json_t *got = json_object_get(mine, "results");
        cr_expect_eq(json_object_size(got), json_object_size(results), "%s", what);
        const char *key;
        json_t *want;
        json_object_foreach(results, key, want)
        {
            json_t *have = json_object_get(got, key);
            if (newest_transmission(key)) {
                cr_expect_eq(json_array_size(want), 0, "%s: %s", what, key);
                cr_expect_eq(json_array_size(have), 1, "%s: %s", what, key);
                continue;
            }
            expect_same_json(have, want, key);
        }
        return;
    }
    char *w = json_dumps(answer, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENCODE_ANY);
    char *g = json_dumps(mine, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENCODE_ANY);
    cr_expect_str_eq(g ? g : "(none)", w ? w : "(none)", "%s", what);
    free(w);
    free(g);
}

/* Each recorded request of set answers CoreScope's status and body. A recorded answer that
 * is not JSON is CoreScope's front end, not its API (a GET of a POST-only path falls through
 * to its index.html, 200): meshgate answers 405 with Allow there, on purpose. */
static void expect_recorded(json_t *expected, const char *set)
{
    json_t *list = json_object_get(expected, set);
    cr_assert(json_is_array(list), "%s has no \"%s\"", EXPECTED, set);
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e)
    {
        const char *method = json_string_value(json_object_get(e, "method"));
        const char *path = json_string_value(json_object_get(e, "path"));
        const char *body = json_string_value(json_object_get(e, "body")); /* NULL: none */
        int want = (int)json_integer_value(json_object_get(e, "status"));
        json_t *answer = json_object_get(e, "answer");
        int status = mg_test_ctx_request(&fx.t, method, path, body);
        const char *got = (const char *)fx.t.res.body.data;
        if (json_is_string(answer)) {
            cr_expect_eq(status, 405, "%s %s: %d", method, path, status);
            continue;
        }
        cr_expect_eq(status, want, "%s %s %s: %d, CoreScope %d: %.300s", method, path,
                     body ? body : "", status, want, got);
        json_error_t err;
        json_t *mine = json_loads(got, 0, &err);
        cr_assert_not_null(mine, "%s %s: not JSON (%s): %.300s", method, path, err.text, got);
        char what[256];
        snprintf(what, sizeof what, "%s %s %.100s", method, path, body ? body : "");
        expect_same_json(mine, answer, what);
        json_decref(mine);
    }
}

Test(post_tools, answers_equal_corescopes_on_its_database)
{
    if (access(FIXTURE_MIGRATED_DB, R_OK) != 0 || access(EXPECTED, R_OK) != 0)
        cr_skip_test("%s not present: this test compares with CoreScope's answers on its real "
                     "database (../shared, see ../shared/data/README.md)",
                     FIXTURE_MIGRATED_DB);
    json_error_t jerr;
    json_t *expected = json_load_file(EXPECTED, 0, &jerr);
    cr_assert_not_null(expected, "%s: %s", EXPECTED, jerr.text);
    /* Freshened to the time of the recording: the observations' times are the recorded ones. */
    int64_t now = json_integer_value(json_object_get(expected, "now"));
    cr_assert_gt(now, 0);
    mg_test_tmpdir(fx.dir, sizeof fx.dir);
    snprintf(fx.db, sizeof fx.db, "%s/fresh.db", fx.dir);
    char err[512] = "";
    cr_assert_eq(mg_fixture_freshen(FIXTURE_MIGRATED_DB, fx.db, now, err, sizeof err), 0,
                 "freshening: %s", err);
    configure(NULL);
    cr_assert(mg_test_ctx_open(&fx.t, fx.db));
    fx.open = true;
    expect_recorded(expected, "observations");
    expect_recorded(expected, "keyed");
    expect_recorded(expected, "methods");
    json_decref(expected);
}

/* ---- the real binary ---- */

TestSuite(post_bodies, .fini = cleanup, .timeout = 180);

static void start_server(struct mg_test_server *s, const char *const *env)
{
    mg_test_tmpdir(fx.dir, sizeof fx.dir);
    snprintf(fx.db, sizeof fx.db, "%s/small.db", fx.dir);
    cr_assert_eq(mg_test_make_db(fx.db, true, small_packets), 0);
    cr_assert(mg_test_server_start(s, fx.db, env));
}

static int read_status(int fd, int ceiling_ms, struct mg_test_response *keep)
{
    struct mg_test_response r;
    if (!mg_test_read_response(fd, &r, false, ceiling_ms))
        return -1;
    int status = r.status;
    if (keep)
        *keep = r;
    else
        mg_test_response_free(&r);
    return status;
}

static const char observations_body[] = "{\"hashes\":[\"abcdef0000000001\"]}";

Test(post_bodies, a_body_is_read_whole_and_the_next_request_on_the_connection_is_intact)
{
    struct mg_test_server s;
    const char *env[] = {"MESHGATE_WORKERS=1", NULL};
    start_server(&s, env);
    int fd = mg_test_connect(s.port);
    char req[512];
    int n = snprintf(req, sizeof req,
                     "POST /api/packets/observations HTTP/1.1\r\nHost: t\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s"
                     "GET /api/healthz HTTP/1.1\r\nHost: t\r\n\r\n",
                     strlen(observations_body), observations_body);
    cr_assert(mg_test_send(fd, req, (size_t)n));
    struct mg_test_response r;
    cr_expect_eq(read_status(fd, CEILING_MS, &r), 200);
    cr_expect(strstr(r.body, "\"abcdef0000000001\":[{"), "%s", r.body);
    mg_test_response_free(&r);
    /* The body was the request's: the next one is read where it ends. */
    cr_expect_eq(read_status(fd, CEILING_MS, NULL), 200);
    close(fd);
    cr_expect_eq(mg_test_server_stop(&s, CEILING_MS), 0);
}

Test(post_bodies, over_the_cap_chunked_or_doubly_framed_is_refused_and_closed)
{
    struct mg_test_server s;
    const char *env[] = {"MESHGATE_WORKERS=1", NULL};
    start_server(&s, env);
    static const struct {
        const char *head;
        int status;
    } cases[] = {
        /* over MG_BATCH_OBSERVATIONS_BODY_MAX: not read */
        {"POST /api/packets/observations HTTP/1.1\r\nHost: t\r\nContent-Length: 65537\r\n\r\n{",
         413},
        {"POST /api/packets/observations HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
         "\r\n2\r\n{}\r\n0\r\n\r\n",
         411},
        {"POST /api/packets/observations HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n"
         "Transfer-Encoding: chunked\r\n\r\n{}",
         400},
        /* an expectation other than 100-continue */
        {"POST /api/packets/observations HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n"
         "Expect: something-else\r\n\r\n{}",
         417},
        /* a body on a route that reads none */
        {"POST /api/perf/reset HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}", 403},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int fd = mg_test_connect(s.port);
        cr_assert(mg_test_send(fd, cases[i].head, strlen(cases[i].head)));
        struct mg_test_response r;
        cr_expect_eq(read_status(fd, CEILING_MS, &r), cases[i].status, "case %zu", i);
        char conn[32] = "";
        cr_expect(mg_test_header(&r, "Connection", conn, sizeof conn) && strcmp(conn, "close") == 0,
                  "case %zu: %s", i, r.head);
        mg_test_response_free(&r);
        cr_expect(mg_test_wait_closed(fd, CEILING_MS), "case %zu: left open", i);
        close(fd);
    }
    cr_expect_eq(mg_test_server_stop(&s, CEILING_MS), 0);
}

Test(post_bodies, a_trickled_body_is_cut_at_its_deadline)
{
    struct mg_test_server s;
    const char *env[] = {"MESHGATE_WORKERS=1", "MESHGATE_BODY_GRACE_MS=500",
                         "MESHGATE_BODY_MIN_RATE=100", "MESHGATE_BODY_TIMEOUT_MS=3000", NULL};
    start_server(&s, env);
    struct mg_segment seg;
    char err[256];
    cr_assert_eq(mg_segment_attach(&seg, s.shm_name, true, err, sizeof err), 0, "%s", err);
    int64_t start = mg_test_now_ms();
    int fd = mg_test_connect(s.port);
    const char *head = "POST /api/packets/observations HTTP/1.1\r\nHost: t\r\n"
                       "Content-Length: 1000\r\n\r\n{";
    cr_assert(mg_test_send(fd, head, strlen(head)));
    /* A byte every 200 ms: 5 a second, short of the rate after the grace. */
    bool answered = false;
    for (int i = 0; i < 100 && !answered; i++) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        answered = poll(&p, 1, 200) > 0;
        if (!answered && !mg_test_send(fd, " ", 1))
            break;
    }
    cr_expect_eq(read_status(fd, CEILING_MS, NULL), 408);
    int64_t took = mg_test_now_ms() - start;
    cr_expect(took >= 500 && took < 20000, "cut after %lld ms", (long long)took);
    cr_expect(mg_test_wait_closed(fd, CEILING_MS));
    close(fd);
    cr_expect_eq(mg_counter_get(&seg, MG_CTR_BODY_TIMEOUTS), 1);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, CEILING_MS), 0);
}

/* Reads exactly the interim "100 Continue" line and its blank line, or fails. */
static bool read_continue(int fd, int ceiling_ms)
{
    static const char want[] = "HTTP/1.1 100 Continue\r\n\r\n";
    char got[sizeof want] = "";
    size_t have = 0;
    int64_t deadline = mg_test_now_ms() + ceiling_ms;
    while (have < sizeof want - 1 && mg_test_now_ms() < deadline) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t n = recv(fd, got + have, sizeof want - 1 - have, 0);
        if (n <= 0)
            return false;
        have += (size_t)n;
    }
    return have == sizeof want - 1 && memcmp(got, want, have) == 0;
}

Test(post_bodies, expect_100_continue_is_answered_before_the_body)
{
    struct mg_test_server s;
    const char *env[] = {"MESHGATE_WORKERS=1", NULL};
    start_server(&s, env);
    int fd = mg_test_connect(s.port);
    char head[256];
    int n = snprintf(head, sizeof head,
                     "POST /api/packets/observations HTTP/1.1\r\nHost: t\r\n"
                     "Expect: 100-continue\r\nContent-Length: %zu\r\n\r\n",
                     strlen(observations_body));
    cr_assert(mg_test_send(fd, head, (size_t)n));
    cr_expect(read_continue(fd, CEILING_MS), "no 100 Continue before the body");
    cr_assert(mg_test_send(fd, observations_body, strlen(observations_body)));
    cr_expect_eq(read_status(fd, CEILING_MS, NULL), 200);
    close(fd);
    /* Over the cap: the final answer instead, and no body is waited for. */
    fd = mg_test_connect(s.port);
    const char *big = "POST /api/packets/observations HTTP/1.1\r\nHost: t\r\n"
                      "Expect: 100-continue\r\nContent-Length: 1000000\r\n\r\n";
    cr_assert(mg_test_send(fd, big, strlen(big)));
    cr_expect_eq(read_status(fd, CEILING_MS, NULL), 413);
    close(fd);
    cr_expect_eq(mg_test_server_stop(&s, CEILING_MS), 0);
}

Test(post_bodies, api_key_routes_go_to_the_upstream_when_there_is_one)
{
    struct mg_test_upstream up = {0};
    mg_test_upstream_start(&up, 0, NULL);
    struct mg_test_server s;
    char setting[64];
    snprintf(setting, sizeof setting, "MESHGATE_UPSTREAM=127.0.0.1:%d", up.port);
    const char *env[] = {"MESHGATE_WORKERS=1", setting, "MESHGATE_UPSTREAM_PREFER=/api/stats",
                         NULL};
    start_server(&s, env);
    /* A path whose route is native refuses other methods itself; one whose route is preferred
     * to the upstream passes them up with it. */
    int fd = mg_test_connect(s.port);
    const char *post_nodes = "POST /api/nodes HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n"
                             "Connection: close\r\n\r\n{}";
    cr_assert(mg_test_send(fd, post_nodes, strlen(post_nodes)));
    cr_expect_eq(read_status(fd, CEILING_MS, NULL), 405);
    close(fd);
    const char *heads[] = {
        "POST /api/stats HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nConnection: close\r\n"
        "\r\n{}",
        "POST /api/packets HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nConnection: close\r\n"
        "\r\n{}",
        "PUT /api/config/geo-filter HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n"
        "Connection: close\r\n\r\n{}",
        "GET /api/backup HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) {
        fd = mg_test_connect(s.port);
        cr_assert(mg_test_send(fd, heads[i], strlen(heads[i])));
        cr_expect_eq(read_status(fd, CEILING_MS, NULL), 200, "%s", heads[i]);
        close(fd);
    }
    char *log = mg_test_read_file(up.log);
    cr_expect_eq(mg_test_count(log, "POST /api/packets "), 1, "%s", log ? log : "");
    cr_expect_eq(mg_test_count(log, "PUT /api/config/geo-filter "), 1, "%s", log ? log : "");
    cr_expect_eq(mg_test_count(log, "GET /api/backup "), 1, "%s", log ? log : "");
    cr_expect_eq(mg_test_count(log, "POST /api/stats "), 1, "%s", log ? log : "");
    cr_expect_eq(mg_test_count(log, "POST /api/nodes "), 0, "%s", log ? log : "");
    free(log);
    cr_expect_eq(mg_test_server_stop(&s, CEILING_MS), 0);
    mg_test_upstream_stop(&up);
}

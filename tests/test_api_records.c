/* SPDX-License-Identifier: ISC */
/*
 * The packet, observer and channel endpoints of CoreScope's front end (issue 14), on CoreScope's
 * real end-to-end database, freshened into a private copy and served by the real binary: each
 * answer is checked against what this suite reads from the copy with its own SQL, or against
 * facts of ../shared/data/README.md. Every test runs on the file as captured and as CoreScope's
 * migration leaves it (records_e2e, records_e2e_migrated); without the files they skip and say
 * why. The suite records_shapes runs the same endpoints on generated databases of every shape
 * (pre-migration, and the migrated one without each optional column).
 */
#include "fixture.h"
#include "harness.h"
#include "inproc.h"
#include "jsoncheck.h"

#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SHARED_DATA MESHGATE_SOURCE_DIR "/../shared/data/"
#define FIXTURE_DB SHARED_DATA "corescope-e2e-fixture.db"
#define FIXTURE_MIGRATED_DB SHARED_DATA "corescope-e2e-fixture-migrated.db"
#define N6IJ_OBSERVER "EC3433BB3ADF1ACAEE0CE117600B0CA473705486EC666137379A1E8CBB7E75F4"

static struct {
    char dir[128];
    char db[256];
    int64_t freshened_at;
    struct mg_test_server server;
    bool running;
    struct mg_test_ctx ctx;
    bool ctx_open;
} e;

static void cleanup(void)
{
    if (e.running)
        mg_test_server_stop(&e.server, 5000);
    e.running = false;
    if (e.ctx_open)
        mg_test_ctx_close(&e.ctx);
    e.ctx_open = false;
    if (e.dir[0])
        mg_test_rmdir(e.dir);
    e.dir[0] = '\0';
}

TestSuite(records_e2e, .fini = cleanup, .timeout = 60);
TestSuite(records_e2e_migrated, .fini = cleanup, .timeout = 60);
TestSuite(records_shapes, .fini = cleanup, .timeout = 120);

static const char *fixture_source;
#define FIXTURE_TEST(name)                                                                         \
    static void name(void);                                                                        \
    Test(records_e2e, name)                                                                        \
    {                                                                                              \
        fixture_source = FIXTURE_DB;                                                               \
        name();                                                                                    \
    }                                                                                              \
    Test(records_e2e_migrated, name)                                                               \
    {                                                                                              \
        fixture_source = FIXTURE_MIGRATED_DB;                                                      \
        name();                                                                                    \
    }                                                                                              \
    static void name(void)

static void start(void)
{
    if (access(fixture_source, R_OK) != 0)
        cr_skip_test("%s not present: this suite checks meshgate against CoreScope's real "
                     "end-to-end database, which CI provides (see ../shared/data/README.md)",
                     fixture_source);
    mg_test_tmpdir(e.dir, sizeof e.dir);
    cr_assert(e.dir[0], "no temporary directory");
    snprintf(e.db, sizeof e.db, "%s/fresh.db", e.dir);
    e.freshened_at = (int64_t)time(NULL);
    char err[512] = "";
    cr_assert_eq(mg_fixture_freshen(fixture_source, e.db, e.freshened_at, err, sizeof err), 0,
                 "freshening %s: %s", fixture_source, err);
    static const char *const env[] = {"MESHGATE_WORKERS=2", NULL};
    cr_assert(mg_test_server_start(&e.server, e.db, env), "meshgate did not start on %s", e.db);
    e.running = true;
}

/* ---- the copy, read with the suite's own SQL ---------------------------------------------- */

/* Runs a query (sqlite3_mprintf format); up to cap rows of its first column. */
static int db_query(long long *ints, char **texts, int cap, const char *fmt, va_list ap)
{
    char *sql = sqlite3_vmprintf(fmt, ap);
    sqlite3 *db = NULL;
    cr_assert_eq(mg_test_sqlite_open_v2(e.db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(db));
    int n = 0, rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW && n < cap) {
        if (ints)
            ints[n] = sqlite3_column_int64(st, 0);
        if (texts) {
            const unsigned char *t = sqlite3_column_text(st, 0);
            texts[n] = t ? strdup((const char *)t) : NULL;
        }
        n++;
    }
    cr_assert(rc == SQLITE_ROW || rc == SQLITE_DONE, "%s: %s", sql, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    sqlite3_close(db);
    sqlite3_free(sql);
    return n;
}

static long long db_int(const char *fmt, ...)
{
    long long v = -1;
    va_list ap;
    va_start(ap, fmt);
    db_query(&v, NULL, 1, fmt, ap);
    va_end(ap);
    return v;
}

static char *db_text(const char *fmt, ...)
{
    char *v = NULL;
    va_list ap;
    va_start(ap, fmt);
    db_query(NULL, &v, 1, fmt, ap);
    va_end(ap);
    return v;
}

static int db_texts(char **out, int cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = db_query(NULL, out, cap, fmt, ap);
    va_end(ap);
    return n;
}

static void free_texts(char **t, int n)
{
    for (int i = 0; i < n; i++)
        free(t[i]);
}

/* GET target: the status, and a strict JSON body ending in a newline. */
static void api_get(const char *target, int want_status, struct mg_test_response *r)
{
    cr_assert(mg_test_get(e.server.port, target, NULL, r), "GET %s: no complete response", target);
    cr_expect_eq(r->status, want_status, "GET %s: status %d, want %d; body: %.600s", target,
                 r->status, want_status, r->body);
    char value[64];
    cr_expect(mg_test_header(r, "Content-Type", value, sizeof value) &&
                  strcmp(value, "application/json") == 0,
              "GET %s: Content-Type is not application/json", target);
    cr_expect(r->body_len > 0 && r->body[r->body_len - 1] == '\n',
              "GET %s: the body does not end with a newline", target);
    cr_assert(json_body_is_strict(r->body, r->body_len), "GET %s: not strict JSON: %.600s", target,
              r->body);
}

static void expect_error(const char *target, int status, const char *error)
{
    struct mg_test_response r;
    api_get(target, status, &r);
    cr_expect(json_str_at_eq(r.body, "error", error), "GET %s: %s, want error \"%s\"", target,
              r.body, error);
    mg_test_response_free(&r);
}

static int db_ints(long long *out, int cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = db_query(out, NULL, cap, fmt, ap);
    va_end(ap);
    return n;
}

/* ---- packets ------------------------------------------------------------------------------- */

static const char *const detail_observation_keys =
    "id,hash,observer_id,observer_name,observer_iata,snr,rssi,path_json,raw_hex,timestamp";

FIXTURE_TEST(packet_detail_by_id_or_hash_holds_every_observation)
{
    start();
    /* The one transmission heard twice. */
    long long id = db_int("SELECT transmission_id FROM observations GROUP BY 1"
                          " ORDER BY count(*) DESC, 1 LIMIT 1");
    long long heard = db_int("SELECT count(*) FROM observations WHERE transmission_id = %lld", id);
    cr_assert_eq(heard, 2, "the fixture has one transmission heard twice");
    /* CoreScope's store keeps one per observer and path: the newest, then the lowest id. */
    long long want_ids[4];
    int kept = db_ints(want_ids, 4,
                       "SELECT id FROM (SELECT id, timestamp, row_number() OVER (PARTITION BY"
                       " observer_idx, path_json ORDER BY timestamp DESC, id) AS copy"
                       " FROM observations WHERE transmission_id = %lld) WHERE copy = 1"
                       " ORDER BY timestamp DESC, id",
                       id);
    char *hash = db_text("SELECT hash FROM transmissions WHERE id = %lld", id);
    char *raw = db_text("SELECT raw_hex FROM transmissions WHERE id = %lld", id);
    char target[128];
    struct mg_test_response by_id, by_hash, by_lower;
    snprintf(target, sizeof target, "/api/packets/%lld", id);
    api_get(target, 200, &by_id);
    char keys[512];
    json_keys(by_id.body, NULL, keys, sizeof keys);
    cr_expect_str_eq(keys, "packet,path,observation_count,observations", "CoreScope's order");
    cr_expect_eq(json_int_at(by_id.body, "packet.id"), id);
    cr_expect(json_str_at_eq(by_id.body, "packet.hash", hash), "packet.hash, want %s", hash);
    cr_expect_eq(json_int_at(by_id.body, "observation_count"), kept);
    /* The packet itself is the /api/packets?expand=observations row: every observation. */
    cr_expect_eq(json_length(json_at(by_id.body, "packet.observations")), heard);
    int i = 0;
    for (const char *o = json_first(json_get(by_id.body, "observations")); o; o = json_next(o)) {
        cr_assert_lt(i, kept, "more observations than CoreScope keeps");
        cr_expect_eq(json_int_at(o, "id"), want_ids[i], "observation %d: newest first", i);
        cr_expect(json_str_at_eq(o, "hash", hash), "each observation names its packet");
        cr_expect(json_str_at_eq(o, "raw_hex", raw), "the transmission's frame");
        json_keys(o, ",resolved_path,direction,", keys, sizeof keys);
        cr_expect_str_eq(keys, detail_observation_keys, "CoreScope's observation record");
        i++;
    }
    cr_expect_eq(i, kept);

    /* The hash, in either case, finds the same packet. */
    snprintf(target, sizeof target, "/api/packets/%s", hash);
    api_get(target, 200, &by_hash);
    cr_expect_str_eq(by_hash.body, by_id.body, "by hash and by id");
    for (char *c = target + strlen("/api/packets/"); *c; c++)
        *c = (char)(*c >= 'a' && *c <= 'f'   ? *c - 'a' + 'A'
                    : *c >= 'A' && *c <= 'F' ? *c - 'A' + 'a'
                                             : *c);
    api_get(target, 200, &by_lower);
    cr_expect_eq(json_int_at(by_lower.body, "packet.id"), id, "GET %s (the other case)", target);
    mg_test_response_free(&by_lower);
    mg_test_response_free(&by_id);
    mg_test_response_free(&by_hash);
    free(hash);
    free(raw);
}

FIXTURE_TEST(packet_detail_path_is_the_best_observations_hops)
{
    start();
    /* A transmission heard once over a relayed path: path is that path, parsed. */
    long long id = db_int("SELECT transmission_id FROM observations"
                          " WHERE json_array_length(path_json) >= 3 ORDER BY id LIMIT 1");
    long long hops = db_int("SELECT json_array_length(path_json) FROM observations"
                            " WHERE transmission_id = %lld",
                            id);
    char *first = db_text("SELECT json_extract(path_json, '$[0]') FROM observations"
                          " WHERE transmission_id = %lld",
                          id);
    char target[64];
    snprintf(target, sizeof target, "/api/packets/%lld", id);
    struct mg_test_response r;
    api_get(target, 200, &r);
    const char *path = json_get(r.body, "path");
    cr_expect_eq(json_length(path), hops, "%s: path length", target);
    char *got = json_string_dup(json_first(path));
    cr_expect_str_eq(got ? got : "(none)", first, "%s: the first hop", target);
    free(got);
    free(first);
    mg_test_response_free(&r);
}

FIXTURE_TEST(packet_detail_answers_404_for_what_is_not_a_packet)
{
    start();
    long long max_id = db_int("SELECT max(id) FROM transmissions");
    char target[96];
    snprintf(target, sizeof target, "/api/packets/%lld", max_id + 1);
    expect_error(target, 404, "Not found");
    expect_error("/api/packets/0123456789abcdef", 404, "Not found"); /* a hash of nothing */
    expect_error("/api/packets/not-a-packet", 404, "Not found");
    expect_error("/api/packets/12abc", 404, "Not found");
    expect_error("/api/packets/-1", 404, "Not found");
    expect_error("/api/packets/99999999999999999999999", 404, "Not found"); /* past int64 */
    /* "+N" is N, as CoreScope's strconv.Atoi reads it. */
    struct mg_test_response r;
    snprintf(target, sizeof target, "/api/packets/+%lld", max_id);
    api_get(target, 200, &r);
    cr_expect_eq(json_int_at(r.body, "packet.id"), max_id);
    mg_test_response_free(&r);
}

FIXTURE_TEST(packet_timestamps_list_first_seen_after_since_oldest_first)
{
    start();
    char *since = db_text("SELECT first_seen FROM transmissions ORDER BY first_seen DESC"
                          " LIMIT 1 OFFSET 20");
    char *want[32];
    int n = db_texts(want, 32,
                     "SELECT first_seen FROM transmissions WHERE first_seen > %Q"
                     " ORDER BY first_seen",
                     since);
    cr_assert(n > 0 && n <= 20);
    char target[128];
    snprintf(target, sizeof target, "/api/packets/timestamps?since=%s", since);
    struct mg_test_response r;
    api_get(target, 200, &r);
    cr_expect_eq(json_length(r.body), n, "%s: %s", target, r.body);
    int i = 0;
    for (const char *v = json_first(r.body); v && i < n; v = json_next(v), i++) {
        char *got = json_string_dup(v);
        cr_expect_str_eq(got, want[i], "timestamp %d", i);
        free(got);
    }
    mg_test_response_free(&r);
    free_texts(want, n);
    free(since);

    api_get("/api/packets/timestamps?since=2999-01-01T00:00:00Z", 200, &r);
    cr_expect_str_eq(r.body, "null\n", "nothing newer: CoreScope's null");
    mg_test_response_free(&r);
    expect_error("/api/packets/timestamps", 400, "since required");
    expect_error("/api/packets/timestamps?since=", 400, "since required");
}

FIXTURE_TEST(traces_list_a_packets_observations_oldest_first)
{
    start();
    long long id = db_int("SELECT transmission_id FROM observations GROUP BY 1"
                          " ORDER BY count(*) DESC, 1 LIMIT 1");
    char *hash = db_text("SELECT lower(hash) FROM transmissions WHERE id = %lld", id);
    char *observer = db_text("SELECT ob.id FROM observations o JOIN observers ob"
                             " ON ob.rowid = o.observer_idx WHERE o.transmission_id = %lld"
                             " ORDER BY o.timestamp, o.id LIMIT 1",
                             id);
    char *time_text = db_text("SELECT strftime('%%Y-%%m-%%dT%%H:%%M:%%fZ', timestamp,"
                              " 'unixepoch') FROM observations WHERE transmission_id = %lld"
                              " ORDER BY timestamp, id LIMIT 1",
                              id);
    char target[96];
    snprintf(target, sizeof target, "/api/traces/%s", hash);
    struct mg_test_response r;
    api_get(target, 200, &r);
    const char *traces = json_get(r.body, "traces");
    long long want = db_int("SELECT count(*) FROM observations o JOIN transmissions t"
                            " ON t.id = o.transmission_id WHERE t.hash = %Q",
                            hash);
    cr_expect_eq(json_length(traces), want, "%s: %s", target, r.body);
    if (want > 0) {
        const char *first = json_first(traces);
        char keys[256];
        json_keys(first, NULL, keys, sizeof keys);
        cr_expect_str_eq(keys, "observer,observer_name,path_json,rssi,snr,time");
        cr_expect(json_str_at_eq(first, "observer", observer), "first observer, want %s", observer);
        cr_expect(json_str_at_eq(first, "time", time_text), "first time, want %s", time_text);
    }
    mg_test_response_free(&r);
    api_get("/api/traces/0123456789abcdef", 200, &r);
    cr_expect_str_eq(r.body, "{\"traces\":[]}\n", "an unknown hash has no traces");
    mg_test_response_free(&r);
    free(hash);
    free(observer);
    free(time_text);
}

Test(records_e2e, iata_coords_are_corescopes_airports_sorted_by_code)
{
    struct mg_test_ctx *t = &e.ctx;
    mg_test_tmpdir(e.dir, sizeof e.dir);
    snprintf(e.db, sizeof e.db, "%s/g.db", e.dir);
    cr_assert_eq(mg_test_make_db(e.db, true, NULL), 0);
    cr_assert(mg_test_ctx_open(t, e.db));
    e.ctx_open = true;
    cr_assert_eq(mg_test_ctx_get(t, "/api/iata-coords"), 200);
    const char *body = t->res.body.data;
    const char *coords = json_get(body, "coords");
    cr_assert_not_null(coords);
    cr_expect(json_keys_sorted(coords), "codes sorted");
    /* Facts: San José and Sydney, from CoreScope's table. */
    cr_expect_eq(json_double_at(coords, "SJC.lat"), 37.3626);
    cr_expect_eq(json_double_at(coords, "SJC.lon"), -121.929);
    cr_expect_eq(json_double_at(coords, "SYD.lat"), -33.9461);
    char keys[1024];
    json_keys(coords, NULL, keys, sizeof keys);
    cr_expect(strncmp(keys, "AMS,APC,ATL,", 12) == 0, "%s", keys);
    cr_expect(strstr(keys, ",YYZ") && strlen(strstr(keys, ",YYZ")) == 4, "YYZ last: %s", keys);
}

/* ---- observers ----------------------------------------------------------------------------- */

static const char *const observer_keys =
    "id,name,iata,last_seen,first_seen,packet_count,model,firmware,client_version,radio,"
    "battery_mv,uptime_secs,noise_floor,last_packet_at,packetsLastHour,lat,lon,nodeRole,"
    "clock_naive,clock_skew_seconds,clock_skew_count_24h,clock_last_naive_at";

FIXTURE_TEST(observers_list_the_active_ones_most_recently_seen_first)
{
    start();
    struct mg_test_response r;
    api_get("/api/observers", 200, &r);
    int64_t answered = (int64_t)time(NULL);
    char *want[64];
    int n = db_texts(want, 64, "SELECT id FROM observers ORDER BY last_seen DESC");
    const char *list = json_get(r.body, "observers");
    cr_expect_eq(json_length(list), n, "31 observers, all active");
    char keys[1024];
    json_keys(r.body, NULL, keys, sizeof keys);
    cr_expect_str_eq(keys, "observers,server_time");
    long long sum = 0;
    int i = 0;
    for (const char *o = json_first(list); o && i < n; o = json_next(o), i++) {
        cr_expect(json_str_at_eq(o, "id", want[i]), "observer %d, want %s", i, want[i]);
        json_keys(o, ",can_relay,", keys, sizeof keys);
        cr_expect_str_eq(keys, observer_keys, "CoreScope's observer record");
        sum += json_int_at(o, "packetsLastHour");
    }
    /* The hour ends at the server's now, between the freshening and the answer. */
    long long lo = db_int("SELECT count(*) FROM observations WHERE timestamp > %lld",
                          (long long)answered + 1 - 3600);
    long long hi = db_int("SELECT count(*) FROM observations WHERE timestamp > %lld",
                          (long long)e.freshened_at - 1 - 3600);
    cr_expect(sum >= lo && sum <= hi, "packetsLastHour sums to %lld, want %lld..%lld", sum, lo, hi);
    /* N6IJ Repeater observes too: its node's place and role come with it. */
    for (const char *o = json_first(list); o; o = json_next(o)) {
        if (!json_str_at_eq(o, "id", N6IJ_OBSERVER))
            continue;
        char *role = db_text("SELECT role FROM nodes WHERE public_key = lower(%Q)", N6IJ_OBSERVER);
        cr_expect(json_str_at_eq(o, "nodeRole", role), "N6IJ's role, want %s", role);
        double lat = 0;
        sqlite3 *db;
        mg_test_sqlite_open_v2(e.db, &db, SQLITE_OPEN_READONLY, NULL);
        sqlite3_stmt *st;
        sqlite3_prepare_v2(db, "SELECT lat FROM nodes WHERE public_key = lower(?)", -1, &st, NULL);
        sqlite3_bind_text(st, 1, N6IJ_OBSERVER, -1, SQLITE_STATIC);
        if (sqlite3_step(st) == SQLITE_ROW)
            lat = sqlite3_column_double(st, 0);
        sqlite3_finalize(st);
        sqlite3_close(db);
        cr_expect_eq(json_double_at(o, "lat"), lat, "N6IJ's latitude");
        free(role);
    }
    free_texts(want, n);
    mg_test_response_free(&r);
}

FIXTURE_TEST(observer_detail_by_exact_id_or_404)
{
    start();
    char target[160];
    snprintf(target, sizeof target, "/api/observers/%s", N6IJ_OBSERVER);
    struct mg_test_response r;
    api_get(target, 200, &r);
    char keys[1024];
    json_keys(r.body, ",can_relay,", keys, sizeof keys);
    cr_expect_str_eq(keys, observer_keys);
    cr_expect(json_str_at_eq(r.body, "id", N6IJ_OBSERVER));
    char *name = db_text("SELECT name FROM observers WHERE id = %Q", N6IJ_OBSERVER);
    cr_expect(json_str_at_eq(r.body, "name", name), "name, want %s", name);
    cr_expect_eq(json_int_at(r.body, "packet_count"),
                 db_int("SELECT packet_count FROM observers WHERE id = %Q", N6IJ_OBSERVER));
    /* CoreScope leaves the node's fields empty in the detail. */
    cr_expect(json_is_at(r.body, "nodeRole", "null") && json_is_at(r.body, "lat", "null"));
    free(name);
    mg_test_response_free(&r);
    /* Ids are exact: another case is another observer. */
    snprintf(target, sizeof target, "/api/observers/%s",
             "ec3433bb3adf1acaee0ce117600b0ca4"
             "73705486ec666137379a1e8cbb7e75f4");
    expect_error(target, 404, "Observer not found");
    expect_error("/api/observers/nobody", 404, "Observer not found");
}

/* ---- channels ------------------------------------------------------------------------------ */

FIXTURE_TEST(channels_list_decrypted_channels_most_recent_first)
{
    start();
    struct mg_test_response r;
    api_get("/api/channels", 200, &r);
    char *want[64];
    int n = db_texts(want, 64,
                     "SELECT channel_hash FROM transmissions WHERE payload_type = 5"
                     " AND channel_hash NOT LIKE 'enc_%%' GROUP BY channel_hash"
                     " ORDER BY max(first_seen) DESC");
    const char *list = json_get(r.body, "channels");
    cr_expect_eq(json_length(list), n, "%s", r.body);
    int i = 0;
    for (const char *c = json_first(list); c && i < n; c = json_next(c), i++) {
        cr_expect(json_str_at_eq(c, "name", want[i]), "channel %d, want %s", i, want[i]);
        cr_expect_eq(json_int_at(c, "messageCount"),
                     db_int("SELECT count(*) FROM transmissions WHERE payload_type = 5"
                            " AND channel_hash = %Q",
                            want[i]));
        cr_expect(json_keys_sorted(c));
    }
    mg_test_response_free(&r);

    long long encrypted = db_int("SELECT count(DISTINCT channel_hash) FROM transmissions"
                                 " WHERE payload_type = 5 AND channel_hash LIKE 'enc_%%'");
    api_get("/api/channels?includeEncrypted=true", 200, &r);
    list = json_get(r.body, "channels");
    cr_expect_eq(json_length(list), n + encrypted);
    const char *last = NULL;
    for (const char *c = json_first(list); c; c = json_next(c))
        last = c;
    if (encrypted > 0 && last) {
        char *hash = json_str_at(last, "hash");
        char name[64];
        snprintf(name, sizeof name, "Encrypted (0x%s)", hash ? hash + 4 : "");
        cr_expect(json_str_at_eq(last, "name", name), "%s", last);
        cr_expect(json_is_at(last, "encrypted", "true"));
        free(hash);
    }
    mg_test_response_free(&r);

    /* With a region: hearings by that region's observers (CoreScope counts them). */
    api_get("/api/channels?region=sjc,+ALL", 200, &r);
    long long heard =
        db_int("SELECT count(*) FROM transmissions t JOIN observations o"
               " ON o.transmission_id = t.id JOIN observers ob"
               " ON ob.rowid = o.observer_idx WHERE t.payload_type = 5"
               " AND t.channel_hash NOT LIKE 'enc_%%' AND upper(trim(ob.iata)) = 'SJC'");
    long long sum = 0;
    for (const char *c = json_first(json_get(r.body, "channels")); c; c = json_next(c))
        sum += json_int_at(c, "messageCount");
    cr_expect_eq(sum, heard, "SJC's hearings");
    /* Each channel's last message is its newest overall, heard in the region or not. */
    for (const char *c = json_first(json_get(r.body, "channels")); c; c = json_next(c)) {
        char *name = json_str_at(c, "name");
        char *text = db_text("SELECT json_extract(decoded_json, '$.text') FROM transmissions"
                             " WHERE payload_type = 5 AND channel_hash = %Q"
                             " ORDER BY first_seen DESC LIMIT 1",
                             name);
        char *colon = text ? strstr(text, ": ") : NULL;
        cr_expect(json_str_at_eq(c, "lastMessage", colon && colon > text ? colon + 2 : text),
                  "%s's last message, want %s: %s", name, text, c);
        free(text);
        free(name);
    }
    mg_test_response_free(&r);
    free_texts(want, n);
}

FIXTURE_TEST(channel_messages_page_newest_and_list_oldest_first)
{
    start();
    char *channel = db_text("SELECT channel_hash FROM transmissions WHERE payload_type = 5"
                            " AND channel_hash NOT LIKE 'enc_%%' GROUP BY 1"
                            " ORDER BY count(*) DESC LIMIT 1");
    long long total = db_int("SELECT count(*) FROM transmissions WHERE payload_type = 5"
                             " AND channel_hash = %Q",
                             channel);
    cr_assert(total > 5, "the busiest channel has messages");
    /* The three with the newest sightings, listed oldest first. */
    long long want[3];
    int n = db_ints(want, 3,
                    "SELECT id FROM (SELECT t.id, (SELECT max(timestamp) FROM observations o"
                    " WHERE o.transmission_id = t.id) AS latest FROM transmissions t"
                    " WHERE t.payload_type = 5 AND t.channel_hash = %Q"
                    " ORDER BY latest DESC, t.id DESC LIMIT 3) ORDER BY latest, id",
                    channel);
    char target[160];
    snprintf(target, sizeof target, "/api/channels/%s%s/messages?limit=3",
             channel[0] == '#' ? "%23" : "", channel[0] == '#' ? channel + 1 : channel);
    struct mg_test_response r;
    api_get(target, 200, &r);
    cr_expect_eq(json_int_at(r.body, "total"), total, "%s", target);
    const char *messages = json_get(r.body, "messages");
    cr_expect_eq(json_length(messages), n);
    int i = 0;
    for (const char *m = json_first(messages); m && i < n; m = json_next(m), i++) {
        char *hash = db_text("SELECT hash FROM transmissions WHERE id = %lld", want[i]);
        cr_expect(json_str_at_eq(m, "packetHash", hash), "message %d, want %s", i, hash);
        cr_expect(json_keys_sorted(m));
        /* "sender: text" as CoreScope splits it. */
        char *text = db_text("SELECT json_extract(decoded_json, '$.text') FROM transmissions"
                             " WHERE id = %lld",
                             want[i]);
        char *colon = text ? strstr(text, ": ") : NULL;
        if (colon && colon > text && colon - text < 50) {
            cr_expect(json_str_at_eq(m, "text", colon + 2), "text of %s", hash);
            *colon = '\0';
            cr_expect(json_str_at_eq(m, "sender", text), "sender of %s", hash);
        }
        cr_expect_eq(
            json_int_at(m, "repeats"),
            db_int("SELECT count(*) FROM observations WHERE transmission_id = %lld", want[i]));
        free(text);
        free(hash);
    }
    mg_test_response_free(&r);

    /* Out-of-range parameters fall back as CoreScope's do: a bad limit is 100, a large one
     * 500, a negative offset 0; an offset past the end is an empty page with the total. */
    snprintf(target, sizeof target, "/api/channels/%s%s/messages?limit=-4&offset=x",
             channel[0] == '#' ? "%23" : "", channel[0] == '#' ? channel + 1 : channel);
    api_get(target, 200, &r);
    cr_expect_eq(json_length(json_get(r.body, "messages")), total < 100 ? total : 100);
    mg_test_response_free(&r);
    snprintf(target, sizeof target, "/api/channels/%s%s/messages?offset=100000",
             channel[0] == '#' ? "%23" : "", channel[0] == '#' ? channel + 1 : channel);
    api_get(target, 200, &r);
    cr_expect_eq(json_length(json_get(r.body, "messages")), 0);
    cr_expect_eq(json_int_at(r.body, "total"), total);
    mg_test_response_free(&r);
    api_get("/api/channels/no-such-channel/messages", 200, &r);
    cr_expect_str_eq(r.body, "{\"messages\":[],\"total\":0}\n");
    mg_test_response_free(&r);
    free(channel);
}

FIXTURE_TEST(known_channels_is_corescopes_empty_catalogue)
{
    start();
    struct mg_test_response r;
    api_get("/api/known-channels", 200, &r);
    cr_expect_str_eq(r.body,
                     "{\"fetchedAt\":\"0001-01-01T00:00:00Z\",\"source\":\"\",\"entries\":[]}\n");
    mg_test_response_free(&r);
}

/* ---- every shape of database ----------------------------------------------------------- */

static void tour(const char *db_path)
{
    cr_assert(mg_test_ctx_open(&e.ctx, db_path), "cannot serve %s", db_path);
    e.ctx_open = true;
    static const char *const targets[] = {
        "/api/packets/1",
        "/api/packets/timestamps?since=2000-01-01",
        "/api/iata-coords",
        "/api/observers",
        "/api/observers/clock-skew",
        "/api/channels?includeEncrypted=true",
        "/api/channels?region=SJC,OAK&includeEncrypted=true",
        "/api/channels/%23test/messages?region=SJC",
        "/api/known-channels",
        "/api/resolve-hops?hops=ab,cd12,zz",
    };
    for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++) {
        int status = mg_test_ctx_get(&e.ctx, targets[i]);
        cr_expect_eq(status, 200, "%s on %s: %d %.300s", targets[i], db_path, status,
                     e.ctx.res.body.data);
    }
    sqlite3 *db;
    cr_assert_eq(mg_test_sqlite_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    sqlite3_prepare_v2(db,
                       "SELECT id, (SELECT hash FROM transmissions LIMIT 1)"
                       " FROM observers LIMIT 1",
                       -1, &st, NULL);
    char target[256];
    if (sqlite3_step(st) == SQLITE_ROW) {
        snprintf(target, sizeof target, "/api/observers/%s", sqlite3_column_text(st, 0));
        int status = mg_test_ctx_get(&e.ctx, target);
        cr_expect_eq(status, 200, "%s: %.300s", target, e.ctx.res.body.data);
        snprintf(target, sizeof target, "/api/observers/%s/analytics?days=30",
                 sqlite3_column_text(st, 0));
        cr_expect_eq(mg_test_ctx_get(&e.ctx, target), 200, "%s: %.300s", target,
                     e.ctx.res.body.data);
        snprintf(target, sizeof target, "/api/traces/%s", sqlite3_column_text(st, 1));
        cr_expect_eq(mg_test_ctx_get(&e.ctx, target), 200, "%s", target);
        snprintf(target, sizeof target, "/api/packets/%s", sqlite3_column_text(st, 1));
        cr_expect_eq(mg_test_ctx_get(&e.ctx, target), 200, "%s", target);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    mg_test_ctx_close(&e.ctx);
    e.ctx_open = false;
}

static void generate(const char *path, bool migrated)
{
    struct mg_fixture_options o;
    mg_fixture_options_default(&o);
    o.observations = 3000;
    o.seed = 7;
    o.schema = migrated ? MG_FIXTURE_MIGRATED : MG_FIXTURE_BASE;
    char err[512] = "";
    cr_assert_eq(mg_fixture_generate(path, &o, err, sizeof err), 0, "%s", err);
}

Test(records_shapes, every_endpoint_answers_on_the_pre_migration_shape)
{
    mg_test_tmpdir(e.dir, sizeof e.dir);
    snprintf(e.db, sizeof e.db, "%s/base.db", e.dir);
    generate(e.db, false);
    tour(e.db);
}

Test(records_shapes, every_endpoint_answers_without_any_one_optional_column)
{
    mg_test_tmpdir(e.dir, sizeof e.dir);
    char base[300];
    snprintf(base, sizeof base, "%s/migrated.db", e.dir);
    generate(base, true);
    tour(base);
    for (size_t i = 0; i < mg_db_optionals_count; i++) {
        const struct mg_db_optional *o = &mg_db_optionals[i];
        snprintf(e.db, sizeof e.db, "%s/without-%zu.db", e.dir, i);
        sqlite3 *db;
        cr_assert_eq(mg_test_sqlite_open(base, &db), SQLITE_OK);
        char *copy = sqlite3_mprintf("VACUUM INTO %Q", e.db);
        cr_assert_eq(sqlite3_exec(db, copy, NULL, NULL, NULL), SQLITE_OK, "%s", copy);
        sqlite3_free(copy);
        sqlite3_close(db);
        cr_assert_eq(mg_test_sqlite_open(e.db, &db), SQLITE_OK);
        char *drop = o->column ? sqlite3_mprintf("DROP INDEX IF EXISTS idx_tx_scope_name;"
                                                 "DROP INDEX IF EXISTS idx_tx_last_seen_zero;"
                                                 "DROP INDEX IF EXISTS idx_tx_channel_hash;"
                                                 "ALTER TABLE %s DROP COLUMN %s",
                                                 o->table, o->column)
                               : sqlite3_mprintf("DROP TABLE IF EXISTS %s", o->table);
        char *err = NULL;
        int rc = sqlite3_exec(db, drop, NULL, NULL, &err);
        cr_assert(rc == SQLITE_OK || (err && strstr(err, "no such column")), "%s: %s", drop,
                  err ? err : "");
        sqlite3_free(err);
        sqlite3_free(drop);
        sqlite3_close(db);
        cr_log_info("without %s.%s", o->table, o->column ? o->column : "*");
        tour(e.db);
    }
}

/* ---- observer analytics -------------------------------------------------------------- */

FIXTURE_TEST(observer_analytics_count_the_observers_observations)
{
    start();
    /* The busiest observer; the whole fixture lies within the last day once freshened. */
    char *observer = db_text("SELECT ob.id FROM observations o JOIN observers ob"
                             " ON ob.rowid = o.observer_idx GROUP BY ob.id"
                             " ORDER BY count(*) DESC, ob.id LIMIT 1");
    long long idx = db_int("SELECT rowid FROM observers WHERE id = %Q", observer);
    long long total = db_int("SELECT count(*) FROM observations WHERE observer_idx = %lld", idx);
    char target[200];
    snprintf(target, sizeof target, "/api/observers/%s/analytics?days=1", observer);
    struct mg_test_response r;
    api_get(target, 200, &r);
    char keys[256];
    json_keys(r.body, NULL, keys, sizeof keys);
    cr_expect_str_eq(keys, "timeline,packetTypes,nodesTimeline,snrDistribution,recentPackets");
    /* Hourly buckets, oldest first, labelled HH:00, summing to every observation. */
    long long buckets[48];
    int n = db_ints(buckets, 48,
                    "SELECT timestamp / 3600 * 3600 AS b FROM observations"
                    " WHERE observer_idx = %lld GROUP BY b ORDER BY b",
                    idx);
    const char *timeline = json_get(r.body, "timeline");
    cr_expect_eq(json_length(timeline), n);
    long long sum = 0;
    int i = 0;
    for (const char *b = json_first(timeline); b && i < n; b = json_next(b), i++) {
        char label[8];
        time_t t = (time_t)buckets[i];
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(label, sizeof label, "%H:%M", &tm);
        cr_expect(json_str_at_eq(b, "label", label), "bucket %d, want %s: %s", i, label, b);
        sum += json_int_at(b, "count");
    }
    cr_expect_eq(sum, total, "the timeline counts every observation");
    cr_expect_eq(json_length(json_get(r.body, "nodesTimeline")), n, "one per bucket");
    /* Packet types, keyed by their decimal text. */
    long long types = db_int("SELECT count(DISTINCT t.payload_type) FROM observations o"
                             " JOIN transmissions t ON t.id = o.transmission_id"
                             " WHERE o.observer_idx = %lld",
                             idx);
    long long adverts = db_int("SELECT count(*) FROM observations o JOIN transmissions t"
                               " ON t.id = o.transmission_id WHERE o.observer_idx = %lld"
                               " AND t.payload_type = 4",
                               idx);
    const char *packet_types = json_get(r.body, "packetTypes");
    json_keys(packet_types, NULL, keys, sizeof keys);
    int counted = 0;
    for (const char *k = keys; *k; k = strchr(k, ',') ? strchr(k, ',') + 1 : k + strlen(k))
        counted++;
    cr_expect_eq(counted, types, "packetTypes: %s", packet_types);
    if (adverts > 0)
        cr_expect_eq(json_int_at(packet_types, "4"), adverts, "ADVERTs heard");
    /* The 20 newest, newest first (ties by id). */
    long long want[20];
    int recent = db_ints(want, 20,
                         "SELECT id FROM observations WHERE observer_idx = %lld"
                         " ORDER BY timestamp DESC, id LIMIT 20",
                         idx);
    i = 0;
    for (const char *p = json_first(json_get(r.body, "recentPackets")); p && i < recent;
         p = json_next(p), i++) {
        cr_expect_eq(json_int_at(p, "id"), want[i], "recent packet %d", i);
        cr_expect(json_str_at_eq(p, "observer_id", observer));
    }
    cr_expect_eq(i, recent);
    /* Served again from the shared cache: the same body. */
    struct mg_test_response again;
    api_get(target, 200, &again);
    cr_expect_str_eq(again.body, r.body, "the cached report");
    mg_test_response_free(&again);
    mg_test_response_free(&r);
    api_get("/api/observers/nobody/analytics?days=x", 200, &r);
    cr_expect_str_eq(r.body,
                     "{\"timeline\":[],\"packetTypes\":{},\"nodesTimeline\":[],"
                     "\"snrDistribution\":[],\"recentPackets\":[]}\n",
                     "an unknown observer: empty parts, as CoreScope answers");
    mg_test_response_free(&r);
    free(observer);
}

/* Hand-checked against CoreScope's rounding: int() truncates toward zero, then a negative
 * SNR that was not on an even number moves one bucket down. */
Test(records_shapes, observer_analytics_bucket_snr_and_name_nodes_as_corescope)
{
    mg_test_tmpdir(e.dir, sizeof e.dir);
    snprintf(e.db, sizeof e.db, "%s/snr.db", e.dir);
    int64_t now = (int64_t)time(NULL);
    char sql[2048];
    snprintf(sql, sizeof sql,
             "INSERT INTO observers (rowid, id, name, iata, last_seen) VALUES"
             " (1, 'OBS', 'o', 'SJC', '2026-01-01T00:00:00Z');"
             "INSERT INTO transmissions (id, raw_hex, hash, first_seen, payload_type,"
             " decoded_json) VALUES (1, 'aa', 'h1', '2026-01-01T00:00:00Z', 4,"
             " '{\"pubKey\":\"PK\",\"srcHash\":\"\"}'),"
             " (2, 'bb', 'h2', '2026-01-01T00:00:00Z', 2, '{\"destHash\":\"D\"}');"
             "INSERT INTO observations (id, transmission_id, observer_idx, snr, path_json,"
             " timestamp) VALUES"
             " (1, 1, 1, -3.5, '[\"AA\",\"BB\"]', %lld), (2, 1, 1, -2.5, '[\"AA\",null]', %lld),"
             " (3, 2, 1, 5.9, '[\"CC\",1]', %lld), (4, 2, 1, -0.5, 'not json', %lld),"
             " (5, 2, 1, NULL, '[]', %lld);",
             (long long)now - 60, (long long)now - 50, (long long)now - 40, (long long)now - 30,
             (long long)now - 20);
    cr_assert_eq(mg_test_make_db(e.db, true, sql), 0);
    cr_assert(mg_test_ctx_open(&e.ctx, e.db));
    e.ctx_open = true;
    cr_assert_eq(mg_test_ctx_get(&e.ctx, "/api/observers/OBS/analytics?days=1"), 200, "%s",
                 e.ctx.res.body.data);
    const char *body = e.ctx.res.body.data;
    cr_expect(strstr(body, "\"snrDistribution\":[{\"range\":\"-4 to -2\",\"count\":1},"
                           "{\"range\":\"-2 to 0\",\"count\":1},{\"range\":\"0 to 2\",\"count\":1},"
                           "{\"range\":\"4 to 6\",\"count\":1}]"),
              "%s", body);
    /* Names: PK (pubKey; the empty srcHash is none), D (destHash), AA and BB (paths; the
     * path with a number is dropped whole, a null hop is skipped). Observations 1-5 lie in
     * one or two hourly buckets. */
    long long names = 0;
    for (const char *b = json_first(json_get(body, "nodesTimeline")); b; b = json_next(b))
        names += json_int_at(b, "count");
    long long buckets = json_length(json_get(body, "nodesTimeline"));
    cr_expect(buckets == 1 ? names == 4 : names >= 4 && names <= 6, "%s", body);
    cr_expect(strstr(body, "\"packetTypes\":{\"2\":3,\"4\":2}"), "%s", body);
    /* Warm now: the second request is light and the same. */
    char first[4096];
    snprintf(first, sizeof first, "%s", body);
    cr_assert_eq(mg_test_ctx_get(&e.ctx, "/api/observers/OBS/analytics?days=1"), 200);
    cr_expect(e.ctx.light, "a warm report is light");
    cr_expect_str_eq(e.ctx.res.body.data, first);
}

/* ---- observer clock calibration ------------------------------------------------------------ */

/* Worked by hand: ADVERT 1 heard by A, B and C at t, t+2 and t+10 (median t+2: deviations
 * -2, 0, +8), ADVERT 2 by A and B at s and s+4 (median s+2: -2, +2). A's offset is the median
 * of -2 and -2, B's of 0 and 2, C's of 8 alone. CoreScope rounds with int(v * 10 + 0.5) / 10,
 * which truncates toward zero: -2 comes out as -1.9, and so must it here. Not counted: a second
 * copy of A's observation of ADVERT 1 (same path), an ADVERT dated 1970, one heard once, and a text
 * message. */
Test(records_shapes, observer_clock_skew_is_the_median_deviation_from_each_packets_median)
{
    mg_test_tmpdir(e.dir, sizeof e.dir);
    snprintf(e.db, sizeof e.db, "%s/skew.db", e.dir);
    static const char sql[] =
        "INSERT INTO observers (rowid, id, name, iata, last_seen) VALUES"
        " (1, 'A', 'a', 'SJC', '2026-01-01T00:00:00Z'), (2, 'B', 'b', 'SJC', "
        "'2026-01-01T00:00:00Z'),"
        " (3, 'C', 'c', 'SJC', '2026-01-01T00:00:00Z');"
        "INSERT INTO transmissions (id, raw_hex, hash, first_seen, payload_type, decoded_json)"
        " VALUES (1, 'aa', 'h1', '2026-01-01T00:00:00Z', 4, '{\"timestamp\":1767225600}'),"
        " (2, 'bb', 'h2', '2026-01-01T00:00:00Z', 4,"
        "  '{\"payload\":{\"timestamp\":1767225700.9},\"timestamp\":5}'),"
        " (3, 'cc', 'h3', '2026-01-01T00:00:00Z', 4, '{\"timestamp\":1000}'),"
        " (4, 'dd', 'h4', '2026-01-01T00:00:00Z', 4, '{\"timestamp\":1767225600}'),"
        " (5, 'ee', 'h5', '2026-01-01T00:00:00Z', 5, '{\"timestamp\":1767225600}');"
        "INSERT INTO observations (id, transmission_id, observer_idx, path_json, timestamp) VALUES"
        " (1, 1, 1, '[]', 1767225600), (2, 1, 2, '[]', 1767225602), (3, 1, 3, '[]', 1767225610),"
        " (4, 1, 1, '[]', 1767225500),"
        " (5, 2, 1, '[]', 1767225700), (6, 2, 2, '[]', 1767225704),"
        " (7, 3, 1, '[]', 1767225600), (8, 3, 3, '[]', 1767225900),"
        " (9, 4, 3, '[]', 1767225600),"
        " (10, 5, 1, '[]', 1767225600), (11, 5, 3, '[]', 1767229999);";
    cr_assert_eq(mg_test_make_db(e.db, true, sql), 0);
    cr_assert(mg_test_ctx_open(&e.ctx, e.db));
    e.ctx_open = true;
    cr_assert_eq(mg_test_ctx_get(&e.ctx, "/api/observers/clock-skew"), 200, "%s",
                 e.ctx.res.body.data);
    cr_expect_str_eq(e.ctx.res.body.data,
                     "[{\"observerID\":\"C\",\"offsetSec\":8,\"samples\":1},"
                     "{\"observerID\":\"A\",\"offsetSec\":-1.9,\"samples\":2},"
                     "{\"observerID\":\"B\",\"offsetSec\":1,\"samples\":2}]\n");
    cr_assert_eq(mg_test_ctx_get(&e.ctx, "/api/observers/clock-skew"), 200);
    cr_expect(e.ctx.light, "served warm from the shared cache");
}

/* ---- hop resolution ------------------------------------------------------------------------ */

#define CAN_RELAY                                                                                  \
    "(instr(lower(role), 'repeater') > 0 OR instr(lower(role), 'room_server') > 0"                 \
    " OR lower(role) = 'room')"

FIXTURE_TEST(resolve_hops_names_each_prefixs_relaying_nodes)
{
    start();
    char *unique = db_text("SELECT substr(lower(public_key), 1, 4) AS p FROM nodes WHERE " CAN_RELAY
                           " GROUP BY p HAVING count(*) = 1 ORDER BY p LIMIT 1");
    char *unique_key = db_text("SELECT public_key FROM nodes WHERE " CAN_RELAY
                               " AND lower(public_key) LIKE %Q || '%%'",
                               unique);
    char *shared = db_text("SELECT substr(lower(public_key), 1, 2) AS p FROM nodes WHERE " CAN_RELAY
                           " GROUP BY p HAVING count(*) > 2 ORDER BY count(*) DESC, p LIMIT 1");
    long long shared_count = db_int("SELECT count(*) FROM nodes WHERE " CAN_RELAY
                                    " AND lower(public_key) LIKE %Q || '%%'",
                                    shared);
    /* The pick: a node with a position first, then the most adverts, then the smaller key. */
    char *pick = db_text("SELECT public_key FROM nodes WHERE " CAN_RELAY
                         " AND lower(public_key) LIKE %Q || '%%' ORDER BY (lat IS NOT NULL AND"
                         " lon IS NOT NULL AND NOT (lat = 0 AND lon = 0)) DESC,"
                         " coalesce(advert_count, 0) DESC, public_key LIMIT 1",
                         shared);
    long long pick_located = db_int("SELECT lat IS NOT NULL AND lon IS NOT NULL AND NOT (lat = 0"
                                    " AND lon = 0) FROM nodes WHERE public_key = %Q",
                                    pick);
    char target[256];
    snprintf(target, sizeof target, "/api/resolve-hops?hops=%s,zz,%s,,%s", unique, shared, shared);
    struct mg_test_response r;
    api_get(target, 200, &r);
    const char *resolved = json_get(r.body, "resolved");
    char keys[256], want_keys[256];
    json_keys(resolved, NULL, keys, sizeof keys);
    /* sorted bytewise (Go's map keys), each once */
    bool shared_first = strcmp(shared, unique) < 0;
    snprintf(want_keys, sizeof want_keys, "%s,%s,zz", shared_first ? shared : unique,
             shared_first ? unique : shared);
    cr_expect_str_eq(keys, want_keys);
    const char *u = json_get(resolved, unique);
    cr_expect(json_str_at_eq(u, "confidence", "unique_prefix"), "%s", u);
    cr_expect(json_str_at_eq(u, "pubkey", unique_key), "%s, want %s", u, unique_key);
    const char *none = json_get(resolved, "zz");
    cr_expect(json_str_at_eq(none, "confidence", "no_match") && json_is_at(none, "name", "null") &&
                  json_length(json_get(none, "candidates")) == 0,
              "%s", none);
    const char *s = json_get(resolved, shared);
    cr_expect_eq(json_length(json_get(s, "candidates")), shared_count, "%s", s);
    cr_expect(json_is_at(s, "ambiguous", "true"));
    cr_expect(json_str_at_eq(s, "pubkey", pick), "%s, want %s", s, pick);
    cr_expect(json_str_at_eq(s, "confidence",
                             pick_located ? "gps_preference" : "observation_count_fallback"),
              "%s", s);
    mg_test_response_free(&r);
    api_get("/api/resolve-hops", 200, &r);
    cr_expect_str_eq(r.body, "{\"resolved\":{}}\n");
    mg_test_response_free(&r);
    free(unique);
    free(unique_key);
    free(shared);
    free(pick);
}

#define OBSERVER_55D4 "55D4CFEE3B826AFFE22BD480611A9BA6ECE9CBB03AA89EE6F414416285DE50DB"

FIXTURE_TEST(resolve_hops_with_an_observer_uses_its_neighbours_as_corescope)
{
    start();
    /* Hop 1F names two relays; observer 55D4's edge to one of them, 1F5DD36F, was seen
     * through its 2-byte hop 1F5D, once heard directly (a zero-hop ADVERT) and 12 times
     * through 1F itself: 18, CoreScope's count on the same copy. */
    char *near = db_text("SELECT public_key FROM nodes WHERE lower(public_key) LIKE '1f5dd36f%%'");
    cr_expect_eq(db_int("SELECT count(*) FROM nodes WHERE lower(public_key) LIKE '1f%%' AND"
                        " " CAN_RELAY),
                 2);
    long long via_2 = db_int("SELECT count(*) FROM observations o JOIN observers obs ON"
                             " obs.rowid = o.observer_idx WHERE obs.id = %Q AND"
                             " lower(o.path_json ->> '$[#-1]') = '1f5d'",
                             OBSERVER_55D4);
    long long direct = db_int("SELECT count(*) FROM observations o JOIN observers obs ON"
                              " obs.rowid = o.observer_idx JOIN transmissions t ON"
                              " t.id = o.transmission_id WHERE obs.id = %Q AND t.payload_type = 4"
                              " AND lower(t.decoded_json ->> '$.pubKey') = lower(%Q) AND"
                              " json_array_length(o.path_json) = 0",
                              OBSERVER_55D4, near);
    long long via_1 = db_int("SELECT count(*) FROM observations o JOIN observers obs ON"
                             " obs.rowid = o.observer_idx WHERE obs.id = %Q AND"
                             " lower(o.path_json ->> '$[#-1]') = '1f'",
                             OBSERVER_55D4);
    cr_expect_eq(via_2 + direct + via_1, 18, "%lld + %lld + %lld", via_2, direct, via_1);
    char target[256];
    snprintf(target, sizeof target, "/api/nodes/%s/neighbors", near);
    struct mg_test_response r;
    api_get(target, 200, &r);
    double edge_score = -1;
    for (const char *nb = json_first(json_get(r.body, "neighbors")); nb; nb = json_next(nb))
        if (json_str_at_eq(nb, "pubkey",
                           "55d4cfee3b826affe22bd480611a9ba6ece9cbb03aa89ee6f414416285"
                           "de50db")) {
            cr_expect_eq(json_int_at(nb, "count"), via_2 + direct + via_1, "%.600s", nb);
            edge_score = json_double_at(nb, "score");
        }
    cr_expect_gt(edge_score, 0, "the edge 55D4 - 1F5DD36F: %.900s", r.body);
    mg_test_response_free(&r);
    /* With the observer as context, 1F is its neighbour (CoreScope: neighbor_affinity, its
     * bestCandidate); the candidate's affinityScore is that edge's score. */
    snprintf(target, sizeof target, "/api/resolve-hops?hops=1F&observer=%s", OBSERVER_55D4);
    api_get(target, 200, &r);
    const char *h = json_get(json_get(r.body, "resolved"), "1F");
    cr_expect(json_str_at_eq(h, "confidence", "neighbor_affinity") &&
                  json_str_at_eq(h, "bestCandidate", near) && json_str_at_eq(h, "pubkey", near),
              "%.900s", h);
    for (const char *c = json_first(json_get(h, "candidates")); c; c = json_next(c)) {
        if (json_str_at_eq(c, "pubkey", near))
            cr_expect(fabs(json_double_at(c, "affinityScore") - edge_score) < 1e-4, "%.300s", c);
        else
            cr_expect(json_is_at(c, "affinityScore", "null"), "no edge: %.300s", c);
    }
    mg_test_response_free(&r);
    /* Without context: CoreScope's pick by position and adverts, no bestCandidate. */
    api_get("/api/resolve-hops?hops=1F", 200, &r);
    h = json_get(json_get(r.body, "resolved"), "1F");
    cr_expect(!json_get(h, "bestCandidate") &&
                  !json_str_at_eq(h, "confidence", "neighbor_affinity"),
              "%.900s", h);
    mg_test_response_free(&r);
    /* A context key no node or observer has changes nothing: the same pick as without. */
    api_get("/api/resolve-hops?hops=1F&from_node=00", 200, &r);
    const char *h2 = json_get(json_get(r.body, "resolved"), "1F");
    cr_expect(!json_get(h2, "bestCandidate"), "%.900s", h2);
    mg_test_response_free(&r);
    free(near);
}

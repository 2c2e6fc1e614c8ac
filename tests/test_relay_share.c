/* SPDX-License-Identifier: ISC */
/*
 * The relay table (workers/data/node_relay.c) is built once per group: the real binary with 4
 * workers, requests spread over them on several connections, one pass over the observations
 * (relay_builds) and a copy decoded by every other worker (relay_copies); a worker killed -9
 * comes back with the group's copy and makes no pass of its own; the answers are those the
 * rows give. And when the table is too large for the cache, each worker builds its own. The
 * node list's hash sizes (workers/data/node_hash_sizes.c) are shared the same way
 * (hash_size_builds, hash_size_copies), and so are the usefulness scores (usefulness_builds,
 * usefulness_copies), the multi-byte capability (multibyte_builds, multibyte_copies) and the region
 * map (region_builds, region_copies), which no worker makes at its start.
 */
#include "harness.h"

#include "jsoncheck.h"
#include "result_cache.h"
#include "scoreboard.h"
#include "segment.h"
#include "stats.h"

#include <criterion/criterion.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TestSuite(relay_share, .timeout = 240);

#define KEY_AA "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define KEY_BB "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define KEY_DD "dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"
/* A time `what` ago as the rows store it: AGO in a format, AGO_SQL in plain SQL. */
#define AGO(what) "strftime('%%Y-%%m-%%dT%%H:%%M:%%SZ', 'now', '-" what "')"
#define AGO_SQL(what) "strftime('%Y-%m-%dT%H:%M:%SZ', 'now', '-" what "')"

/* Three repeaters; transmissions through AA and BB by their first byte, one through DD's
 * whole key (the list counts only a key that is itself a hop), an ADVERT (never a relay), one
 * older than a day. extra: more SQL. */
static void make_db(const char *path, const char *extra)
{
    char sql[8192];
    snprintf(
        sql, sizeof sql,
        "INSERT INTO nodes (public_key, name, role, last_seen, first_seen) VALUES"
        " ('%s', 'AA', 'repeater', " AGO(
            "1 minutes") ", '2026-01-01T00:00:00Z'),"
                         " ('%s', 'BB', 'repeater', " AGO(
                             "1 minutes") ", '2026-01-01T00:00:00Z'),"
                                          " ('%s', 'DD', 'repeater', " AGO(
                                              "1 minutes") ", '2026-01-01T00:00:00Z');"
                                                           "INSERT INTO observers (id, name, iata) "
                                                           "VALUES ('OBS1', 'Observer', 'SJC');"
                                                           "INSERT INTO transmissions (id, "
                                                           "raw_hex, hash, first_seen, route_type, "
                                                           "payload_type)"
                                                           " VALUES (1, '01', 'h1', " AGO(
                                                               "10 minutes") ", 1, 2),"
                                                                             " (2, '02', "
                                                                             "'h2', " AGO("2 hours") ", 1, 2), (3, '03', 'h3', " AGO(
                                                                                 "30 hours") ", 0, "
                                                                                             "2),"
                                                                                             " (4, "
                                                                                             "'04',"
                                                                                             " 'h4'"
                                                                                             ","
                                                                                             " " AGO("5 minutes") ", 1, 4), (5, '05', 'h5', " AGO(
                                                                                                 "5"
                                                                                                 " "
                                                                                                 "m"
                                                                                                 "i"
                                                                                                 "n"
                                                                                                 "u"
                                                                                                 "t"
                                                                                                 "e"
                                                                                                 "s") ", 0, 2);"
                                                                                                      "INSERT INTO observations (transmission_id, observer_idx, path_json, timestamp) VALUES"
                                                                                                      " (1, 1, '[\"AA\",\"BB\"]', 1), (2, 1, '[\"AA\"]', 2), (2, 1, '[\"AA\",\"CC\",\"BB\"]', 3),"
                                                                                                      " (3, 1, '[\"BB\"]', 4), (4, 1, '[\"AA\"]', 5), (5, 1, '[\"%s\"]', 6);%s",
        KEY_AA, KEY_BB, KEY_DD, KEY_DD, extra ? extra : "");
    cr_assert_eq(mg_test_make_db(path, false, sql), 0);
}

/* The non-ADVERT transmissions of the last `hours` with a hop equal to key or its first byte:
 * the relays CoreScope counts for the detail (for the list, key itself only: first false). */
static long long relays_of(const char *db, const char *key, int hours, bool first)
{
    sqlite3 *conn;
    cr_assert_eq(mg_test_sqlite_open_v2(db, &conn, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    char *sql = sqlite3_mprintf(
        "SELECT count(DISTINCT t.id) FROM transmissions t JOIN observations o"
        " ON o.transmission_id = t.id, json_each(o.path_json) h WHERE t.payload_type <> 4"
        " AND (lower(h.value) = %Q OR (%d AND lower(h.value) = substr(%Q, 1, 2)))"
        " AND t.first_seen > strftime('%%Y-%%m-%%dT%%H:%%M:%%SZ', 'now', '-%d hours')",
        key, first, key, hours);
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(conn, sql, -1, &st, NULL), SQLITE_OK, "%s",
                 sqlite3_errmsg(conn));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    long long n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_free(sql);
    sqlite3_close(conn);
    return n;
}

static void attach(const struct mg_test_server *s, struct mg_segment *seg)
{
    char err[256];
    cr_assert_eq(mg_segment_attach(seg, s->shm_name, true, err, sizeof err), 0, "%s", err);
}

/* Workers that served a request since they started. */
static unsigned served(struct mg_segment *seg)
{
    unsigned n = 0;
    for (unsigned i = 0; i < seg->slot_count; i++)
        n += atomic_load(&seg->slots[i].pid) > 0 && atomic_load(&seg->slots[i].requests) > 0;
    return n;
}

struct client {
    int port;
    const char *target;
    int requests;
    char *first; /* the first 200 body */
    int ok, differ;
    int other; /* the last status that was not 200 (-1: no answer within the GET's timeout) */
};

/* Each request on its own connection, so the group's workers share them. */
static void *fetch(void *arg)
{
    struct client *c = arg;
    for (int i = 0; i < c->requests; i++) {
        struct mg_test_response r;
        if (!mg_test_get(c->port, c->target, NULL, &r)) {
            c->other = -1;
            continue;
        }
        if (r.status != 200)
            c->other = r.status;
        if (r.status == 200) {
            c->ok++;
            if (!c->first)
                c->first = strdup(r.body);
            else
                c->differ += strcmp(c->first, r.body) != 0;
        }
        mg_test_response_free(&r);
    }
    return NULL;
}

enum { CLIENTS = 6 };

/* The spreads ask from one address, CLIENTS at once, at the start of a group whose workers
 * are still taking the group's tables: no test here is about the anonymous line, so its wait
 * is long and its rate and per-address share off (under ASan with four busy loops a request past
 * the line's 2 s default would be a 503 that says nothing of the tables). */
#define PATIENT_LINE                                                                               \
    "MESHGATE_ANON_WAIT_MS=60000", "MESHGATE_ANON_RATE=0", "MESHGATE_ANON_PER_CLIENT=0"

/* CLIENTS connections at once, `requests` each; every answer 200 and equal to want (NULL:
 * to each other); returns the first answer (malloc'ed). */
static char *spread(int port, const char *target, int requests, const char *want)
{
    struct client c[CLIENTS];
    pthread_t t[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        c[i] = (struct client){.port = port, .target = target, .requests = requests};
        pthread_create(&t[i], NULL, fetch, &c[i]);
    }
    for (int i = 0; i < CLIENTS; i++)
        pthread_join(t[i], NULL);
    char *first = strdup(want ? want : c[0].first ? c[0].first : "");
    for (int i = 0; i < CLIENTS; i++) {
        cr_expect_eq(c[i].ok, requests, "%s: %d of %d answered 200 (else %d)", target, c[i].ok,
                     requests, c[i].other);
        cr_expect_eq(c[i].differ, 0, "%s: answers differ", target);
        cr_expect(c[i].first && strcmp(c[i].first, first) == 0, "%s: %s against %s", target,
                  c[i].first, first);
        free(c[i].first);
    }
    return first;
}

/* CLIENTS connections at once, 2 requests each, whatever they answer. */
static void poke(int port, const char *target)
{
    struct client c[CLIENTS];
    pthread_t t[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        c[i] = (struct client){.port = port, .target = target, .requests = 2};
        pthread_create(&t[i], NULL, fetch, &c[i]);
    }
    for (int i = 0; i < CLIENTS; i++) {
        pthread_join(t[i], NULL);
        free(c[i].first);
    }
}

/* The node with this key in a list. */
static const char *listed(const char *body, const char *key)
{
    for (const char *n = json_first(json_get(body, "nodes")); n; n = json_next(n))
        if (json_str_at_eq(n, "public_key", key))
            return n;
    cr_assert_fail("%.8s not in the list", key);
    return NULL;
}

struct counter_wait {
    _Atomic uint64_t *counter;
    uint64_t want;
};

static bool counter_reached(void *arg)
{
    const struct counter_wait *w = arg;
    return atomic_load(w->counter) >= w->want;
}

/* Until every group table the node list reads at its start is built (relay, hash sizes,
 * usefulness, multi-byte; ceiling 120 s): a worker answers with a table's fields only once the
 * group's copy is stored, so a spread begun earlier can see one table land between two answers
 * (under ASan with four busy loops the later passes end seconds after the first). */
static void list_tables_built(struct mg_result_cache *c)
{
    struct counter_wait w[] = {{&c->relay_builds, 1},
                               {&c->hash_size_builds, 1},
                               {&c->usefulness_builds, 1},
                               {&c->multibyte_builds, 1}};
    static const char *const names[] = {"relay", "hash sizes", "usefulness", "multi-byte"};
    for (size_t i = 0; i < sizeof w / sizeof *w; i++)
        cr_assert(mg_test_wait_until(counter_reached, &w[i], 120000, 10),
                  "the %s table was never built", names[i]);
}

struct respawn_wait {
    struct mg_segment *seg;
    unsigned slot;
    int old_pid;
};

static bool respawned(void *arg)
{
    const struct respawn_wait *w = arg;
    const struct mg_slot *s = &w->seg->slots[w->slot];
    int pid = atomic_load(&s->pid);
    uint32_t st = atomic_load(&s->state);
    return pid > 0 && pid != w->old_pid && st != MG_SLOT_STARTING && st != MG_SLOT_DEAD &&
           st != MG_SLOT_EMPTY;
}

Test(relay_share, one_pass_for_four_workers_and_a_respawned_worker_copies_it)
{
    char dir[128], db[256];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/relay.db", dir);
    make_db(db, NULL);
    const char *env[] = {"MESHGATE_WORKERS=4", PATIENT_LINE, NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db, env));
    struct mg_segment seg;
    attach(&s, &seg);
    struct mg_result_cache *c = seg.cache.cache;
    /* The workers serve at once; one of them builds the group's table on a thread of its
     * own meanwhile. */
    list_tables_built(c);

    /* The list on several connections at once, until the requests have reached every worker
     * (bounded): all answers equal, one pass. */
    char *list = NULL;
    for (int round = 0; round < 20 && served(&seg) < seg.slot_count; round++) {
        char *again = spread(s.port, "/api/nodes", 8, list);
        free(list);
        list = again;
    }
    cr_assert_geq(served(&seg), 2, "the requests reached one worker only");
    unsigned readers = served(&seg);
    cr_expect_eq(atomic_load(&c->relay_builds), 1, "one pass for the group");
    cr_expect_geq(atomic_load(&c->relay_copies), readers - 1,
                  "each other worker that served took the group's copy (%u served)", readers);
    /* The answers are the rows': DD's whole key is a hop (the list's counts), AA and BB count
     * their first byte in the detail. */
    const char *dd = listed(list, KEY_DD);
    cr_expect_eq(json_int_at(dd, "relay_count_24h"), relays_of(db, KEY_DD, 24, false));
    cr_expect_eq(json_int_at(dd, "relay_count_24h"), 1);
    cr_expect(json_is_at(dd, "relay_active", "true"));
    cr_expect(json_is_at(listed(list, KEY_AA), "relay_count_24h", "0"), "AA is no hop of its own");
    char *aa = spread(s.port, "/api/nodes/" KEY_AA, 2, NULL);
    char *bb = spread(s.port, "/api/nodes/" KEY_BB, 2, NULL);
    const char *na = json_get(aa, "node"), *nb = json_get(bb, "node");
    cr_expect_eq(json_int_at(na, "relay_count_24h"), relays_of(db, KEY_AA, 24, true));
    cr_expect_eq(json_int_at(na, "relay_count_24h"), 2, "transmissions 1 and 2 (4 is an ADVERT)");
    cr_expect_eq(json_int_at(na, "relay_count_1h"), relays_of(db, KEY_AA, 1, true));
    cr_expect_eq(json_int_at(nb, "relay_count_24h"), relays_of(db, KEY_BB, 24, true));
    cr_expect_eq(json_int_at(nb, "relay_count_24h"), 2, "transmission 3 is older than a day");
    cr_expect_eq(json_int_at(nb, "unscoped_relay_count_24h"), 2, "both floods");
    cr_expect_eq(atomic_load(&c->relay_builds), 1, "still one pass");

    /* A worker killed -9 comes back with the group's copy, before any request. */
    unsigned victim_slot = 0;
    while (atomic_load(&seg.slots[victim_slot].pid) <= 0)
        victim_slot++;
    struct respawn_wait rw = {&seg, victim_slot, atomic_load(&seg.slots[victim_slot].pid)};
    uint64_t copies = atomic_load(&c->relay_copies);
    cr_assert_eq(kill(rw.old_pid, SIGKILL), 0);
    cr_assert(mg_test_wait_until(respawned, &rw, 60000, 10), "slot %u was not respawned",
              victim_slot);
    struct counter_wait cw = {&c->relay_copies, copies + 1};
    cr_expect(mg_test_wait_until(counter_reached, &cw, 60000, 10),
              "the new worker took no copy at its start");
    /* It serves at once, and the same answers, with no pass of its own. */
    for (int round = 0; round < 20 && !atomic_load(&seg.slots[victim_slot].requests); round++)
        free(spread(s.port, "/api/healthz", 4, NULL));
    cr_expect_gt(atomic_load(&seg.slots[victim_slot].requests), 0, "the new worker served nothing");
    uint64_t before = atomic_load(&seg.slots[victim_slot].requests);
    for (int round = 0; round < 20 && atomic_load(&seg.slots[victim_slot].requests) == before;
         round++)
        free(spread(s.port, "/api/nodes", 4, list));
    cr_expect_gt(atomic_load(&seg.slots[victim_slot].requests), before,
                 "the new worker answered no /api/nodes");
    cr_expect_eq(atomic_load(&c->relay_builds), 1, "the respawned worker made no pass");
    free(aa);
    free(bb);
    free(list);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
    mg_test_rmdir(dir);
}

Test(relay_share, a_table_too_large_for_the_cache_is_built_by_each_worker)
{
    char dir[128], db[256];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/relay.db", dir);
    /* 400 more transmissions, each through its own 3-byte hop: a table of some 40 KiB, more
     * than the one page a 4096-byte cache stores. */
    make_db(db,
            "WITH RECURSIVE n(i) AS (SELECT 100 UNION ALL SELECT i + 1 FROM n WHERE i < 499)"
            " INSERT INTO transmissions (id, raw_hex, hash, first_seen, route_type,"
            " payload_type) SELECT i, 'ff', 'x' || i, " AGO(
                "3 minutes") ", 1, 2 FROM n;"
                             "INSERT INTO observations (transmission_id, observer_idx, path_json, "
                             "timestamp)"
                             " SELECT id, 1, '[\"' || printf('%06x', id * 4099) || '\"]', id FROM"
                             " transmissions WHERE id >= 100;");
    const char *env[] = {"MESHGATE_WORKERS=2", "MESHGATE_REACH_CACHE_BYTES=4096", PATIENT_LINE,
                         NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db, env));
    struct mg_segment seg;
    attach(&s, &seg);
    struct mg_result_cache *c = seg.cache.cache;
    /* The list waits for no table: it is asked until each worker has made its own pass (one
     * asks for it behind a request) and the group has the others, then answered alike. */
    int64_t t0 = mg_test_now_ms();
    while (!(atomic_load(&c->relay_builds) >= seg.slot_count &&
             atomic_load(&c->hash_size_builds) >= 1 && atomic_load(&c->usefulness_builds) >= 1 &&
             atomic_load(&c->multibyte_builds) >= 1) &&
           mg_test_now_ms() - t0 < 120000) {
        poke(s.port, "/api/nodes"); /* connections at once reach both workers */
        mg_test_sleep_ms(20);
    }
    cr_assert_eq(atomic_load(&c->relay_builds), seg.slot_count, "a worker made no pass");
    char *list = NULL;
    for (int round = 0; round < 20 && (!list || served(&seg) < seg.slot_count); round++) {
        char *again = spread(s.port, "/api/nodes", 4, list);
        free(list);
        list = again;
    }
    cr_assert_eq(served(&seg), seg.slot_count, "the requests did not reach both workers");
    cr_expect_eq(json_int_at(listed(list, KEY_DD), "relay_count_24h"), 1);
    cr_expect_eq(atomic_load(&c->relay_builds), seg.slot_count, "each worker made its pass");
    cr_expect_eq(atomic_load(&c->relay_copies), 0);
    char *log = mg_test_server_log(&s);
    cr_expect_eq(mg_test_count(log, "node relay activity: the table's"), (int)seg.slot_count,
                 "logged once by each worker: %s", log);
    free(log);
    free(list);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
    mg_test_rmdir(dir);
}

/* Whether fd has something to read (an answer, or its end) within ms. */
static bool readable(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, ms) > 0;
}

Test(relay_share, a_signed_in_request_waiting_for_the_table_parks_and_healthz_is_answered_meanwhile)
{
    /* One worker, whose start-up pass of the hash sizes lasts 15 s more (a test hook): a
     * signed-in /api/analytics/hash-sizes needs the table and waits for that pass (the node
     * list waits for none: node_hash_sizes.h). It waits off the loop: the loop answers
     * healthz on another connection while the pass runs and the request still waits, and
     * makes no timer turns meanwhile (it asked a parked request again every 2 ms before
     * the helper's end woke it); then the request is answered from the pass's table (one
     * pass) as soon as it lands. */
    char dir[128], db[256], keys[300];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/relay.db", dir);
    make_db(db, NULL);
    mg_test_write_keys_file(dir, "relay-wait-0123456789abcdef", keys, sizeof keys);
    const char *env[] = {"MESHGATE_WORKERS=1",
                         "MESHGATE_TEST_HOOKS=park",
                         "MESHGATE_TEST_GROUP_PASS_MS=15000",
                         "MESHGATE_TEST_GROUP_PASS_ONLY=hashsizes",
                         keys,
                         NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db, env));
    struct mg_segment seg;
    attach(&s, &seg);
    struct mg_result_cache *c = seg.cache.cache;
    int waiting = mg_test_connect(s.port);
    cr_assert_geq(waiting, 0);
    const char *req = "GET /api/analytics/hash-sizes HTTP/1.1\r\nHost: t\r\n"
                      "Authorization: Bearer relay-wait-0123456789abcdef\r\n"
                      "Connection: close\r\n\r\n";
    uint64_t turns = mg_counter_get(&seg, MG_CTR_PARKED_TIMER_TURNS);
    int worker = atomic_load(&seg.slots[0].pid);
    long cpu = mg_test_cpu_ms(worker);
    cr_assert(mg_test_send(waiting, req, strlen(req)));
    /* Its worker has taken it up (its slot shows it) before healthz is asked. */
    int64_t t0 = mg_test_now_ms();
    while (atomic_load(&seg.slots[0].request_started_monotonic_ns) == 0 &&
           mg_test_now_ms() - t0 < 10000)
        mg_test_sleep_ms(5);
    cr_assert_eq(atomic_load(&c->hash_size_builds), 0, "the pass ended before the test could ask");
    int64_t asked = mg_test_now_ms();
    struct mg_test_response h;
    cr_assert(mg_test_get(s.port, "/api/healthz", NULL, &h));
    int64_t took = mg_test_now_ms() - asked;
    cr_expect_eq(h.status, 200);
    mg_test_response_free(&h);
    cr_expect_eq(atomic_load(&c->hash_size_builds), 0,
                 "healthz was answered only after the pass (%lld ms)", (long long)took);
    cr_expect_not(readable(waiting, 0), "the signed-in request did not wait for the table");
    /* The table lands; the request is answered, from the one pass, having parked. */
    struct counter_wait built = {&c->hash_size_builds, 1};
    cr_assert(mg_test_wait_until(counter_reached, &built, 60000, 2), "the pass never ended");
    int64_t landed = mg_test_now_ms();
    int64_t waited = landed - t0;
    uint64_t timer_turns = mg_counter_get(&seg, MG_CTR_PARKED_TIMER_TURNS) - turns;
    long cpu_waiting = mg_test_cpu_ms(worker) - cpu;
    /* The safety bound: a turn a second at most. */
    cr_expect_leq(timer_turns, (uint64_t)(waited / 1000 + 2),
                  "the loop turned %llu times on its timer while the request waited %lld ms",
                  (unsigned long long)timer_turns, (long long)waited);
    struct mg_test_response r;
    cr_assert(mg_test_read_response(waiting, &r, false, 60000));
    int64_t after = mg_test_now_ms() - landed;
    cr_log_info("waited %lld ms for the table: %llu timer turns, worker CPU %ld ms, healthz "
                "%lld ms, answered %lld ms after the pass",
                (long long)waited, (unsigned long long)timer_turns, cpu_waiting, (long long)took,
                (long long)after);
    cr_expect_lt(after, 10000, "answered %lld ms after the table landed", (long long)after);
    cr_expect_eq(r.status, 200, "%s", r.body);
    char prepared[128] = "";
    mg_test_header(&r, "X-Test-Prepared", prepared, sizeof prepared);
    cr_expect(strncmp(prepared, "turns=1 ", 8) != 0, "it never parked: %s", prepared);
    cr_expect(strstr(prepared, "preparations=1"), "%s", prepared);
    mg_test_response_free(&r);
    close(waiting);
    cr_expect_eq(atomic_load(&c->hash_size_builds), 1, "one pass");
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
    mg_test_rmdir(dir);
}

Test(relay_share, the_list_is_answered_at_once_while_the_pass_runs_when_no_key_can_be_a_hop)
{
    /* Two workers, the relay pass 20 s longer (a test hook); DD relayed only by its first
     * byte, so no hop is a whole key: the group's probe (one read of the paths, made once)
     * says the list needs no table, and /api/nodes?limit=50 is answered while the pass still
     * runs, the same bytes as once the table is there. */
    char dir[128], db[256], keys[300];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/relay.db", dir);
    make_db(db, "UPDATE observations SET path_json = '[\"DD\"]' WHERE transmission_id = 5;");
    mg_test_write_keys_file(dir, "relay-probe-0123456789abcdef", keys, sizeof keys);
    const char *env[] = {"MESHGATE_WORKERS=2",
                         "MESHGATE_TEST_HOOKS=park",
                         "MESHGATE_TEST_RELAY_PASS_MS=20000",
                         keys,
                         PATIENT_LINE,
                         NULL};
    const char *auth = "Authorization: Bearer relay-probe-0123456789abcdef\r\n";
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db, env));
    struct mg_segment seg;
    attach(&s, &seg);
    struct mg_result_cache *c = seg.cache.cache;
    /* The other tables the list reads are built first (they are not this test's): under ASan
     * the multi-byte pass could land between the first list and the later ones, which then had
     * its fields and the first did not. */
    struct counter_wait others[] = {
        {&c->hash_size_builds, 1}, {&c->usefulness_builds, 1}, {&c->multibyte_builds, 1}};
    for (size_t i = 0; i < sizeof others / sizeof *others; i++)
        cr_assert(mg_test_wait_until(counter_reached, &others[i], 120000, 10),
                  "table %zu was never built", i);
    struct mg_test_response r;
    cr_assert(mg_test_get(s.port, "/api/nodes?limit=50", auth, &r));
    cr_expect_eq(r.status, 200, "%s", r.body);
    cr_expect_eq(atomic_load(&c->relay_builds), 0, "the list waited for the relay pass");
    char *before = strdup(r.body);
    mg_test_response_free(&r);
    cr_expect_eq(json_int_at(listed(before, KEY_DD), "relay_count_24h"), 0);
    cr_expect(json_is_at(listed(before, KEY_AA), "relay_active", "false"), "%s", before);
    /* (the list does not wait for the probe either: before it lands, the same fields) */
    struct counter_wait probed = {&c->relay_probe_builds, 1};
    cr_assert(mg_test_wait_until(counter_reached, &probed, 120000, 10), "no probe");
    cr_expect_eq(atomic_load(&c->relay_probe_builds), 1, "one probe for the group");
    struct counter_wait built = {&c->relay_builds, 1};
    cr_assert(mg_test_wait_until(counter_reached, &built, 120000, 10), "the pass never ended");
    /* Answered as the table answers it, once the workers have it. */
    free(spread(s.port, "/api/nodes?limit=50", 4, before));
    cr_expect_eq(atomic_load(&c->relay_builds), 1, "one pass");
    cr_expect_eq(atomic_load(&c->relay_probe_builds), 1, "one probe");
    free(before);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
    mg_test_rmdir(dir);
}

/* ---- the node list's hash sizes, the same way (node_hash_sizes.h) ------------------------- */

/* BB's ADVERT (transmission 4) names BB and says 2-byte hashes (path byte 0x40). */
#define BB_ADVERT                                                                                  \
    "UPDATE transmissions SET raw_hex = '1140', decoded_json = '{\"pubKey\":\"" KEY_BB "\"}'"      \
    " WHERE id = 4;"

/* Whether /metrics of the server on port says name is want. */
static bool metric_is(int port, const char *name, uint64_t want)
{
    struct mg_test_response r;
    if (!mg_test_get(port, "/metrics", NULL, &r))
        return false;
    char line[160];
    snprintf(line, sizeof line, "\n%s %llu\n", name, (unsigned long long)want);
    bool is = r.status == 200 && strstr(r.body, line) != NULL;
    mg_test_response_free(&r);
    return is;
}

/* A worker killed -9 comes back with the group's copy (copies) before any request, answers
 * target as want, and makes no pass (builds stays 1). */
static void respawn_takes_the_copy(struct mg_segment *seg, int port, _Atomic uint64_t *builds,
                                   _Atomic uint64_t *copies, const char *target, const char *want)
{
    unsigned victim_slot = 0;
    while (atomic_load(&seg->slots[victim_slot].pid) <= 0)
        victim_slot++;
    struct respawn_wait rw = {seg, victim_slot, atomic_load(&seg->slots[victim_slot].pid)};
    uint64_t copied = atomic_load(copies);
    cr_assert_eq(kill(rw.old_pid, SIGKILL), 0);
    cr_assert(mg_test_wait_until(respawned, &rw, 60000, 10), "slot %u was not respawned",
              victim_slot);
    struct counter_wait cw = {copies, copied + 1};
    cr_expect(mg_test_wait_until(counter_reached, &cw, 60000, 10),
              "the new worker took no copy at its start");
    uint64_t before = atomic_load(&seg->slots[victim_slot].requests);
    for (int round = 0; round < 20 && atomic_load(&seg->slots[victim_slot].requests) == before;
         round++)
        free(spread(port, target, 4, want));
    cr_expect_gt(atomic_load(&seg->slots[victim_slot].requests), before,
                 "the new worker answered no %s", target);
    cr_expect_eq(atomic_load(builds), 1, "the respawned worker made no pass");
}

Test(relay_share, hash_sizes_one_pass_for_four_workers_and_a_respawned_worker_copies_it)
{
    char dir[128], db[256];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/relay.db", dir);
    make_db(db, BB_ADVERT);
    const char *env[] = {"MESHGATE_WORKERS=4", PATIENT_LINE, NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db, env));
    struct mg_segment seg;
    attach(&s, &seg);
    struct mg_result_cache *c = seg.cache.cache;
    /* The workers serve at once; one of them builds the group's table meanwhile. */
    list_tables_built(c);
    char *list = NULL;
    for (int round = 0; round < 20 && served(&seg) < seg.slot_count; round++) {
        char *again = spread(s.port, "/api/nodes", 8, list);
        free(list);
        list = again;
    }
    cr_assert_geq(served(&seg), 2, "the requests reached one worker only");
    unsigned readers = served(&seg);
    cr_expect_eq(atomic_load(&c->hash_size_builds), 1, "one pass for the group");
    cr_expect_geq(atomic_load(&c->hash_size_copies), readers - 1,
                  "each other worker that served took the group's copy (%u served)", readers);
    /* The answers are the rows': BB's ADVERT said 2 bytes, AA sent none. */
    cr_expect_eq(json_int_at(listed(list, KEY_BB), "hash_size"), 2);
    cr_expect(json_is_at(listed(list, KEY_AA), "hash_size", "null"), "AA announced no size");
    cr_expect(metric_is(s.port, "meshgate_reach_cache_hash_size_builds_total", 1));

    /* A worker killed -9 comes back with the group's copy, before any request. */
    respawn_takes_the_copy(&seg, s.port, &c->hash_size_builds, &c->hash_size_copies, "/api/nodes",
                           list);
    free(list);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
    mg_test_rmdir(dir);
}

/* Neighbour edges AA-BB and BB-DD of equal weight (count 100, a last_seen to come): BB lies on
 * the one path between AA and DD (bridge 1), reaches both at distance 3 (coverage 1) and
 * separates them (redundancy 1); AA and DD reach BB at 3 and each other at 6: coverage
 * (1/3 + 1/6) / (2/3) = 0.75. */
static const char usefulness_edges[] =
    "INSERT INTO neighbor_edges (node_a, node_b, count, last_seen) VALUES"
    " ('" KEY_AA "', '" KEY_BB "', 100, '2099-01-01T00:00:00Z'),"
    " ('" KEY_DD "', '" KEY_BB "', 100, '2099-01-01T00:00:00Z');";

Test(relay_share, usefulness_one_pass_for_four_workers_and_a_respawned_worker_copies_it)
{
    char dir[128], db[256];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/relay.db", dir);
    make_db(db, usefulness_edges);
    const char *env[] = {"MESHGATE_WORKERS=4", PATIENT_LINE, NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db, env));
    struct mg_segment seg;
    attach(&s, &seg);
    struct mg_result_cache *c = seg.cache.cache;
    /* One worker scores the nodes at its start, on a thread of its own. */
    list_tables_built(c);
    char *list = NULL;
    for (int round = 0; round < 20 && served(&seg) < seg.slot_count; round++) {
        char *again = spread(s.port, "/api/nodes", 8, list);
        free(list);
        list = again;
    }
    cr_assert_geq(served(&seg), 2, "the requests reached one worker only");
    unsigned readers = served(&seg);
    cr_expect_eq(atomic_load(&c->usefulness_builds), 1, "one pass for the group");
    cr_expect_geq(atomic_load(&c->usefulness_copies), readers - 1,
                  "each other worker that served took the group's copy (%u served)", readers);
    /* So is the multi-byte capability (node_multibyte.h): every node "unknown" here. */
    cr_expect_eq(atomic_load(&c->multibyte_builds), 1, "one multi-byte pass for the group");
    cr_expect_geq(atomic_load(&c->multibyte_copies), readers - 1);
    cr_expect(json_str_at_eq(listed(list, KEY_DD), "multi_byte_status", "unknown"));
    const char *bb = listed(list, KEY_BB), *aa = listed(list, KEY_AA);
    cr_expect(fabs(json_double_at(bb, "bridge_score") - 1) < 1e-12 &&
                  fabs(json_double_at(bb, "coverage_score") - 1) < 1e-12 &&
                  fabs(json_double_at(bb, "redundancy_score") - 1) < 1e-12 &&
                  fabs(json_double_at(bb, "usefulness_score") - 0.8) < 1e-12 &&
                  json_str_at_eq(bb, "usefulness_grade", "A"),
              "BB: %.600s", bb);
    cr_expect(json_is_at(aa, "bridge_score", "0") &&
                  fabs(json_double_at(aa, "coverage_score") - 0.75) < 1e-12 &&
                  json_str_at_eq(aa, "usefulness_grade", "D"),
              "AA: %.600s", aa);
    cr_expect(metric_is(s.port, "meshgate_reach_cache_usefulness_builds_total", 1));

    /* A worker killed -9 comes back with the group's copy, before any request. */
    respawn_takes_the_copy(&seg, s.port, &c->usefulness_builds, &c->usefulness_copies, "/api/nodes",
                           list);
    free(list);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
    mg_test_rmdir(dir);
}

/* AA's ADVERT heard in SJC and OAK, BB's in SJC (observer 1), DD's in none. */
static const char region_adverts[] =
    BB_ADVERT "INSERT INTO observers (rowid, id, name, iata) VALUES (2, 'OBS2', 'Oak', 'oak ');"
              "INSERT INTO transmissions (id, raw_hex, hash, first_seen, route_type, payload_type,"
              " decoded_json) VALUES (6, '1140', 'h6',"
              " strftime('%Y-%m-%dT%H:%M:%SZ', 'now', '-4 minutes'), 1, 4,"
              " '{\"pubKey\":\"" KEY_AA "\"}');"
              "INSERT INTO observations (transmission_id, observer_idx, path_json, timestamp)"
              " VALUES (6, 1, '[]', 7), (6, 2, '[]', 8);";

/* The keys a list names, in order, comma-separated (static). */
static const char *keys_listed(const char *body)
{
    static char out[1024];
    out[0] = '\0';
    for (const char *n = json_first(json_get(body, "nodes")); n; n = json_next(n)) {
        char *key = json_str_at(n, "public_key");
        snprintf(out + strlen(out), sizeof out - strlen(out), "%s%.2s", out[0] ? "," : "",
                 key ? key : "?");
        free(key);
    }
    return out;
}

Test(relay_share, region_map_one_pass_for_four_workers_and_a_respawned_worker_copies_it)
{
    char dir[128], db[256];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/relay.db", dir);
    make_db(db, region_adverts);
    const char *env[] = {"MESHGATE_WORKERS=4", PATIENT_LINE, NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db, env));
    struct mg_segment seg;
    attach(&s, &seg);
    struct mg_result_cache *c = seg.cache.cache;
    /* No worker makes the map at its start: the start's passes are the other tables'. */
    list_tables_built(c);
    cr_expect_eq(atomic_load(&c->region_builds), 0, "a pass at start");
    char *sjc = NULL;
    for (int round = 0; round < 20 && served(&seg) < seg.slot_count; round++) {
        char *again = spread(s.port, "/api/nodes?region=SJC", 8, sjc);
        free(sjc);
        sjc = again;
    }
    cr_assert_geq(served(&seg), 2, "the requests reached one worker only");
    unsigned readers = served(&seg);
    cr_expect_eq(atomic_load(&c->region_builds), 1, "one pass for the group");
    cr_expect_geq(atomic_load(&c->region_copies), readers - 1,
                  "each other worker that served took the group's copy (%u served)", readers);
    /* The answers are the rows': AA and BB were heard in SJC, only AA in OAK. */
    cr_expect_str_eq(keys_listed(sjc), "aa,bb");
    char *oak = spread(s.port, "/api/nodes?region=OAK", 2, NULL);
    cr_expect_str_eq(keys_listed(oak), "aa");
    cr_expect(metric_is(s.port, "meshgate_reach_cache_region_builds_total", 1));

    /* A worker killed -9 comes back with the group's copy, before any request. */
    respawn_takes_the_copy(&seg, s.port, &c->region_builds, &c->region_copies,
                           "/api/nodes?region=SJC", sjc);
    free(sjc);
    free(oak);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
    mg_test_rmdir(dir);
}

Test(relay_share, a_region_map_too_large_for_the_cache_is_built_by_each_worker_and_logged_once)
{
    char dir[128], db[256];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/relay.db", dir);
    /* 200 more ADVERTs of distinct keys heard in SJC: a map of some 15 KiB, more than the one
     * page a 4096-byte cache stores. */
    char sql[2048];
    snprintf(sql, sizeof sql,
             "%sWITH RECURSIVE n(i) AS (SELECT 100 UNION ALL SELECT i + 1 FROM n WHERE i < 299)"
             " INSERT INTO transmissions (id, raw_hex, hash, first_seen, route_type,"
             " payload_type, decoded_json) SELECT i, '1140', 'r' || i,"
             " strftime('%%Y-%%m-%%dT%%H:%%M:%%SZ', 'now', '-3 minutes'), 1, 4,"
             " json_object('pubKey', printf('%%064x', i)) FROM n;"
             "INSERT INTO observations (transmission_id, observer_idx, path_json, timestamp)"
             " SELECT id, 1, '[]', id FROM transmissions WHERE id >= 100;",
             region_adverts);
    make_db(db, sql);
    const char *env[] = {"MESHGATE_WORKERS=2", "MESHGATE_REACH_CACHE_BYTES=4096", PATIENT_LINE,
                         NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db, env));
    struct mg_segment seg;
    attach(&s, &seg);
    struct mg_result_cache *c = seg.cache.cache;
    char *sjc = NULL;
    for (int round = 0; round < 20 && served(&seg) < seg.slot_count; round++) {
        char *again = spread(s.port, "/api/nodes?region=SJC", 4, sjc);
        free(sjc);
        sjc = again;
    }
    cr_assert_eq(served(&seg), seg.slot_count, "the requests did not reach both workers");
    cr_expect_str_eq(keys_listed(sjc), "aa,bb");
    cr_expect_eq(atomic_load(&c->region_builds), seg.slot_count, "each worker made its pass");
    cr_expect_eq(atomic_load(&c->region_copies), 0);
    char *log = mg_test_server_log(&s);
    cr_expect_eq(mg_test_count(log, "region map: the table's"), (int)seg.slot_count,
                 "logged once by each worker: %s", log);
    free(log);
    free(sjc);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
    mg_test_rmdir(dir);
}

/* ---- the neighbour graph, the same way (neighbor_graph.h) ---------------------------------- */

/* Signed in: heavy requests from one address past the anonymous rate limit. */
#define NB_KEY "neighbours-0123456789abcdef"
#define SIGNED_IN "Authorization: Bearer " NB_KEY "\r\n"

/* Every report is built: a line as long as the clients, waited in as long as a loaded
 * machine needs. */
#define COLD_LINE "MESHGATE_REACH_COLD_QUEUE=64", "MESHGATE_REACH_COLD_WAIT_MS=60000"

struct asker {
    int port, base, requests, ok;
};

/* BB's neighbours with min_count base, base + 1, ...: each a report of its own (none is the
 * cache's answer to another), each built from the worker's graph, on its own connection. */
static void *ask_neighbours(void *arg)
{
    struct asker *a = arg;
    for (int i = 0; i < a->requests; i++) {
        char target[256];
        snprintf(target, sizeof target, "/api/nodes/" KEY_BB "/neighbors?min_count=%d",
                 a->base + i);
        struct mg_test_response r;
        if (!mg_test_get(a->port, target, SIGNED_IN, &r))
            continue;
        a->ok += r.status == 200 && json_str_at_eq(r.body, "node", KEY_BB);
        mg_test_response_free(&r);
    }
    return NULL;
}

/* CLIENTS connections at once, 4 distinct reports each (from *base on); all answered. */
static void spread_neighbours(int port, int *base)
{
    struct asker a[CLIENTS];
    pthread_t t[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        a[i] = (struct asker){.port = port, .base = *base, .requests = 4};
        *base += 4;
        pthread_create(&t[i], NULL, ask_neighbours, &a[i]);
    }
    for (int i = 0; i < CLIENTS; i++) {
        pthread_join(t[i], NULL);
        cr_expect_eq(a[i].ok, 4, "%d of 4 neighbours reports answered", a[i].ok);
    }
}

/* Observations whose last hop is BB's first byte: the edge OBS1 - BB's count. */
static long long heard_through_bb(const char *db)
{
    sqlite3 *conn;
    cr_assert_eq(mg_test_sqlite_open_v2(db, &conn, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(conn,
                                    "SELECT count(*) FROM observations WHERE"
                                    " lower(path_json ->> '$[#-1]') = 'bb'",
                                    -1, &st, NULL),
                 SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    long long n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(conn);
    return n;
}

/* BB's edge to the observer in a neighbours answer. */
static void expect_bb_edge(int port, long long want)
{
    struct mg_test_response r;
    cr_assert(mg_test_get(port, "/api/nodes/" KEY_BB "/neighbors", SIGNED_IN, &r));
    cr_assert_eq(r.status, 200, "%s", r.body);
    const char *edge = NULL;
    for (const char *n = json_first(json_get(r.body, "neighbors")); n; n = json_next(n))
        if (json_str_at_eq(n, "pubkey", "obs1"))
            edge = n;
    cr_assert(edge, "no edge to the observer: %s", r.body);
    cr_expect_eq(json_int_at(edge, "count"), want, "%s", edge);
    mg_test_response_free(&r);
}

Test(relay_share, neighbour_graph_one_pass_for_four_workers_and_a_respawned_worker_copies_it)
{
    char dir[128], db[256];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/relay.db", dir);
    make_db(db, NULL);
    char keys[300];
    mg_test_write_keys_file(dir, NB_KEY, keys, sizeof keys);
    const char *env[] = {"MESHGATE_WORKERS=4", keys, COLD_LINE, PATIENT_LINE, NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db, env));
    struct mg_segment seg;
    attach(&s, &seg);
    struct mg_result_cache *c = seg.cache.cache;
    /* No worker builds the graph at its start: only a request that needs it. */
    cr_expect_eq(atomic_load(&c->neighbor_builds), 0);
    expect_bb_edge(s.port, heard_through_bb(db));
    cr_expect_eq(heard_through_bb(db), 3);
    cr_expect_eq(atomic_load(&c->neighbor_builds), 1);
    /* Reports that each need the graph, until they have reached every worker (bounded). */
    int base = 100;
    for (int round = 0; round < 20 && served(&seg) < seg.slot_count; round++)
        spread_neighbours(s.port, &base);
    cr_assert_geq(served(&seg), 2, "the requests reached one worker only");
    unsigned readers = served(&seg);
    cr_expect_eq(atomic_load(&c->neighbor_builds), 1, "one pass for the group");
    cr_expect_geq(atomic_load(&c->neighbor_copies), readers - 1,
                  "each other worker that served took the group's copy (%u served)", readers);
    cr_expect(metric_is(s.port, "meshgate_reach_cache_neighbor_builds_total", 1));
    /* The graph's own report (table_stats.h): one pass, none under way. */
    cr_expect(metric_is(s.port, "meshgate_table_generation{table=\"neighbors\"}", 1));
    cr_expect(metric_is(s.port, "meshgate_table_building{table=\"neighbors\"}", 0));
    cr_expect(metric_is(s.port, "meshgate_table_failures{table=\"neighbors\"}", 0));

    /* A worker killed -9 comes back with the group's copy, before any request. */
    unsigned victim_slot = 0;
    while (atomic_load(&seg.slots[victim_slot].pid) <= 0)
        victim_slot++;
    struct respawn_wait rw = {&seg, victim_slot, atomic_load(&seg.slots[victim_slot].pid)};
    uint64_t copies = atomic_load(&c->neighbor_copies);
    cr_assert_eq(kill(rw.old_pid, SIGKILL), 0);
    cr_assert(mg_test_wait_until(respawned, &rw, 60000, 10), "slot %u was not respawned",
              victim_slot);
    struct counter_wait cw = {&c->neighbor_copies, copies + 1};
    cr_expect(mg_test_wait_until(counter_reached, &cw, 60000, 10),
              "the new worker took no copy at its start");
    uint64_t before = atomic_load(&seg.slots[victim_slot].requests);
    for (int round = 0; round < 20 && atomic_load(&seg.slots[victim_slot].requests) == before;
         round++)
        spread_neighbours(s.port, &base);
    cr_expect_gt(atomic_load(&seg.slots[victim_slot].requests), before,
                 "the new worker answered no neighbours report");
    cr_expect_eq(atomic_load(&c->neighbor_builds), 1, "the respawned worker made no pass");
    expect_bb_edge(s.port, 3);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
    mg_test_rmdir(dir);
}

Test(relay_share, a_neighbour_graph_too_large_for_the_cache_is_built_by_each_worker)
{
    char dir[128], db[256];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/relay.db", dir);
    /* 400 more observations, each through its own 3-byte hop that no relay has: as many
     * unresolved edges of the observer, a graph of some 40 KiB, more than the one page a
     * 4096-byte cache stores. */
    make_db(db,
            "WITH RECURSIVE n(i) AS (SELECT 100 UNION ALL SELECT i + 1 FROM n WHERE i < 499)"
            " INSERT INTO transmissions (id, raw_hex, hash, first_seen, route_type,"
            " payload_type) SELECT i, 'ff', 'x' || i, " AGO(
                "3 minutes") ", 1, 2 FROM n;"
                             "INSERT INTO observations (transmission_id, observer_idx, path_json, "
                             "timestamp)"
                             " SELECT id, 1, '[\"' || printf('%06x', id * 4099) || '\"]', id FROM"
                             " transmissions WHERE id >= 100;");
    char keys[300];
    mg_test_write_keys_file(dir, NB_KEY, keys, sizeof keys);
    const char *env[] = {"MESHGATE_WORKERS=2",
                         "MESHGATE_REACH_CACHE_BYTES=4096",
                         keys,
                         COLD_LINE,
                         PATIENT_LINE,
                         NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db, env));
    struct mg_segment seg;
    attach(&s, &seg);
    struct mg_result_cache *c = seg.cache.cache;
    int base = 100;
    for (int round = 0; round < 20 && served(&seg) < seg.slot_count; round++)
        spread_neighbours(s.port, &base);
    cr_assert_eq(served(&seg), seg.slot_count, "the requests did not reach both workers");
    expect_bb_edge(s.port, 3);
    cr_expect_eq(atomic_load(&c->neighbor_builds), seg.slot_count, "each worker made its pass");
    cr_expect_eq(atomic_load(&c->neighbor_copies), 0);
    char *log = mg_test_server_log(&s);
    cr_expect_eq(mg_test_count(log, "neighbour graph: the table's"), (int)seg.slot_count,
                 "logged once by each worker: %s", log);
    free(log);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
    mg_test_rmdir(dir);
}

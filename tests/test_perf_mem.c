/* SPDX-License-Identifier: ISC */
/*
 * /api/perf?mem=1 and its diagnostic gate, with real worker processes: one walk at a time
 * for the whole group, refusals before any database work, the cooldown from completion,
 * and a walker killed with kill -9 reclaimed by the master.
 */
#include "harness.h"
#include "inproc.h"

#include "gate_diag.h"
#include "perf_mem.h"
#include "segment.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

TestSuite(perf_mem, .timeout = 60);

/* Two transmissions (one flood), three observations with known paths. */
static const char *rows =
    "INSERT INTO transmissions (id, raw_hex, hash, first_seen, route_type, payload_type,"
    " decoded_json) VALUES (1, 'AABB', '0011223344556677', '2026-11-30T00:00:00Z', 1, 4,"
    " '{\"a\":1}'), (2, 'CC', '8899aabbccddeeff', '2026-11-30T00:00:01Z', 2, 5, NULL);"
    "INSERT INTO observations (transmission_id, observer_idx, direction, path_json, timestamp,"
    " resolved_path) VALUES (1, 1, 'rx', '[\"AA\",\"BB\"]', 1, NULL),"
    " (1, 1, NULL, '[\"AA\"]', 2, '[null]'), (2, 1, NULL, '[]', 3, NULL);";

static char dir[128], db_path[256];

static void make_db(void)
{
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db_path, sizeof db_path, "%s/perf.db", dir);
    cr_assert_eq(mg_test_make_db(db_path, false, rows), 0);
}

static void remove_db(void)
{
    mg_test_rmdir(dir);
}

Test(perf_mem, walk_counts_rows_and_estimates_with_the_cost_model, .init = make_db,
     .fini = remove_db)
{
    struct mg_test_ctx t;
    cr_assert(mg_test_ctx_open(&t, db_path));
    struct mg_perf_mem m;
    char err[256];
    cr_assert_eq(mg_perf_mem_walk(&t.db, &m, err, sizeof err), 0, "%s", err);
    cr_expect_eq(m.total_tx, 2);
    cr_expect_eq(m.flood_tx, 1);
    cr_expect_eq(m.observations, 3);
    cr_expect_eq(m.tx_raw_hex_bytes, (4 + 16) + (2 + 16));
    cr_expect_eq(m.tx_decoded_json_bytes, (7 + 16) + (0 + 16));
    /* Best path of tx 1 has 2 hops ("[\"AA\",\"BB\"]", 11 bytes); tx 2's is "[]". */
    cr_expect_eq(m.tx_path_json_bytes, (11 + 16) + (2 + 16));
    cr_expect_eq(m.obs_path_json_bytes, (11 + 16) + (6 + 16) + (2 + 16));
    int64_t tx1 = mg_perf_mem_tx_estimate(4, 16, 7, 11, 2);
    int64_t tx2 = mg_perf_mem_tx_estimate(2, 16, 0, 2, 0);
    cr_expect_eq(tx1, 384 + 4 + 16 + 7 + 11 + 240 + 200 + 100 + 40);
    cr_expect_eq(m.flood_tx_estimated_bytes, tx1);
    cr_expect_eq(m.total_tx_estimated_bytes, tx1 + tx2);

    cr_assert_eq(mg_test_ctx_get(&t, "/api/perf?mem=1"), 200);
    const char *body = t.res.body.data;
    cr_expect(strstr(body, "\"memoryBreakdown\":{\"totalTx\":2,\"floodTx\":1,"
                           "\"floodTxSharePct\":50,\"observations\":3,\"obsPerTx\":1.5,"),
              "%s", body);
    cr_expect(strstr(body, "},\"memoryBreakdownNote\":\""), "%s", body);
    cr_expect(strstr(body, "\"admitted\":1"), "%s", body);
    mg_test_ctx_close(&t);
}

static int status_of(int port, const char *target, char *retry_after, size_t cap, char *body,
                     size_t body_cap)
{
    struct mg_test_response r;
    if (!mg_test_get(port, target, NULL, &r))
        return -1;
    if (retry_after) {
        retry_after[0] = '\0';
        mg_test_header(&r, "Retry-After", retry_after, cap);
    }
    if (body)
        snprintf(body, body_cap, "%s", r.body);
    int status = r.status;
    mg_test_response_free(&r);
    return status;
}

struct shot {
    int port;
    int status;
    int64_t answered_ms;
};

static void *fire(void *p)
{
    struct shot *s = p;
    s->status = status_of(s->port, "/api/perf?mem=1", NULL, 0, NULL, 0);
    s->answered_ms = mg_test_now_ms();
    return NULL;
}

Test(perf_mem, sixteen_concurrent_walks_give_one_200_and_fifteen_429, .init = make_db,
     .fini = remove_db)
{
    const char *env[] = {"MESHGATE_WORKERS=4", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db_path, env));
    struct shot shots[16];
    pthread_t t[16];
    for (int i = 0; i < 16; i++) {
        shots[i] = (struct shot){.port = s.port};
        pthread_create(&t[i], NULL, fire, &shots[i]);
    }
    int ok = 0, refused = 0;
    for (int i = 0; i < 16; i++) {
        pthread_join(t[i], NULL);
        ok += shots[i].status == 200;
        refused += shots[i].status == 429;
    }
    cr_expect_eq(ok, 1);
    cr_expect_eq(refused, 15);
    struct mg_segment seg;
    char err[256];
    cr_assert_eq(mg_segment_attach(&seg, s.shm_name, true, err, sizeof err), 0, "%s", err);
    cr_expect_eq(atomic_load(&seg.diag->admitted), 1);
    cr_expect_eq(atomic_load(&seg.diag->peak), 1);
    cr_expect_eq(atomic_load(&seg.diag->refused_busy) + atomic_load(&seg.diag->refused_cooling),
                 15);
    mg_segment_detach(&seg);
    mg_test_server_stop(&s, 5000);
}

Test(perf_mem, refusals_never_reach_the_database, .init = make_db, .fini = remove_db)
{
    /* A shot that reached the database would wait the whole busy timeout (60 s) for the
     * writer below: far longer than the bound on a refusal, however loaded the machine. */
    const char *env[] = {"MESHGATE_WORKERS=4", "MESHGATE_DB_BUSY_TIMEOUT_MS=60000", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db_path, env));
    struct mg_segment seg;
    char err[256];
    cr_assert_eq(mg_segment_attach(&seg, s.shm_name, true, err, sizeof err), 0, "%s", err);

    /* The database is held: anything that reads it waits. */
    sqlite3 *writer;
    cr_assert_eq(mg_test_sqlite_open(db_path, &writer), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(writer, "BEGIN EXCLUSIVE", NULL, NULL, NULL), SQLITE_OK);
    struct shot first = {.port = s.port};
    pthread_t first_thread;
    pthread_create(&first_thread, NULL, fire, &first);
    int64_t give_up = mg_test_now_ms() + 60000;
    while (atomic_load(&seg.diag->running) == 0 && mg_test_now_ms() < give_up)
        mg_test_sleep_ms(5);
    cr_assert_eq(atomic_load(&seg.diag->running), 1, "the first walk did not start");

    /* Fifteen more while it waits on the lock: all refused at once, database untouched. */
    struct shot shots[15];
    pthread_t t[15];
    int64_t sent = mg_test_now_ms();
    for (int i = 0; i < 15; i++) {
        shots[i] = (struct shot){.port = s.port};
        pthread_create(&t[i], NULL, fire, &shots[i]);
    }
    for (int i = 0; i < 15; i++) {
        pthread_join(t[i], NULL);
        cr_expect_eq(shots[i].status, 429, "shot %d: %d", i, shots[i].status);
        cr_expect_lt(shots[i].answered_ms - sent, 30000, "shot %d waited", i);
    }
    /* Ordinary /api/perf is not gated (it reads the database's size, not its rows). */
    cr_expect_eq(atomic_load(&seg.diag->running), 1);
    sqlite3_exec(writer, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(writer);
    pthread_join(first_thread, NULL);
    cr_expect_eq(first.status, 200);
    cr_expect_eq(atomic_load(&seg.diag->refused_busy), 15);
    mg_segment_detach(&seg);
    mg_test_server_stop(&s, 5000);
}

Test(perf_mem, immediate_repeat_is_refused_with_the_full_cooldown_and_no_store, .init = make_db,
     .fini = remove_db)
{
    const char *env[] = {"MESHGATE_PERF_MEM_COOLDOWN_MS=5000", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db_path, env));
    cr_assert_eq(status_of(s.port, "/api/perf?mem=1", NULL, 0, NULL, 0), 200);
    struct mg_test_response r;
    cr_assert(mg_test_get(s.port, "/api/perf?mem=1", NULL, &r));
    cr_expect_eq(r.status, 429);
    char v[64];
    cr_expect(mg_test_header(&r, "Retry-After", v, sizeof v) && strcmp(v, "5") == 0, "%s", v);
    cr_expect(mg_test_header(&r, "Cache-Control", v, sizeof v) && strcmp(v, "no-store") == 0);
    cr_expect(strstr(r.body, "\"retryAfter\":5}"), "%s", r.body);
    cr_expect(strstr(r.body, "{\"error\":\""), "%s", r.body);
    mg_test_response_free(&r);
    /* The dump tool shows the gate from outside. */
    char cmd[256], out[65536];
    snprintf(cmd, sizeof cmd, "%s/meshgate-shm --name %s; %s/meshgate-shm --name %s --json",
             MESHGATE_BUILD_DIR, s.shm_name, MESHGATE_BUILD_DIR, s.shm_name);
    FILE *p = popen(cmd, "r");
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    cr_expect_eq(pclose(p), 0);
    cr_expect(strstr(out, "perf_mem (/api/perf?mem=1): on, cap 1, 0 running"), "%s", out);
    cr_expect(strstr(out, "admitted 1, refused busy 0, refused cooling 1, reclaimed 0"), "%s", out);
    cr_expect(strstr(out, "\"gates\":{\"perf_mem\":{\"enabled\":true,\"cap\":1"), "%s", out);
    /* mem=0, mem=true and no mem are plain /api/perf, never gated. */
    cr_expect_eq(status_of(s.port, "/api/perf", NULL, 0, NULL, 0), 200);
    cr_expect_eq(status_of(s.port, "/api/perf?mem=0", NULL, 0, NULL, 0), 200);
    cr_expect_eq(status_of(s.port, "/api/perf?mem=true", NULL, 0, NULL, 0), 200);
    mg_test_server_stop(&s, 5000);
}

static bool walk_running(void *arg)
{
    const struct mg_segment *seg = arg;
    return seg->diag->holder_pid != 0;
}

struct status_wait {
    int port;
    int status;
};

static bool status_is(void *arg)
{
    const struct status_wait *w = arg;
    return status_of(w->port, "/api/perf?mem=1", NULL, 0, NULL, 0) == w->status;
}

/* The walk is held on a writer's lock for as long as the test wants (the busy timeout is far
 * longer), so the steps hold on a busy machine: only lower bounds on time are checked. */
Test(perf_mem, cooldown_counts_from_the_end_of_a_slow_walk, .init = make_db, .fini = remove_db)
{
    const char *env[] = {"MESHGATE_PERF_MEM_COOLDOWN_MS=3000", "MESHGATE_DB_BUSY_TIMEOUT_MS=60000",
                         NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db_path, env));
    struct mg_segment seg;
    char err[256];
    cr_assert_eq(mg_segment_attach(&seg, s.shm_name, true, err, sizeof err), 0, "%s", err);
    sqlite3 *writer;
    cr_assert_eq(mg_test_sqlite_open(db_path, &writer), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(writer, "BEGIN EXCLUSIVE", NULL, NULL, NULL), SQLITE_OK);
    struct shot walk = {.port = s.port};
    pthread_t t;
    int64_t started = mg_test_now_ms();
    pthread_create(&t, NULL, fire, &walk);
    cr_assert(mg_test_wait_until(walk_running, &seg, 30000, 5), "the walk never started");
    char retry[16];
    cr_expect_eq(status_of(s.port, "/api/perf?mem=1", retry, sizeof retry, NULL, 0), 429);
    cr_expect_str_eq(retry, "3", "while a walk runs: the full cooldown");
    /* The walk lasts longer than the cooldown: counted from its start, it would be over. */
    int64_t held = mg_test_now_ms() - started;
    if (held < 3500)
        mg_test_sleep_ms((int)(3500 - held));
    sqlite3_exec(writer, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(writer);
    pthread_join(t, NULL);
    int64_t ended = mg_test_now_ms();
    cr_assert_eq(walk.status, 200);
    cr_expect_eq(status_of(s.port, "/api/perf?mem=1", retry, sizeof retry, NULL, 0), 429,
                 "the cooldown was counted from the start of the walk");
    struct status_wait open = {s.port, 200};
    cr_expect(mg_test_wait_until(status_is, &open, 30000, 100), "the cooldown never ended");
    cr_expect_geq(mg_test_now_ms() - ended, 2900, "the cooldown ended early");
    mg_segment_detach(&seg);
    mg_test_server_stop(&s, 5000);
}

Test(perf_mem, a_client_that_does_not_read_holds_no_permit, .init = make_db, .fini = remove_db)
{
    const char *env[] = {"MESHGATE_PERF_MEM_COOLDOWN_MS=0", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db_path, env));
    int lazy = mg_test_connect(s.port);
    int small = 256;
    setsockopt(lazy, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    const char *req = "GET /api/perf?mem=1 HTTP/1.1\r\nHost: x\r\n\r\n";
    cr_assert(mg_test_send(lazy, req, strlen(req)));
    mg_test_sleep_ms(200); /* answered (and never read) by now */
    cr_expect_eq(status_of(s.port, "/api/perf?mem=1", NULL, 0, NULL, 0), 200,
                 "the next walk waited on a client that does not read");
    close(lazy);
    mg_test_server_stop(&s, 5000);
}

Test(perf_mem, a_walker_killed_with_kill_9_is_reclaimed_and_the_cooldown_starts, .init = make_db,
     .fini = remove_db)
{
    const char *env[] = {"MESHGATE_WORKERS=2", "MESHGATE_PERF_MEM_COOLDOWN_MS=30000",
                         "MESHGATE_DB_BUSY_TIMEOUT_MS=60000", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db_path, env));
    struct mg_segment seg;
    char err[256];
    cr_assert_eq(mg_segment_attach(&seg, s.shm_name, true, err, sizeof err), 0, "%s", err);
    sqlite3 *writer;
    cr_assert_eq(mg_test_sqlite_open(db_path, &writer), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(writer, "BEGIN EXCLUSIVE", NULL, NULL, NULL), SQLITE_OK);
    struct shot walk = {.port = s.port};
    pthread_t t;
    pthread_create(&t, NULL, fire, &walk);
    int64_t give_up = mg_test_now_ms() + 60000;
    while (seg.diag->holder_pid == 0 && mg_test_now_ms() < give_up)
        mg_test_sleep_ms(5);
    int walker = seg.diag->holder_pid;
    cr_assert_gt(walker, 0, "no walk started");
    kill(walker, SIGKILL);
    pthread_join(t, NULL);
    cr_expect_neq(walk.status, 200, "the killed walker answered");
    give_up = mg_test_now_ms() + 60000;
    while (atomic_load(&seg.diag->reclaimed) == 0 && mg_test_now_ms() < give_up)
        mg_test_sleep_ms(5);
    cr_expect_eq(atomic_load(&seg.diag->reclaimed), 1);
    cr_expect_eq(seg.diag->holder_pid, 0);
    cr_expect_eq(atomic_load(&seg.diag->running), 0);
    sqlite3_exec(writer, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(writer);
    char retry[16];
    cr_expect_eq(status_of(s.port, "/api/perf?mem=1", retry, sizeof retry, NULL, 0), 429,
                 "the cooldown starts at the reclaim");
    /* The cooldown is long (30 s), so that a slow machine still asks within it. */
    cr_expect(atoi(retry) >= 1 && atoi(retry) <= 30, "Retry-After %s", retry);
    mg_segment_detach(&seg);
    mg_test_server_stop(&s, 5000);
}

Test(perf_mem, ordinary_perf_answers_during_a_walk_and_during_the_cooldown)
{
    /* Enough rows that a walk takes a while. */
    char big_dir[128], big_db[256];
    mg_test_tmpdir(big_dir, sizeof big_dir);
    snprintf(big_db, sizeof big_db, "%s/big.db", big_dir);
    cr_assert_eq(
        mg_test_make_db(
            big_db, false,
            "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 40000)"
            " INSERT INTO transmissions (id, raw_hex, hash, first_seen, route_type)"
            " SELECT x, hex(randomblob(40)), printf('%016x', x), '2026-11-30T00:00:00Z', 1"
            " FROM n;"
            "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 400000)"
            " INSERT INTO observations (transmission_id, observer_idx, path_json, timestamp)"
            " SELECT 1 + x % 40000, 1, '[\"AA\",\"BB\",\"CC\"]', x FROM n;"),
        0);
    const char *env[] = {"MESHGATE_WORKERS=2", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, big_db, env));
    struct mg_segment seg;
    char err[256];
    cr_assert_eq(mg_segment_attach(&seg, s.shm_name, true, err, sizeof err), 0, "%s", err);
    cr_assert_eq(status_of(s.port, "/api/perf", NULL, 0, NULL, 0), 200);

    struct shot walk = {.port = s.port};
    pthread_t t;
    pthread_create(&t, NULL, fire, &walk);
    int64_t give_up = mg_test_now_ms() + 5000;
    while (atomic_load(&seg.diag->running) == 0 && mg_test_now_ms() < give_up)
        ;
    cr_assert_eq(atomic_load(&seg.diag->running), 1, "the walk did not start");
    int during = status_of(s.port, "/api/perf", NULL, 0, NULL, 0);
    bool still_walking = atomic_load(&seg.diag->running) == 1;
    pthread_join(t, NULL);
    cr_expect_eq(walk.status, 200);
    cr_expect_eq(during, 200);
    cr_expect(still_walking, "the walk ended before the plain request was answered: the "
                             "database is too small for this test to show anything");
    cr_expect_eq(status_of(s.port, "/api/perf?mem=1", NULL, 0, NULL, 0), 429);
    cr_expect_eq(status_of(s.port, "/api/perf", NULL, 0, NULL, 0), 200, "during the cooldown");
    mg_segment_detach(&seg);
    mg_test_server_stop(&s, 5000);
    mg_test_rmdir(big_dir);
}

/* SPDX-License-Identifier: ISC */
/*
 * GET /api/stats: CoreScope's figures in CoreScope's order, and one computation per
 * interval for the whole process group (a worker in another process serves the body the
 * first one rendered, even after the database changed).
 */
#include "harness.h"
#include "inproc.h"

#include "shared_value.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The suite "stats" is declared in test_segment.c (the shm counters); these join it. */

/* Nodes, observers and observations around the 7-day, 24-hour and 1-hour edges. */
static const char *known_rows =
    "INSERT INTO nodes (public_key, role, last_seen) VALUES"
    " ('a1', 'repeater', strftime('%Y-%m-%dT%H:%M:%SZ', 'now', '-1 day')),"
    " ('a2', 'repeater', strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-6 days')),"
    " ('a3', 'repeater', strftime('%Y-%m-%dT%H:%M:%SZ', 'now', '-8 days')),"
    " ('b1', 'room', strftime('%Y-%m-%dT%H:%M:%SZ', 'now', '-2 hours')),"
    " ('c1', 'companion', strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),"
    " ('c2', 'companion', strftime('%Y-%m-%dT%H:%M:%SZ', 'now', '-3 days')),"
    " ('c3', 'companion', '2020-01-01T00:00:00Z'),"
    " ('d1', 'sensor', strftime('%Y-%m-%dT%H:%M:%SZ', 'now', '-1 minute')),"
    " ('e1', 'gateway', strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),"
    " ('f1', 'repeater', NULL);"
    "INSERT INTO observers (id, inactive) VALUES ('O1', 0), ('O2', NULL), ('O3', 1), ('O4', 0);"
    "INSERT INTO transmissions (raw_hex, hash, first_seen) VALUES"
    " ('00', '0000000000000001', '2026-05-17T00:00:00Z'),"
    " ('00', '0000000000000002', '2026-05-17T00:00:00Z'),"
    " ('00', '0000000000000003', '2026-05-17T00:00:00Z');"
    "INSERT INTO observations (transmission_id, observer_idx, timestamp) VALUES"
    " (1, 1, CAST(strftime('%s', 'now') AS INTEGER) - 5),"
    " (1, 2, CAST(strftime('%s', 'now') AS INTEGER) - 3000),"
    " (2, 1, CAST(strftime('%s', 'now') AS INTEGER) - 7200),"
    " (2, 2, CAST(strftime('%s', 'now') AS INTEGER) - 80000),"
    " (3, 1, CAST(strftime('%s', 'now') AS INTEGER) - 90000),"
    " (3, 2, 1000);";

struct fixture {
    char dir[128];
    char db[256];
    struct mg_test_ctx t;
};

static void open_fixture(struct fixture *f, bool migrated, const char *sql)
{
    mg_test_tmpdir(f->dir, sizeof f->dir);
    snprintf(f->db, sizeof f->db, "%s/stats.db", f->dir);
    cr_assert_eq(mg_test_make_db(f->db, migrated, sql), 0);
    cr_assert(mg_test_ctx_open(&f->t, f->db));
}

static void close_fixture(struct fixture *f)
{
    mg_test_ctx_close(&f->t);
    mg_test_rmdir(f->dir);
}

static void run_sql(const char *db, const char *sql)
{
    sqlite3 *conn;
    cr_assert_eq(mg_test_sqlite_open(db, &conn), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(conn, sql, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(conn));
    sqlite3_close(conn);
}

/* "YYYY-MM-DDTHH:MM:SS" followed by nothing or a zone. */
static bool looks_like_build_time(const char *s, size_t len)
{
    const char *shape = "dddd-dd-ddTdd:dd:dd";
    if (len < strlen(shape))
        return false;
    for (size_t i = 0; shape[i]; i++)
        if (shape[i] == 'd' ? (s[i] < '0' || s[i] > '9') : s[i] != shape[i])
            return false;
    return true;
}

Test(stats, body_has_corescope_figures_in_fixed_order)
{
    struct fixture f;
    open_fixture(&f, false, known_rows);
    cr_assert_eq(mg_test_ctx_get(&f.t, "/api/stats"), 200);
    const char *body = f.t.res.body.data;
    const char *head = "{\"totalPackets\":3,\"totalTransmissions\":3,\"totalObservations\":6,"
                       "\"totalNodes\":7,\"totalNodesAllTime\":10,\"totalObservers\":3,"
                       "\"packetsLastHour\":2,\"packetsLast24h\":4,\"engine\":\"meshgate\","
                       "\"version\":\"0.1.0\",\"commit\":\"";
    cr_assert(strncmp(body, head, strlen(head)) == 0, "body: %s", body);
    /* The commit the build was made from (12 hex digits), or "unknown" outside git. */
    const char *commit = body + strlen(head);
    size_t commit_len = strcspn(commit, "\"");
    bool hex = commit_len == 12 && strspn(commit, "0123456789abcdef") == 12;
    cr_assert(hex || strncmp(commit, "unknown\"", 8) == 0, "body: %s", body);
    const char *after = commit + commit_len;
    cr_assert(strncmp(after, "\",\"buildTime\":\"", 15) == 0, "body: %s", body);
    const char *time = after + 15;
    const char *time_end = strchr(time, '"');
    cr_assert(time_end && looks_like_build_time(time, (size_t)(time_end - time)), "body: %s", body);
    cr_expect_str_eq(time_end, "\",\"counts\":{\"companions\":2,\"repeaters\":2,\"rooms\":1,"
                               "\"sensors\":1},\"signatureDrops\":0}\n");
    cr_expect_str_eq(f.t.res.content_type, "application/json");
    cr_expect(f.t.res.no_store);
    close_fixture(&f);
}

Test(stats, empty_database_answers_zeros)
{
    struct fixture f;
    open_fixture(&f, false, NULL);
    cr_assert_eq(mg_test_ctx_get(&f.t, "/api/stats"), 200);
    const char *body = f.t.res.body.data;
    const char *head = "{\"totalPackets\":0,\"totalTransmissions\":0,\"totalObservations\":0,"
                       "\"totalNodes\":0,\"totalNodesAllTime\":0,\"totalObservers\":0,"
                       "\"packetsLastHour\":0,\"packetsLast24h\":0,\"engine\":";
    cr_expect(strncmp(body, head, strlen(head)) == 0, "body: %s", body);
    cr_expect(strstr(body, "\"counts\":{\"companions\":0,\"repeaters\":0,\"rooms\":0,"
                           "\"sensors\":0},\"signatureDrops\":0}\n") != NULL,
              "body: %s", body);
    close_fixture(&f);
}

Test(stats, signature_drops_count_rows_of_dropped_packets_when_the_table_exists)
{
    struct fixture f;
    open_fixture(&f, true,
                 "CREATE TABLE dropped_packets (id INTEGER PRIMARY KEY AUTOINCREMENT, hash TEXT,"
                 " raw_hex TEXT, reason TEXT NOT NULL, observer_id TEXT, observer_name TEXT,"
                 " node_pubkey TEXT, node_name TEXT, dropped_at DATETIME DEFAULT"
                 " CURRENT_TIMESTAMP);"
                 "INSERT INTO dropped_packets (hash, reason) VALUES ('a', 'sig'), ('b', 'sig'),"
                 " ('c', 'sig');");
    cr_assert(f.t.db.schema.dropped_packets);
    cr_assert_eq(mg_test_ctx_get(&f.t, "/api/stats"), 200);
    cr_expect(strstr(f.t.res.body.data, ",\"signatureDrops\":3}\n") != NULL, "body: %s",
              f.t.res.body.data);
    close_fixture(&f);
}

/* Runs GET target in a forked process with its own database connection, sharing t's
 * segment the way a second worker does; returns the body it got (malloc'ed). */
static char *get_in_other_process(struct mg_test_ctx *t, const char *db_path, const char *target)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        struct mg_db db;
        char err[256];
        if (mg_db_open(&db, db_path, 1000, err, sizeof err) != 0)
            _exit(2);
        t->env.db = &db;
        t->env.pid = getpid();
        if (mg_test_ctx_get(t, target) != 200)
            _exit(3);
        size_t len = t->res.body.len;
        if (write(fds[1], t->res.body.data, len) != (ssize_t)len)
            _exit(4);
        _exit(0);
    }
    close(fds[1]);
    char *body = calloc(1, 8192);
    size_t have = 0;
    ssize_t n;
    while ((n = read(fds[0], body + have, 8191 - have)) > 0)
        have += (size_t)n;
    close(fds[0]);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    return body;
}

Test(stats, is_computed_once_per_interval_for_the_whole_group)
{
    struct fixture f;
    open_fixture(&f, false, known_rows);
    struct mg_shared_value *v = &f.t.seg.values[MG_VALUE_STATS];
    cr_assert_eq(atomic_load(&v->refreshes), 0);

    char *first = get_in_other_process(&f.t, f.db, "/api/stats");
    cr_expect_eq(atomic_load(&v->refreshes), 1, "the other process computed the body");
    cr_expect(strstr(first, "\"totalPackets\":3,") != NULL, "body: %s", first);

    /* The database changes; within the interval the group keeps serving what it has. */
    run_sql(f.db, "INSERT INTO transmissions (raw_hex, hash, first_seen) VALUES"
                  " ('00', '0000000000000009', '2026-05-17T00:00:00Z');");
    cr_assert_eq(mg_test_ctx_get(&f.t, "/api/stats"), 200);
    cr_expect_str_eq(f.t.res.body.data, first);
    cr_expect_eq(atomic_load(&v->refreshes), 1, "this process used the group's body");

    /* Once the interval has passed (here: the stored value made 11 s older), it is redone. */
    atomic_store(&v->computed_monotonic_ns,
                 atomic_load(&v->computed_monotonic_ns) - 11 * 1000000000LL);
    cr_assert_eq(mg_test_ctx_get(&f.t, "/api/stats"), 200);
    cr_expect(strstr(f.t.res.body.data, "\"totalPackets\":4,") != NULL, "body: %s",
              f.t.res.body.data);
    cr_expect_eq(atomic_load(&v->refreshes), 2);
    free(first);
    close_fixture(&f);
}

Test(stats, answers_from_the_real_server_with_workers_sharing_one_body, .timeout = 30)
{
    char dir[128], db[256];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/stats.db", dir);
    cr_assert_eq(mg_test_make_db(db, false, known_rows), 0);
    const char *env[] = {"MESHGATE_WORKERS=2", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, db, env));
    char *first = NULL;
    for (int i = 0; i < 8; i++) {
        struct mg_test_response r;
        cr_assert(mg_test_get(s.port, "/api/stats", NULL, &r));
        cr_expect_eq(r.status, 200);
        if (!first)
            first = strdup(r.body);
        else
            cr_expect_str_eq(r.body, first);
        mg_test_response_free(&r);
    }
    struct mg_segment seg;
    char err[256];
    cr_assert_eq(mg_segment_attach(&seg, s.shm_name, true, err, sizeof err), 0, "%s", err);
    cr_expect_eq(atomic_load(&seg.values[MG_VALUE_STATS].refreshes), 1);
    mg_segment_detach(&seg);
    free(first);
    mg_test_server_stop(&s, 5000);
    mg_test_rmdir(dir);
}

/* SPDX-License-Identifier: ISC */
/*
 * /api/scope-stats answers are at most 30 s old, as CoreScope's (it recomputes a window at
 * most every 30 s; routes.go, scopeStatsTTL), not the reach reports' 5 minutes.
 */
#include "harness.h"

#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

TestSuite(scope_window, .timeout = 120);

static char dir[128], db[256];

static void insert_scoped(const char *hash)
{
    sqlite3 *conn;
    cr_assert_eq(sqlite3_open(db, &conn), SQLITE_OK);
    sqlite3_busy_timeout(conn, 10000);
    char sql[512], now[32];
    time_t t = time(NULL);
    strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
    snprintf(sql, sizeof sql,
             "INSERT INTO transmissions (raw_hex, hash, first_seen, route_type, payload_type, "
             "scope_name) VALUES ('00', '%s', '%s', 0, 5, '#soakland')",
             hash, now);
    cr_assert_eq(sqlite3_exec(conn, sql, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(conn));
    sqlite3_close(conn);
}

static int scoped(int port)
{
    struct mg_test_response r;
    cr_assert(mg_test_get(port, "/api/scope-stats?window=1h", NULL, &r));
    cr_assert_eq(r.status, 200, "%s", r.body);
    const char *at = strstr(r.body, "\"scoped\":");
    int n = at ? atoi(at + 9) : -1;
    mg_test_response_free(&r);
    return n;
}

Test(scope_window, a_new_scoped_transmission_shows_within_30_s)
{
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/scope.db", dir);
    cr_assert_eq(mg_test_make_db(db, true, NULL), 0);
    insert_scoped("aa01");
    struct mg_test_server s;
    const char *env[] = {"MESHGATE_WORKERS=1", NULL};
    cr_assert(mg_test_server_start(&s, db, env));
    int before = scoped(s.port);
    cr_expect_eq(before, 1);
    insert_scoped("aa02");
    int64_t asked = mg_test_now_ms();
    int after = before;
    while (after == before && mg_test_now_ms() - asked < 60000) {
        mg_test_sleep_ms(500);
        after = scoped(s.port);
    }
    int64_t took = mg_test_now_ms() - asked;
    cr_expect_eq(after, 2);
    /* 30 s and the poll's step, with room for a loaded machine. */
    cr_expect_leq(took, 40000, "the new transmission showed after %lld ms", (long long)took);
    mg_test_server_stop(&s, 10000);
    mg_test_rmdir(dir);
}

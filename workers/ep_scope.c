/* SPDX-License-Identifier: ISC */
/*
 * GET /api/scope-stats?window=1h|24h|7d (default 24h): how many transmissions of the window
 * carried a region scope, as CoreScope counts them. Transport routes (route_type 0 and 3) may
 * carry one: scoped has a scope_name (an empty one is an unknown scope), unscoped has none;
 * flood and direct routes (1, 2) never carry one and count as unscoped. byRegion: named
 * scopes, most first (then by name, where CoreScope leaves ties in no order); timeSeries:
 * transport transmissions per bucket (5 minutes, 1 hour, 6 hours), oldest first.
 *
 * Each query reads the transmissions of the window through the index on first_seen, so the
 * cost grows with the window's traffic, never with the table: the route is heavy (a week can
 * be most of the table). Without transmissions.scope_name (a database CoreScope's migration
 * has not reached) there is nothing to count: 501, as CoreScope refuses it too.
 */
#include "clock.h"
#include "json.h"
#include "log.h"
#include "router.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

struct window {
    const char *name;
    int64_t seconds;
    const char *bucket; /* SQL for a transmission's bucket, from first_seen */
};

static const struct window windows[] = {
    {"1h", 3600,
     "strftime('%Y-%m-%dT%H:', first_seen) || printf('%02d', (CAST(strftime('%M', first_seen) "
     "AS INTEGER) / 5) * 5) || ':00Z'"},
    {"24h", 24 * 3600, "strftime('%Y-%m-%dT%H:00:00Z', first_seen)"},
    {"7d", 7 * 24 * 3600,
     "strftime('%Y-%m-%dT', first_seen) || printf('%02d', (CAST(strftime('%H', first_seen) AS "
     "INTEGER) / 6) * 6) || ':00:00Z'"},
};

#define TRANSPORT "route_type IN (0, 3)"

static int fail(struct mg_response *res, struct mg_db *db, int rc)
{
    int primary = rc & 0xff;
    mg_buf_reset(&res->body);
    if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED)
        mg_response_refuse(res, 503, 1, "the database is busy: retry in a moment");
    else {
        mg_warn("/api/scope-stats: %s", sqlite3_errmsg(db->conn));
        mg_response_error(res, 500, "counting the scopes failed: %s", sqlite3_errmsg(db->conn));
    }
    return -1;
}

static sqlite3_stmt *prepare(struct mg_db *db, const char *sql, const char *since)
{
    sqlite3_stmt *st = mg_db_prepare(db, sql);
    if (st)
        sqlite3_bind_text(st, 1, since, -1, SQLITE_TRANSIENT);
    return st;
}

void mg_handle_scope_stats(struct mg_env *env, const struct mg_request *req,
                           struct mg_response *res)
{
    const char *asked = mg_query_get(&req->query, "window");
    const struct window *w = &windows[1];
    if (asked && asked[0]) {
        w = NULL;
        for (size_t i = 0; i < sizeof windows / sizeof windows[0]; i++)
            if (strcmp(asked, windows[i].name) == 0)
                w = &windows[i];
        if (!w) {
            mg_response_error(res, 400, "window must be 1h, 24h, or 7d");
            return;
        }
    }
    struct mg_db *db = env->db;
    if (!db->schema.tx_scope_name) {
        mg_response_error(res, 501,
                          "scope_name column not present: this database has not been migrated "
                          "by CoreScope's ingestor, so it records no scopes");
        return;
    }
    char since[32];
    time_t t = (time_t)(mg_realtime_ns() / MG_NS_PER_SEC) - (time_t)w->seconds;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(since, sizeof since, "%Y-%m-%dT%H:%M:%SZ", &tm);

    mg_response_json(res, 200);
    struct mg_json j;
    mg_json_init(&j, &res->body);
    mg_json_object_begin(&j); /* CoreScope's field order */
    mg_json_kv_string(&j, "window", w->name);

    sqlite3_stmt *st = prepare(db,
                               "SELECT count(*), count(scope_name), "
                               "coalesce(sum(scope_name IS NULL), 0), "
                               "coalesce(sum(scope_name = ''), 0), "
                               "(SELECT count(*) FROM transmissions WHERE route_type IN (1, 2) "
                               "AND first_seen >= ?1) "
                               "FROM transmissions WHERE " TRANSPORT " AND first_seen >= ?1",
                               since);
    if (!st)
        return (void)fail(res, db, sqlite3_errcode(db->conn));
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        sqlite3_finalize(st);
        return (void)fail(res, db, rc);
    }
    mg_json_key(&j, "summary");
    mg_json_object_begin(&j);
    mg_json_kv_int(&j, "transportTotal", sqlite3_column_int64(st, 0));
    mg_json_kv_int(&j, "scoped", sqlite3_column_int64(st, 1));
    mg_json_kv_int(&j, "unscoped", sqlite3_column_int64(st, 2) + sqlite3_column_int64(st, 4));
    mg_json_kv_int(&j, "unknownScope", sqlite3_column_int64(st, 3));
    mg_json_object_end(&j);
    sqlite3_finalize(st);

    st = prepare(db,
                 "SELECT scope_name, count(*) AS n FROM transmissions WHERE " TRANSPORT
                 " AND scope_name IS NOT NULL AND scope_name != '' AND first_seen >= ?1 "
                 "GROUP BY scope_name ORDER BY n DESC, scope_name",
                 since);
    if (!st)
        return (void)fail(res, db, sqlite3_errcode(db->conn));
    mg_json_key(&j, "byRegion");
    mg_json_array_begin(&j);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        mg_json_object_begin(&j);
        mg_json_key(&j, "name");
        mg_db_json_column(&j, st, 0);
        mg_json_kv_int(&j, "count", sqlite3_column_int64(st, 1));
        mg_json_object_end(&j);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return (void)fail(res, db, rc);
    mg_json_array_end(&j);

    char sql[768];
    snprintf(sql, sizeof sql,
             "SELECT %s AS bucket, count(scope_name), sum(scope_name IS NULL) FROM transmissions "
             "WHERE " TRANSPORT " AND first_seen >= ?1 GROUP BY bucket ORDER BY bucket",
             w->bucket);
    st = prepare(db, sql, since);
    if (!st)
        return (void)fail(res, db, sqlite3_errcode(db->conn));
    mg_json_key(&j, "timeSeries");
    mg_json_array_begin(&j);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (sqlite3_column_type(st, 0) == SQLITE_NULL)
            continue; /* a first_seen that is no time: CoreScope skips the row too */
        mg_json_object_begin(&j);
        mg_json_key(&j, "t");
        mg_db_json_column(&j, st, 0);
        mg_json_kv_int(&j, "scoped", sqlite3_column_int64(st, 1));
        mg_json_kv_int(&j, "unscoped", sqlite3_column_int64(st, 2));
        mg_json_object_end(&j);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return (void)fail(res, db, rc);
    mg_json_array_end(&j);
    mg_json_object_end(&j);
    mg_buf_putc(&res->body, '\n');
}

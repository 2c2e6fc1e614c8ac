/* SPDX-License-Identifier: ISC */
/*
 * GET /api/scope-stats?window=1h|24h|7d (default 24h): how many transmissions of the window
 * carried a region scope, as CoreScope counts them. Transport routes (route_type 0 and 3) may
 * carry one: scoped has a scope_name (an empty one is an unknown scope), unscoped has none;
 * flood and direct routes (1, 2) never carry one and count as unscoped. byRegion: named
 * scopes, most first (then by name, where CoreScope leaves ties in no order); timeSeries:
 * transport transmissions per bucket (5 minutes, 1 hour, 6 hours), oldest first.
 *
 * One pass reads the transmissions of the window through the index on first_seen (CoreScope
 * makes four), so the cost grows with the window's traffic, never with the table; still, a
 * week can be most of the table, so the route is heavy unless warm in the shared cache. Without
 * transmissions.scope_name (a database CoreScope's migration has not reached) there is nothing to
 * count: 501, as CoreScope refuses it too.
 */
#include "cold_report.h"
#include "json.h"
#include "router.h"

#include <stdio.h>
#include <stdlib.h>
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

/* A named count: a scope (scoped = its transmissions) or a time bucket. */
struct counted {
    char *name;
    int64_t scoped, unscoped;
};

struct tally {
    int64_t transport, scoped, unscoped, unknown;
    struct counted *scopes, *buckets;
    size_t nscopes, nbuckets;
    bool failed;
};

static struct counted *find_or_add(struct counted **list, size_t *n, const char *name, bool *failed)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp((*list)[i].name, name) == 0)
            return &(*list)[i];
    struct counted *grown = realloc(*list, (*n + 1) * sizeof **list);
    char *copy = strdup(name);
    if (!grown || !copy) {
        if (grown)
            *list = grown;
        free(copy);
        *failed = true;
        return NULL;
    }
    *list = grown;
    (*list)[*n] = (struct counted){copy, 0, 0};
    return &(*list)[(*n)++];
}

/* One row (bucket, kind: 1 transport, 2 flood or direct, 0 other; scope_name; count). */
static void tally_row(struct tally *t, sqlite3_stmt *st)
{
    int kind = sqlite3_column_int(st, 1);
    int64_t n = sqlite3_column_int64(st, 3);
    bool has_scope = sqlite3_column_type(st, 2) != SQLITE_NULL;
    const char *scope = has_scope ? (const char *)sqlite3_column_text(st, 2) : NULL;
    const char *bucket = (const char *)sqlite3_column_text(st, 0);
    if (kind == 2) {
        t->unscoped += n; /* these routes carry no scope at all */
        return;
    }
    if (kind != 1)
        return;
    t->transport += n;
    if (!has_scope)
        t->unscoped += n;
    else {
        t->scoped += n;
        if (!scope || !scope[0])
            t->unknown += n;
        else {
            struct counted *c = find_or_add(&t->scopes, &t->nscopes, scope, &t->failed);
            if (c)
                c->scoped += n;
        }
    }
    if (!bucket)
        return; /* a first_seen that is no time: CoreScope skips the row too */
    struct counted *b = find_or_add(&t->buckets, &t->nbuckets, bucket, &t->failed);
    if (b)
        *(has_scope ? &b->scoped : &b->unscoped) += n;
}

static void tally_free(struct tally *t)
{
    for (size_t i = 0; i < t->nscopes; i++)
        free(t->scopes[i].name);
    for (size_t i = 0; i < t->nbuckets; i++)
        free(t->buckets[i].name);
    free(t->scopes);
    free(t->buckets);
}

static int by_count_then_name(const void *a, const void *b)
{
    const struct counted *x = a, *y = b;
    if (x->scoped != y->scoped)
        return x->scoped > y->scoped ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int by_bucket(const void *a, const void *b)
{
    return strcmp(((const struct counted *)a)->name, ((const struct counted *)b)->name);
}

/* The window's answer into body, the window ending at now_s; an SQLite code. */
static int scope_body(struct mg_db *db, const struct window *w, int64_t now_s, struct mg_buf *body)
{
    char since[32];
    time_t t = (time_t)now_s - (time_t)w->seconds;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(since, sizeof since, "%Y-%m-%dT%H:%M:%SZ", &tm);

    /* One pass over the window: counts per (bucket, kind of route, scope). */
    char sql[768];
    snprintf(sql, sizeof sql,
             "SELECT %s, CASE WHEN route_type IN (0, 3) THEN 1 WHEN route_type IN (1, 2) THEN 2 "
             "ELSE 0 END AS kind, scope_name, count(*) FROM transmissions "
             "WHERE first_seen >= ?1 GROUP BY 1, 2, 3",
             w->bucket);
    sqlite3_stmt *st = mg_db_prepare(db, sql);
    if (!st)
        return sqlite3_errcode(db->conn);
    sqlite3_bind_text(st, 1, since, -1, SQLITE_TRANSIENT);
    struct tally tally;
    memset(&tally, 0, sizeof tally);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        tally_row(&tally, st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE || tally.failed) {
        tally_free(&tally);
        return rc == SQLITE_DONE ? SQLITE_NOMEM : rc;
    }
    if (tally.nscopes) /* qsort must not be given NULL, even for no element */
        qsort(tally.scopes, tally.nscopes, sizeof *tally.scopes, by_count_then_name);
    if (tally.nbuckets)
        qsort(tally.buckets, tally.nbuckets, sizeof *tally.buckets, by_bucket);

    struct mg_json j;
    mg_json_init(&j, body);
    mg_json_object_begin(&j); /* CoreScope's field order */
    mg_json_kv_string(&j, "window", w->name);
    mg_json_key(&j, "summary");
    mg_json_object_begin(&j);
    mg_json_kv_int(&j, "transportTotal", tally.transport);
    mg_json_kv_int(&j, "scoped", tally.scoped);
    mg_json_kv_int(&j, "unscoped", tally.unscoped);
    mg_json_kv_int(&j, "unknownScope", tally.unknown);
    mg_json_object_end(&j);
    mg_json_key(&j, "byRegion");
    mg_json_array_begin(&j);
    for (size_t i = 0; i < tally.nscopes; i++) {
        mg_json_object_begin(&j);
        mg_json_kv_string(&j, "name", tally.scopes[i].name);
        mg_json_kv_int(&j, "count", tally.scopes[i].scoped);
        mg_json_object_end(&j);
    }
    mg_json_array_end(&j);
    mg_json_key(&j, "timeSeries");
    mg_json_array_begin(&j);
    for (size_t i = 0; i < tally.nbuckets; i++) {
        mg_json_object_begin(&j);
        mg_json_kv_string(&j, "t", tally.buckets[i].name);
        mg_json_kv_int(&j, "scoped", tally.buckets[i].scoped);
        mg_json_kv_int(&j, "unscoped", tally.buckets[i].unscoped);
        mg_json_object_end(&j);
    }
    mg_json_array_end(&j);
    mg_json_object_end(&j);
    mg_buf_putc(body, '\n');
    tally_free(&tally);
    return SQLITE_OK;
}

/*
 * Every window is a cold report (cold_report.h): built under the cold gate, shared through
 * the result cache, built once for identical concurrent requests. The window ends when the
 * build runs. An answer is at most SCOPE_CACHE_S old, as CoreScope's (it recomputes a window
 * at most every 30 s): the key names the 30-second interval, so a new interval builds anew
 * and the older entries expire with the cache's TTL (three windows' small bodies per interval).
 */
#define SCOPE_CACHE_S 30

static void scope_key(char *key, size_t cap, int w)
{
    snprintf(key, cap, "scope|%s|@%d:%lld", windows[w].name, SCOPE_CACHE_S,
             (long long)(time(NULL) / SCOPE_CACHE_S));
}
static void scope_build(struct mg_cold_build *b, struct mg_db *db)
{
    const struct window *w = &windows[b->args[0]];
    bool in_transaction = sqlite3_exec(db->conn, "BEGIN", NULL, NULL, NULL) == SQLITE_OK;
    int rc = scope_body(db, w, b->now_unix, &b->body);
    if (in_transaction)
        sqlite3_exec(db->conn, "COMMIT", NULL, NULL, NULL);
    mg_cold_result(b, rc, "the transmissions");
}

static const struct mg_cold_report scope_report = {
    .name = "scope stats",
    .not_found = "Not found",
    .bad_request = "window must be 1h, 24h, or 7d",
    .build = scope_build,
};

/*
 * The parameters, declared once (params.h). CoreScope's handleScopeStats: window missing or
 * empty: 24h; anything but 1h, 24h or 7d: 400 "window must be 1h, 24h, or 7d", as CoreScope.
 */
struct scope_params {
    int window;
};
static const char *const window_names[] = {"1h", "24h", "7d", NULL};
static const struct mg_param scope_param_list[] = {
    {.name = "window",
     .kind = MG_PARAM_CHOICE,
     .offset = offsetof(struct scope_params, window),
     .choices = window_names,
     .def = 1,
     .flags = MG_PARAM_BAD_400,
     .corescope = "empty: 24h; unknown: 400 window must be 1h, 24h, or 7d"},
};
const struct mg_param_table mg_scope_stats_params =
    MG_PARAM_TABLE(struct scope_params, scope_param_list);

/* The window asked for (index into windows). */
static int asked_window(const struct mg_request *req)
{
    struct scope_params own;
    const struct scope_params *p = mg_params_get(&mg_scope_stats_params, req, NULL, &own);
    if (!p)
        return -1;
    return p->window;
}

bool mg_scope_stats_is_heavy(struct mg_env *env, const struct mg_request *req)
{
    int w = asked_window(req);
    if (w < 0 || !env->db->schema.tx_scope_name)
        return false; /* answered before any read */
    char key[48];
    scope_key(key, sizeof key, w);
    return mg_cold_report_is_heavy(env, key);
}

enum mg_turn mg_handle_scope_stats(struct mg_env *env, const struct mg_request *req,
                                   struct mg_response *res)
{
    int w = asked_window(req);
    if (w < 0) {
        mg_response_error(res, 400, "window must be 1h, 24h, or 7d");
        return MG_DONE;
    }
    if (!env->db->schema.tx_scope_name) {
        mg_response_error(res, 501,
                          "scope_name column not present: this database has not been migrated "
                          "by CoreScope's ingestor, so it records no scopes");
        return MG_DONE;
    }
    char key[48];
    scope_key(key, sizeof key, w);
    unsigned char arg = (unsigned char)w;
    return mg_cold_report_serve(env, req, res, &scope_report, key, &arg, 1);
}

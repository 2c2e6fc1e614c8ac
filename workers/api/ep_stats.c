/* SPDX-License-Identifier: ISC */
/*
 * GET /api/stats: CoreScope's summary of the database (totals, recent traffic, active nodes
 * by role) plus what this build is.
 *
 * The body is rendered at most once per MG_STATS_INTERVAL_NS for the whole process group and
 * stored, as its final bytes, in the group value MG_VALUE_STATS; every request in every
 * worker serves those bytes. So a burst of /api/stats costs the database one set of counts
 * per interval, not one per request or per worker, and what a client sees may be up to an
 * interval old (as in CoreScope, which caches it the same way within one process).
 */
#include "build_info.h"
#include "clock.h"
#include "group_value.h"
#include "json.h"
#include "log.h"
#include "router.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define ACTIVE_NODE_WINDOW_S (7 * 24 * 3600)

/* The version the master recorded in the segment: the one definition lives with it. */
static void server_version(const struct mg_env *env, char *out, size_t cap)
{
    snprintf(out, cap, "%.*s", MG_VERSION_MAX, env->seg->header->version);
}

static void rfc3339(time_t t, char *out, size_t cap)
{
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

struct role_counts {
    int64_t companions, repeaters, rooms, sensors;
};

static bool count_active_roles(struct mg_db *db, const char *cutoff, struct role_counts *rc)
{
    memset(rc, 0, sizeof *rc);
    sqlite3_stmt *st = mg_db_prepare(db, "SELECT lower(role), count(*) FROM nodes "
                                         "WHERE last_seen >= ?1 GROUP BY 1");
    if (!st)
        return false;
    sqlite3_bind_text(st, 1, cutoff, -1, SQLITE_STATIC);
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        const char *role = (const char *)sqlite3_column_text(st, 0);
        int64_t n = sqlite3_column_int64(st, 1);
        if (!role)
            continue;
        if (strcmp(role, "companion") == 0)
            rc->companions += n;
        else if (strcmp(role, "repeater") == 0)
            rc->repeaters += n;
        else if (strcmp(role, "room") == 0)
            rc->rooms += n;
        else if (strcmp(role, "sensor") == 0)
            rc->sensors += n;
    }
    /* A connection fault is the heal's to report (mg_db_heal: a warning when it heals). */
    if (step != SQLITE_DONE && !mg_db_is_fault(step))
        mg_error("/api/stats: counting nodes by role: %s", sqlite3_errmsg(db->conn));
    sqlite3_finalize(st);
    return step == SQLITE_DONE;
}

/* Renders the whole body (with its final newline) into out; its length, or -1. */
static long compute_stats(struct mg_env *env, char *out, size_t cap)
{
    time_t now = (time_t)(mg_realtime_ns() / MG_NS_PER_SEC);
    char cutoff[32];
    rfc3339(now - ACTIVE_NODE_WINDOW_S, cutoff, sizeof cutoff);

    /* One statement, so every figure comes from the same read transaction (snapshot). */
    /* Without observers.inactive (an older CoreScope) every observer is active. */
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT (SELECT count(*) FROM transmissions),"
             " (SELECT count(*) FROM observations),"
             " (SELECT count(*) FROM nodes WHERE last_seen >= ?1),"
             " (SELECT count(*) FROM nodes),"
             " (SELECT count(*) FROM observers%s),"
             " (SELECT count(*) FROM observations WHERE timestamp >= ?2),"
             " (SELECT count(*) FROM observations WHERE timestamp >= ?3)",
             env->db->schema.observers_inactive ? " WHERE inactive IS NULL OR inactive = 0" : "");
    sqlite3_stmt *st = mg_db_prepare(env->db, sql);
    if (!st)
        return -1;
    sqlite3_bind_text(st, 1, cutoff, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (int64_t)now - 3600);
    sqlite3_bind_int64(st, 3, (int64_t)now - 86400);
    int step = sqlite3_step(st);
    if (step != SQLITE_ROW) {
        if (!mg_db_is_fault(step)) /* a fault is the heal's to report, as above */
            mg_error("/api/stats: counting rows: %s", sqlite3_errmsg(env->db->conn));
        sqlite3_finalize(st);
        return -1;
    }
    int64_t transmissions = sqlite3_column_int64(st, 0);
    int64_t observations = sqlite3_column_int64(st, 1);
    int64_t active_nodes = sqlite3_column_int64(st, 2);
    int64_t all_nodes = sqlite3_column_int64(st, 3);
    int64_t observers = sqlite3_column_int64(st, 4);
    int64_t last_hour = sqlite3_column_int64(st, 5);
    int64_t last_day = sqlite3_column_int64(st, 6);
    sqlite3_finalize(st);

    struct role_counts roles;
    if (!count_active_roles(env->db, cutoff, &roles))
        return -1;
    int64_t drops = 0;
    if (env->db->schema.dropped_packets) {
        drops = mg_db_scalar(env->db, "SELECT count(*) FROM dropped_packets");
        if (drops < 0)
            return -1;
    }
    char version[MG_VERSION_MAX + 1];
    server_version(env, version, sizeof version);

    struct mg_buf body;
    mg_buf_init(&body);
    struct mg_json j;
    mg_json_init(&j, &body);
    mg_json_object_begin(&j); /* a fixed record: CoreScope's order */
    mg_json_kv_int(&j, "totalPackets", transmissions);
    mg_json_kv_int(&j, "totalTransmissions", transmissions);
    mg_json_kv_int(&j, "totalObservations", observations);
    mg_json_kv_int(&j, "totalNodes", active_nodes);
    mg_json_kv_int(&j, "totalNodesAllTime", all_nodes);
    mg_json_kv_int(&j, "totalObservers", observers);
    mg_json_kv_int(&j, "packetsLastHour", last_hour);
    mg_json_kv_int(&j, "packetsLast24h", last_day);
    mg_json_kv_string(&j, "engine", "meshgate");
    mg_json_kv_string(&j, "version", version);
    mg_json_kv_string(&j, "commit", mg_build_commit());
    mg_json_kv_string(&j, "buildTime", mg_build_time());
    mg_json_key(&j, "counts");
    mg_json_object_begin(&j); /* a map: keys in bytewise order */
    mg_json_kv_int(&j, "companions", roles.companions);
    mg_json_kv_int(&j, "repeaters", roles.repeaters);
    mg_json_kv_int(&j, "rooms", roles.rooms);
    mg_json_kv_int(&j, "sensors", roles.sensors);
    mg_json_object_end(&j);
    mg_json_kv_int(&j, "signatureDrops", drops);
    mg_json_object_end(&j);
    mg_buf_putc(&body, '\n');

    long len = -1;
    if (!body.failed && body.len <= cap) {
        memcpy(out, body.data, body.len);
        len = (long)body.len;
    }
    mg_buf_free(&body);
    return len;
}

/* The value, or the request parks for it: its later turns continue here (mg_park_at), with
 * the time it began to wait kept in its park. */
static enum mg_turn stats_step(struct mg_env *env, const struct mg_request *req,
                               struct mg_response *res)
{
    char body[MG_SHARED_VALUE_MAX];
    /* On the loop (a helper to hand work to) a wait for another worker's value parks. */
    _Static_assert(sizeof(int64_t) <= MG_PARK_BYTES, "the state fits a park");
    int64_t *waiting_since = (int64_t *)(void *)req->park->state;
    long len = env->jobs
                   ? mg_group_value_get_parked(env, MG_VALUE_STATS, MG_STATS_INTERVAL_NS,
                                               compute_stats, body, sizeof body, waiting_since)
                   : mg_group_value_get(env, MG_VALUE_STATS, MG_STATS_INTERVAL_NS, compute_stats,
                                        body, sizeof body);
    if (len == MG_GROUP_VALUE_PENDING) /* woken by the value, or computes its own */
        return mg_park_at(req, stats_step, *waiting_since + MG_GROUP_VALUE_WAIT_NS);
    if (len < 0) {
        mg_response_error(res, 500,
                          "the statistics could not be read from the database; the server log "
                          "says why");
        return MG_DONE;
    }
    mg_response_json(res, 200);
    mg_buf_append(&res->body, body, (size_t)len);
    return MG_DONE;
}

enum mg_turn mg_handle_stats(struct mg_env *env, const struct mg_request *req,
                             struct mg_response *res)
{
    return stats_step(env, req, res);
}

bool mg_stats_is_heavy(struct mg_env *env, const struct mg_request *req)
{
    (void)req;
    return mg_group_value_would_compute(env, MG_VALUE_STATS, MG_STATS_INTERVAL_NS);
}

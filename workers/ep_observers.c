/* SPDX-License-Identifier: ISC */
/*
 * GET /api/observers and GET /api/observers/{id}, as CoreScope's server answers them.
 *
 * The list holds the active observers (inactive unset or 0), most recently seen first, each
 * with CoreScope's fields in its order, the number of observations it made in the last hour
 * (packetsLastHour), and the location and role of the node with its key (lat, lon, nodeRole;
 * null without one). The detail is the same record for any observer, active or not, by exact
 * id, without the node's fields (CoreScope leaves them null there); 404 for an unknown id.
 *
 * The clock fields decay as CoreScope's do: an observer whose clock_last_naive_at is more
 * than 24 hours old reads clock_naive false, clock_skew_seconds null, clock_skew_count_24h 0
 * and clock_last_naive_at null. can_relay is present only when the ingestor has written it
 * (can_relay_seen). Columns a database lacks (before CoreScope's migration) read as absent.
 *
 * packetsLastHour reads the last hour's observations through idx_observations_timestamp (the
 * observer's own index is kept out of the plan: it would walk all of its observations).
 */
#include "json.h"
#include "log.h"
#include "router.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define HOUR_S 3600
#define NAIVE_WINDOW_S (24 * HOUR_S)

enum observer_col {
    C_ID,
    C_NAME,
    C_IATA,
    C_LAST_SEEN,
    C_FIRST_SEEN,
    C_PACKET_COUNT,
    C_MODEL,
    C_FIRMWARE,
    C_CLIENT_VERSION,
    C_RADIO,
    C_BATTERY_MV,
    C_UPTIME_SECS,
    C_NOISE_FLOOR,
    C_LAST_PACKET_AT,
    C_LAST_HOUR,
    C_LAT,
    C_LON,
    C_ROLE,
    C_NAIVE,
    C_SKEW,
    C_SKEW_COUNT,
    C_NAIVE_AT,
    C_CAN_RELAY,
    C_CAN_RELAY_SEEN,
};

/* The statement's columns (enum observer_col) for the list (one_id false) or one observer. */
static void observer_sql(const struct mg_db_schema *s, bool one_id, struct mg_buf *out)
{
    mg_buf_puts(out, "SELECT ob.id, ob.name, ob.iata, ob.last_seen, ob.first_seen,"
                     " ob.packet_count, ob.model, ob.firmware, ob.client_version, ob.radio,"
                     " ob.battery_mv, ob.uptime_secs, ob.noise_floor, ");
    mg_buf_puts(out, s->observers_last_packet_at ? "ob.last_packet_at, " : "NULL, ");
    if (one_id)
        mg_buf_puts(out, "(SELECT count(*) FROM observations o WHERE +o.observer_idx = ob.rowid"
                         " AND o.timestamp > :hour), NULL, NULL, NULL, ");
    else
        mg_buf_puts(out, "coalesce(c.n, 0), n.lat, n.lon, n.role, ");
    if (s->observers_clock_naive_at)
        mg_buf_puts(out, "coalesce(:now - strftime('%s', ob.clock_last_naive_at) <= 86400, 0), ");
    else
        mg_buf_puts(out, "0, ");
    mg_buf_puts(out, s->observers_clock_skew ? "ob.clock_skew_seconds, " : "NULL, ");
    mg_buf_puts(out, s->observers_clock_count ? "coalesce(ob.clock_skew_count_24h, 0), " : "0, ");
    mg_buf_puts(out, s->observers_clock_naive_at ? "ob.clock_last_naive_at, " : "NULL, ");
    mg_buf_puts(out, s->observers_can_relay ? "coalesce(ob.can_relay, 1), " : "1, ");
    mg_buf_puts(out, s->observers_can_relay_seen ? "coalesce(ob.can_relay_seen, 0)" : "0");
    mg_buf_puts(out, " FROM observers ob");
    if (one_id) {
        mg_buf_puts(out, " WHERE ob.id = :id");
    } else {
        mg_buf_puts(out, " LEFT JOIN (SELECT o.observer_idx AS idx, count(*) AS n"
                         " FROM observations o WHERE o.timestamp > :hour"
                         " GROUP BY +o.observer_idx) c ON c.idx = ob.rowid"
                         " LEFT JOIN nodes n ON n.public_key = lower(ob.id)");
        if (s->observers_inactive)
            mg_buf_puts(out, " WHERE (ob.inactive IS NULL OR ob.inactive = 0)");
    }
    /* CoreScope skips a row whose packet_count it cannot read as a number. */
    mg_buf_puts(out, one_id ? " AND ob.packet_count IS NOT NULL"
                            : (s->observers_inactive ? " AND ob.packet_count IS NOT NULL"
                                                     : " WHERE ob.packet_count IS NOT NULL"));
    if (!one_id)
        mg_buf_puts(out, " ORDER BY ob.last_seen DESC");
}

static void write_observer(struct mg_json *j, sqlite3_stmt *st)
{
    static const char *const keys[] = {
        "id",           "name",        "iata",        "last_seen",      "first_seen",
        "packet_count", "model",       "firmware",    "client_version", "radio",
        "battery_mv",   "uptime_secs", "noise_floor", "last_packet_at", "packetsLastHour",
        "lat",          "lon",         "nodeRole",
    };
    mg_json_object_begin(j); /* CoreScope's field order */
    for (int c = C_ID; c <= C_ROLE; c++) {
        mg_json_key(j, keys[c]);
        mg_db_json_column(j, st, c);
    }
    bool naive = sqlite3_column_int64(st, C_NAIVE) != 0;
    mg_json_kv_bool(j, "clock_naive", naive);
    mg_json_key(j, "clock_skew_seconds");
    if (naive)
        mg_db_json_column(j, st, C_SKEW);
    else
        mg_json_null(j);
    mg_json_kv_int(j, "clock_skew_count_24h", naive ? sqlite3_column_int64(st, C_SKEW_COUNT) : 0);
    mg_json_key(j, "clock_last_naive_at");
    if (naive)
        mg_db_json_column(j, st, C_NAIVE_AT);
    else
        mg_json_null(j);
    if (sqlite3_column_int64(st, C_CAN_RELAY_SEEN) != 0)
        mg_json_kv_bool(j, "can_relay", sqlite3_column_int64(st, C_CAN_RELAY) != 0);
    mg_json_object_end(j);
}

static sqlite3_stmt *prepare(struct mg_db *db, bool one_id)
{
    struct mg_buf sql;
    mg_buf_init(&sql);
    observer_sql(&db->schema, one_id, &sql);
    sqlite3_stmt *st = sql.failed ? NULL : mg_db_prepare(db, mg_buf_cstr(&sql));
    mg_buf_free(&sql);
    if (!st)
        return NULL;
    int64_t now = (int64_t)time(NULL);
    sqlite3_bind_int64(st, sqlite3_bind_parameter_index(st, ":hour"), now - HOUR_S);
    int at = sqlite3_bind_parameter_index(st, ":now");
    if (at)
        sqlite3_bind_int64(st, at, now);
    return st;
}

static void answer_failure(struct mg_response *res, int rc)
{
    int primary = rc & 0xff;
    mg_buf_reset(&res->body);
    mg_buf_reset(&res->headers);
    if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) {
        mg_response_refuse(res, 503, 1, "the database is busy: retry in a moment");
        return;
    }
    mg_warn("/api/observers: reading the database failed: %s", sqlite3_errstr(rc));
    mg_response_error(res, 500, "reading the observers from the database failed: %s",
                      sqlite3_errstr(rc));
}

void mg_handle_observers(struct mg_env *env, const struct mg_request *req, struct mg_response *res)
{
    (void)req;
    sqlite3_stmt *st = prepare(env->db, false);
    if (!st) {
        answer_failure(res, SQLITE_ERROR);
        return;
    }
    mg_response_json(res, 200);
    struct mg_json j;
    mg_json_init(&j, &res->body);
    mg_json_object_begin(&j);
    mg_json_key(&j, "observers");
    mg_json_array_begin(&j);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        write_observer(&j, st);
    sqlite3_finalize(st);
    mg_json_array_end(&j);
    char now[32];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", &tm);
    mg_json_kv_string(&j, "server_time", now);
    mg_json_object_end(&j);
    mg_buf_putc(&res->body, '\n');
    if (rc != SQLITE_DONE)
        answer_failure(res, rc);
}

void mg_handle_observer(struct mg_env *env, const struct mg_request *req, struct mg_response *res)
{
    sqlite3_stmt *st = prepare(env->db, true);
    if (!st) {
        answer_failure(res, SQLITE_ERROR);
        return;
    }
    sqlite3_bind_text(st, sqlite3_bind_parameter_index(st, ":id"), req->path_param, -1,
                      SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        mg_response_json(res, 200);
        struct mg_json j;
        mg_json_init(&j, &res->body);
        write_observer(&j, st);
        mg_buf_putc(&res->body, '\n');
    } else if (rc == SQLITE_DONE) {
        mg_response_error(res, 404, "Observer not found");
    } else {
        answer_failure(res, rc);
    }
    sqlite3_finalize(st);
}

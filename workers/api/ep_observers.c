/* SPDX-License-Identifier: ISC */
/*
 * GET /api/observers and GET /api/observers/{id}, as CoreScope's server answers them.
 *
 * The list holds the active observers (inactive unset or 0), most recently seen first, each
 * with CoreScope's fields in its order, the number of observations it made in the last hour
 * (packetsLastHour), and the location and role of the node with its key (lat, lon, nodeRole;
 * null without one). The detail is the same record for any observer, active or not, by exact
 * id, without the node's fields (CoreScope leaves them null there); 404 for an unknown id.
 * An observer of the configuration's observerBlacklist is in neither (node_visibility.h).
 *
 * The clock fields decay as CoreScope's do: an observer whose clock_last_naive_at is more
 * than 24 hours old reads clock_naive false, clock_skew_seconds null, clock_skew_count_24h 0
 * and clock_last_naive_at null. can_relay is present only when the ingestor has written it
 * (can_relay_seen). Columns a database lacks (before CoreScope's migration) read as absent.
 *
 * packetsLastHour reads the last hour's observations through idx_observations_timestamp (the
 * observer's own index is kept out of the plan: it would walk all of its observations).
 *
 * GET /api/observers/{id}/analytics?days=N (1..365, default 7; a bad value is 7) reads the
 * observer's observations of the last N days: a cold report (cold_report.h), built under the
 * cold gate and shared through the result cache. Its parts, as CoreScope computes them:
 *   timeline         observations per bucket (an hour for N = 1, 4 hours up to 7 days, else a
 *                    day; buckets start at UTC multiples), labelled "15:04", "Mon 15:04" or
 *                    "Jan 02", oldest first, only buckets with observations;
 *   packetTypes      observations per payload_type, keyed by its decimal text;
 *   nodesTimeline    per bucket, the distinct node names heard: the transmission's pubKey,
 *                    srcHash and destHash (non-empty strings of its decoded_json object) and
 *                    the observation's path hops (when path_json is an array of strings);
 *   snrDistribution  observations per 2 dB SNR bucket ("-4 to -2"), by CoreScope's rounding;
 *   recentPackets    the 20 newest, each as CoreScope's store enriches an observation.
 * An unknown observer has empty parts (CoreScope answers so too, not 404).
 */
#include "cold_report.h"
#include "json.h"
#include "node_visibility.h"
#include "params.h"
#include "result_cache.h"
#include "router.h"
#include "stored_array.h"

#include <stdio.h>
#include <stdlib.h>
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

enum mg_turn mg_handle_observers(struct mg_env *env, const struct mg_request *req,
                                 struct mg_response *res)
{
    (void)req;
    sqlite3_stmt *st = prepare(env->db, false);
    if (!st) {
        mg_response_db_failure(res, "the observers", SQLITE_ERROR);
        return MG_DONE;
    }
    mg_response_json(res, 200);
    struct mg_json j;
    mg_json_init(&j, &res->body);
    mg_json_object_begin(&j);
    mg_json_key(&j, "observers");
    mg_json_array_begin(&j);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        if (!mg_observer_hidden((const char *)sqlite3_column_text(st, C_ID)))
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
        mg_response_db_failure(res, "the observers", rc);
    return MG_DONE;
}

enum mg_turn mg_handle_observer(struct mg_env *env, const struct mg_request *req,
                                struct mg_response *res)
{
    if (mg_observer_hidden(req->path_param)) {
        mg_response_error(res, 404, "Observer not found");
        return MG_DONE;
    }
    sqlite3_stmt *st = prepare(env->db, true);
    if (!st) {
        mg_response_db_failure(res, "the observers", SQLITE_ERROR);
        return MG_DONE;
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
        mg_response_db_failure(res, "the observers", rc);
    }
    sqlite3_finalize(st);
    return MG_DONE;
}

/* ---- /api/observers/{id}/analytics --------------------------------------------------- */

#define ANALYTICS_DAYS_DEFAULT 7
#define ANALYTICS_DAYS_MAX 365
#define ANALYTICS_RECENT 20

struct analytics_args {
    char id[MG_PATH_PARAM_MAX];
    int days;
};
_Static_assert(sizeof(struct analytics_args) <= MG_COLD_ARGS_BYTES, "the args fit a build");

/* The observer's observations in the window (:idx its rowid, :since exclusive, :dur the
 * bucket's seconds), with what every part reads. CoreScope's store keeps one observation per
 * transmission, observer and path (the newest, then the lowest id): so does this. p is path_json
 * when it is a JSON array (else
 * '[]'), d decoded_json when it is a JSON object; nested CASEs keep the JSON functions from
 * ever seeing malformed text. */
static const char filtered_cte[] =
    "WITH f AS MATERIALIZED (SELECT o.id, o.timestamp AS ts, o.snr, o.transmission_id AS tx,"
    " (o.timestamp / :dur) * :dur AS bucket,"
    " CASE WHEN json_valid(o.path_json) THEN CASE WHEN json_type(o.path_json) = 'array'"
    " THEN o.path_json ELSE '[]' END ELSE '[]' END AS p,"
    " t.payload_type,"
    " CASE WHEN json_valid(t.decoded_json) THEN CASE WHEN json_type(t.decoded_json) = 'object'"
    " THEN t.decoded_json END END AS d"
    " FROM (SELECT o.*, row_number() OVER (PARTITION BY o.transmission_id, o.path_json"
    " ORDER BY o.timestamp DESC, o.id) AS copy FROM observations o"
    " WHERE o.observer_idx = :idx AND o.timestamp > :since AND o.timestamp > 0) o"
    " JOIN transmissions t ON t.id = o.transmission_id WHERE o.copy = 1) ";

static const char *const label_sql[] = {
    /* days <= 1 */ "strftime('%H:%M', bucket, 'unixepoch')",
    /* days <= 7 */
    "substr('SunMonTueWedThuFriSat', 1 + 3 * strftime('%w', bucket, 'unixepoch'), 3)"
    " || strftime(' %H:%M', bucket, 'unixepoch')",
    /* longer */
    "substr('JanFebMarAprMayJunJulAugSepOctNovDec',"
    " 3 * strftime('%m', bucket, 'unixepoch') - 2, 3) || strftime(' %d', bucket, 'unixepoch')",
};

static sqlite3_stmt *analytics_statement(struct mg_db *db, const char *tail, int days, int64_t idx,
                                         int64_t since)
{
    struct mg_buf sql;
    mg_buf_init(&sql);
    mg_buf_puts(&sql, filtered_cte);
    const char *label = label_sql[days <= 1 ? 0 : days <= 7 ? 1 : 2];
    /* tail's "%L" is the bucket's label */
    for (const char *p = tail; *p; p++) {
        if (p[0] == '%' && p[1] == 'L') {
            mg_buf_puts(&sql, label);
            p++;
        } else {
            mg_buf_putc(&sql, *p);
        }
    }
    sqlite3_stmt *st = sql.failed ? NULL : mg_db_prepare(db, mg_buf_cstr(&sql));
    mg_buf_free(&sql);
    if (!st)
        return NULL;
    int dur = days <= 1 ? 3600 : days <= 7 ? 4 * 3600 : 24 * 3600;
    sqlite3_bind_int64(st, sqlite3_bind_parameter_index(st, ":dur"), dur);
    sqlite3_bind_int64(st, sqlite3_bind_parameter_index(st, ":idx"), idx);
    sqlite3_bind_int64(st, sqlite3_bind_parameter_index(st, ":since"), since);
    return st;
}

/* Writes [{"label":...,"count":n},...] from a statement of (label, count) rows. */
static int write_buckets(struct mg_json *j, sqlite3_stmt *st)
{
    mg_json_array_begin(j);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        mg_json_object_begin(j); /* CoreScope's order: label, count */
        mg_json_key(j, "label");
        mg_db_json_column(j, st, 0);
        mg_json_kv_int(j, "count", sqlite3_column_int64(st, 1));
        mg_json_object_end(j);
    }
    mg_json_array_end(j);
    return rc;
}

static int write_packet_types(struct mg_json *j, sqlite3_stmt *st)
{
    mg_json_object_begin(j); /* keys in bytewise order, as Go writes a map */
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        mg_json_key(j, (const char *)sqlite3_column_text(st, 0));
        mg_json_int(j, sqlite3_column_int64(st, 1));
    }
    mg_json_object_end(j);
    return rc;
}

static int write_snr(struct mg_json *j, sqlite3_stmt *st)
{
    mg_json_array_begin(j);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t from = sqlite3_column_int64(st, 0);
        char range[64];
        snprintf(range, sizeof range, "%lld to %lld", (long long)from, (long long)from + 2);
        mg_json_object_begin(j); /* CoreScope's order: range, count */
        mg_json_kv_string(j, "range", range);
        mg_json_kv_int(j, "count", sqlite3_column_int64(st, 1));
        mg_json_object_end(j);
    }
    mg_json_array_end(j);
    return rc;
}

enum recent_col {
    R_DECODED,
    R_DIRECTION,
    R_HASH,
    R_ID,
    R_IATA,
    R_OBSERVER_ID,
    R_OBSERVER_NAME,
    R_PATH,
    R_PAYLOAD_TYPE,
    R_RAW_HEX,
    R_RESOLVED,
    R_ROUTE_TYPE,
    R_RSSI,
    R_SCORE,
    R_SNR,
    R_TIMESTAMP,
};

/* An observation as CoreScope's store enriches it (keys sorted; empty text is null; the frame
 * is the transmission's; resolved_path only when stored). */
static int write_recent(struct mg_json *j, sqlite3_stmt *st, struct mg_buf *tmp)
{
    static const char *const keys[] = {
        "decoded_json",  "direction", "hash",         "id",        "observer_iata", "observer_id",
        "observer_name", "path_json", "payload_type", "raw_hex",   "resolved_path", "route_type",
        "rssi",          "score",     "snr",          "timestamp",
    };
    mg_json_array_begin(j);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        mg_json_object_begin(j);
        for (int c = R_DECODED; c <= R_TIMESTAMP; c++) {
            if (c == R_RESOLVED) {
                const char *text = (const char *)sqlite3_column_text(st, c);
                mg_stored_array_write(j, keys[c], text, (size_t)sqlite3_column_bytes(st, c), false,
                                      tmp);
                continue;
            }
            mg_json_key(j, keys[c]);
            if (sqlite3_column_type(st, c) == SQLITE_TEXT && sqlite3_column_bytes(st, c) == 0)
                mg_json_null(j);
            else
                mg_db_json_column(j, st, c);
        }
        mg_json_object_end(j);
    }
    mg_json_array_end(j);
    return rc;
}

static int build_analytics(struct mg_db *db, const struct analytics_args *a, int64_t now_unix,
                           struct mg_buf *body)
{
    int64_t idx = -1;
    sqlite3_stmt *st = mg_db_prepare(db, "SELECT rowid FROM observers WHERE id = ?");
    if (!st)
        return SQLITE_ERROR;
    sqlite3_bind_text(st, 1, a->id, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        idx = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return rc;

    const char *resolved = db->schema.obs_resolved_path ? "o.resolved_path" : "NULL";
    char recent_tail[1024];
    snprintf(recent_tail, sizeof recent_tail,
             "SELECT t.decoded_json, o.direction, t.hash, o.id, ob.iata, ob.id, ob.name,"
             " o.path_json, t.payload_type, t.raw_hex, %s, t.route_type, o.rssi, o.score, o.snr,"
             " strftime('%%Y-%%m-%%dT%%H:%%M:%%S.000Z', o.timestamp, 'unixepoch')"
             " FROM f JOIN observations o ON o.id = f.id JOIN transmissions t ON t.id = f.tx"
             " LEFT JOIN observers ob ON ob.rowid = o.observer_idx"
             " ORDER BY f.ts DESC, f.id LIMIT %d",
             resolved, ANALYTICS_RECENT);
    const char *const tails[] = {
        "SELECT %L, count(*) FROM f GROUP BY bucket ORDER BY bucket",
        "SELECT CAST(payload_type AS TEXT) AS k, count(*) FROM f"
        " WHERE payload_type IS NOT NULL GROUP BY k ORDER BY k",
        /* Every bucket with observations, with how many distinct names it heard. A path's
         * hops are walked by index (a recursive CTE); an element neither a string nor null
         * drops the whole path, as it fails CoreScope's decoding. */
        ", h(id, bucket, p, i, n) AS (SELECT id, bucket, p, 0, json_array_length(p) FROM f"
        " WHERE json_array_length(p) > 0 UNION ALL SELECT id, bucket, p, i + 1, n FROM h"
        " WHERE i + 1 < n)"
        " SELECT %L, count(DISTINCT v) FROM (SELECT DISTINCT bucket FROM f) b LEFT JOIN ("
        " SELECT f.bucket AS bb, json_extract(f.d, '$.pubKey') AS v FROM f"
        " WHERE json_type(f.d, '$.pubKey') = 'text'"
        " UNION ALL SELECT f.bucket, json_extract(f.d, '$.srcHash') FROM f"
        " WHERE json_type(f.d, '$.srcHash') = 'text'"
        " UNION ALL SELECT f.bucket, json_extract(f.d, '$.destHash') FROM f"
        " WHERE json_type(f.d, '$.destHash') = 'text'"
        " UNION ALL SELECT h.bucket, json_extract(h.p, printf('$[%d]', h.i)) FROM h"
        " WHERE json_type(h.p, printf('$[%d]', h.i)) = 'text' AND h.id NOT IN (SELECT id"
        " FROM h WHERE json_type(h.p, printf('$[%d]', h.i)) NOT IN ('text', 'null'))"
        ") n ON n.bb = b.bucket AND n.v != '' GROUP BY b.bucket ORDER BY b.bucket",
        /* int(snr) truncates toward zero, as does / */
        "SELECT CASE WHEN snr < 0 AND CAST(snr AS INTEGER) != CAST(snr AS INTEGER) / 2 * 2"
        " THEN CAST(snr AS INTEGER) / 2 * 2 - 2 ELSE CAST(snr AS INTEGER) / 2 * 2 END AS b,"
        " count(*) FROM f WHERE snr IS NOT NULL GROUP BY b ORDER BY b",
        recent_tail,
    };
    static const char *const names[] = {"timeline", "packetTypes", "nodesTimeline",
                                        "snrDistribution", "recentPackets"};
    int64_t since = now_unix - (int64_t)a->days * 86400;
    struct mg_json j;
    mg_json_init(&j, body);
    mg_json_object_begin(&j); /* CoreScope's order */
    struct mg_buf tmp;
    mg_buf_init(&tmp);
    rc = SQLITE_DONE;
    for (int part = 0; part < 5 && rc == SQLITE_DONE; part++) {
        mg_json_key(&j, names[part]);
        st = analytics_statement(db, tails[part], a->days, idx, since);
        if (!st) {
            rc = SQLITE_ERROR;
            break;
        }
        rc = part == 1   ? write_packet_types(&j, st)
             : part == 3 ? write_snr(&j, st)
             : part == 4 ? write_recent(&j, st, &tmp)
                         : write_buckets(&j, st);
        sqlite3_finalize(st);
    }
    mg_buf_free(&tmp);
    mg_json_object_end(&j);
    mg_buf_putc(body, '\n');
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* A build's outcome from its SQLite result code. */
static void analytics_build(struct mg_cold_build *b, struct mg_db *db)
{
    const struct analytics_args *a = (const struct analytics_args *)b->args;
    bool in_transaction = sqlite3_exec(db->conn, "BEGIN", NULL, NULL, NULL) == SQLITE_OK;
    int rc = build_analytics(db, a, b->now_unix, &b->body);
    if (in_transaction)
        sqlite3_exec(db->conn, "COMMIT", NULL, NULL, NULL);
    mg_cold_result(b, rc, "the observations");
}

static const struct mg_cold_report analytics_report = {
    .name = "observer analytics report",
    .not_found = "Observer not found",
    .bad_request = "bad request",
    .build = analytics_build,
};

/*
 * The parameters, declared once (params.h). CoreScope's handleObserverAnalytics: days
 * missing, empty or malformed: 7 (queryInt); out of range: clamped to 1..365.
 */
struct analytics_params {
    int64_t days;
};
static const struct mg_param analytics_param_list[] = {
    {.name = "days",
     .kind = MG_PARAM_INT,
     .offset = offsetof(struct analytics_params, days),
     .def = ANALYTICS_DAYS_DEFAULT,
     .min = 1,
     .max = ANALYTICS_DAYS_MAX,
     .corescope = "queryInt(days, 7), then clamped to 1..365"},
};
const struct mg_param_table mg_observer_analytics_params =
    MG_PARAM_TABLE(struct analytics_params, analytics_param_list);

static void analytics_args(const struct mg_request *req, struct analytics_args *a, char *key)
{
    memset(a, 0, sizeof *a);
    snprintf(a->id, sizeof a->id, "%s", req->path_param);
    struct analytics_params own;
    const struct analytics_params *p =
        mg_params_get(&mg_observer_analytics_params, req, NULL, &own);
    a->days = p ? (int)p->days : ANALYTICS_DAYS_DEFAULT; /* the table refuses nothing */
    snprintf(key, MG_CACHE_KEY_MAX + 64, "obs|%s|%d", a->id, a->days);
}

bool mg_observer_analytics_is_heavy(struct mg_env *env, const struct mg_request *req)
{
    struct analytics_args a;
    char key[MG_CACHE_KEY_MAX + 64];
    analytics_args(req, &a, key);
    return mg_cold_report_is_heavy(env, key);
}

enum mg_turn mg_handle_observer_analytics(struct mg_env *env, const struct mg_request *req,
                                          struct mg_response *res)
{
    struct analytics_args a;
    char key[MG_CACHE_KEY_MAX + 64];
    analytics_args(req, &a, key);
    return mg_cold_report_serve(env, req, res, &analytics_report, key, &a, sizeof a);
}

/* ---- /api/observers/clock-skew ------------------------------------------------------------ */

/*
 * CoreScope's observer calibration, from ADVERTs (payload_type 4) whose decoded timestamp
 * (payload.timestamp, else timestamp, a number) lies in 2020..2100 and that at least two
 * observations heard (one per observer and path, as CoreScope's store keeps them): each
 * observation deviates from the median time of its transmission's observations, and an
 * observer's offset is the median of its deviations (seconds, rounded to 0.1 as CoreScope
 * rounds), with how many it had. Largest offset first (ties by observer id). A cold report.
 */
#define ADVERT_TS_MIN 1577836800LL /* 2020-01-01 */
#define ADVERT_TS_MAX 4102444800LL /* 2100-01-01 */

static const char calibration_sql[] =
    "WITH a AS (SELECT t.id FROM transmissions t WHERE t.payload_type = 4 AND (SELECT CASE"
    " WHEN json_valid(t.decoded_json) THEN CASE WHEN json_type(t.decoded_json) = 'object'"
    " THEN coalesce(CASE WHEN json_type(t.decoded_json, '$.payload') = 'object'"
    " AND json_type(t.decoded_json, '$.payload.timestamp') IN ('integer', 'real')"
    " AND CAST(json_extract(t.decoded_json, '$.payload.timestamp') AS INTEGER) > 0"
    " THEN CAST(json_extract(t.decoded_json, '$.payload.timestamp') AS INTEGER) END,"
    " CASE WHEN json_type(t.decoded_json, '$.timestamp') IN ('integer', 'real')"
    " AND CAST(json_extract(t.decoded_json, '$.timestamp') AS INTEGER) > 0"
    " THEN CAST(json_extract(t.decoded_json, '$.timestamp') AS INTEGER) END) END END)"
    " BETWEEN ?1 AND ?2),"
    " s AS (SELECT o.transmission_id AS tx, coalesce(ob.id, '') AS observer, o.timestamp AS ts,"
    " row_number() OVER (PARTITION BY o.transmission_id, o.observer_idx, o.path_json"
    " ORDER BY o.timestamp DESC, o.id) AS copy"
    " FROM a JOIN observations o ON o.transmission_id = a.id"
    " LEFT JOIN observers ob ON ob.rowid = o.observer_idx)"
    " SELECT tx, observer, ts FROM s WHERE copy = 1 ORDER BY tx";

struct deviations {
    char id[MG_PATH_PARAM_MAX];
    double *v;
    size_t len, cap;
    double offset;
};

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v (sorted in place); 0 when empty, as CoreScope's. */
static double median(double *v, size_t n)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, compare_doubles);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static bool push_double(double **v, size_t *len, size_t *cap, double x)
{
    if (*len == *cap) {
        size_t cap2 = *cap ? *cap * 2 : 16;
        double *grown = realloc(*v, cap2 * sizeof *grown);
        if (!grown)
            return false;
        *v = grown, *cap = cap2;
    }
    (*v)[(*len)++] = x;
    return true;
}

struct calibration {
    struct deviations *obs; /* one per observer seen in a multi-observation packet */
    size_t len, cap;
    /* the current transmission's observations */
    struct {
        char id[MG_PATH_PARAM_MAX];
        double ts;
    } * group;
    size_t group_len, group_cap;
    double *times;
};

static struct deviations *observer_of(struct calibration *c, const char *id)
{
    for (size_t i = 0; i < c->len; i++)
        if (strcmp(c->obs[i].id, id) == 0)
            return &c->obs[i];
    if (c->len == c->cap) {
        size_t cap2 = c->cap ? c->cap * 2 : 32;
        struct deviations *grown = realloc(c->obs, cap2 * sizeof *grown);
        if (!grown)
            return NULL;
        c->obs = grown, c->cap = cap2;
    }
    struct deviations *d = &c->obs[c->len++];
    memset(d, 0, sizeof *d);
    snprintf(d->id, sizeof d->id, "%s", id);
    return d;
}

/* Ends the current transmission: with two observations or more, each one's deviation. */
static bool close_group(struct calibration *c)
{
    bool ok = true;
    if (c->group_len >= 2) {
        double *t = realloc(c->times, c->group_len * sizeof *t);
        if (!t)
            return false;
        c->times = t;
        for (size_t i = 0; i < c->group_len; i++)
            t[i] = c->group[i].ts;
        double mid = median(t, c->group_len);
        for (size_t i = 0; i < c->group_len && ok; i++) {
            struct deviations *d = observer_of(c, c->group[i].id);
            ok = d && push_double(&d->v, &d->len, &d->cap, c->group[i].ts - mid);
        }
    }
    c->group_len = 0;
    return ok;
}

static bool add_to_group(struct calibration *c, const char *id, double ts)
{
    if (c->group_len == c->group_cap) {
        size_t cap2 = c->group_cap ? c->group_cap * 2 : 16;
        void *grown = realloc(c->group, cap2 * sizeof *c->group);
        if (!grown)
            return false;
        c->group = grown, c->group_cap = cap2;
    }
    snprintf(c->group[c->group_len].id, sizeof c->group[0].id, "%s", id);
    c->group[c->group_len++].ts = ts;
    return true;
}

static int compare_offsets(const void *a, const void *b)
{
    const struct deviations *x = a, *y = b;
    double ax = x->offset < 0 ? -x->offset : x->offset, ay = y->offset < 0 ? -y->offset : y->offset;
    if (ax != ay)
        return ax > ay ? -1 : 1;
    return strcmp(x->id, y->id);
}

static int build_calibration(struct mg_db *db, struct mg_buf *body)
{
    sqlite3_stmt *st = mg_db_prepare(db, calibration_sql);
    if (!st)
        return SQLITE_ERROR;
    sqlite3_bind_int64(st, 1, ADVERT_TS_MIN);
    sqlite3_bind_int64(st, 2, ADVERT_TS_MAX);
    struct calibration c;
    memset(&c, 0, sizeof c);
    int64_t tx = -1;
    bool ok = true;
    int rc;
    while (ok && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t this_tx = sqlite3_column_int64(st, 0);
        if (this_tx != tx)
            ok = close_group(&c);
        tx = this_tx;
        const char *id = (const char *)sqlite3_column_text(st, 1);
        ok = ok && add_to_group(&c, id ? id : "", (double)sqlite3_column_int64(st, 2));
    }
    sqlite3_finalize(st);
    ok = ok && close_group(&c);
    if (ok && rc == SQLITE_DONE) {
        for (size_t i = 0; i < c.len; i++) {
            double m = median(c.obs[i].v, c.obs[i].len);
            c.obs[i].offset = (double)(int64_t)(m * 10 + 0.5) / 10; /* CoreScope's round */
        }
        if (c.len > 1) /* qsort of no array is undefined, and UBSan stops the worker */
            qsort(c.obs, c.len, sizeof *c.obs, compare_offsets);
        struct mg_json j;
        mg_json_init(&j, body);
        mg_json_array_begin(&j);
        for (size_t i = 0; i < c.len; i++) {
            mg_json_object_begin(&j); /* CoreScope's order */
            mg_json_kv_string(&j, "observerID", c.obs[i].id);
            mg_json_kv_double(&j, "offsetSec", c.obs[i].offset);
            mg_json_kv_int(&j, "samples", (int64_t)c.obs[i].len);
            mg_json_object_end(&j);
        }
        mg_json_array_end(&j);
        mg_buf_putc(body, '\n');
    }
    for (size_t i = 0; i < c.len; i++)
        free(c.obs[i].v);
    free(c.obs);
    free(c.group);
    free(c.times);
    if (!ok)
        return SQLITE_NOMEM;
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static void calibration_build(struct mg_cold_build *b, struct mg_db *db)
{
    bool in_transaction = sqlite3_exec(db->conn, "BEGIN", NULL, NULL, NULL) == SQLITE_OK;
    int rc = build_calibration(db, &b->body);
    if (in_transaction)
        sqlite3_exec(db->conn, "COMMIT", NULL, NULL, NULL);
    mg_cold_result(b, rc, "the ADVERTs");
}

static const struct mg_cold_report calibration_report = {
    .name = "observer clock calibration",
    .not_found = "Not found",
    .bad_request = "bad request",
    .build = calibration_build,
};

#define CALIBRATION_KEY "observers|clock-skew"

bool mg_observer_clock_skew_is_heavy(struct mg_env *env, const struct mg_request *req)
{
    (void)req;
    return mg_cold_report_is_heavy(env, CALIBRATION_KEY);
}

enum mg_turn mg_handle_observer_clock_skew(struct mg_env *env, const struct mg_request *req,
                                           struct mg_response *res)
{
    return mg_cold_report_serve(env, req, res, &calibration_report, CALIBRATION_KEY, "", 0);
}

/* SPDX-License-Identifier: ISC */
/*
 * The routes of CoreScope's observer_metrics table (the radio statistics its ingestor stores
 * for each observer every few minutes: noise floor, cumulative air time and packet counters,
 * battery), as CoreScope's server answers them:
 *
 *   GET /api/observers/metrics/summary?window=&region=
 *       one row per observer id with samples since now - window (default 24h; "<N>d", or a Go
 *       duration, else 400 "invalid window: ..."): its name and IATA code (from observers by
 *       exact id; the code left out when empty), the newest sample's noise floor and battery,
 *       the mean and highest noise floor, the sample count, and the noise floors in time order
 *       (sparkline); highest noise floor first. region keeps the rows whose code equals it
 *       in any case.
 *   GET /api/observers/{id}/metrics?since=&until=&resolution=
 *       the observer's samples with timestamp >= since (default now - 24 hours) and <= until
 *       (text compares, as stored), oldest first: every sample (resolution 5m, the default), or
 *       the last of each UTC hour (1h) or day (1d), the bucket's start as its timestamp; any
 *       other resolution is 400. Each sample after the first gets the percentages of TX and RX
 *       air time and the receive error rate over the interval since the one before (rounded
 *       to 2 places, air time clamped to 0..100), except across a gap (more than twice the
 *       interval: 300 s, an hour, a day) or where a counter went down: a reboot, flagged and
 *       listed in reboots. observer_name is the observers row's name (null without one).
 *   GET /api/nodes/{pubkey}/battery?days=N
 *       the node's battery samples (battery_mv not null) of the last N days (1..365, anything
 *       else 7), from the rows whose observer_id is the key in any case, oldest first; the
 *       newest, and its status against config.json's batteryThresholds (lowMv 3300, criticalMv
 *       3000 by default): critical, low, ok, or unknown without a sample. 404 "node not found"
 *       for a key (exact, as given) that no node has.
 *
 * observer_metrics is not in every database (CoreScope's ingestor creates it; neither shared
 * fixture has it). CoreScope's server reads it on every request, so a missing table (or column)
 * is its 500 with SQLite's message ("no such table: observer_metrics"), after the checks that
 * come first (the 400s, the battery's 404); so is meshgate's, and it sees the table as soon as
 * the ingestor creates it. Each request prepares its statements anew for that reason.
 *
 * Nothing here is filtered by observerBlacklist (CoreScope does not); the battery of a hidden
 * node is 404 "Not found" (the node routes' guard, router.c), where CoreScope answers it.
 *
 * Cost: every route is heavy. The summary reads every sample of the window (a day of 40
 * observers every 5 minutes: 11 520 rows; a window may be years), an observer's series the
 * samples of its window through the table's primary key (observer_id, timestamp), the battery
 * the distinct observer ids (a skip through the same key) and the samples of the ids that are
 * the key in any case (365 days every 5 minutes: 105 120 rows).
 */
#include "corescope_config.h"
#include "go_duration.h"
#include "json.h"
#include "params.h"
#include "router.h"
#include "time_parse.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define DAY_NS (INT64_C(86400) * 1000000000)

/* ---- shared ---------------------------------------------------------------------------- */

/* A failed query is CoreScope's answer to one: 500 with SQLite's own message (a missing table
 * or column), or 503 while a writer holds the lock; whatever the body held is dropped. */
static void metrics_failed(struct mg_db *db, struct mg_response *res, int rc)
{
    mg_buf_reset(&res->headers);
    if ((rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED)
        mg_response_db_failure(res, "the observer metrics", rc);
    else
        mg_response_error(res, 500, "%s", sqlite3_errmsg(db->conn));
}

/* Prepares sql on the live schema (NULL with the failure in res). */
static sqlite3_stmt *metrics_prepare(struct mg_db *db, const char *sql, struct mg_response *res)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v3(db->conn, sql, -1, 0, &st, NULL);
    if (rc == SQLITE_OK)
        return st;
    metrics_failed(db, res, rc);
    return NULL;
}

/* now + offset_ns, as Go's Time.Add then Format(time.RFC3339) writes it in UTC. */
static void rfc3339_from_now(int64_t offset_ns, char *out, size_t cap)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t sec = (int64_t)ts.tv_sec + offset_ns / 1000000000;
    int64_t nsec = (int64_t)ts.tv_nsec + offset_ns % 1000000000;
    if (nsec >= 1000000000)
        sec++;
    else if (nsec < 0)
        sec--;
    time_t t = (time_t)sec;
    struct tm tm;
    if (!gmtime_r(&t, &tm)) {
        snprintf(out, cap, "%s", offset_ns < 0 ? "0000" : "9999");
        return;
    }
    long long year = (long long)tm.tm_year + 1900;
    snprintf(out, cap, "%s%04lld-%02d-%02dT%02d:%02d:%02dZ", year < 0 ? "-" : "",
             year < 0 ? -year : year, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

/* ---- /api/observers/metrics/summary ---------------------------------------------------- */

struct summary_params {
    const char *window;
    const char *region;
};
static const struct mg_param summary_param_list[] = {
    {.name = "window",
     .kind = MG_PARAM_TEXT,
     .offset = offsetof(struct summary_params, window),
     .corescope = "missing or empty: 24h; \"<N>d\" (N >= 1) or a Go duration (1h30m, 90m); "
                  "anything else: 400 \"invalid window: ...\" (meshgate too, in the handler)"},
    {.name = "region",
     .kind = MG_PARAM_TEXT,
     .offset = offsetof(struct summary_params, region),
     .corescope = "keeps the observers whose IATA code equals it in any case; none: all"},
};
const struct mg_param_table mg_metrics_summary_params =
    MG_PARAM_TABLE(struct summary_params, summary_param_list);

enum summary_col {
    S_ID,
    S_NAME,
    S_IATA,
    S_CURRENT_NF,
    S_AVG_NF,
    S_MAX_NF,
    S_BATTERY,
    S_COUNT,
};

/* One row per observer id of the window, highest noise floor first (no noise floor last),
 * ties by id; the newest sample's values through the primary key. */
static const char summary_sql[] =
    "SELECT m.observer_id, o.name, coalesce(o.iata, ''),"
    " (SELECT l.noise_floor FROM observer_metrics l WHERE l.observer_id = m.observer_id"
    " AND l.timestamp >= ?1 ORDER BY l.timestamp DESC LIMIT 1),"
    " avg(m.noise_floor), max(m.noise_floor),"
    " (SELECT l.battery_mv FROM observer_metrics l WHERE l.observer_id = m.observer_id"
    " AND l.timestamp >= ?1 ORDER BY l.timestamp DESC LIMIT 1),"
    " count(*)"
    " FROM observer_metrics m LEFT JOIN observers o ON o.id = m.observer_id"
    " WHERE m.timestamp >= ?1 GROUP BY m.observer_id ORDER BY 6 DESC, 1";

static const char sparkline_sql[] = "SELECT noise_floor FROM observer_metrics"
                                    " WHERE observer_id = ?1 AND timestamp >= ?2"
                                    " ORDER BY timestamp";

enum mg_turn mg_handle_metrics_summary(struct mg_env *env, const struct mg_request *req,
                                       struct mg_response *res)
{
    struct summary_params own;
    const struct summary_params *p = mg_params_get(&mg_metrics_summary_params, req, res, &own);
    if (!p)
        return MG_DONE;
    const char *window = p->window ? p->window : "24h";
    int64_t dur;
    if (!mg_go_window_parse(window, strlen(window), &dur)) {
        mg_response_error(res, 400, "invalid window: %s", window);
        return MG_DONE;
    }
    char since[48];
    /* Go's Time.Add(-d): -d of the smallest duration is itself */
    rfc3339_from_now(dur == INT64_MIN ? dur : -dur, since, sizeof since);
    sqlite3_stmt *st = metrics_prepare(env->db, summary_sql, res);
    if (!st)
        return MG_DONE;
    sqlite3_stmt *spark = metrics_prepare(env->db, sparkline_sql, res);
    if (!spark) {
        sqlite3_finalize(st);
        return MG_DONE;
    }
    sqlite3_bind_text(st, 1, since, -1, SQLITE_STATIC);
    sqlite3_bind_text(spark, 2, since, -1, SQLITE_STATIC);
    mg_response_json(res, 200);
    struct mg_json j;
    mg_json_init(&j, &res->body);
    mg_json_object_begin(&j);
    mg_json_key(&j, "observers");
    mg_json_array_begin(&j);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *iata = (const char *)sqlite3_column_text(st, S_IATA);
        if (p->region && strcasecmp(iata ? iata : "", p->region) != 0)
            continue;
        mg_json_object_begin(&j); /* CoreScope's order */
        mg_json_key(&j, "observer_id");
        mg_db_json_column(&j, st, S_ID);
        mg_json_key(&j, "observer_name");
        mg_db_json_column(&j, st, S_NAME);
        if (iata && iata[0])
            mg_json_kv_string(&j, "iata", iata);
        mg_json_key(&j, "current_noise_floor");
        mg_db_json_column(&j, st, S_CURRENT_NF);
        mg_json_key(&j, "avg_noise_floor_24h");
        mg_db_json_column(&j, st, S_AVG_NF);
        mg_json_key(&j, "max_noise_floor_24h");
        mg_db_json_column(&j, st, S_MAX_NF);
        mg_json_key(&j, "battery_mv");
        mg_db_json_column(&j, st, S_BATTERY);
        mg_json_kv_int(&j, "sample_count", sqlite3_column_int64(st, S_COUNT));
        mg_json_key(&j, "sparkline");
        mg_json_array_begin(&j);
        sqlite3_bind_value(spark, 1, sqlite3_column_value(st, S_ID));
        while ((rc = sqlite3_step(spark)) == SQLITE_ROW)
            mg_db_json_column(&j, spark, 0);
        sqlite3_reset(spark);
        mg_json_array_end(&j);
        mg_json_object_end(&j);
        if (rc != SQLITE_DONE)
            break;
    }
    sqlite3_finalize(spark);
    sqlite3_finalize(st);
    mg_json_array_end(&j);
    mg_json_object_end(&j);
    mg_buf_putc(&res->body, '\n');
    if (rc != SQLITE_DONE)
        metrics_failed(env->db, res, rc);
    return MG_DONE;
}

/* ---- /api/observers/{id}/metrics ------------------------------------------------------- */

struct series_params {
    const char *since;
    const char *until;
    const char *resolution;
};
static const struct mg_param series_param_list[] = {
    {.name = "since",
     .kind = MG_PARAM_TEXT,
     .offset = offsetof(struct series_params, since),
     .corescope = "missing or empty: now - 24h; else compared as text with the stored "
                  "timestamps (any value answers)"},
    {.name = "until",
     .kind = MG_PARAM_TEXT,
     .offset = offsetof(struct series_params, until),
     .corescope = "missing or empty: no bound; else compared as text"},
    {.name = "resolution",
     .kind = MG_PARAM_TEXT,
     .offset = offsetof(struct series_params, resolution),
     .corescope = "missing or empty: 5m; 5m, 1h or 1d; anything else: 400 \"invalid "
                  "resolution: ...\" (meshgate too, in the handler)"},
};
const struct mg_param_table mg_observer_metrics_params =
    MG_PARAM_TABLE(struct series_params, series_param_list);

/* The columns every series statement returns, in this order. */
#define SERIES_COLUMNS                                                                             \
    "noise_floor, tx_air_secs, rx_air_secs, recv_errors, battery_mv, packets_sent, packets_recv"
enum series_col {
    R_TS,
    R_NOISE,
    R_TX_AIR,
    R_RX_AIR,
    R_ERRORS,
    R_BATTERY,
    R_SENT,
    R_RECV,
    R_COLS,
};

/* A sample's counters (CoreScope reads them as integers; NULL stays absent). */
struct counters {
    bool has[R_COLS];
    int64_t v[R_COLS];
    bool timed; /* its timestamp parsed */
    int64_t ms;
};

static void read_counters(sqlite3_stmt *st, struct counters *c)
{
    for (int k = R_TX_AIR; k < R_COLS; k++) {
        c->has[k] = sqlite3_column_type(st, k) != SQLITE_NULL;
        c->v[k] = sqlite3_column_int64(st, k);
    }
    struct mg_rfc3339_shape shape;
    const char *ts = (const char *)sqlite3_column_text(st, R_TS);
    c->timed = ts && mg_rfc3339_parse_shaped(ts, strlen(ts), &c->ms, &shape) &&
               shape.separator == 'T' && shape.zone != 'z';
}

static bool went_down(const struct counters *cur, const struct counters *prev, int k)
{
    return cur->has[k] && prev->has[k] && cur->v[k] < prev->v[k];
}

/* A share of the interval, in percent clamped to 0..100 and rounded to 2 places. */
static void write_airtime(struct mg_json *j, const char *key, const struct counters *cur,
                          const struct counters *prev, int k, double interval_s)
{
    mg_json_key(j, key);
    if (!(cur->has[k] && prev->has[k])) {
        mg_json_null(j);
        return;
    }
    double pct = (double)(cur->v[k] - prev->v[k]) / interval_s * 100.0;
    pct = pct < 0 ? 0 : pct > 100 ? 100 : pct;
    mg_json_double(j, round(pct * 100) / 100);
}

enum mg_turn mg_handle_observer_metrics(struct mg_env *env, const struct mg_request *req,
                                        struct mg_response *res)
{
    struct series_params own;
    const struct series_params *p = mg_params_get(&mg_observer_metrics_params, req, res, &own);
    if (!p)
        return MG_DONE;
    const char *resolution = p->resolution ? p->resolution : "5m";
    int bucket_s;
    const char *bucket_fmt = NULL;
    if (strcmp(resolution, "5m") == 0) {
        bucket_s = 300;
    } else if (strcmp(resolution, "1h") == 0) {
        bucket_s = 3600;
        bucket_fmt = "%Y-%m-%dT%H:00:00Z";
    } else if (strcmp(resolution, "1d") == 0) {
        bucket_s = 86400;
        bucket_fmt = "%Y-%m-%dT00:00:00Z";
    } else {
        mg_response_error(res, 400, "invalid resolution: %s. Must be 5m, 1h, or 1d", resolution);
        return MG_DONE;
    }
    char since[48] = "";
    if (!p->since)
        rfc3339_from_now(-DAY_NS, since, sizeof since);
    struct mg_buf sql;
    mg_buf_init(&sql);
    if (bucket_fmt)
        /* the last sample of each bucket: the bare columns of max() are its row's */
        mg_buf_printf(&sql,
                      "SELECT strftime('%s', timestamp) AS bucket, " SERIES_COLUMNS
                      ", max(timestamp) FROM observer_metrics WHERE observer_id = ?1"
                      " AND timestamp >= ?2%s GROUP BY bucket ORDER BY bucket",
                      bucket_fmt, p->until ? " AND timestamp <= ?3" : "");
    else
        mg_buf_printf(&sql,
                      "SELECT timestamp, " SERIES_COLUMNS " FROM observer_metrics"
                      " WHERE observer_id = ?1 AND timestamp >= ?2%s ORDER BY timestamp",
                      p->until ? " AND timestamp <= ?3" : "");
    if (sql.failed) {
        mg_buf_free(&sql);
        mg_response_error(res, 500, "out of memory");
        return MG_DONE;
    }
    sqlite3_stmt *st = metrics_prepare(env->db, mg_buf_cstr(&sql), res);
    mg_buf_free(&sql);
    if (!st)
        return MG_DONE;
    sqlite3_bind_text(st, 1, req->path_param, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, p->since ? p->since : since, -1, SQLITE_STATIC);
    if (p->until)
        sqlite3_bind_text(st, 3, p->until, -1, SQLITE_STATIC);

    mg_response_json(res, 200);
    struct mg_json j;
    mg_json_init(&j, &res->body);
    struct mg_buf reboots;
    mg_buf_init(&reboots);
    struct mg_json rj;
    mg_json_init(&rj, &reboots);
    mg_json_array_begin(&rj);
    mg_json_object_begin(&j); /* a map: Go writes its keys sorted */
    mg_json_key(&j, "metrics");
    mg_json_array_begin(&j);
    struct counters prev = {0}, cur;
    bool first = true;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        read_counters(st, &cur);
        mg_json_object_begin(&j); /* CoreScope's order */
        mg_json_key(&j, "timestamp");
        mg_db_json_column(&j, st, R_TS);
        mg_json_key(&j, "noise_floor");
        mg_db_json_column(&j, st, R_NOISE);
        mg_json_key(&j, "battery_mv");
        mg_db_json_column(&j, st, R_BATTERY);
        double interval_s = 0;
        bool deltas = !first && cur.timed && prev.timed;
        if (deltas) {
            interval_s = (double)(cur.ms - prev.ms) / 1000.0;
            deltas = interval_s > 0 && interval_s <= 2.0 * bucket_s;
        }
        bool reboot = false;
        if (deltas)
            for (int k = R_TX_AIR; k < R_COLS; k++)
                if (k != R_BATTERY && went_down(&cur, &prev, k))
                    reboot = true;
        if (deltas && !reboot) {
            write_airtime(&j, "tx_airtime_pct", &cur, &prev, R_TX_AIR, interval_s);
            write_airtime(&j, "rx_airtime_pct", &cur, &prev, R_RX_AIR, interval_s);
            mg_json_key(&j, "recv_error_rate");
            double errors = 0, total = 0;
            if (cur.has[R_ERRORS] && prev.has[R_ERRORS] && cur.has[R_RECV] && prev.has[R_RECV]) {
                errors = (double)(cur.v[R_ERRORS] - prev.v[R_ERRORS]);
                total = (double)(cur.v[R_RECV] - prev.v[R_RECV]) + errors;
            }
            if (total > 0)
                mg_json_double(&j, round(errors / total * 100.0 * 100) / 100);
            else
                mg_json_null(&j);
        } else {
            mg_json_kv_null(&j, "tx_airtime_pct");
            mg_json_kv_null(&j, "rx_airtime_pct");
            mg_json_kv_null(&j, "recv_error_rate");
        }
        if (reboot) {
            mg_json_kv_bool(&j, "is_reboot_sample", true);
            mg_db_json_column(&rj, st, R_TS);
        }
        mg_json_object_end(&j);
        prev = cur;
        first = false;
    }
    sqlite3_finalize(st);
    mg_json_array_end(&j);
    mg_json_array_end(&rj);
    if (rc == SQLITE_DONE) {
        mg_json_kv_string(&j, "observer_id", req->path_param);
        mg_json_key(&j, "observer_name");
        /* CoreScope's GetObserverByID: no row, a row whose packet_count it cannot read, or a
         * failed read are all a null name */
        sqlite3_stmt *name = NULL;
        if (sqlite3_prepare_v3(env->db->conn,
                               "SELECT name FROM observers WHERE id = ?1"
                               " AND packet_count IS NOT NULL",
                               -1, 0, &name, NULL) == SQLITE_OK) {
            sqlite3_bind_text(name, 1, req->path_param, -1, SQLITE_STATIC);
            if (sqlite3_step(name) == SQLITE_ROW)
                mg_db_json_column(&j, name, 0);
            else
                mg_json_null(&j);
        } else {
            mg_json_null(&j);
        }
        sqlite3_finalize(name);
        mg_json_key(&j, "reboots");
        mg_json_raw(&j, mg_buf_cstr(&reboots), reboots.len);
    }
    mg_buf_free(&reboots);
    mg_json_object_end(&j);
    mg_buf_putc(&res->body, '\n');
    if (rc != SQLITE_DONE)
        metrics_failed(env->db, res, rc);
    return MG_DONE;
}

/* ---- /api/nodes/{pubkey}/battery ------------------------------------------------------- */

#define BATTERY_DAYS_DEFAULT 7
#define BATTERY_DAYS_MAX 365

struct battery_params {
    const char *days;
};
static const struct mg_param battery_param_list[] = {
    {.name = "days",
     .kind = MG_PARAM_TEXT,
     .offset = offsetof(struct battery_params, days),
     .corescope = "strconv.Atoi; 1..365, anything else (missing, malformed, 0, 366): 7 "
                  "(read in the handler: not clamped)"},
};
const struct mg_param_table mg_node_battery_params =
    MG_PARAM_TABLE(struct battery_params, battery_param_list);

/* Each distinct observer id (a skip through the primary key), then the samples of those that
 * are the key in any case. */
static const char battery_sql[] =
    "WITH RECURSIVE ids(id) AS (SELECT min(observer_id) FROM observer_metrics"
    " UNION ALL SELECT (SELECT min(x.observer_id) FROM observer_metrics x"
    " WHERE x.observer_id > ids.id) FROM ids WHERE ids.id IS NOT NULL)"
    " SELECT m.timestamp, m.battery_mv FROM ids JOIN observer_metrics m ON m.observer_id = ids.id"
    " WHERE lower(ids.id) = ?1 AND m.battery_mv IS NOT NULL AND m.timestamp >= ?2"
    " ORDER BY m.timestamp";

enum mg_turn mg_handle_node_battery(struct mg_env *env, const struct mg_request *req,
                                    struct mg_response *res)
{
    struct battery_params own;
    const struct battery_params *p = mg_params_get(&mg_node_battery_params, req, res, &own);
    if (!p)
        return MG_DONE;
    sqlite3_stmt *node = metrics_prepare(env->db, "SELECT 1 FROM nodes WHERE public_key = ?1", res);
    if (!node)
        return MG_DONE;
    sqlite3_bind_text(node, 1, req->path_param, -1, SQLITE_STATIC);
    int rc = sqlite3_step(node);
    sqlite3_finalize(node);
    if (rc == SQLITE_DONE) {
        mg_response_error(res, 404, "node not found");
        return MG_DONE;
    }
    if (rc != SQLITE_ROW) {
        metrics_failed(env->db, res, rc);
        return MG_DONE;
    }
    int64_t days = BATTERY_DAYS_DEFAULT, d;
    if (p->days && mg_parse_atoi(p->days, &d) && d > 0 && d <= BATTERY_DAYS_MAX)
        days = d;
    char since[48];
    rfc3339_from_now(-days * DAY_NS, since, sizeof since);
    char key[MG_PATH_PARAM_MAX];
    size_t n = strlen(req->path_param);
    for (size_t i = 0; i <= n; i++) {
        char c = req->path_param[i];
        key[i] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
    }
    sqlite3_stmt *st = metrics_prepare(env->db, battery_sql, res);
    if (!st)
        return MG_DONE;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, since, -1, SQLITE_STATIC);
    const struct mg_corescope_config *cs = mg_corescope_current();
    int64_t low = cs->battery_low_mv > 0 ? cs->battery_low_mv : 3300;
    int64_t critical = cs->battery_critical_mv > 0 ? cs->battery_critical_mv : 3000;

    mg_response_json(res, 200);
    struct mg_json j;
    mg_json_init(&j, &res->body);
    mg_json_object_begin(&j); /* a map: Go writes its keys sorted */
    mg_json_kv_int(&j, "days", days);
    /* latest_mv and latest_ts come before the samples: they are kept aside until the end */
    struct mg_buf samples;
    mg_buf_init(&samples);
    struct mg_json sj;
    mg_json_init(&sj, &samples);
    mg_json_array_begin(&sj);
    bool any = false;
    int64_t latest_mv = 0;
    char latest_ts[64] = "";
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *ts = (const char *)sqlite3_column_text(st, 0);
        latest_mv = sqlite3_column_int64(st, 1);
        snprintf(latest_ts, sizeof latest_ts, "%s", ts ? ts : "");
        any = true;
        mg_json_object_begin(&sj); /* CoreScope's order */
        mg_json_kv_string(&sj, "timestamp", ts ? ts : "");
        mg_json_kv_int(&sj, "battery_mv", latest_mv);
        mg_json_object_end(&sj);
    }
    sqlite3_finalize(st);
    mg_json_array_end(&sj);
    if (any) {
        mg_json_kv_int(&j, "latest_mv", latest_mv);
        mg_json_kv_string(&j, "latest_ts", latest_ts);
    } else {
        mg_json_kv_null(&j, "latest_mv");
        mg_json_kv_null(&j, "latest_ts");
    }
    mg_json_kv_string(&j, "public_key", key);
    mg_json_key(&j, "samples");
    mg_json_raw(&j, mg_buf_cstr(&samples), samples.len);
    mg_buf_free(&samples);
    mg_json_kv_string(&j, "status",
                      !any                   ? "unknown"
                      : latest_mv < critical ? "critical"
                      : latest_mv < low      ? "low"
                                             : "ok");
    mg_json_key(&j, "thresholds");
    mg_json_object_begin(&j);
    mg_json_kv_int(&j, "critical_mv", critical);
    mg_json_kv_int(&j, "low_mv", low);
    mg_json_object_end(&j);
    mg_json_object_end(&j);
    mg_buf_putc(&res->body, '\n');
    if (rc != SQLITE_DONE)
        metrics_failed(env->db, res, rc);
    return MG_DONE;
}

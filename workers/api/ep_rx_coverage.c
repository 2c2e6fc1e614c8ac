/* SPDX-License-Identifier: ISC */
/*
 * CoreScope's opt-in mobile RX coverage (clientRxCoverage.enabled in its config.json,
 * MESHGATE_CORESCOPE_CONFIG): receptions that companions with a GPS report, in the tables its
 * ingestor writes when the feature is on, client_receptions (rx_pubkey, heard_key, lat, lon,
 * snr, rssi, rx_at) and client_observers (pubkey, name).
 *
 *   GET /api/nodes/{pubkey}/rx-coverage?bbox=&z=   where the node was heard: the receptions
 *                                                  whose heard_key is its key or its 2- or
 *                                                  3-byte prefix, inside the box
 *   GET /api/rx-coverage?bbox=&z=&days=&node=&rx=  every reception inside the box over the
 *                                                  last `days`, of one node, one companion
 *   GET /api/rx-leaderboard?days=&limit=           the companions ranked by the cells only
 *                                                  they reached
 *
 * As CoreScope's server: with the feature off each answers 404 "404 page not found"
 * (text/plain) whatever its parameters; a bbox that is not four numbers is 400 "bbox required
 * as minLat,minLon,maxLat,maxLon"; a {pubkey} not 64 hex digits (lowercased) is 400 "invalid
 * pubkey: expected 64 hex chars"; a database without the tables is 500 "query failed" (all
 * text/plain, "\n"-ended). z: Atoi, else 0, clamped to 3..18 (the hex resolution); days:
 * Atoi of the trimmed value, else 7, clamped to 1..30; limit: else 20, and 20 outside 1..100.
 *
 * The coverage is a GeoJSON FeatureCollection of pointy-top hexagons on Web Mercator, whose
 * size halves with each zoom level (cell ids "res:q:r", axial coordinates): per cell the
 * receptions, the best SNR, and the nodes heard there (each heard_key resolved to the one
 * visible node whose key starts with it, else kept as heard), strongest latest SNR first, at
 * most 25; at most 5000 cells (the most receptions), in cell-id order. The node's answer adds
 * its receptions and companions everywhere (mobile_receptions, mobile_clients).
 *
 * The leaderboard reads the window's newest 500 000 receptions: per companion its receptions,
 * distinct heard keys, distinct cells at resolution 13, and the score, each of its cells
 * weighing 1 / (companions not blacklisted that reached it); highest score first (then
 * receptions, then key), observer-blacklisted companions left out, blacklisted or hidden
 * names blanked. It is a cold report (cold_report.h), shared by the group; the coverage maps
 * depend on the view's box and are heavy requests. With the feature off all three are a
 * constant 404 (the front end then asks none of them), classed heavy all the same.
 *
 * Differences from CoreScope: a cell's corners come from the C library's tan, atan, log and
 * exp, which may differ from Go's in the last bit of a coordinate; a score is summed in cell
 * order (CoreScope's in a Go map's).
 */
#include "buf.h"
#include "cold_report.h"
#include "corescope_config.h"
#include "hexgrid.h"
#include "json.h"
#include "node_visibility.h"
#include "params.h"
#include "router.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FEATURE_CAP 5000
#define CELL_NODE_CAP 25
#define LEADERBOARD_RES 13
#define LEADERBOARD_SCAN_CAP 500000
/* Go's strconv.Atoi of the value (trimmed when trim), else def. */
static int64_t atoi_default(const struct mg_request *req, const char *name, bool trim, int64_t def)
{
    const char *v = mg_param_str(req, name);
    char text[32];
    if (!v)
        return def;
    size_t len = strlen(v);
    if (trim) {
        while (len && isspace((unsigned char)*v))
            v++, len--;
        while (len && isspace((unsigned char)v[len - 1]))
            len--;
    }
    if (len == 0 || len >= sizeof text)
        return def;
    memcpy(text, v, len);
    text[len] = '\0';
    int64_t n;
    return mg_parse_atoi(text, &n) ? n : def;
}

static int clamp_days(int64_t d)
{
    return d < 1 ? 1 : d > 30 ? 30 : (int)d;
}

static int zoom_res(const struct mg_request *req)
{
    int64_t z = atoi_default(req, "z", false, 0);
    return z < 3 ? 3 : z > 18 ? 18 : (int)z;
}

/*
 * The tables (params.h). Every value is read as CoreScope reads it, in the handler: with the
 * feature off none is looked at (404), and bbox's 400 comes after the key's.
 */
struct rx_params {
    const char *bbox, *z, *days, *node, *rx, *limit;
};
#define RX_TEXT(field, what)                                                                       \
    {                                                                                              \
        .name = #field, .kind = MG_PARAM_TEXT, .offset = offsetof(struct rx_params, field),        \
        .corescope = what                                                                          \
    }
#define RX_BBOX RX_TEXT(bbox, "four numbers minLat,minLon,maxLat,maxLon (ParseFloat), else 400")
#define RX_Z RX_TEXT(z, "Atoi, else 0; clamped to 3..18 (the hex resolution)")
#define RX_DAYS RX_TEXT(days, "Atoi of the trimmed value, else 7; clampDays: 1..30")
static const struct mg_param node_rx_list[] = {RX_BBOX, RX_Z};
static const struct mg_param rx_list[] = {
    RX_BBOX, RX_Z, RX_DAYS, RX_TEXT(node, "a key or prefix: its 64, 6 and 4 first digits"),
    RX_TEXT(rx, "a companion's key, lowercased")};
static const struct mg_param leaderboard_list[] = {
    RX_DAYS, RX_TEXT(limit, "Atoi of the trimmed value, else 20; outside 1..100: 20")};
const struct mg_param_table mg_node_rx_coverage_params =
    MG_PARAM_TABLE(struct rx_params, node_rx_list);
const struct mg_param_table mg_rx_coverage_params = MG_PARAM_TABLE(struct rx_params, rx_list);
const struct mg_param_table mg_rx_leaderboard_params =
    MG_PARAM_TABLE(struct rx_params, leaderboard_list);

/* CoreScope's http.Error / http.NotFound: a text line. */
static void plain(struct mg_response *res, int status, const char *text)
{
    mg_response_reset(res);
    res->status = status;
    res->content_type = "text/plain; charset=utf-8";
    mg_response_header(res, "X-Content-Type-Options: nosniff");
    mg_buf_puts(&res->body, text);
    mg_buf_putc(&res->body, '\n');
}

bool mg_rx_coverage_served(void)
{
    return mg_corescope_current()->client_rx_coverage;
}

static bool enabled(struct mg_response *res)
{
    if (mg_rx_coverage_served())
        return true;
    plain(res, 404, "404 page not found");
    return false;
}

/* ---- the coverage -------------------------------------------------------------------------- */

struct row {
    double lat, lon, snr;
    bool has_snr;
    char *heard; /* lowercased; "" for none */
    char *rx_at; /* "" for none */
    struct mg_hex_cell cell;
    char id[48]; /* "res:q:r" */
    size_t order;
};

struct resolved {
    char *heard, *key, *name; /* key: the node's, else heard; name "" when unknown */
};

struct rows {
    struct row *r;
    size_t n, cap;
    struct resolved *res;
    size_t n_res;
};

static void rows_free(struct rows *rs)
{
    for (size_t i = 0; i < rs->n; i++)
        free(rs->r[i].heard), free(rs->r[i].rx_at);
    for (size_t i = 0; i < rs->n_res; i++)
        free(rs->res[i].heard), free(rs->res[i].key), free(rs->res[i].name);
    free(rs->r);
    free(rs->res);
}

static char *lower_dup(const unsigned char *t)
{
    char *s = strdup(t ? (const char *)t : "");
    for (char *c = s; c && *c; c++)
        *c = (char)tolower((unsigned char)*c);
    return s;
}

/* Reads (lat, lon, snr, rssi, heard_key, rx_at) rows; SQLITE_MISMATCH for a NULL position
 * (CoreScope's scan fails on it). */
static int read_rows(sqlite3_stmt *st, struct rows *rs, int res)
{
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (sqlite3_column_type(st, 0) == SQLITE_NULL || sqlite3_column_type(st, 1) == SQLITE_NULL)
            return SQLITE_MISMATCH;
        if (rs->n == rs->cap) {
            size_t cap = rs->cap ? rs->cap * 2 : 256;
            struct row *more = realloc(rs->r, cap * sizeof *more);
            if (!more)
                return SQLITE_NOMEM;
            rs->r = more, rs->cap = cap;
        }
        struct row *r = &rs->r[rs->n];
        r->lat = sqlite3_column_double(st, 0);
        r->lon = sqlite3_column_double(st, 1);
        r->has_snr = sqlite3_column_type(st, 2) != SQLITE_NULL;
        r->snr = sqlite3_column_double(st, 2);
        r->heard = lower_dup(sqlite3_column_text(st, 4));
        const unsigned char *at = sqlite3_column_text(st, 5);
        r->rx_at = strdup(at ? (const char *)at : "");
        r->cell = mg_hex_cell_at(r->lat, r->lon, res);
        mg_hex_cell_id(&r->cell, r->id, sizeof r->id);
        r->order = rs->n++;
        if (!r->heard || !r->rx_at)
            return SQLITE_NOMEM;
    }
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int by_heard(const void *a, const void *b)
{
    return strcmp(((const struct resolved *)a)->heard, ((const struct resolved *)b)->heard);
}

static bool lower_hex(const char *s, size_t min, size_t max)
{
    size_t n = strlen(s);
    if (n < min || n > max)
        return false;
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
            return false;
    return true;
}

/* Each distinct heard key to the one visible node whose key starts with it, else itself. */
static int resolve(struct mg_db *db, struct rows *rs)
{
    rs->res = calloc(rs->n ? rs->n : 1, sizeof *rs->res);
    if (!rs->res)
        return SQLITE_NOMEM;
    for (size_t i = 0; i < rs->n; i++)
        if (*rs->r[i].heard)
            rs->res[rs->n_res++].heard = rs->r[i].heard;
    qsort(rs->res, rs->n_res, sizeof *rs->res, by_heard);
    size_t m = 0;
    for (size_t i = 0; i < rs->n_res; i++)
        if (!m || strcmp(rs->res[m - 1].heard, rs->res[i].heard) != 0)
            rs->res[m++].heard = rs->res[i].heard;
    rs->n_res = m;
    sqlite3_stmt *st = mg_db_prepare(db, "SELECT public_key, coalesce(name, '') FROM nodes"
                                         " WHERE public_key LIKE ?1 || '%' LIMIT 2");
    if (!st) {
        rs->n_res = 0;
        return SQLITE_ERROR;
    }
    int rc = SQLITE_OK;
    for (size_t i = 0; i < rs->n_res && rc == SQLITE_OK; i++) {
        struct resolved *v = &rs->res[i];
        const char *heard = v->heard;
        v->heard = strdup(heard);
        char *key = NULL, *name = NULL;
        int found = 0;
        if (lower_hex(heard, 2, 64)) {
            sqlite3_bind_text(st, 1, heard, -1, SQLITE_TRANSIENT);
            while ((rc = sqlite3_step(st)) == SQLITE_ROW && ++found == 1) {
                key = strdup((const char *)sqlite3_column_text(st, 0));
                name = strdup((const char *)sqlite3_column_text(st, 1));
            }
            rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
            sqlite3_reset(st);
        }
        if (found == 1 && key && name && !mg_node_hidden(key, name)) {
            v->key = key, v->name = name;
        } else {
            free(key), free(name);
            v->key = strdup(heard), v->name = strdup("");
        }
        if (!v->heard || !v->key || !v->name)
            rc = SQLITE_NOMEM;
    }
    sqlite3_finalize(st);
    return rc;
}

static const struct resolved *resolved_of(const struct rows *rs, const char *heard)
{
    struct resolved probe = {.heard = (char *)heard};
    return rs->n_res ? bsearch(&probe, rs->res, rs->n_res, sizeof *rs->res, by_heard) : NULL;
}

/* Rows by cell id, then as read. */
static int by_cell(const void *a, const void *b)
{
    const struct row *x = a, *y = b;
    int c = strcmp(x->id, y->id);
    if (c)
        return c;
    return x->order < y->order ? -1 : x->order > y->order;
}

struct heard_node {
    const char *key, *name, *prefix, *latest_at;
    size_t name_key_len;
    int64_t count;
    bool has_snr;
    double snr;
};

/* Strongest latest SNR first (none last), then most receptions, then prefix. */
static int by_signal(const void *a, const void *b)
{
    const struct heard_node *x = a, *y = b;
    if (x->has_snr != y->has_snr)
        return x->has_snr ? -1 : 1;
    if (x->has_snr && x->snr != y->snr)
        return x->snr > y->snr ? -1 : 1;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return strcmp(x->prefix, y->prefix);
}

struct feature {
    size_t first, end; /* its rows */
    int64_t count;
    const char *id;
};

/* The most receptions first, then by cell id. */
static int by_density(const void *a, const void *b)
{
    const struct feature *x = a, *y = b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return strcmp(x->id, y->id);
}

static int by_first(const void *a, const void *b)
{
    const struct feature *x = a, *y = b;
    return x->first < y->first ? -1 : x->first > y->first;
}

/* One cell's feature, from rows [first, end). False when out of memory. */
static bool write_feature(struct mg_json *j, const struct rows *rs, size_t first, size_t end)
{
    const struct row *r = rs->r;
    struct heard_node *nodes = calloc(end - first, sizeof *nodes);
    if (!nodes)
        return false;
    size_t n = 0;
    bool has_sig = false;
    double best = 0;
    for (size_t i = first; i < end; i++) {
        if (r[i].has_snr && (!has_sig || r[i].snr > best))
            best = r[i].snr;
        has_sig |= r[i].has_snr;
        if (!*r[i].heard)
            continue;
        const struct resolved *v = resolved_of(rs, r[i].heard);
        const char *key = v ? v->key : r[i].heard, *name = v ? v->name : "";
        size_t k = 0;
        while (k < n && strcmp(nodes[k].key, key) != 0)
            k++;
        struct heard_node *h = &nodes[k];
        if (k == n)
            *h = (struct heard_node){.key = key, .name = "", .prefix = r[i].heard, .latest_at = ""},
            n++;
        size_t len = strlen(r[i].heard);
        if (*name && (!*h->name || len > h->name_key_len ||
                      (len == h->name_key_len && strcmp(name, h->name) < 0)))
            h->name = name, h->name_key_len = len;
        if (len > strlen(h->prefix) ||
            (len == strlen(h->prefix) && strcmp(r[i].heard, h->prefix) < 0))
            h->prefix = r[i].heard;
        h->count++;
        if (strcmp(r[i].rx_at, h->latest_at) >= 0)
            h->latest_at = r[i].rx_at, h->has_snr = r[i].has_snr, h->snr = r[i].snr;
    }
    qsort(nodes, n, sizeof *nodes, by_signal);
    mg_json_object_begin(j);
    mg_json_kv_string(j, "type", "Feature");
    mg_json_key(j, "geometry");
    mg_json_object_begin(j);
    mg_json_kv_string(j, "type", "Polygon");
    mg_json_key(j, "coordinates");
    mg_json_array_begin(j);
    mg_hex_write_ring(j, &r[first].cell);
    mg_json_array_end(j);
    mg_json_object_end(j);
    mg_json_key(j, "properties");
    mg_json_object_begin(j);
    mg_json_kv_string(j, "cell", r[first].id);
    mg_json_kv_int(j, "count", (int64_t)(end - first));
    mg_json_key(j, "best_snr");
    if (has_sig)
        mg_json_double(j, best);
    else
        mg_json_null(j);
    mg_json_kv_bool(j, "has_sig", has_sig);
    mg_json_key(j, "nodes");
    mg_json_array_begin(j);
    for (size_t k = 0; k < n && k < CELL_NODE_CAP; k++) {
        mg_json_object_begin(j);
        mg_json_kv_string(j, "prefix", nodes[k].prefix);
        if (*nodes[k].name)
            mg_json_kv_string(j, "name", nodes[k].name);
        mg_json_key(j, "snr");
        if (nodes[k].has_snr)
            mg_json_double(j, nodes[k].snr);
        else
            mg_json_null(j);
        mg_json_kv_int(j, "count", nodes[k].count);
        mg_json_object_end(j);
    }
    mg_json_array_end(j);
    if (n > CELL_NODE_CAP)
        mg_json_kv_bool(j, "nodes_truncated", true);
    mg_json_object_end(j);
    mg_json_object_end(j);
    free(nodes);
    return true;
}

/* The collection of rs's cells into j, left open for the node's totals. */
static bool write_cells(struct mg_json *j, struct rows *rs)
{
    if (rs->n > 1)
        qsort(rs->r, rs->n, sizeof *rs->r, by_cell);
    struct feature *f = calloc(rs->n ? rs->n : 1, sizeof *f);
    if (!f)
        return false;
    size_t n = 0;
    for (size_t i = 0; i < rs->n; i++) {
        if (n && strcmp(f[n - 1].id, rs->r[i].id) == 0) {
            f[n - 1].end = i + 1, f[n - 1].count++;
            continue;
        }
        f[n++] = (struct feature){i, i + 1, 1, rs->r[i].id};
    }
    bool truncated = n > FEATURE_CAP;
    if (truncated) {
        qsort(f, n, sizeof *f, by_density);
        n = FEATURE_CAP;
        qsort(f, n, sizeof *f, by_first); /* back in cell order */
    }
    mg_json_object_begin(j);
    mg_json_kv_string(j, "type", "FeatureCollection");
    mg_json_key(j, "features");
    mg_json_array_begin(j);
    bool ok = true;
    for (size_t i = 0; ok && i < n; i++)
        ok = write_feature(j, rs, f[i].first, f[i].end);
    mg_json_array_end(j);
    if (truncated)
        mg_json_kv_bool(j, "truncated", true);
    free(f);
    return ok;
}

/* Binds the heard_key values of a node (not empty) to ?first..?first+2: its key lowercased,
 * and its first 6 and 4 digits (the key again where it is shorter). */
static void bind_candidates(sqlite3_stmt *st, int first, const char *node)
{
    char *key = lower_dup((const unsigned char *)node);
    size_t len = key ? strlen(key) : 0;
    sqlite3_bind_text(st, first, key ? key : "", -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, first + 1, key ? key : "", len >= 6 ? 6 : -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, first + 2, key ? key : "", len >= 4 ? 4 : -1, SQLITE_TRANSIENT);
    free(key);
}

/* Runs the query (its placeholders bound by the caller) and writes the collection. */
static int coverage(struct mg_db *db, sqlite3_stmt *st, int res, struct mg_json *j)
{
    struct rows rs = {0};
    int rc = read_rows(st, &rs, res);
    if (rc == SQLITE_OK)
        rc = resolve(db, &rs);
    if (rc == SQLITE_OK && !write_cells(j, &rs))
        rc = SQLITE_NOMEM;
    rows_free(&rs);
    return rc;
}

static const char coverage_select[] =
    "SELECT lat, lon, snr, rssi, heard_key, rx_at FROM client_receptions WHERE ";

/* The answer's end: "}\n", or 500 "query failed" for a failed query. */
static void finish(struct mg_response *res, int rc)
{
    if (rc != SQLITE_OK) {
        plain(res, 500, "query failed");
        return;
    }
    mg_buf_puts(&res->body, "}\n");
}

enum mg_turn mg_handle_node_rx_coverage(struct mg_env *env, const struct mg_request *req,
                                        struct mg_response *res)
{
    if (!enabled(res))
        return MG_DONE;
    char pubkey[MG_PATH_PARAM_MAX];
    snprintf(pubkey, sizeof pubkey, "%s", req->path_param);
    for (char *c = pubkey; *c; c++)
        *c = (char)tolower((unsigned char)*c);
    if (!lower_hex(pubkey, 64, 64)) {
        plain(res, 400, "invalid pubkey: expected 64 hex chars");
        return MG_DONE;
    }
    if (mg_node_hidden(pubkey, NULL)) { /* by name: the router's guard */
        plain(res, 404, "404 page not found");
        return MG_DONE;
    }
    double b[4]; /* minLat, minLon, maxLat, maxLon */
    if (!mg_hex_parse_bbox(mg_param_str(req, "bbox"), b)) {
        plain(res, 400, "bbox required as minLat,minLon,maxLat,maxLon");
        return MG_DONE;
    }
    struct mg_buf sql;
    mg_buf_init(&sql);
    mg_buf_puts(&sql, coverage_select);
    mg_buf_puts(&sql, "heard_key IN (?1, ?2, ?3) AND lat BETWEEN ?4 AND ?5 AND lon BETWEEN ?6 AND"
                      " ?7");
    sqlite3_stmt *st = sql.failed ? NULL : mg_db_prepare(env->db, mg_buf_cstr(&sql));
    mg_buf_free(&sql);
    sqlite3_stmt *stats =
        st ? mg_db_prepare(env->db, "SELECT count(*), count(DISTINCT rx_pubkey) FROM"
                                    " client_receptions WHERE heard_key IN (?1, ?2, ?3)")
           : NULL;
    int rc = stats ? SQLITE_OK : SQLITE_ERROR;
    if (rc != SQLITE_OK) { /* no client_receptions: CoreScope's query fails too */
        sqlite3_finalize(st);
        finish(res, rc);
        return MG_DONE;
    }
    bind_candidates(st, 1, pubkey);
    bind_candidates(stats, 1, pubkey);
    sqlite3_bind_double(st, 4, b[0]);
    sqlite3_bind_double(st, 5, b[2]);
    sqlite3_bind_double(st, 6, b[1]);
    sqlite3_bind_double(st, 7, b[3]);
    mg_response_json(res, 200);
    struct mg_json j;
    mg_json_init(&j, &res->body);
    rc = coverage(env->db, st, zoom_res(req), &j);
    if (rc == SQLITE_OK && sqlite3_step(stats) == SQLITE_ROW) {
        /* omitted when 0, as CoreScope's omitempty; a failure here reads as 0 there too */
        int64_t count = sqlite3_column_int64(stats, 0), clients = sqlite3_column_int64(stats, 1);
        if (count)
            mg_json_kv_int(&j, "mobile_receptions", count);
        if (clients)
            mg_json_kv_int(&j, "mobile_clients", clients);
    }
    finish(res, rc); /* closes the collection */
    sqlite3_finalize(st);
    sqlite3_finalize(stats);
    return MG_DONE;
}

enum mg_turn mg_handle_rx_coverage(struct mg_env *env, const struct mg_request *req,
                                   struct mg_response *res)
{
    if (!enabled(res))
        return MG_DONE;
    double b[4]; /* minLat, minLon, maxLat, maxLon */
    if (!mg_hex_parse_bbox(mg_param_str(req, "bbox"), b)) {
        plain(res, 400, "bbox required as minLat,minLon,maxLat,maxLon");
        return MG_DONE;
    }
    int days = clamp_days(atoi_default(req, "days", true, 7));
    const char *node = mg_param_str(req, "node"), *rx = mg_param_str(req, "rx");
    struct mg_buf sql;
    mg_buf_init(&sql);
    mg_buf_puts(&sql, coverage_select);
    mg_buf_puts(&sql, "lat BETWEEN ?1 AND ?2 AND lon BETWEEN ?3 AND ?4");
    if (node)
        mg_buf_puts(&sql, " AND heard_key IN (?5, ?6, ?7)");
    if (rx)
        mg_buf_puts(&sql, " AND rx_pubkey = ?8");
    mg_buf_puts(&sql, " AND rx_at >= ?9");
    sqlite3_stmt *st = sql.failed ? NULL : mg_db_prepare(env->db, mg_buf_cstr(&sql));
    mg_buf_free(&sql);
    if (!st) { /* no client_receptions: CoreScope's query fails too */
        finish(res, SQLITE_ERROR);
        return MG_DONE;
    }
    sqlite3_bind_double(st, 1, b[0]);
    sqlite3_bind_double(st, 2, b[2]);
    sqlite3_bind_double(st, 3, b[1]);
    sqlite3_bind_double(st, 4, b[3]);
    if (node)
        bind_candidates(st, 5, node);
    if (rx) {
        char *lower = lower_dup((const unsigned char *)rx);
        sqlite3_bind_text(st, 8, lower ? lower : "", -1, SQLITE_TRANSIENT);
        free(lower);
    }
    char since[32];
    time_t t = (time_t)(req->start_realtime_ns / 1000000000LL) - (time_t)days * 86400;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(since, sizeof since, "%Y-%m-%dT%H:%M:%SZ", &tm);
    sqlite3_bind_text(st, 9, since, -1, SQLITE_TRANSIENT);
    mg_response_json(res, 200);
    struct mg_json j;
    mg_json_init(&j, &res->body);
    int rc = coverage(env->db, st, zoom_res(req), &j);
    finish(res, rc);
    sqlite3_finalize(st);
    return MG_DONE;
}

/* ---- the leaderboard ------------------------------------------------------------------------ */

struct lb_row {
    char *pk, *name, *heard;
    struct mg_hex_cell cell;
};

struct lb_entry {
    const char *pk, *name;
    int64_t receptions, nodes, cells;
    double score;
};

static int lb_by_pk_cell(const void *a, const void *b)
{
    const struct lb_row *x = a, *y = b;
    int c = strcmp(x->pk, y->pk);
    if (c)
        return c;
    if (x->cell.q != y->cell.q)
        return x->cell.q < y->cell.q ? -1 : 1;
    return x->cell.r < y->cell.r ? -1 : x->cell.r > y->cell.r;
}

static int lb_by_cell_pk(const void *a, const void *b)
{
    const struct lb_row *x = *(const struct lb_row *const *)a,
                        *y = *(const struct lb_row *const *)b;
    if (x->cell.q != y->cell.q)
        return x->cell.q < y->cell.q ? -1 : 1;
    if (x->cell.r != y->cell.r)
        return x->cell.r < y->cell.r ? -1 : 1;
    return strcmp(x->pk, y->pk);
}

static int by_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int lb_rank(const void *a, const void *b)
{
    const struct lb_entry *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    if (x->receptions != y->receptions)
        return x->receptions > y->receptions ? -1 : 1;
    return strcmp(x->pk, y->pk);
}

struct lb_args {
    int days, limit;
};

static const char lb_sql[] =
    "SELECT cr.rx_pubkey, coalesce(nullif(n.name, ''), nullif(co.name, ''), ''), cr.lat, cr.lon,"
    " cr.heard_key, cr.rx_at FROM client_receptions cr"
    " LEFT JOIN nodes n ON n.public_key = cr.rx_pubkey"
    " LEFT JOIN client_observers co ON co.pubkey = cr.rx_pubkey"
    " WHERE cr.rx_at >= ?1 ORDER BY cr.rx_at DESC LIMIT ?2";

static int lb_read(struct mg_db *db, const char *since, struct lb_row **out, size_t *n)
{
    sqlite3_stmt *st = mg_db_prepare(db, lb_sql);
    if (!st)
        return SQLITE_ERROR;
    sqlite3_bind_text(st, 1, since, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 2, LEADERBOARD_SCAN_CAP);
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        /* CoreScope scans these into strings and numbers: a NULL fails its query */
        for (int c = 0; c < 5; c++)
            if (sqlite3_column_type(st, c) == SQLITE_NULL)
                rc = SQLITE_MISMATCH;
        if (rc != SQLITE_ROW)
            break;
        if (*n == cap) {
            cap = cap ? cap * 2 : 1024;
            struct lb_row *more = realloc(*out, cap * sizeof *more);
            if (!more) {
                rc = SQLITE_NOMEM;
                break;
            }
            *out = more;
        }
        struct lb_row *r = &(*out)[(*n)++];
        r->pk = strdup((const char *)sqlite3_column_text(st, 0));
        r->name = strdup((const char *)sqlite3_column_text(st, 1));
        r->heard = strdup((const char *)sqlite3_column_text(st, 4));
        r->cell = mg_hex_cell_at(sqlite3_column_double(st, 2), sqlite3_column_double(st, 3),
                                 LEADERBOARD_RES);
        if (!r->pk || !r->name || !r->heard) {
            rc = SQLITE_NOMEM;
            break;
        }
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* Each companion's entry from rows sorted by (pk, cell); an SQLite code. */
static int lb_entries(struct lb_row *r, size_t n, struct lb_entry **out, size_t *n_out)
{
    /* the companions (not blacklisted) that reached each cell */
    struct lb_row **by_cell = malloc((n ? n : 1) * sizeof *by_cell);
    struct lb_entry *e = calloc(n ? n : 1, sizeof *e);
    char **heard = malloc((n ? n : 1) * sizeof *heard);
    if (!by_cell || !e || !heard) {
        free(by_cell), free(e), free(heard);
        return SQLITE_NOMEM;
    }
    for (size_t i = 0; i < n; i++)
        by_cell[i] = &r[i];
    qsort(by_cell, n, sizeof *by_cell, lb_by_cell_pk);
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        /* the rows of one companion: r[i, k) */
        size_t k = i;
        while (k < n && strcmp(r[k].pk, r[i].pk) == 0)
            k++;
        struct lb_entry *x = &e[m++];
        x->pk = r[i].pk;
        x->receptions = (int64_t)(k - i);
        /* its name (from its key: the same on each of its rows) */
        x->name = r[i].name;
        for (size_t h = i; h < k; h++)
            heard[h - i] = r[h].heard;
        qsort(heard, k - i, sizeof *heard, by_str);
        for (size_t h = 0; h < k - i; h++)
            x->nodes += h == 0 || strcmp(heard[h], heard[h - 1]) != 0;
        for (size_t h = i; h < k; h++) {
            if (h > i && r[h].cell.q == r[h - 1].cell.q && r[h].cell.r == r[h - 1].cell.r)
                continue;
            x->cells++;
            /* the companions of this cell, counted in by_cell */
            struct lb_row probe = r[h], *pp = &probe;
            probe.pk = "";
            size_t lo_i = 0, hi_i = n;
            while (lo_i < hi_i) {
                size_t mid = lo_i + (hi_i - lo_i) / 2;
                if (lb_by_cell_pk(&by_cell[mid], &pp) < 0)
                    lo_i = mid + 1;
                else
                    hi_i = mid;
            }
            int64_t count = 0;
            for (size_t c = lo_i;
                 c < n && by_cell[c]->cell.q == r[h].cell.q && by_cell[c]->cell.r == r[h].cell.r;
                 c++) {
                if (c > lo_i && strcmp(by_cell[c]->pk, by_cell[c - 1]->pk) == 0)
                    continue;
                count +=
                    !mg_observer_hidden(by_cell[c]->pk) && !mg_node_hidden(by_cell[c]->pk, NULL);
            }
            if (count > 0)
                x->score += 1.0 / (double)count;
        }
        i = k;
    }
    free(by_cell);
    free(heard);
    qsort(e, m, sizeof *e, lb_rank);
    *out = e;
    *n_out = m;
    return SQLITE_OK;
}

static void lb_build(struct mg_cold_build *b, struct mg_db *db)
{
    const struct lb_args *a = (const struct lb_args *)b->args;
    char since[32];
    time_t t = (time_t)b->now_unix - (time_t)a->days * 86400;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(since, sizeof since, "%Y-%m-%dT%H:%M:%SZ", &tm);
    struct lb_row *r = NULL;
    size_t n = 0, m = 0;
    struct lb_entry *e = NULL;
    int rc = lb_read(db, since, &r, &n);
    if (rc == SQLITE_OK && n > 1)
        qsort(r, n, sizeof *r, lb_by_pk_cell);
    if (rc == SQLITE_OK)
        rc = lb_entries(r, n, &e, &m);
    mg_cold_result(b, rc, "the receptions");
    if (rc == SQLITE_OK) {
        struct mg_json j;
        mg_json_init(&j, &b->body);
        mg_json_object_begin(&j);
        mg_json_kv_int(&j, "days", a->days);
        mg_json_key(&j, "observers");
        mg_json_array_begin(&j);
        int written = 0;
        for (size_t i = 0; i < m && written < a->limit; i++) {
            if (mg_observer_hidden(e[i].pk))
                continue;
            bool blank = mg_node_hidden(e[i].pk, NULL) || mg_node_hidden("", e[i].name);
            mg_json_object_begin(&j);
            mg_json_kv_string(&j, "pubkey", e[i].pk);
            mg_json_kv_string(&j, "name", blank ? "" : e[i].name);
            mg_json_kv_int(&j, "receptions", e[i].receptions);
            mg_json_kv_int(&j, "nodes", e[i].nodes);
            mg_json_kv_int(&j, "cells", e[i].cells);
            mg_json_kv_double(&j, "score", e[i].score);
            mg_json_object_end(&j);
            written++;
        }
        mg_json_array_end(&j);
        mg_json_object_end(&j);
        mg_buf_putc(&b->body, '\n');
    }
    for (size_t i = 0; i < n; i++)
        free(r[i].pk), free(r[i].name), free(r[i].heard);
    free(r);
    free(e);
}

static const struct mg_cold_report leaderboard_report = {
    .name = "rx leaderboard",
    .not_found = "404 page not found",
    .bad_request = "bad request",
    .build = lb_build,
};

/* Whether the database has both tables the leaderboard joins (CoreScope's query fails
 * without them: 500, before any build). */
static bool lb_tables(struct mg_db *db)
{
    sqlite3_stmt *st = mg_db_prepare(db, "SELECT count(*) FROM sqlite_master WHERE type = 'table'"
                                         " AND name IN ('client_receptions', 'client_observers')");
    bool both = st && sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) == 2;
    sqlite3_finalize(st);
    return both;
}

static void lb_args_of(const struct mg_request *req, struct lb_args *a, char *key, size_t cap)
{
    a->days = clamp_days(atoi_default(req, "days", true, 7));
    int64_t limit = atoi_default(req, "limit", true, 20);
    a->limit = limit < 1 || limit > 100 ? 20 : (int)limit;
    snprintf(key, cap, "rx-leaderboard|%d|%d", a->days, a->limit);
}

enum mg_turn mg_handle_rx_leaderboard(struct mg_env *env, const struct mg_request *req,
                                      struct mg_response *res)
{
    if (!enabled(res))
        return MG_DONE;
    if (!lb_tables(env->db)) {
        plain(res, 500, "query failed");
        return MG_DONE;
    }
    struct lb_args a;
    char key[64];
    lb_args_of(req, &a, key, sizeof key);
    return mg_cold_report_serve(env, req, res, &leaderboard_report, key, &a, sizeof a);
}

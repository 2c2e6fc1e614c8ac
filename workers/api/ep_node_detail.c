/* SPDX-License-Identifier: ISC */
/*
 * GET /api/nodes/search and GET /api/nodes/{pubkey}: a node found by name or key, and one
 * node with what its own transmissions say about it.
 *
 * search   `q` trimmed; empty: no nodes. Otherwise the nodes whose name contains it or
 *          whose key starts with it (SQLite LIKE: ASCII case-insensitive, and `%`, `_` are
 *          wildcards, as CoreScope passes them), newest last_seen first, at most 10. One
 *          pass over nodes, as a /api/nodes page.
 * detail   the node by its exact key; else, for 8 to 63 hex digits, the one node whose key
 *          starts with them (409 when two do); else 404. Then, all through
 *          idx_transmissions_from_pubkey (the node's own transmissions only):
 *          - hash_size, hash_size_inconsistent, hash_sizes_seen: from the path byte of its
 *            ADVERTs of the last 7 days (mg_node_hash_sizes);
 *          - multi_byte_status, multi_byte_evidence, multi_byte_max_hash_size: "confirmed",
 *            "advert" when one of those ADVERTs used 2 or more bytes, else the group's table
 *            (node_multibyte.h);
 *          - flood_advert_count_7d: distinct flood ADVERTs (route_type 1) first seen in the
 *            last 7 days, of its newest MG_NODE_FLOOD_ADVERT_ROWS ADVERTs since the day
 *            before;
 *          - recentAdverts: its 20 newest transmissions (by id), each with its observation
 *            count, the fields of its observation with the longest path, and every
 *            observation, newest first.
 * A repeater's or room's relay activity (node_relay.h) and usefulness axes
 * (node_usefulness.h) come from the group's tables, never waited for: until a pass lands, the
 * fields are those of a node with no entry (no relay, axes 0), as CoreScope has them before its
 * own.
 */
#include "ep_node_detail.h"

#include "buf.h"
#include "clock.h"
#include "json.h"
#include "log.h"
#include "node_multibyte.h"
#include "node_read.h"
#include "node_relay.h"
#include "node_row.h"
#include "node_usefulness.h"
#include "params.h"
#include "router.h"
#include "time_parse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SEARCH_LIMIT 10
#define RECENT_ADVERTS 20
#define FLOOD_ADVERT_WINDOW_S (7 * 86400)

/* --- flood ADVERTs ---------------------------------------------------------------------- */

/* The newest flood ADVERTs since the day before the window (a date compares the same in
 * every first_seen format), at most MG_NODE_FLOOD_ADVERT_ROWS; the exact window is checked
 * on the parsed time. */
static const char flood_sql[] =
    "SELECT count(DISTINCT CASE WHEN coalesce(hash, '') = '' THEN 't' || first_seen"
    " ELSE 'h' || hash END) FROM (SELECT first_seen, hash FROM transmissions"
    " WHERE from_pubkey = ?1 AND payload_type = 4 AND route_type = 1 AND first_seen >= ?2"
    " ORDER BY id DESC LIMIT ?3) WHERE meshgate_rfc3339_after(first_seen, ?4)";

static void rfc3339_after(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    int64_t ts;
    sqlite3_result_int(ctx, mg_node_parse_time_ms((const char *)sqlite3_value_text(argv[0]), &ts) &&
                                ts > sqlite3_value_int64(argv[1]));
}

int mg_node_flood_adverts(struct mg_db *db, const char *pubkey, int64_t now_ns, int64_t *count)
{
    /* Idempotent: registering again replaces the same function. */
    sqlite3_create_function(db->conn, "meshgate_rfc3339_after", 2,
                            SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL, rfc3339_after, NULL, NULL);
    sqlite3_stmt *st = mg_db_prepare(db, flood_sql);
    if (!st)
        return SQLITE_ERROR;
    int64_t cutoff_ms = now_ns / 1000000 - FLOOD_ADVERT_WINDOW_S * 1000LL;
    time_t floor_t = (time_t)(cutoff_ms / 1000 - 86400);
    struct tm tm;
    gmtime_r(&floor_t, &tm);
    char floor_date[16];
    strftime(floor_date, sizeof floor_date, "%Y-%m-%d", &tm);
    sqlite3_bind_text(st, 1, pubkey, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, floor_date, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, MG_NODE_FLOOD_ADVERT_ROWS);
    sqlite3_bind_int64(st, 4, cutoff_ms);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *count = sqlite3_column_int64(st, 0);
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    return rc;
}

/* --- the handlers ----------------------------------------------------------------------- */

/* The node statement for a WHERE clause (one parameter). */
static sqlite3_stmt *node_statement(struct mg_db *db, const char *where)
{
    struct mg_buf sql;
    mg_buf_init(&sql);
    mg_buf_puts(&sql, "SELECT ");
    mg_nodes_select_columns(&db->schema, &sql);
    mg_buf_printf(&sql, ", public_key, role FROM nodes %s", where);
    sqlite3_stmt *st = sql.failed ? NULL : mg_db_prepare(db, mg_buf_cstr(&sql));
    mg_buf_free(&sql);
    return st;
}

static void trim(const char **s, size_t *len)
{
    while (*len > 0 && strchr(" \t\r\n\v\f", (*s)[0]))
        (*s)++, (*len)--;
    while (*len > 0 && strchr(" \t\r\n\v\f", (*s)[*len - 1]))
        (*len)--;
}

/* The parameters, declared once (params.h). CoreScope's handleNodeSearch: q missing, empty or
 * blank: no node; otherwise trimmed, matched against names and key prefixes, 10 at most. */
struct search_params {
    const char *q;
};
static const struct mg_param search_param_list[] = {
    {.name = "q",
     .kind = MG_PARAM_TEXT,
     .offset = offsetof(struct search_params, q),
     .corescope = "blank: {\"nodes\":[]}; else trimmed"},
};
const struct mg_param_table mg_node_search_params =
    MG_PARAM_TABLE(struct search_params, search_param_list);

enum mg_turn mg_handle_node_search(struct mg_env *env, const struct mg_request *req,
                                   struct mg_response *res)
{
    struct search_params own;
    const struct search_params *p = mg_params_get(&mg_node_search_params, req, res, &own);
    if (!p)
        return MG_DONE;
    const char *q = p->q;
    size_t len = q ? strlen(q) : 0;
    trim(&q, &len);
    struct mg_db *db = env->db;
    sqlite3_stmt *st = NULL;
    int rc = SQLITE_OK;
    if (len > 0) {
        /* A node the configuration hides is not found (node_visibility.h); before the limit,
         * so that a page of fewer than ten does not tell that hidden nodes matched. */
        st = node_statement(db, "WHERE (name LIKE ?1 OR public_key LIKE ?2)"
                                " AND NOT meshgate_node_hidden(public_key, name)"
                                " ORDER BY last_seen DESC LIMIT ?3");
        struct mg_buf contains, prefix;
        mg_buf_init(&contains);
        mg_buf_init(&prefix);
        mg_buf_printf(&contains, "%%%.*s%%", (int)len, q);
        mg_buf_printf(&prefix, "%.*s%%", (int)len, q);
        if (!st || contains.failed || prefix.failed) {
            rc = st ? SQLITE_NOMEM : SQLITE_ERROR;
        } else {
            sqlite3_bind_text(st, 1, mg_buf_cstr(&contains), -1, SQLITE_TRANSIENT);
            sqlite3_bind_text(st, 2, mg_buf_cstr(&prefix), -1, SQLITE_TRANSIENT);
            sqlite3_bind_int(st, 3, SEARCH_LIMIT);
        }
        mg_buf_free(&contains);
        mg_buf_free(&prefix);
    }
    if (rc == SQLITE_OK) {
        mg_response_json(res, 200);
        struct mg_json j;
        mg_json_init(&j, &res->body);
        mg_json_object_begin(&j);
        mg_json_key(&j, "nodes");
        mg_json_array_begin(&j);
        while (st && (rc = sqlite3_step(st)) == SQLITE_ROW)
            mg_nodes_write_node(&j, st, &db->schema, NULL);
        if (rc == SQLITE_DONE)
            rc = SQLITE_OK;
        mg_json_array_end(&j);
        mg_json_object_end(&j);
        mg_buf_putc(&res->body, '\n');
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_OK)
        mg_response_db_failure_on(res, "the nodes", rc, db->conn);
    return MG_DONE;
}

static bool all_hex(const char *s)
{
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f') || (*s >= 'A' && *s <= 'F')))
            return false;
    return true;
}

/*
 * Finds the node of the path's key: its row is current in *found (0 rows: none; 2: the
 * prefix is ambiguous). Returns an SQLite code.
 */
static int find_node(struct mg_db *db, const char *key, sqlite3_stmt **out, int *found)
{
    *found = 0;
    sqlite3_stmt *st = node_statement(db, "WHERE public_key = ?1");
    if (!st)
        return SQLITE_ERROR;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    size_t len = strlen(key);
    if (rc == SQLITE_DONE && len >= 8 && len < 64 && all_hex(key)) {
        /* CoreScope's short links: a unique prefix of at least 8 hex digits. */
        sqlite3_finalize(st);
        st = node_statement(db, "WHERE public_key LIKE ?1 || '%' LIMIT 2");
        if (!st)
            return SQLITE_ERROR;
        sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            /* Is there a second one? Read it in another statement, keeping this row. */
            sqlite3_stmt *again = node_statement(db, "WHERE public_key LIKE ?1 || '%' LIMIT 2");
            if (!again) {
                sqlite3_finalize(st);
                return SQLITE_ERROR;
            }
            sqlite3_bind_text(again, 1, key, -1, SQLITE_STATIC);
            int rows = 0, rc2;
            while ((rc2 = sqlite3_step(again)) == SQLITE_ROW)
                rows++;
            sqlite3_finalize(again);
            if (rc2 != SQLITE_DONE) {
                sqlite3_finalize(st);
                return rc2;
            }
            if (rows > 1) {
                sqlite3_finalize(st);
                *found = 2;
                return SQLITE_OK;
            }
        }
    }
    if (rc == SQLITE_ROW) {
        *found = 1;
        *out = st;
        return SQLITE_OK;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static const char recent_sql[] =
    "SELECT t.decoded_json, o.direction, t.first_seen, t.hash, t.id,"
    " (SELECT count(*) FROM observations WHERE transmission_id = t.id),"
    " coalesce(obs.iata, ''), obs.id, obs.name, o.path_json, t.payload_type, t.raw_hex,"
    " t.route_type, o.rssi, %s, o.snr"
    " FROM transmissions t LEFT JOIN observations o ON o.id = (SELECT id FROM observations"
    " WHERE transmission_id = t.id ORDER BY length(coalesce(path_json, '')) DESC LIMIT 1)"
    " LEFT JOIN observers obs ON obs.rowid = o.observer_idx"
    " WHERE t.from_pubkey = ?1 ORDER BY t.id DESC LIMIT ?2";
/* Their observations, newest first; %s the ids. */
static const char recent_observations_sql[] =
    "SELECT o.transmission_id, o.id, coalesce(obs.iata, ''), obs.id, obs.name, o.path_json,"
    " o.rssi, o.snr, strftime('%%Y-%%m-%%dT%%H:%%M:%%fZ', o.timestamp, 'unixepoch')"
    " FROM observations o LEFT JOIN observers obs ON obs.rowid = o.observer_idx"
    " WHERE o.transmission_id IN (%s) ORDER BY o.timestamp DESC";

static const char *const recent_keys[] = {
    "decoded_json",      "direction",   "first_seen",    "hash",       "id",
    "observation_count", /* then observations */
    "observer_iata",     "observer_id", "observer_name", "path_json",  "payload_type",
    "raw_hex",           "route_type",  "rssi",          "scope_name", "snr",
};
static const char *const observation_keys[] = {
    "id", "observer_iata", "observer_id", "observer_name", "path_json", "rssi", "snr", "timestamp",
};

/* Writes each observation of the transmissions in ids into obs[i] (ids[i]'s), as a JSON
 * array's elements. */
static int recent_observations(struct mg_db *db, const int64_t *ids, size_t n, struct mg_buf *obs)
{
    if (n == 0)
        return SQLITE_OK;
    struct mg_buf list, sql;
    mg_buf_init(&list);
    mg_buf_init(&sql);
    for (size_t i = 0; i < n; i++)
        mg_buf_printf(&list, "%s%lld", i ? "," : "", (long long)ids[i]);
    mg_buf_printf(&sql, recent_observations_sql, mg_buf_cstr(&list));
    sqlite3_stmt *st = sql.failed || list.failed ? NULL : mg_db_prepare(db, mg_buf_cstr(&sql));
    mg_buf_free(&list);
    mg_buf_free(&sql);
    if (!st)
        return SQLITE_ERROR;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t tx = sqlite3_column_int64(st, 0);
        size_t i = 0;
        while (i < n && ids[i] != tx)
            i++;
        if (i == n)
            continue;
        struct mg_json j;
        mg_json_init(&j, &obs[i]);
        if (obs[i].len)
            mg_buf_putc(&obs[i], ',');
        mg_json_object_begin(&j);
        for (int k = 0; k < 8; k++) {
            mg_json_key(&j, observation_keys[k]);
            mg_db_json_column(&j, st, k + 1);
        }
        mg_json_kv_int(&j, "transmission_id", tx);
        mg_json_object_end(&j);
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int write_recent_adverts(struct mg_db *db, struct mg_json *j, const char *pubkey)
{
    char sql[sizeof recent_sql + 32];
    snprintf(sql, sizeof sql, recent_sql, db->schema.tx_scope_name ? "t.scope_name" : "NULL");
    sqlite3_stmt *st = mg_db_prepare(db, sql);
    if (!st)
        return SQLITE_ERROR;
    sqlite3_bind_text(st, 1, pubkey, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, RECENT_ADVERTS);
    /* First the ids (from the index alone), to read every observation in one statement. */
    int64_t ids[RECENT_ADVERTS];
    size_t n = 0;
    int rc;
    sqlite3_stmt *id_st = mg_db_prepare(db, "SELECT id FROM transmissions WHERE from_pubkey = ?1"
                                            " ORDER BY id DESC LIMIT ?2");
    if (!id_st) {
        sqlite3_finalize(st);
        return SQLITE_ERROR;
    }
    sqlite3_bind_text(id_st, 1, pubkey, -1, SQLITE_STATIC);
    sqlite3_bind_int(id_st, 2, RECENT_ADVERTS);
    while (n < RECENT_ADVERTS && (rc = sqlite3_step(id_st)) == SQLITE_ROW)
        ids[n++] = sqlite3_column_int64(id_st, 0);
    sqlite3_finalize(id_st);
    struct mg_buf obs[RECENT_ADVERTS];
    for (size_t i = 0; i < RECENT_ADVERTS; i++)
        mg_buf_init(&obs[i]);
    rc = recent_observations(db, ids, n, obs);
    mg_json_array_begin(j);
    size_t row = 0;
    int step = SQLITE_DONE;
    while (rc == SQLITE_OK && (step = sqlite3_step(st)) == SQLITE_ROW) {
        mg_json_object_begin(j);
        for (int k = 0; k < 16; k++) {
            if (k == 14 && !db->schema.tx_scope_name)
                continue;
            mg_json_key(j, recent_keys[k]);
            mg_db_json_column(j, st, k);
            if (k == 5) {
                struct mg_buf *list = row < n ? &obs[row] : NULL;
                mg_json_key(j, "observations");
                mg_json_array_begin(j);
                if (list && list->len)
                    mg_json_raw(j, mg_buf_cstr(list), list->len);
                mg_json_array_end(j);
            }
        }
        mg_json_key(j, "timestamp");
        mg_db_json_column(j, st, 2);
        mg_json_object_end(j);
        row++;
    }
    if (rc == SQLITE_OK && step != SQLITE_DONE)
        rc = step;
    mg_json_array_end(j);
    sqlite3_finalize(st);
    for (size_t i = 0; i < RECENT_ADVERTS; i++)
        mg_buf_free(&obs[i]);
    return rc;
}

enum mg_turn mg_handle_node_detail(struct mg_env *env, const struct mg_request *req,
                                   struct mg_response *res)
{
    struct mg_db *db = env->db;
    sqlite3_stmt *node = NULL;
    int found = 0;
    enum mg_turn turn = MG_DONE;
    bool began = mg_node_read_begin(db);
    int rc = find_node(db, req->path_param, &node, &found);
    if (rc == SQLITE_OK && found == 2) {
        mg_response_error(res, 409, "Ambiguous prefix: multiple nodes match. Use a longer prefix.");
    } else if (rc == SQLITE_OK && found == 0) {
        mg_response_error(res, 404, "Not found");
    } else if (rc == SQLITE_OK) {
        int cols = sqlite3_column_count(node);
        char pubkey[MG_PATH_PARAM_MAX];
        snprintf(pubkey, sizeof pubkey, "%s",
                 (const char *)sqlite3_column_text(node, cols - 2) ?: "");
        struct mg_node_hash_sizes hs;
        int64_t flood = 0;
        rc = mg_node_hash_sizes(db, pubkey, req->start_realtime_ns / 1000000000LL, &hs);
        if (rc == SQLITE_OK)
            rc = mg_node_flood_adverts(db, pubkey, req->start_realtime_ns, &flood);
        int role_col = mg_nodes_column(&db->schema, "role");
        bool relays =
            role_col >= 0 && mg_node_relay_role((const char *)sqlite3_column_text(node, role_col));
        /* as the list: never waited for (node_relay.h, node_usefulness.h, node_multibyte.h) */
        if (rc == SQLITE_OK && relays)
            rc = mg_node_relay_keep_behind(env, mg_monotonic_ns(), req->start_realtime_ns);
        if (rc == SQLITE_OK && relays)
            rc = mg_node_usefulness_keep(env, mg_monotonic_ns(), req->start_realtime_ns);
        if (rc == SQLITE_OK) /* every node: its multi-byte capability */
            rc = mg_node_multibyte_keep(env, mg_monotonic_ns(), req->start_realtime_ns);
        struct mg_buf relay_text;
        mg_buf_init(&relay_text);
        if (rc == SQLITE_OK) {
            struct mg_node_fields x;
            mg_node_fields_init(&x);
            mg_node_fields_add(&x, "flood_advert_count_7d", "%lld", (long long)flood);
            mg_node_hash_fields(&x, &hs);
            mg_node_multibyte_read_begin(); /* held until x is written */
            mg_node_multibyte_fields(&x, pubkey, &hs);
            mg_node_relay_read_begin();
            mg_node_usefulness_read_begin();
            if (relays) { /* relay activity (node_relay.h), usefulness (node_usefulness.h) */
                mg_node_relay_fields(&x, pubkey, true, req->start_realtime_ns, &relay_text);
                mg_node_usefulness_fields(&x, pubkey, mg_node_relay_traffic(pubkey));
            }
            mg_node_usefulness_read_end();
            mg_node_relay_read_end();
            mg_response_json(res, 200);
            struct mg_json j;
            mg_json_init(&j, &res->body);
            mg_json_object_begin(&j); /* a fixed record: node, recentAdverts */
            mg_json_key(&j, "node");
            mg_nodes_write_node(&j, node, &db->schema, x.field);
            mg_json_key(&j, "recentAdverts");
            mg_node_multibyte_read_end();
            rc = write_recent_adverts(db, &j, pubkey);
            mg_json_object_end(&j);
            mg_buf_putc(&res->body, '\n');
        }
        mg_buf_free(&relay_text);
    }
    sqlite3_finalize(node);
    if (rc != SQLITE_OK) {
        mg_response_db_failure_on(res, "the node", rc, db->conn);
    }
    mg_node_read_end(db, began);
    return turn;
}

/*
 * The detail's cost follows the node's own traffic: each of its transmissions read (its 20
 * newest with their observations, its ADVERTs of the week) costs some 35 page reads, so a
 * node that sent more than MG_NODE_DETAIL_LIGHT_ROWS makes the request heavy. They are
 * counted in the (from_pubkey, rowid) index, at most one past the bound: a few pages. An
 * unknown key is light (a 404, or one pass over nodes for a short prefix).
 */
bool mg_node_detail_is_heavy(struct mg_env *env, const struct mg_request *req)
{
    /* The relay table, the scores and the capability are not waited for, but built by the
     * request where no helper runs them behind it (mg_group_table_keep_behind). */
    if (!env->jobs && (!mg_node_relay_available(env) || !mg_node_usefulness_available(env) ||
                       !mg_node_multibyte_available(env)))
        return true;
    /* Its transmissions, and their observations (each written), counted one past the bound. */
    sqlite3_stmt *st = mg_db_prepare(
        env->db,
        "WITH k(key) AS (SELECT public_key FROM nodes WHERE public_key = ?1 UNION ALL SELECT"
        " public_key FROM nodes WHERE length(?1) BETWEEN 8 AND 63 AND public_key LIKE ?1 || '%'"
        " LIMIT 1)"
        " SELECT (SELECT count(*) FROM (SELECT 1 FROM transmissions WHERE from_pubkey ="
        " (SELECT key FROM k) LIMIT ?2)), (SELECT count(*) FROM (SELECT 1 FROM transmissions t"
        " JOIN observations o ON o.transmission_id = t.id WHERE t.from_pubkey ="
        " (SELECT key FROM k) LIMIT ?3))");
    if (!st)
        return false;
    sqlite3_bind_text(st, 1, req->path_param, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, MG_NODE_DETAIL_LIGHT_ROWS + 1);
    sqlite3_bind_int(st, 3, MG_NODE_DETAIL_LIGHT_OBSERVATIONS + 1);
    bool heavy = sqlite3_step(st) == SQLITE_ROW &&
                 (sqlite3_column_int64(st, 0) > MG_NODE_DETAIL_LIGHT_ROWS ||
                  sqlite3_column_int64(st, 1) > MG_NODE_DETAIL_LIGHT_OBSERVATIONS);
    sqlite3_finalize(st);
    return heavy;
}

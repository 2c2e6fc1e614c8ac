/* SPDX-License-Identifier: ISC */
/*
 * GET /api/nodes/network-status and GET /api/nodes/resolve: two small answers about the
 * nodes table, each one pass over nodes at most (light).
 *
 * network-status  every row of nodes (CoreScope counts them all: the blacklist, hidden
 *                 prefixes and geo_filter do not apply, and only counts are given), each
 *                 active, degraded or silent by the age of its last_seen against
 *                 healthThresholds (repeaters and rooms the infra pair, other roles the node
 *                 pair: corescope_config.h), and counted by role (NULL: "unknown").
 *                 last_seen is read as CoreScope's server reads it: RFC 3339 with a 'T' and
 *                 a zone, or "YYYY-MM-DD HH:MM:SS" (UTC); anything else, or NULL, is silent.
 *                 {"active","degraded","roleCounts" (keys bytewise),"silent","total"}.
 * resolve         ?prefix=: trimmed and lowercased, 4 to 64 hex digits (else 400 with
 *                 CoreScope's message). {"prefix", and when exactly one node's key starts
 *                 with it and the configuration does not hide it, "pubkey" and "name" (when
 *                 not empty), then "ambiguous": two or more do}. The key range is read through
 *                 the primary key's index and stops at the second row; CoreScope's LIKE also
 *                 matches keys stored in upper case, which its ingestor never writes.
 */
#include "corescope_config.h"
#include "json.h"
#include "node_visibility.h"
#include "params.h"
#include "router.h"
#include "time_parse.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* ---- network-status ---- */

/* last_seen as CoreScope's server parses it (Go's time.Parse with RFC3339, then with
 * "2006-01-02 15:04:05" in UTC; a fraction of a second is accepted by both). */
static bool corescope_time_ms(const char *text, size_t len, int64_t *ms)
{
    struct mg_rfc3339_shape shape;
    if (mg_rfc3339_parse_shaped(text, len, ms, &shape))
        return shape.separator == 'T' && shape.zone != 'z';
    char zoned[64];
    if (len < 19 || len + 1 >= sizeof zoned || text[10] != ' ')
        return false;
    memcpy(zoned, text, len);
    zoned[len] = 'Z';
    return mg_rfc3339_parse_shaped(zoned, len + 1, ms, &shape);
}

struct role_count {
    char *role;
    int64_t count;
};

static int by_role(const void *a, const void *b)
{
    return strcmp(((const struct role_count *)a)->role, ((const struct role_count *)b)->role);
}

/* Counts one more node of role into *roles; false when memory runs out. */
static bool count_role(struct role_count **roles, size_t *n, size_t *cap, const char *role)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp((*roles)[i].role, role) == 0) {
            (*roles)[i].count++;
            return true;
        }
    if (*n == *cap) {
        size_t want = *cap ? *cap * 2 : 8;
        struct role_count *grown = realloc(*roles, want * sizeof **roles);
        if (!grown)
            return false;
        *roles = grown;
        *cap = want;
    }
    char *copy = strdup(role);
    if (!copy)
        return false;
    (*roles)[(*n)++] = (struct role_count){copy, 1};
    return true;
}

enum mg_turn mg_handle_network_status(struct mg_env *env, const struct mg_request *req,
                                      struct mg_response *res)
{
    const struct mg_corescope_config *cs = mg_corescope_current();
    int64_t now_ms = req->start_realtime_ns / 1000000;
    sqlite3_stmt *st = mg_db_prepare(env->db, "SELECT role, last_seen FROM nodes");
    if (!st) {
        mg_response_db_failure_on(res, "the nodes", SQLITE_ERROR, env->db->conn);
        return MG_DONE;
    }
    int64_t active = 0, degraded = 0, silent = 0, total = 0;
    struct role_count *roles = NULL;
    size_t n = 0, cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *role = (const char *)sqlite3_column_text(st, 0);
        if (!role)
            role = "unknown";
        if (!count_role(&roles, &n, &cap, role)) {
            rc = SQLITE_NOMEM;
            break;
        }
        total++;
        const char *seen = (const char *)sqlite3_column_text(st, 1);
        int64_t seen_ms, age = INT64_MAX;
        if (seen && corescope_time_ms(seen, (size_t)sqlite3_column_bytes(st, 1), &seen_ms))
            age = now_ms - seen_ms;
        bool infra = strcmp(role, "repeater") == 0 || strcmp(role, "room") == 0;
        if (age < (infra ? cs->infra_degraded_ms : cs->node_degraded_ms))
            active++;
        else if (age < (infra ? cs->infra_silent_ms : cs->node_silent_ms))
            degraded++;
        else
            silent++;
    }
    sqlite3_finalize(st);
    if (rc == SQLITE_DONE) {
        if (n > 1) /* qsort of no array is undefined */
            qsort(roles, n, sizeof *roles, by_role);
        mg_response_json(res, 200);
        struct mg_json j;
        mg_json_init(&j, &res->body);
        mg_json_object_begin(&j); /* keys in bytewise order */
        mg_json_kv_int(&j, "active", active);
        mg_json_kv_int(&j, "degraded", degraded);
        mg_json_key(&j, "roleCounts");
        mg_json_object_begin(&j);
        for (size_t i = 0; i < n; i++)
            mg_json_kv_int(&j, roles[i].role, roles[i].count);
        mg_json_object_end(&j);
        mg_json_kv_int(&j, "silent", silent);
        mg_json_kv_int(&j, "total", total);
        mg_json_object_end(&j);
        mg_buf_putc(&res->body, '\n');
    }
    for (size_t i = 0; i < n; i++)
        free(roles[i].role);
    free(roles);
    if (rc != SQLITE_DONE)
        mg_response_db_failure_on(res, "the nodes", rc, env->db->conn);
    return MG_DONE;
}

/* ---- resolve ---- */

/* The longest prefix: a whole key. */
#define PREFIX_MAX_HEX 64
/* The shortest: two bytes (CoreScope refuses shorter ones, so that its 256 one-byte prefixes
 * cannot list every node's name). */
#define PREFIX_MIN_HEX 4

struct resolve_params {
    const char *prefix;
};
static const struct mg_param resolve_param_list[] = {
    {.name = "prefix",
     .kind = MG_PARAM_TEXT,
     .offset = offsetof(struct resolve_params, prefix),
     .sample = "a1b2",
     .corescope = "trimmed and lowercased; missing, empty or not 2 to 64 hex digits: 400 \"prefix "
                  "must be hex\"; 2 or 3: 400 \"prefix must be at least 4 hex chars\""},
};
const struct mg_param_table mg_node_resolve_params =
    MG_PARAM_TABLE(struct resolve_params, resolve_param_list);

enum mg_turn mg_handle_node_resolve(struct mg_env *env, const struct mg_request *req,
                                    struct mg_response *res)
{
    struct resolve_params own;
    const struct resolve_params *p = mg_params_get(&mg_node_resolve_params, req, res, &own);
    if (!p)
        return MG_DONE;
    const char *s = p->prefix ? p->prefix : "";
    size_t len = strlen(s);
    while (len > 0 && isspace((unsigned char)s[0]))
        s++, len--;
    while (len > 0 && isspace((unsigned char)s[len - 1]))
        len--;
    char low[PREFIX_MAX_HEX + 2]; /* the prefix, then the bound above its range */
    bool hex = len >= 2 && len <= PREFIX_MAX_HEX;
    for (size_t i = 0; hex && i < len; i++) {
        low[i] = (char)tolower((unsigned char)s[i]);
        hex = isxdigit((unsigned char)low[i]) != 0;
    }
    if (!hex) {
        mg_response_error(res, 400, "prefix must be hex");
        return MG_DONE;
    }
    if (len < PREFIX_MIN_HEX) {
        mg_response_error(res, 400, "prefix must be at least 4 hex chars");
        return MG_DONE;
    }
    low[len] = '\0';
    /* Every lowercase key that starts with the prefix sorts from it up to, not including,
     * the prefix followed by 'g' (above every hex digit). */
    char high[PREFIX_MAX_HEX + 2];
    memcpy(high, low, len);
    high[len] = 'g';
    high[len + 1] = '\0';
    sqlite3_stmt *st = mg_db_prepare(env->db, "SELECT public_key, COALESCE(name, '') FROM nodes"
                                              " WHERE public_key >= ?1 AND public_key < ?2"
                                              " LIMIT 2");
    if (!st) {
        mg_response_db_failure_on(res, "the nodes", SQLITE_ERROR, env->db->conn);
        return MG_DONE;
    }
    sqlite3_bind_text(st, 1, low, (int)len, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, high, (int)len + 1, SQLITE_STATIC);
    int rc, rows = 0;
    char *key = NULL, *name = NULL;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (++rows > 1)
            continue;
        const char *k = (const char *)sqlite3_column_text(st, 0);
        const char *nm = (const char *)sqlite3_column_text(st, 1);
        key = strdup(k ? k : "");
        name = strdup(nm ? nm : "");
        if (!key || !name) {
            rc = SQLITE_NOMEM;
            break;
        }
    }
    sqlite3_finalize(st);
    if (rc == SQLITE_DONE) {
        mg_response_json(res, 200);
        struct mg_json j;
        mg_json_init(&j, &res->body);
        mg_json_object_begin(&j); /* CoreScope's field order */
        mg_json_kv_string(&j, "prefix", low);
        if (rows == 1 && !mg_node_hidden(key, name)) {
            if (key[0])
                mg_json_kv_string(&j, "pubkey", key);
            if (name[0])
                mg_json_kv_string(&j, "name", name);
        }
        mg_json_kv_bool(&j, "ambiguous", rows > 1);
        mg_json_object_end(&j);
        mg_buf_putc(&res->body, '\n');
    }
    free(key);
    free(name);
    if (rc != SQLITE_DONE)
        mg_response_db_failure_on(res, "the nodes", rc, env->db->conn);
    return MG_DONE;
}

/* SPDX-License-Identifier: ISC */
/*
 * node_read: what the node endpoints (ep_node_detail.c, ep_node_health.c, ep_node_clock.c)
 * read alike: one read transaction around their statements, and the transmissions CoreScope
 * files under a node.
 */
#include "node_read.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool mg_node_read_begin(struct mg_db *db)
{
    return sqlite3_get_autocommit(db->conn) &&
           sqlite3_exec(db->conn, "BEGIN", NULL, NULL, NULL) == SQLITE_OK;
}

void mg_node_read_end(struct mg_db *db, bool began)
{
    if (began && sqlite3_exec(db->conn, "COMMIT", NULL, NULL, NULL) != SQLITE_OK &&
        !sqlite3_get_autocommit(db->conn))
        sqlite3_exec(db->conn, "ROLLBACK", NULL, NULL, NULL);
}

/*
 * The transmissions of the node, in the order CoreScope's store files them (it loads them by
 * id): one pass over observations and one over transmissions. ?1 the key, ?2..?4 quoted
 * upper-case hop tokens (or a text no path holds). %s: the path test alone without the
 * resolved_path column, else path_with_resolved.
 */
static const char ids_sql[] =
    "SELECT id FROM transmissions WHERE id IN (SELECT transmission_id FROM observations WHERE %s"
    " UNION ALL SELECT id FROM transmissions WHERE instr(decoded_json, ?1) > 0"
    " AND json_valid(decoded_json) AND (decoded_json ->> '$.pubKey' = ?1"
    " OR decoded_json ->> '$.destPubKey' = ?1 OR decoded_json ->> '$.srcPubKey' = ?1))"
    " ORDER BY id";
#define PATH_TEST                                                                                  \
    "path_json IS NOT NULL AND path_json NOT IN ('', '[]') AND (instr(upper(path_json), ?2) > 0"   \
    " OR instr(upper(path_json), ?3) > 0 OR instr(upper(path_json), ?4) > 0)"
static const char path_with_resolved[] =
    "CASE WHEN coalesce(resolved_path, '') = '' THEN " PATH_TEST
    " ELSE instr(resolved_path, '\"' || ?1 || '\"') > 0 END";

/*
 * The quoted upper-case hop tokens ("EC", "EC34", "EC3433") that resolve to pubkey alone
 * among the relays; a token that does not is left as a text no path holds. An SQLite code.
 */
static int hop_tokens(struct mg_db *db, const char *pubkey, char tokens[3][16])
{
    sqlite3_stmt *st = mg_db_prepare(
        db, "SELECT count(*), max(lower(public_key)) FROM nodes WHERE (instr(lower(role),"
            " 'repeater') > 0 OR instr(lower(role), 'room_server') > 0 OR lower(role) = 'room')"
            " AND lower(public_key) LIKE ?1 || '%'");
    if (!st)
        return SQLITE_ERROR;
    int rc = SQLITE_OK;
    for (int i = 0; i < 3 && rc == SQLITE_OK; i++) {
        size_t len = (size_t)(i + 1) * 2;
        snprintf(tokens[i], 16, "\x01");
        if (strlen(pubkey) < len)
            continue;
        char prefix[8];
        snprintf(prefix, sizeof prefix, "%.*s", (int)len, pubkey);
        sqlite3_bind_text(st, 1, prefix, -1, SQLITE_TRANSIENT);
        if ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            const char *only = (const char *)sqlite3_column_text(st, 1);
            if (sqlite3_column_int64(st, 0) == 1 && only && strcmp(only, pubkey) == 0) {
                snprintf(tokens[i], 16, "\"%s\"", prefix);
                for (char *c = tokens[i]; *c; c++)
                    if (*c >= 'a' && *c <= 'f')
                        *c = (char)(*c - 32);
            }
            rc = SQLITE_OK;
        }
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

int mg_node_packet_ids(struct mg_db *db, const char *pubkey, int64_t **ids, size_t *n)
{
    char tokens[3][16];
    int rc = hop_tokens(db, pubkey, tokens);
    if (rc != SQLITE_OK)
        return rc;
    char sql[sizeof ids_sql + sizeof path_with_resolved];
    snprintf(sql, sizeof sql, ids_sql,
             db->schema.obs_resolved_path ? path_with_resolved : PATH_TEST);
    sqlite3_stmt *st = mg_db_prepare(db, sql);
    if (!st)
        return SQLITE_ERROR;
    sqlite3_bind_text(st, 1, pubkey, -1, SQLITE_STATIC);
    for (int i = 0; i < 3; i++)
        sqlite3_bind_text(st, 2 + i, tokens[i], -1, SQLITE_TRANSIENT);
    size_t cap = 0;
    *ids = NULL;
    *n = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? cap * 2 : 64;
            int64_t *more = realloc(*ids, cap * sizeof **ids);
            if (!more) {
                rc = SQLITE_NOMEM;
                break;
            }
            *ids = more;
        }
        (*ids)[(*n)++] = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

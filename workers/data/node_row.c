/* SPDX-License-Identifier: ISC */
/*
 * node_row: a node's row as the node endpoints read and write it (ep_nodes.c, ep_node_detail.c,
 * ep_node_health.c): its columns for a SELECT list, and the node object written from them with
 * its keys in bytewise order.
 */
#include "node_row.h"

#include "json.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The keys of a node, in the bytewise order they are written, and where each comes from. */
enum key_source {
    FROM_COLUMN, /* the next result column, as its type says (NULL as null) */
    FROM_FLAG,   /* the next result column, 0 or 1, as false or true */
    ALWAYS_NULL,
    ALWAYS_FALSE,
};

#define ALWAYS SIZE_MAX /* a key every schema has */
#define ONLY_WITH(flag) offsetof(struct mg_db_schema, flag)
static const struct node_key {
    const char *key;
    const char *expr; /* NULL for the constants */
    enum key_source source;
    size_t needs; /* ALWAYS, or the schema flag of the optional column it reads */
} node_keys[] = {
    {"advert_count", "advert_count", FROM_COLUMN, ALWAYS},
    {"battery_mv", "battery_mv", FROM_COLUMN, ALWAYS},
    {"default_scope", "default_scope", FROM_COLUMN, ONLY_WITH(nodes_default_scope)},
    {"first_seen", "first_seen", FROM_COLUMN, ALWAYS},
    /* Without the column no node is foreign: the key stays, read as 0. */
    {"foreign", "coalesce(foreign_advert <> 0, 0)", FROM_FLAG, ALWAYS},
    {"hash_size", NULL, ALWAYS_NULL, ALWAYS},
    {"hash_size_inconsistent", NULL, ALWAYS_FALSE, ALWAYS},
    {"last_heard", "last_seen", FROM_COLUMN, ALWAYS},
    {"last_seen", "last_seen", FROM_COLUMN, ALWAYS},
    {"lat", "lat", FROM_COLUMN, ALWAYS},
    {"lon", "lon", FROM_COLUMN, ALWAYS},
    {"name", "name", FROM_COLUMN, ALWAYS},
    {"public_key", "public_key", FROM_COLUMN, ALWAYS},
    {"role", "role", FROM_COLUMN, ALWAYS},
    {"temperature_c", "temperature_c", FROM_COLUMN, ALWAYS},
};
#define NODE_KEYS (sizeof node_keys / sizeof node_keys[0])

/* Whether this schema has what key reads. */
static bool key_present(const struct node_key *key, const struct mg_db_schema *schema)
{
    return key->needs == ALWAYS || *(const bool *)((const char *)schema + key->needs);
}

void mg_nodes_select_columns(const struct mg_db_schema *schema, struct mg_buf *out)
{
    bool first = true;
    for (size_t k = 0; k < NODE_KEYS; k++) {
        const struct node_key *key = &node_keys[k];
        if (!key->expr || !key_present(key, schema))
            continue;
        const char *expr = key->expr;
        if (key->source == FROM_FLAG && !schema->nodes_foreign_advert)
            expr = "0"; /* no column: no node is foreign */
        mg_buf_puts(out, first ? "" : ", ");
        mg_buf_puts(out, expr);
        first = false;
    }
}

int mg_nodes_column(const struct mg_db_schema *schema, const char *name)
{
    int col = 0;
    for (size_t k = 0; k < NODE_KEYS; k++) {
        if (!node_keys[k].expr || !key_present(&node_keys[k], schema))
            continue;
        if (strcmp(node_keys[k].key, name) == 0)
            return col;
        col++;
    }
    return -1;
}

/* Writes the extra fields whose keys sort before key (all of them when key is NULL). */
static void write_extras_before(struct mg_json *j, const struct mg_node_field **extra,
                                const char *key)
{
    for (; (*extra)->key && (!key || strcmp((*extra)->key, key) < 0); (*extra)++) {
        mg_json_key(j, (*extra)->key);
        mg_json_raw(j, (*extra)->json, strlen((*extra)->json));
    }
}

void mg_nodes_write_node(struct mg_json *j, sqlite3_stmt *st, const struct mg_db_schema *schema,
                         const struct mg_node_field *extra)
{
    static const struct mg_node_field none = {NULL, NULL};
    if (!extra)
        extra = &none;
    mg_json_object_begin(j); /* keys in bytewise order (node_keys, extras merged in) */
    int col = 0;
    for (size_t k = 0; k < NODE_KEYS; k++) {
        const struct node_key *key = &node_keys[k];
        if (!key_present(key, schema))
            continue;
        write_extras_before(j, &extra, key->key);
        if (extra->key && strcmp(extra->key, key->key) == 0) { /* the extra replaces it */
            mg_json_key(j, extra->key);
            mg_json_raw(j, extra->json, strlen(extra->json));
            extra++;
            if (key->expr)
                col++;
            continue;
        }
        mg_json_key(j, key->key);
        switch (key->source) {
        case FROM_COLUMN:
            mg_db_json_column(j, st, col++);
            break;
        case FROM_FLAG:
            mg_json_bool(j, sqlite3_column_int64(st, col++) != 0);
            break;
        case ALWAYS_NULL:
            mg_json_null(j);
            break;
        case ALWAYS_FALSE:
            mg_json_bool(j, false);
            break;
        }
    }
    write_extras_before(j, &extra, NULL);
    mg_json_object_end(j);
}

/* SPDX-License-Identifier: ISC */
/*
 * node_row: a node's row as the node endpoints read and write it (ep_nodes.c, ep_node_detail.c,
 * ep_node_health.c), so that none of them includes another.
 */
#ifndef MESHGATE_NODE_ROW_H
#define MESHGATE_NODE_ROW_H

#include "buf.h"
#include "db.h"
#include "json.h"
#include "node_fields.h"

#include <sqlite3.h>

/* The columns of a node, for a SELECT list: those mg_nodes_write_node reads, in its order. */
void mg_nodes_select_columns(const struct mg_db_schema *schema, struct mg_buf *out);

/* The result column of a key in a node row (mg_nodes_select_columns); -1: none. */
int mg_nodes_column(const struct mg_db_schema *schema, const char *name);

/* Writes the node of st's current row (columns from 0, as mg_nodes_select_columns lists them)
 * as an object with keys in bytewise order, extra (may be NULL) merged in. */
void mg_nodes_write_node(struct mg_json *j, sqlite3_stmt *st, const struct mg_db_schema *schema,
                         const struct mg_node_field *extra);

#endif

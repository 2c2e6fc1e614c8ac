/* SPDX-License-Identifier: ISC */
/*
 * node_fields: the keys a node's object gets beyond its table's columns (hash sizes, relay
 * counts, ...), kept in key order so that the node is written with its keys in bytewise
 * order (mg_nodes_write_node); filled by the node endpoints and the relay table.
 */
#ifndef MESHGATE_NODE_FIELDS_H
#define MESHGATE_NODE_FIELDS_H

#include "hash_size.h"

#include <stddef.h>

/*
 * A key of a node beyond the table's columns (or one replacing a constant of the list, as
 * hash_size), with its value as JSON text. An array of them is sorted by key and ends with
 * a NULL key.
 */
struct mg_node_field {
    const char *key;
    const char *json;
};

/* Up to 24 extra fields, kept in key order whatever order they are added in. */
struct mg_node_fields {
    char text[24][96];
    struct mg_node_field field[25]; /* NULL-key ended */
    size_t n;
};
void mg_node_fields_init(struct mg_node_fields *f);
/* A field whose JSON text (at most 95 bytes) is copied in. */
void mg_node_fields_add(struct mg_node_fields *f, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A field whose JSON text the caller keeps alive as long as f. */
void mg_node_fields_add_json(struct mg_node_fields *f, const char *key, const char *json);

/* Adds hash_size, hash_size_inconsistent, hash_sizes_seen (2 sizes or more) and, when an
 * ADVERT used 2 bytes or more, multi_byte_evidence, _max_hash_size and _status, to f; nothing
 * when hs is not known. */
void mg_node_hash_fields(struct mg_node_fields *f, const struct mg_node_hash_sizes *hs);

#endif

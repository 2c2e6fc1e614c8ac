/* SPDX-License-Identifier: ISC */
/*
 * region_table: the region map in this process (region_map.h tells what it is and how the
 * group shares it): the map as a process_table, its pass, its body (group_body.h) and the SQL
 * function that reads it. Apart from region_map.c, which makes it a group table, so that
 * mg_db_open, which registers the function on every connection, needs nothing of the group's
 * machinery (group_table.c opens connections with db.h).
 *
 * Threads: a worker's loop and its helper threads each have a connection; the map is shared
 * by them under a read-write lock, which a build takes for writing only to swap its new map
 * in. SQL reaches the map through the function meshgate_in_regions(public_key, codes)
 * (registered on every connection by mg_db_open), codes being ",SJC,OAK," as ep_nodes.c
 * parses them.
 */
#ifndef MESHGATE_REGION_TABLE_H
#define MESHGATE_REGION_TABLE_H

#include "buf.h"
#include "process_table.h"

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#define MG_REGION_MAP_INTERVAL_NS (300 * 1000000000LL)

/* The map this process reads (its decoded copy of the group's, or its own). */
extern struct mg_process_table mg_region_table;

/* The body's version (group_table.h: struct mg_group_table's version). */
#define MG_REGION_TABLE_VERSION 1U
/* The pass, and the body's encoding and decoding (group_table.h: struct mg_group_table). */
void *mg_region_table_build(sqlite3 *conn, void *arg, int *rc);
void mg_region_table_encode(const void *table, int64_t built_ns, struct mg_buf *out);
void *mg_region_table_decode(const void *data, size_t len, int64_t *built_ns);

/* Readers hold the map while they step a statement that uses it. */
void mg_region_map_read_begin(void);
void mg_region_map_read_end(void);
/* Which map the reader holds (process_table.h: mg_process_table_generation). */
uint64_t mg_region_map_generation(void);

/* Registers meshgate_in_regions on conn; an SQLite code. */
int mg_region_map_register(sqlite3 *conn);

/* The statement that reads the ADVERTs' keys and their observers (for plan tests). */
extern const char mg_region_map_adverts_sql[];

#endif

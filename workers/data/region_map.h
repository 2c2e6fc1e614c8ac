/* SPDX-License-Identifier: ISC */
/*
 * region_map: which regions each node was heard in, as CoreScope defines it for
 * /api/nodes?region=: a node is in a region when an ADVERT (payload_type 4) whose
 * decoded_json pubKey is the node's key was heard by an observer of that region
 * (observers.rowid = observations.observer_idx, the code upper(trim(iata)), an iata with a
 * comma in it being no region at all).
 *
 * Why a map: finding that out per request probes the observations of every ADVERT (0.8 s at
 * 2M observations), which made a light route a remote stall (issue 13). The map is built by
 * one such pass and then answers a node's membership from memory, so a region filter costs
 * what the other filters of /api/nodes cost: one pass over nodes.
 *
 * Why per worker process and not in the segment: the map is a few bytes per node and region
 * (tens of kilobytes for CoreScope's largest networks), past what a shared value holds
 * (4096 bytes), and a section of its own would fix a node count in the segment's layout.
 * Each process builds its own at most once per MG_REGION_MAP_INTERVAL_NS, and a request that
 * would build it is heavy (router.c: /api/nodes's heavy_when), so the build runs under the
 * anonymous line on a helper thread; a request that finds the map fresh is light. The
 * answer may so be up to the interval old (the freshness window, documented in README.md).
 *
 * Threads: a worker's loop and its helper threads each have a connection; the map is shared
 * by them under a read-write lock, which a build takes for writing only to swap its new map
 * in. SQL reaches the map through the function meshgate_in_regions(public_key, codes)
 * (registered on every connection by mg_db_open), codes being ",SJC,OAK," as ep_nodes.c
 * parses them.
 */
#ifndef MESHGATE_REGION_MAP_H
#define MESHGATE_REGION_MAP_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>

#define MG_REGION_MAP_INTERVAL_NS (300 * 1000000000LL)

/* Whether this process has a map of conn's database file younger than the interval at now
 * (CLOCK_MONOTONIC). A map is of one file: a process that opens another (tests) builds
 * another. */
bool mg_region_map_fresh(sqlite3 *conn, int64_t now_ns);

/* Builds the map from conn unless a fresh one exists; an SQLite code. */
int mg_region_map_refresh(sqlite3 *conn, int64_t now_ns);
/* The same on a worker's loop: *busy when another thread builds it now (nothing waits). */
int mg_region_map_try_refresh(sqlite3 *conn, int64_t now_ns, bool *busy);

/* Readers hold the map while they step a statement that uses it. */
void mg_region_map_read_begin(void);
void mg_region_map_read_end(void);
/* Which map the reader holds (process_table.h: mg_process_table_generation). */
uint64_t mg_region_map_generation(void);

/* Registers meshgate_in_regions on conn; an SQLite code. */
int mg_region_map_register(sqlite3 *conn);

/* Forgets the map: the next request builds it again (tests). */
void mg_region_map_forget(void);

/* The statement that reads the ADVERTs' keys and their observers (for plan tests). */
extern const char mg_region_map_adverts_sql[];

#endif

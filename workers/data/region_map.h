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
 * Once per group (group_table.h), as the relay table and the hash sizes: the map is a few
 * bytes per node and region (tens of kilobytes for CoreScope's largest networks), past what a
 * shared value holds, so one worker's pass stores it serialized in the shared result cache
 * under "regions|v1|<device>:<inode>|<interval number>" and the others decode their copy
 * (region_builds and region_copies count both). Unlike those tables it is made by no worker
 * at its start (region filters are rare): a starting worker, or one that replaces a worker
 * killed -9, takes the group's copy when there is one; else the first request with a region
 * is heavy (router.c: /api/nodes's heavy_when) and takes the group's copy, or follows the
 * group's pass, or claims and runs it on the worker's helper (parked meanwhile: nothing waits
 * on the loop). A request that finds the map older than MG_REGION_MAP_INTERVAL_NS is light,
 * answered from the map it has while the helper refreshes it the same way; the answer may so
 * be up to the interval and a rebuild old (the freshness window, documented in README.md).
 *
 * The map itself, its pass, its body and the SQL function that reads it are region_table.h's
 * (below the group's machinery: mg_db_open registers the function on every connection, and a
 * group table's pass opens its own connection, db.h).
 */
#ifndef MESHGATE_REGION_MAP_H
#define MESHGATE_REGION_MAP_H

#include "env.h"
#include "region_table.h"

#include <stdbool.h>
#include <stdint.h>

/* At a worker's start: the group's copy when there is one (no pass). */
void mg_region_map_adopt(struct mg_env *env);
/* Whether a request can have the map at once: this process has one, or the group's copy is
 * stored. */
bool mg_region_map_available(struct mg_env *env);

/* Before a request reads the map: when there is none, takes the group's copy, or follows or
 * claims and runs the group's pass; when it is stale, asks env's helper to refresh it and
 * returns at once. With busy (a request on the loop) nothing waits: *busy says the request
 * parks and asks again (group_table.h: mg_group_table_keep). An SQLite code. */
int mg_region_map_keep(struct mg_env *env, int64_t now_ns, bool *busy);

/* Forgets this process's map and (env not NULL) the group's copy: the next request takes
 * the group's copy or builds it again (tests). */
void mg_region_map_forget(struct mg_env *env);

#endif

/* SPDX-License-Identifier: ISC */
/*
 * node_relay: the relay-activity fields of a repeater or room, as CoreScope's server computes
 * them for /api/nodes and /api/nodes/{pubkey} (issues #662, #672, #1751 upstream):
 * last_relayed, relay_active, relay_count_1h, relay_count_24h, unscoped_relay_count_24h,
 * transported_scopes, traffic_share_score, and in the detail relay_window_hours.
 *
 * What CoreScope counts, from its packet store as it stands after a load from the database:
 *   - each transmission's path is its observation with the most hops (the newest of them:
 *     CoreScope loads them newest first), and the transmission is filed under each distinct hop of
 * that path, lowercased (byPathHop). The resolved_path keys it files at ingest are dropped when the
 * index is rebuilt at the end of the load, so a server that read the database files raw hops only;
 *   - ADVERTs (payload_type 4) are never relays;
 *   - a node K (lowercased key) relayed the transmissions filed under K or under its first
 *     byte K[:2] (a 1-byte hop), each once. 2- and 3-byte hops never match a 64-hex key;
 *   - relay_count_24h/1h: those whose first_seen parses as RFC 3339 and is after now - 24 h
 *     (1 h); unscoped_relay_count_24h: those of the 24 h with route_type 1 (FLOOD);
 *     last_relayed: the greatest parseable first_seen as stored; relay_active: it is within
 *     healthThresholds.relayActiveHours (24 by default); transported_scopes: the distinct
 *     non-empty scope_name of all of them, sorted, at most 32;
 *   - traffic_share_score: transmissions filed under K itself over every transmission with a
 *     payload type other than ADVERT (0 on real data: no hop is a whole key);
 *   - the list (/api/nodes) takes them from a map of hop keys, so a node whose key is not
 *     itself a hop gets zero counts, relay_active false and no last_relayed there, while its
 *     detail counts its 1-byte hop. meshgate answers the same way.
 * CoreScope's other usefulness fields (bridge_score, coverage_score, redundancy_score,
 * usefulness_score, usefulness_grade) are node_usefulness.h's; their traffic axis is the
 * traffic_share_score over the greatest of any hop key (mg_node_relay_traffic).
 *
 * Why a table, built once per group: the counts need every observation's path (the longest one
 * of each transmission), a scan (6.9 s at 2M observations on a loaded machine;
 * docs/benchmarks.md), so it is done once per MG_NODE_RELAY_INTERVAL_NS (CoreScope's own
 * recompute interval) into a table of hop keys (a few hundred to tens of thousands of entries).
 * One worker of the group makes the pass (one at a time: its claim) and stores the table,
 * serialized, in the shared result cache under "relay|v1|<device>:<inode>|<interval number>";
 * every other worker decodes its copy from there, at its start and whenever its copy is older
 * than the interval and the group's is newer. Each process reads its own decoded copy (a
 * sorted array, looked up per node row). A worker with no copy yet serves all else at once,
 * and the list and the detail too (mg_node_relay_keep_behind): they take the group's copy when
 * it is stored, and otherwise start the group's pass behind them. A table too large for the cache
 * (or the cache turned off) makes each process build its own, as before. The list reads only a
 * node's own entry, which no row has while no repeater's or room's key is under 7 characters and no
 * path text is 7 or more (real hops are 1 to 3 bytes): a probe of the paths, made and shared the
 * same way at the start (a fraction of the pass), lets the list answer without the table until then
 * (mg_node_relay_keep_list); before even the probe lands, the list and the detail answer as
 * for a node with no entry while both passes run behind them. The counts are those at the table's
 * build, up to the interval old (CoreScope's list is as old; its detail is computed per
 * request).
 */
#ifndef MESHGATE_NODE_RELAY_H
#define MESHGATE_NODE_RELAY_H

#include "node_fields.h"

#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>

struct mg_buf;
struct mg_env;

#define MG_NODE_RELAY_INTERVAL_NS (300 * 1000000000LL)
#define MG_NODE_RELAY_SCOPES_MAX 32 /* CoreScope's maxTransportedScopes */

/* At a worker's start: takes the group's table when the result cache holds one (no pass),
 * else starts the group's build on a thread of its own and returns (the worker serves
 * meanwhile; a worker that finds another's build under way leaves it to that one); without
 * the group's cache (MESHGATE_REACH_CACHE_TTL_MS=0), builds this process's own. */
void mg_node_relay_adopt(struct mg_env *env);
bool mg_node_relay_exist(sqlite3 *conn);
/* Whether a request can have the table at once: this process has one, or the group's copy is
 * stored (a copy and a decode, no pass). */
bool mg_node_relay_available(struct mg_env *env);
/* The list's (mg_node_relay_fields with detail false), which reads only a node's own entry:
 * as available and mg_group_table_keep, but the table is not needed (nor waited for) while the
 * group's probe says no node key and no path text can make one (a short key, a long hop). On the
 * loop (env->jobs set) keep_list waits for neither: before the probe or the table lands (their
 * passes started behind the request, mg_group_table_keep_behind), each row is written as a
 * node with no entry (relay_active false, counts 0), as CoreScope's list writes a node its
 * relay map lacks; pending is never set. */
bool mg_node_relay_list_available(struct mg_env *env);
int mg_node_relay_keep_list(struct mg_env *env, int64_t now_ns, int64_t now_realtime_ns,
                            bool *pending);
/* Before a request reads the table (the detail's): never waits on the loop; with no table here
 * and no group's copy, the group's pass is started behind the request and the fields are a
 * node's with no entry until it lands; a stale table is refreshed on env's helper. On a helper
 * or in process, a pass under way in the group is not waited for either; with none, the
 * group's pass is claimed and run there (mg_group_table_keep_behind). An SQLite code. */
int mg_node_relay_keep_behind(struct mg_env *env, int64_t now_ns, int64_t now_realtime_ns);
/* Drops this process's table and (env not NULL) the group's copy (tests). */
void mg_node_relay_forget(struct mg_env *env);

/* Readers hold the table while they write nodes. */
void mg_node_relay_read_begin(void);
void mg_node_relay_read_end(void);
/* Which table the reader holds (process_table.h: mg_process_table_generation). */
uint64_t mg_node_relay_generation(void);

/* Whether a node of this role gets the fields (CoreScope: "repeater" or "room"). */
bool mg_node_relay_role(const char *role);

/*
 * Adds the fields of the node with key pubkey to f (between read_begin and read_end), as the
 * list (detail false) or the detail writes them; the scopes' JSON goes into scopes, which
 * must live as long as f. now_realtime_ns decides relay_active.
 */
void mg_node_relay_fields(struct mg_node_fields *f, const char *pubkey, bool detail,
                          int64_t now_realtime_ns, struct mg_buf *scopes);

/* CoreScope's traffic axis of the node's usefulness (between read_begin and read_end): its
 * traffic_share_score over the greatest share of any hop key; 0 without a table. */
double mg_node_relay_traffic(const char *pubkey);

#endif

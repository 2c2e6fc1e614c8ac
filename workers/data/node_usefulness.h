/* SPDX-License-Identifier: ISC */
/*
 * node_usefulness: CoreScope's structural usefulness axes of a repeater or room (its issue
 * #672) for /api/nodes and /api/nodes/{pubkey}: bridge_score, coverage_score,
 * redundancy_score, and with the traffic axis (the relay table's, node_relay.h) the
 * composite usefulness_score and its usefulness_grade.
 *
 * The graph, as CoreScope's server scores it: not the neighbour graph it builds from the
 * observations (neighbor_graph.h, its /neighbors), but the one it loads from the
 * neighbor_edges table the ingestor keeps (at its start and every minute after):
 *   - rows with node_a, node_b and count not NULL; (a, b) and (b, a) are one edge (their
 *     counts summed, the newest last_seen kept; a last_seen that is not RFC 3339 with a T, or
 *     "YYYY-MM-DD HH:MM:SS" in UTC, is the year 1);
 *   - an edge with either end empty is skipped; its weight is min(1, count/100) x
 *     exp(-ln2/168 x hours since last_seen, 0 for a future one) x 1/3 (a loaded edge has no
 *     observers: one observer's confidence); a weight below 1e-9 (or not finite) is skipped;
 *   - ends are lowercased and trimmed; a self-loop is skipped; a pair met twice keeps its
 *     heaviest weight.
 * The axes, each normalized by its greatest value (all 0 when that is 0):
 *   - bridge: weighted betweenness (Brandes, Dijkstra on distance 1/weight, equal distances
 *     within 1e-12), halved;
 *   - coverage: harmonic reach, the sum of 1/distance to every node reachable;
 *   - redundancy: over the edges whose weight is at least 1/300 (one fresh sighting by one
 *     observer), the node pairs its removal disconnects ((S^2 - sum of pieces^2)/2);
 * and composite = 0.30 bridge + 0.25 coverage + 0.25 redundancy + 0.20 traffic, traffic being
 * the node's traffic_share_score over the greatest of any hop (each clamped to [0, 1]);
 * grade A from 0.65, B 0.45, C 0.30, D 0.15, else F. A repeater not in the graph scores 0 on
 * each axis and gets its grade (F with no traffic). A database without neighbor_edges (or
 * with no row) is an empty graph, as CoreScope's server has it once it reloaded the table.
 *
 * Built once per group (group_table.h), as the hash sizes are: one worker reads the table and
 * scores it, at a worker's start or when the group's copy is older than
 * MG_NODE_USEFULNESS_INTERVAL_NS (CoreScope's recompute interval), and stores the scores in
 * the shared result cache under "usefulness|v1|<device>:<inode>|<interval number>"; every
 * other worker decodes its copy from there (usefulness_builds, usefulness_copies). The pass (a
 * read of neighbor_edges and the scoring, O(V (E + V) log V): 30 s for the 2M shape's 2 000
 * nodes and 10 380 rows on the loaded machine, while an ASan build ran; 174 KB) is waited for
 * by no request: until a worker has the scores, the list and the detail answer at once with
 * what CoreScope's own scoring gives before its structural axes exist (its cold start,
 * compositeUsefulness with axesComputed false): bridge, coverage and redundancy 0, the
 * composite from the traffic axis alone, and no grade for a node with no traffic. (CoreScope's
 * server scores once before it listens, so it never serves that shape after a start with
 * neighbor_edges rows; it is the closest answer that waits for nothing and invents nothing.)
 * The answers switch to the scores as soon as the worker takes the group's copy. A stale copy
 * is served while the helper refreshes it.
 */
#ifndef MESHGATE_NODE_USEFULNESS_H
#define MESHGATE_NODE_USEFULNESS_H

#include "env.h"
#include "node_fields.h"

#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>

#define MG_NODE_USEFULNESS_INTERVAL_NS (300 * 1000000000LL)

/* At a worker's start: the group's copy, or the group's pass on a thread of its own. */
void mg_node_usefulness_adopt(struct mg_env *env);
/* Whether a request can have the scores at once: this process has them, or the group's copy
 * is stored. */
bool mg_node_usefulness_available(struct mg_env *env);
/* Before a request reads the scores (group_table.h: mg_group_table_keep_behind): the group's
 * copy when stored, else the group's pass started behind the request, which never waits for
 * it; stale ones are refreshed on the helper. An SQLite code. */
int mg_node_usefulness_keep(struct mg_env *env, int64_t now_ns, int64_t now_realtime_ns);

/* Readers hold the scores while they write nodes. */
void mg_node_usefulness_read_begin(void);
void mg_node_usefulness_read_end(void);
/* Which scores the reader holds (process_table.h: mg_process_table_generation). */
uint64_t mg_node_usefulness_generation(void);

/* Adds bridge_score, coverage_score, redundancy_score, usefulness_score and (when the scores
 * exist or an axis is not 0) usefulness_grade of the node with key pubkey to f (between
 * read_begin and read_end); traffic is the node's traffic axis over its greatest
 * (mg_node_relay_traffic). */
void mg_node_usefulness_fields(struct mg_node_fields *f, const char *pubkey, double traffic);

#endif

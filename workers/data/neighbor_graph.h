/* SPDX-License-Identifier: ISC */
/*
 * neighbor_graph: CoreScope's in-memory neighbour graph (BuildFromStore in its server), built
 * from the database as its packet store holds it after a load, and a node's neighbours as
 * its /api/nodes/{pubkey}/neighbors handler gives them.
 *
 * The build, as CoreScope's:
 *   - transmissions by first_seen (then id), each one's observations newest first, one per
 * (observer id, path_json); a path is the hops of path_json (none when it does not decode as
 * strings);
 *   - an ADVERT (payload_type 4) with an originator (decoded pubKey, from_node or from): heard
 *     with no hop, an edge originator - observer (prefix ""); with hops, originator - first
 *     hop; and for every observation with hops, observer - last hop. A hop is resolved among
 *     the nodes that can relay whose key starts with it (2 to 8 characters, or the whole key):
 *     one candidate (not the known end itself) makes a plain edge; none, or several, an
 *     ambiguous edge of the known end for that prefix with the candidates;
 *   - an edge between two nodes both with GPS more than 500 km apart is dropped;
 *   - each edge counts its observations (by prefix length: 0 for "", 1-3 bytes, else 0), its
 *     first and last time, SNR sum, and observers;
 *   - ambiguous edges are then resolved with the known end as context (a single candidate
 *     that is not a listener-only observer; else one whose edge to the known end scores at
 *     least 3 times the next and was seen 3 times; else the candidate with GPS nearest to the
 *     known end when it is a relay with GPS), then by Jaccard similarity of resolved
 *     neighbour sets (edges seen 3 times or more, best at least 3 times the second, or the
 *     only one above 0); a resolved edge merges into an existing one.
 * The answer: the node's edges with count >= min_count and score >= min_score (ambiguous ones
 * unless include_ambiguous is false), score = min(1, count/100) x exp(-ln2/168 x hours since
 * last seen); unresolved prefix entries whose prefix starts exactly one resolved neighbour's
 * key are folded into it; highest score first.
 *
 * Where it cannot equal CoreScope's: CoreScope walks Go maps (random order) when it resolves
 * and merges edges, so an edge's prefix after a merge and the order of equal scores vary
 * between its own runs; meshgate merges in key order and breaks ties by the edge's creation.
 */
#ifndef MESHGATE_NEIGHBOR_GRAPH_H
#define MESHGATE_NEIGHBOR_GRAPH_H

#include "buf.h"
#include "db.h"
#include "env.h"

#include <stdbool.h>
#include <stdint.h>

struct mg_neighbor_query {
    const char *pubkey; /* lowercased */
    int64_t min_count;
    double min_score;
    bool include_ambiguous;
    int64_t now_ms; /* the score's clock (Unix ms) */
};

/* How long a process keeps a graph (CoreScope's neighborGraphTTL). */
#define MG_NEIGHBOR_GRAPH_INTERVAL_NS (300 * 1000000000LL)

/*
 * Built once per group (group_table.h), as the relay table: one worker makes the pass (one pass
 * over observations with their transmissions and observers: 28 to 41 s at 2M observations on
 * a loaded machine) and stores the graph, serialized, in the shared result cache under
 * "neighbors|v2|<device>:<inode>|<interval number>"; every other worker that needs it decodes
 * its copy from there (neighbor_builds, neighbor_copies). Only a worker's start that finds the
 * group's copy takes it (a worker killed -9 comes back with it); none builds at its start. A
 * graph too large for the cache is logged once and each worker builds its own.
 */

/* At a worker's start: the group's copy when the cache holds one; no pass. */
void mg_neighbor_graph_adopt(struct mg_env *env);
/* Whether a request can have the graph at once: this process has one, or the group's copy is
 * stored. */
bool mg_neighbor_graph_available(struct mg_env *env);
/* Before a request reads the graph (group_table.h: mg_group_table_keep): on the loop (pending
 * not NULL) nothing waits, *pending says the request parks while the worker's helper takes
 * the group's copy or follows or makes the group's pass; a stale graph is refreshed on the
 * helper while this one answers. An SQLite code. */
int mg_neighbor_graph_keep(struct mg_env *env, int64_t now_ms, bool *pending);

/* Writes the node's answer (a JSON object and "\n") into body from this process's graph (made
 * sure of on the loop by mg_neighbor_graph_keep; when there is none, this process's own pass
 * here); an SQLite code. Each node's report costs a walk of the edges. */
int mg_neighbor_graph_answer(struct mg_db *db, const struct mg_neighbor_query *q,
                             struct mg_buf *body);
/*
 * The whole graph as CoreScope's /api/analytics/neighbor-graph gives it, from this process's
 * graph (as mg_neighbor_graph_answer): the edges (not ambiguous ones' merged halves) with
 * count >= min_count and score >= min_score; with role, those with an end (an ambiguous
 * edge's known end only when it sorts before its "prefix:<hop>") whose node's role is role
 * (any case); with region (IATA codes, uppercased, comma-separated) naming any observer, those
 * one of whose observers is one of the region's (ids as stored against the graph's lowercased
 * ones, as CoreScope compares them); without an edge one of whose ends is hidden
 * (node_visibility.h: its key, or a node's name). An ambiguous edge's target is
 * "prefix:<hop>". The nodes are the kept edges' ends in order of first sight (CoreScope's
 * come in Go's map order, as do its edges), each with its name and role (CoreScope's node
 * map: the nodes table, then observers as "observer") and how many kept edges name it.
 * rejected_edges_geo_far counts the build's upserts dropped for ends over 500 km apart. Costs
 * a walk of the edges; an SQLite code.
 */
struct mg_neighbor_graph_query {
    int64_t min_count;
    double min_score;
    const char *role;   /* lowercased; NULL or "": any */
    const char *region; /* NULL or "": none */
    int64_t now_ms;
};
int mg_neighbor_graph_whole(struct mg_db *db, const struct mg_neighbor_graph_query *q,
                            struct mg_buf *body);
/* Drops this process's graph and (env not NULL) the group's copy (tests). */
void mg_neighbor_graph_forget(struct mg_env *env);

/* Holds this process's graph for reading, kept first as by mg_neighbor_graph_keep (busy its
 * pending: the request parks and asks again, nothing is held); an SQLite code. Release it
 * when done (only after SQLITE_OK without *busy). */
int mg_neighbor_graph_hold(struct mg_env *env, int64_t now_ms, bool *busy);
void mg_neighbor_graph_release(void);
/* CoreScope's Score times its Confidence of an edge seen count times, last at last_ms, by
 * observers distinct observers (the persisted neighbor_edges rows have none: 1/3). */
double mg_neighbor_graph_weight(int64_t count, int64_t last_ms, int64_t observers, int64_t now_ms);
/* Between hold and release: the score (CoreScope's Score, times its Confidence when asked) of
 * the resolved edge between two lowercased keys, 0 when there is none; its count in *count. */
double mg_neighbor_graph_edge_score(const char *a, const char *b, int64_t now_ms,
                                    bool with_confidence, int64_t *count);
/* Between hold and release: whether a resolved edge joins two lowercased keys; its count and
 * last sighting (Unix ms) in *count and *last_ms. */
bool mg_neighbor_graph_edge_seen(const char *a, const char *b, int64_t *count, int64_t *last_ms);

#endif

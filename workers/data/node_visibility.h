/* SPDX-License-Identifier: ISC */
/*
 * node_visibility: the one predicate that decides which nodes an answer may show, from the
 * three settings of CoreScope's config.json that hide nodes (workers/data/corescope_config.h):
 *
 *   nodeBlacklist       keys (trimmed, lowercased) a node is hidden by;
 *   hiddenNamePrefixes  a node whose name starts with one is hidden (an owner opts out by
 *                       renaming the node "🚫 ...");
 *   geo_filter          a polygon (or box) plus bufferKm: a node with a position outside it
 *                       is left out of the node list. A node without a position, at (0, 0),
 *                       or flagged foreign (nodes.foreign_advert) stays in.
 *
 * Where CoreScope's server applies them, and so meshgate:
 *   hidden (blacklist or prefix)  omitted from /api/nodes, /api/nodes/search,
 *                                 /api/nodes/bulk-health, /api/nodes/clock-skew, and as a
 *                                 candidate of /api/resolve-hops; every /api/nodes/{pubkey}...
 *                                 route answers 404 "Not found" for it (mg_node_key_hidden).
 *   outside the geo_filter        omitted from /api/nodes only; found by search and
 *                                 described by its own routes.
 * Packets, paths, neighbours' lists and observers still name a hidden node (its rows are
 * history; CoreScope hides the node, not the traffic), and the role counts and /api/stats
 * count it.
 *
 * observerBlacklist (keys trimmed and lowercased) hides observers, where CoreScope's server
 * does: omitted from /api/observers, and /api/observers/{id} answers 404 "Observer not found"
 * for an id that is blacklisted once trimmed and lowercased. Nothing else: the observer's
 * analytics, its observations in packets, the observer counts of /api/stats and the regions
 * its IATA code names still answer (mg_observer_hidden).
 *
 * The rules are built once per process per configuration (mg_corescope's generation, so a
 * SIGHUP's new workers apply the new file) into hash sets of keys: a lookup costs one hash
 * and the prefixes' compares, whatever the database holds.
 */
#ifndef MESHGATE_NODE_VISIBILITY_H
#define MESHGATE_NODE_VISIBILITY_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>

/* Whether the configuration hides anything (a blacklist, a prefix, or a geo_filter). */
bool mg_node_visibility_active(void);
/* Whether it hides by key or name (a blacklist or a prefix). */
bool mg_node_visibility_hides(void);

/* Hidden: key (compared trimmed and lowercased) blacklisted, or name (NULL: "") starting with
 * a hidden prefix. */
bool mg_node_hidden(const char *key, const char *name);
/* An observer of observerBlacklist: id (compared trimmed and lowercased) in it. */
bool mg_observer_hidden(const char *id);
/* In the node list: not hidden, and foreign, or without a position, or passing geo_filter. */
bool mg_node_listed(const char *key, const char *name, bool located, double lat, double lon,
                    bool foreign);

/*
 * SQL functions on conn (every worker connection has them, db.c):
 *   meshgate_node_hidden(public_key, name)                   1 when mg_node_hidden
 *   meshgate_node_listed(public_key, name, lat, lon, foreign) 1 when mg_node_listed
 * lat or lon NULL: no position.
 */
int mg_node_visibility_register(sqlite3 *conn);

/* The SQL of "this row of nodes is in the list" (its foreign flag is 0 without the column). */
const char *mg_node_listed_sql(bool has_foreign_column);

/*
 * area=: a key of the configuration's "areas". A node is in an area when it has a position,
 * not (0, 0), inside the area's polygon or box (mg_corescope_area_holds). As CoreScope's
 * resolveAreaNodes: a key the configuration lacks, or an area with no node inside, filters
 * nothing. SQL: meshgate_in_area(lat, lon, key) is 1 when (lat, lon) is in area key.
 */
struct mg_area_nodes {
    char **key; /* sorted (bytewise) */
    size_t n;
};
/* The nodes in area key into *out (empty: filter nothing); an SQLite code. */
int mg_area_nodes_load(sqlite3 *conn, const char *key, struct mg_area_nodes *out);
bool mg_area_nodes_filter(const struct mg_area_nodes *a); /* whether it filters */
bool mg_area_nodes_has(const struct mg_area_nodes *a, const char *key);
void mg_area_nodes_free(struct mg_area_nodes *a);

/*
 * Whether the node key (lowercased) names is hidden: the key is blacklisted, or the node whose
 * key it is (by_prefix, when there is none: the one node whose key starts with it) is hidden
 * by its name. A node not found is not hidden here (its route answers for it). An SQLite
 * code; *hidden set. The routes of one node ask it before their handler runs (router.h,
 * mg_node_visibility_guard).
 */
int mg_node_key_hidden(sqlite3 *conn, const char *key, bool by_prefix, bool *hidden);

#endif

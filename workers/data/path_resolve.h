/* SPDX-License-Identifier: ISC */
/*
 * path_resolve: what CoreScope's analytics over paths share (the topology and distance,
 * ep_analytics_topo.c; the subpaths, ep_analytics_subpaths.c): every transmission with its
 * display observation, and a path's hops resolved to relays as CoreScope's resolveWithContext
 * does.
 *
 * A transmission's path is CoreScope's display observation's (its pickBestObservation): the
 * one with the most hops, the newest of those (its store keeps observations newest first); its
 * SNR, RSSI and observer are that observation's. Transmissions come oldest first_seen first,
 * then by id. A hop is resolved among its candidates (hop_nodes.h) by the tiers of CoreScope's
 * resolver: affinity (the best edge to a context key, from the persisted neighbor_edges table
 * CoreScope's server loads and reloads every minute), then the candidate nearest the context's
 * centroid, then the one with a position and most adverts, then most adverts. A context is a
 * set of keys: senders, observers whose id is hex, the keys of hops naming one relay only.
 */
#ifndef MESHGATE_PATH_RESOLVE_H
#define MESHGATE_PATH_RESOLVE_H

#include "corescope_window.h"
#include "db.h"
#include "hop_nodes.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#define MG_PATH_MAX_HOPS 64
#define MG_HOP_TEXT_MAX 2048

/* ---- an interning table of texts ---- */

struct mg_texts {
    char **s;
    size_t *len;
    size_t n, cap;
    uint32_t *slot; /* index + 1 */
    size_t slots;
    bool failed;
};

/* The id of the len bytes at p (added when add), -1 when absent or out of memory. */
long mg_texts_id(struct mg_texts *t, const char *p, size_t len, bool add);
void mg_texts_free(struct mg_texts *t);

/* A growable array of anything. */
#define MG_GROW(arr, n, cap, fail)                                                                 \
    do {                                                                                           \
        if ((n) == (cap)) {                                                                        \
            size_t grow_cap_ = (cap) ? (cap)*2 : 64;                                               \
            void *grow_p_ = realloc((arr), grow_cap_ * sizeof *(arr));                             \
            if (!grow_p_) {                                                                        \
                fail = true;                                                                       \
                break;                                                                             \
            }                                                                                      \
            (arr) = grow_p_;                                                                       \
            (cap) = grow_cap_;                                                                     \
        }                                                                                          \
    } while (0)

/* A small open-addressing map of two longs to an index. */
struct mg_pairmap {
    long (*k)[2];
    size_t *v;
    size_t n, slots;
};

/* The index stored for (a, b), or the one given (stored) when new; SIZE_MAX out of memory. */
size_t mg_pairmap_get(struct mg_pairmap *m, long a, long b, size_t fresh, bool *made);
void mg_pairmap_free(struct mg_pairmap *m);

/* ---- hop resolution ---- */

struct mg_hop_adj {
    long other; /* a key id */
    double weighted;
    int64_t count;
};

struct mg_resolver {
    struct mg_hop_nodes nodes; /* in table order */
    size_t *by_lower;          /* indexes, by lowercased key */
    long *key_id;              /* each node's lowercased key's id in keys */
    struct mg_texts keys;      /* lowercased keys: nodes, context, graph ends */
    struct mg_hop_adj **adj;   /* by node: its resolved edges */
    size_t *adj_n, *adj_cap;
    long *unique_of; /* by key id: the one node it names, -1 none or several, -2 unknown */
    size_t unique_cap;
    int64_t now_ms;
    bool failed;
};

/* The relays (hop_nodes.h) and, from the neighbour graph, each one's resolved edges. */
int mg_resolver_load(struct mg_resolver *r, struct mg_db *db, int64_t now_ms);
void mg_resolver_free(struct mg_resolver *r);
/* The candidates of hop (lowercased, len bytes) into out (table order); their number. out has
 * room for every node. */
size_t mg_resolver_candidates(const struct mg_resolver *r, const char *hop, size_t len,
                              size_t *out);

/* A context: key ids (lowercased), each once; in_set marks them for the topology's. */
struct mg_hop_context {
    long *id;
    size_t n, cap;
    bool *in_set;
    size_t set_cap;
    double lat, lon; /* the centroid of its keys that name one relay with a position */
    int located;
    bool failed;
};

void mg_hop_context_reset(struct mg_hop_context *c);
void mg_hop_context_free(struct mg_hop_context *c);
/* Adds a key (any case; len bytes) to the context. */
void mg_hop_context_add(struct mg_resolver *r, struct mg_hop_context *c, const char *key,
                        size_t len);
/* An observer id is context when it looks like a key: 4 or more hex digits. */
void mg_hop_context_add_observer(struct mg_resolver *r, struct mg_hop_context *c, const char *id);
/* Adds the keys of the hops (n) that name one relay only (CoreScope's anchors). */
void mg_hop_context_add_anchors(struct mg_resolver *r, struct mg_hop_context *c, char *const *hops,
                                int n, size_t *scratch);
/* The context's centroid (CoreScope's geo tier): its keys naming one relay with a position.
 * Call it once the keys are in, before resolving. */
void mg_hop_context_centroid(struct mg_resolver *r, struct mg_hop_context *c, size_t *scratch);
/* The node hop (as stored, len bytes) resolves to in context c, or -1; match has room for
 * every node. */
long mg_resolve_hop(struct mg_resolver *r, const struct mg_hop_context *c, const char *hop,
                    size_t len, size_t *match);

/* ---- the scan ---- */

/* One transmission, as the scan hands it over. */
struct mg_scan_tx {
    int64_t id;
    const char *first_seen, *hash, *pubkey, *node; /* "" when absent */
    bool has_obs, has_snr, has_rssi, in_region;
    double snr, rssi;
    const char *observer, *observer_name, *path; /* the display observation's */
};

typedef int mg_scan_fn(void *arg, const struct mg_scan_tx *tx);

/*
 * Hands every transmission (first_seen inside w when given), in CoreScope's store's order,
 * with its display observation, to fn; in_region says whether an observer whose IATA is one of
 * codes (uppercased, comma-separated; "" none) heard it; node is the ADVERT's node when
 * with_area. fn returning non-zero stops the scan with that code. An SQLite code.
 */
int mg_path_scan(struct mg_db *db, const struct mg_cs_window *w, const char *codes, bool with_area,
                 mg_scan_fn *fn, void *arg);
/* A path's hops (CoreScope's: a JSON array of strings, a null an empty one; anything else is
 * none) into hops (at most MG_PATH_MAX_HOPS), their text in buf; their number. */
int mg_split_hops(const char *path, char *buf, size_t cap, char **hops);

#endif

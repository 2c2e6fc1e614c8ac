/* SPDX-License-Identifier: ISC */
/*
 * hop_nodes: the nodes a path's hop prefix may name, as CoreScope's prefix map holds them
 * (ep_resolve_hops.c): nodes that can relay (a role containing "repeater" or "room_server",
 * or "room"), without an active observer that reported it does not relay, in table order.
 */
#ifndef MESHGATE_HOP_NODES_H
#define MESHGATE_HOP_NODES_H

#include "db.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MG_HOP_PREFIX_MAX 8 /* CoreScope's maxPrefixLen */

struct mg_hop_node {
    char *key;   /* as stored */
    char *lower; /* lowercased */
    char *name;  /* "" when NULL */
    double lat, lon;
    bool has_gps;
    int64_t adverts;
};

struct mg_hop_nodes {
    struct mg_hop_node *v;
    size_t len, cap;
};

/* Appends the nodes to out (zeroed first); an SQLite code. Free with mg_hop_nodes_free. */
int mg_hop_nodes_load(struct mg_db *db, struct mg_hop_nodes *out);
void mg_hop_nodes_free(struct mg_hop_nodes *n);
/* Whether n is a candidate of hop (lowercased, len chars): a prefix of 2 to 8 characters of
 * its key, or the whole key. */
bool mg_hop_names(const struct mg_hop_node *n, const char *hop, size_t len);
/* CoreScope's tiebreak among candidates: more adverts, then the smaller key. */
bool mg_hop_better(const struct mg_hop_node *a, const struct mg_hop_node *b);

#endif

/* SPDX-License-Identifier: ISC */
/*
 * hash_size: the hash size a node announces in its ADVERTs (the path byte of each), and what
 * its ADVERTs of the last 7 days say, as CoreScope computes it: the node detail computes it
 * afresh, the node list reads the group's table of it (node_hash_sizes.h).
 */
#ifndef MESHGATE_HASH_SIZE_H
#define MESHGATE_HASH_SIZE_H

#include "db.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The hash sizes' window: ADVERTs first seen from this text on (or without a time) count;
 * "YYYY-MM-DDTHH:MM:SS.000Z" of now_s minus 7 days, compared as text as CoreScope does
 * (cap >= 25). */
void mg_node_hash_sizes_cutoff(int64_t now_s, char *out, size_t cap);

/* The hash size an ADVERT's raw bytes announce (1..4), from its path byte; 0 when the
 * packet is too short, not hex, or a direct zero-hop ADVERT (whose path byte says nothing). */
int mg_advert_hash_size(const char *raw_hex);

struct mg_node_hash_sizes {
    bool known;         /* some ADVERT of the window announced a size */
    int size;           /* the newest one's */
    bool inconsistent;  /* flip-flopping between sizes and not settled */
    unsigned seen_mask; /* bit s set: size s was seen */
};

/* From sizes in time order, oldest first. */
void mg_node_hash_sizes_of(struct mg_node_hash_sizes *hs, const int *sizes_by_time, size_t n);

/* From the node's ADVERTs of the 7 days before now_s; an SQLite code. */
int mg_node_hash_sizes(struct mg_db *db, const char *pubkey, int64_t now_s,
                       struct mg_node_hash_sizes *out);

#endif

/* SPDX-License-Identifier: ISC */
/*
 * node_read: what the node endpoints read alike (ep_node_detail.c, ep_node_health.c,
 * ep_node_clock.c), so that none of them includes another.
 */
#ifndef MESHGATE_NODE_READ_H
#define MESHGATE_NODE_READ_H

#include "db.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One read transaction around a node endpoint's statements (one snapshot): begun only when
 * none is open; end it with what begin returned. */
bool mg_node_read_begin(struct mg_db *db);
void mg_node_read_end(struct mg_db *db, bool began);

/* The ids of the transmissions CoreScope files under pubkey (its decoded keys, resolved paths
 * and path hops only it can be; ep_node_health.c), by id, into *ids (to free); an SQLite
 * code. One pass over observations and one over transmissions. */
int mg_node_packet_ids(struct mg_db *db, const char *pubkey, int64_t **ids, size_t *n);

#endif

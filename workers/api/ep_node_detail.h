/* SPDX-License-Identifier: ISC */
/*
 * ep_node_detail: GET /api/nodes/search and GET /api/nodes/{pubkey} (the handlers are
 * declared in router.h), and what the detail derives from a node's own ADVERTs, exposed
 * so that tests can check it on its own.
 */
#ifndef MESHGATE_EP_NODE_DETAIL_H
#define MESHGATE_EP_NODE_DETAIL_H

#include "db.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The most flood ADVERTs flood_advert_count_7d reads (CoreScope's cap: a node past it
 * is a spammer whatever the count says). */
#define MG_NODE_FLOOD_ADVERT_ROWS 50000

/* A node that sent more transmissions than this (ever) makes its detail heavy. */
#define MG_NODE_DETAIL_LIGHT_ROWS 8
/* Nor may their observations be more than this: the detail writes every observation of the
 * node's 20 newest transmissions (a node of 2 transmissions heard 800 times each wrote
 * 670 KB). */
#define MG_NODE_DETAIL_LIGHT_OBSERVATIONS 32

/* Distinct flood ADVERTs of the node first seen in the 7 days before now_ns; an SQLite code. */
int mg_node_flood_adverts(struct mg_db *db, const char *pubkey, int64_t now_ns, int64_t *count);

#endif

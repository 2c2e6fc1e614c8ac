/* SPDX-License-Identifier: ISC */
/*
 * node_multibyte: every node's multi-byte capability (multi_byte_status, multi_byte_evidence,
 * multi_byte_max_hash_size) on /api/nodes and /api/nodes/{pubkey}, as CoreScope's server infers
 * it for every node of the nodes table at each analytics cycle (its computeMultiByteCapability):
 *   - "confirmed", "advert": an ADVERT of the last 7 days announced 2 bytes or more (the hash
 *     sizes' table, node_hash_sizes.h, whose fields the node already has: mg_node_hash_fields);
 *     else the newest of all its ADVERTs (by first_seen, then id; named by the decoded pubKey,
 *     else public_key) whose path byte says 1 to 3 bytes and that is not a direct zero-hop one
 *     says 2 or 3;
 *   - "suspected", "path": else its key's first 1, 2 or 3 bytes (lowercased) are a hop of a
 *     transmission (not a TRACE, payload_type 8) whose path byte says 2 bytes or more, the hops
 *     being those of the transmission's observation with the most hops (the newest of them), as
 *     CoreScope files them; the size is the greatest such (CoreScope: the first such
 *     transmission's, which is the same unless one hop is in paths of two sizes);
 *   - "unknown", "": else, with size 1.
 * A node added to the table after the scan has no such fields until the next one (as in
 * CoreScope, until its next cycle).
 *
 * Built once per group (group_table.h) every MG_NODE_MULTIBYTE_INTERVAL_NS (CoreScope's analytics
 * interval): one pass over the ADVERTs, one over every transmission's path byte, and for the
 * multi-byte ones their longest observation (by transmission id, indexed): 88 s at 2M
 * observations on the loaded machine, while an ASan build ran (152 KB for 2 000 nodes); stored in
 * the shared result cache under "multibyte|v1|<device>:<inode>|<interval number>" and copied by the
 * other workers (multibyte_builds, multibyte_copies). No request waits for the pass: until a
 * worker has the table, the list and the detail answer at once with what CoreScope's server
 * serves before its first analytics cycle (its loadMultibyteCapFromDB): the capability its
 * ingestor keeps in the nodes table, multibyte_sup 2 "confirmed" or 1 "suspected" with
 * multibyte_evidence and size 0, for rows above 0 (none on a schema without the columns),
 * read once per process; then the pass's table as soon as the worker takes the group's copy.
 */
#ifndef MESHGATE_NODE_MULTIBYTE_H
#define MESHGATE_NODE_MULTIBYTE_H

#include "env.h"
#include "hash_size.h"
#include "node_fields.h"

#include <stdbool.h>
#include <stdint.h>

#define MG_NODE_MULTIBYTE_INTERVAL_NS (300 * 1000000000LL)

/* At a worker's start: the group's copy, or the group's pass on a thread of its own. */
void mg_node_multibyte_adopt(struct mg_env *env);
/* Whether a request can have the table at once (this process's, or the group's copy). */
bool mg_node_multibyte_available(struct mg_env *env);
/* As mg_node_usefulness_keep (group_table.h: mg_group_table_keep_behind), and with no table
 * the nodes table's kept capability read once. An SQLite code. */
int mg_node_multibyte_keep(struct mg_env *env, int64_t now_ns, int64_t now_realtime_ns);

void mg_node_multibyte_read_begin(void);
void mg_node_multibyte_read_end(void);
uint64_t mg_node_multibyte_generation(void);

/* Adds the node's multi_byte_* fields to f (between read_begin and read_end, and f written
 * before read_end) unless its hash sizes (hs, NULL: none known) confirm it already
 * (mg_node_hash_fields gave them). */
void mg_node_multibyte_fields(struct mg_node_fields *f, const char *pubkey,
                              const struct mg_node_hash_sizes *hs);

#endif

/* SPDX-License-Identifier: ISC */
/*
 * node_hash_sizes: the hash size every node announced in its ADVERTs of the last 7 days, for
 * the node list (hash_size, hash_size_inconsistent, hash_sizes_seen, and the multi-byte
 * capability an ADVERT confirms), as CoreScope computes it for /api/nodes: ADVERTs
 * (payload_type 4) by the decoded_json field pubKey (else public_key), first_seen not before
 * the cutoff (or empty), each one's size from its path byte (mg_advert_hash_size), in time
 * order (ties by id).
 *
 * Why a table: per node, the week's ADVERTs are a walk of its own rows, and a list page of
 * 2000 nodes would walk them all per request. The table is built by one pass over the
 * week's ADVERTs (idx_transmissions_payload_type) into an array sorted by key, and looked up
 * by binary search as each node is written. The pass costs 1.0 to 1.2 s at 2M observations
 * (99 000 ADVERTs in the week), so it is made once per group and copied, as the relay table
 * is (group_table.h): one worker builds it and stores it serialized in the shared result
 * cache under "hashsizes|v1|<device>:<inode>|<interval number>"; the others, and a worker
 * that replaces one killed, decode their copy from there (hash_size_builds and
 * hash_size_copies count both). A worker starts serving at once: its start takes the group's
 * copy, or makes or leaves to another worker the group's pass on a thread of its own; until
 * a copy is there, /api/nodes does not wait for it (mg_node_hash_sizes_keep_behind): it writes
 * each node as one that announced no size, as CoreScope's row is before its enrichment (a
 * node's week of ADVERTs, some 50 at 2M, is too many rows to read per listed node), and the
 * analytics that count sizes take the group's copy, or follow the group's build, or claim and
 * run it. A request that finds the table older
 * than MG_NODE_HASH_SIZES_INTERVAL_NS asks the worker's helper thread to refresh it the same
 * way and answers from the one it has. CoreScope itself recomputes it at most every 15 s,
 * from memory. The list's hash sizes may so be up to the interval and a rebuild old; a
 * node's detail computes its own afresh.
 *
 * Threads: the loop and the helper threads share the table under a read-write lock, taken
 * for writing only to swap a new table in; readers hold it while they write nodes.
 */
#ifndef MESHGATE_NODE_HASH_SIZES_H
#define MESHGATE_NODE_HASH_SIZES_H

#include "hash_size.h"
#include "env.h"

#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MG_NODE_HASH_SIZES_INTERVAL_NS (300 * 1000000000LL)

/* Whether this process has a table of conn's database file younger than the interval at
 * now_ns (CLOCK_MONOTONIC). */
bool mg_node_hash_sizes_fresh(sqlite3 *conn, int64_t now_ns);

/* Whether this process has a table of conn's file, whatever its age. */
bool mg_node_hash_sizes_exist(sqlite3 *conn);

/* At a worker's start: the group's copy, or the group's pass on a thread of its own (the
 * worker serves meanwhile); without the group's cache, this process's own pass here. */
void mg_node_hash_sizes_adopt(struct mg_env *env);
/* Whether a request can have the table at once: this process has one, or the group's copy is
 * stored. */
bool mg_node_hash_sizes_available(struct mg_env *env);

/* What a request calls before it reads the table: when there is none, takes the group's copy,
 * or follows or claims and runs the group's pass; when it is stale, asks env's helper thread
 * to refresh it (once at a time per process; without a helper, in-process tests, here) and
 * returns at once. With busy (a request on the loop) nothing waits: with no table and no
 * group's copy, the pass or the wait for it runs on the helper and *busy says the request
 * parks and asks again. An SQLite code. */
int mg_node_hash_sizes_keep(struct mg_env *env, int64_t now_ns, int64_t now_s, bool *busy);
/* The node list's: never waits on the loop (env->jobs set); with no table here and no group's
 * copy, the group's pass is started behind the request (mg_group_table_keep_behind) and the
 * list writes each node as one that announced no size (hash_size null, as CoreScope's row has
 * it before its enrichment) until the table lands. On a helper or in process: keep. */
int mg_node_hash_sizes_keep_behind(struct mg_env *env, int64_t now_ns, int64_t now_s);

/* Readers hold the table while they look keys up. */
void mg_node_hash_sizes_read_begin(void);
void mg_node_hash_sizes_read_end(void);
/* Which table the reader holds (process_table.h: mg_process_table_generation). */
uint64_t mg_node_hash_sizes_generation(void);

/* The node's entry (between read_begin and read_end); false when it announced none (or
 * there is no table). */
bool mg_node_hash_sizes_lookup(const char *key, struct mg_node_hash_sizes *out);

/* Forgets this process's table and (env not NULL) the group's copy: the next request takes
 * the group's copy or builds it again (tests). */
void mg_node_hash_sizes_forget(struct mg_env *env);

#endif

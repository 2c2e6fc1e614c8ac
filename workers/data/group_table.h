/* SPDX-License-Identifier: ISC */
/*
 * group_table: a process_table built once for the worker group and copied by every worker
 * (the relay table, node_relay.h; the node list's hash sizes, node_hash_sizes.h).
 *
 * One worker makes the pass (its claim in the shared result cache makes it one at a time in
 * the group) and stores the table, serialized (encode; the bodies: group_body.h), in the cache
 * under
 * "<name>|v<version>|<device>:<inode>|<interval number>"; every other worker decodes its copy
 * from there, at its start and whenever its copy is older than the interval and the group's
 * is newer. Each process reads its own decoded copy. A worker with no copy yet serves all else
 * at once (its start build runs on a thread of its own); a request that needs the table is
 * heavy and takes the group's copy; on a worker's loop, where nothing waits, when there is no
 * copy yet it parks while the worker's helper follows the group's build or claims and runs it.
 * A table too large for the cache (logged once per process), or the cache turned off
 * (MESHGATE_REACH_CACHE_TTL_MS=0), makes each process build its own (on the helper too). The passes
 * and the copies are counted in the result cache's counters named by builds and copies
 * (result_cache.h: MG_CACHE_COUNTER_LIST). A worker killed -9 comes back with the group's copy.
 *
 * With MESHGATE_STATE_DIR, the group's pass also writes its body to a state file
 * (state_file.h), and a start with no copy in the cache takes it from there (one worker reads
 * it, the others wait for that): stored under the last interval's key with a build time older
 * than the interval, it is a stale copy every worker serves at once while the first request
 * that reads it has the pass run again, as with the last interval's copy.
 */
#ifndef MESHGATE_GROUP_TABLE_H
#define MESHGATE_GROUP_TABLE_H

#include "buf.h"
#include "env.h"
#include "group_body.h"
#include "job.h"
#include "process_table.h"
#include "table_stats.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mg_group_table;

/* A job on the worker's helper thread: the rebuild of a stale table, or the fetch of a
 * missing one while the request that needs it is parked. */
struct mg_group_rebuild {
    struct mg_job job; /* first: the thread hands this pointer back */
    struct mg_group_table *g;
    struct mg_env *env; /* &env_copy: the job outlives the request's env (dispatch.c gives an
                         * own_jobs route a copy on its stack) */
    struct mg_env env_copy;
    int64_t now_ns, now_realtime_ns;
    int rc; /* the fetch's, on the helper */
    bool submitted;
};

/* What a pass is given (the build's arg). */
struct mg_group_build_arg {
    int64_t realtime_ns; /* the realtime clock (ns) the table is relative to */
    struct mg_env *env;  /* NULL: none (tests) */
};

struct mg_group_table {
    struct mg_process_table *table;
    const char *name; /* the cache key's first part */
    const char *what; /* names the table in the log */
    unsigned version; /* of the body */
    /* The pass: arg points to a struct mg_group_build_arg. */
    void *(*build)(sqlite3 *conn, void *arg, int *rc);
    void (*encode)(const void *table, int64_t built_ns, struct mg_buf *out);
    void *(*decode)(const void *data, size_t len, int64_t *built_ns); /* NULL: not a table */
    size_t builds, copies;  /* offsetof their counters in struct mg_result_cache */
    enum mg_table_id stats; /* what the table reports (table_stats.h) */
    /* A table only some requests read (the neighbour graph, the region map): a worker's start
     * takes the group's copy, on a thread, when there is one, and builds nothing; the first
     * request that needs it parks while the helper takes the copy or makes or follows the
     * group's pass (the loop never decodes it). */
    bool lazy;
    /* state */
    atomic_bool too_large;    /* set once a table was too large: this process builds its own */
    atomic_bool state_warned; /* set once a table could not be written to MESHGATE_STATE_DIR */
    pthread_mutex_t lock;
    struct mg_group_rebuild rebuild, fetch;
    int64_t behind_ns; /* when mg_group_table_keep_behind last started the pass (the loop's) */
};

#define MG_GROUP_TABLE_INIT(...)                                                                   \
    {                                                                                              \
        __VA_ARGS__, .lock = PTHREAD_MUTEX_INITIALIZER                                             \
    }

/* At a worker's start: takes the group's table when the cache holds one (no pass), else
 * starts the group's build on a thread of its own and returns (the worker serves meanwhile);
 * without the group's cache, builds this process's own here. A lazy table: only the copy. */
void mg_group_table_adopt(struct mg_group_table *g, struct mg_env *env);
/* Whether a request can have the table at once: this process has one, or the group's copy is
 * stored (a copy and a decode, no pass). */
bool mg_group_table_available(struct mg_group_table *g, struct mg_env *env);
/* Before a request reads the table: when there is none, the group's copy is taken, or the
 * group's build followed or claimed and run; a stale one is refreshed the same way on env's
 * helper, without waiting for another worker's build. On the loop (env->jobs set, pending
 * not NULL) nothing waits: what would (the group's build, this process's lock, a pass) runs
 * on env's helper and *pending says the request parks (mg_park_until) until the helper's
 * eventfd says the fetch is done; on a helper
 * (env->jobs NULL) or with pending NULL it waits. An SQLite code. */
int mg_group_table_keep(struct mg_group_table *g, struct mg_env *env, int64_t now_ns,
                        int64_t now_realtime_ns, bool *pending);
/* For a request that answers without the table while it is built (the fields as CoreScope
 * gives them before its first pass): this process's table, or the group's copy taken now when
 * one is stored; else, at most once a second, the group's pass is started behind the request
 * on env's helper (claimed and run there, or nothing when another worker or this process's
 * start runs it) and the request goes on without it. A stale table is refreshed on the helper
 * as mg_group_table_keep does. Never waits on the loop (env->jobs set); on a helper or in
 * process (env->jobs NULL) a pass under way (this process's or another worker's) is not
 * waited for either, and with none the group's pass is claimed and run there (else it is
 * mg_group_table_keep). An SQLite code. */
int mg_group_table_keep_behind(struct mg_group_table *g, struct mg_env *env, int64_t now_ns,
                               int64_t now_realtime_ns);
/* This process's table, or the group's copy taken now when one is stored (a copy and a
 * decode; never a wait, nor a pass): whether this process has one. */
bool mg_group_table_take(struct mg_group_table *g, struct mg_env *env);
/* Drops this process's table and (env not NULL) the group's copy (tests). */
void mg_group_table_forget(struct mg_group_table *g, struct mg_env *env);

#endif

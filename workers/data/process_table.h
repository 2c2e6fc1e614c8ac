/* SPDX-License-Identifier: ISC */
/*
 * process_table: a table a worker process derives from its database by one scan and keeps
 * for an interval (region_map.c, node_hash_sizes.c). A table is of one database file (its
 * path and identity: a file replaced at the same path is another), and is fresh for
 * interval_ns after its build. One build at a time per process; the loop and the helper
 * threads share the table under a read-write lock, taken for writing only to swap a new
 * table in. Readers hold it (read_begin/end) while they use mg_process_table_current.
 */
#ifndef MESHGATE_PROCESS_TABLE_H
#define MESHGATE_PROCESS_TABLE_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct mg_process_table {
    int64_t interval_ns;
    void (*free_table)(void *table);
    pthread_rwlock_t lock; /* over the fields below */
    pthread_mutex_t build_lock;
    void *table;
    char file[PATH_MAX];
    dev_t dev;
    ino_t ino;
    int64_t built_ns;
    _Atomic uint64_t generation; /* grows whenever the table is swapped or dropped */
    /* The file's identity as last looked at (CLOCK_MONOTONIC; 0: look now), and whether it
     * was still dev and ino: looked at once per second at most (process_table.c). */
    _Atomic int64_t file_checked_ns;
    _Atomic bool file_same;
};

#define MG_PROCESS_TABLE_INIT(interval, free_fn)                                                   \
    {                                                                                              \
        .interval_ns = (interval), .free_table = (free_fn), .lock = PTHREAD_RWLOCK_INITIALIZER,    \
        .build_lock = PTHREAD_MUTEX_INITIALIZER                                                    \
    }

/* Whether t holds a table of conn's database file younger than its interval at now_ns
 * (CLOCK_MONOTONIC). */
bool mg_process_table_fresh(struct mg_process_table *t, sqlite3 *conn, int64_t now_ns);

/* How often this process looked at a table's file (stat) to know it is still the same (tests:
 * at most once per second per table). */
uint64_t mg_process_table_file_looks(void);

/* Whether t holds a table of conn's database file, whatever its age. */
bool mg_process_table_exists(struct mg_process_table *t, sqlite3 *conn);

/* Builds t's table with build(conn, arg, &rc) unless a fresh one exists; an SQLite code. */
int mg_process_table_refresh(struct mg_process_table *t, sqlite3 *conn, int64_t now_ns,
                             void *(*build)(sqlite3 *conn, void *arg, int *rc), void *arg);

/* Swaps table in as conn's database file's, built at built_ns (CLOCK_MONOTONIC): a table
 * decoded from the group's copy (node_relay.c), or built outside refresh. */
void mg_process_table_install(struct mg_process_table *t, sqlite3 *conn, void *table,
                              int64_t built_ns);

/* When t's table of conn's database file was built; INT64_MIN: there is none. */
int64_t mg_process_table_built_ns(struct mg_process_table *t, sqlite3 *conn);

void mg_process_table_read_begin(struct mg_process_table *t);
void mg_process_table_read_end(struct mg_process_table *t);

/* The table (NULL: none), between read_begin and read_end. */
void *mg_process_table_current(struct mg_process_table *t);

/* A number that differs for every table t has held (0: none yet), between read_begin and
 * read_end: what a cached answer derived from the table is stamped with (answer_cache.h). */
uint64_t mg_process_table_generation(struct mg_process_table *t);

/* Drops the table: the next refresh builds it again (tests). */
void mg_process_table_forget(struct mg_process_table *t);

#endif

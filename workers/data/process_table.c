/* SPDX-License-Identifier: ISC */
#include "process_table.h"

#include "clock.h"
#include "log.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* How long a look at the file's identity holds: a file replaced at the path is noticed within
 * it, and a request that asks whether a table is fresh costs no stat() (once per interval per
 * table and process). */
#define FILE_CHECK_NS MG_NS_PER_SEC

static _Atomic uint64_t file_looks;

uint64_t mg_process_table_file_looks(void)
{
    return atomic_load(&file_looks);
}

static bool of_file_locked(struct mg_process_table *t, sqlite3 *conn)
{
    const char *file = sqlite3_db_filename(conn, "main");
    if (!t->table || strcmp(t->file, file ? file : "") != 0)
        return false;
    int64_t now = mg_monotonic_ns(), checked = atomic_load(&t->file_checked_ns);
    if (checked != 0 && now - checked < FILE_CHECK_NS)
        return atomic_load(&t->file_same);
    struct stat st;
    bool same = stat(t->file, &st) == 0 && st.st_dev == t->dev && st.st_ino == t->ino;
    atomic_fetch_add(&file_looks, 1);
    atomic_store(&t->file_same, same);
    atomic_store(&t->file_checked_ns, now);
    return same;
}

static bool fresh_locked(struct mg_process_table *t, sqlite3 *conn, int64_t now_ns)
{
    return now_ns - t->built_ns < t->interval_ns && of_file_locked(t, conn);
}

bool mg_process_table_exists(struct mg_process_table *t, sqlite3 *conn)
{
    pthread_rwlock_rdlock(&t->lock);
    bool exists = of_file_locked(t, conn);
    pthread_rwlock_unlock(&t->lock);
    return exists;
}

bool mg_process_table_fresh(struct mg_process_table *t, sqlite3 *conn, int64_t now_ns)
{
    pthread_rwlock_rdlock(&t->lock);
    bool fresh = fresh_locked(t, conn, now_ns);
    pthread_rwlock_unlock(&t->lock);
    return fresh;
}

/* Swaps table in as the table of the file at path (st: its identity), built at built_ns. */
static void swap_in(struct mg_process_table *t, const char *path, const struct stat *st,
                    void *table, int64_t built_ns)
{
    pthread_rwlock_wrlock(&t->lock);
    void *old = t->table;
    t->table = table;
    snprintf(t->file, sizeof t->file, "%s", path);
    t->dev = st->st_dev;
    t->ino = st->st_ino;
    atomic_store(&t->file_checked_ns, 0); /* the next question looks at the file */
    t->built_ns = built_ns;
    atomic_fetch_add(&t->generation, 1);
    pthread_rwlock_unlock(&t->lock);
    t->free_table(old);
}

static void file_of(sqlite3 *conn, char path[PATH_MAX], struct stat *st)
{
    const char *file = sqlite3_db_filename(conn, "main");
    snprintf(path, PATH_MAX, "%s", file ? file : "");
    memset(st, 0, sizeof *st);
    stat(path, st);
}

/* Under t->build_lock. */
static int refresh_locked(struct mg_process_table *t, sqlite3 *conn, int64_t now_ns,
                          void *(*build)(sqlite3 *conn, void *arg, int *rc), void *arg)
{
    int rc = SQLITE_OK;
    if (!mg_process_table_fresh(t, conn, now_ns)) {
        char path[PATH_MAX];
        struct stat st;
        file_of(conn, path, &st); /* read before the build: a file replaced meanwhile is rebuilt */
        void *table = build(conn, arg, &rc);
        if (table)
            swap_in(t, path, &st, table, now_ns);
    }
    pthread_mutex_unlock(&t->build_lock);
    return rc;
}

int mg_process_table_refresh(struct mg_process_table *t, sqlite3 *conn, int64_t now_ns,
                             void *(*build)(sqlite3 *conn, void *arg, int *rc), void *arg)
{
    if (mg_process_table_fresh(t, conn, now_ns))
        return SQLITE_OK;
    /* One build at a time in the process; who waited finds the table fresh. */
    pthread_mutex_lock(&t->build_lock);
    return refresh_locked(t, conn, now_ns, build, arg);
}

void mg_process_table_install(struct mg_process_table *t, sqlite3 *conn, void *table,
                              int64_t built_ns)
{
    char path[PATH_MAX];
    struct stat st;
    file_of(conn, path, &st);
    swap_in(t, path, &st, table, built_ns);
}

int64_t mg_process_table_built_ns(struct mg_process_table *t, sqlite3 *conn)
{
    pthread_rwlock_rdlock(&t->lock);
    int64_t built = of_file_locked(t, conn) ? t->built_ns : INT64_MIN;
    pthread_rwlock_unlock(&t->lock);
    return built;
}

uint64_t mg_process_table_generation(struct mg_process_table *t)
{
    return atomic_load(&t->generation);
}

void mg_process_table_read_begin(struct mg_process_table *t)
{
    pthread_rwlock_rdlock(&t->lock);
}

void mg_process_table_read_end(struct mg_process_table *t)
{
    pthread_rwlock_unlock(&t->lock);
}

void *mg_process_table_current(struct mg_process_table *t)
{
    return t->table;
}

void mg_process_table_forget(struct mg_process_table *t)
{
    pthread_mutex_lock(&t->build_lock);
    pthread_rwlock_wrlock(&t->lock);
    void *old = t->table;
    t->table = NULL;
    atomic_fetch_add(&t->generation, 1);
    pthread_rwlock_unlock(&t->lock);
    pthread_mutex_unlock(&t->build_lock);
    t->free_table(old);
}

/* SPDX-License-Identifier: ISC */
/*
 * db: the read-only SQLite connection of a worker, and the check of a database file that
 * the master makes once before forking.
 *
 * The database belongs to CoreScope's ingestor, which writes it while we read. We open it
 * with SQLITE_OPEN_READONLY, set PRAGMA query_only, and install an authorizer that denies
 * every action but reading, so no statement of ours can change it whatever its text.
 * Optional columns are probed once per connection (schema flags below).
 */
#ifndef MESHGATE_DB_H
#define MESHGATE_DB_H

#include "json.h"

#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Exit codes of the master for a database it cannot use (sysexits.h). */
#define MG_EXIT_DB_MISSING 66 /* EX_NOINPUT: no such file, or not readable */
#define MG_EXIT_DB_FOREIGN 65 /* EX_DATAERR: not SQLite, or not CoreScope's schema */

/*
 * What a database has beyond the required columns, each column detected on its own: a
 * schema may have any subset of them (CoreScope's migration adds them one by one, and a
 * later CoreScope may add more; an unknown extra column is never named, so it is ignored).
 * A query names an optional column only where its flag is set.
 */
struct mg_db_schema {
    bool nodes_foreign_advert;     /* nodes.foreign_advert */
    bool nodes_default_scope;      /* nodes.default_scope (migrated) */
    bool nodes_multibyte_sup;      /* nodes.multibyte_sup (migrated) */
    bool nodes_multibyte_evidence; /* nodes.multibyte_evidence (migrated) */
    bool observers_inactive;       /* observers.inactive */
    bool observers_last_packet_at; /* observers.last_packet_at */
    bool observers_clock_skew;     /* observers.clock_skew_seconds (migrated) */
    bool observers_clock_count;    /* observers.clock_skew_count_24h (migrated) */
    bool observers_clock_naive_at; /* observers.clock_last_naive_at (migrated) */
    bool observers_can_relay;      /* observers.can_relay (migrated) */
    bool observers_can_relay_seen; /* observers.can_relay_seen (migrated) */
    bool tx_channel_hash;          /* transmissions.channel_hash */
    bool tx_scope_name;            /* transmissions.scope_name (migrated) */
    bool tx_last_seen;             /* transmissions.last_seen (migrated) */
    bool obs_resolved_path;        /* observations.resolved_path */
    bool obs_raw_hex;              /* observations.raw_hex (migrated) */
    bool dropped_packets;          /* table dropped_packets */
};

/* The optional columns of struct mg_db_schema, as "table.column" (tables as "table"). */
struct mg_db_optional {
    const char *table;
    const char *column; /* NULL: the table itself */
    size_t flag_offset; /* offsetof(struct mg_db_schema, ...) */
};
extern const struct mg_db_optional mg_db_optionals[];
extern const size_t mg_db_optionals_count;

struct mg_db {
    sqlite3 *conn;
    struct mg_db_schema schema;
    /* Virtual-machine steps (SQLITE_STMTSTATUS_VM_STEP) of every statement this connection
     * has run to its end, reset or finalized: a measure of the rows a request walks that does
     * not depend on the machine (tests/test_cost.c bounds it for light routes). */
    int64_t vm_steps;
    int64_t fullscan_steps;  /* SQLITE_STMTSTATUS_FULLSCAN_STEP of the same */
    int busy_timeout_ms;     /* as last set */
    int64_t busy_timeout_ns; /* MESHGATE_DB_BUSY_TIMEOUT_MS */
    int64_t busy_since_ns;   /* when the current wait for a lock began */
    int64_t mmap_bytes;      /* PRAGMA mmap_size as last set */
    bool counted;            /* counted in the slot's db_connections */
    char *path;              /* as opened, for mg_db_heal */
};

/* The longest a light request waits for a writer's lock before it answers 503 (dispatch.c). */
#define MG_LIGHT_BUSY_TIMEOUT_MS 100

/*
 * Opens path read-only and checks that it is a CoreScope database. Returns 0; or
 * MG_EXIT_DB_MISSING / MG_EXIT_DB_FOREIGN with a message in err.
 */
int mg_db_open(struct mg_db *db, const char *path, int busy_timeout_ms, char *err, size_t errlen);
/* Opens path as mg_db_open does, but takes like's schema flags instead of reading them: it
 * reads nothing of the file, so it never waits for a writer's lock (a helper thread's
 * connection, opened from the loop at its first job; like is the loop's own). */
int mg_db_open_like(struct mg_db *db, const struct mg_db *like, const char *path,
                    int busy_timeout_ms, char *err, size_t errlen);
void mg_db_close(struct mg_db *db);

/* How long a statement waits for a writer's lock (0: not at all) before SQLITE_BUSY; the
 * wait keeps the worker's heartbeat going. */
void mg_db_set_busy_timeout(struct mg_db *db, int busy_timeout_ms);

/*
 * Whether opening path would have SQLite create its -wal or -shm as another user than the
 * file's owner: a WAL database whose side file is missing, and meshgate running as root
 * (another user who is not the owner is refused: exit 66). SQLite then gives the new files to
 * the owner only where it may chown (CAP_CHOWN, which a hardened unit drops); else they stay
 * root's and an ingestor running as the owner cannot open them. True with a warning in note.
 */
bool mg_db_side_files_warning(const char *path, char *note, size_t notelen);

/* Opens, checks and closes: what the master does before forking. Same results. */
int mg_db_check(const char *path, char *err, size_t errlen);

/* Steps so far (see struct mg_db), including statements still running. */
int64_t mg_db_vm_steps(struct mg_db *db);

/* Pages the connection has fetched so far (page cache hits and misses). Pages read through
 * the memory map are not counted, so a measurement first turns it off (mg_db_set_mmap): a
 * count(*) walks a b-tree's pages in one virtual-machine step, and this is what sees it. */
int64_t mg_db_pages_fetched(struct mg_db *db);

/* Sets PRAGMA mmap_size (tests and measurements: 0 makes every page fetch counted). */
void mg_db_set_mmap(struct mg_db *db, int64_t bytes);
/* The memory map every connection opens with (bytes): SQLite's largest (SQLITE_MAX_MMAP_SIZE),
 * so any CoreScope file is read without a copy per page. It costs address space only: what
 * counts is the pages a connection touched, which mg_db_release gives back (docs/architecture.md,
 * "Memory"). */
#define MG_DB_MMAP_BYTES 2147418112LL
/* Each connection's page cache, KiB (PRAGMA cache_size=-N). Reads go through the memory map,
 * whose pages the cache does not copy; it holds pages of the -wal and those of a connection
 * whose map is off (a pass: mg_db_pass_begin). */
#define MG_DB_CACHE_KIB 2048
/* The page cache of the summaries' pass while it runs (it reads without the map, so its
 * pages never stay in the worker's PSS; the b-trees' inner pages stay in this cache). */
#define MG_DB_PASS_CACHE_KIB 16384
/* The page cache of a group table's pass (group_table.h) while it runs: the connection's own
 * (the passes scan in order; the kernel's page cache holds what they read again). */
#define MG_DB_GROUP_PASS_CACHE_KIB MG_DB_CACHE_KIB

/* A pass over much of the file on conn (the summaries', a group table's: docs/architecture.md,
 * "Memory"): its reads go through read() into a page cache of cache_kib, not through the
 * memory map, so the pages it touches stay in the kernel's page cache and never in the
 * process's PSS, while it runs or after. mg_db_pass_end puts the connection back as it was
 * (the map, MG_DB_CACHE_KIB) and empties its page cache. No statement may run across either. */
struct mg_db_pass {
    sqlite3 *conn;
    int64_t mmap_bytes; /* the map's limit before the pass */
};
void mg_db_pass_begin(struct mg_db_pass *p, sqlite3 *conn, int cache_kib);
void mg_db_pass_end(struct mg_db_pass *p);

/* Gives back what the connection holds between requests: its page cache
 * (sqlite3_db_release_memory) and the pages of the file it touched through its memory map
 * (the map is dropped and made again at the next read). Only with no statement running. */
void mg_db_release(struct mg_db *db);

/* Prepares sql (a programming error is logged and reported as NULL). */
sqlite3_stmt *mg_db_prepare(struct mg_db *db, const char *sql);

/* Writes column col of the current row as a JSON value (NULL as null, text as a string). */
void mg_db_json_column(struct mg_json *j, sqlite3_stmt *st, int col);

/* A single integer from a one-row query; -1 on error. */
int64_t mg_db_scalar(struct mg_db *db, const char *sql);

/*
 * Faults of a connection (docs/architecture.md, "A live database"). A connection that reports
 * SQLITE_CORRUPT, SQLITE_NOTADB or SQLITE_IOERR (any extended code) may stay broken while it
 * lives (a mapping of a -shm that is no longer the file's, say), so it is closed and opened
 * again, and the request retried once. SQLite reports such a result through its error log
 * (sqlite3_config(SQLITE_CONFIG_LOG), set at the first open), which notes it for the calling
 * thread: every connection is used by one thread at a time, so what a thread noted is its
 * connection's. mg_db_prepare notes one too.
 */
bool mg_db_is_fault(int rc);
/* The thread's first fault since the last take (0: none), its message in msg; clears it. */
int mg_db_fault_take(char *msg, size_t msglen);
/* Where faults are counted (the worker's segment; NULL: nowhere). */
struct mg_segment;
void mg_db_count_faults_in(struct mg_segment *seg);
/*
 * After a unit of work on db (a request, a job): takes the thread's fault; none: false.
 * With one: logs it, counts it (db_faults), closes db and opens it again in place, and
 * returns true: the caller runs the work again once, and calls mg_db_heal_retried after it.
 */
bool mg_db_heal(struct mg_db *db, const char *who);
/* After the retry: a fault again (or a connection that could not be opened again) is counted
 * (db_faults_unhealed), marks this worker degraded in its slot (/api/healthz names it) and
 * has it replaced: it drains and exits, and the master starts another. */
void mg_db_heal_retried(struct mg_db *db, const char *who);

#endif

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

struct mg_db_schema {
    bool nodes_scope;       /* nodes.default_scope, configured_scope, ... */
    bool tx_scope_name;     /* transmissions.scope_name */
    bool tx_last_seen;      /* transmissions.last_seen */
    bool obs_raw_hex;       /* observations.raw_hex */
    bool obs_resolved_path; /* observations.resolved_path */
    bool dropped_packets;   /* table dropped_packets */
    bool nodes_foreign_advert;
};

struct mg_db {
    sqlite3 *conn;
    struct mg_db_schema schema;
};

/*
 * Opens path read-only and checks that it is a CoreScope database. Returns 0; or
 * MG_EXIT_DB_MISSING / MG_EXIT_DB_FOREIGN with a message in err.
 */
int mg_db_open(struct mg_db *db, const char *path, int busy_timeout_ms, char *err, size_t errlen);
void mg_db_close(struct mg_db *db);

/* Opens, checks and closes: what the master does before forking. Same results. */
int mg_db_check(const char *path, char *err, size_t errlen);

/* Prepares sql (a programming error is logged and reported as NULL). */
sqlite3_stmt *mg_db_prepare(struct mg_db *db, const char *sql);

/* Writes column col of the current row as a JSON value (NULL as null, text as a string). */
void mg_db_json_column(struct mg_json *j, sqlite3_stmt *st, int col);

/* A single integer from a one-row query; -1 on error. */
int64_t mg_db_scalar(struct mg_db *db, const char *sql);

#endif

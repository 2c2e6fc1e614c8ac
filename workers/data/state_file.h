/* SPDX-License-Identifier: ISC */
/*
 * state_file: a group table kept across restarts in MESHGATE_STATE_DIR (group_table.h), so a
 * start serves from its first second what the last run built, while the normal pass rebuilds
 * it in the background.
 *
 * A file is one table's body as the group's cache stores it (the table's own encoding), under
 * a header: magic, format, the table's name and body version, the key of the database it was
 * built from, the realtime it was built at, the body's length and a SHA-256 (libmd) of the
 * header (with the sum zeroed) and the body. Written once per group pass by the process that
 * made it: a temporary file (mode 0600) written, fsync'ed and renamed over "<name>.v<version>",
 * then the directory fsync'ed. Native byte order: the machine that wrote it reads it.
 *
 * The database's key. A file's device and inode are not its identity (a Litestream restore or
 * a copy gives the same rows another inode; a file replaced in place keeps a path), and
 * counting rows costs a scan. CoreScope only adds rows to transmissions and observations (ids
 * are AUTOINCREMENT; it deletes none but a migration's duplicates), so the key is read from
 * the ends of the two rowid trees, a few page reads: the identity is the first transmission
 * (id and hash: a random 16-byte hash) and the first observation (id, transmission, time),
 * the high-water marks are the highest ids of both. A file is accepted as a stale copy when
 * its identity is the database's and its marks are at or below the database's; marks above
 * the database's say it was replaced by one with fewer rows. A database with no transmission
 * or no observation has no key: nothing is written or read for it.
 *
 * A file is refused (not read further) when it is not a regular file owned by this user, or
 * is writable by group or others, or is larger than the cache could hold; and rejected when
 * its magic, format, name, version, length or sum is wrong, or its key is not the database's.
 */
#ifndef MESHGATE_STATE_FILE_H
#define MESHGATE_STATE_FILE_H

#include "buf.h"

#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MG_STATE_HASH_MAX 72 /* a transmission's hash (32 hex digits in CoreScope), and its NUL */

/* Fixed layout, no padding: what the header stores as it is. */
struct mg_state_key {
    int64_t first_tx_id, first_obs_id, first_obs_tx, first_obs_time;
    int64_t tx_high, obs_high; /* the highest ids */
    char first_tx_hash[MG_STATE_HASH_MAX];
};

/* conn's database's key: SQLITE_OK, SQLITE_NOTFOUND when it has none (no rows), or an error. */
int mg_state_key_read(sqlite3 *conn, struct mg_state_key *k);

enum mg_state_outcome {
    MG_STATE_NONE = 0, /* no file */
    MG_STATE_LOADED,   /* body holds the table's body */
    MG_STATE_BAD,      /* magic, format, name, version, size or sum: why says which */
    MG_STATE_UNSAFE,   /* not ours, writable by others, not a regular file */
    MG_STATE_OTHER_DB, /* another database's, or the database has fewer rows than it covers */
    MG_STATE_ERROR,    /* it could not be read (why) */
};

/* dir/name.v<version> into body (appended), checked against db (the database's key); at most
 * max_body bytes of body. *built_realtime_ns: when it was built (LOADED). why: the reason of
 * any other outcome but NONE. */
enum mg_state_outcome mg_state_read(const char *dir, const char *name, unsigned version,
                                    const struct mg_state_key *db, size_t max_body,
                                    struct mg_buf *body, int64_t *built_realtime_ns, char *why,
                                    size_t whylen);

/* Writes dir/name.v<version> atomically (see above); 0, or -1 with why. */
int mg_state_write(const char *dir, const char *name, unsigned version,
                   const struct mg_state_key *k, int64_t built_realtime_ns, const void *body,
                   size_t len, char *why, size_t whylen);

#endif

/* SPDX-License-Identifier: ISC */
/*
 * fixture: writes CoreScope-shaped SQLite databases of any size, and "freshens" copies of
 * existing ones so that their time-windowed answers are not empty.
 *
 * The generated database has CoreScope's schema exactly as its migration leaves it (tables,
 * column order, types, defaults, NOT NULL, AUTOINCREMENT, indexes, WAL mode), the shape of
 * every live CoreScope database; or, asked for, the shape before that migration. It never
 * has a table or column CoreScope lacks. The data imitates a real MeshCore
 * network around the SF Bay Area: repeaters in clusters linked to their nearest neighbours,
 * observers that hear transmissions through paths of neighbouring repeaters (so the same
 * neighbour pairs recur), 1/2/3-byte hop prefixes with deliberate prefix collisions, and
 * the NULLs, empty paths and mixed time formats that real rows have.
 *
 * Determinism: the same options (seed, sizes, days, schema, now_unix) give the same rows in
 * every table. Nothing here prints or exits: functions return 0, or -1 with a sentence in err.
 */
#ifndef MESHGATE_FIXTURE_H
#define MESHGATE_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Limits of the sizes the generator accepts (the graph and the per-observer tables are
 * built in memory). */
#define MG_FIXTURE_MIN_NODES 10
#define MG_FIXTURE_MAX_NODES 20000
#define MG_FIXTURE_MAX_OBSERVERS 2000
#define MG_FIXTURE_MAX_OBSERVATIONS 1000000000L
#define MG_FIXTURE_MAX_DAYS 365

/* Which of CoreScope's two schema shapes to write. Both have the same rows in the columns
 * they share: the migrated shape only adds columns and tables. */
enum mg_fixture_schema {
    MG_FIXTURE_MIGRATED = 0, /* as CoreScope's migration leaves it: every live database */
    MG_FIXTURE_BASE,         /* before the migration: nodes, observers, transmissions,
                                observations and neighbor_edges with their first columns */
};

/* Observations per transmission when neither transmissions nor obs_per_tx is given. */
#define MG_FIXTURE_DEFAULT_OBS_PER_TX 4
#define MG_FIXTURE_MAX_OBS_PER_TX 1000

/* A size of 0 means "scale it from observations" (see mg_fixture_resolve). */
struct mg_fixture_options {
    uint64_t seed;
    long nodes;         /* rows of nodes; 0: observations / 250, within 60..2000 */
    long observers;     /* rows of observers; 0: nodes / 12, within 4..150 */
    long transmissions; /* rows of transmissions; 0: observations / obs_per_tx (0 when none) */
    long obs_per_tx;    /* observations per transmission on average, 1..1000; 0: 4. Only
                           when transmissions is 0 (giving both is an error) */
    long observations;  /* rows of observations, exactly */
    int days;           /* transmissions and observations fall in [now - days, now]; 0: 7 */
    enum mg_fixture_schema schema;
    bool overwrite; /* replace an existing file at the path (else refuse) */
    /* transmissions.hash is CoreScope's content hash of raw_hex, which its server keeps
     * (else it rewrites every other hash when it loads the file); a payload whose hash an
     * earlier transmission has is drawn again. Off: a 64-bit mix of the seed and the id. */
    bool corescope_hashes;
    int64_t now_unix; /* the newest possible timestamp; 0: the current time */
    /* Optional (NULL: none): told how far the writing is, from the writing thread, after each
     * chunk of rows (stage "rows": done of total observations) and once before the indexes
     * are built (stage "indexes"). The tool shows it on a terminal. */
    void (*progress)(void *arg, const char *stage, long done, long total);
    void *progress_arg;
};

/* The defaults of the command-line tool: seed 1, 100000 observations, 7 days, migrated
 * schema. */
void mg_fixture_options_default(struct mg_fixture_options *opt);

/* Copies opt into out with every 0 replaced by its scaled value, and checks the sizes
 * against each other and the limits above. */
int mg_fixture_resolve(const struct mg_fixture_options *opt, struct mg_fixture_options *out,
                       char *err, size_t errlen);

/* Writes a new database at path. The file appears complete or not at all (it is built under
 * a temporary name and moved into place). An existing file is an error unless
 * opt->overwrite, which also removes the old file's -wal and -shm companions. */
int mg_fixture_generate(const char *path, const struct mg_fixture_options *opt, char *err,
                        size_t errlen);

/* Copies the database src to dst (which must not exist; src is opened read-only and never
 * changed), then shifts time on the copy so that its newest values are now_unix (0: the
 * current time):
 *   - observations.timestamp (epoch seconds), and transmissions.last_seen when present
 *     (epoch seconds), by one offset that makes the newest observation now; a last_seen of 0
 *     ("not yet backfilled") is backfilled as CoreScope's ingestor does, from the newest
 *     observation of the transmission (first_seen without one);
 *   - each RFC 3339 text column nodes.last_seen, transmissions.first_seen,
 *     observers.last_seen, neighbor_edges.last_seen by its own offset that makes its newest
 *     value now; nodes.first_seen and inactive_nodes' last_seen and first_seen follow
 *     nodes.last_seen's offset (soft-deleted nodes stay older), observers.first_seen,
 *     last_packet_at and clock_last_naive_at follow observers.last_seen's, so first <= last
 *     stays true; transmissions.created_at (SQLite's "YYYY-MM-DD HH:MM:SS") follows
 *     transmissions.first_seen's.
 * Text values keep their shape (separator, fraction digits, zone); values that do not parse
 * as RFC 3339 and missing tables or columns are left alone. On failure dst is removed. */
int mg_fixture_freshen(const char *src, const char *dst, int64_t now_unix, char *err,
                       size_t errlen);

#endif

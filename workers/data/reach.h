/* SPDX-License-Identifier: ISC */
/*
 * reach: the body of GET /api/nodes/{pubkey}/reach (contract, section 3): who hears a node
 * and whom it is heard by, from the relay traffic of the last N days.
 *
 * This is the computation only. The handler around it parses `days`, maps the results to
 * 400/404/500, and owns the shared cache, the sharing of identical builds and the cold-scan
 * gate: a build reads every observation of the window, so it is the work that gate bounds.
 */
#ifndef MESHGATE_REACH_H
#define MESHGATE_REACH_H

#include "buf.h"
#include "db.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum mg_reach_result { MG_REACH_OK = 0, MG_REACH_BAD_PUBKEY, MG_REACH_NOT_FOUND, MG_REACH_ERROR };

/* Validates and lowercases a {pubkey} path segment into out (65 bytes); false when it is not 64
 * hex chars. */
bool mg_reach_parse_pubkey(const char *in, char out[65]);

/*
 * Builds the report body (the whole JSON object plus "\n") for pubkey (64 lowercase hex) over
 * `days` (already clamped to 1..30) ending at now_unix, into body. MG_REACH_NOT_FOUND when the
 * key is neither a node nor an observer. On MG_REACH_ERROR err says why. Runs in one read
 * transaction. stats (may be NULL) reports rows scanned and whether the row cap truncated.
 *
 * A key in upper or mixed case is lowercased, not refused.
 * The body is appended to what body holds; on any result but MG_REACH_OK nothing is appended.
 * rows_scanned counts the observation rows the scan examined (those from the first row of the
 * window on, in rowid order); truncated is true when more than the cap of rows matched.
 */
struct mg_reach_stats {
    int64_t rows_scanned;
    bool truncated;
    int64_t build_ns;
    /* On MG_REACH_ERROR from the database: its (extended) result code, say SQLITE_BUSY; 0
     * otherwise. The connection's own error code is no guide: the build ends its transaction. */
    int db_error;
};
enum mg_reach_result mg_reach_build(struct mg_db *db, const char *pubkey, int days,
                                    int64_t now_unix, struct mg_buf *body,
                                    struct mg_reach_stats *stats, char *err, size_t errlen);

/* Great-circle distance in km, written as CoreScope's haversineKm (R = 6371.0) so the digits
 * agree. */
double mg_haversine_km(double lat1, double lon1, double lat2, double lon2);

/* CoreScope's cap on the rows of one scan: rows of the window whose path holds one of the
 * target's tokens (quoted, any case), joined to their transmission. */
#define MG_REACH_ROW_CAP 200000

/* mg_reach_build with another row cap (>= 1); for tests of the cap. */
enum mg_reach_result mg_reach_build_capped(struct mg_db *db, const char *pubkey, int days,
                                           int64_t now_unix, int64_t row_cap, struct mg_buf *body,
                                           struct mg_reach_stats *stats, char *err, size_t errlen);

/* The scan's statement (?1 first rowid, ?2 the build, ?3 row cap + 1); for plan tests. */
extern const char mg_reach_scan_sql[];

#endif

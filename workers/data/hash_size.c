/* SPDX-License-Identifier: ISC */
#include "hash_size.h"

#include "packet_decode.h"
#include "time_parse.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HASH_SIZE_WINDOW_S (7 * 86400)

void mg_node_hash_sizes_cutoff(int64_t now_s, char *out, size_t cap)
{
    time_t t = (time_t)(now_s - HASH_SIZE_WINDOW_S);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, cap, "%Y-%m-%dT%H:%M:%S.000Z", &tm);
}

/* --- hash sizes ------------------------------------------------------------------------- */

int mg_advert_hash_size(const char *raw_hex)
{
    int route, path_byte;
    if (!mg_packet_hex_path_byte(raw_hex, &route, &path_byte))
        return 0;
    /* A direct zero-hop ADVERT has path byte 0 whatever the node's hash mode. */
    if ((route == 2 || route == 3) && (path_byte & 0x3f) == 0)
        return 0;
    return ((path_byte >> 6) & 3) + 1;
}

struct advert_size {
    int64_t ts_ms; /* INT64_MIN (oldest) when first_seen does not parse */
    int64_t order; /* the row's place, so equal times keep it */
    int size;
};

static int by_time(const void *a, const void *b)
{
    const struct advert_size *x = a, *y = b;
    if (x->ts_ms != y->ts_ms)
        return x->ts_ms < y->ts_ms ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

void mg_node_hash_sizes_of(struct mg_node_hash_sizes *hs, const int *sizes_by_time, size_t n)
{
    memset(hs, 0, sizeof *hs);
    if (n == 0)
        return;
    hs->known = true;
    hs->size = sizes_by_time[n - 1];
    unsigned transitions = 0;
    for (size_t i = 0; i < n; i++) {
        hs->seen_mask |= 1u << sizes_by_time[i];
        if (i > 0 && sizes_by_time[i] != sizes_by_time[i - 1])
            transitions++;
    }
    unsigned distinct = (unsigned)__builtin_popcount(hs->seen_mask);
    /* Flip-flopping: at least 3 ADVERTs, 2 sizes, 2 changes, and the last 3 not all equal
     * (a node that has settled on one size is consistent again). */
    bool settled = n >= 3 && sizes_by_time[n - 1] == sizes_by_time[n - 2] &&
                   sizes_by_time[n - 2] == sizes_by_time[n - 3];
    hs->inconsistent = n >= 3 && distinct >= 2 && transitions >= 2 && !settled;
}

/* The ADVERTs that name pubkey in decoded_json (pubKey, else public_key, as text). */
static const char adverts_sql[] =
    "SELECT raw_hex, first_seen FROM transmissions"
    " WHERE from_pubkey = ?1 AND payload_type = 4"
    " AND (first_seen IS NULL OR first_seen = '' OR first_seen >= ?2)"
    " AND coalesce(raw_hex, '') <> '' AND coalesce(decoded_json, '') <> ''"
    " AND CASE WHEN NOT json_valid(decoded_json) THEN NULL"
    " WHEN json_type(decoded_json, '$.pubKey') = 'text' THEN decoded_json ->> '$.pubKey'"
    " WHEN json_type(decoded_json, '$.public_key') = 'text' THEN decoded_json ->> '$.public_key'"
    " END = ?1 ORDER BY id";

int mg_node_hash_sizes(struct mg_db *db, const char *pubkey, int64_t now_s,
                       struct mg_node_hash_sizes *out)
{
    memset(out, 0, sizeof *out);
    sqlite3_stmt *st = mg_db_prepare(db, adverts_sql);
    if (!st)
        return SQLITE_ERROR;
    char cutoff[32];
    mg_node_hash_sizes_cutoff(now_s, cutoff, sizeof cutoff);
    sqlite3_bind_text(st, 1, pubkey, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, cutoff, -1, SQLITE_STATIC);
    struct advert_size *rows = NULL;
    size_t n = 0, cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int size = mg_advert_hash_size((const char *)sqlite3_column_text(st, 0));
        if (size == 0)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            struct advert_size *grown = realloc(rows, cap * sizeof *rows);
            if (!grown) {
                rc = SQLITE_NOMEM;
                break;
            }
            rows = grown;
        }
        int64_t ts = 0;
        if (!mg_node_parse_time_ms((const char *)sqlite3_column_text(st, 1), &ts))
            ts = INT64_MIN;
        rows[n] = (struct advert_size){ts, (int64_t)n, size};
        n++;
    }
    sqlite3_finalize(st);
    if (rc == SQLITE_DONE) {
        rc = SQLITE_OK;
        if (n > 1)
            qsort(rows, n, sizeof *rows, by_time);
        int *sizes = malloc((n ? n : 1) * sizeof *sizes);
        if (!sizes) {
            rc = SQLITE_NOMEM;
        } else {
            for (size_t i = 0; i < n; i++)
                sizes[i] = rows[i].size;
            mg_node_hash_sizes_of(out, sizes, n);
            free(sizes);
        }
    }
    free(rows);
    return rc;
}

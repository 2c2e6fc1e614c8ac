/* SPDX-License-Identifier: ISC */
/*
 * region_codes: the region= filter of CoreScope's analytics reports in SQL. Codes are the
 * request's, trimmed, uppercased and comma-separated ("SJC,OAK"); an observer is in the region
 * when upper(trim(iata)) is one of them. CoreScope filters nothing when no observer has any.
 */
#ifndef MESHGATE_REGION_CODES_H
#define MESHGATE_REGION_CODES_H

#include "buf.h"
#include "db.h"

#include <stdbool.h>

/* The SQL of an ADVERT's node as CoreScope's area filter reads it (decoded public_key, else
 * pubKey) from transmissions t. */
#define MG_ADVERT_NODE_SQL                                                                         \
    "CASE WHEN json_valid(t.decoded_json) THEN (CASE WHEN"                                         \
    " json_type(t.decoded_json, '$.public_key') = 'text' AND"                                      \
    " json_extract(t.decoded_json, '$.public_key') <> ''"                                          \
    " THEN json_extract(t.decoded_json, '$.public_key')"                                           \
    " WHEN json_type(t.decoded_json, '$.pubKey') = 'text'"                                         \
    " THEN json_extract(t.decoded_json, '$.pubKey') END) END"

/* Appends "(?,?,...)", a placeholder per code, to sql. */
void mg_region_codes_sql(struct mg_buf *sql, const char *codes);
/* Binds the codes from index first on; returns the next index. */
int mg_region_codes_bind(sqlite3_stmt *st, int first, const char *codes);
/* Whether any observer has one of the codes (none given: false); an SQLite code. */
int mg_region_codes_known(struct mg_db *db, const char *codes, bool *known);

#endif

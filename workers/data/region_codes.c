/* SPDX-License-Identifier: ISC */
#include "region_codes.h"

#include <string.h>

void mg_region_codes_sql(struct mg_buf *sql, const char *codes)
{
    mg_buf_puts(sql, "(");
    for (const char *p = codes; *p; p++)
        if (p == codes || p[-1] == ',')
            mg_buf_puts(sql, p == codes ? "?" : ",?");
    mg_buf_puts(sql, ")");
}

int mg_region_codes_bind(sqlite3_stmt *st, int first, const char *codes)
{
    int i = first;
    for (const char *p = codes; *p;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        sqlite3_bind_text(st, i++, p, (int)n, SQLITE_TRANSIENT);
        p += n + (comma ? 1 : 0);
    }
    return i;
}

int mg_region_codes_known(struct mg_db *db, const char *codes, bool *known)
{
    *known = false;
    if (!codes[0])
        return SQLITE_OK;
    struct mg_buf sql;
    mg_buf_init(&sql);
    mg_buf_puts(&sql, "SELECT 1 FROM observers WHERE upper(trim(iata)) IN ");
    mg_region_codes_sql(&sql, codes);
    mg_buf_puts(&sql, " LIMIT 1");
    sqlite3_stmt *st = sql.failed ? NULL : mg_db_prepare(db, mg_buf_cstr(&sql));
    mg_buf_free(&sql);
    if (!st)
        return SQLITE_NOMEM;
    mg_region_codes_bind(st, 1, codes);
    int rc = sqlite3_step(st);
    *known = rc == SQLITE_ROW;
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
}

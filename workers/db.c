#include "db.h"

#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Tables and columns without which a file is not a CoreScope database. */
static const struct {
    const char *table;
    const char *columns[12];
} required[] = {
    {"nodes",
     {"public_key", "name", "role", "lat", "lon", "last_seen", "first_seen", "advert_count",
      "battery_mv", "temperature_c", NULL}},
    {"observers", {"id", "name", "iata", "last_seen", "inactive", NULL}},
    {"transmissions",
     {"id", "raw_hex", "hash", "first_seen", "route_type", "payload_type", "decoded_json",
      "from_pubkey", NULL}},
    {"observations",
     {"id", "transmission_id", "observer_idx", "snr", "rssi", "path_json", "timestamp", NULL}},
    {"neighbor_edges", {"node_a", "node_b", "count", NULL}},
};

/* Only reading: SELECT, reads of columns, functions, and the pragmas we use. */
static int authorize(void *arg, int action, const char *a, const char *b, const char *c,
                     const char *d)
{
    (void)arg, (void)b, (void)c, (void)d;
    switch (action) {
    case SQLITE_SELECT:
    case SQLITE_READ:
    case SQLITE_FUNCTION:
    case SQLITE_RECURSIVE:
        return SQLITE_OK;
    case SQLITE_TRANSACTION:
        /* BEGIN/COMMIT of a read transaction; a+b say which. Writes are denied elsewhere. */
        return SQLITE_OK;
    case SQLITE_PRAGMA:
        /* Reading a pragma passes no argument (b); setting one does. table_info's argument
         * is the table it reads. */
        if (a && strcmp(a, "table_info") == 0)
            return SQLITE_OK;
        if (b)
            return SQLITE_DENY;
        if (a && (strcmp(a, "page_count") == 0 || strcmp(a, "page_size") == 0 ||
                  strcmp(a, "freelist_count") == 0 || strcmp(a, "query_only") == 0 ||
                  strcmp(a, "busy_timeout") == 0 || strcmp(a, "journal_mode") == 0 ||
                  strcmp(a, "cache_size") == 0 || strcmp(a, "mmap_size") == 0 ||
                  strcmp(a, "temp_store") == 0))
            return SQLITE_OK;
        return SQLITE_DENY;
    default:
        return SQLITE_DENY;
    }
}

static bool has_column(sqlite3 *conn, const char *table, const char *column)
{
    sqlite3_stmt *st;
    char sql[128];
    snprintf(sql, sizeof sql, "PRAGMA table_info(%s)", table);
    if (sqlite3_prepare_v2(conn, sql, -1, &st, NULL) != SQLITE_OK)
        return false;
    bool found = false;
    while (!found && sqlite3_step(st) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 1);
        found = name && strcmp(name, column) == 0;
    }
    sqlite3_finalize(st);
    return found;
}

static bool has_table(sqlite3 *conn, const char *table)
{
    sqlite3_stmt *st;
    char sql[128];
    snprintf(sql, sizeof sql, "PRAGMA table_info(%s)", table);
    if (sqlite3_prepare_v2(conn, sql, -1, &st, NULL) != SQLITE_OK)
        return false;
    bool found = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    return found;
}

int mg_db_open(struct mg_db *db, const char *path, int busy_timeout_ms, char *err, size_t errlen)
{
    memset(db, 0, sizeof *db);
    /* sqlite3_open_v2 with READONLY reports a missing file only as "unable to open", so
     * look first and say which it is. */
    struct stat st;
    if (stat(path, &st) < 0) {
        snprintf(err, errlen, "database %s: %s", path, strerror(errno));
        return MG_EXIT_DB_MISSING;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "database %s: not a regular file", path);
        return MG_EXIT_DB_MISSING;
    }
    if (access(path, R_OK) < 0) {
        snprintf(err, errlen, "database %s: %s", path, strerror(errno));
        return MG_EXIT_DB_MISSING;
    }
    int rc = sqlite3_open_v2(path, &db->conn,
                             SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_PRIVATECACHE,
                             NULL);
    if (rc != SQLITE_OK) {
        snprintf(err, errlen, "database %s: %s", path,
                 db->conn ? sqlite3_errmsg(db->conn) : sqlite3_errstr(rc));
        mg_db_close(db);
        return MG_EXIT_DB_MISSING;
    }
    sqlite3_busy_timeout(db->conn, busy_timeout_ms);
    sqlite3_exec(db->conn, "PRAGMA query_only=ON", NULL, NULL, NULL);
    /* Reads through a memory map avoid a copy per page; the page cache is per worker. */
    sqlite3_exec(db->conn, "PRAGMA mmap_size=2147418112", NULL, NULL, NULL);
    sqlite3_exec(db->conn, "PRAGMA cache_size=-16384", NULL, NULL, NULL);
    sqlite3_extended_result_codes(db->conn, 1);

    /* The first read tells whether it is SQLite at all. */
    sqlite3_stmt *probe;
    rc = sqlite3_prepare_v2(db->conn, "SELECT count(*) FROM sqlite_master", -1, &probe, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(probe) == SQLITE_ROW ? SQLITE_OK : sqlite3_errcode(db->conn);
    if (rc != SQLITE_OK) {
        int primary = rc & 0xff;
        snprintf(err, errlen, "database %s: %s", path, sqlite3_errmsg(db->conn));
        sqlite3_finalize(probe);
        mg_db_close(db);
        return primary == SQLITE_NOTADB || primary == SQLITE_CORRUPT ? MG_EXIT_DB_FOREIGN
                                                                     : MG_EXIT_DB_MISSING;
    }
    sqlite3_finalize(probe);

    for (size_t t = 0; t < sizeof required / sizeof required[0]; t++) {
        if (!has_table(db->conn, required[t].table)) {
            snprintf(err, errlen, "database %s is not a CoreScope database: table %s is missing",
                     path, required[t].table);
            mg_db_close(db);
            return MG_EXIT_DB_FOREIGN;
        }
        for (int c = 0; required[t].columns[c]; c++) {
            if (!has_column(db->conn, required[t].table, required[t].columns[c])) {
                snprintf(err, errlen,
                         "database %s is not a CoreScope database: column %s.%s is missing", path,
                         required[t].table, required[t].columns[c]);
                mg_db_close(db);
                return MG_EXIT_DB_FOREIGN;
            }
        }
    }
    db->schema.nodes_scope = has_column(db->conn, "nodes", "default_scope");
    db->schema.nodes_foreign_advert = has_column(db->conn, "nodes", "foreign_advert");
    db->schema.tx_scope_name = has_column(db->conn, "transmissions", "scope_name");
    db->schema.tx_last_seen = has_column(db->conn, "transmissions", "last_seen");
    db->schema.obs_raw_hex = has_column(db->conn, "observations", "raw_hex");
    db->schema.obs_resolved_path = has_column(db->conn, "observations", "resolved_path");
    db->schema.dropped_packets = has_table(db->conn, "dropped_packets");

    /* From here on nothing but reading is allowed, whatever a statement says. */
    sqlite3_set_authorizer(db->conn, authorize, NULL);
    return 0;
}

void mg_db_close(struct mg_db *db)
{
    if (db->conn)
        sqlite3_close_v2(db->conn);
    db->conn = NULL;
}

int mg_db_check(const char *path, char *err, size_t errlen)
{
    struct mg_db db;
    int rc = mg_db_open(&db, path, 1000, err, errlen);
    if (rc == 0)
        mg_db_close(&db);
    return rc;
}

sqlite3_stmt *mg_db_prepare(struct mg_db *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v3(db->conn, sql, -1, 0, &st, NULL) != SQLITE_OK) {
        mg_error("cannot prepare \"%.120s\": %s", sql, sqlite3_errmsg(db->conn));
        return NULL;
    }
    return st;
}

void mg_db_json_column(struct mg_json *j, sqlite3_stmt *st, int col)
{
    switch (sqlite3_column_type(st, col)) {
    case SQLITE_NULL:
        mg_json_null(j);
        break;
    case SQLITE_INTEGER:
        mg_json_int(j, sqlite3_column_int64(st, col));
        break;
    case SQLITE_FLOAT:
        mg_json_double(j, sqlite3_column_double(st, col));
        break;
    default:
        mg_json_string_n(j, (const char *)sqlite3_column_text(st, col),
                         (size_t)sqlite3_column_bytes(st, col));
        break;
    }
}

int64_t mg_db_scalar(struct mg_db *db, const char *sql)
{
    sqlite3_stmt *st = mg_db_prepare(db, sql);
    if (!st)
        return -1;
    int64_t v = -1;
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* SPDX-License-Identifier: ISC */
#include "db.h"

#include "clock.h"
#include "log.h"
#include "node_visibility.h"
#include "region_table.h"
#include "scoreboard.h"
#include "stats.h"
#include "test_hooks.h"

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Tables and columns without which a file is not a CoreScope database. */
static const struct {
    const char *table;
    const char *columns[12];
} required[] = {
    {"nodes",
     {"public_key", "name", "role", "lat", "lon", "last_seen", "first_seen", "advert_count",
      "battery_mv", "temperature_c", NULL}},
    {"observers", {"id", "name", "iata", "last_seen", NULL}},
    {"transmissions",
     {"id", "raw_hex", "hash", "first_seen", "route_type", "payload_type", "decoded_json",
      "from_pubkey", NULL}},
    {"observations",
     {"id", "transmission_id", "observer_idx", "snr", "rssi", "path_json", "timestamp", NULL}},
    {"neighbor_edges", {"node_a", "node_b", "count", NULL}},
};

#define OPTIONAL(table, column, flag)                                                              \
    {                                                                                              \
        table, column, offsetof(struct mg_db_schema, flag)                                         \
    }
const struct mg_db_optional mg_db_optionals[] = {
    OPTIONAL("nodes", "foreign_advert", nodes_foreign_advert),
    OPTIONAL("nodes", "default_scope", nodes_default_scope),
    OPTIONAL("nodes", "multibyte_sup", nodes_multibyte_sup),
    OPTIONAL("nodes", "multibyte_evidence", nodes_multibyte_evidence),
    OPTIONAL("observers", "inactive", observers_inactive),
    OPTIONAL("observers", "last_packet_at", observers_last_packet_at),
    OPTIONAL("observers", "clock_skew_seconds", observers_clock_skew),
    OPTIONAL("observers", "clock_skew_count_24h", observers_clock_count),
    OPTIONAL("observers", "clock_last_naive_at", observers_clock_naive_at),
    OPTIONAL("observers", "can_relay", observers_can_relay),
    OPTIONAL("observers", "can_relay_seen", observers_can_relay_seen),
    OPTIONAL("transmissions", "channel_hash", tx_channel_hash),
    OPTIONAL("transmissions", "scope_name", tx_scope_name),
    OPTIONAL("transmissions", "last_seen", tx_last_seen),
    OPTIONAL("observations", "resolved_path", obs_resolved_path),
    OPTIONAL("observations", "raw_hex", obs_raw_hex),
    OPTIONAL("dropped_packets", NULL, dropped_packets),
};
#undef OPTIONAL
const size_t mg_db_optionals_count = sizeof mg_db_optionals / sizeof mg_db_optionals[0];

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
                  strcmp(a, "temp_store") == 0 || strcmp(a, "schema_version") == 0 ||
                  strcmp(a, "data_version") == 0))
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

/*
 * Whether the file's header says WAL (bytes 18 and 19, the write and read versions, are 2).
 *
 * Read through SQLite's own VFS, never with open() and close(): POSIX drops every lock a
 * process holds on a file when the process closes any descriptor of it, and a worker opens
 * a helper's connection (this check) while its loop's connection holds its SHARED lock on
 * the file. With that lock gone, the ingestor's next close of a connection finds no other
 * reader, takes EXCLUSIVE, checkpoints and deletes the -wal and -shm under the worker, which
 * goes on reading through its old mapping of the deleted -shm: "database disk image is
 * malformed" until restart (docs/architecture.md, "A live database"). SQLite's unix VFS
 * defers the close of a descriptor while the process holds a lock on the file.
 */
static bool header_says_wal(const char *path)
{
    unsigned char header[20];
    sqlite3_vfs *vfs = sqlite3_vfs_find(NULL);
    sqlite3_file *f = vfs ? calloc(1, (size_t)vfs->szOsFile) : NULL;
    if (!f)
        return false;
    int flags = 0;
    bool wal = false;
    if (vfs->xOpen(vfs, path, f, SQLITE_OPEN_READONLY | SQLITE_OPEN_MAIN_DB, &flags) == SQLITE_OK) {
        wal = f->pMethods->xRead(f, header, (int)sizeof header, 0) == SQLITE_OK &&
              memcmp(header, "SQLite format 3", 16) == 0 && header[18] == 2 && header[19] == 2;
    }
    if (f->pMethods)
        f->pMethods->xClose(f);
    free(f);
    return wal;
}

/*
 * A WAL database needs its -shm and -wal files. SQLite creates them when they are missing,
 * which a reader can do only where it may write the directory, and which would leave them
 * owned by meshgate: CoreScope's ingestor, running as another user, could then no longer
 * write. When they exist and meshgate may only read them, SQLite reads the -shm without
 * writing it (its read-only shared-memory mode), which serves a live database well. So:
 * existing files must be readable; missing ones may be created only by root (SQLite gives
 * them the database's owner) or by the database's owner. Returns 0 or MG_EXIT_DB_MISSING.
 */
static int check_wal_files(const char *path, char *err, size_t errlen)
{
    if (!header_says_wal(path))
        return 0;
    struct stat db_st;
    if (stat(path, &db_st) < 0)
        return 0; /* reported by the caller */
    static const char *const suffixes[] = {"-shm", "-wal"};
    for (size_t i = 0; i < 2; i++) {
        char file[PATH_MAX + 8];
        snprintf(file, sizeof file, "%s%s", path, suffixes[i]);
        if (access(file, F_OK) == 0) {
            if (access(file, R_OK) < 0) {
                snprintf(err, errlen,
                         "database %s is in WAL mode and %s is not readable by meshgate "
                         "(uid %d): let meshgate's user read the database's -shm and -wal files "
                         "(for instance a group shared with CoreScope's user, with the files "
                         "group-readable, and SupplementaryGroups= in the unit)",
                         path, file, (int)geteuid());
                return MG_EXIT_DB_MISSING;
            }
            continue;
        }
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (!slash)
            snprintf(dir, sizeof dir, ".");
        else if (slash == dir)
            dir[1] = '\0';
        else
            *slash = '\0';
        if (access(dir, W_OK) < 0) {
            snprintf(err, errlen,
                     "database %s is in WAL mode and %s does not exist; meshgate (uid %d) cannot "
                     "create it in %s: start CoreScope's ingestor first (it creates the -shm "
                     "and -wal files and keeps them while it runs), or run meshgate as the "
                     "database's owner",
                     path, file, (int)geteuid(), dir);
            return MG_EXIT_DB_MISSING;
        }
        if (geteuid() != 0 && geteuid() != db_st.st_uid) {
            snprintf(err, errlen,
                     "database %s is in WAL mode and %s does not exist; meshgate (uid %d) would "
                     "create it as its own, and CoreScope's ingestor (the owner, uid %d) could "
                     "then no longer write the database: start the ingestor first (it creates "
                     "the -shm and -wal files and keeps them while it runs), or run meshgate as "
                     "the database's owner",
                     path, file, (int)geteuid(), (int)db_st.st_uid);
            return MG_EXIT_DB_MISSING;
        }
    }
    return 0;
}

/* Whether this process may chown (CAP_CHOWN in /proc/self/status's CapEff). */
static bool may_chown(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long caps = 0;
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f))
        found = sscanf(line, "CapEff: %llx", &caps) == 1;
    if (f)
        fclose(f);
    return found && (caps & 1u); /* CAP_CHOWN is capability 0 */
}

bool mg_db_side_files_warning(const char *path, char *note, size_t notelen)
{
    struct stat db_st;
    if (geteuid() != 0 || stat(path, &db_st) < 0 || db_st.st_uid == 0 || !header_says_wal(path))
        return false;
    char file[PATH_MAX + 8], missing[2 * PATH_MAX + 32] = "";
    static const char *const suffixes[] = {"-wal", "-shm"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(file, sizeof file, "%s%s", path, suffixes[i]);
        if (access(file, F_OK) != 0) {
            size_t used = strlen(missing);
            snprintf(missing + used, sizeof missing - used, "%s%s", used ? " and " : "", file);
        }
    }
    if (!missing[0])
        return false;
    snprintf(note, notelen,
             "database %s is in WAL mode, owned by uid %d, and %s missing: meshgate, running as "
             "root, would create %s as root; SQLite hands such files to the database's owner "
             "only where it may chown (%s), and an ingestor running as uid %d cannot open "
             "root's: start the ingestor first (it creates and keeps them), or run meshgate as "
             "a user of its own with read access (etc/meshgate.service)",
             path, (int)db_st.st_uid, missing, strchr(missing, ' ') ? "are" : "is",
             may_chown() ? "this process may now, a unit without CAP_CHOWN may not"
                         : "this process may not: they would stay root's",
             (int)db_st.st_uid);
    return true;
}

/* Each statement's counters are moved into the connection's sum when it ends (profile
 * events come at its last step, its reset and its finalize), and reset, so a statement
 * kept prepared and run again is counted once per run. */
static int count_steps(unsigned type, void *arg, void *p, void *x)
{
    (void)x;
    struct mg_db *db = arg;
    if (type == SQLITE_TRACE_PROFILE) {
        db->vm_steps += sqlite3_stmt_status(p, SQLITE_STMTSTATUS_VM_STEP, 1);
        db->fullscan_steps += sqlite3_stmt_status(p, SQLITE_STMTSTATUS_FULLSCAN_STEP, 1);
    }
    return 0;
}

int64_t mg_db_vm_steps(struct mg_db *db)
{
    int64_t running = 0;
    for (sqlite3_stmt *st = sqlite3_next_stmt(db->conn, NULL); st;
         st = sqlite3_next_stmt(db->conn, st))
        running += sqlite3_stmt_status(st, SQLITE_STMTSTATUS_VM_STEP, 0);
    return db->vm_steps + running;
}

int64_t mg_db_pages_fetched(struct mg_db *db)
{
    int hit = 0, miss = 0, high = 0;
    sqlite3_db_status(db->conn, SQLITE_DBSTATUS_CACHE_HIT, &hit, &high, 0);
    sqlite3_db_status(db->conn, SQLITE_DBSTATUS_CACHE_MISS, &miss, &high, 0);
    return (int64_t)hit + miss;
}

static int authorize(void *arg, int action, const char *a, const char *b, const char *c,
                     const char *d);

/* Sets a pragma the authorizer lets nobody set. */
static void set_pragma(sqlite3 *conn, const char *name, long long value)
{
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA %s=%lld", name, value);
    sqlite3_set_authorizer(conn, NULL, NULL);
    sqlite3_exec(conn, sql, NULL, NULL, NULL);
    sqlite3_set_authorizer(conn, authorize, NULL);
}

void mg_db_set_mmap(struct mg_db *db, int64_t bytes)
{
    set_pragma(db->conn, "mmap_size", (long long)bytes);
    db->mmap_bytes = bytes;
}

void mg_db_pass_begin(struct mg_db_pass *p, sqlite3 *conn, int cache_kib)
{
    p->conn = conn;
    p->mmap_bytes = -1; /* asks: the file's limit as it is */
    if (sqlite3_file_control(conn, "main", SQLITE_FCNTL_MMAP_SIZE, &p->mmap_bytes) != SQLITE_OK)
        p->mmap_bytes = MG_DB_MMAP_BYTES;
    set_pragma(conn, "mmap_size", 0); /* unmaps what the connection had touched, too */
    set_pragma(conn, "cache_size", -(long long)cache_kib);
}

void mg_db_pass_end(struct mg_db_pass *p)
{
    set_pragma(p->conn, "cache_size", -(long long)MG_DB_CACHE_KIB);
    sqlite3_db_release_memory(p->conn);
    set_pragma(p->conn, "mmap_size", (long long)p->mmap_bytes);
}

void mg_db_release(struct mg_db *db)
{
    if (!db->conn)
        return;
    sqlite3_db_release_memory(db->conn);
    /* SQLite maps again only when the size changes: off, then on, drops the touched pages. */
    int64_t bytes = db->mmap_bytes;
    if (bytes > 0) {
        mg_db_set_mmap(db, 0);
        mg_db_set_mmap(db, bytes);
    }
}

/*
 * Heartbeats from inside SQLite. A worker is judged stalled when its scoreboard heartbeat
 * stops (MESHGATE_WORKER_STALL_MS), so long database work must keep beating: a query that
 * scans steps through SQLite's progress handler, and a query that waits for the ingestor's
 * lock sleeps in this busy handler rather than in sqlite3_busy_timeout's, which is silent.
 * Both beat the calling process's own slot (nothing in the master and the tools).
 */
static int progress_beat(void *arg)
{
    (void)arg;
    mg_scoreboard_beat();
    return 0; /* go on */
}

static int busy_wait(void *arg, int count)
{
    static const int delays_ms[] = {1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100};
    struct mg_db *db = arg;
    int64_t now = mg_monotonic_ns();
    if (count == 0)
        db->busy_since_ns = now;
    int64_t left = db->busy_timeout_ns - (now - db->busy_since_ns);
    if (left <= 0)
        return 0; /* SQLITE_BUSY, as with sqlite3_busy_timeout */
    int64_t sleep_ns = (int64_t)delays_ms[count < 12 ? count : 11] * MG_NS_PER_MS;
    if (sleep_ns > left)
        sleep_ns = left;
    struct timespec ts = {sleep_ns / MG_NS_PER_SEC, sleep_ns % MG_NS_PER_SEC};
    nanosleep(&ts, NULL);
    mg_scoreboard_beat();
    return 1;
}

void mg_db_set_busy_timeout(struct mg_db *db, int busy_timeout_ms)
{
    db->busy_timeout_ms = busy_timeout_ms;
    db->busy_timeout_ns = (int64_t)busy_timeout_ms * MG_NS_PER_MS;
    sqlite3_busy_handler(db->conn, busy_timeout_ms > 0 ? busy_wait : NULL, db);
}

bool mg_db_is_fault(int rc)
{
    int primary = rc & 0xff;
    return primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB || primary == SQLITE_IOERR;
}

/* The calling thread's first fault since the last take, and its message. */
static _Thread_local int thread_fault;
static _Thread_local char thread_fault_msg[200];

static void note_fault(int rc, const char *msg)
{
    if (!mg_db_is_fault(rc) || thread_fault != 0)
        return;
    thread_fault = rc;
    snprintf(thread_fault_msg, sizeof thread_fault_msg, "%s", msg ? msg : "");
}

static void sqlite_log(void *arg, int rc, const char *msg)
{
    (void)arg;
    note_fault(rc, msg);
}

static void install_log(void)
{
    /* Only before SQLite is initialized: the first open of the process (or nothing). */
    sqlite3_config(SQLITE_CONFIG_LOG, sqlite_log, NULL);
}

int mg_db_fault_take(char *msg, size_t msglen)
{
    int rc = thread_fault;
    if (msg && msglen > 0)
        snprintf(msg, msglen, "%s", rc ? thread_fault_msg : "");
    thread_fault = 0;
    return rc;
}

static struct mg_segment *fault_seg;

void mg_db_count_faults_in(struct mg_segment *seg)
{
    fault_seg = seg;
}

static void count_fault(enum mg_counter c)
{
    if (fault_seg)
        mg_counter_add(fault_seg, c, 1);
}

static int count_steps(unsigned type, void *arg, void *p, void *x);

/* Opens db's file again in place, with its settings; false (db untouched) when it cannot. */
static bool reopen(struct mg_db *db, char *err, size_t errlen)
{
    if (!db->path) {
        snprintf(err, errlen, "no path to open again");
        return false;
    }
    struct mg_db fresh;
    if (mg_db_open(&fresh, db->path, db->busy_timeout_ms, err, errlen) != 0)
        return false;
    int busy_ms = db->busy_timeout_ms;
    int64_t mmap_bytes = db->mmap_bytes, steps = db->vm_steps, fullscans = db->fullscan_steps;
    mg_db_close(db);
    *db = fresh;
    /* The handlers' argument is the struct: db now, no longer fresh. */
    sqlite3_trace_v2(db->conn, SQLITE_TRACE_PROFILE, count_steps, db);
    mg_db_set_busy_timeout(db, busy_ms);
    if (mmap_bytes != db->mmap_bytes)
        mg_db_set_mmap(db, mmap_bytes);
    db->vm_steps = steps;
    db->fullscan_steps = fullscans;
    mg_test_hooks_db_reopened(db);
    return true;
}

bool mg_db_heal(struct mg_db *db, const char *who)
{
    char msg[200], err[512];
    int rc = mg_db_fault_take(msg, sizeof msg);
    if (rc == 0)
        return false;
    count_fault(MG_CTR_DB_FAULTS);
    mg_scoreboard_db_fault(true);
    if (reopen(db, err, sizeof err))
        mg_warn("database: %s's connection reported %s (%s): closed, opened again, and the "
                "work is run again",
                who, sqlite3_errstr(rc), msg);
    else
        mg_error("database: %s's connection reported %s (%s) and could not be opened again: %s",
                 who, sqlite3_errstr(rc), msg, err);
    return true;
}

void mg_db_heal_retried(struct mg_db *db, const char *who)
{
    char msg[200], err[512];
    int rc = mg_db_fault_take(msg, sizeof msg);
    if (rc == 0)
        return;
    count_fault(MG_CTR_DB_FAULTS);
    count_fault(MG_CTR_DB_FAULTS_UNHEALED);
    mg_scoreboard_db_fault(false);
    mg_error("database: %s's connection reported %s (%s) again once opened again: this worker "
             "is degraded and replaced",
             who, sqlite3_errstr(rc), msg);
    if (!reopen(db, err, sizeof err))
        mg_error("database: %s's connection could not be opened again: %s", who, err);
    /* Something of the process's own may hold the fault (a mapping SQLite shares between its
     * connections to a file): a new process has none. The loop drains and exits. */
    if (fault_seg)
        kill(getpid(), SIGTERM);
}

/* Opens path read-only with meshgate's settings; reads nothing of the file yet. */
static int connect_db(struct mg_db *db, const char *path, int busy_timeout_ms, char *err,
                      size_t errlen)
{
    static pthread_once_t log_once = PTHREAD_ONCE_INIT;
    pthread_once(&log_once, install_log);
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
    int wal_rc = check_wal_files(path, err, errlen);
    if (wal_rc != 0)
        return wal_rc;
    int rc = sqlite3_open_v2(path, &db->conn,
                             SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_PRIVATECACHE,
                             NULL);
    if (rc != SQLITE_OK) {
        snprintf(err, errlen, "database %s: %s", path,
                 db->conn ? sqlite3_errmsg(db->conn) : sqlite3_errstr(rc));
        mg_db_close(db);
        return MG_EXIT_DB_MISSING;
    }
    mg_db_set_busy_timeout(db, busy_timeout_ms);
    sqlite3_progress_handler(db->conn, 10000, progress_beat, NULL);
    sqlite3_exec(db->conn, "PRAGMA query_only=ON", NULL, NULL, NULL);
    /* Reads through a memory map avoid a copy per page; the page cache is per connection. */
    char pragma[64];
    snprintf(pragma, sizeof pragma, "PRAGMA mmap_size=%lld", MG_DB_MMAP_BYTES);
    sqlite3_exec(db->conn, pragma, NULL, NULL, NULL);
    db->mmap_bytes = MG_DB_MMAP_BYTES;
    snprintf(pragma, sizeof pragma, "PRAGMA cache_size=-%d", MG_DB_CACHE_KIB);
    sqlite3_exec(db->conn, pragma, NULL, NULL, NULL);
    sqlite3_extended_result_codes(db->conn, 1);
    db->path = strdup(path);
    return 0;
}

/* From here on nothing but reading is allowed, whatever a statement says. */
static void seal_db(struct mg_db *db)
{
    sqlite3_set_authorizer(db->conn, authorize, NULL);
    sqlite3_trace_v2(db->conn, SQLITE_TRACE_PROFILE, count_steps, db);
    mg_region_map_register(db->conn);
    mg_node_visibility_register(db->conn);
    db->counted = true;
    mg_scoreboard_db_connections_add(1);
}

int mg_db_open_like(struct mg_db *db, const struct mg_db *like, const char *path,
                    int busy_timeout_ms, char *err, size_t errlen)
{
    /* PRAGMA cache_size reads the schema: under a writer's lock it must not wait (it then
     * fails, and the connection keeps SQLite's default cache of 2000 KiB). */
    int rc = connect_db(db, path, 0, err, errlen);
    if (rc != 0)
        return rc;
    mg_db_set_busy_timeout(db, busy_timeout_ms);
    db->schema = like->schema;
    seal_db(db);
    return 0;
}

int mg_db_open(struct mg_db *db, const char *path, int busy_timeout_ms, char *err, size_t errlen)
{
    int rc = connect_db(db, path, busy_timeout_ms, err, errlen);
    if (rc != 0)
        return rc;

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
    for (size_t i = 0; i < mg_db_optionals_count; i++) {
        const struct mg_db_optional *o = &mg_db_optionals[i];
        *(bool *)((char *)&db->schema + o->flag_offset) =
            o->column ? has_column(db->conn, o->table, o->column) : has_table(db->conn, o->table);
    }

    seal_db(db);
    return 0;
}

void mg_db_close(struct mg_db *db)
{
    if (db->conn)
        sqlite3_close_v2(db->conn);
    db->conn = NULL;
    free(db->path);
    db->path = NULL;
    if (db->counted)
        mg_scoreboard_db_connections_add(-1);
    db->counted = false;
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
    int rc = sqlite3_prepare_v3(db->conn, sql, -1, 0, &st, NULL);
    if (rc != SQLITE_OK) {
        note_fault(sqlite3_extended_errcode(db->conn), sqlite3_errmsg(db->conn));
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

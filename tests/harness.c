/* SPDX-License-Identifier: ISC */
#include "harness.h"

#include "scoreboard.h"
#include "segment.h"

#include <arpa/inet.h>
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

int64_t mg_test_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void mg_test_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

bool mg_test_wait_until(bool (*done)(void *arg), void *arg, int ceiling_ms, int poll_ms)
{
    int64_t give_up = mg_test_now_ms() + ceiling_ms;
    for (;;) {
        if (done(arg))
            return true;
        if (mg_test_now_ms() >= give_up)
            return false;
        mg_test_sleep_ms(poll_ms);
    }
}

/* --- cleanup at exit ---------------------------------------------------------------------- */

#define CLEANUP_MAX 64
static char cleanup_shm[CLEANUP_MAX][64];
static char cleanup_dir[CLEANUP_MAX][128];
static int cleanup_shm_count, cleanup_dir_count;
static pid_t cleanup_owner; /* a forked child that exits must not remove its parent's */

static void cleanup_at_exit(void)
{
    if (getpid() != cleanup_owner)
        return;
    for (int i = 0; i < cleanup_shm_count; i++)
        shm_unlink(cleanup_shm[i]);
    for (int i = 0; i < cleanup_dir_count; i++)
        mg_test_rmdir(cleanup_dir[i]);
}

/* The pid in a test segment's name ("mgtest-shmdump-1234-0": the first all-digit part). */
static long name_pid(const char *name)
{
    for (const char *p = name; (p = strchr(p, '-')) != NULL;) {
        p++;
        size_t digits = strspn(p, "0123456789");
        if (digits > 0 && (p[digits] == '-' || p[digits] == '\0'))
            return strtol(p, NULL, 10);
    }
    return -1;
}

/* Segments left by test processes that were killed before they could clean up. */
static void sweep_stale_segments(void)
{
    DIR *d = opendir("/dev/shm");
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "mgtest-", 7) != 0)
            continue;
        long pid = name_pid(e->d_name);
        if (pid > 0 && kill((pid_t)pid, 0) < 0 && errno == ESRCH) {
            char name[300];
            snprintf(name, sizeof name, "/%s", e->d_name);
            shm_unlink(name);
        }
    }
    closedir(d);
}

static void cleanup_init(void)
{
    if (cleanup_owner == getpid())
        return;
    if (cleanup_owner == 0)
        atexit(cleanup_at_exit);
    cleanup_owner = getpid(); /* a child starts its own list */
    cleanup_shm_count = cleanup_dir_count = 0;
    sweep_stale_segments();
}

void mg_test_cleanup_shm(const char *name)
{
    cleanup_init();
    for (int i = 0; i < cleanup_shm_count; i++)
        if (strcmp(cleanup_shm[i], name) == 0)
            return;
    if (cleanup_shm_count < CLEANUP_MAX)
        snprintf(cleanup_shm[cleanup_shm_count++], sizeof cleanup_shm[0], "%s", name);
}

void mg_test_cleanup_dir(const char *dir)
{
    cleanup_init();
    if (dir[0] && cleanup_dir_count < CLEANUP_MAX)
        snprintf(cleanup_dir[cleanup_dir_count++], sizeof cleanup_dir[0], "%s", dir);
}

void mg_test_tmpdir(char *out, size_t cap)
{
    snprintf(out, cap, "/tmp/meshgate-test-XXXXXX");
    if (!mkdtemp(out))
        out[0] = '\0';
    else
        mg_test_cleanup_dir(out);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

void mg_test_rmdir(const char *dir)
{
    if (dir && strncmp(dir, "/tmp/meshgate-test-", 19) == 0)
        nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static const char *base_schema =
    "CREATE TABLE nodes (public_key TEXT PRIMARY KEY, name TEXT, role TEXT, lat REAL, lon REAL,"
    " last_seen TEXT, first_seen TEXT, advert_count INTEGER DEFAULT 0, battery_mv INTEGER,"
    " temperature_c REAL, foreign_advert INTEGER DEFAULT 0);"
    "CREATE TABLE observers (id TEXT PRIMARY KEY, name TEXT, iata TEXT, last_seen TEXT,"
    " first_seen TEXT, packet_count INTEGER DEFAULT 0, model TEXT, firmware TEXT,"
    " client_version TEXT, radio TEXT, battery_mv INTEGER, uptime_secs INTEGER, noise_floor REAL,"
    " inactive INTEGER DEFAULT 0, last_packet_at TEXT);"
    "CREATE TABLE transmissions (id INTEGER PRIMARY KEY AUTOINCREMENT, raw_hex TEXT NOT NULL,"
    " hash TEXT NOT NULL UNIQUE, first_seen TEXT NOT NULL, route_type INTEGER,"
    " payload_type INTEGER, payload_version INTEGER, decoded_json TEXT,"
    " created_at TEXT DEFAULT (datetime('now')), channel_hash TEXT DEFAULT NULL,"
    " from_pubkey TEXT);"
    "CREATE TABLE observations (id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " transmission_id INTEGER NOT NULL REFERENCES transmissions(id), observer_idx INTEGER,"
    " direction TEXT, snr REAL, rssi REAL, score INTEGER, path_json TEXT,"
    " timestamp INTEGER NOT NULL, resolved_path TEXT);"
    "CREATE TABLE neighbor_edges (node_a TEXT NOT NULL, node_b TEXT NOT NULL,"
    " count INTEGER DEFAULT 1, last_seen TEXT, PRIMARY KEY (node_a, node_b));"
    "CREATE INDEX idx_tx_channel_hash ON transmissions(channel_hash) WHERE payload_type = 5;"
    "CREATE INDEX idx_transmissions_first_seen ON transmissions(first_seen);"
    "CREATE INDEX idx_transmissions_hash ON transmissions(hash);"
    "CREATE INDEX idx_transmissions_payload_type ON transmissions(payload_type);"
    "CREATE INDEX idx_observations_timestamp ON observations(timestamp);"
    "CREATE INDEX idx_observations_transmission_id ON observations(transmission_id);"
    "CREATE INDEX idx_observations_observer_idx ON observations(observer_idx);"
    "CREATE INDEX idx_transmissions_from_pubkey ON transmissions(from_pubkey);";

/* What CoreScope's migration adds to the base schema (every live database has it): the
 * columns, the inactive_nodes and _migrations tables, and the indexes. */
static const char *migration =
    "ALTER TABLE nodes ADD COLUMN default_scope TEXT DEFAULT NULL;"
    "ALTER TABLE nodes ADD COLUMN multibyte_sup INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE nodes ADD COLUMN multibyte_evidence TEXT;"
    "ALTER TABLE observers ADD COLUMN clock_skew_seconds INTEGER DEFAULT NULL;"
    "ALTER TABLE observers ADD COLUMN clock_skew_count_24h INTEGER DEFAULT 0;"
    "ALTER TABLE observers ADD COLUMN clock_last_naive_at TEXT DEFAULT NULL;"
    "ALTER TABLE observers ADD COLUMN can_relay INTEGER DEFAULT 1;"
    "ALTER TABLE observers ADD COLUMN can_relay_seen INTEGER DEFAULT 0;"
    "ALTER TABLE transmissions ADD COLUMN scope_name TEXT DEFAULT NULL;"
    "ALTER TABLE transmissions ADD COLUMN last_seen INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE observations ADD COLUMN raw_hex TEXT;"
    "CREATE INDEX idx_observations_tx_ts ON observations(transmission_id, timestamp);"
    "CREATE TABLE inactive_nodes (public_key TEXT PRIMARY KEY, name TEXT, role TEXT, lat REAL,"
    " lon REAL, last_seen TEXT, first_seen TEXT, advert_count INTEGER DEFAULT 0,"
    " battery_mv INTEGER, temperature_c REAL, foreign_advert INTEGER DEFAULT 0,"
    " default_scope TEXT DEFAULT NULL, multibyte_sup INTEGER NOT NULL DEFAULT 0,"
    " multibyte_evidence TEXT);"
    "CREATE INDEX idx_inactive_nodes_last_seen ON inactive_nodes(last_seen);"
    "CREATE TABLE _migrations (name TEXT PRIMARY KEY);"
    "INSERT INTO _migrations (name) VALUES ('scope_name_v1'), ('nodes_default_scope_v1'),"
    " ('observations_raw_hex_v1');"
    "CREATE INDEX idx_tx_scope_name ON transmissions(scope_name) WHERE scope_name IS NOT NULL;"
    "CREATE INDEX idx_tx_last_seen_zero ON transmissions(id) WHERE last_seen=0;";

int mg_test_sqlite_open_v2(const char *path, sqlite3 **db, int flags, const char *vfs)
{
    int rc = sqlite3_open_v2(path, db, flags, vfs);
    if (*db)
        sqlite3_busy_timeout(*db, MG_TEST_BUSY_TIMEOUT_MS);
    return rc;
}

int mg_test_sqlite_open(const char *path, sqlite3 **db)
{
    return mg_test_sqlite_open_v2(path, db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
}

int mg_test_make_db(const char *path, bool migrated, const char *sql)
{
    sqlite3 *db;
    if (mg_test_sqlite_open(path, &db) != SQLITE_OK)
        return -1;
    char *err = NULL;
    /* One transaction: one sync instead of one per statement. */
    int rc = sqlite3_exec(db, "BEGIN", NULL, NULL, &err);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db, base_schema, NULL, NULL, &err);
    if (rc == SQLITE_OK && migrated)
        rc = sqlite3_exec(db, migration, NULL, NULL, &err);
    if (rc == SQLITE_OK && sql)
        rc = sqlite3_exec(db, sql, NULL, NULL, &err);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db, "COMMIT", NULL, NULL, &err);
    if (rc != SQLITE_OK)
        fprintf(stderr, "mg_test_make_db: %s\n", err ? err : "?");
    sqlite3_free(err);
    sqlite3_close(db);
    return rc == SQLITE_OK ? 0 : -1;
}

void mg_test_write_keys_file(const char *dir, const char *key, char *setting, size_t cap)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/keys", dir);
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "%s\n", key);
        fclose(f);
    }
    chmod(path, 0600);
    snprintf(setting, cap, "MESHGATE_API_KEYS_FILE=%s", path);
}

void mg_test_make_reach_db(const char *path, char (*keys)[65], int count)
{
    char sql[65536];
    size_t n = 0;
    long now = (long)time(NULL);
    for (int i = 0; i < count; i++) {
        unsigned byte = 0x10 + (unsigned)i * 0x11;
        for (int c = 0; c < 32; c++)
            snprintf(keys[i] + 2 * c, 3, "%02x", byte);
        n += (size_t)snprintf(sql + n, sizeof sql - n,
                              "INSERT INTO nodes (public_key, name, role, lat, lon, first_seen)"
                              " VALUES ('%s', 'Relay %d', 'repeater', 37.%d, -122.%d, "
                              "'2026-01-01T00:00:00Z');",
                              keys[i], i, i + 1, i + 1);
    }
    n += (size_t)snprintf(sql + n, sizeof sql - n,
                          "INSERT INTO observers (id, name, iata) VALUES ('OBS1', 'Observer', "
                          "'SJC');"
                          "INSERT INTO transmissions (id, raw_hex, hash, first_seen, route_type,"
                          " payload_type) VALUES (1, 'AA', '0000000000000001', "
                          "'2026-11-30T00:00:00Z', 1, 2);");
    for (int i = 0; i < count; i++) {
        int j = (i + 1) % count;
        n += (size_t)snprintf(sql + n, sizeof sql - n,
                              "INSERT INTO observations (transmission_id, observer_idx, snr,"
                              " path_json, timestamp) VALUES (1, 1, 5.5, '[\"%.2s\",\"%.2s\"]',"
                              " %ld);",
                              keys[i], keys[j], now - 60);
    }
    n += (size_t)snprintf(sql + n, sizeof sql - n,
                          "UPDATE observations SET path_json = upper(path_json);");
    mg_test_make_db(path, false, sql);
}

int mg_test_missing_in_order(const char *text, const char *const *wanted, size_t n)
{
    const char *at = text;
    for (size_t i = 0; i < n; i++) {
        const char *p = strstr(at, wanted[i]);
        if (!p)
            return (int)i;
        at = p + 1;
    }
    return -1;
}

int mg_test_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = 0};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sin;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&sin, sizeof sin) == 0 &&
        getsockname(fd, (struct sockaddr *)&sin, &len) == 0)
        port = ntohs(sin.sin_port);
    close(fd);
    return port;
}

static bool env_has(const char *const *env, const char *name)
{
    size_t n = strlen(name);
    for (; env && *env; env++)
        if (strncmp(*env, name, n) == 0 && (*env)[n] == '=')
            return true;
    return false;
}

/* The binary of this build that env asks for: MG_TEST_BINARY=NAME names one; else the test
 * build (meshgate-hooks) when env sets a variable of its hooks (MESHGATE_TEST_*), else the
 * production binary, meshgate. */
static void binary_for(const char *const *env, char *path, size_t cap)
{
    const char *name = "meshgate";
    for (const char *const *e = env; e && *e; e++)
        if (strncmp(*e, "MESHGATE_TEST_", 14) == 0)
            name = "meshgate-hooks";
    for (const char *const *e = env; e && *e; e++)
        if (strncmp(*e, "MG_TEST_BINARY=", 15) == 0)
            name = *e + 15;
    snprintf(path, cap, "%s/%s", MESHGATE_BUILD_DIR, name);
}

static pid_t spawn_binary(const char *const *env, const char *log_path)
{
    char binary[512];
    binary_for(env, binary, sizeof binary);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    /* The server dies with the test that started it, and holds none of its descriptors
     * (a leftover holding criterion's pipes would keep the run from ending). */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    close_range(3, ~0U, 0);
    int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    /* MG_TEST_JOURNAL_STREAM=1 (not passed on): JOURNAL_STREAM names the log file, as
     * systemd names the journal's stream, so the server takes its stderr for the journal. */
    static char journal_stream[80];
    struct stat st;
    for (const char *const *e = env; e && *e; e++)
        if (strcmp(*e, "MG_TEST_JOURNAL_STREAM=1") == 0 && fd >= 0 && fstat(fd, &st) == 0)
            snprintf(journal_stream, sizeof journal_stream, "JOURNAL_STREAM=%llu:%llu",
                     (unsigned long long)st.st_dev, (unsigned long long)st.st_ino);
    if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
    }
    /* MG_TEST_UID=N (not passed on): the server runs as that user, group and no others. */
    for (const char *const *e = env; e && *e; e++) {
        if (strncmp(*e, "MG_TEST_UID=", 12) != 0)
            continue;
        uid_t uid = (uid_t)strtoul(*e + 12, NULL, 10);
        if (setgroups(0, NULL) < 0 || setgid((gid_t)uid) < 0 || setuid(uid) < 0)
            _exit(126);
    }
    /* MG_TEST_ARG=x (not passed on): the one command-line argument, e.g. --check. */
    const char *arg = NULL;
    for (const char *const *e = env; e && *e; e++)
        if (strncmp(*e, "MG_TEST_ARG=", 12) == 0)
            arg = *e + 12;
    /* The server sees only what the test gives it. */
    clearenv();
    setenv("PATH", "/usr/bin:/bin", 1);
    for (; env && *env; env++)
        if (strncmp(*env, "MG_TEST_UID=", 12) != 0 && strncmp(*env, "MG_TEST_ARG=", 12) != 0 &&
            strncmp(*env, "MG_TEST_JOURNAL", 15) != 0 && strncmp(*env, "MG_TEST_PORT=", 13) != 0 &&
            strncmp(*env, "MG_TEST_BINARY=", 15) != 0)
            putenv((char *)*env);
    if (journal_stream[0])
        putenv(journal_stream);
    execl(binary, "meshgate", arg, (char *)NULL);
    _exit(127);
}

static int server_counter;

bool mg_test_server_start(struct mg_test_server *s, const char *db, const char *const *env)
{
    memset(s, 0, sizeof *s);
    mg_test_tmpdir(s->dir, sizeof s->dir);
    snprintf(s->log_path, sizeof s->log_path, "%s/server.log", s->dir);
    snprintf(s->shm_name, sizeof s->shm_name, "/mgtest-%d-%d", (int)getpid(), ++server_counter);
    mg_test_cleanup_shm(s->shm_name);

    static char db_path[256];
    if (!db) {
        snprintf(db_path, sizeof db_path, "%s/test.db", s->dir);
        if (mg_test_make_db(db_path, false, NULL) < 0)
            return false;
        db = db_path;
    }
    char v_db[512], v_listen[64], v_shm[96];
    const char *all[64];
    size_t n = 0;
    snprintf(v_db, sizeof v_db, "MESHGATE_DB=%s", db);
    snprintf(v_shm, sizeof v_shm, "MESHGATE_SHM_NAME=%s", s->shm_name);
    all[n++] = v_db;
    all[n++] = v_shm;
    if (!env_has(env, "MESHGATE_WORKERS"))
        all[n++] = "MESHGATE_WORKERS=2";
    for (const char *const *e = env; e && *e && n < 60; e++)
        all[n++] = *e;
    size_t listen_at = n++;
    all[n] = NULL;

    /* MG_TEST_PORT=N (not passed on): that port, say to start a server again where a proxy
     * expects it; no other is tried. */
    int fixed_port = 0;
    for (const char *const *e = env; e && *e; e++)
        if (strncmp(*e, "MG_TEST_PORT=", 13) == 0)
            fixed_port = atoi(*e + 13);
    for (int attempt = 0; attempt < 5; attempt++) {
        s->port = fixed_port ? fixed_port : mg_test_free_port();
        snprintf(v_listen, sizeof v_listen, "MESHGATE_LISTEN=127.0.0.1:%d", s->port);
        all[listen_at] = v_listen;
        s->pid = spawn_binary(all, s->log_path);
        /* A generous ceiling: a loaded machine under ASan starts slowly; a pass never waits. */
        int64_t give_up = mg_test_now_ms() + 60000;
        while (mg_test_now_ms() < give_up) {
            int status;
            if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
                s->exit_status = status;
                s->pid = 0;
                break;
            }
            struct mg_segment seg;
            char err[256];
            if (mg_segment_attach(&seg, s->shm_name, true, err, sizeof err) == 0) {
                uint32_t state = atomic_load(&seg.header->server_state);
                mg_segment_detach(&seg);
                if (state == MG_SERVER_RUNNING)
                    return true;
            }
            mg_test_sleep_ms(10);
        }
        char *log = mg_test_server_log(s);
        bool port_taken = log && strstr(log, "Address already in use");
        if (!port_taken || s->pid || fixed_port) {
            fprintf(stderr, "server did not start; its log:\n%s\n", log ? log : "(none)");
            free(log);
            if (s->pid)
                mg_test_server_stop(s, 1000);
            return false;
        }
        free(log); /* another test took the port between probe and bind: try another */
    }
    return false;
}

int mg_test_run_expect_exit(const char *const *env, char *out, size_t cap, int timeout_ms)
{
    char dir[128], log_path[256];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(log_path, sizeof log_path, "%s/out.log", dir);
    pid_t pid = spawn_binary(env, log_path);
    int status = -1;
    int64_t give_up = mg_test_now_ms() + timeout_ms;
    while (waitpid(pid, &status, WNOHANG) != pid) {
        if (mg_test_now_ms() > give_up) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            status = -1;
            break;
        }
        mg_test_sleep_ms(5);
    }
    out[0] = '\0';
    FILE *f = fopen(log_path, "r");
    if (f) {
        size_t n = fread(out, 1, cap - 1, f);
        out[n] = '\0';
        fclose(f);
    }
    mg_test_rmdir(dir);
    return status;
}

int mg_test_server_stop(struct mg_test_server *s, int timeout_ms)
{
    int result = -1;
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        int64_t give_up = mg_test_now_ms() + timeout_ms;
        int status = 0;
        bool done = false;
        while (mg_test_now_ms() < give_up) {
            if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
                done = true;
                break;
            }
            mg_test_sleep_ms(5);
        }
        if (!done) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, &status, 0);
        } else if (WIFEXITED(status)) {
            result = WEXITSTATUS(status);
        }
        s->exit_status = status;
        s->pid = 0;
    }
    shm_unlink(s->shm_name);
    mg_test_rmdir(s->dir);
    return result;
}

int mg_test_count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; p && (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

char *mg_test_wait_log(const struct mg_test_server *s, const char *needle, int times,
                       int ceiling_ms)
{
    int64_t give_up = mg_test_now_ms() + ceiling_ms;
    for (;;) {
        char *log = mg_test_server_log(s);
        if ((log && mg_test_count(log, needle) >= times) || mg_test_now_ms() > give_up)
            return log;
        free(log);
        mg_test_sleep_ms(20);
    }
}

char *mg_test_server_log(const struct mg_test_server *s)
{
    FILE *f = fopen(s->log_path, "r");
    if (!f)
        return NULL;
    size_t cap = 1 << 20;
    char *text = malloc(cap);
    size_t n = fread(text, 1, cap - 1, f);
    text[n] = '\0';
    fclose(f);
    return text;
}

int mg_test_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sin, sizeof sin) < 0) {
        close(fd);
        return -1;
    }
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    return fd;
}

bool mg_test_send(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
        if (n <= 0) {
            if (n < 0 && errno == EINTR)
                continue;
            return false;
        }
        data += n;
        len -= (size_t)n;
    }
    return true;
}

static bool wait_readable(int fd, int64_t deadline_ms)
{
    int64_t left = deadline_ms - mg_test_now_ms();
    if (left <= 0)
        return false;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, (int)left) > 0;
}

bool mg_test_read_response(int fd, struct mg_test_response *r, bool head_request, int timeout_ms)
{
    memset(r, 0, sizeof *r);
    int64_t deadline = mg_test_now_ms() + timeout_ms;
    size_t have = 0;
    char *end = NULL;
    /* Read the head byte by byte so nothing of a following response is consumed. */
    while (!end) {
        if (have + 1 >= sizeof r->head || !wait_readable(fd, deadline))
            return false;
        ssize_t n = recv(fd, r->head + have, 1, 0);
        if (n <= 0)
            return false;
        have += (size_t)n;
        r->head[have] = '\0';
        if (have >= 4 && memcmp(r->head + have - 4, "\r\n\r\n", 4) == 0)
            end = r->head + have;
    }
    if (sscanf(r->head, "HTTP/1.%*d %d", &r->status) != 1)
        return false;
    char value[64];
    size_t len = 0;
    if (mg_test_header(r, "Content-Length", value, sizeof value))
        len = strtoull(value, NULL, 10);
    if (head_request || r->status == 204 || r->status == 304)
        len = 0;
    r->body = malloc(len + 1);
    size_t got = 0;
    while (got < len) {
        if (!wait_readable(fd, deadline))
            return false;
        ssize_t n = recv(fd, r->body + got, len - got, 0);
        if (n <= 0)
            return false;
        got += (size_t)n;
    }
    r->body[len] = '\0';
    r->body_len = len;
    return true;
}

bool mg_test_get(int port, const char *target, const char *extra_headers,
                 struct mg_test_response *r)
{
    int fd = mg_test_connect(port);
    if (fd < 0) {
        memset(r, 0, sizeof *r);
        return false;
    }
    char req[8192];
    int n = snprintf(req, sizeof req,
                     "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%sConnection: close\r\n\r\n", target,
                     extra_headers ? extra_headers : "");
    bool ok = n > 0 && (size_t)n < sizeof req && mg_test_send(fd, req, (size_t)n) &&
              mg_test_read_response(fd, r, false, 30000);
    close(fd);
    return ok;
}

bool mg_test_header(const struct mg_test_response *r, const char *name, char *out, size_t cap)
{
    size_t n = strlen(name);
    for (const char *line = strstr(r->head, "\r\n"); line && line[2];
         line = strstr(line + 2, "\r\n")) {
        const char *p = line + 2;
        if (strncasecmp(p, name, n) == 0 && p[n] == ':') {
            p += n + 1;
            while (*p == ' ')
                p++;
            const char *e = strstr(p, "\r\n");
            size_t len = e ? (size_t)(e - p) : strlen(p);
            if (len >= cap)
                len = cap - 1;
            memcpy(out, p, len);
            out[len] = '\0';
            return true;
        }
    }
    return false;
}

void mg_test_response_free(struct mg_test_response *r)
{
    free(r->body);
    r->body = NULL;
}

bool mg_test_wait_closed(int fd, int timeout_ms)
{
    int64_t deadline = mg_test_now_ms() + timeout_ms;
    char buf[4096];
    while (wait_readable(fd, deadline)) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n == 0)
            return true;
        if (n < 0)
            return errno == ECONNRESET;
    }
    return false;
}

char *mg_test_read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t len = 0, n;
    char chunk[4096];
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        char *grown = realloc(buf, len + n + 1);
        if (!grown) {
            free(buf);
            fclose(f);
            return NULL;
        }
        buf = grown;
        memcpy(buf + len, chunk, n);
        len += n;
    }
    fclose(f);
    if (!buf)
        buf = calloc(1, 1);
    if (buf)
        buf[len] = '\0';
    return buf;
}

int mg_test_shell(const char *cmd, char *out, size_t cap)
{
    out[0] = '\0';
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t len = 0, n;
    while (len + 1 < cap && (n = fread(out + len, 1, cap - 1 - len, p)) > 0)
        len += n;
    out[len] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

long mg_test_cpu_ms(int pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    char *stat = mg_test_read_file(path);
    /* After the command name, which may hold spaces and parentheses: state, then 10 numbers
     * before utime and stime (proc(5)). */
    const char *p = stat ? strrchr(stat, ')') : NULL;
    unsigned long utime = 0, stime = 0;
    int got =
        p ? sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime)
          : 0;
    free(stat);
    if (got != 2)
        return -1;
    return (long)((utime + stime) * 1000 / (unsigned long)sysconf(_SC_CLK_TCK));
}

long mg_test_metric(int port, const char *name)
{
    struct mg_test_response r;
    if (!mg_test_get(port, "/metrics", NULL, &r))
        return -1;
    char line[128];
    snprintf(line, sizeof line, "\nmeshgate_%s_total ", name);
    const char *p = r.body ? strstr(r.body, line) : NULL;
    long v = p ? strtol(p + strlen(line), NULL, 10) : -1;
    mg_test_response_free(&r);
    return v;
}

static bool node_list_answers(void *arg)
{
    int port = *(const int *)arg;
    struct mg_test_response r;
    if (!mg_test_get(port, "/api/nodes?limit=1", NULL, &r))
        return false;
    bool ok = r.status == 200;
    mg_test_response_free(&r);
    /* the group's tables of the list's fields: a build or a copy of each */
#define M(x) (mg_test_metric(port, "reach_cache_" x) > 0)
    return ok && (M("hash_size_builds") || M("hash_size_copies")) &&
           (M("relay_probe_builds") || M("relay_probe_copies") || M("relay_builds") ||
            M("relay_copies"));
#undef M
}

char *mg_test_get_turn(int port, const char *target, int *status, bool *first_turn)
{
    struct mg_test_response r;
    *status = 0;
    *first_turn = false;
    if (!mg_test_get(port, target, NULL, &r))
        return NULL;
    char prepared[128] = "";
    mg_test_header(&r, "X-Test-Prepared", prepared, sizeof prepared);
    *first_turn = strncmp(prepared, "turns=1 ", 8) == 0;
    *status = r.status;
    char *body = strdup(r.body ? r.body : "");
    mg_test_response_free(&r);
    return body;
}

bool mg_test_wait_node_list(int port)
{
    return mg_test_wait_until(node_list_answers, &port, 180000, 100);
}

char *mg_test_gunzip(const char *in, size_t len, size_t *out_len)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 15 + 16) != Z_OK)
        return NULL;
    size_t cap = 1 << 20;
    char *out = malloc(cap + 1);
    z.next_in = (Bytef *)in;
    z.avail_in = (uInt)len;
    int rc = Z_OK;
    while (out && rc == Z_OK) {
        if (z.total_out == cap) {
            char *more = realloc(out, 2 * cap + 1);
            if (!more)
                break;
            out = more;
            cap *= 2;
        }
        z.next_out = (Bytef *)out + z.total_out;
        z.avail_out = (uInt)(cap - z.total_out);
        rc = inflate(&z, Z_FINISH);
        if (rc == Z_BUF_ERROR && z.avail_out == 0)
            rc = Z_OK; /* only out of room: more of it */
    }
    bool whole = out && rc == Z_STREAM_END && z.avail_in == 0;
    *out_len = z.total_out;
    inflateEnd(&z);
    if (!whole) {
        free(out);
        return NULL;
    }
    out[*out_len] = '\0';
    return out;
}

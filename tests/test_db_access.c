/* SPDX-License-Identifier: ISC */
/*
 * A database meshgate may only read. In a deployment meshgate runs as its own user with read
 * access to CoreScope's file, which CoreScope's ingestor writes in WAL mode. SQLite then needs
 * the -shm and -wal files beside it: meshgate serves when they exist and it can read them
 * (the ingestor keeps them while it runs), and otherwise refuses to start with exit 66 and a
 * message that names the file and the fix, never creating them as its own.
 *
 * The real binary runs as another user: as "nobody" when the tests run as root (CI), else as
 * the test's own user with the directory's and files' modes taken away (the root-only case,
 * a file owned by someone else, is then skipped and says so).
 */
#include "harness.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOBODY 65534
#define WRITER_LIMIT_MS 60000

static struct {
    char dir[128];
    char db[256];
    pid_t writer;
    struct mg_test_server server;
    bool running;
} t;

static void cleanup(void)
{
    if (t.running)
        mg_test_server_stop(&t.server, 5000);
    t.running = false;
    if (t.writer > 0) {
        kill(t.writer, SIGKILL);
        waitpid(t.writer, NULL, 0);
    }
    t.writer = 0;
    if (t.dir[0]) {
        chmod(t.dir, 0700);
        mg_test_rmdir(t.dir);
    }
    t.dir[0] = '\0';
}

TestSuite(db_access, .fini = cleanup, .timeout = 90);

static bool as_root(void)
{
    return geteuid() == 0;
}

/* Whether user uid can run this build's binary (a clone in a private directory cannot). */
static bool user_can_run_the_binary(uid_t uid)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (setgid((gid_t)uid) < 0 || setuid(uid) < 0)
            _exit(2);
        _exit(access(MESHGATE_BUILD_DIR "/meshgate", X_OK) == 0 ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* A WAL database with one node and one transmission in a directory others may enter. */
static void make_wal_db(void)
{
    if (as_root() && !user_can_run_the_binary(NOBODY))
        cr_skip_test("user nobody cannot run %s/meshgate (the build lies in a private "
                     "directory): the read-only deployment cannot be tried here",
                     MESHGATE_BUILD_DIR);
    mg_test_tmpdir(t.dir, sizeof t.dir);
    cr_assert(t.dir[0]);
    cr_assert_eq(chmod(t.dir, 0755), 0);
    snprintf(t.db, sizeof t.db, "%s/corescope.db", t.dir);
    cr_assert_eq(mg_test_make_db(t.db, true,
                                 "INSERT INTO nodes (public_key, name, role, last_seen, first_seen)"
                                 " VALUES ('aa11', 'Alpha', 'repeater', '2026-05-17T18:00:00Z',"
                                 " '2026-05-01T00:00:00Z');"
                                 "INSERT INTO transmissions (raw_hex, hash, first_seen,"
                                 " route_type, payload_type) VALUES ('00', '00000000000000aa',"
                                 " '2026-05-17T18:00:00Z', 1, 4);"),
                 0);
    sqlite3 *db;
    cr_assert_eq(mg_test_sqlite_open(t.db, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db); /* the last connection: SQLite removes the -shm and -wal files */
    cr_assert_eq(chmod(t.db, 0644), 0);
}

static char *path_of(const char *suffix)
{
    static char p[300];
    snprintf(p, sizeof p, "%s%s", t.db, suffix);
    return p;
}

/* The environment of a server that runs as the other user. */
static const char *const *other_user_env(const char *extra)
{
    static char db_var[300], uid_var[32];
    static const char *env[6];
    snprintf(db_var, sizeof db_var, "MESHGATE_DB=%s", t.db);
    snprintf(uid_var, sizeof uid_var, "MG_TEST_UID=%d", NOBODY);
    size_t n = 0;
    env[n++] = db_var;
    env[n++] = "MESHGATE_WORKERS=2";
    env[n++] = "MESHGATE_LISTEN=127.0.0.1:1";
    if (as_root())
        env[n++] = uid_var;
    if (extra)
        env[n++] = extra;
    env[n] = NULL;
    return env;
}

/*
 * CoreScope's ingestor, as far as the files are concerned: it keeps the database open in WAL
 * mode (so the -shm and -wal files exist) and adds a transmission every 50 ms, numbered from
 * 1, until it is killed or its time is up. Ready once the first is written.
 */
static void start_writer(void)
{
    int ready[2];
    cr_assert_eq(pipe(ready), 0);
    t.writer = fork();
    cr_assert_neq(t.writer, -1);
    if (t.writer == 0) {
        close(ready[0]);
        sqlite3 *db;
        if (mg_test_sqlite_open(t.db, &db) != SQLITE_OK)
            _exit(1);
        sqlite3_busy_timeout(db, 5000);
        int64_t give_up = mg_test_now_ms() + WRITER_LIMIT_MS;
        for (int i = 1; mg_test_now_ms() < give_up; i++) {
            char *sql = sqlite3_mprintf("INSERT INTO transmissions (raw_hex, hash, first_seen,"
                                        " route_type, payload_type) VALUES ('00', '%016x',"
                                        " '2026-05-17T18:00:01Z', 1, 4)",
                                        0xbeef0000u + (unsigned)i);
            int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
            sqlite3_free(sql);
            if (rc != SQLITE_OK)
                _exit(2);
            if (i == 1) {
                (void)!write(ready[1], "r", 1);
                close(ready[1]);
            }
            mg_test_sleep_ms(50);
        }
        sqlite3_close(db);
        _exit(0);
    }
    close(ready[1]);
    char c;
    cr_assert_eq(read(ready[0], &c, 1), 1, "the writer did not start");
    close(ready[0]);
}

Test(db_access, wal_database_without_its_shm_in_a_directory_meshgate_cannot_write_exits_66)
{
    make_wal_db();
    cr_assert_neq(access(path_of("-shm"), F_OK), 0, "the -shm file should be gone");
    if (!as_root())
        cr_assert_eq(chmod(t.dir, 0555), 0);
    char out[4096];
    int status = mg_test_run_expect_exit(other_user_env(NULL), out, sizeof out, 20000);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 66, "status %d, output: %s", status, out);
    cr_expect(strstr(out, path_of("-shm")), "the message does not name the -shm file: %s", out);
    cr_expect(strstr(out, "start CoreScope's ingestor first"), "no fix named: %s", out);
    cr_expect_neq(access(path_of("-shm"), F_OK), 0, "meshgate created the -shm file");
}

Test(db_access, wal_shm_meshgate_cannot_read_exits_66_naming_the_file)
{
    make_wal_db();
    start_writer();
    cr_assert_eq(access(path_of("-shm"), F_OK), 0, "the writer keeps no -shm file");
    cr_assert_eq(chmod(path_of("-shm"), 0600), 0);
    if (!as_root())
        cr_assert_eq(chmod(path_of("-shm"), 0000), 0);
    char out[4096];
    int status = mg_test_run_expect_exit(other_user_env(NULL), out, sizeof out, 20000);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 66, "status %d, output: %s", status, out);
    cr_expect(strstr(out, path_of("-shm")) && strstr(out, "not readable"),
              "the message does not name the unreadable -shm file: %s", out);
    cr_expect(strstr(out, "SupplementaryGroups="), "no fix named: %s", out);
}

Test(db_access, wal_database_missing_its_shm_is_never_created_as_meshgates_own)
{
    if (!as_root())
        cr_skip_test("needs a database owned by another user than meshgate's: run as root");
    make_wal_db();
    cr_assert_eq(chmod(t.dir, 0777), 0); /* meshgate could create the files, and must not */
    char out[4096];
    int status = mg_test_run_expect_exit(other_user_env(NULL), out, sizeof out, 20000);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 66, "status %d, output: %s", status, out);
    cr_expect(strstr(out, "could then no longer write"), "the danger is not named: %s", out);
    cr_expect_neq(access(path_of("-shm"), F_OK), 0, "meshgate created the -shm file");
    cr_expect_neq(access(path_of("-wal"), F_OK), 0, "meshgate created the -wal file");
}

/* The hash of the writer's i-th transmission. */
static void writer_hash(int i, char out[17])
{
    snprintf(out, 17, "%016x", 0xbeef0000u + (unsigned)i);
}

Test(db_access, read_only_wal_database_is_served_live_while_the_ingestor_writes)
{
    make_wal_db();
    start_writer();
    if (!as_root())
        cr_assert_eq(chmod(t.dir, 0555), 0);
    struct stat shm_before;
    cr_assert_eq(stat(path_of("-shm"), &shm_before), 0);
    cr_assert_eq(chmod(path_of("-shm"), 0644), 0);
    cr_assert_eq(chmod(path_of("-wal"), 0644), 0);

    const char *const *env = other_user_env(NULL);
    /* Drop the placeholder listen address: the harness picks the port. */
    const char *start_env[6];
    size_t n = 0;
    for (size_t i = 0; env[i]; i++)
        if (strncmp(env[i], "MESHGATE_DB=", 12) != 0 && strncmp(env[i], "MESHGATE_LISTEN=", 16))
            start_env[n++] = env[i];
    start_env[n] = NULL;
    cr_assert(mg_test_server_start(&t.server, t.db, start_env), "meshgate did not start");
    t.running = true;

    /* Rows the writer adds after the start appear: a transmission numbered past what was
     * written when the server became ready. */
    sqlite3 *db;
    cr_assert_eq(mg_test_sqlite_open_v2(t.db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT count(*) FROM transmissions", -1, &st, NULL),
                 SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    int written = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);

    char hash[17], target[128];
    writer_hash(written + 5, hash);
    snprintf(target, sizeof target, "/api/packets?hash=%s", hash);
    bool seen = false;
    int64_t give_up = mg_test_now_ms() + 30000;
    while (!seen && mg_test_now_ms() < give_up) {
        struct mg_test_response r;
        cr_assert(mg_test_get(t.server.port, target, NULL, &r), "no answer to %s", target);
        cr_assert_eq(r.status, 200, "%s answered %d: %s", target, r.status, r.body);
        seen = strstr(r.body, "\"total\":1") != NULL;
        mg_test_response_free(&r);
        if (!seen)
            mg_test_sleep_ms(20);
    }
    cr_expect(seen, "the writer's transmission %s never appeared", hash);

    struct mg_test_response r;
    cr_assert(mg_test_get(t.server.port, "/api/nodes", NULL, &r));
    cr_expect_eq(r.status, 200, "%s", r.body);
    cr_expect(strstr(r.body, "\"name\":\"Alpha\""), "%s", r.body);
    mg_test_response_free(&r);

    /* The files stay the writer's: meshgate wrote none of them. */
    struct stat shm_after, wal_after;
    cr_assert_eq(stat(path_of("-shm"), &shm_after), 0);
    cr_assert_eq(stat(path_of("-wal"), &wal_after), 0);
    cr_expect_eq(shm_after.st_uid, geteuid());
    cr_expect_eq(wal_after.st_uid, geteuid());
    cr_expect_eq(shm_after.st_ino, shm_before.st_ino, "the -shm file was replaced");
}

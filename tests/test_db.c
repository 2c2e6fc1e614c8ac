/* SPDX-License-Identifier: ISC */
/*
 * The worker's database connection can read and nothing else (invariant 9), whatever the
 * SQL says: read-only open, query_only, and an authorizer that denies every write.
 */
#include "harness.h"

#include "db.h"

#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(db, .timeout = 20);

static char dir[128], path[256];

static void make(void)
{
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/core.db", dir);
    cr_assert_eq(mg_test_make_db(path, false,
                                 "INSERT INTO nodes (public_key, name, role) VALUES ('ab', 'A', "
                                 "'repeater');"),
                 0);
}

static void cleanup(void)
{
    mg_test_rmdir(dir);
}

static unsigned long long checksum(const char *file)
{
    FILE *f = fopen(file, "rb");
    cr_assert(f);
    unsigned long long sum = 1469598103934665603ull;
    int c;
    while ((c = fgetc(f)) != EOF)
        sum = (sum ^ (unsigned)c) * 1099511628211ull;
    fclose(f);
    return sum;
}

Test(db, no_statement_can_write_through_a_worker_connection, .init = make, .fini = cleanup)
{
    unsigned long long before = checksum(path);
    struct mg_db db;
    char err[512];
    cr_assert_eq(mg_db_open(&db, path, 100, err, sizeof err), 0, "%s", err);
    const char *writes[] = {
        "INSERT INTO nodes (public_key) VALUES ('cd')",
        "UPDATE nodes SET name = 'B'",
        "DELETE FROM nodes",
        "CREATE TABLE evil (x)",
        "CREATE TEMP TABLE evil (x)",
        "DROP TABLE nodes",
        "CREATE INDEX evil ON nodes(name)",
        "ALTER TABLE nodes ADD COLUMN evil TEXT",
        "PRAGMA query_only = OFF",
        "PRAGMA journal_mode = DELETE",
        "PRAGMA writable_schema = ON",
        "PRAGMA user_version = 7",
        "ATTACH DATABASE ':memory:' AS other",
        "VACUUM",
        "REINDEX",
        "ANALYZE",
    };
    for (size_t i = 0; i < sizeof writes / sizeof writes[0]; i++) {
        char *msg = NULL;
        int rc = sqlite3_exec(db.conn, writes[i], NULL, NULL, &msg);
        cr_expect_neq(rc, SQLITE_OK, "\"%s\" succeeded", writes[i]);
        sqlite3_free(msg);
        sqlite3_exec(db.conn, "ROLLBACK", NULL, NULL, NULL);
    }
    /* Even after trying to turn query_only off, a write still fails. */
    cr_expect_neq(
        sqlite3_exec(db.conn, "INSERT INTO nodes (public_key) VALUES ('ef')", NULL, NULL, NULL),
        SQLITE_OK);
    /* Reading works. */
    cr_expect_eq(mg_db_scalar(&db, "SELECT count(*) FROM nodes"), 1);
    mg_db_close(&db);
    cr_expect_eq(checksum(path), before, "the database file changed");
}

Test(db, a_missing_file_is_not_created, .init = make, .fini = cleanup)
{
    char missing[300], err[512];
    snprintf(missing, sizeof missing, "%s/absent.db", dir);
    struct mg_db db;
    cr_expect_eq(mg_db_open(&db, missing, 100, err, sizeof err), MG_EXIT_DB_MISSING);
    cr_expect(strstr(err, "absent.db"), "%s", err);
    cr_expect_neq(access(missing, F_OK), 0, "opening created the file");
}

static bool flag_of(const struct mg_db *db, const struct mg_db_optional *o)
{
    return *(const bool *)((const char *)&db->schema + o->flag_offset);
}

/* Runs sql on path read-write (a test's own setup, never the server's connection). */
static void exec_on(const char *file, const char *sql)
{
    sqlite3 *conn;
    cr_assert_eq(mg_test_sqlite_open(file, &conn), SQLITE_OK);
    char *err = NULL;
    cr_assert_eq(sqlite3_exec(conn, sql, NULL, NULL, &err), SQLITE_OK, "%s: %s", sql, err);
    sqlite3_close(conn);
}

/* Adds every optional column and table the file lacks. */
static void add_every_optional(const char *file)
{
    sqlite3 *conn;
    cr_assert_eq(mg_test_sqlite_open(file, &conn), SQLITE_OK);
    for (size_t i = 0; i < mg_db_optionals_count; i++) {
        const struct mg_db_optional *o = &mg_db_optionals[i];
        char sql[256];
        if (!o->column) {
            snprintf(sql, sizeof sql, "CREATE TABLE IF NOT EXISTS %s (id INTEGER PRIMARY KEY)",
                     o->table);
        } else {
            snprintf(sql, sizeof sql, "SELECT 1 FROM pragma_table_info('%s') WHERE name = '%s'",
                     o->table, o->column);
            sqlite3_stmt *st;
            cr_assert_eq(sqlite3_prepare_v2(conn, sql, -1, &st, NULL), SQLITE_OK);
            bool present = sqlite3_step(st) == SQLITE_ROW;
            sqlite3_finalize(st);
            if (present)
                continue;
            snprintf(sql, sizeof sql, "ALTER TABLE %s ADD COLUMN %s TEXT", o->table, o->column);
        }
        cr_assert_eq(sqlite3_exec(conn, sql, NULL, NULL, NULL), SQLITE_OK, "%s: %s", sql,
                     sqlite3_errmsg(conn));
    }
    sqlite3_close(conn);
}

/* Drops one optional column (with the indexes that name it) or table. */
static void drop_optional(const char *file, const struct mg_db_optional *o)
{
    sqlite3 *conn;
    cr_assert_eq(mg_test_sqlite_open(file, &conn), SQLITE_OK);
    char sql[512];
    if (o->column) {
        snprintf(sql, sizeof sql,
                 "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = '%s'"
                 " AND sql LIKE '%%%s%%'",
                 o->table, o->column);
        sqlite3_stmt *st;
        cr_assert_eq(sqlite3_prepare_v2(conn, sql, -1, &st, NULL), SQLITE_OK);
        char names[8][64];
        int n = 0;
        while (n < 8 && sqlite3_step(st) == SQLITE_ROW)
            snprintf(names[n++], sizeof names[0], "%s", sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
        for (int i = 0; i < n; i++) {
            char drop[128];
            snprintf(drop, sizeof drop, "DROP INDEX \"%.60s\"", names[i]);
            cr_assert_eq(sqlite3_exec(conn, drop, NULL, NULL, NULL), SQLITE_OK, "dropping index %s",
                         names[i]);
        }
        snprintf(sql, sizeof sql, "ALTER TABLE %s DROP COLUMN %s", o->table, o->column);
    } else {
        snprintf(sql, sizeof sql, "DROP TABLE %s", o->table);
    }
    cr_assert_eq(sqlite3_exec(conn, sql, NULL, NULL, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(conn));
    sqlite3_close(conn);
}

Test(db, each_optional_column_is_detected_on_its_own, .init = make, .fini = cleanup)
{
    char err[512];
    struct mg_db db;
    for (size_t drop = 0; drop < mg_db_optionals_count; drop++) {
        const struct mg_db_optional *gone = &mg_db_optionals[drop];
        char file[300];
        snprintf(file, sizeof file, "%s/without-%zu.db", dir, drop);
        cr_assert_eq(mg_test_make_db(file, true, NULL), 0);
        add_every_optional(file);
        drop_optional(file, gone);
        cr_assert_eq(mg_db_open(&db, file, 100, err, sizeof err), 0, "%s", err);
        for (size_t i = 0; i < mg_db_optionals_count; i++) {
            const struct mg_db_optional *o = &mg_db_optionals[i];
            cr_expect_eq(flag_of(&db, o), i != drop, "without %s.%s: the flag of %s.%s is %d",
                         gone->table, gone->column ? gone->column : "*", o->table,
                         o->column ? o->column : "*", flag_of(&db, o));
        }
        mg_db_close(&db);
    }
}

Test(db, an_unknown_extra_column_or_table_is_no_reason_to_refuse, .init = make, .fini = cleanup)
{
    exec_on(path, "ALTER TABLE nodes ADD COLUMN zz_future TEXT;"
                  "ALTER TABLE observations ADD COLUMN zz_future INTEGER;"
                  "CREATE TABLE zz_future_table (x);");
    char err[512];
    struct mg_db db;
    cr_assert_eq(mg_db_open(&db, path, 100, err, sizeof err), 0, "%s", err);
    cr_expect_not(db.schema.nodes_default_scope);
    mg_db_close(&db);
}

Test(db, a_missing_required_column_is_named, .init = make, .fini = cleanup)
{
    exec_on(path, "ALTER TABLE nodes DROP COLUMN advert_count");
    char err[512];
    struct mg_db db;
    cr_expect_eq(mg_db_open(&db, path, 100, err, sizeof err), MG_EXIT_DB_FOREIGN);
    cr_expect(strstr(err, "nodes.advert_count"), "%s", err);
}

/* Whether this process holds a POSIX lock on file (/proc/locks, by inode). */
static bool holds_lock_on(const char *file)
{
    struct stat st;
    cr_assert_eq(stat(file, &st), 0);
    FILE *f = fopen("/proc/locks", "r");
    cr_assert(f);
    char line[256], want[64];
    snprintf(want, sizeof want, ":%llu ", (unsigned long long)st.st_ino);
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        int pid = 0;
        found = strstr(line, "POSIX") && strstr(line, want) &&
                sscanf(strstr(line, "POSIX") + 5, " %*s %*s %d", &pid) == 1 && pid == getpid();
    }
    fclose(f);
    return found;
}

/*
 * The cause of the stuck "database disk image is malformed" beside a live writer: opening a
 * helper's connection read the file's header with open() and close(), and POSIX drops all
 * of a process's locks on a file at the close of any of its descriptors. The loop's SHARED
 * lock gone, the writer's next close of a connection took EXCLUSIVE, checkpointed and deleted
 * the -wal and -shm under the worker. Here the writer is another process (python3's sqlite3).
 */
Test(db, a_second_connection_keeps_the_first_ones_lock_on_a_wal_file, .init = make, .fini = cleanup)
{
    char cmd[1024], wal[300];
    snprintf(wal, sizeof wal, "%s-wal", path);
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import sqlite3; c = sqlite3.connect('%s'); "
             "c.execute('PRAGMA journal_mode=WAL'); c.execute(\\\"INSERT INTO nodes "
             "(public_key, name, role) VALUES ('w0', 'W', 'companion')\\\"); c.commit()\"",
             path);
    cr_assert_eq(system(cmd), 0);
    /* A writer that stays open keeps the -wal while the readers open. */
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import sqlite3, sys; c = sqlite3.connect('%s'); "
             "c.execute('PRAGMA journal_mode=WAL'); c.execute(\\\"INSERT INTO nodes "
             "(public_key, name, role) VALUES ('w1', 'W', 'companion')\\\"); c.commit(); "
             "sys.stdin.read(); c.execute(\\\"INSERT INTO nodes (public_key, name, role) "
             "VALUES ('w2', 'W', 'companion')\\\"); c.commit(); c.close()\"",
             path);
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t writer = fork();
    if (writer == 0) {
        dup2(fds[0], 0);
        close(fds[1]);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(fds[0]);
    int64_t until = mg_test_now_ms() + 15000;
    while (access(wal, F_OK) != 0 && mg_test_now_ms() < until)
        usleep(10000);
    struct mg_db loop, helper;
    char err[512];
    cr_assert_eq(mg_db_open(&loop, path, 1000, err, sizeof err), 0, "%s", err);
    cr_assert_geq(mg_db_scalar(&loop, "SELECT count(*) FROM nodes"), 2);
    cr_assert(holds_lock_on(path), "the loop's connection holds its SHARED lock");
    cr_assert_eq(mg_db_open_like(&helper, &loop, path, 1000, err, sizeof err), 0, "%s", err);
    cr_expect(holds_lock_on(path), "opening a helper's connection dropped the loop's lock");
    /* The writer commits once more and closes: with the lock kept, it is not the last
     * connection, so the -wal stays and the loop reads on. */
    close(fds[1]);
    int status;
    cr_assert_eq(waitpid(writer, &status, 0), writer);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    cr_expect_eq(access(wal, F_OK), 0, "the writer's close deleted the -wal under a reader");
    cr_expect_eq(mg_db_scalar(&loop, "SELECT count(*) FROM nodes"), 4);
    mg_db_close(&helper);
    mg_db_close(&loop);
}

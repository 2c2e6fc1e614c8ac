/*
 * The worker's database connection can read and nothing else (invariant 9), whatever the
 * SQL says: read-only open, query_only, and an authorizer that denies every write.
 */
#include "harness.h"

#include "db.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
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

Test(db, optional_columns_are_probed_per_schema, .init = make, .fini = cleanup)
{
    char migrated[300], drops[300], err[512];
    snprintf(migrated, sizeof migrated, "%s/migrated.db", dir);
    cr_assert_eq(mg_test_make_db(migrated, true, NULL), 0);
    /* dropped_packets is not in CoreScope's migrated schema; some deployments have it. */
    snprintf(drops, sizeof drops, "%s/drops.db", dir);
    cr_assert_eq(mg_test_make_db(drops, true,
                                 "CREATE TABLE dropped_packets (id INTEGER PRIMARY KEY, hash TEXT,"
                                 " reason TEXT NOT NULL);"),
                 0);
    struct mg_db db;
    cr_assert_eq(mg_db_open(&db, path, 100, err, sizeof err), 0, "%s", err);
    cr_expect_not(db.schema.nodes_scope);
    cr_expect_not(db.schema.tx_scope_name);
    cr_expect_not(db.schema.obs_raw_hex);
    cr_expect_not(db.schema.dropped_packets);
    cr_expect(db.schema.obs_resolved_path);
    mg_db_close(&db);
    cr_assert_eq(mg_db_open(&db, migrated, 100, err, sizeof err), 0, "%s", err);
    cr_expect(db.schema.nodes_scope);
    cr_expect(db.schema.tx_scope_name);
    cr_expect(db.schema.tx_last_seen);
    cr_expect(db.schema.obs_raw_hex);
    cr_expect_not(db.schema.dropped_packets);
    mg_db_close(&db);
    cr_assert_eq(mg_db_open(&db, drops, 100, err, sizeof err), 0, "%s", err);
    cr_expect(db.schema.dropped_packets);
    mg_db_close(&db);
}

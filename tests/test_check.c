/* SPDX-License-Identifier: ISC */
/*
 * `meshgate --check` (-t) with the real binary: the exit codes and messages of a start (78,
 * 66, 65), the effective configuration printed, and nothing created or touched: no segment,
 * no socket bound, a running server on the same name and port left alone.
 */
#include "harness.h"

#include "segment.h"

#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(check, .timeout = 60);

static char dir[128], db_path[256], shm_setting[96], db_setting[300], listen_setting[64];

static void make_dir(void)
{
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db_path, sizeof db_path, "%s/ok.db", dir);
    cr_assert_eq(mg_test_make_db(db_path, false, NULL), 0);
    snprintf(db_setting, sizeof db_setting, "MESHGATE_DB=%s", db_path);
    snprintf(shm_setting, sizeof shm_setting, "MESHGATE_SHM_NAME=/mgtest-check-%d", (int)getpid());
    snprintf(listen_setting, sizeof listen_setting, "MESHGATE_LISTEN=127.0.0.1:%d",
             mg_test_free_port());
}

static void remove_dir(void)
{
    shm_unlink(shm_setting + strlen("MESHGATE_SHM_NAME="));
    mg_test_rmdir(dir);
}

/* Runs the binary with arg and the base settings, then extra (later names win). */
static int run_check(const char *arg, const char *const *extra, char *out, size_t cap)
{
    char arg_setting[64];
    snprintf(arg_setting, sizeof arg_setting, "MG_TEST_ARG=%s", arg);
    const char *env[32] = {arg_setting, db_setting, shm_setting, listen_setting,
                           "MESHGATE_WORKERS=1"};
    size_t n = 5;
    for (; extra && *extra && n < 31; extra++) {
        for (size_t i = 1; i < n; i++)
            if (strncmp(env[i], *extra, strcspn(*extra, "=") + 1) == 0)
                env[i] = "MG_TEST_UNUSED=1";
        env[n++] = *extra;
    }
    env[n] = NULL;
    int status = mg_test_run_expect_exit(env, out, cap, 10000);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static bool segment_exists(void)
{
    char path[128];
    snprintf(path, sizeof path, "/dev/shm%s", shm_setting + strlen("MESHGATE_SHM_NAME="));
    return access(path, F_OK) == 0;
}

Test(check, a_good_configuration_passes_prints_it_and_creates_nothing, .init = make_dir,
     .fini = remove_dir)
{
    static char out[16384];
    struct stat before, after;
    cr_assert_eq(stat(db_path, &before), 0);
    const char *args[] = {"--check", "-t"};
    for (int i = 0; i < 2; i++) {
        int code = run_check(args[i], NULL, out, sizeof out);
        cr_expect_eq(code, 0, "%s: exit %d: %s", args[i], code, out);
        cr_expect(strstr(out, "effective configuration:"), "%s", out);
        cr_expect(strstr(out, "  MESHGATE_WORKERS=1\n"), "%s", out);
        cr_expect(strstr(out, "  MESHGATE_REACH_COLD_QUEUE=0\n"), "auto is resolved: %s", out);
        cr_expect(strstr(out, "configuration check passed"), "%s", out);
        cr_expect_null(strstr(out, "listening"), "%s", out);
    }
    cr_expect(!segment_exists(), "--check created the segment");
    cr_assert_eq(stat(db_path, &after), 0);
    cr_expect_eq(before.st_mtime, after.st_mtime, "--check wrote the database");
    cr_expect_eq(before.st_size, after.st_size);
    char wal[300];
    snprintf(wal, sizeof wal, "%s-wal", db_path);
    cr_expect_neq(access(wal, F_OK), 0, "--check left a -wal file");
}

struct failing {
    const char *setting;
    int code;
    const char *message;
};

Test(check, a_bad_configuration_fails_with_the_exit_code_and_message_of_a_start, .init = make_dir,
     .fini = remove_dir)
{
    char missing[300], foreign[300], foreign_path[256], keys[300], keys_path[256];
    snprintf(missing, sizeof missing, "MESHGATE_DB=%s/nope.db", dir);
    snprintf(foreign_path, sizeof foreign_path, "%s/other.db", dir);
    sqlite3 *db;
    cr_assert_eq(mg_test_sqlite_open(foreign_path, &db), SQLITE_OK);
    sqlite3_exec(db, "CREATE TABLE users (id INT)", NULL, NULL, NULL);
    sqlite3_close(db);
    snprintf(foreign, sizeof foreign, "MESHGATE_DB=%s", foreign_path);
    snprintf(keys_path, sizeof keys_path, "%s/keys", dir);
    FILE *f = fopen(keys_path, "w");
    fputs("0123456789abcdef0123\n", f);
    fclose(f);
    chmod(keys_path, 0644); /* readable by others: refused */
    snprintf(keys, sizeof keys, "MESHGATE_API_KEYS_FILE=%s", keys_path);
    const struct failing cases[] = {
        {"MESHGATE_WORKERS=0", 78, "MESHGATE_WORKERS=0: must be a whole number from 1 to 1024"},
        {"MESHGATE_LISTEN=8080", 78, "MESHGATE_LISTEN=8080: must be HOST:PORT"},
        {"MESHGATE_PUBLIC_DIR=/nonexistent", 78,
         "MESHGATE_PUBLIC_DIR=/nonexistent: must be an existing directory"},
        {keys, 78, "MESHGATE_API_KEYS_FILE"},
        {"MESHGATE_ENV_FILE=/nonexistent/meshgate.env", 78,
         "MESHGATE_ENV_FILE=/nonexistent/meshgate.env: cannot read it"},
        {"MESHGATE_WORKRES=2", 78,
         "unknown variable(s) MESHGATE_WORKRES (closest known name: MESHGATE_WORKERS)"},
        {missing, 66, "No such file or directory"},
        {foreign, 65, "not a CoreScope database"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *extra[] = {cases[i].setting, NULL};
        static char out[16384], start_out[16384];
        int code = run_check("--check", extra, out, sizeof out);
        cr_expect_eq(code, cases[i].code, "%s: exit %d: %s", cases[i].setting, code, out);
        cr_expect(strstr(out, cases[i].message), "%s: %s", cases[i].setting, out);
        cr_expect_null(strstr(out, "configuration check passed"), "%s", out);
        /* A start says the same, with the same code. */
        const char *start_env[8] = {db_setting,           shm_setting,      listen_setting,
                                    "MESHGATE_WORKERS=1", cases[i].setting, NULL};
        if (strncmp(cases[i].setting, "MESHGATE_DB=", 12) == 0 ||
            strncmp(cases[i].setting, "MESHGATE_LISTEN=", 16) == 0)
            start_env[strncmp(cases[i].setting, "MESHGATE_DB=", 12) == 0 ? 0 : 2] =
                "MG_TEST_UNUSED=1";
        int status = mg_test_run_expect_exit(start_env, start_out, sizeof start_out, 10000);
        cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == cases[i].code,
                  "a start with %s: status %d: %s", cases[i].setting, status, start_out);
        cr_expect(strstr(start_out, cases[i].message), "a start with %s: %s", cases[i].setting,
                  start_out);
    }
    cr_expect(!segment_exists(), "a failing --check created the segment");
}

Test(check, a_bad_line_in_the_env_file_fails_naming_file_and_line, .init = make_dir,
     .fini = remove_dir)
{
    char path[256], setting[300];
    snprintf(path, sizeof path, "%s/meshgate.env", dir);
    FILE *f = fopen(path, "w");
    fputs("# edited\nMESHGATE_WORKERS=2\nMESHGATE_ANON_RATE=\"60\n", f);
    fclose(f);
    snprintf(setting, sizeof setting, "MESHGATE_ENV_FILE=%s", path);
    const char *extra[] = {setting, NULL};
    static char out[16384];
    cr_expect_eq(run_check("--check", extra, out, sizeof out), 78, "%s", out);
    char expected[400];
    snprintf(expected, sizeof expected,
             "MESHGATE_ENV_FILE=%s: line 3: the double quote opened here is never closed", path);
    cr_expect(strstr(out, expected), "%s", out);

    f = fopen(path, "w");
    fputs("MESHGATE_WORKERS=2\nMESHGATE_ANON_RATE=60\n", f);
    fclose(f);
    cr_expect_eq(run_check("--check", extra, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "  MESHGATE_ANON_RATE=60\n"), "the file's value: %s", out);
    cr_expect(strstr(out, "  MESHGATE_WORKERS=1\n"), "the environment wins: %s", out);
    cr_expect(strstr(out, "MESHGATE_WORKERS=2 is overridden by the process environment"), "%s",
              out);

    /* A mistyped name in the file fails too, with its line and the name it was meant to be. */
    f = fopen(path, "w");
    fputs("MESHGATE_WORKERS=2\nMESHGATE_ANON_RAET=60\n", f);
    fclose(f);
    cr_expect_eq(run_check("--check", extra, out, sizeof out), 78, "%s", out);
    cr_expect(strstr(out, "line 2: unknown variable MESHGATE_ANON_RAET (closest known name: "
                          "MESHGATE_ANON_RATE)"),
              "%s", out);
}

Test(check, a_running_server_on_the_same_name_and_port_is_left_alone)
{
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, NULL));
    struct mg_segment seg;
    char err[256];
    cr_assert_eq(mg_segment_attach(&seg, s.shm_name, true, err, sizeof err), 0, "%s", err);
    int master = atomic_load(&seg.header->master_pid);
    int64_t created = seg.header->created_realtime_ns;
    mg_segment_detach(&seg);

    char v_db[300], v_shm[96], v_listen[64];
    snprintf(v_db, sizeof v_db, "MESHGATE_DB=%s/test.db", s.dir);
    snprintf(v_shm, sizeof v_shm, "MESHGATE_SHM_NAME=%s", s.shm_name);
    snprintf(v_listen, sizeof v_listen, "MESHGATE_LISTEN=127.0.0.1:%d", s.port);
    const char *env[] = {"MG_TEST_ARG=--check", v_db, v_shm, v_listen, NULL};
    static char out[16384];
    int status = mg_test_run_expect_exit(env, out, sizeof out, 10000);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d: %s", status, out);

    cr_assert_eq(mg_segment_attach(&seg, s.shm_name, true, err, sizeof err), 0, "%s", err);
    cr_expect_eq(atomic_load(&seg.header->master_pid), master);
    cr_expect_eq(seg.header->created_realtime_ns, created, "the segment was replaced");
    cr_expect_eq(atomic_load(&seg.header->server_state), MG_SERVER_RUNNING);
    mg_segment_detach(&seg);
    struct mg_test_response r;
    cr_expect(mg_test_get(s.port, "/api/healthz", NULL, &r) && r.status == 200);
    mg_test_response_free(&r);
    cr_expect_eq(mg_test_server_stop(&s, 5000), 0);
}

Test(check, an_extra_argument_is_a_usage_error, .init = make_dir, .fini = remove_dir)
{
    static char out[4096];
    cr_expect_eq(run_check("--chek", NULL, out, sizeof out), 64, "%s", out);
    cr_expect(strstr(out, "unknown argument --chek"), "%s", out);
}

/* Run as root beside a WAL database of another user whose -wal and -shm are missing, the
 * open would create them as root: --check says so before it happens (and passes: SQLite may
 * still hand them to the owner). Root's own database, or side files that exist: no warning. */
Test(check, root_beside_another_users_wal_database_is_warned_of_its_side_files, .init = make_dir,
     .fini = remove_dir)
{
    if (geteuid() != 0)
        cr_skip_test("needs root (the tests run as root in CI)");
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(db_path, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db); /* the last connection: the -wal and -shm go */
    char side[300];
    snprintf(side, sizeof side, "%s-wal", db_path);
    cr_assert_neq(access(side, F_OK), 0, "the -wal stayed");
    static char out[16384];
    /* Root's own file: SQLite creates what root may keep. */
    cr_expect_eq(run_check("--check", NULL, out, sizeof out), 0, "%s", out);
    cr_expect_null(strstr(out, "would create"), "%s", out);
    unlink(side);
    snprintf(side, sizeof side, "%s-shm", db_path);
    unlink(side);

    cr_assert_eq(chown(db_path, 1234, 1234), 0);
    int code = run_check("--check", NULL, out, sizeof out);
    cr_expect_eq(code, 0, "exit %d: %s", code, out);
    cr_expect(strstr(out, "warning") && strstr(out, "owned by uid 1234") &&
                  strstr(out, "would create") && strstr(out, "-wal"),
              "no warning about the side files: %s", out);
    /* Once they exist (the ingestor runs), nothing to say. */
    code = run_check("--check", NULL, out, sizeof out);
    cr_expect_eq(code, 0, "exit %d: %s", code, out);
    cr_expect_null(strstr(out, "would create"), "%s", out);
}

/* SPDX-License-Identifier: ISC */
/*
 * API keys: the file and its rules, the constant-time match, and signed-in requests against
 * the real binary (a key that is not valid gets 401, never anonymous).
 */
#include "harness.h"

#include "keys.h"
#include "segment.h"
#include "stats.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(keys, .timeout = 30);

static char dir[128], path[256];

static void write_keys(const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs(text, f);
    fclose(f);
    chmod(path, mode);
}

static void make_dir(void)
{
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/keys", dir);
}

static void remove_dir(void)
{
    mg_test_rmdir(dir);
}

static struct mg_keys keys;

Test(keys, file_lines_comments_and_blanks, .init = make_dir, .fini = remove_dir)
{
    write_keys("# operators\n\n  alpha-0123456789abcdef  \nbeta-0123456789abcdef\n#x\n", 0600);
    char err[512];
    cr_assert_eq(mg_keys_load(&keys, path, err, sizeof err), 0, "%s", err);
    cr_expect_eq(keys.count, 2);
    cr_expect(mg_keys_match(&keys, "alpha-0123456789abcdef", 22));
    cr_expect(mg_keys_match(&keys, "beta-0123456789abcdef", 21));
    cr_expect_not(mg_keys_match(&keys, "alpha-0123456789abcde", 21), "a prefix matched");
    cr_expect_not(mg_keys_match(&keys, "alpha-0123456789abcdefX", 23), "a longer key matched");
    cr_expect_not(mg_keys_match(&keys, "", 0));
    cr_expect_not(mg_keys_match(&keys, "# operators", 11));
}

Test(keys, a_label_names_its_key_and_a_bare_key_is_named_by_its_line, .init = make_dir,
     .fini = remove_dir)
{
    write_keys("# operators\nops alpha-0123456789abcdef\n\nbeta-0123456789abcdef\n"
               "  grafana.prod_2   gamma-0123456789abcdef  \n",
               0600);
    char err[512];
    cr_assert_eq(mg_keys_load(&keys, path, err, sizeof err), 0, "%s", err);
    cr_assert_eq(keys.count, 3);
    cr_expect_str_eq(keys.label[0], "ops");
    cr_expect_str_eq(keys.label[1], "key-4", "the line number, never a part of the key");
    cr_expect_str_eq(keys.label[2], "grafana.prod_2");
    cr_expect_eq(mg_keys_find(&keys, "alpha-0123456789abcdef", 22), 0);
    cr_expect_eq(mg_keys_find(&keys, "beta-0123456789abcdef", 21), 1);
    cr_expect_eq(mg_keys_find(&keys, "gamma-0123456789abcdef", 22), 2);
    cr_expect_eq(mg_keys_find(&keys, "ops", 3), -1, "a label is not a key");
    cr_expect_eq(mg_keys_find(&keys, "gamma-0123456789abcde", 21), -1);
    cr_expect_not(mg_keys_match(&keys, "ops alpha-0123456789abcdef", 26));
}

Test(keys, a_bad_or_repeated_label_is_refused_with_its_line, .init = make_dir, .fini = remove_dir)
{
    static const struct {
        const char *text, *says;
    } cases[] = {
        {"ops alpha-0123456789abcdef\nops beta-0123456789abcdef\n", "line 2: the label ops"},
        {"key-2 alpha-0123456789abcdef\nbeta-0123456789abcdef\n", "line 2: the label key-2"},
        {"op$ alpha-0123456789abcdef\n", "line 1: the label must be"},
        {"ops alpha-0123456789abcdef extra\n", "line 1 is not a key"},
        {"ops short\n", "line 1 is not a key"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_keys(cases[i].text, 0600);
        char err[512] = "";
        cr_expect_eq(mg_keys_load(&keys, path, err, sizeof err), -1, "%s", cases[i].text);
        cr_expect(strstr(err, cases[i].says), "%s: %s", cases[i].text, err);
        cr_expect_null(strstr(err, "0123456789abcdef"), "a key in a message: %s", err);
        cr_expect_eq(keys.count, 0);
    }
}

Test(keys, a_file_others_can_read_is_refused, .init = make_dir, .fini = remove_dir)
{
    write_keys("alpha-0123456789abcdef\n", 0644);
    char err[512];
    cr_expect_eq(mg_keys_load(&keys, path, err, sizeof err), -1);
    cr_expect(strstr(err, "MESHGATE_API_KEYS_FILE=") && strstr(err, "mode 0644") &&
                  strstr(err, "chmod 600"),
              "%s", err);
    cr_expect_eq(keys.count, 0);
    write_keys("alpha-0123456789abcdef\n", 0620);
    cr_expect_eq(mg_keys_load(&keys, path, err, sizeof err), -1, "group-writable accepted");
}

Test(keys, missing_file_and_bad_lines_are_refused, .init = make_dir, .fini = remove_dir)
{
    char err[512];
    cr_expect_eq(mg_keys_load(&keys, path, err, sizeof err), -1);
    cr_expect(strstr(err, "No such file"), "%s", err);
    write_keys("short\n", 0600);
    cr_expect_eq(mg_keys_load(&keys, path, err, sizeof err), -1);
    cr_expect(strstr(err, "line 1 is not a key"), "%s", err);
    write_keys("has a blank inside 0123456789\n", 0600);
    cr_expect_eq(mg_keys_load(&keys, path, err, sizeof err), -1);
    cr_expect_eq(mg_keys_load(&keys, "", err, sizeof err), 0, "no file configured is fine");
    cr_expect_eq(keys.count, 0);
}

static int status_with(int port, const char *headers, char *www, size_t cap, char *body,
                       size_t body_cap)
{
    struct mg_test_response r;
    if (!mg_test_get(port, "/api/healthz", headers, &r))
        return -1;
    if (www) {
        www[0] = '\0';
        mg_test_header(&r, "WWW-Authenticate", www, cap);
    }
    if (body)
        snprintf(body, body_cap, "%s", r.body);
    int status = r.status;
    mg_test_response_free(&r);
    return status;
}

Test(keys, a_key_that_is_not_valid_gets_401_never_anonymous, .init = make_dir, .fini = remove_dir)
{
    write_keys("alpha-0123456789abcdef\n", 0600);
    char setting[300];
    snprintf(setting, sizeof setting, "MESHGATE_API_KEYS_FILE=%s", path);
    const char *env[] = {setting, "MESHGATE_ACCESS_LOG=1", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    char www[256], body[512];
    cr_expect_eq(status_with(s.port, NULL, NULL, 0, NULL, 0), 200, "anonymous is fine");
    cr_expect_eq(
        status_with(s.port, "Authorization: Bearer alpha-0123456789abcdef\r\n", NULL, 0, NULL, 0),
        200);
    cr_expect_eq(status_with(s.port, "X-API-Key: alpha-0123456789abcdef\r\n", NULL, 0, NULL, 0),
                 200);
    cr_expect_eq(status_with(s.port, "Authorization: Bearer wrong-0123456789abcdef\r\n", www,
                             sizeof www, body, sizeof body),
                 401);
    cr_expect(strstr(www, "Bearer realm=\"meshgate\""), "%s", www);
    cr_expect(strstr(body, "{\"error\":\"the API key is not valid\"}"), "%s", body);
    cr_expect_eq(status_with(s.port, "X-API-Key: alpha-0123456789abcde\r\n", NULL, 0, NULL, 0), 401,
                 "a prefix of a key signed in");
    /* Another scheme is not an API key (a proxy's basic auth, say). */
    cr_expect_eq(status_with(s.port, "Authorization: Basic dXNlcjpwYXNz\r\n", NULL, 0, NULL, 0),
                 200);
    struct mg_segment seg;
    char err[256];
    cr_assert_eq(mg_segment_attach(&seg, s.shm_name, true, err, sizeof err), 0, "%s", err);
    cr_expect_eq(mg_counter_get(&seg, MG_CTR_SIGNED_IN), 2);
    cr_expect_eq(mg_counter_get(&seg, MG_CTR_UNAUTHORIZED), 2);
    mg_segment_detach(&seg);
    mg_test_sleep_ms(100);
    char *log = mg_test_server_log(&s);
    cr_expect_null(strstr(log, "0123456789abcdef"), "a key reached the log: %s", log);
    free(log);
    mg_test_server_stop(&s, 5000);
}

Test(keys, a_permissive_key_file_stops_the_start_with_78, .init = make_dir, .fini = remove_dir)
{
    write_keys("alpha-0123456789abcdef\n", 0644);
    char db_dir[128], db[256], v_db[300], v_keys[300], v_listen[64], v_shm[64], out[4096];
    mg_test_tmpdir(db_dir, sizeof db_dir);
    snprintf(db, sizeof db, "%s/k.db", db_dir);
    cr_assert_eq(mg_test_make_db(db, false, NULL), 0);
    snprintf(v_db, sizeof v_db, "MESHGATE_DB=%s", db);
    snprintf(v_keys, sizeof v_keys, "MESHGATE_API_KEYS_FILE=%s", path);
    snprintf(v_listen, sizeof v_listen, "MESHGATE_LISTEN=127.0.0.1:%d", mg_test_free_port());
    snprintf(v_shm, sizeof v_shm, "MESHGATE_SHM_NAME=/mgtest-keys-%d", (int)getpid());
    const char *env[] = {v_db, v_keys, v_listen, v_shm, "MESHGATE_WORKERS=1", NULL};
    int status = mg_test_run_expect_exit(env, out, sizeof out, 5000);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 78, "status %d: %s", status, out);
    cr_expect(strstr(out, "MESHGATE_API_KEYS_FILE=") && strstr(out, "chmod 600"), "%s", out);
    if (geteuid() != 0) { /* root reads any file */
        chmod(path, 0000);
        status = mg_test_run_expect_exit(env, out, sizeof out, 5000);
        cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 78, "unreadable: %d: %s", status,
                  out);
    }
    mg_test_rmdir(db_dir);
}

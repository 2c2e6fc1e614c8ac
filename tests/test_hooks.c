/* SPDX-License-Identifier: ISC */
/*
 * The tests' hooks are in the test build only (workers/test_hooks.h): build/meshgate, what
 * `make install` installs and `make run` runs, has no hook code, refuses MESHGATE_TEST_* as it
 * refuses any unknown MESHGATE_ name (exit 78, with the closest known name), and X-Test-*
 * headers mean nothing to it; build/meshgate-hooks, the same sources with the hooks, is what
 * the tests that need one start (tests/harness.c).
 */
/* The test binary links the test build's library (GNUmakefile): its hooks are called directly. */
#define MESHGATE_HOOKS 1
#include "harness.h"
#include "http.h"
#include "inproc.h"
#include "router.h"
#include "segment.h"
#include "stats.h"
#include "test_hooks.h"
#include "wiring.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

TestSuite(hooks, .timeout = 120);

static const char *const hook_vars[] = {"MESHGATE_TEST_HOOKS=park",
                                        "MESHGATE_TEST_RELAY_PASS_MS=100"};

/* Runs build/binary with a valid configuration plus var (and MG_TEST_ARG=arg when arg). */
static int run_with(const char *binary, const char *arg, const char *var, char *out, size_t cap)
{
    char dir[128], db[256], v_db[300], v_listen[64], v_shm[64], v_bin[64], v_arg[64];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/test.db", dir);
    cr_assert_eq(mg_test_make_db(db, false, NULL), 0);
    snprintf(v_db, sizeof v_db, "MESHGATE_DB=%s", db);
    snprintf(v_listen, sizeof v_listen, "MESHGATE_LISTEN=127.0.0.1:%d", mg_test_free_port());
    snprintf(v_shm, sizeof v_shm, "MESHGATE_SHM_NAME=/mgtest-hooks-%d", (int)getpid());
    snprintf(v_bin, sizeof v_bin, "MG_TEST_BINARY=%s", binary);
    snprintf(v_arg, sizeof v_arg, "MG_TEST_ARG=%s", arg ? arg : "");
    const char *env[] = {
        v_bin, v_db, v_listen, v_shm, "MESHGATE_WORKERS=1", var, arg ? v_arg : NULL, NULL};
    int status = mg_test_run_expect_exit(env, out, cap, 30000);
    mg_test_cleanup_shm(v_shm + strlen("MESHGATE_SHM_NAME="));
    mg_test_rmdir(dir);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

Test(hooks, the_production_binary_refuses_the_hooks_variables)
{
    static char out[16384];
    for (size_t i = 0; i < sizeof hook_vars / sizeof *hook_vars; i++) {
        char name[64];
        snprintf(name, sizeof name, "%.*s (closest known name: MESHGATE_",
                 (int)strcspn(hook_vars[i], "="), hook_vars[i]);
        /* A start, and --check. */
        for (int check = 0; check < 2; check++) {
            int code =
                run_with("meshgate", check ? "--check" : NULL, hook_vars[i], out, sizeof out);
            cr_expect_eq(code, 78, "%s%s: exit %d: %s", hook_vars[i], check ? " --check" : "", code,
                         out);
            cr_expect(strstr(out, name), "%s: %s", hook_vars[i], out);
        }
        /* The test build knows them. */
        int code = run_with("meshgate-hooks", "--check", hook_vars[i], out, sizeof out);
        cr_expect_eq(code, 0, "meshgate-hooks --check with %s: exit %d: %s", hook_vars[i], code,
                     out);
    }
}

static struct mg_test_server server;
static bool started;
static struct mg_segment seg;
static bool attached;

static void fini(void)
{
    if (attached)
        mg_segment_detach(&seg);
    if (started)
        mg_test_server_stop(&server, 10000);
    started = attached = false;
}

Test(hooks, the_production_binary_ignores_test_headers, .fini = fini)
{
    const char *env[] = {"MESHGATE_WORKERS=1", "MESHGATE_ANON_RATE=0", NULL};
    cr_assert(mg_test_server_start(&server, NULL, env));
    started = true;
    char err[256];
    cr_assert_eq(mg_segment_attach(&seg, server.shm_name, true, err, sizeof err), 0, "%s", err);
    attached = true;
    /* Each would fail the request (a connection broken twice: 500), stop the worker inside the
     * anonymous line's lock, or hold it past the read's 30 s; none gets a header of the hooks. */
    const char *asks[] = {"X-Test-Db-Break: 2\r\n", "X-Test-Stop-In-Lock: anon\r\n",
                          "X-Test-Hold-Ms: 30000\r\n"};
    const char *targets[] = {"/api/nodes", "/api/packets?expand=observations&limit=1",
                             "/api/packets?expand=observations&limit=2"};
    for (size_t i = 0; i < sizeof asks / sizeof *asks; i++) {
        struct mg_test_response r;
        cr_assert(mg_test_get(server.port, targets[i], asks[i], &r), "%s", asks[i]);
        cr_expect_eq(r.status, 200, "%s: %s", asks[i], r.head);
        cr_expect_null(strstr(r.head, "X-Test"), "%s: %s", asks[i], r.head);
        mg_test_response_free(&r);
    }
    cr_expect_eq(mg_counter_get(&seg, MG_CTR_DB_FAULTS), 0);
}

/* The whole file at path, with its length. */
static char *read_binary(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "%s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *data = malloc((size_t)n);
    cr_assert(data && fread(data, 1, (size_t)n, f) == (size_t)n, "%s", path);
    fclose(f);
    *len = (size_t)n;
    return data;
}

/* How many of the hooks' strings and symbols the binary build/name holds. */
static int hook_traces(const char *name, char *found, size_t cap)
{
    char path[512], cmd[600], line[512];
    snprintf(path, sizeof path, "%s/%s", MESHGATE_BUILD_DIR, name);
    size_t len;
    char *data = read_binary(path, &len);
    int traces = 0;
    found[0] = '\0';
    const char *texts[] = {"X-Test-", "MESHGATE_TEST_"};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
        if (memmem(data, len, texts[i], strlen(texts[i]))) {
            traces++;
            snprintf(found + strlen(found), cap - strlen(found), "\"%s\" ", texts[i]);
        }
    free(data);
    snprintf(cmd, sizeof cmd, "nm '%s' 2>&1", path);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    int symbols = 0;
    while (fgets(line, sizeof line, p)) {
        symbols++;
        if (strstr(line, "test_hooks") || strstr(line, "lock_test_stop") ||
            strstr(line, "test_stop_")) {
            traces++;
            snprintf(found + strlen(found), cap - strlen(found), "%s", line);
        }
    }
    cr_assert_eq(pclose(p), 0, "nm %s", path);
    cr_assert_gt(symbols, 100, "nm %s listed %d symbols", path, symbols);
    return traces;
}

Test(hooks, the_production_binary_holds_no_hook_code)
{
    char found[4096];
    cr_expect_eq(hook_traces("meshgate", found, sizeof found), 0, "build/meshgate: %s", found);
    /* The test build does (so the search above finds what it looks for). */
    cr_expect_geq(hook_traces("meshgate-hooks", found, sizeof found), 4, "meshgate-hooks: %s",
                  found);
}

/* A reach report takes X-Test-Hold-Ms inside its build (its row says so: holds_in_build), so
 * dispatch's hook lets it through at once with the hold for the build; another heavy route run
 * on the loop is parked by the hook before its handler. */
Test(hooks, a_reach_report_is_held_inside_its_build_not_before_it)
{
    mg_site_wire();
    static const char head[] = "GET /api/nodes/ab/reach HTTP/1.1\r\nHost: t\r\n"
                               "X-Test-Hold-Ms: 500\r\n\r\n";
    struct mg_http_request hr;
    struct mg_http_limits limits = {sizeof head, 4096};
    int status = 0;
    const char *why = NULL;
    cr_assert_eq(mg_http_parse_request(head, sizeof head - 1, &limits, &hr, &status, &why),
                 MG_HTTP_OK);
    struct mg_env env = {.test_hooks = MG_TEST_HOOKS_PARK};
    struct mg_request req;
    struct mg_park park;
    static const char reach[] = "/api/nodes/:pubkey/reach", paths[] = "/api/nodes/:pubkey/paths";
    mg_test_request_init(&req, &hr, &park);
    cr_expect(mg_test_hooks_hold(&env, &req, mg_route_by_template(reach, strlen(reach)), false),
              "a reach report was held before its build");
    cr_expect_eq(req.test_hold_ms, 500);
    mg_test_request_init(&req, &hr, &park);
    cr_expect_not(mg_test_hooks_hold(&env, &req, mg_route_by_template(paths, strlen(paths)), false),
                  "a node's paths on the loop were not held before their handler");
}

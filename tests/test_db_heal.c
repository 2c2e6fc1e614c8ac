/* SPDX-License-Identifier: ISC */
/*
 * A connection that reports a fault (corruption, not a database, an I/O error) is closed and
 * opened again, and the request run again once; a fault that comes again has the worker
 * replaced (workers/data/db.h, mg_db_heal). The fault is injected with the test hook
 * X-Test-Db-Break (workers/core/test_hooks.h): every read of the file through the connection fails
 * until it is closed, so without the heal the worker stays broken, as the workers beside a
 * live writer did (docs/architecture.md, "A live database").
 */
#include "harness.h"
#include "scoreboard.h"
#include "segment.h"
#include "stats.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TestSuite(db_heal, .timeout = 120);

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

static void start(const char *workers)
{
    const char *env[] = {workers, "MESHGATE_TEST_HOOKS=park", "MESHGATE_ANON_RATE=0", NULL};
    cr_assert(mg_test_server_start(&server, NULL, env));
    started = true;
    char err[256];
    cr_assert_eq(mg_segment_attach(&seg, server.shm_name, true, err, sizeof err), 0, "%s", err);
    attached = true;
}

static int get_status(const char *target, const char *headers, char **body)
{
    struct mg_test_response r;
    if (!mg_test_get(server.port, target, headers, &r))
        return -1;
    int status = r.status;
    if (body)
        *body = strdup(r.body ? r.body : "");
    mg_test_response_free(&r);
    return status;
}

/* Every route below on the loop's connection, then on the anonymous helper's. */
Test(db_heal, a_broken_connection_is_opened_again_and_the_request_retried, .fini = fini)
{
    start("MESHGATE_WORKERS=1");
    const char *targets[] = {"/api/nodes", "/api/stats", "/api/observers",
                             "/api/packets?expand=observations&limit=5"};
    for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++) {
        uint64_t before = mg_counter_get(&seg, MG_CTR_DB_FAULTS);
        cr_expect_eq(get_status(targets[i], "X-Test-Db-Break: 1\r\n", NULL), 200, "%s", targets[i]);
        cr_expect_eq(mg_counter_get(&seg, MG_CTR_DB_FAULTS), before + 1,
                     "%s: the fault was not counted", targets[i]);
        /* Not stuck: the next request, on the connection opened again, reads. */
        cr_expect_eq(get_status(targets[i], NULL, NULL), 200, "%s after the fault", targets[i]);
    }
    cr_expect_eq(mg_counter_get(&seg, MG_CTR_DB_FAULTS_UNHEALED), 0);
    char *log = mg_test_wait_log(&server, "closed, opened again", 4, 10000);
    cr_expect_eq(mg_test_count(log, "closed, opened again"), 4, "%s", log ? log : "");
    cr_expect(log && strstr(log, "disk I/O error"), "the log names the fault:\n%s", log ? log : "");
    /* A fault that heals is a warning: no line at error level for any of them. */
    cr_expect(log && !strstr(log, " error: "), "a healed fault logged an error:\n%s",
              log ? log : "");
    free(log);
    /* The worker with the faults, healed, in /api/healthz and /metrics. */
    char *body = NULL;
    cr_expect_eq(get_status("/api/healthz", NULL, &body), 200);
    cr_expect(body && strstr(body, "\"dbFaults\":[{\"degraded\":false,\"faults\":4,"),
              "healthz: %s", body ? body : "");
    free(body);
    cr_expect_eq(get_status("/metrics", NULL, &body), 200);
    cr_expect(body && strstr(body, "meshgate_db_faults_total 4"), "metrics: %.2000s",
              body ? body : "");
    free(body);
}

Test(db_heal, a_fault_that_comes_again_has_the_worker_replaced, .fini = fini)
{
    start("MESHGATE_WORKERS=1");
    struct mg_slot *slot = mg_slot_get(&seg, 0);
    int first_pid = atomic_load(&slot->pid);
    cr_expect_eq(get_status("/api/nodes", "X-Test-Db-Break: 2\r\n", NULL), 500);
    cr_expect_eq(mg_counter_get(&seg, MG_CTR_DB_FAULTS), 2);
    cr_expect_eq(mg_counter_get(&seg, MG_CTR_DB_FAULTS_UNHEALED), 1);
    char *log = mg_test_wait_log(&server, "is degraded and replaced", 1, 10000);
    cr_expect(log && strstr(log, "is degraded and replaced"), "%s", log ? log : "");
    free(log);
    /* A new worker serves, and reads. */
    int64_t until = mg_test_now_ms() + 30000;
    int status = 0;
    while (mg_test_now_ms() < until) {
        int pid = atomic_load(&slot->pid);
        if (pid > 0 && pid != first_pid && (status = get_status("/api/nodes", NULL, NULL)) == 200)
            break;
        mg_test_sleep_ms(50);
    }
    cr_expect_eq(status, 200, "no new worker answered");
    char *body = NULL;
    cr_expect_eq(get_status("/api/healthz", NULL, &body), 200);
    cr_expect(body && strstr(body, "\"dbFaults\":[]"), "healthz: %s", body ? body : "");
    free(body);
}

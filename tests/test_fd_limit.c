/* SPDX-License-Identifier: ISC */
/*
 * A worker at its open-file limit (docs/architecture.md, "Connections"): accept fails with
 * EMFILE while connections wait in the backlog, and the listening socket stays readable. The
 * worker must back off (not spin on accept) and log once per interval with a count, then
 * serve the waiting connections once descriptors are free again.
 */
#include "harness.h"

#include "scoreboard.h"
#include "segment.h"
#include "stats.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

TestSuite(fd_limit, .timeout = 90);

#define CLIENTS 24
#define CEILING_MS 20000

static int open_fds(int pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", pid);
    DIR *d = opendir(path);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static uint64_t accept_errors(const struct mg_segment *seg)
{
    return mg_counter_get(seg, MG_CTR_ACCEPT_ERRORS);
}

Test(fd_limit, accept_at_the_file_limit_backs_off_and_logs_once_per_interval)
{
    const char *env[] = {"MESHGATE_WORKERS=1", NULL};
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, env));
    struct mg_segment seg;
    char err[256];
    cr_assert_eq(mg_segment_attach(&seg, s.shm_name, true, err, sizeof err), 0, "%s", err);
    int worker = atomic_load(&seg.slots[0].pid);
    cr_assert_gt(worker, 0);
    /* Room for two more descriptors: the third connection finds the limit. */
    int limit = open_fds(worker) + 2;
    struct rlimit was, rl;
    cr_assert_eq(prlimit(worker, RLIMIT_NOFILE, NULL, &was), 0);
    rl = (struct rlimit){(rlim_t)limit, was.rlim_max};
    cr_assert_eq(prlimit(worker, RLIMIT_NOFILE, &rl, NULL), 0);

    int fd[CLIENTS];
    for (int i = 0; i < CLIENTS; i++)
        fd[i] = mg_test_connect(s.port);
    char *log = mg_test_wait_log(&s, "accept: Too many open files", 1, CEILING_MS);
    cr_assert(log && strstr(log, "accept: Too many open files"), "no failure logged:\n%s", log);
    free(log);

    /* A window of about a second at the limit: a few failures, not a spin. */
    uint64_t before = accept_errors(&seg);
    int64_t t0 = mg_test_now_ms();
    mg_test_sleep_ms(1000);
    uint64_t during = accept_errors(&seg) - before;
    int64_t took = mg_test_now_ms() - t0;
    cr_expect_leq(during, (uint64_t)(took / 100 + 5),
                  "%llu failed accepts in %lld ms: the worker spins", (unsigned long long)during,
                  (long long)took);
    log = mg_test_server_log(&s);
    cr_expect_eq(mg_test_count(log, "accept: Too many open files"), 1, "%s", log);
    cr_expect(strstr(log, "time(s) since the last such line"), "%s", log);
    free(log);

    /* Descriptors free again: the connections that waited are served. */
    cr_assert_eq(prlimit(worker, RLIMIT_NOFILE, &was, NULL), 0);
    for (int i = 0; i < CLIENTS; i++) {
        if (fd[i] < 0)
            continue;
        static const char req[] =
            "GET /api/healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        struct mg_test_response r;
        cr_assert(mg_test_send(fd[i], req, sizeof req - 1));
        cr_expect(mg_test_read_response(fd[i], &r, false, CEILING_MS), "client %d not served", i);
        if (r.status)
            mg_test_response_free(&r);
        close(fd[i]);
    }
    mg_segment_detach(&seg);
    mg_test_server_stop(&s, 10000);
}

/* SPDX-License-Identifier: ISC */
/*
 * A damaged segment and a dead master (docs/architecture.md, "A damaged segment"): garbage
 * written over any section of a live segment, or a master that dies holding a lock, must
 * never leave a process holding the listening port without serving it. Real server, real
 * processes; every wait is for an event with a generous ceiling.
 */
#include "harness.h"

#include "lock.h"
#include "process.h"
#include "reclaim.h"
#include "scoreboard.h"
#include "segment.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(segfault, .timeout = 120);

/* How long the group may take to either serve again or let the port go. */
#define CEILING_MS 30000

static const char *const base_env[] = {"MESHGATE_WORKERS=2", "MESHGATE_WORKER_STALL_MS=1500",
                                       "MESHGATE_DRAIN_TIMEOUT_MS=1000", NULL};

/* The port's state, probed once: refused (free), answered, or held without an answer. */
enum probe { PORT_FREE, PORT_SERVED, PORT_HELD };

static enum probe probe(int port)
{
    int fd = mg_test_connect(port);
    if (fd < 0)
        return PORT_FREE;
    static const char req[] = "GET /api/healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    struct mg_test_response r;
    bool ok = mg_test_send(fd, req, sizeof req - 1) && mg_test_read_response(fd, &r, false, 2000);
    close(fd);
    if (ok)
        mg_test_response_free(&r);
    return ok ? PORT_SERVED : PORT_HELD;
}

/* Waits until the port is free (want_free) or free or served; true when it came in time. */
static bool wait_port(int port, bool want_free, enum probe *last)
{
    int64_t give_up = mg_test_now_ms() + CEILING_MS;
    while (mg_test_now_ms() < give_up) {
        *last = probe(port);
        if (*last == PORT_FREE || (!want_free && *last == PORT_SERVED))
            return true;
        mg_test_sleep_ms(50);
    }
    return false;
}

/* The workers' pids as the scoreboard says now (before anything is written over it). */
static unsigned worker_pids(const struct mg_segment *seg, int *pids, unsigned cap)
{
    unsigned n = 0;
    for (unsigned i = 0; i < seg->slot_count && n < cap; i++) {
        int pid = atomic_load(&seg->slots[i].pid);
        if (pid > 0)
            pids[n++] = pid;
    }
    return n;
}

/* Starts a server, maps its segment for writing, and notes its workers' pids. */
static unsigned start_attached(struct mg_test_server *s, struct mg_segment *seg, int *pids,
                               unsigned cap)
{
    cr_assert(mg_test_server_start(s, NULL, base_env), "the server did not start");
    char err[256];
    cr_assert_eq(mg_segment_attach(seg, s->shm_name, false, err, sizeof err), 0, "%s", err);
    unsigned n = worker_pids(seg, pids, cap);
    cr_assert_gt(n, 0);
    return n;
}

/* Stops the server and every worker it had, whatever state they are in. */
static void stop_all(struct mg_test_server *s, const int *pids, unsigned n)
{
    mg_test_server_stop(s, 10000);
    for (unsigned i = 0; i < n; i++)
        if (mg_process_state(pids[i], NULL) != MG_PROCESS_GONE)
            kill(pids[i], SIGKILL);
}

/*
 * Writes garbage over one section (NULL: the header) of a live server's segment, then kills
 * a worker so that the master's reclaim walks the segment, and asserts that the port is
 * served or free within the ceiling, and once it is free that no process holds it.
 */
static void garbage_over(const char *section)
{
    struct mg_test_server s;
    struct mg_segment seg;
    int pids[8];
    unsigned n = start_attached(&s, &seg, pids, 8);

    unsigned char *at = seg.base;
    size_t len = sizeof *seg.header;
    if (section) {
        bool found = false;
        for (uint32_t i = 0; i < seg.header->section_count && !found; i++) {
            const struct mg_shm_section *sec = &seg.header->sections[i];
            if (strcmp(sec->name, section) == 0) {
                at = (unsigned char *)seg.base + sec->offset;
                len = sec->record_size * sec->record_count;
                found = true;
            }
        }
        cr_assert(found, "no section %s", section);
    }
    /* Garbage with no zero byte: every count huge, every index out of range, every lock
     * word a pid that is no one's. */
    uint32_t x = 2463534242u;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        at[i] = (unsigned char)(x | 0x80);
    }
    kill(pids[0], SIGKILL);

    enum probe last = PORT_HELD;
    cr_expect(wait_port(s.port, false, &last),
              "after garbage over %s the port is held and not served",
              section ? section : "header");
    if (last == PORT_FREE) {
        /* Gone for good, not between two workers: it stays free. */
        mg_test_sleep_ms(500);
        cr_expect_eq(probe(s.port), PORT_FREE, "the port came back held after garbage over %s",
                     section ? section : "header");
    }
    /* The master never follows what it read into a crash: it reaps the killed worker and
     * runs on, or it stops on purpose. */
    int status = 0;
    bool ended = false;
    int64_t give_up = mg_test_now_ms() + CEILING_MS;
    while (mg_test_now_ms() < give_up) {
        if (waitpid(s.pid, &status, WNOHANG) == s.pid) {
            ended = true;
            break;
        }
        char *log = mg_test_server_log(&s);
        bool reaped = log && strstr(log, "held item(s) reclaimed");
        free(log);
        if (reaped)
            break;
        mg_test_sleep_ms(20);
    }
    if (!ended && waitpid(s.pid, &status, WNOHANG) == s.pid)
        ended = true;
    if (ended) {
        s.pid = 0;
        cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 71,
                  "after garbage over %s the master ended with wait status %#x (signal %d)",
                  section ? section : "header", status, WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        char *log = mg_test_server_log(&s);
        cr_expect(log && strstr(log, "was written over by another process"), "%s", log);
        free(log);
    }
    mg_segment_detach(&seg);
    stop_all(&s, pids, n);
}

#define GARBAGE_TEST(sec)                                                                          \
    Test(segfault, garbage_over_##sec##_leaves_the_port_served_or_free)                            \
    {                                                                                              \
        garbage_over(#sec);                                                                        \
    }

Test(segfault, garbage_over_the_header_leaves_the_port_served_or_free)
{
    garbage_over(NULL);
}
GARBAGE_TEST(config)
GARBAGE_TEST(counters)
GARBAGE_TEST(routes)
GARBAGE_TEST(slow)
GARBAGE_TEST(values)
GARBAGE_TEST(diag)
GARBAGE_TEST(cold)
GARBAGE_TEST(cache)
GARBAGE_TEST(cacheentries)
GARBAGE_TEST(cachepages)
GARBAGE_TEST(slots)
GARBAGE_TEST(anon)
GARBAGE_TEST(clients)
GARBAGE_TEST(clientsets)
GARBAGE_TEST(conns)
GARBAGE_TEST(connsets)
GARBAGE_TEST(connholds)
GARBAGE_TEST(upstream)

static void hold_lock(void *arg, struct mg_lock *l, const char *name)
{
    (void)name;
    atomic_store(&l->owner_pid, *(int *)arg);
}

/*
 * The master dies inside a lock (stopped, every lock word set to its pid, then SIGKILL):
 * workers that wait for those locks have their parent-death signal pending behind a loop
 * that does not turn. They must give up and let the port go.
 */
Test(segfault, a_master_dead_inside_the_locks_leaves_no_worker_holding_the_port)
{
    struct mg_test_server s;
    struct mg_segment seg;
    int pids[8];
    unsigned n = start_attached(&s, &seg, pids, 8);

    kill(s.pid, SIGSTOP);
    int master = s.pid;
    mg_segment_for_each_lock(&seg, hold_lock, &master);
    /* Requests that need the locks: the anonymous line, the rate table, the connection
     * table. They stay open, unread. */
    int fds[8];
    for (int i = 0; i < 8; i++) {
        fds[i] = mg_test_connect(s.port);
        static const char req[] =
            "GET /api/packets?limit=1&expand=observations HTTP/1.1\r\nHost: x\r\n\r\n";
        if (fds[i] >= 0)
            mg_test_send(fds[i], req, sizeof req - 1);
    }
    kill(s.pid, SIGKILL);

    enum probe last = PORT_HELD;
    cr_expect(wait_port(s.port, true, &last), "the master is dead and the port is still %s",
              last == PORT_SERVED ? "served" : "held");
    for (int i = 0; i < 8; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    char *log = mg_test_server_log(&s);
    cr_expect(log && strstr(log, "is gone and the"), "no worker said why it gave up:\n%s", log);
    free(log);
    mg_segment_detach(&seg);
    stop_all(&s, pids, n);
}

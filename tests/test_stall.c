/* SPDX-License-Identifier: ISC */
/*
 * Frozen workers (docs/architecture.md, "Frozen workers"): the real binary, real processes,
 * real SIGSTOP. A worker is stopped inside each shared lock in turn (MESHGATE_TEST_HOOKS and
 * "X-Test-Stop-In-Lock: PART" make it raise(SIGSTOP) right after taking that lock) and the
 * group must go on serving within the stall bound, kill and replace the stopped worker, free
 * the lock, and still stop on SIGTERM. A damaged lock word must not hang anyone either.
 * Every wait is for an event, with a generous ceiling; none is a fixed sleep.
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

TestSuite(stall, .timeout = 90);

#define STALL_MS 1500
/* How late past the stall bound an answer may come on a loaded machine: one master tick
 * (250 ms), a respawn, scheduling. */
#define SLACK_MS 1500
#define CEILING_MS 15000

#define REACH_KEY "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static const char *const base_env[] = {
    "MESHGATE_WORKERS=2",          "MESHGATE_WORKER_STALL_MS=1500",
    "MESHGATE_TEST_HOOKS=park",    "MESHGATE_DRAIN_TIMEOUT_MS=1000",
    "MESHGATE_ANON_CONCURRENCY=2", NULL};

static void attach(const struct mg_test_server *s, struct mg_segment *seg, bool read_only)
{
    char err[256];
    cr_assert_eq(mg_segment_attach(seg, s->shm_name, read_only, err, sizeof err), 0, "%s", err);
}

/* Sends a request and leaves the connection open without reading (the worker may freeze). */
static int send_only(int port, const char *target, const char *headers)
{
    int fd = mg_test_connect(port);
    cr_assert_geq(fd, 0);
    char req[1024];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n", target, headers);
    cr_assert(mg_test_send(fd, req, (size_t)n));
    return fd;
}

/* The pid of a stopped worker, waited for up to CEILING_MS; 0 when none stopped. */
static int wait_stopped_worker(struct mg_segment *seg)
{
    int64_t give_up = mg_test_now_ms() + CEILING_MS;
    while (mg_test_now_ms() < give_up) {
        for (unsigned i = 0; i < seg->slot_count; i++) {
            int pid = atomic_load(&seg->slots[i].pid);
            if (pid > 0 && mg_process_state(pid, NULL) == MG_PROCESS_STOPPED)
                return pid;
        }
        mg_test_sleep_ms(5);
    }
    return 0;
}

static int slot_of(struct mg_segment *seg, int pid)
{
    for (unsigned i = 0; i < seg->slot_count; i++)
        if (atomic_load(&seg->slots[i].pid) == pid)
            return (int)i;
    return -1;
}

/* Waits until slot i has a new worker that serves; true when it came within CEILING_MS. */
static bool wait_replaced(struct mg_segment *seg, int slot, int old_pid)
{
    int64_t give_up = mg_test_now_ms() + CEILING_MS;
    while (mg_test_now_ms() < give_up) {
        int pid = atomic_load(&seg->slots[slot].pid);
        uint32_t st = atomic_load(&seg->slots[slot].state);
        if (pid > 0 && pid != old_pid && st != MG_SLOT_STARTING && st != MG_SLOT_DEAD)
            return true;
        mg_test_sleep_ms(5);
    }
    return false;
}

/* True when no lock of part holds pid, within CEILING_MS. */
static bool wait_lock_free_of(struct mg_segment *seg, const char *part, int pid)
{
    const void *lo, *hi;
    cr_assert(mg_segment_lock_range(seg, part, &lo, &hi));
    int64_t give_up = mg_test_now_ms() + CEILING_MS;
    while (mg_test_now_ms() < give_up) {
        bool held = false;
        for (const struct mg_lock *l = lo; (const void *)l < hi && !held;
             l = (const struct mg_lock *)((const char *)l + (strcmp(part, "clients") == 0
                                                                 ? sizeof(struct mg_client_set)
                                                                 : sizeof(struct mg_lock))))
            held = atomic_load(&((struct mg_lock *)l)->owner_pid) == pid;
        if (!held)
            return true;
        mg_test_sleep_ms(5);
    }
    return false;
}

/* A request answered (any status) within ms; its status in *status. */
static bool answered_within(int port, const char *target, int ms, int *status, int64_t *took_ms)
{
    int64_t start = mg_test_now_ms();
    int fd = mg_test_connect(port);
    if (fd < 0)
        return false;
    char req[512];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                     target);
    struct mg_test_response r;
    bool ok = mg_test_send(fd, req, (size_t)n) && mg_test_read_response(fd, &r, false, ms);
    close(fd);
    *took_ms = mg_test_now_ms() - start;
    if (ok) {
        *status = r.status;
        mg_test_response_free(&r);
    }
    return ok;
}

/*
 * The whole story for one lock: a worker freezes inside it; a request that needs the lock
 * and /api/healthz are answered within the stall bound; the frozen worker is killed with
 * SIGKILL, logged and replaced; the lock is free; SIGTERM stops the master.
 */
static void stopped_inside(const char *part, const char *trigger, const char *needs_lock)
{
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, base_env), "the server did not start");
    struct mg_segment seg;
    attach(&s, &seg, true);

    char headers[128];
    snprintf(headers, sizeof headers, "X-Test-Stop-In-Lock: %s\r\n", part);
    int held_fd = send_only(s.port, trigger, headers);
    int frozen = wait_stopped_worker(&seg);
    cr_assert_gt(frozen, 0, "no worker stopped inside the %s lock", part);
    int slot = slot_of(&seg, frozen);
    cr_assert_geq(slot, 0);

    /* The group keeps serving: a request that needs the same lock, and healthz. */
    int status = 0;
    int64_t took;
    cr_assert(answered_within(s.port, needs_lock, CEILING_MS, &status, &took),
              "%s (needs the %s lock) was not answered", needs_lock, part);
    cr_expect_lt(took, STALL_MS + SLACK_MS, "%s took %lld ms with a worker frozen in the %s lock",
                 needs_lock, (long long)took, part);
    cr_assert(answered_within(s.port, "/api/healthz", CEILING_MS, &status, &took));
    cr_expect_eq(status, 200);
    cr_expect_lt(took, STALL_MS + SLACK_MS, "healthz took %lld ms", (long long)took);

    /* The frozen worker was killed with SIGKILL and replaced; the lock is free of it. */
    cr_assert(wait_replaced(&seg, slot, frozen), "worker %d was not replaced", frozen);
    int last_exit = atomic_load(&seg.slots[slot].last_exit);
    cr_expect(WIFSIGNALED(last_exit) && WTERMSIG(last_exit) == SIGKILL,
              "the frozen worker ended with wait status %d, not SIGKILL", last_exit);
    cr_expect(wait_lock_free_of(&seg, part, frozen), "the %s lock still names pid %d", part,
              frozen);
    close(held_fd);

    char *log = mg_test_server_log(&s);
    char expected[64];
    snprintf(expected, sizeof expected, "(pid %d) with SIGKILL", frozen);
    cr_expect(log && strstr(log, expected), "no kill logged for %d:\n%s", frozen, log);
    cr_expect(log && strstr(log, "stopped"), "the log does not say it was stopped:\n%s", log);
    free(log);

    mg_segment_detach(&seg);
    int64_t t0 = mg_test_now_ms();
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0, "SIGTERM did not stop the master cleanly");
    cr_expect_lt(mg_test_now_ms() - t0, 5000);
}

Test(stall, worker_stopped_inside_the_anonymous_line_lock_costs_at_most_the_stall_bound)
{
    stopped_inside("anon", "/api/packets?expand=observations&limit=1",
                   "/api/packets?expand=observations&limit=1");
}

Test(stall, worker_stopped_inside_a_rate_table_lock_costs_at_most_the_stall_bound)
{
    stopped_inside("clients", "/api/packets?expand=observations&limit=1",
                   "/api/packets?expand=observations&limit=1");
}

Test(stall, worker_stopped_inside_the_cold_gate_lock_costs_at_most_the_stall_bound)
{
    stopped_inside("cold", "/api/nodes/" REACH_KEY "/reach",
                   "/api/nodes/" REACH_KEY "/reach?days=3");
}

Test(stall, worker_stopped_inside_the_result_cache_lock_costs_at_most_the_stall_bound)
{
    stopped_inside("cache", "/api/nodes/" REACH_KEY "/reach",
                   "/api/nodes/" REACH_KEY "/reach?days=3");
}

Test(stall, worker_stopped_inside_the_diagnostic_gate_lock_costs_at_most_the_stall_bound)
{
    stopped_inside("diag", "/api/perf?mem=1", "/api/perf?mem=1");
}

Test(stall, a_stopped_worker_is_killed_once_its_heartbeat_is_older_than_the_bound)
{
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, base_env), "the server did not start");
    struct mg_segment seg;
    attach(&s, &seg, true);
    int victim = atomic_load(&seg.slots[0].pid);
    cr_assert_gt(victim, 0);
    int64_t stopped_at = mg_test_now_ms();
    kill(victim, SIGSTOP);
    cr_assert(wait_replaced(&seg, 0, victim), "the stopped worker was not replaced");
    int64_t took = mg_test_now_ms() - stopped_at;
    /* An idle worker beats once a second: its heartbeat was up to that old when stopped. */
    cr_expect_geq(took, STALL_MS - 1100, "killed after %lld ms, before the bound", (long long)took);
    cr_expect_lt(took, STALL_MS + SLACK_MS, "killed after %lld ms", (long long)took);
    int last_exit = atomic_load(&seg.slots[0].last_exit);
    cr_expect(WIFSIGNALED(last_exit) && WTERMSIG(last_exit) == SIGKILL, "wait status %d",
              last_exit);
    char *log = mg_test_server_log(&s);
    cr_expect(log && strstr(log, "no heartbeat for") && strstr(log, "MESHGATE_WORKER_STALL_MS"),
              "%s", log);
    free(log);
    mg_segment_detach(&seg);
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
}

Test(stall, the_masters_reclaim_never_waits_for_a_worker_stopped_in_a_lock)
{
    /* Worker A freezes in the anonymous line's lock; worker B is killed, so the master's
     * reclaim needs that lock at once (before any heartbeat goes stale). */
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, base_env), "the server did not start");
    struct mg_segment seg;
    attach(&s, &seg, true);
    int held_fd = send_only(s.port, "/api/packets?expand=observations&limit=1",
                            "X-Test-Stop-In-Lock: anon\r\n");
    int frozen = wait_stopped_worker(&seg);
    cr_assert_gt(frozen, 0);
    int frozen_slot = slot_of(&seg, frozen);
    int other_slot = 1 - frozen_slot;
    int other = atomic_load(&seg.slots[other_slot].pid);
    kill(other, SIGKILL);

    cr_assert(wait_replaced(&seg, other_slot, other), "the killed worker was not replaced");
    cr_assert(wait_replaced(&seg, frozen_slot, frozen), "the frozen worker was not replaced");
    int status;
    int64_t took;
    cr_assert(answered_within(s.port, "/api/healthz", CEILING_MS, &status, &took));
    cr_expect_eq(status, 200);
    char *log = mg_test_server_log(&s);
    cr_expect(log && strstr(log, "which the master needs, and is stopped"), "%s", log);
    free(log);
    close(held_fd);
    mg_segment_detach(&seg);
    int64_t t0 = mg_test_now_ms();
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
    cr_expect_lt(mg_test_now_ms() - t0, 5000);
}

/* A pid that certainly does not run: a child of ours, reaped. */
static int dead_pid(void)
{
    pid_t pid = fork();
    if (pid == 0)
        _exit(0);
    waitpid(pid, NULL, 0);
    return pid;
}

Test(stall, damaged_lock_words_are_forced_free_and_sigterm_still_stops_the_master)
{
    struct mg_test_server s;
    cr_assert(mg_test_server_start(&s, NULL, base_env), "the server did not start");
    struct mg_segment seg;
    attach(&s, &seg, false);
    /* A pid that does not run in the anonymous line's lock, pid 1 (which runs, and is no
     * worker) in the cold gate's; then a worker dies, so the master's reclaim needs both. */
    int gone = dead_pid();
    atomic_store(&seg.anon->lock.owner_pid, gone);
    atomic_store(&seg.cold->lock.owner_pid, 1);
    int victim = atomic_load(&seg.slots[0].pid);
    kill(victim, SIGKILL);
    cr_assert(wait_replaced(&seg, 0, victim), "the killed worker was not replaced");

    int status;
    int64_t took;
    cr_assert(answered_within(s.port, "/api/packets?expand=observations&limit=1", CEILING_MS,
                              &status, &took),
              "an anonymous heavy request (the anonymous line's lock) was not answered");
    cr_expect_eq(status, 200);
    cr_expect_lt(took, STALL_MS + SLACK_MS, "took %lld ms", (long long)took);
    cr_expect_neq(atomic_load(&seg.anon->lock.owner_pid), gone);
    cr_expect_neq(atomic_load(&seg.cold->lock.owner_pid), 1);
    char *log = mg_test_server_log(&s);
    cr_expect(log && strstr(log, "forced the anonymous line lock free"), "%s", log);
    cr_expect(log && strstr(log, "forced the cold-scan gate lock free from pid 1"), "%s", log);
    free(log);

    /* Damaged again just before the stop: SIGTERM must still end the master. */
    atomic_store(&seg.anon->lock.owner_pid, gone);
    mg_segment_detach(&seg);
    int64_t t0 = mg_test_now_ms();
    cr_expect_eq(mg_test_server_stop(&s, 10000), 0);
    cr_expect_lt(mg_test_now_ms() - t0, 5000);
}

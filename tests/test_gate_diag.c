/* SPDX-License-Identifier: ISC */
/*
 * The diagnostic gate as a module: time is a parameter, so every boundary is exact and
 * nothing sleeps. The whole-server behaviour (real workers, kill -9) is in test_perf_mem.c.
 */
#include "clock.h"
#include "gate_diag.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(gate_diag, .timeout = 20);

#define S MG_NS_PER_SEC
#define T0 (1000 * S) /* any monotonic time; the gate only compares */

static struct mg_diag_gate *new_gate(int64_t cooldown_ns, bool enabled)
{
    /* Shared memory, as in the server, so forked children see the same gate. */
    struct mg_diag_gate *g =
        mmap(NULL, sizeof *g, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(g, MAP_FAILED);
    mg_diag_gate_init(g, cooldown_ns, enabled);
    return g;
}

Test(gate_diag, second_walk_while_one_runs_is_refused_with_the_full_cooldown)
{
    struct mg_diag_gate *g = new_gate(5 * S, true);
    uint64_t token;
    int retry = 0;
    cr_assert_eq(mg_diag_gate_try(g, 100, 0, T0, &token, &retry), MG_DIAG_ADMITTED);
    cr_assert_eq(mg_diag_gate_try(g, 101, 1, T0 + 3 * S, &token, &retry), MG_DIAG_BUSY);
    cr_expect_eq(retry, 5);
    cr_expect_eq(atomic_load(&g->refused_busy), 1);
}

Test(gate_diag, cooldown_counts_from_completion_not_from_start)
{
    struct mg_diag_gate *g = new_gate(5 * S, true);
    uint64_t token, other;
    int retry = 0;
    cr_assert_eq(mg_diag_gate_try(g, 100, 0, T0, &token, &retry), MG_DIAG_ADMITTED);
    /* A slow walk: 10 s. Had the cooldown started with the walk, T0+10s would be free. */
    cr_assert(mg_diag_gate_release(g, 100, token, T0 + 10 * S, 10 * S));
    cr_expect_eq(mg_diag_gate_try(g, 101, 0, T0 + 10 * S, &other, &retry), MG_DIAG_COOLING);
    cr_expect_eq(retry, 5, "an immediate repeat is refused with the full cooldown");
    cr_expect_eq(g->last_walk_ns, 10 * S);
}

Test(gate_diag, retry_after_rounds_up_to_whole_seconds_and_the_boundary_admits)
{
    struct mg_diag_gate *g = new_gate(5 * S, true);
    uint64_t token, other;
    int retry = 0;
    cr_assert_eq(mg_diag_gate_try(g, 100, 0, T0, &token, &retry), MG_DIAG_ADMITTED);
    cr_assert(mg_diag_gate_release(g, 100, token, T0, 0));
    int64_t end = T0 + 5 * S;
    cr_assert_eq(mg_diag_gate_try(g, 101, 0, end - 3 * S / 2, &other, &retry), MG_DIAG_COOLING);
    cr_expect_eq(retry, 2, "1.5 s left");
    cr_assert_eq(mg_diag_gate_try(g, 101, 0, end - 1, &other, &retry), MG_DIAG_COOLING);
    cr_expect_eq(retry, 1, "1 ns left");
    cr_assert_eq(mg_diag_gate_try(g, 101, 0, end - S, &other, &retry), MG_DIAG_COOLING);
    cr_expect_eq(retry, 1, "exactly 1 s left");
    cr_assert_eq(mg_diag_gate_try(g, 101, 0, end - S - 1, &other, &retry), MG_DIAG_COOLING);
    cr_expect_eq(retry, 2, "1 s and 1 ns left");
    cr_expect_eq(mg_diag_gate_try(g, 101, 0, end, &other, &retry), MG_DIAG_ADMITTED,
                 "at the boundary the walk is admitted");
    cr_expect_eq(atomic_load(&g->refused_cooling), 4);
}

Test(gate_diag, a_stale_release_never_frees_a_later_walk)
{
    struct mg_diag_gate *g = new_gate(0, true);
    uint64_t first, second, third;
    int retry;
    cr_assert_eq(mg_diag_gate_try(g, 100, 0, T0, &first, &retry), MG_DIAG_ADMITTED);
    cr_assert(mg_diag_gate_release(g, 100, first, T0 + 1, 0));
    cr_assert_eq(mg_diag_gate_try(g, 101, 1, T0 + 2, &second, &retry), MG_DIAG_ADMITTED);
    cr_expect_not(mg_diag_gate_release(g, 100, first, T0 + 3, 0), "released twice");
    cr_expect_eq(mg_diag_gate_try(g, 102, 2, T0 + 4, &third, &retry), MG_DIAG_BUSY,
                 "the second walk's permit was freed by the first walk's token");
    cr_expect_eq(g->holder_pid, 101);
    cr_expect_eq(retry, 1, "a zero cooldown still says 1 s");
}

Test(gate_diag, a_dead_holder_is_reclaimed_and_the_cooldown_starts_then)
{
    struct mg_diag_gate *g = new_gate(5 * S, true);
    uint64_t token, other;
    int retry;
    cr_assert_eq(mg_diag_gate_try(g, 4242, 3, T0, &token, &retry), MG_DIAG_ADMITTED);
    cr_expect_not(mg_diag_gate_reclaim(g, 999, T0 + S), "another pid's death frees nothing");
    cr_assert(mg_diag_gate_reclaim(g, 4242, T0 + 2 * S));
    cr_expect_eq(g->holder_pid, 0);
    cr_expect_eq(atomic_load(&g->reclaimed), 1);
    cr_expect_eq(atomic_load(&g->running), 0);
    cr_expect_eq(mg_diag_gate_try(g, 100, 0, T0 + 6 * S, &other, &retry), MG_DIAG_COOLING);
    cr_expect_eq(retry, 1);
    cr_expect_eq(mg_diag_gate_try(g, 100, 0, T0 + 7 * S, &other, &retry), MG_DIAG_ADMITTED);
    cr_expect_not(mg_diag_gate_release(g, 4242, token, T0 + 8 * S, 0),
                  "the dead walker's token frees nothing");
}

Test(gate_diag, a_lock_held_by_a_dead_worker_is_freed_by_reclaim)
{
    struct mg_diag_gate *g = new_gate(S, true);
    atomic_store(&g->lock.owner_pid, 4242); /* died inside the critical section */
    cr_assert(mg_diag_gate_reclaim(g, 4242, T0) == false);
    cr_expect_eq(atomic_load(&g->lock.owner_pid), 0);
    uint64_t token;
    int retry;
    cr_expect_eq(mg_diag_gate_try(g, 100, 0, T0, &token, &retry), MG_DIAG_ADMITTED);
}

Test(gate_diag, disabled_gate_admits_every_walk)
{
    struct mg_diag_gate *g = new_gate(5 * S, false);
    uint64_t a, b;
    int retry;
    cr_expect_eq(mg_diag_gate_try(g, 100, 0, T0, &a, &retry), MG_DIAG_ADMITTED);
    cr_expect_eq(mg_diag_gate_try(g, 101, 1, T0, &b, &retry), MG_DIAG_ADMITTED);
    cr_expect_eq(atomic_load(&g->peak), 2);
    cr_expect(mg_diag_gate_release(g, 100, a, T0, 0));
}

Test(gate_diag, sixteen_processes_at_once_admit_exactly_one)
{
    struct mg_diag_gate *g = new_gate(5 * S, true);
    _Atomic uint32_t *go = (_Atomic uint32_t *)&g->reserved; /* a spare word as a start line */
    pid_t pids[16];
    for (int i = 0; i < 16; i++) {
        pids[i] = fork();
        cr_assert_geq(pids[i], 0);
        if (pids[i] == 0) {
            alarm(10);
            while (!atomic_load(go))
                ;
            uint64_t token;
            int retry;
            _exit(mg_diag_gate_try(g, getpid(), (unsigned)i, mg_monotonic_ns(), &token, &retry) ==
                          MG_DIAG_ADMITTED
                      ? 0
                      : 1);
        }
    }
    atomic_store(go, 1);
    int admitted = 0;
    for (int i = 0; i < 16; i++) {
        int status;
        waitpid(pids[i], &status, 0);
        cr_assert(WIFEXITED(status));
        admitted += WEXITSTATUS(status) == 0;
    }
    cr_expect_eq(admitted, 1);
    cr_expect_eq(atomic_load(&g->peak), 1);
    cr_expect_eq(atomic_load(&g->admitted), 1);
    cr_expect_eq(atomic_load(&g->refused_busy), 15);
}

Test(gate_diag, retry_after_seconds_is_at_least_one_and_rounds_up)
{
    cr_expect_eq(mg_retry_after_seconds(-5), 1);
    cr_expect_eq(mg_retry_after_seconds(0), 1);
    cr_expect_eq(mg_retry_after_seconds(1), 1);
    cr_expect_eq(mg_retry_after_seconds(S), 1);
    cr_expect_eq(mg_retry_after_seconds(S + 1), 2);
    cr_expect_eq(mg_retry_after_seconds(3 * S / 2), 2);
    cr_expect_eq(mg_retry_after_seconds(5 * S), 5);
}

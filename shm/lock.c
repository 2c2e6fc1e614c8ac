/* SPDX-License-Identifier: ISC */
#include "lock.h"

#include "clock.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static mg_lock_watch_fn watch_fn;
static void *watch_arg;
static _Atomic uint64_t wake_calls;
static _Atomic uint64_t futex_waits;

uint64_t mg_lock_wake_calls(void)
{
    return atomic_load_explicit(&wake_calls, memory_order_relaxed);
}

static long futex(void *word, int op, uint32_t val, const struct timespec *ts, uint32_t bitset)
{
    return syscall(SYS_futex, word, op, val, ts, NULL, bitset);
}

uint64_t mg_futex_wait_calls(void)
{
    return atomic_load_explicit(&futex_waits, memory_order_relaxed);
}

void mg_futex_wait(_Atomic uint32_t *word, uint32_t expected, int64_t deadline_ns)
{
    if (mg_monotonic_ns() >= deadline_ns)
        return;
    atomic_fetch_add_explicit(&futex_waits, 1, memory_order_relaxed);
    /* FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline (no FUTEX_CLOCK_REALTIME),
     * so a change of the wall clock never stretches a wait (invariant 3). */
    struct timespec ts = {deadline_ns / MG_NS_PER_SEC, deadline_ns % MG_NS_PER_SEC};
    futex(word, FUTEX_WAIT_BITSET, expected, &ts, FUTEX_BITSET_MATCH_ANY);
}

void mg_futex_wake_all(_Atomic uint32_t *word)
{
    futex(word, FUTEX_WAKE, INT_MAX, NULL, 0);
}

void mg_lock_set_watch(mg_lock_watch_fn fn, void *arg)
{
    watch_arg = arg;
    watch_fn = fn;
}

/* X-Test-Stop-In-Lock, in the test build only (workers/test_hooks.h): the production build
 * has no hook here. */
#if MESHGATE_HOOKS
static _Thread_local const void *test_stop_lo, *test_stop_hi;

void mg_lock_test_stop_inside(const void *lo, const void *hi)
{
    test_stop_lo = lo;
    test_stop_hi = hi;
}

static void test_stop_check(const struct mg_lock *l)
{
    if (test_stop_lo && (const void *)l >= test_stop_lo && (const void *)l < test_stop_hi) {
        test_stop_lo = test_stop_hi = NULL;
        raise(SIGSTOP);
    }
}
#else
#define test_stop_check(l) ((void)0)
#endif

void mg_lock_acquire(struct mg_lock *l, int pid)
{
    int64_t next_check = 0, holder_since = 0;
    int32_t holder = 0;
    bool watched = false;
    for (unsigned spins = 0;; spins++) {
        int32_t expected = 0;
        if (atomic_compare_exchange_weak_explicit(&l->owner_pid, &expected, pid,
                                                  memory_order_acquire, memory_order_relaxed)) {
            if (watched && watch_fn)
                watch_fn(watch_arg, l, MG_LOCK_ACQUIRED, holder, MG_PROCESS_GONE,
                         mg_monotonic_ns() - holder_since);
            test_stop_check(l);
            return;
        }
        if (spins < 64) {
            sched_yield();
            continue;
        }
        /* A wait this long is no longer contention: look at the holder, and tell the watch.
         * Never on the fast path: /proc costs microseconds. */
        int64_t now = mg_monotonic_ns();
        if (expected != holder) {
            holder = expected;
            holder_since = now;
            if (!next_check)
                next_check = now + MG_LOCK_CHECK_MS * MG_NS_PER_MS;
        }
        if (now >= next_check && watch_fn) {
            next_check = now + MG_LOCK_CHECK_MS * MG_NS_PER_MS;
            watched = true;
            watch_fn(watch_arg, l, MG_LOCK_WAITING, holder, mg_process_state(holder, NULL),
                     now - holder_since);
        }
        /* Sleep while the same owner holds it; a short deadline bounds each sleep even if no
         * one wakes us (an owner that died is freed by the master's reclaim). Counted, so
         * that the unlock knows to wake us (see the header). */
        atomic_fetch_add(&l->waiters, 1);
        mg_futex_wait((_Atomic uint32_t *)&l->owner_pid, (uint32_t)expected, now + MG_NS_PER_MS);
        atomic_fetch_sub(&l->waiters, 1);
    }
}

void mg_lock_release(struct mg_lock *l, int pid)
{
    int32_t expected = pid;
    if (atomic_compare_exchange_strong(&l->owner_pid, &expected, 0) &&
        atomic_load(&l->waiters) > 0) {
        atomic_fetch_add_explicit(&wake_calls, 1, memory_order_relaxed);
        mg_futex_wake_all((_Atomic uint32_t *)&l->owner_pid);
    }
}

bool mg_lock_reclaim(struct mg_lock *l, int dead_pid)
{
    int32_t expected = dead_pid;
    if (dead_pid == 0 || !atomic_compare_exchange_strong(&l->owner_pid, &expected, 0))
        return false;
    mg_futex_wake_all((_Atomic uint32_t *)&l->owner_pid);
    return true;
}

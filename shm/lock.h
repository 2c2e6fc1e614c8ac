/* SPDX-License-Identifier: ISC */
/*
 * lock: a short mutual-exclusion lock in shared memory that knows its owner, as nginx's
 * ngx_shmtx does: the lock word holds the owner's pid, not 1. That is what makes a crash
 * recoverable (PHP-FPM's scoreboard lock stores 1 and freezes the pool when its holder dies):
 * the master, after reaping a dead worker, frees a lock whose word still holds that pid.
 *
 * Critical sections under it are a few dozen instructions over fixed-size records: no copy
 * of a body, no system call, never a block. So waiters spin briefly and then sleep on the
 * word with a futex (process-shared: no FUTEX_PRIVATE_FLAG) for at most a millisecond at a
 * time. A sleeper counts itself in `waiters` first, as nginx's ngx_shmtx counts its `wait`:
 * an unlock makes the wake-up system call only when someone sleeps, so the uncontended
 * lock and unlock are one compare-and-swap each. Both sides are sequentially consistent:
 * a sleeper adds itself before the kernel compares the word, an unlocker frees the word
 * before it reads the count, so one of the two always sees the other (and a sleep is
 * bounded by a millisecond anyway). A sleeper killed asleep leaves the count one too high:
 * unlocks then make a needless wake-up call, never a missed one.
 *
 * A holder can still freeze inside: stopped (SIGSTOP, a debugger), or stuck in the kernel
 * (swap, a page fault on a dead disk). Then every process that needs the lock waits. So a
 * wait never goes unwatched: after MG_LOCK_CHECK_MS of waiting, and every MG_LOCK_CHECK_MS
 * after that, the waiter asks /proc what its holder is doing and hands that to the process's
 * watch (mg_lock_set_watch). A worker's watch keeps its heartbeat going, logs once and
 * reports the holder to the master in its scoreboard slot; the master's watch, in its own
 * reclaim, kills a holder that cannot run and forces the lock (mg_lock_reclaim). The master
 * also kills workers whose heartbeat stops. So a wait lasts at most until the master acts,
 * which is bounded by MESHGATE_WORKER_STALL_MS (docs/architecture.md, "Frozen workers").
 *
 * Forcing is safe only when the holder can never touch the records again: it is gone (no
 * such pid, or a zombie), or it was sent SIGKILL (a stopped process dies without running
 * another instruction), or the pid was never one of the group's (a damaged word).
 */
#ifndef MESHGATE_LOCK_H
#define MESHGATE_LOCK_H

#include "process.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define MG_LOCK_CHECK_MS 10

struct mg_lock {
    _Atomic int32_t owner_pid; /* 0: free */
    _Atomic uint32_t waiters;  /* processes' threads asleep on owner_pid right now */
};

void mg_lock_acquire(struct mg_lock *l, int pid);
void mg_lock_release(struct mg_lock *l, int pid);
/*
 * Frees the lock if dead_pid holds it, with a compare-and-swap, so a lock taken since by
 * someone else stays theirs (nginx's ngx_shmtx_force_unlock); true when it did. For the
 * master after reaping dead_pid, and for a holder that can never run again (see above).
 */
bool mg_lock_reclaim(struct mg_lock *l, int dead_pid);

/* What a watched wait reports (see the header comment). */
enum mg_lock_event {
    MG_LOCK_WAITING,  /* still waiting for holder */
    MG_LOCK_ACQUIRED, /* got it, after at least one MG_LOCK_WAITING */
};
/*
 * Called by a waiter every MG_LOCK_CHECK_MS: holder is the pid in the word, state what /proc
 * says about it, held_ns how long this waiter has seen that pid keep the lock. May be called
 * from any thread of the process, concurrently. The wait goes on whatever it does.
 */
typedef void (*mg_lock_watch_fn)(void *arg, struct mg_lock *l, enum mg_lock_event event, int holder,
                                 enum mg_process_state state, int64_t held_ns);
/* Installs the process's watch (NULL: waits are only bounded by others' actions). */
void mg_lock_set_watch(mg_lock_watch_fn fn, void *arg);

/*
 * The test build only (workers/test_hooks.h; the production build does not
 * define it): the next lock this thread acquires whose address lies in [lo, hi) stops the
 * whole process (raise(SIGSTOP)) right after it is taken, inside the critical section.
 */
void mg_lock_test_stop_inside(const void *lo, const void *hi);

/* Wake-up system calls made by this process's unlocks so far (for tests). */
uint64_t mg_lock_wake_calls(void);
/* Sleeps (mg_futex_wait calls that reached the kernel) in this process so far: a waiter's
 * wake-ups, for tests that show it does not poll. */
uint64_t mg_futex_wait_calls(void);

/* Waits on a 32-bit shared word while it equals expected, until deadline (CLOCK_MONOTONIC
 * ns) or a wake; returns at once when the deadline has passed. */
void mg_futex_wait(_Atomic uint32_t *word, uint32_t expected, int64_t deadline_ns);
/* Wakes every process waiting on word. */
void mg_futex_wake_all(_Atomic uint32_t *word);

#endif

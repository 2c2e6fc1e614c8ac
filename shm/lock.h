/*
 * lock: a short mutual-exclusion lock in shared memory that knows its owner, as nginx's
 * ngx_shmtx does: the lock word holds the owner's pid, not 1. That is what makes a crash
 * recoverable (PHP-FPM's scoreboard lock stores 1 and freezes the pool when its holder dies):
 * the master, after reaping a dead worker, frees a lock whose word still holds that pid.
 *
 * Critical sections under it are a few dozen instructions over fixed-size records and never
 * block, so waiters spin briefly and then sleep on the word with a futex (process-shared:
 * no FUTEX_PRIVATE_FLAG) for at most a millisecond at a time.
 */
#ifndef MESHGATE_LOCK_H
#define MESHGATE_LOCK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct mg_lock {
    _Atomic int32_t owner_pid; /* 0: free */
    uint32_t reserved;
};

void mg_lock_acquire(struct mg_lock *l, int pid);
void mg_lock_release(struct mg_lock *l, int pid);
/* Master, after reaping dead_pid: frees the lock if dead_pid held it; true when it did. */
bool mg_lock_reclaim(struct mg_lock *l, int dead_pid);

/* Waits on a 32-bit shared word while it equals expected, until deadline (CLOCK_MONOTONIC
 * ns) or a wake; returns at once when the deadline has passed. */
void mg_futex_wait(_Atomic uint32_t *word, uint32_t expected, int64_t deadline_ns);
/* Wakes every process waiting on word. */
void mg_futex_wake_all(_Atomic uint32_t *word);

#endif

/* SPDX-License-Identifier: ISC */
/*
 * shared_value: a small value that the whole process group computes at most once per
 * interval (the database's row counts for /api/healthz, the /api/stats body).
 *
 * One worker at a time holds the refresh lease (its pid in the record); the others keep
 * serving the previous value meanwhile, so a refresh never makes a request wait for another
 * worker. Only when there is no value yet does a request wait, for a bounded time, and then
 * computes the value itself if the lease holder has not delivered (a holder that died is
 * noticed by its pid, and the master clears leases of every worker it reaps).
 *
 * The value is at most MG_SHARED_VALUE_MAX bytes, copied in and out under a sequence number
 * (odd while written), so readers never lock.
 *
 * A request parked on a worker's loop until the first value comes marks its slot in waiters
 * (bit slot % 32; two slots sharing a bit only wake one needlessly) and looks once more; the
 * lease's end (a value published, a computation that failed, the master's reclaim of a dead
 * holder) wakes the marked slots through their eventfds (shm/wake.h), so no waiter polls. A
 * helper thread, which may block, sleeps on the lease word itself (a futex), which the same
 * lease's end wakes.
 */
#ifndef MESHGATE_SHARED_VALUE_H
#define MESHGATE_SHARED_VALUE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MG_SHARED_VALUE_MAX 4096

struct mg_shared_value {
    _Atomic uint32_t seq;
    _Atomic int32_t lease_pid; /* 0: nobody refreshes */
    _Atomic int64_t lease_monotonic_ns;
    _Atomic int64_t computed_monotonic_ns; /* 0: never computed */
    _Atomic uint64_t refreshes;
    uint32_t len;
    _Atomic uint32_t waiters; /* slots (bit slot % 32) with a request parked for a value */
    char data[MG_SHARED_VALUE_MAX];
};

/*
 * Copies the value into out (cap bytes) when one exists; returns its length, or -1 when
 * there is none. *age_ns (may be NULL) tells how old it is.
 */
long mg_shared_value_read(struct mg_shared_value *v, void *out, size_t cap, int64_t now_ns,
                          int64_t *age_ns);

/* Takes the refresh lease when it is free or its holder is dead; true when taken. */
bool mg_shared_value_try_lease(struct mg_shared_value *v, int pid, int64_t now_ns);

/* Stores a freshly computed value and gives the lease back (len <= MG_SHARED_VALUE_MAX),
 * which wakes the waiters. */
void mg_shared_value_publish(struct mg_shared_value *v, int pid, const void *data, size_t len,
                             int64_t now_ns);

/* Marks slot as waiting for the lease's end (the waiter looks again after marking). */
void mg_shared_value_wait_mark(struct mg_shared_value *v, unsigned slot);

/* Blocks while holder (as read before the caller's last look) holds the lease, until the
 * lease ends (publish, release, reclaim: each wakes the sleepers) or deadline_ns
 * (CLOCK_MONOTONIC); returns at once when the lease already changed hands. */
void mg_shared_value_wait_lease(struct mg_shared_value *v, int32_t holder, int64_t deadline_ns);

/* Gives the lease back without a value (the computation failed); wakes the waiters. */
void mg_shared_value_release(struct mg_shared_value *v, int pid);

/* Master, after reaping pid: frees a lease that pid held (and wakes the waiters). Returns
 * true when it did. */
bool mg_shared_value_reclaim(struct mg_shared_value *v, int pid);

#endif

/* SPDX-License-Identifier: ISC */
#include "shared_value.h"

#include "config_values.h"
#include "lock.h"
#include "process.h"
#include "wake.h"

#include <string.h>

long mg_shared_value_read(struct mg_shared_value *v, void *out, size_t cap, int64_t now_ns,
                          int64_t *age_ns)
{
    for (int tries = 0; tries < 64; tries++) {
        uint32_t before = atomic_load_explicit(&v->seq, memory_order_acquire);
        if (before & 1)
            continue;
        int64_t computed = atomic_load_explicit(&v->computed_monotonic_ns, memory_order_relaxed);
        if (computed == 0)
            return -1;
        uint32_t len = v->len;
        if (len > MG_SHARED_VALUE_MAX || len > cap)
            return -1;
        memcpy(out, v->data, len);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&v->seq, memory_order_relaxed) != before)
            continue;
        if (age_ns)
            *age_ns = now_ns - computed;
        return (long)len;
    }
    return -1;
}

bool mg_shared_value_try_lease(struct mg_shared_value *v, int pid, int64_t now_ns)
{
    int32_t holder = atomic_load(&v->lease_pid);
    bool takeover = holder != 0 && holder != pid;
    if (takeover && mg_process_alive(holder, 0))
        return false;
    if (!atomic_compare_exchange_strong(&v->lease_pid, &holder, pid))
        return false;
    /* A holder that died inside publish left seq odd, and the master's reclaim (by its pid)
     * no longer matches the lease: only the lease holder writes, so discard the torn value. */
    uint32_t seq = atomic_load(&v->seq);
    if (takeover && (seq & 1)) {
        atomic_store(&v->computed_monotonic_ns, 0);
        atomic_store(&v->seq, seq + 1);
    }
    atomic_store(&v->lease_monotonic_ns, now_ns);
    return true;
}

void mg_shared_value_publish(struct mg_shared_value *v, int pid, const void *data, size_t len,
                             int64_t now_ns)
{
    if (len > MG_SHARED_VALUE_MAX)
        len = MG_SHARED_VALUE_MAX;
    /* Writers are serialized by the lease; a writer without it (first value, holder slow)
     * takes the sequence with a compare-and-swap so two writers never interleave. */
    uint32_t seq = atomic_load(&v->seq);
    if ((seq & 1) || !atomic_compare_exchange_strong(&v->seq, &seq, seq + 1)) {
        mg_shared_value_release(v, pid);
        return;
    }
    atomic_thread_fence(memory_order_release);
    memcpy(v->data, data, len);
    v->len = (uint32_t)len;
    atomic_store(&v->computed_monotonic_ns, now_ns);
    atomic_store_explicit(&v->seq, seq + 2, memory_order_release);
    atomic_fetch_add(&v->refreshes, 1);
    mg_shared_value_release(v, pid);
}

void mg_shared_value_wait_mark(struct mg_shared_value *v, unsigned slot)
{
    atomic_fetch_or(&v->waiters, 1u << (slot % 32));
}

/* The lease word as a futex word (the same 32 bits, as the lock's owner word is one). */
static _Atomic uint32_t *lease_word(struct mg_shared_value *v)
{
    return (_Atomic uint32_t *)(void *)&v->lease_pid;
}

void mg_shared_value_wait_lease(struct mg_shared_value *v, int32_t holder, int64_t deadline_ns)
{
    mg_futex_wait(lease_word(v), (uint32_t)holder, deadline_ns);
}

/* After the lease's end: a waiter that marked before this sees its slot woken; one that marks
 * after it finds the value (or the free lease) when it looks again. A thread asleep on the
 * lease word (mg_shared_value_wait_lease) wakes, and finds the word changed if it was about to
 * sleep. */
static void wake_waiters(struct mg_shared_value *v)
{
    mg_futex_wake_all(lease_word(v));
    uint32_t marked = atomic_exchange(&v->waiters, 0);
    for (unsigned slot = 0; marked && slot < MG_WORKERS_MAX; slot++)
        if (marked & (1u << (slot % 32)))
            mg_wake_slot(slot);
}

void mg_shared_value_release(struct mg_shared_value *v, int pid)
{
    int32_t expected = pid;
    atomic_compare_exchange_strong(&v->lease_pid, &expected, 0);
    wake_waiters(v);
}

bool mg_shared_value_reclaim(struct mg_shared_value *v, int pid)
{
    int32_t expected = pid;
    bool freed = atomic_compare_exchange_strong(&v->lease_pid, &expected, 0);
    /* A writer killed inside publish leaves the sequence odd: make it even again. The value
     * may be torn, so it is marked as never computed. */
    uint32_t seq = atomic_load(&v->seq);
    if (freed && (seq & 1)) {
        atomic_store(&v->computed_monotonic_ns, 0);
        atomic_store(&v->seq, seq + 1);
    }
    if (freed)
        wake_waiters(v);
    return freed;
}

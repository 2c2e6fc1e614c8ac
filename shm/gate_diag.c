/* SPDX-License-Identifier: ISC */
#include "gate_diag.h"

#include "clock.h"

#include <string.h>
#include <unistd.h>

void mg_diag_gate_init(struct mg_diag_gate *g, int64_t cooldown_ns, bool enabled)
{
    memset(g, 0, sizeof *g);
    g->cooldown_ns = cooldown_ns;
    g->enabled = enabled;
}

void mg_diag_gate_configure(struct mg_diag_gate *g, int pid, int64_t cooldown_ns, bool enabled)
{
    mg_lock_acquire(&g->lock, pid);
    g->cooldown_ns = cooldown_ns;
    g->enabled = enabled;
    mg_lock_release(&g->lock, pid);
}

void mg_diag_gate_read(const struct mg_diag_gate *g, int pid, bool locked, int64_t now_ns,
                       struct mg_diag_snapshot *out)
{
    /* The lock word is the only thing written here: readers get a const gate. */
    struct mg_lock *lock = (struct mg_lock *)&g->lock;
    if (locked)
        mg_lock_acquire(lock, pid);
    out->enabled = g->enabled != 0;
    out->cooldown_ns = g->cooldown_ns;
    out->holder_pid = g->holder_pid;
    out->holder_slot = g->holder_slot;
    out->holder_since_monotonic_ns = g->holder_since_monotonic_ns;
    int64_t until = g->cooldown_until_monotonic_ns;
    out->last_walk_ns = g->last_walk_ns;
    if (locked)
        mg_lock_release(lock, pid);
    out->cooldown_remaining_ns = out->holder_pid == 0 && until > now_ns ? until - now_ns : 0;
    out->running = atomic_load(&g->running);
    out->peak = atomic_load(&g->peak);
#define READ_COUNTER(field, json, what) out->field = atomic_load(&g->field);
    MG_DIAG_COUNTER_LIST(READ_COUNTER)
#undef READ_COUNTER
}

int mg_retry_after_seconds(int64_t remaining_ns)
{
    if (remaining_ns <= MG_NS_PER_SEC)
        return 1;
    int64_t s = (remaining_ns + MG_NS_PER_SEC - 1) / MG_NS_PER_SEC;
    return s > 86400 ? 86400 : (int)s;
}

static void note_running(struct mg_diag_gate *g)
{
    uint32_t now = atomic_fetch_add(&g->running, 1) + 1;
    uint32_t peak = atomic_load(&g->peak);
    while (now > peak && !atomic_compare_exchange_weak(&g->peak, &peak, now))
        ;
}

enum mg_diag_result mg_diag_gate_try(struct mg_diag_gate *g, int pid, unsigned slot, int64_t now_ns,
                                     uint64_t *token, int *retry_after_s)
{
    enum mg_diag_result result = MG_DIAG_ADMITTED;
    mg_lock_acquire(&g->lock, pid);
    if (g->enabled && g->holder_pid != 0) {
        result = MG_DIAG_BUSY;
        *retry_after_s = mg_retry_after_seconds(g->cooldown_ns);
    } else if (g->enabled && now_ns < g->cooldown_until_monotonic_ns) {
        result = MG_DIAG_COOLING;
        *retry_after_s = mg_retry_after_seconds(g->cooldown_until_monotonic_ns - now_ns);
    } else {
        *token = ++g->next_token;
        if (g->enabled) {
            g->holder_pid = pid;
            g->holder_slot = slot;
            g->holder_token = *token;
            g->holder_since_monotonic_ns = now_ns;
        }
    }
    mg_lock_release(&g->lock, pid);
    if (result == MG_DIAG_ADMITTED) {
        atomic_fetch_add(&g->admitted, 1);
        note_running(g);
    } else {
        atomic_fetch_add(result == MG_DIAG_BUSY ? &g->refused_busy : &g->refused_cooling, 1);
    }
    return result;
}

bool mg_diag_gate_open(struct mg_diag_gate *g, int pid, int64_t now_ns)
{
    mg_lock_acquire(&g->lock, pid);
    bool open = !g->enabled || (g->holder_pid == 0 && now_ns >= g->cooldown_until_monotonic_ns);
    mg_lock_release(&g->lock, pid);
    return open;
}

bool mg_diag_gate_release(struct mg_diag_gate *g, int pid, uint64_t token, int64_t now_ns,
                          int64_t walk_ns)
{
    bool released = false;
    mg_lock_acquire(&g->lock, pid);
    if (!g->enabled) {
        released = token != 0;
    } else if (g->holder_pid != 0 && g->holder_token == token) {
        g->holder_pid = 0;
        g->holder_token = 0;
        g->cooldown_until_monotonic_ns = now_ns + g->cooldown_ns;
        released = true;
    }
    if (released) {
        g->last_walk_ns = walk_ns;
        g->last_completed_realtime_ns = mg_realtime_ns();
    }
    mg_lock_release(&g->lock, pid);
    if (released)
        atomic_fetch_sub(&g->running, 1);
    return released;
}

bool mg_diag_gate_reclaim(struct mg_diag_gate *g, int pid, int64_t now_ns)
{
    /* The dead worker may have died inside the critical section: free the lock first. */
    mg_lock_reclaim(&g->lock, pid);
    int self = getpid();
    bool reclaimed = false;
    mg_lock_acquire(&g->lock, self);
    if (g->holder_pid == pid) {
        /* Invariant 2: the permit comes back, and the cooldown starts now. */
        g->holder_pid = 0;
        g->holder_token = 0;
        g->cooldown_until_monotonic_ns = now_ns + g->cooldown_ns;
        reclaimed = true;
    }
    mg_lock_release(&g->lock, self);
    if (reclaimed) {
        atomic_fetch_add(&g->reclaimed, 1);
        atomic_fetch_sub(&g->running, 1);
    }
    return reclaimed;
}

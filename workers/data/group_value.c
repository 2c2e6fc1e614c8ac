/* SPDX-License-Identifier: ISC */
#include "group_value.h"

#include "clock.h"
#include "shared_value.h"
#include "segment.h"
#include "stats.h"

#include <stdatomic.h>

/* How long a waiting helper sleeps at most between two looks (group_value.h). */
#define GROUP_VALUE_SAFETY_NS (500 * MG_NS_PER_MS)

static long compute_and_publish(struct mg_env *env, struct mg_shared_value *v,
                                mg_group_compute_fn compute, char *out, size_t cap)
{
    long len = compute(env, out, cap);
    if (len < 0) {
        mg_shared_value_release(v, env->pid);
        return -1;
    }
    mg_shared_value_publish(v, env->pid, out, (size_t)len, mg_monotonic_ns());
    return len;
}

/* The value when it is fresh or someone else refreshes it, or computed here with the
 * lease; *none: there is none and another worker computes it (nothing returned). */
static long get_or_lease(struct mg_env *env, enum mg_value_id id, int64_t interval_ns,
                         mg_group_compute_fn compute, char *out, size_t cap, bool *none)
{
    struct mg_shared_value *v = &env->seg->values[id];
    int64_t now = mg_monotonic_ns();
    int64_t age = 0;
    *none = false;
    long len = mg_shared_value_read(v, out, cap, now, &age);
    if (len >= 0 && age < interval_ns) {
        mg_counter_add(env->seg, MG_CTR_GROUP_VALUE_HITS, 1);
        return len;
    }
    if (mg_shared_value_try_lease(v, env->pid, now))
        return compute_and_publish(env, v, compute, out, cap);
    if (len >= 0) {
        mg_counter_add(env->seg, MG_CTR_GROUP_VALUE_STALE_HITS, 1);
        return len; /* stale, but another worker is refreshing it */
    }
    *none = true;
    return -1;
}

long mg_group_value_get(struct mg_env *env, enum mg_value_id id, int64_t interval_ns,
                        mg_group_compute_fn compute, char *out, size_t cap)
{
    bool none;
    long len = get_or_lease(env, id, interval_ns, compute, out, cap, &none);
    if (!none)
        return len;
    /* No value yet and another worker computes it: sleep until its lease ends (the holder
     * read before each look, so an end between the look and the sleep is not missed), for a
     * bounded time. The safety step only finds a holder that died before the master's
     * reclaim (which wakes too): try_lease takes a dead holder's lease. */
    struct mg_shared_value *v = &env->seg->values[id];
    int64_t give_up = mg_monotonic_ns() + MG_GROUP_VALUE_WAIT_NS;
    for (;;) {
        int32_t holder = atomic_load(&v->lease_pid);
        int64_t now = mg_monotonic_ns();
        len = mg_shared_value_read(v, out, cap, now, NULL);
        if (len >= 0)
            return len;
        if (mg_shared_value_try_lease(v, env->pid, now))
            return compute_and_publish(env, v, compute, out, cap);
        if (now >= give_up)
            return compute(env, out, cap);
        int64_t step = now + GROUP_VALUE_SAFETY_NS;
        mg_shared_value_wait_lease(v, holder, step < give_up ? step : give_up);
    }
}

long mg_group_value_get_parked(struct mg_env *env, enum mg_value_id id, int64_t interval_ns,
                               mg_group_compute_fn compute, char *out, size_t cap,
                               int64_t *waiting_since_ns)
{
    bool none;
    long len = get_or_lease(env, id, interval_ns, compute, out, cap, &none);
    if (!none)
        return len;
    /* Woken when the holder's lease ends (shared_value.h): marked, then looked at again, so
     * a value published in between is not missed. */
    mg_shared_value_wait_mark(&env->seg->values[id], env->slot);
    len = get_or_lease(env, id, interval_ns, compute, out, cap, &none);
    if (!none)
        return len;
    int64_t now = mg_monotonic_ns();
    if (*waiting_since_ns == 0)
        *waiting_since_ns = now;
    if (now - *waiting_since_ns < MG_GROUP_VALUE_WAIT_NS)
        return MG_GROUP_VALUE_PENDING;
    return compute(env, out, cap);
}

bool mg_group_value_would_compute(struct mg_env *env, enum mg_value_id id, int64_t interval_ns)
{
    struct mg_shared_value *v = &env->seg->values[id];
    int64_t computed = atomic_load(&v->computed_monotonic_ns);
    if (computed == 0)
        return true;
    if (mg_monotonic_ns() - computed < interval_ns)
        return false;
    int32_t holder = atomic_load(&v->lease_pid);
    return holder == 0 || holder == env->pid || !mg_process_alive(holder, 0);
}

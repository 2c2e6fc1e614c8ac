/* SPDX-License-Identifier: ISC */
/*
 * group_value: a value computed at most once per interval for the whole process group
 * (on top of shm/shared_value). The worker that finds the value stale and takes the lease
 * recomputes it; the others serve the value they find, however stale, meanwhile. Only when
 * there is no value at all does a worker wait (bounded), and past that it computes on its
 * own: a helper thread asleep on the lease word until the holder's lease ends, a request on
 * a loop parked until its slot is woken; neither polls.
 */
#ifndef MESHGATE_GROUP_VALUE_H
#define MESHGATE_GROUP_VALUE_H

#include "clock.h"
#include "env.h"
#include "shared_value.h"

/* Computes the value into out (at most MG_SHARED_VALUE_MAX bytes); returns its length or -1. */
typedef long (*mg_group_compute_fn)(struct mg_env *env, char *out, size_t cap);

/* Fills out (cap >= MG_SHARED_VALUE_MAX) with the value; returns its length, or -1 when it
 * could not be computed. */
long mg_group_value_get(struct mg_env *env, enum mg_value_id id, int64_t interval_ns,
                        mg_group_compute_fn compute, char *out, size_t cap);

/* How long a request waits for another worker's first value before it computes its own. */
#define MG_GROUP_VALUE_WAIT_NS (2 * MG_NS_PER_SEC)

/* As mg_group_value_get for a request on a worker's loop, which never waits there: when
 * there is no value and another worker computes it, MG_GROUP_VALUE_PENDING: the request
 * parks until the holder's lease ends (its slot is woken, shared_value.h) or
 * *waiting_since_ns + MG_GROUP_VALUE_WAIT_NS; *waiting_since_ns (0 on the first call, kept in
 * the request's park) bounds the wait, past which it computes on its own. */
#define MG_GROUP_VALUE_PENDING (-2L)
long mg_group_value_get_parked(struct mg_env *env, enum mg_value_id id, int64_t interval_ns,
                               mg_group_compute_fn compute, char *out, size_t cap,
                               int64_t *waiting_since_ns);

/* Whether a get at this moment would compute the value here (there is none, or it is stale
 * and nobody alive refreshes it): what makes a request that reads it heavy. */
bool mg_group_value_would_compute(struct mg_env *env, enum mg_value_id id, int64_t interval_ns);

#endif

/* SPDX-License-Identifier: ISC */
#include "rates.h"

#include "gate_diag.h"
#include "gate_fifo.h"
#include "stats.h"

uint64_t mg_rates_refusals(const struct mg_segment *seg)
{
    return atomic_load(&seg->diag->refused_busy) + atomic_load(&seg->diag->refused_cooling) +
           atomic_load(&seg->cold->refused_full) + atomic_load(&seg->cold->refused_timeout) +
           atomic_load(&seg->anon->refused_full) + atomic_load(&seg->anon->refused_timeout) +
           mg_counter_get(seg, MG_CTR_ANON_RATE_LIMITED);
}

void mg_rates_sample(struct mg_segment *seg, int64_t now_s)
{
    struct mg_rate_sample *r = &seg->header->rate[now_s % MG_RATE_SECONDS];
    if (atomic_load(&r->second) == now_s)
        return;
    atomic_store(&r->second, 0); /* readers skip it while it changes */
    atomic_store(&r->requests, mg_counter_get(seg, MG_CTR_REQUESTS));
    atomic_store(&r->refusals, mg_rates_refusals(seg));
    atomic_store(&r->second, now_s);
}

static const struct mg_rate_sample *at(const struct mg_segment *seg, int64_t second)
{
    const struct mg_rate_sample *r = &seg->header->rate[second % MG_RATE_SECONDS];
    return atomic_load(&r->second) == second ? r : NULL;
}

bool mg_rates_per_second(const struct mg_segment *seg, int64_t now_s, int window_s,
                         double *requests, double *refusals)
{
    if (window_s < 1 || window_s >= MG_RATE_SECONDS)
        return false;
    /* The newest complete sample is now_s or now_s - 1 (the master samples every 250 ms). */
    for (int64_t end = now_s; end >= now_s - 1; end--) {
        const struct mg_rate_sample *b = at(seg, end), *a = at(seg, end - window_s);
        if (!a || !b)
            continue;
        *requests = (double)(atomic_load(&b->requests) - atomic_load(&a->requests)) / window_s;
        *refusals = (double)(atomic_load(&b->refusals) - atomic_load(&a->refusals)) / window_s;
        return true;
    }
    return false;
}

/* SPDX-License-Identifier: ISC */
#include "pacing.h"

#include <string.h>

static uint32_t bucket_of(const uint8_t key[16])
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (int i = 0; i < 16; i++)
        h = (h ^ key[i]) * 16777619u;
    return h % MG_PACE_BUCKETS;
}

static bool over(const struct mg_pace_entry *e, int64_t now)
{
    return e->streak == 0 || now - e->last_ns >= MG_PACE_FORGET_NS;
}

int64_t mg_pacing_answer(struct mg_pacing *p, const uint8_t key[16], bool refused, int64_t max_ns,
                         int64_t now)
{
    struct mg_pace_entry *e = &p->bucket[bucket_of(key)];
    bool mine = memcmp(e->key, key, sizeof e->key) == 0;
    if (!refused) {
        if (mine)
            e->streak /= 2;
        return 0;
    }
    if (!mine) {
        /* A bucket's address whose streak goes on keeps it from a newcomer. */
        if (!over(e, now) && e->streak > MG_PACE_FREE)
            return 0;
        memcpy(e->key, key, sizeof e->key);
        e->streak = 0;
    } else if (over(e, now)) {
        e->streak = 0;
    }
    e->streak++;
    e->last_ns = now;
    if (max_ns <= 0 || e->streak <= MG_PACE_FREE)
        return 0;
    uint32_t doublings = e->streak - MG_PACE_FREE - 1;
    if (doublings > 30)
        doublings = 30;
    int64_t delay = MG_PACE_BASE_NS << doublings;
    return delay < max_ns ? delay : max_ns;
}

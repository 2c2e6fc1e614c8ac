/* SPDX-License-Identifier: ISC */
#include "table_stats.h"

#include <time.h>

const char *const mg_table_names[MG_TABLE_COUNT] = {
#define MG_TABLE_NAME(id, name, what) name,
    MG_TABLE_LIST(MG_TABLE_NAME)
#undef MG_TABLE_NAME
};

static struct mg_table_stats *bound;

void mg_table_stats_bind(struct mg_table_stats *records)
{
    bound = records;
}

static int64_t clock_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t mg_table_pass_begin(enum mg_table_id id)
{
    if (bound)
        atomic_fetch_add_explicit(&bound[id].building, 1, memory_order_relaxed);
    return clock_ns(CLOCK_MONOTONIC);
}

void mg_table_pass_end(enum mg_table_id id, int64_t began_ns, bool ok, uint64_t size_bytes)
{
    if (!bound)
        return;
    struct mg_table_stats *t = &bound[id];
    if (ok) {
        int64_t took = clock_ns(CLOCK_MONOTONIC) - began_ns;
        if (size_bytes)
            atomic_store_explicit(&t->size_bytes, size_bytes, memory_order_relaxed);
        atomic_store_explicit(&t->last_pass_ms, (uint64_t)(took > 0 ? took / 1000000 : 0),
                              memory_order_relaxed);
        atomic_store_explicit(&t->last_pass_unix_ms, (uint64_t)(clock_ns(CLOCK_REALTIME) / 1000000),
                              memory_order_relaxed);
        atomic_fetch_add_explicit(&t->generation, 1, memory_order_relaxed);
    } else {
        atomic_fetch_add_explicit(&t->failures, 1, memory_order_relaxed);
    }
    atomic_fetch_sub_explicit(&t->building, 1, memory_order_relaxed);
}

void mg_table_progress(enum mg_table_id id, bool building, uint64_t low_water)
{
    if (!bound)
        return;
    atomic_store_explicit(&bound[id].building, building ? 1 : 0, memory_order_relaxed);
    atomic_store_explicit(&bound[id].low_water, low_water, memory_order_relaxed);
}

void mg_table_rows(enum mg_table_id id, uint64_t served, uint64_t direct)
{
    if (!bound)
        return;
    if (served)
        atomic_fetch_add_explicit(&bound[id].rows_served, served, memory_order_relaxed);
    if (direct)
        atomic_fetch_add_explicit(&bound[id].rows_direct, direct, memory_order_relaxed);
}

void mg_table_stats_read(const struct mg_table_stats *records, struct mg_table_snapshot *out)
{
    for (int i = 0; i < MG_TABLE_COUNT; i++) {
#define MG_TABLE_READ(field, json, type, what)                                                     \
    out[i].field = atomic_load_explicit(&records[i].field, memory_order_relaxed);
        MG_TABLE_STAT_LIST(MG_TABLE_READ)
#undef MG_TABLE_READ
    }
}

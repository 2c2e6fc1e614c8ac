/* SPDX-License-Identifier: ISC */
#include "db_counts.h"

#include "group_value.h"
#include "clock.h"
#include "db.h"
#include "job.h"
#include "stats.h"

#include <stdatomic.h>

#include <string.h>

static long compute_counts(struct mg_env *env, char *out, size_t cap)
{
    struct mg_db_counts counts;
    if (cap < sizeof counts)
        return -1;
    sqlite3_stmt *st = mg_db_prepare(env->db, "SELECT (SELECT count(*) FROM transmissions), "
                                              "(SELECT count(*) FROM observations), "
                                              "(SELECT count(*) FROM nodes), "
                                              "(SELECT count(*) FROM observers)");
    if (!st)
        return -1;
    long rc = -1;
    if (sqlite3_step(st) == SQLITE_ROW) {
        counts.transmissions = sqlite3_column_int64(st, 0);
        counts.observations = sqlite3_column_int64(st, 1);
        counts.nodes = sqlite3_column_int64(st, 2);
        counts.observers = sqlite3_column_int64(st, 3);
        memcpy(out, &counts, sizeof counts);
        rc = (long)sizeof counts;
    }
    sqlite3_finalize(st);
    return rc;
}

bool mg_db_counts_get(struct mg_env *env, struct mg_db_counts *out)
{
    char value[MG_SHARED_VALUE_MAX];
    long len = mg_group_value_get(env, MG_VALUE_DB_COUNTS, MG_DB_COUNTS_INTERVAL_NS, compute_counts,
                                  value, sizeof value);
    if (len != (long)sizeof *out)
        return false;
    memcpy(out, value, sizeof *out);
    return true;
}

/* The process's one refresh job: submitted again only once the helper has run it. */
static struct {
    struct mg_job job; /* first: the thread hands this pointer back */
    struct mg_env env;
    bool submitted;
} refresh;

static void run_refresh(struct mg_job *job, struct mg_db *db)
{
    (void)job;
    refresh.env.db = db;
    struct mg_db_counts counts;
    mg_db_counts_get(&refresh.env, &counts);
}

bool mg_db_counts_peek(struct mg_env *env, struct mg_db_counts *out)
{
    char value[MG_SHARED_VALUE_MAX];
    long len =
        mg_shared_value_read(&env->seg->values[MG_VALUE_DB_COUNTS], value, sizeof value, 0, NULL);
    if (len != (long)sizeof *out)
        return false;
    memcpy(out, value, sizeof *out);
    return true;
}

bool mg_db_counts_current(struct mg_env *env, struct mg_db_counts *out)
{
    if (mg_group_value_would_compute(env, MG_VALUE_DB_COUNTS, MG_DB_COUNTS_INTERVAL_NS)) {
        if (!env->jobs) /* in-process tests: no helper thread */
            return mg_db_counts_get(env, out);
        if (!refresh.submitted || atomic_load(&refresh.job.done)) {
            refresh.env = *env;
            refresh.env.jobs = refresh.env.anon_jobs = NULL;
            refresh.job.run = run_refresh;
            atomic_store(&refresh.job.done, 0);
            refresh.submitted = mg_jobs_submit(env->jobs, &refresh.job);
        }
    }
    char value[MG_SHARED_VALUE_MAX];
    int64_t age = 0;
    long len = mg_shared_value_read(&env->seg->values[MG_VALUE_DB_COUNTS], value, sizeof value,
                                    mg_monotonic_ns(), &age);
    if (len != (long)sizeof *out)
        return false;
    mg_counter_add(env->seg,
                   age < MG_DB_COUNTS_INTERVAL_NS ? MG_CTR_GROUP_VALUE_HITS
                                                  : MG_CTR_GROUP_VALUE_STALE_HITS,
                   1);
    memcpy(out, value, sizeof *out);
    return true;
}

/* SPDX-License-Identifier: ISC */
/*
 * summaries: the group's per-transmission summaries (shm/tx_summary.h): the master maps them,
 * and a worker's loop runs the pass a chunk at a time (mg_packets_summaries_chunk,
 * packet_scan.h) on its helper thread while one is due, a permit and the lease per chunk.
 */
#include "summaries.h"

#include "clock.h"
#include "job.h"
#include "log.h"
#include "packet_scan.h"
#include "segment.h"
#include "test_hooks.h"

#include <stdlib.h>

int mg_summaries_open(const char *db_path, int busy_timeout_ms, struct mg_tx_summaries *s,
                      char *err, size_t errlen)
{
    struct mg_db db;
    if (mg_db_open(&db, db_path, busy_timeout_ms, err, errlen) != 0)
        return -1;
    int64_t span =
        mg_db_scalar(&db, "SELECT coalesce(max(id) - min(id) + 1, 0) FROM transmissions");
    mg_db_close(&db);
    return mg_tx_summaries_create(s, mg_tx_summary_capacity(span), err, errlen);
}

/* The job of a chunk of the pass on the worker's helper thread. */
struct pass_job {
    struct mg_job job; /* first: the thread hands this pointer back */
    struct mg_tx_summaries *summaries;
    const struct mg_env *env; /* the test build's hook */
    int pid;
    int status;
    bool finished;
    char err[256];
};

/* The chunk this worker's helper runs and the token of its cold-gate permit. Only the
 * worker's loop touches it. */
static struct {
    struct pass_job *running;
    uint64_t token;
} pass;

static void each_transmission(const void *env)
{
    mg_test_hooks_summaries_tx(env);
}

static void run_chunk(struct mg_job *job, struct mg_db *db)
{
    struct pass_job *p = (struct pass_job *)job;
    /* The first chunk ever covers the newest pages whatever it takes: their requests park
     * for it (mg_packets_parks_until). */
    struct mg_summaries_chunk c = {
        .budget_ns = MG_TX_SUMMARY_CHUNK_NS,
        .min_tx = mg_tx_summary_high_water(p->summaries) < 0 ? MG_TX_SUMMARY_FIRST_TX : 0,
        .each = each_transmission,
        .arg = p->env};
    p->status = mg_packets_summaries_chunk(db, p->summaries, p->pid, &c, &p->finished, p->err,
                                           sizeof p->err);
}

/* Whether a chunk is due: a pass is under way, or the first one has not been done, or the
 * last is older than the re-validation period; never within the retry delay of a failure. */
static bool chunk_due(const struct mg_tx_summary_header *h, int64_t now_ns)
{
    int64_t failed = atomic_load(&h->failed_ns);
    if (failed != 0 && failed >= atomic_load(&h->chunked_ns) &&
        now_ns - failed < MG_TX_SUMMARY_RETRY_NS)
        return false;
    return atomic_load(&h->cursor) >= 0 || atomic_load(&h->passes) == 0 ||
           now_ns - atomic_load(&h->passed_ns) >= MG_TX_SUMMARY_REVALIDATE_NS;
}

void mg_summaries_tick(struct mg_env *env, const struct mg_background_permit *permit,
                       int64_t now_ns)
{
    struct mg_tx_summaries *s = env->summaries;
    if (pass.running) {
        if (!atomic_load(&pass.running->job.done))
            return;
        /* Between chunks the permit and the lease are free: a waiting request, or an
         * extension, goes first (the next chunk's try gives way to a ready waiter). */
        permit->give(env, pass.token);
        mg_tx_summary_lease_release(s, env->pid);
        if (pass.running->status != 0)
            mg_warn("%s; reading transmissions directly, trying again in %lld s", pass.running->err,
                    MG_TX_SUMMARY_RETRY_NS / 1000000000LL);
        else if (pass.running->finished)
            mg_info("transmission summaries: full pass done in %llu ms (%llu chunks so far)",
                    (unsigned long long)atomic_load(&s->header->pass_ms_last),
                    (unsigned long long)atomic_load(&s->header->chunks));
        free(pass.running);
        pass.running = NULL;
        now_ns = mg_monotonic_ns();
    }
    if (!s || !env->jobs || !env->seg)
        return;
    if (!chunk_due(s->header, now_ns) || mg_jobs_busy(env->jobs) ||
        !mg_tx_summary_lease_take(s, env->pid, now_ns))
        return;
    /* A chunk is cold work: it takes a permit of the cold-scan gate when one is free and no
     * ready request waits, or tries again on a later turn (background work never joins the
     * line: admission.h). */
    bool admitted = permit->take(env, "transmission summaries", &pass.token);
    struct pass_job *p = admitted ? calloc(1, sizeof *p) : NULL;
    if (p) {
        p->job.run = run_chunk;
        p->job.under_permit = true; /* a cold permit */
        p->summaries = s;
        p->env = env;
        p->pid = env->pid;
    }
    if (p && mg_jobs_submit(env->jobs, &p->job)) {
        pass.running = p;
        return;
    }
    free(p);
    if (admitted)
        permit->give(env, pass.token);
    mg_tx_summary_lease_release(s, env->pid);
}

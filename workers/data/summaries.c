/* SPDX-License-Identifier: ISC */
/*
 * summaries: the group's per-transmission summaries (shm/tx_summary.h): the master maps them,
 * and a worker's loop starts the full pass (mg_packets_summaries_pass, ep_packets.h) on its
 * helper thread when it is due.
 */
#include "summaries.h"

#include "admission.h"
#include "clock.h"
#include "ep_packets.h"
#include "jobs.h"
#include "log.h"
#include "segment.h"

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

/* The job of a pass on the worker's helper thread. */
struct pass_job {
    struct mg_job job; /* first: the thread hands this pointer back */
    struct mg_tx_summaries *summaries;
    int pid;
    int status;
    char err[256];
};

/* Before the first pass (and when it is due again): the pass this worker's helper runs and
 * the token of its cold-gate permit. Only the worker's loop touches it. */
static struct {
    struct pass_job *running;
    uint64_t token;
} pass;

static void run_pass(struct mg_job *job, struct mg_db *db)
{
    struct pass_job *p = (struct pass_job *)job;
    p->status = mg_packets_summaries_pass(db, p->summaries, p->pid, p->err, sizeof p->err);
}

void mg_summaries_tick(struct mg_env *env, int64_t now_ns)
{
    struct mg_tx_summaries *s = env->summaries;
    if (pass.running) {
        if (!atomic_load(&pass.running->job.done))
            return;
        mg_admission_release_background(&mg_gate_cold, env, pass.token);
        mg_tx_summary_lease_release(s, env->pid);
        if (pass.running->status != 0)
            mg_warn("%s; reading transmissions directly, trying again in %lld s", pass.running->err,
                    MG_TX_SUMMARY_RETRY_NS / 1000000000LL);
        else
            mg_info("transmission summaries: full pass done in %llu ms",
                    (unsigned long long)atomic_load(&s->header->pass_ms_last));
        free(pass.running);
        pass.running = NULL;
        return;
    }
    if (!s || !env->jobs || !env->seg)
        return;
    struct mg_tx_summary_header *h = s->header;
    int64_t failed = atomic_load(&h->failed_ns), passed = atomic_load(&h->passed_ns);
    bool due = mg_tx_summary_high_water(s) < 0
                   ? failed == 0 || now_ns - failed >= MG_TX_SUMMARY_RETRY_NS
                   : now_ns - passed >= MG_TX_SUMMARY_REVALIDATE_NS &&
                         (failed < passed || now_ns - failed >= MG_TX_SUMMARY_RETRY_NS);
    if (!due || mg_jobs_busy(env->jobs) || !mg_tx_summary_lease_take(s, env->pid, now_ns))
        return;
    /* A pass is cold work: it takes a permit of the cold-scan gate when one is free, or tries
     * again on a later turn (background work never joins the line: admission.h). */
    bool admitted =
        mg_admission_try_background(&mg_gate_cold, env, "transmission summaries", &pass.token);
    struct pass_job *p = admitted ? calloc(1, sizeof *p) : NULL;
    if (p) {
        p->job.run = run_pass;
        p->job.under_permit = true; /* a cold permit */
        p->summaries = s;
        p->pid = env->pid;
    }
    if (p && mg_jobs_submit(env->jobs, &p->job)) {
        pass.running = p;
        return;
    }
    free(p);
    if (admitted)
        mg_admission_release_background(&mg_gate_cold, env, pass.token);
    mg_tx_summary_lease_release(s, env->pid);
}

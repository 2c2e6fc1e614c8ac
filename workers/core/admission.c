/* SPDX-License-Identifier: ISC */
#include "admission.h"

#include "clock.h"
#include "gate_diag.h"
#include "gate_fifo.h"
#include "jobs.h"
#include "upstream_gate.h"

#include <stdio.h>

enum {
    PASS_NEW = 0, /* not asked yet */
    PASS_QUEUED,  /* a place in line */
    PASS_HELD,    /* a permit */
    PASS_DONE,    /* refused, or the permit is back */
};

static struct mg_fifo_gate *anon_line(const struct mg_env *env)
{
    return env->seg->anon;
}

static struct mg_fifo_gate *cold_line(const struct mg_env *env)
{
    return env->seg->cold;
}

static struct mg_fifo_gate *upstream_line(const struct mg_env *env)
{
    return &env->seg->upstream->gate;
}

static struct mg_jobs *anon_helper(const struct mg_env *env)
{
    return env->anon_jobs;
}

/* The helper the handler was given: the anonymous one for an anonymous request. */
static struct mg_jobs *handler_helper(const struct mg_env *env)
{
    return env->jobs;
}

static const char anon_full[] = "the line for anonymous heavy requests is full; retry after "
                                "Retry-After, or sign in with an API key";
static const char anon_timed_out[] = "the wait in the line for anonymous heavy requests ran out; "
                                     "retry after Retry-After, or sign in with an API key";

const struct mg_gate_desc mg_gate_anon_line = {
    .id = MG_GATE_ANON_LINE,
    .kind = MG_GATE_KIND_LINE,
    .line = anon_line,
    .helper = anon_helper,
    .reserve_helper = true,
    .refuse_status = 503,
    .retry_after_s = 1,
    .when_full = anon_full,
    .when_timed_out = anon_timed_out,
};

/* The anonymous line again, for a heavy route of the upstream: its work is the exchange, run
 * by the worker's event loop (upstream.c), so it needs no helper thread. */
const struct mg_gate_desc mg_gate_anon_upstream = {
    .id = MG_GATE_ANON_LINE,
    .kind = MG_GATE_KIND_LINE,
    .line = anon_line,
    .refuse_status = 503,
    .retry_after_s = 1,
    .when_full = anon_full,
    .when_timed_out = anon_timed_out,
};

/* Requests for the upstream (upstream_route.c); the engine runs the exchange. */
const struct mg_gate_desc mg_gate_upstream = {
    .id = MG_GATE_UPSTREAM,
    .kind = MG_GATE_KIND_LINE,
    .line = upstream_line,
    .refuse_status = 503,
    .retry_after_s = 1,
    .when_full = "the line for the upstream is full; retry after Retry-After",
    .when_timed_out = "the wait in the line for the upstream ran out; retry after Retry-After",
};

const struct mg_gate_desc mg_gate_cold = {
    .id = MG_GATE_COLD,
    .kind = MG_GATE_KIND_LINE,
    .line = cold_line,
    .helper = handler_helper,
    .refuse_status = 429,
    .retry_after_s = 2,
    .when_full = "too many %ss are being built; retry after Retry-After",
    .when_timed_out = "%ss are being built at capacity; retry after Retry-After",
};

const struct mg_gate_desc mg_gate_diag = {
    .id = MG_GATE_DIAG,
    .kind = MG_GATE_KIND_DIAG,
    .helper = handler_helper,
    .refuse_status = 429,
    .when_full = "a memory breakdown is running; ask again after Retry-After",
    .when_cooling = "a memory breakdown ran moments ago; ask again after Retry-After",
};

/* The helper that runs the work g admits; NULL: none (the event loop runs it). */
static struct mg_jobs *helper_of(const struct mg_gate_desc *g, const struct mg_env *env)
{
    return g->helper ? g->helper(env) : NULL;
}

/* Whether the work this gate admits could start now: its helper has a thread for it. */
static bool work_can_start(const struct mg_gate_desc *g, const struct mg_env *env,
                           const struct mg_request *req, const struct mg_gate_pass *p)
{
    struct mg_jobs *helper = helper_of(g, env);
    return !p->held_back && (!helper || mg_jobs_available(helper, req->park));
}

static enum mg_admission_result admitted(const struct mg_gate_desc *g, struct mg_gate_pass *p,
                                         struct mg_env *env, const struct mg_request *req)
{
    struct mg_jobs *helper = helper_of(g, env);
    if (g->reserve_helper && helper)
        mg_jobs_reserve(helper, req->park);
    mg_outcome_decide(&req->park->outcome, g->id, MG_VERDICT_ADMITTED, mg_monotonic_ns());
    p->step = PASS_HELD;
    return MG_ADMISSION_RUN;
}

static enum mg_admission_result refused(const struct mg_gate_desc *g, struct mg_gate_pass *p,
                                        const struct mg_request *req, struct mg_response *res,
                                        int retry_after_s, const char *message, const char *what)
{
    char why[192];
    snprintf(why, sizeof why, message, what ? what : "work");
    mg_outcome_decide(&req->park->outcome, g->id, MG_VERDICT_REFUSED, mg_monotonic_ns());
    mg_response_refuse(res, g->refuse_status, retry_after_s, why);
    p->step = PASS_DONE;
    return MG_ADMISSION_REFUSED;
}

static enum mg_admission_result parked(struct mg_response *res)
{
    res->parked = true;
    return MG_ADMISSION_PARKED;
}

static bool client_gone(const struct mg_request *req)
{
    return req->client_gone && req->client_gone(req->client_gone_arg);
}

static enum mg_admission_result pass_line(const struct mg_gate_desc *g, struct mg_gate_pass *p,
                                          struct mg_env *env, const struct mg_request *req,
                                          const char *key, const char *what,
                                          struct mg_response *res)
{
    struct mg_fifo_gate *line = g->line(env);
    struct mg_fifo_limits limits = mg_fifo_gate_limits(line);
    /* A line without a cap (0: no gate, for A/B measurements) admits at once, as it always
     * did; its work then waits for a helper. */
    bool ready = limits.cap == 0 || work_can_start(g, env, req, p);
    if (p->step == PASS_NEW) {
        int r = mg_fifo_gate_join_ready(line, env->pid, env->slot, key, ready, &p->token, &p->place,
                                        &p->ticket);
        if (r == MG_FIFO_ADMITTED)
            return admitted(g, p, env, req);
        if (r != MG_FIFO_QUEUED)
            return refused(g, p, req, res, g->retry_after_s, g->when_full, what);
        int64_t now = mg_monotonic_ns();
        p->deadline_ns = now + limits.wait_ns;
        mg_outcome_wait(&req->park->outcome, g->id, now);
        p->step = PASS_QUEUED;
        return parked(res);
    }
    if (client_gone(req)) {
        mg_fifo_gate_cancel(line, env->pid, p->place, p->ticket);
        refused(g, p, req, res, g->retry_after_s, "the client went away", NULL);
        res->close = true;
        return MG_ADMISSION_REFUSED;
    }
    int r = mg_fifo_gate_poll_ready(line, env->pid, env->slot, key, p->place, p->ticket, ready,
                                    mg_monotonic_ns(), p->deadline_ns, &p->token);
    if (r == MG_FIFO_QUEUED)
        return parked(res);
    if (r == MG_FIFO_ADMITTED)
        return admitted(g, p, env, req);
    return refused(g, p, req, res, g->retry_after_s, g->when_timed_out, what);
}

static enum mg_admission_result pass_diag(const struct mg_gate_desc *g, struct mg_gate_pass *p,
                                          struct mg_env *env, const struct mg_request *req,
                                          struct mg_response *res)
{
    /* No line: the request waits, parked and without the permit, only while no helper can
     * start the walk. */
    if (!work_can_start(g, env, req, p))
        return parked(res);
    int retry_after = 1;
    enum mg_diag_result r = mg_diag_gate_try(env->seg->diag, env->pid, env->slot, mg_monotonic_ns(),
                                             &p->token, &retry_after);
    if (r == MG_DIAG_ADMITTED)
        return admitted(g, p, env, req);
    return refused(g, p, req, res, retry_after, r == MG_DIAG_BUSY ? g->when_full : g->when_cooling,
                   NULL);
}

enum mg_admission_result mg_admission_pass(const struct mg_gate_desc *g, struct mg_gate_pass *p,
                                           struct mg_env *env, const struct mg_request *req,
                                           const char *key, const char *what,
                                           struct mg_response *res)
{
    if (p->step == PASS_HELD)
        return MG_ADMISSION_RUN;
    if (p->step == PASS_DONE)
        return MG_ADMISSION_REFUSED;
    return g->kind == MG_GATE_KIND_DIAG ? pass_diag(g, p, env, req, res)
                                        : pass_line(g, p, env, req, key, what, res);
}

bool mg_admission_held(const struct mg_gate_pass *p)
{
    return p->step == PASS_HELD;
}

uint64_t mg_admission_hand_over(struct mg_gate_pass *p)
{
    if (p->step != PASS_HELD)
        return 0;
    uint64_t token = p->token;
    p->token = 0;
    p->step = PASS_DONE;
    return token;
}

void mg_admission_release(const struct mg_gate_desc *g, struct mg_gate_pass *p, struct mg_env *env,
                          const struct mg_request *req, int64_t ended_ns, int64_t took_ns)
{
    if (p->step != PASS_HELD)
        return;
    if (g->kind == MG_GATE_KIND_DIAG)
        mg_diag_gate_release(env->seg->diag, env->pid, p->token, ended_ns, took_ns);
    else
        mg_fifo_gate_release(g->line(env), env->pid, p->token);
    struct mg_jobs *helper = helper_of(g, env);
    if (g->reserve_helper && helper)
        mg_jobs_unreserve(helper, req->park);
    p->token = 0;
    p->step = PASS_DONE;
}

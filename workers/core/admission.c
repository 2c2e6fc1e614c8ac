/* SPDX-License-Identifier: ISC */
#include "admission.h"

#include "clock.h"
#include "request_client.h"
#include "gate_diag.h"
#include "gate_fifo.h"
#include "gates.h"
#include "jobs.h"
#include "netaddr.h"
#include "stats.h"
#include "upstream_gate.h"

#include <stdio.h>
#include <string.h>

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

/* A gate's refusal is its row's (shm/gates.h): status, Retry-After and the message when full. */
#define REFUSAL(name, sections, title, status, retry, refusal, counters, snapshot)                 \
    .refuse_status = status, .retry_after_s = retry, .when_full = refusal

static const char anon_timed_out[] = "the wait in the line for anonymous heavy requests ran out; "
                                     "retry after Retry-After, or sign in with an API key";

/* 503 like the full line, not 429: CoreScope's pages retry a 503 after its Retry-After and
 * take a 429 as an error, and one page (analytics) asks for six heavy answers at once. */
static const char anon_share[] = "this address holds its share of the line for anonymous heavy "
                                 "requests (MESHGATE_ANON_PER_CLIENT); retry after Retry-After, "
                                 "or sign in with an API key";

const struct mg_gate_desc mg_gate_anon_line = {
    .id = MG_GATE_ANON_LINE,
    .kind = MG_GATE_KIND_LINE,
    .line = anon_line,
    .helper = anon_helper,
    .reserve_helper = true,
    MG_GATE_ROW_anon_line(REFUSAL),
    .when_timed_out = anon_timed_out,
    .when_share = anon_share,
};

/* Requests for the upstream (upstream_route.c); the engine runs the exchange. An anonymous
 * request's place counts in its address's share (mg_admission_upstream_share). */
const struct mg_gate_desc mg_gate_upstream = {
    .id = MG_GATE_UPSTREAM,
    .kind = MG_GATE_KIND_LINE,
    .line = upstream_line,
    MG_GATE_ROW_upstream(REFUSAL),
    .when_timed_out = "the wait in the line for the upstream ran out; retry after Retry-After",
    .when_share = "this address holds its share of the upstream's permits and places "
                  "(MESHGATE_ANON_PER_CLIENT); retry after Retry-After, or sign in with an API "
                  "key",
};

const struct mg_gate_desc mg_gate_cold = {
    .id = MG_GATE_COLD,
    .kind = MG_GATE_KIND_LINE,
    .line = cold_line,
    .helper = handler_helper,
    MG_GATE_ROW_cold(REFUSAL),
    .when_timed_out = "%ss are being built at capacity; retry after Retry-After",
};

const struct mg_gate_desc mg_gate_diag = {
    .id = MG_GATE_DIAG,
    .kind = MG_GATE_KIND_DIAG,
    .helper = handler_helper,
    MG_GATE_ROW_diag(REFUSAL),
    .when_cooling = "a memory breakdown ran moments ago; ask again after Retry-After",
};

#define END MG_GATE_ROWS
const enum mg_gate_row mg_gates_light[] = {END};
const enum mg_gate_row mg_gates_heavy[] = {MG_GATE_ROW_rate_limit, MG_GATE_ROW_anon_line, END};
const enum mg_gate_row mg_gates_cold[] = {MG_GATE_ROW_rate_limit, MG_GATE_ROW_anon_line,
                                          MG_GATE_ROW_cold, END};
const enum mg_gate_row mg_gates_diag[] = {MG_GATE_ROW_rate_limit, MG_GATE_ROW_anon_line,
                                          MG_GATE_ROW_diag, END};
const enum mg_gate_row mg_gates_upstream[] = {MG_GATE_ROW_rate_limit, MG_GATE_ROW_breaker,
                                              MG_GATE_ROW_upstream, END};
#undef END

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

/* Waiting at a gate: its worker is woken when the place may go on (the line's hand-off,
 * shm/gate_fifo.h; a helper thread freed); until_ns: the wait's end (0: none). */
static enum mg_admission_result parked(const struct mg_request *req, int64_t until_ns)
{
    mg_park_until(req, until_ns);
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
    enum mg_fifo_ready ready = limits.cap == 0 || work_can_start(g, env, req, p) ? MG_FIFO_READY
                               : p->held_back                                    ? MG_FIFO_HELD_BACK
                                              : MG_FIFO_WORKER_BUSY;
    if (p->step == PASS_NEW) {
        int r = mg_fifo_gate_join_owned(line, env->pid, env->slot, key, ready, p->owner, p->share,
                                        &p->token, &p->place, &p->ticket);
        if (r == MG_FIFO_ADMITTED)
            return admitted(g, p, env, req);
        if (r == MG_FIFO_REFUSED_SHARE)
            return refused(g, p, req, res, g->retry_after_s, g->when_share, what);
        if (r != MG_FIFO_QUEUED)
            return refused(g, p, req, res, g->retry_after_s, g->when_full, what);
        int64_t now = mg_monotonic_ns();
        p->deadline_ns = now + limits.wait_ns;
        mg_outcome_wait(&req->park->outcome, g->id, now);
        p->step = PASS_QUEUED;
        return parked(req, p->deadline_ns);
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
        return parked(req, p->deadline_ns);
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
        return parked(req, 0);
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

bool mg_admission_try_background(const struct mg_gate_desc *g, struct mg_env *env, const char *what,
                                 uint64_t *token)
{
    return g->kind == MG_GATE_KIND_LINE &&
           mg_fifo_gate_try_background(g->line(env), env->pid, env->slot, what, token);
}

void mg_admission_release_background(const struct mg_gate_desc *g, struct mg_env *env,
                                     uint64_t token)
{
    if (g->kind == MG_GATE_KIND_LINE)
        mg_fifo_gate_release(g->line(env), env->pid, token);
}

static bool cold_background_take(struct mg_env *env, const char *what, uint64_t *token)
{
    return mg_admission_try_background(&mg_gate_cold, env, what, token);
}

static void cold_background_give(struct mg_env *env, uint64_t token)
{
    mg_admission_release_background(&mg_gate_cold, env, token);
}

const struct mg_background_permit mg_background_cold = {
    .take = cold_background_take,
    .give = cold_background_give,
};

void mg_admission_wake_followers(const struct mg_gate_desc *g, struct mg_env *env)
{
    if (g->kind == MG_GATE_KIND_LINE)
        mg_fifo_gate_wake_followers(g->line(env), env->pid);
}

bool mg_admission_rate_limit(struct mg_env *env, const struct mg_request *req, const uint8_t *key,
                             struct mg_response *res)
{
    int64_t retry_ns = 0;
    if (mg_client_limit_take(&env->seg->clients, env->pid, key, mg_monotonic_ns(), &retry_ns))
        return true;
    mg_counter_add(env->seg, MG_CTR_ANON_RATE_LIMITED, 1);
    mg_outcome_decide(&req->park->outcome, MG_GATE_RATE_LIMIT, MG_VERDICT_REFUSED,
                      mg_monotonic_ns());
#define RATE_REFUSAL(name, sections, title, status, retry, refusal, counters, snapshot)            \
    mg_response_refuse(res, status, mg_client_limit_retry_after_s(retry_ns), refusal);
    MG_GATE_ROW_rate_limit(RATE_REFUSAL)
#undef RATE_REFUSAL
        return false;
}

uint32_t mg_admission_cap(const struct mg_gate_desc *g, const struct mg_env *env)
{
    return g->kind == MG_GATE_KIND_LINE ? mg_fifo_gate_limits(g->line(env)).cap : 1;
}

int64_t mg_admission_wait_ns(const struct mg_gate_desc *g, const struct mg_env *env)
{
    return g->kind == MG_GATE_KIND_LINE ? mg_fifo_gate_limits(g->line(env)).wait_ns : 0;
}

int mg_admission_follow(const struct mg_gate_desc *g, const struct mg_env *env, const char *key)
{
    return mg_fifo_gate_follow(g->line(env), env->pid, env->slot, key);
}

void mg_admission_unfollow(const struct mg_gate_desc *g, const struct mg_env *env, int place)
{
    mg_fifo_gate_unfollow(g->line(env), env->pid, place);
}

void mg_admission_release_token(const struct mg_gate_desc *g, const struct mg_env *env,
                                uint64_t token)
{
    mg_fifo_gate_release(g->line(env), env->pid, token);
}

bool mg_admission_diag_open(const struct mg_env *env)
{
    return mg_diag_gate_open(env->seg->diag, env->pid, mg_monotonic_ns());
}

enum mg_conn_verdict mg_admission_conn_open(const struct mg_env *env, uint32_t hold,
                                            const uint8_t *key)
{
    return mg_conn_limit_open(&env->seg->conns, env->pid, env->slot, hold, key);
}

void mg_admission_conn_close(const struct mg_env *env, uint32_t hold)
{
    mg_conn_limit_close(&env->seg->conns, env->pid, env->slot, hold);
}

uint32_t mg_admission_conn_count(const struct mg_env *env, const uint8_t *key)
{
    return mg_conn_limit_count(&env->seg->conns, key);
}

bool mg_admission_tunnel_share_open(const struct mg_env *env, uint32_t hold, uint32_t share)
{
    return mg_conn_limit_tunnel_open(&env->seg->conns, env->pid, env->slot, hold, share);
}

void mg_admission_tunnel_share_close(const struct mg_env *env, uint32_t hold)
{
    mg_conn_limit_tunnel_close(&env->seg->conns, env->pid, env->slot, hold);
}

bool mg_admission_tunnel_open(const struct mg_env *env)
{
    return mg_upstream_tunnel_open(env->seg->upstream, env->slot);
}

void mg_admission_tunnel_close(const struct mg_env *env)
{
    mg_upstream_tunnel_close(env->seg->upstream, env->slot);
}

bool mg_admission_upstream_anon_claim(const struct mg_env *env)
{
    return mg_upstream_anon_claim(env->seg->upstream, env->slot);
}

void mg_admission_upstream_anon_unclaim(const struct mg_env *env)
{
    mg_upstream_anon_unclaim(env->seg->upstream, env->slot);
}

enum mg_breaker_verdict mg_admission_breaker_allow(const struct mg_env *env, int64_t now_ns,
                                                   int64_t *retry_ns)
{
    return mg_breaker_allow(&env->seg->upstream->breaker, env->pid, now_ns, retry_ns);
}

void mg_admission_breaker_success(const struct mg_env *env, bool probe)
{
    mg_breaker_success(&env->seg->upstream->breaker, env->pid, probe);
}

bool mg_admission_breaker_failure(const struct mg_env *env, bool probe, int64_t now_ns,
                                  const uint8_t *addr)
{
    return mg_breaker_failure(&env->seg->upstream->breaker, env->pid, probe, now_ns, addr);
}

void mg_admission_breaker_abandon(const struct mg_env *env, int64_t now_ns)
{
    mg_breaker_abandon(&env->seg->upstream->breaker, env->pid, now_ns);
}

int64_t mg_admission_breaker_probe_due(const struct mg_env *env)
{
    return mg_breaker_probe_due(&env->seg->upstream->breaker);
}

bool mg_admission_breaker_take_probe(const struct mg_env *env, int64_t now_ns)
{
    return mg_breaker_take_probe(&env->seg->upstream->breaker, env->pid, now_ns);
}

/* A client's share of a line, MESHGATE_ANON_PER_CLIENT: its address as the rate limit knows
 * it (an IPv6 /64 is one) owns the places. */
static void client_share(const struct mg_env *env, const uint8_t key[MG_ADDR_BYTES],
                         struct mg_gate_pass *p)
{
    _Static_assert(sizeof p->owner == MG_ADDR_BYTES && MG_ADDR_BYTES == MG_FIFO_OWNER_BYTES,
                   "an address key is a line's owner");
    memcpy(p->owner, key, MG_ADDR_BYTES);
    p->share = (uint32_t)env->cfg->anon_per_client;
}

/* The anonymous line's phase: off (its cap is 0: the work runs, on the anonymous helper), or
 * a place in it named by the client and the path, for the dump tool. */
static void meet_anon_line(struct mg_env *env, struct mg_request *req,
                           const uint8_t addr[MG_ADDR_BYTES], const uint8_t key[MG_ADDR_BYTES])
{
    struct mg_admission *a = &req->park->admission;
    if (mg_admission_cap(&mg_gate_anon_line, env) == 0) {
        mg_outcome_decide(&req->park->outcome, MG_GATE_RATE_LIMIT, MG_VERDICT_ADMITTED,
                          mg_monotonic_ns());
        a->step = ADMIT_OFF;
        return;
    }
    _Static_assert(sizeof a->who <= MG_FIFO_KEY_MAX, "who fits a record's key");
    mg_addr_format(addr, a->who, sizeof a->who);
    size_t used = strlen(a->who);
    snprintf(a->who + used, sizeof a->who - used, " %s", req->path);
    client_share(env, key, &a->line);
    a->step = ADMIT_LINE;
}

void mg_admission_upstream_share(const struct mg_env *env, const struct mg_request *req,
                                 struct mg_gate_pass *p)
{
    uint8_t addr[MG_ADDR_BYTES], key[MG_ADDR_BYTES];
    mg_request_client(env->cfg, req->http, req->peer, addr);
    mg_client_key(addr, key);
    client_share(env, key, p);
}

/* The first turn: the request's class, then the gates met before the handler, in order. False
 * when one refused (res holds the answer). */
static bool first_turn(const enum mg_gate_row *list, struct mg_env *env, struct mg_request *req,
                       bool heavy, struct mg_response *res)
{
    struct mg_admission *a = &req->park->admission;
    if (!heavy) {
        a->step = ADMIT_LIGHT;
        return true;
    }
    if (req->signed_in) {
        mg_counter_add(env->seg, MG_CTR_ANON_BYPASSED, 1);
        a->step = ADMIT_BYPASS;
        req->park->outcome.verdict = MG_VERDICT_BYPASSED;
        return true;
    }
    uint8_t addr[MG_ADDR_BYTES], key[MG_ADDR_BYTES];
    mg_request_client(env->cfg, req->http, req->peer, addr);
    mg_client_key(addr, key);
    a->step = ADMIT_OFF; /* a heavy route with no line */
    for (const enum mg_gate_row *g = list; *g != MG_GATE_ROWS; g++) {
        if (*g == MG_GATE_ROW_rate_limit && !mg_admission_rate_limit(env, req, key, res))
            return false;
        if (*g == MG_GATE_ROW_anon_line)
            meet_anon_line(env, req, addr, key);
        /* the others are met inside the handler's work */
    }
    return true;
}

enum mg_admission_result mg_admission_admit(const enum mg_gate_row *list,
                                            const struct mg_gate_desc *line, struct mg_env *env,
                                            struct mg_request *req, bool heavy,
                                            struct mg_response *res)
{
    struct mg_admission *a = &req->park->admission;
    req->park->admissions++;
    if (a->step == ADMIT_NEW && !first_turn(list, env, req, heavy, res))
        return MG_ADMISSION_REFUSED;
    if (a->step != ADMIT_LINE)
        return MG_ADMISSION_RUN;
    enum mg_admission_result r = mg_admission_pass(line, &a->line, env, req, a->who, NULL, res);
    if (r == MG_ADMISSION_RUN)
        a->step = ADMIT_HELD;
    return r;
}

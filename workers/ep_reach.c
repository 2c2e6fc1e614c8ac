/* SPDX-License-Identifier: ISC */
/*
 * GET /api/nodes/{pubkey}/reach?days=N: the reach report, built at most `cap` at a time for
 * the whole process group (the cold-scan gate), shared by every worker through the result
 * cache, and built once for identical concurrent requests (coalescing).
 *
 * The handler is a small state machine over the turns of the worker's loop: whenever it
 * has to wait (in the gate's line, for another request's build of the same key, for its own
 * build on the worker's helper thread) it parks the request and returns, so waiting holds
 * no worker and cheap requests on the same worker keep being answered.
 *
 *   START     bad parameters: 400. The cache: a warm answer is copied out and served; it
 *             never takes a permit (invariant 5). Another request builds the key: FOLLOW.
 *             Absent: the key is claimed (identical requests now follow us): GATE.
 *   FOLLOW    holds a place in the gate's line (so waiters stay bounded) until the build
 *             ends: then the stored body (HIT), or, when the build was given up or its
 *             builder died, the key is claimed here: GATE. Past the wait bound: 429.
 *   GATE      the cold gate, through admission.c: a permit, or a place in line (parked,
 *             asked each turn, admitted in arrival order), or 429 when the line is full or
 *             the wait runs out; a client that went away leaves the line.
 *   ADMITTED  hands the build to the helper thread (it reads the node and observer tables,
 *             404 if the key is in neither, then scans), or runs it inline where there is no
 *             thread (in-process tests).
 *   BUILDING  when the build is done: the permit goes back first, on every path; a body is
 *             stored and served; a 404 or an error stores nothing.
 * Every refusal is 429 with Retry-After: 2 and Cache-Control: no-store, before any scan. A
 * worker that dies anywhere is cleaned up by the master: its permit, its place in line and
 * its claim are reclaimed after waitpid, and a follower takes the build over.
 */
#include "admission.h"
#include "clock.h"
#include "dispatch.h"
#include "gate_fifo.h"
#include "jobs.h"
#include "log.h"
#include "params.h"
#include "reach.h"
#include "result_body.h"
#include "router.h"
#include "test_hooks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REACH_RETRY_AFTER_S 2

enum step { START = 0, FOLLOW, GATE, ADMITTED, BUILDING };

struct build_job {
    struct mg_job job; /* first: the thread hands this pointer back */
    char pubkey[65];
    int days;
    int64_t now_unix;
    int hold_ms; /* tests only: X-Test-Hold-Ms (see test_hooks.h) */
    struct mg_buf body;
    enum mg_reach_result result;
    bool busy; /* the database was busy past its timeout */
    char err[256];
};

struct reach_state {
    enum step step;
    char pubkey[65];
    int days;
    char key[MG_CACHE_KEY_MAX];
    bool cached;
    uint64_t build_id;
    int place; /* of a follower */
    int64_t deadline_ns;
    struct mg_gate_pass cold; /* at the cold gate (admission.c) */
    struct build_job *job;
};

_Static_assert(sizeof(struct reach_state) <= MG_PARK_BYTES, "reach state fits a park");

/* On the helper thread, under the permit. An unknown key is found out from the node and
 * observer tables before any scan (404). */
static void run_build(struct mg_job *job, struct mg_db *db)
{
    struct build_job *b = (struct build_job *)job;
    mg_test_hooks_sleep(b->hold_ms);
    struct mg_reach_stats stats;
    memset(&stats, 0, sizeof stats);
    b->result = mg_reach_build(db, b->pubkey, b->days, b->now_unix, &b->body, &stats, b->err,
                               sizeof b->err);
    b->busy = b->result == MG_REACH_ERROR && (stats.db_error & 0xff) == SQLITE_BUSY;
}

static struct mg_outcome *outcome(const struct mg_request *req)
{
    return &req->park->outcome;
}

static void refuse(const struct mg_request *req, struct mg_response *res, const char *why)
{
    mg_outcome_decide(outcome(req), MG_GATE_COLD, MG_VERDICT_REFUSED, mg_monotonic_ns());
    mg_response_refuse(res, 429, REACH_RETRY_AFTER_S, why);
}

static void give_up_claim(struct mg_env *env, struct reach_state *st)
{
    if (st->cached && st->build_id)
        mg_result_cache_abandon(&env->seg->cache, env->pid, st->build_id);
    st->build_id = 0;
}

static bool gone(const struct mg_request *req)
{
    return req->client_gone && req->client_gone(req->client_gone_arg);
}

/* The client left while waiting: nothing will read an answer; close after it. */
static void answer_gone(const struct mg_request *req, struct mg_response *res)
{
    refuse(req, res, "the client went away");
    res->close = true;
}

static void park(struct mg_response *res)
{
    res->parked = true;
}

static void finish_build(struct mg_env *env, const struct mg_request *req, struct reach_state *st,
                         struct mg_response *res)
{
    struct build_job *b = st->job;
    /* The permit goes back first, on every path. */
    mg_admission_release(&mg_gate_cold, &st->cold, env, req, 0, 0);
    if (b->result == MG_REACH_OK && !b->body.failed) {
        if (st->cached && st->build_id)
            mg_result_cache_store(&env->seg->cache, env->pid, st->build_id, b->body.data,
                                  b->body.len, mg_monotonic_ns());
        st->build_id = 0;
        mg_buf_reset(&res->body);
        mg_buf_append(&res->body, b->body.data, b->body.len);
        mg_response_json(res, 200);
    } else {
        give_up_claim(env, st);
        if (b->result == MG_REACH_NOT_FOUND) {
            mg_response_error(res, 404, "Not found");
        } else if (b->result == MG_REACH_BAD_PUBKEY) {
            mg_response_error(res, 400, "invalid pubkey: expected 64 hex chars");
        } else if (b->busy) {
            mg_response_refuse(res, 503, 1, "the database is busy; retry after Retry-After");
        } else {
            mg_log(MG_LOG_ERROR, "reach %s: %s", st->key, b->err);
            mg_response_error(res, 500, "the reach report could not be built");
        }
    }
    mg_buf_free(&b->body);
    free(b);
    st->job = NULL;
}

static void step_start(struct mg_env *env, const struct mg_request *req, struct reach_state *st,
                       struct mg_response *res)
{
    if (!mg_reach_parse_pubkey(req->path_param, st->pubkey)) {
        mg_response_error(res, 400, "invalid pubkey: expected 64 hex chars");
        return;
    }
    int64_t days;
    if (!mg_param_int(req, res, "days", 7, 1, 30, &days))
        return;
    st->days = (int)days;
    snprintf(st->key, sizeof st->key, "%s|%d", st->pubkey, st->days);
    st->place = -1;
    st->cached = env->seg->config->reach_cache_ttl_ms > 0;
    if (!st->cached) {
        st->step = GATE;
        return;
    }
    enum mg_cache_outcome found =
        mg_result_cache_lookup(&env->seg->cache, env->pid, env->slot, st->key, mg_monotonic_ns(),
                               &res->body, &st->build_id);
    if (found == MG_CACHE_HIT) {
        mg_response_json(res, 200);
        return;
    }
    if (found == MG_CACHE_CLAIMED) {
        st->step = GATE;
        return;
    }
    st->place = mg_fifo_gate_follow(env->seg->cold, env->pid, env->slot, st->key);
    if (st->place < 0) {
        refuse(req, res, "too many reach reports are being built; retry after Retry-After");
        return;
    }
    st->deadline_ns = mg_monotonic_ns() + env->seg->cold->wait_ns;
    mg_outcome_wait(outcome(req), MG_GATE_COLD, mg_monotonic_ns());
    st->step = FOLLOW;
    park(res);
}

static void step_follow(struct mg_env *env, const struct mg_request *req, struct reach_state *st,
                        struct mg_response *res)
{
    int64_t now = mg_monotonic_ns();
    enum mg_cache_outcome found = MG_CACHE_BUSY;
    if (!gone(req))
        found = mg_result_cache_relook(&env->seg->cache, env->pid, env->slot, st->key, now,
                                       &res->body, &st->build_id);
    if (found == MG_CACHE_BUSY && !gone(req) && now < st->deadline_ns) {
        park(res);
        return;
    }
    mg_fifo_gate_unfollow(env->seg->cold, env->pid, st->place);
    st->place = -1;
    if (found == MG_CACHE_HIT) {
        mg_outcome_decide(outcome(req), MG_GATE_COLD, MG_VERDICT_ADMITTED, now);
        mg_response_json(res, 200);
    } else if (found == MG_CACHE_CLAIMED && !req->signed_in && mg_dispatch_was_light(req->park)) {
        /* It followed as a light request and would now build: that is cold work, which an
         * anonymous request does only through the anonymous line. Start over there. */
        give_up_claim(env, st);
        memset(st, 0, sizeof *st);
        res->readmit = true;
        park(res);
    } else if (found == MG_CACHE_CLAIMED) {
        st->step = GATE; /* the build was given up, or its builder died: ours now */
    } else if (gone(req))
        answer_gone(req, res);
    else
        refuse(req, res, "the reach report is still being built; retry after Retry-After");
}

/* The cold gate: a permit at once or after waiting in line (only when the helper can start
 * the build), or refused, in which case nothing will be built and the claim is given up. */
static void step_gate(struct mg_env *env, const struct mg_request *req, struct reach_state *st,
                      struct mg_response *res)
{
    enum mg_admission_result r =
        mg_admission_pass(&mg_gate_cold, &st->cold, env, req, st->key, res);
    if (r == MG_ADMISSION_RUN)
        st->step = ADMITTED;
    else if (r == MG_ADMISSION_REFUSED)
        give_up_claim(env, st);
}

static void step_admitted(struct mg_env *env, const struct mg_request *req, struct reach_state *st,
                          struct mg_response *res)
{
    if (!st->job) {
        st->job = calloc(1, sizeof *st->job);
        if (!st->job) {
            mg_admission_release(&mg_gate_cold, &st->cold, env, req, 0, 0);
            give_up_claim(env, st);
            mg_response_error(res, 500, "out of memory");
            return;
        }
        st->job->job.run = run_build;
        st->job->job.owner = req->park;
        st->job->job.under_permit = env->seg->cold->cap > 0;
        memcpy(st->job->pubkey, st->pubkey, sizeof st->pubkey);
        st->job->days = st->days;
        st->job->hold_ms = req->test_hold_ms;
        st->job->now_unix = (int64_t)time(NULL);
        mg_buf_init(&st->job->body);
    }
    /* The permit was taken with a thread free, in this same turn, so it takes the build now;
     * should it not, the build waits its turn here. */
    if (mg_jobs_hand_over(env->jobs, &st->job->job, env->db))
        st->step = BUILDING;
    else
        park(res);
}

bool mg_reach_is_heavy(struct mg_env *env, const struct mg_request *req)
{
    char pubkey[65];
    if (!mg_reach_parse_pubkey(req->path_param, pubkey))
        return false;
    int64_t days = 7;
    const char *text = mg_param_str(req, "days");
    if (text && !mg_parse_int64(text, &days))
        return false;
    days = days < 1 ? 1 : days > 30 ? 30 : days; /* as step_start clamps it */
    if (env->seg->config->reach_cache_ttl_ms <= 0)
        return true;
    char key[MG_CACHE_KEY_MAX];
    snprintf(key, sizeof key, "%s|%d", pubkey, (int)days);
    /* Warm, or being built by another request (this one will follow it, parked): light. */
    return !mg_result_cache_warm(&env->seg->cache, env->pid, key, mg_monotonic_ns()) &&
           !mg_result_cache_building(&env->seg->cache, env->pid, key);
}

void mg_handle_reach(struct mg_env *env, const struct mg_request *req, struct mg_response *res)
{
    struct reach_state *st = (struct reach_state *)req->park->state;
    for (;;) {
        enum step before = st->step;
        switch (st->step) {
        case START:
            step_start(env, req, st, res);
            break;
        case FOLLOW:
            step_follow(env, req, st, res);
            break;
        case GATE:
            step_gate(env, req, st, res);
            break;
        case ADMITTED:
            step_admitted(env, req, st, res);
            break;
        case BUILDING:
            /* A build on the helper thread runs to its end even if the client left: its
             * permit and claim are released only here. */
            if (!atomic_load(&st->job->job.done)) {
                park(res);
                return;
            }
            finish_build(env, req, st, res);
            return;
        }
        /* A step that answered or parked ends this turn; one that moved on goes on. */
        if (res->parked || st->step == before || res->status != 200 || res->body.len > 0 ||
            res->content_type)
            return;
    }
}

/* SPDX-License-Identifier: ISC */
/* The shared machinery of cold reports: see cold_report.h. */
#include "cold_report.h"

#include "admission.h"
#include "answer_cache.h"
#include "clock.h"
#include "dispatch.h"
#include "gate_fifo.h"
#include "log.h"
#include "neighbor_graph.h"
#include "node_hash_sizes.h"
#include "result_body.h"
#include "test_hooks.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define COLD_RETRY_AFTER_S 2

enum step { NEEDS = 0, START, FOLLOW, GATE, ADMITTED, BUILDING };

struct cold_state {
    enum step step;
    char key[MG_CACHE_KEY_MAX];
    bool whole; /* the key fits key */
    bool cached;
    uint64_t build_id;
    int place; /* of a follower */
    int64_t deadline_ns;
    struct mg_gate_pass cold; /* at the cold gate (admission.c) */
    struct mg_cold_build *job;
};

_Static_assert(sizeof(struct cold_state) <= MG_PARK_BYTES, "the state fits a park");

/* On the helper thread, under the permit. */
static void run_build(struct mg_job *job, struct mg_db *db)
{
    struct mg_cold_build *b = (struct mg_cold_build *)job;
    mg_test_hooks_before_work(db, b->hold_ms, 0);
    b->report->build(b, db);
}

static struct mg_outcome *outcome(const struct mg_request *req)
{
    return &req->park->outcome;
}

__attribute__((format(printf, 3, 4))) static void
refuse(const struct mg_request *req, struct mg_response *res, const char *fmt, ...)
{
    char why[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    mg_outcome_decide(outcome(req), MG_GATE_COLD, MG_VERDICT_REFUSED, mg_monotonic_ns());
    mg_response_refuse(res, 429, COLD_RETRY_AFTER_S, why);
}

static void give_up_claim(struct mg_env *env, struct cold_state *st)
{
    if (st->cached && st->build_id) {
        mg_result_cache_abandon(&env->seg->cache, env->pid, st->build_id);
        mg_admission_wake_followers(&mg_gate_cold, env); /* one of them builds it */
    }
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

/*
 * Each step either ends the turn (answered: MG_DONE; waiting: MG_PARK, until its worker is
 * woken, by its helper's job done or a thread free or the build it follows ended, or until
 * its deadline; MG_READMIT_HEAVY) or moves on to the next step in the same turn (MOVED_ON).
 */
#define MOVED_ON ((enum mg_turn) - 1)

static void finish_build(struct mg_env *env, const struct mg_request *req, struct cold_state *st,
                         struct mg_response *res)
{
    struct mg_cold_build *b = st->job;
    /* The permit goes back first, on every path. */
    mg_admission_release(&mg_gate_cold, &st->cold, env, req, 0, 0);
    if (b->result == MG_COLD_OK && !b->body.failed) {
        if (st->cached && st->build_id) {
            mg_result_cache_store(&env->seg->cache, env->pid, st->build_id, b->body.data,
                                  b->body.len, mg_monotonic_ns());
            mg_admission_wake_followers(&mg_gate_cold, env); /* they find it now */
        }
        st->build_id = 0;
        mg_buf_reset(&res->body);
        mg_buf_append(&res->body, b->body.data, b->body.len);
        mg_response_json(res, 200);
    } else {
        give_up_claim(env, st);
        if (b->result == MG_COLD_NOT_FOUND) {
            mg_response_error(res, 404, "%s", b->report->not_found);
        } else if (b->result == MG_COLD_BAD_REQUEST) {
            mg_response_error(res, 400, "%s", b->report->bad_request);
        } else if (b->busy) {
            mg_response_refuse(res, 503, 1, "the database is busy; retry after Retry-After");
        } else {
            mg_log(MG_LOG_ERROR, "%s %s: %s", b->report->name, st->key, b->err);
            mg_response_error(res, 500, "the %s could not be built", b->report->name);
        }
    }
    mg_buf_free(&b->body);
    free(b);
    st->job = NULL;
}

/* The interval a key names ("|@SECONDS:INDEX" at its end, cold_report.h): the prefix that
 * the same report's keys of other intervals share, and the interval; false for a key that
 * names none. */
static bool interval_of(const char *key, char prefix[MG_CACHE_KEY_MAX], int64_t *interval_s)
{
    const char *bar = strrchr(key, '|');
    if (!bar || bar[1] != '@')
        return false;
    char *end;
    long long s = strtoll(bar + 2, &end, 10);
    size_t len = (size_t)(end + 1 - key);
    if (s <= 0 || *end != ':' || len >= MG_CACHE_KEY_MAX)
        return false;
    memcpy(prefix, key, len);
    prefix[len] = '\0';
    *interval_s = s;
    return true;
}

/* Another request builds key: answers the previous answer of the same parameters when one
 * is stored within the bound (cold_report.h), copied as a hit is; false when there is none. */
static bool answer_stale(struct mg_env *env, const struct cold_state *st, struct mg_response *res)
{
    char prefix[MG_CACHE_KEY_MAX];
    int64_t interval_s;
    if (!interval_of(st->key, prefix, &interval_s))
        return false;
    int64_t now = mg_monotonic_ns();
    int64_t bound_s = interval_s * MG_COLD_STALE_INTERVALS;
    if (bound_s > MG_COLD_STALE_MAX_S)
        bound_s = MG_COLD_STALE_MAX_S;
    int64_t oldest = now - bound_s * MG_NS_PER_SEC;
    for (int tries = 0; tries < 3; tries++) {
        struct mg_cache_pin pin;
        int64_t stored;
        if (!mg_result_cache_pin_newest(&env->seg->cache, env->pid, prefix, st->key, oldest, now,
                                        &pin, &stored))
            return false;
        void *dst = mg_buf_reserve(&res->body, pin.len) ? res->body.data + res->body.len : NULL;
        if (!mg_result_cache_copy(&env->seg->cache, env->pid, &pin, dst))
            continue; /* replaced while copied: look again */
        if (!dst)
            return false; /* out of memory: follow the build */
        res->body.len += pin.len;
        mg_cached_bytes_copied_add(pin.len);
        atomic_fetch_add(&env->seg->cache.cache->stale, 1);
        mg_response_json(res, 200);
        mg_response_header(res, "Age: %lld", (long long)((now - stored) / MG_NS_PER_SEC));
        mg_response_header(res, "X-Meshgate-Cache: stale");
        return true;
    }
    return false;
}

/* Whether serving the key now would build it (mg_cold_report_is_heavy). */
static bool would_build(struct mg_env *env, const struct cold_state *st)
{
    return !st->whole || mg_cold_report_is_heavy(env, st->key);
}

/* The group table the build reads, when the request would build: taken, or made on the
 * helper while the request parks (woken when the helper's fetch is done). */
static enum mg_turn step_needs(struct mg_env *env, const struct mg_request *req,
                               struct cold_state *st, const struct mg_cold_report *report,
                               struct mg_response *res)
{
    if (report->needs != MG_COLD_NEEDS_NOTHING && would_build(env, st)) {
        bool pending = false, *busy = env->jobs ? &pending : NULL;
        bool graph = report->needs == MG_COLD_NEEDS_GRAPH;
        int rc = graph ? mg_neighbor_graph_keep(env, (int64_t)time(NULL) * 1000, busy)
                       : mg_node_hash_sizes_keep(env, mg_monotonic_ns(),
                                                 req->start_realtime_ns / 1000000000LL, busy);
        if (pending)
            return mg_park_until(req, 0);
        if (rc != SQLITE_OK) {
            mg_response_db_failure(res, graph ? "the neighbour graph" : "the hash sizes", rc);
            return MG_DONE;
        }
    }
    st->step = START;
    return MOVED_ON;
}

static enum mg_turn step_start(struct mg_env *env, const struct mg_request *req,
                               struct cold_state *st, const struct mg_cold_report *report,
                               struct mg_response *res)
{
    st->place = -1;
    st->cached = env->seg->config->reach_cache_ttl_ms > 0 && st->whole;
    if (!st->cached) {
        st->step = GATE;
        return MOVED_ON;
    }
    enum mg_cache_outcome found =
        mg_result_cache_lookup(&env->seg->cache, env->pid, env->slot, st->key, mg_monotonic_ns(),
                               &res->body, &st->build_id);
    if (found == MG_CACHE_HIT) {
        mg_response_json(res, 200);
        return MG_DONE;
    }
    if (found == MG_CACHE_CLAIMED && !req->signed_in && mg_dispatch_was_light(req->park)) {
        /* Admitted light (its heavy check found the report warm or being built) and now it
         * would build: the key moved in between (a report keyed by the minute, one that
         * expired). Cold work goes through the anonymous line: start over, heavy. */
        give_up_claim(env, st);
        return MG_READMIT_HEAVY;
    }
    if (found == MG_CACHE_CLAIMED) {
        st->step = GATE;
        return MOVED_ON;
    }
    if (answer_stale(env, st, res))
        return MG_DONE;
    st->place = mg_admission_follow(&mg_gate_cold, env, st->key);
    if (st->place < 0) {
        refuse(req, res, "too many %ss are being built; retry after Retry-After", report->name);
        return MG_DONE;
    }
    st->deadline_ns = mg_monotonic_ns() + mg_admission_wait_ns(&mg_gate_cold, env);
    mg_outcome_wait(outcome(req), MG_GATE_COLD, mg_monotonic_ns());
    st->step = FOLLOW;
    return mg_park_until(req, st->deadline_ns);
}

static enum mg_turn step_follow(struct mg_env *env, const struct mg_request *req,
                                struct cold_state *st, const struct mg_cold_report *report,
                                struct mg_response *res)
{
    int64_t now = mg_monotonic_ns();
    enum mg_cache_outcome found = MG_CACHE_BUSY;
    if (!gone(req))
        found = mg_result_cache_relook(&env->seg->cache, env->pid, env->slot, st->key, now,
                                       &res->body, &st->build_id);
    if (found == MG_CACHE_BUSY && !gone(req) && now < st->deadline_ns)
        return mg_park_until(req, st->deadline_ns);
    mg_admission_unfollow(&mg_gate_cold, env, st->place);
    st->place = -1;
    if (found == MG_CACHE_HIT) {
        mg_outcome_decide(outcome(req), MG_GATE_COLD, MG_VERDICT_ADMITTED, now);
        mg_response_json(res, 200);
    } else if (found == MG_CACHE_CLAIMED && !req->signed_in && mg_dispatch_was_light(req->park)) {
        /* It followed as a light request and would now build: that is cold work, which an
         * anonymous request does only through the anonymous line. Start over there. */
        give_up_claim(env, st);
        return MG_READMIT_HEAVY;
    } else if (found == MG_CACHE_CLAIMED) {
        st->step = GATE; /* the build was given up, or its builder died: ours now */
        return MOVED_ON;
    } else if (gone(req))
        answer_gone(req, res);
    else
        refuse(req, res, "the %s is still being built; retry after Retry-After", report->name);
    return MG_DONE;
}

/* The cold gate: a permit at once or after waiting in line (only when a helper can start the
 * build), or refused, in which case nothing will be built and the claim is given up. */
static enum mg_turn step_gate(struct mg_env *env, const struct mg_request *req,
                              struct cold_state *st, const struct mg_cold_report *report,
                              struct mg_response *res)
{
    enum mg_admission_result r =
        mg_admission_pass(&mg_gate_cold, &st->cold, env, req, st->key, report->name, res);
    if (r == MG_ADMISSION_PARKED)
        return MG_PARK;
    if (r == MG_ADMISSION_REFUSED) {
        give_up_claim(env, st);
        return MG_DONE;
    }
    st->step = ADMITTED;
    return MOVED_ON;
}

static enum mg_turn step_admitted(struct mg_env *env, const struct mg_request *req,
                                  struct cold_state *st, const struct mg_cold_report *report,
                                  const void *args, size_t args_len, struct mg_response *res)
{
    if (!st->job) {
        st->job = calloc(1, sizeof *st->job);
        if (!st->job) {
            mg_admission_release(&mg_gate_cold, &st->cold, env, req, 0, 0);
            give_up_claim(env, st);
            mg_response_error(res, 500, "out of memory");
            return MG_DONE;
        }
        st->job->job.run = run_build;
        st->job->job.owner = req->park;
        st->job->job.under_permit = mg_admission_cap(&mg_gate_cold, env) > 0;
        st->job->report = report;
        memcpy(st->job->args, args,
               args_len < sizeof st->job->args ? args_len : sizeof st->job->args);
        st->job->hold_ms = req->test_hold_ms;
        st->job->now_unix = (int64_t)time(NULL);
        mg_buf_init(&st->job->body);
    }
    /* The permit was taken with a thread free, in this same turn, so it takes the build now;
     * should it not, the build waits its turn here. */
    if (!mg_jobs_hand_over(env->jobs, &st->job->job, env->db))
        return mg_park_until(req, 0);
    st->step = BUILDING;
    return MOVED_ON;
}

bool mg_cold_report_is_heavy(struct mg_env *env, const char *key)
{
    if (env->seg->config->reach_cache_ttl_ms <= 0 || strlen(key) >= MG_CACHE_KEY_MAX)
        return true;
    /* Warm, or being built by another request (this one will follow it, parked): light. */
    return !mg_result_cache_warm(&env->seg->cache, env->pid, key, mg_monotonic_ns()) &&
           !mg_result_cache_building(&env->seg->cache, env->pid, key);
}

/* What a parked report keeps for its later turns (mg_park_keep): they continue at its step
 * (serve_step) without its handler, which made key and args on its first turn. */
struct cold_kept {
    const struct mg_cold_report *report;
    size_t args_len;
    unsigned char args[MG_COLD_ARGS_BYTES];
};

static enum mg_turn serve(struct mg_env *env, const struct mg_request *req, struct mg_response *res,
                          const struct mg_cold_report *report, const char *key, const void *args,
                          size_t args_len);

/* A later turn of a parked report, at the step it parked in (mg_park_at). */
static enum mg_turn serve_step(struct mg_env *env, const struct mg_request *req,
                               struct mg_response *res)
{
    const struct cold_kept *k = req->park->kept;
    const struct cold_state *st = (const struct cold_state *)req->park->state;
    return serve(env, req, res, k->report, st->key, k->args, k->args_len);
}

enum mg_turn mg_cold_report_serve(struct mg_env *env, const struct mg_request *req,
                                  struct mg_response *res, const struct mg_cold_report *report,
                                  const char *key, const void *args, size_t args_len)
{
    enum mg_turn turn = serve(env, req, res, report, key, args, args_len);
    if (turn != MG_PARK || req->park->resume == serve_step)
        return turn;
    /* Parked: its later turns continue at its step, from a copy of its report and args
     * (without memory, its handler is entered again and gives them anew). */
    struct cold_kept *k = mg_park_keep(req, sizeof *k, NULL);
    if (!k)
        return turn;
    k->report = report;
    k->args_len = args_len < sizeof k->args ? args_len : sizeof k->args;
    memcpy(k->args, args, k->args_len);
    return mg_park_at(req, serve_step, req->park->wait.until_ns);
}

static enum mg_turn serve(struct mg_env *env, const struct mg_request *req, struct mg_response *res,
                          const struct mg_cold_report *report, const char *key, const void *args,
                          size_t args_len)
{
    struct cold_state *st = (struct cold_state *)req->park->state;
    if (st->step == NEEDS && key != st->key) { /* its first turn: the handler's key */
        st->whole = strlen(key) < sizeof st->key;
        snprintf(st->key, sizeof st->key, "%s", key);
    }
    enum mg_turn turn = MOVED_ON;
    while (turn == MOVED_ON) {
        switch (st->step) {
        case NEEDS:
            turn = step_needs(env, req, st, report, res);
            break;
        case START:
            turn = step_start(env, req, st, report, res);
            break;
        case FOLLOW:
            turn = step_follow(env, req, st, report, res);
            break;
        case GATE:
            turn = step_gate(env, req, st, report, res);
            break;
        case ADMITTED:
            turn = step_admitted(env, req, st, report, args, args_len, res);
            break;
        case BUILDING:
            /* A build on the helper thread runs to its end even if the client left: its
             * permit and claim are released only here. */
            if (!atomic_load(&st->job->job.done))
                return mg_park_until(req, 0);
            finish_build(env, req, st, res);
            return MG_DONE;
        }
    }
    /* Admitted again, heavy: the next call starts over (dispatch zeroes the state). */
    return turn;
}

void mg_cold_result(struct mg_cold_build *b, int rc, const char *what)
{
    b->result = rc == SQLITE_OK ? MG_COLD_OK : MG_COLD_ERROR;
    b->busy = (rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED;
    if (rc != SQLITE_OK)
        snprintf(b->err, sizeof b->err, "reading %s failed: %s", what, sqlite3_errstr(rc));
}

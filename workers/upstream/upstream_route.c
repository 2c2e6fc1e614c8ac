/* SPDX-License-Identifier: ISC */
/*
 * upstream_route: admission of requests for the upstream, run by dispatch as the handler of
 * the "(upstream)" route, before the engine (upstream.c) takes the connection:
 *
 *   1. the request's framing (upstream_http.h): refused with 400, 411 or 413 before
 *      anything reaches the upstream;
 *   2. the breaker (shm/breaker.h): while it is open, 502 at once with Retry-After;
 *   3. a WebSocket handshake takes one of its address's MESHGATE_UPSTREAM_WEBSOCKETS_PER_CLIENT
 *      (counted in the connection table, shm/conn_limit.h) and a tunnel of
 *      MESHGATE_UPSTREAM_WEBSOCKETS (503 past either) and no permit of the gate (a tunnel
 *      lasts as long as the page is open, bounded by MESHGATE_UPSTREAM_TUNNEL_IDLE_MS);
 *   4. anything else takes a permit of the upstream's FIFO gate (shm/upstream_gate.h), or
 *      waits for one parked, fair between addresses and oldest first within one; a full line
 *      or a wait past MESHGATE_UPSTREAM_WAIT_MS is 503 with Retry-After: 1. An anonymous
 *      request's permit or place counts in its address's share (MESHGATE_ANON_PER_CLIENT,
 *      503 at once past it) and in the permits anonymous requests may hold (the cap less
 *      the signed-in reserve). The gate is a description of the admission module
 *      (mg_gate_upstream, admission.c), passed like every other; its permit is then handed
 *      over to the engine.
 *
 * Heavy routes (MESHGATE_UPSTREAM_HEAVY) of anonymous clients have passed the rate limit in
 * dispatch before this runs; signed-in clients skip it. No request for the upstream meets the
 * anonymous line: its permits are builds on the anonymous helper, and one that takes seconds
 * never holds an exchange with the upstream. What was taken is written into the park (struct
 * ticket) and given back by the engine when the exchange ends, or here on a refusal.
 */
#include "upstream.h"

#include "admission.h"
#include "clock.h"
#include "conn_limit.h"
#include "gate_fifo.h"
#include "netaddr.h"
#include "stats.h"
#include "upstream_gate.h"
#include "upstream_http.h"
#include "upstream_ticket.h"

#include <stdio.h>
#include <string.h>

#define UPSTREAM_RETRY_AFTER_S 1

enum {
    STEP_NEW = 0, /* not asked yet */
    STEP_GATE,    /* at the upstream's gate (admission.c: mg_gate_upstream) */
    STEP_ADMITTED,
};

bool mg_upstream_applies(const struct mg_config *cfg, const struct mg_http_request *hr,
                         bool native_route, bool static_route)
{
    if (!cfg->upstream[0] || native_route)
        return false;
    /* A WebSocket handshake goes up on any path; static files keep GET and HEAD. */
    if (mg_upstream_is_websocket(hr))
        return true;
    return !static_route || hr->method_id == MG_METHOD_OTHER;
}

/* A '*' in a prefix matches one path segment. */
static bool prefix_matches(const char *prefix, size_t n, const char *path)
{
    size_t i = 0;
    while (i < n) {
        if (prefix[i] == '*') {
            while (*path && *path != '/')
                path++;
            i++;
            continue;
        }
        if (*path != prefix[i])
            return false;
        path++, i++;
    }
    return true;
}

bool mg_upstream_is_heavy(const struct mg_config *cfg, const char *path)
{
    const char *p = cfg->upstream_heavy;
    while (*p) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t n = strcspn(p, ", ");
        if (n > 0 && prefix_matches(p, n, path))
            return true;
        p += n;
    }
    return false;
}

bool mg_upstream_prefers(const struct mg_config *cfg, const char *route_template)
{
    if (!cfg->upstream[0])
        return false;
    size_t len = strlen(route_template);
    for (const char *p = cfg->upstream_prefer; *p;) {
        size_t n = strcspn(p, ", ");
        if (n > 0 && n == len && memcmp(p, route_template, n) == 0)
            return true;
        p += n;
        p += strspn(p, ", ");
    }
    return false;
}

static void give_back(struct mg_env *env, struct mg_upstream_ticket *t)
{
    if (t->tunnel)
        mg_admission_tunnel_close(env);
    t->tunnel = false;
    mg_upstream_tunnel_share_give_back(env, t);
}

void mg_upstream_tunnel_share_give_back(const struct mg_env *env, struct mg_upstream_ticket *t)
{
    if (t->share_hold_plus_one == 0)
        return;
    mg_admission_tunnel_share_close(env, t->share_hold_plus_one - 1);
    t->share_hold_plus_one = 0;
}

/* A tunnel counted in its client's share (MESHGATE_UPSTREAM_WEBSOCKETS_PER_CLIENT) as well
 * as in the group's cap; false (nothing taken) when its client holds its share. A
 * connection the table does not count (a trusted proxy, a local socket) has no share. */
static bool tunnel_share_take(struct mg_env *env, const struct mg_request *req,
                              struct mg_upstream_ticket *t)
{
    uint32_t share = (uint32_t)env->cfg->upstream_websockets_per_client;
    if (share == 0 || req->conn_hold_plus_one == 0)
        return true;
    if (!mg_admission_tunnel_share_open(env, req->conn_hold_plus_one - 1, share))
        return false;
    t->share_hold_plus_one = req->conn_hold_plus_one;
    return true;
}

/* What the gate's records show of a request: "METHOD path". */
static void line_key(const struct mg_request *req, char *who, size_t cap)
{
    const struct mg_str *m = &req->http->method;
    snprintf(who, cap, "%.*s %s", m->len > 8 ? 8 : (int)m->len, m->ptr, req->path);
}

enum mg_turn mg_upstream_handle(struct mg_env *env, const struct mg_request *req,
                                struct mg_response *res)
{
    struct mg_upstream_ticket *t = mg_upstream_ticket_of(req->park);
    const struct mg_http_request *hr = req->http;
    int64_t now = mg_monotonic_ns();
    if (t->step == STEP_NEW) {
        const char *why = NULL;
        int status = mg_upstream_request_check(hr, env->cfg->upstream_max_body_bytes, &why);
        if (status) {
            mg_counter_add(env->seg, MG_CTR_UPSTREAM_REFUSED_AMBIGUOUS, 1);
            mg_response_error(res, status, "%s", why);
            res->close = true; /* its body, if any, is not read */
            return MG_DONE;
        }
        int64_t retry_ns = 0;
        if (mg_admission_breaker_allow(env, now, &retry_ns) == MG_BREAKER_REFUSE) {
            mg_counter_add(env->seg, MG_CTR_UPSTREAM_502, 1);
            mg_outcome_decide(&req->park->outcome, MG_GATE_BREAKER, MG_VERDICT_REFUSED, now);
            int retry_s = (int)((retry_ns + MG_NS_PER_SEC - 1) / MG_NS_PER_SEC);
            mg_response_refuse(res, 502, retry_s < 1 ? 1 : retry_s,
                               "the upstream is failing: its breaker is open; retry after "
                               "Retry-After");
            res->close = hr->content_length > 0;
            return MG_DONE;
        }
        if (mg_upstream_is_websocket(hr)) {
            if (!tunnel_share_take(env, req, t)) {
                give_back(env, t);
                mg_counter_add(env->seg, MG_CTR_UPSTREAM_TUNNELS_OVER_SHARE, 1);
                mg_response_refuse(res, 503, UPSTREAM_RETRY_AFTER_S,
                                   "this address holds its share of WebSocket connections "
                                   "(MESHGATE_UPSTREAM_WEBSOCKETS_PER_CLIENT); retry after "
                                   "Retry-After");
                return MG_DONE;
            }
            if (!mg_admission_tunnel_open(env)) {
                give_back(env, t);
                mg_counter_add(env->seg, MG_CTR_UPSTREAM_TUNNELS_REFUSED, 1);
                mg_response_refuse(res, 503, UPSTREAM_RETRY_AFTER_S,
                                   "too many WebSocket connections are open; retry after "
                                   "Retry-After");
                return MG_DONE;
            }
            t->tunnel = true;
            t->step = STEP_ADMITTED;
            return MG_UPSTREAM;
        }
        if (env->seg->upstream->gate.cap == 0) {
            t->step = STEP_ADMITTED;
            return MG_UPSTREAM;
        }
        line_key(req, t->who, sizeof t->who);
        if (!req->signed_in)
            mg_admission_upstream_share(env, req, &t->pass);
        t->step = STEP_GATE;
    }
    if (t->step == STEP_GATE) {
        /* An anonymous request tries the gate only with a claim on the anonymous permits:
         * without one it keeps its place, passed over, and the reserve stays for signed-in
         * clients (shm/upstream_gate.h). */
        bool anonymous = !req->signed_in;
        t->anon_claim = !anonymous || mg_admission_upstream_anon_claim(env);
        t->pass.held_back = !t->anon_claim;
        enum mg_admission_result r =
            mg_admission_pass(&mg_gate_upstream, &t->pass, env, req, t->who, NULL, res);
        t->anon_claim = t->anon_claim && anonymous;
        if (r != MG_ADMISSION_RUN && t->anon_claim) {
            mg_admission_upstream_anon_unclaim(env);
            t->anon_claim = false;
        }
        if (r == MG_ADMISSION_PARKED)
            return MG_PARK;
        if (r == MG_ADMISSION_REFUSED) {
            give_back(env, t);
            t->step = STEP_NEW;
            res->close = res->close || hr->content_length > 0; /* its body is not read */
            return MG_DONE;
        }
        t->gate_token = mg_admission_hand_over(&t->pass);
        t->gate_held = true;
        t->step = STEP_ADMITTED;
    }
    return MG_UPSTREAM; /* admitted: the engine takes it */
}

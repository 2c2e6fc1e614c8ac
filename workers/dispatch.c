/* SPDX-License-Identifier: ISC */
#include "dispatch.h"

#include "client_limit.h"
#include "clock.h"
#include "gate_fifo.h"
#include "jobs.h"
#include "keys.h"
#include "netaddr.h"
#include "reclaim.h"
#include "router.h"
#include "scoreboard.h"
#include "static_files.h"
#include "stats.h"
#include "upstream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

bool mg_dispatch_buffers_init(struct mg_dispatch_buffers *b, const struct mg_config *cfg)
{
    b->path_cap = (size_t)cfg->max_uri_bytes + 1;
    b->query_cap = (size_t)cfg->max_uri_bytes * 2 + 2;
    b->path = malloc(b->path_cap);
    b->query = malloc(b->query_cap);
    return b->path && b->query;
}

void mg_dispatch_buffers_free(struct mg_dispatch_buffers *b)
{
    free(b->path);
    free(b->query);
    memset(b, 0, sizeof *b);
}

/*
 * Admission of heavy requests, before their handler runs (and so before any gate of the
 * handler's own, such as the cold-scan gate of reach reports):
 *
 *   light       never touches the rate table or the line;
 *   signed in   skips both: never waits in the line, never refused by it (counted bypassed);
 *   anonymous   first the per-client rate limit (429 with Retry-After: the seconds until
 *               the next request of that client would pass, rounded up), then the line: a
 *               permit, or a place in it (parked: the request holds no worker while it
 *               waits), or 503 when the line is full; a place that waits past the bound is
 *               given up with 503. Both 503s carry Retry-After: 1 and no-store.
 *
 * The state lives in the request's park (req->park->admission), next to the handler's own,
 * so a parked request resumes where it was. A permit is given back when the handler has
 * answered (not while it is parked: a reach build keeps it), on every path; a worker that
 * dies holding one is reclaimed by the master after waitpid (shm/reclaim.c).
 */
enum {
    ADMIT_NEW = 0, /* not decided yet: the first turn */
    ADMIT_LIGHT,   /* not heavy: nothing to take */
    ADMIT_BYPASS,  /* heavy, signed in */
    ADMIT_OFF,     /* heavy, anonymous, the line disabled (MESHGATE_ANON_CONCURRENCY=0) */
    ADMIT_QUEUED,  /* waiting in the line */
    ADMIT_HELD,    /* holds a permit */
    ADMIT_DONE,    /* the permit is back */
};

#define LINE_RETRY_AFTER_S 1

bool mg_request_client(const struct mg_config *cfg, const struct mg_http_request *hr,
                       const uint8_t peer[MG_ADDR_BYTES], uint8_t addr[MG_ADDR_BYTES])
{
    struct mg_xff_part parts[8];
    size_t n = 0;
    if (cfg->trusted_proxies.count > 0)
        for (size_t i = 0; i < hr->header_count && n < sizeof parts / sizeof parts[0]; i++)
            if (hr->headers[i].name.len == 15 &&
                strncasecmp(hr->headers[i].name.ptr, "X-Forwarded-For", 15) == 0)
                parts[n++] =
                    (struct mg_xff_part){hr->headers[i].value.ptr, hr->headers[i].value.len};
    return mg_client_address(peer, parts, n, &cfg->trusted_proxies, addr);
}

static void refuse_line(struct mg_response *res, const char *why)
{
    mg_response_refuse(res, 503, LINE_RETRY_AFTER_S, why);
}

/* True when the handler may run now; false when res holds the answer or is parked. */
static bool admit(struct mg_env *env, struct mg_request *req, unsigned route,
                  struct mg_response *res)
{
    struct mg_admission *a = &req->park->admission;
    struct mg_outcome *o = &req->park->outcome;
    struct mg_fifo_gate *line = env->seg->anon;
    if (a->step == ADMIT_NEW) {
        if (!mg_route_is_heavy(route, env, req)) {
            a->step = ADMIT_LIGHT;
            return true;
        }
        if (req->signed_in) {
            mg_counter_add(env->seg, MG_CTR_ANON_BYPASSED, 1);
            a->step = ADMIT_BYPASS;
            o->verdict = MG_VERDICT_BYPASSED;
            return true;
        }
        uint8_t addr[MG_ADDR_BYTES], key[MG_ADDR_BYTES];
        mg_request_client(env->cfg, req->http, req->peer, addr);
        mg_client_key(addr, key);
        int64_t retry_ns = 0;
        if (!mg_client_limit_take(&env->seg->clients, env->pid, key, mg_monotonic_ns(),
                                  &retry_ns)) {
            mg_counter_add(env->seg, MG_CTR_ANON_RATE_LIMITED, 1);
            mg_outcome_decide(o, MG_GATE_RATE_LIMIT, MG_VERDICT_REFUSED, mg_monotonic_ns());
            mg_response_refuse(res, 429, mg_client_limit_retry_after_s(retry_ns),
                               "too many heavy requests from this address; retry after "
                               "Retry-After");
            return false;
        }
        if (line->cap == 0) {
            mg_outcome_decide(o, MG_GATE_RATE_LIMIT, MG_VERDICT_ADMITTED, mg_monotonic_ns());
            a->step = ADMIT_OFF;
            return true;
        }
        /* The record names who waits: the client and the path, for the dump tool. */
        _Static_assert(sizeof a->who <= MG_FIFO_KEY_MAX, "who fits a record's key");
        mg_addr_format(addr, a->who, sizeof a->who);
        size_t used = strlen(a->who);
        snprintf(a->who + used, sizeof a->who - used, " %s", req->path);
        int r =
            mg_fifo_gate_join(line, env->pid, env->slot, a->who, &a->token, &a->place, &a->ticket);
        if (r == MG_FIFO_ADMITTED) {
            mg_outcome_decide(o, MG_GATE_ANON_LINE, MG_VERDICT_ADMITTED, mg_monotonic_ns());
            a->step = ADMIT_HELD;
            return true;
        }
        if (r == MG_FIFO_QUEUED) {
            a->deadline_ns = mg_monotonic_ns() + line->wait_ns;
            mg_outcome_wait(o, MG_GATE_ANON_LINE, mg_monotonic_ns());
            a->step = ADMIT_QUEUED;
            res->parked = true;
            return false;
        }
        mg_outcome_decide(o, MG_GATE_ANON_LINE, MG_VERDICT_REFUSED, mg_monotonic_ns());
        refuse_line(res, "the line for anonymous heavy requests is full; retry after "
                         "Retry-After, or sign in with an API key");
        return false;
    }
    if (a->step == ADMIT_QUEUED) {
        if (req->client_gone && req->client_gone(req->client_gone_arg)) {
            mg_fifo_gate_cancel(line, env->pid, a->place, a->ticket);
            mg_outcome_decide(o, MG_GATE_ANON_LINE, MG_VERDICT_REFUSED, mg_monotonic_ns());
            a->step = ADMIT_DONE;
            refuse_line(res, "the client went away");
            res->close = true;
            return false;
        }
        int r = mg_fifo_gate_poll(line, env->pid, env->slot, a->who, a->place, a->ticket,
                                  mg_monotonic_ns(), a->deadline_ns, &a->token);
        if (r == MG_FIFO_QUEUED) {
            res->parked = true;
            return false;
        }
        if (r == MG_FIFO_ADMITTED) {
            mg_outcome_decide(o, MG_GATE_ANON_LINE, MG_VERDICT_ADMITTED, mg_monotonic_ns());
            a->step = ADMIT_HELD;
            return true;
        }
        mg_outcome_decide(o, MG_GATE_ANON_LINE, MG_VERDICT_REFUSED, mg_monotonic_ns());
        a->step = ADMIT_DONE;
        refuse_line(res, "the wait in the line for anonymous heavy requests ran out; retry "
                         "after Retry-After, or sign in with an API key");
        return false;
    }
    return true;
}

/*
 * Tests only. With MESHGATE_TEST_HOOKS=park or block in the worker's environment, a heavy
 * request that carries "X-Test-Hold-Ms: N" (at most 30000) is held N ms after its admission,
 * with whatever admission gave it, before its handler runs: parked (its worker goes on
 * serving), or blocking its worker as a long scan would. Work that runs on a helper thread
 * is held there instead: a reach report inside its build (ep_reach.c), so that it holds its
 * cold permit, and an anonymous heavy request inside its job (below), keeping its helper busy. This
 * is how the tests make heavy work last without locking the database, which light requests need
 * too. Without the variable the header means nothing.
 */
static bool test_hold(struct mg_env *env, struct mg_request *req, unsigned route,
                      struct mg_response *res)
{
    struct mg_admission *a = &req->park->admission;
    if (env->test_hooks == MG_TEST_HOOKS_OFF || a->step == ADMIT_LIGHT)
        return true;
    const struct mg_str *h = mg_http_header_get(req->http, "X-Test-Hold-Ms");
    int ms = 0;
    for (size_t i = 0; h && i < h->len && i < 6 && h->ptr[i] >= '0' && h->ptr[i] <= '9'; i++)
        ms = ms * 10 + (h->ptr[i] - '0');
    ms = ms > 30000 ? 30000 : ms;
    req->test_hold_ms = ms;
    /* Held on a helper instead: a reach report inside its build, an anonymous request run
     * on the anonymous helper inside its job. */
    if (route >= mg_route_table_len)
        return true; /* the upstream: the test upstream is slow on its own */
    bool on_helper = mg_routes[route].handler == mg_handle_reach ||
                     (env->anon_jobs && (a->step == ADMIT_HELD || a->step == ADMIT_OFF) &&
                      !mg_routes[route].own_jobs);
    if (ms == 0 || on_helper)
        return true;
    int64_t now = mg_monotonic_ns();
    if (a->hold_until_ns == 0)
        a->hold_until_ns = now + (int64_t)ms * MG_NS_PER_MS;
    if (env->test_hooks == MG_TEST_HOOKS_BLOCK) {
        while (now < a->hold_until_ns) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
            now = mg_monotonic_ns();
            mg_scoreboard_beat(); /* as a long scan does, from SQLite's progress handler */
        }
        return true;
    }
    if (now < a->hold_until_ns) {
        res->parked = true;
        return false;
    }
    return true;
}

/*
 * Tests only. With MESHGATE_TEST_HOOKS set, a request that carries "X-Test-Stop-In-Lock: PART"
 * (anon, cold, diag, cache or clients: shm/reclaim.h) stops its whole worker (SIGSTOP) the
 * next time this thread takes that part's lock while serving it, inside the critical
 * section: how the tests freeze a worker in a shared lock (docs/architecture.md).
 */
static void test_stop_in_lock(struct mg_env *env, struct mg_request *req)
{
    if (env->test_hooks == MG_TEST_HOOKS_OFF || req->park->turns > 1)
        return;
    const struct mg_str *h = mg_http_header_get(req->http, "X-Test-Stop-In-Lock");
    char part[16];
    const void *lo, *hi;
    if (h && h->len < sizeof part) {
        memcpy(part, h->ptr, h->len);
        part[h->len] = '\0';
        if (mg_segment_lock_range(env->seg, part, &lo, &hi))
            mg_lock_test_stop_inside(lo, hi);
    }
}

/*
 * Anonymous heavy work runs on the worker's anonymous helper thread, at a lower CPU priority
 * (MESHGATE_ANON_NICE): the loop stays free for light and signed-in requests on its other
 * connections, and a flood of anonymous scans yields the CPU to them. Routes whose handler
 * puts its heavy part on a helper itself (own_jobs) get the anonymous helper as env->jobs;
 * the others (/api/packets) are run whole there, on a copy of the request: the head's bytes
 * stay where they are (a parked connection is not read, and the worker stops its helpers
 * before it closes connections), the decoded path and query are copied out of the worker's
 * dispatch buffers, which the next request reuses.
 */
struct mg_handler_job {
    struct mg_job job; /* first: the thread hands this pointer back */
    mg_handler_fn handler;
    struct mg_env env;
    struct mg_http_request http;
    struct mg_request req;
    struct mg_park park;
    struct mg_response res;
    int hold_ms; /* tests only */
    char *path;
    char *query;
};

static void run_handler_job(struct mg_job *job, struct mg_db *db)
{
    struct mg_handler_job *h = (struct mg_handler_job *)job;
    if (h->hold_ms > 0) {
        struct timespec ts = {h->hold_ms / 1000, (long)(h->hold_ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) < 0)
            ;
    }
    h->env.db = db;
    h->handler(&h->env, &h->req, &h->res);
    if (h->res.parked) { /* not for a handler that parks: it must have its own jobs */
        mg_response_reset(&h->res);
        mg_response_error(&h->res, 500, "the request could not be handled");
    }
}

static void handler_job_free(struct mg_handler_job *h)
{
    if (!h)
        return;
    mg_response_free(&h->res);
    free(h->path);
    free(h->query);
    free(h);
}

static struct mg_handler_job *handler_job_new(const struct mg_env *env,
                                              const struct mg_request *req,
                                              const struct mg_dispatch_buffers *b,
                                              mg_handler_fn handler)
{
    struct mg_handler_job *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->path = strdup(req->path);
    h->query = malloc(b->query_cap);
    if (!h->path || !h->query) {
        handler_job_free(h);
        return NULL;
    }
    memcpy(h->query, b->query, b->query_cap);
    h->job.run = run_handler_job;
    h->handler = handler;
    h->env = *env;
    h->env.jobs = h->env.anon_jobs = NULL; /* the handler runs there already */
    h->http = *req->http;
    h->req = *req;
    h->req.http = &h->http;
    h->req.path = h->path;
    for (size_t i = 0; i < h->req.query.count; i++) {
        struct mg_query_param *p = &h->req.query.param[i];
        p->name = h->query + (p->name - b->query);
        p->value = h->query + (p->value - b->query);
    }
    h->req.client_gone = NULL;
    h->req.park = &h->park;
    h->hold_ms = req->test_hold_ms;
    mg_response_init(&h->res);
    return h;
}

/* Runs the handler on the anonymous helper over the turns of the loop; true when res holds
 * its answer, false when the request is parked meanwhile. */
static bool offload(struct mg_env *env, struct mg_request *req, const struct mg_dispatch_buffers *b,
                    mg_handler_fn handler, struct mg_response *res)
{
    struct mg_admission *a = &req->park->admission;
    if (!a->job) {
        a->job = handler_job_new(env, req, b, handler);
        if (!a->job) {
            mg_response_error(res, 500, "out of memory");
            return true;
        }
    }
    struct mg_handler_job *h = a->job;
    if (!a->submitted)
        a->submitted = mg_jobs_submit(env->anon_jobs, &h->job);
    if (!a->submitted || !atomic_load(&h->job.done)) {
        res->parked = true;
        return false;
    }
    res->status = h->res.status;
    res->content_type = h->res.content_type;
    res->no_store = h->res.no_store;
    res->close = res->close || h->res.close;
    struct mg_buf swap = res->body;
    res->body = h->res.body;
    h->res.body = swap;
    swap = res->headers;
    res->headers = h->res.headers;
    h->res.headers = swap;
    handler_job_free(h);
    a->job = NULL;
    return true;
}

/*
 * How long a statement on the worker's loop waits for a writer's lock. A light request waits
 * at most MG_LIGHT_BUSY_TIMEOUT_MS and then answers 503 with Retry-After, so a writer holding
 * an exclusive lock (a rollback-journal database, locking_mode=EXCLUSIVE, a TRUNCATE
 * checkpoint) holds no loop for the whole MESHGATE_DB_BUSY_TIMEOUT_MS; heavy work (on the
 * helper threads, whose connections keep it, or signed-in on the loop) waits that long.
 */
static void set_busy_wait(struct mg_env *env, bool light)
{
    int ms = env->cfg->db_busy_timeout_ms;
    if (light && ms > MG_LIGHT_BUSY_TIMEOUT_MS)
        ms = MG_LIGHT_BUSY_TIMEOUT_MS;
    if (env->db && env->db->conn && env->db->busy_timeout_ms != ms) {
        mg_db_set_busy_timeout(env->db, ms);
    }
}

/* Whether the request will go to the upstream, judged before the credentials are. */
static bool upstream_bound(struct mg_env *env, const struct mg_http_request *hr,
                           const struct mg_dispatch_buffers *b)
{
    char param[MG_PATH_PARAM_MAX];
    bool native = !mg_path_has_encoded_slash(&hr->path) &&
                  mg_route_match(b->path, param, sizeof param) != MG_ROUTE_NOT_FOUND;
    return mg_upstream_applies(env->cfg, hr, native, mg_static_applies(env->cfg, b->path));
}

unsigned mg_dispatch(struct mg_env *env, struct mg_request *req, struct mg_dispatch_buffers *b,
                     struct mg_response *res)
{
    const struct mg_http_request *hr = req->http;
    const char *why = NULL;
    /* With an upstream, what no native route answers goes there, whatever its method or
     * body: those checks wait for the route (mg_upstream_applies). */
    bool upstream = env->cfg->upstream[0] != '\0';
    if (!upstream && hr->method_id == MG_METHOD_OTHER) {
        mg_response_error(res, 405, "method %.*s is not allowed: use GET or HEAD",
                          (int)(hr->method.len > 32 ? 32 : hr->method.len), hr->method.ptr);
        mg_response_header(res, "Allow: GET, HEAD");
        /* A body we do not read would be taken for the next request. */
        res->close = hr->content_length > 0 || hr->chunked;
        return MG_ROUTE_BAD_REQUEST;
    }
    if (!upstream && (hr->content_length > 0 || hr->chunked)) {
        mg_response_error(res, 413, "GET and HEAD requests must not carry a body");
        res->close = true;
        return MG_ROUTE_BAD_REQUEST;
    }
    if (hr->path.len >= b->path_cap || hr->query.len * 2 + 2 > b->query_cap) {
        mg_response_error(res, 414, "the request target is too long");
        return MG_ROUTE_BAD_REQUEST;
    }
    if (mg_url_decode(hr->path.ptr, hr->path.len, b->path, b->path_cap, false) < 0) {
        mg_response_error(res, 400, "the request path has a malformed percent-escape or a NUL");
        return MG_ROUTE_BAD_REQUEST;
    }
    if (mg_query_parse(&req->query, hr->query.ptr, hr->query.len, b->query, b->query_cap, &why) <
        0) {
        mg_response_error(res, 400, "%s", why ? why : "the query string is malformed");
        return MG_ROUTE_BAD_REQUEST;
    }
    /* Credentials: a key that is presented must be valid (never a silent downgrade to
     * anonymous). Only the Bearer scheme and X-API-Key count; the key is never logged. */
    const struct mg_str *auth = mg_http_header_get(hr, "Authorization");
    const struct mg_str *api_key = mg_http_header_get(hr, "X-API-Key");
    const char *key = NULL;
    size_t key_len = 0;
    if (auth && auth->len >= 6 && strncasecmp(auth->ptr, "Bearer", 6) == 0 &&
        (auth->len == 6 || auth->ptr[6] == ' ' || auth->ptr[6] == '\t')) {
        /* "Bearer" with no token is a credential that is not valid, not an anonymous
         * request: key is then empty, and no key matches it. */
        key = auth->ptr + 6;
        key_len = auth->len - 6;
        while (key_len && (*key == ' ' || *key == '\t'))
            key++, key_len--;
    } else if (api_key) {
        key = api_key->ptr;
        key_len = api_key->len;
    }
    req->park->outcome.key_number = 0;
    if (key) {
        int index = key_len ? mg_keys_find(&mg_api_keys, key, key_len) : -1;
        /* A key meshgate does not know, on a request for the upstream, may be the
         * upstream's own (CoreScope's X-API-Key): it goes up, and here it is anonymous. */
        if (index < 0 && upstream && upstream_bound(env, hr, b))
            key = NULL;
        else if (index < 0) {
            mg_counter_add(env->seg, MG_CTR_UNAUTHORIZED, 1);
            mg_response_error(res, 401, "the API key is not valid");
            mg_response_header(res, "WWW-Authenticate: Bearer realm=\"meshgate\", "
                                    "error=\"invalid_token\"");
            return MG_ROUTE_BAD_REQUEST;
        }
        if (key) {
            req->signed_in = true;
            req->park->outcome.key_number = (uint16_t)(index + 1);
            if (req->park->turns <= 1) /* a parked request is dispatched again on each turn */
                mg_counter_add(env->seg, MG_CTR_SIGNED_IN, 1);
        }
    }
    req->path = b->path;
    uint8_t client[MG_ADDR_BYTES];
    mg_request_client(env->cfg, hr, req->peer, client);
    req->admin = req->signed_in || mg_cidr_list_contains(&env->cfg->admin_networks, client);
    /* An encoded slash is part of a segment, not a separator: decoded, "/api%2Fhealthz"
     * would read as "/api/healthz", so a path that holds one matches no route (static files
     * refuse it on their own, with 400). */
    unsigned route = mg_path_has_encoded_slash(&hr->path)
                         ? MG_ROUTE_NOT_FOUND
                         : mg_route_match(b->path, req->path_param, sizeof req->path_param);
    /* The admin pages do not exist for anyone else: the path goes on as any unknown one. */
    if (route != MG_ROUTE_NOT_FOUND && mg_routes[route].admin_only && !req->admin)
        route = MG_ROUTE_NOT_FOUND;
    mg_handler_fn handler;
    if (upstream && mg_upstream_applies(env->cfg, hr, route != MG_ROUTE_NOT_FOUND,
                                        mg_static_applies(env->cfg, b->path))) {
        route = MG_ROUTE_UPSTREAM;
        handler = mg_upstream_handle;
    } else if (upstream && (hr->method_id == MG_METHOD_OTHER || hr->content_length > 0)) {
        /* A native route (or a static file): the checks skipped above. */
        if (hr->method_id == MG_METHOD_OTHER) {
            mg_response_error(res, 405, "method %.*s is not allowed: use GET or HEAD",
                              (int)(hr->method.len > 32 ? 32 : hr->method.len), hr->method.ptr);
            mg_response_header(res, "Allow: GET, HEAD");
        } else {
            mg_response_error(res, 413, "GET and HEAD requests must not carry a body");
        }
        res->close = hr->content_length > 0 || hr->chunked;
        return MG_ROUTE_BAD_REQUEST;
    } else if (route != MG_ROUTE_NOT_FOUND) {
        handler = mg_routes[route].handler;
    } else if (mg_static_applies(env->cfg, b->path)) {
        route = MG_ROUTE_STATIC;
        handler = mg_static_serve;
    } else {
        mg_response_error(res, 404, "Not found");
        return route;
    }
    struct mg_slot *slot = mg_slot_get(env->seg, env->slot);
    char shown[MG_SLOT_PATH_MAX];
    snprintf(shown, sizeof shown, "%.*s", (int)hr->path.len, hr->path.ptr);
    if (slot) {
        mg_slot_set_client(slot, req->client_addr);
        mg_slot_begin_request(slot,
                              hr->method_id == MG_METHOD_HEAD  ? "HEAD"
                              : hr->method_id == MG_METHOD_GET ? "GET"
                                                               : "OTHER",
                              shown, req->start_monotonic_ns);
    }
    test_stop_in_lock(env, req);
    struct mg_admission *a = &req->park->admission;
    if (admit(env, req, route, res) && test_hold(env, req, route, res)) {
        set_busy_wait(env, a->step == ADMIT_LIGHT);
        bool anonymous_heavy = a->step == ADMIT_HELD || a->step == ADMIT_OFF;
        if (!anonymous_heavy || !env->anon_jobs || route == MG_ROUTE_UPSTREAM) {
            handler(env, req, res);
        } else if (mg_routes[route].own_jobs) {
            struct mg_env anon_env = *env;
            anon_env.jobs = env->anon_jobs;
            handler(&anon_env, req, res);
        } else {
            offload(env, req, b, handler, res);
        }
    }
    if (res->readmit) {
        res->readmit = false;
        if (res->parked && a->step == ADMIT_LIGHT)
            a->step = ADMIT_NEW;
    }
    if (a->step == ADMIT_HELD && !res->parked) {
        /* A request for the upstream keeps its permit until its response is relayed. */
        if (res->upstream)
            mg_upstream_keep_anon_permit(req->park, a->token);
        else
            mg_fifo_gate_release(env->seg->anon, env->pid, a->token);
        a->step = ADMIT_DONE;
    }
    /* A parked request is still in flight (waiting in a line, or worked on by a helper): the
     * scoreboard goes on showing it until it is answered. */
    if (slot && !res->parked)
        mg_slot_end_request(slot);
    mg_lock_test_stop_inside(NULL, NULL);
    return route;
}

bool mg_dispatch_was_light(const struct mg_park *park)
{
    return park->admission.step == ADMIT_LIGHT;
}

/* SPDX-License-Identifier: ISC */
#include "dispatch.h"

#include "admission.h"
#include "clock.h"
#include "home_page.h"
#include "jobs.h"
#include "keys.h"
#include "live.h"
#include "netaddr.h"
#include "params.h"
#include "scoreboard.h"
#include "site.h"
#include "static_files.h"
#include "stats.h"
#include "test_hooks.h"

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
 * handler's own, such as the cold-scan gate of reach reports): admission.c runs the gates of
 * the route's list (its row, site.h) that come before the handler, in order:
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

/*
 * Heavy work never runs on the worker's loop. Anonymous heavy work runs on the worker's
 * anonymous helper thread, at a lower CPU priority (MESHGATE_ANON_NICE): the loop stays free
 * for light and signed-in requests on its other connections, and a flood of anonymous scans
 * yields the CPU to them; signed-in heavy work runs on the signed-in helpers, at the worker's
 * priority. Routes whose handler puts its heavy part on a helper itself (own_jobs) get the
 * anonymous helper as env->jobs (signed in, their own); the others (/api/packets) are run
 * whole on the helper, on a copy of the request: the head's bytes
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
    int hold_ms;  /* tests only */
    int db_break; /* tests only */
    char *path;
    char *query;
    unsigned key_number; /* the signed-in client it counts against (client_jobs); 0: none */
};

/*
 * A client's work on this worker's helpers is bounded like its answers: a signed-in client
 * (by its key: the rate limit and the line do not judge it) has at most CLIENT_JOBS_MAX
 * requests run whole on a helper at once, from the hand-over until the loop takes the answer
 * out of the job. Its further heavy requests park meanwhile (no thread, no memory), woken
 * when that answer is taken (client_jobs_release), and that answer then waits on its
 * connection, counted in the client's MESHGATE_MAX_UNREAD_BYTES_PER_CLIENT (worker.c). So a
 * client that never reads holds at most its unread share plus the one answer that crossed
 * it, as when its work ran on the loop one request at a time (tests/test_memory.c), and
 * other clients' requests never wait behind its work. An anonymous client is bounded by its
 * share of the anonymous line (MESHGATE_ANON_PER_CLIENT). The counts are the worker's own
 * (this process; keys are numbered by the master's reload, which replaces the workers).
 */
#define CLIENT_JOBS_MAX 1
static struct {
    uint8_t in_hand; /* jobs handed over or holding an answer not taken yet */
    bool waiting;    /* a request of the key parked for its turn: wake it at the release */
} client_jobs[MG_KEYS_MAX + 1];

/* Takes a place for key_number's next job (always, for 0: not counted); false when it holds
 * CLIENT_JOBS_MAX already, and then its release wakes the worker's parked requests. */
static bool client_jobs_take(unsigned key_number)
{
    if (key_number == 0 || key_number > MG_KEYS_MAX)
        return true;
    if (client_jobs[key_number].in_hand >= CLIENT_JOBS_MAX) {
        client_jobs[key_number].waiting = true;
        return false;
    }
    client_jobs[key_number].in_hand++;
    return true;
}

/* Gives key_number's place back; a request of the key parked for it is woken through pool's
 * eventfd (its turn may come later in this turn of the loop, or on the next). */
static void client_jobs_release(unsigned key_number, struct mg_jobs *pool)
{
    if (key_number == 0 || key_number > MG_KEYS_MAX || client_jobs[key_number].in_hand == 0)
        return;
    client_jobs[key_number].in_hand--;
    if (client_jobs[key_number].waiting) {
        client_jobs[key_number].waiting = false;
        mg_jobs_wake(pool);
    }
}

static void run_handler_job(struct mg_job *job, struct mg_db *db)
{
    struct mg_handler_job *h = (struct mg_handler_job *)job;
    mg_test_hooks_before_work(db, h->hold_ms, h->db_break);
    h->env.db = db;
    mg_db_fault_take(NULL, 0);
    enum mg_turn turn = h->handler(&h->env, &h->req, &h->res);
    if (turn == MG_DONE && mg_db_heal(db, "a helper")) {
        mg_response_reset(&h->res);
        turn = h->handler(&h->env, &h->req, &h->res);
        mg_db_heal_retried(db, "a helper");
    }
    if (turn != MG_DONE) { /* not for a handler that parks: it must have its own jobs */
        mg_response_reset(&h->res);
        mg_response_error(&h->res, 500, "the request could not be handled");
    }
    /* Compressed here, not on the loop: a packet detail of 2.9 MB took the loop tens of ms. */
    mg_response_gzip(&h->res, h->req.accepts_gzip, h->env.cfg->gzip_min_bytes);
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

/* query_base, query_cap: the buffer req's query parameters point into. */
static struct mg_handler_job *handler_job_new(const struct mg_env *env,
                                              const struct mg_request *req, const char *query_base,
                                              size_t query_cap, mg_handler_fn handler)
{
    struct mg_handler_job *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->path = strdup(req->path);
    h->query = malloc(query_cap);
    if (!h->path || !h->query) {
        handler_job_free(h);
        return NULL;
    }
    memcpy(h->query, query_base, query_cap);
    h->job.run = run_handler_job;
    h->job.owner = req->park;
    h->job.under_permit = req->park->admission.step == ADMIT_HELD;
    /* Signed-in work passes no gate (its client's turn bounds it: client_jobs): it may start
     * a helper too (up to its pool's size), so it never waits behind another request's cold
     * build, and it does not make the worker leave new connections to others. */
    h->job.no_gate = req->park->admission.step == ADMIT_BYPASS;
    h->handler = handler;
    h->env = *env;
    h->env.jobs = h->env.anon_jobs = NULL; /* the handler runs there already */
    h->http = *req->http;
    h->req = *req;
    h->req.http = &h->http;
    h->req.path = h->path;
    for (size_t i = 0; i < h->req.query.count; i++) {
        struct mg_query_param *p = &h->req.query.param[i];
        p->name = h->query + (p->name - query_base);
        p->value = h->query + (p->value - query_base);
    }
    /* The parameters as parsed, their strings moved into the copied query. */
    mg_params_rebase(req->param_table, h->req.params, query_base, query_cap, h->query);
    h->req.client_gone = NULL;
    h->req.park = &h->park;
    h->hold_ms = req->test_hold_ms;
    h->db_break = mg_test_hooks_db_break(env, req);
    mg_response_init(&h->res);
    return h;
}

/* Runs the handler on a helper of pool over the turns of the loop: MG_DONE when res holds its
 * answer, MG_PARK meanwhile (for its client's turn, a thread, or its job). */
static enum mg_turn offload(struct mg_env *env, struct mg_jobs *pool, struct mg_request *req,
                            const char *query_base, size_t query_cap, mg_handler_fn handler,
                            struct mg_response *res)
{
    struct mg_admission *a = &req->park->admission;
    if (!a->job) {
        unsigned key = a->step == ADMIT_BYPASS ? req->park->outcome.key_number : 0;
        if (!client_jobs_take(key)) {
            if (req->client_gone && req->client_gone(req->client_gone_arg)) {
                /* It waited for its client's turn, and nobody will read the answer. */
                mg_response_error(res, 503, "the client went away");
                res->close = true;
                return MG_DONE;
            }
            return mg_park_until(req, 0); /* client_jobs_release wakes it */
        }
        req->park->handler_tops++; /* run whole on the helper, from its top, once */
        a->job = handler_job_new(env, req, query_base, query_cap, handler);
        if (!a->job) {
            client_jobs_release(key, pool);
            mg_response_error(res, 500, "out of memory");
            return MG_DONE;
        }
        a->job->key_number = key;
    }
    struct mg_handler_job *h = a->job;
    if (!a->submitted)
        a->submitted = mg_jobs_submit(pool, &h->job);
    if (!a->submitted || !atomic_load(&h->job.done))
        return mg_park_until(req, 0); /* the helper's eventfd: its job done, or a thread free */
    res->status = h->res.status;
    res->content_type = h->res.content_type;
    res->no_store = h->res.no_store;
    res->gzipped = h->res.gzipped;
    res->close = res->close || h->res.close;
    struct mg_buf swap = res->body;
    res->body = h->res.body;
    h->res.body = swap;
    swap = res->headers;
    res->headers = h->res.headers;
    h->res.headers = swap;
    client_jobs_release(h->key_number, pool);
    handler_job_free(h);
    a->job = NULL;
    return MG_DONE;
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

/* What the scoreboard shows of the method (any other goes to the upstream). */
static const char *slot_method(const struct mg_http_request *hr)
{
    return hr->method_id == MG_METHOD_HEAD  ? "HEAD"
           : hr->method_id == MG_METHOD_GET ? "GET"
                                            : "OTHER";
}

/* The route of the request's method and decoded path (site.h), and *allow the methods the
 * path has when none is the request's. */
static unsigned route_of(const struct mg_http_request *hr, const char *path, char *param,
                         size_t cap, const char **allow)
{
    *allow = NULL;
    if (mg_path_has_encoded_slash(&hr->path)) {
        if (cap)
            param[0] = '\0';
        return MG_SITE_NOT_FOUND;
    }
    return mg_site->match_method(hr->method.ptr, hr->method.len, path, param, cap, allow);
}

/* Whether meshgate answers route itself when there is an upstream: not a route CoreScope
 * keeps behind its API key, nor one MESHGATE_UPSTREAM_PREFER gives the upstream. */
static bool route_native(struct mg_env *env, unsigned route)
{
    return route != MG_SITE_NOT_FOUND && !mg_site->routes[route].upstream_first &&
           !mg_site->proxy->prefers(env->cfg, mg_site->routes[route].template);
}

/* The same for a request of route (the request's method), or, when the path has routes of
 * other methods only (allow), whether one of those is native: then its other methods are
 * answered here too (405); else they go up with it. */
static bool native_with_upstream(struct mg_env *env, unsigned route, const char *allow,
                                 const char *path)
{
    if (route != MG_SITE_NOT_FOUND || !allow)
        return route_native(env, route);
    static const char *const methods[] = {"GET", "POST", "PUT"};
    char param[MG_PATH_PARAM_MAX];
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
        if (route_native(env, mg_site->match_method(methods[i], strlen(methods[i]), path, param,
                                                    sizeof param, NULL)))
            return true;
    return false;
}

/* Whether the request will go to the upstream, judged before the credentials are. */
static bool upstream_bound(struct mg_env *env, const struct mg_http_request *hr,
                           const struct mg_dispatch_buffers *b)
{
    char param[MG_PATH_PARAM_MAX];
    const char *allow;
    unsigned route = route_of(hr, b->path, param, sizeof param, &allow);
    if (route == MG_SITE_NOT_FOUND && mg_live_applies(env->cfg, hr))
        return false; /* meshgate's own live feed */
    return mg_site->proxy->applies(env->cfg, hr, native_with_upstream(env, route, allow, b->path),
                                   mg_static_applies(env->cfg, b->path));
}

size_t mg_dispatch_body_cap(struct mg_env *env, const struct mg_http_request *hr,
                            struct mg_dispatch_buffers *b, bool *native)
{
    *native = false;
    bool upstream = env->cfg->upstream[0] != '\0';
    size_t upstream_cap = upstream ? (size_t)env->cfg->upstream_max_body_bytes : 0;
    if (hr->path.len >= b->path_cap ||
        mg_url_decode(hr->path.ptr, hr->path.len, b->path, b->path_cap, false) < 0)
        return upstream_cap; /* refused by dispatch, or the upstream's to judge */
    char param[MG_PATH_PARAM_MAX];
    const char *allow;
    unsigned route = route_of(hr, b->path, param, sizeof param, &allow);
    if (upstream && !native_with_upstream(env, route, allow, b->path))
        return upstream_cap;
    if (route == MG_SITE_NOT_FOUND || mg_site->routes[route].body_max == 0)
        return 0;
    *native = true;
    return mg_site->routes[route].body_max;
}

/* A request whose body is not read (none is expected, or it is framed in a way or of a size
 * the route does not take) is answered now, and the connection closes after it: the body
 * would be taken for the next request. Returns true when res holds that answer. */
static bool refuse_body(const struct mg_http_request *hr, unsigned route, struct mg_response *res)
{
    const struct mg_route *row = mg_site_row(route);
    size_t max = row ? row->body_max : 0;
    if (max == 0) {
        if (hr->content_length <= 0 && !hr->chunked)
            return false;
        if (row && row->upstream_first)
            return false; /* answered without its body (its handler closes) */
        mg_response_error(res, 413, "%s requests to this path must not carry a body",
                          row ? mg_route_row_method(row) : "GET");
    } else if (hr->chunked) {
        mg_response_error(res, 411,
                          "send the request body with a Content-Length (at most %zu bytes), "
                          "not chunked",
                          max);
    } else if (hr->content_length > 0 && (uint64_t)hr->content_length > max) {
        mg_response_error(res, 413, "the request body is larger than this route takes (%zu bytes)",
                          max);
    } else {
        const struct mg_str *expect = mg_http_header_get(hr, "Expect");
        if (!expect || mg_http_has_token(expect, "100-continue"))
            return false;
        mg_response_error(res, 417, "the only expectation this server meets is 100-continue");
    }
    res->close = true;
    return true;
}

/*
 * The first turn of a request: method and body checks, percent-decoding, query, credentials,
 * admin, route, and the scoreboard entry. Returns the route; *handler_out is NULL when res
 * holds the answer already (an error, 404).
 */
static unsigned prepare(struct mg_env *env, struct mg_request *req, struct mg_dispatch_buffers *b,
                        struct mg_response *res, mg_handler_fn *handler_out)
{
    *handler_out = NULL;
    req->park->preparations++;
    const struct mg_http_request *hr = req->http;
    const char *why = NULL;
    /* With an upstream, what no native route answers goes there, whatever its method or
     * body: those checks wait for the route (the proxy's applies). */
    bool upstream = env->cfg->upstream[0] != '\0';
    if (hr->path.len >= b->path_cap || hr->query.len * 2 + 2 > b->query_cap) {
        mg_response_error(res, 414, "the request target is too long");
        return MG_SITE_BAD_REQUEST;
    }
    if (mg_url_decode(hr->path.ptr, hr->path.len, b->path, b->path_cap, false) < 0) {
        mg_response_error(res, 400, "the request path has a malformed percent-escape or a NUL");
        return MG_SITE_BAD_REQUEST;
    }
    if (mg_query_parse(&req->query, hr->query.ptr, hr->query.len, b->query, b->query_cap, &why) <
        0) {
        mg_response_error(res, 400, "%s", why ? why : "the query string is malformed");
        return MG_SITE_BAD_REQUEST;
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
            return MG_SITE_BAD_REQUEST;
        }
        if (key) {
            req->signed_in = true;
            req->park->outcome.key_number = (uint16_t)(index + 1);
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
    const char *allow;
    unsigned route = route_of(hr, b->path, req->path_param, sizeof req->path_param, &allow);
    /* The admin pages do not exist for anyone else: the path goes on as any unknown one. */
    if (route != MG_SITE_NOT_FOUND && mg_site->routes[route].admin_only && !req->admin)
        route = MG_SITE_NOT_FOUND;
    mg_handler_fn handler = NULL;
    bool live = route == MG_SITE_NOT_FOUND && mg_live_applies(env->cfg, hr);
    if (upstream && !live &&
        mg_site->proxy->applies(env->cfg, hr, native_with_upstream(env, route, allow, b->path),
                                mg_static_applies(env->cfg, b->path))) {
        route = MG_SITE_UPSTREAM;
        handler = mg_site->proxy->handle;
    } else if (route == MG_SITE_NOT_FOUND && (allow || hr->method_id == MG_METHOD_OTHER)) {
        /* The path has routes of other methods only, or the method is none of a static
         * file's or the home page's. */
        mg_response_error(res, 405, "method %.*s is not allowed: use %s",
                          (int)(hr->method.len > 32 ? 32 : hr->method.len), hr->method.ptr,
                          !allow || strcmp(allow, "GET, HEAD") == 0 ? "GET or HEAD" : allow);
        mg_response_header(res, "Allow: %s", allow ? allow : "GET, HEAD");
        /* A body we do not read would be taken for the next request. */
        res->close = hr->content_length > 0 || hr->chunked;
        return MG_SITE_BAD_REQUEST;
    } else if (route == MG_SITE_NOT_FOUND && (hr->content_length > 0 || hr->chunked)) {
        mg_response_error(res, 413, "GET and HEAD requests must not carry a body");
        res->close = true;
        return MG_SITE_BAD_REQUEST;
    } else if (route != MG_SITE_NOT_FOUND && refuse_body(hr, route, res)) {
        return MG_SITE_BAD_REQUEST;
    } else if (route != MG_SITE_NOT_FOUND) {
        /* A route of one node answers 404 for a node the configuration hides. */
        handler = mg_site->guards(route) ? mg_site->guard : mg_site->routes[route].handler;
    } else if (live) {
        route = MG_SITE_TUNNEL;
        handler = mg_live_handshake;
    } else if (mg_site->proxy->is_websocket(hr)) {
        /* No upstream and no live feed of meshgate's own: a page in its place would be
         * fetched again by every open tab at each reconnect. */
        mg_response_error(res, 404,
                          "no live feed here: MESHGATE_LIVE_CLIENTS is 0 and MESHGATE_UPSTREAM "
                          "is not set");
        return route;
    } else if (mg_static_applies(env->cfg, b->path)) {
        route = MG_SITE_STATIC;
        handler = mg_static_serve;
    } else if (mg_home_applies(env->cfg, b->path)) {
        route = MG_SITE_STATIC;
        handler = mg_home_serve;
    } else {
        mg_response_error(res, 404, "Not found");
        return route;
    }
    *handler_out = handler;
    struct mg_slot *slot = mg_slot_get(env->seg, env->slot);
    if (slot) {
        char shown[MG_SLOT_PATH_MAX];
        snprintf(shown, sizeof shown, "%.*s", (int)hr->path.len, hr->path.ptr);
        mg_slot_set_client(slot, req->client_addr);
        mg_slot_begin_request(slot, slot_method(hr), shown, req->start_monotonic_ns);
    }
    return route;
}

/* What a parked request keeps of its preparation: the decoded path and query, copied out of
 * the worker's buffers (which the next request reuses), its parameters parsed from that copy,
 * and what was decided. Its later turns continue from it (mg_dispatch_resume). */
struct mg_prepared {
    unsigned route;
    mg_handler_fn handler;
    bool signed_in;
    bool admin;
    struct mg_query query;
    char path_param[MG_PATH_PARAM_MAX];
    const char *method;
    char shown[MG_SLOT_PATH_MAX];
    char *path;
    char *query_buf;
    size_t query_cap;
    const struct mg_param_table *param_table;
    _Alignas(max_align_t) unsigned char params[MG_PARAMS_BYTES];
};

static struct mg_prepared *keep_prepared(const struct mg_request *req,
                                         const struct mg_dispatch_buffers *b, unsigned route,
                                         mg_handler_fn handler)
{
    struct mg_prepared *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->path = strdup(req->path);
    p->query_buf = malloc(b->query_cap);
    if (!p->path || !p->query_buf) {
        free(p->path);
        free(p->query_buf);
        free(p);
        return NULL;
    }
    memcpy(p->query_buf, b->query, b->query_cap);
    p->query_cap = b->query_cap;
    p->query = req->query;
    for (size_t i = 0; i < p->query.count; i++) {
        p->query.param[i].name = p->query_buf + (req->query.param[i].name - b->query);
        p->query.param[i].value = p->query_buf + (req->query.param[i].value - b->query);
    }
    p->route = route;
    p->handler = handler;
    p->signed_in = req->signed_in;
    p->admin = req->admin;
    memcpy(p->path_param, req->path_param, sizeof p->path_param);
    p->method = slot_method(req->http);
    snprintf(p->shown, sizeof p->shown, "%.*s", (int)req->http->path.len, req->http->path.ptr);
    /* The parameters as parsed, their strings moved into the copy of the query. */
    p->param_table = req->param_table;
    memcpy(p->params, req->params, sizeof p->params);
    mg_params_rebase(p->param_table, p->params, b->query, b->query_cap, p->query_buf);
    return p;
}

/* The handler's step and what it kept: gone (answered, or it starts over at its top). */
static void forget_step(struct mg_park *park)
{
    if (park->kept && park->kept_drop)
        park->kept_drop(park->kept);
    free(park->kept);
    park->kept = NULL;
    park->kept_drop = NULL;
    park->resume = NULL;
}

void *mg_park_keep(const struct mg_request *req, size_t len, void (*drop)(void *kept))
{
    mg_handler_fn resume = req->park->resume;
    forget_step(req->park);
    req->park->resume = resume;
    req->park->kept = calloc(1, len);
    req->park->kept_drop = req->park->kept ? drop : NULL;
    return req->park->kept;
}

enum mg_turn mg_park_keep_at(const struct mg_request *req, enum mg_turn turn, mg_handler_fn step,
                             const void *what, size_t len, void (*drop)(void *kept), bool *kept)
{
    void *to = turn == MG_PARK ? mg_park_keep(req, len, drop) : NULL;
    *kept = to != NULL;
    if (!to)
        return turn;
    memcpy(to, what, len);
    return mg_park_at(req, step, req->park->wait.until_ns);
}

void mg_dispatch_forget(struct mg_park *park)
{
    forget_step(park);
    struct mg_prepared *p = park->prepared;
    if (!p)
        return;
    free(p->path);
    free(p->query_buf);
    free(p);
    park->prepared = NULL;
}

/* A later turn of a parked request: as prepared. The scoreboard shows it again if another
 * request of the worker took its place there meanwhile. */
static void resume(struct mg_env *env, struct mg_request *req, const struct mg_prepared *p)
{
    req->path = p->path;
    req->query = p->query;
    memcpy(req->path_param, p->path_param, sizeof req->path_param);
    req->signed_in = p->signed_in;
    req->admin = p->admin;
    req->param_table = p->param_table;
    memcpy(req->params, p->params, sizeof req->params);
    struct mg_slot *slot = mg_slot_get(env->seg, env->slot);
    if (slot && atomic_load(&slot->request_started_monotonic_ns) != req->start_monotonic_ns) {
        mg_slot_set_client(slot, req->client_addr);
        mg_slot_begin_request(slot, p->method, p->shown, req->start_monotonic_ns);
    }
}

/*
 * The handler on the loop's connection. A fault of the connection (db.h: corruption, not a
 * database, an I/O error) closes and opens it again, and a request answered by its handler's
 * first call is run again once on the new one (a parked one resumes on it). The first call
 * may come on a later turn than the request's first: after a wait for its route's table or
 * in a line.
 */
static enum mg_turn run_on_loop(struct mg_env *env, struct mg_request *req, mg_handler_fn handler,
                                struct mg_response *res)
{
    /* Woken, a handler that named its step continues there; else it starts at its top. */
    mg_handler_fn step = req->park->resume;
    bool first_call = !step && req->park->handler_tops == 0;
    mg_test_hooks_before_work(env->db, 0, first_call ? mg_test_hooks_db_break(env, req) : 0);
    mg_db_fault_take(NULL, 0);
    if (!step)
        req->park->handler_tops++;
    enum mg_turn turn = (step ? step : handler)(env, req, res);
    if (!mg_db_heal(env->db, "the loop") || turn != MG_DONE || !first_call)
        return turn;
    mg_response_reset(res);
    turn = handler(env, req, res);
    mg_db_heal_retried(env->db, "the loop");
    return turn;
}

/* The helpers the request's heavy work runs on, once admitted: the anonymous ones at their
 * lower priority, the signed-in ones at the worker's; NULL: on the loop (light work, a request
 * for the upstream, which the loop relays, or no helpers: in-process tests). */
static struct mg_jobs *heavy_helpers(const struct mg_env *env, const struct mg_admission *a,
                                     unsigned route)
{
    if (route == MG_SITE_UPSTREAM)
        return NULL;
    if (a->step == ADMIT_HELD || a->step == ADMIT_OFF)
        return env->anon_jobs;
    return a->step == ADMIT_BYPASS ? env->jobs : NULL;
}

/* The handler where its admitted work runs: on the loop (light), or on a helper. */
static enum mg_turn work(struct mg_env *env, struct mg_request *req, unsigned route,
                         mg_handler_fn handler, const char *query_base, size_t query_cap,
                         struct mg_response *res)
{
    struct mg_admission *a = &req->park->admission;
    set_busy_wait(env, a->step == ADMIT_LIGHT);
    struct mg_jobs *pool = heavy_helpers(env, a, route);
    if (!pool)
        return run_on_loop(env, req, handler, res);
    if (!mg_site->routes[route].own_jobs)
        return offload(env, pool, req, query_base, query_cap, handler, res);
    struct mg_env own_env = *env;
    own_env.jobs = pool;
    return run_on_loop(&own_env, req, handler, res);
}

/*
 * A request's walk after its preparation, one state machine over the turns of the loop
 * (req->park->admission.at): the wait for its route's table (mg_site_parks_until: before the
 * gates, so it holds no permit meanwhile), the route's gates, the test hooks' hold, then the
 * work. A step
 * that waits parks the request and ends the turn; a woken request continues at the step it
 * parked in (its admission held: the gates are not passed again), and the handler says what
 * comes next (handler.h, enum mg_turn). Returns MG_DONE, MG_PARK or MG_UPSTREAM.
 */
enum { AT_TABLE = 0, AT_GATES, AT_HOLD, AT_WORK };

static enum mg_turn walk(struct mg_env *env, struct mg_request *req, unsigned route,
                         mg_handler_fn handler, const char *query_base, size_t query_cap,
                         struct mg_response *res)
{
    struct mg_admission *a = &req->park->admission;
    enum mg_turn turn = MG_DONE;
    for (;;) {
        if (a->at == AT_TABLE) {
            if (!a->table_since_ns)
                a->table_since_ns = mg_monotonic_ns();
            int64_t until = mg_site_parks_until(route, env, req, a->table_since_ns);
            if (until)
                return mg_park_until(req, until);
            a->at = AT_GATES;
        }
        if (a->at == AT_GATES) {
            if (a->step == ADMIT_NEW && !a->readmitted)
                mg_test_hooks_stop_in_lock(env, req); /* the turn that first meets the gates */
            bool heavy =
                a->step == ADMIT_NEW && (a->readmitted || mg_site_is_heavy(route, env, req));
            enum mg_admission_result r =
                mg_admission_admit(mg_site_gates(route), &mg_gate_anon_line, env, req, heavy, res);
            if (r != MG_ADMISSION_RUN)
                return r == MG_ADMISSION_PARKED ? MG_PARK : MG_DONE;
            a->at = AT_HOLD;
        }
        if (a->at == AT_HOLD) {
            if (a->step != ADMIT_LIGHT &&
                !mg_test_hooks_hold(env, req, route, heavy_helpers(env, a, route) != NULL))
                return MG_PARK;
            a->at = AT_WORK;
        }
        req->test_hold_ms = a->hold_ms; /* as the hold said on the turn it passed */
        turn = work(env, req, route, handler, query_base, query_cap, res);
        if (turn != MG_READMIT_HEAVY)
            break;
        if (a->step != ADMIT_LIGHT || a->readmitted) {
            /* Only work admitted light can turn heavy, and only once. */
            mg_response_reset(res);
            mg_response_error(res, 500, "the request could not be handled");
            turn = MG_DONE;
            break;
        }
        /* Admitted light, and its work has turned heavy: admitted again, heavy, now; the
         * handler starts over once admitted. */
        memset(req->park->state, 0, sizeof req->park->state);
        forget_step(req->park);
        a->step = ADMIT_NEW;
        a->readmitted = true;
        a->at = AT_GATES;
    }
    if (a->step == ADMIT_HELD && turn != MG_PARK) {
        /* A request for the upstream never holds the line (its route's gates name none). */
        mg_admission_release(&mg_gate_anon_line, &a->line, env, req, 0, 0);
        a->step = ADMIT_DONE;
    }
    return turn;
}

/* The route's parameter table (NULL: it reads none, or not a row of the table). */
static const struct mg_param_table *route_params(unsigned route)
{
    const struct mg_route *row = mg_site_row(route);
    return row ? row->params : NULL;
}

/* The end of a turn: a parked request is still in flight (waiting in a line, or worked on by
 * a helper), and the scoreboard goes on showing it until it is answered. */
static enum mg_turn turn_done(struct mg_env *env, struct mg_request *req, enum mg_turn turn)
{
    if (turn != MG_PARK) {
        struct mg_slot *slot = mg_slot_get(env->seg, env->slot);
        if (slot)
            mg_slot_end_request(slot);
        mg_dispatch_forget(req->park);
    }
    mg_test_hooks_turn_done(env);
    return turn;
}

enum mg_turn mg_dispatch(struct mg_env *env, struct mg_request *req, struct mg_dispatch_buffers *b,
                         struct mg_response *res)
{
    req->park->dispatches++;
    mg_handler_fn handler;
    unsigned route = prepare(env, req, b, res, &handler);
    req->park->route = route;
    if (!handler)
        return MG_DONE; /* answered: an error, 404 */
    /* The route's parameters, parsed once for its heavy check and its handler (params.h); a
     * value its table refuses is answered 400 here, before any gate. */
    enum mg_turn turn = MG_DONE;
    if (mg_params_parse_request(route_params(route), req, res))
        turn = walk(env, req, route, handler, b->query, b->query_cap, res);
    /* Parked: kept, so its later turns continue where it stopped. */
    if (turn == MG_PARK)
        req->park->prepared = keep_prepared(req, b, route, handler);
    return turn_done(env, req, turn);
}

enum mg_turn mg_dispatch_resume(struct mg_env *env, struct mg_request *req,
                                struct mg_dispatch_buffers *b, struct mg_response *res)
{
    struct mg_prepared *kept = req->park->prepared;
    if (!kept) {
        /* Nothing was kept (no memory when it parked): prepared again from its head, it
         * continues where it stopped all the same (its walk's state is in the park). */
        mg_handler_fn handler;
        unsigned route = prepare(env, req, b, res, &handler);
        if (!handler || route != req->park->route ||
            !mg_params_parse_request(route_params(route), req, res)) {
            mg_response_reset(res);
            mg_response_error(res, 500, "the request could not be handled");
            return turn_done(env, req, MG_DONE);
        }
        enum mg_turn turn = walk(env, req, route, handler, b->query, b->query_cap, res);
        if (turn == MG_PARK)
            req->park->prepared = keep_prepared(req, b, route, handler);
        return turn_done(env, req, turn);
    }
    resume(env, req, kept);
    return turn_done(
        env, req,
        walk(env, req, kept->route, kept->handler, kept->query_buf, kept->query_cap, res));
}

bool mg_dispatch_was_light(const struct mg_park *park)
{
    return park->admission.step == ADMIT_LIGHT;
}

/* SPDX-License-Identifier: ISC */
/*
 * site: what dispatch and the worker run, given from above at start. Core declares the route
 * row and the proxy's interface; the table of routes (workers/api/router.c) and the proxy
 * (workers/upstream/) are the upper rooms', and server/ hands them in (mg_site_wire, before
 * a worker starts; a test that dispatches in process wires them too). Core never includes
 * those rooms: it reaches them only through mg_site.
 */
#ifndef MESHGATE_SITE_H
#define MESHGATE_SITE_H

#include "gates.h"
#include "handler.h"
#include "http.h"
#include "params.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum mg_cost { MG_COST_LIGHT = 0, MG_COST_HEAVY };

typedef bool (*mg_heavy_fn)(struct mg_env *env, const struct mg_request *req);
/* 0: the request goes on now; else it parks before its gates until then (CLOCK_MONOTONIC),
 * holding nothing, and is asked again; since_ns: when it was first asked. */
typedef int64_t (*mg_parks_fn)(struct mg_env *env, const struct mg_request *req, int64_t since_ns);

struct mg_route {
    const char *template;
    enum mg_cost cost;
    mg_handler_fn handler;
    mg_heavy_fn heavy_when; /* heavy routes: NULL, every request is heavy */
    /* Whether a request waits, before its gates, for a table the group is about to have that
     * answers it cheaply (the summaries' first chunk, packet_scan.h); NULL: never. Bounded by
     * the function: a request never waits for a table past its ceiling. */
    mg_parks_fn parks_until;
    /* The handler puts its heavy part on a helper thread itself (env->jobs). The others'
     * anonymous heavy requests are run whole on the anonymous helper (dispatch.c). */
    bool own_jobs;
    /* Tests only: the handler holds a request's X-Test-Hold-Ms inside its build (a reach
     * report, cold_report.c), so dispatch's test hook does not hold it before. */
    bool holds_in_build;
    /* The requests of this route that are light, with their worst parameters (NULL-ended;
     * NULL for a route that is always heavy). tests/test_cost.c bounds what each costs. */
    const char *const *light_cases;
    /* Answered only to admins (MESHGATE_ADMIN_NETWORKS or signed in); 404 for anyone else,
     * as a path that does not exist. */
    bool admin_only;
    /* Its query parameters, declared once (params.h): dispatch parses them into the
     * request's typed struct before the heavy check, which reads it as the handler does; a
     * required one's sample makes the home page's link. NULL: the route reads none. */
    const struct mg_param_table *params;
    /* Its gates in the order its requests meet them: its cost class's list (admission.h). */
    const enum mg_gate_row *gates;
    /* A route of another method than GET and HEAD has its method before its path in the
     * template ("POST /api/decode"): only that method matches it. body_max: the most bytes of
     * request body it reads (Content-Length only; 0: it reads none, and a request with a
     * body is refused with 413 and close); the worker reads the body whole before the route
     * is run (worker.c: the body deadline), so no handler waits on a client. */
    size_t body_max;
    /* CoreScope's API-key routes (its requireAPIKey): with MESHGATE_UPSTREAM set they go
     * there always; without, the handler answers as CoreScope does (ep_keyed.c). */
    bool upstream_first;
    /* A route CoreScope serves only when its config.json turns a feature on: whether it is
     * on now (NULL: always). The home page links it only then. */
    bool (*served)(void);
};

/* Route ids are indexes into the table; these follow its rows, counted but not in it. */
enum mg_route_extra {
    MG_ROUTE_EXTRA_NOT_FOUND,
    MG_ROUTE_EXTRA_BAD_REQUEST,
    MG_ROUTE_EXTRA_STATIC,   /* files of MESHGATE_PUBLIC_DIR */
    MG_ROUTE_EXTRA_UPSTREAM, /* requests passed to MESHGATE_UPSTREAM */
    MG_ROUTE_EXTRA_TUNNEL,   /* WebSocket tunnels to the upstream (how long each stayed open) */
};

/* The method of a row's template ("GET" for a plain path; "OTHER" for one not named here)
 * and its path. */
const char *mg_route_row_method(const struct mg_route *row);
const char *mg_route_row_path(const struct mg_route *row);

struct mg_upstream;

/* How an exchange with the upstream ended, for the worker. */
struct mg_upstream_done {
    int status;          /* the status sent to the client; 0: none */
    uint64_t bytes;      /* written to the client */
    uint64_t head_bytes; /* of them, the response's head (the rest is its body) */
    int64_t duration_ns; /* from the handover to the end */
    bool keep_alive;     /* the client connection may carry its next request */
    bool tunnel;         /* it was a WebSocket tunnel: duration is how long it stayed open */
    char method[16];
    char target[160]; /* the request's target as sent, for the access log and slow log */
};
/* owner: what the worker passed to begin. The client socket is the worker's again (and no
 * longer in the engine's epoll set). */
typedef void (*mg_upstream_done_fn)(void *arg, void *owner, const struct mg_upstream_done *d);

/* The proxy to MESHGATE_UPSTREAM as dispatch and the worker call it (upstream.h says what each
 * does). Always given: without MESHGATE_UPSTREAM the worker makes no engine, and dispatch asks
 * only is_websocket. */
struct mg_proxy {
    struct mg_upstream *(*new)(const struct mg_env *env, mg_upstream_done_fn done, void *arg,
                               char *err, size_t errlen);
    void (*free)(struct mg_upstream *u);
    int (*fd)(const struct mg_upstream *u);
    size_t (*begin)(struct mg_upstream *u, void *owner, int client_fd,
                    const struct mg_http_request *hr, const char *in, size_t in_len,
                    const struct mg_request *req, struct mg_park *park, int64_t now_ns);
    void (*run)(struct mg_upstream *u, int64_t now_ns);
    int64_t (*next_deadline)(const struct mg_upstream *u);
    unsigned (*active)(const struct mg_upstream *u);
    void (*drain)(struct mg_upstream *u, int64_t now_ns);
    bool (*applies)(const struct mg_config *cfg, const struct mg_http_request *hr,
                    bool native_route, bool static_route);
    mg_handler_fn handle;
    bool (*is_heavy)(const struct mg_config *cfg, const char *path);
    bool (*is_websocket)(const struct mg_http_request *hr);
    bool (*prefers)(const struct mg_config *cfg, const char *route_template);
};

struct mg_site {
    const struct mg_route *routes;
    unsigned routes_len;
    /* The route for a request's method (as sent: HEAD is GET's) and decoded path, its
     * ":name" segment in param (cap bytes), or routes_len (not found); then *allow (when not
     * NULL) says which methods the path has ("GET, HEAD", "POST", ...; NULL: none), for a 405. */
    unsigned (*match_method)(const char *method, size_t method_len, const char *path, char *param,
                             size_t cap, const char **allow);
    /* The routes run through guard instead of their handler (the routes of one node, which
     * answer 404 for a node the configuration hides). */
    bool (*guards)(unsigned route);
    mg_handler_fn guard;
    const struct mg_proxy *proxy;
};

/* Set once at start, before a request is dispatched (server/: mg_site_wire). */
extern const struct mg_site *mg_site;

#define MG_SITE_NOT_FOUND (mg_site->routes_len + MG_ROUTE_EXTRA_NOT_FOUND)
#define MG_SITE_BAD_REQUEST (mg_site->routes_len + MG_ROUTE_EXTRA_BAD_REQUEST)
#define MG_SITE_STATIC (mg_site->routes_len + MG_ROUTE_EXTRA_STATIC)
#define MG_SITE_UPSTREAM (mg_site->routes_len + MG_ROUTE_EXTRA_UPSTREAM)
#define MG_SITE_TUNNEL (mg_site->routes_len + MG_ROUTE_EXTRA_TUNNEL)

/* The row of route, or NULL for an id past the table. */
const struct mg_route *mg_site_row(unsigned route);
/* The gates of route, in order (its row's; the upstream's for MG_SITE_UPSTREAM; else light). */
const enum mg_gate_row *mg_site_gates(unsigned route);
/* Whether this request of route is heavy, and its row's parks_until (0 without one). */
bool mg_site_is_heavy(unsigned route, struct mg_env *env, const struct mg_request *req);
int64_t mg_site_parks_until(unsigned route, struct mg_env *env, const struct mg_request *req,
                            int64_t since_ns);

#endif

/* SPDX-License-Identifier: ISC */
/*
 * dispatch: from a parsed request head to a filled response: method and body checks,
 * percent-decoding, query parsing, routing, and the handler. The worker calls it for each
 * request; tests call it in-process to exercise endpoints without sockets.
 */
#ifndef MESHGATE_DISPATCH_H
#define MESHGATE_DISPATCH_H

#include "handler.h"
#include "request_client.h"

struct mg_dispatch_buffers {
    char *path; /* for the decoded path */
    size_t path_cap;
    char *query; /* for the decoded query parameters (twice the query's length is enough) */
    size_t query_cap;
};

/* Allocates buffers sized for cfg's limits; false when out of memory. */
bool mg_dispatch_buffers_init(struct mg_dispatch_buffers *b, const struct mg_config *cfg);
void mg_dispatch_buffers_free(struct mg_dispatch_buffers *b);

/*
 * The first turn of a request: fills res, or parks it. req must have http, the start times,
 * client_addr and accepts_gzip set; the rest is filled here. The request is prepared
 * (checked, decoded, routed, its client and credentials known, its parameters parsed, the
 * scoreboard told), admitted through its route's gates and handed to its handler. Returns
 * MG_DONE (res holds the answer), MG_PARK (call mg_dispatch_resume when its worker is woken,
 * park->wait) or MG_UPSTREAM (the proxy engine takes it); req->park->route is the route id it
 * is counted under (MG_ROUTE_NOT_FOUND, MG_ROUTE_BAD_REQUEST, or a row of the route table).
 */
enum mg_turn mg_dispatch(struct mg_env *env, struct mg_request *req, struct mg_dispatch_buffers *b,
                         struct mg_response *res);

/*
 * A later turn of a parked request, woken: it continues where it stopped (in its route's
 * line, or at its handler with its admission held: at the step the handler named, else its
 * top), from what its park kept; it is neither prepared, nor admitted, nor its parameters
 * parsed again. Returns as mg_dispatch. b is used only when nothing could be
 * kept (no memory when it parked): it is then prepared again from its head.
 */
enum mg_turn mg_dispatch_resume(struct mg_env *env, struct mg_request *req,
                                struct mg_dispatch_buffers *b, struct mg_response *res);

/* Frees what dispatch and its handler kept for a parked request (the worker, when it closes
 * a connection whose request is parked). */
void mg_dispatch_forget(struct mg_park *park);

/*
 * How many bytes of body the worker reads whole before it dispatches the request of head hr
 * (0: none; a request whose Content-Length is above it is refused by dispatch, with close,
 * without its body being read): the body_max of the native route it is for (*native true), or
 * MESHGATE_UPSTREAM_MAX_BODY_BYTES for a request that goes to the upstream. b is the worker's
 * dispatch buffers (its path is decoded there).
 */
size_t mg_dispatch_body_cap(struct mg_env *env, const struct mg_http_request *hr,
                            struct mg_dispatch_buffers *b, bool *native);

/* Whether the request of this park was admitted as light (tests of the cost classes). */
bool mg_dispatch_was_light(const struct mg_park *park);

#endif

/* SPDX-License-Identifier: ISC */
/*
 * upstream: the reverse proxy to MESHGATE_UPSTREAM, inside a worker's event loop.
 *
 * A request that no native route answers is admitted by dispatch (upstream_route.c: the
 * breaker, the WebSocket cap, the upstream's FIFO gate, and for heavy routes the anonymous
 * line first) and then handed here with its client socket: the engine owns the socket until
 * it calls the worker back (mg_upstream_done_fn). Nothing here blocks: the engine has its
 * own epoll set, whose descriptor sits in the worker's, and every exchange is a small state
 * machine:
 *
 *   connecting   a kept-alive idle connection is reused, else a new one is connecting
 *                (deadline MESHGATE_UPSTREAM_CONNECT_TIMEOUT_MS; refused or late: 502);
 *                a reused one that fails before a byte of the answer sends an idempotent
 *                request again, once, on a new connection (any other gets 502);
 *   request      the rewritten head, then the body (exactly Content-Length bytes, which the
 *                worker has read whole before admission, under MESHGATE_BODY_TIMEOUT_MS and
 *                MESHGATE_BODY_MIN_RATE), go up; the response head is awaited
 *                (MESHGATE_UPSTREAM_TIMEOUT_MS from the request's start: 504);
 *   body         the response is relayed as the client reads it, reframed for the client
 *                (upstream_http.h); each direction holds at most BUFFER_BYTES, and neither
 *                side is read while the other has not taken what is pending: a slow client
 *                slows the upstream's connection, never grows a buffer, and a slow upstream
 *                holds only its connection; a body that stalls MESHGATE_UPSTREAM_TIMEOUT_MS
 *                is cut, and so is a whole exchange past MESHGATE_UPSTREAM_RELAY_TIMEOUT_MS
 *                (a client that reads a trickle keeps the permit no longer);
 *   tunnel       after the upstream's 101 to a WebSocket handshake: bytes both ways; a
 *                client silent for half of MESHGATE_UPSTREAM_TUNNEL_IDLE_MS is sent a ping,
 *                and one silent for all of it is closed; on drain or idle a close frame
 *                (1001, going away) goes each way between two frames, then the tunnel ends.
 *
 * When the exchange ends the permits it carries (the upstream gate's, an anonymous one)
 * are given back, the breaker hears the verdict, and the upstream connection goes back to
 * the worker's idle pool (at most MESHGATE_UPSTREAM_IDLE_CONNS) when it can carry another
 * request. A worker killed meanwhile leaves its permits to the master's reclaim.
 */
#ifndef MESHGATE_UPSTREAM_H
#define MESHGATE_UPSTREAM_H

#include "handler.h"
#include "http.h"
#include "site.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* struct mg_upstream, how an exchange ended (struct mg_upstream_done) and the callback that
 * says so (mg_upstream_done_fn) are the proxy's interface as core calls it (site.h). */

/* NULL (with a message) when the engine cannot be set up. */
struct mg_upstream *mg_upstream_new(const struct mg_env *env, mg_upstream_done_fn done, void *arg,
                                    char *err, size_t errlen);
/* The engine's epoll descriptor: readable when an exchange has something to do. */
int mg_upstream_fd(const struct mg_upstream *u);

/*
 * Sets up passing the request (admitted by mg_upstream_handle, its ticket in park) to the
 * upstream. in[0..in_len) is what the worker has read of the connection: the head, then
 * possibly the start of the body and more. Returns how many of those bytes the exchange took
 * (the head and its body's part; copied, the worker drops them); the rest is the client's
 * next request. The exchange starts at the next mg_upstream_run, which may call the owner
 * back at once.
 */
size_t mg_upstream_begin(struct mg_upstream *u, void *owner, int client_fd,
                         const struct mg_http_request *hr, const char *in, size_t in_len,
                         const struct mg_request *req, struct mg_park *park, int64_t now_ns);

/* Moves every exchange on as far as its sockets allow, and applies the deadlines. */
void mg_upstream_run(struct mg_upstream *u, int64_t now_ns);
/* The earliest deadline of an exchange, or INT64_MAX. */
int64_t mg_upstream_next_deadline(const struct mg_upstream *u);
/* Exchanges in progress. */
unsigned mg_upstream_active(const struct mg_upstream *u);
/* SIGTERM: tunnels are closed with a close frame; other exchanges finish. */
void mg_upstream_drain(struct mg_upstream *u, int64_t now_ns);
/* Ends every exchange (each owner is called back) and frees the engine. */
void mg_upstream_free(struct mg_upstream *u);

/*
 * The dispatch side (upstream_route.c). mg_upstream_applies: the request goes to the
 * upstream (no native route answers it). mg_upstream_handle: admission, as a handler
 * that parks while it waits; MG_UPSTREAM once admitted. mg_upstream_is_heavy: its
 * anonymous requests pass the rate limit (MESHGATE_UPSTREAM_HEAVY); no request for the
 * upstream meets the anonymous line, whose permits are the anonymous helper's builds.
 */
bool mg_upstream_applies(const struct mg_config *cfg, const struct mg_http_request *hr,
                         bool native_route, bool static_route);
enum mg_turn mg_upstream_handle(struct mg_env *env, const struct mg_request *req,
                                struct mg_response *res);
bool mg_upstream_is_heavy(const struct mg_config *cfg, const char *path);
/* The native route whose template is route_template (its row of the route table) goes to the
 * upstream instead (MESHGATE_UPSTREAM_PREFER) while one is set. */
bool mg_upstream_prefers(const struct mg_config *cfg, const char *route_template);

/* All of the above and mg_upstream_is_websocket (upstream_http.h), as dispatch and the worker
 * reach them (site.h; server/ hands this in). */
extern const struct mg_proxy mg_upstream_proxy;

#endif

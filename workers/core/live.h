/* SPDX-License-Identifier: ISC */
/*
 * live: meshgate's own live feed, CoreScope's WebSocket on any path that is not a route
 * (docs/architecture.md, "The live feed"). dispatch sends an upgrade here when
 * MESHGATE_LIVE_CLIENTS > 0 and no upstream takes it (no MESHGATE_UPSTREAM, or
 * MESHGATE_UPSTREAM_WEBSOCKETS=0). The handshake is checked as CoreScope's server checks it
 * (websocket.h), then the client is counted in its address's MESHGATE_LIVE_PER_CLIENT and in
 * the group's MESHGATE_LIVE_CLIENTS (503 past either); the worker then answers 101 and
 * sends the ring's events (shm/live_ring.h) to it from its loop (worker.c).
 */
#ifndef MESHGATE_LIVE_H
#define MESHGATE_LIVE_H

#include "handler.h"

/* Whether dispatch gives this upgrade to the live feed (rather than the upstream's tunnel
 * or the 404 "no live feed here"). */
bool mg_live_applies(const struct mg_config *cfg, const struct mg_http_request *hr);

enum mg_turn mg_live_handshake(struct mg_env *env, const struct mg_request *req,
                               struct mg_response *res);

#endif

/* SPDX-License-Identifier: ISC */
/*
 * request_client: which address a request comes from, for the per-client limits and the
 * proxy's X-Forwarded-For.
 */
#ifndef MESHGATE_REQUEST_CLIENT_H
#define MESHGATE_REQUEST_CLIENT_H

#include "config_values.h"
#include "http.h"

#include <stdbool.h>
#include <stdint.h>

/*
 * The client's address (netaddr.h form): the peer, or, when the peer is one of
 * MESHGATE_TRUSTED_PROXIES, what its X-Forwarded-For says (every such header line, read from
 * the right). True when X-Forwarded-For gave it.
 */
bool mg_request_client(const struct mg_config *cfg, const struct mg_http_request *hr,
                       const uint8_t peer[16], uint8_t addr[16]);

#endif

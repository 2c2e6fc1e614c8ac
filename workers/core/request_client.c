/* SPDX-License-Identifier: ISC */
#include "request_client.h"

#include "netaddr.h"

#include <strings.h>

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

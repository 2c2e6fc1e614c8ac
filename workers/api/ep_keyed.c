/* SPDX-License-Identifier: ISC */
/*
 * CoreScope's API-key routes when meshgate has no upstream: POST /api/packets, POST
 * /api/perf/reset, PUT /api/config/geo-filter, POST /api/admin/prune-geo-filter, GET
 * /api/admin/prune-geo-filter/status, GET /api/debug/affinity, GET /api/dropped-packets and
 * GET /api/backup. With MESHGATE_UPSTREAM set they always go there (router.h: upstream_first),
 * where CoreScope's own server checks the key and writes; meshgate never writes the database.
 *
 * Without an upstream:
 *   config.json has no apiKey   403 {"error":"write endpoints disabled — set apiKey in
 *                               config.json"}, CoreScope's own answer there, byte for byte;
 *   config.json has an apiKey   403 naming meshgate read-only and MESHGATE_UPSTREAM. CoreScope
 *                               would answer 401 to a client without the key and run the
 *                               route for one with it; here no key can open it, so a 401
 *                               would only ask the client for a key that cannot work, and the
 *                               answer does not depend on the key (nothing is learnt by trying).
 * A body sent with one is not read: the connection closes after the answer.
 */
#include "corescope_config.h"
#include "router.h"

enum mg_turn mg_handle_key_protected(struct mg_env *env, const struct mg_request *req,
                                     struct mg_response *res)
{
    (void)env;
    if (!mg_corescope_current()->api_key_set)
        mg_response_error(res, 403, "write endpoints disabled — set apiKey in config.json");
    else
        mg_response_error(res, 403,
                          "meshgate is read-only: CoreScope's API-key routes are served by its "
                          "own server (MESHGATE_UPSTREAM), which is not set");
    res->close = req->http->content_length > 0 || req->http->chunked;
    return MG_DONE;
}

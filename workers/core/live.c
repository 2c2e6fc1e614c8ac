/* SPDX-License-Identifier: ISC */
#include "live.h"

#include "admission.h"
#include "live_ring.h"
#include "stats.h"
#include "websocket.h"

bool mg_live_applies(const struct mg_config *cfg, const struct mg_http_request *hr)
{
    return cfg->live_clients > 0 && (!cfg->upstream[0] || cfg->upstream_websockets == 0) &&
           mg_ws_is_upgrade(hr);
}

enum mg_turn mg_live_handshake(struct mg_env *env, const struct mg_request *req,
                               struct mg_response *res)
{
    const struct mg_http_request *hr = req->http;
    const char *why = NULL;
    int status = mg_ws_handshake_check(hr, res->live_accept, &why);
    if (status) {
        mg_response_error(res, status, "%s", why);
        if (status == 405)
            mg_response_header(res, "Allow: GET");
        return MG_DONE;
    }
    if (!mg_ws_origin_allowed(hr, env->cfg->live_origins)) {
        mg_response_error(res, 403, "websocket: request origin not allowed by the origin check");
        return MG_DONE;
    }
    uint32_t share = (uint32_t)env->cfg->live_per_client;
    bool shared = share > 0 && req->conn_hold_plus_one > 0;
    if (shared && !mg_admission_tunnel_share_open(env, req->conn_hold_plus_one - 1, share)) {
        mg_counter_add(env->seg, MG_CTR_LIVE_CLIENTS_OVER_SHARE, 1);
        mg_response_refuse(res, 503, 5,
                           "this address holds its share of WebSocket connections "
                           "(MESHGATE_LIVE_PER_CLIENT); retry after Retry-After");
        return MG_DONE;
    }
    if (!mg_live_client_open(env->seg->live, env->slot)) {
        if (shared)
            mg_admission_tunnel_share_close(env, req->conn_hold_plus_one - 1);
        mg_counter_add(env->seg, MG_CTR_LIVE_CLIENTS_REFUSED, 1);
        mg_response_refuse(res, 503, 5,
                           "too many live feed clients are open (MESHGATE_LIVE_CLIENTS); retry "
                           "after Retry-After");
        return MG_DONE;
    }
    mg_counter_add(env->seg, MG_CTR_LIVE_CLIENTS, 1);
    res->status = 101;
    res->live = true;
    res->live_shared = shared;
    return MG_DONE;
}

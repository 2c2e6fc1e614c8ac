#include "dispatch.h"

#include "keys.h"
#include "router.h"
#include "stats.h"
#include "scoreboard.h"
#include "static_files.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

unsigned mg_dispatch(struct mg_env *env, struct mg_request *req, struct mg_dispatch_buffers *b,
                     struct mg_response *res)
{
    const struct mg_http_request *hr = req->http;
    const char *why = NULL;
    if (hr->method_id == MG_METHOD_OTHER) {
        mg_response_error(res, 405, "method %.*s is not allowed: use GET or HEAD",
                          (int)(hr->method.len > 32 ? 32 : hr->method.len), hr->method.ptr);
        mg_response_header(res, "Allow: GET, HEAD");
        /* A body we do not read would be taken for the next request. */
        res->close = hr->content_length > 0 || hr->chunked;
        return MG_ROUTE_BAD_REQUEST;
    }
    if (hr->content_length > 0 || hr->chunked) {
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
    if (auth && auth->len > 7 && strncasecmp(auth->ptr, "Bearer ", 7) == 0) {
        key = auth->ptr + 7;
        key_len = auth->len - 7;
        while (key_len && *key == ' ')
            key++, key_len--;
    } else if (api_key) {
        key = api_key->ptr;
        key_len = api_key->len;
    }
    if (key) {
        if (!mg_keys_match(&mg_api_keys, key, key_len)) {
            mg_counter_add(env->seg, MG_CTR_UNAUTHORIZED, 1);
            mg_response_error(res, 401, "the API key is not valid");
            mg_response_header(res, "WWW-Authenticate: Bearer realm=\"meshgate\", "
                                    "error=\"invalid_token\"");
            return MG_ROUTE_BAD_REQUEST;
        }
        req->signed_in = true;
        mg_counter_add(env->seg, MG_CTR_SIGNED_IN, 1);
    }
    req->path = b->path;
    unsigned route = mg_route_match(b->path, req->path_param, sizeof req->path_param);
    mg_handler_fn handler;
    if (route != MG_ROUTE_NOT_FOUND) {
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
    if (slot)
        mg_slot_begin_request(slot, hr->method_id == MG_METHOD_HEAD ? "HEAD" : "GET", shown,
                              req->start_monotonic_ns);
    handler(env, req, res);
    if (slot)
        mg_slot_end_request(slot);
    return route;
}

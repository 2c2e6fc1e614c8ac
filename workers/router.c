#include "router.h"

#include <string.h>

const struct mg_route mg_routes[] = {
    {"/api/healthz", MG_COST_LIGHT, mg_handle_healthz, NULL, false},
    {"/api/nodes", MG_COST_LIGHT, mg_handle_nodes, NULL, false},
    {"/api/nodes/:pubkey/reach", MG_COST_HEAVY, mg_handle_reach, mg_reach_is_heavy, true},
    {"/api/packets", MG_COST_HEAVY, mg_handle_packets, NULL, false},
    {"/api/stats", MG_COST_LIGHT, mg_handle_stats, NULL, false},
    {"/api/perf", MG_COST_HEAVY, mg_handle_perf, mg_perf_is_heavy, true},
    {"/server-status", MG_COST_LIGHT, mg_handle_status, NULL, false},
    {"/metrics", MG_COST_LIGHT, mg_handle_metrics, NULL, false},
};
const unsigned mg_route_table_len = sizeof mg_routes / sizeof mg_routes[0];

bool mg_route_is_heavy(unsigned route, struct mg_env *env, const struct mg_request *req)
{
    if (route >= mg_route_table_len || mg_routes[route].cost != MG_COST_HEAVY)
        return false;
    return mg_routes[route].heavy_when == NULL || mg_routes[route].heavy_when(env, req);
}

unsigned mg_route_names(const char **out, unsigned cap)
{
    unsigned n = 0;
    for (unsigned i = 0; i < mg_route_table_len && n < cap; i++)
        out[n++] = mg_routes[i].template;
    if (n < cap)
        out[n++] = "(not found)";
    if (n < cap)
        out[n++] = "(bad request)";
    if (n < cap)
        out[n++] = "(static)";
    return n;
}

static bool match(const char *tmpl, const char *path, char *param, size_t cap)
{
    while (*tmpl && *path) {
        if (*tmpl == ':') {
            const char *slash = strchr(path, '/');
            size_t n = slash ? (size_t)(slash - path) : strlen(path);
            if (n == 0 || n >= cap)
                return false;
            memcpy(param, path, n);
            param[n] = '\0';
            path += n;
            tmpl = strchr(tmpl, '/');
            if (!tmpl)
                return *path == '\0';
            continue;
        }
        if (*tmpl != *path)
            return false;
        tmpl++, path++;
    }
    return *tmpl == '\0' && *path == '\0';
}

unsigned mg_route_match(const char *path, char *param, size_t cap)
{
    if (cap)
        param[0] = '\0';
    for (unsigned i = 0; i < mg_route_table_len; i++)
        if (match(mg_routes[i].template, path, param, cap))
            return i;
    return MG_ROUTE_NOT_FOUND;
}

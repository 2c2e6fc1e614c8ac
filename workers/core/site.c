/* SPDX-License-Identifier: ISC */
#include "site.h"

#include "admission.h"

#include <string.h>

const struct mg_site *mg_site;

/* The length of the method word a template starts with (0: a plain path, GET and HEAD). */
static size_t template_method_len(const char *tmpl)
{
    return tmpl[0] == '/' ? 0 : strcspn(tmpl, " ");
}

const char *mg_route_row_method(const struct mg_route *row)
{
    const char *t = row->template;
    size_t n = template_method_len(t);
    return n == 4 && memcmp(t, "POST", 4) == 0  ? "POST"
           : n == 3 && memcmp(t, "PUT", 3) == 0 ? "PUT"
           : n                                  ? "OTHER"
                                                : "GET";
}

const char *mg_route_row_path(const struct mg_route *row)
{
    size_t n = template_method_len(row->template);
    return n ? row->template + n + 1 : row->template;
}

const struct mg_route *mg_site_row(unsigned route)
{
    return route < mg_site->routes_len ? &mg_site->routes[route] : NULL;
}

const enum mg_gate_row *mg_site_gates(unsigned route)
{
    if (route == MG_SITE_UPSTREAM)
        return mg_gates_upstream;
    const struct mg_route *row = mg_site_row(route);
    return row ? row->gates : mg_gates_light;
}

bool mg_site_is_heavy(unsigned route, struct mg_env *env, const struct mg_request *req)
{
    if (route == MG_SITE_UPSTREAM)
        return mg_site->proxy->is_heavy(env->cfg, req->path);
    const struct mg_route *row = mg_site_row(route);
    if (!row || row->cost != MG_COST_HEAVY)
        return false;
    return row->heavy_when == NULL || row->heavy_when(env, req);
}

int64_t mg_site_parks_until(unsigned route, struct mg_env *env, const struct mg_request *req,
                            int64_t since_ns)
{
    const struct mg_route *row = mg_site_row(route);
    return row && row->parks_until ? row->parks_until(env, req, since_ns) : 0;
}

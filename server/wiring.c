/* SPDX-License-Identifier: ISC */
#include "wiring.h"

#include "router.h"
#include "site.h"
#include "upstream.h"

void mg_site_wire(void)
{
    static struct mg_site site;
    site = (struct mg_site){.routes = mg_routes,
                            .routes_len = mg_route_table_len,
                            .match_method = mg_route_match_method,
                            .guards = mg_node_visibility_guards,
                            .guard = mg_node_visibility_guard,
                            .proxy = &mg_upstream_proxy};
    mg_site = &site;
}

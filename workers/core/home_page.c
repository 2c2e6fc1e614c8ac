/* SPDX-License-Identifier: ISC */
#include "home_page.h"

#include "site.h"

#include <string.h>
#include <time.h>

bool mg_home_applies(const struct mg_config *cfg, const char *path)
{
    return cfg->public_dir[0] == '\0' && strcmp(path, "/") == 0;
}

/* A link to each read route that takes no path parameter, from the route table: the page
 * lists what this build serves, never a stale copy. A route that needs a query parameter is
 * linked with its required parameters' samples (params.h), so every link answers 200. The admin
 * pages are linked below. */
static void route_links(struct mg_buf *b)
{
    time_t hour_ago = time(NULL) - 3600;
    struct tm tm;
    gmtime_r(&hour_ago, &tm);
    mg_buf_puts(b, "<ul class=\"routes\">\n");
    for (unsigned i = 0; i < mg_site->routes_len; i++) {
        const struct mg_route *row = &mg_site->routes[i];
        const char *t = row->template;
        /* Not linked: a route of another method than GET, nor one of CoreScope's API-key
         * routes (403 here without an upstream), nor one whose feature config.json leaves off. */
        if (row->admin_only || strchr(t, ':') || t[0] != '/' || row->upstream_first ||
            (row->served && !row->served()))
            continue;
        char query[96];
        mg_params_sample_query(row->params, &tm, query, sizeof query);
        mg_buf_printf(b, "<li><a href=\"%s%s\">%s</a></li>\n", t, query, t);
    }
    mg_buf_puts(b, "</ul>\n");
}

enum mg_turn mg_home_serve(struct mg_env *env, const struct mg_request *req,
                           struct mg_response *res)
{
    (void)env;
    (void)req;
    struct mg_buf *b = &res->body;
    res->status = 200;
    res->content_type = "text/html; charset=utf-8";
    mg_response_header(res, "Cache-Control: no-cache");
    mg_buf_puts(
        b, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
           "<link rel=\"icon\" href=\"data:,\"><title>meshgate</title><style>"
           "body{font:15px system-ui,sans-serif;margin:1.5em auto;max-width:46em;padding:0 1em}"
           "code,pre{background:#f3f3f3;padding:1px 4px}pre{padding:.6em}"
           "ul.routes{columns:2}</style></head><body>\n"
           "<h1>meshgate</h1>\n"
           "<p>This is meshgate, a server for the read API of "
           "<a href=\"https://github.com/Kpa-clawbot/CoreScope\">CoreScope</a> (a MeshCore "
           "network analyzer), answering from CoreScope's SQLite database. It serves the JSON "
           "API below, its own health, metrics and status pages, and no front end yet: this "
           "page stands in for one.</p>\n"
           "<h2>Status</h2>\n<ul>\n"
           "<li><a href=\"/api/healthz\">/api/healthz</a>: whether it can answer</li>\n"
           "<li><a href=\"/api/perf\">/api/perf</a>: latency, gates and memory</li>\n"
           "<li><a href=\"/server-status\">/server-status</a> and "
           "<a href=\"/metrics\">/metrics</a> (Prometheus): for clients in "
           "<code>MESHGATE_ADMIN_NETWORKS</code> (loopback by default) and signed-in "
           "clients; 404 for anyone else</li>\n</ul>\n"
           "<h2>The API</h2>\n"
           "<p>Read routes without a parameter (the others take a node's key, a packet's id "
           "or hash, an observer or a channel: see the README):</p>\n");
    route_links(b);
    mg_buf_puts(b,
                "<h2>CoreScope's front end</h2>\n"
                "<p>To serve CoreScope's pages here, point <code>MESHGATE_PUBLIC_DIR</code> at the "
                "<code>public/</code> directory of a CoreScope checkout and restart, e.g.</p>\n"
                "<pre>git clone https://github.com/Kpa-clawbot/CoreScope\n"
                "MESHGATE_PUBLIC_DIR=$PWD/CoreScope/public make run</pre>\n"
                "<p>With <code>MESHGATE_UPSTREAM</code> set to CoreScope's own server "
                "(<code>http://127.0.0.1:3000</code>), what meshgate does not answer itself "
                "(other routes, POSTs, the live feed's WebSocket) is passed to it, and without a "
                "public directory so is this page. See meshgate(8) and the README.</p>\n"
                "</body></html>\n");
    return MG_DONE;
}

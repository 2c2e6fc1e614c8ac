/* SPDX-License-Identifier: ISC */
/*
 * GET /api/spec and GET /api/docs: meshgate's own OpenAPI 3.0 description of the routes it
 * serves, and a small page of its own that shows it (no third-party script or style: the page
 * is one file, and fetches only /api/spec).
 *
 * The description is written from the route table (router.c) and each route's parameter
 * table (params.h), so it cannot drift from what is served: every route but these two, its
 * path (":name" as "{name}"), its query parameters (kind, default, bounds, choices, whether
 * required, and as description what CoreScope does with a bad value), its cost class and its
 * gates (x-meshgate-cost, x-meshgate-gates, with the answers each gate refuses with), and for
 * a route that is only for admins, that. Operations are tagged by the path's first segment
 * after /api/ ("meshgate" for the others). Routes a configured upstream answers are not
 * meshgate's and are not described.
 *
 * The text depends only on the program, so a process renders it once, on its first request,
 * and every request copies it (light: no database, 0 VM steps).
 */
#include "answer_cache.h"
#include "gates.h"
#include "json.h"
#include "params.h"
#include "router.h"
#include "version.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/* The route's path and method (a template may start with its method: router.h). */
static const char *path_of(const struct mg_route *r)
{
    return mg_route_path((unsigned)(r - mg_routes));
}

static bool self(const struct mg_route *r)
{
    return strcmp(r->template, "/api/spec") == 0 || strcmp(r->template, "/api/docs") == 0;
}

/* "/api/nodes/:pubkey/health" -> "/api/nodes/{pubkey}/health" */
static void openapi_path(const char *tmpl, char *out, size_t cap)
{
    size_t n = 0;
    for (const char *p = tmpl; *p && n + 2 < cap; p++) {
        if (*p == ':') {
            out[n++] = '{';
            while (p[1] && p[1] != '/' && n + 2 < cap)
                out[n++] = *++p;
            out[n++] = '}';
        } else {
            out[n++] = *p;
        }
    }
    out[n] = '\0';
}

/* The first segment after /api/, or "meshgate". */
static void tag_of(const char *tmpl, char *out, size_t cap)
{
    if (strncmp(tmpl, "/api/", 5) != 0) {
        snprintf(out, cap, "meshgate");
        return;
    }
    size_t n = strcspn(tmpl + 5, "/");
    snprintf(out, cap, "%.*s", (int)n, tmpl + 5);
}

static void write_param(struct mg_json *j, const struct mg_param *p)
{
    mg_json_object_begin(j);
    mg_json_kv_string(j, "name", p->name);
    mg_json_kv_string(j, "in", "query");
    mg_json_kv_bool(j, "required", (p->flags & MG_PARAM_REQUIRED) != 0);
    if (p->corescope)
        mg_json_kv_string(j, "description", p->corescope);
    mg_json_key(j, "schema");
    mg_json_object_begin(j);
    switch (p->kind) {
    case MG_PARAM_INT:
    case MG_PARAM_LIMIT:
        mg_json_kv_string(j, "type", "integer");
        mg_json_kv_int(j, "default", p->def);
        mg_json_kv_int(j, "minimum", p->kind == MG_PARAM_LIMIT && p->min < 1 ? 1 : p->min);
        mg_json_kv_int(j, "maximum", p->max);
        break;
    case MG_PARAM_CHOICE:
        mg_json_kv_string(j, "type", "string");
        mg_json_key(j, "enum");
        mg_json_array_begin(j);
        for (const char *const *c = p->choices; c && *c; c++)
            mg_json_string(j, *c);
        mg_json_array_end(j);
        if (p->def >= 0 && p->choices)
            mg_json_kv_string(j, "default", p->choices[p->def]);
        break;
    case MG_PARAM_TEXT:
        mg_json_kv_string(j, "type", "string");
        break;
    case MG_PARAM_REAL:
        mg_json_kv_string(j, "type", "number");
        mg_json_kv_double(j, "default", p->real_def);
        break;
    case MG_PARAM_LIST:
        mg_json_kv_string(j, "type", "array");
        mg_json_key(j, "items");
        mg_json_object_begin(j);
        mg_json_kv_string(j, "type", "string");
        mg_json_object_end(j);
        mg_json_kv_int(j, "maxItems", MG_PARAM_LIST_MAX);
        break;
    }
    mg_json_object_end(j);
    if (p->kind == MG_PARAM_LIST) {
        mg_json_kv_string(j, "style", "form");
        mg_json_kv_bool(j, "explode", false);
    }
    mg_json_object_end(j);
}

static const char *content_type_of(const char *tmpl)
{
    if (strcmp(tmpl, "/metrics") == 0)
        return "text/plain";
    if (strcmp(tmpl, "/server-status") == 0)
        return "text/html";
    return "application/json";
}

static const char *cost_text(const struct mg_route *r)
{
    if (r->cost == MG_COST_LIGHT)
        return "light: answered at once, through no gate";
    if (r->heavy_when)
        return "heavy, unless this request can be answered light (what the route keeps is warm, "
               "or the answer is small): a heavy request passes its gates in order";
    return "heavy: every request passes its gates in order";
}

static void write_responses(struct mg_json *j, const struct mg_route *r)
{
    mg_json_key(j, "responses");
    mg_json_object_begin(j);
    mg_json_key(j, "200");
    mg_json_object_begin(j);
    mg_json_kv_string(j, "description", "the answer");
    mg_json_key(j, "content");
    mg_json_object_begin(j);
    mg_json_key(j, content_type_of(path_of(r)));
    mg_json_object_begin(j);
    mg_json_object_end(j);
    mg_json_object_end(j);
    mg_json_object_end(j);
    if (r->params) {
        mg_json_key(j, "400");
        mg_json_object_begin(j);
        mg_json_kv_string(j, "description",
                          "a parameter the route refuses: {\"error\": naming it}");
        mg_json_object_end(j);
    }
    /* Each refusal status of the route's gates, once, with every gate's reason for it. */
    for (const enum mg_gate_row *g = r->gates; g && *g != MG_GATE_ROWS; g++) {
        bool seen = false;
        for (const enum mg_gate_row *h = r->gates; h != g; h++)
            seen = seen || mg_gates[*h].status == mg_gates[*g].status;
        if (seen || mg_gates[*g].status == 0)
            continue;
        char status[16];
        snprintf(status, sizeof status, "%d", mg_gates[*g].status);
        mg_json_key(j, status);
        mg_json_object_begin(j);
        mg_json_key(j, "description");
        struct mg_buf text;
        mg_buf_init(&text);
        for (const enum mg_gate_row *h = g; *h != MG_GATE_ROWS; h++)
            if (mg_gates[*h].status == mg_gates[*g].status)
                mg_buf_printf(&text, "%s%s: %s", text.len ? "; " : "", mg_gates[*h].name,
                              mg_gates[*h].refusal);
        mg_json_string(j, text.failed ? "" : mg_buf_cstr(&text));
        mg_buf_free(&text);
        mg_json_object_end(j);
    }
    if (r->admin_only) {
        mg_json_key(j, "404");
        mg_json_object_begin(j);
        mg_json_kv_string(j, "description", "not an admin: as a path that does not exist");
        mg_json_object_end(j);
    }
    mg_json_object_end(j);
}

/* The operation of r under its path's object: "get", "post" or "put". */
static void write_operation(struct mg_json *j, const struct mg_route *r, const char *path)
{
    const char *method = mg_route_method((unsigned)(r - mg_routes));
    char key[8];
    size_t k = 0;
    for (; method[k] && k + 1 < sizeof key; k++)
        key[k] = (char)(method[k] - 'A' + 'a');
    key[k] = '\0';
    mg_json_key(j, key);
    mg_json_object_begin(j);
    char summary[272], tag[64];
    snprintf(summary, sizeof summary, "%s %s", method, path);
    mg_json_kv_string(j, "summary", summary);
    mg_json_kv_string(j, "description", cost_text(r));
    tag_of(path_of(r), tag, sizeof tag);
    mg_json_key(j, "tags");
    mg_json_array_begin(j);
    mg_json_string(j, tag);
    mg_json_array_end(j);
    const char *colon = strchr(path_of(r), ':');
    if (colon || (r->params && r->params->count)) {
        mg_json_key(j, "parameters");
        mg_json_array_begin(j);
        if (colon) {
            mg_json_object_begin(j);
            mg_json_key(j, "name");
            mg_json_string_n(j, colon + 1, strcspn(colon + 1, "/"));
            mg_json_kv_string(j, "in", "path");
            mg_json_kv_bool(j, "required", true);
            mg_json_key(j, "schema");
            mg_json_object_begin(j);
            mg_json_kv_string(j, "type", "string");
            mg_json_object_end(j);
            mg_json_object_end(j);
        }
        for (unsigned i = 0; r->params && i < r->params->count; i++)
            write_param(j, &r->params->params[i]);
        mg_json_array_end(j);
    }
    mg_json_kv_string(j, "x-meshgate-cost", r->cost == MG_COST_LIGHT ? "light" : "heavy");
    mg_json_key(j, "x-meshgate-gates");
    mg_json_array_begin(j);
    for (const enum mg_gate_row *g = r->gates; g && *g != MG_GATE_ROWS; g++)
        mg_json_string(j, mg_gates[*g].name);
    mg_json_array_end(j);
    if (r->admin_only) {
        mg_json_kv_bool(j, "x-meshgate-admin-only", true);
        mg_json_key(j, "security");
        mg_json_array_begin(j);
        mg_json_object_begin(j);
        mg_json_key(j, "ApiKeyAuth");
        mg_json_array_begin(j);
        mg_json_array_end(j);
        mg_json_object_end(j);
        mg_json_array_end(j);
    }
    write_responses(j, r);
    mg_json_object_end(j);
}

/* The tags in bytewise order, each once. */
static void write_tags(struct mg_json *j)
{
    mg_json_key(j, "tags");
    mg_json_array_begin(j);
    char last[64] = "";
    for (;;) {
        char next[64] = "";
        for (unsigned i = 0; i < mg_route_table_len; i++) {
            char tag[64];
            if (self(&mg_routes[i]))
                continue;
            tag_of(path_of(&mg_routes[i]), tag, sizeof tag);
            if (strcmp(tag, last) > 0 && (!next[0] || strcmp(tag, next) < 0))
                snprintf(next, sizeof next, "%s", tag);
        }
        if (!next[0])
            break;
        mg_json_object_begin(j);
        mg_json_kv_string(j, "name", next);
        mg_json_object_end(j);
        snprintf(last, sizeof last, "%s", next);
    }
    mg_json_array_end(j);
}

static void render(struct mg_buf *b)
{
    struct mg_json j;
    mg_json_init(&j, b);
    mg_json_object_begin(&j);
    mg_json_kv_string(&j, "openapi", "3.0.3");
    mg_json_key(&j, "info");
    mg_json_object_begin(&j);
    mg_json_kv_string(&j, "title", "meshgate API");
    mg_json_kv_string(&j, "description",
                      "The read API of CoreScope's database as meshgate serves it: the routes "
                      "it answers itself, their parameters, cost classes and gates.");
    mg_json_kv_string(&j, "version", MESHGATE_VERSION);
    mg_json_object_end(&j);
    mg_json_key(&j, "paths");
    mg_json_object_begin(&j);
    for (unsigned i = 0; i < mg_route_table_len; i++) {
        const struct mg_route *r = &mg_routes[i];
        bool written = false; /* with an earlier route of the same path */
        for (unsigned e = 0; e < i && !written; e++)
            written = strcmp(mg_route_path(e), mg_route_path(i)) == 0;
        if (self(r) || written)
            continue;
        char path[256];
        openapi_path(path_of(r), path, sizeof path);
        mg_json_key(&j, path);
        mg_json_object_begin(&j);
        for (unsigned o = i; o < mg_route_table_len; o++)
            if (strcmp(mg_route_path(o), mg_route_path(i)) == 0)
                write_operation(&j, &mg_routes[o], path);
        mg_json_object_end(&j);
    }
    mg_json_object_end(&j);
    write_tags(&j);
    mg_json_key(&j, "components");
    mg_json_object_begin(&j);
    mg_json_key(&j, "securitySchemes");
    mg_json_object_begin(&j);
    mg_json_key(&j, "ApiKeyAuth");
    mg_json_object_begin(&j);
    mg_json_kv_string(&j, "type", "apiKey");
    mg_json_kv_string(&j, "in", "header");
    mg_json_kv_string(&j, "name", "X-API-Key");
    mg_json_object_end(&j);
    mg_json_object_end(&j);
    mg_json_object_end(&j);
    mg_json_object_end(&j);
    mg_buf_putc(b, '\n');
}

static struct {
    pthread_once_t once;
    struct mg_buf body;
    atomic_bool ready;
} spec = {.once = PTHREAD_ONCE_INIT};

static void render_once(void)
{
    mg_buf_init(&spec.body);
    render(&spec.body);
    atomic_store(&spec.ready, true);
}

enum mg_turn mg_handle_spec(struct mg_env *env, const struct mg_request *req,
                            struct mg_response *res)
{
    (void)env;
    (void)req;
    bool kept = atomic_load(&spec.ready);
    pthread_once(&spec.once, render_once);
    if (spec.body.failed) {
        mg_response_error(res, 503, "out of memory");
        return MG_DONE;
    }
    mg_response_json(res, 200);
    mg_buf_append(&res->body, spec.body.data, spec.body.len);
    if (kept)
        mg_cached_bytes_copied_add(spec.body.len); /* a copy, not a rendering (tests/test_cost.c) */
    return MG_DONE;
}

/* The page: fetches /api/spec and lists each path with its cost, gates and parameters. Text is
 * set as text (never parsed as HTML). */
static const char docs_page[] =
    "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
    "<link rel=\"icon\" href=\"data:,\"><title>meshgate API</title><style>"
    "body{font:14px system-ui,sans-serif;margin:1.5em;max-width:70em}"
    "h2{font-size:16px;margin:1.2em 0 .2em;font-family:monospace}"
    "table{border-collapse:collapse;margin:.3em 0}"
    "td,th{border:1px solid #ccc;padding:2px 8px;text-align:left;vertical-align:top}"
    ".cost{color:#555}</style></head><body>\n<h1>meshgate API</h1>\n"
    "<p>The routes this server answers itself, from <a href=\"/api/spec\">/api/spec</a> "
    "(OpenAPI 3.0).</p>\n<div id=\"routes\">Loading&hellip;</div>\n<script>\n"
    "'use strict';\n"
    "function el(tag, text) { const e = document.createElement(tag);"
    " if (text !== undefined) e.textContent = String(text); return e; }\n"
    "fetch('/api/spec').then((r) => r.json()).then((spec) => {\n"
    "  const root = document.getElementById('routes');\n"
    "  root.textContent = '';\n"
    "  root.appendChild(el('p', spec.info.title + ' ' + spec.info.version));\n"
    "  for (const [path, item] of Object.entries(spec.paths)) {\n"
    "    const op = item.get;\n"
    "    root.appendChild(el('h2', 'GET ' + path));\n"
    "    const gates = (op['x-meshgate-gates'] || []).join(', ') || 'none';\n"
    "    root.appendChild(el('div', op.description + ' (gates: ' + gates + ')'))"
    ".className = 'cost';\n"
    "    const params = op.parameters || [];\n"
    "    if (params.length) {\n"
    "      const t = el('table');\n"
    "      const head = t.insertRow();\n"
    "      for (const h of ['parameter', 'in', 'type', 'default', 'bad values'])"
    " head.appendChild(el('th', h));\n"
    "      for (const p of params) {\n"
    "        const row = t.insertRow();\n"
    "        const s = p.schema || {};\n"
    "        let type = s.type || '';\n"
    "        if (s.enum) type += ': ' + s.enum.join(' | ');\n"
    "        if (s.minimum !== undefined) type += ' ' + s.minimum + '..' + s.maximum;\n"
    "        for (const v of [p.name + (p.required ? ' (required)' : ''), p.in, type,"
    " s.default === undefined ? '' : s.default, p.description || ''])"
    " row.appendChild(el('td', v));\n"
    "      }\n"
    "      root.appendChild(t);\n"
    "    }\n"
    "    const codes = Object.entries(op.responses || {})"
    ".filter(([code]) => code !== '200')"
    ".map(([code, r]) => code + ' ' + r.description);\n"
    "    for (const c of codes) root.appendChild(el('div', c)).className = 'cost';\n"
    "  }\n"
    "}).catch((e) => { document.getElementById('routes').textContent ="
    " 'cannot read /api/spec: ' + e; });\n"
    "</script>\n</body></html>\n";

enum mg_turn mg_handle_docs(struct mg_env *env, const struct mg_request *req,
                            struct mg_response *res)
{
    (void)env;
    (void)req;
    res->status = 200;
    res->content_type = "text/html; charset=utf-8";
    mg_buf_append(&res->body, docs_page, sizeof docs_page - 1);
    return MG_DONE;
}

/* SPDX-License-Identifier: ISC */
/*
 * Fuzz target: the loader of the operator's CoreScope config.json (server/corescope_config.c):
 * the bodies of /api/config/..., the regions, the areas' polygons and boxes, geo_filter, the
 * hidden name prefixes and the node blacklist. The input is config.json; after a NUL byte,
 * the rest is the theme.json beside it.
 *
 * Checks: a refusal says why and leaves nothing loaded. An accepted file loads the same way
 * twice (the same bodies, byte for byte); every body is one strict JSON value ending in a
 * newline, with no NUL inside; the regions and areas are sorted and unique; every loaded
 * number is finite; blacklisted keys (nodes' and observers') are trimmed, lowercased and
 * non-empty and each hides a node (or observer) of that key (node_visibility.h), as each
 * prefix hides a node of a name starting with it; the geometry answers without fault, and a node at
 * (0, 0) passes every test, as in CoreScope.
 */
#include "corescope_config.h"
#include "json_check.h"
#include "node_visibility.h"

#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_point(const struct mg_corescope_config *c, double lat, double lon)
{
    for (size_t i = 0; i < c->area_count; i++)
        (void)mg_corescope_area_holds(&c->areas[i], lat, lon);
    (void)mg_corescope_geo_passes(c, lat, lon);
}

static void check_shape(const struct mg_corescope_area *a)
{
    if (a->polygon_len && !a->polygon)
        abort();
    for (size_t i = 0; i < a->polygon_len; i++)
        if (!isfinite(a->polygon[i][0]) || !isfinite(a->polygon[i][1]))
            abort();
    if (a->has_box && (!isfinite(a->lat_min) || !isfinite(a->lat_max) || !isfinite(a->lon_min) ||
                       !isfinite(a->lon_max)))
        abort();
    if (!mg_corescope_area_holds(a, 0, 0))
        abort();
}

/* A blacklist's keys: trimmed, lowercased, not empty. */
static void check_keys(char *const *keys, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        const char *k = keys[i];
        size_t n = strlen(k);
        if (!n || isspace((unsigned char)k[0]) || isspace((unsigned char)k[n - 1]))
            abort();
        for (size_t x = 0; x < n; x++)
            if (isupper((unsigned char)k[x]))
                abort();
    }
}

static void check_loaded(const struct mg_corescope_config *c)
{
    if (!c->loaded || c->generation == 0 || !isfinite(c->relay_active_hours) ||
        c->relay_active_hours <= 0)
        abort();
    for (int b = 0; b < MG_CS_BODY_COUNT; b++) {
        const char *body = c->body[b];
        size_t len = c->body_len[b];
        if (!body || len < 2 || body[len - 1] != '\n' || body[len] != '\0' ||
            memchr(body, '\0', len) || !json_is_valid(body, len - 1))
            abort();
    }
    for (size_t i = 0; i < c->region_count; i++)
        if (!c->regions[i].code || !c->regions[i].name ||
            (i && strcmp(c->regions[i - 1].code, c->regions[i].code) >= 0))
            abort();
    for (size_t i = 0; i < c->area_count; i++) {
        if (!c->areas[i].key || (i && strcmp(c->areas[i - 1].key, c->areas[i].key) >= 0))
            abort();
        if (mg_corescope_area(c, c->areas[i].key) != &c->areas[i])
            abort();
        check_shape(&c->areas[i]);
    }
    if (!c->has_geo_filter && (c->geo_filter.polygon_len || c->geo_filter.has_box))
        abort();
    check_shape(&c->geo_filter);
    if (!isfinite(c->geo_buffer_km) || !mg_corescope_geo_passes(c, 0, 0))
        abort();
    check_keys(c->blacklist, c->blacklist_count);
    check_keys(c->observer_blacklist, c->observer_blacklist_count);
    for (size_t i = 0; i < c->hidden_prefix_count; i++)
        if (!c->hidden_prefixes[i][0])
            abort();
    /* The geometry on the polygons' own points and edges' midpoints, and far away. */
    const struct mg_corescope_area *g = &c->geo_filter;
    for (size_t i = 0; i < g->polygon_len && i < 64; i++) {
        const double *p = g->polygon[i], *q = g->polygon[(i + 1) % g->polygon_len];
        check_point(c, p[0], p[1]);
        check_point(c, (p[0] + q[0]) / 2, (p[1] + q[1]) / 2);
    }
    check_point(c, 89.9, 179.9);
    check_point(c, -1e300, 1e300);
}

/* What the node-visibility predicate makes of the configuration it is given to serve. */
static void check_visibility(const struct mg_corescope_config *c)
{
    for (size_t i = 0; i < c->blacklist_count && i < 64; i++)
        if (!mg_node_hidden(c->blacklist[i], "") || !mg_node_visibility_hides())
            abort();
    for (size_t i = 0; i < c->hidden_prefix_count && i < 64; i++) {
        char name[512];
        snprintf(name, sizeof name, "%sX", c->hidden_prefixes[i]);
        if (strlen(c->hidden_prefixes[i]) < sizeof name - 1 && !mg_node_hidden("00", name))
            abort();
    }
    for (size_t i = 0; i < c->observer_blacklist_count && i < 64; i++)
        if (!mg_observer_hidden(c->observer_blacklist[i]))
            abort();
    (void)mg_node_listed("00", "", true, 10, 10, false);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    const char *text = (const char *)data;
    const char *nul = memchr(text, '\0', size);
    size_t config_len = nul ? (size_t)(nul - text) : size;
    const char *theme = nul ? nul + 1 : NULL;
    size_t theme_len = nul ? size - config_len - 1 : 0;

    struct mg_corescope_config a, b;
    char err[1024], err2[1024];
    int rc = mg_corescope_load_text(&a, "fuzz.json", text, config_len, theme, theme_len, err,
                                    sizeof err);
    int rc2 = mg_corescope_load_text(&b, "fuzz.json", text, config_len, theme, theme_len, err2,
                                     sizeof err2);
    if (rc != rc2)
        abort();
    if (rc != 0) {
        if (rc != -1 || !err[0] || strcmp(err, err2) != 0 || a.loaded || b.loaded)
            abort();
        for (int i = 0; i < MG_CS_BODY_COUNT; i++)
            if (a.body[i])
                abort();
        return 0;
    }
    check_loaded(&a);
    for (int i = 0; i < MG_CS_BODY_COUNT; i++)
        if (a.body_len[i] != b.body_len[i] || memcmp(a.body[i], b.body[i], a.body_len[i]) != 0)
            abort();
    mg_corescope_free(&b);
    /* Served as the process's configuration, as the preflight and a reload leave it. */
    mg_corescope_free(&mg_corescope);
    mg_corescope = a;
    check_visibility(&mg_corescope);
    return 0;
}

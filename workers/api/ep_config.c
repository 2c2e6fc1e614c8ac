/* SPDX-License-Identifier: ISC */
/*
 * GET /api/config/{client,cache,regions,theme,map,geo-filter,areas,areas/polygons}: CoreScope's
 * front end asks these on every page. Each body was rendered from CoreScope's config.json
 * when the master read it (workers/data/corescope_config.h); a request copies those bytes. Only
 * /regions reads the database: the configured regions plus every observer's IATA code that
 * is not among them (named by itself), as CoreScope answers.
 */
#include "corescope_config.h"
#include "json.h"
#include "log.h"
#include "router.h"

#include <stdlib.h>
#include <string.h>

static const struct {
    const char *path;
    enum mg_corescope_body body;
} bodies[] = {
    {"/api/config/cache", MG_CS_CACHE},
    {"/api/config/client", MG_CS_CLIENT},
    {"/api/config/theme", MG_CS_THEME},
    {"/api/config/map", MG_CS_MAP},
    {"/api/config/geo-filter", MG_CS_GEO_FILTER},
    {"/api/config/areas", MG_CS_AREAS},
    {"/api/config/areas/polygons", MG_CS_AREAS_POLYGONS},
};

enum mg_turn mg_handle_config(struct mg_env *env, const struct mg_request *req,
                              struct mg_response *res)
{
    (void)env;
    const struct mg_corescope_config *c = mg_corescope_current();
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        if (strcmp(req->path, bodies[i].path) != 0)
            continue;
        if (!c->body[bodies[i].body]) {
            mg_response_error(res, 500, "the configuration could not be rendered");
            return MG_DONE;
        }
        mg_response_json(res, 200);
        mg_buf_append(&res->body, c->body[bodies[i].body], c->body_len[bodies[i].body]);
        return MG_DONE;
    }
    mg_response_error(res, 404, "Not found");
    return MG_DONE;
}

struct code_name {
    const char *code;
    const char *name;
};

static int by_code(const void *a, const void *b)
{
    return strcmp(((const struct code_name *)a)->code, ((const struct code_name *)b)->code);
}

static bool configured(const struct mg_corescope_config *c, const char *code)
{
    size_t lo = 0, hi = c->region_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int cmp = strcmp(c->regions[mid].code, code);
        if (cmp == 0)
            return true;
        if (cmp < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

/* The observers table is small (one row per radio receiver): one pass, no index needed. */
enum mg_turn mg_handle_config_regions(struct mg_env *env, const struct mg_request *req,
                                      struct mg_response *res)
{
    (void)req;
    const struct mg_corescope_config *c = mg_corescope_current();
    sqlite3_stmt *st =
        mg_db_prepare(env->db, "SELECT DISTINCT iata FROM observers WHERE iata IS NOT NULL");
    if (!st) {
        mg_response_error(res, 500, "reading the observers' regions failed");
        return MG_DONE;
    }
    size_t cap = c->region_count + 16, n = 0;
    struct code_name *all = malloc(cap * sizeof *all);
    struct mg_buf codes; /* the database's codes, NUL-separated; offsets until the end */
    mg_buf_init(&codes);
    size_t *offsets = NULL, noffsets = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *code = (const char *)sqlite3_column_text(st, 0);
        if (!code || configured(c, code))
            continue;
        size_t *grown = realloc(offsets, (noffsets + 1) * sizeof *offsets);
        if (!grown)
            break;
        offsets = grown;
        offsets[noffsets++] = codes.len;
        mg_buf_append(&codes, code, strlen(code) + 1);
    }
    int primary = rc & 0xff;
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE || codes.failed || !all) {
        free(all);
        free(offsets);
        mg_buf_free(&codes);
        if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED)
            mg_response_refuse(res, 503, 1, "the database is busy: retry in a moment");
        else
            mg_response_error(res, 500, "reading the observers' regions failed");
        return MG_DONE;
    }
    if (cap < c->region_count + noffsets) {
        cap = c->region_count + noffsets;
        struct code_name *grown = realloc(all, cap * sizeof *all);
        if (!grown) {
            free(all);
            free(offsets);
            mg_buf_free(&codes);
            mg_response_error(res, 500, "out of memory");
            return MG_DONE;
        }
        all = grown;
    }
    for (size_t i = 0; i < c->region_count; i++)
        all[n++] = (struct code_name){c->regions[i].code, c->regions[i].name};
    for (size_t i = 0; i < noffsets; i++)
        all[n++] = (struct code_name){codes.data + offsets[i], codes.data + offsets[i]};
    qsort(all, n, sizeof *all, by_code);

    mg_response_json(res, 200);
    struct mg_json j;
    mg_json_init(&j, &res->body);
    mg_json_object_begin(&j); /* a map: keys in bytewise order */
    for (size_t i = 0; i < n; i++)
        mg_json_kv_string(&j, all[i].code, all[i].name);
    mg_json_object_end(&j);
    mg_buf_putc(&res->body, '\n');
    free(all);
    free(offsets);
    mg_buf_free(&codes);
    return MG_DONE;
}

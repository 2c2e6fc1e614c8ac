/* SPDX-License-Identifier: ISC */
/*
 * GET /api/nodes/{pubkey}/reach?days=N: the reach report, a cold report (cold_report.h):
 * built at most `cap` at a time for the whole process group (the cold-scan gate), shared by
 * every worker through the result cache, and built once for identical concurrent requests
 * (coalescing). Bad parameters are answered 400 before any of that; the build reads the node
 * and observer tables first (404 when the key is in neither), then scans.
 */
#include "cold_report.h"
#include "params.h"
#include "reach.h"
#include "result_cache.h"
#include "router.h"

#include <stdio.h>
#include <string.h>

struct reach_args {
    char pubkey[65];
    int days;
};
_Static_assert(sizeof(struct reach_args) <= MG_COLD_ARGS_BYTES, "reach args fit a build");

static void build(struct mg_cold_build *b, struct mg_db *db)
{
    const struct reach_args *a = (const struct reach_args *)b->args;
    struct mg_reach_stats stats;
    memset(&stats, 0, sizeof stats);
    enum mg_reach_result r = mg_reach_build(db, a->pubkey, a->days, b->now_unix, &b->body, &stats,
                                            b->err, sizeof b->err);
    b->result = r == MG_REACH_OK           ? MG_COLD_OK
                : r == MG_REACH_NOT_FOUND  ? MG_COLD_NOT_FOUND
                : r == MG_REACH_BAD_PUBKEY ? MG_COLD_BAD_REQUEST
                                           : MG_COLD_ERROR;
    b->busy = r == MG_REACH_ERROR && (stats.db_error & 0xff) == SQLITE_BUSY;
}

static const struct mg_cold_report reach_report = {
    .name = "reach report",
    .not_found = "Not found",
    .bad_request = "invalid pubkey: expected 64 hex chars",
    .build = build,
};

static void reach_key(const struct reach_args *a, char key[MG_CACHE_KEY_MAX])
{
    snprintf(key, MG_CACHE_KEY_MAX, "%s|%d", a->pubkey, a->days);
}

/*
 * The parameters, declared once (params.h). CoreScope's handleNodeReach: days missing /
 * empty / malformed: 7; out of range: clamped to 1..30 (clampDays). The key (the path): not
 * 64 hex digits: 400 "invalid pubkey: expected 64 hex chars", as CoreScope.
 */
struct reach_params {
    int64_t days;
};
static const struct mg_param reach_param_list[] = {
    {.name = "days",
     .kind = MG_PARAM_INT,
     .offset = offsetof(struct reach_params, days),
     .def = 7,
     .min = 1,
     .max = 30,
     .corescope = "Atoi, else 7; clampDays: 1..30"},
};
const struct mg_param_table mg_reach_params = MG_PARAM_TABLE(struct reach_params, reach_param_list);

/* The report's arguments; false when the key is not one. */
static bool read_args(const struct mg_request *req, struct reach_args *a)
{
    memset(a, 0, sizeof *a);
    if (!mg_reach_parse_pubkey(req->path_param, a->pubkey))
        return false;
    struct reach_params own;
    const struct reach_params *p = mg_params_get(&mg_reach_params, req, NULL, &own);
    if (!p)
        return false; /* not reached: the table refuses nothing */
    a->days = (int)p->days;
    return true;
}

bool mg_reach_is_heavy(struct mg_env *env, const struct mg_request *req)
{
    struct reach_args a;
    if (!read_args(req, &a))
        return false;
    char key[MG_CACHE_KEY_MAX];
    reach_key(&a, key);
    return mg_cold_report_is_heavy(env, key);
}

enum mg_turn mg_handle_reach(struct mg_env *env, const struct mg_request *req,
                             struct mg_response *res)
{
    struct reach_args a;
    if (!read_args(req, &a)) {
        mg_response_error(res, 400, "invalid pubkey: expected 64 hex chars");
        return MG_DONE;
    }
    char key[MG_CACHE_KEY_MAX];
    reach_key(&a, key);
    return mg_cold_report_serve(env, req, res, &reach_report, key, &a, sizeof a);
}

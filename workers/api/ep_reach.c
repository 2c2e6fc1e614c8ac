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

bool mg_reach_is_heavy(struct mg_env *env, const struct mg_request *req)
{
    struct reach_args a;
    if (!mg_reach_parse_pubkey(req->path_param, a.pubkey))
        return false;
    int64_t days;
    mg_param_int(req, NULL, "days", 7, 1, 30, &days); /* as the handler reads it */
    a.days = (int)days;
    char key[MG_CACHE_KEY_MAX];
    reach_key(&a, key);
    return mg_cold_report_is_heavy(env, key);
}

void mg_handle_reach(struct mg_env *env, const struct mg_request *req, struct mg_response *res)
{
    struct reach_args a;
    memset(&a, 0, sizeof a);
    if (!mg_reach_parse_pubkey(req->path_param, a.pubkey)) {
        mg_response_error(res, 400, "invalid pubkey: expected 64 hex chars");
        return;
    }
    /* days: as CoreScope, missing, empty or malformed: 7; clamped to 1..30 */
    int64_t days;
    if (!mg_param_int(req, res, "days", 7, 1, 30, &days))
        return;
    a.days = (int)days;
    char key[MG_CACHE_KEY_MAX];
    reach_key(&a, key);
    mg_cold_report_serve(env, req, res, &reach_report, key, &a, sizeof a);
}

/* SPDX-License-Identifier: ISC */
/*
 * GET /api/nodes/{pubkey}/neighbors?min_count=N&min_score=F&include_ambiguous=B: the node's
 * first-hop neighbours from CoreScope's in-memory neighbour graph, rebuilt here from the
 * observations (neighbor_graph.h says how, and where it cannot equal CoreScope's). A cold
 * report (cold_report.h): built under the cold gate, shared through the result cache. An
 * unknown key has no edges: 200 with an empty list, as CoreScope answers.
 */
#include "cold_report.h"
#include "json.h"
#include "neighbor_graph.h"
#include "params.h"
#include "reach.h"
#include "result_cache.h"
#include "router.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

struct neighbors_args {
    char pubkey[65];
    int64_t min_count;
    double min_score;
    bool include_ambiguous;
};
_Static_assert(sizeof(struct neighbors_args) <= MG_COLD_ARGS_BYTES, "args fit a build");

static void build(struct mg_cold_build *b, struct mg_db *db)
{
    const struct neighbors_args *a = (const struct neighbors_args *)b->args;
    struct mg_neighbor_query q = {a->pubkey, a->min_count, a->min_score, a->include_ambiguous,
                                  b->now_unix * 1000};
    int rc = mg_neighbor_graph_answer(db, &q, &b->body);
    if (rc == SQLITE_OK) {
        b->result = MG_COLD_OK;
    } else {
        b->result = MG_COLD_ERROR;
        b->busy = (rc & 0xff) == SQLITE_BUSY;
        snprintf(b->err, sizeof b->err, "neighbour graph: %s", sqlite3_errstr(rc));
    }
}

static const struct mg_cold_report neighbors_report = {
    .name = "neighbors report",
    .not_found = "Not found",
    .bad_request = "invalid pubkey: expected 64 hex chars",
    .build = build,
};

static bool parse_args(const struct mg_request *req, struct mg_response *res,
                       struct neighbors_args *a)
{
    memset(a, 0, sizeof *a);
    if (!mg_reach_parse_pubkey(req->path_param, a->pubkey)) {
        if (res)
            mg_response_error(res, 400, "invalid pubkey: expected 64 hex chars");
        return false;
    }
    a->min_count = 1;
    const char *text = mg_param_str(req, "min_count");
    if (text) {
        int64_t v;
        /* CoreScope keeps 1 for anything malformed or below 1 */
        if (mg_parse_atoi(text, &v) && v > 0)
            a->min_count = v;
    }
    text = mg_param_str(req, "min_score");
    if (text) {
        char *end;
        double v = strtod(text, &end);
        /* CoreScope keeps 0 for a malformed one (NaN filters nothing there: 0 too) */
        if (!*end && end != text && !isnan(v))
            a->min_score = v;
    }
    /* CoreScope: only "false" leaves ambiguous edges out */
    text = mg_param_str(req, "include_ambiguous");
    a->include_ambiguous = !text || strcmp(text, "false") != 0;
    return true;
}

/* A key past MG_CACHE_KEY_MAX - 1 bytes (an odd min_score) is built without the cache. */
#define KEY_BYTES 160
static void neighbors_key(const struct neighbors_args *a, char key[KEY_BYTES])
{
    snprintf(key, KEY_BYTES, "nb|%s|%lld|%.17g|%d", a->pubkey, (long long)a->min_count,
             a->min_score, a->include_ambiguous);
}

bool mg_node_neighbors_is_heavy(struct mg_env *env, const struct mg_request *req)
{
    struct neighbors_args a;
    if (!parse_args(req, NULL, &a))
        return false;
    char key[KEY_BYTES];
    neighbors_key(&a, key);
    return mg_cold_report_is_heavy(env, key);
}

void mg_handle_node_neighbors(struct mg_env *env, const struct mg_request *req,
                              struct mg_response *res)
{
    struct neighbors_args a;
    if (!parse_args(req, NULL, &a)) {
        /* Not a key (parse_args refuses nothing else): CoreScope's answer for a node without
         * edges, naming what was asked, lowercased. */
        char node[MG_PATH_PARAM_MAX];
        size_t n = strlen(req->path_param);
        for (size_t i = 0; i <= n; i++)
            node[i] = (char)tolower((unsigned char)req->path_param[i]);
        mg_response_json(res, 200);
        struct mg_json j;
        mg_json_init(&j, &res->body);
        mg_json_object_begin(&j);
        mg_json_kv_string(&j, "node", node);
        mg_json_key(&j, "neighbors");
        mg_json_array_begin(&j);
        mg_json_array_end(&j);
        mg_json_kv_int(&j, "total_observations", 0);
        mg_json_object_end(&j);
        mg_buf_putc(&res->body, '\n');
        return;
    }
    char key[KEY_BYTES];
    neighbors_key(&a, key);
    mg_cold_report_serve(env, req, res, &neighbors_report, key, &a, sizeof a);
}

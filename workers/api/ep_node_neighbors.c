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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
    .needs = MG_COLD_NEEDS_GRAPH,
};

/*
 * The parameters, declared once (params.h). CoreScope's handleNodeNeighbors, missing /
 * empty / malformed / out of range:
 *   min_count          1 / 1 / 1 / below 1: 1
 *   min_score          0 / 0 / 0 (ParseFloat fails; NaN filters nothing there: 0 too) / as given
 *   include_ambiguous  true / true / anything but "false": true
 * The key (the path): not 64 hex digits is a node without edges, 200 with an empty list.
 */
struct neighbors_params {
    int64_t min_count;
    double min_score;
    int ambiguous;
};

static const char *const false_only[] = {"false", NULL};
static const struct mg_param neighbors_param_list[] = {
    {.name = "min_count",
     .kind = MG_PARAM_LIMIT,
     .offset = offsetof(struct neighbors_params, min_count),
     .def = 1,
     .min = 1,
     .max = INT64_MAX,
     .corescope = "Atoi and above 0, else 1"},
    {.name = "min_score",
     .kind = MG_PARAM_REAL,
     .offset = offsetof(struct neighbors_params, min_score),
     .real_def = 0,
     .corescope = "ParseFloat, else 0"},
    {.name = "include_ambiguous",
     .kind = MG_PARAM_CHOICE,
     .offset = offsetof(struct neighbors_params, ambiguous),
     .choices = false_only,
     .def = -1,
     .corescope = "only \"false\" leaves ambiguous edges out"},
};
const struct mg_param_table mg_node_neighbors_params =
    MG_PARAM_TABLE(struct neighbors_params, neighbors_param_list);

static bool parse_args(const struct mg_request *req, struct neighbors_args *a)
{
    memset(a, 0, sizeof *a);
    if (!mg_reach_parse_pubkey(req->path_param, a->pubkey))
        return false;
    struct neighbors_params own;
    const struct neighbors_params *p = mg_params_get(&mg_node_neighbors_params, req, NULL, &own);
    if (!p)
        return false; /* not reached: the table refuses nothing */
    a->min_count = p->min_count;
    a->min_score = p->min_score;
    a->include_ambiguous = p->ambiguous != 0;
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
    if (!parse_args(req, &a))
        return false;
    char key[KEY_BYTES];
    neighbors_key(&a, key);
    return mg_cold_report_is_heavy(env, key);
}

enum mg_turn mg_handle_node_neighbors(struct mg_env *env, const struct mg_request *req,
                                      struct mg_response *res)
{
    struct neighbors_args a;
    if (!parse_args(req, &a)) {
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
        return MG_DONE;
    }
    char key[KEY_BYTES];
    neighbors_key(&a, key);
    return mg_cold_report_serve(env, req, res, &neighbors_report, key, &a, sizeof a);
}

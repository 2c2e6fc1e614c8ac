/* SPDX-License-Identifier: ISC */
/*
 * GET /api/analytics/neighbor-graph?min_count=N&min_score=F&region=&role=: the Analytics
 * page's neighbour graph, every edge of CoreScope's neighbour graph that passes the filters,
 * with the nodes they name and their counts (neighbor_graph.h, mg_neighbor_graph_whole, says
 * which and how). It reads the graph the group builds once (the one
 * /api/nodes/{pubkey}/neighbors reads), never a graph of its own. A cold report
 * (cold_report.h): the answer is built under the cold gate from the graph and shared through
 * the result cache, keyed by its parameters and the minute (CoreScope computes a shape other
 * than its two cached ones on each request, its default ones every 5 minutes; the graph is
 * rebuilt every 5 minutes as CoreScope's). Light when warm.
 */
#include "cold_report.h"
#include "corescope_config.h"
#include "neighbor_graph.h"
#include "params.h"
#include "router.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define ROLE_MAX 48
#define REGION_MAX 80
#define GRAPH_CACHE_S 60

struct graph_args {
    int64_t min_count;
    double min_score;
    char role[ROLE_MAX];     /* lowercased; "" any */
    char region[REGION_MAX]; /* codes, uppercased, comma-separated; "" none */
};
_Static_assert(sizeof(struct graph_args) <= MG_COLD_ARGS_BYTES, "args fit a build");

static void build(struct mg_cold_build *b, struct mg_db *db)
{
    const struct graph_args *a = (const struct graph_args *)b->args;
    struct mg_neighbor_graph_query q = {a->min_count, a->min_score, a->role, a->region,
                                        b->now_unix * 1000};
    mg_cold_result(b, mg_neighbor_graph_whole(db, &q, &b->body), "the neighbour graph");
}

static const struct mg_cold_report graph_report = {
    .name = "neighbour graph report",
    .not_found = "Not found",
    .bad_request = "bad request",
    .build = build,
    .needs = MG_COLD_NEEDS_GRAPH,
};

/*
 * The parameters, declared once (params.h). CoreScope's handleNeighborGraph, missing / empty /
 * malformed / out of range:
 *   min_count  5 / 5 / 5 / below 1: 5
 *   min_score  0.1 / 0.1 / 0.1 / as given ("NaN" is given: nothing is below it)
 *   region     IATA codes (trimmed, uppercased, "ALL" dropped); none left, or codes no
 *              observer has: no filter
 *   role       lowercased; empty: any
 */
struct graph_params {
    int64_t min_count;
    double min_score;
    struct mg_param_list region;
    const char *role;
};
#define P(f) .offset = offsetof(struct graph_params, f)
static const struct mg_param graph_param_list[] = {
    {.name = "min_count",
     .kind = MG_PARAM_LIMIT,
     P(min_count),
     .def = 5,
     .min = 1,
     .max = INT64_MAX,
     .corescope = "Atoi and above 0, else 5"},
    {.name = "min_score",
     .kind = MG_PARAM_REAL,
     P(min_score),
     .real_def = 0.1,
     .corescope = "ParseFloat, else 0.1; NaN keeps every edge"},
    {.name = "region",
     .kind = MG_PARAM_LIST,
     P(region),
     .flags = MG_LIST_SKIP_ALL,
     .corescope = "IATA codes trimmed and uppercased; no code left, or codes no observer has: "
                  "no filter; meshgate: 400 past 79 bytes of codes (a cache key's room)"},
    {.name = "role",
     .kind = MG_PARAM_TEXT,
     P(role),
     .corescope = "lowercased; edges with an end of that role (any case); meshgate: 400 past "
                  "47 bytes (no role is that long; a cache key's room)"},
};
#undef P
const struct mg_param_table mg_neighbor_graph_params =
    MG_PARAM_TABLE(struct graph_params, graph_param_list);

/* The request's arguments and key; false with a 400 in res (when not NULL). */
#define KEY_BYTES 256
static bool graph_args(const struct mg_request *req, struct mg_response *res, struct graph_args *a,
                       char key[KEY_BYTES])
{
    memset(a, 0, sizeof *a);
    struct graph_params own;
    const struct graph_params *p = mg_params_get(&mg_neighbor_graph_params, req, res, &own);
    if (!p)
        return false;
    a->min_count = p->min_count;
    a->min_score = p->min_score;
    const char *raw = mg_param_str(req, "min_score");
    if (raw && !strcasecmp(raw, "nan"))
        a->min_score = -INFINITY; /* CoreScope's NaN: no score is below it */
    if (p->role) {
        size_t n = strlen(p->role);
        if (n >= sizeof a->role) {
            if (res)
                mg_response_error(res, 400, "role: at most 47 bytes");
            return false;
        }
        for (size_t i = 0; i <= n; i++)
            a->role[i] = (char)tolower((unsigned char)p->role[i]);
    }
    if (p->region.text && !mg_param_list_codes(p->region.text, a->region, sizeof a->region)) {
        if (res)
            mg_response_error(res, 400, "region: at most 79 bytes of codes");
        return false;
    }
    /* The configuration's generation: what it hides is in the answer. */
    snprintf(key, KEY_BYTES, "ngraph|%lld|%.17g|%s|%s|%lu|@%d:%lld", (long long)a->min_count,
             a->min_score, a->role, a->region, mg_corescope_current()->generation, GRAPH_CACHE_S,
             (long long)(time(NULL) / GRAPH_CACHE_S));
    return true;
}

bool mg_neighbor_graph_is_heavy(struct mg_env *env, const struct mg_request *req)
{
    struct graph_args a;
    char key[KEY_BYTES];
    return graph_args(req, NULL, &a, key) && mg_cold_report_is_heavy(env, key);
}

enum mg_turn mg_handle_neighbor_graph(struct mg_env *env, const struct mg_request *req,
                                      struct mg_response *res)
{
    struct graph_args a;
    char key[KEY_BYTES];
    if (!graph_args(req, res, &a, key))
        return MG_DONE;
    return mg_cold_report_serve(env, req, res, &graph_report, key, &a, sizeof a);
}

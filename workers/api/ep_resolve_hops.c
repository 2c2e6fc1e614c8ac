/* SPDX-License-Identifier: ISC */
/*
 * GET /api/resolve-hops?hops=A,B,...: which nodes a path's hop prefixes may name, as
 * CoreScope's server answers it without context (the map's two calls pass none).
 *
 * A hop's candidates are the nodes that can relay (a role containing "repeater" or
 * "room_server", or "room") whose lowercased key starts with the lowercased hop, for hops of 2
 * to 8 characters, or equals it (a whole key); an active observer that reported it does not
 * relay (can_relay = 0) is never one. They come in the nodes table's order. None: "no_match".
 * One: "unique_prefix". More: ambiguous, and the pick is, among candidates with a position
 * (lat/lon not both 0), the one with the most adverts ("gps_preference"), else the one with
 * the most adverts ("observation_count_fallback"); ties go to the smaller key.
 *
 * With from_node and/or observer (keys: the context), an ambiguous hop is first resolved as
 * CoreScope's resolveWithContext does, from its neighbour graph (neighbor_graph.h): each
 * candidate's affinityScore is its best edge score to a context key; the pick is the
 * candidate whose edge to the context (score x confidence) was seen 3 times and scores at
 * least 3 times the next ("neighbor_affinity", also bestCandidate), else the candidate with
 * a position nearest to the context keys that are relays with a position ("geo_proximity"),
 * else the tiers above.
 *
 * Light: one pass over the nodes (and the few non-relaying observers) and a walk of them per
 * hop, for at most MG_RESOLVE_HOPS_LIGHT_MAX hops (router.h); heavy with more, or with a
 * context while neither the worker nor the group has a neighbour graph (its build).
 */
#include "hop_nodes.h"
#include "json.h"
#include "neighbor_graph.h"
#include "node_visibility.h"
#include "params.h"
#include "router.h"

#include <ctype.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void mg_hop_nodes_free(struct mg_hop_nodes *n)
{
    for (size_t i = 0; i < n->len; i++) {
        free(n->v[i].key);
        free(n->v[i].lower);
        free(n->v[i].name);
    }
    free(n->v);
}

static char *lower_dup(const char *s)
{
    char *d = strdup(s ? s : "");
    for (char *p = d; p && *p; p++)
        *p = (char)tolower((unsigned char)*p);
    return d;
}

/* The nodes that may be a hop, in the table's order, without those known not to relay. */
int mg_hop_nodes_load(struct mg_db *db, struct mg_hop_nodes *out)
{
    struct mg_buf sql;
    mg_buf_init(&sql);
    mg_buf_puts(&sql, "SELECT n.public_key, n.name, n.lat, n.lon, coalesce(n.advert_count, 0)"
                      " FROM nodes n WHERE (instr(lower(n.role), 'repeater') > 0"
                      " OR instr(lower(n.role), 'room_server') > 0 OR lower(n.role) = 'room')");
    if (db->schema.observers_can_relay)
        mg_buf_printf(
            &sql,
            " AND lower(n.public_key) NOT IN (SELECT lower(ob.id) FROM observers ob"
            " WHERE coalesce(ob.can_relay, 1) = 0%s)",
            db->schema.observers_inactive ? " AND (ob.inactive IS NULL OR ob.inactive = 0)" : "");
    mg_buf_puts(&sql, " ORDER BY n.rowid");
    sqlite3_stmt *st = sql.failed ? NULL : mg_db_prepare(db, mg_buf_cstr(&sql));
    mg_buf_free(&sql);
    if (!st)
        return SQLITE_ERROR;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (out->len == out->cap) {
            size_t cap = out->cap ? out->cap * 2 : 256;
            struct mg_hop_node *grown = realloc(out->v, cap * sizeof *grown);
            if (!grown) {
                rc = SQLITE_NOMEM;
                break;
            }
            out->v = grown, out->cap = cap;
        }
        struct mg_hop_node *n = &out->v[out->len];
        const char *key = (const char *)sqlite3_column_text(st, 0);
        n->key = strdup(key ? key : "");
        n->lower = lower_dup(key);
        n->name =
            strdup(sqlite3_column_text(st, 1) ? (const char *)sqlite3_column_text(st, 1) : "");
        bool located =
            sqlite3_column_type(st, 2) != SQLITE_NULL && sqlite3_column_type(st, 3) != SQLITE_NULL;
        n->lat = located ? sqlite3_column_double(st, 2) : 0;
        n->lon = located ? sqlite3_column_double(st, 3) : 0;
        n->has_gps = located && !(n->lat == 0 && n->lon == 0);
        n->adverts = sqlite3_column_int64(st, 4);
        out->len++;
        if (!n->key || !n->lower || !n->name) {
            rc = SQLITE_NOMEM;
            break;
        }
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

bool mg_hop_names(const struct mg_hop_node *n, const char *hop, size_t len)
{
    if (len >= 2 && len <= MG_HOP_PREFIX_MAX)
        return strncmp(n->lower, hop, len) == 0;
    return strlen(n->lower) > MG_HOP_PREFIX_MAX && strcmp(n->lower, hop) == 0;
}

/* CoreScope's tiebreak: more adverts, then the smaller key. */
bool mg_hop_better(const struct mg_hop_node *a, const struct mg_hop_node *b)
{
    if (a->adverts != b->adverts)
        return a->adverts > b->adverts;
    return strcmp(a->key, b->key) < 0;
}

static void write_candidate(struct mg_json *j, const struct mg_hop_node *n, double affinity)
{
    mg_json_object_begin(j); /* CoreScope's order */
    mg_json_key(j, "name");
    if (n->name[0])
        mg_json_string(j, n->name);
    else
        mg_json_null(j);
    mg_json_kv_string(j, "pubkey", n->key);
    mg_json_key(j, "lat");
    if (n->has_gps)
        mg_json_double(j, n->lat);
    else
        mg_json_null(j);
    mg_json_key(j, "lon");
    if (n->has_gps)
        mg_json_double(j, n->lon);
    else
        mg_json_null(j);
    if (affinity > 0)
        mg_json_kv_double(j, "affinityScore", affinity);
    else
        mg_json_kv_null(j, "affinityScore");
    mg_json_object_end(j);
}

static void write_candidates(struct mg_json *j, const char *key, const struct mg_hop_nodes *all,
                             const size_t *match, size_t count, const double *affinity)
{
    mg_json_key(j, key);
    mg_json_array_begin(j);
    for (size_t i = 0; i < count; i++)
        write_candidate(j, &all->v[match[i]], affinity ? affinity[i] : 0);
    mg_json_array_end(j);
}

/* The keys a request gives as context (from_node, observer), lowercased. */
struct context {
    const char *keys[2];
    size_t n;
    int64_t now_ms;
};

/* A node the configuration hides is no hop's candidate (node_visibility.h). */
static void drop_hidden(struct mg_hop_nodes *all)
{
    size_t kept = 0;
    for (size_t i = 0; i < all->len; i++) {
        struct mg_hop_node *n = &all->v[i];
        if (mg_node_hidden(n->key, n->name)) {
            free(n->key);
            free(n->lower);
            free(n->name);
        } else {
            all->v[kept++] = *n;
        }
    }
    all->len = kept;
}

/* CoreScope's context tiers for an ambiguous hop: affinity[i] each candidate's best edge score
 * to a context key; the pick and its confidence, or NULL. */
static const struct mg_hop_node *resolve_in_context(const struct mg_hop_nodes *all,
                                                    const size_t *match, size_t count,
                                                    const struct context *cx, double *affinity,
                                                    const char **confidence)
{
    const struct mg_hop_node *first = NULL, *second = NULL;
    double first_s = 0, second_s = 0;
    int64_t first_count = 0;
    for (size_t i = 0; i < count; i++) {
        const struct mg_hop_node *c = &all->v[match[i]];
        double best = 0, weighted = 0;
        int64_t weighted_count = 0;
        for (size_t k = 0; k < cx->n; k++) {
            int64_t n = 0;
            double s = mg_neighbor_graph_edge_score(cx->keys[k], c->lower, cx->now_ms, false, &n);
            best = s > best ? s : best;
            double w = mg_neighbor_graph_edge_score(cx->keys[k], c->lower, cx->now_ms, true, &n);
            if (w > weighted) {
                weighted = w;
                weighted_count = n;
            }
        }
        affinity[i] = best;
        if (weighted <= 0)
            continue;
        if (!first || weighted > first_s) {
            second = first, second_s = first_s;
            first = c, first_s = weighted, first_count = weighted_count;
        } else if (!second || weighted > second_s) {
            second = c, second_s = weighted;
        }
    }
    if (first && first_count >= 3 && (!second || first_s >= 3.0 * second_s)) {
        *confidence = "neighbor_affinity";
        return first;
    }
    /* the context keys that are relays with a position (one node each), averaged */
    double lat = 0, lon = 0;
    int located = 0;
    for (size_t k = 0; k < cx->n; k++) {
        const struct mg_hop_node *only = NULL;
        size_t hits = 0;
        for (size_t i = 0; i < all->len; i++)
            if (mg_hop_names(&all->v[i], cx->keys[k], strlen(cx->keys[k])))
                only = &all->v[i], hits++;
        if (hits == 1 && only->has_gps)
            lat += only->lat, lon += only->lon, located++;
    }
    if (!located)
        return NULL;
    lat /= located, lon /= located;
    const struct mg_hop_node *near = NULL;
    double near_d = DBL_MAX;
    for (size_t i = 0; i < count; i++) {
        const struct mg_hop_node *c = &all->v[match[i]];
        if (!c->has_gps)
            continue;
        double dlat = (c->lat - lat) * M_PI / 180;
        double dlon = (c->lon - lon) * M_PI / 180 * cos((lat + c->lat) / 2 * M_PI / 180);
        double d = sqrt(dlat * dlat + dlon * dlon);
        if (d < near_d)
            near = c, near_d = d;
    }
    if (near)
        *confidence = "geo_proximity";
    return near;
}

static void write_resolution(struct mg_json *j, const struct mg_hop_nodes *all, const char *hop,
                             size_t *match, const struct context *cx, double *affinity)
{
    char *lower = lower_dup(hop);
    size_t len = lower ? strlen(lower) : 0, count = 0;
    for (size_t i = 0; lower && i < all->len; i++)
        if (mg_hop_names(&all->v[i], lower, len))
            match[count++] = i;
    free(lower);
    mg_json_object_begin(j); /* CoreScope's order; empty pubkey, ambiguous omitted */
    if (count == 0) {
        mg_json_kv_null(j, "name");
        write_candidates(j, "candidates", all, match, 0, NULL);
        write_candidates(j, "conflicts", all, match, 0, NULL);
        mg_json_kv_string(j, "confidence", "no_match");
    } else if (count == 1) {
        const struct mg_hop_node *n = &all->v[match[0]];
        mg_json_key(j, "name");
        if (n->name[0])
            mg_json_string(j, n->name);
        else
            mg_json_null(j);
        mg_json_kv_string(j, "pubkey", n->key);
        write_candidates(j, "candidates", all, match, 1, NULL);
        write_candidates(j, "conflicts", all, match, 0, NULL);
        mg_json_kv_string(j, "confidence", "unique_prefix");
    } else {
        const char *confidence = "gps_preference";
        const struct mg_hop_node *pick =
            cx->n ? resolve_in_context(all, match, count, cx, affinity, &confidence) : NULL;
        bool by_affinity = pick && !strcmp(confidence, "neighbor_affinity"), in_context = pick;
        for (size_t i = 0; !in_context && i < count; i++) {
            const struct mg_hop_node *n = &all->v[match[i]];
            if (n->has_gps && (!pick || mg_hop_better(n, pick)))
                pick = n;
        }
        if (!pick) {
            confidence = "observation_count_fallback";
            pick = &all->v[match[0]];
            for (size_t i = 1; i < count; i++)
                if (mg_hop_better(&all->v[match[i]], pick))
                    pick = &all->v[match[i]];
        }
        mg_json_kv_string(j, "name", pick->name);
        mg_json_kv_string(j, "pubkey", pick->key);
        mg_json_kv_bool(j, "ambiguous", true);
        write_candidates(j, "candidates", all, match, count, cx->n ? affinity : NULL);
        write_candidates(j, "conflicts", all, match, count, cx->n ? affinity : NULL);
        if (by_affinity)
            mg_json_kv_string(j, "bestCandidate", pick->key);
        mg_json_kv_string(j, "confidence", confidence);
    }
    mg_json_object_end(j);
}

static int compare_strings(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * The parameters, declared once (params.h). CoreScope's handleResolveHops, missing / empty:
 *   hops       none / none: {"resolved":{}}; otherwise split on commas as given (no trimming:
 *              each is a key of the answer), empty ones dropped
 *   from_node, observer: none / none: no context; otherwise a key whose neighbours rank the
 *              candidates (lowercased)
 */
struct resolve_params {
    const char *hops, *from, *observer;
};
#define P(field) .offset = offsetof(struct resolve_params, field)
static const struct mg_param resolve_param_list[] = {
    {.name = "hops",
     .kind = MG_PARAM_TEXT,
     P(hops),
     .sample = "a1,b2",
     .corescope = "empty: no hop; split on commas as given"},
    {.name = "from_node", .kind = MG_PARAM_TEXT, P(from), .corescope = "a context key"},
    {.name = "observer", .kind = MG_PARAM_TEXT, P(observer), .corescope = "a context key"},
};
#undef P
const struct mg_param_table mg_resolve_hops_params =
    MG_PARAM_TABLE(struct resolve_params, resolve_param_list);

static const struct resolve_params *resolve_params(const struct mg_request *req,
                                                   struct resolve_params *own)
{
    /* Never NULL: the table refuses nothing. */
    return mg_params_get(&mg_resolve_hops_params, req, NULL, own);
}

/* What the answer is made of: the hops and the relays read once; a request that parks for the
 * neighbour graph keeps it (mg_park_keep) and continues at resolve_step. */
struct resolve_work {
    struct context cx;
    char *lowered[2]; /* the context's keys */
    char *copy;       /* the hops' text, cut at its commas */
    char **list;      /* the hops, sorted */
    size_t n;
    struct mg_hop_nodes all;
    size_t *match;
    double *affinity;
    int rc;
};

static void resolve_work_free(void *kept)
{
    struct resolve_work *w = kept;
    free(w->match);
    free(w->affinity);
    free(w->lowered[0]);
    free(w->lowered[1]);
    mg_hop_nodes_free(&w->all);
    free(w->list);
    free(w->copy);
}

/* The answer from w: MG_PARK while the neighbour graph a context reads is fetched. */
static enum mg_turn resolve_answer(struct mg_env *env, const struct mg_request *req,
                                   struct mg_response *res, struct resolve_work *w)
{
    /* A context reads the worker's neighbour graph (built here when it has none fresh). On
     * the loop (env->jobs), a build another thread runs is not waited for: parked. */
    bool held = false, busy = false;
    int rc = w->rc;
    if (rc == SQLITE_OK && w->n && w->cx.n)
        held = (rc = mg_neighbor_graph_hold(env, w->cx.now_ms, env->jobs ? &busy : NULL)) ==
                   SQLITE_OK &&
               !busy;
    if (busy) /* woken when the helper's fetch is done */
        return mg_park_until(req, 0);
    if (rc == SQLITE_OK) {
        mg_response_json(res, 200);
        struct mg_json j;
        mg_json_init(&j, &res->body);
        mg_json_object_begin(&j);
        mg_json_key(&j, "resolved");
        mg_json_object_begin(&j);
        for (size_t i = 0; i < w->n; i++) {
            if (i > 0 && strcmp(w->list[i], w->list[i - 1]) == 0)
                continue;
            mg_json_key(&j, w->list[i]);
            write_resolution(&j, &w->all, w->list[i], w->match, &w->cx, w->affinity);
        }
        mg_json_object_end(&j);
        mg_json_object_end(&j);
        mg_buf_putc(&res->body, '\n');
    } else {
        mg_response_db_failure(res, "the nodes", rc);
    }
    if (held)
        mg_neighbor_graph_release();
    return MG_DONE;
}

/* A later turn of a request parked for the graph: its hops and relays as kept. */
static enum mg_turn resolve_step(struct mg_env *env, const struct mg_request *req,
                                 struct mg_response *res)
{
    enum mg_turn turn = resolve_answer(env, req, res, req->park->kept);
    return turn == MG_PARK ? mg_park_at(req, resolve_step, 0) : turn;
}

enum mg_turn mg_handle_resolve_hops(struct mg_env *env, const struct mg_request *req,
                                    struct mg_response *res)
{
    struct resolve_params own;
    const struct resolve_params *p = resolve_params(req, &own);
    const char *from = p->from, *observer = p->observer;
    struct resolve_work w = {.cx = {.now_ms = req->start_realtime_ns / 1000000},
                             .lowered = {from && from[0] ? lower_dup(from) : NULL,
                                         observer && observer[0] ? lower_dup(observer) : NULL}};
    for (int k = 0; k < 2; k++)
        if (w.lowered[k])
            w.cx.keys[w.cx.n++] = w.lowered[k];
    const char *hops = p->hops;
    /* The hops, split on commas, empty ones dropped, sorted (the keys of CoreScope's map) and
     * each once. */
    w.copy = strdup(hops ? hops : "");
    size_t cap = 1;
    for (const char *c = w.copy; c && *c; c++)
        cap += *c == ',';
    w.list = calloc(cap, sizeof *w.list);
    if (!w.copy || !w.list) {
        resolve_work_free(&w);
        mg_response_error(res, 500, "out of memory");
        return MG_DONE;
    }
    for (char *save = NULL, *t = strtok_r(w.copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
        w.list[w.n++] = t;
    qsort(w.list, w.n, sizeof *w.list, compare_strings);

    w.rc = w.n ? mg_hop_nodes_load(env->db, &w.all) : SQLITE_OK;
    drop_hidden(&w.all);
    w.match = w.all.len ? calloc(w.all.len, sizeof *w.match) : NULL;
    w.affinity = w.all.len ? calloc(w.all.len, sizeof *w.affinity) : NULL;
    if (w.rc == SQLITE_OK && w.all.len && (!w.match || !w.affinity))
        w.rc = SQLITE_NOMEM;
    /* Parked: its later turns continue at resolve_step with w. */
    bool kept;
    enum mg_turn turn = mg_park_keep_at(req, resolve_answer(env, req, res, &w), resolve_step, &w,
                                        sizeof w, resolve_work_free, &kept);
    if (!kept)
        resolve_work_free(&w);
    return turn;
}

bool mg_resolve_hops_is_heavy(struct mg_env *env, const struct mg_request *req)
{
    /* Each hop is a pass over the relays and an entry of the answer: past a path's length,
     * heavy (empty ones between commas are not counted, repeats are). */
    struct resolve_params own;
    const struct resolve_params *p = resolve_params(req, &own);
    size_t n = 0;
    for (const char *c = p->hops; c && *c; c++)
        n += *c != ',' && (c[1] == ',' || c[1] == '\0');
    if (n > MG_RESOLVE_HOPS_LIGHT_MAX)
        return true;
    return (p->from || p->observer) && !mg_neighbor_graph_available(env);
}

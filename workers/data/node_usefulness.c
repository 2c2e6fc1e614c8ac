/* SPDX-License-Identifier: ISC */
#include "node_usefulness.h"

#include "group_table.h"
#include "json.h"
#include "log.h"
#include "process_table.h"
#include "result_cache.h"
#include "table_stats.h"
#include "time_parse.h"

#include <ctype.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* CoreScope's affinity constants: the count that saturates an edge, the half-life of its
 * decay (hours), the observers that saturate its confidence; the composite's weights and
 * the grades' floors. */
#define SATURATION_COUNT 100.0
#define HALF_LIFE_HOURS 168.0
#define OBSERVER_SATURATION 3.0
#define MIN_WEIGHT 1e-9
#define TIE 1e-12
#define LN2 0.693147180559945309417232121458176568

struct score {
    char *key; /* lowercased, trimmed */
    double bridge, coverage, redundancy;
};

struct table {
    struct score *nodes; /* sorted by key */
    size_t count;
};

static void table_free(void *table)
{
    struct table *t = table;
    if (!t)
        return;
    for (size_t i = 0; i < t->count; i++)
        free(t->nodes[i].key);
    free(t->nodes);
    free(t);
}

/* ---- the edges, as CoreScope's server loads and weighs them ------------------------------ */

struct raw_edge {
    char *a, *b;   /* a <= b bytewise, as stored */
    int64_t count; /* summed over (a, b) and (b, a) */
    int64_t last_ms;
    bool has_last; /* else the year 1: no weight */
};

static int by_pair(const void *x, const void *y)
{
    const struct raw_edge *p = x, *q = y;
    int c = strcmp(p->a, q->a);
    return c ? c : strcmp(p->b, q->b);
}

/* CoreScope's parseTimestamp: RFC 3339 with a T (a fraction allowed), or "YYYY-MM-DD
 * HH:MM:SS[.fraction]" in UTC. */
static bool parse_last_seen(const char *s, int64_t *ms)
{
    if (!s)
        return false;
    size_t len = strlen(s);
    struct mg_rfc3339_shape shape;
    if (len >= 11 && s[10] == 'T')
        return mg_rfc3339_parse_shaped(s, len, ms, &shape) && shape.zone != 'z';
    if (len < 19 || len > 40 || s[10] != ' ')
        return false;
    char zoned[48];
    snprintf(zoned, sizeof zoned, "%sZ", s);
    return mg_rfc3339_parse_shaped(zoned, len + 1, ms, &shape);
}

static void edges_free(struct raw_edge *e, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(e[i].a), free(e[i].b);
    free(e);
}

/* Every row of neighbor_edges (none when there is no such table), merged by pair. */
static int read_edges(sqlite3 *conn, struct raw_edge **out, size_t *count)
{
    *out = NULL;
    *count = 0;
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(
        conn, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'neighbor_edges'", -1,
        &st, NULL);
    bool exists = rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    if (rc != SQLITE_OK || !exists)
        return rc;
    rc = sqlite3_prepare_v2(conn, "SELECT node_a, node_b, count, last_seen FROM neighbor_edges", -1,
                            &st, NULL);
    struct raw_edge *rows = NULL;
    size_t n = 0, cap = 0;
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        rc = SQLITE_OK;
        if (sqlite3_column_type(st, 0) == SQLITE_NULL ||
            sqlite3_column_type(st, 1) == SQLITE_NULL || sqlite3_column_type(st, 2) == SQLITE_NULL)
            continue; /* CoreScope's scan of the row fails */
        if (n == cap) {
            cap = cap ? cap * 2 : 256;
            struct raw_edge *more = realloc(rows, cap * sizeof *rows);
            if (!more) {
                rc = SQLITE_NOMEM;
                break;
            }
            rows = more;
        }
        const char *a = (const char *)sqlite3_column_text(st, 0),
                   *b = (const char *)sqlite3_column_text(st, 1);
        if (strcmp(a, b) > 0) {
            const char *s = a;
            a = b, b = s;
        }
        struct raw_edge *e = &rows[n];
        e->a = strdup(a);
        e->b = strdup(b);
        e->count = sqlite3_column_int64(st, 2);
        e->has_last = parse_last_seen((const char *)sqlite3_column_text(st, 3), &e->last_ms);
        n++;
        if (!e->a || !e->b) {
            rc = SQLITE_NOMEM;
            break;
        }
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE && rc != SQLITE_OK) {
        edges_free(rows, n);
        return rc;
    }
    if (n > 1)
        qsort(rows, n, sizeof *rows, by_pair);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        struct raw_edge *k = kept ? &rows[kept - 1] : NULL;
        if (k && by_pair(k, &rows[i]) == 0) {
            k->count += rows[i].count;
            if (rows[i].has_last && (!k->has_last || rows[i].last_ms > k->last_ms))
                k->last_ms = rows[i].last_ms, k->has_last = true;
            free(rows[i].a), free(rows[i].b);
        } else {
            rows[kept++] = rows[i];
        }
    }
    *out = rows;
    *count = kept;
    return SQLITE_OK;
}

/* CoreScope's Score(now) x Confidence() of a loaded edge (no observers: 1/3). */
static double edge_weight(const struct raw_edge *e, int64_t now_ms)
{
    if (!e->has_last)
        return 0; /* the year 1: a decay of exp(-10 000 and more) */
    double count_factor = (double)e->count / SATURATION_COUNT;
    if (count_factor > 1)
        count_factor = 1;
    int64_t d = now_ms - e->last_ms;
    double hours = d < 0 ? 0 : (double)(d / 3600000) + (double)(d % 3600000) / 3.6e6;
    double decay = exp(-(LN2 / HALF_LIFE_HOURS) * hours);
    return count_factor * decay * (1.0 / OBSERVER_SATURATION);
}

/* ---- the graph: nodes by index, adjacency in rows ----------------------------------------- */

/* A lowercased, trimmed copy of s (ASCII white space), NULL when out of memory. */
static char *normal_key(const char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        n--;
    char *k = malloc(n + 1);
    if (!k)
        return NULL;
    for (size_t i = 0; i < n; i++)
        k[i] = (char)tolower((unsigned char)s[i]);
    k[n] = '\0';
    return k;
}

struct arc {
    size_t from, to;
    double dist; /* 1/weight */
    double weight;
};

static int by_arc(const void *x, const void *y)
{
    const struct arc *p = x, *q = y;
    if (p->from != q->from)
        return p->from < q->from ? -1 : 1;
    if (p->to != q->to)
        return p->to < q->to ? -1 : 1;
    return p->dist < q->dist ? -1 : p->dist > q->dist;
}

/* Adjacency rows: node i's neighbours are to[at[i] .. at[i+1]). */
struct adjacency {
    size_t *at, *to;
    double *dist;
};

static void adjacency_free(struct adjacency *g)
{
    free(g->at), free(g->to), free(g->dist);
}

/* From arcs sorted by (from, to, dist): each pair once, its shortest distance; false when out
 * of memory. keep: only arcs of at least that weight. */
static bool adjacency_of(struct adjacency *g, const struct arc *arcs, size_t n_arcs, size_t nodes,
                         double keep)
{
    g->at = calloc(nodes + 1, sizeof *g->at);
    g->to = malloc((n_arcs ? n_arcs : 1) * sizeof *g->to);
    g->dist = malloc((n_arcs ? n_arcs : 1) * sizeof *g->dist);
    if (!g->at || !g->to || !g->dist)
        return false;
    size_t m = 0, last_from = SIZE_MAX;
    for (size_t i = 0; i < n_arcs; i++) {
        if (!(arcs[i].weight >= keep))
            continue;
        if (m > 0 && arcs[i].from == last_from && arcs[i].to == g->to[m - 1])
            continue; /* the same pair, longer */
        last_from = arcs[i].from;
        g->to[m] = arcs[i].to;
        g->dist[m] = arcs[i].dist;
        g->at[arcs[i].from + 1]++;
        m++;
    }
    for (size_t i = 0; i < nodes; i++)
        g->at[i + 1] += g->at[i];
    return true;
}

/* A binary min-heap of (distance, node), stale entries skipped when popped. */
struct heap {
    struct {
        double d;
        size_t v;
    } * e;
    size_t n, cap;
};

static bool heap_push(struct heap *h, double d, size_t v)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        void *more = realloc(h->e, cap * sizeof *h->e);
        if (!more)
            return false;
        h->e = more;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0 && h->e[(i - 1) / 2].d > d) {
        h->e[i] = h->e[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->e[i].d = d;
    h->e[i].v = v;
    return true;
}

static size_t heap_pop(struct heap *h)
{
    size_t top = h->e[0].v;
    double d = h->e[--h->n].d;
    size_t v = h->e[h->n].v, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && h->e[c + 1].d < h->e[c].d)
            c++;
        if (h->e[c].d >= d)
            break;
        h->e[i] = h->e[c];
        i = c;
    }
    if (h->n > 0) {
        h->e[i].d = d;
        h->e[i].v = v;
    }
    return top;
}

static void normalize(struct score *s, size_t n, size_t field)
{
    double max = 0;
    for (size_t i = 0; i < n; i++) {
        double v = *(double *)((char *)&s[i] + field);
        if (v > max)
            max = v;
    }
    if (max > 0)
        for (size_t i = 0; i < n; i++)
            *(double *)((char *)&s[i] + field) /= max;
}

/* Bridge (Brandes) and coverage (harmonic reach) from one shortest-path pass per source. */
static bool bridge_and_coverage(const struct adjacency *g, struct score *s, size_t n)
{
    if (n == 0)
        return true;
    double *dist = malloc(n * sizeof *dist), *sigma = malloc(n * sizeof *sigma),
           *delta = malloc(n * sizeof *delta);
    size_t *stack = malloc(n * sizeof *stack), *pred = malloc((g->at[n] + 1) * sizeof *pred),
           *n_pred = malloc(n * sizeof *n_pred);
    bool *done = malloc(n * sizeof *done);
    struct heap h = {0};
    bool ok = dist && sigma && delta && stack && pred && n_pred && done;
    for (size_t src = 0; ok && src < n; src++) {
        for (size_t i = 0; i < n; i++)
            dist[i] = INFINITY, sigma[i] = 0, delta[i] = 0, n_pred[i] = 0, done[i] = false;
        dist[src] = 0;
        sigma[src] = 1;
        size_t depth = 0;
        h.n = 0;
        ok = heap_push(&h, 0, src);
        while (ok && h.n > 0) {
            size_t v = heap_pop(&h);
            if (done[v])
                continue;
            done[v] = true;
            stack[depth++] = v;
            for (size_t k = g->at[v]; ok && k < g->at[v + 1]; k++) {
                size_t w = g->to[k];
                double alt = dist[v] + g->dist[k];
                if (alt < dist[w] - TIE) {
                    dist[w] = alt;
                    sigma[w] = sigma[v];
                    pred[g->at[w]] = v;
                    n_pred[w] = 1;
                    ok = heap_push(&h, alt, w);
                } else if (fabs(alt - dist[w]) <= TIE && n_pred[w] < g->at[w + 1] - g->at[w]) {
                    sigma[w] += sigma[v];
                    pred[g->at[w] + n_pred[w]++] = v;
                }
            }
        }
        double reach = 0;
        for (size_t i = depth; i-- > 0;) {
            size_t w = stack[i];
            for (size_t k = 0; k < n_pred[w]; k++) {
                size_t v = pred[g->at[w] + k];
                if (sigma[w] != 0)
                    delta[v] += sigma[v] / sigma[w] * (1.0 + delta[w]);
            }
            if (w != src) {
                s[w].bridge += delta[w];
                if (dist[w] > 0)
                    reach += 1.0 / dist[w];
            }
        }
        s[src].coverage = reach;
    }
    free(h.e);
    free(dist), free(sigma), free(delta), free(stack), free(pred), free(n_pred), free(done);
    if (!ok)
        return false;
    for (size_t i = 0; i < n; i++)
        s[i].bridge /= 2.0;
    normalize(s, n, offsetof(struct score, bridge));
    normalize(s, n, offsetof(struct score, coverage));
    return true;
}

/* Redundancy: an articulation-point walk (Tarjan, with an explicit stack) over g, each node
 * the pairs its removal from its component disconnects. */
static bool redundancy(const struct adjacency *g, struct score *s, size_t n)
{
    if (n == 0)
        return true;
    size_t *disc = calloc(n, sizeof *disc), *low = calloc(n, sizeof *low),
           *size = calloc(n, sizeof *size), *parent = malloc(n * sizeof *parent),
           *next = malloc(n * sizeof *next), *cut = calloc(n, sizeof *cut),
           *stack = malloc(n * sizeof *stack), *comp = malloc(n * sizeof *comp);
    double *cut_sq = calloc(n, sizeof *cut_sq);
    bool *skipped = calloc(n, sizeof *skipped);
    bool ok = disc && low && size && parent && next && cut && stack && comp && cut_sq && skipped;
    size_t timer = 0;
    for (size_t root = 0; ok && root < n; root++) {
        if (disc[root])
            continue;
        size_t depth = 0, members = 0;
        disc[root] = low[root] = ++timer;
        size[root] = 1;
        parent[root] = SIZE_MAX;
        next[root] = g->at[root];
        stack[depth++] = root;
        comp[members++] = root;
        while (depth > 0) {
            size_t u = stack[depth - 1];
            if (next[u] < g->at[u + 1]) {
                size_t v = g->to[next[u]++];
                if (v == parent[u] && !skipped[u]) {
                    skipped[u] = true; /* the tree edge back, once */
                } else if (!disc[v]) {
                    disc[v] = low[v] = ++timer;
                    size[v] = 1;
                    parent[v] = u;
                    next[v] = g->at[v];
                    stack[depth++] = v;
                    comp[members++] = v;
                } else if (disc[v] < low[u]) {
                    low[u] = disc[v];
                }
                continue;
            }
            depth--; /* u is done: its parent takes its subtree */
            size_t p = parent[u];
            if (p == SIZE_MAX)
                continue;
            size[p] += size[u];
            if (low[u] < low[p])
                low[p] = low[u];
            if (low[u] >= disc[p]) {
                cut[p] += size[u];
                cut_sq[p] += (double)size[u] * (double)size[u];
            }
        }
        double others = (double)(size[root] - 1);
        for (size_t i = 0; i < members; i++) {
            size_t u = comp[i];
            double sum_sq = cut_sq[u];
            size_t rest = size[root] - 1 - cut[u];
            if (rest > 0)
                sum_sq += (double)rest * (double)rest;
            double pairs = (others * others - sum_sq) / 2.0;
            s[u].redundancy = pairs < 0 ? 0 : pairs;
        }
    }
    free(disc), free(low), free(size), free(parent), free(next), free(cut), free(stack);
    free(comp), free(cut_sq), free(skipped);
    if (ok)
        normalize(s, n, offsetof(struct score, redundancy));
    return ok;
}

static int by_text(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The scores of the merged edges at now_ms; false when out of memory. */
static bool score_edges(struct table *t, const struct raw_edge *edges, size_t n_edges,
                        int64_t now_ms)
{
    /* The weighed edges' ends, normalized: the nodes. */
    char **ends = malloc((2 * n_edges + 1) * sizeof *ends);
    double *weight = malloc((n_edges + 1) * sizeof *weight);
    size_t n_ends = 0;
    bool ok = ends && weight;
    for (size_t i = 0; ok && i < n_edges; i++) {
        weight[i] = 0;
        if (!edges[i].a[0] || !edges[i].b[0])
            continue; /* an end CoreScope does not know */
        double w = edge_weight(&edges[i], now_ms);
        if (!isfinite(w) || w < MIN_WEIGHT)
            continue;
        char *a = normal_key(edges[i].a), *b = normal_key(edges[i].b);
        if (!a || !b || !a[0] || !b[0] || strcmp(a, b) == 0) {
            ok = a && b;
            free(a), free(b);
            continue;
        }
        weight[i] = w;
        ends[n_ends++] = a;
        ends[n_ends++] = b;
    }
    if (n_ends > 1)
        qsort(ends, n_ends, sizeof *ends, by_text);
    size_t nodes = 0; /* the distinct ends, in key order */
    for (size_t i = 0; i < n_ends; i++) {
        if (nodes > 0 && strcmp(ends[nodes - 1], ends[i]) == 0)
            free(ends[i]);
        else
            ends[nodes++] = ends[i];
    }
    struct arc *arcs = ok ? malloc((2 * n_edges + 1) * sizeof *arcs) : NULL;
    size_t n_arcs = 0;
    ok = ok && arcs;
    for (size_t i = 0; ok && i < n_edges; i++) {
        if (weight[i] == 0)
            continue;
        char *a = normal_key(edges[i].a), *b = normal_key(edges[i].b);
        char **pa = a ? bsearch(&a, ends, nodes, sizeof *ends, by_text) : NULL,
             **pb = b ? bsearch(&b, ends, nodes, sizeof *ends, by_text) : NULL;
        free(a), free(b);
        if (!pa || !pb) {
            ok = false;
            break;
        }
        size_t x = (size_t)(pa - ends), y = (size_t)(pb - ends);
        arcs[n_arcs++] = (struct arc){x, y, 1.0 / weight[i], weight[i]};
        arcs[n_arcs++] = (struct arc){y, x, 1.0 / weight[i], weight[i]};
    }
    if (ok && n_arcs > 1)
        qsort(arcs, n_arcs, sizeof *arcs, by_arc);
    t->nodes = ok ? calloc(nodes ? nodes : 1, sizeof *t->nodes) : NULL;
    ok = ok && t->nodes;
    if (ok) {
        for (size_t i = 0; i < nodes; i++)
            t->nodes[i].key = ends[i];
        t->count = nodes;
    } else {
        for (size_t i = 0; ends && i < nodes; i++)
            free(ends[i]);
    }
    free(ends);
    free(weight);
    struct adjacency all = {0}, strong = {0};
    ok = ok && adjacency_of(&all, arcs, n_arcs, nodes, 0) &&
         bridge_and_coverage(&all, t->nodes, nodes);
    /* the floor: one fresh sighting by one observer */
    ok = ok &&
         adjacency_of(&strong, arcs, n_arcs, nodes,
                      1.0 / (SATURATION_COUNT * OBSERVER_SATURATION)) &&
         redundancy(&strong, t->nodes, nodes);
    adjacency_free(&all);
    adjacency_free(&strong);
    free(arcs);
    return ok;
}

static struct mg_process_table scores =
    MG_PROCESS_TABLE_INIT(MG_NODE_USEFULNESS_INTERVAL_NS, table_free);

/* arg: a struct mg_group_build_arg; the edges decay to its realtime clock. */
static void *build(sqlite3 *conn, void *arg, int *rc)
{
    struct table *t = calloc(1, sizeof *t);
    if (!t) {
        *rc = SQLITE_NOMEM;
        return NULL;
    }
    struct raw_edge *edges = NULL;
    size_t n = 0;
    *rc = read_edges(conn, &edges, &n);
    int64_t now_ms = ((const struct mg_group_build_arg *)arg)->realtime_ns / 1000000LL;
    if (*rc == SQLITE_OK && !score_edges(t, edges, n, now_ms))
        *rc = SQLITE_NOMEM;
    edges_free(edges, n);
    if (*rc != SQLITE_OK) {
        table_free(t);
        return NULL;
    }
    mg_debug("node usefulness: %zu nodes from %zu edges", t->count, n);
    return t;
}

/* ---- the group's copy ---------------------------------------------------------------------- */

#define BODY_MAGIC 0x4c55474dU /* "MGUL" */
#define BODY_VERSION 1U

struct body_head {
    uint32_t magic, version;
    int64_t built_ns;
    uint64_t count;
};

/* The head, then each node: its key and its three scores. */
static void encode(const void *table, int64_t built_ns, struct mg_buf *out)
{
    const struct table *t = table;
    struct body_head h = {BODY_MAGIC, BODY_VERSION, built_ns, t->count};
    mg_buf_append(out, &h, sizeof h);
    for (size_t i = 0; i < t->count; i++) {
        mg_group_put_text(out, t->nodes[i].key);
        double v[3] = {t->nodes[i].bridge, t->nodes[i].coverage, t->nodes[i].redundancy};
        mg_buf_append(out, v, sizeof v);
    }
}

static void *decode(const void *data, size_t len, int64_t *built_ns)
{
    struct mg_group_reader r = {data, (const unsigned char *)data + len, false};
    struct body_head h;
    mg_group_get(&r, &h, sizeof h);
    if (r.bad || h.magic != BODY_MAGIC || h.version != BODY_VERSION || h.count > len)
        return NULL;
    struct table *t = calloc(1, sizeof *t);
    if (!t || !(t->nodes = calloc(h.count ? h.count : 1, sizeof *t->nodes))) {
        free(t);
        return NULL;
    }
    while (t->count < h.count && !r.bad) {
        struct score *e = &t->nodes[t->count++];
        r.bad = !(e->key = mg_group_get_text(&r));
        double v[3];
        mg_group_get(&r, v, sizeof v);
        e->bridge = v[0], e->coverage = v[1], e->redundancy = v[2];
    }
    if (r.bad || r.at != r.end) {
        table_free(t);
        return NULL;
    }
    *built_ns = h.built_ns;
    return t;
}

static struct mg_group_table shared =
    MG_GROUP_TABLE_INIT(.table = &scores, .name = "usefulness", .what = "node usefulness",
                        .version = BODY_VERSION, .build = build, .encode = encode, .decode = decode,
                        .builds = offsetof(struct mg_result_cache, usefulness_builds),
                        .copies = offsetof(struct mg_result_cache, usefulness_copies),
                        .stats = MG_TABLE_usefulness);

void mg_node_usefulness_adopt(struct mg_env *env)
{
    mg_group_table_adopt(&shared, env);
}

bool mg_node_usefulness_available(struct mg_env *env)
{
    return mg_group_table_available(&shared, env);
}

int mg_node_usefulness_keep(struct mg_env *env, int64_t now_ns, int64_t now_realtime_ns)
{
    return mg_group_table_keep_behind(&shared, env, now_ns, now_realtime_ns);
}

void mg_node_usefulness_read_begin(void)
{
    mg_process_table_read_begin(&scores);
}

void mg_node_usefulness_read_end(void)
{
    mg_process_table_read_end(&scores);
}

uint64_t mg_node_usefulness_generation(void)
{
    return mg_process_table_generation(&scores);
}

static int by_key(const void *key, const void *entry)
{
    return strcmp(key, ((const struct score *)entry)->key);
}

static double clamp01(double v)
{
    return v < 0 ? 0 : v > 1 ? 1 : v;
}

static void add_number(struct mg_node_fields *f, const char *key, double v)
{
    char number[40];
    mg_json_format_double(v, number, sizeof number);
    mg_node_fields_add(f, key, "%s", number);
}

void mg_node_usefulness_fields(struct mg_node_fields *f, const char *pubkey, double traffic)
{
    const struct table *t = mg_process_table_current(&scores);
    /* CoreScope looks the key up as given, then lowercased; its keys are lowercase. */
    char key[128];
    size_t len = 0;
    for (; pubkey && pubkey[len] && len + 1 < sizeof key; len++)
        key[len] = pubkey[len];
    key[len] = '\0';
    const struct score *e = t && t->count && len > 0
                                ? bsearch(key, t->nodes, t->count, sizeof *t->nodes, by_key)
                                : NULL;
    for (size_t i = 0; !e && t && i < len; i++)
        key[i] = (char)tolower((unsigned char)key[i]);
    if (!e && t && t->count && len > 0)
        e = bsearch(key, t->nodes, t->count, sizeof *t->nodes, by_key);
    mg_table_rows(MG_TABLE_usefulness, t != NULL, 0);
    double bridge = e ? e->bridge : 0, coverage = e ? e->coverage : 0,
           redundant = e ? e->redundancy : 0;
    add_number(f, "bridge_score", bridge);
    add_number(f, "coverage_score", coverage);
    add_number(f, "redundancy_score", redundant);
    double b = clamp01(bridge), c = clamp01(coverage), r = clamp01(redundant), x = clamp01(traffic);
    double score = clamp01(0.30 * b + 0.25 * c + 0.25 * r + 0.20 * x);
    if (!t && b == 0 && c == 0 && r == 0 && x == 0) { /* no scores yet: no grade */
        add_number(f, "usefulness_score", 0);
        return;
    }
    add_number(f, "usefulness_score", score);
    const char *grade = score >= 0.65   ? "A"
                        : score >= 0.45 ? "B"
                        : score >= 0.30 ? "C"
                        : score >= 0.15 ? "D"
                                        : "F";
    mg_node_fields_add(f, "usefulness_grade", "\"%s\"", grade);
}

/* SPDX-License-Identifier: ISC */
/*
 * The Analytics page's topology and distance tabs, as CoreScope's server computes them from its
 * store (its computeAnalyticsTopology and computeAnalyticsDistance):
 *
 * GET /api/analytics/topology?region=&area=&window=|from=&to=  hop counts of the paths (their
 * distribution, average, median, maximum, SNR by hop count), the hops and hop pairs heard most
 * (merged by node where a hop names one relay only), the observers, and each observer's
 * reach: every hop at its distance in hops from the observer, by ring, the hops more than one
 * observer reaches, and each hop's nearest observer.
 *
 * GET /api/analytics/distance?region=&area=  the length in km of every hop between two nodes
 * with a position (a sender and the path's relays, 300 km or less), by kind of link (repeater
 * or not at each end), by hour, as a 25-bin histogram, the longest links and paths.
 *
 * A transmission's path is CoreScope's display observation's: the one with the most hops, the
 * newest of those (its store keeps observations newest first); its SNR and observer are that
 * observation's. Transmissions come oldest first_seen first, then by id. A hop is resolved to a
 * node as CoreScope's resolveWithContext does (hop_nodes.h for the candidates; for the affinity
 * tier the graph CoreScope's server resolves with, the persisted neighbor_edges table it loads
 * and reloads every minute, not the graph it builds for the neighbour routes): the topology
 * with one context gathered from every transmission of the report (senders, observers whose id
 * is hex, hops naming one relay only), the distance with each transmission's own.
 *
 * Filters: a window on first_seen (the topology only); region: the transmissions heard by an
 * observer whose IATA is one of the codes (codes no observer has: no filter); area: the
 * topology keeps hops resolving to a node inside the area (a transmission without one is
 * skipped), the distance the transmissions whose ADVERT names such a node. CoreScope applies
 * no hidden-node rule to these reports (its blacklist filter for the topology expects types the
 * report does not have and drops nothing), and neither does meshgate.
 *
 * Both are cold reports (cold_report.h), keyed by their parameters and the minute, or the
 * five minutes for the unfiltered report (CoreScope's cache and recompute intervals). Where
 * CoreScope leaves order to Go's map order or an unstable sort (ties of counts and distances,
 * the observers' list, which observer is a hop's nearest among equals, and so which entries
 * make a top-N cut), meshgate breaks ties by hop text, observer id, or transmission order.
 * CoreScope answers the distance's first request 202 {"status":"building"} while it builds its
 * index; meshgate's request waits (parked) for the build and answers 200. A path's hash is the
 * stored one; CoreScope's store gives a few transmissions another (seen on the fixture).
 */
#include "cold_report.h"
#include "corescope_config.h"
#include "corescope_window.h"
#include "hop_nodes.h"
#include "json.h"
#include "path_resolve.h"
#include "node_visibility.h"
#include "params.h"
#include "region_codes.h"
#include "router.h"
#include "time_parse.h"

#include <ctype.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TOPO_CACHE_S 60          /* CoreScope's rfCacheTTL default */
#define TOPO_DEFAULT_SHAPE_S 300 /* its analytics recomputers' interval */
#define TOPO_KEY_BYTES 320

/* ---- parameters ---- */

struct topo_args {
    char region[80]; /* codes, uppercased, comma-separated */
    char area[48];
    struct mg_cs_window window;
};
_Static_assert(sizeof(struct topo_args) <= MG_COLD_ARGS_BYTES, "the args fit a build");

/* The codes of region= and the area, as the family's tables give them; false with a 400. */
static bool topo_args_of(const struct mg_param_list *region, const char *area,
                         struct mg_response *res, struct topo_args *a)
{
    if (region->text) {
        struct mg_list_item items[MG_PARAM_LIST_MAX];
        int n = mg_param_list_split(region->text, MG_LIST_SKIP_ALL, items, MG_PARAM_LIST_MAX);
        size_t used = 0;
        for (int i = 0; i < n && i < MG_PARAM_LIST_MAX; i++) {
            if (used + items[i].len + 2 > sizeof a->region) {
                if (res)
                    mg_response_error(res, 400, "region: at most 79 bytes of codes");
                return false;
            }
            if (used)
                a->region[used++] = ',';
            for (size_t k = 0; k < items[i].len; k++)
                a->region[used++] = (char)toupper((unsigned char)items[i].ptr[k]);
        }
        a->region[used] = '\0';
    }
    if (area && mg_corescope_area(mg_corescope_current(), area)) {
        if (strlen(area) >= sizeof a->area) {
            if (res)
                mg_response_error(res, 400, "area: a key of at most 47 bytes");
            return false;
        }
        snprintf(a->area, sizeof a->area, "%s", area);
    }
    return true;
}

static void topo_key(const char *prefix, const struct topo_args *a, int64_t now, char *key,
                     size_t cap)
{
    char wkey[64];
    mg_cs_window_key(&a->window, wkey, sizeof wkey);
    int64_t interval = !a->region[0] && !a->area[0] && mg_cs_window_is_zero(&a->window)
                           ? TOPO_DEFAULT_SHAPE_S
                           : TOPO_CACHE_S;
    snprintf(key, cap, "%s|%s|%s|%s|%lu|@%lld:%lld", prefix, a->region, a->area, wkey,
             a->area[0] ? mg_corescope_current()->generation : 0UL, (long long)interval,
             (long long)(now / interval));
}

/* The topology's: region, area and the window (the signal reports' table). */
struct window_params {
    struct mg_param_list region;
    const char *area;
    int window;
    const char *from, *to;
};
_Static_assert(offsetof(struct window_params, region) == 0, "the rf table's layout");

static bool topology_args(const struct mg_request *req, struct mg_response *res,
                          struct topo_args *a, char *key, size_t cap)
{
    memset(a, 0, sizeof *a);
    struct window_params own;
    const struct window_params *p = mg_params_get(&mg_analytics_window_params, req, res, &own);
    if (!p || !topo_args_of(&p->region, p->area, res, a))
        return false;
    int64_t now = (int64_t)time(NULL);
    mg_cs_window_parse(p->window, p->from, p->to, now, &a->window);
    topo_key("topology", a, now, key, cap);
    return true;
}

/* The distance's: region and area only (CoreScope reads no window for it). */
struct distance_params {
    struct mg_param_list region;
    const char *area;
};
#define P(f) .offset = offsetof(struct distance_params, f)
static const struct mg_param distance_param_list[] = {
    {.name = "region",
     .kind = MG_PARAM_LIST,
     P(region),
     .flags = MG_LIST_SKIP_ALL,
     .corescope = "IATA codes trimmed and uppercased; no code left, or codes no observer has: "
                  "no filter; meshgate: 400 past 79 bytes of codes (a cache key's room)"},
    {.name = "area",
     .kind = MG_PARAM_TEXT,
     P(area),
     .corescope = "a key the configuration's areas lack, or an area with no node: no filter"},
};
#undef P
const struct mg_param_table mg_analytics_distance_params =
    MG_PARAM_TABLE(struct distance_params, distance_param_list);

static bool distance_args(const struct mg_request *req, struct mg_response *res,
                          struct topo_args *a, char *key, size_t cap)
{
    memset(a, 0, sizeof *a);
    struct distance_params own;
    const struct distance_params *p = mg_params_get(&mg_analytics_distance_params, req, res, &own);
    if (!p || !topo_args_of(&p->region, p->area, res, a))
        return false;
    topo_key("distance", a, (int64_t)time(NULL), key, cap);
    return true;
}

static char *dup_col(sqlite3_stmt *st, int col)
{
    const char *s = (const char *)sqlite3_column_text(st, col);
    return strdup(s ? s : "");
}

/* ---- the topology ---- */

struct ttx {
    size_t hop0; /* into hops */
    int n;
    long observer; /* into observers */
    bool has_snr;
    double snr;
};

struct obs_hop { /* an observer's reach of a hop */
    long observer, hop;
    int min, max;
    int64_t count;
};

struct pair_count {
    long a, b; /* hop ids, a's text <= b's */
    int64_t count;
};

struct topology {
    const struct topo_args *args;
    bool regional;
    struct mg_area_nodes area;
    bool by_area;
    struct mg_resolver r;
    struct mg_hop_context cx;
    struct mg_texts hops, observers; /* hop texts; observer ids */
    char **observer_name;            /* by observer id */
    bool *observer_named;            /* by observer id: a name was read */
    bool *observer_listed;           /* CoreScope's observerMap: counted, with a non-empty id */
    int64_t now_ms;
    size_t observer_name_cap;
    struct ttx *tx;
    size_t n_tx, cap_tx;
    long *hop_ids;
    size_t n_hop_ids, cap_hop_ids;
    bool failed;
};

static int topology_tx(void *arg, const struct mg_scan_tx *tx)
{
    struct topology *t = arg;
    if (t->regional && !tx->in_region)
        return 0;
    mg_hop_context_add(&t->r, &t->cx, tx->pubkey, strlen(tx->pubkey));
    mg_hop_context_add_observer(&t->r, &t->cx, tx->observer);
    char buf[MG_HOP_TEXT_MAX];
    char *hops[MG_PATH_MAX_HOPS];
    int n = mg_split_hops(tx->path, buf, sizeof buf, hops);
    if (n == 0)
        return t->cx.failed ? SQLITE_NOMEM : 0;
    long obs = mg_texts_id(&t->observers, tx->observer, strlen(tx->observer), true);
    if (obs < 0)
        return SQLITE_NOMEM;
    if ((size_t)obs >= t->observer_name_cap) {
        size_t cap = t->observer_name_cap ? t->observer_name_cap * 2 : 64;
        while (cap <= (size_t)obs)
            cap *= 2;
        char **names = realloc(t->observer_name, cap * sizeof *names);
        if (names)
            t->observer_name = names;
        bool *named = names ? realloc(t->observer_named, cap * sizeof *named) : NULL;
        if (named)
            t->observer_named = named;
        bool *listed = named ? realloc(t->observer_listed, cap * sizeof *listed) : NULL;
        if (!listed)
            return SQLITE_NOMEM;
        t->observer_listed = listed;
        for (size_t i = t->observer_name_cap; i < cap; i++)
            names[i] = NULL, named[i] = listed[i] = false;
        t->observer_name_cap = cap;
    }
    MG_GROW(t->tx, t->n_tx, t->cap_tx, t->failed);
    if (t->failed)
        return SQLITE_NOMEM;
    struct ttx *x = &t->tx[t->n_tx++];
    *x = (struct ttx){
        .hop0 = t->n_hop_ids, .n = n, .observer = obs, .has_snr = tx->has_snr, .snr = tx->snr};
    if (!t->observer_named[obs]) { /* one name per observer (its row's) */
        if (!(t->observer_name[obs] = strdup(tx->observer_name)))
            return SQLITE_NOMEM;
        t->observer_named[obs] = true;
    }
    for (int i = 0; i < n; i++) {
        long id = mg_texts_id(&t->hops, hops[i], strlen(hops[i]), true);
        MG_GROW(t->hop_ids, t->n_hop_ids, t->cap_hop_ids, t->failed);
        if (id < 0 || t->failed)
            return SQLITE_NOMEM;
        t->hop_ids[t->n_hop_ids++] = id;
    }
    return 0;
}

/* What the comparators read: the report, and the reach entries the hop groups index. */
struct sort_ctx {
    const struct topology *t;
    const struct obs_hop *reach;
};

static int freq_cmp(int64_t ca, int64_t cb, const char *ta, const char *tb)
{
    if (ca != cb)
        return ca > cb ? -1 : 1;
    return strcmp(ta, tb);
}

struct freq {
    long hop;
    int64_t count;
};
static int by_freq(const void *a, const void *b, void *arg)
{
    const struct topology *sorting = ((const struct sort_ctx *)arg)->t;
    const struct freq *x = a, *y = b;
    return freq_cmp(x->count, y->count, sorting->hops.s[x->hop], sorting->hops.s[y->hop]);
}

static int by_pair_freq(const void *a, const void *b, void *arg)
{
    const struct topology *sorting = ((const struct sort_ctx *)arg)->t;
    const struct pair_count *x = a, *y = b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    int c = strcmp(sorting->hops.s[x->a], sorting->hops.s[y->a]);
    return c ? c : strcmp(sorting->hops.s[x->b], sorting->hops.s[y->b]);
}

/* An observer's reach entries: by observer, then distance, count (most first), hop. */
static int by_reach(const void *a, const void *b, void *arg)
{
    const struct topology *sorting = ((const struct sort_ctx *)arg)->t;
    const struct obs_hop *x = a, *y = b;
    int c = strcmp(sorting->observers.s[x->observer], sorting->observers.s[y->observer]);
    if (c)
        return c;
    if (x->min != y->min)
        return x->min < y->min ? -1 : 1;
    return freq_cmp(x->count, y->count, sorting->hops.s[x->hop], sorting->hops.s[y->hop]);
}

/* By hop, then nearest first, then observer id. */
static int by_hop_then_dist(const void *a, const void *b, void *arg)
{
    const struct topology *sorting = ((const struct sort_ctx *)arg)->t;
    const struct obs_hop *x = a, *y = b;
    int c = strcmp(sorting->hops.s[x->hop], sorting->hops.s[y->hop]);
    if (c)
        return c;
    if (x->min != y->min)
        return x->min < y->min ? -1 : 1;
    return strcmp(sorting->observers.s[x->observer], sorting->observers.s[y->observer]);
}

struct hop_group { /* the entries of one hop in by_hop_then_dist order */
    size_t first, n;
};
static int by_observers_then_hop(const void *a, const void *b, void *arg)
{
    const struct topology *sorting = ((const struct sort_ctx *)arg)->t;
    const struct obs_hop *sorting_reach = ((const struct sort_ctx *)arg)->reach;
    const struct hop_group *x = a, *y = b;
    if (x->n != y->n)
        return x->n > y->n ? -1 : 1;
    return strcmp(sorting->hops.s[sorting_reach[x->first].hop],
                  sorting->hops.s[sorting_reach[y->first].hop]);
}
static int by_nearest_then_hop(const void *a, const void *b, void *arg)
{
    const struct topology *sorting = ((const struct sort_ctx *)arg)->t;
    const struct obs_hop *sorting_reach = ((const struct sort_ctx *)arg)->reach;
    const struct hop_group *x = a, *y = b;
    const struct obs_hop *p = &sorting_reach[x->first], *q = &sorting_reach[y->first];
    if (p->min != q->min)
        return p->min < q->min ? -1 : 1;
    return strcmp(sorting->hops.s[p->hop], sorting->hops.s[q->hop]);
}

static const char *observer_name(const struct topology *t, long obs)
{
    const char *name = t->observer_listed[obs] ? t->observer_name[obs] : NULL;
    return name && name[0] ? name : t->observers.s[obs];
}

static void write_node(struct mg_json *j, const struct mg_resolver *r, long node,
                       const char *name_k, const char *key_k)
{
    if (node >= 0) {
        mg_json_kv_string(j, name_k, r->nodes.v[node].name);
        mg_json_kv_string(j, key_k, r->nodes.v[node].key);
    } else {
        mg_json_kv_null(j, name_k);
        mg_json_kv_null(j, key_k);
    }
}

/* The pubkey (lowercased) the hop's prefix names when it names one relay only, else -1. */
static long unique_of_hop(const struct topology *t, long hop, size_t *match)
{
    const char *h = t->hops.s[hop];
    size_t len = t->hops.len[hop];
    char low[MG_HOP_PREFIX_MAX + 1];
    if (len > MG_HOP_PREFIX_MAX)
        len = MG_HOP_PREFIX_MAX; /* CoreScope's lookup here cuts the hop to the map's longest */
    for (size_t i = 0; i < len; i++)
        low[i] = (char)tolower((unsigned char)h[i]);
    low[len] = '\0';
    return mg_resolver_candidates(&t->r, low, len, match) == 1 ? (long)match[0] : -1;
}

static int topology_write(struct topology *t, struct mg_db *db, struct mg_buf *body)
{
    size_t nh = t->hops.n;
    size_t *match = malloc((t->r.nodes.len + 1) * sizeof *match);
    long *resolved = malloc((nh + 1) * sizeof *resolved);
    long *unique = malloc((nh + 1) * sizeof *unique);
    bool *in_area = malloc((nh + 1) * sizeof *in_area);
    int64_t *freq = calloc(nh + 1, sizeof *freq);
    if (!match || !resolved || !unique || !in_area || !freq) {
        free(match), free(resolved), free(unique), free(in_area), free(freq);
        return SQLITE_NOMEM;
    }
    /* the context's anchors: hops naming one relay only; then every hop resolved once */
    for (size_t h = 0; h < nh; h++) {
        unique[h] = unique_of_hop(t, (long)h, match);
        char low[MG_HOP_PREFIX_MAX * 16];
        size_t len = t->hops.len[h];
        if (len >= sizeof low)
            continue;
        for (size_t i = 0; i <= len; i++)
            low[i] = (char)tolower((unsigned char)t->hops.s[h][i]);
        if (mg_resolver_candidates(&t->r, low, len, match) == 1)
            mg_hop_context_add(&t->r, &t->cx, t->r.nodes.v[match[0]].lower,
                               strlen(t->r.nodes.v[match[0]].lower));
    }
    mg_hop_context_centroid(&t->r, &t->cx, match);
    for (size_t h = 0; h < nh; h++) {
        resolved[h] = mg_resolve_hop(&t->r, &t->cx, t->hops.s[h], t->hops.len[h], match);
        in_area[h] = !t->by_area || (resolved[h] >= 0 &&
                                     mg_area_nodes_has(&t->area, t->r.nodes.v[resolved[h]].key));
    }

    int64_t counts[MG_PATH_MAX_HOPS + 1] = {0}, snr_n[MG_PATH_MAX_HOPS + 1] = {0};
    double snr_sum[MG_PATH_MAX_HOPS + 1] = {0};
    int64_t paths = 0, hop_sum = 0;
    struct pair_count *pairs = NULL;
    size_t n_pairs = 0, cap_pairs = 0;
    struct obs_hop *reach = NULL;
    size_t n_reach = 0, cap_reach = 0;
    struct mg_pairmap pm = {0}, rm = {0};
    bool failed = false, made;
    for (size_t i = 0; i < t->n_tx && !failed; i++) {
        const struct ttx *x = &t->tx[i];
        const long *hop = &t->hop_ids[x->hop0];
        if (t->by_area) {
            bool any = false;
            for (int k = 0; k < x->n && !any; k++)
                any = in_area[hop[k]];
            if (!any)
                continue;
        }
        counts[x->n]++;
        paths++;
        if (t->observers.len[x->observer])
            t->observer_listed[x->observer] = true;
        hop_sum += x->n;
        if (x->has_snr) {
            snr_n[x->n]++;
            snr_sum[x->n] += x->snr;
        }
        for (int k = 0; k < x->n; k++)
            if (in_area[hop[k]])
                freq[hop[k]]++;
        for (int k = 0; k + 1 < x->n; k++) {
            long a = hop[k], b = hop[k + 1];
            if (!in_area[a] || !in_area[b])
                continue;
            if (strcmp(t->hops.s[a], t->hops.s[b]) > 0) {
                long s = a;
                a = b, b = s;
            }
            size_t at = mg_pairmap_get(&pm, a, b, n_pairs, &made);
            if (at == SIZE_MAX) {
                failed = true;
                break;
            }
            if (made) {
                MG_GROW(pairs, n_pairs, cap_pairs, failed);
                if (failed)
                    break;
                pairs[n_pairs++] = (struct pair_count){a, b, 0};
            }
            pairs[at].count++;
        }
        for (int k = 0; k < x->n && !failed; k++) {
            if (!in_area[hop[k]])
                continue;
            int dist = x->n - k;
            size_t at = mg_pairmap_get(&rm, x->observer, hop[k], n_reach, &made);
            if (at == SIZE_MAX) {
                failed = true;
                break;
            }
            if (made) {
                MG_GROW(reach, n_reach, cap_reach, failed);
                if (failed)
                    break;
                reach[n_reach++] = (struct obs_hop){x->observer, hop[k], dist, dist, 0};
            }
            struct obs_hop *e = &reach[at];
            e->min = dist < e->min ? dist : e->min;
            e->max = dist > e->max ? dist : e->max;
            e->count++;
        }
    }
    mg_pairmap_free(&pm);
    mg_pairmap_free(&rm);

    /* the hops merged by the relay their prefix names alone (the longest text kept) */
    struct freq *fl = failed ? NULL : calloc(nh + 1, sizeof *fl);
    size_t n_fl = 0;
    long *merged_into = fl ? malloc((t->r.nodes.len + 1) * sizeof *merged_into) : NULL;
    if (!merged_into)
        failed = true;
    for (size_t i = 0; !failed && i < t->r.nodes.len; i++)
        merged_into[i] = -1;
    for (size_t h = 0; !failed && h < nh; h++) {
        if (!freq[h])
            continue;
        long u = unique[h];
        if (u < 0) {
            fl[n_fl++] = (struct freq){(long)h, freq[h]};
            continue;
        }
        if (merged_into[u] < 0) {
            merged_into[u] = (long)n_fl;
            fl[n_fl++] = (struct freq){(long)h, freq[h]};
        } else {
            struct freq *f = &fl[merged_into[u]];
            f->count += freq[h];
            if (t->hops.len[h] > t->hops.len[f->hop])
                f->hop = (long)h;
        }
    }
    /* the pairs likewise, by their two relays */
    struct mg_pairmap mm = {0};
    size_t n_merged = 0;
    for (size_t i = 0; !failed && i < n_pairs; i++) {
        struct pair_count *p = &pairs[i];
        long ua = unique[p->a], ub = unique[p->b];
        if (ua < 0 || ub < 0) {
            pairs[n_merged++] = *p;
            continue;
        }
        long a = p->a, b = p->b;
        if (strcmp(t->r.nodes.v[ua].lower, t->r.nodes.v[ub].lower) > 0) {
            long s = ua;
            ua = ub, ub = s;
            s = a, a = b, b = s;
        }
        size_t at = mg_pairmap_get(&mm, ua, ub, n_merged, &made);
        if (at == SIZE_MAX) {
            failed = true;
            break;
        }
        if (made) {
            pairs[n_merged++] = (struct pair_count){a, b, p->count};
            continue;
        }
        struct pair_count *q = &pairs[at];
        q->count += p->count;
        if (t->hops.len[a] > t->hops.len[q->a])
            q->a = a;
        if (t->hops.len[b] > t->hops.len[q->b])
            q->b = b;
    }
    mg_pairmap_free(&mm);
    for (size_t i = 0; !failed && i < n_merged; i++)
        if (strcmp(t->hops.s[pairs[i].a], t->hops.s[pairs[i].b]) > 0) {
            long s = pairs[i].a;
            pairs[i].a = pairs[i].b, pairs[i].b = s;
        }

    /* CoreScope's uniqueNodes: the nodes seen in the last 7 days (its /api/stats totalNodes) */
    int64_t unique_nodes = 0;
    if (!failed) {
        sqlite3_stmt *st = mg_db_prepare(
            db, "SELECT count(*) FROM nodes WHERE last_seen > strftime('%Y-%m-%dT%H:%M:%SZ',"
                " ?1, 'unixepoch', '-7 days')");
        if (st)
            sqlite3_bind_int64(st, 1, t->now_ms / 1000);
        if (st && sqlite3_step(st) == SQLITE_ROW)
            unique_nodes = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }

    int rc = failed ? SQLITE_NOMEM : SQLITE_OK;
    if (rc == SQLITE_OK) {
        struct sort_ctx sx = {t, reach};
        if (n_fl > 1)
            qsort_r(fl, n_fl, sizeof *fl, by_freq, &sx);
        if (n_merged > 1)
            qsort_r(pairs, n_merged, sizeof *pairs, by_pair_freq, &sx);

        struct mg_json j;
        mg_json_init(&j, body);
        mg_json_object_begin(&j); /* a Go map: keys in bytewise order */
        mg_json_kv_double(&j, "avgHops", paths ? (double)hop_sum / (double)paths : 0.0);

        /* the reach by hop: its observers nearest first */
        if (n_reach > 1)
            qsort_r(reach, n_reach, sizeof *reach, by_hop_then_dist, &sx);
        struct hop_group *groups = malloc((n_reach + 1) * sizeof *groups);
        size_t n_groups = 0;
        for (size_t i = 0; groups && i < n_reach; i++) {
            if (i == 0 || reach[i].hop != reach[i - 1].hop)
                groups[n_groups++] = (struct hop_group){i, 0};
            groups[n_groups - 1].n++;
        }
        if (!groups)
            body->failed = true;
        mg_json_key(&j, "bestPathList");
        mg_json_array_begin(&j);
        if (groups && n_groups > 1)
            qsort_r(groups, n_groups, sizeof *groups, by_nearest_then_hop, &sx);
        for (size_t g = 0; groups && g < n_groups && g < 50; g++) {
            const struct obs_hop *e = &reach[groups[g].first];
            mg_json_object_begin(&j);
            mg_json_kv_string(&j, "hop", t->hops.s[e->hop]);
            mg_json_kv_int(&j, "minDist", e->min);
            mg_json_key(&j, "name");
            if (resolved[e->hop] >= 0)
                mg_json_string(&j, t->r.nodes.v[resolved[e->hop]].name);
            else
                mg_json_null(&j);
            mg_json_kv_string(&j, "observer_id", t->observers.s[e->observer]);
            mg_json_kv_string(&j, "observer_name", observer_name(t, e->observer));
            mg_json_key(&j, "pubkey");
            if (resolved[e->hop] >= 0)
                mg_json_string(&j, t->r.nodes.v[resolved[e->hop]].key);
            else
                mg_json_null(&j);
            mg_json_object_end(&j);
        }
        mg_json_array_end(&j);

        mg_json_key(&j, "hopDistribution");
        mg_json_array_begin(&j);
        for (int h = 1; h <= MG_PATH_MAX_HOPS && h <= 25; h++) {
            if (!counts[h])
                continue;
            mg_json_object_begin(&j);
            mg_json_kv_int(&j, "count", counts[h]);
            mg_json_kv_int(&j, "hops", h);
            mg_json_object_end(&j);
        }
        mg_json_array_end(&j);
        mg_json_key(&j, "hopsVsSnr");
        mg_json_array_begin(&j);
        for (int h = 1; h <= MG_PATH_MAX_HOPS && h <= 20; h++) {
            if (!snr_n[h])
                continue;
            mg_json_object_begin(&j);
            mg_json_kv_double(&j, "avgSnr", snr_sum[h] / (double)snr_n[h]);
            mg_json_kv_int(&j, "count", snr_n[h]);
            mg_json_kv_int(&j, "hops", h);
            mg_json_object_end(&j);
        }
        mg_json_array_end(&j);
        int max_hops = 0, median = 0;
        int64_t seen = 0;
        bool have_median = false;
        for (int h = 1; h <= MG_PATH_MAX_HOPS; h++) {
            if (!counts[h])
                continue;
            max_hops = h;
            if (!have_median && seen + counts[h] > paths / 2)
                median = h, have_median = true;
            seen += counts[h];
        }
        mg_json_kv_int(&j, "maxHops", max_hops);
        mg_json_kv_int(&j, "medianHops", median);

        mg_json_key(&j, "multiObsNodes");
        mg_json_array_begin(&j);
        if (groups && n_groups > 1)
            qsort_r(groups, n_groups, sizeof *groups, by_observers_then_hop, &sx);
        for (size_t g = 0, shown = 0; groups && g < n_groups && shown < 50; g++) {
            if (groups[g].n < 2)
                continue;
            shown++;
            long hop = reach[groups[g].first].hop;
            mg_json_object_begin(&j);
            mg_json_kv_string(&j, "hop", t->hops.s[hop]);
            mg_json_key(&j, "name");
            if (resolved[hop] >= 0)
                mg_json_string(&j, t->r.nodes.v[resolved[hop]].name);
            else
                mg_json_null(&j);
            mg_json_key(&j, "observers");
            mg_json_array_begin(&j);
            for (size_t k = 0; k < groups[g].n; k++) {
                const struct obs_hop *e = &reach[groups[g].first + k];
                mg_json_object_begin(&j);
                mg_json_kv_int(&j, "count", e->count);
                mg_json_kv_int(&j, "minDist", e->min);
                mg_json_kv_string(&j, "observer_id", t->observers.s[e->observer]);
                mg_json_kv_string(&j, "observer_name", observer_name(t, e->observer));
                mg_json_object_end(&j);
            }
            mg_json_array_end(&j);
            mg_json_key(&j, "pubkey");
            if (resolved[hop] >= 0)
                mg_json_string(&j, t->r.nodes.v[resolved[hop]].key);
            else
                mg_json_null(&j);
            mg_json_object_end(&j);
        }
        mg_json_array_end(&j);
        free(groups);

        /* observers (CoreScope's map order; here by id) and each one's reach by ring */
        size_t no = t->observers.n;
        long *order = malloc((no + 1) * sizeof *order);
        if (!order)
            body->failed = true;
        size_t n_order = 0;
        for (size_t o = 0; order && o < no; o++)
            order[n_order++] = (long)o;
        struct mg_texts *ot = &t->observers;
        for (size_t a = 1; order && a < n_order; a++) /* insertion sort: observers are few */
            for (size_t b = a; b > 0 && strcmp(ot->s[order[b - 1]], ot->s[order[b]]) > 0; b--) {
                long s = order[b];
                order[b] = order[b - 1], order[b - 1] = s;
            }
        mg_json_key(&j, "observers");
        mg_json_array_begin(&j);
        for (size_t o = 0; order && o < n_order; o++) {
            if (!t->observer_listed[order[o]])
                continue;
            mg_json_object_begin(&j);
            mg_json_kv_string(&j, "id", ot->s[order[o]]);
            mg_json_kv_string(&j, "name", observer_name(t, order[o]));
            mg_json_object_end(&j);
        }
        mg_json_array_end(&j);

        if (n_reach > 1)
            qsort_r(reach, n_reach, sizeof *reach, by_reach, &sx);
        mg_json_key(&j, "perObserverReach");
        mg_json_object_begin(&j);
        for (size_t i = 0; i < n_reach;) {
            long obs = reach[i].observer;
            mg_json_key(&j, ot->s[obs]);
            mg_json_object_begin(&j);
            mg_json_kv_string(&j, "observer_name", observer_name(t, obs));
            mg_json_key(&j, "rings");
            mg_json_array_begin(&j);
            int ring = -1;
            for (; i < n_reach && reach[i].observer == obs; i++) {
                const struct obs_hop *e = &reach[i];
                if (e->min > 15)
                    continue;
                if (e->min != ring) {
                    if (ring >= 0) {
                        mg_json_array_end(&j);
                        mg_json_object_end(&j);
                    }
                    ring = e->min;
                    mg_json_object_begin(&j);
                    mg_json_kv_int(&j, "hops", ring);
                    mg_json_key(&j, "nodes");
                    mg_json_array_begin(&j);
                }
                mg_json_object_begin(&j);
                mg_json_kv_int(&j, "count", e->count);
                mg_json_key(&j, "distRange");
                if (e->min != e->max) {
                    char range[32];
                    snprintf(range, sizeof range, "%d-%d", e->min, e->max);
                    mg_json_string(&j, range);
                } else {
                    mg_json_null(&j);
                }
                mg_json_kv_string(&j, "hop", t->hops.s[e->hop]);
                write_node(&j, &t->r, resolved[e->hop], "name", "pubkey");
                mg_json_object_end(&j);
            }
            if (ring >= 0) {
                mg_json_array_end(&j);
                mg_json_object_end(&j);
            }
            mg_json_array_end(&j);
            mg_json_object_end(&j);
        }
        mg_json_object_end(&j);
        free(order);

        mg_json_key(&j, "topPairs");
        mg_json_array_begin(&j);
        for (size_t i = 0; i < n_merged && i < 15; i++) {
            const struct pair_count *p = &pairs[i];
            long ra = resolved[p->a], rb = resolved[p->b];
            mg_json_object_begin(&j);
            mg_json_kv_int(&j, "count", p->count);
            mg_json_kv_string(&j, "hopA", t->hops.s[p->a]);
            mg_json_kv_string(&j, "hopB", t->hops.s[p->b]);
            mg_json_key(&j, "nameA");
            if (ra >= 0)
                mg_json_string(&j, t->r.nodes.v[ra].name);
            else
                mg_json_null(&j);
            mg_json_key(&j, "nameB");
            if (rb >= 0)
                mg_json_string(&j, t->r.nodes.v[rb].name);
            else
                mg_json_null(&j);
            mg_json_key(&j, "pubkeyA");
            if (ra >= 0)
                mg_json_string(&j, t->r.nodes.v[ra].key);
            else
                mg_json_null(&j);
            mg_json_key(&j, "pubkeyB");
            if (rb >= 0)
                mg_json_string(&j, t->r.nodes.v[rb].key);
            else
                mg_json_null(&j);
            mg_json_object_end(&j);
        }
        mg_json_array_end(&j);
        mg_json_key(&j, "topRepeaters");
        mg_json_array_begin(&j);
        for (size_t i = 0; i < n_fl && i < 20; i++) {
            mg_json_object_begin(&j);
            mg_json_kv_int(&j, "count", fl[i].count);
            mg_json_kv_string(&j, "hop", t->hops.s[fl[i].hop]);
            write_node(&j, &t->r, resolved[fl[i].hop], "name", "pubkey");
            mg_json_object_end(&j);
        }
        mg_json_array_end(&j);
        mg_json_kv_int(&j, "uniqueNodes", unique_nodes);
        mg_json_object_end(&j);
        mg_buf_putc(body, '\n');
        if (body->failed)
            rc = SQLITE_NOMEM;
    }
    free(fl);
    free(merged_into);
    free(pairs);
    free(reach);
    free(match), free(resolved), free(unique), free(in_area), free(freq);
    return rc;
}

static int topology_body(struct mg_db *db, const struct topo_args *a, int64_t now_ms,
                         struct mg_buf *body)
{
    struct topology t;
    memset(&t, 0, sizeof t);
    t.args = a;
    t.now_ms = now_ms;
    int rc = mg_region_codes_known(db, a->region, &t.regional);
    if (rc == SQLITE_OK && a->area[0])
        rc = mg_area_nodes_load(db->conn, a->area, &t.area);
    t.by_area = mg_area_nodes_filter(&t.area);
    if (rc == SQLITE_OK)
        rc = mg_resolver_load(&t.r, db, now_ms);
    if (rc == SQLITE_OK)
        rc = mg_path_scan(db, &a->window, t.regional ? a->region : "", false, topology_tx, &t);
    if (rc == SQLITE_OK && (t.cx.failed || t.hops.failed || t.observers.failed || t.r.failed))
        rc = SQLITE_NOMEM;
    if (rc == SQLITE_OK)
        rc = topology_write(&t, db, body);
    for (size_t i = 0; i < t.observer_name_cap && t.observer_name; i++)
        free(t.observer_name[i]);
    free(t.observer_name);
    free(t.observer_named);
    free(t.observer_listed);
    free(t.tx);
    free(t.hop_ids);
    mg_texts_free(&t.hops);
    mg_texts_free(&t.observers);
    mg_hop_context_free(&t.cx);
    mg_resolver_free(&t.r);
    mg_area_nodes_free(&t.area);
    return rc;
}

static void topology_build(struct mg_cold_build *b, struct mg_db *db)
{
    const struct topo_args *a = (const struct topo_args *)b->args;
    bool in_transaction = sqlite3_exec(db->conn, "BEGIN", NULL, NULL, NULL) == SQLITE_OK;
    int rc = topology_body(db, a, b->now_unix * 1000, &b->body);
    if (in_transaction)
        sqlite3_exec(db->conn, "COMMIT", NULL, NULL, NULL);
    mg_cold_result(b, rc, "the paths");
}

static const struct mg_cold_report topology_report = {
    .name = "topology analytics",
    .not_found = "Not found",
    .bad_request = "bad request",
    .build = topology_build,
};

/* ---- the distance ---- */

struct dnode { /* every node, by key (CoreScope's nodeByPk) */
    char *key, *name;
    double lat, lon;
    bool has_gps, repeater;
};

struct dhop {
    long from, to; /* into nodes */
    double dist;   /* rounded to 0.01 */
    int type;      /* 0 R<->R, 1 C<->R, 2 C<->C */
    bool has_snr;
    double snr;
    size_t tx; /* into txs */
};

struct dpath {
    size_t tx;
    double total;
    size_t hop0; /* into hops */
    int n;
};

struct dtx {
    char *hash, *first_seen;
};

struct distance {
    bool regional;
    struct mg_area_nodes area;
    bool by_area;
    struct mg_resolver r;
    struct mg_hop_context cx;
    struct dnode *nodes;
    size_t n_nodes;
    long *hop_to_node; /* by relay: its entry in nodes */
    struct dhop *hops;
    size_t n_hops, cap_hops;
    struct dpath *paths;
    size_t n_paths, cap_paths;
    struct dtx *txs;
    size_t n_txs, cap_txs;
    size_t *match;
    bool failed;
};

/* "R↔R", "C↔R", "C↔C" */
static const char *const type_names[] = {"R\xe2\x86\x94"
                                         "R",
                                         "C\xe2\x86\x94"
                                         "R",
                                         "C\xe2\x86\x94"
                                         "C"};

static int by_dnode_key(const void *a, const void *b)
{
    return strcmp(((const struct dnode *)a)->key, ((const struct dnode *)b)->key);
}

static long dnode_of(const struct distance *d, const char *key)
{
    struct dnode probe = {.key = (char *)key};
    const struct dnode *n =
        d->n_nodes ? bsearch(&probe, d->nodes, d->n_nodes, sizeof *d->nodes, by_dnode_key) : NULL;
    return n ? (long)(n - d->nodes) : -1;
}

static int distance_nodes(struct mg_db *db, struct distance *d)
{
    sqlite3_stmt *st = mg_db_prepare(db, "SELECT public_key, name, role, lat, lon FROM nodes"
                                         " WHERE public_key IS NOT NULL");
    if (!st)
        return sqlite3_errcode(db->conn) ? sqlite3_errcode(db->conn) : SQLITE_NOMEM;
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        MG_GROW(d->nodes, d->n_nodes, cap, d->failed);
        if (d->failed)
            break;
        struct dnode *n = &d->nodes[d->n_nodes++];
        memset(n, 0, sizeof *n);
        n->key = dup_col(st, 0);
        n->name = dup_col(st, 1);
        const char *role = (const char *)sqlite3_column_text(st, 2);
        char low[64] = "";
        for (size_t i = 0; role && role[i] && i + 1 < sizeof low; i++)
            low[i] = (char)tolower((unsigned char)role[i]), low[i + 1] = '\0';
        n->repeater = strstr(low, "repeater") != NULL;
        if (sqlite3_column_type(st, 3) != SQLITE_NULL &&
            sqlite3_column_type(st, 4) != SQLITE_NULL) {
            n->lat = sqlite3_column_double(st, 3);
            n->lon = sqlite3_column_double(st, 4);
            n->has_gps = !(n->lat == 0 && n->lon == 0);
        }
        if (!n->key || !n->name) {
            d->failed = true;
            break;
        }
    }
    sqlite3_finalize(st);
    if (d->failed)
        return SQLITE_NOMEM;
    if (rc != SQLITE_DONE)
        return rc;
    if (d->n_nodes > 1)
        qsort(d->nodes, d->n_nodes, sizeof *d->nodes, by_dnode_key);
    d->hop_to_node = malloc((d->r.nodes.len + 1) * sizeof *d->hop_to_node);
    if (!d->hop_to_node)
        return SQLITE_NOMEM;
    for (size_t i = 0; i < d->r.nodes.len; i++)
        d->hop_to_node[i] = dnode_of(d, d->r.nodes.v[i].key);
    return SQLITE_OK;
}

static double haversine_km(double lat1, double lon1, double lat2, double lon2)
{
    double dlat = (lat2 - lat1) * M_PI / 180, dlon = (lon2 - lon1) * M_PI / 180;
    double a = sin(dlat / 2) * sin(dlat / 2) +
               cos(lat1 * M_PI / 180) * cos(lat2 * M_PI / 180) * sin(dlon / 2) * sin(dlon / 2);
    return 6371.0 * 2 * atan2(sqrt(a), sqrt(1 - a));
}

static double round_to(double v, double scale)
{
    return round(v * scale) / scale;
}

static int distance_tx(void *arg, const struct mg_scan_tx *tx)
{
    struct distance *d = arg;
    if (d->regional && !tx->in_region)
        return 0;
    if (d->by_area && !(tx->node[0] && mg_area_nodes_has(&d->area, tx->node)))
        return 0;
    char buf[MG_HOP_TEXT_MAX];
    char *hops[MG_PATH_MAX_HOPS];
    int n = mg_split_hops(tx->path, buf, sizeof buf, hops);
    if (n == 0)
        return 0;
    /* the transmission's own context: its sender, its observer, its hops naming one relay */
    struct mg_resolver *r = &d->r;
    mg_hop_context_reset(&d->cx);
    mg_hop_context_add(r, &d->cx, tx->pubkey, strlen(tx->pubkey));
    mg_hop_context_add_observer(r, &d->cx, tx->observer);
    mg_hop_context_add_anchors(r, &d->cx, hops, n, d->match);
    mg_hop_context_centroid(r, &d->cx, d->match);
    long chain[MG_PATH_MAX_HOPS + 1];
    int links = 0;
    long sender = tx->pubkey[0] ? dnode_of(d, tx->pubkey) : -1;
    if (sender >= 0 && d->nodes[sender].has_gps)
        chain[links++] = sender;
    for (int i = 0; i < n; i++) {
        long node = mg_resolve_hop(r, &d->cx, hops[i], strlen(hops[i]), d->match);
        long at = node >= 0 ? d->hop_to_node[node] : -1;
        if (at >= 0 && d->nodes[at].has_gps)
            chain[links++] = at;
    }
    if (d->cx.failed || r->failed)
        return SQLITE_NOMEM;
    if (links < 2)
        return 0;
    size_t hop0 = d->n_hops;
    double total = 0;
    int kept = 0;
    for (int i = 0; i + 1 < links; i++) {
        const struct dnode *a = &d->nodes[chain[i]], *b = &d->nodes[chain[i + 1]];
        double dist = haversine_km(a->lat, a->lon, b->lat, b->lon);
        if (dist > 300)
            continue;
        MG_GROW(d->hops, d->n_hops, d->cap_hops, d->failed);
        if (d->failed)
            return SQLITE_NOMEM;
        d->hops[d->n_hops++] = (struct dhop){
            .from = chain[i],
            .to = chain[i + 1],
            .dist = round_to(dist, 100),
            .type = a->repeater && b->repeater ? 0 : (!a->repeater && !b->repeater ? 2 : 1),
            .has_snr = tx->has_snr,
            .snr = tx->snr,
            .tx = d->n_txs};
        total += dist;
        kept++;
    }
    if (!kept)
        return 0;
    MG_GROW(d->paths, d->n_paths, d->cap_paths, d->failed);
    MG_GROW(d->txs, d->n_txs, d->cap_txs, d->failed);
    if (d->failed)
        return SQLITE_NOMEM;
    d->paths[d->n_paths++] =
        (struct dpath){.tx = d->n_txs, .total = round_to(total, 100), .hop0 = hop0, .n = kept};
    struct dtx *x = &d->txs[d->n_txs++];
    x->hash = strdup(tx->hash);
    x->first_seen = strdup(tx->first_seen);
    return x->hash && x->first_seen ? 0 : SQLITE_NOMEM;
}

static int by_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

struct link {  /* a pair of nodes' hops */
    long a, b; /* nodes, a's key <= b's */
    size_t best;
    int64_t count;
    double *snr;
    size_t n_snr, cap_snr;
};

static int by_link_dist(const void *x, const void *y, void *arg)
{
    const struct distance *dsorting = arg;
    const struct link *p = x, *q = y;
    double a = dsorting->hops[p->best].dist, b = dsorting->hops[q->best].dist;
    if (a != b)
        return a > b ? -1 : 1;
    return (p->best > q->best) - (p->best < q->best);
}

static int by_path_dist(const void *x, const void *y)
{
    const struct dpath *p = x, *q = y;
    if (p->total != q->total)
        return p->total > q->total ? -1 : 1;
    return (p->tx > q->tx) - (p->tx < q->tx);
}

static void write_cat(struct mg_json *j, const char *name, double *v, size_t n)
{
    mg_json_key(j, name);
    mg_json_object_begin(j);
    if (!n) {
        mg_json_kv_int(j, "avg", 0);
        mg_json_kv_int(j, "count", 0);
        mg_json_kv_int(j, "max", 0);
        mg_json_kv_int(j, "median", 0);
        mg_json_kv_int(j, "min", 0);
        mg_json_object_end(j);
        return;
    }
    double sum = 0, min = v[0], max = v[0];
    for (size_t i = 0; i < n; i++) {
        sum += v[i];
        min = v[i] < min ? v[i] : min;
        max = v[i] > max ? v[i] : max;
    }
    qsort(v, n, sizeof *v, by_double);
    mg_json_kv_double(j, "avg", round_to(sum / (double)n, 100));
    mg_json_kv_int(j, "count", (int64_t)n);
    mg_json_kv_double(j, "max", round_to(max, 100));
    mg_json_kv_double(j, "median", round_to(v[n / 2], 100));
    mg_json_kv_double(j, "min", round_to(min, 100));
    mg_json_object_end(j);
}

static void write_dhop_node(struct mg_json *j, const struct distance *d, long node,
                            const char *name_k, const char *key_k)
{
    mg_json_kv_string(j, name_k, d->nodes[node].name);
    mg_json_kv_string(j, key_k, d->nodes[node].key);
}

static int distance_write(struct distance *d, struct mg_buf *body)
{
    size_t nh = d->n_hops;
    double *by_type[3];
    size_t n_type[3] = {0};
    double *all = malloc((nh + 1) * sizeof *all);
    for (int k = 0; k < 3; k++)
        by_type[k] = malloc((nh + 1) * sizeof *by_type[k]);
    struct link *links = calloc(nh + 1, sizeof *links);
    struct mg_pairmap lm = {0};
    size_t n_links = 0;
    bool failed = !all || !by_type[0] || !by_type[1] || !by_type[2] || !links, made;
    double sum = 0, min = 0, max = 0;
    for (size_t i = 0; !failed && i < nh; i++) {
        const struct dhop *h = &d->hops[i];
        by_type[h->type][n_type[h->type]++] = h->dist;
        all[i] = h->dist;
        sum += h->dist;
        min = i == 0 || h->dist < min ? h->dist : min;
        max = i == 0 || h->dist > max ? h->dist : max;
        long a = h->from, b = h->to;
        if (strcmp(d->nodes[a].key, d->nodes[b].key) > 0) {
            long s = a;
            a = b, b = s;
        }
        size_t at = mg_pairmap_get(&lm, a, b, n_links, &made);
        if (at == SIZE_MAX) {
            failed = true;
            break;
        }
        if (made)
            links[n_links++] = (struct link){.a = a, .b = b, .best = i};
        struct link *l = &links[at];
        l->count++;
        if (h->has_snr) {
            MG_GROW(l->snr, l->n_snr, l->cap_snr, failed);
            if (failed)
                break;
            l->snr[l->n_snr++] = h->snr;
        }
        if (h->dist > d->hops[l->best].dist)
            l->best = i;
    }
    mg_pairmap_free(&lm);
    int rc = failed ? SQLITE_NOMEM : SQLITE_OK;
    if (rc == SQLITE_OK) {
        struct mg_json j;
        mg_json_init(&j, body);
        mg_json_object_begin(&j); /* a Go map: keys in bytewise order */
        mg_json_key(&j, "catStats");
        mg_json_object_begin(&j);
        write_cat(&j, type_names[2], by_type[2], n_type[2]); /* "C↔C" < "C↔R" < "R↔R" */
        write_cat(&j, type_names[1], by_type[1], n_type[1]);
        write_cat(&j, type_names[0], by_type[0], n_type[0]);
        mg_json_object_end(&j);

        mg_json_key(&j, "distHistogram");
        if (!nh) {
            mg_json_array_begin(&j);
            mg_json_array_end(&j);
        } else {
            double width = (max - min) / 25;
            if (width == 0)
                width = 1;
            int64_t bins[25] = {0};
            for (size_t i = 0; i < nh; i++) {
                int idx = (int)floor((all[i] - min) / width);
                bins[idx >= 25 ? 24 : (idx < 0 ? 0 : idx)]++;
            }
            mg_json_object_begin(&j);
            mg_json_key(&j, "bins");
            mg_json_array_begin(&j);
            for (int i = 0; i < 25; i++) {
                mg_json_object_begin(&j);
                mg_json_kv_int(&j, "count", bins[i]);
                mg_json_kv_double(&j, "w", round_to(width, 10));
                mg_json_kv_double(&j, "x", round_to(min + (double)i * width, 10));
                mg_json_object_end(&j);
            }
            mg_json_array_end(&j);
            mg_json_kv_double(&j, "max", max);
            mg_json_kv_double(&j, "min", min);
            mg_json_object_end(&j);
        }

        /* by hour: the hops are in transmission order, first_seen ascending (as text) */
        mg_json_key(&j, "distOverTime");
        mg_json_array_begin(&j);
        /* the hours of first_seen are not in order when first_seen's text is not ISO: sort */
        size_t *idx = malloc((nh + 1) * sizeof *idx);
        for (size_t i = 0; idx && i < nh; i++)
            idx[i] = i;
        if (!idx)
            body->failed = true;
        for (size_t a = 1; idx && a < nh; a++) { /* already sorted: a check per hop */
            const char *p = d->txs[d->hops[idx[a - 1]].tx].first_seen;
            const char *q = d->txs[d->hops[idx[a]].tx].first_seen;
            if (strncmp(p, q, 13) > 0) {
                for (size_t b = a; b > 0; b--) {
                    const char *x = d->txs[d->hops[idx[b - 1]].tx].first_seen;
                    const char *y = d->txs[d->hops[idx[b]].tx].first_seen;
                    if (strncmp(x, y, 13) <= 0)
                        break;
                    size_t s = idx[b];
                    idx[b] = idx[b - 1], idx[b - 1] = s;
                }
            }
        }
        for (size_t i = 0; idx && i < nh;) {
            const char *fs = d->txs[d->hops[idx[i]].tx].first_seen;
            if (strlen(fs) < 13) {
                i++;
                continue;
            }
            double s = 0;
            int64_t c = 0;
            size_t k = i;
            for (; k < nh; k++) {
                const char *o = d->txs[d->hops[idx[k]].tx].first_seen;
                if (strlen(o) < 13 || strncmp(o, fs, 13) != 0)
                    break;
                s += d->hops[idx[k]].dist;
                c++;
            }
            mg_json_object_begin(&j);
            mg_json_kv_double(&j, "avg", round_to(s / (double)c, 100));
            mg_json_kv_int(&j, "count", c);
            mg_json_key(&j, "hour");
            mg_json_string_n(&j, fs, 13);
            mg_json_object_end(&j);
            i = k;
        }
        free(idx);
        mg_json_array_end(&j);

        mg_json_key(&j, "summary");
        mg_json_object_begin(&j);
        mg_json_kv_double(&j, "avgDist", nh ? round_to(sum / (double)nh, 100) : 0.0);
        mg_json_kv_double(&j, "maxDist", nh ? round_to(max, 100) : 0.0);
        mg_json_kv_int(&j, "totalHops", (int64_t)nh);
        mg_json_kv_int(&j, "totalPaths", (int64_t)d->n_paths);
        mg_json_object_end(&j);

        if (n_links > 1)
            qsort_r(links, n_links, sizeof *links, by_link_dist, d);
        mg_json_key(&j, "topHops");
        mg_json_array_begin(&j);
        for (size_t i = 0; i < n_links && i < 20; i++) {
            struct link *l = &links[i];
            const struct dhop *h = &d->hops[l->best];
            mg_json_object_begin(&j);
            mg_json_key(&j, "bestSnr");
            if (l->n_snr) {
                double best = l->snr[0];
                for (size_t k = 1; k < l->n_snr; k++)
                    best = l->snr[k] > best ? l->snr[k] : best;
                mg_json_double(&j, best);
            } else {
                mg_json_null(&j);
            }
            mg_json_kv_double(&j, "dist", h->dist);
            write_dhop_node(&j, d, h->from, "fromName", "fromPk");
            mg_json_kv_string(&j, "hash", d->txs[h->tx].hash);
            mg_json_key(&j, "medianSnr");
            if (l->n_snr) {
                qsort(l->snr, l->n_snr, sizeof *l->snr, by_double);
                size_t mid = l->n_snr / 2;
                mg_json_double(&j,
                               l->n_snr % 2 ? l->snr[mid] : (l->snr[mid - 1] + l->snr[mid]) / 2);
            } else {
                mg_json_null(&j);
            }
            mg_json_kv_int(&j, "obsCount", l->count);
            mg_json_kv_string(&j, "timestamp", d->txs[h->tx].first_seen);
            write_dhop_node(&j, d, h->to, "toName", "toPk");
            mg_json_kv_string(&j, "type", type_names[h->type]);
            mg_json_object_end(&j);
        }
        mg_json_array_end(&j);

        if (d->n_paths > 1)
            qsort(d->paths, d->n_paths, sizeof *d->paths, by_path_dist);
        mg_json_key(&j, "topPaths");
        mg_json_array_begin(&j);
        for (size_t i = 0; i < d->n_paths && i < 20; i++) {
            const struct dpath *p = &d->paths[i];
            mg_json_object_begin(&j);
            mg_json_kv_string(&j, "hash", d->txs[p->tx].hash);
            mg_json_kv_int(&j, "hopCount", p->n);
            mg_json_key(&j, "hops");
            mg_json_array_begin(&j);
            for (int k = 0; k < p->n; k++) {
                const struct dhop *h = &d->hops[p->hop0 + (size_t)k];
                mg_json_object_begin(&j);
                mg_json_kv_double(&j, "dist", h->dist);
                write_dhop_node(&j, d, h->from, "fromName", "fromPk");
                write_dhop_node(&j, d, h->to, "toName", "toPk");
                mg_json_object_end(&j);
            }
            mg_json_array_end(&j);
            mg_json_kv_string(&j, "timestamp", d->txs[p->tx].first_seen);
            mg_json_kv_double(&j, "totalDist", p->total);
            mg_json_object_end(&j);
        }
        mg_json_array_end(&j);
        mg_json_object_end(&j);
        mg_buf_putc(body, '\n');
        if (body->failed)
            rc = SQLITE_NOMEM;
    }
    for (size_t i = 0; links && i < n_links; i++)
        free(links[i].snr);
    free(links);
    free(all);
    for (int k = 0; k < 3; k++)
        free(by_type[k]);
    return rc;
}

static int distance_body(struct mg_db *db, const struct topo_args *a, int64_t now_ms,
                         struct mg_buf *body)
{
    struct distance d;
    memset(&d, 0, sizeof d);
    int rc = mg_region_codes_known(db, a->region, &d.regional);
    if (rc == SQLITE_OK && a->area[0])
        rc = mg_area_nodes_load(db->conn, a->area, &d.area);
    d.by_area = mg_area_nodes_filter(&d.area);
    if (rc == SQLITE_OK)
        rc = mg_resolver_load(&d.r, db, now_ms);
    if (rc == SQLITE_OK)
        rc = distance_nodes(db, &d);
    if (rc == SQLITE_OK && !(d.match = malloc((d.r.nodes.len + 1) * sizeof *d.match)))
        rc = SQLITE_NOMEM;
    if (rc == SQLITE_OK)
        rc = mg_path_scan(db, NULL, d.regional ? a->region : "", d.by_area, distance_tx, &d);
    if (rc == SQLITE_OK)
        rc = distance_write(&d, body);
    for (size_t i = 0; i < d.n_nodes; i++)
        free(d.nodes[i].key), free(d.nodes[i].name);
    for (size_t i = 0; i < d.n_txs; i++)
        free(d.txs[i].hash), free(d.txs[i].first_seen);
    free(d.nodes);
    free(d.txs);
    free(d.hops);
    free(d.paths);
    free(d.hop_to_node);
    free(d.match);
    mg_hop_context_free(&d.cx);
    mg_resolver_free(&d.r);
    mg_area_nodes_free(&d.area);
    return rc;
}

static void distance_build(struct mg_cold_build *b, struct mg_db *db)
{
    const struct topo_args *a = (const struct topo_args *)b->args;
    bool in_transaction = sqlite3_exec(db->conn, "BEGIN", NULL, NULL, NULL) == SQLITE_OK;
    int rc = distance_body(db, a, b->now_unix * 1000, &b->body);
    if (in_transaction)
        sqlite3_exec(db->conn, "COMMIT", NULL, NULL, NULL);
    mg_cold_result(b, rc, "the paths");
}

static const struct mg_cold_report distance_report = {
    .name = "distance analytics",
    .not_found = "Not found",
    .bad_request = "bad request",
    .build = distance_build,
};

/* ---- the handlers ---- */

bool mg_analytics_topology_is_heavy(struct mg_env *env, const struct mg_request *req)
{
    struct topo_args a;
    char key[TOPO_KEY_BYTES];
    if (!topology_args(req, NULL, &a, key, sizeof key))
        return false; /* answered 400 before any read */
    return mg_cold_report_is_heavy(env, key);
}

enum mg_turn mg_handle_analytics_topology(struct mg_env *env, const struct mg_request *req,
                                          struct mg_response *res)
{
    struct topo_args a;
    char key[TOPO_KEY_BYTES];
    if (!topology_args(req, res, &a, key, sizeof key))
        return MG_DONE;
    return mg_cold_report_serve(env, req, res, &topology_report, key, &a, sizeof a);
}

bool mg_analytics_distance_is_heavy(struct mg_env *env, const struct mg_request *req)
{
    struct topo_args a;
    char key[TOPO_KEY_BYTES];
    if (!distance_args(req, NULL, &a, key, sizeof key))
        return false;
    return mg_cold_report_is_heavy(env, key);
}

enum mg_turn mg_handle_analytics_distance(struct mg_env *env, const struct mg_request *req,
                                          struct mg_response *res)
{
    struct topo_args a;
    char key[TOPO_KEY_BYTES];
    if (!distance_args(req, res, &a, key, sizeof key))
        return MG_DONE;
    return mg_cold_report_serve(env, req, res, &distance_report, key, &a, sizeof a);
}

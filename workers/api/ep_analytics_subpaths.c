/* SPDX-License-Identifier: ISC */
/*
 * The Analytics page's Route Patterns tab, as CoreScope's server computes it from its store
 * (its subpath index, GetAnalyticsSubpaths*, GetSubpathDetail):
 *
 * GET /api/analytics/subpaths?minLen=2&maxLen=8&limit=100&region=&window=|from=&to=
 * GET /api/analytics/subpaths-bulk?groups=MIN-MAX:LIMIT,...&region=&window=|from=&to=
 *   the runs of consecutive hops (sub-paths) the paths hold, named by the relays their hops
 *   resolve to ("A → B"), counted (a run twice in a path counts twice), most first, each with
 *   its share of the paths with two hops or more (pct, one decimal) and the hops of the first
 *   run that gave it the name (rawHops); the bulk answers each group of lengths in one scan.
 * GET /api/analytics/subpath-detail?hops=a,b,...
 *   the transmissions whose path holds the run (as CoreScope's index: lowercased, 2 to 8
 *   hops; a transmission holding it twice counts twice): the hops resolved, first and last
 *   seen, their hours, average SNR and RSSI, the full paths (15 most) and observers (10 most).
 *
 * A path is the display observation's (path_resolve.h). Two ways, as CoreScope's: with no
 * region= and no window, its index: runs of 2 to 8 hops, lowercased, out of every path with
 * two hops or more; with region= (any text, even one naming no code) or a window, its scan:
 * runs of minLen to maxLen hops (no cap of 8) as stored, of the paths of transmissions heard
 * in the region (codes no observer has: every one) with first_seen in the window. Either way a
 * hop is resolved with one context gathered from every transmission (path_resolve.h), a
 * hop naming no relay keeps its text. The detail resolves the asked hops with the context of
 * the matching transmissions, each full path with its transmission's own.
 *
 * Parameters as CoreScope's: minLen below 2 is 2; limit 1..200 (CoreScope's analyticsMax
 * default), 100 when absent or bad; a bad group answers 200 {"error": ...} as CoreScope does.
 * meshgate bounds a request: at most 12 groups, hops= at most 150 bytes (400 past them).
 * CoreScope's hidden-node filter of the lists is a no-op (its type test never matches) and so
 * is meshgate's; the detail answers 404 for a hop that is a hidden node's key, as CoreScope.
 *
 * Each answer is a cold report (cold_report.h) keyed by its parameters and the minute
 * (CoreScope's subpath cache lives 60 s). Where CoreScope leaves order to Go's map order or an
 * unstable sort (ties of counts; which of the runs merged under one name gives rawHops),
 * meshgate breaks ties by the path's text and takes the first run in transmission order.
 * CoreScope answers 503 "index loading" until its index is built; meshgate's request waits
 * (parked) for the build and answers 200.
 */
#include "cold_report.h"
#include "corescope_window.h"
#include "json.h"
#include "node_visibility.h"
#include "params.h"
#include "path_resolve.h"
#include "region_codes.h"
#include "result_cache.h"
#include "router.h"
#include "time_parse.h"

#include <ctype.h>
#include <math.h>
#include <sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define SP_CACHE_S 60    /* CoreScope's rfCacheTTL */
#define SP_LIMIT_MAX 200 /* its listLimits.analyticsMax default, and the bulk's clamp */
#define SP_INDEX_MAX 8   /* its index's longest run */
#define SP_GROUPS_MAX 12
#define SP_HOPS_TEXT_MAX 150
#define SP_KEY_BYTES 400
#define SP_ARROW " \xe2\x86\x92 "

/* ---- parameters ---- */

struct sp_group {
    uint8_t min, max, limit; /* lengths cut to MG_PATH_MAX_HOPS + 1: no path is longer */
};

struct sp_args {
    char region[80]; /* codes, uppercased, comma-separated */
    bool scan;       /* region= given or a window: CoreScope's scan, not its index */
    struct mg_cs_window window;
    uint8_t n_groups;
    struct sp_group group[SP_GROUPS_MAX];
};
_Static_assert(sizeof(struct sp_args) <= MG_COLD_ARGS_BYTES, "the args fit a build");

struct detail_args {
    char hops[SP_HOPS_TEXT_MAX + 1];
};
_Static_assert(sizeof(struct detail_args) <= MG_COLD_ARGS_BYTES, "the args fit a build");

struct subpaths_params {
    const char *region;
    int64_t min_len, max_len, limit;
    int window;
    const char *from, *to;
};
#define REGION_PARAM(T)                                                                            \
    {                                                                                              \
        .name = "region", .kind = MG_PARAM_TEXT, .offset = offsetof(T, region),                    \
        .corescope = "IATA codes trimmed and uppercased; codes no observer has: no filter; any "   \
                     "text (even \"All\") takes its scan (runs past 8 hops, hops as stored); "     \
                     "meshgate: 400 past 79 bytes of codes (a cache key's room)"                   \
    }
#define WINDOW_PARAMS(T)                                                                           \
    {.name = "window",                                                                             \
     .kind = MG_PARAM_CHOICE,                                                                      \
     .offset = offsetof(T, window),                                                                \
     .choices = mg_cs_window_names,                                                                \
     .def = -1,                                                                                    \
     .corescope = "1h, 24h|1d, 3d, 7d|1w, 30d ending now; anything else: no window; ignored "      \
                  "when from or to is given"},                                                     \
        {.name = "from",                                                                           \
         .kind = MG_PARAM_TEXT,                                                                    \
         .offset = offsetof(T, from),                                                              \
         .corescope = "RFC 3339, cut to the second; malformed: no lower bound"},                   \
    {                                                                                              \
        .name = "to", .kind = MG_PARAM_TEXT, .offset = offsetof(T, to),                            \
        .corescope = "RFC 3339, cut to the second; malformed: no upper bound"                      \
    }

#define P(f) .offset = offsetof(struct subpaths_params, f)
static const struct mg_param subpaths_param_list[] = {
    {.name = "minLen",
     .kind = MG_PARAM_INT,
     P(min_len),
     .def = 2,
     .min = 2,
     .max = INT64_MAX,
     .corescope = "malformed or out of int range: 2; below 2: 2"},
    {.name = "maxLen",
     .kind = MG_PARAM_INT,
     P(max_len),
     .def = 8,
     .min = INT64_MIN,
     .max = INT64_MAX,
     .corescope = "malformed or out of int range: 8; below minLen: no run"},
    {.name = "limit",
     .kind = MG_PARAM_LIMIT,
     P(limit),
     .def = 100,
     .min = 1,
     .max = SP_LIMIT_MAX,
     .corescope = "malformed or below 1: 100; above 200 (analyticsMax): 200"},
    REGION_PARAM(struct subpaths_params),
    WINDOW_PARAMS(struct subpaths_params),
};
#undef P
const struct mg_param_table mg_analytics_subpaths_params =
    MG_PARAM_TABLE(struct subpaths_params, subpaths_param_list);

struct bulk_params {
    const char *groups;
    const char *region;
    int window;
    const char *from, *to;
};
#define P(f) .offset = offsetof(struct bulk_params, f)
static const struct mg_param bulk_param_list[] = {
    {.name = "groups",
     .kind = MG_PARAM_TEXT,
     P(groups),
     .sample = "2-2:50,3-3:30,4-4:20,5-8:15",
     .corescope = "MIN-MAX:LIMIT,...; absent or empty: 200 {\"error\":\"groups parameter "
                  "required...\"}; a bad group (MIN below 2, MAX below MIN, LIMIT below 1): 200 "
                  "{\"error\":\"invalid group: ...\"}; LIMIT above 200: 200; meshgate: 400 past "
                  "12 groups (a build's room)"},
    REGION_PARAM(struct bulk_params),
    WINDOW_PARAMS(struct bulk_params),
};
#undef P
const struct mg_param_table mg_analytics_subpaths_bulk_params =
    MG_PARAM_TABLE(struct bulk_params, bulk_param_list);

struct detail_params {
    const char *hops;
};
static const struct mg_param detail_param_list[] = {
    {.name = "hops",
     .kind = MG_PARAM_TEXT,
     .offset = offsetof(struct detail_params, hops),
     .corescope = "comma-separated hops; absent, empty or one hop: 200 {\"error\":\"Need at "
                  "least 2 hops\"}; a hidden node's key: 404; meshgate: 400 past 150 bytes"},
};
const struct mg_param_table mg_analytics_subpath_detail_params =
    MG_PARAM_TABLE(struct detail_params, detail_param_list);

static uint8_t cut_len(int64_t v)
{
    return v < 0 ? 0 : v > MG_PATH_MAX_HOPS + 1 ? MG_PATH_MAX_HOPS + 1 : (uint8_t)v;
}

/* The region and window of a request into a; false with a 400. */
static bool common_args(const char *region, int window, const char *from, const char *to,
                        struct mg_response *res, struct sp_args *a)
{
    if (region && !mg_param_list_codes(region, a->region, sizeof a->region)) {
        if (res)
            mg_response_error(res, 400, "region: at most 79 bytes of codes");
        return false;
    }
    mg_cs_window_parse(window, from, to, (int64_t)time(NULL), &a->window);
    a->scan = region || !mg_cs_window_is_zero(&a->window);
    return true;
}

/* The cache key of text (the report's name, then "|" and its parameters): text itself when it
 * fits the cache's keys, else the name and the SHA-256 of the whole text (so a long region,
 * many groups or long hops are served from the cache too). */
static void cache_key(const char *text, char *key, size_t cap)
{
    /* The interval ends the key (cold_report.h: "|@SECONDS:INDEX"), outside the hash, so a
     * request of a new interval finds the previous interval's answer to serve while it builds. */
    char interval[40];
    int il = snprintf(interval, sizeof interval, "|@%d:%lld", SP_CACHE_S,
                      (long long)(time(NULL) / SP_CACHE_S));
    size_t len = strlen(text);
    if (len + (size_t)il < MG_CACHE_KEY_MAX) {
        snprintf(key, cap, "%s%s", text, interval);
        return;
    }
    uint8_t h[SHA256_DIGEST_LENGTH];
    SHA2_CTX sha;
    SHA256Init(&sha);
    SHA256Update(&sha, (const uint8_t *)text, len);
    SHA256Final(h, &sha);
    int n = snprintf(key, cap, "%.*s#", (int)strcspn(text, "|"), text);
    /* As many hex digits of the hash as leave room for the interval (at least 128 bits). */
    for (int i = 0; i < SHA256_DIGEST_LENGTH && n > 0 &&
                    (size_t)n + 2 + (size_t)il < (cap < MG_CACHE_KEY_MAX ? cap : MG_CACHE_KEY_MAX);
         i++)
        n += snprintf(key + n, cap - (size_t)n, "%02x", h[i]);
    if (n > 0 && (size_t)n + (size_t)il < cap)
        snprintf(key + n, cap - (size_t)n, "%s", interval);
}

static void sp_key(const char *prefix, const struct sp_args *a, char *key, size_t cap)
{
    char wkey[64], text[SP_KEY_BYTES];
    mg_cs_window_key(&a->window, wkey, sizeof wkey);
    int n = snprintf(text, sizeof text, "%s|%d|%s|%s|", prefix, a->scan, a->region, wkey);
    for (int i = 0; i < a->n_groups && n > 0 && (size_t)n < sizeof text; i++)
        n += snprintf(text + n, sizeof text - (size_t)n, "%d-%d:%d,", a->group[i].min,
                      a->group[i].max, a->group[i].limit);
    cache_key(text, key, cap);
}

static bool subpaths_args(const struct mg_request *req, struct mg_response *res, struct sp_args *a,
                          char *key, size_t cap)
{
    memset(a, 0, sizeof *a);
    struct subpaths_params own;
    const struct subpaths_params *p = mg_params_get(&mg_analytics_subpaths_params, req, res, &own);
    if (!p || !common_args(p->region, p->window, p->from, p->to, res, a))
        return false;
    a->n_groups = 1;
    a->group[0] = (struct sp_group){cut_len(p->min_len), cut_len(p->max_len), (uint8_t)p->limit};
    sp_key("subpaths", a, key, cap);
    return true;
}

/* A whole Go int (strconv.Atoi) of len bytes at s. */
static bool atoi_n(const char *s, size_t len, int64_t *v)
{
    char buf[32];
    if (len >= sizeof buf)
        return false;
    memcpy(buf, s, len);
    buf[len] = '\0';
    return mg_parse_atoi(buf, v);
}

/* The groups as CoreScope reads them: false with its 200 {"error"} (or a 400 past the most). */
static bool parse_groups(const char *text, struct mg_response *res, struct sp_args *a)
{
    if (!text) {
        if (res)
            mg_response_error(res, 200, "groups parameter required (e.g. groups=2-2:50,3-3:30)");
        return false;
    }
    const char *g = text;
    for (;;) {
        const char *end = strchr(g, ',');
        size_t len = end ? (size_t)(end - g) : strlen(g);
        const char *colon = memchr(g, ':', len);
        if (!colon) {
            if (res)
                mg_response_error(res, 200, "invalid group format: %.*s", (int)len, g);
            return false;
        }
        const char *dash = memchr(g, '-', (size_t)(colon - g));
        if (!dash) {
            if (res)
                mg_response_error(res, 200, "invalid range format: %.*s", (int)(colon - g), g);
            return false;
        }
        int64_t mn, mx, lim;
        if (!atoi_n(g, (size_t)(dash - g), &mn) ||
            !atoi_n(dash + 1, (size_t)(colon - dash - 1), &mx) ||
            !atoi_n(colon + 1, (size_t)(g + len - colon - 1), &lim) || mn < 2 || mx < mn ||
            lim < 1) {
            if (res)
                mg_response_error(res, 200, "invalid group: %.*s", (int)len, g);
            return false;
        }
        if (a->n_groups == SP_GROUPS_MAX) {
            if (res)
                mg_response_error(res, 400, "groups: at most %d", SP_GROUPS_MAX);
            return false;
        }
        a->group[a->n_groups++] = (struct sp_group){
            cut_len(mn), cut_len(mx), (uint8_t)(lim > SP_LIMIT_MAX ? SP_LIMIT_MAX : lim)};
        if (!end)
            return true;
        g = end + 1;
    }
}

static bool bulk_args(const struct mg_request *req, struct mg_response *res, struct sp_args *a,
                      char *key, size_t cap)
{
    memset(a, 0, sizeof *a);
    struct bulk_params own;
    const struct bulk_params *p = mg_params_get(&mg_analytics_subpaths_bulk_params, req, res, &own);
    if (!p || !parse_groups(p->groups, res, a) ||
        !common_args(p->region, p->window, p->from, p->to, res, a))
        return false;
    sp_key("subpaths-bulk", a, key, cap);
    return true;
}

/* ---- the runs: every path's, counted by their hops ---- */

struct run {   /* a run of hops: ids into the hop texts */
    size_t at; /* into the ids */
    uint8_t len;
    int64_t count;
};

struct runs {
    struct mg_resolver r;
    struct mg_hop_context cx;
    size_t *match;
    const struct sp_args *args;
    bool regional;
    uint8_t lo, hi; /* the run lengths counted */
    struct mg_texts hops;
    long *ids; /* runs' hop ids, run after run */
    size_t n_ids, cap_ids;
    struct run *run;
    size_t n_run, cap_run;
    size_t *slot; /* run index + 1 */
    size_t slots;
    int64_t paths;
    bool failed;
};

static uint64_t run_hash(const long *ids, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL ^ n;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint64_t)ids[i]) * 0x100000001b3ULL;
    return h ^ (h >> 31);
}

static bool runs_grow(struct runs *s)
{
    size_t slots = s->slots ? s->slots * 2 : 4096;
    size_t *v = calloc(slots, sizeof *v);
    if (!v)
        return false;
    for (size_t i = 0; i < s->n_run; i++) {
        size_t h = run_hash(&s->ids[s->run[i].at], s->run[i].len) & (slots - 1);
        while (v[h])
            h = (h + 1) & (slots - 1);
        v[h] = i + 1;
    }
    free(s->slot);
    s->slot = v, s->slots = slots;
    return true;
}

/* Counts the run of n hop ids (found or added). */
static void runs_count(struct runs *s, const long *ids, size_t n)
{
    if ((s->n_run + 1) * 2 > s->slots && !runs_grow(s)) {
        s->failed = true;
        return;
    }
    size_t h = run_hash(ids, n) & (s->slots - 1);
    while (s->slot[h]) {
        struct run *r = &s->run[s->slot[h] - 1];
        if (r->len == n && memcmp(&s->ids[r->at], ids, n * sizeof *ids) == 0) {
            r->count++;
            return;
        }
        h = (h + 1) & (s->slots - 1);
    }
    MG_GROW(s->run, s->n_run, s->cap_run, s->failed);
    if (s->failed)
        return;
    while (s->n_ids + n > s->cap_ids) {
        long *more = realloc(s->ids, (s->cap_ids * 2 + n) * sizeof *more);
        if (!more) {
            s->failed = true;
            return;
        }
        s->ids = more, s->cap_ids = s->cap_ids * 2 + n;
    }
    memcpy(&s->ids[s->n_ids], ids, n * sizeof *ids);
    s->run[s->n_run] = (struct run){.at = s->n_ids, .len = (uint8_t)n, .count = 1};
    s->n_ids += n;
    s->slot[h] = ++s->n_run;
}

static int runs_tx(void *arg, const struct mg_scan_tx *tx)
{
    struct runs *s = arg;
    char buf[MG_HOP_TEXT_MAX];
    char *hops[MG_PATH_MAX_HOPS];
    int n = mg_split_hops(tx->path, buf, sizeof buf, hops);
    /* the context is every transmission's, whatever the filters */
    mg_hop_context_add(&s->r, &s->cx, tx->pubkey, strlen(tx->pubkey));
    mg_hop_context_add_observer(&s->r, &s->cx, tx->observer);
    mg_hop_context_add_anchors(&s->r, &s->cx, hops, n, s->match);
    if (s->cx.failed)
        return SQLITE_NOMEM;
    if (n < 2)
        return 0;
    if (s->args->scan && ((s->regional && !tx->in_region) ||
                          !mg_cs_window_holds_text(&s->args->window, tx->first_seen)))
        return 0;
    s->paths++;
    long ids[MG_PATH_MAX_HOPS];
    for (int i = 0; i < n; i++) {
        size_t len = strlen(hops[i]);
        if (!s->args->scan) /* the index's runs are lowercased */
            for (size_t k = 0; k < len; k++)
                hops[i][k] = (char)tolower((unsigned char)hops[i][k]);
        if ((ids[i] = mg_texts_id(&s->hops, hops[i], len, true)) < 0)
            return SQLITE_NOMEM;
    }
    for (int l = s->lo; l <= s->hi && l <= n; l++)
        for (int start = 0; start + l <= n; start++)
            runs_count(s, &ids[start], (size_t)l);
    return s->failed ? SQLITE_NOMEM : 0;
}

/* One name of a group: the runs whose hops resolve to it. */
struct named {
    long text; /* into the group's names */
    size_t first_run;
    int64_t count;
};

struct rank_ctx {
    const struct mg_texts *names;
};
static int by_count_then_path(const void *a, const void *b, void *arg)
{
    const struct mg_texts *names = ((const struct rank_ctx *)arg)->names;
    const struct named *x = a, *y = b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return strcmp(names->s[x->text], names->s[y->text]);
}

static int write_group(struct runs *s, const struct sp_group *g, char **hop_name, struct mg_json *j)
{
    struct mg_texts names = {0};
    struct named *v = NULL;
    size_t n = 0, cap = 0;
    bool failed = false;
    struct mg_buf text;
    mg_buf_init(&text);
    for (size_t i = 0; i < s->n_run && !failed; i++) {
        const struct run *r = &s->run[i];
        if (r->len < g->min || r->len > g->max)
            continue;
        mg_buf_reset(&text);
        for (size_t k = 0; k < r->len; k++) {
            if (k)
                mg_buf_puts(&text, SP_ARROW);
            mg_buf_puts(&text, hop_name[s->ids[r->at + k]]);
        }
        if (text.failed) {
            failed = true;
            break;
        }
        size_t before = names.n;
        long id = mg_texts_id(&names, text.data, text.len, true);
        if (id < 0) {
            failed = true;
            break;
        }
        if ((size_t)id == before) {
            MG_GROW(v, n, cap, failed);
            if (failed)
                break;
            v[n++] = (struct named){.text = id, .first_run = i};
        }
        v[id].count += r->count;
    }
    mg_buf_free(&text);
    if (!failed) {
        struct rank_ctx ctx = {&names};
        if (n)
            qsort_r(v, n, sizeof *v, by_count_then_path, &ctx);
        if (n > g->limit)
            n = g->limit;
        mg_json_object_begin(j);
        mg_json_key(j, "subpaths");
        mg_json_array_begin(j);
        for (size_t i = 0; i < n; i++) {
            const char *path = names.s[v[i].text];
            int64_t parts = 1;
            for (const char *p = strstr(path, SP_ARROW); p; p = strstr(p + 1, SP_ARROW))
                parts++;
            const struct run *r = &s->run[v[i].first_run];
            mg_json_object_begin(j);
            mg_json_kv_int(j, "count", v[i].count);
            mg_json_kv_int(j, "hops", parts);
            mg_json_kv_string(j, "path", path);
            mg_json_key(j, "pct");
            mg_json_double(
                j, s->paths > 0 ? round((double)v[i].count / (double)s->paths * 1000) / 10 : 0.0);
            mg_json_key(j, "rawHops");
            mg_json_array_begin(j);
            for (size_t k = 0; k < r->len; k++)
                mg_json_string(j, s->hops.s[s->ids[r->at + k]]);
            mg_json_array_end(j);
            mg_json_object_end(j);
        }
        mg_json_array_end(j);
        mg_json_kv_int(j, "totalPaths", s->paths);
        mg_json_object_end(j);
    }
    free(v);
    mg_texts_free(&names);
    return failed ? SQLITE_NOMEM : SQLITE_OK;
}

static int runs_body(struct mg_db *db, const struct sp_args *a, int64_t now_ms, bool bulk,
                     struct mg_buf *body)
{
    struct runs s;
    memset(&s, 0, sizeof s);
    s.args = a;
    s.lo = 255, s.hi = 0;
    for (int i = 0; i < a->n_groups; i++) {
        int hi = a->scan ? a->group[i].max
                         : (a->group[i].max < SP_INDEX_MAX ? a->group[i].max : SP_INDEX_MAX);
        if (a->group[i].min > hi)
            continue;
        s.lo = a->group[i].min < s.lo ? a->group[i].min : s.lo;
        s.hi = (uint8_t)(hi > s.hi ? hi : s.hi);
    }
    int rc = SQLITE_OK;
    if (a->scan && a->region[0])
        rc = mg_region_codes_known(db, a->region, &s.regional);
    if (rc == SQLITE_OK)
        rc = mg_resolver_load(&s.r, db, now_ms);
    if (rc == SQLITE_OK && !(s.match = malloc((s.r.nodes.len + 1) * sizeof *s.match)))
        rc = SQLITE_NOMEM;
    if (rc == SQLITE_OK)
        rc = mg_path_scan(db, NULL, s.regional ? a->region : "", false, runs_tx, &s);
    if (rc == SQLITE_OK && (s.failed || s.hops.failed || s.r.failed || s.cx.failed))
        rc = SQLITE_NOMEM;
    char **hop_name = NULL;
    if (rc == SQLITE_OK) {
        mg_hop_context_centroid(&s.r, &s.cx, s.match);
        hop_name = calloc(s.hops.n + 1, sizeof *hop_name);
        for (size_t h = 0; hop_name && h < s.hops.n; h++) {
            long node = mg_resolve_hop(&s.r, &s.cx, s.hops.s[h], s.hops.len[h], s.match);
            hop_name[h] = node >= 0 ? s.r.nodes.v[node].name : s.hops.s[h];
        }
        if (!hop_name)
            rc = SQLITE_NOMEM;
    }
    if (rc == SQLITE_OK) {
        struct mg_json j;
        mg_json_init(&j, body);
        if (bulk) {
            mg_json_object_begin(&j);
            mg_json_key(&j, "results");
            mg_json_array_begin(&j);
        }
        for (int i = 0; i < a->n_groups && rc == SQLITE_OK; i++) {
            struct sp_group g = a->group[i];
            if (!a->scan && g.max > SP_INDEX_MAX)
                g.max = SP_INDEX_MAX;
            rc = write_group(&s, &g, hop_name, &j);
        }
        if (bulk) {
            mg_json_array_end(&j);
            mg_json_object_end(&j);
        }
        mg_buf_puts(body, "\n");
        if (rc == SQLITE_OK && body->failed)
            rc = SQLITE_NOMEM;
    }
    free(hop_name);
    free(s.match);
    free(s.ids);
    free(s.run);
    free(s.slot);
    mg_texts_free(&s.hops);
    mg_hop_context_free(&s.cx);
    mg_resolver_free(&s.r);
    return rc;
}

static void run_build(struct mg_cold_build *b, struct mg_db *db, bool bulk)
{
    const struct sp_args *a = (const struct sp_args *)b->args;
    bool in_transaction = sqlite3_exec(db->conn, "BEGIN", NULL, NULL, NULL) == SQLITE_OK;
    int rc = runs_body(db, a, b->now_unix * 1000, bulk, &b->body);
    if (in_transaction)
        sqlite3_exec(db->conn, "COMMIT", NULL, NULL, NULL);
    mg_cold_result(b, rc, "the paths");
}

static void subpaths_build(struct mg_cold_build *b, struct mg_db *db)
{
    run_build(b, db, false);
}

static void bulk_build(struct mg_cold_build *b, struct mg_db *db)
{
    run_build(b, db, true);
}

static const struct mg_cold_report subpaths_report = {
    .name = "subpath analytics",
    .not_found = "Not found",
    .bad_request = "bad request",
    .build = subpaths_build,
};

static const struct mg_cold_report bulk_report = {
    .name = "subpath analytics",
    .not_found = "Not found",
    .bad_request = "bad request",
    .build = bulk_build,
};

/* ---- the detail ---- */

struct match { /* a transmission holding the run, once per time it holds it */
    char *first_seen, *observer_name, *path, *pubkey, *observer;
    bool has_snr, has_rssi;
    double snr, rssi;
    int times;
};

struct detail {
    char lower[SP_HOPS_TEXT_MAX + 1]; /* the run, lowercased, its hops split on commas */
    char *want[SP_HOPS_TEXT_MAX + 1];
    int n_want;
    struct match *m;
    size_t n, cap;
    bool failed;
};

static int detail_tx(void *arg, const struct mg_scan_tx *tx)
{
    struct detail *d = arg;
    char buf[MG_HOP_TEXT_MAX];
    char *hops[MG_PATH_MAX_HOPS];
    int n = mg_split_hops(tx->path, buf, sizeof buf, hops);
    if (n < 2 || d->n_want < 2 || d->n_want > SP_INDEX_MAX || d->n_want > n)
        return 0;
    int times = 0;
    for (int start = 0; start + d->n_want <= n; start++) {
        int k = 0;
        while (k < d->n_want && strcasecmp(hops[start + k], d->want[k]) == 0 &&
               strlen(hops[start + k]) == strlen(d->want[k]))
            k++;
        times += k == d->n_want;
    }
    if (!times)
        return 0;
    MG_GROW(d->m, d->n, d->cap, d->failed);
    if (d->failed)
        return SQLITE_NOMEM;
    struct match *m = &d->m[d->n++];
    *m = (struct match){.first_seen = strdup(tx->first_seen),
                        .observer_name = strdup(tx->observer_name),
                        .path = strdup(tx->path),
                        .pubkey = strdup(tx->pubkey),
                        .observer = strdup(tx->observer),
                        .has_snr = tx->has_snr,
                        .has_rssi = tx->has_rssi,
                        .snr = tx->snr,
                        .rssi = tx->rssi,
                        .times = times};
    return m->first_seen && m->observer_name && m->path && m->pubkey && m->observer ? 0
                                                                                    : SQLITE_NOMEM;
}

/* Go's time.Parse of first_seen as RFC 3339, else "2006-01-02 15:04:05": its hour, or -1. */
static int hour_of(const char *s)
{
    size_t n = strlen(s);
    int64_t ms;
    struct mg_rfc3339_shape shape;
    bool ok = false;
    if (n == 19 && s[10] == ' ') {
        char iso[24];
        snprintf(iso, sizeof iso, "%.10sT%.8sZ", s, s + 11);
        ok = mg_rfc3339_parse_ms(iso, strlen(iso), &ms);
    } else if (n) {
        ok = mg_rfc3339_parse_shaped(s, n, &ms, &shape) && shape.separator == 'T' &&
             shape.zone != 'z';
    }
    /* the hour in the text's own offset: Go's t.Hour() of the parsed time */
    return ok ? (s[11] - '0') * 10 + (s[12] - '0') : -1;
}

struct tally {
    char *text;
    int64_t count;
};
static int by_tally(const void *a, const void *b)
{
    const struct tally *x = a, *y = b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return strcmp(x->text, y->text);
}

/* Adds count to text's tally (texts interned in t, tallies by id). */
static bool tally_add(struct mg_texts *t, struct tally **v, size_t *n, size_t *cap,
                      const char *text, size_t len, int64_t count)
{
    size_t before = t->n;
    long id = mg_texts_id(t, text, len, true);
    if (id < 0)
        return false;
    if ((size_t)id == before) {
        bool failed = false;
        MG_GROW(*v, *n, *cap, failed);
        if (failed)
            return false;
        (*v)[(*n)++] = (struct tally){.text = t->s[id]};
    }
    (*v)[id].count += count;
    return true;
}

static void write_tallies(struct mg_json *j, const char *key, const char *text_key, struct tally *v,
                          size_t n, size_t most)
{
    if (n)
        qsort(v, n, sizeof *v, by_tally);
    mg_json_key(j, key);
    mg_json_array_begin(j);
    for (size_t i = 0; i < n && i < most; i++) {
        mg_json_object_begin(j);
        mg_json_kv_int(j, "count", v[i].count);
        mg_json_kv_string(j, text_key, v[i].text);
        mg_json_object_end(j);
    }
    mg_json_array_end(j);
}

static int detail_write(struct detail *d, struct mg_resolver *r, const char *asked,
                        struct mg_buf *body)
{
    size_t *match = malloc((r->nodes.len + 1) * sizeof *match);
    struct mg_hop_context cx = {0};
    struct mg_texts paths = {0}, observers = {0};
    struct tally *pv = NULL, *ov = NULL;
    size_t pn = 0, pcap = 0, on = 0, ocap = 0;
    bool failed = !match;
    char buf[MG_HOP_TEXT_MAX];
    char *hops[MG_PATH_MAX_HOPS];
    /* the asked hops, resolved with the context of every match */
    for (size_t i = 0; i < d->n && !failed; i++) {
        int n = mg_split_hops(d->m[i].path, buf, sizeof buf, hops);
        mg_hop_context_add(r, &cx, d->m[i].pubkey, strlen(d->m[i].pubkey));
        mg_hop_context_add_observer(r, &cx, d->m[i].observer);
        mg_hop_context_add_anchors(r, &cx, hops, n, match);
    }
    if (!failed)
        mg_hop_context_centroid(r, &cx, match);
    struct mg_json j;
    mg_json_init(&j, body);
    int64_t hours[24] = {0}, total = 0, snr_n = 0, rssi_n = 0;
    double snr_sum = 0, rssi_sum = 0;
    const char *first = "", *last = "";
    struct mg_buf full;
    mg_buf_init(&full);
    struct mg_hop_context own = {0};
    for (size_t i = 0; i < d->n && !failed; i++) {
        const struct match *m = &d->m[i];
        total += m->times;
        if (m->first_seen[0]) {
            if (!first[0] || strcmp(m->first_seen, first) < 0)
                first = m->first_seen;
            if (!last[0] || strcmp(m->first_seen, last) > 0)
                last = m->first_seen;
            int h = hour_of(m->first_seen);
            if (h >= 0 && h < 24)
                hours[h] += m->times;
        }
        if (m->has_snr)
            snr_sum += m->snr * m->times, snr_n += m->times;
        if (m->has_rssi)
            rssi_sum += m->rssi * m->times, rssi_n += m->times;
        if (m->observer_name[0] && !tally_add(&observers, &ov, &on, &ocap, m->observer_name,
                                              strlen(m->observer_name), m->times))
            failed = true;
        /* the full path, with the transmission's own context */
        int n = mg_split_hops(m->path, buf, sizeof buf, hops);
        mg_hop_context_reset(&own);
        mg_hop_context_add(r, &own, m->pubkey, strlen(m->pubkey));
        mg_hop_context_add_observer(r, &own, m->observer);
        mg_hop_context_add_anchors(r, &own, hops, n, match);
        mg_hop_context_centroid(r, &own, match);
        mg_buf_reset(&full);
        for (int k = 0; k < n; k++) {
            long node = mg_resolve_hop(r, &own, hops[k], strlen(hops[k]), match);
            if (k)
                mg_buf_puts(&full, SP_ARROW);
            mg_buf_puts(&full, node >= 0 ? r->nodes.v[node].name : hops[k]);
        }
        if (full.failed || own.failed ||
            !tally_add(&paths, &pv, &pn, &pcap, full.data ? full.data : "", full.len, m->times))
            failed = true;
    }
    mg_hop_context_free(&own);
    mg_buf_free(&full);
    if (!failed) {
        mg_json_object_begin(&j);
        mg_json_kv_string(&j, "firstSeen", first);
        mg_json_key(&j, "hops");
        mg_json_array_begin(&j);
        for (const char *p = asked;; p++) {
            const char *c = strchr(p, ',');
            mg_json_string_n(&j, p, c ? (size_t)(c - p) : strlen(p));
            if (!c)
                break;
            p = c;
        }
        mg_json_array_end(&j);
        mg_json_key(&j, "hourDistribution");
        mg_json_array_begin(&j);
        for (int h = 0; h < 24; h++)
            mg_json_int(&j, hours[h]);
        mg_json_array_end(&j);
        mg_json_kv_string(&j, "lastSeen", last);
        mg_json_key(&j, "nodes");
        mg_json_array_begin(&j);
        for (const char *p = asked;; p++) {
            const char *c = strchr(p, ',');
            size_t len = c ? (size_t)(c - p) : strlen(p);
            long node = mg_resolve_hop(r, &cx, p, len, match);
            const struct mg_hop_node *nd = node >= 0 ? &r->nodes.v[node] : NULL;
            mg_json_object_begin(&j);
            mg_json_key(&j, "hop");
            mg_json_string_n(&j, p, len);
            if (nd && nd->has_gps) {
                mg_json_kv_double(&j, "lat", nd->lat);
                mg_json_kv_double(&j, "lon", nd->lon);
            } else {
                mg_json_kv_null(&j, "lat");
                mg_json_kv_null(&j, "lon");
            }
            mg_json_key(&j, "name");
            if (nd)
                mg_json_string(&j, nd->name);
            else
                mg_json_string_n(&j, p, len);
            if (nd)
                mg_json_kv_string(&j, "pubkey", nd->key);
            else
                mg_json_kv_null(&j, "pubkey");
            mg_json_object_end(&j);
            if (!c)
                break;
            p = c;
        }
        mg_json_array_end(&j);
        write_tallies(&j, "observers", "name", ov, on, 10);
        write_tallies(&j, "parentPaths", "path", pv, pn, 15);
        mg_json_key(&j, "signal");
        mg_json_object_begin(&j);
        if (rssi_n)
            mg_json_kv_double(&j, "avgRssi", rssi_sum / (double)rssi_n);
        else
            mg_json_kv_null(&j, "avgRssi");
        if (snr_n)
            mg_json_kv_double(&j, "avgSnr", snr_sum / (double)snr_n);
        else
            mg_json_kv_null(&j, "avgSnr");
        mg_json_kv_int(&j, "samples", snr_n);
        mg_json_object_end(&j);
        mg_json_kv_int(&j, "totalMatches", total);
        mg_json_object_end(&j);
        mg_buf_puts(body, "\n");
        failed = body->failed || cx.failed;
    }
    free(pv), free(ov);
    mg_texts_free(&paths);
    mg_texts_free(&observers);
    mg_hop_context_free(&cx);
    free(match);
    return failed ? SQLITE_NOMEM : SQLITE_OK;
}

static int detail_body(struct mg_db *db, const struct detail_args *a, int64_t now_ms,
                       struct mg_buf *body)
{
    struct detail d;
    memset(&d, 0, sizeof d);
    for (size_t i = 0; a->hops[i]; i++)
        d.lower[i] = (char)tolower((unsigned char)a->hops[i]);
    for (char *p = d.lower;; p++) {
        d.want[d.n_want++] = p;
        char *c = strchr(p, ',');
        if (!c)
            break;
        *c = '\0';
        p = c;
    }
    struct mg_resolver r;
    int rc = mg_resolver_load(&r, db, now_ms);
    if (rc == SQLITE_OK)
        rc = mg_path_scan(db, NULL, "", false, detail_tx, &d);
    if (rc == SQLITE_OK && (d.failed || r.failed))
        rc = SQLITE_NOMEM;
    if (rc == SQLITE_OK)
        rc = detail_write(&d, &r, a->hops, body);
    for (size_t i = 0; i < d.n; i++) {
        free(d.m[i].first_seen), free(d.m[i].observer_name), free(d.m[i].path);
        free(d.m[i].pubkey), free(d.m[i].observer);
    }
    free(d.m);
    mg_resolver_free(&r);
    return rc;
}

static void detail_build(struct mg_cold_build *b, struct mg_db *db)
{
    const struct detail_args *a = (const struct detail_args *)b->args;
    bool in_transaction = sqlite3_exec(db->conn, "BEGIN", NULL, NULL, NULL) == SQLITE_OK;
    int rc = detail_body(db, a, b->now_unix * 1000, &b->body);
    if (in_transaction)
        sqlite3_exec(db->conn, "COMMIT", NULL, NULL, NULL);
    mg_cold_result(b, rc, "the paths");
}

static const struct mg_cold_report detail_report = {
    .name = "subpath detail",
    .not_found = "Not found",
    .bad_request = "bad request",
    .build = detail_build,
};

/* The detail's hops (CoreScope: at least two), each not a hidden node's key; false with the
 * answer in res. */
static bool detail_args(struct mg_env *env, const struct mg_request *req, struct mg_response *res,
                        struct detail_args *a, char *key, size_t cap)
{
    memset(a, 0, sizeof *a);
    struct detail_params own;
    const struct detail_params *p =
        mg_params_get(&mg_analytics_subpath_detail_params, req, res, &own);
    if (!p)
        return false;
    if (!p->hops || !strchr(p->hops, ',')) {
        if (res)
            mg_response_error(res, 200, "Need at least 2 hops");
        return false;
    }
    if (strlen(p->hops) > SP_HOPS_TEXT_MAX) {
        if (res)
            mg_response_error(res, 400, "hops: at most %d bytes", SP_HOPS_TEXT_MAX);
        return false;
    }
    snprintf(a->hops, sizeof a->hops, "%s", p->hops);
    if (mg_node_visibility_hides()) {
        char one[SP_HOPS_TEXT_MAX + 1];
        for (const char *h = a->hops;;) {
            const char *c = strchr(h, ',');
            size_t len = c ? (size_t)(c - h) : strlen(h);
            snprintf(one, sizeof one, "%.*s", (int)len, h);
            bool hidden = false;
            int rc = mg_node_key_hidden(env->db->conn, one, false, &hidden);
            if (rc != SQLITE_OK) {
                if (res)
                    mg_response_db_failure_on(res, "the nodes", rc, env->db->conn);
                return false;
            }
            if (hidden) {
                if (res)
                    mg_response_error(res, 404, "Not found");
                return false;
            }
            if (!c)
                break;
            h = c + 1;
        }
    }
    char text[SP_KEY_BYTES];
    snprintf(text, sizeof text, "subpath-detail|%s", a->hops);
    cache_key(text, key, cap);
    return true;
}

/* ---- the handlers ---- */

bool mg_analytics_subpaths_is_heavy(struct mg_env *env, const struct mg_request *req)
{
    struct sp_args a;
    char key[SP_KEY_BYTES];
    if (!subpaths_args(req, NULL, &a, key, sizeof key))
        return false; /* answered 400 before any read */
    return mg_cold_report_is_heavy(env, key);
}

enum mg_turn mg_handle_analytics_subpaths(struct mg_env *env, const struct mg_request *req,
                                          struct mg_response *res)
{
    struct sp_args a;
    char key[SP_KEY_BYTES];
    if (!subpaths_args(req, res, &a, key, sizeof key))
        return MG_DONE;
    return mg_cold_report_serve(env, req, res, &subpaths_report, key, &a, sizeof a);
}

bool mg_analytics_subpaths_bulk_is_heavy(struct mg_env *env, const struct mg_request *req)
{
    struct sp_args a;
    char key[SP_KEY_BYTES];
    if (!bulk_args(req, NULL, &a, key, sizeof key))
        return false;
    return mg_cold_report_is_heavy(env, key);
}

enum mg_turn mg_handle_analytics_subpaths_bulk(struct mg_env *env, const struct mg_request *req,
                                               struct mg_response *res)
{
    struct sp_args a;
    char key[SP_KEY_BYTES];
    if (!bulk_args(req, res, &a, key, sizeof key))
        return MG_DONE;
    return mg_cold_report_serve(env, req, res, &bulk_report, key, &a, sizeof a);
}

bool mg_analytics_subpath_detail_is_heavy(struct mg_env *env, const struct mg_request *req)
{
    struct detail_args a;
    char key[SP_KEY_BYTES];
    if (!detail_args(env, req, NULL, &a, key, sizeof key))
        return false;
    return mg_cold_report_is_heavy(env, key);
}

enum mg_turn mg_handle_analytics_subpath_detail(struct mg_env *env, const struct mg_request *req,
                                                struct mg_response *res)
{
    struct detail_args a;
    char key[SP_KEY_BYTES];
    if (!detail_args(env, req, res, &a, key, sizeof key))
        return MG_DONE;
    return mg_cold_report_serve(env, req, res, &detail_report, key, &a, sizeof a);
}

/* SPDX-License-Identifier: ISC */
/*
 * GET /api/nodes/{pubkey}/neighbors?min_count=N&min_score=F&include_ambiguous=B: the node's
 * first-hop neighbours, from the neighbor_edges table CoreScope's ingestor keeps (CoreScope's
 * server answers from the same table: it loads it into its neighbour graph at start and every
 * minute). A cold report (cold_report.h): built under the cold gate, shared through the result
 * cache.
 *
 * The graph as CoreScope loads it: a row (node_a, node_b, count, last_seen) with a count is an
 * edge between its two keys as stored, ordered (the smaller first); rows of the same pair add
 * their counts, keep the latest last_seen and the first row's time as first_seen. A node's
 * edges are those with its lowercased key on either side (an edge to itself twice). Each one:
 *   pubkey   the other key (null for the empty key), prefix "" (no stored edge is ambiguous),
 *   name, role  of the node with that key (lowercased), else of the observer with it (role
 *            "observer"), else null; count; counts_by_mode {"0": count} (the persisted rows
 *            have no per-mode split); score = min(1, count/100) × exp(−ln2/168 × hours since
 *            last_seen); first_seen, last_seen RFC 3339 UTC (year 1 when unparsed, score 0);
 *            avg_snr null; distance_km when both ends have GPS; observers []; ambiguous false.
 * Edges under min_count or min_score are left out; by score, highest first (ties in table
 * order: CoreScope leaves them in random order). total_observations sums the counts shown.
 * An unknown key has no edges: 200 with an empty list, as CoreScope answers.
 */
#include "cold_report.h"
#include "json.h"
#include "params.h"
#include "reach.h"
#include "result_cache.h"
#include "router.h"

#include "../tools/fixture.h"

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
};
_Static_assert(sizeof(struct neighbors_args) <= MG_COLD_ARGS_BYTES, "args fit a build");

#define AFFINITY_SATURATION 100.0
#define HALF_LIFE_HOURS 168.0
#define YEAR_ONE_S (-62135596800LL) /* 0001-01-01T00:00:00Z */

struct edge {
    char *a, *b;             /* as stored, a <= b */
    int64_t count, positive; /* positive: the sum of counts > 0 (counts_by_mode) */
    int64_t first_s, last_s; /* YEAR_ONE_S when unparsed */
    bool last_known;
};

struct entry {
    const struct edge *e;
    const char *other;
    double score;
    size_t order;
    /* the other end's node or observer */
    bool known, located;
    char *name, *role;
    double lat, lon;
};

/* CoreScope's parseTimestamp: RFC 3339, or "YYYY-MM-DD HH:MM:SS" (UTC). */
static bool parse_time(const char *text, int64_t *s)
{
    if (!text)
        return false;
    size_t n = strlen(text);
    char buf[40];
    if (n == 19 && text[10] == ' ') {
        memcpy(buf, text, n);
        buf[10] = 'T';
        buf[19] = 'Z';
        buf[20] = '\0';
        text = buf;
        n = 20;
    }
    int64_t ms;
    if (!mg_fixture_parse_rfc3339_ms(text, n, &ms))
        return false;
    *s = ms >= 0 ? ms / 1000 : -((-ms + 999) / 1000);
    return true;
}

static char *dup_text(sqlite3_stmt *st, int col)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    return t ? strdup((const char *)t) : NULL;
}

static int by_score(const void *x, const void *y)
{
    const struct entry *a = x, *b = y;
    if (a->score != b->score)
        return a->score > b->score ? -1 : 1;
    return a->order < b->order ? -1 : a->order > b->order;
}

static void write_time(struct mg_json *j, const char *key, int64_t s)
{
    char out[32];
    if (s == YEAR_ONE_S) {
        snprintf(out, sizeof out, "0001-01-01T00:00:00Z");
    } else {
        time_t t = (time_t)s;
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(out, sizeof out, "%Y-%m-%dT%H:%M:%SZ", &tm);
    }
    mg_json_kv_string(j, key, out);
}

struct nb {
    struct edge *edges;
    size_t n_edges, cap_edges;
    struct entry *entries;
    size_t n_entries;
};

static void nb_free(struct nb *g)
{
    for (size_t i = 0; i < g->n_edges; i++) {
        free(g->edges[i].a);
        free(g->edges[i].b);
    }
    for (size_t i = 0; i < g->n_entries; i++) {
        free(g->entries[i].name);
        free(g->entries[i].role);
    }
    free(g->edges);
    free(g->entries);
}

static struct edge *edge_for(struct nb *g, const char *x, const char *y, bool *fresh)
{
    *fresh = false;
    const char *a = strcmp(x, y) <= 0 ? x : y, *b = a == x ? y : x;
    for (size_t i = 0; i < g->n_edges; i++)
        if (!strcmp(g->edges[i].a, a) && !strcmp(g->edges[i].b, b))
            return &g->edges[i];
    if (g->n_edges == g->cap_edges) {
        size_t cap = g->cap_edges ? 2 * g->cap_edges : 16;
        struct edge *p = realloc(g->edges, cap * sizeof *p);
        if (!p)
            return NULL;
        g->edges = p;
        g->cap_edges = cap;
    }
    struct edge *e = &g->edges[g->n_edges];
    memset(e, 0, sizeof *e);
    e->a = strdup(a);
    e->b = strdup(b);
    if (!e->a || !e->b) {
        free(e->a);
        free(e->b);
        return NULL;
    }
    e->first_s = e->last_s = YEAR_ONE_S;
    g->n_edges++;
    *fresh = true;
    return e;
}

static int load_edges(struct nb *g, struct mg_db *db, const char *pubkey)
{
    sqlite3_stmt *st = mg_db_prepare(db, "SELECT node_a, node_b, count, last_seen FROM "
                                         "neighbor_edges WHERE node_a = ?1 OR node_b = ?1 "
                                         "ORDER BY rowid");
    if (!st)
        return sqlite3_errcode(db->conn);
    sqlite3_bind_text(st, 1, pubkey, -1, SQLITE_STATIC);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (sqlite3_column_type(st, 2) != SQLITE_INTEGER)
            continue; /* CoreScope's scan into an int fails on NULL: the row is skipped */
        const char *x = (const char *)sqlite3_column_text(st, 0);
        const char *y = (const char *)sqlite3_column_text(st, 1);
        if (!x || !y)
            continue;
        int64_t cnt = sqlite3_column_int64(st, 2), ts = YEAR_ONE_S;
        bool known = parse_time((const char *)sqlite3_column_text(st, 3), &ts);
        if (!known)
            ts = YEAR_ONE_S;
        bool fresh;
        struct edge *e = edge_for(g, x, y, &fresh);
        if (!e) {
            rc = SQLITE_NOMEM;
            break;
        }
        if (fresh) {
            e->first_s = e->last_s = ts;
            e->last_known = known;
        } else if (ts > e->last_s) {
            e->last_s = ts;
            e->last_known = known;
        }
        e->count += cnt;
        if (cnt > 0)
            e->positive += cnt;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* Names, roles and places of the other ends: the nodes (the last of a lowercased key), then
 * the observers not among them (the first), as CoreScope's node map. */
static int load_info(struct nb *g, struct mg_db *db, const char *pubkey, struct entry *self)
{
    static const char *const sql[2] = {
        "SELECT lower(public_key), name, role, lat, lon FROM nodes WHERE lower(public_key) IN",
        "SELECT lower(id), name, 'observer', NULL, NULL FROM observers WHERE lower(id) IN",
    };
    /* the keys as parameters: the node's and each other end's (a few dozen at most) */
    size_t n_keys = g->n_entries + 1;
    if (n_keys > 30000)
        return SQLITE_TOOBIG;
    int rc = SQLITE_OK;
    for (int pass = 0; pass < 2 && rc == SQLITE_OK; pass++) {
        struct mg_buf q;
        mg_buf_init(&q);
        mg_buf_puts(&q, sql[pass]);
        for (size_t i = 0; i < n_keys; i++)
            mg_buf_puts(&q, i ? ",?" : " (?");
        mg_buf_puts(&q, ") ORDER BY rowid");
        mg_buf_putc(&q, '\0');
        sqlite3_stmt *st = q.failed ? NULL : mg_db_prepare(db, q.data);
        mg_buf_free(&q);
        if (!st) {
            rc = sqlite3_errcode(db->conn);
            break;
        }
        for (size_t i = 0; i < n_keys; i++)
            sqlite3_bind_text(st, (int)i + 1, i ? g->entries[i - 1].other : pubkey, -1,
                              SQLITE_STATIC);
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            const char *k = (const char *)sqlite3_column_text(st, 0);
            for (size_t i = 0; k && i <= g->n_entries; i++) {
                struct entry *en = i < g->n_entries ? &g->entries[i] : self;
                if (strcmp(en->other, k) != 0 || (pass == 1 && en->known))
                    continue;
                free(en->name);
                free(en->role);
                en->known = true;
                en->name = dup_text(st, 1);
                en->role = dup_text(st, 2);
                bool has = sqlite3_column_type(st, 3) != SQLITE_NULL &&
                           sqlite3_column_type(st, 4) != SQLITE_NULL;
                en->lat = has ? sqlite3_column_double(st, 3) : 0;
                en->lon = has ? sqlite3_column_double(st, 4) : 0;
                en->located = has && !(en->lat == 0 && en->lon == 0);
            }
        }
        sqlite3_finalize(st);
        rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
    return rc;
}

static void write_body(struct mg_buf *body, const struct neighbors_args *a, const struct nb *g,
                       const struct entry *self)
{
    struct mg_json j;
    mg_json_init(&j, body);
    mg_json_object_begin(&j);
    mg_json_kv_string(&j, "node", a->pubkey);
    mg_json_key(&j, "neighbors");
    mg_json_array_begin(&j);
    int64_t total = 0;
    for (size_t i = 0; i < g->n_entries; i++) {
        const struct entry *en = &g->entries[i];
        const struct edge *e = en->e;
        total += e->count;
        mg_json_object_begin(&j);
        bool has_key = en->other[0] != '\0';
        mg_json_kv_string(&j, "pubkey", has_key ? en->other : NULL);
        mg_json_kv_string(&j, "prefix", "");
        bool info = has_key && en->known;
        mg_json_kv_string(&j, "name", info ? (en->name ? en->name : "") : NULL);
        mg_json_kv_string(&j, "role", info ? (en->role ? en->role : "") : NULL);
        mg_json_kv_int(&j, "count", e->count);
        if (e->positive > 0) {
            mg_json_key(&j, "counts_by_mode");
            mg_json_object_begin(&j);
            mg_json_kv_int(&j, "0", e->positive);
            mg_json_object_end(&j);
        }
        mg_json_kv_double(&j, "score", en->score);
        write_time(&j, "first_seen", e->first_s);
        write_time(&j, "last_seen", e->last_s);
        mg_json_kv_null(&j, "avg_snr");
        if (info && self->located && en->located)
            mg_json_kv_double(&j, "distance_km",
                              mg_haversine_km(self->lat, self->lon, en->lat, en->lon));
        mg_json_key(&j, "observers");
        mg_json_array_begin(&j);
        mg_json_array_end(&j);
        mg_json_kv_bool(&j, "ambiguous", false);
        mg_json_object_end(&j);
    }
    mg_json_array_end(&j);
    mg_json_kv_int(&j, "total_observations", total);
    mg_json_object_end(&j);
    mg_buf_append(body, "\n", 1);
}

static void build(struct mg_cold_build *b, struct mg_db *db)
{
    const struct neighbors_args *a = (const struct neighbors_args *)b->args;
    struct nb g;
    memset(&g, 0, sizeof g);
    struct entry self;
    memset(&self, 0, sizeof self);
    self.other = a->pubkey;
    int rc = load_edges(&g, db, a->pubkey);
    if (rc == SQLITE_OK && g.n_edges) {
        /* each edge once per side the key is on */
        g.entries = calloc(2 * g.n_edges, sizeof *g.entries);
        if (!g.entries)
            rc = SQLITE_NOMEM;
        double lambda = log(2.0) / HALF_LIFE_HOURS;
        for (size_t i = 0; rc == SQLITE_OK && i < g.n_edges; i++) {
            const struct edge *e = &g.edges[i];
            int sides = !strcmp(e->a, a->pubkey) + !strcmp(e->b, a->pubkey);
            double hours = e->last_known ? (double)(b->now_unix - e->last_s) / 3600.0 : 0;
            double score = 0;
            if (e->last_known) {
                double cf = fmin(1.0, (double)e->count / AFFINITY_SATURATION);
                score = cf * exp(-lambda * (hours < 0 ? 0 : hours));
            }
            if (e->count < a->min_count || score < a->min_score)
                continue;
            for (int s = 0; s < sides; s++) {
                struct entry *en = &g.entries[g.n_entries];
                en->e = e;
                en->other = !strcasecmp(e->a, a->pubkey) ? e->b : e->a;
                en->score = score;
                en->order = g.n_entries++;
            }
        }
    }
    if (rc == SQLITE_OK)
        rc = load_info(&g, db, a->pubkey, &self);
    if (rc == SQLITE_OK) {
        if (g.n_entries > 1) /* qsort must not be given NULL, even for no element */
            qsort(g.entries, g.n_entries, sizeof *g.entries, by_score);
        write_body(&b->body, a, &g, &self);
        b->result = MG_COLD_OK;
    } else {
        b->result = MG_COLD_ERROR;
        b->busy = (rc & 0xff) == SQLITE_BUSY;
        snprintf(b->err, sizeof b->err, "neighbor_edges: %s", sqlite3_errstr(rc));
    }
    nb_free(&g);
    free(self.name);
    free(self.role);
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
        if (!mg_parse_atoi(text, &v)) {
            if (res)
                mg_response_error(res, 400, "min_count: expected an integer");
            return false;
        }
        if (v > 0) /* CoreScope keeps 1 for anything below 1 */
            a->min_count = v;
    }
    text = mg_param_str(req, "min_score");
    if (text) {
        char *end;
        double v = strtod(text, &end);
        if (*end || end == text || isnan(v)) {
            if (res)
                mg_response_error(res, 400, "min_score: expected a number");
            return false;
        }
        a->min_score = v;
    }
    return true;
}

/* A key past MG_CACHE_KEY_MAX - 1 bytes (an odd min_score) is built without the cache. */
#define KEY_BYTES 160
static void neighbors_key(const struct neighbors_args *a, char key[KEY_BYTES])
{
    snprintf(key, KEY_BYTES, "nb|%s|%lld|%.17g", a->pubkey, (long long)a->min_count, a->min_score);
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
    if (!parse_args(req, res, &a))
        return;
    char key[KEY_BYTES];
    neighbors_key(&a, key);
    mg_cold_report_serve(env, req, res, &neighbors_report, key, &a, sizeof a);
}

/* SPDX-License-Identifier: ISC */
/* path_resolve: the display observation of every transmission, and hops resolved to relays
 * (path_resolve.h). */
#include "path_resolve.h"

#include "neighbor_graph.h"
#include "path_parse.h"
#include "region_codes.h"
#include "time_parse.h"

#include <ctype.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- an interning table of texts ---- */

static uint64_t hash_of(const char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 0x100000001b3ULL;
    return h;
}

static bool texts_grow(struct mg_texts *t)
{
    size_t slots = t->slots ? t->slots * 2 : 256;
    uint32_t *s = calloc(slots, sizeof *s);
    if (!s)
        return false;
    for (size_t i = 0; i < t->n; i++) {
        size_t h = hash_of(t->s[i], t->len[i]) & (slots - 1);
        while (s[h])
            h = (h + 1) & (slots - 1);
        s[h] = (uint32_t)(i + 1);
    }
    free(t->slot);
    t->slot = s, t->slots = slots;
    return true;
}

/* The id of the len bytes at p (added when add), -1 when absent or out of memory. */
long mg_texts_id(struct mg_texts *t, const char *p, size_t len, bool add)
{
    if (t->failed)
        return -1;
    if (t->slots) {
        size_t h = hash_of(p, len) & (t->slots - 1);
        while (t->slot[h]) {
            size_t i = t->slot[h] - 1;
            if (t->len[i] == len && memcmp(t->s[i], p, len) == 0)
                return (long)i;
            h = (h + 1) & (t->slots - 1);
        }
    }
    if (!add)
        return -1;
    if ((t->n + 1) * 2 > t->slots && !texts_grow(t)) {
        t->failed = true;
        return -1;
    }
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        char **s = realloc(t->s, cap * sizeof *s);
        if (s)
            t->s = s;
        size_t *l = s ? realloc(t->len, cap * sizeof *l) : NULL;
        if (!l) {
            t->failed = true;
            return -1;
        }
        t->len = l, t->cap = cap;
    }
    char *copy = malloc(len + 1);
    if (!copy) {
        t->failed = true;
        return -1;
    }
    memcpy(copy, p, len);
    copy[len] = '\0';
    size_t h = hash_of(p, len) & (t->slots - 1);
    while (t->slot[h])
        h = (h + 1) & (t->slots - 1);
    t->s[t->n] = copy;
    t->len[t->n] = len;
    t->slot[h] = (uint32_t)(t->n + 1);
    return (long)t->n++;
}

void mg_texts_free(struct mg_texts *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->s[i]);
    free(t->s);
    free(t->len);
    free(t->slot);
}

static size_t pair_hash(long a, long b)
{
    uint64_t h = (uint64_t)a * 0x9e3779b97f4a7c15ULL ^ ((uint64_t)b + 0x632be59bd9b4e019ULL);
    h ^= h >> 29;
    return (size_t)(h * 0xbf58476d1ce4e5b9ULL);
}

/* The index stored for (a, b), or the one given (stored) when new; SIZE_MAX out of memory. */
size_t mg_pairmap_get(struct mg_pairmap *m, long a, long b, size_t fresh, bool *made)
{
    *made = false;
    if ((m->n + 1) * 2 > m->slots) {
        size_t slots = m->slots ? m->slots * 2 : 1024;
        long(*k)[2] = malloc(slots * sizeof *k);
        size_t *v = malloc(slots * sizeof *v);
        if (!k || !v) {
            free(k), free(v);
            return SIZE_MAX;
        }
        for (size_t i = 0; i < slots; i++)
            v[i] = SIZE_MAX;
        for (size_t i = 0; i < m->slots; i++) {
            if (m->v[i] == SIZE_MAX)
                continue;
            size_t h = pair_hash(m->k[i][0], m->k[i][1]) & (slots - 1);
            while (v[h] != SIZE_MAX)
                h = (h + 1) & (slots - 1);
            k[h][0] = m->k[i][0], k[h][1] = m->k[i][1], v[h] = m->v[i];
        }
        free(m->k), free(m->v);
        m->k = k, m->v = v, m->slots = slots;
    }
    size_t h = pair_hash(a, b) & (m->slots - 1);
    while (m->v[h] != SIZE_MAX) {
        if (m->k[h][0] == a && m->k[h][1] == b)
            return m->v[h];
        h = (h + 1) & (m->slots - 1);
    }
    m->k[h][0] = a, m->k[h][1] = b, m->v[h] = fresh;
    m->n++;
    *made = true;
    return fresh;
}

void mg_pairmap_free(struct mg_pairmap *m)
{
    free(m->k);
    free(m->v);
}

/* ---- hop resolution, as CoreScope's resolveWithContext ---- */

static int by_lower(const void *a, const void *b, void *arg)
{
    const struct mg_hop_nodes *nodes = arg;
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    int c = strcmp(nodes->v[x].lower, nodes->v[y].lower);
    return c ? c : (x > y) - (x < y);
}

static int by_index(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x > y) - (x < y);
}

/* The candidates of hop (lowercased, len bytes) into out (table order); their number. */
size_t mg_resolver_candidates(const struct mg_resolver *r, const char *hop, size_t len, size_t *out)
{
    size_t n = r->nodes.len;
    if (len < 2 || !n)
        return 0;
    bool prefix = len <= MG_HOP_PREFIX_MAX;
    /* the first node whose lowercased key is not below hop (as a prefix: its first len) */
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const char *k = r->nodes.v[r->by_lower[mid]].lower;
        int c = prefix ? strncmp(k, hop, len) : strcmp(k, hop);
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t count = 0;
    for (size_t i = lo; i < n; i++) {
        const struct mg_hop_node *node = &r->nodes.v[r->by_lower[i]];
        if (!mg_hop_names(node, hop, len))
            break;
        out[count++] = r->by_lower[i];
    }
    if (count > 1)
        qsort(out, count, sizeof *out, by_index);
    return count;
}

/* The one node the lowercased key id names, or -1. */
static long unique_node(struct mg_resolver *r, long id, size_t *scratch)
{
    if ((size_t)id >= r->unique_cap) {
        size_t cap = r->unique_cap ? r->unique_cap : 256;
        while (cap <= (size_t)id)
            cap *= 2;
        long *more = realloc(r->unique_of, cap * sizeof *more);
        if (!more) {
            r->failed = true;
            return -1;
        }
        for (size_t i = r->unique_cap; i < cap; i++)
            more[i] = -2;
        r->unique_of = more, r->unique_cap = cap;
    }
    if (r->unique_of[id] == -2)
        r->unique_of[id] = mg_resolver_candidates(r, r->keys.s[id], r->keys.len[id], scratch) == 1
                               ? (long)scratch[0]
                               : -1;
    return r->unique_of[id];
}

static long node_of_lower(const struct mg_resolver *r, const char *lower)
{
    size_t lo = 0, hi = r->nodes.len;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(r->nodes.v[r->by_lower[mid]].lower, lower);
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < r->nodes.len && strcmp(r->nodes.v[r->by_lower[lo]].lower, lower) == 0
               ? (long)r->by_lower[lo]
               : -1;
}

static void add_adj(struct mg_resolver *r, long node, long other, double weighted, int64_t count)
{
    MG_GROW(r->adj[node], r->adj_n[node], r->adj_cap[node], r->failed);
    if (r->failed)
        return;
    r->adj[node][r->adj_n[node]++] = (struct mg_hop_adj){other, weighted, count};
}

/* Go's parseTimestamp of a persisted edge's last_seen: RFC 3339 or "2006-01-02 15:04:05" (UTC);
 * anything else is the zero time (an edge scoring 0). */
static int64_t edge_time_ms(const char *s)
{
    int64_t ms;
    size_t n = s ? strlen(s) : 0;
    struct mg_rfc3339_shape shape;
    if (n == 19 && s[10] == ' ') {
        char iso[24];
        snprintf(iso, sizeof iso, "%.10sT%.8sZ", s, s + 11);
        return mg_rfc3339_parse_ms(iso, strlen(iso), &ms) ? ms : INT64_MIN / 2;
    }
    if (n && mg_rfc3339_parse_shaped(s, n, &ms, &shape) && shape.separator == 'T' &&
        shape.zone != 'z')
        return ms;
    return INT64_MIN / 2;
}

struct stored_edge {
    long a, b; /* key ids, a's text <= b's */
    int64_t count, last_ms;
};

/* CoreScope's resolver reads the graph its server loads from neighbor_edges (and reloads every
 * minute): each row an edge (its two keys as stored, in text order; a pair stored both ways
 * sums its counts and keeps the later time), without observers. A relay whose lowercased key
 * is one end gets the edge, the other end as stored. */
static int load_edges(struct mg_resolver *r, struct mg_db *db)
{
    sqlite3_stmt *st =
        mg_db_prepare(db, "SELECT node_a, node_b, count, last_seen FROM neighbor_edges"
                          " WHERE node_a IS NOT NULL AND node_b IS NOT NULL AND count IS NOT NULL");
    if (!st)
        return sqlite3_errcode(db->conn) ? sqlite3_errcode(db->conn) : SQLITE_NOMEM;
    struct stored_edge *v = NULL;
    size_t n = 0, cap = 0;
    struct mg_pairmap seen = {0};
    bool made;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *a = (const char *)sqlite3_column_text(st, 0);
        const char *b = (const char *)sqlite3_column_text(st, 1);
        if (!a || !b)
            continue;
        if (strcmp(a, b) > 0) {
            const char *t = a;
            a = b, b = t;
        }
        long ia = mg_texts_id(&r->keys, a, strlen(a), true),
             ib = mg_texts_id(&r->keys, b, strlen(b), true);
        int64_t count = sqlite3_column_int64(st, 2);
        int64_t last = edge_time_ms((const char *)sqlite3_column_text(st, 3));
        size_t at = ia < 0 || ib < 0 ? SIZE_MAX : mg_pairmap_get(&seen, ia, ib, n, &made);
        if (at == SIZE_MAX) {
            r->failed = true;
            break;
        }
        if (made) {
            MG_GROW(v, n, cap, r->failed);
            if (r->failed)
                break;
            v[n++] = (struct stored_edge){ia, ib, count, last};
        } else {
            v[at].count += count;
            v[at].last_ms = last > v[at].last_ms ? last : v[at].last_ms;
        }
    }
    sqlite3_finalize(st);
    mg_pairmap_free(&seen);
    for (size_t i = 0; !r->failed && i < n; i++) {
        double w = mg_neighbor_graph_weight(v[i].count, v[i].last_ms, 0, r->now_ms);
        long na = node_of_lower(r, r->keys.s[v[i].a]), nb = node_of_lower(r, r->keys.s[v[i].b]);
        if (na >= 0)
            add_adj(r, na, v[i].b, w, v[i].count);
        if (nb >= 0)
            add_adj(r, nb, v[i].a, w, v[i].count);
    }
    free(v);
    if (r->failed)
        return SQLITE_NOMEM;
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

void mg_resolver_free(struct mg_resolver *r)
{
    for (size_t i = 0; r->adj && i < r->nodes.len; i++)
        free(r->adj[i]);
    free(r->adj);
    free(r->adj_n);
    free(r->adj_cap);
    free(r->by_lower);
    free(r->key_id);
    free(r->unique_of);
    mg_texts_free(&r->keys);
    mg_hop_nodes_free(&r->nodes);
}

/* The relays (hop_nodes.h) and, from the neighbour graph, each one's resolved edges. */
int mg_resolver_load(struct mg_resolver *r, struct mg_db *db, int64_t now_ms)
{
    memset(r, 0, sizeof *r);
    r->now_ms = now_ms;
    int rc = mg_hop_nodes_load(db, &r->nodes);
    if (rc != SQLITE_OK)
        return rc;
    size_t n = r->nodes.len;
    r->by_lower = malloc((n ? n : 1) * sizeof *r->by_lower);
    r->key_id = malloc((n ? n : 1) * sizeof *r->key_id);
    r->adj = calloc(n ? n : 1, sizeof *r->adj);
    r->adj_n = calloc(n ? n : 1, sizeof *r->adj_n);
    r->adj_cap = calloc(n ? n : 1, sizeof *r->adj_cap);
    if (!r->by_lower || !r->key_id || !r->adj || !r->adj_n || !r->adj_cap)
        return SQLITE_NOMEM;
    for (size_t i = 0; i < n; i++) {
        r->by_lower[i] = i;
        r->key_id[i] =
            mg_texts_id(&r->keys, r->nodes.v[i].lower, strlen(r->nodes.v[i].lower), true);
    }
    qsort_r(r->by_lower, n, sizeof *r->by_lower, by_lower, &r->nodes);
    if (!n)
        return SQLITE_OK;
    rc = load_edges(r, db);
    return rc == SQLITE_OK && r->keys.failed ? SQLITE_NOMEM : rc;
}

void mg_hop_context_reset(struct mg_hop_context *c)
{
    for (size_t i = 0; c->in_set && i < c->n; i++)
        c->in_set[c->id[i]] = false;
    c->n = 0;
    c->lat = c->lon = 0;
    c->located = 0;
}

void mg_hop_context_free(struct mg_hop_context *c)
{
    free(c->id);
    free(c->in_set);
}

/* Adds a key (any case; len bytes) to the context. */
void mg_hop_context_add(struct mg_resolver *r, struct mg_hop_context *c, const char *key,
                        size_t len)
{
    if (!len)
        return;
    char low[MG_HOP_TEXT_MAX];
    if (len >= sizeof low)
        return;
    for (size_t i = 0; i < len; i++)
        low[i] = (char)tolower((unsigned char)key[i]);
    low[len] = '\0';
    long id = mg_texts_id(&r->keys, low, len, true);
    if (id < 0) {
        c->failed = true;
        return;
    }
    if ((size_t)id >= c->set_cap) {
        size_t cap = c->set_cap ? c->set_cap : 256;
        while (cap <= (size_t)id)
            cap *= 2;
        bool *more = realloc(c->in_set, cap * sizeof *more);
        if (!more) {
            c->failed = true;
            return;
        }
        memset(more + c->set_cap, 0, (cap - c->set_cap) * sizeof *more);
        c->in_set = more, c->set_cap = cap;
    }
    if (c->in_set[id])
        return;
    MG_GROW(c->id, c->n, c->cap, c->failed);
    if (c->failed)
        return;
    c->in_set[id] = true;
    c->id[c->n++] = id;
}

/* An observer id is context when it looks like a key: 4 or more hex digits. */
void mg_hop_context_add_observer(struct mg_resolver *r, struct mg_hop_context *c, const char *id)
{
    size_t len = id ? strlen(id) : 0;
    if (len < 4)
        return;
    for (size_t i = 0; i < len; i++)
        if (!isxdigit((unsigned char)id[i]))
            return;
    mg_hop_context_add(r, c, id, len);
}

void mg_hop_context_add_anchors(struct mg_resolver *r, struct mg_hop_context *c, char *const *hops,
                                int n, size_t *scratch)
{
    for (int i = 0; i < n; i++) {
        char low[MG_HOP_PREFIX_MAX * 16];
        size_t len = strlen(hops[i]);
        if (len >= sizeof low)
            continue;
        for (size_t k = 0; k <= len; k++)
            low[k] = (char)tolower((unsigned char)hops[i][k]);
        if (mg_resolver_candidates(r, low, len, scratch) == 1)
            mg_hop_context_add(r, c, r->nodes.v[scratch[0]].lower,
                               strlen(r->nodes.v[scratch[0]].lower));
    }
}

/* The context's centroid (CoreScope's geo tier): its keys naming one relay with a position. */
void mg_hop_context_centroid(struct mg_resolver *r, struct mg_hop_context *c, size_t *scratch)
{
    c->lat = c->lon = 0;
    c->located = 0;
    for (size_t i = 0; i < c->n; i++) {
        long node = unique_node(r, c->id[i], scratch);
        if (node >= 0 && r->nodes.v[node].has_gps) {
            c->lat += r->nodes.v[node].lat;
            c->lon += r->nodes.v[node].lon;
            c->located++;
        }
    }
    if (c->located) {
        c->lat /= c->located;
        c->lon /= c->located;
    }
}

static bool in_context(const struct mg_hop_context *c, long id)
{
    if (c->in_set)
        return id >= 0 && (size_t)id < c->set_cap && c->in_set[id];
    for (size_t i = 0; i < c->n; i++)
        if (c->id[i] == id)
            return true;
    return false;
}

/* The node hop (as stored, len bytes) resolves to in context c, or -1. */
long mg_resolve_hop(struct mg_resolver *r, const struct mg_hop_context *c, const char *hop,
                    size_t len, size_t *match)
{
    char low[MG_HOP_PREFIX_MAX * 16];
    if (len >= sizeof low)
        return -1;
    for (size_t i = 0; i < len; i++)
        low[i] = (char)tolower((unsigned char)hop[i]);
    low[len] = '\0';
    size_t count = mg_resolver_candidates(r, low, len, match);
    if (count == 0)
        return -1;
    if (count == 1)
        return (long)match[0];
    if (c->n) { /* affinity: the best edge (score x confidence) to a context key */
        long first = -1;
        double first_s = 0, second_s = 0;
        int64_t first_count = 0;
        size_t scored = 0;
        for (size_t i = 0; i < count; i++) {
            double best = 0;
            int64_t best_count = 0;
            for (size_t k = 0; k < r->adj_n[match[i]]; k++) {
                const struct mg_hop_adj *e = &r->adj[match[i]][k];
                if (e->weighted > best && in_context(c, e->other))
                    best = e->weighted, best_count = e->count;
            }
            if (best <= 0)
                continue;
            scored++;
            if (first < 0 || best > first_s) {
                second_s = first_s;
                first = (long)match[i], first_s = best, first_count = best_count;
            } else if (best > second_s) {
                second_s = best;
            }
        }
        if (first >= 0 && first_count >= 3 && (scored == 1 || first_s >= 3.0 * second_s))
            return first;
    }
    if (c->located) { /* nearest to the context's centroid */
        long near = -1;
        double near_d = DBL_MAX;
        for (size_t i = 0; i < count; i++) {
            const struct mg_hop_node *n = &r->nodes.v[match[i]];
            if (!n->has_gps)
                continue;
            double dlat = (n->lat - c->lat) * M_PI / 180;
            double dlon = (n->lon - c->lon) * M_PI / 180 * cos((c->lat + n->lat) / 2 * M_PI / 180);
            double d = sqrt(dlat * dlat + dlon * dlon);
            if (d < near_d)
                near = (long)match[i], near_d = d;
        }
        if (near >= 0)
            return near;
    }
    long pick = -1;
    for (size_t i = 0; i < count; i++) /* with a position, then any: most adverts */
        if (r->nodes.v[match[i]].has_gps &&
            (pick < 0 || mg_hop_better(&r->nodes.v[match[i]], &r->nodes.v[pick])))
            pick = (long)match[i];
    if (pick >= 0)
        return pick;
    pick = (long)match[0];
    for (size_t i = 1; i < count; i++)
        if (mg_hop_better(&r->nodes.v[match[i]], &r->nodes.v[pick]))
            pick = (long)match[i];
    return pick;
}

/* ---- the scan: every transmission with its display observation ---- */

enum scan_col {
    SC_TX,
    SC_FIRST_SEEN,
    SC_HASH,
    SC_PUBKEY,
    SC_NODE,
    SC_OBS,
    SC_OBSERVER,
    SC_OBSERVER_NAME,
    SC_PATH,
    SC_SNR,
    SC_PATH_LEN,
    SC_IN_REGION,
    SC_RSSI,
};

static const char scan_sql[] =
    "SELECT t.id, t.first_seen, coalesce(t.hash, ''),"
    " CASE WHEN instr(t.decoded_json, 'pubKey') > 0 AND json_valid(t.decoded_json)"
    " AND json_type(t.decoded_json, '$.pubKey') = 'text'"
    " THEN json_extract(t.decoded_json, '$.pubKey') END,"
    " %s, o.id, ob.id, ob.name, o.path_json, o.snr,"
    " CASE WHEN json_valid(o.path_json) AND json_type(o.path_json) = 'array'"
    " THEN json_array_length(o.path_json) ELSE 0 END, %s, o.rssi"
    " FROM transmissions t LEFT JOIN observations o ON o.transmission_id = t.id"
    " LEFT JOIN observers ob ON ob.rowid = o.observer_idx WHERE 1";

static char *dup_col(sqlite3_stmt *st, int col)
{
    const char *s = (const char *)sqlite3_column_text(st, col);
    return strdup(s ? s : "");
}

/*
 * Hands every transmission (first_seen inside w when given, as text a day wider first), in
 * CoreScope's store's order, with its display observation, to fn.
 */
int mg_path_scan(struct mg_db *db, const struct mg_cs_window *w, const char *codes, bool with_area,
                 mg_scan_fn *fn, void *arg)
{
    struct mg_buf sql;
    mg_buf_init(&sql);
    struct mg_buf region;
    mg_buf_init(&region);
    if (codes[0]) {
        mg_buf_puts(&region, "o.observer_idx IN (SELECT rowid FROM observers WHERE"
                             " upper(trim(iata)) IN ");
        mg_region_codes_sql(&region, codes);
        mg_buf_puts(&region, ")");
    } else {
        mg_buf_puts(&region, "0");
    }
    mg_buf_printf(&sql, scan_sql, with_area ? MG_ADVERT_NODE_SQL : "NULL", mg_buf_cstr(&region));
    mg_buf_free(&region);
    if (w && w->has_since)
        mg_buf_puts(&sql, " AND t.first_seen >= strftime('%Y-%m-%dT%H:%M:%S', :since - 86400,"
                          " 'unixepoch')");
    if (w && w->has_until)
        mg_buf_puts(&sql, " AND t.first_seen <= strftime('%Y-%m-%dT%H:%M:%S', :until + 86400,"
                          " 'unixepoch')");
    mg_buf_puts(&sql, " ORDER BY t.first_seen, t.id, o.timestamp DESC, o.id");
    sqlite3_stmt *st = sql.failed ? NULL : mg_db_prepare(db, mg_buf_cstr(&sql));
    mg_buf_free(&sql);
    if (!st)
        return sqlite3_errcode(db->conn) ? sqlite3_errcode(db->conn) : SQLITE_NOMEM;
    if (codes[0])
        mg_region_codes_bind(st, 1, codes);
    int i_since = sqlite3_bind_parameter_index(st, ":since");
    int i_until = sqlite3_bind_parameter_index(st, ":until");
    if (i_since)
        sqlite3_bind_int64(st, i_since, w->since_s);
    if (i_until)
        sqlite3_bind_int64(st, i_until, w->until_s);

    struct mg_scan_tx tx;
    memset(&tx, 0, sizeof tx);
    char *first_seen = NULL, *hash = NULL, *pubkey = NULL, *node = NULL;
    char *observer = NULL, *observer_name = NULL, *path = NULL;
    int64_t best_len = 0;
    bool open = false;
    int rc, out = SQLITE_OK;
    for (;;) {
        rc = sqlite3_step(st);
        bool next = rc != SQLITE_ROW || !open || sqlite3_column_int64(st, SC_TX) != tx.id;
        if (open && next) {
            tx.first_seen = first_seen, tx.hash = hash, tx.pubkey = pubkey, tx.node = node;
            tx.observer = observer ? observer : "";
            tx.observer_name = observer_name ? observer_name : "";
            tx.path = path ? path : "";
            if ((!w || mg_cs_window_holds_text(w, first_seen)) && (out = fn(arg, &tx)) != 0)
                break;
            open = false;
        }
        if (rc != SQLITE_ROW)
            break;
        if (next) {
            free(first_seen), free(hash), free(pubkey), free(node);
            free(observer), free(observer_name), free(path);
            observer = observer_name = path = NULL;
            memset(&tx, 0, sizeof tx);
            tx.id = sqlite3_column_int64(st, SC_TX);
            first_seen = dup_col(st, SC_FIRST_SEEN);
            hash = dup_col(st, SC_HASH);
            pubkey = dup_col(st, SC_PUBKEY);
            node = dup_col(st, SC_NODE);
            open = true;
            best_len = 0;
            if (!first_seen || !hash || !pubkey || !node) {
                out = SQLITE_NOMEM;
                break;
            }
        }
        if (sqlite3_column_type(st, SC_OBS) == SQLITE_NULL)
            continue;
        if (sqlite3_column_int(st, SC_IN_REGION))
            tx.in_region = true;
        int64_t len = sqlite3_column_int64(st, SC_PATH_LEN);
        if (tx.has_obs && len <= best_len)
            continue;
        tx.has_obs = true;
        best_len = len;
        free(observer), free(observer_name), free(path);
        observer = dup_col(st, SC_OBSERVER);
        observer_name = dup_col(st, SC_OBSERVER_NAME);
        path = dup_col(st, SC_PATH);
        tx.has_snr = sqlite3_column_type(st, SC_SNR) != SQLITE_NULL;
        tx.snr = sqlite3_column_double(st, SC_SNR);
        tx.has_rssi = sqlite3_column_type(st, SC_RSSI) != SQLITE_NULL;
        tx.rssi = sqlite3_column_double(st, SC_RSSI);
        if (!observer || !observer_name || !path) {
            out = SQLITE_NOMEM;
            break;
        }
    }
    free(first_seen), free(hash), free(pubkey), free(node);
    free(observer), free(observer_name), free(path);
    sqlite3_finalize(st);
    if (out != SQLITE_OK)
        return out;
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

/* A path's hops (CoreScope's: a JSON array of strings; anything else is none). */
int mg_split_hops(const char *path, char *buf, size_t cap, char **hops)
{
    if (!path[0] || strcmp(path, "[]") == 0)
        return 0;
    int n = mg_path_split(path, buf, cap, hops, MG_PATH_MAX_HOPS);
    if (n < 0 || n > MG_PATH_MAX_HOPS)
        return 0;
    for (int i = 0; i < n; i++)
        if (!hops[i])
            hops[i] = ""; /* null into a Go string leaves it empty */
    return n;
}

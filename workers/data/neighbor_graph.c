/* SPDX-License-Identifier: ISC */
#include "neighbor_graph.h"

#include "clock.h"
#include "group_table.h"
#include "hop_nodes.h"
#include "json.h"
#include "log.h"
#include "node_visibility.h"
#include "path_parse.h"
#include "process_table.h"
#include "reach.h"
#include "result_cache.h"
#include "table_stats.h"

#include <ctype.h>
#include <stddef.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define SATURATION 100.0
#define HALF_LIFE_HOURS 168.0
#define MIN_OBSERVATIONS 3
#define CONFIDENCE_RATIO 3.0
#define OBSERVER_SATURATION 3.0
#define MAX_EDGE_KM 500.0 /* CoreScope's DefaultMaxEdgeKm */
#define PATH_HOPS_MAX 64
#define YEAR_ONE_MS (-62135596800000LL)

/* ---- an interning table: text -> id ---------------------------------------------------- */

struct strings {
    char **text; /* by id */
    size_t n, cap;
    size_t *slots; /* id + 1; 0 empty */
    size_t n_slots;
};

static uint64_t hash_text(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

static void strings_free(struct strings *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->text[i]);
    free(t->text);
    free(t->slots);
}

static bool strings_grow(struct strings *t)
{
    size_t n = t->n_slots ? t->n_slots * 2 : 1024;
    size_t *slots = calloc(n, sizeof *slots);
    if (!slots)
        return false;
    for (size_t i = 0; i < t->n; i++) {
        size_t at = hash_text(t->text[i]) & (n - 1);
        while (slots[at])
            at = (at + 1) & (n - 1);
        slots[at] = i + 1;
    }
    free(t->slots);
    t->slots = slots;
    t->n_slots = n;
    return true;
}

/* The id of s; -1 when absent (add false) or out of memory. */
static long strings_id(struct strings *t, const char *s, bool add)
{
    if (!t->n_slots && !add)
        return -1;
    if (add && (t->n + 1) * 2 > t->n_slots && !strings_grow(t))
        return -1; /* a lookup never changes the table: readers share it */
    size_t at = hash_text(s) & (t->n_slots - 1);
    for (; t->slots[at]; at = (at + 1) & (t->n_slots - 1))
        if (!strcmp(t->text[t->slots[at] - 1], s))
            return (long)(t->slots[at] - 1);
    if (!add)
        return -1;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        char **more = realloc(t->text, cap * sizeof *more);
        if (!more)
            return -1;
        t->text = more;
        t->cap = cap;
    }
    if (!(t->text[t->n] = strdup(s)))
        return -1;
    t->slots[at] = ++t->n;
    return (long)(t->n - 1);
}

/* ---- small integer lists ----------------------------------------------------------------- */

struct ints {
    long *v;
    size_t n, cap;
};

static bool ints_push(struct ints *l, long x)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        long *more = realloc(l->v, cap * sizeof *more);
        if (!more)
            return false;
        l->v = more;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return true;
}

static bool ints_has(const struct ints *l, long x)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i] == x)
            return true;
    return false;
}

static bool ints_add(struct ints *l, long x)
{
    return ints_has(l, x) || ints_push(l, x);
}

/* ---- the graph --------------------------------------------------------------------------- */

struct node {
    long key; /* lowercased key's id */
    char *key_as_stored, *name, *role;
    double lat, lon;
    bool gps;
};

/* Where an observation stands in CoreScope's walk: its transmission's first_seen, then id,
 * then its place among the transmission's observations. */
struct order {
    const char *first_seen;
    int64_t tx;
    size_t row;
};

struct edge {
    long a, b;             /* ids, a's text <= b's; b = -1 for an ambiguous edge of a */
    char *made_first_seen; /* the order of the observation that made it (its prefix's) */
    int64_t made_tx;
    size_t made_row;
    long pseudo;  /* an ambiguous edge: the id of "prefix:" + its prefix; else -1 */
    char *prefix; /* the hop that made it */
    int64_t count, by_mode[4];
    int64_t first_ms, last_ms;
    double snr_sum;
    int64_t snr_count;
    struct ints observers;  /* ids */
    struct ints candidates; /* ids, lowercased keys */
    bool ambiguous, alive;
};

struct graph {
    struct strings ids;       /* every key, lowercased, and "prefix:" pseudo keys */
    struct strings edge_keys; /* "a b" -> edge index */
    struct edge *edges;
    size_t n_edges, cap_edges;
    struct node *nodes;
    size_t n_nodes;
    long *node_of; /* id -> last node with that lowercased key, -1 */
    size_t node_of_cap;
    struct strings prefixes; /* prefix -> list index */
    struct ints *candidates; /* by prefix index: node indexes that can relay */
    struct ints listeners;   /* ids of observers that do not relay */
    struct order order;      /* of the observation being filed */
    int64_t rejected_far;    /* upserts dropped as too far apart (CoreScope's count) */
    bool oom;
};

static const char *text_of(const struct graph *g, long id)
{
    return id >= 0 ? g->ids.text[id] : "";
}

static long node_index(const struct graph *g, long id)
{
    return id >= 0 && (size_t)id < g->node_of_cap ? g->node_of[id] : -1;
}

static void graph_free(struct graph *g)
{
    for (size_t i = 0; i < g->n_edges; i++) {
        free(g->edges[i].prefix);
        free(g->edges[i].made_first_seen);
        free(g->edges[i].observers.v);
        free(g->edges[i].candidates.v);
    }
    free(g->edges);
    for (size_t i = 0; i < g->n_nodes; i++) {
        free(g->nodes[i].key_as_stored);
        free(g->nodes[i].name);
        free(g->nodes[i].role);
    }
    free(g->nodes);
    free(g->node_of);
    for (size_t i = 0; i < g->prefixes.n; i++)
        free(g->candidates[i].v);
    free(g->candidates);
    free(g->listeners.v);
    strings_free(&g->ids);
    strings_free(&g->edge_keys);
    strings_free(&g->prefixes);
}

static long lower_id(struct graph *g, const char *s)
{
    char buf[256];
    size_t n = 0;
    for (; s && s[n] && n + 1 < sizeof buf; n++)
        buf[n] = (char)tolower((unsigned char)s[n]);
    buf[n] = '\0';
    long id = strings_id(&g->ids, buf, true);
    if (id < 0)
        g->oom = true;
    return id;
}

static char *dup_column(sqlite3_stmt *st, int col)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    return strdup(t ? (const char *)t : "");
}

static bool can_relay(const char *role)
{
    char r[64];
    size_t n = 0;
    for (; role && role[n] && n + 1 < sizeof r; n++)
        r[n] = (char)tolower((unsigned char)role[n]);
    r[n] = '\0';
    return strstr(r, "repeater") || strstr(r, "room_server") || !strcmp(r, "room");
}

static int load_nodes(struct graph *g, struct mg_db *db)
{
    sqlite3_stmt *st = mg_db_prepare(db, "SELECT public_key, name, role, lat, lon FROM nodes");
    if (!st)
        return sqlite3_errcode(db->conn);
    int rc;
    size_t cap = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW && !g->oom) {
        if (g->n_nodes == cap) {
            cap = cap ? cap * 2 : 256;
            struct node *more = realloc(g->nodes, cap * sizeof *more);
            if (!more) {
                g->oom = true;
                break;
            }
            g->nodes = more;
        }
        struct node *n = &g->nodes[g->n_nodes++];
        n->key_as_stored = dup_column(st, 0);
        n->name = dup_column(st, 1);
        n->role = dup_column(st, 2);
        n->lat = sqlite3_column_double(st, 3);
        n->lon = sqlite3_column_double(st, 4);
        n->gps = !(n->lat == 0 && n->lon == 0);
        n->key = lower_id(g, n->key_as_stored);
        if (!n->key_as_stored || !n->name || !n->role)
            g->oom = true;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW)
        return rc;
    /* the prefix map: every relay under its 2- to 8-character prefixes and its whole key */
    for (size_t i = 0; i < g->n_nodes && !g->oom; i++) {
        if (!can_relay(g->nodes[i].role))
            continue;
        const char *k = text_of(g, g->nodes[i].key);
        size_t len = strlen(k);
        for (size_t l = 2; l <= len && !g->oom; l++) {
            if (l > MG_HOP_PREFIX_MAX && l != len)
                continue;
            char p[256];
            snprintf(p, sizeof p, "%.*s", (int)l, k);
            size_t before = g->prefixes.n;
            long pid = strings_id(&g->prefixes, p, true);
            if (pid < 0) {
                g->oom = true;
                break;
            }
            if (g->prefixes.n != before) {
                struct ints *more = realloc(g->candidates, g->prefixes.n * sizeof *more);
                if (!more) {
                    g->oom = true;
                    break;
                }
                g->candidates = more;
                memset(&g->candidates[pid], 0, sizeof *more);
            }
            if (!ints_push(&g->candidates[pid], (long)i))
                g->oom = true;
        }
    }
    return g->oom ? SQLITE_NOMEM : SQLITE_OK;
}

static bool index_nodes(struct graph *g)
{
    free(g->node_of);
    g->node_of_cap = g->ids.n;
    g->node_of = malloc((g->node_of_cap ? g->node_of_cap : 1) * sizeof *g->node_of);
    if (!g->node_of)
        return false;
    for (size_t i = 0; i < g->node_of_cap; i++)
        g->node_of[i] = -1;
    for (size_t i = 0; i < g->n_nodes; i++)
        g->node_of[g->nodes[i].key] = (long)i; /* the last row of a key, as a Go map */
    return true;
}

/* Observers whose key no node has, as nodes of role "observer" (CoreScope's node map). */
static int load_observer_names(struct graph *g, struct mg_db *db)
{
    if (!index_nodes(g))
        return SQLITE_NOMEM;
    sqlite3_stmt *st = mg_db_prepare(
        db, "SELECT id, name FROM observers WHERE id IS NOT NULL AND name IS NOT NULL");
    if (!st)
        return sqlite3_errcode(db->conn);
    int rc;
    size_t cap = g->n_nodes;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW && !g->oom) {
        long id = lower_id(g, (const char *)sqlite3_column_text(st, 0));
        if (id < 0 || node_index(g, id) >= 0)
            continue; /* a node's key, or an observer met before (the first one counts) */
        if ((size_t)id >= g->node_of_cap) {
            size_t cap_ids = g->ids.n + 64;
            long *more = realloc(g->node_of, cap_ids * sizeof *more);
            if (!more) {
                g->oom = true;
                break;
            }
            for (size_t i = g->node_of_cap; i < cap_ids; i++)
                more[i] = -1;
            g->node_of = more;
            g->node_of_cap = cap_ids;
        }
        if (g->n_nodes == cap) {
            cap = cap ? cap * 2 : 64;
            struct node *more = realloc(g->nodes, cap * sizeof *more);
            if (!more) {
                g->oom = true;
                break;
            }
            g->nodes = more;
        }
        struct node *n = &g->nodes[g->n_nodes];
        memset(n, 0, sizeof *n);
        n->key = id;
        n->key_as_stored = dup_column(st, 0);
        n->name = dup_column(st, 1);
        n->role = strdup("observer");
        if (!n->key_as_stored || !n->name || !n->role)
            g->oom = true;
        g->node_of[id] = (long)g->n_nodes++;
    }
    sqlite3_finalize(st);
    if (g->oom)
        return SQLITE_NOMEM;
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

static int load_listeners(struct graph *g, struct mg_db *db)
{
    if (!db->schema.observers_can_relay)
        return SQLITE_OK;
    sqlite3_stmt *st =
        mg_db_prepare(db, db->schema.observers_inactive
                              ? "SELECT id FROM observers WHERE coalesce(can_relay, 1) = 0 AND"
                                " (inactive IS NULL OR inactive = 0)"
                              : "SELECT id FROM observers WHERE coalesce(can_relay, 1) = 0");
    if (!st)
        return sqlite3_errcode(db->conn);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        if (!ints_add(&g->listeners, lower_id(g, (const char *)sqlite3_column_text(st, 0))))
            g->oom = true;
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? (g->oom ? SQLITE_NOMEM : SQLITE_OK) : rc;
}

/* The edge of two ends (ids), or NULL; create: add it (fresh says so). */
static struct edge *edge_of(struct graph *g, long x, long y, bool create, bool *fresh)
{
    if (fresh)
        *fresh = false;
    if (strcmp(text_of(g, x), text_of(g, y)) > 0) {
        long t = x;
        x = y;
        y = t;
    }
    char key[64];
    snprintf(key, sizeof key, "%ld %ld", x, y);
    long at = strings_id(&g->edge_keys, key, false);
    if (at >= 0 && (size_t)at < g->n_edges)
        return &g->edges[at];
    if (!create)
        return NULL;
    if (g->n_edges == g->cap_edges) {
        size_t cap = g->cap_edges ? g->cap_edges * 2 : 256;
        struct edge *more = realloc(g->edges, cap * sizeof *more);
        if (!more) {
            g->oom = true;
            return NULL;
        }
        g->edges = more;
        g->cap_edges = cap;
    }
    /* ids of edge keys follow edge indexes: an edge key is added only here */
    at = strings_id(&g->edge_keys, key, true);
    if (at < 0 || (size_t)at != g->n_edges) {
        g->oom = true;
        return NULL;
    }
    struct edge *e = &g->edges[g->n_edges++];
    memset(e, 0, sizeof *e);
    e->a = x;
    e->b = y;
    e->pseudo = -1;
    e->alive = true;
    if (fresh)
        *fresh = true;
    return e;
}

/* The prefix of an edge is that of the observation that made it in CoreScope's walk. */
static void made_by(struct graph *g, struct edge *e, const char *prefix, bool fresh)
{
    const struct order *o = &g->order;
    if (!fresh) {
        int c = strcmp(o->first_seen, e->made_first_seen);
        if (c > 0 ||
            (c == 0 && (o->tx > e->made_tx || (o->tx == e->made_tx && o->row >= e->made_row))))
            return;
    }
    char *p = strdup(prefix), *fs = strdup(o->first_seen);
    if (!p || !fs) {
        free(p);
        free(fs);
        g->oom = true;
        return;
    }
    free(e->prefix);
    free(e->made_first_seen);
    e->prefix = p;
    e->made_first_seen = fs;
    e->made_tx = o->tx;
    e->made_row = o->row;
}

static void count_into(struct edge *e, const char *prefix, const double *snr, int64_t ts_ms,
                       bool fresh)
{
    if (fresh) {
        e->first_ms = e->last_ms = ts_ms;
    }
    e->count++;
    size_t bytes = strlen(prefix) / 2;
    e->by_mode[bytes >= 1 && bytes <= 3 ? bytes : 0]++;
    if (ts_ms > e->last_ms)
        e->last_ms = ts_ms;
    if (ts_ms < e->first_ms)
        e->first_ms = ts_ms;
    if (snr) {
        e->snr_sum += *snr;
        e->snr_count++;
    }
}

static void note_observer(struct graph *g, struct edge *e, long observer)
{
    if (observer >= 0 && text_of(g, observer)[0] && !ints_add(&e->observers, observer))
        g->oom = true;
}

static bool too_far(struct graph *g, long a, long b)
{
    long x = node_index(g, a), y = node_index(g, b);
    if (x < 0 || y < 0 || !g->nodes[x].gps || !g->nodes[y].gps)
        return false;
    return mg_haversine_km(g->nodes[x].lat, g->nodes[x].lon, g->nodes[y].lat, g->nodes[y].lon) >
           MAX_EDGE_KM;
}

static void upsert(struct graph *g, long a, long b, const char *prefix, long observer,
                   const double *snr, int64_t ts_ms)
{
    if (too_far(g, a, b)) {
        g->rejected_far++;
        return;
    }
    bool fresh;
    struct edge *e = edge_of(g, a, b, true, &fresh);
    if (!e)
        return;
    made_by(g, e, prefix, fresh);
    count_into(e, prefix, snr, ts_ms, fresh);
    note_observer(g, e, observer);
}

/* known - hop: resolved among the relays whose key starts with hop. */
static void upsert_hop(struct graph *g, long known, const char *hop, long observer,
                       const double *snr, int64_t ts_ms)
{
    long pid = strings_id(&g->prefixes, hop, false);
    const struct ints *c = pid >= 0 ? &g->candidates[pid] : NULL;
    size_t n = c ? c->n : 0;
    if (n == 1) {
        long only = g->nodes[c->v[0]].key;
        if (only != known)
            upsert(g, known, only, hop, observer, snr, ts_ms);
        return;
    }
    struct ints others = {0};
    for (size_t i = 0; i < n; i++)
        if (g->nodes[c->v[i]].key != known && !ints_push(&others, g->nodes[c->v[i]].key))
            g->oom = true;
    if (others.n == 1) {
        upsert(g, known, others.v[0], hop, observer, snr, ts_ms);
        free(others.v);
        return;
    }
    char pseudo_text[300];
    snprintf(pseudo_text, sizeof pseudo_text, "prefix:%s", hop);
    long pseudo = strings_id(&g->ids, pseudo_text, true);
    if (pseudo < 0) {
        g->oom = true;
        free(others.v);
        return;
    }
    bool fresh;
    struct edge *e = edge_of(g, known, pseudo, true, &fresh);
    if (!e) {
        free(others.v);
        return;
    }
    if (fresh) {
        e->a = known;
        e->b = -1;
        e->pseudo = pseudo;
        e->ambiguous = true;
        e->candidates = others;
        others = (struct ints){0};
    }
    made_by(g, e, hop, fresh);
    free(others.v);
    count_into(e, hop, snr, ts_ms, fresh);
    note_observer(g, e, observer);
}

/* The originator CoreScope reads from a transmission's decoded JSON. */
static const char originator_sql[] =
    "CASE WHEN json_valid(t.decoded_json) THEN coalesce("
    "CASE WHEN json_type(t.decoded_json, '$.pubKey') = 'text' THEN nullif(t.decoded_json ->> "
    "'$.pubKey', '') END,"
    "CASE WHEN json_type(t.decoded_json, '$.from_node') = 'text' THEN nullif(t.decoded_json ->> "
    "'$.from_node', '') END,"
    "CASE WHEN json_type(t.decoded_json, '$.from') = 'text' THEN nullif(t.decoded_json ->> "
    "'$.from', '') END) END";

/* One observation of the transmission being read. */
struct sighting {
    char *observer, *path;
    double snr;
    bool has_snr;
    int64_t ts_ms, id;
};

/* Newest first, as CoreScope loads them (equal times by id). */
static int by_time_desc(const void *x, const void *y)
{
    const struct sighting *a = x, *b = y;
    if (a->ts_ms != b->ts_ms)
        return a->ts_ms > b->ts_ms ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

struct transmission {
    int64_t id;
    char *first_seen;
    long from; /* an ADVERT's originator (lowercased id), -1 */
    struct sighting *seen;
    size_t n, cap;
};

static void transmission_clear(struct transmission *t)
{
    for (size_t i = 0; i < t->n; i++) {
        free(t->seen[i].observer);
        free(t->seen[i].path);
    }
    free(t->first_seen);
    t->first_seen = NULL;
    t->n = 0;
}

/* The edges one transmission's observations make (CoreScope's order among them: newest
 * first, one per observer and path). */
static void file_transmission(struct graph *g, struct transmission *t)
{
    if (t->n > 1)
        qsort(t->seen, t->n, sizeof *t->seen, by_time_desc);
    struct strings seen = {0}; /* "observer|path" */
    for (size_t r = 0; r < t->n && !g->oom; r++) {
        const struct sighting *o = &t->seen[r];
        char dedup[2048];
        snprintf(dedup, sizeof dedup, "%s|%s", o->observer, o->path ? o->path : "");
        size_t before = seen.n;
        if (strings_id(&seen, dedup, true) < 0) {
            g->oom = true;
            break;
        }
        if (seen.n == before)
            continue; /* the same observer and path again */
        g->order = (struct order){t->first_seen, t->id, r};
        long observer = lower_id(g, o->observer);
        const double *snr = o->has_snr ? &o->snr : NULL;
        char buf[4096];
        char *hops[PATH_HOPS_MAX];
        int n = o->path && strcmp(o->path, "[]")
                    ? mg_path_split(o->path, buf, sizeof buf, hops, PATH_HOPS_MAX)
                    : 0;
        if (n <= 0) {
            if (t->from >= 0 && t->from != observer)
                upsert(g, t->from, observer, "", observer, snr, o->ts_ms);
            continue;
        }
        for (int i = 0; i < n; i++) {
            if (!hops[i])
                hops[i] = (char *)""; /* null decodes as "" in Go */
            for (char *c = hops[i]; *c; c++)
                *c = (char)tolower((unsigned char)*c);
        }
        if (t->from >= 0 && strcmp(text_of(g, t->from), hops[0]))
            upsert_hop(g, t->from, hops[0], observer, snr, o->ts_ms);
        if (strcmp(text_of(g, observer), hops[n - 1]))
            upsert_hop(g, observer, hops[n - 1], observer, snr, o->ts_ms);
    }
    strings_free(&seen);
}

/* Observations grouped by transmission (the index's order, no sort of the table); the order
 * CoreScope walks them in (transmissions by first_seen) only decides which observation made
 * an edge, kept as the edge's order (struct order). */
static int load_observations(struct graph *g, struct mg_db *db)
{
    char sql[2048];
    snprintf(sql, sizeof sql,
             "SELECT o.transmission_id, t.first_seen, CASE WHEN t.payload_type = 4 THEN %s END,"
             " coalesce(obs.id, ''), o.path_json, o.snr, o.timestamp, o.id FROM observations o"
             " JOIN transmissions t ON t.id = o.transmission_id"
             " LEFT JOIN observers obs ON obs.rowid = o.observer_idx ORDER BY o.transmission_id",
             originator_sql);
    sqlite3_stmt *st = mg_db_prepare(db, sql);
    if (!st)
        return sqlite3_errcode(db->conn);
    int rc;
    struct transmission t = {.id = INT64_MIN, .from = -1};
    while (!g->oom && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(st, 0);
        if (id != t.id) {
            file_transmission(g, &t);
            transmission_clear(&t);
            t.id = id;
            t.first_seen = dup_column(st, 1);
            const char *from = (const char *)sqlite3_column_text(st, 2);
            t.from = from ? lower_id(g, from) : -1;
            if (!t.first_seen)
                g->oom = true;
        }
        if (t.n == t.cap) {
            size_t cap = t.cap ? t.cap * 2 : 8;
            struct sighting *more = realloc(t.seen, cap * sizeof *more);
            if (!more) {
                g->oom = true;
                break;
            }
            t.seen = more;
            t.cap = cap;
        }
        const unsigned char *path = sqlite3_column_text(st, 4);
        struct sighting *o = &t.seen[t.n++];
        o->observer = dup_column(st, 3);
        o->path = path ? strdup((const char *)path) : NULL;
        o->has_snr = sqlite3_column_type(st, 5) != SQLITE_NULL;
        o->snr = sqlite3_column_double(st, 5);
        o->ts_ms = sqlite3_column_type(st, 6) == SQLITE_NULL
                       ? YEAR_ONE_MS
                       : (int64_t)llround(sqlite3_column_double(st, 6) * 1000.0);
        o->id = sqlite3_column_int64(st, 7);
        if (!o->observer || (path && !o->path))
            g->oom = true;
    }
    if (!g->oom)
        file_transmission(g, &t);
    transmission_clear(&t);
    free(t.seen);
    sqlite3_finalize(st);
    if (g->oom)
        return SQLITE_NOMEM;
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static double edge_score(const struct edge *e, int64_t now_ms)
{
    double hours = (double)(now_ms - e->last_ms) / 3600000.0;
    if (hours < 0)
        hours = 0;
    return fmin(1.0, (double)e->count / SATURATION) * exp(-log(2.0) / HALF_LIFE_HOURS * hours);
}

static double edge_confidence(const struct edge *e)
{
    double n = e->observers.n < 1 ? 1 : (double)e->observers.n;
    return fmin(1.0, n / OBSERVER_SATURATION);
}

/* Moves ambiguous edge e onto known - resolved, merging into an existing edge. */
static void resolve_edge(struct graph *g, size_t index, long known, long resolved)
{
    g->edges[index].alive = false;
    g->edges[index].ambiguous = false;
    bool fresh;
    struct edge *to = edge_of(g, known, resolved, true, &fresh);
    if (!to)
        return;
    struct edge *e = &g->edges[index]; /* edge_of may have moved the edges */
    if (fresh) {
        long a = to->a, b = to->b;
        struct ints obs = e->observers;
        *to = *e;
        to->a = a;
        to->b = b;
        to->pseudo = -1;
        to->alive = true;
        to->ambiguous = false;
        to->observers = obs;
        to->candidates = (struct ints){0};
        to->prefix = strdup(e->prefix);
        to->made_first_seen = strdup(e->made_first_seen);
        e->observers = (struct ints){0};
        if (!to->prefix || !to->made_first_seen)
            g->oom = true;
        return;
    }
    to->count += e->count;
    if (e->last_ms > to->last_ms)
        to->last_ms = e->last_ms;
    if (e->first_ms < to->first_ms)
        to->first_ms = e->first_ms;
    to->snr_sum += e->snr_sum;
    to->snr_count += e->snr_count;
    for (size_t i = 0; i < e->observers.n; i++)
        if (!ints_add(&to->observers, e->observers.v[i]))
            g->oom = true;
    for (int m = 0; m < 4; m++)
        to->by_mode[m] += e->by_mode[m];
}

static bool is_listener(const struct graph *g, long id)
{
    return ints_has(&g->listeners, id);
}

/* CoreScope's resolveWithContext with the known end as the only context, for the tiers whose
 * answer the build takes; -1: none. */
static long resolve_with_context(struct graph *g, const struct edge *e, const struct ints *adj,
                                 int64_t now_ms)
{
    long pid = strings_id(&g->prefixes, e->prefix, false);
    if (pid < 0)
        return -1;
    const struct ints *all = &g->candidates[pid];
    struct ints c = {0};
    for (size_t i = 0; i < all->n; i++)
        if (!is_listener(g, g->nodes[all->v[i]].key) && !ints_push(&c, all->v[i]))
            g->oom = true;
    long answer = -1;
    if (c.n == 1)
        answer = g->nodes[c.v[0]].key;
    if (c.n >= 2) {
        /* neighbour affinity: the known end's resolved edges to a candidate */
        double *best = calloc(c.n, sizeof *best);
        int64_t *counts = calloc(c.n, sizeof *counts);
        const struct ints *near = &adj[e->a];
        for (size_t k = 0; best && counts && k < near->n; k++) {
            const struct edge *x = &g->edges[near->v[k]];
            long other = x->a == e->a ? x->b : x->a;
            long ci = -1;
            for (size_t i = 0; i < c.n; i++)
                if (g->nodes[c.v[i]].key == other)
                    ci = (long)i; /* the last candidate of a key, as a Go map */
            if (ci < 0)
                continue;
            double s = edge_score(x, now_ms) * edge_confidence(x);
            if (s > best[ci]) {
                best[ci] = s;
                counts[ci] = x->count;
            }
        }
        long first = -1, second = -1;
        for (size_t i = 0; best && counts && i < c.n; i++) {
            if (best[i] <= 0)
                continue;
            if (first < 0 || best[i] > best[first]) {
                second = first;
                first = (long)i;
            } else if (second < 0 || best[i] > best[second]) {
                second = (long)i;
            }
        }
        if (first >= 0 && counts[first] >= MIN_OBSERVATIONS &&
            (second < 0 || best[first] >= CONFIDENCE_RATIO * best[second]))
            answer = g->nodes[c.v[first]].key;
        free(best);
        free(counts);
        /* geography: the candidate with GPS nearest to the known end, a relay with GPS */
        long kp = strings_id(&g->prefixes, text_of(g, e->a), false);
        if (answer < 0 && kp >= 0 && g->candidates[kp].n == 1 &&
            g->nodes[g->candidates[kp].v[0]].gps) {
            const struct node *k = &g->nodes[g->candidates[kp].v[0]];
            double best_d = DBL_MAX;
            for (size_t i = 0; i < c.n; i++) {
                const struct node *n = &g->nodes[c.v[i]];
                if (!n->gps)
                    continue;
                double dlat = (n->lat - k->lat) * M_PI / 180;
                double dlon =
                    (n->lon - k->lon) * M_PI / 180 * cos((k->lat + n->lat) / 2 * M_PI / 180);
                double d = sqrt(dlat * dlat + dlon * dlon);
                if (d < best_d) {
                    best_d = d;
                    answer = n->key;
                }
            }
        }
    }
    free(c.v);
    return answer == e->a ? -1 : answer;
}

static int by_edge_text(const void *x, const void *y, void *arg);

/* Ambiguous edges in the order of their pseudo keys' text (CoreScope: a Go map's order). */
static size_t ambiguous_edges(struct graph *g, size_t **out)
{
    size_t n = 0;
    *out = malloc((g->n_edges ? g->n_edges : 1) * sizeof **out);
    if (!*out) {
        g->oom = true;
        return 0;
    }
    for (size_t i = 0; i < g->n_edges; i++)
        if (g->edges[i].alive && g->edges[i].ambiguous)
            (*out)[n++] = i;
    if (n > 1)
        qsort_r(*out, n, sizeof **out, by_edge_text, g);
    return n;
}

static int by_edge_text(const void *x, const void *y, void *arg)
{
    const struct graph *g = arg;
    const struct edge *a = &g->edges[*(const size_t *)x], *b = &g->edges[*(const size_t *)y];
    int c = strcmp(text_of(g, a->a), text_of(g, b->a));
    return c ? c : strcmp(text_of(g, a->pseudo), text_of(g, b->pseudo));
}

static void resolve_by_context(struct graph *g, int64_t now_ms)
{
    size_t *amb;
    size_t n = ambiguous_edges(g, &amb);
    long *to = calloc(n ? n : 1, sizeof *to);
    /* each key's resolved edges (CoreScope's byNode, ambiguous ones aside) */
    struct ints *adj = calloc(g->ids.n ? g->ids.n : 1, sizeof *adj);
    if (!to || !adj)
        g->oom = true;
    for (size_t i = 0; adj && i < g->n_edges; i++) {
        const struct edge *e = &g->edges[i];
        if (!e->alive || e->ambiguous)
            continue;
        if (!ints_push(&adj[e->a], (long)i) || (e->b != e->a && !ints_push(&adj[e->b], (long)i)))
            g->oom = true;
    }
    /* decided on the graph as built, then applied */
    for (size_t i = 0; to && adj && i < n; i++)
        to[i] = resolve_with_context(g, &g->edges[amb[i]], adj, now_ms);
    for (size_t i = 0; adj && i < g->ids.n; i++)
        free(adj[i].v);
    free(adj);
    for (size_t i = 0; to && i < n; i++)
        if (to[i] >= 0)
            resolve_edge(g, amb[i], g->edges[amb[i]].a, to[i]);
    free(to);
    free(amb);
}

/* Jaccard similarity of two neighbour sets (sorted ids). */
static double jaccard(const struct ints *a, const struct ints *b)
{
    if (!a->n && !b->n)
        return 0;
    size_t common = 0;
    for (size_t i = 0; i < a->n; i++)
        common += ints_has(b, a->v[i]);
    size_t total = a->n + b->n - common;
    return total ? (double)common / (double)total : 0;
}

static void disambiguate(struct graph *g)
{
    struct ints *nb = calloc(g->ids.n ? g->ids.n : 1, sizeof *nb);
    if (!nb) {
        g->oom = true;
        return;
    }
    for (size_t i = 0; i < g->n_edges; i++) {
        const struct edge *e = &g->edges[i];
        if (!e->alive || e->ambiguous || e->b < 0 || !text_of(g, e->b)[0])
            continue;
        if (!ints_add(&nb[e->a], e->b) || !ints_add(&nb[e->b], e->a))
            g->oom = true;
    }
    size_t ids = g->ids.n;
    size_t *amb;
    size_t n = ambiguous_edges(g, &amb);
    for (size_t k = 0; k < n; k++) {
        struct edge *e = &g->edges[amb[k]];
        if (e->candidates.n < 2 || e->count < MIN_OBSERVATIONS)
            continue;
        static const struct ints none = {0};
        const struct ints *known = (size_t)e->a < ids ? &nb[e->a] : &none;
        long best = -1;
        double best_j = 0, second_j = 0;
        for (size_t i = 0; i < e->candidates.n; i++) {
            long cand = e->candidates.v[i];
            double j = jaccard(known, (size_t)cand < ids ? &nb[cand] : &none);
            if (best < 0) {
                best = cand;
                best_j = j;
            } else if (i == 1) {
                if (j > best_j) {
                    second_j = best_j;
                    best = cand;
                    best_j = j;
                } else {
                    second_j = j;
                }
            } else if (j > best_j) {
                second_j = best_j;
                best = cand;
                best_j = j;
            } else if (j > second_j) {
                second_j = j;
            }
        }
        if ((second_j == 0 && best_j > 0) ||
            (second_j > 0 && best_j / second_j >= CONFIDENCE_RATIO))
            resolve_edge(g, amb[k], g->edges[amb[k]].a, best);
    }
    free(amb);
    for (size_t i = 0; i < ids; i++)
        free(nb[i].v);
    free(nb);
}

/* ---- the answer ------------------------------------------------------------------------- */

struct answer {
    const struct edge *e;
    long other; /* -1: ambiguous */
    double score;
    int64_t count, by_mode[4], last_ms;
    struct ints observers;
    size_t order;
    bool gone;
};

static int by_score(const void *x, const void *y)
{
    const struct answer *a = x, *b = y;
    if (a->score != b->score)
        return a->score > b->score ? -1 : 1;
    return a->order < b->order ? -1 : a->order > b->order;
}

static int by_text_id(const void *x, const void *y, void *arg)
{
    const struct graph *g = arg;
    return strcmp(text_of(g, *(const long *)x), text_of(g, *(const long *)y));
}

static void write_time_ms(struct mg_json *j, const char *key, int64_t ms)
{
    char out[32];
    time_t t = (time_t)(ms >= 0 ? ms / 1000 : -((-ms + 999) / 1000));
    struct tm tm;
    gmtime_r(&t, &tm);
    if (ms == YEAR_ONE_MS)
        snprintf(out, sizeof out, "0001-01-01T00:00:00Z");
    else
        strftime(out, sizeof out, "%Y-%m-%dT%H:%M:%SZ", &tm);
    mg_json_kv_string(j, key, out);
}

static void write_answer(struct graph *g, const struct mg_neighbor_query *q, struct answer *v,
                         size_t n, int64_t total, struct mg_buf *body)
{
    long self = strings_id(&g->ids, q->pubkey, false);
    long self_node = node_index(g, self);
    struct mg_json j;
    mg_json_init(&j, body);
    mg_json_object_begin(&j);
    mg_json_kv_string(&j, "node", q->pubkey);
    mg_json_key(&j, "neighbors");
    mg_json_array_begin(&j);
    for (size_t i = 0; i < n; i++) {
        const struct answer *a = &v[i];
        if (a->gone)
            continue;
        const struct edge *e = a->e;
        long ni = a->other >= 0 ? node_index(g, a->other) : -1;
        mg_json_object_begin(&j);
        mg_json_kv_string(&j, "pubkey", a->other >= 0 ? text_of(g, a->other) : NULL);
        mg_json_kv_string(&j, "prefix", e->prefix ? e->prefix : "");
        mg_json_kv_string(&j, "name", ni >= 0 ? g->nodes[ni].name : NULL);
        mg_json_kv_string(&j, "role", ni >= 0 ? g->nodes[ni].role : NULL);
        mg_json_kv_int(&j, "count", a->count);
        bool modes = false;
        for (int m = 0; m < 4; m++)
            modes = modes || a->by_mode[m];
        if (modes) {
            mg_json_key(&j, "counts_by_mode");
            mg_json_object_begin(&j);
            for (int m = 0; m < 4; m++) {
                if (!a->by_mode[m])
                    continue;
                static const char *const mode_keys[4] = {"0", "1", "2", "3"};
                mg_json_kv_int(&j, mode_keys[m], a->by_mode[m]);
            }
            mg_json_object_end(&j);
        }
        mg_json_kv_double(&j, "score", a->score);
        write_time_ms(&j, "first_seen", e->first_ms);
        write_time_ms(&j, "last_seen", a->last_ms);
        if (e->snr_count)
            mg_json_kv_double(&j, "avg_snr", e->snr_sum / (double)e->snr_count);
        else
            mg_json_kv_null(&j, "avg_snr");
        if (ni >= 0 && self_node >= 0 && g->nodes[ni].gps && g->nodes[self_node].gps)
            mg_json_kv_double(&j, "distance_km",
                              mg_haversine_km(g->nodes[self_node].lat, g->nodes[self_node].lon,
                                              g->nodes[ni].lat, g->nodes[ni].lon));
        mg_json_key(&j, "observers");
        mg_json_array_begin(&j);
        for (size_t k = 0; k < a->observers.n; k++)
            mg_json_string(&j, text_of(g, a->observers.v[k]));
        mg_json_array_end(&j);
        mg_json_kv_bool(&j, "ambiguous", e->ambiguous);
        if (e->ambiguous && !e->candidates.n)
            mg_json_kv_bool(&j, "unresolved", true);
        if (e->ambiguous && e->candidates.n) {
            mg_json_key(&j, "candidates");
            mg_json_array_begin(&j);
            for (size_t k = 0; k < e->candidates.n; k++) {
                long cn = node_index(g, e->candidates.v[k]);
                mg_json_object_begin(&j);
                mg_json_kv_string(&j, "pubkey", text_of(g, e->candidates.v[k]));
                mg_json_kv_string(&j, "name", cn >= 0 ? g->nodes[cn].name : "");
                mg_json_kv_string(&j, "role", cn >= 0 ? g->nodes[cn].role : "");
                mg_json_object_end(&j);
            }
            mg_json_array_end(&j);
        }
        mg_json_object_end(&j);
    }
    mg_json_array_end(&j);
    mg_json_kv_int(&j, "total_observations", total);
    mg_json_object_end(&j);
    mg_buf_putc(body, '\n');
}

/* CoreScope's dedupPrefixEntries: an entry without a key whose prefix starts exactly one
 * keyed entry's key is folded into that one. False: out of memory. */
static bool fold_prefixes(struct graph *g, struct answer *v, size_t n)
{
    bool ok = true;
    for (size_t i = 0; i < n; i++) {
        if (v[i].other >= 0 || !v[i].e->prefix || !v[i].e->prefix[0])
            continue;
        const char *p = v[i].e->prefix;
        size_t len = strlen(p), matches = 0, at = 0;
        for (size_t k = 0; k < n; k++) {
            if (k == i || v[k].other < 0)
                continue;
            if (!strncmp(text_of(g, v[k].other), p, len)) {
                matches++;
                at = k;
            }
        }
        if (matches != 1)
            continue;
        v[at].count += v[i].count;
        for (int m = 0; m < 4; m++)
            v[at].by_mode[m] += v[i].by_mode[m];
        if (v[i].last_ms / 1000 > v[at].last_ms / 1000)
            v[at].last_ms = v[i].last_ms;
        for (size_t k = 0; k < v[i].observers.n; k++)
            if (!ints_add(&v[at].observers, v[i].observers.v[k]))
                ok = false;
        if (v[at].observers.n > 1)
            qsort_r(v[at].observers.v, v[at].observers.n, sizeof(long), by_text_id, g);
        v[i].gone = true;
    }
    return ok;
}

static void graph_release(void *table)
{
    if (table) {
        graph_free(table);
        free(table);
    }
}

/* arg: a struct mg_group_build_arg (group_table.h); the ambiguous edges are resolved with
 * scores as of its realtime clock. */
static void *graph_build(sqlite3 *conn, void *arg, int *rc)
{
    const struct mg_group_build_arg *b = arg;
    struct mg_db db = {.conn = conn}; /* what the loads prepare on */
    struct graph *g = calloc(1, sizeof *g);
    if (!g) {
        *rc = SQLITE_NOMEM;
        return NULL;
    }
    *rc = load_nodes(g, &db);
    if (*rc == SQLITE_OK)
        *rc = load_observer_names(g, &db);
    if (*rc == SQLITE_OK)
        *rc = load_listeners(g, &db);
    if (*rc == SQLITE_OK)
        *rc = load_observations(g, &db);
    if (*rc == SQLITE_OK)
        *rc = index_nodes(g) ? SQLITE_OK : SQLITE_NOMEM; /* ids added by observations */
    if (*rc == SQLITE_OK) {
        resolve_by_context(g, b->realtime_ns / 1000000);
        disambiguate(g);
        *rc = g->oom ? SQLITE_NOMEM : SQLITE_OK;
    }
    if (*rc != SQLITE_OK) {
        graph_release(g);
        return NULL;
    }
    mg_debug("neighbour graph: %zu keys, %zu edges", g->ids.n, g->n_edges);
    return g;
}

/* ---- the group's copy: the graph as a body of the shared result cache ---------------------- */

#define BODY_MAGIC 0x424e474dU /* "MGNB" */
#define BODY_VERSION 2U

struct body_head {
    uint32_t magic, version;
    int64_t built_ns; /* CLOCK_MONOTONIC, the same in every process */
    uint64_t ids, edge_keys, nodes, edges;
    int64_t rejected_far;
};

/* An edge's numbers as the body holds them. */
struct body_edge {
    int64_t a, b, pseudo;
    int64_t count, by_mode[4], first_ms, last_ms, snr_count;
    double snr_sum;
    uint64_t observers, candidates;
    uint8_t ambiguous, alive;
};

struct body_node {
    int64_t key;
    double lat, lon;
    uint8_t gps;
};

static void put_strings(struct mg_buf *out, const struct strings *t)
{
    for (size_t i = 0; i < t->n; i++)
        mg_group_put_text(out, t->text[i]);
}

static void put_ints(struct mg_buf *out, const struct ints *l)
{
    for (size_t i = 0; i < l->n; i++) {
        int64_t v = l->v[i];
        mg_buf_append(out, &v, sizeof v);
    }
}

/* What an answer reads: the keys, the edges' keys (in edge order), the nodes, the edges. */
static void encode(const void *table, int64_t built_ns, struct mg_buf *out)
{
    const struct graph *g = table;
    struct body_head h = {BODY_MAGIC,     BODY_VERSION, built_ns,   g->ids.n,
                          g->edge_keys.n, g->n_nodes,   g->n_edges, g->rejected_far};
    mg_buf_append(out, &h, sizeof h);
    put_strings(out, &g->ids);
    put_strings(out, &g->edge_keys);
    for (size_t i = 0; i < g->n_nodes; i++) {
        const struct node *n = &g->nodes[i];
        struct body_node b = {n->key, n->lat, n->lon, n->gps};
        mg_buf_append(out, &b, sizeof b);
        mg_group_put_text(out, n->name);
        mg_group_put_text(out, n->role);
    }
    for (size_t i = 0; i < g->n_edges; i++) {
        const struct edge *e = &g->edges[i];
        struct body_edge b = {e->a,       e->b,           e->pseudo,       e->count,
                              {0},        e->first_ms,    e->last_ms,      e->snr_count,
                              e->snr_sum, e->observers.n, e->candidates.n, e->ambiguous,
                              e->alive};
        memcpy(b.by_mode, e->by_mode, sizeof b.by_mode);
        mg_buf_append(out, &b, sizeof b);
        mg_group_put_text(out, e->prefix);
        put_ints(out, &e->observers);
        put_ints(out, &e->candidates);
    }
}

/* n texts into t, each its own id in order; false: bad input or out of memory. */
static bool get_strings(struct mg_group_reader *r, struct strings *t, uint64_t n)
{
    for (uint64_t i = 0; i < n && !r->bad; i++) {
        char *text = mg_group_get_text(r);
        long id = text ? strings_id(t, text, true) : -1;
        free(text);
        if (id < 0 || (uint64_t)id != i)
            r->bad = true;
    }
    return !r->bad;
}

/* An id of the graph's keys: -1 (none) when may_be_none, else below ids. */
static bool id_ok(int64_t v, size_t ids, bool may_be_none)
{
    return (v >= 0 && (uint64_t)v < ids) || (may_be_none && v == -1);
}

static void get_ints(struct mg_group_reader *r, struct ints *l, uint64_t n, size_t ids)
{
    for (uint64_t i = 0; i < n && !r->bad; i++) {
        int64_t v;
        mg_group_get(r, &v, sizeof v);
        if (!r->bad && (!id_ok(v, ids, false) || !ints_push(l, (long)v)))
            r->bad = true;
    }
}

static void *decode(const void *data, size_t len, int64_t *built_ns)
{
    struct mg_group_reader r = {data, (const unsigned char *)data + len, false};
    struct body_head h;
    mg_group_get(&r, &h, sizeof h);
    if (r.bad || h.magic != BODY_MAGIC || h.version != BODY_VERSION || h.ids > len ||
        h.edge_keys > len || h.nodes > len || h.edges > len)
        return NULL;
    struct graph *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->nodes = calloc(h.nodes ? h.nodes : 1, sizeof *g->nodes);
    g->edges = calloc(h.edges ? h.edges : 1, sizeof *g->edges);
    r.bad = !g->nodes || !g->edges || !get_strings(&r, &g->ids, h.ids) ||
            !get_strings(&r, &g->edge_keys, h.edge_keys);
    size_t ids = g->ids.n;
    while (!r.bad && g->n_nodes < h.nodes) {
        struct node *n = &g->nodes[g->n_nodes++];
        struct body_node b;
        mg_group_get(&r, &b, sizeof b);
        n->key = (long)b.key;
        n->lat = b.lat;
        n->lon = b.lon;
        n->gps = b.gps != 0;
        n->name = mg_group_get_text(&r);
        n->role = mg_group_get_text(&r);
        r.bad = r.bad || !n->name || !n->role || !id_ok(b.key, ids, false);
    }
    g->cap_edges = h.edges;
    while (!r.bad && g->n_edges < h.edges) {
        struct edge *e = &g->edges[g->n_edges++];
        struct body_edge b;
        mg_group_get(&r, &b, sizeof b);
        *e = (struct edge){.a = (long)b.a,
                           .b = (long)b.b,
                           .pseudo = (long)b.pseudo,
                           .count = b.count,
                           .first_ms = b.first_ms,
                           .last_ms = b.last_ms,
                           .snr_sum = b.snr_sum,
                           .snr_count = b.snr_count,
                           .ambiguous = b.ambiguous != 0,
                           .alive = b.alive != 0};
        memcpy(e->by_mode, b.by_mode, sizeof e->by_mode);
        e->prefix = mg_group_get_text(&r);
        r.bad = r.bad || !id_ok(b.a, ids, false) || !id_ok(b.b, ids, true) ||
                !id_ok(b.pseudo, ids, true) || b.observers > len || b.candidates > len;
        get_ints(&r, &e->observers, b.observers, ids);
        get_ints(&r, &e->candidates, b.candidates, ids);
    }
    if (r.bad || r.at != r.end || !index_nodes(g)) {
        graph_release(g);
        return NULL;
    }
    g->rejected_far = h.rejected_far;
    *built_ns = h.built_ns;
    return g;
}

static struct mg_process_table graphs =
    MG_PROCESS_TABLE_INIT(MG_NEIGHBOR_GRAPH_INTERVAL_NS, graph_release);

static struct mg_group_table shared =
    MG_GROUP_TABLE_INIT(.table = &graphs, .name = "neighbors", .what = "neighbour graph",
                        .version = BODY_VERSION, .build = graph_build, .encode = encode,
                        .decode = decode, .lazy = true,
                        .builds = offsetof(struct mg_result_cache, neighbor_builds),
                        .copies = offsetof(struct mg_result_cache, neighbor_copies),
                        .stats = MG_TABLE_neighbors);

void mg_neighbor_graph_forget(struct mg_env *env)
{
    mg_group_table_forget(&shared, env);
}

/* The worker's own env (its loop's), set at its start: what the graph's jobs go to. A request
 * run for an anonymous client has the anonymous helper as env->jobs, whose one thread that
 * request's own build has reserved, and its env is a copy that lives one turn. */
static struct mg_env *worker_env;

void mg_neighbor_graph_adopt(struct mg_env *env)
{
    worker_env = env;
    mg_group_table_adopt(&shared, env);
}

bool mg_neighbor_graph_available(struct mg_env *env)
{
    return mg_group_table_available(&shared, env);
}

int mg_neighbor_graph_keep(struct mg_env *env, int64_t now_ms, bool *pending)
{
    struct mg_env *on = env->jobs && worker_env ? worker_env : env;
    return mg_group_table_keep(&shared, on, mg_monotonic_ns(), now_ms * 1000000, pending);
}

/* The node's answer from graph g. */
static int answer(const struct graph *gc, const struct mg_neighbor_query *q, struct mg_buf *body)
{
    struct graph *g = (struct graph *)gc; /* read only: lookups do not change it */
    int rc = SQLITE_OK;
    bool oom = false;
    struct answer *v = NULL;
    size_t n = 0;
    int64_t total = 0;
    long self = strings_id(&g->ids, q->pubkey, false);
    if (self >= 0) {
        v = calloc(g->n_edges ? g->n_edges : 1, sizeof *v);
        if (!v)
            rc = SQLITE_NOMEM;
        for (size_t i = 0; v && i < g->n_edges; i++) {
            const struct edge *e = &g->edges[i];
            if (!e->alive || (e->a != self && e->b != self))
                continue;
            double score = edge_score(e, q->now_ms);
            if (e->count < q->min_count || score < q->min_score)
                continue;
            if (e->ambiguous && !q->include_ambiguous)
                continue;
            total += e->count;
            struct answer *a = &v[n];
            a->e = e;
            a->other = e->ambiguous ? -1 : (e->a == self ? e->b : e->a);
            a->score = score;
            a->count = e->count;
            memcpy(a->by_mode, e->by_mode, sizeof a->by_mode);
            a->last_ms = e->last_ms;
            for (size_t k = 0; k < e->observers.n; k++)
                if (!ints_push(&a->observers, e->observers.v[k]))
                    oom = true;
            if (a->observers.n > 1)
                qsort_r(a->observers.v, a->observers.n, sizeof(long), by_text_id, g);
            a->order = n++;
        }
        if (!fold_prefixes(g, v, n))
            oom = true;
        if (n > 1)
            qsort(v, n, sizeof *v, by_score);
        if (oom)
            rc = SQLITE_NOMEM;
    }
    if (rc == SQLITE_OK)
        write_answer(g, q, v, n, total, body);
    for (size_t i = 0; i < n; i++)
        free(v[i].observers.v);
    free(v);
    return rc;
}

/* The graph the request's turn on the loop made sure of (mg_neighbor_graph_keep), held for
 * reading (mg_process_table_read_end when done); none (in-process tests, a graph dropped
 * meanwhile): this process's own pass, here. NULL with *rc set when there is none. */
static const struct graph *read_current(struct mg_db *db, int64_t now_ms, int *rc)
{
    struct mg_group_build_arg arg = {now_ms * 1000000, NULL};
    *rc = mg_process_table_exists(&graphs, db->conn)
              ? SQLITE_OK
              : mg_process_table_refresh(&graphs, db->conn, mg_monotonic_ns(), graph_build, &arg);
    if (*rc != SQLITE_OK)
        return NULL;
    mg_process_table_read_begin(&graphs);
    const struct graph *g = mg_process_table_current(&graphs);
    mg_table_rows(MG_TABLE_neighbors, g != NULL, 0);
    if (!g) {
        mg_process_table_read_end(&graphs);
        *rc = SQLITE_ERROR;
    }
    return g;
}

int mg_neighbor_graph_answer(struct mg_db *db, const struct mg_neighbor_query *q,
                             struct mg_buf *body)
{
    int rc;
    const struct graph *g = read_current(db, q->now_ms, &rc);
    if (!g)
        return rc;
    rc = answer(g, q, body);
    mg_process_table_read_end(&graphs);
    return rc;
}

int mg_neighbor_graph_hold(struct mg_env *env, int64_t now_ms, bool *busy)
{
    int rc = mg_neighbor_graph_keep(env, now_ms, busy);
    if (rc != SQLITE_OK || (busy && *busy))
        return rc;
    mg_process_table_read_begin(&graphs);
    if (!mg_process_table_current(&graphs)) {
        mg_process_table_read_end(&graphs);
        return SQLITE_ERROR;
    }
    mg_table_rows(MG_TABLE_neighbors, 1, 0);
    return SQLITE_OK;
}

double mg_neighbor_graph_weight(int64_t count, int64_t last_ms, int64_t observers, int64_t now_ms)
{
    struct edge e = {.count = count, .last_ms = last_ms};
    e.observers.n = observers > 0 ? (size_t)observers : 0;
    return edge_score(&e, now_ms) * edge_confidence(&e);
}

void mg_neighbor_graph_release(void)
{
    mg_process_table_read_end(&graphs);
}

double mg_neighbor_graph_edge_score(const char *a, const char *b, int64_t now_ms,
                                    bool with_confidence, int64_t *count)
{
    struct graph *g = mg_process_table_current(&graphs);
    long x = g ? strings_id(&g->ids, a, false) : -1, y = g ? strings_id(&g->ids, b, false) : -1;
    const struct edge *e = x >= 0 && y >= 0 ? edge_of(g, x, y, false, NULL) : NULL;
    if (!e || !e->alive || e->ambiguous)
        return 0;
    if (count)
        *count = e->count;
    return edge_score(e, now_ms) * (with_confidence ? edge_confidence(e) : 1.0);
}

bool mg_neighbor_graph_edge_seen(const char *a, const char *b, int64_t *count, int64_t *last_ms)
{
    struct graph *g = mg_process_table_current(&graphs);
    long x = g ? strings_id(&g->ids, a, false) : -1, y = g ? strings_id(&g->ids, b, false) : -1;
    const struct edge *e = x >= 0 && y >= 0 ? edge_of(g, x, y, false, NULL) : NULL;
    if (!e || !e->alive || e->ambiguous)
        return false;
    *count = e->count;
    *last_ms = e->last_ms;
    return true;
}

/* ---- the whole graph (CoreScope's /api/analytics/neighbor-graph) --------------------------- */

/* The region's observers (ids as stored, CoreScope's region set) flagged by graph id into
 * flags (ids bytes); *filter when the region names any observer (then an edge none of whose
 * observers is flagged is left out, as CoreScope's). An SQLite code. */
static int region_flags(struct mg_db *db, const struct graph *g, const char *codes,
                        unsigned char *flags, bool *filter)
{
    *filter = false;
    sqlite3_stmt *st =
        mg_db_prepare(db, "SELECT id FROM observers WHERE id IS NOT NULL"
                          " AND instr(',' || ?1 || ',', ',' || upper(trim(iata)) || ',') > 0"
                          " AND instr(iata, ',') = 0 AND trim(iata) <> ''");
    if (!st)
        return sqlite3_errcode(db->conn);
    sqlite3_bind_text(st, 1, codes, -1, SQLITE_STATIC);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        *filter = true;
        long id =
            strings_id((struct strings *)&g->ids, (const char *)sqlite3_column_text(st, 0), false);
        if (id >= 0)
            flags[id] = 1;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* A node entry's name and role (CoreScope's node map: the nodes, then observers as "observer"). */
static const struct node *node_of_text(const struct graph *g, long id)
{
    long ni = node_index(g, id);
    return ni >= 0 ? &g->nodes[ni] : NULL;
}

/* Hidden as CoreScope's graph hides an end: its key blacklisted, or a node of the table whose
 * name starts with a hidden prefix (an observer's name is not looked at). */
static bool end_hidden(const struct graph *g, long id)
{
    if (id < 0)
        return false;
    const struct node *n = node_of_text(g, id);
    bool table_node = n && strcmp(n->role, "observer") != 0;
    return mg_node_hidden(text_of(g, id), table_node ? n->name : NULL);
}

static bool role_is(const struct graph *g, long id, const char *role)
{
    const struct node *n = id >= 0 ? node_of_text(g, id) : NULL;
    return n && strcasecmp(n->role, role) == 0;
}

/* The edge's ends as CoreScope's answer names them: an ambiguous edge's are its known end and
 * "prefix:<hop>", the smaller first, the unknown one (-1) replaced by the pseudo key. */
static void edge_ends(const struct graph *g, const struct edge *e, long *source, long *target)
{
    if (!e->ambiguous) {
        *source = e->a, *target = e->b;
        return;
    }
    bool pseudo_first = e->pseudo >= 0 && strcmp(text_of(g, e->a), text_of(g, e->pseudo)) > 0;
    *source = pseudo_first ? e->pseudo : e->a;
    *target = e->pseudo;
}

static int whole(struct mg_db *db, const struct graph *g, const struct mg_neighbor_graph_query *q,
                 struct mg_buf *body)
{
    size_t ids = g->ids.n ? g->ids.n : 1;
    unsigned char *region = calloc(ids, 1), *listed = calloc(ids, 1),
                  *kept = calloc(g->n_edges ? g->n_edges : 1, 1);
    int64_t *neighbours = calloc(ids, sizeof *neighbours);
    long *nodes = calloc(ids, sizeof *nodes);
    int rc = region && listed && kept && neighbours && nodes ? SQLITE_OK : SQLITE_NOMEM;
    bool by_region = false;
    if (rc == SQLITE_OK && q->region && q->region[0])
        rc = region_flags(db, g, q->region, region, &by_region);
    size_t n_nodes = 0, n_edges = 0, ambiguous = 0;
    for (size_t i = 0; rc == SQLITE_OK && i < g->n_edges; i++) {
        const struct edge *e = &g->edges[i];
        if (!e->alive || e->count < q->min_count || edge_score(e, q->now_ms) < q->min_score)
            continue;
        long source, target;
        edge_ends(g, e, &source, &target);
        long b = e->ambiguous ? -1 : e->b; /* CoreScope's NodeB: none when ambiguous */
        if (q->role && q->role[0] && !role_is(g, source, q->role) && !role_is(g, b, q->role))
            continue;
        if (by_region) {
            bool heard = false;
            for (size_t k = 0; !heard && k < e->observers.n; k++)
                heard = region[e->observers.v[k]] != 0;
            if (!heard)
                continue;
        }
        if (end_hidden(g, source) || end_hidden(g, b))
            continue;
        kept[i] = 1;
        n_edges++;
        ambiguous += e->ambiguous;
        neighbours[source]++;
        if (target >= 0)
            neighbours[target]++;
        long ends[2] = {source, b}; /* the nodes, in order of first sight */
        for (int k = 0; k < 2; k++) {
            long id = ends[k];
            if (id >= 0 && !listed[id] && text_of(g, id)[0] &&
                strncmp(text_of(g, id), "prefix:", 7) != 0) {
                listed[id] = 1;
                nodes[n_nodes++] = id;
            }
        }
    }
    if (rc == SQLITE_OK) {
        struct mg_json j;
        mg_json_init(&j, body);
        mg_json_object_begin(&j);
        mg_json_key(&j, "nodes");
        mg_json_array_begin(&j);
        for (size_t m = 0; m < n_nodes; m++) {
            const struct node *n = node_of_text(g, nodes[m]);
            mg_json_object_begin(&j);
            mg_json_kv_string(&j, "pubkey", text_of(g, nodes[m]));
            mg_json_kv_string(&j, "name", n ? n->name : "");
            mg_json_kv_string(&j, "role", n ? n->role : "");
            mg_json_kv_int(&j, "neighbor_count", neighbours[nodes[m]]);
            mg_json_object_end(&j);
        }
        mg_json_array_end(&j);
        mg_json_key(&j, "edges");
        mg_json_array_begin(&j);
        for (size_t i = 0; i < g->n_edges; i++) {
            if (!kept[i])
                continue;
            const struct edge *e = &g->edges[i];
            long source, target;
            edge_ends(g, e, &source, &target);
            mg_json_object_begin(&j);
            mg_json_kv_string(&j, "source", text_of(g, source));
            mg_json_kv_string(&j, "target", text_of(g, target));
            mg_json_kv_int(&j, "weight", e->count);
            mg_json_kv_double(&j, "score", edge_score(e, q->now_ms));
            mg_json_kv_bool(&j, "bidirectional", true);
            if (e->snr_count)
                mg_json_kv_double(&j, "avg_snr", e->snr_sum / (double)e->snr_count);
            else
                mg_json_kv_null(&j, "avg_snr");
            mg_json_kv_bool(&j, "ambiguous", e->ambiguous);
            mg_json_object_end(&j);
        }
        mg_json_array_end(&j);
        mg_json_key(&j, "stats");
        mg_json_object_begin(&j);
        mg_json_kv_int(&j, "total_nodes", (int64_t)n_nodes);
        mg_json_kv_int(&j, "total_edges", (int64_t)n_edges);
        mg_json_kv_int(&j, "ambiguous_edges", (int64_t)ambiguous);
        mg_json_kv_double(&j, "avg_cluster_size",
                          n_nodes ? (double)(n_edges * 2) / (double)n_nodes : 0.0);
        mg_json_kv_int(&j, "rejected_edges_geo_far", g->rejected_far);
        mg_json_object_end(&j);
        mg_json_object_end(&j);
        mg_buf_putc(body, '\n');
    }
    free(region);
    free(listed);
    free(kept);
    free(neighbours);
    free(nodes);
    return rc;
}

int mg_neighbor_graph_whole(struct mg_db *db, const struct mg_neighbor_graph_query *q,
                            struct mg_buf *body)
{
    int rc;
    const struct graph *g = read_current(db, q->now_ms, &rc);
    if (!g)
        return rc;
    rc = whole(db, g, q, body);
    mg_process_table_read_end(&graphs);
    return rc;
}

/* SPDX-License-Identifier: ISC */
/*
 * GET /api/nodes/{pubkey}/paths: the paths that run through a node, grouped, as CoreScope's
 * "Paths through this node". A cold report (cold_report.h): the build reads the observations
 * of every transmission whose path may hold the node, under the cold gate, and the answer is
 * shared through the result cache.
 *
 * From the database, as CoreScope's handler does from its packet store:
 *   - the node: 404 when no nodes row has the key (lowercased); 400 when it is not 64 hex.
 *   - a transmission's path is that of its observation with the longest path (the first of
 *     them, by id); its canonical resolved path the resolved_path of that observation, else of
 *     the observation with the longest path that has one.
 *   - with a resolved path, a transmission goes through the node when it names the key at a
 *     hop's place; a hop shows the node of its resolved key (name, key, lat/lon with GPS) when
 *     that node can relay, else the key with the hop as its name, or only the hop (null key).
 *   - without one: when a hop is a prefix of the key that names no node that can relay but
 *     it, or it alone (CoreScope's #1352 rule: an ambiguous prefix never counts); a hop shows
 *     its one candidate, or among several the one with GPS and the most adverts, else the most
 *     adverts (CoreScope's resolver without context; its neighbour-affinity and geographic
 *     tiers use its in-memory graph, which meshgate does not build), or none.
 *   - transmissions are grouped by their hops' keys (the hop where there is none); each group:
 *     hops of its first transmission, count, lastSeen the greatest first_seen and sampleHash
 *     its hash. Newest lastSeen first, then count, then the key list; at most 50.
 *     totalPaths counts the groups, totalTransmissions the transmissions.
 */
#include "cold_report.h"
#include "hop_nodes.h"
#include "json.h"
#include "params.h"
#include "path_parse.h"
#include "reach.h"
#include "result_cache.h"
#include "router.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PATHS_MAX 50
#define HOPS_MAX 64

struct paths_args {
    char pubkey[65];
};

static void lower_in_place(char *s)
{
    for (; s && *s; s++)
        *s = (char)tolower((unsigned char)*s);
}

struct group {
    char *sig;
    char *hops; /* the JSON array of the first transmission's hops */
    int64_t count;
    char *last_seen, *sample_hash;
};

struct paths {
    const char *pk;
    struct mg_hop_nodes nodes;
    struct group *groups;
    size_t n_groups, cap_groups;
    int64_t transmissions;
    bool oom;
};

static const struct mg_hop_node *hop_pick(const struct paths *p, const char *hop, size_t *count)
{
    size_t len = strlen(hop);
    const struct mg_hop_node *first = NULL, *gps = NULL, *most = NULL;
    *count = 0;
    for (size_t i = 0; i < p->nodes.len; i++) {
        const struct mg_hop_node *n = &p->nodes.v[i];
        if (!mg_hop_names(n, hop, len))
            continue;
        (*count)++;
        first = first ? first : n;
        if (n->has_gps && (!gps || mg_hop_better(n, gps)))
            gps = n;
        if (!most || mg_hop_better(n, most))
            most = n;
    }
    return *count == 1 ? first : gps ? gps : most;
}

static const struct mg_hop_node *by_key(const struct paths *p, const char *lower_key)
{
    for (size_t i = 0; i < p->nodes.len; i++)
        if (!strcmp(p->nodes.v[i].lower, lower_key))
            return &p->nodes.v[i];
    return NULL;
}

static void write_hop(struct mg_json *j, const char *hop, const struct mg_hop_node *n,
                      const char *key)
{
    mg_json_object_begin(j);
    mg_json_kv_string(j, "prefix", hop);
    mg_json_kv_string(j, "name", n ? n->name : hop);
    mg_json_kv_string(j, "pubkey", n ? n->key : key);
    mg_json_key(j, "lat");
    if (n && n->has_gps)
        mg_json_double(j, n->lat);
    else
        mg_json_null(j);
    mg_json_key(j, "lon");
    if (n && n->has_gps)
        mg_json_double(j, n->lon);
    else
        mg_json_null(j);
    mg_json_object_end(j);
}

static char *dup_or_empty(const char *s)
{
    return strdup(s ? s : "");
}

/* One transmission: its best path and canonical resolved path (or NULL). */
static void add_tx(struct paths *p, const char *path, const char *resolved, const char *first_seen,
                   const char *hash)
{
    char hbuf[4096], rbuf[8192];
    char *hops[HOPS_MAX], *rp[HOPS_MAX];
    int n = mg_path_split(path, hbuf, sizeof hbuf, hops, HOPS_MAX);
    if (n <= 0)
        return;
    int rn = resolved ? mg_path_split(resolved, rbuf, sizeof rbuf, rp, HOPS_MAX) : -1;
    struct mg_buf sig, js;
    mg_buf_init(&sig);
    mg_buf_init(&js);
    struct mg_json j;
    mg_json_init(&j, &js);
    mg_json_array_begin(&j);
    bool contains = false;
    for (int i = 0; i < n; i++) {
        char lower[80];
        snprintf(lower, sizeof lower, "%s", hops[i]);
        lower_in_place(lower);
        const char *sig_part = hops[i];
        if (rn >= 0) {
            char *key = i < rn ? rp[i] : NULL;
            lower_in_place(key);
            if (key && *key) {
                const struct mg_hop_node *node = by_key(p, key);
                write_hop(&j, hops[i], node, key);
                sig_part = node ? node->key : key;
                contains = contains || !strcmp(key, p->pk);
            } else {
                write_hop(&j, hops[i], NULL, NULL);
            }
        } else {
            size_t count;
            const struct mg_hop_node *node = hop_pick(p, lower, &count);
            write_hop(&j, hops[i], node, NULL);
            if (node)
                sig_part = node->key;
            bool prefix = lower[0] && !strncmp(p->pk, lower, strlen(lower));
            if (prefix && (count == 0 || (count == 1 && !strcmp(node->lower, p->pk))))
                contains = true;
        }
        mg_buf_puts(&sig, i ? "\xe2\x86\x92" : "");
        mg_buf_puts(&sig, sig_part);
    }
    mg_json_array_end(&j);
    mg_buf_putc(&sig, '\0');
    mg_buf_putc(&js, '\0');
    if (!contains || sig.failed || js.failed) {
        p->oom = p->oom || sig.failed || js.failed;
        mg_buf_free(&sig);
        mg_buf_free(&js);
        return;
    }
    p->transmissions++;
    for (size_t g = 0; g < p->n_groups; g++) {
        struct group *gr = &p->groups[g];
        if (strcmp(gr->sig, sig.data) != 0)
            continue;
        gr->count++;
        if (first_seen && strcmp(first_seen, gr->last_seen) > 0) {
            free(gr->last_seen);
            free(gr->sample_hash);
            gr->last_seen = dup_or_empty(first_seen);
            gr->sample_hash = dup_or_empty(hash);
        }
        mg_buf_free(&sig);
        mg_buf_free(&js);
        return;
    }
    if (p->n_groups == p->cap_groups) {
        size_t cap = p->cap_groups ? 2 * p->cap_groups : 64;
        struct group *grown = realloc(p->groups, cap * sizeof *grown);
        if (!grown) {
            p->oom = true;
            mg_buf_free(&sig);
            mg_buf_free(&js);
            return;
        }
        p->groups = grown;
        p->cap_groups = cap;
    }
    struct group *gr = &p->groups[p->n_groups++];
    gr->sig = sig.data;
    gr->hops = js.data;
    gr->count = 1;
    gr->last_seen = dup_or_empty(first_seen);
    gr->sample_hash = dup_or_empty(hash);
}

static int by_recency(const void *x, const void *y)
{
    const struct group *a = x, *b = y;
    int c = strcmp(b->last_seen, a->last_seen);
    if (c)
        return c;
    if (a->count != b->count)
        return a->count > b->count ? -1 : 1;
    return strcmp(a->sig, b->sig);
}

static int path_len(const char *path)
{
    char buf[4096], *hops[HOPS_MAX];
    int n = mg_path_split(path, buf, sizeof buf, hops, HOPS_MAX);
    return n < 0 ? 0 : n;
}

/* The transmissions whose observations' paths hold a hop starting with the key's first byte,
 * or whose resolved paths hold the key, with all their observations, by transmission and id. */
static int scan(struct paths *p, struct mg_db *db)
{
    char sql[1024];
    bool rp = db->schema.obs_resolved_path;
    snprintf(sql, sizeof sql,
             "WITH c AS (SELECT DISTINCT transmission_id AS id FROM observations"
             " WHERE path_json LIKE ?1%s)"
             " SELECT t.id, t.hash, t.first_seen, o.path_json, %s FROM c"
             " JOIN transmissions t ON t.id = c.id JOIN observations o ON o.transmission_id = c.id"
             " ORDER BY t.id, o.id",
             rp ? " OR resolved_path LIKE ?2" : "", rp ? "o.resolved_path" : "NULL");
    sqlite3_stmt *st = mg_db_prepare(db, sql);
    if (!st)
        return SQLITE_ERROR;
    char like1[16], like2[80];
    snprintf(like1, sizeof like1, "%%\"%.2s%%", p->pk); /* LIKE: ASCII case-insensitive */
    snprintf(like2, sizeof like2, "%%%s%%", p->pk);
    sqlite3_bind_text(st, 1, like1, -1, SQLITE_TRANSIENT);
    if (rp)
        sqlite3_bind_text(st, 2, like2, -1, SQLITE_TRANSIENT);
    int64_t tx = -1;
    char *best_path = NULL, *best_rp = NULL, *rp_fallback = NULL, *first_seen = NULL, *hash = NULL;
    int best_len = -1, rp_len = -1;
    int rc;
    for (;;) {
        rc = sqlite3_step(st);
        int64_t id = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -2;
        if (id != tx && tx >= 0) {
            add_tx(p, best_path, best_rp ? best_rp : rp_fallback, first_seen, hash);
            free(best_path), free(best_rp), free(rp_fallback), free(first_seen), free(hash);
            best_path = best_rp = rp_fallback = first_seen = hash = NULL;
            best_len = rp_len = -1;
        }
        if (rc != SQLITE_ROW)
            break;
        if (id != tx) {
            tx = id;
            hash = dup_or_empty((const char *)sqlite3_column_text(st, 1));
            first_seen = sqlite3_column_type(st, 2) == SQLITE_NULL
                             ? NULL
                             : dup_or_empty((const char *)sqlite3_column_text(st, 2));
        }
        const char *path = (const char *)sqlite3_column_text(st, 3);
        const char *res = (const char *)sqlite3_column_text(st, 4);
        int len = path_len(path);
        if (len > best_len) {
            best_len = len;
            free(best_path), free(best_rp);
            best_path = dup_or_empty(path);
            best_rp = res ? strdup(res) : NULL;
        }
        if (res && len > rp_len) {
            rp_len = len;
            free(rp_fallback);
            rp_fallback = strdup(res);
        }
    }
    free(best_path), free(best_rp), free(rp_fallback), free(first_seen), free(hash);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static void write_body(struct mg_buf *body, sqlite3_stmt *node, struct paths *p)
{
    if (p->n_groups > 1) /* qsort must not be given NULL, even for no element */
        qsort(p->groups, p->n_groups, sizeof *p->groups, by_recency);
    struct mg_json j;
    mg_json_init(&j, body);
    mg_json_object_begin(&j);
    mg_json_key(&j, "node");
    mg_json_object_begin(&j); /* Go's map: keys sorted */
    static const char *const keys[] = {"lat", "lon", "name", "public_key"};
    static const int cols[] = {2, 3, 1, 0};
    for (int i = 0; i < 4; i++) {
        mg_json_key(&j, keys[i]);
        mg_db_json_column(&j, node, cols[i]);
    }
    mg_json_object_end(&j);
    mg_json_key(&j, "paths");
    mg_json_array_begin(&j);
    for (size_t g = 0; g < p->n_groups && g < PATHS_MAX; g++) {
        const struct group *gr = &p->groups[g];
        mg_json_object_begin(&j);
        mg_json_key(&j, "hops");
        mg_json_raw(&j, gr->hops, strlen(gr->hops));
        mg_json_kv_int(&j, "count", gr->count);
        mg_json_kv_string(&j, "lastSeen", gr->last_seen[0] ? gr->last_seen : NULL);
        mg_json_kv_string(&j, "sampleHash", gr->sample_hash);
        mg_json_object_end(&j);
    }
    mg_json_array_end(&j);
    mg_json_kv_int(&j, "totalPaths", (int64_t)p->n_groups);
    mg_json_kv_int(&j, "totalTransmissions", p->transmissions);
    mg_json_object_end(&j);
    mg_buf_putc(body, '\n');
}

static void build(struct mg_cold_build *b, struct mg_db *db)
{
    const struct paths_args *a = (const struct paths_args *)b->args;
    struct paths p;
    memset(&p, 0, sizeof p);
    p.pk = a->pubkey;
    b->result = MG_COLD_ERROR;
    sqlite3_stmt *node =
        mg_db_prepare(db, "SELECT public_key, name, lat, lon FROM nodes WHERE public_key = ?1");
    int rc = node ? SQLITE_OK : SQLITE_ERROR;
    if (node) {
        sqlite3_bind_text(node, 1, a->pubkey, -1, SQLITE_STATIC);
        rc = sqlite3_step(node);
    }
    if (rc == SQLITE_DONE) {
        b->result = MG_COLD_NOT_FOUND;
    } else if (rc == SQLITE_ROW) {
        rc = mg_hop_nodes_load(db, &p.nodes);
        if (rc == SQLITE_OK)
            rc = scan(&p, db);
        if (rc == SQLITE_OK && p.oom)
            rc = SQLITE_NOMEM;
        if (rc == SQLITE_OK) {
            write_body(&b->body, node, &p);
            b->result = MG_COLD_OK;
        }
    }
    if (b->result == MG_COLD_ERROR) {
        b->busy = (rc & 0xff) == SQLITE_BUSY;
        snprintf(b->err, sizeof b->err, "paths: %s", sqlite3_errstr(rc));
    }
    sqlite3_finalize(node);
    for (size_t g = 0; g < p.n_groups; g++) {
        free(p.groups[g].sig);
        free(p.groups[g].hops);
        free(p.groups[g].last_seen);
        free(p.groups[g].sample_hash);
    }
    free(p.groups);
    mg_hop_nodes_free(&p.nodes);
}

static const struct mg_cold_report paths_report = {
    .name = "paths report",
    .not_found = "Not found",
    .bad_request = "invalid pubkey: expected 64 hex chars",
    .build = build,
};

bool mg_node_paths_is_heavy(struct mg_env *env, const struct mg_request *req)
{
    struct paths_args a;
    if (!mg_reach_parse_pubkey(req->path_param, a.pubkey))
        return false;
    char key[MG_CACHE_KEY_MAX];
    snprintf(key, sizeof key, "paths|%s", a.pubkey);
    return mg_cold_report_is_heavy(env, key);
}

enum mg_turn mg_handle_node_paths(struct mg_env *env, const struct mg_request *req,
                                  struct mg_response *res)
{
    struct paths_args a;
    memset(&a, 0, sizeof a);
    if (!mg_reach_parse_pubkey(req->path_param, a.pubkey)) {
        mg_response_error(res, 400, "invalid pubkey: expected 64 hex chars");
        return MG_DONE;
    }
    char key[MG_CACHE_KEY_MAX];
    snprintf(key, sizeof key, "paths|%s", a.pubkey);
    return mg_cold_report_serve(env, req, res, &paths_report, key, &a, sizeof a);
}

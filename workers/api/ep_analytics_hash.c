/* SPDX-License-Identifier: ISC */
/*
 * GET /api/analytics/hash-collisions[?region=A,B][&area=KEY]: which repeaters share a hash
 * prefix, as CoreScope's Analytics page shows them. Every node of the nodes table (by rowid,
 * as CoreScope reads them) with its hash size from the group's table of the week's ADVERTs
 * (node_hash_sizes.h, the one /api/nodes reads; 0 for a node that announced none):
 *   inconsistent_nodes  the repeaters and room servers whose size flip-flops;
 *   by_size["1"|"2"|"3"] for the repeaters of that size: their prefixes (the key's first 2,
 *       4 or 6 digits, upper case), each prefix held by two or more a collision with the
 *       greatest distance between those that have a position and its class (local under
 *       50 km, regional under 200, distant; incomplete with fewer than two positions), local
 *       first, then by how many share it (then by prefix, where CoreScope's order is random);
 *       stats (nodes, prefixes, the share of the space used); for 1 byte every cell 00..FF
 *       with its repeaters, the 2- and 3-byte ones by their first byte too (a 1-byte path
 *       hop matches them as well); for 2 bytes every first byte's cell with its 2-byte
 *       repeaters grouped by prefix.
 * region: only the nodes named by a transmission some observer of the region heard (its
 * ADVERT's key, and every observer that heard it); codes no observer has filter nothing, as in
 * CoreScope. area: only the nodes inside the configuration's area (none inside, or a key it
 * lacks: no filter). Hidden nodes count, as CoreScope counts them.
 *
 * Nodes and the hash sizes are a pass over nodes; a region adds one over the region's
 * observations. A cold report (cold_report.h), kept in the shared cache no longer than
 * CoreScope's 5-minute recompute (MESHGATE_REACH_CACHE_TTL_MS), light when warm.
 */
#include "buf.h"
#include "cold_report.h"
#include "corescope_config.h"
#include "json.h"
#include "node_hash_sizes.h"
#include "node_read.h"
#include "node_visibility.h"
#include "params.h"
#include "reach.h"
#include "router.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parameters, declared once (params.h) -------------------------------------------------- */

struct collisions_params {
    struct mg_param_list region;
    const char *area;
};
#define P(field) .offset = offsetof(struct collisions_params, field)
static const struct mg_param collisions_param_list[] = {
    {.name = "region",
     .kind = MG_PARAM_LIST,
     P(region),
     .flags = MG_LIST_SKIP_ALL,
     .corescope = "normalizeRegionCodes: trimmed, uppercased; ALL and blanks dropped; codes no "
                  "observer has: no filter"},
    {.name = "area",
     .kind = MG_PARAM_TEXT,
     P(area),
     .corescope = "a key the configuration's areas lack, or an area with no node: no filter"},
};
#undef P
const struct mg_param_table mg_hash_collisions_params =
    MG_PARAM_TABLE(struct collisions_params, collisions_param_list);

/* The report's arguments: the region's codes (upper case, comma-separated) and the area key,
 * each ended by '\0'. */
struct collisions_args {
    char codes[112];
    char area[MG_COLD_ARGS_BYTES - 112];
};

/* The request's arguments; false when they do not fit (400). */
static bool collisions_args_of(const struct mg_request *req, struct collisions_args *a)
{
    memset(a, 0, sizeof *a);
    struct collisions_params own;
    const struct collisions_params *p = mg_params_get(&mg_hash_collisions_params, req, NULL, &own);
    if (!p)
        return false;
    struct mg_list_item items[MG_PARAM_LIST_MAX];
    int n = p->region.text
                ? mg_param_list_split(p->region.text, MG_LIST_SKIP_ALL, items, MG_PARAM_LIST_MAX)
                : 0;
    size_t used = 0;
    for (int k = 0; k < n && k < MG_PARAM_LIST_MAX; k++) {
        if (used + items[k].len + 2 > sizeof a->codes)
            return false;
        if (used)
            a->codes[used++] = ',';
        for (size_t i = 0; i < items[k].len; i++)
            a->codes[used++] = (char)toupper((unsigned char)items[k].ptr[i]);
    }
    /* An area the configuration lacks filters nothing: the same report as none. */
    if (p->area && mg_corescope_area(mg_corescope_current(), p->area)) {
        if (strlen(p->area) >= sizeof a->area)
            return false;
        memcpy(a->area, p->area, strlen(p->area) + 1);
    }
    return true;
}

/* ---- the nodes ------------------------------------------------------------------------------- */

struct cnode {
    char *key, *name, *role;
    double lat, lon;
    int hash_size;
    bool inconsistent;
    unsigned seen_mask;
    bool repeater; /* role is exactly "repeater" */
};

struct cnodes {
    struct cnode *v;
    size_t n, cap;
};

static void cnodes_free(struct cnodes *c)
{
    for (size_t i = 0; i < c->n; i++)
        free(c->v[i].key), free(c->v[i].name), free(c->v[i].role);
    free(c->v);
}

static char *text_dup(sqlite3_stmt *st, int col)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    return strdup(t ? (const char *)t : "");
}

/* The region's observers: an iata that is one of the codes (trimmed, upper case; one with a
 * comma in it is none of them, as no code has one). */
#define REGION_OBSERVERS                                                                           \
    "SELECT rowid FROM observers WHERE instr(iata, ',') = 0"                                       \
    " AND instr(',' || ?1 || ',', ',' || upper(trim(iata)) || ',') > 0"

/* The region's keys (unsorted): ADVERT keys of the transmissions its observers heard, and the
 * observers that heard them. *filter false when no observer has one of the codes. */
static int region_keys(struct mg_db *db, const char *codes, char ***keys, size_t *n, bool *filter)
{
    *keys = NULL, *n = 0, *filter = false;
    sqlite3_stmt *st = mg_db_prepare(db, "SELECT count(*) FROM (" REGION_OBSERVERS ")");
    if (!st)
        return sqlite3_errcode(db->conn);
    sqlite3_bind_text(st, 1, codes, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    *filter = rc == SQLITE_ROW && sqlite3_column_int64(st, 0) > 0;
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW || !*filter)
        return rc == SQLITE_ROW ? SQLITE_OK : rc;
    /* Distinct keys only: a region's transmissions name a few thousand keys many times. */
    st = mg_db_prepare(
        db, "WITH tx(id) AS MATERIALIZED (SELECT DISTINCT transmission_id FROM observations"
            " WHERE observer_idx IN (" REGION_OBSERVERS ")),"
            " named(id, d) AS (SELECT id, decoded_json FROM transmissions"
            " WHERE id IN (SELECT id FROM tx) AND json_valid(decoded_json))"
            " SELECT DISTINCT k FROM (SELECT CASE WHEN json_type(d, '$.pubKey') = 'text'"
            " THEN d ->> '$.pubKey' END AS k FROM named UNION ALL"
            " SELECT CASE WHEN json_type(d, '$.public_key') = 'text' THEN d ->> '$.public_key'"
            " END FROM named UNION ALL SELECT obs.id FROM observations o JOIN observers obs"
            " ON obs.rowid = o.observer_idx WHERE o.transmission_id IN (SELECT id FROM tx))"
            " WHERE k IS NOT NULL AND k <> ''");
    if (!st)
        return sqlite3_errcode(db->conn);
    sqlite3_bind_text(st, 1, codes, -1, SQLITE_STATIC);
    size_t cap = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? cap * 2 : 256;
            char **more = realloc(*keys, cap * sizeof *more);
            if (!more) {
                rc = SQLITE_NOMEM;
                break;
            }
            *keys = more;
        }
        if (!((*keys)[*n] = strdup((const char *)sqlite3_column_text(st, 0)))) {
            rc = SQLITE_NOMEM;
            break;
        }
        (*n)++;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int by_text(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void keys_free(char **keys, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(keys[i]);
    free(keys);
}

/* Every node (by rowid), filtered by the region's keys and the area, with its hash size. */
static int read_cnodes(struct mg_db *db, const struct collisions_args *a, struct cnodes *out)
{
    char **region = NULL;
    size_t n_region = 0;
    bool by_region = false;
    int rc = a->codes[0] ? region_keys(db, a->codes, &region, &n_region, &by_region) : SQLITE_OK;
    if (rc != SQLITE_OK)
        return rc;
    if (n_region > 1)
        qsort(region, n_region, sizeof *region, by_text);
    struct mg_area_nodes area;
    if ((rc = mg_area_nodes_load(db->conn, a->area, &area)) != SQLITE_OK) {
        keys_free(region, n_region);
        return rc;
    }
    sqlite3_stmt *st = mg_db_prepare(db, "SELECT public_key, name, role, coalesce(lat, 0),"
                                         " coalesce(lon, 0) FROM nodes ORDER BY rowid");
    rc = st ? SQLITE_OK : sqlite3_errcode(db->conn);
    mg_node_hash_sizes_read_begin();
    while (rc == SQLITE_OK) {
        int step = sqlite3_step(st);
        if (step != SQLITE_ROW) {
            rc = step == SQLITE_DONE ? SQLITE_OK : step;
            break;
        }
        const char *key = (const char *)sqlite3_column_text(st, 0);
        key = key ? key : "";
        if (by_region && !(n_region && bsearch(&key, region, n_region, sizeof *region, by_text)))
            continue;
        if (mg_area_nodes_filter(&area) && !mg_area_nodes_has(&area, key))
            continue;
        if (out->n == out->cap) {
            size_t cap = out->cap ? out->cap * 2 : 256;
            struct cnode *more = realloc(out->v, cap * sizeof *more);
            if (!more) {
                rc = SQLITE_NOMEM;
                break;
            }
            out->v = more, out->cap = cap;
        }
        struct cnode *c = &out->v[out->n];
        *c = (struct cnode){.key = strdup(key),
                            .name = text_dup(st, 1),
                            .role = text_dup(st, 2),
                            .lat = sqlite3_column_double(st, 3),
                            .lon = sqlite3_column_double(st, 4)};
        out->n++;
        if (!c->key || !c->name || !c->role) {
            rc = SQLITE_NOMEM;
            break;
        }
        c->repeater = strcmp(c->role, "repeater") == 0;
        struct mg_node_hash_sizes hs;
        if (mg_node_hash_sizes_lookup(key, &hs) && hs.known) {
            c->hash_size = hs.size;
            c->inconsistent = hs.inconsistent;
            c->seen_mask = hs.seen_mask;
        }
    }
    mg_node_hash_sizes_read_end();
    sqlite3_finalize(st);
    mg_area_nodes_free(&area);
    keys_free(region, n_region);
    return rc;
}

/* ---- the answer ------------------------------------------------------------------------------ */

static void write_cnode(struct mg_json *j, const struct cnode *c)
{
    mg_json_object_begin(j);
    mg_json_kv_string(j, "public_key", c->key);
    mg_json_kv_string(j, "name", c->name);
    mg_json_kv_string(j, "role", c->role);
    mg_json_kv_double(j, "lat", c->lat);
    mg_json_kv_double(j, "lon", c->lon);
    mg_json_kv_int(j, "hash_size", c->hash_size);
    mg_json_kv_bool(j, "hash_size_inconsistent", c->inconsistent);
    if (__builtin_popcount(c->seen_mask) > 1) {
        mg_json_key(j, "hash_sizes_seen");
        mg_json_array_begin(j);
        for (int s = 0; s < 32; s++)
            if (c->seen_mask & (1u << s))
                mg_json_int(j, s);
        mg_json_array_end(j);
    }
    mg_json_object_end(j);
}

/* A repeater's prefix of a size: upper case, with the node's index. */
struct prefixed {
    char prefix[8];
    size_t node;
};

static int by_prefix(const void *a, const void *b)
{
    const struct prefixed *x = a, *y = b;
    int c = strcmp(x->prefix, y->prefix);
    return c ? c : (x->node < y->node ? -1 : x->node > y->node);
}

struct collision {
    const struct prefixed *first; /* its nodes: first[0..appearances) */
    size_t appearances, with_coords;
    double max_km;
    int class; /* 0 local, 1 regional, 2 distant, 3 incomplete */
};

static const char *const classes[] = {"local", "regional", "distant", "incomplete"};

static int by_class(const void *a, const void *b)
{
    const struct collision *x = a, *y = b;
    if (x->class != y->class)
        return x->class < y->class ? -1 : 1;
    if (x->appearances != y->appearances)
        return x->appearances > y->appearances ? -1 : 1;
    return strcmp(x->first->prefix, y->first->prefix);
}

static bool located(const struct cnode *c)
{
    return c->lat != 0 || c->lon != 0;
}

static void measure(const struct cnodes *nodes, struct collision *col)
{
    col->max_km = 0;
    col->with_coords = 0;
    for (size_t i = 0; i < col->appearances; i++) {
        const struct cnode *x = &nodes->v[col->first[i].node];
        if (!located(x))
            continue;
        col->with_coords++;
        for (size_t k = i + 1; k < col->appearances; k++) {
            const struct cnode *y = &nodes->v[col->first[k].node];
            if (!located(y))
                continue;
            double d = mg_haversine_km(x->lat, x->lon, y->lat, y->lon);
            if (d > col->max_km)
                col->max_km = d;
        }
    }
    col->class = col->with_coords < 2 ? 3 : col->max_km < 50 ? 0 : col->max_km < 200 ? 1 : 2;
}

static bool is_upper_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'A' && s[i] <= 'F')))
            return false;
    return true;
}

static void upper_prefix(const char *key, size_t digits, char *out)
{
    for (size_t i = 0; i < digits; i++)
        out[i] = (char)toupper((unsigned char)key[i]);
    out[digits] = '\0';
}

/* The 1-byte cells: each first byte's 1-byte repeaters (p, sorted), then its 2- and 3-byte
 * repeaters in node order. */
static void write_one_byte_cells(struct mg_json *j, const struct cnodes *nodes,
                                 const struct prefixed *p, size_t n)
{
    mg_json_key(j, "one_byte_cells");
    mg_json_object_begin(j);
    size_t at = 0;
    for (unsigned cell = 0; cell < 256; cell++) {
        char hex[3];
        snprintf(hex, sizeof hex, "%02X", cell);
        while (at < n && strcmp(p[at].prefix, hex) < 0)
            at++;
        mg_json_key(j, hex);
        mg_json_array_begin(j);
        for (; at < n && strcmp(p[at].prefix, hex) == 0; at++)
            write_cnode(j, &nodes->v[p[at].node]);
        for (size_t i = 0; i < nodes->n; i++) {
            const struct cnode *c = &nodes->v[i];
            char first[3];
            if (!c->repeater || (c->hash_size != 2 && c->hash_size != 3) || strlen(c->key) < 2)
                continue;
            upper_prefix(c->key, 2, first);
            if (strcmp(first, hex) == 0)
                write_cnode(j, c);
        }
        mg_json_array_end(j);
    }
    mg_json_object_end(j);
}

static int by_node(const void *a, const void *b)
{
    const struct prefixed *x = a, *y = b;
    return x->node < y->node ? -1 : x->node > y->node;
}

/* The 2-byte cells: each first byte's 2-byte repeaters (p, sorted by prefix), in node order,
 * and by their 2-byte prefix. */
static bool write_two_byte_cells(struct mg_json *j, const struct cnodes *nodes,
                                 const struct prefixed *p, size_t n)
{
    struct prefixed *group = malloc((n ? n : 1) * sizeof *group);
    if (!group)
        return false;
    mg_json_key(j, "two_byte_cells");
    mg_json_object_begin(j);
    size_t at = 0;
    for (unsigned cell = 0; cell < 256; cell++) {
        char hex[3];
        snprintf(hex, sizeof hex, "%02X", cell);
        while (at < n && strncmp(p[at].prefix, hex, 2) < 0)
            at++;
        size_t end = at;
        while (end < n && strncmp(p[end].prefix, hex, 2) == 0)
            end++;
        memcpy(group, p + at, (end - at) * sizeof *group);
        if (end - at > 1)
            qsort(group, end - at, sizeof *group, by_node);
        mg_json_key(j, hex);
        mg_json_object_begin(j);
        mg_json_key(j, "group_nodes");
        mg_json_array_begin(j);
        for (size_t i = 0; i < end - at; i++)
            write_cnode(j, &nodes->v[group[i].node]);
        mg_json_array_end(j);
        mg_json_key(j, "two_byte_map");
        mg_json_object_begin(j);
        int64_t max = 0, collisions = 0;
        for (size_t i = at; i < end;) {
            size_t k = i;
            while (k < end && strcmp(p[k].prefix, p[i].prefix) == 0)
                k++;
            mg_json_key(j, p[i].prefix);
            mg_json_array_begin(j);
            for (size_t m = i; m < k; m++)
                write_cnode(j, &nodes->v[p[m].node]);
            mg_json_array_end(j);
            if (k - i > 1) {
                collisions++;
                if ((int64_t)(k - i) > max)
                    max = (int64_t)(k - i);
            }
            i = k;
        }
        mg_json_object_end(j);
        mg_json_kv_int(j, "max_collision", max);
        mg_json_kv_int(j, "collision_count", collisions);
        mg_json_object_end(j);
        at = end;
    }
    mg_json_object_end(j);
    free(group);
    return true;
}

/* One size's entry of by_size; false when memory ran out. */
static bool write_size(struct mg_json *j, const struct cnodes *nodes, int bytes)
{
    size_t digits = (size_t)bytes * 2, n = 0, for_byte = 0, using = 0;
    struct prefixed *p = malloc((nodes->n ? nodes->n : 1) * sizeof *p);
    struct collision *cols = malloc((nodes->n ? nodes->n : 1) * sizeof *cols);
    if (!p || !cols) {
        free(p), free(cols);
        return false;
    }
    for (size_t i = 0; i < nodes->n; i++) {
        const struct cnode *c = &nodes->v[i];
        using += c->hash_size == bytes;
        if (c->hash_size != bytes || !c->repeater)
            continue;
        for_byte++;
        if (strlen(c->key) < digits)
            continue;
        upper_prefix(c->key, digits, p[n].prefix);
        p[n++].node = i;
    }
    if (n > 1)
        qsort(p, n, sizeof *p, by_prefix);
    size_t unique = 0, n_cols = 0;
    for (size_t i = 0; i < n;) {
        size_t k = i;
        while (k < n && strcmp(p[k].prefix, p[i].prefix) == 0)
            k++;
        unique++;
        if (k - i > 1) {
            cols[n_cols] = (struct collision){.first = &p[i], .appearances = k - i};
            measure(nodes, &cols[n_cols++]);
        }
        i = k;
    }
    if (n_cols > 1)
        qsort(cols, n_cols, sizeof *cols, by_class);
    double space = bytes == 1 ? 256.0 : bytes == 2 ? 65536.0 : 16777216.0;

    char name[2] = {(char)('0' + bytes), '\0'};
    mg_json_key(j, name);
    mg_json_object_begin(j);
    mg_json_key(j, "collisions");
    mg_json_array_begin(j);
    for (size_t c = 0; c < n_cols; c++) {
        mg_json_object_begin(j);
        mg_json_kv_string(j, "prefix", cols[c].first->prefix);
        mg_json_kv_int(j, "byte_size", bytes);
        mg_json_kv_int(j, "appearances", (int64_t)cols[c].appearances);
        mg_json_key(j, "nodes");
        mg_json_array_begin(j);
        for (size_t m = 0; m < cols[c].appearances; m++)
            write_cnode(j, &nodes->v[cols[c].first[m].node]);
        mg_json_array_end(j);
        mg_json_kv_double(j, "max_dist_km", cols[c].max_km);
        mg_json_kv_string(j, "classification", classes[cols[c].class]);
        mg_json_kv_int(j, "with_coords", (int64_t)cols[c].with_coords);
        mg_json_object_end(j);
    }
    mg_json_array_end(j);
    if (bytes == 1)
        write_one_byte_cells(j, nodes, p, n);
    mg_json_key(j, "stats");
    mg_json_object_begin(j);
    mg_json_kv_int(j, "collision_count", (int64_t)n_cols);
    mg_json_kv_int(j, "nodes_for_byte", (int64_t)for_byte);
    mg_json_kv_double(j, "pct_used", (double)unique / space * 100);
    mg_json_kv_int(j, "space_size", (int64_t)space);
    mg_json_kv_int(j, "total_nodes", (int64_t)nodes->n);
    mg_json_kv_int(j, "unique_prefixes", (int64_t)unique);
    mg_json_kv_int(j, "using_this_size", (int64_t) using);
    mg_json_object_end(j);
    bool ok = true;
    if (bytes == 2) {
        /* Only well-formed first bytes have a cell: the others are left out of p's walk by
         * strncmp against "00".."FF" (a prefix such as "ZZ01" sorts after them all). */
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (is_upper_hex(p[i].prefix, 2))
                p[m++] = p[i];
        ok = write_two_byte_cells(j, nodes, p, m);
    }
    mg_json_object_end(j);
    free(p), free(cols);
    return ok;
}

static int collisions_body(struct mg_db *db, const struct collisions_args *a, struct mg_buf *body)
{
    struct cnodes nodes = {0};
    int rc = read_cnodes(db, a, &nodes);
    if (rc == SQLITE_OK) {
        struct mg_json j;
        mg_json_init(&j, body);
        mg_json_object_begin(&j);
        mg_json_key(&j, "by_size");
        mg_json_object_begin(&j);
        for (int bytes = 1; bytes <= 3 && rc == SQLITE_OK; bytes++)
            if (!write_size(&j, &nodes, bytes))
                rc = SQLITE_NOMEM;
        mg_json_object_end(&j);
        mg_json_key(&j, "inconsistent_nodes");
        mg_json_array_begin(&j);
        for (size_t i = 0; i < nodes.n; i++)
            if (nodes.v[i].inconsistent &&
                (nodes.v[i].repeater || strcmp(nodes.v[i].role, "room_server") == 0))
                write_cnode(&j, &nodes.v[i]);
        mg_json_array_end(&j);
        mg_json_object_end(&j);
        mg_buf_putc(body, '\n');
    }
    cnodes_free(&nodes);
    return rc;
}

static void collisions_build(struct mg_cold_build *b, struct mg_db *db)
{
    struct collisions_args a;
    memcpy(&a, b->args, sizeof a);
    bool began = mg_node_read_begin(db);
    int rc = collisions_body(db, &a, &b->body);
    mg_node_read_end(db, began);
    mg_cold_result(b, rc, "the nodes");
}

static const struct mg_cold_report collisions_report = {
    .name = "hash collisions",
    .not_found = "Not found",
    .bad_request = "bad request",
    .build = collisions_build,
    .needs = MG_COLD_NEEDS_HASH_SIZES,
};

/* The key: the codes, the area, and the configuration (its areas). */
static void collisions_key(const struct collisions_args *a, char *key, size_t cap)
{
    snprintf(key, cap, "analytics|hash-collisions|%lu|%s|%s", mg_corescope_current()->generation,
             a->codes, a->area);
}

bool mg_hash_collisions_is_heavy(struct mg_env *env, const struct mg_request *req)
{
    struct collisions_args a;
    if (!collisions_args_of(req, &a))
        return false; /* answered 400 at once */
    char key[MG_COLD_ARGS_BYTES + 64];
    collisions_key(&a, key, sizeof key);
    return mg_cold_report_is_heavy(env, key);
}

enum mg_turn mg_handle_hash_collisions(struct mg_env *env, const struct mg_request *req,
                                       struct mg_response *res)
{
    struct collisions_args a;
    if (!collisions_args_of(req, &a)) {
        mg_response_error(res, 400, "region: at most %zu bytes of codes", sizeof a.codes - 1);
        return MG_DONE;
    }
    char key[MG_COLD_ARGS_BYTES + 64];
    collisions_key(&a, key, sizeof key);
    return mg_cold_report_serve(env, req, res, &collisions_report, key, &a, sizeof a);
}

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
 * With from_node or observer (context for CoreScope's neighbour-affinity and geographic
 * tiers, built from its in-memory neighbour graph) the answer is 501: meshgate does not build
 * that graph, and a pick without it could differ from CoreScope's.
 *
 * Light: one pass over the nodes (and the few non-relaying observers), whatever the hops.
 */
#include "json.h"
#include "params.h"
#include "router.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#define PREFIX_MAX 8 /* CoreScope's maxPrefixLen */

struct node {
    char *key;   /* as stored */
    char *lower; /* lowercased */
    char *name;  /* "" when NULL */
    double lat, lon;
    bool has_gps;
    int64_t adverts;
};

struct nodes {
    struct node *v;
    size_t len, cap;
};

static void nodes_free(struct nodes *n)
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
static int load_nodes(struct mg_db *db, struct nodes *out)
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
            struct node *grown = realloc(out->v, cap * sizeof *grown);
            if (!grown) {
                rc = SQLITE_NOMEM;
                break;
            }
            out->v = grown, out->cap = cap;
        }
        struct node *n = &out->v[out->len];
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

static bool names_hop(const struct node *n, const char *hop, size_t len)
{
    if (len >= 2 && len <= PREFIX_MAX)
        return strncmp(n->lower, hop, len) == 0;
    return strlen(n->lower) > PREFIX_MAX && strcmp(n->lower, hop) == 0;
}

/* CoreScope's tiebreak: more adverts, then the smaller key. */
static bool better(const struct node *a, const struct node *b)
{
    if (a->adverts != b->adverts)
        return a->adverts > b->adverts;
    return strcmp(a->key, b->key) < 0;
}

static void write_candidate(struct mg_json *j, const struct node *n)
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
    mg_json_kv_null(j, "affinityScore");
    mg_json_object_end(j);
}

static void write_candidates(struct mg_json *j, const char *key, const struct nodes *all,
                             const size_t *match, size_t count)
{
    mg_json_key(j, key);
    mg_json_array_begin(j);
    for (size_t i = 0; i < count; i++)
        write_candidate(j, &all->v[match[i]]);
    mg_json_array_end(j);
}

static void write_resolution(struct mg_json *j, const struct nodes *all, const char *hop,
                             size_t *match)
{
    char *lower = lower_dup(hop);
    size_t len = lower ? strlen(lower) : 0, count = 0;
    for (size_t i = 0; lower && i < all->len; i++)
        if (names_hop(&all->v[i], lower, len))
            match[count++] = i;
    free(lower);
    mg_json_object_begin(j); /* CoreScope's order; empty pubkey, ambiguous omitted */
    if (count == 0) {
        mg_json_kv_null(j, "name");
        write_candidates(j, "candidates", all, match, 0);
        write_candidates(j, "conflicts", all, match, 0);
        mg_json_kv_string(j, "confidence", "no_match");
    } else if (count == 1) {
        const struct node *n = &all->v[match[0]];
        mg_json_key(j, "name");
        if (n->name[0])
            mg_json_string(j, n->name);
        else
            mg_json_null(j);
        mg_json_kv_string(j, "pubkey", n->key);
        write_candidates(j, "candidates", all, match, 1);
        write_candidates(j, "conflicts", all, match, 0);
        mg_json_kv_string(j, "confidence", "unique_prefix");
    } else {
        const struct node *pick = NULL;
        for (size_t i = 0; i < count; i++) {
            const struct node *n = &all->v[match[i]];
            if (n->has_gps && (!pick || better(n, pick)))
                pick = n;
        }
        const char *confidence = "gps_preference";
        if (!pick) {
            confidence = "observation_count_fallback";
            pick = &all->v[match[0]];
            for (size_t i = 1; i < count; i++)
                if (better(&all->v[match[i]], pick))
                    pick = &all->v[match[i]];
        }
        mg_json_kv_string(j, "name", pick->name);
        mg_json_kv_string(j, "pubkey", pick->key);
        mg_json_kv_bool(j, "ambiguous", true);
        write_candidates(j, "candidates", all, match, count);
        write_candidates(j, "conflicts", all, match, count);
        mg_json_kv_string(j, "confidence", confidence);
    }
    mg_json_object_end(j);
}

static int compare_strings(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void mg_handle_resolve_hops(struct mg_env *env, const struct mg_request *req,
                            struct mg_response *res)
{
    const char *from = mg_param_str(req, "from_node"), *observer = mg_param_str(req, "observer");
    if (from || observer) {
        mg_response_error(res, 501,
                          "from_node and observer are not supported: CoreScope disambiguates "
                          "with them from its in-memory neighbour graph, which meshgate does "
                          "not build; ask without them");
        return;
    }
    const char *hops = mg_param_str(req, "hops");
    /* The hops, split on commas, empty ones dropped, sorted (the keys of CoreScope's map) and
     * each once. */
    char *copy = strdup(hops ? hops : "");
    size_t n = 0, cap = 1;
    for (const char *p = copy; p && *p; p++)
        cap += *p == ',';
    char **list = calloc(cap, sizeof *list);
    if (!copy || !list) {
        free(copy);
        free(list);
        mg_response_error(res, 500, "out of memory");
        return;
    }
    for (char *save = NULL, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
        list[n++] = t;
    qsort(list, n, sizeof *list, compare_strings);

    struct nodes all = {0};
    int rc = n ? load_nodes(env->db, &all) : SQLITE_OK;
    size_t *match = all.len ? calloc(all.len, sizeof *match) : NULL;
    if (rc == SQLITE_OK && all.len && !match)
        rc = SQLITE_NOMEM;
    if (rc == SQLITE_OK) {
        mg_response_json(res, 200);
        struct mg_json j;
        mg_json_init(&j, &res->body);
        mg_json_object_begin(&j);
        mg_json_key(&j, "resolved");
        mg_json_object_begin(&j);
        for (size_t i = 0; i < n; i++) {
            if (i > 0 && strcmp(list[i], list[i - 1]) == 0)
                continue;
            mg_json_key(&j, list[i]);
            write_resolution(&j, &all, list[i], match);
        }
        mg_json_object_end(&j);
        mg_json_object_end(&j);
        mg_buf_putc(&res->body, '\n');
    } else {
        mg_response_db_failure(res, "the nodes", rc);
    }
    free(match);
    nodes_free(&all);
    free(list);
    free(copy);
}

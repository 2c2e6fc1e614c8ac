/* SPDX-License-Identifier: ISC */
#include "node_visibility.h"

#include "corescope_config.h"

#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A blacklist as an open-addressed set (a power of two of slots, at most half full),
 * pointing into the configuration's strings (trimmed and lowercased by the loader). */
struct key_set {
    const char **slot;
    size_t mask;
    size_t longest; /* the longest key's length */
};

/* The rules of one configuration: its node and its observer blacklists. */
static struct {
    unsigned long generation;
    const struct mg_corescope_config *c;
    struct key_set nodes, observers;
} rules;

static uint64_t hash_key(const char *k, size_t n)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)k[i]) * 1099511628211ULL;
    return h;
}

/* (Out of memory: an empty set, which hides nothing.) */
static void key_set_build(struct key_set *set, char *const *keys, size_t count)
{
    free(set->slot);
    memset(set, 0, sizeof *set);
    size_t n = 4;
    while (n < 2 * count)
        n *= 2;
    if (!count || !(set->slot = calloc(n, sizeof *set->slot)))
        return;
    set->mask = n - 1;
    for (size_t i = 0; i < count; i++) {
        size_t len = strlen(keys[i]);
        if (len > set->longest)
            set->longest = len;
        size_t at = hash_key(keys[i], len) & set->mask;
        while (set->slot[at] && strcmp(set->slot[at], keys[i]) != 0)
            at = (at + 1) & set->mask;
        set->slot[at] = keys[i];
    }
}

/* Whether key, trimmed and lowercased as CoreScope compares it, is in the set. */
static bool key_set_has(const struct key_set *set, const char *key)
{
    if (!key || !set->slot)
        return false;
    while (isspace((unsigned char)*key))
        key++;
    size_t n = strlen(key);
    while (n > 0 && isspace((unsigned char)key[n - 1]))
        n--;
    if (n == 0 || n > set->longest)
        return false; /* longer than every configured key */
    char stack[160], *lower = n < sizeof stack ? stack : malloc(n + 1);
    if (!lower)
        return false;
    for (size_t i = 0; i < n; i++)
        lower[i] = (char)tolower((unsigned char)key[i]);
    lower[n] = '\0';
    bool found = false;
    for (size_t at = hash_key(lower, n) & set->mask; !found && set->slot[at];
         at = (at + 1) & set->mask)
        found = strcmp(set->slot[at], lower) == 0;
    if (lower != stack)
        free(lower);
    return found;
}

/* The rules of the configuration this process serves, rebuilt when it changed. */
static const struct mg_corescope_config *current(void)
{
    const struct mg_corescope_config *c = mg_corescope_current();
    if (rules.c == c && rules.generation == c->generation)
        return c;
    key_set_build(&rules.nodes, c->blacklist, c->blacklist_count);
    key_set_build(&rules.observers, c->observer_blacklist, c->observer_blacklist_count);
    rules.c = c;
    rules.generation = c->generation;
    return c;
}

bool mg_node_visibility_hides(void)
{
    const struct mg_corescope_config *c = current();
    return c->blacklist_count > 0 || c->hidden_prefix_count > 0;
}

bool mg_node_visibility_active(void)
{
    return mg_node_visibility_hides() || current()->has_geo_filter;
}

static bool blacklisted(const char *key)
{
    current();
    return key_set_has(&rules.nodes, key);
}

bool mg_observer_hidden(const char *id)
{
    current();
    return key_set_has(&rules.observers, id);
}

static bool name_hidden(const char *name)
{
    const struct mg_corescope_config *c = current();
    if (!name)
        name = "";
    for (size_t i = 0; i < c->hidden_prefix_count; i++)
        if (strncmp(name, c->hidden_prefixes[i], strlen(c->hidden_prefixes[i])) == 0)
            return true;
    return false;
}

bool mg_node_hidden(const char *key, const char *name)
{
    return blacklisted(key) || name_hidden(name);
}

bool mg_node_listed(const char *key, const char *name, bool located, double lat, double lon,
                    bool foreign)
{
    if (mg_node_hidden(key, name))
        return false;
    return foreign || !located || mg_corescope_geo_passes(current(), lat, lon);
}

/* ---- SQL ---- */

static void sql_hidden(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    sqlite3_result_int(ctx, mg_node_hidden((const char *)sqlite3_value_text(argv[0]),
                                           (const char *)sqlite3_value_text(argv[1])));
}

static void sql_listed(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    bool located =
        sqlite3_value_type(argv[2]) != SQLITE_NULL && sqlite3_value_type(argv[3]) != SQLITE_NULL;
    sqlite3_result_int(ctx,
                       mg_node_listed((const char *)sqlite3_value_text(argv[0]),
                                      (const char *)sqlite3_value_text(argv[1]), located,
                                      sqlite3_value_double(argv[2]), sqlite3_value_double(argv[3]),
                                      sqlite3_value_int64(argv[4]) != 0));
}

static bool in_area(const struct mg_corescope_area *a, bool located, double lat, double lon)
{
    return a && located && !(lat == 0 && lon == 0) && mg_corescope_area_holds(a, lat, lon);
}

static void sql_in_area(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    const char *key = (const char *)sqlite3_value_text(argv[2]);
    bool located =
        sqlite3_value_type(argv[0]) != SQLITE_NULL && sqlite3_value_type(argv[1]) != SQLITE_NULL;
    sqlite3_result_int(ctx, key && in_area(mg_corescope_area(current(), key), located,
                                           sqlite3_value_double(argv[0]),
                                           sqlite3_value_double(argv[1])));
}

int mg_node_visibility_register(sqlite3 *conn)
{
    /* Not deterministic: the same row's answer changes with the configuration (tests load
     * another one into the same process). */
    int rc = sqlite3_create_function(conn, "meshgate_node_hidden", 2, SQLITE_UTF8, NULL, sql_hidden,
                                     NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_create_function(conn, "meshgate_node_listed", 5, SQLITE_UTF8, NULL, sql_listed,
                                     NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_create_function(conn, "meshgate_in_area", 3, SQLITE_UTF8, NULL, sql_in_area,
                                     NULL, NULL);
    return rc;
}

const char *mg_node_listed_sql(bool has_foreign_column)
{
    return has_foreign_column ? "meshgate_node_listed(public_key, name, lat, lon, "
                                "coalesce(foreign_advert <> 0, 0))"
                              : "meshgate_node_listed(public_key, name, lat, lon, 0)";
}

/* ---- areas ---- */

static int by_key(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void mg_area_nodes_free(struct mg_area_nodes *a)
{
    for (size_t i = 0; i < a->n; i++)
        free(a->key[i]);
    free(a->key);
    a->key = NULL;
    a->n = 0;
}

int mg_area_nodes_load(sqlite3 *conn, const char *key, struct mg_area_nodes *out)
{
    memset(out, 0, sizeof *out);
    if (!key || !key[0] || !mg_corescope_area(current(), key))
        return SQLITE_OK;
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(conn,
                                "SELECT public_key FROM nodes WHERE public_key IS NOT NULL AND"
                                " meshgate_in_area(lat, lon, ?1)",
                                -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    size_t cap = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (out->n == cap) {
            cap = cap ? 2 * cap : 64;
            char **more = realloc(out->key, cap * sizeof *more);
            if (!more) {
                rc = SQLITE_NOMEM;
                break;
            }
            out->key = more;
        }
        if (!(out->key[out->n] = strdup((const char *)sqlite3_column_text(st, 0)))) {
            rc = SQLITE_NOMEM;
            break;
        }
        out->n++;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        mg_area_nodes_free(out);
        return rc;
    }
    if (out->n)
        qsort(out->key, out->n, sizeof *out->key, by_key);
    return SQLITE_OK;
}

bool mg_area_nodes_filter(const struct mg_area_nodes *a)
{
    return a->n > 0;
}

bool mg_area_nodes_has(const struct mg_area_nodes *a, const char *key)
{
    return key && a->n && bsearch(&key, a->key, a->n, sizeof *a->key, by_key);
}

/* ---- the node a key names ---- */

/*
 * Whether the node the key names is hidden by its name: the node whose key is key, or (when
 * short is set and there is none) the one node whose key starts with it. A node not found is
 * not hidden here (the route answers for it). An SQLite code; *hidden set.
 */
static int named_node_hidden(sqlite3 *conn, const char *key, bool by_prefix, bool *hidden)
{
    *hidden = false;
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(conn, "SELECT public_key, name FROM nodes WHERE public_key = ?1",
                                -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *hidden = mg_node_hidden((const char *)sqlite3_column_text(st, 0),
                                 (const char *)sqlite3_column_text(st, 1));
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE || !by_prefix)
        return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
    /* Hex digits sort below 'g': the keys that start with a lowercase hex prefix p are those
     * in [p, p || 'g'), a range of the primary key's index. */
    rc = sqlite3_prepare_v2(conn,
                            "SELECT public_key, name FROM nodes WHERE public_key >= ?1"
                            " AND public_key < ?1 || 'g' LIMIT 2",
                            -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    int rows = 0;
    bool first_hidden = false;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        if (rows++ == 0)
            first_hidden = mg_node_hidden((const char *)sqlite3_column_text(st, 0),
                                          (const char *)sqlite3_column_text(st, 1));
    sqlite3_finalize(st);
    *hidden = rows == 1 && first_hidden; /* two: ambiguous, the route answers 409 */
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

int mg_node_key_hidden(sqlite3 *conn, const char *key, bool by_prefix, bool *hidden)
{
    *hidden = blacklisted(key);
    return *hidden ? SQLITE_OK : named_node_hidden(conn, key, by_prefix, hidden);
}

/* SPDX-License-Identifier: ISC */
#include "node_hash_sizes.h"

#include "group_table.h"
#include "log.h"
#include "process_table.h"
#include "result_cache.h"
#include "table_stats.h"
#include "time_parse.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct node_sizes {
    char *key;
    struct mg_node_hash_sizes hs;
};

struct table {
    struct node_sizes *nodes; /* sorted by key */
    size_t count;
};

/* The week's ADVERTs with the key they name; ?1 the cutoff. */
static const char adverts_sql[] =
    "SELECT key, raw_hex, first_seen, id FROM (SELECT CASE WHEN NOT json_valid(decoded_json)"
    " THEN NULL WHEN json_type(decoded_json, '$.pubKey') = 'text' THEN decoded_json ->> '$.pubKey'"
    " WHEN json_type(decoded_json, '$.public_key') = 'text'"
    " THEN decoded_json ->> '$.public_key' END AS key, raw_hex, first_seen, id"
    " FROM transmissions WHERE payload_type = 4"
    " AND (first_seen IS NULL OR first_seen = '' OR first_seen >= ?1)"
    " AND coalesce(raw_hex, '') <> '' AND coalesce(decoded_json, '') <> '')"
    " WHERE key IS NOT NULL AND key <> ''";

struct advert {
    char *key;
    int64_t ts_ms; /* INT64_MIN when first_seen does not parse: the oldest */
    int64_t id;
    int size;
};

static int by_key_time(const void *a, const void *b)
{
    const struct advert *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    if (c)
        return c;
    if (x->ts_ms != y->ts_ms)
        return x->ts_ms < y->ts_ms ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

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

static int read_adverts(sqlite3 *conn, int64_t now_s, struct advert **out, size_t *count)
{
    char cutoff[32];
    mg_node_hash_sizes_cutoff(now_s, cutoff, sizeof cutoff);
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(conn, adverts_sql, -1, &st, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_text(st, 1, cutoff, -1, SQLITE_STATIC);
    struct advert *rows = NULL;
    size_t n = 0, cap = 0;
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        rc = SQLITE_OK;
        int size = mg_advert_hash_size((const char *)sqlite3_column_text(st, 1));
        if (size == 0)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 1024;
            struct advert *more = realloc(rows, cap * sizeof *rows);
            if (!more) {
                rc = SQLITE_NOMEM;
                break;
            }
            rows = more;
        }
        int64_t ts;
        if (!mg_node_parse_time_ms((const char *)sqlite3_column_text(st, 2), &ts))
            ts = INT64_MIN;
        char *key = strdup((const char *)sqlite3_column_text(st, 0));
        if (!key) {
            rc = SQLITE_NOMEM;
            break;
        }
        rows[n++] = (struct advert){key, ts, sqlite3_column_int64(st, 3), size};
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE && rc != SQLITE_OK) {
        for (size_t i = 0; i < n; i++)
            free(rows[i].key);
        free(rows);
        return rc;
    }
    *out = rows;
    *count = n;
    return SQLITE_OK;
}

/* Groups the sorted ADVERTs by key into t; false when out of memory. */
static bool group(struct table *t, struct advert *rows, size_t n)
{
    int *sizes = malloc((n ? n : 1) * sizeof *sizes);
    t->nodes = calloc(n ? n : 1, sizeof *t->nodes);
    if (!sizes || !t->nodes) {
        free(sizes);
        return false;
    }
    for (size_t i = 0; i < n;) {
        size_t j = i;
        for (; j < n && strcmp(rows[j].key, rows[i].key) == 0; j++)
            sizes[j - i] = rows[j].size;
        struct node_sizes *e = &t->nodes[t->count++];
        e->key = rows[i].key;
        rows[i].key = NULL; /* the table owns it now */
        mg_node_hash_sizes_of(&e->hs, sizes, j - i);
        i = j;
    }
    free(sizes);
    return true;
}

static struct mg_process_table hash_sizes =
    MG_PROCESS_TABLE_INIT(MG_NODE_HASH_SIZES_INTERVAL_NS, table_free);

/* arg: a struct mg_group_build_arg; the window ends at its realtime clock. */
static void *build(sqlite3 *conn, void *arg, int *rc)
{
    struct table *t = calloc(1, sizeof *t);
    if (!t) {
        *rc = SQLITE_NOMEM;
        return NULL;
    }
    struct advert *rows = NULL;
    size_t n = 0;
    *rc = read_adverts(conn, ((const struct mg_group_build_arg *)arg)->realtime_ns / 1000000000LL,
                       &rows, &n);
    if (*rc == SQLITE_OK) {
        if (n > 1)
            qsort(rows, n, sizeof *rows, by_key_time);
        if (!group(t, rows, n))
            *rc = SQLITE_NOMEM;
    }
    for (size_t i = 0; i < n; i++)
        free(rows[i].key);
    free(rows);
    if (*rc != SQLITE_OK) {
        table_free(t);
        return NULL;
    }
    mg_debug("node hash sizes: %zu nodes", t->count);
    return t;
}

/* ---- the group's copy: the table as a body of the shared result cache ---------------------- */

#define BODY_MAGIC 0x5348474dU /* "MGHS" */
#define BODY_VERSION 1U

struct body_head {
    uint32_t magic, version;
    int64_t built_ns; /* CLOCK_MONOTONIC, the same in every process */
    uint64_t count;
};

/* The body: the head, then each node: its key, then known, size, inconsistent, seen_mask as
 * four 32-bit numbers. */
static void encode(const void *table, int64_t built_ns, struct mg_buf *out)
{
    const struct table *t = table;
    struct body_head h = {BODY_MAGIC, BODY_VERSION, built_ns, t->count};
    mg_buf_append(out, &h, sizeof h);
    for (size_t i = 0; i < t->count; i++) {
        const struct mg_node_hash_sizes *hs = &t->nodes[i].hs;
        mg_group_put_text(out, t->nodes[i].key);
        uint32_t v[4] = {hs->known, (uint32_t)hs->size, hs->inconsistent, hs->seen_mask};
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
        struct node_sizes *e = &t->nodes[t->count++];
        r.bad = !(e->key = mg_group_get_text(&r));
        uint32_t v[4];
        mg_group_get(&r, v, sizeof v);
        e->hs = (struct mg_node_hash_sizes){v[0] != 0, (int)v[1], v[2] != 0, v[3]};
    }
    if (r.bad || r.at != r.end) {
        table_free(t);
        return NULL;
    }
    *built_ns = h.built_ns;
    return t;
}

static struct mg_group_table shared =
    MG_GROUP_TABLE_INIT(.table = &hash_sizes, .name = "hashsizes", .what = "node hash sizes",
                        .version = BODY_VERSION, .build = build, .encode = encode, .decode = decode,
                        .builds = offsetof(struct mg_result_cache, hash_size_builds),
                        .copies = offsetof(struct mg_result_cache, hash_size_copies),
                        .stats = MG_TABLE_hash_sizes);

bool mg_node_hash_sizes_fresh(sqlite3 *conn, int64_t now_ns)
{
    return mg_process_table_fresh(&hash_sizes, conn, now_ns);
}

bool mg_node_hash_sizes_exist(sqlite3 *conn)
{
    return mg_process_table_exists(&hash_sizes, conn);
}

void mg_node_hash_sizes_adopt(struct mg_env *env)
{
    mg_group_table_adopt(&shared, env);
}

bool mg_node_hash_sizes_available(struct mg_env *env)
{
    return mg_group_table_available(&shared, env);
}

int mg_node_hash_sizes_keep(struct mg_env *env, int64_t now_ns, int64_t now_s, bool *busy)
{
    return mg_group_table_keep(&shared, env, now_ns, now_s * 1000000000LL, busy);
}

int mg_node_hash_sizes_keep_behind(struct mg_env *env, int64_t now_ns, int64_t now_s)
{
    return mg_group_table_keep_behind(&shared, env, now_ns, now_s * 1000000000LL);
}

void mg_node_hash_sizes_read_begin(void)
{
    mg_process_table_read_begin(&hash_sizes);
}

void mg_node_hash_sizes_read_end(void)
{
    mg_process_table_read_end(&hash_sizes);
}

uint64_t mg_node_hash_sizes_generation(void)
{
    return mg_process_table_generation(&hash_sizes);
}

static int by_key(const void *key, const void *entry)
{
    return strcmp(key, ((const struct node_sizes *)entry)->key);
}

bool mg_node_hash_sizes_lookup(const char *key, struct mg_node_hash_sizes *out)
{
    const struct table *t = mg_process_table_current(&hash_sizes);
    const struct node_sizes *e =
        t && t->count && key ? bsearch(key, t->nodes, t->count, sizeof *t->nodes, by_key) : NULL;
    if (e)
        *out = e->hs;
    mg_table_rows(MG_TABLE_hash_sizes, t != NULL, 0);
    return e != NULL;
}

void mg_node_hash_sizes_forget(struct mg_env *env)
{
    mg_group_table_forget(&shared, env);
}

/* SPDX-License-Identifier: ISC */
#include "node_multibyte.h"

#include "clock.h"
#include "group_table.h"
#include "json.h"
#include "log.h"
#include "packet_decode.h"
#include "path_parse.h"
#include "process_table.h"
#include "result_cache.h"
#include "table_stats.h"
#include "text.h"

#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum status { UNKNOWN, CONFIRMED, SUSPECTED };

struct capability {
    char *key; /* as the nodes table has it */
    int status, size;
};

struct table {
    struct capability *nodes; /* sorted by key */
    size_t count;
};

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

/* A key (or hop) with a size, and the row's place. */
struct sized {
    char *key;
    int64_t order;
    int size;
};

struct list {
    struct sized *e;
    size_t n, cap;
};

static bool list_add(struct list *l, const char *key, int64_t order, int size)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        struct sized *more = realloc(l->e, cap * sizeof *more);
        if (!more)
            return false;
        l->e = more;
        l->cap = cap;
    }
    char *k = strdup(key);
    if (!k)
        return false;
    l->e[l->n++] = (struct sized){k, order, size};
    return true;
}

static void list_free(struct list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->e[i].key);
    free(l->e);
}

static int by_key_order(const void *a, const void *b)
{
    const struct sized *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    if (c)
        return c;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* The path's hash size (1..4) from a packet's header and path byte; 0 when they do not parse. */
static int path_hash_size(const char *raw_hex)
{
    int route, path_byte;
    if (!mg_packet_hex_path_byte(raw_hex, &route, &path_byte))
        return 0;
    return ((path_byte >> 6) & 3) + 1;
}

/* Every ADVERT with the key it names, oldest first. */
static const char adverts_sql[] =
    "SELECT key, raw_hex FROM (SELECT CASE WHEN NOT json_valid(decoded_json) THEN NULL"
    " WHEN json_type(decoded_json, '$.pubKey') = 'text' THEN decoded_json ->> '$.pubKey'"
    " WHEN json_type(decoded_json, '$.public_key') = 'text'"
    " THEN decoded_json ->> '$.public_key' END AS key, raw_hex, first_seen, id"
    " FROM transmissions WHERE payload_type = 4 AND coalesce(raw_hex, '') <> ''"
    " AND coalesce(decoded_json, '') <> '') WHERE key IS NOT NULL AND key <> ''"
    " ORDER BY first_seen, id";

/* Each key's newest ADVERT size of 1 to 3 bytes (not a direct zero-hop one): sorted by key,
 * the last of each key the newest. */
static int read_adopters(sqlite3 *conn, struct list *out)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(conn, adverts_sql, -1, &st, NULL);
    int64_t order = 0;
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        rc = SQLITE_OK;
        int size = mg_advert_hash_size((const char *)sqlite3_column_text(st, 1));
        order++;
        if (size < 1 || size > 3)
            continue;
        if (!list_add(out, (const char *)sqlite3_column_text(st, 0), order, size))
            rc = SQLITE_NOMEM;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE && rc != SQLITE_OK)
        return rc;
    if (out->n > 1)
        qsort(out->e, out->n, sizeof *out->e, by_key_order);
    return SQLITE_OK;
}

/* The observation with the most hops (the newest of them) of one transmission. */
static const char longest_sql[] =
    "SELECT path_json FROM observations WHERE transmission_id = ?1 ORDER BY CASE WHEN"
    " json_valid(path_json) AND json_type(path_json) = 'array' THEN json_array_length(path_json)"
    " ELSE 0 END DESC, timestamp DESC, id DESC LIMIT 1";

#define HOPS_MAX 64

/* The hops (lowercased, of 1 to 3 bytes) of the transmissions whose path byte says 2 bytes or
 * more, not TRACEs, each with the greatest such size: sorted by hop, distinct. */
static int read_hops(sqlite3 *conn, struct list *out)
{
    sqlite3_stmt *tx = NULL, *obs = NULL;
    int rc = sqlite3_prepare_v2(conn,
                                "SELECT id, raw_hex FROM transmissions WHERE payload_type IS NOT 8"
                                " AND length(raw_hex) >= 4",
                                -1, &tx, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(conn, longest_sql, -1, &obs, NULL);
    while (rc == SQLITE_OK && (rc = sqlite3_step(tx)) == SQLITE_ROW) {
        rc = SQLITE_OK;
        int size = path_hash_size((const char *)sqlite3_column_text(tx, 1));
        if (size < 2)
            continue;
        sqlite3_bind_int64(obs, 1, sqlite3_column_int64(tx, 0));
        int orc = sqlite3_step(obs);
        if (orc == SQLITE_ROW) {
            char buf[1024];
            char *hops[HOPS_MAX];
            int n = mg_path_split((const char *)sqlite3_column_text(obs, 0), buf, sizeof buf, hops,
                                  HOPS_MAX);
            for (int i = 0; i < n && rc == SQLITE_OK; i++) {
                size_t len = hops[i] ? strlen(hops[i]) : 0;
                if (len != 2 && len != 4 && len != 6)
                    continue; /* no key's first bytes */
                for (char *c = hops[i]; *c; c++)
                    *c = (char)tolower((unsigned char)*c);
                if (!list_add(out, hops[i], 0, size))
                    rc = SQLITE_NOMEM;
            }
        } else if (orc != SQLITE_DONE) {
            rc = orc;
        }
        sqlite3_reset(obs);
    }
    sqlite3_finalize(tx);
    sqlite3_finalize(obs);
    if (rc != SQLITE_DONE && rc != SQLITE_OK)
        return rc;
    if (out->n > 1)
        qsort(out->e, out->n, sizeof *out->e, by_key_order);
    size_t kept = 0; /* one per hop, its greatest size */
    for (size_t i = 0; i < out->n; i++) {
        if (kept > 0 && strcmp(out->e[kept - 1].key, out->e[i].key) == 0) {
            if (out->e[i].size > out->e[kept - 1].size)
                out->e[kept - 1].size = out->e[i].size;
            free(out->e[i].key);
        } else {
            out->e[kept++] = out->e[i];
        }
    }
    out->n = kept;
    return SQLITE_OK;
}

static int by_key(const void *key, const void *entry)
{
    return strcmp(key, ((const struct sized *)entry)->key);
}

/* The newest adopting size of key (its last entry), 0: none. */
static int adopted(const struct list *a, const char *key)
{
    const struct sized *e = a->n ? bsearch(key, a->e, a->n, sizeof *a->e, by_key) : NULL;
    if (!e)
        return 0;
    while (e + 1 < a->e + a->n && strcmp(e[1].key, key) == 0)
        e++;
    return e->size;
}

/* The greatest size of a hop that is key's first 1, 2 or 3 bytes (lowercased), 0: none. */
static int suspected(const struct list *hops, const char *key)
{
    int best = 0;
    for (size_t bytes = 1; bytes <= 3; bytes++) {
        char prefix[8];
        size_t i = 0;
        for (; i < bytes * 2 && key[i]; i++)
            prefix[i] = (char)tolower((unsigned char)key[i]);
        if (i < bytes * 2)
            break;
        prefix[i] = '\0';
        const struct sized *e =
            hops->n ? bsearch(prefix, hops->e, hops->n, sizeof *hops->e, by_key) : NULL;
        if (e && e->size > best)
            best = e->size;
    }
    return best;
}

static int by_capability(const void *a, const void *b)
{
    return strcmp(((const struct capability *)a)->key, ((const struct capability *)b)->key);
}

static void *build(sqlite3 *conn, void *arg, int *rc)
{
    (void)arg;
    struct table *t = calloc(1, sizeof *t);
    struct list adopters = {0}, hops = {0};
    sqlite3_stmt *st = NULL;
    *rc = t ? SQLITE_OK : SQLITE_NOMEM;
    if (*rc == SQLITE_OK)
        *rc = read_adopters(conn, &adopters);
    if (*rc == SQLITE_OK)
        *rc = read_hops(conn, &hops);
    if (*rc == SQLITE_OK)
        *rc = sqlite3_prepare_v2(conn, "SELECT public_key FROM nodes WHERE public_key IS NOT NULL",
                                 -1, &st, NULL);
    size_t cap = 0;
    while (*rc == SQLITE_OK && (*rc = sqlite3_step(st)) == SQLITE_ROW) {
        *rc = SQLITE_OK;
        const char *key = (const char *)sqlite3_column_text(st, 0);
        if (t->count == cap) {
            cap = cap ? cap * 2 : 256;
            struct capability *more = realloc(t->nodes, cap * sizeof *more);
            if (!more) {
                *rc = SQLITE_NOMEM;
                break;
            }
            t->nodes = more;
        }
        struct capability c = {strdup(key), UNKNOWN, 1};
        if (!c.key) {
            *rc = SQLITE_NOMEM;
            break;
        }
        int size = adopted(&adopters, key);
        if (size >= 2) {
            c.status = CONFIRMED, c.size = size;
        } else if ((size = suspected(&hops, key)) >= 2) {
            c.status = SUSPECTED, c.size = size;
        }
        t->nodes[t->count++] = c;
    }
    sqlite3_finalize(st);
    list_free(&adopters);
    list_free(&hops);
    if (*rc == SQLITE_DONE)
        *rc = SQLITE_OK;
    if (*rc != SQLITE_OK) {
        table_free(t);
        return NULL;
    }
    if (t->count > 1)
        qsort(t->nodes, t->count, sizeof *t->nodes, by_capability);
    mg_debug("node multi-byte capability: %zu nodes", t->count);
    return t;
}

/* ---- the group's copy ---------------------------------------------------------------------- */

#define BODY_MAGIC 0x424d474dU /* "MGMB" */
#define BODY_VERSION 1U

struct body_head {
    uint32_t magic, version;
    int64_t built_ns;
    uint64_t count;
};

static void encode(const void *table, int64_t built_ns, struct mg_buf *out)
{
    const struct table *t = table;
    struct body_head h = {BODY_MAGIC, BODY_VERSION, built_ns, t->count};
    mg_buf_append(out, &h, sizeof h);
    for (size_t i = 0; i < t->count; i++) {
        mg_group_put_text(out, t->nodes[i].key);
        int32_t v[2] = {t->nodes[i].status, t->nodes[i].size};
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
        struct capability *e = &t->nodes[t->count++];
        r.bad = !(e->key = mg_group_get_text(&r));
        int32_t v[2];
        mg_group_get(&r, v, sizeof v);
        e->status = v[0], e->size = v[1];
    }
    if (r.bad || r.at != r.end) {
        table_free(t);
        return NULL;
    }
    *built_ns = h.built_ns;
    return t;
}

static struct mg_process_table capabilities =
    MG_PROCESS_TABLE_INIT(MG_NODE_MULTIBYTE_INTERVAL_NS, table_free);

static struct mg_group_table shared =
    MG_GROUP_TABLE_INIT(.table = &capabilities, .name = "multibyte",
                        .what = "node multi-byte capability", .version = BODY_VERSION,
                        .build = build, .encode = encode, .decode = decode,
                        .builds = offsetof(struct mg_result_cache, multibyte_builds),
                        .copies = offsetof(struct mg_result_cache, multibyte_copies),
                        .stats = MG_TABLE_multibyte);

/* ---- before the first pass: the capability the nodes table keeps ---------------------------- */

/* CoreScope's server serves, until its first analytics cycle, the capability its ingestor
 * keeps in the nodes table (multibyte_sup 2: confirmed, 1: suspected; multibyte_evidence as
 * the evidence; no size, so 0), for the rows whose multibyte_sup is above 0; a schema without
 * those columns has none. One read of the nodes table per process, before its first pass. */
struct stored {
    char *key, *evidence; /* evidence: its JSON string, quoted */
    int status;
};

struct stored_table {
    struct stored *nodes; /* sorted by key */
    size_t count;
};

static void stored_free(void *table)
{
    struct stored_table *t = table;
    if (!t)
        return;
    for (size_t i = 0; i < t->count; i++)
        free(t->nodes[i].key), free(t->nodes[i].evidence);
    free(t->nodes);
    free(t);
}

static int by_stored(const void *a, const void *b)
{
    return strcmp(((const struct stored *)a)->key, ((const struct stored *)b)->key);
}

/* s as a quoted JSON string (NULL: no memory). */
static char *json_text(const char *s)
{
    struct mg_buf b;
    mg_buf_init(&b);
    mg_buf_putc(&b, '"');
    mg_json_escape(&b, s ? s : "", s ? strlen(s) : 0);
    mg_buf_putc(&b, '"');
    mg_buf_putc(&b, '\0');
    char *out = b.failed ? NULL : strdup(b.data);
    mg_buf_free(&b);
    return out;
}

static void *stored_build(sqlite3 *conn, void *arg, int *rc)
{
    (void)arg;
    struct stored_table *t = calloc(1, sizeof *t);
    if (!t) {
        *rc = SQLITE_NOMEM;
        return NULL;
    }
    sqlite3_stmt *st = NULL;
    /* no such column: an older schema, nothing kept */
    if (sqlite3_prepare_v2(conn,
                           "SELECT public_key, multibyte_sup, COALESCE(multibyte_evidence, '')"
                           " FROM nodes WHERE multibyte_sup > 0 AND public_key IS NOT NULL",
                           -1, &st, NULL) != SQLITE_OK) {
        sqlite3_finalize(st);
        *rc = SQLITE_OK;
        return t;
    }
    size_t cap = 0;
    while ((*rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (t->count == cap) {
            size_t more = cap ? 2 * cap : 16;
            struct stored *n = realloc(t->nodes, more * sizeof *n);
            if (!n) {
                *rc = SQLITE_NOMEM;
                break;
            }
            t->nodes = n, cap = more;
        }
        struct stored *e = &t->nodes[t->count];
        e->key = strdup((const char *)sqlite3_column_text(st, 0));
        e->evidence = json_text((const char *)sqlite3_column_text(st, 2));
        e->status = sqlite3_column_int(st, 1) == 2   ? CONFIRMED
                    : sqlite3_column_int(st, 1) == 1 ? SUSPECTED
                                                     : UNKNOWN;
        if (!e->key || !e->evidence) {
            free(e->key), free(e->evidence);
            *rc = SQLITE_NOMEM;
            break;
        }
        t->count++;
    }
    sqlite3_finalize(st);
    if (*rc != SQLITE_DONE) {
        stored_free(t);
        return NULL;
    }
    *rc = SQLITE_OK;
    if (t->count > 1)
        qsort(t->nodes, t->count, sizeof *t->nodes, by_stored);
    return t;
}

static struct mg_process_table stored =
    MG_PROCESS_TABLE_INIT(MG_NODE_MULTIBYTE_INTERVAL_NS, stored_free);

void mg_node_multibyte_adopt(struct mg_env *env)
{
    mg_group_table_adopt(&shared, env);
    /* Read at the start, not in a request (one read of the nodes table); a request reads it
     * only when the file was replaced since (mg_node_multibyte_keep). */
    sqlite3 *conn = env->db->conn;
    if (!mg_process_table_exists(&capabilities, conn) &&
        mg_process_table_refresh(&stored, conn, mg_monotonic_ns(), stored_build, NULL) != SQLITE_OK)
        mg_warn("node multi-byte capability: the nodes table's was not read at start");
}

bool mg_node_multibyte_available(struct mg_env *env)
{
    return mg_group_table_available(&shared, env);
}

int mg_node_multibyte_keep(struct mg_env *env, int64_t now_ns, int64_t now_realtime_ns)
{
    int rc = mg_group_table_keep_behind(&shared, env, now_ns, now_realtime_ns);
    sqlite3 *conn = env->db->conn;
    if (rc == SQLITE_OK && !mg_process_table_exists(&capabilities, conn) &&
        !mg_process_table_exists(&stored, conn))
        rc = mg_process_table_refresh(&stored, conn, now_ns, stored_build, NULL);
    return rc;
}

void mg_node_multibyte_read_begin(void)
{
    mg_process_table_read_begin(&capabilities);
    mg_process_table_read_begin(&stored);
}

void mg_node_multibyte_read_end(void)
{
    mg_process_table_read_end(&stored);
    mg_process_table_read_end(&capabilities);
}

uint64_t mg_node_multibyte_generation(void)
{
    /* each grows: their sum changes whenever either table does */
    return mg_process_table_generation(&capabilities) + mg_process_table_generation(&stored);
}

static int by_node_key(const void *key, const void *entry)
{
    return strcmp(key, ((const struct capability *)entry)->key);
}

static int by_stored_key(const void *key, const void *entry)
{
    return strcmp(key, ((const struct stored *)entry)->key);
}

void mg_node_multibyte_fields(struct mg_node_fields *f, const char *pubkey,
                              const struct mg_node_hash_sizes *hs)
{
    if (hs && hs->known && (hs->seen_mask & ~3u))
        return; /* an ADVERT of the week said 2 bytes or more: confirmed already */
    static const char *const status[] = {"unknown", "confirmed", "suspected"}, *const evidence[] = {
                                                                                   "", "advert",
                                                                                   "path"};
    const struct table *t = mg_process_table_current(&capabilities);
    mg_table_rows(MG_TABLE_multibyte, t != NULL, 0);
    if (!t) { /* before the first pass: what the nodes table keeps */
        const struct stored_table *k = mg_process_table_current(&stored);
        const struct stored *e = k && k->count && pubkey ? bsearch(pubkey, k->nodes, k->count,
                                                                   sizeof *k->nodes, by_stored_key)
                                                         : NULL;
        if (!e)
            return;
        mg_node_fields_add_json(f, "multi_byte_evidence", e->evidence); /* the reader holds it */
        mg_node_fields_add(f, "multi_byte_max_hash_size", "%d", 0);
        mg_node_fields_add(f, "multi_byte_status", "\"%s\"", status[e->status]);
        return;
    }
    const struct capability *c =
        t->count && pubkey ? bsearch(pubkey, t->nodes, t->count, sizeof *t->nodes, by_node_key)
                           : NULL;
    if (!c)
        return;
    mg_node_fields_add(f, "multi_byte_evidence", "\"%s\"", evidence[c->status]);
    mg_node_fields_add(f, "multi_byte_max_hash_size", "%d", c->size);
    mg_node_fields_add(f, "multi_byte_status", "\"%s\"", status[c->status]);
}

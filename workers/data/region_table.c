/* SPDX-License-Identifier: ISC */
#include "region_table.h"

#include "group_body.h"
#include "log.h"
#include "table_stats.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REGIONS_MAX 4096 /* codes kept; observers past it are in no region (logged) */

struct node_entry {
    char *key;   /* NULL: a free slot */
    size_t bits; /* index of the node's first word in map->bits */
};

struct region_map {
    uint64_t generation;
    char **codes;
    unsigned regions;
    unsigned words; /* of a node's region set */
    struct node_entry *slot;
    size_t slots, used; /* open addressing, slots a power of two, at most half used */
    uint64_t *bits;     /* used * words */
};

static _Atomic uint64_t generations; /* a map's, built here or decoded */

const char mg_region_map_adverts_sql[] =
    "SELECT json_extract(t.decoded_json, '$.pubKey'), (SELECT group_concat(o.observer_idx)"
    " FROM observations o WHERE o.transmission_id = t.id) FROM transmissions t"
    " WHERE t.payload_type = 4";

static const char observers_sql[] = "SELECT rowid, upper(trim(iata)) FROM observers"
                                    " WHERE iata IS NOT NULL AND instr(iata, ',') = 0";

static void map_free(void *map)
{
    struct region_map *m = map;
    if (!m)
        return;
    for (unsigned i = 0; i < m->regions; i++)
        free(m->codes[i]);
    free(m->codes);
    for (size_t i = 0; i < m->slots; i++)
        free(m->slot[i].key);
    free(m->slot);
    free(m->bits);
    free(m);
}

static uint64_t hash_key(const char *key, size_t len)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)key[i]) * 1099511628211ULL;
    return h;
}

static struct node_entry *find(const struct region_map *m, const char *key, size_t len)
{
    if (m->slots == 0)
        return NULL;
    for (size_t i = hash_key(key, len) & (m->slots - 1);; i = (i + 1) & (m->slots - 1)) {
        struct node_entry *e = &m->slot[i];
        if (!e->key || (strlen(e->key) == len && memcmp(e->key, key, len) == 0))
            return e;
    }
}

static bool grow(struct region_map *m)
{
    size_t slots = m->slots ? m->slots * 2 : 1024;
    struct node_entry *old = m->slot;
    size_t old_slots = m->slots;
    m->slot = calloc(slots, sizeof *m->slot);
    if (!m->slot) {
        m->slot = old;
        return false;
    }
    m->slots = slots;
    for (size_t i = 0; i < old_slots; i++)
        if (old[i].key)
            *find(m, old[i].key, strlen(old[i].key)) = old[i];
    free(old);
    uint64_t *bits = realloc(m->bits, slots / 2 * m->words * sizeof *bits);
    if (!bits)
        return false;
    m->bits = bits;
    return true;
}

/* The node's region set, added when it is new; NULL when out of memory. */
static uint64_t *node_bits(struct region_map *m, const char *key, size_t len)
{
    if ((m->used + 1) * 2 > m->slots && !grow(m))
        return NULL;
    struct node_entry *e = find(m, key, len);
    if (!e->key) {
        if (!(e->key = strndup(key, len)))
            return NULL;
        e->bits = m->used++ * m->words;
        memset(&m->bits[e->bits], 0, m->words * sizeof *m->bits);
    }
    return &m->bits[e->bits];
}

static int code_index(const struct region_map *m, const char *code, size_t len)
{
    for (unsigned i = 0; i < m->regions; i++)
        if (strlen(m->codes[i]) == len && memcmp(m->codes[i], code, len) == 0)
            return (int)i;
    return -1;
}

struct observer_region {
    int64_t rowid;
    int region;
};

static int by_rowid(const void *a, const void *b)
{
    int64_t x = ((const struct observer_region *)a)->rowid;
    int64_t y = ((const struct observer_region *)b)->rowid;
    return x < y ? -1 : x > y;
}

/* The observers' regions, sorted by rowid; an SQLite code. */
static int read_observers(sqlite3 *conn, struct region_map *m, struct observer_region **out,
                          size_t *count)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(conn, observers_sql, -1, &st, NULL);
    size_t n = 0, cap = 0;
    struct observer_region *obs = NULL;
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *code = (const char *)sqlite3_column_text(st, 1);
        size_t len = (size_t)sqlite3_column_bytes(st, 1);
        if (!code || len == 0) {
            rc = SQLITE_OK;
            continue;
        }
        int region = code_index(m, code, len);
        if (region < 0 && m->regions < REGIONS_MAX) {
            char **codes = realloc(m->codes, (m->regions + 1) * sizeof *codes);
            if (!codes || !(codes[m->regions] = strndup(code, len))) {
                m->codes = codes ? codes : m->codes;
                rc = SQLITE_NOMEM;
                break;
            }
            m->codes = codes;
            region = (int)m->regions++;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            struct observer_region *more = realloc(obs, cap * sizeof *obs);
            if (!more) {
                rc = SQLITE_NOMEM;
                break;
            }
            obs = more;
        }
        obs[n++] = (struct observer_region){sqlite3_column_int64(st, 0), region};
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE && rc != SQLITE_OK) {
        free(obs);
        return rc;
    }
    qsort(obs, n, sizeof *obs, by_rowid);
    *out = obs;
    *count = n;
    return SQLITE_OK;
}

static int region_of(const struct observer_region *obs, size_t n, int64_t rowid)
{
    struct observer_region want = {rowid, 0};
    const struct observer_region *o = n ? bsearch(&want, obs, n, sizeof *obs, by_rowid) : NULL;
    return o ? o->region : -1;
}

/* Reads the ADVERTs into m; an SQLite code. */
static int read_adverts(sqlite3 *conn, struct region_map *m, const struct observer_region *obs,
                        size_t n_obs)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(conn, mg_region_map_adverts_sql, -1, &st, NULL);
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        rc = SQLITE_OK;
        const char *key = (const char *)sqlite3_column_text(st, 0);
        size_t len = (size_t)sqlite3_column_bytes(st, 0);
        const char *list = (const char *)sqlite3_column_text(st, 1);
        if (!key || !list)
            continue;
        uint64_t *bits = NULL;
        for (const char *p = list; *p;) {
            char *end;
            long long rowid = strtoll(p, &end, 10);
            if (end == p)
                break;
            int region = region_of(obs, n_obs, rowid);
            if (region >= 0) {
                if (!bits && !(bits = node_bits(m, key, len))) {
                    rc = SQLITE_NOMEM;
                    break;
                }
                bits[region / 64] |= 1ULL << (region % 64);
            }
            p = *end == ',' ? end + 1 : end;
        }
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

struct mg_process_table mg_region_table =
    MG_PROCESS_TABLE_INIT(MG_REGION_MAP_INTERVAL_NS, map_free);

void *mg_region_table_build(sqlite3 *conn, void *arg, int *rc)
{
    (void)arg;
    struct region_map *m = calloc(1, sizeof *m);
    if (!m) {
        *rc = SQLITE_NOMEM;
        return NULL;
    }
    /* One read transaction: observers and ADVERTs from one snapshot. */
    bool began =
        sqlite3_get_autocommit(conn) && sqlite3_exec(conn, "BEGIN", NULL, NULL, NULL) == SQLITE_OK;
    struct observer_region *obs = NULL;
    size_t n_obs = 0;
    *rc = read_observers(conn, m, &obs, &n_obs);
    m->words = m->regions / 64 + 1;
    if (*rc == SQLITE_OK)
        *rc = read_adverts(conn, m, obs, n_obs);
    free(obs);
    if (began)
        sqlite3_exec(conn, "COMMIT", NULL, NULL, NULL);
    if (*rc != SQLITE_OK) {
        map_free(m);
        return NULL;
    }
    m->generation = atomic_fetch_add(&generations, 1) + 1;
    mg_debug("region map: %u regions, %zu nodes", m->regions, m->used);
    return m;
}

/* ---- the group's copy: the map as a body of the shared result cache ----------------------- */

#define BODY_MAGIC 0x4752474dU /* "MGRG" */

struct body_head {
    uint32_t magic, version;
    int64_t built_ns; /* CLOCK_MONOTONIC, the same in every process */
    uint32_t regions, words;
    uint64_t nodes;
};

/* The body: the head, the region codes, then each node: its key and its region set (words
 * 64-bit words). */
void mg_region_table_encode(const void *table, int64_t built_ns, struct mg_buf *out)
{
    const struct region_map *m = table;
    struct body_head h = {BODY_MAGIC, MG_REGION_TABLE_VERSION, built_ns, m->regions, m->words,
                          m->used};
    mg_buf_append(out, &h, sizeof h);
    for (unsigned i = 0; i < m->regions; i++)
        mg_group_put_text(out, m->codes[i]);
    for (size_t i = 0; i < m->slots; i++)
        if (m->slot[i].key) {
            mg_group_put_text(out, m->slot[i].key);
            mg_buf_append(out, &m->bits[m->slot[i].bits], m->words * sizeof *m->bits);
        }
}

void *mg_region_table_decode(const void *data, size_t len, int64_t *built_ns)
{
    struct mg_group_reader r = {data, (const unsigned char *)data + len, false};
    struct body_head h;
    mg_group_get(&r, &h, sizeof h);
    if (r.bad || h.magic != BODY_MAGIC || h.version != MG_REGION_TABLE_VERSION ||
        h.regions > REGIONS_MAX || h.words != h.regions / 64 + 1 || h.nodes > len)
        return NULL;
    struct region_map *m = calloc(1, sizeof *m);
    if (!m || !(m->codes = calloc(h.regions ? h.regions : 1, sizeof *m->codes))) {
        free(m);
        return NULL;
    }
    m->words = h.words;
    while (m->regions < h.regions && !r.bad)
        r.bad = !(m->codes[m->regions++] = mg_group_get_text(&r));
    for (uint64_t i = 0; i < h.nodes && !r.bad; i++) {
        char *key = mg_group_get_text(&r);
        uint64_t *bits = key ? node_bits(m, key, strlen(key)) : NULL;
        if (bits)
            mg_group_get(&r, bits, m->words * sizeof *bits);
        r.bad = r.bad || !bits;
        free(key);
    }
    if (r.bad || r.at != r.end || m->used != h.nodes) {
        map_free(m);
        return NULL;
    }
    m->generation = atomic_fetch_add(&generations, 1) + 1;
    *built_ns = h.built_ns;
    return m;
}

void mg_region_map_read_begin(void)
{
    mg_process_table_read_begin(&mg_region_table);
}

void mg_region_map_read_end(void)
{
    mg_process_table_read_end(&mg_region_table);
}

uint64_t mg_region_map_generation(void)
{
    return mg_process_table_generation(&mg_region_table);
}

/* The requested codes as a region set of the current map, kept with the statement's
 * argument (auxdata) so it is worked out once per execution, not per row. */
struct wanted {
    uint64_t generation;
    unsigned words;
    bool any;
    uint64_t bits[];
};

static struct wanted *wanted_of(const struct region_map *m, const char *codes)
{
    struct wanted *w = calloc(1, sizeof *w + m->words * sizeof w->bits[0]);
    if (!w)
        return NULL;
    w->generation = m->generation;
    w->words = m->words;
    for (const char *p = codes; p && *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        int region = len ? code_index(m, p, len) : -1;
        if (region >= 0) {
            w->bits[region / 64] |= 1ULL << (region % 64);
            w->any = true;
        }
        p = end ? end + 1 : p + len;
    }
    return w;
}

/* meshgate_in_regions(public_key, codes): 1 when the node was heard in one of the codes.
 * The caller holds the map (mg_region_map_read_begin). */
static void in_regions(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    const struct region_map *m = mg_process_table_current(&mg_region_table);
    if (!m) {
        sqlite3_result_error(ctx, "meshgate_in_regions: the region map is not built", -1);
        return;
    }
    struct wanted *w = sqlite3_get_auxdata(ctx, 1);
    if (!w || w->generation != m->generation) {
        w = wanted_of(m, (const char *)sqlite3_value_text(argv[1]));
        if (!w) {
            sqlite3_result_error_nomem(ctx);
            return;
        }
        sqlite3_set_auxdata(ctx, 1, w, free);
        w = sqlite3_get_auxdata(ctx, 1); /* set_auxdata may have freed it */
        if (!w) {
            sqlite3_result_error_nomem(ctx);
            return;
        }
    }
    const char *key = (const char *)sqlite3_value_text(argv[0]);
    size_t len = (size_t)sqlite3_value_bytes(argv[0]);
    int in = 0;
    if (key && w->any) {
        const struct node_entry *e = find(m, key, len);
        for (unsigned i = 0; e && e->key && i < w->words && !in; i++)
            in = (m->bits[e->bits + i] & w->bits[i]) != 0;
    }
    mg_table_rows(MG_TABLE_regions, 1, 0);
    sqlite3_result_int(ctx, in);
}

int mg_region_map_register(sqlite3 *conn)
{
    return sqlite3_create_function(conn, "meshgate_in_regions", 2,
                                   SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL, in_regions, NULL,
                                   NULL);
}

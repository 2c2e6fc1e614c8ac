/* SPDX-License-Identifier: ISC */
/*
 * GET /api/analytics/hash-sizes[?region=A,B][&area=KEY]: the Analytics page's hash-size tab,
 * as CoreScope's store computes it. Every transmission in CoreScope's store order (first_seen
 * as text, then id), its path the one of its observation with the most hops (the newest of
 * them), its hash size from the raw path byte (after the 4 transport bytes for route types 0
 * and 3; a size of 4 is skipped):
 *   total, distribution     the transmissions with a path, by hash size;
 *   hourly                  the same per hour of first_seen (its first 13 characters);
 *   topHops                 the 50 hops met most often (each hop of each path), with the first
 *                           repeater or room (by rowid) whose key starts with it (2 to 8 digits,
 *                           or the whole key);
 *   multiByteNodes          every ADVERT's originator (decoded pubKey, else public_key) whose
 *                           last ADVERT (direct zero-hop ones say nothing) announced 2 or 3
 *                           bytes, by packets;
 *   distributionByRepeaters those originators whose role names a repeater, by that size ("0":
 *                           only zero-hop ADVERTs);
 *   multiByteCapability     every node: confirmed by its week's ADVERTs (the node list's table,
 *                           node_hash_sizes.h) or by multiByteNodes, suspected when a prefix of
 *                           its key is a hop of a multi-byte path (not TRACE), else unknown;
 *   attributionMethod       "repeater" with a region and known home regions, else "observer".
 * region: the transmissions some observer of the region heard, and the ADVERTs of nodes whose
 * home region (the IATA that hears most of their direct zero-hop ADVERTs) is one of the codes;
 * with a region, a node whose home is elsewhere leaves multiByteNodes and
 * distributionByRepeaters, and the capability's adopters come from the unfiltered pass. area:
 * skips the ADVERTs of nodes outside it. Ties CoreScope leaves to Go's map order are broken by
 * first sight (topHops), key (multiByteNodes) and key (multiByteCapability, after the name).
 *
 * A pass over every observation: a cold report (cold_report.h), at most CoreScope's recompute
 * interval (300 s) old unfiltered and its cache time (60 s) filtered, light when warm.
 */
#include "buf.h"
#include "clock.h"
#include "cold_report.h"
#include "corescope_config.h"
#include "json.h"
#include "node_hash_sizes.h"
#include "node_read.h"
#include "node_visibility.h"
#include "packet_decode.h"
#include "params.h"
#include "path_parse.h"
#include "router.h"
#include "text.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define HASHSZ_DEFAULT_SHAPE_S 300
#define HASHSZ_CACHE_S 60
#define HASHSZ_TOP_HOPS 50
#define HASHSZ_KEY_BYTES 320
#define PATH_HOPS_MAX 64

/* ---- parameters ------------------------------------------------------------------------------ */

struct hashsz_params {
    struct mg_param_list region;
    const char *area;
};
#define P(field) .offset = offsetof(struct hashsz_params, field)
static const struct mg_param hashsz_param_list[] = {
    {.name = "region",
     .kind = MG_PARAM_LIST,
     P(region),
     .flags = MG_LIST_SKIP_ALL | MG_LIST_KEEP_EMPTY, /* "ALL" alone is still a region given */
     .corescope = "IATA codes trimmed and uppercased; ALL and blanks dropped; codes no observer "
                  "has: no transmission filter (a given region still sorts nodes by home region); "
                  "meshgate: 400 past 79 bytes of codes (a cache key's room)"},
    {.name = "area",
     .kind = MG_PARAM_TEXT,
     P(area),
     .corescope = "a key the configuration's areas lack, or an area with no node: no filter"},
};
#undef P
const struct mg_param_table mg_hash_sizes_params =
    MG_PARAM_TABLE(struct hashsz_params, hashsz_param_list);

/* The report's arguments: whether a region was given at all (CoreScope's region != ""), its
 * codes (upper case, comma-separated), and an area the configuration has. */
struct hashsz_args {
    bool region_given;
    char codes[80];
    char area[48];
};

static bool hashsz_args(const struct mg_request *req, struct mg_response *res,
                        struct hashsz_args *a, char *key, size_t cap)
{
    memset(a, 0, sizeof *a);
    struct hashsz_params own;
    const struct hashsz_params *p = mg_params_get(&mg_hash_sizes_params, req, res, &own);
    if (!p)
        return false;
    if (p->region.text && p->region.text[0]) {
        a->region_given = true;
        struct mg_list_item items[MG_PARAM_LIST_MAX];
        int n = mg_param_list_split(p->region.text, MG_LIST_SKIP_ALL, items, MG_PARAM_LIST_MAX);
        size_t used = 0;
        for (int i = 0; i < n && i < MG_PARAM_LIST_MAX; i++) {
            if (used + items[i].len + 2 > sizeof a->codes) {
                if (res)
                    mg_response_error(res, 400, "region: at most 79 bytes of codes");
                return false;
            }
            if (used)
                a->codes[used++] = ',';
            for (size_t k = 0; k < items[i].len; k++)
                a->codes[used++] = (char)toupper((unsigned char)items[i].ptr[k]);
        }
        a->codes[used] = '\0';
    }
    if (p->area && mg_corescope_area(mg_corescope_current(), p->area)) {
        if (strlen(p->area) >= sizeof a->area) {
            if (res)
                mg_response_error(res, 400, "area: a key of at most 47 bytes");
            return false;
        }
        snprintf(a->area, sizeof a->area, "%s", p->area);
    }
    int64_t now = (int64_t)time(NULL);
    int64_t interval = !a->region_given && !a->area[0] ? HASHSZ_DEFAULT_SHAPE_S : HASHSZ_CACHE_S;
    snprintf(key, cap, "analytics|hash-sizes|%d|%s|%s|%lu|@%lld:%lld", a->region_given, a->codes,
             a->area, a->area[0] ? mg_corescope_current()->generation : 0UL, (long long)interval,
             (long long)(now / interval));
    return true;
}

/* ---- a small map of text keys ---------------------------------------------------------------- */

struct sent {
    char *key;
    int64_t a, b; /* the use's numbers */
    char *s1, *s2;
};

struct smap {
    struct sent *e;
    size_t n, cap;
    uint32_t *slot; /* index + 1; 0 empty */
    size_t slots;
    bool failed;
};

static uint64_t text_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h;
}

static bool smap_grow(struct smap *m)
{
    size_t slots = m->slots ? m->slots * 2 : 256;
    uint32_t *slot = calloc(slots, sizeof *slot);
    if (!slot)
        return false;
    for (size_t i = 0; i < m->n; i++) {
        size_t at = text_hash(m->e[i].key, strlen(m->e[i].key)) & (slots - 1);
        while (slot[at])
            at = (at + 1) & (slots - 1);
        slot[at] = (uint32_t)(i + 1);
    }
    free(m->slot);
    m->slot = slot, m->slots = slots;
    return true;
}

/* The entry of key (len bytes), added (zeroed) when created is not NULL; NULL when absent
 * (or memory ran out: m->failed). */
static struct sent *smap_get(struct smap *m, const char *key, size_t len, bool *created)
{
    if (created)
        *created = false;
    if (m->slots) {
        size_t at = text_hash(key, len) & (m->slots - 1);
        for (uint32_t i; (i = m->slot[at]); at = (at + 1) & (m->slots - 1)) {
            struct sent *e = &m->e[i - 1];
            if (strncmp(e->key, key, len) == 0 && e->key[len] == '\0')
                return e;
        }
    }
    if (!created || m->failed)
        return NULL;
    if ((m->n + 1) * 2 > m->slots && !smap_grow(m))
        goto fail;
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        struct sent *more = realloc(m->e, cap * sizeof *more);
        if (!more)
            goto fail;
        m->e = more, m->cap = cap;
    }
    struct sent *e = &m->e[m->n];
    memset(e, 0, sizeof *e);
    if (!(e->key = strndup(key, len)))
        goto fail;
    size_t at = text_hash(key, len) & (m->slots - 1);
    while (m->slot[at])
        at = (at + 1) & (m->slots - 1);
    m->slot[at] = (uint32_t)(++m->n);
    *created = true;
    return e;
fail:
    m->failed = true;
    return NULL;
}

static bool set_text(char **field, const char *value)
{
    char *copy = strdup(value ? value : "");
    if (!copy)
        return false;
    free(*field);
    *field = copy;
    return true;
}

static void smap_free(struct smap *m)
{
    for (size_t i = 0; i < m->n; i++)
        free(m->e[i].key), free(m->e[i].s1), free(m->e[i].s2);
    free(m->e), free(m->slot);
    memset(m, 0, sizeof *m);
}

/* ---- the nodes table ------------------------------------------------------------------------- */

struct hnode {
    char *key, *name, *role, *last_seen;
    bool path_capable; /* CoreScope's prefix map holds it: a repeater, room server or room */
};

struct hnodes {
    struct hnode *v;
    size_t n, cap;
    struct smap role; /* key -> role (s1) */
};

static void hnodes_free(struct hnodes *h)
{
    for (size_t i = 0; i < h->n; i++)
        free(h->v[i].key), free(h->v[i].name), free(h->v[i].role), free(h->v[i].last_seen);
    free(h->v);
    smap_free(&h->role);
}

static bool lower_contains(const char *s, const char *what)
{
    size_t n = strlen(what);
    for (; *s; s++)
        if (strncasecmp(s, what, n) == 0)
            return true;
    return false;
}

static int read_hnodes(struct mg_db *db, struct hnodes *h)
{
    sqlite3_stmt *st = mg_db_prepare(
        db, "SELECT public_key, coalesce(name, ''), coalesce(role, ''), coalesce(last_seen, '')"
            " FROM nodes ORDER BY rowid");
    if (!st)
        return sqlite3_errcode(db->conn);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (h->n == h->cap) {
            size_t cap = h->cap ? h->cap * 2 : 256;
            struct hnode *more = realloc(h->v, cap * sizeof *more);
            if (!more) {
                rc = SQLITE_NOMEM;
                break;
            }
            h->v = more, h->cap = cap;
        }
        struct hnode *n = &h->v[h->n++];
        memset(n, 0, sizeof *n);
        const char *key = (const char *)sqlite3_column_text(st, 0);
        if (!set_text(&n->key, key) ||
            !set_text(&n->name, (const char *)sqlite3_column_text(st, 1)) ||
            !set_text(&n->role, (const char *)sqlite3_column_text(st, 2)) ||
            !set_text(&n->last_seen, (const char *)sqlite3_column_text(st, 3))) {
            rc = SQLITE_NOMEM;
            break;
        }
        n->path_capable = lower_contains(n->role, "repeater") ||
                          lower_contains(n->role, "room_server") ||
                          strcasecmp(n->role, "room") == 0;
        bool created;
        struct sent *e = smap_get(&h->role, n->key, strlen(n->key), &created);
        if (!e) {
            rc = SQLITE_NOMEM;
            break;
        }
        if (!set_text(&e->s1, n->role)) { /* a later row of a key overwrites, as Go's map */
            rc = SQLITE_NOMEM;
            break;
        }
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* The node CoreScope's prefix map gives first for a hop: the first (by rowid) repeater, room
 * server or room whose lowercased key starts with the lowercased hop (2 to 8 digits) or is it. */
static const struct hnode *hop_node(const struct hnodes *h, const char *hop)
{
    size_t len = strlen(hop);
    if (len < 2)
        return NULL;
    for (size_t i = 0; i < h->n; i++) {
        const struct hnode *n = &h->v[i];
        size_t klen = strlen(n->key);
        if (!n->path_capable)
            continue;
        if (len <= 8 && len <= klen && strncasecmp(n->key, hop, len) == 0)
            return n;
        if (len > 8 && klen > 8 && len == klen && strcasecmp(n->key, hop) == 0)
            return n;
    }
    return NULL;
}

/* ---- home regions ---------------------------------------------------------------------------- */

static bool codes_have(const char *codes, const char *iata)
{
    size_t n = strlen(iata);
    if (!n)
        return false;
    for (const char *p = codes; *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == n && memcmp(p, iata, n) == 0)
            return true;
        p += len + (comma ? 1 : 0);
    }
    return false;
}

/* Each node's home region (homes: key -> IATA in s1): the IATA (trimmed, upper case) of the
 * observers that heard most of its direct zero-hop ADVERTs (one per observer and path), the
 * least of equals. */
static int home_regions(struct mg_db *db, struct smap *homes)
{
    sqlite3_stmt *st = mg_db_prepare(
        db, "SELECT t.raw_hex, CASE WHEN json_valid(t.decoded_json) THEN coalesce(nullif("
            "CASE WHEN json_type(t.decoded_json, '$.pubKey') = 'text' THEN t.decoded_json ->> "
            "'$.pubKey' END, ''), CASE WHEN json_type(t.decoded_json, '$.public_key') = 'text'"
            " THEN t.decoded_json ->> '$.public_key' END) END, upper(trim(ob.iata)), count(*)"
            " FROM (SELECT DISTINCT o.transmission_id AS tid, ob.id AS oid,"
            " coalesce(o.path_json, '') AS pj FROM observations o JOIN transmissions t"
            " ON t.id = o.transmission_id AND t.payload_type = 4"
            " LEFT JOIN observers ob ON ob.rowid = o.observer_idx) d"
            " JOIN transmissions t ON t.id = d.tid JOIN observers ob ON ob.id = d.oid"
            " WHERE coalesce(trim(ob.iata), '') <> '' GROUP BY d.tid, upper(trim(ob.iata))");
    if (!st)
        return sqlite3_errcode(db->conn);
    struct smap tally = {0}; /* key "\1" IATA -> count */
    struct mg_buf k;
    mg_buf_init(&k);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int route, pb;
        const char *raw = (const char *)sqlite3_column_text(st, 0);
        const char *pk = (const char *)sqlite3_column_text(st, 1);
        const char *iata = (const char *)sqlite3_column_text(st, 2);
        if (!pk || !pk[0] || !iata || !raw || strlen(raw) < 4)
            continue;
        int header = mg_hex_byte(raw);
        if (header < 0)
            continue;
        route = header & 3;
        if (route != 2 && route != 3)
            continue;
        /* CoreScope reads the byte after the header here, whatever the route. */
        if ((pb = mg_hex_byte(raw + 2)) < 0 || (pb & 0x3f) != 0)
            continue;
        k.len = 0;
        mg_buf_printf(&k, "%s\1%s", pk, iata);
        bool created;
        struct sent *e = k.failed ? NULL : smap_get(&tally, mg_buf_cstr(&k), k.len, &created);
        if (!e) {
            rc = SQLITE_NOMEM;
            break;
        }
        e->a += sqlite3_column_int64(st, 3);
    }
    sqlite3_finalize(st);
    mg_buf_free(&k);
    if (rc == SQLITE_DONE)
        rc = SQLITE_OK;
    for (size_t i = 0; rc == SQLITE_OK && i < tally.n; i++) {
        const char *sep = strchr(tally.e[i].key, '\1');
        bool created;
        struct sent *h = smap_get(homes, tally.e[i].key, (size_t)(sep - tally.e[i].key), &created);
        if (!h) {
            rc = SQLITE_NOMEM;
            break;
        }
        if (created || tally.e[i].a > h->a ||
            (tally.e[i].a == h->a && strcmp(sep + 1, h->s1) < 0)) {
            h->a = tally.e[i].a;
            if (!set_text(&h->s1, sep + 1))
                rc = SQLITE_NOMEM;
        }
    }
    smap_free(&tally);
    return rc;
}

/* ---- the pass -------------------------------------------------------------------------------- */

struct pass {
    int64_t total, dist[4];
    struct hour {
        char hour[16];
        int64_t n[4];
    } * hours;
    size_t n_hours, cap_hours;
    struct smap hops;  /* hop -> size (a), count (b); first sight is the entry's order */
    struct smap nodes; /* originator -> hash size (a), packets (b), last seen (s1), name (s2) */
    struct smap susp;  /* lowercased hop of a multi-byte path (not TRACE) -> its first size */
    bool failed;
};

static void pass_free(struct pass *p)
{
    free(p->hours);
    smap_free(&p->hops), smap_free(&p->nodes), smap_free(&p->susp);
}

/* One transmission, with its best path (path: its text, NULL when none). */
struct tx {
    const char *raw, *first_seen, *pk, *name;
    int64_t payload_type;
    bool has_type, in_region;
    const char *path;
};

static void pass_tx(struct pass *p, const struct tx *t, bool regional, const char *codes,
                    const struct smap *homes, const struct mg_area_nodes *area)
{
    int route, pb;
    if (!t->raw || !t->raw[0] || !mg_packet_hex_path_byte(t->raw, &route, &pb))
        return;
    int hs = ((pb >> 6) & 3) + 1;
    char buf[4096];
    char *hops[PATH_HOPS_MAX];
    int n_hops = 0;
    if (t->path && t->path[0] && strcmp(t->path, "[]") != 0) {
        n_hops = mg_path_split(t->path, buf, sizeof buf, hops, PATH_HOPS_MAX);
        if (n_hops < 0)
            n_hops = 0;
    }
    /* The suspected capability's index: every packet, before any filter. */
    if (hs >= 2 && !(t->has_type && t->payload_type == 8)) {
        for (int i = 0; i < n_hops; i++) {
            char low[128];
            const char *h = hops[i] ? hops[i] : "";
            size_t len = strlen(h);
            if (len >= sizeof low)
                continue; /* no node prefix is as long */
            for (size_t k = 0; k <= len; k++)
                low[k] = (char)tolower((unsigned char)h[k]);
            bool created;
            struct sent *e = smap_get(&p->susp, low, len, &created);
            if (!e) {
                p->failed = true;
                return;
            }
            if (created)
                e->a = hs;
        }
    }
    if (hs > 3)
        return;
    bool advert = t->pk && t->pk[0];
    if (regional) {
        bool match = t->in_region;
        if (!match && advert) {
            struct sent *h = smap_get((struct smap *)homes, t->pk, strlen(t->pk), NULL);
            match = h && codes_have(codes, h->s1);
        }
        if (!match)
            return;
    }
    if (mg_area_nodes_filter(area) && advert && !mg_area_nodes_has(area, t->pk))
        return;
    if (advert) {
        bool zero_hop = (route == 2 || route == 3) && (pb & 0x3f) == 0;
        bool created;
        struct sent *e = smap_get(&p->nodes, t->pk, strlen(t->pk), &created);
        if (!e) {
            p->failed = true;
            return;
        }
        if (created) {
            char short_key[9];
            snprintf(short_key, sizeof short_key, "%s", t->pk);
            e->a = zero_hop ? 0 : hs;
            if (!set_text(&e->s2, t->name && t->name[0] ? t->name : short_key)) {
                p->failed = true;
                return;
            }
        }
        e->b++;
        if (!zero_hop)
            e->a = hs;
        if (!set_text(&e->s1, t->first_seen)) {
            p->failed = true;
            return;
        }
    }
    if (n_hops == 0)
        return;
    p->total++;
    p->dist[hs]++;
    if (t->first_seen && strlen(t->first_seen) >= 13) {
        /* first_seen's order is the pass's: an hour is the last one or a new one. */
        struct hour *last = p->n_hours ? &p->hours[p->n_hours - 1] : NULL;
        if (!last || strncmp(last->hour, t->first_seen, 13) != 0) {
            if (p->n_hours == p->cap_hours) {
                size_t cap = p->cap_hours ? p->cap_hours * 2 : 64;
                struct hour *more = realloc(p->hours, cap * sizeof *more);
                if (!more) {
                    p->failed = true;
                    return;
                }
                p->hours = more, p->cap_hours = cap;
            }
            last = &p->hours[p->n_hours++];
            memset(last, 0, sizeof *last);
            memcpy(last->hour, t->first_seen, 13);
        }
        last->n[hs]++;
    }
    for (int i = 0; i < n_hops; i++) {
        const char *h = hops[i] ? hops[i] : "";
        bool created;
        struct sent *e = smap_get(&p->hops, h, strlen(h), &created);
        if (!e) {
            p->failed = true;
            return;
        }
        if (created)
            e->a = (int64_t)(strlen(h) + 1) / 2;
        e->b++;
    }
}

enum { C_TX, C_RAW, C_TYPE, C_FIRST, C_PK, C_NAME, C_PATH, C_REGION };

/* The pass over every transmission with its observations (newest first). */
static int run_pass(struct mg_db *db, bool regional, const char *codes, const struct smap *homes,
                    const struct mg_area_nodes *area, struct pass *p)
{
    struct mg_buf sql;
    mg_buf_init(&sql);
    mg_buf_puts(&sql, "SELECT t.id, t.raw_hex, t.payload_type, t.first_seen,"
                      " CASE WHEN t.payload_type = 4 AND json_valid(t.decoded_json) THEN CASE"
                      " WHEN json_type(t.decoded_json, '$.pubKey') = 'text'"
                      " THEN t.decoded_json ->> '$.pubKey'"
                      " WHEN json_type(t.decoded_json, '$.public_key') = 'text'"
                      " THEN t.decoded_json ->> '$.public_key' END END,"
                      " CASE WHEN t.payload_type = 4 AND json_valid(t.decoded_json) AND"
                      " json_type(t.decoded_json, '$.name') = 'text'"
                      " THEN t.decoded_json ->> '$.name' END, o.path_json, ");
    if (regional) {
        mg_buf_puts(&sql, "o.observer_idx IN (SELECT rowid FROM observers WHERE upper(trim(iata))"
                          " IN (");
        for (const char *c = codes; *c; c++)
            if (c == codes || c[-1] == ',')
                mg_buf_puts(&sql, c == codes ? "?" : ",?");
        mg_buf_puts(&sql, "))");
    } else {
        mg_buf_puts(&sql, "0");
    }
    mg_buf_puts(&sql, " FROM transmissions t LEFT JOIN observations o ON o.transmission_id = t.id"
                      " ORDER BY t.first_seen, t.id, o.timestamp DESC, o.id");
    sqlite3_stmt *st = sql.failed ? NULL : mg_db_prepare(db, mg_buf_cstr(&sql));
    mg_buf_free(&sql);
    if (!st)
        return sqlite3_errcode(db->conn) ? sqlite3_errcode(db->conn) : SQLITE_NOMEM;
    if (regional) {
        int i = 1;
        for (const char *c = codes; *c;) {
            const char *comma = strchr(c, ',');
            size_t n = comma ? (size_t)(comma - c) : strlen(c);
            sqlite3_bind_text(st, i++, c, (int)n, SQLITE_TRANSIENT);
            c += n + (comma ? 1 : 0);
        }
    }
    /* The transmission being read: its columns, its best path so far. */
    int64_t cur = -1;
    struct tx t;
    struct mg_buf raw, first, pk, name, best;
    mg_buf_init(&raw), mg_buf_init(&first), mg_buf_init(&pk), mg_buf_init(&name);
    mg_buf_init(&best);
    int best_len = -1;
    bool has_best = false;
    int rc;
    for (;;) {
        rc = sqlite3_step(st);
        int64_t id = rc == SQLITE_ROW ? sqlite3_column_int64(st, C_TX) : -2;
        if (id != cur && cur != -1) {
            t.raw = mg_buf_cstr(&raw), t.first_seen = mg_buf_cstr(&first);
            t.path = has_best ? mg_buf_cstr(&best) : NULL;
            if (raw.failed || first.failed || pk.failed || name.failed || best.failed)
                p->failed = true;
            else
                pass_tx(p, &t, regional, codes, homes, area);
        }
        if (rc != SQLITE_ROW || p->failed)
            break;
        if (id != cur) {
            cur = id;
            memset(&t, 0, sizeof t);
            raw.len = first.len = pk.len = name.len = best.len = 0;
            const char *s;
            if ((s = (const char *)sqlite3_column_text(st, C_RAW)))
                mg_buf_puts(&raw, s);
            if ((s = (const char *)sqlite3_column_text(st, C_FIRST)))
                mg_buf_puts(&first, s);
            if ((s = (const char *)sqlite3_column_text(st, C_PK))) {
                mg_buf_puts(&pk, s);
                t.pk = mg_buf_cstr(&pk);
            }
            if ((s = (const char *)sqlite3_column_text(st, C_NAME))) {
                mg_buf_puts(&name, s);
                t.name = mg_buf_cstr(&name);
            }
            t.has_type = sqlite3_column_type(st, C_TYPE) != SQLITE_NULL;
            t.payload_type = sqlite3_column_int64(st, C_TYPE);
            best_len = -1, has_best = false;
        }
        if (sqlite3_column_type(st, C_PATH) == SQLITE_NULL &&
            sqlite3_column_type(st, C_REGION) == SQLITE_NULL)
            continue; /* no observation */
        t.in_region = t.in_region || sqlite3_column_int(st, C_REGION) != 0;
        const char *path = (const char *)sqlite3_column_text(st, C_PATH);
        path = path ? path : "";
        char buf[4096];
        char *hops[PATH_HOPS_MAX];
        int n = path[0] ? mg_path_split(path, buf, sizeof buf, hops, PATH_HOPS_MAX) : 0;
        n = n < 0 ? 0 : n;
        if (!has_best || n > best_len) {
            best.len = 0;
            mg_buf_puts(&best, path);
            best_len = n, has_best = true;
        }
    }
    sqlite3_finalize(st);
    mg_buf_free(&raw), mg_buf_free(&first), mg_buf_free(&pk), mg_buf_free(&name);
    mg_buf_free(&best);
    if (p->failed || p->hops.failed || p->nodes.failed || p->susp.failed)
        return SQLITE_NOMEM;
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* ---- the answer ------------------------------------------------------------------------------ */

static int by_count_desc(const void *a, const void *b)
{
    const struct sent *x = *(const struct sent *const *)a, *y = *(const struct sent *const *)b;
    if (x->b != y->b)
        return x->b > y->b ? -1 : 1;
    return x < y ? -1 : x > y; /* first sight */
}

static int by_packets_desc(const void *a, const void *b)
{
    const struct sent *x = *(const struct sent *const *)a, *y = *(const struct sent *const *)b;
    if (x->b != y->b)
        return x->b > y->b ? -1 : 1;
    return strcmp(x->key, y->key);
}

/* Whether an originator stays in the node lists: with a region, one whose home region is known
 * and not one of the codes leaves them. */
static bool node_kept(const struct hashsz_args *a, const struct smap *homes, const char *key)
{
    if (!a->region_given)
        return true;
    struct sent *h = smap_get((struct smap *)homes, key, strlen(key), NULL);
    return !h || codes_have(a->codes, h->s1);
}

struct cap {
    const struct hnode *node;
    int status; /* 0 confirmed, 1 suspected, 2 unknown */
    int max;
};

static const char *const statuses[] = {"confirmed", "suspected", "unknown"};
static const char *const evidences[] = {"advert", "path", ""};

static int lower_cmp(const char *x, const char *y)
{
    for (;; x++, y++) {
        int cx = tolower((unsigned char)*x), cy = tolower((unsigned char)*y);
        if (cx != cy || !cx)
            return cx - cy;
    }
}

static int by_status_name(const void *a, const void *b)
{
    const struct cap *x = a, *y = b;
    if (x->status != y->status)
        return x->status - y->status;
    int c = lower_cmp(x->node->name, y->node->name);
    return c ? c : strcmp(x->node->key, y->node->key);
}

/* The capability of every node; adopters: the originators with 2 or more bytes. */
static bool write_capability(struct mg_json *j, const struct hnodes *nodes,
                             const struct smap *adopters, const struct smap *susp)
{
    mg_json_key(j, "multiByteCapability");
    if (nodes->n == 0) {
        mg_json_null(j); /* CoreScope's empty list is nil */
        return true;
    }
    struct cap *caps = malloc(nodes->n * sizeof *caps);
    if (!caps)
        return false;
    mg_node_hash_sizes_read_begin();
    for (size_t i = 0; i < nodes->n; i++) {
        const struct hnode *n = &nodes->v[i];
        struct cap *c = &caps[i];
        *c = (struct cap){.node = n, .status = 2, .max = 1};
        struct mg_node_hash_sizes hs;
        bool known = mg_node_hash_sizes_lookup(n->key, &hs) && hs.known;
        int advert_max = 1;
        for (int s = 2; known && s < 32; s++)
            if (hs.seen_mask & (1u << s))
                advert_max = s;
        struct sent *ad = smap_get((struct smap *)adopters, n->key, strlen(n->key), NULL);
        int suspected = 0;
        for (size_t len = 2; len <= 6 && len <= strlen(n->key); len += 2) {
            char low[8];
            for (size_t k = 0; k < len; k++)
                low[k] = (char)tolower((unsigned char)n->key[k]);
            struct sent *e = smap_get((struct smap *)susp, low, len, NULL);
            if (e && e->a > suspected)
                suspected = (int)e->a;
        }
        if (advert_max >= 2)
            c->status = 0, c->max = advert_max;
        else if (ad && ad->a >= 2)
            c->status = 0, c->max = (int)ad->a;
        else if (suspected)
            c->status = 1, c->max = suspected;
        if (known && c->max == 1)
            c->max = advert_max;
    }
    mg_node_hash_sizes_read_end();
    qsort(caps, nodes->n, sizeof *caps, by_status_name);
    mg_json_array_begin(j);
    for (size_t i = 0; i < nodes->n; i++) {
        const struct cap *c = &caps[i];
        mg_json_object_begin(j);
        mg_json_kv_string(j, "pubkey", c->node->key);
        mg_json_kv_string(j, "name", c->node->name);
        mg_json_kv_string(j, "role", c->node->role);
        mg_json_kv_string(j, "status", statuses[c->status]);
        mg_json_kv_string(j, "evidence", evidences[c->status]);
        mg_json_kv_int(j, "maxHashSize", c->max);
        mg_json_kv_string(j, "lastSeen", c->node->last_seen);
        mg_json_object_end(j);
    }
    mg_json_array_end(j);
    free(caps);
    return true;
}

static void write_sizes(struct mg_json *j, const char *key, const int64_t *by_size, bool zero)
{
    mg_json_key(j, key);
    mg_json_object_begin(j);
    if (zero)
        mg_json_kv_int(j, "0", by_size[0]);
    mg_json_kv_int(j, "1", by_size[1]);
    mg_json_kv_int(j, "2", by_size[2]);
    mg_json_kv_int(j, "3", by_size[3]);
    mg_json_object_end(j);
}

static int hashsz_write(const struct hashsz_args *a, const struct pass *p,
                        const struct smap *adopters, const struct smap *homes,
                        const struct hnodes *nodes, struct mg_buf *body)
{
    size_t n_top = p->hops.n, n_mb = 0;
    const struct sent **top = malloc((n_top ? n_top : 1) * sizeof *top);
    const struct sent **mb = malloc((p->nodes.n ? p->nodes.n : 1) * sizeof *mb);
    if (!top || !mb) {
        free(top), free(mb);
        return SQLITE_NOMEM;
    }
    for (size_t i = 0; i < n_top; i++)
        top[i] = &p->hops.e[i];
    qsort(top, n_top, sizeof *top, by_count_desc);
    int64_t by_repeaters[4] = {0};
    bool zero = false;
    for (size_t i = 0; i < p->nodes.n; i++) {
        const struct sent *e = &p->nodes.e[i];
        if (!node_kept(a, homes, e->key))
            continue;
        if (e->a > 1)
            mb[n_mb++] = e;
        struct sent *r = smap_get((struct smap *)&nodes->role, e->key, strlen(e->key), NULL);
        if (r && lower_contains(r->s1, "repeater")) {
            by_repeaters[e->a]++;
            zero = zero || e->a == 0;
        }
    }
    qsort(mb, n_mb, sizeof *mb, by_packets_desc);

    struct mg_json j;
    mg_json_init(&j, body);
    mg_json_object_begin(&j);
    mg_json_kv_string(&j, "attributionMethod",
                      a->region_given && homes->n ? "repeater" : "observer");
    write_sizes(&j, "distribution", p->dist, false);
    write_sizes(&j, "distributionByRepeaters", by_repeaters, zero);
    mg_json_key(&j, "hourly");
    mg_json_array_begin(&j);
    for (size_t i = 0; i < p->n_hours; i++) {
        mg_json_object_begin(&j);
        mg_json_kv_int(&j, "1", p->hours[i].n[1]);
        mg_json_kv_int(&j, "2", p->hours[i].n[2]);
        mg_json_kv_int(&j, "3", p->hours[i].n[3]);
        mg_json_kv_string(&j, "hour", p->hours[i].hour);
        mg_json_object_end(&j);
    }
    mg_json_array_end(&j);
    bool ok = write_capability(&j, nodes, adopters, &p->susp);
    mg_json_key(&j, "multiByteNodes");
    mg_json_array_begin(&j);
    for (size_t i = 0; i < n_mb; i++) {
        struct sent *r =
            smap_get((struct smap *)&nodes->role, mb[i]->key, strlen(mb[i]->key), NULL);
        mg_json_object_begin(&j);
        mg_json_kv_int(&j, "hashSize", mb[i]->a);
        mg_json_kv_string(&j, "lastSeen", mb[i]->s1);
        mg_json_kv_string(&j, "name", mb[i]->s2);
        mg_json_kv_int(&j, "packets", mb[i]->b);
        mg_json_kv_string(&j, "pubkey", mb[i]->key);
        mg_json_kv_string(&j, "role", r ? r->s1 : "");
        mg_json_object_end(&j);
    }
    mg_json_array_end(&j);
    mg_json_key(&j, "topHops");
    mg_json_array_begin(&j);
    for (size_t i = 0; i < n_top && i < HASHSZ_TOP_HOPS; i++) {
        const struct hnode *n = hop_node(nodes, top[i]->key);
        mg_json_object_begin(&j);
        mg_json_kv_int(&j, "count", top[i]->b);
        mg_json_kv_string(&j, "hex", top[i]->key);
        mg_json_kv_string(&j, "name", n ? n->name : NULL);
        mg_json_kv_string(&j, "pubkey", n ? n->key : NULL);
        mg_json_kv_int(&j, "size", top[i]->a);
        mg_json_object_end(&j);
    }
    mg_json_array_end(&j);
    mg_json_kv_int(&j, "total", p->total);
    mg_json_object_end(&j);
    mg_buf_putc(body, '\n');
    free(top), free(mb);
    return ok && !body->failed ? SQLITE_OK : SQLITE_NOMEM;
}

/* Whether any observer has one of the codes (CoreScope filters no transmission otherwise). */
static int region_has_observers(struct mg_db *db, const char *codes, bool *has)
{
    *has = false;
    if (!codes[0])
        return SQLITE_OK;
    sqlite3_stmt *st = mg_db_prepare(db, "SELECT 1 FROM observers WHERE instr(iata, ',') = 0 AND"
                                         " instr(',' || ?1 || ',', ',' || upper(trim(iata)) ||"
                                         " ',') > 0 LIMIT 1");
    if (!st)
        return sqlite3_errcode(db->conn);
    sqlite3_bind_text(st, 1, codes, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    *has = rc == SQLITE_ROW;
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* The adopters: the originators with 2 or more bytes (a, their size) of a pass. */
static int adopters_of(const struct pass *p, struct smap *out)
{
    for (size_t i = 0; i < p->nodes.n; i++) {
        if (p->nodes.e[i].a < 2)
            continue;
        bool created;
        struct sent *e = smap_get(out, p->nodes.e[i].key, strlen(p->nodes.e[i].key), &created);
        if (!e)
            return SQLITE_NOMEM;
        e->a = p->nodes.e[i].a;
    }
    return SQLITE_OK;
}

static int hashsz_body(struct mg_db *db, const struct hashsz_args *a, struct mg_buf *body)
{
    struct hnodes nodes = {0};
    struct smap homes = {0}, adopters = {0};
    struct pass p = {0};
    struct mg_area_nodes area;
    memset(&area, 0, sizeof area);
    bool regional = false;
    int rc = read_hnodes(db, &nodes);
    if (rc == SQLITE_OK && a->region_given)
        rc = region_has_observers(db, a->codes, &regional);
    if (rc == SQLITE_OK && a->region_given)
        rc = home_regions(db, &homes);
    if (rc == SQLITE_OK && a->area[0])
        rc = mg_area_nodes_load(db->conn, a->area, &area);
    if (rc == SQLITE_OK)
        rc = run_pass(db, regional, a->codes, &homes, &area, &p);
    if (rc == SQLITE_OK && !a->region_given) {
        rc = adopters_of(&p, &adopters);
    } else if (rc == SQLITE_OK) {
        /* With a region, the adopters are those of the pass without any filter. */
        struct pass all = {0};
        struct mg_area_nodes none;
        memset(&none, 0, sizeof none);
        rc = run_pass(db, false, "", &homes, &none, &all);
        if (rc == SQLITE_OK)
            rc = adopters_of(&all, &adopters);
        pass_free(&all);
    }
    if (rc == SQLITE_OK)
        rc = hashsz_write(a, &p, &adopters, &homes, &nodes, body);
    pass_free(&p);
    mg_area_nodes_free(&area);
    smap_free(&homes), smap_free(&adopters);
    hnodes_free(&nodes);
    return rc;
}

static void hashsz_build(struct mg_cold_build *b, struct mg_db *db)
{
    struct hashsz_args a;
    memcpy(&a, b->args, sizeof a);
    bool began = mg_node_read_begin(db);
    int rc = hashsz_body(db, &a, &b->body);
    mg_node_read_end(db, began);
    mg_cold_result(b, rc, "the transmissions");
}

static const struct mg_cold_report hashsz_report = {
    .name = "hash sizes",
    .not_found = "Not found",
    .bad_request = "bad request",
    .build = hashsz_build,
    .needs = MG_COLD_NEEDS_HASH_SIZES,
};

bool mg_hash_sizes_is_heavy(struct mg_env *env, const struct mg_request *req)
{
    struct hashsz_args a;
    char key[HASHSZ_KEY_BYTES];
    if (!hashsz_args(req, NULL, &a, key, sizeof key))
        return false; /* answered 400 at once */
    return mg_cold_report_is_heavy(env, key);
}

enum mg_turn mg_handle_hash_sizes(struct mg_env *env, const struct mg_request *req,
                                  struct mg_response *res)
{
    struct hashsz_args a;
    char key[HASHSZ_KEY_BYTES];
    if (!hashsz_args(req, res, &a, key, sizeof key))
        return MG_DONE;
    return mg_cold_report_serve(env, req, res, &hashsz_report, key, &a, sizeof a);
}

/* SPDX-License-Identifier: ISC */
/*
 * reach: the reach report of one node (contract, section 3).
 *
 * A build runs in one read transaction and does, in order:
 *   1. reads every node (name, role, position, first_seen) and every observer (id, name) into
 *      one table sorted by lowercased key, and the lowercased keys of the relay nodes (role
 *      containing "repeater" or "room_server", or equal to "room") into a sorted array. That
 *      array is the prefix map: a token of length 2..8 names the relays whose key starts with
 *      it, a token of any other length the relays whose key equals it, so one binary search
 *      answers "exactly one relay?" without building the map's ~10 entries per node.
 *   2. the target's reliable tokens: those of its 2-, 4- and 6-char prefixes that resolve to it.
 *   3. neighbour degrees from neighbor_edges (importance).
 *   4. when there is a token, the scan of the window, then the attribution of each hit.
 *
 * Why the scan looks the way it does. A report reads every observation of its window (a week
 * is most of a database), and CoreScope's query spends its time in the wrong places: it walks
 * the timestamp index and seeks each table row from it, then runs LIKE (a case-insensitive
 * pattern matcher) once per token on every row. Here the window becomes a rowid range
 * instead: rows are written in time order, so the smallest rowid in the window (found in the
 * index, not the table) starts one sequential pass over the table, and the exact test of the
 * timestamp is kept per row, so a row written out of order is still judged by its time. The
 * token test is mg_reach_match, a C function in the WHERE clause: it looks for a quote
 * followed by the target's first byte, which most paths do not have, and only then compares
 * the tokens. Rows that fail it never reach the join, so only matching rows are joined to
 * their transmission (cheaply: the cursor moves forward) and returned. The matching is that
 * of LIKE '%"TOKEN"%' (ASCII case folded), so the same rows count toward the row cap.
 */
#include "reach.h"

#include "json.h"

#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ARENA_CHUNK_BYTES (64 * 1024)
#define SECONDS_PER_DAY 86400
#define ADVERT_PAYLOAD_TYPE 4
#define EARTH_RADIUS_KM 6371.0
/* The type tag of the pointer mg_reach_match receives (sqlite3_bind_pointer). */
#define SCAN_POINTER_TYPE "mg_reach_scan"

/* --- text ------------------------------------------------------------------------------- */

/* A string that may hold any byte; p is never NULL. */
struct text {
    const char *p;
    size_t n;
};

static const struct text empty_text = {"", 0};

static char ascii_lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c + ('a' - 'A')) : c;
}

static char ascii_upper(char c)
{
    return c >= 'a' && c <= 'z' ? (char)(c - ('a' - 'A')) : c;
}

/* a (any case) equals lower (already lowercase) over n bytes, folding ASCII only. */
static bool ascii_case_equal(const char *a, const char *lower, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (ascii_lower(a[i]) != lower[i])
            return false;
    return true;
}

/* Bytewise order, a shorter string first when it is a prefix of the other. */
static int text_compare(struct text a, struct text b)
{
    int c = memcmp(a.p, b.p, a.n < b.n ? a.n : b.n);
    if (c != 0)
        return c;
    return a.n < b.n ? -1 : a.n > b.n ? 1 : 0;
}

static bool text_equal(struct text a, struct text b)
{
    return a.n == b.n && memcmp(a.p, b.p, a.n) == 0;
}

/* --- arena: every string of one build, freed at once ------------------------------------- */

struct arena_chunk {
    struct arena_chunk *next;
    size_t used, cap;
    char data[];
};

struct arena {
    struct arena_chunk *head;
    bool failed;
};

static char *arena_alloc(struct arena *a, size_t n)
{
    struct arena_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > ARENA_CHUNK_BYTES ? n : ARENA_CHUNK_BYTES;
        c = malloc(sizeof *c + cap);
        if (!c) {
            a->failed = true;
            return NULL;
        }
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
    }
    char *p = c->data + c->used;
    c->used += n;
    return p;
}

static void arena_free(struct arena *a)
{
    while (a->head) {
        struct arena_chunk *next = a->head->next;
        free(a->head);
        a->head = next;
    }
}

/* A copy of s (n bytes), lowercased (ASCII) when asked, NUL-terminated. */
static struct text arena_copy(struct arena *a, const char *s, size_t n, bool lower)
{
    char *p = arena_alloc(a, n + 1);
    if (!p)
        return (struct text){"", 0};
    for (size_t i = 0; i < n; i++)
        p[i] = lower ? ascii_lower(s[i]) : s[i];
    p[n] = '\0';
    return (struct text){p, n};
}

/* --- tallies by key: an open-addressing hash table --------------------------------------- */

struct tally {
    struct text key; /* key.p == NULL: an empty slot */
    uint64_t hash;
    int64_t we_hear, they_hear;
    int64_t observed, snr_count; /* direct_observers: rows, and rows with an SNR */
    double snr_sum;
    int64_t degree; /* neighbor_edges appearances */
};

struct tally_map {
    struct tally *slots;
    size_t cap, used; /* cap is 0 or a power of two */
};

static uint64_t hash_bytes(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 1099511628211u;
    }
    return h;
}

static bool tally_grow(struct tally_map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    struct tally *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return false;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].key.p)
            continue;
        size_t at = (size_t)m->slots[i].hash & (cap - 1);
        while (slots[at].key.p)
            at = (at + 1) & (cap - 1);
        slots[at] = m->slots[i];
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return true;
}

/* The tally of key (n bytes, copied into the arena when it is new); NULL when absent and
 * !insert, or out of memory. */
static struct tally *tally_get(struct tally_map *m, struct arena *a, const char *key, size_t n,
                               bool insert)
{
    if (m->cap == 0 && !insert)
        return NULL;
    if (insert && (m->used + 1) * 2 > m->cap && !tally_grow(m))
        return NULL;
    uint64_t h = hash_bytes(key, n);
    size_t at = (size_t)h & (m->cap - 1);
    for (;; at = (at + 1) & (m->cap - 1)) {
        struct tally *t = &m->slots[at];
        if (!t->key.p)
            break;
        if (t->hash == h && t->key.n == n && memcmp(t->key.p, key, n) == 0)
            return t;
    }
    if (!insert)
        return NULL;
    struct text copy = arena_copy(a, key, n, false);
    if (a->failed)
        return NULL;
    struct tally *t = &m->slots[at];
    memset(t, 0, sizeof *t);
    t->key = copy;
    t->hash = h;
    m->used++;
    return t;
}

/* --- one build --------------------------------------------------------------------------- */

struct node_info {
    struct text key; /* lowercased */
    struct text name, role, first_seen;
    double lat, lon;
    bool has_gps;
    bool is_node; /* false: an observer whose key is no node's */
    int64_t seq;  /* the order rows were read in */
};

struct reach {
    struct mg_db *db;
    struct text target; /* the 64 lowercase hex chars of key */
    char key[65];
    int64_t since;
    int64_t row_cap;
    struct arena arena;

    struct node_info *infos; /* sorted by key, one per key */
    size_t n_infos, cap_infos;
    struct text *relays; /* the prefix map: relay keys, lowercased and sorted */
    size_t n_relays, cap_relays;

    bool token_len[7]; /* reliable tokens by length: 2, 4 and 6 */
    size_t shortest_token;
    int n_tokens;

    struct tally_map links;
    struct tally_map degrees;
    int64_t relay_observations;
    int64_t rows_scanned;
    bool truncated;
    int db_error;

    struct text *path; /* the tokens of the current row (pointing into its path_json) */
    size_t cap_path;
    struct mg_buf lowered; /* scratch for lowercasing */
    struct mg_buf lowered_from;
    struct mg_buf lowered_observer;

    char *err;
    size_t errlen;
};

static enum mg_reach_result fail(struct reach *r, const char *what)
{
    r->db_error = sqlite3_extended_errcode(r->db->conn);
    if (r->err && r->errlen)
        snprintf(r->err, r->errlen, "reach: %s: %s", what, sqlite3_errmsg(r->db->conn));
    return MG_REACH_ERROR;
}

static enum mg_reach_result out_of_memory(struct reach *r)
{
    if (r->err && r->errlen)
        snprintf(r->err, r->errlen, "reach: out of memory");
    return MG_REACH_ERROR;
}

/* Column col as text, copied into the arena; NULL reads as "". */
static struct text column_text(struct reach *r, sqlite3_stmt *st, int col, bool lower)
{
    const char *s = (const char *)sqlite3_column_text(st, col);
    if (!s)
        return (struct text){"", 0};
    return arena_copy(&r->arena, s, (size_t)sqlite3_column_bytes(st, col), lower);
}

static struct text lower_into(struct mg_buf *b, const char *s, size_t n)
{
    mg_buf_reset(b);
    if (!mg_buf_reserve(b, n + 1))
        return (struct text){"", 0};
    for (size_t i = 0; i < n; i++)
        b->data[i] = ascii_lower(s[i]);
    b->len = n;
    b->data[n] = '\0';
    return (struct text){b->data, n};
}

static struct node_info *push_info(struct reach *r)
{
    if (r->n_infos == r->cap_infos) {
        size_t cap = r->cap_infos ? r->cap_infos * 2 : 256;
        struct node_info *infos = realloc(r->infos, cap * sizeof *infos);
        if (!infos)
            return NULL;
        r->infos = infos;
        r->cap_infos = cap;
    }
    struct node_info *n = &r->infos[r->n_infos++];
    memset(n, 0, sizeof *n);
    n->seq = (int64_t)r->n_infos;
    return n;
}

static bool push_relay(struct reach *r, struct text key)
{
    if (r->n_relays == r->cap_relays) {
        size_t cap = r->cap_relays ? r->cap_relays * 2 : 256;
        struct text *relays = realloc(r->relays, cap * sizeof *relays);
        if (!relays)
            return false;
        r->relays = relays;
        r->cap_relays = cap;
    }
    r->relays[r->n_relays++] = key;
    return true;
}

/* The roles whose nodes relay, hence whose keys enter the prefix map. */
static bool is_relay_role(struct text role_lower)
{
    return memmem(role_lower.p, role_lower.n, "repeater", 8) ||
           memmem(role_lower.p, role_lower.n, "room_server", 11) ||
           (role_lower.n == 4 && memcmp(role_lower.p, "room", 4) == 0);
}

static enum mg_reach_result load_nodes(struct reach *r)
{
    sqlite3_stmt *st =
        mg_db_prepare(r->db, "SELECT public_key, name, role, lat, lon, first_seen FROM nodes");
    if (!st)
        return fail(r, "reading nodes");
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (sqlite3_column_type(st, 0) == SQLITE_NULL)
            continue;
        struct node_info *n = push_info(r);
        if (!n)
            break;
        n->is_node = true;
        n->key = column_text(r, st, 0, true);
        n->name = column_text(r, st, 1, false);
        n->role = column_text(r, st, 2, false);
        n->first_seen = column_text(r, st, 5, false);
        if (sqlite3_column_type(st, 3) != SQLITE_NULL &&
            sqlite3_column_type(st, 4) != SQLITE_NULL) {
            n->lat = sqlite3_column_double(st, 3);
            n->lon = sqlite3_column_double(st, 4);
            n->has_gps = !(n->lat == 0 && n->lon == 0);
        }
        if (is_relay_role(lower_into(&r->lowered, n->role.p, n->role.n)) && !push_relay(r, n->key))
            break;
    }
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
        enum mg_reach_result res = fail(r, "reading nodes");
        sqlite3_finalize(st);
        return res;
    }
    sqlite3_finalize(st);
    if (rc == SQLITE_ROW || r->arena.failed || r->lowered.failed)
        return out_of_memory(r);

    st = mg_db_prepare(r->db, "SELECT id, name FROM observers");
    if (!st)
        return fail(r, "reading observers");
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (sqlite3_column_type(st, 0) == SQLITE_NULL)
            continue;
        struct node_info *n = push_info(r);
        if (!n)
            break;
        n->key = column_text(r, st, 0, true);
        n->name = column_text(r, st, 1, false);
        n->role = (struct text){"observer", 8};
        n->first_seen = (struct text){"", 0};
    }
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
        enum mg_reach_result res = fail(r, "reading observers");
        sqlite3_finalize(st);
        return res;
    }
    sqlite3_finalize(st);
    if (rc == SQLITE_ROW || r->arena.failed)
        return out_of_memory(r);
    return MG_REACH_OK;
}

/* One entry per key: a node before an observer; of several nodes the last row read (as a map
 * filled in table order keeps it), of several observers the first. */
static int info_order(const void *a, const void *b)
{
    const struct node_info *x = a, *y = b;
    int c = text_compare(x->key, y->key);
    if (c != 0)
        return c;
    if (x->is_node != y->is_node)
        return x->is_node ? -1 : 1;
    if (x->is_node)
        return x->seq > y->seq ? -1 : x->seq < y->seq;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int text_order(const void *a, const void *b)
{
    return text_compare(*(const struct text *)a, *(const struct text *)b);
}

static void index_nodes(struct reach *r)
{
    /* qsort wants a valid pointer even for no elements, and an empty table has none. */
    if (r->n_infos > 0)
        qsort(r->infos, r->n_infos, sizeof *r->infos, info_order);
    size_t kept = 0;
    for (size_t i = 0; i < r->n_infos; i++)
        if (kept == 0 || !text_equal(r->infos[kept - 1].key, r->infos[i].key))
            r->infos[kept++] = r->infos[i];
    r->n_infos = kept;
    if (r->n_relays > 0)
        qsort(r->relays, r->n_relays, sizeof *r->relays, text_order);
}

static const struct node_info *find_info(const struct reach *r, struct text key)
{
    size_t lo = 0, hi = r->n_infos;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = text_compare(r->infos[mid].key, key);
        if (c == 0)
            return &r->infos[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/*
 * resolve(tok): the one relay the prefix map lists for tok, or NULL when it lists none or
 * several. The map holds each relay key's prefixes of length 2..8 and the whole key.
 */
static const struct text *resolve(struct reach *r, const char *tok, size_t n)
{
    struct text t = lower_into(&r->lowered, tok, n);
    if (r->lowered.failed)
        return NULL;
    size_t lo = 0, hi = r->n_relays;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (text_compare(r->relays[mid], t) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    bool by_prefix = n >= 2 && n <= 8;
    size_t listed = 0;
    for (size_t i = lo; i < r->n_relays && listed < 2; i++) {
        const struct text *k = &r->relays[i];
        bool named = by_prefix ? k->n >= n && memcmp(k->p, t.p, n) == 0 : text_equal(*k, t);
        if (!named)
            break;
        listed++;
    }
    return listed == 1 ? &r->relays[lo] : NULL;
}

static void find_reliable_tokens(struct reach *r)
{
    r->shortest_token = 0;
    for (size_t len = 2; len <= 6; len += 2) {
        const struct text *k = resolve(r, r->key, len);
        r->token_len[len] = k && text_equal(*k, r->target);
        if (r->token_len[len]) {
            r->n_tokens++;
            if (!r->shortest_token)
                r->shortest_token = len;
        }
    }
}

/* Each key's appearances in neighbor_edges, node_a and node_b counted apart, lowercased. */
static enum mg_reach_result count_degrees(struct reach *r)
{
    sqlite3_stmt *st = mg_db_prepare(r->db, "SELECT node_a, node_b FROM neighbor_edges");
    if (!st)
        return fail(r, "reading neighbor_edges");
    int rc = SQLITE_OK;
    bool oom = false;
    while (!oom && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        for (int col = 0; col < 2 && !oom; col++) {
            const char *k = (const char *)sqlite3_column_text(st, col);
            if (!k)
                continue;
            struct text key = lower_into(&r->lowered, k, (size_t)sqlite3_column_bytes(st, col));
            struct tally *t = tally_get(&r->degrees, &r->arena, key.p, key.n, true);
            if (!t || r->lowered.failed)
                oom = true;
            else
                t->degree++;
        }
    }
    if (oom) {
        sqlite3_finalize(st);
        return out_of_memory(r);
    }
    if (rc != SQLITE_DONE) {
        enum mg_reach_result res = fail(r, "reading neighbor_edges");
        sqlite3_finalize(st);
        return res;
    }
    sqlite3_finalize(st);
    return MG_REACH_OK;
}

/* --- the scan ---------------------------------------------------------------------------- */

/* SQL's `timestamp >= since`: NULL never, a number by value, text and blobs always (they sort
 * after every number). */
static bool in_window(sqlite3_value *ts, int64_t since)
{
    switch (sqlite3_value_type(ts)) {
    case SQLITE_INTEGER:
        return sqlite3_value_int64(ts) >= since;
    case SQLITE_FLOAT:
        return sqlite3_value_double(ts) >= (double)since;
    case SQLITE_NULL:
        return false;
    default:
        return true;
    }
}

/* Whether path holds `"TOKEN"` for one of the reliable tokens, ASCII case folded: the rows
 * LIKE '%"TOKEN"%' matches. Every token starts with the target's first byte, so a quote
 * followed by those two chars comes first; most paths have none. */
static bool path_holds_token(const struct reach *r, const char *path, size_t n)
{
    const char c0 = r->key[0], c1 = r->key[1];
    size_t min_len = r->shortest_token + 2;
    for (size_t i = 0; i + min_len <= n; i++) {
        /* (c | 0x20) folds letters; the few other bytes it lets through fail below. */
        if (path[i] != '"' || (path[i + 1] | 0x20) != c0 || (path[i + 2] | 0x20) != c1)
            continue;
        for (size_t len = 2; len <= 6; len += 2)
            if (r->token_len[len] && i + len + 2 <= n && path[i + len + 1] == '"' &&
                ascii_case_equal(path + i + 1, r->key, len))
                return true;
    }
    return false;
}

/* mg_reach_match(path_json, timestamp, scan): whether the row is in the window and its path
 * holds a token. Counts the rows it sees. */
static void reach_match_sql(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    struct reach *r = sqlite3_value_pointer(argv[2], SCAN_POINTER_TYPE);
    if (!r) {
        sqlite3_result_error(ctx, "mg_reach_match: called outside a reach scan", -1);
        return;
    }
    r->rows_scanned++;
    if (!in_window(argv[1], r->since)) {
        sqlite3_result_int(ctx, 0);
        return;
    }
    const char *path = (const char *)sqlite3_value_text(argv[0]);
    sqlite3_result_int(ctx,
                       path && path_holds_token(r, path, (size_t)sqlite3_value_bytes(argv[0])));
}

/*
 * The scan. The CROSS JOIN keeps observations the outer loop (a rowid range), so the match
 * runs once per row before any join; a transmission is looked up only for matching rows, and
 * a row without one does not count (as with CoreScope's inner join).
 */
const char mg_reach_scan_sql[] =
    "SELECT o.path_json, o.snr, obs.id, t.from_pubkey, t.payload_type"
    " FROM observations AS o CROSS JOIN transmissions AS t"
    " LEFT JOIN observers AS obs ON obs.rowid = o.observer_idx"
    " WHERE o.rowid >= ?1 AND mg_reach_match(o.path_json, o.timestamp, ?2)"
    " AND t.id = o.transmission_id"
    " LIMIT ?3";

static sqlite3_stmt *prepare_scan(struct reach *r)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v3(r->db->conn, mg_reach_scan_sql, -1, 0, &st, NULL) == SQLITE_OK)
        return st;
    /* The first scan on this connection registers the function, once: redefining it would
     * expire every statement the connection has prepared. */
    if (!strstr(sqlite3_errmsg(r->db->conn), "no such function: mg_reach_match") ||
        sqlite3_create_function_v2(r->db->conn, "mg_reach_match", 3,
                                   SQLITE_UTF8 | SQLITE_DIRECTONLY, NULL, reach_match_sql, NULL,
                                   NULL, NULL) != SQLITE_OK)
        return NULL;
    return mg_db_prepare(r->db, mg_reach_scan_sql);
}

/*
 * The smallest rowid that can be in the window, from the timestamp index; INT64_MIN when the
 * whole table may be (the oldest row is in the window, or there is no index to ask). *empty
 * when no row is in the window.
 */
static enum mg_reach_result window_first_rowid(struct reach *r, int64_t *first, bool *empty)
{
    *first = INT64_MIN;
    *empty = false;
    sqlite3_stmt *st = NULL;
    /* INDEXED BY: without it SQLite may answer min() by walking the table from its start. */
    if (sqlite3_prepare_v3(r->db->conn,
                           "SELECT min(timestamp) FROM observations"
                           " INDEXED BY idx_observations_timestamp",
                           -1, 0, &st, NULL) != SQLITE_OK)
        return MG_REACH_OK;
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        enum mg_reach_result res = fail(r, "finding the window");
        sqlite3_finalize(st);
        return res;
    }
    int type = sqlite3_column_type(st, 0);
    bool all_in = (type == SQLITE_INTEGER && sqlite3_column_int64(st, 0) >= r->since) ||
                  (type == SQLITE_FLOAT && sqlite3_column_double(st, 0) >= (double)r->since);
    sqlite3_finalize(st);
    if (type == SQLITE_NULL) {
        *empty = true;
        return MG_REACH_OK;
    }
    if (all_in)
        return MG_REACH_OK;

    st = mg_db_prepare(r->db, "SELECT min(rowid) FROM observations"
                              " INDEXED BY idx_observations_timestamp WHERE timestamp >= ?1");
    if (!st)
        return fail(r, "finding the window");
    sqlite3_bind_int64(st, 1, r->since);
    rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        enum mg_reach_result res = fail(r, "finding the window");
        sqlite3_finalize(st);
        return res;
    }
    if (sqlite3_column_type(st, 0) == SQLITE_NULL)
        *empty = true;
    else
        *first = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return MG_REACH_OK;
}

static bool path_reserve(struct reach *r, size_t n)
{
    if (n <= r->cap_path)
        return true;
    size_t cap = r->cap_path ? r->cap_path : 16;
    while (cap < n)
        cap *= 2;
    struct text *path = realloc(r->path, cap * sizeof *path);
    if (!path)
        return false;
    r->path = path;
    r->cap_path = cap;
    return true;
}

/* Every "…"-quoted substring of path_json, in order; the count, or -1 out of memory. */
static long split_path(struct reach *r, const char *s, size_t n)
{
    size_t count = 0;
    const char *end = s + n;
    for (const char *p = s; p < end;) {
        const char *open = memchr(p, '"', (size_t)(end - p));
        if (!open)
            break;
        const char *close = memchr(open + 1, '"', (size_t)(end - open - 1));
        if (!close)
            break;
        if (!path_reserve(r, count + 1))
            return -1;
        r->path[count++] = (struct text){open + 1, (size_t)(close - open - 1)};
        p = close + 1;
    }
    return (long)count;
}

static bool is_target_token(const struct reach *r, struct text tok)
{
    return tok.n <= 6 && r->token_len[tok.n] && ascii_case_equal(tok.p, r->key, tok.n);
}

static bool is_target(const struct reach *r, struct text key)
{
    return text_equal(key, r->target);
}

/* we_hear (or they_hear) credit to key; false when out of memory. */
static bool credit(struct reach *r, struct text key, bool we_hear)
{
    struct tally *t = tally_get(&r->links, &r->arena, key.p, key.n, true);
    if (!t)
        return false;
    if (we_hear)
        t->we_hear++;
    else
        t->they_hear++;
    return true;
}

/* The key of the relay tok names, when there is one and it is not the target. */
static const struct text *neighbour(struct reach *r, struct text tok)
{
    const struct text *k = resolve(r, tok.p, tok.n);
    return k && !is_target(r, *k) ? k : NULL;
}

/* Column col lowercased into b; "" for NULL. */
static struct text column_lowered(struct mg_buf *b, sqlite3_stmt *st, int col)
{
    const char *s = (const char *)sqlite3_column_text(st, col);
    if (!s)
        return (struct text){"", 0};
    return lower_into(b, s, (size_t)sqlite3_column_bytes(st, col));
}

/* Attribution of one row (contract, section 3, rule 7); false when out of memory. */
static bool attribute_row(struct reach *r, sqlite3_stmt *st)
{
    const char *path_json = (const char *)sqlite3_column_text(st, 0);
    if (!path_json)
        return true;
    long n = split_path(r, path_json, (size_t)sqlite3_column_bytes(st, 0));
    if (n < 0)
        return false;
    bool hit = false;
    for (long i = 0; i < n; i++) {
        if (!is_target_token(r, r->path[i]))
            continue;
        hit = true;
        if (i > 0) {
            const struct text *k = neighbour(r, r->path[i - 1]);
            if (k && !credit(r, *k, true))
                return false;
        } else if (sqlite3_column_type(st, 4) != SQLITE_NULL &&
                   sqlite3_column_int64(st, 4) == ADVERT_PAYLOAD_TYPE) {
            struct text from = column_lowered(&r->lowered_from, st, 3);
            if (from.n > 0 && !is_target(r, from) && !credit(r, from, true))
                return false;
        }
        if (i < n - 1) {
            const struct text *k = neighbour(r, r->path[i + 1]);
            if (k && !credit(r, *k, false))
                return false;
        } else {
            struct text observer = column_lowered(&r->lowered_observer, st, 2);
            if (observer.n > 0 && !is_target(r, observer)) {
                if (!credit(r, observer, false))
                    return false;
                struct tally *t = tally_get(&r->links, &r->arena, observer.p, observer.n, false);
                t->observed++;
                if (sqlite3_column_type(st, 1) != SQLITE_NULL) {
                    t->snr_sum += sqlite3_column_double(st, 1);
                    t->snr_count++;
                }
            }
        }
    }
    if (hit)
        r->relay_observations++;
    return !r->lowered.failed && !r->lowered_from.failed && !r->lowered_observer.failed;
}

static enum mg_reach_result scan(struct reach *r)
{
    int64_t first;
    bool empty;
    enum mg_reach_result res = window_first_rowid(r, &first, &empty);
    if (res != MG_REACH_OK || empty)
        return res;

    sqlite3_stmt *st = prepare_scan(r);
    if (!st)
        return fail(r, "preparing the scan");
    sqlite3_bind_int64(st, 1, first);
    sqlite3_bind_pointer(st, 2, r, SCAN_POINTER_TYPE, NULL);
    /* One row past the cap tells that the cap truncated. */
    sqlite3_bind_int64(st, 3, r->row_cap + 1);
    int64_t rows = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (++rows > r->row_cap) {
            r->truncated = true;
            break;
        }
        if (!attribute_row(r, st)) {
            sqlite3_finalize(st);
            return out_of_memory(r);
        }
    }
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
        res = fail(r, "scanning observations");
        sqlite3_finalize(st);
        return res;
    }
    sqlite3_finalize(st);
    return MG_REACH_OK;
}

/* --- the body ---------------------------------------------------------------------------- */

static int link_order(const void *a, const void *b)
{
    const struct tally *x = *(const struct tally *const *)a, *y = *(const struct tally *const *)b;
    bool xb = x->we_hear > 0 && x->they_hear > 0, yb = y->we_hear > 0 && y->they_hear > 0;
    if (xb != yb)
        return xb ? -1 : 1;
    int64_t xn = x->we_hear < x->they_hear ? x->we_hear : x->they_hear;
    int64_t yn = y->we_hear < y->they_hear ? y->we_hear : y->they_hear;
    if (xn != yn)
        return xn > yn ? -1 : 1;
    int64_t xs = x->we_hear + x->they_hear, ys = y->we_hear + y->they_hear;
    if (xs != ys)
        return xs > ys ? -1 : 1;
    return text_compare(x->key, y->key);
}

static int observer_order(const void *a, const void *b)
{
    const struct tally *x = *(const struct tally *const *)a, *y = *(const struct tally *const *)b;
    if (x->observed != y->observed)
        return x->observed > y->observed ? -1 : 1;
    return text_compare(x->key, y->key);
}

double mg_haversine_km(double lat1, double lon1, double lat2, double lon2)
{
    double dlat = (lat2 - lat1) * M_PI / 180;
    double dlon = (lon2 - lon1) * M_PI / 180;
    double a = sin(dlat / 2) * sin(dlat / 2) +
               cos(lat1 * M_PI / 180) * cos(lat2 * M_PI / 180) * sin(dlon / 2) * sin(dlon / 2);
    return EARTH_RADIUS_KM * 2 * atan2(sqrt(a), sqrt(1 - a));
}

static void write_text(struct mg_json *j, const char *key, struct text t)
{
    mg_json_key(j, key);
    mg_json_string_n(j, t.p, t.n);
}

/* "lat" and "lon" of a node with GPS, else null. */
static void write_position(struct mg_json *j, const struct node_info *n)
{
    if (n && n->has_gps) {
        mg_json_kv_double(j, "lat", n->lat);
        mg_json_kv_double(j, "lon", n->lon);
    } else {
        mg_json_kv_null(j, "lat");
        mg_json_kv_null(j, "lon");
    }
}

/* "distance_km" from the target to n when both have GPS, else null. */
static void write_distance(struct mg_json *j, const struct node_info *self,
                           const struct node_info *n)
{
    if (n && n->has_gps && self->has_gps)
        mg_json_kv_double(j, "distance_km", mg_haversine_km(self->lat, self->lon, n->lat, n->lon));
    else
        mg_json_kv_null(j, "distance_km");
}

static void write_body(struct reach *r, const struct node_info *self, int days,
                       struct tally **links, size_t n_links, size_t n_bidir,
                       struct tally **observers, size_t n_observers, struct mg_buf *body)
{
    struct mg_json j;
    mg_json_init(&j, body);
    mg_json_object_begin(&j);

    mg_json_key(&j, "node");
    mg_json_object_begin(&j);
    write_text(&j, "pubkey", r->target);
    write_text(&j, "name", self->name);
    write_text(&j, "role", self->role);
    write_position(&j, self);
    write_text(&j, "first_seen", self->first_seen);
    mg_json_object_end(&j);

    char since[32];
    time_t since_time = (time_t)r->since;
    struct tm tm;
    gmtime_r(&since_time, &tm);
    strftime(since, sizeof since, "%Y-%m-%dT%H:%M:%SZ", &tm);
    mg_json_key(&j, "window");
    mg_json_object_begin(&j);
    mg_json_kv_int(&j, "days", days);
    mg_json_kv_string(&j, "since", since);
    mg_json_object_end(&j);

    mg_json_key(&j, "reliable_tokens");
    mg_json_array_begin(&j);
    for (size_t len = 2; len <= 6; len += 2) {
        if (!r->token_len[len])
            continue;
        char token[7];
        for (size_t i = 0; i < len; i++)
            token[i] = ascii_upper(r->key[i]);
        mg_json_string_n(&j, token, len);
    }
    mg_json_array_end(&j);

    const struct tally *own = tally_get(&r->degrees, &r->arena, r->key, 64, false);
    int64_t degree = own ? own->degree : 0, rank = 0;
    if (degree > 0) {
        rank = 1;
        for (size_t i = 0; i < r->degrees.cap; i++)
            rank += r->degrees.slots[i].key.p && r->degrees.slots[i].degree > degree;
    }
    mg_json_key(&j, "importance");
    mg_json_object_begin(&j);
    mg_json_kv_int(&j, "neighbor_degree", degree);
    mg_json_kv_int(&j, "degree_rank", rank);
    mg_json_kv_int(&j, "nodes_with_edges", (int64_t)r->degrees.used);
    mg_json_kv_int(&j, "relay_observations", r->relay_observations);
    mg_json_kv_int(&j, "bidirectional_links", (int64_t)n_bidir);
    mg_json_kv_int(&j, "direct_observers", (int64_t)n_observers);
    mg_json_object_end(&j);

    mg_json_key(&j, "direct_observers");
    mg_json_array_begin(&j);
    for (size_t i = 0; i < n_observers; i++) {
        const struct tally *t = observers[i];
        const struct node_info *info = find_info(r, t->key);
        mg_json_object_begin(&j);
        write_text(&j, "pubkey", t->key);
        write_text(&j, "name", info ? info->name : empty_text);
        mg_json_kv_int(&j, "count", t->observed);
        if (t->snr_count > 0)
            mg_json_kv_double(&j, "avg_snr", t->snr_sum / (double)t->snr_count);
        else
            mg_json_kv_null(&j, "avg_snr");
        write_position(&j, info);
        write_distance(&j, self, info);
        mg_json_object_end(&j);
    }
    mg_json_array_end(&j);

    mg_json_key(&j, "links");
    mg_json_array_begin(&j);
    for (size_t i = 0; i < n_links; i++) {
        const struct tally *t = links[i];
        const struct node_info *info = find_info(r, t->key);
        mg_json_object_begin(&j);
        write_text(&j, "pubkey", t->key);
        write_text(&j, "name", info ? info->name : empty_text);
        write_text(&j, "role", info ? info->role : empty_text);
        write_position(&j, info);
        mg_json_kv_int(&j, "we_hear", t->we_hear);
        mg_json_kv_int(&j, "they_hear", t->they_hear);
        mg_json_kv_int(&j, "bottleneck", t->we_hear < t->they_hear ? t->we_hear : t->they_hear);
        mg_json_kv_bool(&j, "bidir", t->we_hear > 0 && t->they_hear > 0);
        write_distance(&j, self, info);
        mg_json_object_end(&j);
    }
    mg_json_array_end(&j);

    mg_json_object_end(&j);
    mg_buf_putc(body, '\n');
}

static enum mg_reach_result assemble(struct reach *r, const struct node_info *self, int days,
                                     struct mg_buf *body)
{
    size_t cap = r->links.used ? r->links.used : 1;
    struct tally **links = malloc(cap * sizeof *links);
    struct tally **observers = malloc(cap * sizeof *observers);
    if (!links || !observers) {
        free(links);
        free(observers);
        return out_of_memory(r);
    }
    size_t n_links = 0, n_observers = 0, n_bidir = 0;
    for (size_t i = 0; i < r->links.cap; i++) {
        struct tally *t = &r->links.slots[i];
        if (!t->key.p)
            continue;
        links[n_links++] = t;
        n_bidir += t->we_hear > 0 && t->they_hear > 0;
        if (t->observed > 0)
            observers[n_observers++] = t;
    }
    qsort(links, n_links, sizeof *links, link_order);
    qsort(observers, n_observers, sizeof *observers, observer_order);
    write_body(r, self, days, links, n_links, n_bidir, observers, n_observers, body);
    free(links);
    free(observers);
    return body->failed ? out_of_memory(r) : MG_REACH_OK;
}

/* --- the entry points -------------------------------------------------------------------- */

static bool is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

bool mg_reach_parse_pubkey(const char *in, char out[65])
{
    size_t i = 0;
    for (; in && in[i] && i < 64; i++) {
        out[i] = ascii_lower(in[i]);
        if (!is_hex(out[i]))
            break;
    }
    bool ok = in && i == 64 && in[64] == '\0';
    out[ok ? 64 : 0] = '\0';
    return ok;
}

static enum mg_reach_result build(struct reach *r, int days, struct mg_buf *body)
{
    enum mg_reach_result res = load_nodes(r);
    if (res != MG_REACH_OK)
        return res;
    index_nodes(r);
    const struct node_info *self = find_info(r, r->target);
    if (!self)
        return MG_REACH_NOT_FOUND;
    find_reliable_tokens(r);
    if ((res = count_degrees(r)) != MG_REACH_OK)
        return res;
    if (r->n_tokens > 0 && (res = scan(r)) != MG_REACH_OK)
        return res;
    return assemble(r, self, days, body);
}

enum mg_reach_result mg_reach_build_capped(struct mg_db *db, const char *pubkey, int days,
                                           int64_t now_unix, int64_t row_cap, struct mg_buf *body,
                                           struct mg_reach_stats *stats, char *err, size_t errlen)
{
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    if (stats)
        memset(stats, 0, sizeof *stats);
    if (err && errlen)
        err[0] = '\0';

    struct reach r;
    memset(&r, 0, sizeof r);
    if (!mg_reach_parse_pubkey(pubkey, r.key))
        return MG_REACH_BAD_PUBKEY;
    days = days < 1 ? 1 : days > 30 ? 30 : days;
    r.db = db;
    r.target = (struct text){r.key, 64};
    r.since = now_unix - (int64_t)days * SECONDS_PER_DAY;
    r.row_cap = row_cap < 1 ? 1 : row_cap < INT64_MAX ? row_cap : INT64_MAX - 1;
    r.err = err;
    r.errlen = errlen;
    mg_buf_init(&r.lowered);
    mg_buf_init(&r.lowered_from);
    mg_buf_init(&r.lowered_observer);

    /* One snapshot for every statement, unless the caller already holds one. */
    bool own_transaction = sqlite3_get_autocommit(db->conn);
    enum mg_reach_result res = MG_REACH_OK;
    if (own_transaction && sqlite3_exec(db->conn, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
        res = fail(&r, "beginning a read transaction");
    size_t body_start = body->len;
    if (res == MG_REACH_OK)
        res = build(&r, days, body);
    if (res != MG_REACH_OK && body->len > body_start)
        body->len = body_start;
    if (own_transaction && !sqlite3_get_autocommit(db->conn) &&
        sqlite3_exec(db->conn, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
        sqlite3_exec(db->conn, "ROLLBACK", NULL, NULL, NULL);

    if (stats) {
        stats->rows_scanned = r.rows_scanned;
        stats->truncated = r.truncated;
        stats->db_error = res == MG_REACH_ERROR ? r.db_error : 0;
    }
    arena_free(&r.arena);
    free(r.infos);
    free(r.relays);
    free(r.links.slots);
    free(r.degrees.slots);
    free(r.path);
    mg_buf_free(&r.lowered);
    mg_buf_free(&r.lowered_from);
    mg_buf_free(&r.lowered_observer);
    clock_gettime(CLOCK_MONOTONIC, &end);
    if (stats)
        stats->build_ns =
            (int64_t)(end.tv_sec - start.tv_sec) * 1000000000 + (end.tv_nsec - start.tv_nsec);
    return res;
}

enum mg_reach_result mg_reach_build(struct mg_db *db, const char *pubkey, int days,
                                    int64_t now_unix, struct mg_buf *body,
                                    struct mg_reach_stats *stats, char *err, size_t errlen)
{
    return mg_reach_build_capped(db, pubkey, days, now_unix, MG_REACH_ROW_CAP, body, stats, err,
                                 errlen);
}

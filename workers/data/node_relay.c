/* SPDX-License-Identifier: ISC */
#include "node_relay.h"

#include "clock.h"
#include "corescope_config.h"
#include "group_table.h"
#include "path_parse.h"
#include "json.h"
#include "log.h"
#include "process_table.h"
#include "result_body.h"
#include "table_stats.h"
#include "segment.h"
#include "test_hooks.h"
#include "time_parse.h"

#include <ctype.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Counts of transmissions filed under a key, and of those also filed under its first byte
 * (both), to count each once for a node: the node's key and its first byte. */
struct counts {
    int64_t day, hour, unscoped_day;
};

struct entry {
    char *key;     /* a lowercased hop */
    int64_t filed; /* non-ADVERT transmissions, whatever their time */
    struct counts own, both;
    char *last;    /* the greatest parseable first_seen; NULL: none */
    char **scopes; /* sorted, distinct */
    size_t n_scopes;
};

struct table {
    struct entry *entries; /* sorted by key */
    size_t count;
    int64_t non_adverts; /* transmissions with a payload type other than ADVERT */
};

/*
 * Each transmission other than an ADVERT with its path: that of its observation with the most
 * hops, the newest of them (CoreScope loads observations newest first and keeps the first
 * longest; equal times by the highest id, as the summaries do). %s: the scope column.
 */
static const char paths_sql[] =
    "SELECT o.path_json, t.first_seen, t.route_type, %s FROM (SELECT transmission_id AS tx,"
    " path_json, row_number() OVER (PARTITION BY transmission_id ORDER BY hops DESC,"
    " timestamp DESC, id DESC) AS r"
    " FROM (SELECT transmission_id, id, timestamp, path_json, CASE WHEN json_valid(path_json) AND"
    " json_type(path_json) = 'array' THEN json_array_length(path_json) ELSE 0 END AS hops"
    " FROM observations) WHERE hops > 0) o JOIN transmissions t ON t.id = o.tx"
    " WHERE o.r = 1 AND t.payload_type IS NOT 4";

static const char non_adverts_sql[] =
    "SELECT count(*) FROM transmissions WHERE payload_type IS NOT NULL AND payload_type <> 4";

static void entry_free(struct entry *e)
{
    free(e->key);
    free(e->last);
    for (size_t i = 0; i < e->n_scopes; i++)
        free(e->scopes[i]);
    free(e->scopes);
}

static void table_free(void *table)
{
    struct table *t = table;
    if (!t)
        return;
    for (size_t i = 0; i < t->count; i++)
        entry_free(&t->entries[i]);
    free(t->entries);
    free(t);
}

/* While building: the entries, and an open-addressing index of them by key. */
struct builder {
    struct table *t;
    size_t cap;     /* entries allocated */
    size_t *slots;  /* entry index + 1; 0: empty */
    size_t n_slots; /* a power of two, at least twice the entries */
};

static uint64_t hash_text(const char *s)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

static bool grow_slots(struct builder *b)
{
    size_t n = b->n_slots ? b->n_slots * 2 : 1024;
    size_t *slots = calloc(n, sizeof *slots);
    if (!slots)
        return false;
    for (size_t i = 0; i < b->t->count; i++) {
        size_t at = hash_text(b->t->entries[i].key) & (n - 1);
        while (slots[at])
            at = (at + 1) & (n - 1);
        slots[at] = i + 1;
    }
    free(b->slots);
    b->slots = slots;
    b->n_slots = n;
    return true;
}

/* The entry of key, added when new; NULL: out of memory. */
static struct entry *entry_of(struct builder *b, const char *key)
{
    if ((b->t->count + 1) * 2 > b->n_slots && !grow_slots(b))
        return NULL;
    size_t at = hash_text(key) & (b->n_slots - 1);
    for (; b->slots[at]; at = (at + 1) & (b->n_slots - 1))
        if (strcmp(b->t->entries[b->slots[at] - 1].key, key) == 0)
            return &b->t->entries[b->slots[at] - 1];
    if (b->t->count == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        struct entry *more = realloc(b->t->entries, cap * sizeof *more);
        if (!more)
            return NULL;
        b->t->entries = more;
        b->cap = cap;
    }
    struct entry *e = &b->t->entries[b->t->count];
    memset(e, 0, sizeof *e);
    if (!(e->key = strdup(key)))
        return NULL;
    b->slots[at] = ++b->t->count;
    return e;
}

static bool add_scope(struct entry *e, const char *scope)
{
    for (size_t i = 0; i < e->n_scopes; i++)
        if (strcmp(e->scopes[i], scope) == 0)
            return true;
    char **more = realloc(e->scopes, (e->n_scopes + 1) * sizeof *more);
    if (!more)
        return false;
    e->scopes = more;
    return (e->scopes[e->n_scopes] = strdup(scope)) != NULL && ++e->n_scopes;
}

struct relay_tx {
    const char *first_seen, *scope;
    bool timed, in_day, in_hour, flood;
};

/* Files the transmission under key; both: it is also filed under key's first byte. */
static bool file_under(struct builder *b, const char *key, bool both, const struct relay_tx *tx)
{
    struct entry *e = entry_of(b, key);
    if (!e)
        return false;
    e->filed++;
    struct counts add = {tx->in_day, tx->in_hour, tx->in_day && tx->flood};
    e->own.day += add.day, e->own.hour += add.hour, e->own.unscoped_day += add.unscoped_day;
    if (both)
        e->both.day += add.day, e->both.hour += add.hour, e->both.unscoped_day += add.unscoped_day;
    if (tx->timed && (!e->last || strcmp(tx->first_seen, e->last) > 0)) {
        char *last = strdup(tx->first_seen);
        if (!last)
            return false;
        free(e->last);
        e->last = last;
    }
    return !tx->scope[0] || add_scope(e, tx->scope);
}

#define RELAY_HOPS_MAX 64

/* Files one transmission under each distinct lowercased hop of its path; false: out of
 * memory. A path that does not decode as strings has no hops (Go's []string). */
static bool file_transmission(struct builder *b, const char *path, const struct relay_tx *tx)
{
    char buf[1024];
    char *hops[RELAY_HOPS_MAX];
    int n = mg_path_split(path, buf, sizeof buf, hops, RELAY_HOPS_MAX);
    for (int i = 0; i < n; i++)
        for (char *c = hops[i]; c && *c; c++)
            *c = (char)tolower((unsigned char)*c);
    for (int i = 0; i < n; i++) {
        if (!hops[i])
            continue;
        bool seen = false, both = false;
        size_t len = strlen(hops[i]);
        for (int k = 0; k < n && !seen; k++) {
            if (!hops[k])
                continue;
            seen = k < i && strcmp(hops[k], hops[i]) == 0;
            both = both || (len > 2 && strlen(hops[k]) == 2 && !strncmp(hops[k], hops[i], 2));
        }
        if (!seen && !file_under(b, hops[i], both, tx))
            return false;
    }
    return true;
}

static int by_text(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int read_entries(sqlite3 *conn, struct table *t, int64_t now_ms)
{
    /* transmissions.scope_name exists only in a migrated database */
    sqlite3_stmt *st = NULL;
    bool scope = sqlite3_prepare_v2(conn, "SELECT scope_name FROM transmissions LIMIT 0", -1, &st,
                                    NULL) == SQLITE_OK;
    sqlite3_finalize(st);
    char sql[sizeof paths_sql + 64];
    snprintf(sql, sizeof sql, paths_sql, scope ? "coalesce(t.scope_name, '')" : "''");
    int rc = sqlite3_prepare_v2(conn, sql, -1, &st, NULL);
    struct builder b = {.t = t};
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        rc = SQLITE_OK;
        struct relay_tx tx = {.first_seen = (const char *)sqlite3_column_text(st, 1) ?: "",
                              .scope = (const char *)sqlite3_column_text(st, 3) ?: ""};
        int64_t ms;
        tx.timed = mg_node_parse_time_ms(tx.first_seen, &ms);
        tx.in_day = tx.timed && ms > now_ms - 24 * 3600000LL;
        tx.in_hour = tx.timed && ms > now_ms - 3600000LL;
        tx.flood = sqlite3_column_type(st, 2) == SQLITE_INTEGER && sqlite3_column_int64(st, 2) == 1;
        if (!file_transmission(&b, (const char *)sqlite3_column_text(st, 0), &tx))
            rc = SQLITE_NOMEM;
    }
    sqlite3_finalize(st);
    free(b.slots);
    if (rc == SQLITE_DONE) {
        rc = sqlite3_prepare_v2(conn, non_adverts_sql, -1, &st, NULL);
        if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
            t->non_adverts = sqlite3_column_int64(st, 0);
            rc = SQLITE_OK;
        }
        sqlite3_finalize(st);
    }
    for (size_t i = 0; i < t->count; i++)
        if (t->entries[i].n_scopes > 1)
            qsort(t->entries[i].scopes, t->entries[i].n_scopes, sizeof(char *), by_text);
    return rc;
}

static int by_key(const void *a, const void *b)
{
    return strcmp(((const struct entry *)a)->key, ((const struct entry *)b)->key);
}

/* arg: a struct mg_group_build_arg; the counts are relative to its realtime clock. */
static void *build(sqlite3 *conn, void *arg, int *rc)
{
    const struct mg_group_build_arg *a = arg;
    struct table *t = calloc(1, sizeof *t);
    if (!t) {
        *rc = SQLITE_NOMEM;
        return NULL;
    }
    *rc = read_entries(conn, t, a->realtime_ns / 1000000LL);
    if (*rc != SQLITE_OK) {
        table_free(t);
        return NULL;
    }
    mg_test_hooks_relay_pass(a->env); /* the test build: a slow pass */
    if (t->count > 1)
        qsort(t->entries, t->count, sizeof *t->entries, by_key);
    mg_debug("node relay: %zu hop keys", t->count);
    return t;
}

static struct mg_process_table relays =
    MG_PROCESS_TABLE_INIT(MG_NODE_RELAY_INTERVAL_NS, table_free);

/* ---- the group's copy: the table as a body of the shared result cache ---------------------- */

#define BODY_MAGIC 0x4c52474dU /* "MGRL" */
#define BODY_VERSION 1U

struct body_head {
    uint32_t magic, version;
    int64_t built_ns; /* CLOCK_MONOTONIC, the same in every process */
    int64_t non_adverts;
    uint64_t count;
};

/* The body: the head, then each entry: key, filed, own, both, last, scope count, scopes; a
 * text is its length (NO_TEXT: none) and its bytes. Native byte order: one machine reads it. */
static void encode(const void *table, int64_t built_ns, struct mg_buf *out)
{
    const struct table *t = table;
    struct body_head h = {BODY_MAGIC, BODY_VERSION, built_ns, t->non_adverts, t->count};
    mg_buf_append(out, &h, sizeof h);
    for (size_t i = 0; i < t->count; i++) {
        const struct entry *e = &t->entries[i];
        mg_group_put_text(out, e->key);
        mg_buf_append(out, &e->filed, sizeof e->filed);
        mg_buf_append(out, &e->own, sizeof e->own);
        mg_buf_append(out, &e->both, sizeof e->both);
        mg_group_put_text(out, e->last);
        uint32_t n = (uint32_t)e->n_scopes;
        mg_buf_append(out, &n, sizeof n);
        for (size_t k = 0; k < e->n_scopes; k++)
            mg_group_put_text(out, e->scopes[k]);
    }
}

/* The table of a body (NULL: not one), and its build time. */
static void *decode(const void *data, size_t len, int64_t *built_ns)
{
    struct mg_group_reader r = {data, (const unsigned char *)data + len, false};
    struct body_head h;
    mg_group_get(&r, &h, sizeof h);
    if (r.bad || h.magic != BODY_MAGIC || h.version != BODY_VERSION || h.count > len)
        return NULL;
    struct table *t = calloc(1, sizeof *t);
    if (!t || !(t->entries = calloc(h.count ? h.count : 1, sizeof *t->entries))) {
        free(t);
        return NULL;
    }
    t->non_adverts = h.non_adverts;
    while (t->count < h.count && !r.bad) {
        struct entry *e = &t->entries[t->count++];
        r.bad = r.bad || !(e->key = mg_group_get_text(&r));
        mg_group_get(&r, &e->filed, sizeof e->filed);
        mg_group_get(&r, &e->own, sizeof e->own);
        mg_group_get(&r, &e->both, sizeof e->both);
        e->last = mg_group_get_text(&r);
        uint32_t n;
        mg_group_get(&r, &n, sizeof n);
        if (r.bad || n > len || !(e->scopes = calloc(n ? n : 1, sizeof *e->scopes)))
            r.bad = true;
        for (uint32_t k = 0; k < n && !r.bad; k++)
            r.bad = !(e->scopes[e->n_scopes++] = mg_group_get_text(&r));
    }
    if (r.bad || r.at != r.end) {
        table_free(t);
        return NULL;
    }
    *built_ns = h.built_ns;
    return t;
}

static struct mg_group_table group =
    MG_GROUP_TABLE_INIT(.table = &relays, .name = "relay", .what = "node relay activity",
                        .version = BODY_VERSION, .build = build, .encode = encode, .decode = decode,
                        .builds = offsetof(struct mg_result_cache, relay_builds),
                        .copies = offsetof(struct mg_result_cache, relay_copies),
                        .stats = MG_TABLE_relay);

/* ---- whether the list needs the table: the long-hop probe ---------------------------------- */

/*
 * The list reads a node's own entry only (a hop equal to its whole key; mg_node_relay_fields),
 * and real paths hold hops of 1 to 3 bytes (2 to 6 hex digits) while keys are 64: with no
 * repeater's or room's key under 7 characters (or none) and no path holding a text of 7 or
 * more, no list row has an entry, whatever the table says, and the list's fields are those of
 * a node with none. The probe finds that out by one read of path_json (no JSON, no sort: a
 * fraction of the pass), once per group and copied as the table is, so the list is answered
 * while the pass runs. It errs only towards "needed": any JSON text of 7 characters or more in
 * any observation's path (any payload type, not just each transmission's longest path), or
 * anything else between two quotes (spaces, commas), counts.
 */
struct probe {
    bool needed; /* some node key or path text is such that the list may need the table */
};

static const char probe_keys_sql[] =
    "SELECT EXISTS (SELECT 1 FROM nodes WHERE role IN ('repeater', 'room')"
    " AND (public_key IS NULL OR length(public_key) < 7))";
static const char probe_paths_sql[] = "SELECT path_json FROM observations";

/* Whether s (n bytes) has a quote followed by 7 characters that are not one. */
static bool long_text(const unsigned char *s, int n)
{
    int run = -1; /* characters since the last quote; -1: none yet */
    for (int i = 0; i < n; i++)
        if (s[i] == '"')
            run = 0;
        else if (run >= 0 && ++run >= 7)
            return true;
    return false;
}

static int probe_step(sqlite3 *conn, const char *sql, bool paths, bool *needed)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(conn, sql, -1, &st, NULL);
    while (rc == SQLITE_OK && !*needed && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        rc = SQLITE_OK;
        *needed = paths ? long_text(sqlite3_column_text(st, 0), sqlite3_column_bytes(st, 0))
                        : sqlite3_column_int(st, 0) != 0;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static void *probe_build(sqlite3 *conn, void *arg, int *rc)
{
    (void)arg;
    struct probe *p = calloc(1, sizeof *p);
    *rc = p ? probe_step(conn, probe_keys_sql, false, &p->needed) : SQLITE_NOMEM;
    if (*rc == SQLITE_OK)
        *rc = probe_step(conn, probe_paths_sql, true, &p->needed);
    if (*rc != SQLITE_OK) {
        free(p);
        return NULL;
    }
    mg_debug("node relay: the list %s the table", p->needed ? "needs" : "does not need");
    return p;
}

#define PROBE_MAGIC 0x504c474dU /* "MGLP" */
#define PROBE_VERSION 1U

struct probe_body {
    uint32_t magic, version, needed, reserved;
    int64_t built_ns;
};

static void probe_encode(const void *table, int64_t built_ns, struct mg_buf *out)
{
    struct probe_body b = {PROBE_MAGIC, PROBE_VERSION, ((const struct probe *)table)->needed, 0,
                           built_ns};
    mg_buf_append(out, &b, sizeof b);
}

static void *probe_decode(const void *data, size_t len, int64_t *built_ns)
{
    struct probe_body b;
    if (len != sizeof b)
        return NULL;
    memcpy(&b, data, sizeof b);
    struct probe *p = b.magic == PROBE_MAGIC && b.version == PROBE_VERSION && b.needed <= 1
                          ? calloc(1, sizeof *p)
                          : NULL;
    if (p) {
        p->needed = b.needed;
        *built_ns = b.built_ns;
    }
    return p;
}

static struct mg_process_table probes = MG_PROCESS_TABLE_INIT(MG_NODE_RELAY_INTERVAL_NS, free);

static struct mg_group_table probe_group =
    MG_GROUP_TABLE_INIT(.table = &probes, .name = "relayprobe", .what = "node relay probe",
                        .version = PROBE_VERSION, .build = probe_build, .encode = probe_encode,
                        .decode = probe_decode,
                        .builds = offsetof(struct mg_result_cache, relay_probe_builds),
                        .copies = offsetof(struct mg_result_cache, relay_probe_copies),
                        .stats = MG_TABLE_relay_probe);

/* Whether this process's probe says the list does not need the table. */
static bool probe_settles(void)
{
    mg_process_table_read_begin(&probes);
    const struct probe *p = mg_process_table_current(&probes);
    bool settles = p && !p->needed;
    mg_process_table_read_end(&probes);
    return settles;
}

bool mg_node_relay_list_available(struct mg_env *env)
{
    if (mg_group_table_available(&group, env))
        return true;
    if (!mg_process_table_exists(&probes, env->db->conn))
        mg_group_table_take(&probe_group, env);
    return probe_settles();
}

int mg_node_relay_keep_list(struct mg_env *env, int64_t now_ns, int64_t now_realtime_ns,
                            bool *pending)
{
    if (pending)
        *pending = false;
    /* On the loop nothing is waited for: the group's copy of the table when stored, else the
     * probe's, else both passes started behind the request; until then each row is written
     * as a node with no entry (mg_node_relay_fields). */
    if (env->jobs && !mg_group_table_take(&group, env)) {
        int rc = mg_group_table_keep_behind(&probe_group, env, now_ns, now_realtime_ns);
        if (rc != SQLITE_OK || probe_settles())
            return rc;
    }
    if (env->jobs)
        return mg_group_table_keep_behind(&group, env, now_ns, now_realtime_ns);
    if (!mg_group_table_available(&group, env)) {
        int rc = mg_group_table_keep(&probe_group, env, now_ns, now_realtime_ns, pending);
        if (rc != SQLITE_OK || (pending && *pending))
            return rc;
        if (probe_settles()) /* the table's pass, under way, is not waited for */
            return SQLITE_OK;
    }
    return mg_group_table_keep(&group, env, now_ns, now_realtime_ns, pending);
}

bool mg_node_relay_available(struct mg_env *env)
{
    return mg_group_table_available(&group, env);
}

void mg_node_relay_adopt(struct mg_env *env)
{
    mg_group_table_adopt(&group, env);
    if (!mg_process_table_exists(&relays, env->db->conn))
        mg_group_table_adopt(&probe_group, env);
}

bool mg_node_relay_exist(sqlite3 *conn)
{
    return mg_process_table_exists(&relays, conn);
}

int mg_node_relay_keep_behind(struct mg_env *env, int64_t now_ns, int64_t now_realtime_ns)
{
    return mg_group_table_keep_behind(&group, env, now_ns, now_realtime_ns);
}

void mg_node_relay_forget(struct mg_env *env)
{
    mg_group_table_forget(&group, env);
    mg_group_table_forget(&probe_group, env);
}

void mg_node_relay_read_begin(void)
{
    mg_process_table_read_begin(&relays);
}

void mg_node_relay_read_end(void)
{
    mg_process_table_read_end(&relays);
}

uint64_t mg_node_relay_generation(void)
{
    return mg_process_table_generation(&relays);
}

bool mg_node_relay_role(const char *role)
{
    return role && (strcmp(role, "repeater") == 0 || strcmp(role, "room") == 0);
}

static const struct entry *find(const struct table *t, const char *key)
{
    struct entry want = {.key = (char *)key};
    return t && t->count ? bsearch(&want, t->entries, t->count, sizeof *t->entries, by_key) : NULL;
}

/* Writes the union of a's and b's scopes (each sorted), sorted, distinct, at most the cap. */
static void write_scopes(struct mg_buf *out, const struct entry *a, const struct entry *b)
{
    struct mg_json j;
    mg_json_init(&j, out);
    mg_json_array_begin(&j);
    size_t i = 0, k = 0, written = 0;
    size_t na = a ? a->n_scopes : 0, nb = b ? b->n_scopes : 0;
    while ((i < na || k < nb) && written < MG_NODE_RELAY_SCOPES_MAX) {
        const char *x = i < na ? a->scopes[i] : NULL, *y = k < nb ? b->scopes[k] : NULL;
        int c = !x ? 1 : !y ? -1 : strcmp(x, y);
        mg_json_string(&j, c <= 0 ? x : y);
        i += c <= 0;
        k += c >= 0;
        written++;
    }
    mg_json_array_end(&j);
}

/* The greatest count of non-ADVERT transmissions filed under one hop key, of t (its
 * generation's, kept per thread). */
static int64_t most_filed(const struct table *t)
{
    static _Thread_local uint64_t generation;
    static _Thread_local int64_t most;
    uint64_t now = mg_process_table_generation(&relays);
    if (generation != now) {
        most = 0;
        for (size_t i = 0; i < t->count; i++)
            if (t->entries[i].filed > most)
                most = t->entries[i].filed;
        generation = now;
    }
    return most;
}

double mg_node_relay_traffic(const char *pubkey)
{
    char key[MG_PATH_PARAM_MAX];
    size_t len = 0;
    for (; pubkey && pubkey[len] && len + 1 < sizeof key; len++)
        key[len] = (char)tolower((unsigned char)pubkey[len]);
    key[len] = '\0';
    const struct table *t = mg_process_table_current(&relays);
    const struct entry *own = find(t, key);
    if (!own || own->filed <= 0 || t->non_adverts <= 0)
        return 0;
    double share = (double)own->filed / (double)t->non_adverts,
           most = (double)most_filed(t) / (double)t->non_adverts;
    return (share > 1 ? 1 : share) / (most > 1 ? 1 : most);
}

void mg_node_relay_fields(struct mg_node_fields *f, const char *pubkey, bool detail,
                          int64_t now_realtime_ns, struct mg_buf *text)
{
    char key[MG_PATH_PARAM_MAX];
    size_t len = 0;
    for (; pubkey && pubkey[len] && len + 1 < sizeof key; len++)
        key[len] = (char)tolower((unsigned char)pubkey[len]);
    key[len] = '\0';
    const struct table *t = mg_process_table_current(&relays);
    /* no table: the list's row, answered as the probe says (mg_node_relay_keep_list), or,
     * before the probe's or the table's pass lands, as a node with no entry (counted in
     * neither) */
    if (t)
        mg_table_rows(MG_TABLE_relay, 1, 0);
    else if (!detail && probe_settles())
        mg_table_rows(MG_TABLE_relay_probe, 1, 0);
    const struct entry *own = find(t, key), *first = NULL;
    if (len > 2) {
        char prefix[3] = {key[0], key[1], '\0'};
        first = find(t, prefix);
    }
    /* The list reads a map of hop keys: a key that is not a hop has no entry there. */
    if (!detail && !own)
        first = NULL;
    struct counts sum = {0, 0, 0};
    const char *last = NULL;
    if (own) {
        sum = own->own;
        last = own->last;
    }
    if (first) {
        sum.day += first->own.day - (own ? own->both.day : 0);
        sum.hour += first->own.hour - (own ? own->both.hour : 0);
        sum.unscoped_day += first->own.unscoped_day - (own ? own->both.unscoped_day : 0);
        if (first->last && (!last || strcmp(first->last, last) > 0))
            last = first->last;
    }
    int64_t last_ms = 0;
    double window_hours = mg_corescope_current()->relay_active_hours;
    bool active = last && mg_node_parse_time_ms(last, &last_ms) &&
                  (double)last_ms > (double)(now_realtime_ns / 1000000LL) - window_hours * 3.6e6;
    double share = 0;
    if (own && t->non_adverts > 0 && own->filed > 0) {
        share = (double)own->filed / (double)t->non_adverts;
        if (share > 1)
            share = 1;
    }
    /* text holds the last_relayed string and the scopes' array, each ending in '\0'. */
    char number[40];
    mg_buf_reset(text);
    struct mg_json j;
    mg_json_init(&j, text);
    if (last)
        mg_json_string(&j, last);
    mg_buf_putc(text, '\0');
    size_t scopes_at = text->len;
    bool any_scope = (own && own->n_scopes) || (first && first->n_scopes);
    if (any_scope)
        write_scopes(text, own, first);
    mg_buf_putc(text, '\0');
    if (text->failed)
        return;
    if (last)
        mg_node_fields_add_json(f, "last_relayed", (const char *)text->data);
    mg_node_fields_add(f, "relay_active", "%s", active ? "true" : "false");
    mg_node_fields_add(f, "relay_count_1h", "%lld", (long long)sum.hour);
    mg_node_fields_add(f, "relay_count_24h", "%lld", (long long)sum.day);
    if (detail) {
        mg_json_format_double(window_hours, number, sizeof number);
        mg_node_fields_add(f, "relay_window_hours", "%s", number);
    }
    mg_json_format_double(share, number, sizeof number);
    mg_node_fields_add(f, "traffic_share_score", "%s", number);
    if (any_scope)
        mg_node_fields_add_json(f, "transported_scopes", (const char *)text->data + scopes_at);
    mg_node_fields_add(f, "unscoped_relay_count_24h", "%lld", (long long)sum.unscoped_day);
}

/* SPDX-License-Identifier: ISC */
/*
 * packet_scan: /api/packets' page scan, one row per transmission (with a hash and a
 * first_seen), a page at a time, with the fields of its best observation; packet_scan.h
 * describes the statements.
 *
 * Why it is built this way: the endpoint is hot and observations is the largest table.
 * The page is chosen on transmissions alone, in primary-key order, and only the rows of
 * the page then touch observations, each through idx_observations_transmission_id. Rows
 * skipped by offset cost one step of the page scan. The expensive part of a filtered
 * request is its total; that is why totals are cached (per worker, exact while the
 * database is unchanged).
 *
 * Stored JSON (path_json, resolved_path) is parsed and written again through the JSON
 * writer, never pasted: a stored value that is not a flat array of strings and nulls
 * counts as absent, so the body is valid JSON whatever the database holds.
 */
#include "packet_scan.h"

#include "clock.h"
#include "comma_list.h"
#include "corescope_config.h"
#include "node_visibility.h"
#include "stored_array.h"
#include "table_stats.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* A page whose probe scan should examine at most this many transmissions is read by
 * probes rather than by building a list (see choose_page_forms). */
#define PROBE_BUDGET 4000
/* An observer list matching more than this share of observers is read by scanning. */
#define LIST_SCAN_SHARE_DENOMINATOR 8

/* --- SQL -------------------------------------------------------------------------------- */

/*
 * Whether transmissions.hash and first_seen are declared NOT NULL (CoreScope declares
 * both): then "with a hash and first_seen" holds for every row and the test is left out,
 * which lets an unfiltered count(*) walk the smallest index instead of the whole table.
 */
static bool tx_keys_not_null(struct mg_db *db)
{
    int hash_nn = 0, seen_nn = 0;
    if (sqlite3_table_column_metadata(db->conn, "main", "transmissions", "hash", NULL, NULL,
                                      &hash_nn, NULL, NULL) != SQLITE_OK ||
        sqlite3_table_column_metadata(db->conn, "main", "transmissions", "first_seen", NULL, NULL,
                                      &seen_nn, NULL, NULL) != SQLITE_OK)
        return false;
    return hash_nn && seen_nn;
}

static bool starts_with_enc(const char *s)
{
    return strncmp(s, "enc_", 4) == 0 && s[4] != '\0';
}

/* Where a walk of the filter goes: SQL text, bound values, a cache key (any may be NULL). */
struct walk {
    struct mg_buf *sql;
    sqlite3_stmt *st;
    struct mg_buf *key;
    int n;   /* parameters so far */
    bool ok; /* every bind succeeded */
    const char *joiner;
};

static void walk_sql(struct walk *w, const char *text)
{
    if (w->sql)
        mg_buf_puts(w->sql, text);
}

static void walk_term(struct walk *w, const char *text)
{
    walk_sql(w, w->joiner);
    walk_sql(w, text);
    w->joiner = " AND ";
}

/* Values are copied into the statement: some (the node pattern) live on the stack. */
static void walk_text(struct walk *w, const char *text, size_t len)
{
    w->n++;
    if (w->st)
        w->ok =
            w->ok && sqlite3_bind_text(w->st, w->n, text, (int)len, SQLITE_TRANSIENT) == SQLITE_OK;
    if (w->key) {
        mg_buf_printf(w->key, "\x1f%zu:", len);
        mg_buf_append(w->key, text, len);
    }
}

static void walk_int(struct walk *w, int64_t v)
{
    w->n++;
    if (w->st)
        w->ok = w->ok && sqlite3_bind_int64(w->st, w->n, v) == SQLITE_OK;
    if (w->key)
        mg_buf_printf(w->key, "\x1f%lld", (long long)v);
}

/* The observers a list names: "ob.rowid" of observers whose id (or IATA) is in it. */
static void walk_observer_set(struct walk *w, const char *list, bool region)
{
    struct mg_list_item items[MG_PACKETS_LIST_MAX];
    int count =
        mg_param_list_split(list, region ? MG_LIST_SKIP_ALL : 0, items, MG_PACKETS_LIST_MAX);
    if (count > MG_PACKETS_LIST_MAX)
        count = MG_PACKETS_LIST_MAX;
    walk_sql(w, region ? "SELECT ob.rowid FROM observers ob WHERE upper(trim(ob.iata)) IN ("
                       : "SELECT ob.rowid FROM observers ob WHERE upper(ob.id) IN (");
    for (int i = 0; i < count; i++) {
        walk_sql(w, i ? ",upper(?)" : "upper(?)");
        walk_text(w, items[i].ptr, items[i].len);
    }
    walk_sql(w, ")");
}

static void walk_observer_term(struct walk *w, const char *list, bool region,
                               enum mg_packets_form form)
{
    if (form == MG_PACKETS_PROBE)
        walk_term(w, "EXISTS (SELECT 1 FROM observations o WHERE o.transmission_id = t.id AND "
                     "o.observer_idx IN (");
    else if (form == MG_PACKETS_LIST_INDEX)
        walk_term(w, "t.id IN (SELECT o.transmission_id FROM observations o WHERE "
                     "o.observer_idx IN (");
    else
        walk_term(w, "t.id IN (SELECT o.transmission_id FROM observations o NOT INDEXED WHERE "
                     "o.observer_idx IN (");
    walk_observer_set(w, list, region);
    walk_sql(w, "))");
}

/*
 * Transmissions of any of the nodes keys (lowercase public keys): sent by one (from_pubkey)
 * or relayed by one (an observation's resolved_path holds it as a quoted element; nothing
 * indexes resolved_path, so the list form reads observations once, the probe form per
 * transmission). No key matches nothing.
 */
static void walk_node_keys(struct walk *w, struct mg_db *db, const char (*keys)[65], int count,
                           enum mg_packets_form form)
{
    if (count <= 0) {
        walk_term(w, "0");
        return;
    }
    bool resolved = db->schema.obs_resolved_path;
    if (!resolved)
        walk_term(w, "t.from_pubkey IN (");
    else if (form == MG_PACKETS_PROBE)
        walk_term(w, "(t.from_pubkey IN (");
    else
        walk_term(w, "t.id IN (SELECT n.id FROM transmissions n WHERE n.from_pubkey IN (");
    for (int i = 0; i < count; i++) {
        walk_sql(w, i ? ",?" : "?");
        walk_text(w, keys[i], strlen(keys[i]));
    }
    if (!resolved) {
        walk_sql(w, ")");
        return;
    }
    walk_sql(w, form == MG_PACKETS_PROBE
                    ? ") OR EXISTS (SELECT 1 FROM observations o WHERE o.transmission_id = t.id "
                      "AND ("
                    : ") UNION ALL SELECT o.transmission_id FROM observations o WHERE (");
    for (int i = 0; i < count; i++) {
        char pattern[72];
        snprintf(pattern, sizeof pattern, "%%\"%s\"%%", keys[i]);
        walk_sql(w, i ? " OR o.resolved_path LIKE ?" : "o.resolved_path LIKE ?");
        walk_text(w, pattern, strlen(pattern));
    }
    walk_sql(w, form == MG_PACKETS_PROBE ? ")))" : "))");
}

/*
 * The WHERE clause of the page and count statements. One walk writes the SQL, binds the
 * values and writes the cache key, so the three cannot get out of step.
 */
static void filter_walk(struct walk *w, struct mg_db *db, const struct mg_packets_filter *f,
                        bool keys_not_null)
{
    w->n = 0;
    w->ok = true;
    w->joiner = w->joiner ? w->joiner : " WHERE ";
    if (!keys_not_null)
        walk_term(w, "t.hash IS NOT NULL AND t.first_seen IS NOT NULL");
    if (f->has_type) {
        walk_term(w, "t.payload_type = ?");
        walk_int(w, f->payload_type);
    }
    if (f->has_route) {
        walk_term(w, "t.route_type = ?");
        walk_int(w, f->route_type);
    }
    if (f->hash) {
        /* Hashes are stored lowercase by CoreScope, but real databases hold some in upper
         * case: match either, through the hash index (an IN list keeps it usable). */
        walk_term(w, "t.hash IN (?, lower(?), upper(?))");
        walk_text(w, f->hash, strlen(f->hash));
        walk_text(w, f->hash, strlen(f->hash));
        walk_text(w, f->hash, strlen(f->hash));
    }
    /* CoreScope's nodes= listing takes since and until inclusively, its other listings
     * strictly; both are kept. */
    if (f->since) {
        walk_term(w, f->nodes ? "t.first_seen >= ?" : "t.first_seen > ?");
        walk_text(w, f->since, strlen(f->since));
    }
    if (f->until) {
        walk_term(w, f->nodes ? "t.first_seen <= ?" : "t.first_seen < ?");
        walk_text(w, f->until, strlen(f->until));
    }
    if (f->observer)
        walk_observer_term(w, f->observer, false, f->observer_form);
    if (f->region)
        walk_observer_term(w, f->region, true, f->region_form);
    if (f->node) {
        const char(*key)[65] = &f->node_pubkey;
        walk_node_keys(w, db, key, 1, f->node_form);
    }
    if (f->nodes)
        walk_node_keys(w, db, (const char(*)[65])f->nodes_pubkeys, f->nodes_count, f->node_form);
    if (f->area) {
        /* CoreScope's: only an ADVERT names its sender (public_key, else pubKey) */
        walk_term(w, "CASE WHEN json_valid(t.decoded_json) THEN (CASE WHEN"
                     " json_type(t.decoded_json, '$.public_key') = 'text' AND"
                     " json_extract(t.decoded_json, '$.public_key') <> ''"
                     " THEN json_extract(t.decoded_json, '$.public_key')"
                     " WHEN json_type(t.decoded_json, '$.pubKey') = 'text'"
                     " THEN json_extract(t.decoded_json, '$.pubKey') END)"
                     " IN (SELECT public_key FROM nodes WHERE meshgate_in_area(lat, lon, ?))"
                     " ELSE 0 END");
        walk_text(w, f->area, strlen(f->area));
        if (w->key) /* the areas' shapes are the configuration's */
            mg_buf_printf(w->key, "\x1f%lu", mg_corescope_current()->generation);
    }
    if (f->channel) {
        /* decoded_json is checked before it is read: json_extract fails on malformed text,
         * and CASE is the construct whose order of evaluation SQLite guarantees. */
        walk_term(w, "t.payload_type = 5 AND CASE WHEN json_valid(t.decoded_json) THEN (");
        walk_sql(w, "json_extract(t.decoded_json, '$.channel') = ?");
        walk_text(w, f->channel, strlen(f->channel));
        if (starts_with_enc(f->channel)) {
            walk_sql(w, " OR upper(json_extract(t.decoded_json, '$.channelHashHex')) = upper(?)");
            walk_text(w, f->channel + 4, strlen(f->channel + 4));
        }
        walk_sql(w, ") ELSE 0 END");
    }
}

void mg_packets_sql(struct mg_db *db, const struct mg_packets_filter *f,
                    enum mg_packets_statement which, struct mg_buf *out)
{
    const char *resolved = db->schema.obs_resolved_path ? "resolved_path" : "NULL";
    const char *resolved_of = db->schema.obs_resolved_path ? "o." : "";
    struct walk w = {.sql = out};
    bool keys_not_null = tx_keys_not_null(db);
    switch (which) {
    case MG_PACKETS_SQL_PAGE:
        mg_buf_printf(out,
                      "SELECT t.id, t.raw_hex, t.hash, t.first_seen, t.route_type,"
                      " t.payload_type, t.decoded_json, %s FROM transmissions t",
                      db->schema.tx_scope_name ? "t.scope_name" : "NULL");
        filter_walk(&w, db, f, keys_not_null);
        mg_buf_puts(out, f->ascending ? " ORDER BY t.id ASC" : " ORDER BY t.id DESC");
        mg_buf_puts(out, " LIMIT ? OFFSET ?");
        break;
    case MG_PACKETS_SQL_COUNT:
        mg_buf_puts(out, "SELECT count(*) FROM transmissions t");
        filter_walk(&w, db, f, keys_not_null);
        break;
    case MG_PACKETS_SQL_OBSERVATIONS:
    case MG_PACKETS_SQL_DETAIL_OBSERVATIONS:
        /* Without expand the rows come in index order and the best is chosen in C; with
         * it they are listed newest first, which sorts this transmission's few rows. */
        mg_buf_puts(out, "SELECT o.id, o.observer_idx, o.path_json, o.timestamp");
        if (f->expand_observations || f->group_by_hash || which != MG_PACKETS_SQL_OBSERVATIONS)
            mg_buf_printf(out,
                          ", o.direction, o.snr, o.rssi, %s%s,"
                          " strftime('%%Y-%%m-%%dT%%H:%%M:%%S.000Z', o.timestamp, 'unixepoch'),"
                          " ob.id, ob.name, ob.iata,"
                          " strftime('%%Y-%%m-%%dT%%H:%%M:%%fZ', o.timestamp, 'unixepoch')"
                          " FROM observations o"
                          " LEFT JOIN observers ob ON ob.rowid = o.observer_idx",
                          resolved_of, resolved);
        else
            mg_buf_puts(out, " FROM observations o");
        mg_buf_puts(out, which == MG_PACKETS_SQL_DETAIL_OBSERVATIONS
                             ? " WHERE o.transmission_id = ? ORDER BY o.timestamp DESC, o.id ASC"
                         : f->expand_observations
                             ? " WHERE o.transmission_id = ? ORDER BY o.timestamp DESC, o.id DESC"
                             : " WHERE o.transmission_id = ?");
        break;
    case MG_PACKETS_SQL_ROW:
        mg_buf_printf(out,
                      "SELECT t.id, t.raw_hex, t.hash, t.first_seen, t.route_type,"
                      " t.payload_type, t.decoded_json, %s FROM transmissions t WHERE t.id = ?",
                      db->schema.tx_scope_name ? "t.scope_name" : "NULL");
        break;
    case MG_PACKETS_SQL_LATEST_FIRST_SEEN:
        mg_buf_puts(out, "SELECT t.id, t.first_seen FROM transmissions t");
        filter_walk(&w, db, f, keys_not_null);
        mg_buf_puts(out, " ORDER BY t.first_seen DESC, t.id DESC");
        break;
    case MG_PACKETS_SQL_LATEST_OBSERVED:
        /* CROSS JOIN keeps observations outside, walked by idx_observations_timestamp. */
        mg_buf_puts(out, "SELECT t.id, strftime('%Y-%m-%dT%H:%M:%fZ', o.timestamp, 'unixepoch')"
                         " FROM observations o CROSS JOIN transmissions t"
                         " WHERE t.id = o.transmission_id AND o.timestamp IS NOT NULL");
        w.joiner = " AND ";
        filter_walk(&w, db, f, keys_not_null);
        mg_buf_puts(out, " ORDER BY o.timestamp DESC, o.transmission_id DESC");
        break;
    case MG_PACKETS_SQL_GROUPED_SORTED:
        mg_buf_puts(out, "SELECT t.id, max(t.first_seen, coalesce((SELECT"
                         " strftime('%Y-%m-%dT%H:%M:%fZ', max(o.timestamp), 'unixepoch')"
                         " FROM observations o WHERE o.transmission_id = t.id), '')) AS latest"
                         " FROM transmissions t");
        filter_walk(&w, db, f, keys_not_null);
        mg_buf_puts(out, " ORDER BY latest DESC, t.id DESC LIMIT ? OFFSET ?");
        break;
    case MG_PACKETS_SQL_BEST:
        mg_buf_printf(out,
                      "SELECT o.direction, o.snr, o.rssi, o.path_json, %s%s,"
                      " ob.id, ob.name, ob.iata FROM observations o"
                      " LEFT JOIN observers ob ON ob.rowid = o.observer_idx WHERE o.id = ?",
                      resolved_of, resolved);
        break;
    }
}

int mg_packets_bind(struct mg_db *db, const struct mg_packets_filter *f, sqlite3_stmt *st)
{
    struct walk w = {.st = st};
    filter_walk(&w, db, f, tx_keys_not_null(db));
    return w.ok ? w.n : -1;
}

/* Column text, or NULL for SQL NULL (the type is read before any conversion). */
static const char *column_text(sqlite3_stmt *st, int col, size_t *len)
{
    if (sqlite3_column_type(st, col) == SQLITE_NULL) {
        *len = 0;
        return NULL;
    }
    const char *s = (const char *)sqlite3_column_text(st, col);
    *len = (size_t)sqlite3_column_bytes(st, col);
    return s ? s : "";
}

static void write_text_or_null(struct mg_json *j, const char *key, const char *text, size_t len,
                               bool empty_is_null)
{
    mg_json_key(j, key);
    if (!text || (empty_is_null && len == 0))
        mg_json_null(j);
    else
        mg_json_string_n(j, text, len);
}

/* --- cached totals ------------------------------------------------------------------------ */

/*
 * Per worker process; a worker serves one request at a time, so nothing here is shared.
 * The key starts with the database's identity (connection, file, inode) so that a
 * connection to another file never reads an entry, then the count's SQL and its values.
 */
#define TOTAL_CACHE_ENTRIES 32
#define TOTAL_CACHE_KEY_MAX 8192

struct total_entry {
    char *key;
    size_t key_len;
    int64_t total;
    unsigned data_version;
    int64_t computed_ns;
    int64_t cost_ns;
};

/* One per thread: the worker's loop and its helper thread each read through their own
 * connection, whose data version the entries are checked against. */
static _Thread_local struct total_entry total_cache[TOTAL_CACHE_ENTRIES];

static struct total_entry *total_find(const struct mg_buf *key)
{
    for (int i = 0; i < TOTAL_CACHE_ENTRIES; i++)
        if (total_cache[i].key && total_cache[i].key_len == key->len &&
            memcmp(total_cache[i].key, key->data, key->len) == 0)
            return &total_cache[i];
    return NULL;
}

static void total_store(const struct mg_buf *key, int64_t total, unsigned data_version,
                        int64_t computed_ns, int64_t cost_ns)
{
    if (key->failed || key->len > TOTAL_CACHE_KEY_MAX)
        return;
    struct total_entry *e = total_find(key);
    if (!e) {
        e = &total_cache[0];
        for (int i = 0; i < TOTAL_CACHE_ENTRIES; i++) {
            if (!total_cache[i].key) {
                e = &total_cache[i];
                break;
            }
            if (total_cache[i].computed_ns < e->computed_ns)
                e = &total_cache[i];
        }
        char *copy = malloc(key->len);
        if (!copy)
            return;
        memcpy(copy, key->data, key->len);
        free(e->key);
        e->key = copy;
        e->key_len = key->len;
    }
    e->total = total;
    e->data_version = data_version;
    e->computed_ns = computed_ns;
    e->cost_ns = cost_ns;
}

/*
 * The total of the page with no filter, shared by the process's threads: the loop, which
 * answers a light page (MG_PACKETS_LIGHT_LIMIT), counts nothing, and reads the total its
 * helper last counted. Data versions are a connection's own, so the entry is named by what
 * its snapshot held: the file, the first and last transmission, the last observation (a
 * transmission added or the oldest pruned moves one of them; one deleted from the middle with
 * no write after it moves none, and the light pages show the total before it until the next
 * write). Only an exact count is kept (counted in that snapshot, or kept for its data version).
 */
struct total_shape {
    uint64_t dev, ino;
    int64_t first_tx, last_tx, last_obs;
    bool keys_not_null;
};

static pthread_mutex_t shared_total_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    bool set;
    struct total_shape shape;
    int64_t total;
} shared_total;

void mg_packets_totals_forget(void)
{
    pthread_mutex_lock(&shared_total_lock);
    shared_total.set = false;
    pthread_mutex_unlock(&shared_total_lock);
    for (int i = 0; i < TOTAL_CACHE_ENTRIES; i++) {
        free(total_cache[i].key);
        total_cache[i] = (struct total_entry){0};
    }
}

/* --- one request ------------------------------------------------------------------------ */

enum page_col {
    P_ID,
    P_RAW_HEX,
    P_HASH,
    P_FIRST_SEEN,
    P_ROUTE_TYPE,
    P_PAYLOAD_TYPE,
    P_DECODED,
    P_SCOPE
};
enum obs_col {
    O_ID,
    O_OBSERVER_IDX,
    O_PATH_JSON,
    O_TS_RAW,
    O_DIRECTION,
    O_SNR,
    O_RSSI,
    O_RESOLVED_PATH,
    O_TIMESTAMP,
    O_OBSERVER_ID,
    O_OBSERVER_NAME,
    O_OBSERVER_IATA,
    O_LATEST, /* the time as CoreScope's store keeps it, with milliseconds */
};
enum best_col {
    B_DIRECTION,
    B_SNR,
    B_RSSI,
    B_PATH_JSON,
    B_RESOLVED_PATH,
    B_OBSERVER_ID,
    B_OBSERVER_NAME,
    B_OBSERVER_IATA,
};

/* A set of transmission ids (open addressing; ids are ≥ 0 in practice, -1 marks empty). */
struct id_set {
    sqlite3_int64 *slots;
    size_t cap, len;
};

static size_t id_slot(const struct id_set *s, sqlite3_int64 id)
{
    uint64_t h = (uint64_t)id * 0x9E3779B97F4A7C15ull;
    size_t i = (size_t)(h >> 17) & (s->cap - 1);
    while (s->slots[i] != -1 && s->slots[i] != id)
        i = (i + 1) & (s->cap - 1);
    return i;
}

/* Adds id; 1 when it was new, 0 when present, -1 when out of memory. */
static int id_set_add(struct id_set *s, sqlite3_int64 id)
{
    if (id == -1)
        return 0; /* not a real transmission id; never listed */
    if ((s->len + 1) * 2 > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 1024;
        sqlite3_int64 *slots = malloc(cap * sizeof *slots);
        if (!slots)
            return -1;
        for (size_t i = 0; i < cap; i++)
            slots[i] = -1;
        struct id_set grown = {slots, cap, s->len};
        for (size_t i = 0; i < s->cap; i++)
            if (s->slots[i] != -1)
                grown.slots[id_slot(&grown, s->slots[i])] = s->slots[i];
        free(s->slots);
        *s = grown;
    }
    size_t i = id_slot(s, id);
    if (s->slots[i] == id)
        return 0;
    s->slots[i] = id;
    s->len++;
    return 1;
}

static bool id_set_has(const struct id_set *s, sqlite3_int64 id)
{
    return s->cap > 0 && id != -1 && s->slots[id_slot(s, id)] == id;
}

/* One (observer, path) pair of a transmission, encoded into the pairs arena. */
struct pair {
    size_t at, len;
    uint64_t hash;
};

struct packets_run {
    struct mg_env *env;
    struct mg_buf *body; /* the answer's body the page is written into (light: bounded) */
    struct mg_packets_filter *f;
    bool keys_not_null;
    unsigned data_version;
    bool have_data_version;
    sqlite3_stmt *observations;
    sqlite3_stmt *best;
    sqlite3_stmt *row;       /* grouped: a page row by id */
    struct mg_buf tmp;       /* a decoded string of a stored array */
    struct mg_buf obs_json;  /* the observations array of one packet */
    struct mg_buf pair_text; /* encoded (observer, path) pairs of one packet */
    struct pair *pairs;
    size_t pairs_cap;
    /* Grouped: the observer ids and IATA codes of one packet, and its latest sighting. */
    struct mg_buf id_text, iata_text, latest;
    struct pair *ids, *iatas;
    size_t ids_len, iatas_len, ids_cap, iatas_cap;
    int64_t last_obs_id;     /* the highest observation id of the last scan, -1 when none */
    sqlite3_stmt *last_best; /* the best row of the last packet written, NULL when none */
    size_t scanned_rows;     /* rows of the last scan */
    /* Summaries this request may use (see use_summaries): the high-water mark read before
     * any record, the snapshot's newest observation, the transmissions with observations
     * between the two. */
    bool summaries_usable;
    int64_t summary_high_water, snapshot_max_obs;
    struct id_set dirty;
    int64_t rows_from_summary, rows_direct;
    /* Admitted light (mg_packets_is_heavy): it reads no row directly, counts nothing and
     * extends no summary; readmit: it found it must, and is admitted again, heavy. */
    bool light, readmit;
    int error; /* SQLite result code of the first failure, 0 when none */
};

static void fail(struct packets_run *r, int rc)
{
    if (!r->error)
        r->error = rc ? rc : SQLITE_ERROR;
}

static sqlite3_stmt *prepare_statement(struct packets_run *r, enum mg_packets_statement which)
{
    struct mg_buf sql;
    mg_buf_init(&sql);
    mg_packets_sql(r->env->db, r->f, which, &sql);
    bool out_of_memory = sql.failed;
    sqlite3_stmt *st = out_of_memory ? NULL : mg_db_prepare(r->env->db, mg_buf_cstr(&sql));
    mg_buf_free(&sql);
    if (!st)
        fail(r, out_of_memory ? SQLITE_NOMEM : SQLITE_ERROR);
    return st;
}

/* Starts the read snapshot so that the data version is the one the statements see. */
static void take_snapshot(struct packets_run *r)
{
    sqlite3_stmt *st = mg_db_prepare(r->env->db, "SELECT 1 FROM transmissions LIMIT 1");
    if (!st) {
        fail(r, SQLITE_ERROR);
        return;
    }
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        fail(r, rc);
    sqlite3_finalize(st);
    r->have_data_version = sqlite3_file_control(r->env->db->conn, "main", SQLITE_FCNTL_DATA_VERSION,
                                                &r->data_version) == SQLITE_OK;
}

static void total_key(struct packets_run *r, struct mg_buf *key, const char *sql)
{
    sqlite3 *conn = r->env->db->conn;
    const char *file = sqlite3_db_filename(conn, "main");
    struct stat st = {0};
    if (file)
        stat(file, &st);
    mg_buf_printf(key, "%p\x1f%s\x1f%llu:%llu\x1e%s", (void *)conn, file ? file : "",
                  (unsigned long long)st.st_dev, (unsigned long long)st.st_ino, sql);
}

static bool unfiltered(const struct mg_packets_filter *f)
{
    return !f->has_type && !f->has_route && !f->hash && !f->since && !f->until && !f->observer &&
           !f->region && !f->node && !f->channel && !f->nodes && !f->area;
}

/* What this snapshot holds, naming the shared total; false on failure. */
static bool total_shape(struct packets_run *r, struct total_shape *out)
{
    *out = (struct total_shape){.keys_not_null = r->keys_not_null};
    const char *file = sqlite3_db_filename(r->env->db->conn, "main");
    struct stat st = {0};
    if (file && stat(file, &st) == 0) {
        out->dev = (uint64_t)st.st_dev;
        out->ino = (uint64_t)st.st_ino;
    }
    sqlite3_stmt *q = mg_db_prepare(r->env->db, "SELECT (SELECT min(id) FROM transmissions),"
                                                " (SELECT max(id) FROM transmissions),"
                                                " (SELECT max(id) FROM observations)");
    bool ok = q && sqlite3_step(q) == SQLITE_ROW;
    if (ok) {
        out->first_tx = sqlite3_column_int64(q, 0);
        out->last_tx = sqlite3_column_int64(q, 1);
        out->last_obs = sqlite3_column_int64(q, 2);
    }
    sqlite3_finalize(q);
    return ok;
}

/* The shared total of this snapshot's unfiltered page: its total, -1 when none is kept. */
static int64_t shared_total_find(const struct total_shape *shape)
{
    pthread_mutex_lock(&shared_total_lock);
    const struct total_shape *kept = &shared_total.shape;
    int64_t total = shared_total.set && kept->dev == shape->dev && kept->ino == shape->ino &&
                            kept->first_tx == shape->first_tx && kept->last_tx == shape->last_tx &&
                            kept->last_obs == shape->last_obs &&
                            kept->keys_not_null == shape->keys_not_null
                        ? shared_total.total
                        : -1;
    pthread_mutex_unlock(&shared_total_lock);
    return total;
}

static void shared_total_store(const struct total_shape *shape, int64_t total)
{
    pthread_mutex_lock(&shared_total_lock);
    shared_total.set = true;
    shared_total.shape = *shape;
    shared_total.total = total;
    pthread_mutex_unlock(&shared_total_lock);
}

static int64_t count_rows(struct packets_run *r, const struct mg_packets_filter *f, bool *exact);

/* The number of transmissions passing f (observation filters in their list forms); -1 on
 * failure. Light (no filter): the shared total of this snapshot, none meaning heavy; else
 * counted (or this thread's), and with no filter, when exact for this snapshot, shared. */
static int64_t count_packets(struct packets_run *r, const struct mg_packets_filter *f)
{
    struct total_shape shape;
    bool shared = unfiltered(f) && total_shape(r, &shape);
    if (r->light) {
        int64_t total = shared ? shared_total_find(&shape) : -1;
        r->readmit = total < 0;
        return total;
    }
    bool exact = false;
    int64_t total = count_rows(r, f, &exact);
    if (shared && exact && total >= 0 && !r->error)
        shared_total_store(&shape, total);
    return total;
}

/* exact: the count is this snapshot's (counted now, or kept for its data version), not a slow
 * one's kept a moment longer. */
static int64_t count_rows(struct packets_run *r, const struct mg_packets_filter *f, bool *exact)
{
    struct mg_buf sql, key;
    mg_buf_init(&sql);
    mg_buf_init(&key);
    mg_packets_sql(r->env->db, f, MG_PACKETS_SQL_COUNT, &sql);
    total_key(r, &key, mg_buf_cstr(&sql));
    struct walk w = {.key = &key};
    filter_walk(&w, r->env->db, f, r->keys_not_null);

    int64_t total = -1, now_ns = mg_monotonic_ns();
    struct total_entry *e = r->have_data_version && !key.failed ? total_find(&key) : NULL;
    if (e && (e->data_version == r->data_version ||
              (e->cost_ns >= MG_PACKETS_TOTAL_SLOW_NS &&
               now_ns - e->computed_ns < MG_PACKETS_TOTAL_STALE_NS))) {
        total = e->total;
        *exact = e->data_version == r->data_version;
    } else {
        sqlite3_stmt *st = sql.failed ? NULL : mg_db_prepare(r->env->db, mg_buf_cstr(&sql));
        if (!st)
            fail(r, SQLITE_ERROR);
        struct walk bind = {.st = st};
        if (st)
            filter_walk(&bind, r->env->db, f, r->keys_not_null);
        if (st && !bind.ok)
            fail(r, SQLITE_ERROR);
        if (st && bind.ok) {
            int rc = sqlite3_step(st);
            if (rc == SQLITE_ROW) {
                total = sqlite3_column_int64(st, 0);
                *exact = true;
            } else
                fail(r, rc);
        }
        sqlite3_finalize(st);
        if (total >= 0 && r->have_data_version)
            total_store(&key, total, r->data_version, now_ns, mg_monotonic_ns() - now_ns);
    }
    mg_buf_free(&sql);
    mg_buf_free(&key);
    return total;
}

/*
 * A node named by text as a public key: a 64-hex key lowercased, or the key of the node with
 * exactly that name (the most recently seen one when several share it). False when no node
 * has the name (or a query failed).
 */
static bool resolve_node_key(struct packets_run *r, const char *text, size_t len, char out[65])
{
    bool hex = len == 64;
    for (size_t i = 0; hex && i < len; i++)
        hex = isxdigit((unsigned char)text[i]) != 0;
    if (hex) {
        for (size_t i = 0; i < len; i++)
            out[i] = (char)tolower((unsigned char)text[i]);
        out[len] = '\0';
        return true;
    }
    sqlite3_stmt *st = mg_db_prepare(r->env->db, "SELECT lower(public_key) FROM nodes"
                                                 " WHERE name = ? AND public_key IS NOT NULL"
                                                 " ORDER BY last_seen DESC, public_key LIMIT 1");
    if (!st) {
        fail(r, SQLITE_ERROR);
        return false;
    }
    sqlite3_bind_text(st, 1, text, (int)len, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    const char *pk = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
    if (pk)
        snprintf(out, 65, "%s", pk);
    else if (rc != SQLITE_DONE && rc != SQLITE_ROW)
        fail(r, rc);
    sqlite3_finalize(st);
    return pk != NULL;
}

static bool resolve_node(struct packets_run *r)
{
    return resolve_node_key(r, r->f->node, strlen(r->f->node), r->f->node_pubkey);
}

/* The keys of the nodes list that name a node (an entry naming none is left out, as it
 * matches nothing; repeats are kept, harmlessly). False when none does. */
static bool resolve_nodes(struct packets_run *r)
{
    struct mg_packets_filter *f = r->f;
    struct mg_list_item items[MG_PACKETS_LIST_MAX];
    int count = mg_param_list_split(f->nodes, 0, items, MG_PACKETS_LIST_MAX);
    f->nodes_count = 0;
    for (int i = 0; i < count && i < MG_PACKETS_LIST_MAX && !r->error; i++)
        if (resolve_node_key(r, items[i].ptr, items[i].len, f->nodes_pubkeys[f->nodes_count]))
            f->nodes_count++;
    return f->nodes_count > 0;
}

/*
 * The list form of an observer or region filter: through idx_observations_observer_idx
 * when it names few of the observers, a sequential scan of observations when it names
 * many (random reads of a large share cost more than reading everything in order). False
 * when it names no observer at all: then nothing can match.
 */
static bool choose_list_form(struct packets_run *r, const char *list, bool region,
                             enum mg_packets_form *form)
{
    struct mg_buf sql;
    mg_buf_init(&sql);
    struct walk w = {.sql = &sql};
    mg_buf_puts(&sql, "SELECT (SELECT count(*) FROM observers), count(*) FROM (");
    walk_observer_set(&w, list, region);
    mg_buf_puts(&sql, ")");
    sqlite3_stmt *st = sql.failed ? NULL : mg_db_prepare(r->env->db, mg_buf_cstr(&sql));
    mg_buf_free(&sql);
    w = (struct walk){.st = st, .ok = true};
    if (st)
        walk_observer_set(&w, list, region);
    int64_t all = 0, named = 0;
    int rc = st && w.ok ? sqlite3_step(st) : SQLITE_ERROR;
    if (rc == SQLITE_ROW) {
        all = sqlite3_column_int64(st, 0);
        named = sqlite3_column_int64(st, 1);
    } else {
        fail(r, rc);
    }
    sqlite3_finalize(st);
    *form =
        named * LIST_SCAN_SHARE_DENOMINATOR > all ? MG_PACKETS_LIST_SCAN : MG_PACKETS_LIST_INDEX;
    return named > 0;
}

/*
 * The form of the page's observation filters, from the share of transmissions that match:
 * a probe scan in id order stops after about (offset + limit) / share transmissions; a
 * list costs its whole build. Probes win unless matches are rare.
 */
static void choose_page_forms(struct packets_run *r, int64_t total)
{
    struct mg_packets_filter *f = r->f;
    if (!f->observer && !f->region && !f->node && !f->nodes)
        return;
    struct mg_packets_filter everything = {.limit = 1};
    int64_t all = count_packets(r, &everything);
    if (all <= 0 || total <= 0)
        return;
    bool scans = (f->observer && f->observer_form == MG_PACKETS_LIST_SCAN) ||
                 (f->region && f->region_form == MG_PACKETS_LIST_SCAN) || f->node || f->nodes;
    double expected = ((double)f->offset + (double)f->limit) * (double)all / (double)total;
    double budget = scans && all / 4 > PROBE_BUDGET ? (double)(all / 4) : PROBE_BUDGET;
    if (expected <= budget)
        f->observer_form = f->region_form = f->node_form = MG_PACKETS_PROBE;
}

static uint64_t fnv1a(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* Appends a column's value so that two values encode alike exactly when DISTINCT would
 * take them as equal (type and content). */
static void encode_value(struct mg_buf *b, sqlite3_stmt *st, int col)
{
    int type = sqlite3_column_type(st, col);
    if (type == SQLITE_INTEGER) {
        sqlite3_int64 v = sqlite3_column_int64(st, col);
        mg_buf_putc(b, 'I');
        mg_buf_append(b, &v, sizeof v);
    } else if (type == SQLITE_FLOAT) {
        double v = sqlite3_column_double(st, col);
        mg_buf_putc(b, 'F');
        mg_buf_append(b, &v, sizeof v);
    } else if (type == SQLITE_NULL) {
        mg_buf_putc(b, 'N');
    } else {
        const void *data = type == SQLITE_TEXT ? (const void *)sqlite3_column_text(st, col)
                                               : sqlite3_column_blob(st, col);
        size_t len = (size_t)sqlite3_column_bytes(st, col);
        mg_buf_putc(b, type == SQLITE_TEXT ? 'T' : 'B');
        mg_buf_append(b, &len, sizeof len);
        mg_buf_append(b, data, len);
    }
}

static int pair_compare(const void *a, const void *b, void *arena)
{
    const struct pair *x = a, *y = b;
    if (x->hash != y->hash)
        return x->hash < y->hash ? -1 : 1;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    const char *text = arena;
    return memcmp(text + x->at, text + y->at, x->len);
}

static bool add_pair(struct packets_run *r, size_t n, sqlite3_stmt *st)
{
    if (n == r->pairs_cap) {
        size_t cap = r->pairs_cap ? r->pairs_cap * 2 : 64;
        struct pair *p = realloc(r->pairs, cap * sizeof *p);
        if (!p)
            return false;
        r->pairs = p;
        r->pairs_cap = cap;
    }
    size_t at = r->pair_text.len;
    encode_value(&r->pair_text, st, O_OBSERVER_IDX);
    encode_value(&r->pair_text, st, O_PATH_JSON);
    if (r->pair_text.failed)
        return false;
    r->pairs[n] = (struct pair){at, r->pair_text.len - at, 0};
    r->pairs[n].hash = fnv1a(r->pair_text.data + at, r->pairs[n].len);
    return true;
}

static int64_t distinct_pairs(struct packets_run *r, size_t n)
{
    if (n < 2)
        return (int64_t)n;
    qsort_r(r->pairs, n, sizeof *r->pairs, pair_compare, r->pair_text.data);
    int64_t distinct = 1;
    for (size_t i = 1; i < n; i++)
        distinct += pair_compare(&r->pairs[i - 1], &r->pairs[i], r->pair_text.data) != 0;
    return distinct;
}

static void write_observation(struct packets_run *r, struct mg_json *j, sqlite3_stmt *st)
{
    size_t path_len, resolved_len, iata_len, id_len, name_len;
    const char *path = column_text(st, O_PATH_JSON, &path_len);
    const char *resolved = column_text(st, O_RESOLVED_PATH, &resolved_len);
    const char *iata = column_text(st, O_OBSERVER_IATA, &iata_len);
    const char *observer_id = column_text(st, O_OBSERVER_ID, &id_len);
    const char *observer_name = column_text(st, O_OBSERVER_NAME, &name_len);
    mg_json_object_begin(j); /* keys in bytewise order */
    mg_json_key(j, "direction");
    mg_db_json_column(j, st, O_DIRECTION);
    mg_json_key(j, "id");
    mg_db_json_column(j, st, O_ID);
    write_text_or_null(j, "observer_iata", iata, iata_len, true);
    write_text_or_null(j, "observer_id", observer_id, id_len, false);
    write_text_or_null(j, "observer_name", observer_name, name_len, false);
    write_text_or_null(j, "path_json", path, path_len, false);
    mg_stored_array_write(j, "resolved_path", resolved, resolved_len, false, &r->tmp);
    mg_json_key(j, "rssi");
    mg_db_json_column(j, st, O_RSSI);
    mg_json_key(j, "snr");
    mg_db_json_column(j, st, O_SNR);
    mg_json_key(j, "timestamp");
    mg_db_json_column(j, st, O_TIMESTAMP);
    mg_json_object_end(j);
}

/* SQLite's order of storage classes: NULL, numbers, text, blob. */
static int value_class(sqlite3_value *v)
{
    switch (sqlite3_value_type(v)) {
    case SQLITE_NULL:
        return 0;
    case SQLITE_INTEGER:
    case SQLITE_FLOAT:
        return 1;
    case SQLITE_TEXT:
        return 2;
    default:
        return 3;
    }
}

/* Orders two observation timestamps as SQLite's ORDER BY does (BINARY collation). */
static int timestamp_compare(sqlite3_value *a, sqlite3_value *b)
{
    int ca = value_class(a), cb = value_class(b);
    if (ca != cb)
        return ca < cb ? -1 : 1;
    if (ca == 0)
        return 0;
    if (ca == 1) {
        if (sqlite3_value_type(a) == SQLITE_INTEGER && sqlite3_value_type(b) == SQLITE_INTEGER) {
            sqlite3_int64 x = sqlite3_value_int64(a), y = sqlite3_value_int64(b);
            return x < y ? -1 : x > y;
        }
        double x = sqlite3_value_double(a), y = sqlite3_value_double(b);
        return x < y ? -1 : x > y;
    }
    const void *x = ca == 2 ? (const void *)sqlite3_value_text(a) : sqlite3_value_blob(a);
    const void *y = cb == 2 ? (const void *)sqlite3_value_text(b) : sqlite3_value_blob(b);
    size_t xl = (size_t)sqlite3_value_bytes(a), yl = (size_t)sqlite3_value_bytes(b);
    int c = xl && yl ? memcmp(x, y, xl < yl ? xl : yl) : 0;
    return c ? c : (xl < yl ? -1 : xl > yl);
}

/* Bytewise order of two texts (Go's string order): a common prefix sorts first. */
static int text_compare(const char *x, size_t xl, const char *y, size_t yl)
{
    int c = xl && yl ? memcmp(x, y, xl < yl ? xl : yl) : 0;
    return c ? c : (xl < yl ? -1 : xl > yl);
}

static int arena_text_compare(const void *a, const void *b, void *arena)
{
    const struct pair *x = a, *y = b;
    const char *text = arena;
    return text_compare(text + x->at, x->len, text + y->at, y->len);
}

/* Appends a non-empty text to a list kept in arena; false when out of memory. */
static bool add_text(struct mg_buf *arena, struct pair **list, size_t *len, size_t *cap,
                     const char *text, size_t text_len)
{
    if (!text || text_len == 0)
        return true;
    if (*len == *cap) {
        size_t grown = *cap ? *cap * 2 : 16;
        struct pair *p = realloc(*list, grown * sizeof *p);
        if (!p)
            return false;
        *list = p;
        *cap = grown;
    }
    (*list)[(*len)++] = (struct pair){arena->len, text_len, 0};
    mg_buf_append(arena, text, text_len);
    return !arena->failed;
}

/* Sorts a text list bytewise and drops repeats; returns how many are left. */
static size_t sort_unique(struct mg_buf *arena, struct pair *list, size_t len)
{
    if (len < 2)
        return len;
    qsort_r(list, len, sizeof *list, arena_text_compare, arena->data);
    size_t kept = 1;
    for (size_t i = 1; i < len; i++)
        if (arena_text_compare(&list[kept - 1], &list[i], arena->data) != 0)
            list[kept++] = list[i];
    return kept;
}

/*
 * One pass over a transmission's observations: the best one (most hops, then the newest
 * timestamp, then the highest id), the distinct (observer, path) pairs, with expand the
 * observations array in r->obs_json, and when grouped the observer ids, IATA codes and
 * latest time of r. *best_id is -1 when there is none.
 */
static bool scan_observations(struct packets_run *r, sqlite3_int64 tx_id, bool expand, bool grouped,
                              sqlite3_int64 *best_id, int64_t *distinct)
{
    sqlite3_stmt *st = r->observations;
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, tx_id);
    mg_buf_reset(&r->pair_text);
    mg_buf_reset(&r->id_text);
    mg_buf_reset(&r->iata_text);
    mg_buf_reset(&r->latest);
    r->ids_len = r->iatas_len = 0;
    struct mg_json j;
    if (expand) {
        mg_buf_reset(&r->obs_json);
        mg_json_init(&j, &r->obs_json);
        mg_json_array_begin(&j);
    }
    *best_id = -1;
    r->last_obs_id = -1;
    long best_hops = -1;
    sqlite3_value *best_time = NULL;
    size_t n = 0;
    bool ok = true;
    int rc;
    while (ok && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (!add_pair(r, n, st)) {
            ok = false;
            break;
        }
        n++;
        size_t path_len;
        const char *path = column_text(st, O_PATH_JSON, &path_len);
        long hops = path ? mg_stored_array_walk(path, path_len, NULL, NULL) : 0;
        if (hops < 0)
            hops = 0;
        sqlite3_int64 id = sqlite3_column_int64(st, O_ID);
        if (id > r->last_obs_id)
            r->last_obs_id = id;
        if (hops >= best_hops) {
            sqlite3_value *time = sqlite3_value_dup(sqlite3_column_value(st, O_TS_RAW));
            if (!time) {
                ok = false;
                break;
            }
            int c = hops > best_hops ? 1 : timestamp_compare(time, best_time);
            if (c > 0 || (c == 0 && id > *best_id)) {
                best_hops = hops;
                *best_id = id;
                sqlite3_value_free(best_time);
                best_time = time;
            } else {
                sqlite3_value_free(time);
            }
        }
        if (expand)
            write_observation(r, &j, st);
        if (grouped) {
            size_t id_len, iata_len, latest_len;
            const char *observer_id = column_text(st, O_OBSERVER_ID, &id_len);
            const char *iata = column_text(st, O_OBSERVER_IATA, &iata_len);
            const char *latest = column_text(st, O_LATEST, &latest_len);
            ok = add_text(&r->id_text, &r->ids, &r->ids_len, &r->ids_cap, observer_id, id_len) &&
                 add_text(&r->iata_text, &r->iatas, &r->iatas_len, &r->iatas_cap, iata, iata_len);
            if (latest && text_compare(latest, latest_len, r->latest.data ? r->latest.data : "",
                                       r->latest.len) > 0) {
                mg_buf_reset(&r->latest);
                mg_buf_append(&r->latest, latest, latest_len);
                ok = ok && !r->latest.failed;
            }
        }
    }
    sqlite3_value_free(best_time);
    if (!ok) {
        fail(r, SQLITE_NOMEM);
        return false;
    }
    if (rc != SQLITE_DONE) {
        fail(r, rc);
        return false;
    }
    if (expand)
        mg_json_array_end(&j);
    *distinct = distinct_pairs(r, n);
    r->scanned_rows = n;
    return true;
}

/* The best observation's row (with its observer), or NULL when there is none or the read
 * failed (then r->error is set). */
static sqlite3_stmt *read_best(struct packets_run *r, sqlite3_int64 best_id)
{
    if (best_id < 0)
        return NULL;
    sqlite3_stmt *best = r->best;
    sqlite3_reset(best);
    sqlite3_bind_int64(best, 1, best_id);
    int rc = sqlite3_step(best);
    if (rc != SQLITE_ROW) {
        fail(r, rc == SQLITE_DONE ? SQLITE_ERROR : rc);
        return NULL;
    }
    return best;
}

/* As read_best, but a row that is not there is NULL without an error. */
static sqlite3_stmt *read_best_if_present(struct packets_run *r, sqlite3_int64 best_id)
{
    if (best_id < 0)
        return NULL;
    sqlite3_stmt *best = r->best;
    sqlite3_reset(best);
    sqlite3_bind_int64(best, 1, best_id);
    int rc = sqlite3_step(best);
    if (rc == SQLITE_ROW)
        return best;
    if (rc != SQLITE_DONE)
        fail(r, rc);
    return NULL;
}

/* T's summary when this request may use it (shm/tx_summary.h says why this is exact). */
static bool summary_for(struct packets_run *r, sqlite3_int64 tx_id, struct mg_tx_summary *out)
{
    if (!r->summaries_usable || id_set_has(&r->dirty, tx_id))
        return false;
    return mg_tx_summary_read(r->env->summaries, tx_id, out) &&
           out->last_obs_id <= r->snapshot_max_obs;
}

/* Writes the packet of the page statement's current row; false when a query failed. */
static bool write_packet(struct packets_run *r, struct mg_json *j, sqlite3_stmt *page)
{
    bool expand = r->f->expand_observations;
    sqlite3_int64 tx_id = sqlite3_column_int64(page, P_ID), best_id;
    int64_t distinct;
    sqlite3_stmt *best = NULL;
    struct mg_tx_summary sum;
    if (!expand && summary_for(r, tx_id, &sum)) {
        best_id = sum.best_obs_id;
        distinct = sum.observation_count;
        /* A best row deleted since the summary was made: read this one directly. */
        best = read_best_if_present(r, best_id);
        if (r->error)
            return false;
        if (best_id >= 0 && !best)
            sum.tx_id = -1;
    } else {
        sum.tx_id = -1;
    }
    if (sum.tx_id < 0 && r->light) {
        r->readmit = true;
        return false;
    }
    if (sum.tx_id < 0) {
        r->rows_direct++;
        if (!scan_observations(r, tx_id, expand, false, &best_id, &distinct))
            return false;
        best = read_best(r, best_id);
        if (r->error)
            return false;
    } else {
        r->rows_from_summary++;
    }
    r->last_best = best;
    size_t path_len = 0, resolved_len = 0, iata_len = 0, id_len = 0, name_len = 0;
    const char *path = NULL, *resolved = NULL, *iata = NULL, *observer_id = NULL,
               *observer_name = NULL;
    if (best) {
        path = column_text(best, B_PATH_JSON, &path_len);
        resolved = column_text(best, B_RESOLVED_PATH, &resolved_len);
        iata = column_text(best, B_OBSERVER_IATA, &iata_len);
        observer_id = column_text(best, B_OBSERVER_ID, &id_len);
        observer_name = column_text(best, B_OBSERVER_NAME, &name_len);
    }

    mg_json_object_begin(j); /* keys in bytewise order */
    if (!mg_stored_array_write(j, "_parsedPath", path, path_len, true, &r->tmp))
        mg_json_kv_null(j, "_parsedPath");
    mg_json_key(j, "decoded_json");
    mg_db_json_column(j, page, P_DECODED);
    mg_json_key(j, "direction");
    if (best)
        mg_db_json_column(j, best, B_DIRECTION);
    else
        mg_json_null(j);
    mg_json_key(j, "first_seen");
    mg_db_json_column(j, page, P_FIRST_SEEN);
    mg_json_key(j, "hash");
    mg_db_json_column(j, page, P_HASH);
    mg_json_key(j, "id");
    mg_json_int(j, tx_id);
    mg_json_kv_int(j, "observation_count", distinct);
    if (expand) {
        mg_json_key(j, "observations");
        mg_json_raw(j, r->obs_json.data, r->obs_json.len);
    }
    write_text_or_null(j, "observer_iata", iata, iata_len, true);
    write_text_or_null(j, "observer_id", observer_id, id_len, false);
    write_text_or_null(j, "observer_name", observer_name, name_len, false);
    write_text_or_null(j, "path_json", path, path_len, false);
    mg_json_key(j, "payload_type");
    mg_db_json_column(j, page, P_PAYLOAD_TYPE);
    mg_json_key(j, "raw_hex");
    mg_db_json_column(j, page, P_RAW_HEX);
    mg_stored_array_write(j, "resolved_path", resolved, resolved_len, false, &r->tmp);
    mg_json_key(j, "route_type");
    mg_db_json_column(j, page, P_ROUTE_TYPE);
    mg_json_key(j, "rssi");
    if (best)
        mg_db_json_column(j, best, B_RSSI);
    else
        mg_json_null(j);
    mg_json_key(j, "scope_name");
    mg_db_json_column(j, page, P_SCOPE);
    mg_json_key(j, "snr");
    if (best)
        mg_db_json_column(j, best, B_SNR);
    else
        mg_json_null(j);
    mg_json_key(j, "timestamp");
    mg_db_json_column(j, page, P_FIRST_SEEN);
    mg_json_object_end(j);
    return true;
}

/* Writes the packets of the page; false when a query failed. */
static bool write_page(struct packets_run *r, struct mg_json *j)
{
    sqlite3_stmt *page = prepare_statement(r, MG_PACKETS_SQL_PAGE);
    r->observations = prepare_statement(r, MG_PACKETS_SQL_OBSERVATIONS);
    r->best = prepare_statement(r, MG_PACKETS_SQL_BEST);
    int bound = page && r->observations && r->best ? mg_packets_bind(r->env->db, r->f, page) : -1;
    if (page && r->observations && r->best && bound < 0)
        fail(r, SQLITE_ERROR);
    if (bound >= 0 && (sqlite3_bind_int64(page, bound + 1, r->f->limit) != SQLITE_OK ||
                       sqlite3_bind_int64(page, bound + 2, r->f->offset) != SQLITE_OK))
        fail(r, SQLITE_ERROR);
    if (bound >= 0 && !r->error) {
        int rc;
        while ((rc = sqlite3_step(page)) == SQLITE_ROW && write_packet(r, j, page))
            if (r->light && r->body->len > MG_PACKETS_LIGHT_BYTES) {
                r->readmit = true;
                break;
            }
        if (rc != SQLITE_ROW && rc != SQLITE_DONE)
            fail(r, rc);
        else if (r->readmit)
            fail(r, SQLITE_ABORT);
    }
    sqlite3_finalize(page);
    return !r->error;
}

/* --- groupByHash ---------------------------------------------------------------------------- */

static void write_text_or_null_when_empty(struct mg_json *j, const char *key, sqlite3_stmt *st,
                                          int col)
{
    size_t len;
    const char *text = st ? column_text(st, col, &len) : NULL;
    write_text_or_null(j, key, text, text ? len : 0, true);
}

/*
 * Writes the grouped packet of transmission tx_id, with the keys CoreScope's store gives a
 * group (its strings are null when empty); false when a query failed.
 */
static bool write_grouped_packet(struct packets_run *r, struct mg_json *j, sqlite3_int64 tx_id)
{
    sqlite3_stmt *row = r->row;
    sqlite3_reset(row);
    sqlite3_bind_int64(row, 1, tx_id);
    int rc = sqlite3_step(row);
    if (rc != SQLITE_ROW) {
        fail(r, rc == SQLITE_DONE ? SQLITE_ERROR : rc);
        return false;
    }
    sqlite3_int64 best_id;
    int64_t distinct;
    if (!scan_observations(r, tx_id, false, true, &best_id, &distinct))
        return false;
    sqlite3_stmt *best = read_best(r, best_id);
    if (r->error)
        return false;
    size_t seen_len;
    const char *first_seen = column_text(row, P_FIRST_SEEN, &seen_len);
    const char *latest = first_seen;
    size_t latest_len = seen_len;
    if (r->latest.len && text_compare(r->latest.data, r->latest.len, first_seen, seen_len) > 0) {
        latest = r->latest.data;
        latest_len = r->latest.len;
    }
    size_t iatas = sort_unique(&r->iata_text, r->iatas, r->iatas_len);
    size_t observers = sort_unique(&r->id_text, r->ids, r->ids_len);

    mg_json_object_begin(j); /* keys in bytewise order */
    mg_json_kv_int(j, "count", distinct);
    write_text_or_null_when_empty(j, "decoded_json", row, P_DECODED);
    mg_json_key(j, "distinct_iatas");
    mg_json_array_begin(j);
    for (size_t i = 0; i < iatas; i++)
        mg_json_string_n(j, r->iata_text.data + r->iatas[i].at, r->iatas[i].len);
    mg_json_array_end(j);
    write_text_or_null(j, "first_seen", first_seen, seen_len, true);
    write_text_or_null_when_empty(j, "hash", row, P_HASH);
    write_text_or_null(j, "latest", latest, latest_len, true);
    mg_json_kv_int(j, "observation_count", distinct);
    mg_json_kv_int(j, "observer_count", (int64_t)observers);
    write_text_or_null_when_empty(j, "observer_iata", best, B_OBSERVER_IATA);
    write_text_or_null_when_empty(j, "observer_id", best, B_OBSERVER_ID);
    write_text_or_null_when_empty(j, "observer_name", best, B_OBSERVER_NAME);
    write_text_or_null_when_empty(j, "path_json", best, B_PATH_JSON);
    mg_json_key(j, "payload_type");
    mg_db_json_column(j, row, P_PAYLOAD_TYPE);
    write_text_or_null_when_empty(j, "raw_hex", row, P_RAW_HEX);
    mg_json_key(j, "route_type");
    mg_db_json_column(j, row, P_ROUTE_TYPE);
    mg_json_key(j, "rssi");
    if (best)
        mg_db_json_column(j, best, B_RSSI);
    else
        mg_json_null(j);
    mg_json_key(j, "snr");
    if (best)
        mg_db_json_column(j, best, B_SNR);
    else
        mg_json_null(j);
    mg_json_object_end(j);
    return true;
}

/* Prepares a statement of f and binds its filter values; NULL on failure (r->error set). */
static sqlite3_stmt *prepare_filtered(struct packets_run *r, enum mg_packets_statement which,
                                      const struct mg_packets_filter *f, int *bound)
{
    struct mg_buf sql;
    mg_buf_init(&sql);
    mg_packets_sql(r->env->db, f, which, &sql);
    sqlite3_stmt *st = sql.failed ? NULL : mg_db_prepare(r->env->db, mg_buf_cstr(&sql));
    mg_buf_free(&sql);
    *bound = st ? mg_packets_bind(r->env->db, f, st) : -1;
    if (*bound < 0) {
        fail(r, SQLITE_ERROR);
        sqlite3_finalize(st);
        return NULL;
    }
    return st;
}

/* Steps a merge stream; false at its end (or on failure, then r->error is set). */
static bool stream_step(struct packets_run *r, sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        return true;
    if (rc != SQLITE_DONE)
        fail(r, rc);
    return false;
}

/*
 * The page's transmission ids by the merge of the two latest-first walks: the next row is
 * the greater (time, id) of the two heads; a transmission is listed where it first
 * appears, which is at its latest time. Rows without a time are never heads.
 */
static bool grouped_page_by_merge(struct packets_run *r, const struct mg_packets_filter *f,
                                  sqlite3_int64 *ids, size_t *count)
{
    int bound;
    sqlite3_stmt *seen = prepare_filtered(r, MG_PACKETS_SQL_LATEST_FIRST_SEEN, f, &bound);
    sqlite3_stmt *observed =
        seen ? prepare_filtered(r, MG_PACKETS_SQL_LATEST_OBSERVED, f, &bound) : NULL;
    struct id_set listed = {0};
    int64_t wanted = f->offset + f->limit, walked = 0;
    *count = 0;
    bool have_seen = observed && stream_step(r, seen);
    bool have_observed = observed && !r->error && stream_step(r, observed);
    while (!r->error && walked < wanted) {
        while (have_seen && sqlite3_column_type(seen, 1) == SQLITE_NULL)
            have_seen = stream_step(r, seen);
        while (have_observed && sqlite3_column_type(observed, 1) == SQLITE_NULL)
            have_observed = stream_step(r, observed);
        if (r->error || (!have_seen && !have_observed))
            break;
        sqlite3_stmt *head = have_seen ? seen : observed;
        if (have_seen && have_observed) {
            size_t sl, ol;
            const char *s = column_text(seen, 1, &sl), *o = column_text(observed, 1, &ol);
            int c = text_compare(s, sl, o, ol);
            if (c == 0)
                c = sqlite3_column_int64(seen, 0) < sqlite3_column_int64(observed, 0) ? -1 : 1;
            head = c > 0 ? seen : observed;
        }
        sqlite3_int64 id = sqlite3_column_int64(head, 0);
        int added = id_set_add(&listed, id);
        if (added < 0)
            fail(r, SQLITE_NOMEM);
        if (added > 0) {
            if (walked >= f->offset)
                ids[(*count)++] = id;
            walked++;
        }
        if (head == seen)
            have_seen = stream_step(r, seen);
        else
            have_observed = stream_step(r, observed);
    }
    free(listed.slots);
    sqlite3_finalize(seen);
    sqlite3_finalize(observed);
    return !r->error;
}

/* The page's transmission ids by sorting every match on its latest time. */
static bool grouped_page_by_sort(struct packets_run *r, const struct mg_packets_filter *f,
                                 sqlite3_int64 *ids, size_t *count)
{
    int bound;
    sqlite3_stmt *st = prepare_filtered(r, MG_PACKETS_SQL_GROUPED_SORTED, f, &bound);
    *count = 0;
    if (!st)
        return false;
    if (sqlite3_bind_int64(st, bound + 1, f->limit) != SQLITE_OK ||
        sqlite3_bind_int64(st, bound + 2, f->offset) != SQLITE_OK)
        fail(r, SQLITE_ERROR);
    while (!r->error && stream_step(r, st) && *count < (size_t)f->limit)
        ids[(*count)++] = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return !r->error;
}

/*
 * Writes the grouped page. The merge walks about (offset + limit) × all / total rows of each
 * index; sorting reads every match once. The merge is taken when it walks fewer rows, and
 * never when the page takes every remaining match (then the walk could not stop early).
 */
static bool write_grouped_page(struct packets_run *r, struct mg_json *j, int64_t total)
{
    struct mg_packets_filter *f = r->f;
    int64_t rows = total - f->offset < f->limit ? total - f->offset : f->limit;
    if (rows <= 0)
        return true;
    sqlite3_int64 *ids = malloc((size_t)rows * sizeof *ids);
    if (!ids) {
        fail(r, SQLITE_NOMEM);
        return false;
    }
    struct mg_packets_filter probes;
    bool merge = total > f->offset + f->limit;
    if (merge) {
        struct mg_packets_filter everything = {.limit = 1};
        int64_t all = count_packets(r, &everything);
        double expected = ((double)f->offset + (double)f->limit) * (double)all / (double)total;
        merge = all > 0 && expected <= (double)total;
    }
    if (merge) {
        /* The merge checks each candidate: probes, not lists built for a few rows. */
        probes = *f;
        probes.observer_form = probes.region_form = probes.node_form = MG_PACKETS_PROBE;
        f = &probes;
    }
    size_t count = 0;
    bool ok =
        merge ? grouped_page_by_merge(r, f, ids, &count) : grouped_page_by_sort(r, f, ids, &count);
    r->observations = ok ? prepare_statement(r, MG_PACKETS_SQL_OBSERVATIONS) : NULL;
    r->best = r->observations ? prepare_statement(r, MG_PACKETS_SQL_BEST) : NULL;
    r->row = r->best ? prepare_statement(r, MG_PACKETS_SQL_ROW) : NULL;
    for (size_t i = 0; r->row && !r->error && i < count; i++)
        write_grouped_packet(r, j, ids[i]);
    free(ids);
    return !r->error;
}

/* --- summaries ---------------------------------------------------------------------------- */

static _Thread_local bool last_used_summaries;

bool mg_packets_last_used_summaries(void)
{
    return last_used_summaries;
}

static void run_init(struct packets_run *r)
{
    mg_buf_init(&r->tmp);
    mg_buf_init(&r->obs_json);
    mg_buf_init(&r->pair_text);
    mg_buf_init(&r->id_text);
    mg_buf_init(&r->iata_text);
    mg_buf_init(&r->latest);
}

static void run_free(struct packets_run *r)
{
    sqlite3_finalize(r->observations);
    sqlite3_finalize(r->best);
    sqlite3_finalize(r->row);
    r->observations = r->best = r->row = NULL;
    mg_buf_free(&r->tmp);
    mg_buf_free(&r->obs_json);
    mg_buf_free(&r->pair_text);
    mg_buf_free(&r->id_text);
    mg_buf_free(&r->iata_text);
    mg_buf_free(&r->latest);
    free(r->pairs);
    free(r->ids);
    free(r->iatas);
    free(r->dirty.slots);
    r->pairs = r->ids = r->iatas = NULL;
    r->dirty = (struct id_set){0};
}

/* The snapshot's newest observation id: -1 when there is none, or on failure (r->error). */
static int64_t newest_observation(struct packets_run *r)
{
    sqlite3_stmt *st = mg_db_prepare(r->env->db, "SELECT max(id) FROM observations");
    int rc = st ? sqlite3_step(st) : SQLITE_ERROR;
    int64_t newest = -1;
    if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
        newest = sqlite3_column_int64(st, 0);
    else if (rc != SQLITE_ROW)
        fail(r, rc);
    sqlite3_finalize(st);
    return newest;
}

/* The statement of a grouped scan (observations with their observers), for summaries. */
static sqlite3_stmt *prepare_summary_scan(struct packets_run *r)
{
    struct mg_packets_filter grouped = {.limit = 1, .group_by_hash = true};
    struct mg_packets_filter *saved = r->f;
    r->f = &grouped;
    sqlite3_stmt *st = prepare_statement(r, MG_PACKETS_SQL_OBSERVATIONS);
    r->f = saved;
    return st;
}

/* Computes T's summary with the scan that answers a page directly, and writes it; r's
 * observations statement must be a summary scan. Adds the rows read to *rows. */
static bool summarize(struct packets_run *r, struct mg_tx_summaries *s, sqlite3_int64 tx_id,
                      int64_t *rows)
{
    sqlite3_int64 best_id;
    int64_t distinct;
    if (!scan_observations(r, tx_id, false, true, &best_id, &distinct))
        return false;
    size_t observers = sort_unique(&r->id_text, r->ids, r->ids_len);
    mg_tx_summary_write(s, tx_id, best_id, (uint32_t)distinct, (uint32_t)observers, r->last_obs_id);
    *rows += (int64_t)r->scanned_rows;
    return true;
}

/* The table numbers' building and lowWater, from the header. */
static void show_progress(struct mg_tx_summaries *s)
{
    int64_t low = atomic_load(&s->header->low_water);
    mg_table_progress(MG_TABLE_summaries, atomic_load(&s->header->cursor) >= 0,
                      low < 0 ? 0 : (uint64_t)low);
}

/* Ends the pass under way: done (the low-water mark at the lowest transmission), or failed (a
 * first pass goes on below its low-water mark when it is tried again). */
static void end_pass(struct mg_tx_summaries *s, bool ok)
{
    struct mg_tx_summary_header *h = s->header;
    int64_t now_ns = mg_monotonic_ns(), began = atomic_load(&h->pass_began_ns);
    if (ok) {
        int64_t cursor = atomic_load(&h->cursor);
        int64_t low = cursor == INT64_MAX ? 0 : cursor; /* no transmission: 0 */
        atomic_store(&h->low_water, low);
        atomic_store(&h->passed_ns, now_ns);
        atomic_store(&h->pass_ms_last, (uint64_t)((now_ns - began) / 1000000));
        atomic_fetch_add(&h->passes, 1);
    } else {
        atomic_store(&h->failed_ns, now_ns);
    }
    atomic_store(&h->cursor, -1);
    mg_table_pass_end(MG_TABLE_summaries, began, ok, ok ? s->map_bytes : 0);
    show_progress(s);
}

int mg_packets_summaries_chunk(struct mg_db *db, struct mg_tx_summaries *s, int pid,
                               const struct mg_summaries_chunk *c, bool *finished, char *err,
                               size_t errlen)
{
    struct mg_tx_summary_header *h = s->header;
    *finished = false;
    if (atomic_load(&h->cursor) < 0) {
        /* A pass begins, at the newest transmission; a first one that failed goes on below
         * its low-water mark. */
        int64_t low = atomic_load(&h->low_water);
        atomic_store(&h->pass_began_ns, mg_table_pass_begin(MG_TABLE_summaries));
        atomic_store(&h->cursor, atomic_load(&h->passes) == 0 && low >= 0 ? low : INT64_MAX);
    }
    int64_t start_ns = mg_monotonic_ns();
    struct mg_env env = {.db = db, .summaries = s};
    struct mg_packets_filter f = {.limit = 1};
    struct packets_run r = {.env = &env, .f = &f};
    run_init(&r);
    /* The pass reads most of the file once: through the memory map those pages would be in
     * this worker's PSS (file-backed) while it runs, the whole file at the end; read() leaves
     * them in the kernel's page cache only. Its own page cache is bounded and given back at
     * the end of each chunk (docs/architecture.md, "Memory"). */
    struct mg_db_pass unmapped;
    mg_db_pass_begin(&unmapped, db->conn, MG_DB_PASS_CACHE_KIB);
    bool in_transaction = sqlite3_exec(db->conn, "BEGIN", NULL, NULL, NULL) == SQLITE_OK;
    int64_t newest = newest_observation(&r);
    int64_t high_water = mg_tx_summary_high_water(s), cursor = atomic_load(&h->cursor);
    /* A writer only writes from a snapshot that holds every observation up to H. */
    bool stale = !r.error && newest < high_water;
    r.observations = r.error || stale ? NULL : prepare_summary_scan(&r);
    sqlite3_stmt *txs = r.observations ? mg_db_prepare(db, "SELECT id FROM transmissions"
                                                           " WHERE id < ? ORDER BY id DESC")
                                       : NULL;
    if (r.observations && !txs)
        fail(&r, SQLITE_ERROR);
    if (txs)
        sqlite3_bind_int64(txs, 1, cursor);
    bool lost = false;
    int64_t rows = 0, done = 0, low = cursor;
    int rc = SQLITE_ROW;
    while (txs && !r.error && !lost && (c->max_tx <= 0 || done < c->max_tx)) {
        if (done > 0 && done >= c->min_tx && c->budget_ns > 0 &&
            mg_monotonic_ns() - start_ns >= c->budget_ns)
            break;
        if ((rc = sqlite3_step(txs)) != SQLITE_ROW)
            break;
        sqlite3_int64 tx_id = sqlite3_column_int64(txs, 0);
        if (!summarize(&r, s, tx_id, &rows))
            break;
        low = tx_id;
        done++;
        if (c->each)
            c->each(c->arg);
        lost = atomic_load(&h->lease_pid) != pid;
        mg_tx_summary_lease_renew(s, pid, mg_monotonic_ns());
    }
    if (txs && rc != SQLITE_ROW && rc != SQLITE_DONE)
        fail(&r, rc);
    sqlite3_finalize(txs);
    int status = 0;
    if (r.error || lost || stale) {
        snprintf(err, errlen, "transmission summaries: the pass %s",
                 lost      ? "lost its lease"
                 : r.error ? sqlite3_errstr(r.error)
                           : "saw a snapshot older than the high-water mark");
        end_pass(s, false);
        status = -1;
    } else {
        /* Observation ids start at 1: a database without any is covered up to 0. The first
         * chunk's records hold every observation of its snapshot; later ones only add
         * records from newer snapshots, so H stays (extensions move it). */
        if (high_water < 0)
            mg_tx_summary_publish(s, newest < 0 ? 0 : newest);
        atomic_store(&h->cursor, low);
        if (atomic_load(&h->passes) == 0 && low != INT64_MAX)
            atomic_store(&h->low_water, low);
        atomic_store(&h->chunked_ns, mg_monotonic_ns());
        atomic_fetch_add(&h->chunks, 1);
        *finished = rc == SQLITE_DONE;
        if (*finished)
            end_pass(s, true);
        else
            show_progress(s);
    }
    if (in_transaction)
        sqlite3_exec(db->conn, "COMMIT", NULL, NULL, NULL);
    run_free(&r);
    mg_db_pass_end(&unmapped);
    (void)rows;
    return status;
}

int mg_packets_summaries_pass(struct mg_db *db, struct mg_tx_summaries *s, int pid, char *err,
                              size_t errlen)
{
    struct mg_summaries_chunk whole = {0};
    bool finished = false;
    while (!finished)
        if (mg_packets_summaries_chunk(db, s, pid, &whole, &finished, err, errlen) != 0)
            return -1;
    return 0;
}

/* Rows of new observations read per statement of an extension. */
#define EXTEND_CHUNK 256

/*
 * Folds the observations after the high-water mark into their transmissions' summaries,
 * from this request's snapshot, when nobody else writes them: at most about
 * MG_TX_SUMMARY_EXTEND_ROWS rows, publishing the mark after each chunk.
 */
static void extend_summaries(struct packets_run *r)
{
    struct mg_tx_summaries *s = r->env->summaries;
    int64_t high_water = mg_tx_summary_high_water(s);
    if (high_water < 0 || high_water >= r->snapshot_max_obs)
        return;
    if (!mg_tx_summary_lease_take(s, r->env->pid, mg_monotonic_ns()))
        return;
    high_water = mg_tx_summary_high_water(s); /* another writer may have moved it */
    sqlite3_stmt *saved = r->observations;
    r->observations =
        high_water >= 0 && high_water < r->snapshot_max_obs ? prepare_summary_scan(r) : NULL;
    sqlite3_stmt *news = r->observations
                             ? mg_db_prepare(r->env->db, "SELECT id, transmission_id FROM"
                                                         " observations WHERE id > ?"
                                                         " ORDER BY id LIMIT 256")
                             : NULL;
    int64_t rows = 0;
    sqlite3_int64 chunk_tx[EXTEND_CHUNK];
    while (news && !r->error && rows < MG_TX_SUMMARY_EXTEND_ROWS &&
           high_water < r->snapshot_max_obs) {
        sqlite3_reset(news);
        sqlite3_bind_int64(news, 1, high_water);
        int n = 0, rc;
        int64_t chunk_end = high_water;
        while (n < EXTEND_CHUNK && (rc = sqlite3_step(news)) == SQLITE_ROW) {
            chunk_end = sqlite3_column_int64(news, 0);
            chunk_tx[n++] = sqlite3_column_int64(news, 1);
        }
        if (n < EXTEND_CHUNK && rc != SQLITE_DONE) {
            fail(r, rc);
            break;
        }
        if (n == 0)
            break;
        struct id_set seen = {0};
        for (int i = 0; i < n && !r->error; i++) {
            int added = id_set_add(&seen, chunk_tx[i]);
            if (added < 0)
                fail(r, SQLITE_NOMEM);
            else if (added > 0)
                summarize(r, s, chunk_tx[i], &rows);
        }
        free(seen.slots);
        if (r->error)
            break;
        rows += n;
        high_water = chunk_end;
        mg_tx_summary_publish(s, high_water);
        atomic_fetch_add(&s->header->extended_rows, (uint64_t)n);
    }
    sqlite3_finalize(news);
    sqlite3_finalize(r->observations);
    r->observations = saved;
    mg_tx_summary_lease_release(s, r->env->pid);
}

/*
 * Decides whether this request's page may read summaries: extends them first when they are
 * behind, then reads the high-water mark and lists the transmissions with observations
 * after it (at most MG_TX_SUMMARY_LAG_MAX rows). A failure here only means reading directly.
 */
static void use_summaries(struct packets_run *r)
{
    r->summaries_usable = false;
    if (!r->env->summaries || r->f->expand_observations || r->f->group_by_hash)
        return;
    r->snapshot_max_obs = newest_observation(r);
    if (r->error)
        return;
    if (!r->light)
        extend_summaries(r);
    if (r->error)
        return;
    r->summary_high_water = mg_tx_summary_high_water(r->env->summaries);
    if (r->summary_high_water < 0 || r->snapshot_max_obs - r->summary_high_water >
                                         (r->light ? MG_PACKETS_LIGHT_LAG : MG_TX_SUMMARY_LAG_MAX))
        return;
    if (r->summary_high_water < r->snapshot_max_obs) {
        sqlite3_stmt *st = mg_db_prepare(r->env->db, "SELECT DISTINCT transmission_id FROM"
                                                     " observations WHERE id > ?");
        if (!st)
            return;
        sqlite3_bind_int64(st, 1, r->summary_high_water);
        int rc;
        bool ok = true;
        while (ok && (rc = sqlite3_step(st)) == SQLITE_ROW)
            ok = id_set_add(&r->dirty, sqlite3_column_int64(st, 0)) >= 0;
        sqlite3_finalize(st);
        if (!ok || rc != SQLITE_DONE)
            return;
    }
    r->summaries_usable = true;
}

/* One observation in CoreScope's ObservationResp order; absent values of the keys it omits
 * when empty (resolved_path, direction, raw_hex) are left out. raw_hex is the transmission's:
 * CoreScope's store keeps no frame per observation. */
static void write_detail_observation(struct packets_run *r, struct mg_json *j, sqlite3_stmt *st,
                                     sqlite3_stmt *row)
{
    size_t path_len, resolved_len, iata_len, id_len, name_len, raw_len, dir_len;
    const char *path = column_text(st, O_PATH_JSON, &path_len);
    const char *resolved = column_text(st, O_RESOLVED_PATH, &resolved_len);
    const char *iata = column_text(st, O_OBSERVER_IATA, &iata_len);
    const char *observer_id = column_text(st, O_OBSERVER_ID, &id_len);
    const char *observer_name = column_text(st, O_OBSERVER_NAME, &name_len);
    const char *direction = column_text(st, O_DIRECTION, &dir_len);
    const char *raw = column_text(row, P_RAW_HEX, &raw_len);
    mg_json_object_begin(j); /* CoreScope's field order, not sorted */
    mg_json_key(j, "id");
    mg_db_json_column(j, st, O_ID);
    mg_json_key(j, "hash");
    mg_db_json_column(j, row, P_HASH);
    write_text_or_null(j, "observer_id", observer_id, id_len, false);
    write_text_or_null(j, "observer_name", observer_name, name_len, false);
    write_text_or_null(j, "observer_iata", iata, iata_len, true);
    mg_json_key(j, "snr");
    mg_db_json_column(j, st, O_SNR);
    mg_json_key(j, "rssi");
    mg_db_json_column(j, st, O_RSSI);
    write_text_or_null(j, "path_json", path, path_len, false);
    mg_stored_array_write(j, "resolved_path", resolved, resolved_len, false, &r->tmp);
    if (direction && dir_len > 0)
        mg_json_kv_string(j, "direction", direction);
    if (raw && raw_len > 0) {
        mg_json_key(j, "raw_hex");
        mg_json_string_n(j, raw, raw_len);
    }
    mg_json_key(j, "timestamp");
    mg_db_json_column(j, st, O_TIMESTAMP);
    mg_json_object_end(j);
}

/* Whether the (observer, path) of the statement's row is among the first n rows' (kept in
 * r->pair_text by add_pair). */
static bool pair_seen(struct packets_run *r, size_t n)
{
    const struct pair *last = &r->pairs[n];
    for (size_t i = 0; i < n; i++)
        if (r->pairs[i].hash == last->hash && r->pairs[i].len == last->len &&
            memcmp(r->pair_text.data + r->pairs[i].at, r->pair_text.data + last->at, last->len) ==
                0)
            return true;
    return false;
}

/* "observation_count" and "observations" of the detail: one per observer and path; bare: the
 * array alone. */
static int write_detail_observations(struct packets_run *r, struct mg_json *j, sqlite3_stmt *row,
                                     bool bare)
{
    sqlite3_stmt *st = prepare_statement(r, MG_PACKETS_SQL_DETAIL_OBSERVATIONS);
    if (!st)
        return r->error;
    sqlite3_bind_int64(st, 1, sqlite3_column_int64(row, P_ID));
    mg_buf_reset(&r->pair_text);
    struct mg_buf list;
    mg_buf_init(&list);
    struct mg_json lj;
    mg_json_init(&lj, &list);
    mg_json_array_begin(&lj);
    size_t kept = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (!add_pair(r, kept, st)) {
            rc = SQLITE_NOMEM;
            break;
        }
        if (pair_seen(r, kept)) {
            r->pair_text.len = r->pairs[kept].at; /* forget this row's pair */
            continue;
        }
        kept++;
        write_detail_observation(r, &lj, st, row);
    }
    mg_json_array_end(&lj);
    sqlite3_finalize(st);
    if (rc == SQLITE_DONE && !list.failed) {
        if (!bare) {
            mg_json_kv_int(j, "observation_count", kept ? (int64_t)kept : 1);
            mg_json_key(j, "observations");
        }
        mg_json_raw(j, list.data, list.len);
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        rc = SQLITE_NOMEM;
    }
    mg_buf_free(&list);
    return rc;
}

/* The run of one transmission's detail: its row stepped into *row (SQLITE_OK), or
 * SQLITE_NOTFOUND, or the failure. */
static int detail_open(struct packets_run *r, int64_t tx_id, sqlite3_stmt **row)
{
    run_init(r);
    *row = prepare_statement(r, MG_PACKETS_SQL_ROW);
    r->observations = prepare_statement(r, MG_PACKETS_SQL_OBSERVATIONS);
    r->best = prepare_statement(r, MG_PACKETS_SQL_BEST);
    int rc = r->error ? r->error : SQLITE_OK;
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(*row, 1, tx_id);
        rc = sqlite3_step(*row);
        rc = rc == SQLITE_ROW ? SQLITE_OK : rc == SQLITE_DONE ? SQLITE_NOTFOUND : rc;
    }
    return rc;
}

int mg_packets_observations(struct mg_env *env, int64_t tx_id, struct mg_json *j)
{
    struct mg_packets_filter f = {.limit = 1, .expand_observations = true};
    struct packets_run r = {.env = env, .f = &f};
    sqlite3_stmt *row = NULL;
    int rc = detail_open(&r, tx_id, &row);
    if (rc == SQLITE_OK)
        rc = write_detail_observations(&r, j, row, true);
    sqlite3_finalize(row);
    run_free(&r);
    return rc;
}

int mg_packets_detail(struct mg_env *env, int64_t tx_id, struct mg_json *j)
{
    struct mg_packets_filter f = {.limit = 1, .expand_observations = true};
    struct packets_run r = {.env = env, .f = &f};
    sqlite3_stmt *row = NULL;
    int rc = detail_open(&r, tx_id, &row);
    if (rc == SQLITE_OK) {
        mg_json_key(j, "packet");
        if (!write_packet(&r, j, row))
            rc = r.error;
    }
    if (rc == SQLITE_OK) {
        size_t path_len = 0;
        const char *path = r.last_best ? column_text(r.last_best, B_PATH_JSON, &path_len) : NULL;
        if (!mg_stored_array_write(j, "path", path, path_len, false, &r.tmp)) {
            mg_json_key(j, "path");
            mg_json_array_begin(j);
            mg_json_array_end(j);
        }
        rc = write_detail_observations(&r, j, row, false);
    }
    sqlite3_finalize(row);
    run_free(&r);
    return rc;
}

void mg_packets_page(struct mg_env *env, struct mg_packets_filter *f, bool light, struct mg_json *j,
                     struct mg_packets_page *out)
{
    struct packets_run r = {.env = env, .f = f, .light = light};
    run_init(&r);

    /* One read transaction: the total and the page see one snapshot. */
    bool in_transaction = sqlite3_exec(env->db->conn, "BEGIN", NULL, NULL, NULL) == SQLITE_OK;
    take_snapshot(&r);
    if (!r.error)
        use_summaries(&r);
    r.readmit = r.light && !r.summaries_usable;
    r.keys_not_null = tx_keys_not_null(env->db);
    bool matches_nothing = false;
    if (f->area && f->nodes)
        f->area = NULL;
    if (!r.error && f->area) {
        struct mg_area_nodes area;
        int rc = mg_area_nodes_load(env->db->conn, f->area, &area);
        if (rc != SQLITE_OK)
            r.error = rc;
        else if (!mg_area_nodes_filter(&area))
            f->area = NULL; /* no node inside: nothing is filtered */
        mg_area_nodes_free(&area);
    }
    if (!r.error && f->node)
        matches_nothing = !resolve_node(&r);
    if (!r.error && !matches_nothing && f->nodes)
        matches_nothing = !resolve_nodes(&r);
    if (!r.error && !matches_nothing && f->observer)
        matches_nothing = !choose_list_form(&r, f->observer, false, &f->observer_form);
    if (!r.error && !matches_nothing && f->region)
        matches_nothing = !choose_list_form(&r, f->region, true, &f->region_form);
    f->node_form = MG_PACKETS_LIST_SCAN;
    int64_t total = r.error || r.readmit || matches_nothing ? 0 : count_packets(&r, f);
    if (total > 0 && !r.error && !f->group_by_hash)
        choose_page_forms(&r, total);

    r.body = j->out;
    mg_json_array_begin(j);
    if (total > 0 && !r.error && !r.readmit)
        f->group_by_hash ? write_grouped_page(&r, j, total) : write_page(&r, j);
    mg_json_array_end(j);

    sqlite3_finalize(r.observations);
    sqlite3_finalize(r.best);
    sqlite3_finalize(r.row);
    r.observations = r.best = r.row = NULL;
    if (in_transaction)
        sqlite3_exec(env->db->conn, "COMMIT", NULL, NULL, NULL);
    *out = (struct mg_packets_page){.total = total, .error = r.error, .readmit = r.readmit};
    if (!r.readmit) {
        last_used_summaries = r.rows_from_summary > 0 && r.rows_direct == 0;
        if (env->summaries) {
            atomic_fetch_add(&env->summaries->header->rows_from_summary,
                             (uint64_t)r.rows_from_summary);
            atomic_fetch_add(&env->summaries->header->rows_direct, (uint64_t)r.rows_direct);
        }
        mg_table_rows(MG_TABLE_summaries, (uint64_t)r.rows_from_summary, (uint64_t)r.rows_direct);
    }
    run_free(&r);
}

/* SPDX-License-Identifier: ISC */
/*
 * GET /api/nodes/{pubkey}/health: the transmissions CoreScope files under a node, summed up:
 * who heard them, how many today, their hops, and the 20 latest.
 *
 * The transmissions (CoreScope's per-node index, built as it loads its store) are those
 *   - whose decoded_json names the key as pubKey, destPubKey or srcPubKey;
 *   - with an observation whose resolved_path lists the key;
 *   - with an observation without resolved_path whose path_json has a hop that resolves to
 *     the key alone among the relays (repeaters and rooms): one of its 1-, 2- or 3-byte
 *     prefixes that no other relay shares (reach.h calls them its reliable tokens).
 * Each is read as CoreScope's store holds it (node_read.c's ids_sql gives their order): its
 * observations newest first, one per (observer, path); its "best" observation the first with the
 * most hops. Finding them reads every transmission and observation (no index serves these tests),
 * so the route is heavy: the busiest node of 2M observations costs 32.8M VM steps and 432 122 pages
 * (docs/benchmarks.md), as much as /api/packets?region=.
 *
 * Differences from CoreScope: observers' can_relay is always null (CoreScope reads it from
 * observer columns that no migration in ../shared has); observers with equal packet counts
 * are in first-heard order (CoreScope's order among them is that of a Go map: random).
 */
#include "buf.h"
#include "corescope_config.h"
#include "json.h"
#include "log.h"
#include "node_read.h"
#include "node_row.h"
#include "params.h"
#include "router.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RECENT_PACKETS 20

static const char tx_sql[] = "SELECT raw_hex, hash, first_seen, route_type, payload_type,"
                             " decoded_json FROM transmissions WHERE id = ?1";
/* Its observations, newest first: observer id, name, iata, snr, rssi, path, direction,
 * resolved path (compacted), number of hops (0 for anything but a JSON array; CoreScope also
 * reads 0 for an array that holds anything but texts, which its ingestor never writes). */
static const char obs_sql[] =
    "SELECT coalesce(obs.id, ''), obs.name, obs.iata, o.snr, o.rssi, o.path_json, o.direction,"
    " %s, CASE WHEN json_valid(o.path_json) AND json_type(o.path_json) = 'array'"
    " THEN json_array_length(o.path_json) ELSE 0 END"
    " FROM observations o LEFT JOIN observers obs ON obs.rowid = o.observer_idx"
    " WHERE o.transmission_id = ?1 ORDER BY o.timestamp DESC";

/* One transmission as CoreScope's store holds it (the fields health reads). */
struct packet {
    int64_t id;
    char *first_seen;  /* NULL for none */
    int hops;          /* of the best observation's path */
    char *observer_id; /* the best observation's; "" for none */
    char *observer_name;
    bool has_snr, has_rssi;
    double snr, rssi;
    int64_t observations; /* one per (observer, path) */
};

static char *dup_text(sqlite3_stmt *st, int col)
{
    const char *t = (const char *)sqlite3_column_text(st, col);
    return t ? strdup(t) : NULL;
}

static void packet_free(struct packet *p)
{
    free(p->first_seen);
    free(p->observer_id);
    free(p->observer_name);
}

/* Whether this (observer, path) was already seen among the first n keys. */
static bool seen_before(struct mg_buf *keys, const char *key)
{
    for (const char *k = keys->data; k && k < keys->data + keys->len; k += strlen(k) + 1)
        if (strcmp(k, key) == 0)
            return true;
    return false;
}

/*
 * Reads transmission id: into p (always), and when json is not NULL writes it there as
 * CoreScope's recentPackets do. An SQLite code.
 */
static int read_packet(sqlite3_stmt *tx, sqlite3_stmt *obs, int64_t id, struct packet *p,
                       struct mg_json *json)
{
    memset(p, 0, sizeof *p);
    p->id = id;
    sqlite3_bind_int64(tx, 1, id);
    sqlite3_bind_int64(obs, 1, id);
    int rc = sqlite3_step(tx);
    if (rc != SQLITE_ROW) {
        sqlite3_reset(tx);
        sqlite3_reset(obs);
        return rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
    p->first_seen = dup_text(tx, 2);
    struct mg_buf keys, best_path, best_resolved, longest_resolved, best_dir;
    mg_buf_init(&keys);
    mg_buf_init(&best_path);
    mg_buf_init(&best_resolved);
    mg_buf_init(&longest_resolved);
    mg_buf_init(&best_dir);
    char *iata = NULL;
    int best_hops = -1, longest_resolved_hops = -1;
    bool best_has_dir = false;
    while ((rc = sqlite3_step(obs)) == SQLITE_ROW) {
        const char *observer = (const char *)sqlite3_column_text(obs, 0);
        const char *path = (const char *)sqlite3_column_text(obs, 5);
        char key[512];
        snprintf(key, sizeof key, "%s|%s", observer ? observer : "", path ? path : "");
        if (seen_before(&keys, key))
            continue;
        mg_buf_append(&keys, key, strlen(key) + 1);
        p->observations++;
        int hops = sqlite3_column_int(obs, 8);
        const char *resolved = (const char *)sqlite3_column_text(obs, 7);
        if (resolved && *resolved && hops > longest_resolved_hops) {
            longest_resolved_hops = hops;
            mg_buf_reset(&longest_resolved);
            mg_buf_puts(&longest_resolved, resolved);
        }
        if (hops <= best_hops)
            continue;
        best_hops = hops;
        p->hops = hops;
        free(p->observer_id);
        free(p->observer_name);
        free(iata);
        p->observer_id = strdup(observer ? observer : "");
        p->observer_name = dup_text(obs, 1);
        iata = dup_text(obs, 2);
        p->has_snr = sqlite3_column_type(obs, 3) != SQLITE_NULL;
        p->snr = sqlite3_column_double(obs, 3);
        p->has_rssi = sqlite3_column_type(obs, 4) != SQLITE_NULL;
        p->rssi = sqlite3_column_double(obs, 4);
        mg_buf_reset(&best_path);
        mg_buf_puts(&best_path, path ? path : "");
        best_has_dir = sqlite3_column_type(obs, 6) != SQLITE_NULL;
        mg_buf_reset(&best_dir);
        if (best_has_dir)
            mg_buf_puts(&best_dir, (const char *)sqlite3_column_text(obs, 6));
        mg_buf_reset(&best_resolved);
        if (resolved && *resolved)
            mg_buf_puts(&best_resolved, resolved);
    }
    if (rc == SQLITE_DONE)
        rc = SQLITE_OK;
    if (!p->observer_id)
        p->observer_id = strdup("");
    if (rc == SQLITE_OK && json) {
        /* Keys in bytewise order; "" reads as null, as CoreScope's store gives them. */
        mg_json_object_begin(json);
        mg_json_key(json, "_parsedPath");
        if (p->hops > 0)
            mg_json_raw(json, mg_buf_cstr(&best_path), best_path.len);
        else
            mg_json_null(json);
        mg_json_key(json, "decoded_json");
        mg_db_json_column(json, tx, 5);
        mg_json_key(json, "direction");
        mg_json_string(json, best_dir.len ? mg_buf_cstr(&best_dir) : NULL);
        mg_json_key(json, "first_seen");
        mg_json_string(json, p->first_seen && *p->first_seen ? p->first_seen : NULL);
        mg_json_key(json, "hash");
        mg_db_json_column(json, tx, 1);
        mg_json_kv_int(json, "id", id);
        mg_json_kv_int(json, "observation_count", p->observations);
        mg_json_key(json, "observer_iata");
        mg_json_string(json, iata && *iata ? iata : NULL);
        mg_json_key(json, "observer_id");
        mg_json_string(json, *p->observer_id ? p->observer_id : NULL);
        mg_json_key(json, "observer_name");
        mg_json_string(json, p->observer_name && *p->observer_name ? p->observer_name : NULL);
        mg_json_key(json, "path_json");
        mg_json_string(json, best_path.len ? mg_buf_cstr(&best_path) : NULL);
        mg_json_key(json, "payload_type");
        mg_db_json_column(json, tx, 4);
        mg_json_key(json, "raw_hex");
        mg_db_json_column(json, tx, 0);
        /* The best observation's resolved path, else the longest one stored. */
        struct mg_buf *rp = best_resolved.len ? &best_resolved : &longest_resolved;
        if (rp->len) {
            mg_json_key(json, "resolved_path");
            mg_json_raw(json, mg_buf_cstr(rp), rp->len);
        }
        mg_json_key(json, "route_type");
        mg_db_json_column(json, tx, 3);
        mg_json_key(json, "rssi");
        if (p->has_rssi)
            mg_json_double(json, p->rssi);
        else
            mg_json_null(json);
        mg_json_key(json, "snr");
        if (p->has_snr)
            mg_json_double(json, p->snr);
        else
            mg_json_null(json);
        mg_json_key(json, "timestamp");
        mg_json_string(json, p->first_seen && *p->first_seen ? p->first_seen : NULL);
        mg_json_object_end(json);
    }
    free(iata);
    mg_buf_free(&keys);
    mg_buf_free(&best_path);
    mg_buf_free(&best_resolved);
    mg_buf_free(&longest_resolved);
    mg_buf_free(&best_dir);
    sqlite3_reset(tx);
    sqlite3_reset(obs);
    return rc;
}

struct observer_row {
    const char *id, *name; /* point into a packet */
    int64_t count, snr_n, rssi_n;
    double snr_sum, rssi_sum;
    size_t first; /* order of first appearance */
};

static int by_count(const void *a, const void *b)
{
    const struct observer_row *x = a, *y = b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return x->first < y->first ? -1 : x->first > y->first;
}

static void write_average(struct mg_json *j, const char *key, double sum, int64_t n)
{
    mg_json_key(j, key);
    if (n > 0)
        mg_json_double(j, sum / (double)n);
    else
        mg_json_null(j);
}

/* The observers of the packets' best observations, most packets first. */
static bool write_observers(struct mg_json *j, const struct packet *p, size_t n)
{
    struct observer_row *rows = calloc(n ? n : 1, sizeof *rows);
    if (!rows)
        return false;
    size_t n_rows = 0;
    for (size_t i = 0; i < n; i++) {
        if (!*p[i].observer_id)
            continue;
        size_t r = 0;
        while (r < n_rows && strcmp(rows[r].id, p[i].observer_id) != 0)
            r++;
        if (r == n_rows)
            rows[n_rows++] = (struct observer_row){
                .id = p[i].observer_id, .name = p[i].observer_name, .first = r};
        rows[r].count++;
        if (p[i].has_snr)
            rows[r].snr_sum += p[i].snr, rows[r].snr_n++;
        if (p[i].has_rssi)
            rows[r].rssi_sum += p[i].rssi, rows[r].rssi_n++;
    }
    if (n_rows > 1)
        qsort(rows, n_rows, sizeof *rows, by_count);
    mg_json_key(j, "observers");
    mg_json_array_begin(j);
    for (size_t r = 0; r < n_rows; r++) {
        mg_json_object_begin(j);
        write_average(j, "avgRssi", rows[r].rssi_sum, rows[r].rssi_n);
        write_average(j, "avgSnr", rows[r].snr_sum, rows[r].snr_n);
        mg_json_kv_null(j, "can_relay");
        mg_json_kv_string(j, "observer_id", rows[r].id);
        mg_json_kv_string(j, "observer_name", rows[r].name ? rows[r].name : "");
        mg_json_kv_int(j, "packetCount", rows[r].count);
        mg_json_object_end(j);
    }
    mg_json_array_end(j);
    free(rows);
    return true;
}

static void write_stats(struct mg_json *j, const struct packet *p, size_t n, int64_t now_s)
{
    int64_t total_obs = 0, today = 0, snr_n = 0, hop_n = 0, hop_sum = 0;
    double snr_sum = 0;
    const char *last_heard = NULL;
    char today_start[32];
    time_t day = (time_t)(now_s - now_s % 86400);
    struct tm tm;
    gmtime_r(&day, &tm);
    strftime(today_start, sizeof today_start, "%Y-%m-%dT%H:%M:%SZ", &tm);
    for (size_t i = 0; i < n; i++) {
        const char *seen = p[i].first_seen ? p[i].first_seen : "";
        total_obs += p[i].observations;
        if (strcmp(seen, today_start) > 0)
            today++;
        if (p[i].has_snr)
            snr_sum += p[i].snr, snr_n++;
        if (*seen && (!last_heard || strcmp(seen, last_heard) > 0))
            last_heard = seen;
        if (p[i].hops > 0)
            hop_sum += p[i].hops, hop_n++;
    }
    mg_json_key(j, "stats");
    mg_json_object_begin(j);
    mg_json_kv_int(j, "avgHops", hop_n ? (int64_t)llround((double)hop_sum / (double)hop_n) : 0);
    write_average(j, "avgSnr", snr_sum, snr_n);
    mg_json_kv_string(j, "lastHeard", last_heard);
    mg_json_kv_int(j, "packetsToday", today);
    mg_json_kv_int(j, "totalObservations", total_obs);
    mg_json_kv_int(j, "totalPackets", (int64_t)n);
    mg_json_kv_int(j, "totalTransmissions", (int64_t)n);
    mg_json_object_end(j);
}

/* Writes the answer for the node (its row current in node, or NULL: a stub) and its
 * packets; an SQLite code. */
static int write_health(struct mg_db *db, struct mg_response *res, sqlite3_stmt *node,
                        const char *pubkey, const int64_t *ids, size_t n, int64_t now_s)
{
    sqlite3_stmt *tx = mg_db_prepare(db, tx_sql);
    char sql[sizeof obs_sql + 128];
    snprintf(sql, sizeof sql, obs_sql,
             db->schema.obs_resolved_path
                 ? "CASE WHEN json_valid(o.resolved_path) THEN json(o.resolved_path) END"
                 : "NULL");
    sqlite3_stmt *obs = tx ? mg_db_prepare(db, sql) : NULL;
    struct packet *p = calloc(n ? n : 1, sizeof *p);
    int rc = tx && obs ? (p ? SQLITE_OK : SQLITE_NOMEM) : SQLITE_ERROR;
    size_t read = 0;
    for (; rc == SQLITE_OK && read < n; read++)
        rc = read_packet(tx, obs, ids[read], &p[read], NULL);
    if (rc == SQLITE_OK) {
        mg_response_json(res, 200);
        struct mg_json j;
        mg_json_init(&j, &res->body);
        mg_json_object_begin(&j); /* keys in bytewise order */
        mg_json_key(&j, "node");
        if (node) {
            mg_nodes_write_node(&j, node, &db->schema, NULL);
        } else { /* CoreScope's stub for a key it has packets of but no node row */
            mg_json_object_begin(&j);
            mg_json_kv_string(&j, "name", "Unknown");
            mg_json_kv_string(&j, "public_key", pubkey);
            mg_json_kv_string(&j, "role", "unknown");
            mg_json_object_end(&j);
        }
        if (!write_observers(&j, p, n))
            rc = SQLITE_NOMEM;
        mg_json_key(&j, "recentPackets");
        mg_json_array_begin(&j);
        for (size_t i = n; rc == SQLITE_OK && i > 0 && n - i < RECENT_PACKETS; i--) {
            struct packet again;
            rc = read_packet(tx, obs, ids[i - 1], &again, &j);
            packet_free(&again);
        }
        mg_json_array_end(&j);
        write_stats(&j, p, n, now_s);
        mg_json_object_end(&j);
        mg_buf_putc(&res->body, '\n');
    }
    for (size_t i = 0; p && i < read; i++)
        packet_free(&p[i]);
    free(p);
    sqlite3_finalize(tx);
    sqlite3_finalize(obs);
    return rc;
}

enum mg_turn mg_handle_node_health(struct mg_env *env, const struct mg_request *req,
                                   struct mg_response *res)
{
    struct mg_db *db = env->db;
    const char *pubkey = req->path_param;
    bool began = mg_node_read_begin(db);
    struct mg_buf sql;
    mg_buf_init(&sql);
    mg_buf_puts(&sql, "SELECT ");
    mg_nodes_select_columns(&db->schema, &sql);
    mg_buf_puts(&sql, " FROM nodes WHERE public_key = ?1");
    sqlite3_stmt *node = sql.failed ? NULL : mg_db_prepare(db, mg_buf_cstr(&sql));
    mg_buf_free(&sql);
    int64_t *ids = NULL;
    size_t n = 0;
    int rc = node ? SQLITE_OK : SQLITE_ERROR;
    bool found = false;
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(node, 1, pubkey, -1, SQLITE_STATIC);
        rc = sqlite3_step(node);
        found = rc == SQLITE_ROW;
        rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
    if (rc == SQLITE_OK)
        rc = mg_node_packet_ids(db, pubkey, &ids, &n);
    if (rc == SQLITE_OK && !found && n == 0)
        mg_response_error(res, 404, "Not found");
    else if (rc == SQLITE_OK)
        rc = write_health(db, res, found ? node : NULL, pubkey, ids, n,
                          req->start_realtime_ns / 1000000000LL);
    if (rc != SQLITE_OK)
        mg_response_db_failure_on(res, "the node", rc, db->conn);
    free(ids);
    sqlite3_finalize(node);
    mg_node_read_end(db, began);
    return MG_DONE;
}

/* ---- GET /api/nodes/bulk-health ------------------------------------------------------------ */

/*
 * The health summary of the `limit` most recently seen nodes (default 50, at most 200, as
 * CoreScope's listLimits.bulkHealthMax; a limit that is not a positive integer is the
 * default), each node's transmissions found as health finds them, for all the nodes in one
 * pass over observations and one over transmissions: each observation's resolved path (or,
 * without one, its hops) and each transmission's decoded keys are looked up among the nodes'
 * keys and reliable hop tokens. Each transmission is then read once. Entry and stats keys in
 * bytewise order (CoreScope's maps); observers most packets first (ties: first heard).
 * region= (IATA codes, comma-separated) keeps the nodes with a packet an observer of those
 * regions heard, at most `limit`; area= (a key of "areas" in MESHGATE_CORESCOPE_CONFIG) the
 * nodes with coordinates inside its polygon (or box), all of them. As CoreScope, a filter
 * reads up to 10 000 nodes, and one that matches nothing to filter by (no observer with the
 * codes, an unknown area, an area with no node) filters nothing.
 */
#define BULK_DEFAULT 50
#define BULK_MAX 200
#define BULK_FILTERED_MAX 10000 /* CoreScope's rows read under a region or area filter */

struct bulk_key {
    char *text; /* a node's key (as stored) or a reliable hop token (upper case) */
    size_t node;
};

struct bulk_hit {
    size_t node;
    int64_t tx;
};

struct bulk {
    struct bulk_key *keys, *tokens;
    size_t n_keys, n_tokens;
    struct bulk_hit *hits;
    size_t n_hits, cap_hits;
    char **relays; /* lowercased keys of repeaters and rooms, sorted */
    size_t n_relays;
};

static int bulk_key_order(const void *a, const void *b)
{
    return strcmp(((const struct bulk_key *)a)->text, ((const struct bulk_key *)b)->text);
}

static int hit_order(const void *a, const void *b)
{
    const struct bulk_hit *x = a, *y = b;
    if (x->node != y->node)
        return x->node < y->node ? -1 : 1;
    return x->tx < y->tx ? -1 : x->tx > y->tx;
}

static int text_order(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool bulk_hit(struct bulk *bk, const struct bulk_key *table, size_t n, const char *text,
                     int64_t tx)
{
    struct bulk_key probe = {(char *)text, 0};
    const struct bulk_key *k = n ? bsearch(&probe, table, n, sizeof *table, bulk_key_order) : NULL;
    if (!k)
        return true;
    /* equal texts sit together: every node with this text */
    while (k > table && strcmp(k[-1].text, text) == 0)
        k--;
    for (; k < table + n && strcmp(k->text, text) == 0; k++) {
        if (bk->n_hits == bk->cap_hits) {
            size_t cap = bk->cap_hits ? bk->cap_hits * 2 : 1024;
            struct bulk_hit *more = realloc(bk->hits, cap * sizeof *more);
            if (!more)
                return false;
            bk->hits = more;
            bk->cap_hits = cap;
        }
        bk->hits[bk->n_hits++] = (struct bulk_hit){k->node, tx};
    }
    return true;
}

/* Each quoted item of a JSON array of strings, upper-cased when upper, looked up in table. */
static bool bulk_items(struct bulk *bk, const struct bulk_key *table, size_t n, const char *list,
                       bool upper, int64_t tx)
{
    for (const char *p = list ? strchr(list, '"') : NULL; p;) {
        const char *end = strchr(p + 1, '"');
        if (!end)
            break;
        size_t len = (size_t)(end - p - 1);
        char item[80];
        if (len < sizeof item) {
            for (size_t i = 0; i < len; i++)
                item[i] =
                    upper && p[1 + i] >= 'a' && p[1 + i] <= 'z' ? (char)(p[1 + i] - 32) : p[1 + i];
            item[len] = '\0';
            if (!bulk_hit(bk, table, n, item, tx))
                return false;
        }
        p = strchr(end + 1, '"');
    }
    return true;
}

/* How many relays' keys start with prefix (lowercase), and the one when there is one. */
static size_t relays_with(const struct bulk *bk, const char *prefix, const char **only)
{
    size_t len = strlen(prefix), lo = 0, hi = bk->n_relays, count = 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(bk->relays[mid], prefix) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; i < bk->n_relays && strncmp(bk->relays[i], prefix, len) == 0; i++)
        count++, *only = bk->relays[i];
    return count;
}

static int bulk_relays(struct mg_db *db, struct bulk *bk)
{
    sqlite3_stmt *st = mg_db_prepare(
        db, "SELECT lower(public_key) FROM nodes WHERE (instr(lower(role), 'repeater') > 0"
            " OR instr(lower(role), 'room_server') > 0 OR lower(role) = 'room')"
            " AND public_key IS NOT NULL");
    if (!st)
        return SQLITE_ERROR;
    int rc;
    size_t cap = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (bk->n_relays == cap) {
            cap = cap ? cap * 2 : 256;
            char **more = realloc(bk->relays, cap * sizeof *more);
            if (!more) {
                rc = SQLITE_NOMEM;
                break;
            }
            bk->relays = more;
        }
        if (!(bk->relays[bk->n_relays] = strdup((const char *)sqlite3_column_text(st, 0)))) {
            rc = SQLITE_NOMEM;
            break;
        }
        bk->n_relays++;
    }
    sqlite3_finalize(st);
    if (bk->n_relays > 1)
        qsort(bk->relays, bk->n_relays, sizeof *bk->relays, text_order);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* The nodes' keys and reliable tokens (node_read.c's hop_tokens' rule), sorted for lookups. */
static int bulk_tables(struct mg_db *db, struct bulk *bk, char **pks, size_t n)
{
    int rc = bulk_relays(db, bk);
    bk->keys = calloc(n ? n : 1, sizeof *bk->keys);
    bk->tokens = calloc(n ? 3 * n : 1, sizeof *bk->tokens);
    if (rc == SQLITE_OK && (!bk->keys || !bk->tokens))
        rc = SQLITE_NOMEM;
    for (size_t i = 0; rc == SQLITE_OK && i < n; i++) {
        if (!(bk->keys[bk->n_keys].text = strdup(pks[i])))
            return SQLITE_NOMEM;
        bk->keys[bk->n_keys++].node = i;
        for (size_t len = 2; len <= 6 && strlen(pks[i]) >= len; len += 2) {
            char prefix[8];
            for (size_t c = 0; c < len; c++)
                prefix[c] = (char)tolower((unsigned char)pks[i][c]);
            prefix[len] = '\0';
            const char *only = NULL;
            if (relays_with(bk, prefix, &only) != 1 || strcmp(only, pks[i]) != 0)
                continue;
            for (size_t c = 0; c < len; c++)
                prefix[c] = (char)toupper((unsigned char)prefix[c]);
            if (!(bk->tokens[bk->n_tokens].text = strdup(prefix)))
                return SQLITE_NOMEM;
            bk->tokens[bk->n_tokens++].node = i;
        }
    }
    if (bk->n_keys > 1)
        qsort(bk->keys, bk->n_keys, sizeof *bk->keys, bulk_key_order);
    if (bk->n_tokens > 1)
        qsort(bk->tokens, bk->n_tokens, sizeof *bk->tokens, bulk_key_order);
    return rc;
}

/* The two passes: every observation's resolved path or hops, every transmission's keys. */
static int bulk_scan(struct mg_db *db, struct bulk *bk)
{
    sqlite3_stmt *st =
        mg_db_prepare(db, db->schema.obs_resolved_path
                              ? "SELECT transmission_id, path_json, resolved_path FROM observations"
                              : "SELECT transmission_id, path_json, NULL FROM observations");
    if (!st)
        return SQLITE_ERROR;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t tx = sqlite3_column_int64(st, 0);
        const char *resolved = (const char *)sqlite3_column_text(st, 2);
        const char *path = (const char *)sqlite3_column_text(st, 1);
        bool ok = resolved && *resolved ? bulk_items(bk, bk->keys, bk->n_keys, resolved, false, tx)
                                        : bulk_items(bk, bk->tokens, bk->n_tokens, path, true, tx);
        if (!ok) {
            rc = SQLITE_NOMEM;
            break;
        }
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return rc;
    st = mg_db_prepare(db, "SELECT id, decoded_json ->> '$.pubKey', decoded_json ->> "
                           "'$.destPubKey', decoded_json ->> '$.srcPubKey' FROM transmissions"
                           " WHERE json_valid(decoded_json)");
    if (!st)
        return SQLITE_ERROR;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        for (int c = 1; c <= 3; c++)
            if (sqlite3_column_type(st, c) == SQLITE_TEXT &&
                !bulk_hit(bk, bk->keys, bk->n_keys, (const char *)sqlite3_column_text(st, c),
                          sqlite3_column_int64(st, 0))) {
                sqlite3_finalize(st);
                return SQLITE_NOMEM;
            }
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return rc;
    if (bk->n_hits > 1)
        qsort(bk->hits, bk->n_hits, sizeof *bk->hits, hit_order);
    return SQLITE_OK;
}

static void bulk_free(struct bulk *bk)
{
    for (size_t i = 0; i < bk->n_keys; i++)
        free(bk->keys[i].text);
    for (size_t i = 0; i < bk->n_tokens; i++)
        free(bk->tokens[i].text);
    for (size_t i = 0; i < bk->n_relays; i++)
        free(bk->relays[i]);
    free(bk->keys);
    free(bk->tokens);
    free(bk->relays);
    free(bk->hits);
}

static int by_id(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int packet_order(const void *a, const void *b)
{
    const struct packet *x = a, *y = b;
    return x->id < y->id ? -1 : x->id > y->id;
}

static void bulk_entry(struct mg_json *j, sqlite3_stmt *nodes, const struct packet *const *p,
                       size_t n, const char *today_start, struct observer_row *rows)
{
    int64_t total_obs = 0, today = 0, snr_n = 0;
    double snr_sum = 0;
    const char *last_heard = "";
    size_t n_rows = 0;
    for (size_t i = 0; i < n; i++) {
        const char *seen = p[i]->first_seen ? p[i]->first_seen : "";
        total_obs += p[i]->observations;
        if (total_obs == 0) /* CoreScope's */
            total_obs = 1;
        if (strcmp(seen, today_start) > 0)
            today++;
        if (p[i]->has_snr)
            snr_sum += p[i]->snr, snr_n++;
        if (strcmp(seen, last_heard) > 0)
            last_heard = seen;
        if (!*p[i]->observer_id)
            continue;
        size_t r = 0;
        while (r < n_rows && strcmp(rows[r].id, p[i]->observer_id) != 0)
            r++;
        if (r == n_rows)
            rows[n_rows++] = (struct observer_row){
                .id = p[i]->observer_id, .name = p[i]->observer_name, .first = r};
        rows[r].count++;
        if (p[i]->has_snr)
            rows[r].snr_sum += p[i]->snr, rows[r].snr_n++;
        if (p[i]->has_rssi)
            rows[r].rssi_sum += p[i]->rssi, rows[r].rssi_n++;
    }
    if (n_rows > 1)
        qsort(rows, n_rows, sizeof *rows, by_count);
    mg_json_object_begin(j); /* keys in bytewise order */
    mg_json_key(j, "lat");
    mg_db_json_column(j, nodes, 3);
    mg_json_key(j, "lon");
    mg_db_json_column(j, nodes, 4);
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            mg_json_key(j, "observers");
            mg_json_array_begin(j);
            for (size_t r = 0; r < n_rows; r++) {
                mg_json_object_begin(j);
                write_average(j, "avgRssi", rows[r].rssi_sum, rows[r].rssi_n);
                write_average(j, "avgSnr", rows[r].snr_sum, rows[r].snr_n);
                mg_json_kv_string(j, "observer_id", rows[r].id);
                mg_json_kv_string(j, "observer_name", rows[r].name ? rows[r].name : "");
                mg_json_kv_int(j, "packetCount", rows[r].count);
                mg_json_object_end(j);
            }
            mg_json_array_end(j);
            mg_json_kv_string(j, "public_key", (const char *)sqlite3_column_text(nodes, 0));
        }
        const char *v = (const char *)sqlite3_column_text(nodes, 1 + pass);
        mg_json_kv_string(j, pass ? "role" : "name", v && *v ? v : NULL); /* nilIfEmpty */
    }
    mg_json_key(j, "stats");
    mg_json_object_begin(j);
    write_average(j, "avgSnr", snr_sum, snr_n);
    mg_json_kv_string(j, "lastHeard", *last_heard ? last_heard : NULL);
    mg_json_kv_int(j, "packetsToday", today);
    mg_json_kv_int(j, "totalObservations", total_obs);
    mg_json_kv_int(j, "totalPackets", (int64_t)n);
    mg_json_kv_int(j, "totalTransmissions", (int64_t)n);
    mg_json_object_end(j);
    mg_json_object_end(j);
}

/* Writes the entries of the first n_nodes nodes (those keep says, when it is not NULL). */
static int bulk_write(struct mg_db *db, struct mg_buf *out, sqlite3_stmt *nodes, size_t n_nodes,
                      const bool *keep, struct bulk *bk, int64_t now_s)
{
    /* Every transmission once, by id. */
    int64_t *ids = malloc((bk->n_hits ? bk->n_hits : 1) * sizeof *ids);
    if (!ids)
        return SQLITE_NOMEM;
    size_t n_ids = 0;
    for (size_t i = 0; i < bk->n_hits; i++)
        if (bk->hits[i].node < n_nodes && (!keep || keep[bk->hits[i].node]))
            ids[n_ids++] = bk->hits[i].tx;
    qsort(ids, n_ids, sizeof *ids, by_id);
    size_t distinct = 0;
    for (size_t i = 0; i < n_ids; i++)
        if (!distinct || ids[distinct - 1] != ids[i])
            ids[distinct++] = ids[i];
    sqlite3_stmt *tx = mg_db_prepare(db, tx_sql);
    char sql[sizeof obs_sql + 128];
    snprintf(sql, sizeof sql, obs_sql,
             db->schema.obs_resolved_path
                 ? "CASE WHEN json_valid(o.resolved_path) THEN json(o.resolved_path) END"
                 : "NULL");
    sqlite3_stmt *obs = tx ? mg_db_prepare(db, sql) : NULL;
    struct packet *p = calloc(distinct ? distinct : 1, sizeof *p);
    const struct packet **mine = calloc(distinct ? distinct : 1, sizeof *mine);
    struct observer_row *rows = calloc(distinct ? distinct : 1, sizeof *rows);
    int rc = tx && obs ? (p && mine && rows ? SQLITE_OK : SQLITE_NOMEM) : SQLITE_ERROR;
    size_t read = 0;
    for (; rc == SQLITE_OK && read < distinct; read++)
        rc = read_packet(tx, obs, ids[read], &p[read], NULL);
    char today_start[32];
    time_t day = (time_t)(now_s - now_s % 86400);
    struct tm tm;
    gmtime_r(&day, &tm);
    strftime(today_start, sizeof today_start, "%Y-%m-%dT%H:%M:%SZ", &tm);
    struct mg_json j;
    mg_json_init(&j, out);
    mg_json_array_begin(&j);
    size_t h = 0;
    for (size_t node = 0; rc == SQLITE_OK && node < n_nodes; node++) {
        if ((rc = sqlite3_step(nodes)) != SQLITE_ROW)
            break;
        rc = SQLITE_OK;
        size_t n = 0;
        if (keep && !keep[node]) {
            while (h < bk->n_hits && bk->hits[h].node == node)
                h++;
            continue;
        }
        for (; h < bk->n_hits && bk->hits[h].node == node; h++) {
            if (n && mine[n - 1]->id == bk->hits[h].tx)
                continue;
            struct packet probe = {.id = bk->hits[h].tx};
            const struct packet *found =
                read ? bsearch(&probe, p, read, sizeof *p, packet_order) : NULL;
            if (found && found->first_seen) /* a transmission that is gone is no packet */
                mine[n++] = found;
        }
        bulk_entry(&j, nodes, mine, n, today_start, rows);
    }
    mg_json_array_end(&j);
    mg_buf_putc(out, '\n');
    for (size_t i = 0; i < read; i++)
        packet_free(&p[i]);
    free(p);
    free(mine);
    free(rows);
    free(ids);
    sqlite3_finalize(tx);
    sqlite3_finalize(obs);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* The region filter's node keys (CoreScope's regionNodeKeys): keep[i] for the nodes whose
 * packets an observer of the region heard. NULL keep: no filter (no code, or no observer has
 * one, as CoreScope). An SQLite code. */
static int region_nodes(struct mg_db *db, const struct mg_param_list *param, const struct bulk *bk,
                        size_t n, bool **keep)
{
    *keep = NULL;
    struct mg_buf sql;
    mg_buf_init(&sql);
    mg_buf_puts(&sql, "SELECT DISTINCT o.transmission_id FROM observations o JOIN observers obs"
                      " ON obs.rowid = o.observer_idx WHERE upper(trim(obs.iata)) IN (''");
    struct mg_list_item items[MG_PARAM_LIST_MAX];
    int n_codes = mg_param_list_split(param->text, MG_LIST_SKIP_ALL, items, MG_PARAM_LIST_MAX);
    for (int k = 0; k < n_codes && k < MG_PARAM_LIST_MAX; k++) {
        char code[MG_PATH_PARAM_MAX];
        snprintf(code, sizeof code, "%.*s", (int)items[k].len, items[k].ptr);
        for (char *c = code; *c; c++)
            *c = (char)toupper((unsigned char)*c);
        char *quoted = sqlite3_mprintf(",%Q", code);
        mg_buf_puts(&sql, quoted ? quoted : "");
        sqlite3_free(quoted);
    }
    mg_buf_puts(&sql, ")");
    mg_buf_putc(&sql, '\0');
    if (sql.failed) {
        mg_buf_free(&sql);
        return SQLITE_NOMEM;
    }
    int rc = SQLITE_OK;
    if (n_codes > 0) {
        char *count_sql =
            sqlite3_mprintf("SELECT count(*) FROM observers WHERE upper(trim(iata)) IN (%s",
                            strstr(sql.data, "IN (") + 4);
        sqlite3_stmt *st = count_sql ? mg_db_prepare(db, count_sql) : NULL;
        sqlite3_free(count_sql);
        bool observers = st && sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int64(st, 0) > 0;
        rc = st ? SQLITE_OK : sqlite3_errcode(db->conn);
        sqlite3_finalize(st);
        st = observers ? mg_db_prepare(db, sql.data) : NULL;
        if (observers && !st)
            rc = sqlite3_errcode(db->conn);
        int64_t *heard = NULL;
        size_t n_heard = 0, cap = 0;
        while (st && (rc = sqlite3_step(st)) == SQLITE_ROW) {
            if (n_heard == cap) {
                cap = cap ? 2 * cap : 1024;
                int64_t *more = realloc(heard, cap * sizeof *more);
                if (!more) {
                    rc = SQLITE_NOMEM;
                    break;
                }
                heard = more;
            }
            heard[n_heard++] = sqlite3_column_int64(st, 0);
        }
        sqlite3_finalize(st);
        if (st && rc == SQLITE_DONE)
            rc = SQLITE_OK;
        if (observers && rc == SQLITE_OK) {
            if (n_heard > 1)
                qsort(heard, n_heard, sizeof *heard, by_id);
            *keep = calloc(n ? n : 1, sizeof **keep);
            if (!*keep)
                rc = SQLITE_NOMEM;
            for (size_t h = 0; *keep && h < bk->n_hits; h++)
                if (n_heard && bsearch(&bk->hits[h].tx, heard, n_heard, sizeof *heard, by_id))
                    (*keep)[bk->hits[h].node] = true;
        }
        free(heard);
    }
    mg_buf_free(&sql);
    return rc;
}

/*
 * The parameters, declared once (params.h). CoreScope's handleBulkHealth, missing / empty /
 * malformed / out of range:
 *   limit   50 / 50 / 50 / below 1: 50, above BULK_MAX: the maximum (queryLimit)
 *   region  none / none / no code left ("ALL", ","): none / more than MG_PARAM_LIST_MAX
 *           codes: 400 (CoreScope takes any number; meshgate bounds a request's work)
 *   area    none / none / a key the configuration lacks, or with no node inside: none
 */
struct bulk_params {
    int64_t limit;
    struct mg_param_list region;
    const char *area;
};
static const struct mg_param bulk_param_list[] = {
    {.name = "limit",
     .kind = MG_PARAM_LIMIT,
     .offset = offsetof(struct bulk_params, limit),
     .def = BULK_DEFAULT,
     .min = 1,
     .max = BULK_MAX,
     .corescope = "queryLimit(r, 50, BulkHealthMax)"},
    {.name = "region",
     .kind = MG_PARAM_LIST,
     .offset = offsetof(struct bulk_params, region),
     .flags = MG_LIST_SKIP_ALL,
     .corescope = "codes trimmed and uppercased; ALL and blanks: none"},
    {.name = "area",
     .kind = MG_PARAM_TEXT,
     .offset = offsetof(struct bulk_params, area),
     .corescope = "a key the configuration's areas lack: no filter"},
};
const struct mg_param_table mg_bulk_health_params =
    MG_PARAM_TABLE(struct bulk_params, bulk_param_list);

enum mg_turn mg_handle_bulk_health(struct mg_env *env, const struct mg_request *req,
                                   struct mg_response *res)
{
    struct bulk_params own;
    const struct bulk_params *p = mg_params_get(&mg_bulk_health_params, req, res, &own);
    if (!p)
        return MG_DONE;
    int64_t limit = p->limit;
    /* An area the configuration does not have, or with no node inside, filters nothing. */
    const struct mg_corescope_area *area =
        p->area ? mg_corescope_area(mg_corescope_current(), p->area) : NULL;
    bool by_region = p->region.text != NULL;
    struct mg_db *db = env->db;
    bool began = mg_node_read_begin(db);
    /* A node the configuration hides is left out before the limit (node_visibility.h). */
    sqlite3_stmt *nodes = mg_db_prepare(db, "SELECT public_key, name, role, lat, lon FROM nodes"
                                            " WHERE NOT meshgate_node_hidden(public_key, name)"
                                            " ORDER BY last_seen DESC LIMIT ?1");
    struct bulk bk;
    memset(&bk, 0, sizeof bk);
    char **pks = NULL;
    bool *in_area = NULL, *in_region = NULL, *keep = NULL;
    size_t n = 0, cap = 0, kept = 0;
    bool area_filters = false;
    int rc = nodes ? SQLITE_OK : SQLITE_ERROR;
    if (nodes) {
        /* With a filter, CoreScope reads up to 10 000 nodes and filters them. */
        sqlite3_bind_int64(nodes, 1, area || by_region ? BULK_FILTERED_MAX : limit);
        while ((rc = sqlite3_step(nodes)) == SQLITE_ROW) {
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                char **more = realloc(pks, cap * sizeof *more);
                bool *more_in = realloc(in_area, cap * sizeof *more_in);
                if (more)
                    pks = more;
                if (more_in)
                    in_area = more_in;
                if (!more || !more_in) {
                    rc = SQLITE_NOMEM;
                    break;
                }
            }
            const char *pk = (const char *)sqlite3_column_text(nodes, 0);
            /* GetNodePubkeysInArea: a node with coordinates, not (0, 0), inside */
            bool located = sqlite3_column_type(nodes, 3) != SQLITE_NULL &&
                           sqlite3_column_type(nodes, 4) != SQLITE_NULL;
            double lat = sqlite3_column_double(nodes, 3), lon = sqlite3_column_double(nodes, 4);
            in_area[n] = area && located && !(lat == 0 && lon == 0) &&
                         mg_corescope_area_holds(area, lat, lon);
            area_filters = area_filters || in_area[n];
            if (!(pks[n] = strdup(pk ? pk : ""))) {
                rc = SQLITE_NOMEM;
                break;
            }
            n++;
        }
        rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
        sqlite3_reset(nodes);
    }
    if (rc == SQLITE_OK)
        rc = bulk_tables(db, &bk, pks, n);
    if (rc == SQLITE_OK)
        rc = bulk_scan(db, &bk);
    if (rc == SQLITE_OK && by_region)
        rc = region_nodes(db, &p->region, &bk, n, &in_region);
    if (rc == SQLITE_OK && (area_filters || in_region)) {
        keep = calloc(n ? n : 1, sizeof *keep);
        if (!keep)
            rc = SQLITE_NOMEM;
        for (size_t i = 0; keep && i < n; i++) {
            keep[i] = (!area_filters || in_area[i]) && (!in_region || in_region[i]);
            /* a region alone is capped at the limit, an area is not */
            if (keep[i] && !area_filters && (int64_t)kept >= limit)
                keep[i] = false;
            kept += keep[i];
        }
    }
    /* no filter applies: the limit most recent, as without one */
    size_t write = keep || n <= (size_t)limit ? n : (size_t)limit;
    if (rc == SQLITE_OK) {
        mg_response_json(res, 200);
        rc = bulk_write(db, &res->body, nodes, write, keep, &bk,
                        req->start_realtime_ns / 1000000000LL);
    }
    if (rc != SQLITE_OK)
        mg_response_db_failure_on(res, "the nodes", rc, db->conn);
    for (size_t i = 0; i < n; i++)
        free(pks[i]);
    free(pks);
    free(in_area);
    free(in_region);
    free(keep);
    bulk_free(&bk);
    sqlite3_finalize(nodes);
    mg_node_read_end(db, began);
    return MG_DONE;
}

/* SPDX-License-Identifier: ISC */
/*
 * GET /api/nodes/{pubkey}/analytics?days=N: a node's activity over the last N days, as
 * CoreScope's GetNodeAnalytics computes it from the packets it files under the node.
 *
 * The packets are those /health reads (node_read.h: its decoded keys, resolved paths and the
 * hops only it can be), by id, each as CoreScope's store holds it: its first_seen, payload
 * type and decoded JSON, and its "best" observation (the most hops, the newest among equal
 * ones) for the observer, SNR, RSSI and path. Those first seen after now - N days (compared
 * as text, as CoreScope does) make:
 *   activityTimeline     one bucket per hour of first_seen (its first 13 bytes), sorted;
 *   snrTrend             every packet with an SNR, in order;
 *   packetTypeBreakdown  packets per payload type;
 *   observerCoverage     per best observer: packets, mean SNR and RSSI, first and last seen;
 *   hopDistribution      packets by hops of the best path ("0" .. "3", "4+");
 *   peerInteractions     the other keys a decoded payload names (sender_key, recipient_key,
 *                        pubkey), the 20 most frequent;
 *   uptimeHeatmap        packets per (UTC day of week, hour);
 *   computedStats        availability, the longest gap between active hours, the SNR's mean,
 *                        deviation and grade, the share of relayed packets, counts;
 * and clockSkew, the node's /clock-skew answer when it has one (all its ADVERTs, not only
 * the window's).
 *
 * A node that is not in the nodes table answers 404 "Not found" (hidden ones too: the
 * router's guard). days: CoreScope's queryInt, else 7, clamped to 1..365.
 *
 * Finding the packets reads every observation and transmission, and the clock skew every
 * ADVERT's observations, so the report is a cold report (cold_report.h): built at most `cap`
 * at a time for the group, shared through the result cache (CoreScope computes it on every
 * request from memory; the cache keeps it MESHGATE_REACH_CACHE_TTL_MS), built once for
 * identical concurrent requests. It stays heavy when warm: the answer lists every packet's
 * SNR and the clock skew's samples, more than a light answer may write for a busy node.
 *
 * Differences from CoreScope: where CoreScope's order is that of a Go map (packet types,
 * heatmap cells) or an unstable sort's among equal counts (observers, peers), meshgate's is
 * fixed: payload type, (day, hour), and first appearance among equal counts.
 */
#include "buf.h"
#include "cold_report.h"
#include "json.h"
#include "node_read.h"
#include "node_row.h"
#include "params.h"
#include "result_cache.h"
#include "router.h"
#include "time_parse.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PEERS_MAX 20
#define KEY_MAX 128 /* longer {pubkey}s name no node: 404 without a build */
/* The cache key: a key past MG_CACHE_KEY_MAX - 1 bytes (a {pubkey} longer than 64) is built
 * without the cache, never cut. */
#define REPORT_KEY_MAX (KEY_MAX + 32)

/* The transmission, and the texts its decoded payload (a JSON object) holds as strings. */
static const char tx_sql[] =
    "SELECT first_seen, payload_type,"
    " CASE WHEN json_type(d, '$.sender_key') = 'text' THEN d ->> '$.sender_key' END,"
    " CASE WHEN json_type(d, '$.sender_name') = 'text' THEN d ->> '$.sender_name' END,"
    " CASE WHEN json_type(d, '$.sender_short_name') = 'text' THEN d ->> '$.sender_short_name' END,"
    " CASE WHEN json_type(d, '$.recipient_key') = 'text' THEN d ->> '$.recipient_key' END,"
    " CASE WHEN json_type(d, '$.recipient_name') = 'text' THEN d ->> '$.recipient_name' END,"
    " CASE WHEN json_type(d, '$.recipient_short_name') = 'text' THEN d ->> "
    "'$.recipient_short_name' END,"
    " CASE WHEN json_type(d, '$.pubkey') = 'text' THEN d ->> '$.pubkey' END,"
    " CASE WHEN json_type(d, '$.name') = 'text' THEN d ->> '$.name' END"
    " FROM (SELECT first_seen, payload_type, CASE WHEN json_valid(decoded_json)"
    " AND json_type(decoded_json) = 'object' THEN decoded_json END AS d"
    " FROM transmissions WHERE id = ?1)";

/* The best observation: the most hops (a path that is not a JSON array has none), newest. */
static const char best_sql[] =
    "SELECT coalesce(obs.id, ''), obs.name, o.snr, o.rssi, CASE WHEN json_valid(o.path_json)"
    " AND json_type(o.path_json) = 'array' THEN json_array_length(o.path_json) ELSE 0 END AS hops"
    " FROM observations o LEFT JOIN observers obs ON obs.rowid = o.observer_idx"
    " WHERE o.transmission_id = ?1 ORDER BY hops DESC, o.timestamp DESC LIMIT 1";

struct packet {
    char *first_seen;
    bool has_type, has_snr, has_rssi;
    int type;
    double snr, rssi;
    char *observer_id; /* "" for none */
    char *observer_name;
    int hops;
    char *peer[3][2]; /* (key, name) of sender, recipient, pubkey; NULL for none */
};

struct analytics_args {
    char pubkey[KEY_MAX + 1];
    int days;
};
_Static_assert(sizeof(struct analytics_args) <= MG_COLD_ARGS_BYTES, "args fit a build");

static char *dup_col(sqlite3_stmt *st, int col)
{
    const char *t = (const char *)sqlite3_column_text(st, col);
    return t ? strdup(t) : NULL;
}

static void packet_free(struct packet *p)
{
    free(p->first_seen);
    free(p->observer_id);
    free(p->observer_name);
    for (int i = 0; i < 3; i++)
        free(p->peer[i][0]), free(p->peer[i][1]);
}

/* The first non-empty of a and b (NULL when neither). */
static const char *first_text(const char *a, const char *b)
{
    return a && *a ? a : b && *b ? b : NULL;
}

/* Reads packet id into p; *keep false when it was first seen before from. An SQLite code. */
static int read_packet(sqlite3_stmt *tx, sqlite3_stmt *best, int64_t id, const char *from,
                       struct packet *p, bool *keep)
{
    memset(p, 0, sizeof *p);
    *keep = false;
    sqlite3_bind_int64(tx, 1, id);
    int rc = sqlite3_step(tx);
    if (rc != SQLITE_ROW) {
        sqlite3_reset(tx);
        return rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
    const char *seen = (const char *)sqlite3_column_text(tx, 0);
    if (!seen || strcmp(seen, from) <= 0) {
        sqlite3_reset(tx);
        return SQLITE_OK;
    }
    *keep = true;
    p->first_seen = strdup(seen);
    p->has_type = sqlite3_column_type(tx, 1) != SQLITE_NULL;
    p->type = sqlite3_column_int(tx, 1);
    for (int i = 0; i < 3; i++) {
        /* key, then the name and its fallback (pubkey has no fallback: column 9 is "name") */
        const char *key = (const char *)sqlite3_column_text(tx, 2 + 3 * i);
        const char *n1 = (const char *)sqlite3_column_text(tx, i < 2 ? 3 + 3 * i : 9);
        const char *n2 = i < 2 ? (const char *)sqlite3_column_text(tx, 4 + 3 * i) : NULL;
        const char *name = first_text(n1, n2);
        if (key && *key) {
            p->peer[i][0] = strdup(key);
            p->peer[i][1] = strdup(name ? name : "");
        }
    }
    sqlite3_reset(tx);
    sqlite3_bind_int64(best, 1, id);
    rc = sqlite3_step(best);
    if (rc == SQLITE_ROW) {
        p->observer_id = dup_col(best, 0);
        p->observer_name = dup_col(best, 1);
        p->has_snr = sqlite3_column_type(best, 2) != SQLITE_NULL;
        p->snr = sqlite3_column_double(best, 2);
        p->has_rssi = sqlite3_column_type(best, 3) != SQLITE_NULL;
        p->rssi = sqlite3_column_double(best, 3);
        p->hops = sqlite3_column_int(best, 4);
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        rc = SQLITE_OK;
    }
    sqlite3_reset(best);
    if (!p->observer_id)
        p->observer_id = strdup("");
    if (!p->first_seen || !p->observer_id)
        rc = SQLITE_NOMEM;
    return rc;
}

/* CoreScope's round: half up, then truncated toward zero. */
static double round1(double v)
{
    return (double)(int64_t)(v * 10 + 0.5) / 10;
}

static void write_optional(struct mg_json *j, const char *key, bool has, double v)
{
    mg_json_key(j, key);
    if (has)
        mg_json_double(j, v);
    else
        mg_json_null(j);
}

static int by_text(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The hour buckets ("YYYY-MM-DDTHH:00:00Z") of the packets, sorted, with their counts. */
struct bucket {
    char text[32];
    int64_t count;
};

static size_t timeline(const struct packet *p, size_t n, struct bucket *out)
{
    char **keys = malloc((n ? n : 1) * sizeof *keys);
    size_t k = 0, m = 0;
    if (!keys)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (strlen(p[i].first_seen) >= 13)
            keys[k++] = p[i].first_seen;
    qsort(keys, k, sizeof *keys, by_text);
    for (size_t i = 0; i < k; i++) {
        if (m && strncmp(out[m - 1].text, keys[i], 13) == 0) {
            out[m - 1].count++;
            continue;
        }
        snprintf(out[m].text, sizeof out[m].text, "%.13s:00:00Z", keys[i]);
        out[m++].count = 1;
    }
    free(keys);
    return m;
}

/* Go's time.Parse(time.RFC3339, s): a 'T' between date and time. */
static bool parse_rfc3339(const char *s, int64_t *ms)
{
    struct mg_rfc3339_shape shape;
    return s && mg_rfc3339_parse_shaped(s, strlen(s), ms, &shape) && shape.separator == 'T';
}

struct observer {
    const char *id, *name, *first, *last;
    int64_t count, snr_n, rssi_n;
    double snr_sum, rssi_sum;
    size_t order;
};

static int by_count(const void *a, const void *b)
{
    const struct observer *x = a, *y = b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

static bool write_observers(struct mg_json *j, const struct packet *p, size_t n, size_t *unique)
{
    struct observer *o = calloc(n ? n : 1, sizeof *o);
    if (!o)
        return false;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (!*p[i].observer_id)
            continue;
        size_t r = 0;
        while (r < m && strcmp(o[r].id, p[i].observer_id) != 0)
            r++;
        if (r == m)
            o[m++] = (struct observer){.id = p[i].observer_id,
                                       .name = p[i].observer_name ? p[i].observer_name : "",
                                       .first = p[i].first_seen,
                                       .last = p[i].first_seen,
                                       .order = r};
        o[r].count++;
        if (p[i].has_snr)
            o[r].snr_sum += p[i].snr, o[r].snr_n++;
        if (p[i].has_rssi)
            o[r].rssi_sum += p[i].rssi, o[r].rssi_n++;
        if (strcmp(p[i].first_seen, o[r].first) < 0)
            o[r].first = p[i].first_seen;
        if (strcmp(p[i].first_seen, o[r].last) > 0)
            o[r].last = p[i].first_seen;
    }
    qsort(o, m, sizeof *o, by_count);
    mg_json_key(j, "observerCoverage");
    mg_json_array_begin(j);
    for (size_t r = 0; r < m; r++) {
        mg_json_object_begin(j);
        mg_json_kv_string(j, "observer_id", o[r].id);
        mg_json_kv_string(j, "observer_name", o[r].name);
        mg_json_kv_int(j, "packetCount", o[r].count);
        write_optional(j, "avgSnr", o[r].snr_n > 0, o[r].snr_sum / (double)o[r].snr_n);
        write_optional(j, "avgRssi", o[r].rssi_n > 0, o[r].rssi_sum / (double)o[r].rssi_n);
        mg_json_kv_string(j, "firstSeen", o[r].first);
        mg_json_kv_string(j, "lastSeen", o[r].last);
        mg_json_object_end(j);
    }
    mg_json_array_end(j);
    free(o);
    *unique = m;
    return true;
}

struct peer {
    const char *key, *name, *last;
    int64_t count;
    size_t order;
};

static int by_messages(const void *a, const void *b)
{
    const struct peer *x = a, *y = b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* The other keys the packets' payloads name; names cut to 12 bytes of the key when empty. */
static bool write_peers(struct mg_json *j, struct packet *p, size_t n, const char *pubkey,
                        size_t *unique)
{
    struct peer *pe = calloc(n ? 3 * n : 1, sizeof *pe);
    if (!pe)
        return false;
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        for (int c = 0; c < 3; c++) {
            char *key = p[i].peer[c][0], *name = p[i].peer[c][1];
            if (!key || strcmp(key, pubkey) == 0)
                continue;
            size_t r = 0;
            while (r < m && strcmp(pe[r].key, key) != 0)
                r++;
            if (r == m) {
                if (!*name && strlen(key) >= 12) {
                    free(name);
                    name = p[i].peer[c][1] = strndup(key, 12);
                }
                if (!name)
                    return free(pe), false;
                pe[m++] =
                    (struct peer){.key = key, .name = name, .last = p[i].first_seen, .order = r};
            }
            pe[r].count++;
            if (strcmp(p[i].first_seen, pe[r].last) > 0)
                pe[r].last = p[i].first_seen;
        }
    qsort(pe, m, sizeof *pe, by_messages);
    if (m > PEERS_MAX)
        m = PEERS_MAX;
    mg_json_key(j, "peerInteractions");
    mg_json_array_begin(j);
    for (size_t r = 0; r < m; r++) {
        mg_json_object_begin(j);
        mg_json_kv_string(j, "peer_key", pe[r].key);
        mg_json_kv_string(j, "peer_name", pe[r].name);
        mg_json_kv_int(j, "messageCount", pe[r].count);
        mg_json_kv_string(j, "lastContact", pe[r].last);
        mg_json_object_end(j);
    }
    mg_json_array_end(j);
    free(pe);
    *unique = m;
    return true;
}

static void write_types(struct mg_json *j, const struct packet *p, size_t n)
{
    /* payload types are 0..15 on the air; anything else is counted apart, in order */
    int64_t small[256] = {0};
    mg_json_key(j, "packetTypeBreakdown");
    mg_json_array_begin(j);
    bool other = false;
    for (size_t i = 0; i < n; i++)
        if (p[i].has_type && p[i].type >= 0 && p[i].type < 256)
            small[p[i].type]++;
        else if (p[i].has_type)
            other = true;
    for (int t = 0; t < 256; t++)
        if (small[t]) {
            mg_json_object_begin(j);
            mg_json_kv_int(j, "payload_type", t);
            mg_json_kv_int(j, "count", small[t]);
            mg_json_object_end(j);
        }
    for (size_t i = 0; other && i < n; i++) {
        if (!p[i].has_type || (p[i].type >= 0 && p[i].type < 256))
            continue;
        bool earlier = false;
        int64_t count = 0;
        for (size_t k = 0; k < n; k++)
            if (p[k].has_type && p[k].type == p[i].type)
                earlier |= k < i, count++;
        if (earlier)
            continue;
        mg_json_object_begin(j);
        mg_json_kv_int(j, "payload_type", p[i].type);
        mg_json_kv_int(j, "count", count);
        mg_json_object_end(j);
    }
    mg_json_array_end(j);
}

static void write_heatmap(struct mg_json *j, const struct packet *p, size_t n)
{
    int64_t cells[7][24] = {{0}};
    for (size_t i = 0; i < n; i++) {
        int64_t ms;
        if (!mg_node_parse_time_ms(p[i].first_seen, &ms))
            continue;
        time_t t = (time_t)(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
        struct tm tm;
        gmtime_r(&t, &tm);
        cells[tm.tm_wday][tm.tm_hour]++;
    }
    mg_json_key(j, "uptimeHeatmap");
    mg_json_array_begin(j);
    for (int d = 0; d < 7; d++)
        for (int h = 0; h < 24; h++)
            if (cells[d][h]) {
                mg_json_object_begin(j);
                mg_json_kv_int(j, "dayOfWeek", d);
                mg_json_kv_int(j, "hour", h);
                mg_json_kv_int(j, "count", cells[d][h]);
                mg_json_object_end(j);
            }
    mg_json_array_end(j);
}

static const char *grade_of(double mean, double dev)
{
    if (mean > 15)
        return dev < 2 ? "A" : "A-";
    if (mean > 12 && dev < 3)
        return "B+";
    return mean > 8 ? "B" : mean > 3 ? "C" : "D";
}

static void format_time(int64_t unix_s, char *out, size_t cap)
{
    time_t t = (time_t)unix_s;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* The report of the kept packets (node's row current in node); false when out of memory. */
static bool write_report(struct mg_json *j, struct mg_db *db, sqlite3_stmt *node,
                         const struct analytics_args *a, struct packet *p, size_t n, int64_t now_s,
                         const struct mg_buf *skew)
{
    char from[32], to[32];
    format_time(now_s - (int64_t)a->days * 86400, from, sizeof from);
    format_time(now_s, to, sizeof to);
    struct bucket *buckets = calloc(n ? n : 1, sizeof *buckets);
    if (!buckets)
        return false;
    size_t n_buckets = timeline(p, n, buckets);
    mg_json_object_begin(j);
    mg_json_key(j, "node");
    mg_nodes_write_node(j, node, &db->schema, NULL);
    mg_json_key(j, "timeRange");
    mg_json_object_begin(j);
    mg_json_kv_string(j, "from", from);
    mg_json_kv_string(j, "to", to);
    mg_json_kv_int(j, "days", a->days);
    mg_json_object_end(j);
    mg_json_key(j, "activityTimeline");
    mg_json_array_begin(j);
    for (size_t i = 0; i < n_buckets; i++) {
        mg_json_object_begin(j);
        mg_json_kv_int(j, "count", buckets[i].count);
        mg_json_kv_string(j, "bucket", buckets[i].text);
        mg_json_object_end(j);
    }
    mg_json_array_end(j);
    /* SNR: the trend, and its mean and (population) deviation */
    double snr_sum = 0, snr_sq = 0;
    int64_t snr_n = 0;
    mg_json_key(j, "snrTrend");
    mg_json_array_begin(j);
    for (size_t i = 0; i < n; i++) {
        if (!p[i].has_snr)
            continue;
        snr_sum += p[i].snr, snr_n++;
        mg_json_object_begin(j);
        mg_json_kv_string(j, "timestamp", p[i].first_seen);
        mg_json_kv_double(j, "snr", p[i].snr);
        write_optional(j, "rssi", p[i].has_rssi, p[i].rssi);
        mg_json_kv_string(j, "observer_id", *p[i].observer_id ? p[i].observer_id : NULL);
        mg_json_kv_string(j, "observer_name",
                          p[i].observer_name && *p[i].observer_name ? p[i].observer_name : NULL);
        mg_json_object_end(j);
    }
    mg_json_array_end(j);
    double snr_mean = snr_n ? snr_sum / (double)snr_n : 0, snr_dev = 0;
    for (size_t i = 0; snr_n > 1 && i < n; i++)
        if (p[i].has_snr)
            snr_sq += (p[i].snr - snr_mean) * (p[i].snr - snr_mean);
    if (snr_n > 1)
        snr_dev = sqrt(snr_sq / (double)snr_n);
    write_types(j, p, n);
    size_t observers = 0, peers = 0;
    bool ok = write_observers(j, p, n, &observers);
    /* hops of the best path */
    int64_t hops[5] = {0}, with_path = 0, relayed = 0;
    for (size_t i = 0; i < n; i++) {
        hops[p[i].hops >= 4 ? 4 : p[i].hops]++;
        with_path += p[i].hops > 0;
        relayed += p[i].hops > 1;
    }
    static const char *const hop_names[5] = {"0", "1", "2", "3", "4+"};
    mg_json_key(j, "hopDistribution");
    mg_json_array_begin(j);
    for (int h = 0; h < 5; h++)
        if (hops[h]) {
            mg_json_object_begin(j);
            mg_json_kv_string(j, "hops", hop_names[h]);
            mg_json_kv_int(j, "count", hops[h]);
            mg_json_object_end(j);
        }
    mg_json_array_end(j);
    ok = ok && write_peers(j, p, n, a->pubkey, &peers);
    write_heatmap(j, p, n);
    /* the longest gap between consecutive active hours */
    int64_t silence_ms = 0;
    const char *silence_start = NULL;
    for (size_t i = 1; i < n_buckets; i++) {
        int64_t t1, t2;
        if (parse_rfc3339(buckets[i - 1].text, &t1) && parse_rfc3339(buckets[i].text, &t2) &&
            t2 - t1 > silence_ms) {
            silence_ms = t2 - t1;
            silence_start = buckets[i - 1].text;
        }
    }
    double availability = round1((double)n_buckets * 100.0 / ((double)a->days * 24));
    mg_json_key(j, "computedStats");
    mg_json_object_begin(j);
    mg_json_kv_double(j, "availabilityPct", availability > 100 ? 100 : availability);
    mg_json_kv_int(j, "longestSilenceMs", silence_ms);
    mg_json_kv_string(j, "longestSilenceStart", silence_start);
    mg_json_kv_string(j, "signalGrade", grade_of(snr_mean, snr_dev));
    mg_json_kv_double(j, "snrMean", round1(snr_mean));
    mg_json_kv_double(j, "snrStdDev", round1(snr_dev));
    mg_json_kv_double(j, "relayPct",
                      with_path ? round1((double)relayed * 100.0 / (double)with_path) : 0);
    mg_json_kv_int(j, "totalPackets", (int64_t)n);
    mg_json_kv_int(j, "uniqueObservers", (int64_t)observers);
    mg_json_kv_int(j, "uniquePeers", (int64_t)peers);
    mg_json_kv_double(j, "avgPacketsPerDay", round1((double)n / (double)a->days));
    mg_json_object_end(j);
    if (skew->len > 1) { /* the clock-skew body without its "\n" */
        mg_json_key(j, "clockSkew");
        mg_json_raw(j, skew->data, skew->len - 1);
    }
    mg_json_object_end(j);
    free(buckets);
    return ok;
}

/* The node's packets of the window into *out, *n; an SQLite code. */
static int read_packets(struct mg_db *db, const struct analytics_args *a, int64_t now_s,
                        struct packet **out, size_t *n)
{
    int64_t *ids = NULL;
    size_t n_ids = 0;
    *out = NULL;
    *n = 0;
    int rc = mg_node_packet_ids(db, a->pubkey, &ids, &n_ids);
    sqlite3_stmt *tx = rc == SQLITE_OK ? mg_db_prepare(db, tx_sql) : NULL;
    sqlite3_stmt *best = tx ? mg_db_prepare(db, best_sql) : NULL;
    if (rc == SQLITE_OK && !best)
        rc = SQLITE_ERROR;
    if (rc == SQLITE_OK && !(*out = calloc(n_ids ? n_ids : 1, sizeof **out)))
        rc = SQLITE_NOMEM;
    char from[32];
    format_time(now_s - (int64_t)a->days * 86400, from, sizeof from);
    for (size_t i = 0; rc == SQLITE_OK && i < n_ids; i++) {
        bool keep;
        rc = read_packet(tx, best, ids[i], from, &(*out)[*n], &keep);
        if (keep)
            (*n)++;
        else
            packet_free(&(*out)[*n]);
    }
    sqlite3_finalize(tx);
    sqlite3_finalize(best);
    free(ids);
    return rc;
}

static int node_statement(struct mg_db *db, const char *pubkey, sqlite3_stmt **node, bool *found)
{
    struct mg_buf sql;
    mg_buf_init(&sql);
    mg_buf_puts(&sql, "SELECT ");
    mg_nodes_select_columns(&db->schema, &sql);
    mg_buf_puts(&sql, " FROM nodes WHERE public_key = ?1");
    *node = sql.failed ? NULL : mg_db_prepare(db, mg_buf_cstr(&sql));
    mg_buf_free(&sql);
    if (!*node)
        return SQLITE_ERROR;
    sqlite3_bind_text(*node, 1, pubkey, -1, SQLITE_STATIC);
    int rc = sqlite3_step(*node);
    *found = rc == SQLITE_ROW;
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static void build(struct mg_cold_build *b, struct mg_db *db)
{
    const struct analytics_args *a = (const struct analytics_args *)b->args;
    bool began = mg_node_read_begin(db);
    sqlite3_stmt *node = NULL;
    bool found = false, none = true;
    struct packet *p = NULL;
    size_t n = 0;
    struct mg_buf skew;
    mg_buf_init(&skew);
    int rc = node_statement(db, a->pubkey, &node, &found);
    if (rc == SQLITE_OK && found)
        rc = read_packets(db, a, b->now_unix, &p, &n);
    if (rc == SQLITE_OK && found)
        rc = mg_node_skew_body(db, a->pubkey, &skew, &none);
    if (rc == SQLITE_OK && none)
        mg_buf_reset(&skew);
    mg_cold_result(b, rc, "the node's packets");
    if (rc == SQLITE_OK && !found) {
        b->result = MG_COLD_NOT_FOUND;
    } else if (rc == SQLITE_OK) {
        struct mg_json j;
        mg_json_init(&j, &b->body);
        if (!write_report(&j, db, node, a, p, n, b->now_unix, &skew))
            mg_cold_result(b, SQLITE_NOMEM, "the node's packets");
        mg_buf_putc(&b->body, '\n');
    }
    for (size_t i = 0; i < n; i++)
        packet_free(&p[i]);
    free(p);
    mg_buf_free(&skew);
    sqlite3_finalize(node);
    mg_node_read_end(db, began);
}

static const struct mg_cold_report analytics_report = {
    .name = "node analytics",
    .not_found = "Not found",
    .bad_request = "bad request",
    .build = build,
};

/* CoreScope's handleNodeAnalytics: days by queryInt (absent, empty or not an integer: 7),
 * then clamped to 1..365. */
struct node_analytics_params {
    int64_t days;
};
static const struct mg_param node_analytics_param_list[] = {
    {.name = "days",
     .kind = MG_PARAM_INT,
     .offset = offsetof(struct node_analytics_params, days),
     .def = 7,
     .min = 1,
     .max = 365,
     .corescope = "queryInt: Atoi, else 7; then clamped to 1..365"},
};
const struct mg_param_table mg_node_analytics_params =
    MG_PARAM_TABLE(struct node_analytics_params, node_analytics_param_list);

/* The report's arguments and key; false for a key too long to name a node. */
static bool read_args(const struct mg_request *req, struct analytics_args *a,
                      char key[REPORT_KEY_MAX])
{
    memset(a, 0, sizeof *a);
    if (strlen(req->path_param) > KEY_MAX)
        return false;
    snprintf(a->pubkey, sizeof a->pubkey, "%s", req->path_param);
    struct node_analytics_params own;
    const struct node_analytics_params *p =
        mg_params_get(&mg_node_analytics_params, req, NULL, &own);
    a->days = p ? (int)p->days : 7;
    snprintf(key, REPORT_KEY_MAX, "analytics|%s|%d", a->pubkey, a->days);
    return true;
}

enum mg_turn mg_handle_node_analytics(struct mg_env *env, const struct mg_request *req,
                                      struct mg_response *res)
{
    struct analytics_args a;
    char key[REPORT_KEY_MAX];
    if (!read_args(req, &a, key)) {
        mg_response_error(res, 404, "Not found");
        return MG_DONE;
    }
    return mg_cold_report_serve(env, req, res, &analytics_report, key, &a, sizeof a);
}

/* SPDX-License-Identifier: ISC */
#include "perf_mem.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define STRING_OVERHEAD 16 /* what the contract counts for each stored string */
#define MB (1024.0 * 1024.0)

const char mg_perf_mem_note[] =
    "Estimated from one read of every transmission and observation in the database: strings "
    "count their length plus 16 bytes, and each transmission is costed with CoreScope's "
    "packet-store model (384 + raw_hex + hash + decoded_json + path_json + 5x48 + 200 + "
    "hops x 50 + C(hops,2) x 40 bytes); meshgate itself keeps no packet store.";

int64_t mg_perf_mem_tx_estimate(int64_t raw_hex_len, int64_t hash_len, int64_t decoded_json_len,
                                int64_t path_json_len, int64_t hops)
{
    return 384 + raw_hex_len + hash_len + decoded_json_len + path_json_len + 5 * 48 + 200 +
           hops * 50 + hops * (hops - 1) / 2 * 40;
}

/* Hops of a stored path: its quoted elements. */
static int64_t count_hops(const unsigned char *path, int len)
{
    int quotes = 0;
    for (int i = 0; i < len; i++)
        quotes += path[i] == '"';
    return quotes / 2;
}

struct tx_row {
    int64_t id;
    int64_t route_type;
    int64_t raw_hex_len, hash_len, decoded_len;
    int64_t best_path_len, best_hops; /* the observation with the most hops */
};

static void finish_tx(struct mg_perf_mem *m, const struct tx_row *t)
{
    int64_t est = mg_perf_mem_tx_estimate(t->raw_hex_len, t->hash_len, t->decoded_len,
                                          t->best_path_len, t->best_hops);
    m->total_tx_estimated_bytes += est;
    m->tx_path_json_bytes += t->best_path_len + STRING_OVERHEAD;
    if (t->route_type == 0 || t->route_type == 1) {
        m->flood_tx++;
        m->flood_tx_estimated_bytes += est;
    }
}

int mg_perf_mem_walk(struct mg_db *db, struct mg_perf_mem *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (errlen)
        err[0] = '\0';
    /* Both tables in one snapshot: a read transaction. */
    if (sqlite3_exec(db->conn, "BEGIN", NULL, NULL, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "cannot begin a read transaction: %s", sqlite3_errmsg(db->conn));
        return -1;
    }
    /* A merge of two ordered scans: transmissions by id, observations by transmission_id
     * (its index), so every row is read once. */
    sqlite3_stmt *tx = mg_db_prepare(
        db, "SELECT id, route_type, length(raw_hex), length(hash), length(decoded_json) "
            "FROM transmissions ORDER BY id");
    char obs_sql[256];
    snprintf(obs_sql, sizeof obs_sql,
             "SELECT transmission_id, path_json, length(direction), %s, %s "
             "FROM observations ORDER BY transmission_id",
             db->schema.obs_resolved_path ? "length(resolved_path)" : "NULL",
             db->schema.obs_raw_hex ? "length(raw_hex)" : "0");
    sqlite3_stmt *obs = mg_db_prepare(db, obs_sql);
    int rc = 0;
    if (!tx || !obs) {
        snprintf(err, errlen, "cannot prepare the walk: %s", sqlite3_errmsg(db->conn));
        rc = -1;
    }
    bool obs_left = false;
    if (rc == 0) {
        int step = sqlite3_step(obs);
        obs_left = step == SQLITE_ROW;
        if (step != SQLITE_ROW && step != SQLITE_DONE)
            rc = -1;
    }
    while (rc == 0) {
        int step = sqlite3_step(tx);
        if (step == SQLITE_DONE)
            break;
        if (step != SQLITE_ROW) {
            rc = -1;
            break;
        }
        struct tx_row t = {
            .id = sqlite3_column_int64(tx, 0),
            .route_type =
                sqlite3_column_type(tx, 1) == SQLITE_NULL ? -1 : sqlite3_column_int64(tx, 1),
            .raw_hex_len = sqlite3_column_int64(tx, 2),
            .hash_len = sqlite3_column_int64(tx, 3),
            .decoded_len = sqlite3_column_int64(tx, 4),
        };
        out->total_tx++;
        out->tx_raw_hex_bytes += t.raw_hex_len + STRING_OVERHEAD;
        out->tx_decoded_json_bytes += t.decoded_len + STRING_OVERHEAD;
        /* Observations of transmissions that no longer exist are counted on their own. */
        while (obs_left && sqlite3_column_int64(obs, 0) <= t.id) {
            const unsigned char *path = sqlite3_column_text(obs, 1);
            int path_len = sqlite3_column_bytes(obs, 1);
            out->observations++;
            out->obs_path_json_bytes += path_len + STRING_OVERHEAD;
            out->obs_strings_bytes += sqlite3_column_int64(obs, 2) + sqlite3_column_int64(obs, 3) +
                                      sqlite3_column_int64(obs, 4) + 3 * STRING_OVERHEAD;
            if (sqlite3_column_int64(obs, 0) == t.id) {
                int64_t hops = path ? count_hops(path, path_len) : 0;
                if (hops > t.best_hops || t.best_path_len == 0) {
                    t.best_hops = hops;
                    t.best_path_len = path_len;
                }
            }
            int s = sqlite3_step(obs);
            obs_left = s == SQLITE_ROW;
            if (s != SQLITE_ROW && s != SQLITE_DONE)
                rc = -1;
        }
        finish_tx(out, &t);
    }
    while (rc == 0 && obs_left) {
        out->observations++;
        out->obs_path_json_bytes += sqlite3_column_bytes(obs, 1) + STRING_OVERHEAD;
        out->obs_strings_bytes += sqlite3_column_int64(obs, 2) + sqlite3_column_int64(obs, 3) +
                                  sqlite3_column_int64(obs, 4) + 3 * STRING_OVERHEAD;
        int s = sqlite3_step(obs);
        obs_left = s == SQLITE_ROW;
        if (s != SQLITE_ROW && s != SQLITE_DONE)
            rc = -1;
    }
    if (rc != 0 && err[0] == '\0')
        snprintf(err, errlen, "the walk failed: %s", sqlite3_errmsg(db->conn));
    sqlite3_finalize(tx);
    sqlite3_finalize(obs);
    sqlite3_exec(db->conn, "COMMIT", NULL, NULL, NULL);
    return rc;
}

void mg_perf_mem_json(struct mg_json *j, const struct mg_perf_mem *m)
{
    double share = m->total_tx ? (double)m->flood_tx / (double)m->total_tx : 0.0;
    double per_tx = m->total_tx ? (double)m->observations / (double)m->total_tx : 0.0;
    mg_json_object_begin(j); /* a fixed record: CoreScope's order */
    mg_json_kv_int(j, "totalTx", m->total_tx);
    mg_json_kv_int(j, "floodTx", m->flood_tx);
    /* As CoreScope computes it: math.Round(ratio*1000)/10. */
    mg_json_kv_double(j, "floodTxSharePct", round(share * 1000.0) / 10.0);
    mg_json_kv_int(j, "observations", m->observations);
    mg_json_key(j, "obsPerTx");
    mg_json_double_rounded(j, per_tx, 1);
    mg_json_key(j, "txRawHexMB");
    mg_json_double_rounded(j, (double)m->tx_raw_hex_bytes / MB, 2);
    mg_json_key(j, "txDecodedJsonMB");
    mg_json_double_rounded(j, (double)m->tx_decoded_json_bytes / MB, 2);
    mg_json_key(j, "txPathJsonMB");
    mg_json_double_rounded(j, (double)m->tx_path_json_bytes / MB, 2);
    mg_json_key(j, "obsPathJsonMB");
    mg_json_double_rounded(j, (double)m->obs_path_json_bytes / MB, 2);
    mg_json_key(j, "obsStringsMB");
    mg_json_double_rounded(j, (double)m->obs_strings_bytes / MB, 2);
    mg_json_key(j, "floodTxEstimatedMB");
    mg_json_double_rounded(j, (double)m->flood_tx_estimated_bytes / MB, 2);
    mg_json_key(j, "totalTxEstimatedMB");
    mg_json_double_rounded(j, (double)m->total_tx_estimated_bytes / MB, 2);
    mg_json_object_end(j);
}

/* SPDX-License-Identifier: ISC */
/*
 * GET /api/audio-lab/buckets: the Audio Lab's sample packets, as CoreScope's server picks them.
 * Every transmission with raw bytes goes into the bucket of its decoded type (decoded_json's
 * "type" when a non-empty string; "UNKNOWN", or a type "UNKNOWN", becomes the payload type's
 * name when it has one); each bucket, sorted by the length of the raw text (equal lengths by
 * id, where CoreScope's order is Go's unstable sort), gives at most 8 packets spread evenly over
 * it (the i-th of n at i * n / 8). Each with its hash, raw text, decoded JSON (as stored), its
 * observations (one per observer and path, at least 1), its payload type (0 when none), the path
 * and observer of its observation with the most hops (the newest of them) and its first_seen;
 * empty text is null. Buckets by name.
 *
 * CoreScope computes it per request from its store, which takes new rows on its poll; a
 * pass over every transmission is a cold report here (cold_report.h), keyed by the group's row
 * counts (db_counts.h, at most 10 s behind) and the minute, light when warm.
 */
#include "buf.h"
#include "cold_report.h"
#include "db_counts.h"
#include "json.h"
#include "router.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define AUDIO_LAB_CACHE_S 60
#define AUDIO_LAB_PICKS 8

/* The bucket of each transmission with raw bytes, its place in the bucket by raw length (r)
 * and the bucket's size (n); only the picked places. */
#define AUDIO_LAB_SQL                                                                              \
    "WITH named AS (SELECT t.id, t.hash, t.raw_hex, t.decoded_json, t.payload_type,"               \
    " t.first_seen, CASE WHEN json_valid(t.decoded_json) AND"                                      \
    " json_type(t.decoded_json, '$.type') = 'text' AND t.decoded_json ->> '$.type' <> ''"          \
    " THEN t.decoded_json ->> '$.type' ELSE 'UNKNOWN' END AS nm FROM transmissions t"              \
    " WHERE coalesce(t.raw_hex, '') <> ''),"                                                       \
    " typed AS (SELECT *, CASE WHEN nm = 'UNKNOWN' AND payload_type IN (0, 1, 2, 3, 4, 5, 6, 7,"   \
    " 8, 9, 10, 11, 15) THEN json_extract('[\"REQ\",\"RESPONSE\",\"TXT_MSG\",\"ACK\",\"ADVERT\","  \
    "\"GRP_TXT\",\"GRP_DATA\",\"ANON_REQ\",\"PATH\",\"TRACE\",\"MULTIPART\",\"CONTROL\",null,"     \
    "null,null,\"RAW_CUSTOM\"]', '$[' || payload_type || ']') ELSE nm END AS bucket FROM named),"  \
    " ranked AS (SELECT *, row_number() OVER (PARTITION BY bucket ORDER BY"                        \
    " length(raw_hex), id) - 1 AS r, count(*) OVER (PARTITION BY bucket) AS n FROM typed)"         \
    " SELECT bucket, id, hash, raw_hex, decoded_json, payload_type, first_seen FROM ranked"        \
    " WHERE n <= 8 OR ((r * 8 + n - 1) / n) * n / 8 = r ORDER BY bucket, r"

/* Its observations, newest first, one per observer and path (the newest): observer, path,
 * hops. */
#define AUDIO_LAB_OBS_SQL                                                                          \
    "SELECT oid, pj, hops FROM (SELECT coalesce(ob.id, '') AS oid, coalesce(o.path_json, '')"      \
    " AS pj, CASE WHEN json_valid(o.path_json) THEN json_array_length(o.path_json) ELSE 0 END"     \
    " AS hops, o.timestamp AS ts, o.id AS id, row_number() OVER (PARTITION BY coalesce(ob.id,"     \
    " ''), coalesce(o.path_json, '') ORDER BY o.timestamp DESC, o.id) AS copy"                     \
    " FROM observations o LEFT JOIN observers ob ON ob.rowid = o.observer_idx"                     \
    " WHERE o.transmission_id = ?) WHERE copy = 1 ORDER BY ts DESC, id"

static void kv_text_or_null(struct mg_json *j, const char *key, const char *s)
{
    mg_json_kv_string(j, key, s && s[0] ? s : NULL);
}

/* One packet: its observations' count (one per observer and path) and the best one. */
static int write_packet(struct mg_json *j, sqlite3_stmt *tx, sqlite3_stmt *obs)
{
    sqlite3_reset(obs);
    sqlite3_bind_int64(obs, 1, sqlite3_column_int64(tx, 1));
    struct mg_buf best_observer, best_path;
    mg_buf_init(&best_observer), mg_buf_init(&best_path);
    int64_t count = 0, best_hops = -1;
    int rc;
    while ((rc = sqlite3_step(obs)) == SQLITE_ROW) {
        int64_t hops = sqlite3_column_int64(obs, 2);
        count++;
        if (hops > best_hops) { /* the first of the most hops */
            best_hops = hops;
            best_observer.len = best_path.len = 0;
            mg_buf_puts(&best_observer, (const char *)sqlite3_column_text(obs, 0));
            mg_buf_puts(&best_path, (const char *)sqlite3_column_text(obs, 1));
        }
    }
    bool failed = best_observer.failed || best_path.failed;
    mg_json_object_begin(j);
    kv_text_or_null(j, "hash", (const char *)sqlite3_column_text(tx, 2));
    kv_text_or_null(j, "raw_hex", (const char *)sqlite3_column_text(tx, 3));
    kv_text_or_null(j, "decoded_json", (const char *)sqlite3_column_text(tx, 4));
    mg_json_kv_int(j, "observation_count", count > 1 ? count : 1);
    mg_json_kv_int(j, "payload_type", sqlite3_column_int64(tx, 5));
    kv_text_or_null(j, "path_json", best_hops >= 0 ? mg_buf_cstr(&best_path) : NULL);
    kv_text_or_null(j, "observer_id", best_hops >= 0 ? mg_buf_cstr(&best_observer) : NULL);
    kv_text_or_null(j, "timestamp", (const char *)sqlite3_column_text(tx, 6));
    mg_json_object_end(j);
    mg_buf_free(&best_observer), mg_buf_free(&best_path);
    if (failed)
        return SQLITE_NOMEM;
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int audio_lab_body(struct mg_db *db, struct mg_buf *body)
{
    sqlite3_stmt *tx = mg_db_prepare(db, AUDIO_LAB_SQL);
    sqlite3_stmt *obs = tx ? mg_db_prepare(db, AUDIO_LAB_OBS_SQL) : NULL;
    if (!tx || !obs) {
        int rc = sqlite3_errcode(db->conn);
        sqlite3_finalize(tx);
        return rc ? rc : SQLITE_NOMEM;
    }
    struct mg_json j;
    mg_json_init(&j, body);
    mg_json_object_begin(&j);
    mg_json_key(&j, "buckets");
    mg_json_object_begin(&j);
    struct mg_buf bucket;
    mg_buf_init(&bucket);
    bool open = false;
    int rc;
    while ((rc = sqlite3_step(tx)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(tx, 0);
        name = name ? name : "";
        if (!open || strcmp(name, mg_buf_cstr(&bucket)) != 0) {
            if (open)
                mg_json_array_end(&j);
            bucket.len = 0;
            mg_buf_puts(&bucket, name);
            mg_json_key(&j, name);
            mg_json_array_begin(&j);
            open = true;
        }
        if ((rc = write_packet(&j, tx, obs)) != SQLITE_OK)
            break;
    }
    if (open)
        mg_json_array_end(&j);
    mg_json_object_end(&j);
    mg_json_object_end(&j);
    mg_buf_putc(body, '\n');
    sqlite3_finalize(tx);
    sqlite3_finalize(obs);
    bool failed = bucket.failed || body->failed;
    mg_buf_free(&bucket);
    if (failed)
        return SQLITE_NOMEM;
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static void audio_lab_build(struct mg_cold_build *b, struct mg_db *db)
{
    bool in_transaction = sqlite3_exec(db->conn, "BEGIN", NULL, NULL, NULL) == SQLITE_OK;
    int rc = audio_lab_body(db, &b->body);
    if (in_transaction)
        sqlite3_exec(db->conn, "COMMIT", NULL, NULL, NULL);
    mg_cold_result(b, rc, "the transmissions");
}

static const struct mg_cold_report audio_lab_report = {
    .name = "audio lab buckets",
    .not_found = "Not found",
    .bad_request = "bad request",
    .build = audio_lab_build,
};

/* The key: the group's row counts (a new row makes a new answer) and the minute. */
static void audio_lab_key(struct mg_env *env, char *key, size_t cap)
{
    struct mg_db_counts c;
    memset(&c, 0, sizeof c);
    if (!mg_db_counts_current(env, &c))
        c.transmissions = c.observations = -1;
    snprintf(key, cap, "audio-lab|%lld|%lld|@%d:%lld", (long long)c.transmissions,
             (long long)c.observations, AUDIO_LAB_CACHE_S,
             (long long)(time(NULL) / AUDIO_LAB_CACHE_S));
}

bool mg_audio_lab_is_heavy(struct mg_env *env, const struct mg_request *req)
{
    (void)req;
    char key[128];
    audio_lab_key(env, key, sizeof key);
    return mg_cold_report_is_heavy(env, key);
}

enum mg_turn mg_handle_audio_lab(struct mg_env *env, const struct mg_request *req,
                                 struct mg_response *res)
{
    char key[128];
    audio_lab_key(env, key, sizeof key);
    unsigned char none = 0;
    return mg_cold_report_serve(env, req, res, &audio_lab_report, key, &none, sizeof none);
}

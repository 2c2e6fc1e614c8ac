/* SPDX-License-Identifier: ISC */
/*
 * The channels of group text (GRP_TXT, payload_type 5), as CoreScope's server answers them
 * from its database. Nothing is decrypted here: a message's text, sender and channel are what
 * the ingestor stored in transmissions.decoded_json and channel_hash (the ingestor decrypts
 * the channels it has keys for; the others are stored as "enc_" + the channel hash byte).
 *
 *   GET /api/channels[?region=A,B][&includeEncrypted=true]
 *       One entry per decrypted channel (channel_hash not starting with "enc_"), the most
 *       recently active first: its message count, last activity (newest first_seen) and the
 *       text and sender of its newest message. With a region, only messages some observer of
 *       those IATA codes heard, and the count is of those hearings (CoreScope's count).
 *       includeEncrypted=true appends the undecryptable channels, named "Encrypted (0xNN)".
 *   GET /api/channels/{hash}/messages[?limit=100&offset=0&region=...]
 *       A page of the channel's messages (limit 1..500, default 100; a bad value is the
 *       default), chosen newest sighting first and listed oldest first, with the total.
 *       Each message: its first observation's observer, SNR and hop count, the number of
 *       observations (repeats), and "sender: text" split as CoreScope splits it.
 *   GET /api/known-channels
 *       CoreScope's community catalogue of channels is fetched from the Internet by its
 *       server; a read-only server has none, so this answers what CoreScope answers while it
 *       has none: an empty catalogue.
 *
 * Without transmissions.channel_hash (a database older than any CoreScope that has channels)
 * the lists are empty.
 */
#include "json.h"
#include "params.h"
#include "router.h"

#include <ctype.h>
#include <string.h>

#define MESSAGES_LIMIT_DEFAULT 100
#define MESSAGES_LIMIT_MAX 500 /* CoreScope's listLimits.channelMessagesMax default */

/* ---- parameters, declared once (params.h) -------------------------------------------- */

/*
 * CoreScope's handleChannels and handleChannelMessages, missing / empty / malformed / out of
 * range:
 *   region            none / none / no code left ("ALL", ","): none / more than
 *                     MG_PARAM_LIST_MAX codes: 400 (CoreScope takes any number; meshgate
 *                     bounds a request's work)
 *   includeEncrypted  false / false / anything but "true": false
 *   limit             100 / 100 / 100 / below 1: 100, above MESSAGES_LIMIT_MAX: the maximum
 *   offset            0 / 0 / 0 / negative: 0 (SQLite's OFFSET reads it so for CoreScope)
 */
struct channels_params {
    struct mg_param_list region;
    int encrypted;
    int64_t limit, offset;
};

static const char *const true_only[] = {"true", NULL};
#define P(field) .offset = offsetof(struct channels_params, field)
#define REGION_PARAM                                                                               \
    {                                                                                              \
        .name = "region", .kind = MG_PARAM_LIST, P(region), .flags = MG_LIST_SKIP_ALL,             \
        .corescope = "normalizeRegionCodes: trimmed, uppercased; ALL and blanks dropped"           \
    }
static const struct mg_param channels_param_list[] = {
    REGION_PARAM,
    {.name = "includeEncrypted",
     .kind = MG_PARAM_CHOICE,
     P(encrypted),
     .choices = true_only,
     .def = -1,
     .corescope = "== \"true\", else false"},
};
static const struct mg_param messages_param_list[] = {
    {.name = "limit",
     .kind = MG_PARAM_LIMIT,
     P(limit),
     .def = MESSAGES_LIMIT_DEFAULT,
     .min = 1,
     .max = MESSAGES_LIMIT_MAX,
     .corescope = "queryLimit(r, 100, ChannelMessagesMax)"},
    {.name = "offset",
     .kind = MG_PARAM_INT,
     P(offset),
     .min = 0,
     .max = INT64_MAX,
     .corescope = "queryInt(offset, 0); negative: SQLite's OFFSET reads 0"},
    REGION_PARAM,
};
#undef REGION_PARAM
#undef P
const struct mg_param_table mg_channels_params =
    MG_PARAM_TABLE(struct channels_params, channels_param_list);
const struct mg_param_table mg_channel_messages_params =
    MG_PARAM_TABLE(struct channels_params, messages_param_list);

/* ---- region codes: CoreScope's normalizeRegionCodes ---------------------------------- */

struct regions {
    int count;
    char code[MG_PARAM_LIST_MAX][16];
};

/* The list's codes in upper case; a code too long to be one is dropped (it could match no
 * observer). */
static void regions_parse(const struct mg_param_list *list, struct regions *r)
{
    struct mg_list_item items[MG_PARAM_LIST_MAX];
    int n = mg_param_list_split(list->text, MG_LIST_SKIP_ALL, items, MG_PARAM_LIST_MAX);
    r->count = 0;
    for (int k = 0; k < n && k < MG_PARAM_LIST_MAX; k++) {
        if (items[k].len >= sizeof r->code[0])
            continue;
        char *c = r->code[r->count++];
        for (size_t i = 0; i < items[k].len; i++)
            c[i] = (char)toupper((unsigned char)items[k].ptr[i]);
        c[items[k].len] = '\0';
    }
}

static void regions_placeholders(struct mg_buf *sql, const struct regions *r)
{
    for (int i = 0; i < r->count; i++)
        mg_buf_puts(sql, i ? ",?" : "?");
}

static int regions_bind(sqlite3_stmt *st, int from, const struct regions *r)
{
    for (int i = 0; i < r->count; i++)
        sqlite3_bind_text(st, from + i, r->code[i], -1, SQLITE_STATIC);
    return from + r->count;
}

/* ---- "sender: text" ---------------------------------------------------------------------- */

/* The byte offset of the first ": " in text, or -1. */
static long colon_at(const char *text, size_t len)
{
    for (size_t i = 0; i + 1 < len; i++)
        if (text[i] == ':' && text[i + 1] == ' ')
            return (long)i;
    return -1;
}

/* ---- /api/channels ----------------------------------------------------------------------- */

static void write_channel(struct mg_json *j, sqlite3_stmt *st)
{
    /* 0 channel_hash, 1 count, 2 last activity, 3 text, 4 sender (text and sender are SQL
     * NULL when not JSON strings) */
    const char *text = (const char *)sqlite3_column_text(st, 3);
    size_t text_len = (size_t)sqlite3_column_bytes(st, 3);
    bool have_text = text && text_len > 0;
    mg_json_object_begin(j); /* keys in bytewise order, as CoreScope's map */
    mg_json_key(j, "hash");
    mg_db_json_column(j, st, 0);
    mg_json_key(j, "lastActivity");
    mg_db_json_column(j, st, 2);
    mg_json_key(j, "lastMessage");
    if (have_text) {
        long at = colon_at(text, text_len);
        if (at > 0)
            mg_json_string_n(j, text + at + 2, text_len - (size_t)at - 2);
        else
            mg_json_string_n(j, text, text_len);
    } else {
        mg_json_null(j);
    }
    mg_json_key(j, "lastSender");
    if (have_text)
        mg_db_json_column(j, st, 4);
    else
        mg_json_null(j);
    mg_json_key(j, "messageCount");
    mg_db_json_column(j, st, 1);
    mg_json_key(j, "name");
    mg_db_json_column(j, st, 0);
    mg_json_object_end(j);
}

static void write_encrypted_channel(struct mg_json *j, sqlite3_stmt *st)
{
    const char *hash = (const char *)sqlite3_column_text(st, 0);
    const char *hex = hash && strncmp(hash, "enc_", 4) == 0 ? hash + 4 : (hash ? hash : "");
    struct mg_buf name;
    mg_buf_init(&name);
    mg_buf_printf(&name, "Encrypted (0x%s)", hex);
    mg_json_object_begin(j);
    mg_json_kv_bool(j, "encrypted", true);
    mg_json_key(j, "hash");
    mg_json_string(j, hash ? hash : "");
    mg_json_key(j, "lastActivity");
    mg_db_json_column(j, st, 2);
    mg_json_kv_null(j, "lastMessage");
    mg_json_kv_null(j, "lastSender");
    mg_json_key(j, "messageCount");
    mg_db_json_column(j, st, 1);
    mg_json_key(j, "name");
    mg_json_string_n(j, name.data ? name.data : "", name.len);
    mg_json_object_end(j);
    mg_buf_free(&name);
}

/* The statement listing the decrypted (encrypted false) or undecryptable channels: grouped
 * first, then each decrypted channel's newest message found by its first_seen through
 * idx_transmissions_first_seen (reading the channel's rows in its own index would read all of
 * them). Columns: channel_hash, count, last activity, text, sender. */
static void channels_sql(struct mg_buf *sql, bool encrypted, const struct regions *r)
{
    mg_buf_puts(sql, "WITH g AS MATERIALIZED (SELECT t.channel_hash AS ch, count(*) AS n,"
                     " max(t.first_seen) AS last_activity FROM transmissions t");
    if (r->count)
        mg_buf_puts(sql, " JOIN observations o ON o.transmission_id = t.id"
                         " JOIN observers ob ON ob.rowid = o.observer_idx");
    mg_buf_puts(sql, " WHERE t.payload_type = 5");
    mg_buf_puts(sql, encrypted ? " AND t.channel_hash LIKE 'enc_%'"
                               : " AND t.channel_hash IS NOT NULL"
                                 " AND t.channel_hash NOT LIKE 'enc_%'");
    if (r->count) {
        mg_buf_puts(sql, " AND upper(trim(ob.iata)) IN (");
        regions_placeholders(sql, r);
        mg_buf_puts(sql, ")");
    }
    mg_buf_puts(sql, " GROUP BY t.channel_hash)");
    if (encrypted) {
        mg_buf_puts(sql, " SELECT ch, n, last_activity, NULL, NULL FROM g");
    } else {
        /* The sample is the channel's newest message, heard in the region or not. */
        mg_buf_puts(sql, ", s AS MATERIALIZED (SELECT g.*, (SELECT CASE WHEN"
                         " json_valid(t2.decoded_json) THEN t2.decoded_json END"
                         " FROM transmissions t2 WHERE t2.first_seen = ");
        mg_buf_puts(sql, r->count ? "(SELECT max(t3.first_seen) FROM transmissions t3"
                                    " WHERE t3.channel_hash = g.ch AND t3.payload_type = 5)"
                                  : "g.last_activity");
        mg_buf_puts(sql, " AND +t2.channel_hash = g.ch AND +t2.payload_type = 5 LIMIT 1) AS j"
                         " FROM g)"
                         " SELECT ch, n, last_activity,"
                         " CASE WHEN json_type(j, '$.text') = 'text'"
                         " THEN json_extract(j, '$.text') END,"
                         " CASE WHEN json_type(j, '$.sender') = 'text'"
                         " THEN json_extract(j, '$.sender') END FROM s");
    }
    mg_buf_puts(sql, " ORDER BY last_activity DESC");
}

/* Writes one list's entries; SQLITE_OK or the failure. */
static int list_channels(struct mg_db *db, struct mg_json *j, bool encrypted,
                         const struct regions *r)
{
    struct mg_buf sql;
    mg_buf_init(&sql);
    channels_sql(&sql, encrypted, r);
    sqlite3_stmt *st = sql.failed ? NULL : mg_db_prepare(db, mg_buf_cstr(&sql));
    mg_buf_free(&sql);
    if (!st)
        return SQLITE_ERROR;
    regions_bind(st, 1, r);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (sqlite3_column_type(st, 0) == SQLITE_NULL || sqlite3_column_bytes(st, 0) == 0)
            continue; /* CoreScope skips a channel without a name */
        if (encrypted)
            write_encrypted_channel(j, st);
        else
            write_channel(j, st);
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

enum mg_turn mg_handle_channels(struct mg_env *env, const struct mg_request *req,
                                struct mg_response *res)
{
    struct channels_params own;
    const struct channels_params *p = mg_params_get(&mg_channels_params, req, res, &own);
    if (!p)
        return MG_DONE;
    struct regions r;
    regions_parse(&p->region, &r);
    bool include_encrypted = p->encrypted == 0;
    bool in_transaction = sqlite3_exec(env->db->conn, "BEGIN", NULL, NULL, NULL) == SQLITE_OK;
    mg_response_json(res, 200);
    struct mg_json j;
    mg_json_init(&j, &res->body);
    mg_json_object_begin(&j);
    mg_json_key(&j, "channels");
    mg_json_array_begin(&j);
    int rc = SQLITE_OK;
    if (env->db->schema.tx_channel_hash) {
        rc = list_channels(env->db, &j, false, &r);
        if (rc == SQLITE_OK && include_encrypted)
            rc = list_channels(env->db, &j, true, &r);
    }
    mg_json_array_end(&j);
    mg_json_object_end(&j);
    mg_buf_putc(&res->body, '\n');
    if (in_transaction)
        sqlite3_exec(env->db->conn, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        mg_response_db_failure(res, "the channels", rc);
    return MG_DONE;
}

/* ---- /api/channels/{hash}/messages ------------------------------------------------------ */

/* The region filter of a transmission t (CoreScope's EXISTS), or nothing. */
static void region_exists(struct mg_buf *sql, const struct regions *r)
{
    if (!r->count)
        return;
    mg_buf_puts(sql, " AND EXISTS (SELECT 1 FROM observations o JOIN observers ob"
                     " ON ob.rowid = o.observer_idx WHERE o.transmission_id = t.id"
                     " AND upper(trim(ob.iata)) IN (");
    regions_placeholders(sql, r);
    mg_buf_puts(sql, "))");
}

enum message_col {
    M_TX_ID,
    M_LATEST, /* newest observation, Unix seconds; 0 without one */
    M_HASH,
    M_FIRST_SEEN,
    M_VALID,       /* decoded_json is a JSON object */
    M_TEXT,        /* $.text when a string, else NULL */
    M_SENDER,      /* $.sender when a string, else NULL */
    M_SENDER_TIME, /* $.sender_timestamp as JSON text ("null" when absent) */
    M_OBS_ID,      /* the first observation (lowest id), NULL without one */
    M_OBSERVER_ID,
    M_OBSERVER_NAME,
    M_SNR,
    M_HOPS,
    M_REPEATS,
    M_LATEST_TEXT, /* M_LATEST as RFC 3339 */
};

static void messages_sql(struct mg_buf *sql, const struct regions *r)
{
    /* The page (newest sighting first, CoreScope's choice), then each row's first
     * observation by id and its count; the outer query lists the page oldest first. */
    mg_buf_puts(sql, "WITH page AS (SELECT t.id AS id, coalesce((SELECT max(o.timestamp)"
                     " FROM observations o WHERE o.transmission_id = t.id), 0) AS latest"
                     " FROM transmissions t WHERE t.channel_hash = ? AND t.payload_type = 5");
    region_exists(sql, r);
    mg_buf_puts(
        sql,
        " ORDER BY latest DESC, t.id DESC LIMIT ? OFFSET ?)"
        " SELECT p.id, p.latest, t.hash, t.first_seen,"
        " json_valid(t.decoded_json) AND json_type(t.decoded_json) = 'object',"
        " CASE WHEN json_valid(t.decoded_json) AND json_type(t.decoded_json, '$.text') = 'text'"
        " THEN json_extract(t.decoded_json, '$.text') END,"
        " CASE WHEN json_valid(t.decoded_json) AND json_type(t.decoded_json, '$.sender') = 'text'"
        " THEN json_extract(t.decoded_json, '$.sender') END,"
        " CASE WHEN NOT json_valid(t.decoded_json) THEN 'null'"
        " WHEN json_type(t.decoded_json, '$.sender_timestamp') IN ('object', 'array')"
        " THEN json_extract(t.decoded_json, '$.sender_timestamp')"
        " ELSE json_quote(json_extract(t.decoded_json, '$.sender_timestamp')) END,"
        " f.id, ob.id, ob.name, f.snr,"
        " CASE WHEN json_valid(f.path_json) AND json_type(f.path_json) = 'array'"
        " THEN json_array_length(f.path_json) ELSE 0 END,"
        " (SELECT count(*) FROM observations c WHERE c.transmission_id = p.id),"
        " strftime('%Y-%m-%dT%H:%M:%SZ', p.latest, 'unixepoch')"
        " FROM page p JOIN transmissions t ON t.id = p.id"
        " LEFT JOIN observations f ON f.id = (SELECT min(o.id) FROM observations o"
        " WHERE o.transmission_id = p.id)"
        " LEFT JOIN observers ob ON ob.rowid = f.observer_idx"
        " ORDER BY p.latest ASC, p.id ASC");
}

static void write_message(struct mg_json *j, sqlite3_stmt *st)
{
    const char *text = (const char *)sqlite3_column_text(st, M_TEXT);
    size_t text_len = text ? (size_t)sqlite3_column_bytes(st, M_TEXT) : 0;
    const char *sender = (const char *)sqlite3_column_text(st, M_SENDER);
    size_t sender_len = sender ? (size_t)sqlite3_column_bytes(st, M_SENDER) : 0;
    const char *shown_text = text ? text : "";
    size_t shown_text_len = text_len;
    long at = text_len ? colon_at(text, text_len) : -1;
    if (at > 0 && at < 50) { /* "sender: text", as CoreScope splits it */
        sender = text;
        sender_len = (size_t)at;
        shown_text = text + at + 2;
        shown_text_len = text_len - (size_t)at - 2;
    }
    mg_json_object_begin(j); /* keys in bytewise order, as CoreScope's map */
    mg_json_key(j, "first_seen");
    mg_db_json_column(j, st, M_FIRST_SEEN);
    mg_json_kv_int(j, "hops", sqlite3_column_int64(st, M_HOPS));
    mg_json_key(j, "observers");
    mg_json_array_begin(j);
    if (sqlite3_column_type(st, M_OBSERVER_NAME) != SQLITE_NULL)
        mg_db_json_column(j, st, M_OBSERVER_NAME);
    else if (sqlite3_column_type(st, M_OBSERVER_ID) != SQLITE_NULL)
        mg_db_json_column(j, st, M_OBSERVER_ID);
    mg_json_array_end(j);
    mg_json_key(j, "packetHash");
    mg_db_json_column(j, st, M_HASH);
    mg_json_key(j, "packetId");
    mg_db_json_column(j, st, M_OBS_ID);
    mg_json_kv_int(j, "repeats", sqlite3_column_int64(st, M_REPEATS));
    mg_json_key(j, "sender");
    mg_json_string_n(j, sender ? sender : "", sender_len);
    mg_json_key(j, "sender_timestamp");
    const char *stamp = (const char *)sqlite3_column_text(st, M_SENDER_TIME);
    if (stamp)
        mg_json_raw(j, stamp, (size_t)sqlite3_column_bytes(st, M_SENDER_TIME));
    else
        mg_json_null(j);
    mg_json_key(j, "snr");
    mg_db_json_column(j, st, M_SNR);
    mg_json_key(j, "text");
    mg_json_string_n(j, shown_text, shown_text_len);
    mg_json_key(j, "timestamp");
    mg_db_json_column(j, st, sqlite3_column_int64(st, M_LATEST) > 0 ? M_LATEST_TEXT : M_FIRST_SEEN);
    mg_json_object_end(j);
}

enum mg_turn mg_handle_channel_messages(struct mg_env *env, const struct mg_request *req,
                                        struct mg_response *res)
{
    struct channels_params own;
    const struct channels_params *p = mg_params_get(&mg_channel_messages_params, req, res, &own);
    if (!p)
        return MG_DONE;
    int64_t limit = p->limit, offset = p->offset;
    struct regions r;
    regions_parse(&p->region, &r);
    if (!env->db->schema.tx_channel_hash) {
        mg_response_json(res, 200);
        mg_buf_puts(&res->body, "{\"messages\":[],\"total\":0}\n");
        return MG_DONE;
    }
    bool in_transaction = sqlite3_exec(env->db->conn, "BEGIN", NULL, NULL, NULL) == SQLITE_OK;
    struct mg_buf sql;
    mg_buf_init(&sql);
    mg_buf_puts(&sql, "SELECT count(*) FROM transmissions t"
                      " WHERE t.channel_hash = ? AND t.payload_type = 5");
    region_exists(&sql, &r);
    sqlite3_stmt *count = sql.failed ? NULL : mg_db_prepare(env->db, mg_buf_cstr(&sql));
    mg_buf_reset(&sql);
    messages_sql(&sql, &r);
    sqlite3_stmt *page = sql.failed ? NULL : mg_db_prepare(env->db, mg_buf_cstr(&sql));
    mg_buf_free(&sql);
    int rc = count && page ? SQLITE_OK : SQLITE_ERROR;
    int64_t total = 0;
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(count, 1, req->path_param, -1, SQLITE_STATIC);
        regions_bind(count, 2, &r);
        rc = sqlite3_step(count);
        if (rc == SQLITE_ROW) {
            total = sqlite3_column_int64(count, 0);
            rc = SQLITE_OK;
        }
    }
    mg_response_json(res, 200);
    struct mg_json j;
    mg_json_init(&j, &res->body);
    mg_json_object_begin(&j); /* CoreScope's order: messages, total */
    mg_json_key(&j, "messages");
    mg_json_array_begin(&j);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(page, 1, req->path_param, -1, SQLITE_STATIC);
        int next = regions_bind(page, 2, &r);
        sqlite3_bind_int64(page, next, limit);
        sqlite3_bind_int64(page, next + 1, offset);
        while ((rc = sqlite3_step(page)) == SQLITE_ROW) {
            /* CoreScope skips a message without observations or without a decodable
             * decoded_json (it still counts in the total). */
            if (sqlite3_column_type(page, M_OBS_ID) == SQLITE_NULL ||
                !sqlite3_column_int(page, M_VALID))
                continue;
            write_message(&j, page);
        }
        rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
    mg_json_array_end(&j);
    mg_json_kv_int(&j, "total", total);
    mg_json_object_end(&j);
    mg_buf_putc(&res->body, '\n');
    sqlite3_finalize(count);
    sqlite3_finalize(page);
    if (in_transaction)
        sqlite3_exec(env->db->conn, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        mg_response_db_failure(res, "the channel's messages", rc);
    return MG_DONE;
}

/* ---- /api/known-channels ----------------------------------------------------------------- */

/* CoreScope's handleKnownChannels: region filters its fetched catalogue (as given); without a
 * catalogue, as here, every region answers the same empty one. */
struct known_params {
    const char *region;
};
static const struct mg_param known_param_list[] = {
    {.name = "region",
     .kind = MG_PARAM_TEXT,
     .offset = offsetof(struct known_params, region),
     .corescope = "filters the catalogue; with none, ignored"},
};
const struct mg_param_table mg_known_channels_params =
    MG_PARAM_TABLE(struct known_params, known_param_list);

enum mg_turn mg_handle_known_channels(struct mg_env *env, const struct mg_request *req,
                                      struct mg_response *res)
{
    (void)env, (void)req; /* no catalogue: the region (mg_known_channels_params) changes nothing */
    mg_response_json(res, 200);
    /* CoreScope's empty snapshot: Go's zero time, no source, no entries. */
    mg_buf_puts(&res->body, "{\"fetchedAt\":\"0001-01-01T00:00:00Z\",\"source\":\"\","
                            "\"entries\":[]}\n");
    return MG_DONE;
}

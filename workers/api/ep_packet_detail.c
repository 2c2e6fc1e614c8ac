/* SPDX-License-Identifier: ISC */
/*
 * One transmission and what hangs off it, as CoreScope's server answers them:
 *   GET /api/packets/{id}         by 16-hex hash (in any case) or numeric id; 404 otherwise.
 *                                 The body is written by packet_scan.c (mg_packets_detail), so
 *                                 "packet" is exactly a row of /api/packets?expand=observations.
 *   GET /api/packets/timestamps   first_seen of every transmission after ?since= (required),
 *                                 oldest first: a JSON array, or null when there is none.
 *   GET /api/traces/{hash}        every observation of the transmission, oldest first.
 *   GET /api/iata-coords          CoreScope's built-in airport coordinates (no database).
 *   POST /api/packets/observations  the observations of a batch of hashes (below).
 * Each reads through an index: transmissions by hash (UNIQUE) or id (the primary key),
 * observations by idx_observations_transmission_id, first_seen by
 * idx_transmissions_first_seen.
 *
 * A detail or trace writes a row per observation: light only for a transmission heard at most
 * MG_PACKET_LIGHT_OBSERVATIONS (MG_TRACE_LIGHT_OBSERVATIONS) times, which the class test
 * counts in the index, stopping one past the bound; heavy above (router.h).
 */
#include "json.h"
#include "packet_scan.h"
#include "params.h"
#include "router.h"

#include <ctype.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* CoreScope's test for a hash in a path: 16 hex digits once lowercased. */
static bool is_hash(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (!isxdigit((unsigned char)s[n]))
            return false;
    return n == 16;
}

/* The transmission's id for a hash in any case (stored hashes are lowercase, a few old ones
 * uppercase): 0 found, SQLITE_NOTFOUND, or the failure. Three probes of the UNIQUE index. */
static int id_of_hash(struct mg_db *db, const char *hash, int64_t *id)
{
    sqlite3_stmt *st = mg_db_prepare(db, "SELECT id FROM transmissions"
                                         " WHERE hash IN (?1, lower(?1), upper(?1)) LIMIT 1");
    if (!st)
        return SQLITE_ERROR;
    sqlite3_bind_text(st, 1, hash, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *id = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? SQLITE_OK : rc == SQLITE_DONE ? SQLITE_NOTFOUND : rc;
}

/* Whether the transmission that sql finds (by text when there is one, else by id) has more
 * than bound observations: at most bound + 1 entries of idx_observations_transmission_id. */
static bool heard_more_than(struct mg_db *db, const char *sql, const char *text, int64_t id,
                            int bound)
{
    sqlite3_stmt *st = mg_db_prepare(db, sql);
    if (!st)
        return true; /* cannot tell: the request finds out, off the loop */
    if (text)
        sqlite3_bind_text(st, 1, text, -1, SQLITE_STATIC);
    else
        sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_int(st, 2, bound + 1);
    bool more = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int64(st, 0) > bound;
    sqlite3_finalize(st);
    return more;
}

#define COUNT_OF(TX)                                                                               \
    "SELECT count(*) FROM (SELECT 1 FROM observations WHERE transmission_id = (" TX ") LIMIT ?2)"

bool mg_packet_detail_is_heavy(struct mg_env *env, const struct mg_request *req)
{
    const char *param = req->path_param;
    int64_t id = 0;
    if (is_hash(param) &&
        heard_more_than(env->db,
                        COUNT_OF("SELECT id FROM transmissions WHERE hash IN (?1, lower(?1),"
                                 " upper(?1)) LIMIT 1"),
                        param, 0, MG_PACKET_LIGHT_OBSERVATIONS))
        return true;
    /* As the handler: a hash not found is tried as an id. */
    return mg_parse_atoi(param, &id) &&
           heard_more_than(env->db, COUNT_OF("?1"), NULL, id, MG_PACKET_LIGHT_OBSERVATIONS);
}

bool mg_traces_is_heavy(struct mg_env *env, const struct mg_request *req)
{
    char lower[MG_PATH_PARAM_MAX];
    size_t n = strlen(req->path_param);
    for (size_t i = 0; i <= n; i++)
        lower[i] = (char)tolower((unsigned char)req->path_param[i]);
    return heard_more_than(env->db, COUNT_OF("SELECT id FROM transmissions WHERE hash = ?1"), lower,
                           0, MG_TRACE_LIGHT_OBSERVATIONS);
}

enum mg_turn mg_handle_packet_detail(struct mg_env *env, const struct mg_request *req,
                                     struct mg_response *res)
{
    const char *param = req->path_param;
    bool in_transaction = sqlite3_exec(env->db->conn, "BEGIN", NULL, NULL, NULL) == SQLITE_OK;
    int64_t id = 0;
    int rc = SQLITE_NOTFOUND;
    if (is_hash(param))
        rc = id_of_hash(env->db, param, &id);
    if (rc == SQLITE_NOTFOUND && mg_parse_atoi(param, &id))
        rc = SQLITE_OK;
    if (rc == SQLITE_OK) {
        mg_response_json(res, 200);
        struct mg_json j;
        mg_json_init(&j, &res->body);
        mg_json_object_begin(&j);
        rc = mg_packets_detail(env, id, &j);
        mg_json_object_end(&j);
        mg_buf_putc(&res->body, '\n');
    }
    if (in_transaction)
        sqlite3_exec(env->db->conn, "COMMIT", NULL, NULL, NULL);
    if (rc == SQLITE_NOTFOUND) {
        mg_buf_reset(&res->body);
        mg_response_error(res, 404, "Not found");
    } else if (rc != SQLITE_OK) {
        mg_buf_reset(&res->body);
        mg_response_db_failure(res, "the packet", rc);
    }
    return MG_DONE;
}

/* The parameters, declared once (params.h). CoreScope's handlePacketTimestamps: since missing
 * or empty: 400 "since required"; otherwise compared with first_seen as text (a malformed one
 * compares as any text does). */
struct timestamps_params {
    const char *since;
};
static const struct mg_param timestamps_param_list[] = {
    {.name = "since",
     .kind = MG_PARAM_TEXT,
     .offset = offsetof(struct timestamps_params, since),
     .flags = MG_PARAM_REQUIRED,
     .sample = "%Y-%m-%dT%H:%M:%SZ",
     .corescope = "empty: 400 since required; else compared as text"},
};
const struct mg_param_table mg_packet_timestamps_params =
    MG_PARAM_TABLE(struct timestamps_params, timestamps_param_list);

enum mg_turn mg_handle_packet_timestamps(struct mg_env *env, const struct mg_request *req,
                                         struct mg_response *res)
{
    struct timestamps_params own;
    const struct timestamps_params *p = mg_params_get(&mg_packet_timestamps_params, req, res, &own);
    if (!p)
        return MG_DONE;
    const char *since = p->since;
    sqlite3_stmt *st = mg_db_prepare(env->db, "SELECT first_seen FROM transmissions"
                                              " WHERE first_seen > ? ORDER BY first_seen, id");
    if (!st) {
        mg_response_db_failure(res, "the timestamps", SQLITE_ERROR);
        return MG_DONE;
    }
    sqlite3_bind_text(st, 1, since, -1, SQLITE_STATIC);
    mg_response_json(res, 200);
    struct mg_json j;
    mg_json_init(&j, &res->body);
    int rc, n = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (n++ == 0)
            mg_json_array_begin(&j);
        mg_db_json_column(&j, st, 0);
    }
    sqlite3_finalize(st);
    if (n)
        mg_json_array_end(&j);
    else
        mg_json_null(&j); /* CoreScope's answer when nothing is newer */
    mg_buf_putc(&res->body, '\n');
    if (rc != SQLITE_DONE) {
        mg_buf_reset(&res->body);
        mg_response_db_failure(res, "the timestamps", rc);
    }
    return MG_DONE;
}

enum mg_turn mg_handle_traces(struct mg_env *env, const struct mg_request *req,
                              struct mg_response *res)
{
    char lower[MG_PATH_PARAM_MAX];
    size_t n = strlen(req->path_param);
    for (size_t i = 0; i <= n; i++)
        lower[i] = (char)tolower((unsigned char)req->path_param[i]);
    sqlite3_stmt *st = mg_db_prepare(
        env->db, "SELECT ob.id, ob.name, o.path_json, o.rssi, o.snr,"
                 " strftime('%Y-%m-%dT%H:%M:%fZ', o.timestamp, 'unixepoch')"
                 " FROM transmissions t JOIN observations o ON o.transmission_id = t.id"
                 " LEFT JOIN observers ob ON ob.rowid = o.observer_idx"
                 " WHERE t.hash = ? ORDER BY o.timestamp, o.id");
    if (!st) {
        mg_response_db_failure(res, "the traces", SQLITE_ERROR);
        return MG_DONE;
    }
    sqlite3_bind_text(st, 1, lower, -1, SQLITE_STATIC);
    mg_response_json(res, 200);
    struct mg_json j;
    mg_json_init(&j, &res->body);
    mg_json_object_begin(&j);
    mg_json_key(&j, "traces");
    mg_json_array_begin(&j);
    static const char *const keys[] = {"observer", "observer_name", "path_json",
                                       "rssi",     "snr",           "time"};
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        mg_json_object_begin(&j); /* keys in bytewise order, as CoreScope's map */
        for (int c = 0; c < 6; c++) {
            mg_json_key(&j, keys[c]);
            mg_db_json_column(&j, st, c);
        }
        mg_json_object_end(&j);
    }
    sqlite3_finalize(st);
    mg_json_array_end(&j);
    mg_json_object_end(&j);
    mg_buf_putc(&res->body, '\n');
    if (rc != SQLITE_DONE) {
        mg_buf_reset(&res->body);
        mg_response_db_failure(res, "the traces", rc);
    }
    return MG_DONE;
}

/* CoreScope's built-in table of airports (IATA code, latitude, longitude), sorted by code as
 * its JSON encoder sorts a map's keys. Public facts, not configuration. */
static const struct {
    char code[4];
    double lat, lon;
} airports[] = {
    {"AMS", 52.3105, 4.7683},    {"APC", 38.2132, -122.2807}, {"ATL", 33.6407, -84.4277},
    {"AUS", 30.1975, -97.6664},  {"BNA", 36.1263, -86.6774},  {"BOI", 43.5644, -116.2228},
    {"BOS", 42.3656, -71.0096},  {"CDG", 49.0097, 2.5479},    {"CLT", 35.2144, -80.9473},
    {"DEN", 39.8561, -104.6737}, {"DFW", 32.8998, -97.0403},  {"DTW", 42.2124, -83.3534},
    {"EUG", 44.1246, -123.2119}, {"EWR", 40.6895, -74.1745},  {"FAT", 36.7762, -119.7181},
    {"FRA", 50.0379, 8.5622},    {"HND", 35.5494, 139.7798},  {"IAD", 38.9531, -77.4565},
    {"IAH", 29.9844, -95.3414},  {"ICN", 37.4602, 126.4407},  {"JFK", 40.6413, -73.7781},
    {"LAS", 36.084, -115.1537},  {"LAX", 33.9425, -118.4081}, {"LHR", 51.47, -0.4543},
    {"MCO", 28.4312, -81.3081},  {"MEL", -37.669, 144.841},   {"MFR", 42.3742, -122.8735},
    {"MIA", 25.7959, -80.287},   {"MRY", 36.587, -121.843},   {"MSP", 44.8848, -93.2223},
    {"MUC", 48.3537, 11.775},    {"NRT", 35.772, 140.3929},   {"OAK", 37.7213, -122.2208},
    {"ORD", 41.9742, -87.9073},  {"PDX", 45.5898, -122.5951}, {"PHX", 33.4373, -112.0078},
    {"RDD", 40.509, -122.2934},  {"RDU", 35.8801, -78.788},   {"RNO", 39.4991, -119.7681},
    {"SAN", 32.7338, -117.1933}, {"SBA", 34.4262, -119.8405}, {"SEA", 47.4502, -122.3088},
    {"SFO", 37.6213, -122.379},  {"SJC", 37.3626, -121.929},  {"SLC", 40.7884, -111.9778},
    {"SMF", 38.6954, -121.5908}, {"SOF", 42.6952, 23.4062},   {"STS", 38.509, -122.8128},
    {"SYD", -33.9461, 151.1772}, {"YEG", 53.3097, -113.58},   {"YOW", 45.3225, -75.6692},
    {"YVR", 49.1967, -123.1815}, {"YYC", 51.1215, -114.0076}, {"YYZ", 43.6777, -79.6248},
};

enum mg_turn mg_handle_iata_coords(struct mg_env *env, const struct mg_request *req,
                                   struct mg_response *res)
{
    (void)env, (void)req;
    mg_response_json(res, 200);
    struct mg_json j;
    mg_json_init(&j, &res->body);
    mg_json_object_begin(&j);
    mg_json_key(&j, "coords");
    mg_json_object_begin(&j);
    for (size_t i = 0; i < sizeof airports / sizeof airports[0]; i++) {
        mg_json_key(&j, airports[i].code);
        mg_json_object_begin(&j);
        mg_json_kv_double(&j, "lat", airports[i].lat);
        mg_json_kv_double(&j, "lon", airports[i].lon);
        mg_json_object_end(&j);
    }
    mg_json_object_end(&j);
    mg_json_object_end(&j);
    mg_buf_putc(&res->body, '\n');
    return MG_DONE;
}

/*
 * POST /api/packets/observations: {"hashes": [...]} to {"results": {hash: observations}}, as
 * CoreScope's handleBatchObservations. Its body as CoreScope's decoder reads it: the first
 * JSON value (what follows is not read), an object whose key folds to "hashes" (the last
 * such) holding null or an array of strings (a null entry is ""), or null; anything else is
 * 400 "invalid JSON body". More than MG_BATCH_OBSERVATIONS_MAX entries: 400 "too many hashes
 * (max 200)". Each hash (lowercased, as CoreScope's store looks it up) gets its
 * transmission's observations as /api/packets/{id} lists them, [] for none; the results keep
 * each hash once, in bytewise order (a Go map's). One read transaction. Heavy: 200 hashes of
 * transmissions heard 800 times are 160,000 observations.
 */
struct batch_hash {
    const char *text;
    size_t len;
};

static int batch_hash_cmp(const void *a, const void *b)
{
    const struct batch_hash *x = a, *y = b;
    int c = memcmp(x->text, y->text, x->len < y->len ? x->len : y->len);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* The hashes of the body into out (at most MG_BATCH_OBSERVATIONS_MAX; *count may say more);
 * false when the body is not what CoreScope's decoder takes. */
static bool batch_hashes(json_t *root, struct batch_hash *out, size_t *count)
{
    *count = 0;
    if (json_is_null(root))
        return true;
    if (!json_is_object(root))
        return false;
    json_t *list = NULL;
    const char *key;
    json_t *value;
    json_object_foreach(root, key, value) if (strcasecmp(key, "hashes") == 0) list = value;
    if (!list || json_is_null(list))
        return true;
    if (!json_is_array(list))
        return false;
    size_t i;
    json_array_foreach(list, i, value)
    {
        if (!json_is_string(value) && !json_is_null(value))
            return false;
        if (i < MG_BATCH_OBSERVATIONS_MAX)
            out[i] = json_is_string(value)
                         ? (struct batch_hash){json_string_value(value), json_string_length(value)}
                         : (struct batch_hash){"", 0};
    }
    *count = json_array_size(list);
    return true;
}

/* The transmission of a hash, lowercased: 0 with *id, SQLITE_NOTFOUND, or the failure. */
static int id_of_lower_hash(struct mg_db *db, const struct batch_hash *h, int64_t *id)
{
    sqlite3_stmt *st = mg_db_prepare(db, "SELECT id FROM transmissions WHERE hash = lower(?1)"
                                         " LIMIT 1");
    if (!st)
        return SQLITE_ERROR;
    sqlite3_bind_text(st, 1, h->text, (int)h->len, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *id = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? SQLITE_OK : rc == SQLITE_DONE ? SQLITE_NOTFOUND : rc;
}

enum mg_turn mg_handle_batch_observations(struct mg_env *env, const struct mg_request *req,
                                          struct mg_response *res)
{
    json_error_t err;
    json_t *root = json_loadb(req->body.ptr ? req->body.ptr : "", req->body.len,
                              JSON_DECODE_ANY | JSON_DISABLE_EOF_CHECK, &err);
    struct batch_hash h[MG_BATCH_OBSERVATIONS_MAX];
    size_t count = 0;
    if (!root || !batch_hashes(root, h, &count)) {
        json_decref(root);
        mg_response_error(res, 400, "invalid JSON body");
        return MG_DONE;
    }
    if (count > MG_BATCH_OBSERVATIONS_MAX) {
        json_decref(root);
        mg_response_error(res, 400, "too many hashes (max %d)", MG_BATCH_OBSERVATIONS_MAX);
        return MG_DONE;
    }
    qsort(h, count, sizeof *h, batch_hash_cmp);
    bool in_transaction = sqlite3_exec(env->db->conn, "BEGIN", NULL, NULL, NULL) == SQLITE_OK;
    mg_response_json(res, 200);
    struct mg_json j;
    mg_json_init(&j, &res->body);
    mg_json_object_begin(&j);
    mg_json_key(&j, "results");
    mg_json_object_begin(&j);
    int rc = SQLITE_OK;
    for (size_t i = 0; i < count && rc == SQLITE_OK; i++) {
        if (i > 0 && batch_hash_cmp(&h[i - 1], &h[i]) == 0)
            continue;
        mg_json_key(&j, h[i].text); /* no NUL inside: the parser refuses \u0000 */
        int64_t id = 0;
        rc = id_of_lower_hash(env->db, &h[i], &id);
        if (rc == SQLITE_OK)
            rc = mg_packets_observations(env, id, &j);
        if (rc == SQLITE_NOTFOUND) {
            mg_json_array_begin(&j);
            mg_json_array_end(&j);
            rc = SQLITE_OK;
        }
    }
    mg_json_object_end(&j);
    mg_json_object_end(&j);
    mg_buf_putc(&res->body, '\n');
    if (in_transaction)
        sqlite3_exec(env->db->conn, "COMMIT", NULL, NULL, NULL);
    json_decref(root);
    if (rc != SQLITE_OK) {
        mg_buf_reset(&res->body);
        mg_response_db_failure(res, "the observations", rc);
    }
    return MG_DONE;
}

/* SPDX-License-Identifier: ISC */
/*
 * GET /api/analytics/relay-airtime-share[?window=|from=&to=]: the Analytics page's relay
 * airtime share, as CoreScope's store computes it. Every transmission with a payload type whose
 * first_seen is in the window counts once under its type; its score is the LoRa time on air of
 * its raw bytes (length of raw_hex / 2) in nanoseconds, times the distinct relays that forwarded
 * it: the distinct keys (lowercased) named in the resolved_path of its observations (one per
 * observer and path, as CoreScope's store keeps them). Rows by airtime share, then count, then
 * name; each with its share of the transmissions and of the score.
 *
 * The time on air is Semtech's closed form with MeshCore's constants (CRC on, explicit header,
 * low data rate optimisation when a symbol lasts 16 ms or more, a preamble of 32 symbols up to
 * SF 8 and 16 above), for the configuration's analytics.loraPreset (CoreScope's defaults,
 * 869.6 MHz, 62.5 kHz, SF 8, CR 4/5, for a field absent, zero or out of range).
 *
 * A pass over every observation's resolved path: a cold report (cold_report.h) keyed by the
 * window and CoreScope's cache time (60 s), light when warm. "cached" is false: CoreScope says
 * true for an answer out of its own cache, a distinction meshgate's shared cache does not keep.
 */
#include "buf.h"
#include "cold_report.h"
#include "corescope_config.h"
#include "corescope_window.h"
#include "json.h"
#include "params.h"
#include "path_parse.h"
#include "router.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define AIRTIME_CACHE_S 60
#define AIRTIME_KEY_BYTES 200
#define MG_AIRTIME_HOPS_MAX 64

struct airtime_params {
    int window;
    const char *from, *to;
};
#define P(f) .offset = offsetof(struct airtime_params, f)
static const struct mg_param airtime_param_list[] = {
    {.name = "window",
     .kind = MG_PARAM_CHOICE,
     P(window),
     .choices = mg_cs_window_names,
     .def = -1,
     .corescope = "1h, 24h|1d, 3d, 7d|1w, 30d ending now; anything else: no window; ignored "
                  "when from or to is given"},
    {.name = "from",
     .kind = MG_PARAM_TEXT,
     P(from),
     .corescope = "RFC 3339, cut to the second; malformed: no lower bound"},
    {.name = "to",
     .kind = MG_PARAM_TEXT,
     P(to),
     .corescope = "RFC 3339, cut to the second; malformed: no upper bound"},
};
#undef P
const struct mg_param_table mg_relay_airtime_params =
    MG_PARAM_TABLE(struct airtime_params, airtime_param_list);

struct airtime_args {
    struct mg_cs_window window;
};
_Static_assert(sizeof(struct airtime_args) <= MG_COLD_ARGS_BYTES, "the args fit a build");

static bool airtime_args(const struct mg_request *req, struct mg_response *res,
                         struct airtime_args *a, char *key, size_t cap)
{
    memset(a, 0, sizeof *a);
    struct airtime_params own;
    const struct airtime_params *p = mg_params_get(&mg_relay_airtime_params, req, res, &own);
    if (!p)
        return false;
    int64_t now = (int64_t)time(NULL);
    mg_cs_window_parse(p->window, p->from, p->to, now, &a->window);
    char wkey[64];
    mg_cs_window_key(&a->window, wkey, sizeof wkey);
    snprintf(key, cap, "analytics|relay-airtime|%s|%lu|@%d:%lld", wkey,
             mg_corescope_current()->generation, AIRTIME_CACHE_S,
             (long long)(now / AIRTIME_CACHE_S));
    return true;
}

/* ---- the preset and the time on air ---- */

struct preset {
    double freq_hz, bw_khz;
    int sf, cr, preamble;
};

static struct preset preset_of(const struct mg_corescope_config *c)
{
    struct preset p = {.freq_hz = 869.6e6, .bw_khz = 62.5, .sf = 8, .cr = 5};
    if (c->lora_freq_hz > 0)
        p.freq_hz = c->lora_freq_hz;
    if (c->lora_bw_khz > 0)
        p.bw_khz = c->lora_bw_khz;
    if (c->lora_sf >= 6 && c->lora_sf <= 12)
        p.sf = (int)c->lora_sf;
    if (c->lora_cr >= 5 && c->lora_cr <= 8)
        p.cr = (int)c->lora_cr;
    p.preamble = p.sf <= 8 ? 32 : 16;
    return p;
}

/* Nanoseconds on air for bytes bytes, truncated as Go's time.Duration of a float. */
static int64_t time_on_air_ns(int64_t bytes, const struct preset *p)
{
    double symbol_s = exp2((double)p->sf) / (p->bw_khz * 1000.0);
    int de = symbol_s * 1000.0 >= 16.0 ? 1 : 0;
    int64_t num = 8 * bytes - 4 * p->sf + 28 + 16;
    int64_t den = 4 * (p->sf - 2 * de);
    if (den <= 0)
        return 0;
    double payload = num <= 0 ? 8 : 8 + ceil((double)num / (double)den) * p->cr;
    double seconds = ((double)p->preamble + 4.25 + payload) * symbol_s;
    return (int64_t)(seconds * 1e9);
}

/* ---- the pass ---- */

struct bucket {
    int64_t type, count, score;
};

static const char *const type_names[] = {
    "REQ",  "RESPONSE", "TXT_MSG",   "ACK",     "ADVERT", "GRP_TXT", "GRP_DATA", "ANON_REQ",
    "PATH", "TRACE",    "MULTIPART", "CONTROL", NULL,     NULL,      NULL,       "RAW_CUSTOM"};

static const char *type_name(int64_t t)
{
    const char *n = t >= 0 && t < 16 ? type_names[t] : NULL;
    return n ? n : "UNK";
}

struct share {
    struct bucket *b;
    size_t n, cap;
    int64_t total_count, total_score;
};

static struct bucket *bucket_of(struct share *s, int64_t type)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->b[i].type == type)
            return &s->b[i];
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        struct bucket *more = realloc(s->b, cap * sizeof *more);
        if (!more)
            return NULL;
        s->b = more, s->cap = cap;
    }
    s->b[s->n] = (struct bucket){.type = type};
    return &s->b[s->n++];
}

static int by_share(const void *x, const void *y)
{
    const struct bucket *a = x, *b = y;
    /* airtime shares are score / total: their order is the scores' */
    if (a->score != b->score)
        return a->score > b->score ? -1 : 1;
    if (a->count != b->count)
        return a->count > b->count ? -1 : 1;
    int c = strcmp(type_name(a->type), type_name(b->type));
    return c ? c : (a->type < b->type ? -1 : a->type > b->type);
}

/* Each transmission with a payload type (by id), with the resolved path of each of its
 * observations kept as CoreScope's store keeps them (one per observer and path, the newest:
 * max() makes the row's resolved_path that copy's). */
#define AIRTIME_SQL                                                                                \
    "SELECT t.id, t.payload_type, t.first_seen, length(t.raw_hex) / 2, k.rp FROM transmissions t"  \
    " LEFT JOIN (SELECT o.transmission_id AS tid, %s AS rp, max(o.timestamp)"                      \
    " FROM observations o LEFT JOIN observers ob ON ob.rowid = o.observer_idx"                     \
    " GROUP BY o.transmission_id, coalesce(ob.id, ''), coalesce(o.path_json, '')) k"               \
    " ON k.tid = t.id WHERE t.payload_type IS NOT NULL"

/* The distinct relays of one transmission: keys, lowercased, in a growing list. */
struct relays {
    char **key;
    size_t n, cap;
    bool failed;
};

static void relays_add(struct relays *r, const char *resolved_path)
{
    if (!resolved_path || !resolved_path[0])
        return;
    char buf[8192];
    char *hops[MG_AIRTIME_HOPS_MAX];
    int n = mg_path_split(resolved_path, buf, sizeof buf, hops, MG_AIRTIME_HOPS_MAX);
    for (int i = 0; i < n && i < MG_AIRTIME_HOPS_MAX; i++) {
        if (!hops[i] || !hops[i][0])
            continue;
        for (char *c = hops[i]; *c; c++)
            *c = (char)tolower((unsigned char)*c);
        bool seen = false;
        for (size_t k = 0; k < r->n && !seen; k++)
            seen = strcmp(r->key[k], hops[i]) == 0;
        if (seen)
            continue;
        if (r->n == r->cap) {
            size_t cap = r->cap ? r->cap * 2 : 16;
            char **more = realloc(r->key, cap * sizeof *more);
            if (!more) {
                r->failed = true;
                return;
            }
            r->key = more, r->cap = cap;
        }
        if (!(r->key[r->n] = strdup(hops[i]))) {
            r->failed = true;
            return;
        }
        r->n++;
    }
}

static void relays_reset(struct relays *r)
{
    for (size_t k = 0; k < r->n; k++)
        free(r->key[k]);
    r->n = 0;
}

/* One transmission's count and score into its bucket. */
static bool airtime_add(struct share *s, int64_t type, int64_t bytes, int64_t relays,
                        const struct preset *p)
{
    struct bucket *b = bucket_of(s, type);
    if (!b)
        return false;
    int64_t score = time_on_air_ns(bytes, p) * relays;
    b->count++, s->total_count++;
    b->score += score, s->total_score += score;
    return true;
}

static int airtime_body(struct mg_db *db, const struct airtime_args *a, struct mg_buf *body)
{
    const struct mg_cs_window *w = &a->window;
    struct mg_buf sql;
    mg_buf_init(&sql);
    /* Without the column (an older schema) no observation names a relay, as CoreScope. */
    mg_buf_printf(&sql, AIRTIME_SQL, db->schema.obs_resolved_path ? "o.resolved_path" : "NULL");
    /* first_seen as text a day wider than the window (the exact test is on the parsed time) */
    if (w->has_since)
        mg_buf_puts(&sql, " AND t.first_seen >= strftime('%Y-%m-%dT%H:%M:%S', :since - 86400,"
                          " 'unixepoch')");
    if (w->has_until)
        mg_buf_puts(&sql, " AND t.first_seen <= strftime('%Y-%m-%dT%H:%M:%S', :until + 86400,"
                          " 'unixepoch')");
    mg_buf_puts(&sql, " ORDER BY t.id");
    sqlite3_stmt *st = sql.failed ? NULL : mg_db_prepare(db, mg_buf_cstr(&sql));
    mg_buf_free(&sql);
    if (!st)
        return sqlite3_errcode(db->conn) ? sqlite3_errcode(db->conn) : SQLITE_NOMEM;
    int i_since = sqlite3_bind_parameter_index(st, ":since");
    int i_until = sqlite3_bind_parameter_index(st, ":until");
    if (i_since)
        sqlite3_bind_int64(st, i_since, w->since_s);
    if (i_until)
        sqlite3_bind_int64(st, i_until, w->until_s);
    struct preset p = preset_of(mg_corescope_current());
    struct share s = {0};
    struct relays r = {0};
    int64_t cur = -1, type = 0, bytes = 0;
    bool in = false;
    int rc;
    for (;;) {
        rc = sqlite3_step(st);
        int64_t id = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -2;
        if (id != cur && cur != -1 && in && !airtime_add(&s, type, bytes, (int64_t)r.n, &p)) {
            rc = SQLITE_NOMEM;
            break;
        }
        if (rc != SQLITE_ROW)
            break;
        if (id != cur) {
            cur = id;
            relays_reset(&r);
            type = sqlite3_column_int64(st, 1);
            bytes = sqlite3_column_int64(st, 3);
            in = mg_cs_window_holds_text(w, (const char *)sqlite3_column_text(st, 2));
        }
        if (in)
            relays_add(&r, (const char *)sqlite3_column_text(st, 4));
        if (r.failed) {
            rc = SQLITE_NOMEM;
            break;
        }
    }
    sqlite3_finalize(st);
    relays_reset(&r);
    free(r.key);
    if (rc != SQLITE_DONE) {
        free(s.b);
        return rc == SQLITE_ROW ? SQLITE_NOMEM : rc;
    }
    if (s.n > 1)
        qsort(s.b, s.n, sizeof *s.b, by_share);
    struct mg_json j;
    mg_json_init(&j, body);
    mg_json_object_begin(&j);
    mg_json_kv_bool(&j, "cached", false);
    mg_json_key(&j, "preset");
    mg_json_object_begin(&j);
    mg_json_kv_double(&j, "freq_hz", p.freq_hz);
    mg_json_kv_double(&j, "bw_khz", p.bw_khz);
    mg_json_kv_int(&j, "sf", p.sf);
    mg_json_kv_int(&j, "cr", p.cr);
    mg_json_kv_int(&j, "preamble", p.preamble);
    mg_json_object_end(&j);
    mg_json_key(&j, "rows");
    mg_json_array_begin(&j);
    for (size_t i = 0; i < s.n; i++) {
        const struct bucket *b = &s.b[i];
        mg_json_object_begin(&j);
        mg_json_kv_double(&j, "airtime_pct",
                          s.total_score > 0 ? (double)b->score / (double)s.total_score * 100.0 : 0);
        mg_json_kv_int(&j, "count", b->count);
        mg_json_kv_double(&j, "count_pct",
                          s.total_count > 0 ? (double)b->count / (double)s.total_count * 100.0 : 0);
        mg_json_kv_string(&j, "payload_type", type_name(b->type));
        mg_json_kv_int(&j, "score", b->score);
        mg_json_kv_int(&j, "type", b->type);
        mg_json_object_end(&j);
    }
    mg_json_array_end(&j);
    mg_json_kv_int(&j, "total_count", s.total_count);
    mg_json_kv_int(&j, "total_score", s.total_score);
    mg_json_kv_string(&j, "window",
                      !mg_cs_window_is_zero(w) && w->relative >= 0 ? mg_cs_window_names[w->relative]
                                                                   : "");
    mg_json_object_end(&j);
    mg_buf_putc(body, '\n');
    free(s.b);
    return body->failed ? SQLITE_NOMEM : SQLITE_OK;
}

static void airtime_build(struct mg_cold_build *b, struct mg_db *db)
{
    const struct airtime_args *a = (const struct airtime_args *)b->args;
    bool in_transaction = sqlite3_exec(db->conn, "BEGIN", NULL, NULL, NULL) == SQLITE_OK;
    int rc = airtime_body(db, a, &b->body);
    if (in_transaction)
        sqlite3_exec(db->conn, "COMMIT", NULL, NULL, NULL);
    mg_cold_result(b, rc, "the observations");
}

static const struct mg_cold_report airtime_report = {
    .name = "relay airtime share",
    .not_found = "Not found",
    .bad_request = "bad request",
    .build = airtime_build,
};

bool mg_relay_airtime_is_heavy(struct mg_env *env, const struct mg_request *req)
{
    struct airtime_args a;
    char key[AIRTIME_KEY_BYTES];
    if (!airtime_args(req, NULL, &a, key, sizeof key))
        return false;
    return mg_cold_report_is_heavy(env, key);
}

enum mg_turn mg_handle_relay_airtime(struct mg_env *env, const struct mg_request *req,
                                     struct mg_response *res)
{
    struct airtime_args a;
    char key[AIRTIME_KEY_BYTES];
    if (!airtime_args(req, res, &a, key, sizeof key))
        return MG_DONE;
    return mg_cold_report_serve(env, req, res, &airtime_report, key, &a, sizeof a);
}

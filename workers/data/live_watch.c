/* SPDX-License-Identifier: ISC */
#include "live_watch.h"

#include "clock.h"
#include "corescope_config.h"
#include "db.h"
#include "json.h"
#include "live_ring.h"
#include "log.h"
#include "segment.h"
#include "stats.h"
#include "wake.h"

#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct mg_live_watch {
    pthread_t thread;
    int stop_fd;
    struct mg_env env; /* a copy: the thread's own connection replaces db */
    struct mg_db db;
    struct mg_buf msg;
};

/* One row per new observation, its transmission and its observer (v3 schema: observers by
 * rowid); the last column counts the transmission's observations up to this one. */
const char mg_live_step_sql[] =
    "SELECT o.id, t.id, t.raw_hex, t.hash, t.first_seen, t.route_type, t.payload_type,"
    " t.decoded_json, obs.id, obs.name, o.direction, o.snr, o.rssi, o.path_json,"
    " (SELECT COUNT(*) FROM observations c WHERE c.transmission_id = o.transmission_id"
    "  AND c.id <= o.id)"
    " FROM observations o JOIN transmissions t ON t.id = o.transmission_id"
    " LEFT JOIN observers obs ON obs.rowid = o.observer_idx"
    " WHERE o.id > ?1 ORDER BY o.id LIMIT ?2";

enum {
    COL_OBS_ID,
    COL_TX_ID,
    COL_RAW_HEX,
    COL_HASH,
    COL_FIRST_SEEN,
    COL_ROUTE_TYPE,
    COL_PAYLOAD_TYPE,
    COL_DECODED_JSON,
    COL_OBSERVER_ID,
    COL_OBSERVER_NAME,
    COL_DIRECTION,
    COL_SNR,
    COL_RSSI,
    COL_PATH_JSON,
    COL_COUNT,
};

/* CoreScope's names of payload types (its store's table); others "UNK(n)". */
static const char *const payload_names[16] = {
    "REQ",  "RESPONSE", "TXT_MSG",   "ACK",     "ADVERT", "GRP_TXT", "GRP_DATA", "ANON_REQ",
    "PATH", "TRACE",    "MULTIPART", "CONTROL", NULL,     NULL,      NULL,       "RAW_CUSTOM"};

/* A text column as CoreScope's strOrNil writes it: NULL and "" are null. */
static void text_or_null(struct mg_json *j, sqlite3_stmt *st, int col)
{
    const char *s = (const char *)sqlite3_column_text(st, col);
    int n = sqlite3_column_bytes(st, col);
    if (!s || n == 0)
        mg_json_null(j);
    else
        mg_json_string_n(j, s, (size_t)n);
}

static void int_or_null(struct mg_json *j, sqlite3_stmt *st, int col)
{
    if (sqlite3_column_type(st, col) == SQLITE_NULL)
        mg_json_null(j);
    else
        mg_json_int(j, sqlite3_column_int64(st, col));
}

static void real_or_null(struct mg_json *j, sqlite3_stmt *st, int col)
{
    if (sqlite3_column_type(st, col) == SQLITE_NULL)
        mg_json_null(j);
    else
        mg_json_double(j, sqlite3_column_double(st, col));
}

/* The fields of the packet object, in bytewise order: decoded_json .. observer_name, then
 * path_json .. timestamp (the message puts "packet" between the two runs). */
static void fields_first(struct mg_json *j, sqlite3_stmt *st)
{
    mg_json_key(j, "decoded_json");
    text_or_null(j, st, COL_DECODED_JSON);
    mg_json_key(j, "direction");
    text_or_null(j, st, COL_DIRECTION);
    mg_json_key(j, "first_seen");
    text_or_null(j, st, COL_FIRST_SEEN);
    mg_json_key(j, "hash");
    text_or_null(j, st, COL_HASH);
    mg_json_kv_int(j, "id", sqlite3_column_int64(st, COL_TX_ID));
    mg_json_kv_int(j, "observation_count", sqlite3_column_int64(st, COL_COUNT));
    mg_json_key(j, "observer_id");
    text_or_null(j, st, COL_OBSERVER_ID);
    mg_json_key(j, "observer_name");
    text_or_null(j, st, COL_OBSERVER_NAME);
}

static void fields_last(struct mg_json *j, sqlite3_stmt *st)
{
    mg_json_key(j, "path_json");
    text_or_null(j, st, COL_PATH_JSON);
    mg_json_key(j, "payload_type");
    int_or_null(j, st, COL_PAYLOAD_TYPE);
    mg_json_key(j, "raw_hex");
    text_or_null(j, st, COL_RAW_HEX);
    mg_json_key(j, "route_type");
    int_or_null(j, st, COL_ROUTE_TYPE);
    mg_json_key(j, "rssi");
    real_or_null(j, st, COL_RSSI);
    mg_json_key(j, "snr");
    real_or_null(j, st, COL_SNR);
    mg_json_key(j, "timestamp");
    text_or_null(j, st, COL_FIRST_SEEN);
}

static void decoded(struct mg_json *j, sqlite3_stmt *st)
{
    mg_json_key(j, "decoded");
    mg_json_object_begin(j);
    mg_json_key(j, "header");
    mg_json_object_begin(j);
    mg_json_key(j, "payloadTypeName");
    if (sqlite3_column_type(st, COL_PAYLOAD_TYPE) == SQLITE_NULL) {
        mg_json_string(j, "UNKNOWN");
    } else {
        int64_t pt = sqlite3_column_int64(st, COL_PAYLOAD_TYPE);
        if (pt >= 0 && pt < 16 && payload_names[pt]) {
            mg_json_string(j, payload_names[pt]);
        } else {
            char name[32];
            snprintf(name, sizeof name, "UNK(%lld)", (long long)pt);
            mg_json_string(j, name);
        }
    }
    mg_json_object_end(j);
    const char *text = (const char *)sqlite3_column_text(st, COL_DECODED_JSON);
    json_t *payload = text && *text ? json_loads(text, JSON_DECODE_ANY, NULL) : NULL;
    if (payload && json_is_object(payload)) {
        mg_json_key(j, "payload");
        mg_corescope_json_emit(j, payload);
    }
    json_decref(payload);
    mg_json_object_end(j);
}

void mg_live_message(struct mg_buf *out, sqlite3_stmt *st)
{
    struct mg_json j;
    mg_buf_reset(out);
    mg_json_init(&j, out);
    mg_json_object_begin(&j);
    mg_json_kv_string(&j, "type", "packet");
    mg_json_key(&j, "data");
    mg_json_object_begin(&j);
    decoded(&j, st);
    fields_first(&j, st);
    mg_json_key(&j, "packet");
    mg_json_object_begin(&j);
    fields_first(&j, st);
    fields_last(&j, st);
    mg_json_object_end(&j);
    fields_last(&j, st);
    mg_json_object_end(&j);
    mg_json_object_end(&j);
}

/* Wakes the workers that have live clients. */
static void wake_readers(const struct mg_env *env)
{
    const struct mg_live_ring *r = env->seg->live;
    for (unsigned i = 0; i < env->seg->slot_count && i < MG_WORKERS_MAX; i++)
        if (atomic_load(&r->clients_by_slot[i]) > 0)
            mg_wake_slot(i);
}

/* One step: the new observations above the high-water id, published. Returns the rows read
 * (-1: the database failed). */
static int step(struct mg_live_watch *w)
{
    struct mg_live_ring *r = w->env.seg->live;
    sqlite3_stmt *st = mg_db_prepare(&w->db, mg_live_step_sql);
    if (!st)
        return -1;
    int64_t hw = atomic_load(&r->hw_obs);
    sqlite3_bind_int64(st, 1, hw);
    sqlite3_bind_int(st, 2, MG_LIVE_STEP_ROWS);
    int rows = 0, rc;
    uint64_t written = 0, oversize = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        rows++;
        int64_t id = sqlite3_column_int64(st, COL_OBS_ID);
        mg_live_message(&w->msg, st);
        if (mg_live_publish(r, w->env.seg->live_slots, w->msg.data, w->msg.len))
            written++;
        else
            oversize++;
        atomic_store(&r->hw_obs, id);
        int64_t tx = sqlite3_column_int64(st, COL_TX_ID);
        if (tx > atomic_load(&r->hw_tx))
            atomic_store(&r->hw_tx, tx);
    }
    sqlite3_finalize(st);
    mg_counter_add(w->env.seg, MG_CTR_LIVE_WATCH_STEPS, 1);
    mg_counter_add(w->env.seg, MG_CTR_LIVE_EVENTS, written);
    mg_counter_add(w->env.seg, MG_CTR_LIVE_EVENTS_OVERSIZE, oversize);
    if (written)
        wake_readers(&w->env);
    mg_buf_shrink(&w->msg, 64 * 1024);
    return rc == SQLITE_DONE ? rows : -1;
}

/* Sleeps up to ms; false when asked to stop. */
static bool nap(struct mg_live_watch *w, int ms)
{
    struct pollfd p = {.fd = w->stop_fd, .events = POLLIN};
    int n;
    while ((n = poll(&p, 1, ms)) < 0 && errno == EINTR)
        ;
    return n == 0;
}

static void *watch_main(void *arg)
{
    struct mg_live_watch *w = arg;
    struct mg_live_ring *r = w->env.seg->live;
    const struct mg_config *cfg = w->env.cfg;
    char err[512];
    while (mg_db_open(&w->db, cfg->db_path, cfg->db_busy_timeout_ms, err, sizeof err) != 0) {
        mg_warn("live feed: cannot open the database: %s", err);
        if (!nap(w, cfg->live_poll_ms * 10))
            return NULL;
    }
    if (!atomic_load(&r->hw_set)) {
        /* The first watcher of the group starts from now, as CoreScope's poller does. */
        int64_t obs = mg_db_scalar(&w->db, "SELECT COALESCE(MAX(id), 0) FROM observations");
        int64_t tx = mg_db_scalar(&w->db, "SELECT COALESCE(MAX(id), 0) FROM transmissions");
        atomic_store(&r->hw_obs, obs > 0 ? obs : 0);
        atomic_store(&r->hw_tx, tx > 0 ? tx : 0);
        atomic_store(&r->hw_set, 1);
    }
    int64_t version = -1;
    int wait_ms = 0;
    while (nap(w, wait_ms)) {
        wait_ms = cfg->live_poll_ms;
        int64_t v = mg_db_scalar(&w->db, "PRAGMA data_version");
        if (v == version && v >= 0)
            continue;
        int rows = step(w);
        if (rows < 0) {
            mg_db_release(&w->db);
            continue; /* asked again at the next poll */
        }
        if (rows == MG_LIVE_STEP_ROWS)
            wait_ms = cfg->live_poll_ms < 50 ? cfg->live_poll_ms : 50; /* more are waiting */
        else
            version = v;
    }
    mg_db_close(&w->db);
    return NULL;
}

void mg_live_watch_tick(struct mg_live_watch **wp, struct mg_env *env, int64_t now_ns)
{
    (void)now_ns;
    struct mg_live_ring *r = env->seg->live;
    const struct mg_config *cfg = env->cfg;
    bool tunnelled = cfg->upstream[0] && cfg->upstream_websockets > 0; /* the upstream's feed */
    if (*wp || cfg->live_clients <= 0 || tunnelled || atomic_load(&r->writer_pid) != 0)
        return;
    if (!mg_live_lease_take(r, env->pid, env->slot))
        return;
    struct mg_live_watch *w = calloc(1, sizeof *w);
    if (!w) {
        mg_live_lease_release(r, env->pid);
        return;
    }
    w->env = *env;
    w->env.db = &w->db;
    mg_buf_init(&w->msg);
    w->stop_fd = eventfd(0, EFD_CLOEXEC);
    if (w->stop_fd < 0 || pthread_create(&w->thread, NULL, watch_main, w) != 0) {
        mg_warn("live feed: cannot start the watcher: %s", strerror(errno));
        if (w->stop_fd >= 0)
            close(w->stop_fd);
        free(w);
        mg_live_lease_release(r, env->pid);
        return;
    }
    mg_debug("live feed: this worker watches the database for new rows");
    *wp = w;
}

void mg_live_watch_stop(struct mg_live_watch **wp, struct mg_env *env)
{
    struct mg_live_watch *w = *wp;
    if (!w)
        return;
    uint64_t one = 1;
    while (write(w->stop_fd, &one, sizeof one) < 0 && errno == EINTR)
        ;
    pthread_join(w->thread, NULL);
    close(w->stop_fd);
    mg_buf_free(&w->msg);
    free(w);
    *wp = NULL;
    mg_live_lease_release(env->seg->live, env->pid);
}

/* SPDX-License-Identifier: ISC */
/*
 * GET /api/healthz: 200 when the server can answer, with CoreScope's fields (the front end
 * polls from_pubkey_backfill) and meshgate's own summary; 503 with Retry-After while it
 * cannot (the database does not answer).
 *
 * Whether the database answers is asked cheaply: a read of the schema cookie (one page), with
 * the short busy wait of every light request (MG_LIGHT_BUSY_TIMEOUT_MS). So under a writer's
 * exclusive lock healthz says 503 within that wait, instead of "ready" from cached counts or
 * after the whole MESHGATE_DB_BUSY_TIMEOUT_MS. A probe that succeeded answers for the next
 * PROBE_INTERVAL_NS on its thread (health checkers ask thousands of times a second; a statement
 * each time cost 40 % of the rate), so a database that stops answering gets 503 within that
 * interval; a failed probe is asked again each time, so 200 comes back as soon as it answers.
 * The row counts are body data only: the group's last counts (db_counts.h), refreshed off the
 * request path.
 */
#include "clock.h"
#include "db_counts.h"
#include "gates_json.h"
#include "json.h"
#include "router.h"
#include "scoreboard.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* How long a successful probe answers for its thread. */
#define PROBE_INTERVAL_NS (100 * MG_NS_PER_MS)

/* One read of the database's header: SQLITE_OK, or why it cannot be read now. */
static int probe(struct mg_db *db)
{
    static _Thread_local sqlite3 *prepared_on;
    static _Thread_local sqlite3_stmt *st;
    static _Thread_local int64_t answered_ns; /* the last success on prepared_on; 0: none */
    int64_t now = mg_monotonic_ns();
    if (prepared_on == db->conn && answered_ns != 0 && now - answered_ns < PROBE_INTERVAL_NS)
        return SQLITE_OK;
    answered_ns = 0;
    if (prepared_on != db->conn) {
        /* A connection closed with sqlite3_close_v2 lives on until this is finalized, so
         * another one cannot have its address meanwhile. */
        sqlite3_finalize(st);
        st = NULL;
        prepared_on = NULL;
        if (sqlite3_prepare_v3(db->conn, "PRAGMA schema_version", -1, SQLITE_PREPARE_PERSISTENT,
                               &st, NULL) != SQLITE_OK)
            return sqlite3_errcode(db->conn);
        prepared_on = db->conn;
    }
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return rc;
    answered_ns = now;
    return SQLITE_OK;
}

/* The live workers whose database connection had a fault (db.h, mg_db_heal): healed by
 * opening it again, or degraded (it came again) and being replaced. */
static void db_faults_json(struct mg_json *j, const struct mg_segment *seg)
{
    mg_json_key(j, "dbFaults");
    mg_json_array_begin(j);
    for (unsigned i = 0; i < seg->slot_count; i++) {
        const struct mg_slot *slot = &seg->slots[i];
        uint32_t state = atomic_load(&slot->state), faults = atomic_load(&slot->db_faults);
        bool degraded = atomic_load(&slot->db_degraded) != 0;
        if (state == MG_SLOT_EMPTY || state == MG_SLOT_DEAD || (faults == 0 && !degraded))
            continue;
        mg_json_object_begin(j);
        mg_json_kv_bool(j, "degraded", degraded);
        mg_json_kv_uint(j, "faults", faults);
        mg_json_kv_int(j, "pid", atomic_load(&slot->pid));
        mg_json_kv_uint(j, "slot", i);
        mg_json_object_end(j);
    }
    mg_json_array_end(j);
}

enum mg_turn mg_handle_healthz(struct mg_env *env, const struct mg_request *req,
                               struct mg_response *res)
{
    (void)req;
    int rc = probe(env->db);
    unsigned alive = mg_scoreboard_alive(env->seg);
    if (rc != SQLITE_OK) {
        int primary = rc & 0xff;
        const char *reason = primary == SQLITE_BUSY || primary == SQLITE_LOCKED
                                 ? "the database is locked by a writer"
                                 : "the database does not answer";
        mg_response_refuse(res, 503, primary == SQLITE_BUSY || primary == SQLITE_LOCKED ? 1 : 5,
                           reason);
        mg_buf_reset(&res->body);
        struct mg_json j;
        mg_json_init(&j, &res->body);
        mg_json_object_begin(&j);
        mg_json_kv_string(&j, "reason", reason);
        mg_json_kv_bool(&j, "ready", false);
        mg_json_object_end(&j);
        mg_buf_putc(&res->body, '\n');
        return MG_DONE;
    }
    struct mg_db_counts counts;
    bool have_counts = mg_db_counts_current(env, &counts);

    mg_response_json(res, 200);
    struct mg_json j;
    mg_json_init(&j, &res->body);
    mg_json_object_begin(&j); /* keys in bytewise order */
    mg_json_key(&j, "from_pubkey_backfill");
    mg_json_object_begin(&j);
    mg_json_kv_bool(&j, "done", true);
    mg_json_kv_int(&j, "processed", 0);
    mg_json_kv_int(&j, "total", 0);
    mg_json_object_end(&j);
    mg_json_key(&j, "gates");
    mg_gates_json(&j, env->seg, false, false); /* no records without full */
    /* Null only before the first worker has counted (it does so before it serves). */
    if (have_counts) {
        mg_json_kv_int(&j, "loadedObs", counts.observations);
        mg_json_kv_int(&j, "loadedTx", counts.transmissions);
    } else {
        mg_json_kv_null(&j, "loadedObs");
        mg_json_kv_null(&j, "loadedTx");
    }
    mg_json_kv_bool(&j, "ready", true);
    /* Only on a replica copy (docs/scale-out.md): how old its data may be. */
    int64_t lag_ms;
    if (mg_segment_replica_lag_ms(env->seg, mg_realtime_ns(), &lag_ms)) {
        mg_json_key(&j, "replica");
        mg_json_object_begin(&j);
        mg_json_kv_int(&j, "lagMs", lag_ms);
        mg_json_kv_int(&j, "maxLagMs", env->cfg->replica_max_lag_ms);
        mg_json_object_end(&j);
    }
    mg_json_key(&j, "workers");
    mg_json_object_begin(&j);
    mg_json_kv_uint(&j, "alive", alive);
    mg_json_kv_int(&j, "configured", env->cfg->workers);
    db_faults_json(&j, env->seg);
    mg_json_object_end(&j);
    mg_json_object_end(&j);
    mg_buf_putc(&res->body, '\n');
    return MG_DONE;
}

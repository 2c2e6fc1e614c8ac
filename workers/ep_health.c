/*
 * GET /api/healthz: 200 when the server can answer, with CoreScope's fields (the front end
 * polls from_pubkey_backfill) and meshgate's own summary; 503 with Retry-After while it
 * cannot (the database does not answer).
 */
#include "clock.h"
#include "group_value.h"
#include "json.h"
#include "router.h"
#include "scoreboard.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define COUNTS_INTERVAL_NS (10 * MG_NS_PER_SEC)

struct db_counts {
    int64_t transmissions;
    int64_t observations;
};

static long compute_counts(struct mg_env *env, char *out, size_t cap)
{
    struct db_counts counts;
    sqlite3_stmt *st = mg_db_prepare(env->db, "SELECT (SELECT count(*) FROM transmissions), "
                                              "(SELECT count(*) FROM observations)");
    if (!st || cap < sizeof counts)
        return -1;
    long rc = -1;
    if (sqlite3_step(st) == SQLITE_ROW) {
        counts.transmissions = sqlite3_column_int64(st, 0);
        counts.observations = sqlite3_column_int64(st, 1);
        memcpy(out, &counts, sizeof counts);
        rc = (long)sizeof counts;
    }
    sqlite3_finalize(st);
    return rc;
}

void mg_handle_healthz(struct mg_env *env, const struct mg_request *req, struct mg_response *res)
{
    (void)req;
    char value[MG_SHARED_VALUE_MAX];
    long len = mg_group_value_get(env, MG_VALUE_DB_COUNTS, COUNTS_INTERVAL_NS, compute_counts,
                                  value, sizeof value);
    unsigned alive = mg_scoreboard_alive(env->seg);
    if (len != (long)sizeof(struct db_counts)) {
        mg_response_refuse(res, 503, 5, "the database does not answer");
        mg_buf_reset(&res->body);
        struct mg_json j;
        mg_json_init(&j, &res->body);
        mg_json_object_begin(&j);
        mg_json_kv_string(&j, "reason", "the database does not answer");
        mg_json_kv_bool(&j, "ready", false);
        mg_json_object_end(&j);
        mg_buf_putc(&res->body, '\n');
        return;
    }
    struct db_counts counts;
    memcpy(&counts, value, sizeof counts);

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
    mg_json_object_begin(&j);
    mg_json_object_end(&j);
    mg_json_kv_int(&j, "loadedObs", counts.observations);
    mg_json_kv_int(&j, "loadedTx", counts.transmissions);
    mg_json_kv_bool(&j, "ready", true);
    mg_json_key(&j, "workers");
    mg_json_object_begin(&j);
    mg_json_kv_uint(&j, "alive", alive);
    mg_json_kv_int(&j, "configured", env->cfg->workers);
    mg_json_object_end(&j);
    mg_json_object_end(&j);
    mg_buf_putc(&res->body, '\n');
}

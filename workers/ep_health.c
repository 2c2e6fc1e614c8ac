/*
 * GET /api/healthz: 200 when the server can answer, with CoreScope's fields (the front end
 * polls from_pubkey_backfill) and meshgate's own summary; 503 with Retry-After while it
 * cannot (the database does not answer).
 */
#include "db_counts.h"
#include "gates_json.h"
#include "json.h"
#include "router.h"
#include "scoreboard.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

void mg_handle_healthz(struct mg_env *env, const struct mg_request *req, struct mg_response *res)
{
    (void)req;
    struct mg_db_counts counts;
    bool have_counts = mg_db_counts_get(env, &counts);
    unsigned alive = mg_scoreboard_alive(env->seg);
    if (!have_counts) {
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
    mg_gates_json(&j, env->seg, false);
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

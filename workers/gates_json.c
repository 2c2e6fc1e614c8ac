#include "gates_json.h"

#include "clock.h"
#include "gate_diag.h"

static void kv_ms(struct mg_json *j, const char *key, int64_t ns)
{
    mg_json_key(j, key);
    mg_json_double_rounded(j, (double)ns / (double)MG_NS_PER_MS, 1);
}

static void diag_json(struct mg_json *j, const struct mg_diag_gate *g, bool full, int64_t now)
{
    /* Plain copies of fields written under the gate's lock: a reader may see one update
     * late, never a torn value (each is one aligned word). */
    int32_t holder = *(volatile const int32_t *)&g->holder_pid;
    int64_t since = *(volatile const int64_t *)&g->holder_since_monotonic_ns;
    int64_t until = *(volatile const int64_t *)&g->cooldown_until_monotonic_ns;
    int64_t cooling = holder == 0 && until > now ? until - now : 0;
    mg_json_object_begin(j);
    mg_json_kv_bool(j, "enabled", g->enabled != 0);
    mg_json_kv_uint(j, "running", atomic_load(&g->running));
    kv_ms(j, "cooldownRemainingMs", cooling);
    if (full) {
        kv_ms(j, "cooldownMs", g->cooldown_ns);
        mg_json_key(j, "holder");
        if (holder != 0) {
            mg_json_object_begin(j);
            mg_json_kv_int(j, "pid", holder);
            mg_json_kv_uint(j, "worker", *(volatile const uint32_t *)&g->holder_slot);
            kv_ms(j, "runningMs", now - since);
            mg_json_object_end(j);
        } else {
            mg_json_null(j);
        }
        kv_ms(j, "lastWalkMs", *(volatile const int64_t *)&g->last_walk_ns);
        mg_json_kv_uint(j, "peak", atomic_load(&g->peak));
        mg_json_kv_uint(j, "admitted", atomic_load(&g->admitted));
        mg_json_kv_uint(j, "refusedBusy", atomic_load(&g->refused_busy));
        mg_json_kv_uint(j, "refusedCooling", atomic_load(&g->refused_cooling));
        mg_json_kv_uint(j, "reclaimed", atomic_load(&g->reclaimed));
    }
    mg_json_object_end(j);
}

void mg_gates_json(struct mg_json *j, const struct mg_segment *seg, bool full)
{
    int64_t now = mg_monotonic_ns();
    mg_json_object_begin(j); /* a map: keys in bytewise order */
    mg_json_key(j, "perfMem");
    diag_json(j, seg->diag, full, now);
    mg_json_object_end(j);
}

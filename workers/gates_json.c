/* SPDX-License-Identifier: ISC */
#include "gates_json.h"

#include "client_limit.h"
#include "clock.h"
#include "gate_diag.h"
#include "gate_fifo.h"
#include "result_cache.h"
#include "stats.h"
#include "upstream_gate.h"

#include <string.h>
#include <unistd.h>

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
    if (!full) {
        /* /api/healthz: a map, keys in bytewise order. */
        kv_ms(j, "cooldownRemainingMs", cooling);
        mg_json_kv_bool(j, "enabled", g->enabled != 0);
        mg_json_kv_uint(j, "running", atomic_load(&g->running));
    } else {
        mg_json_kv_bool(j, "enabled", g->enabled != 0);
        mg_json_kv_uint(j, "running", atomic_load(&g->running));
        kv_ms(j, "cooldownRemainingMs", cooling);
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

/* show_key false: the record's key names a client ("client path"), and the reader is not an
 * admin: "hidden" in its place. */
static void records_json(struct mg_json *j, const char *key, const struct mg_fifo_record *r,
                         unsigned count, bool followers, bool show_key, int64_t now)
{
    mg_json_key(j, key);
    mg_json_array_begin(j);
    for (unsigned i = 0; i < count; i++) {
        struct mg_fifo_record copy = r[i]; /* a plain copy: the dump, not a lock */
        if (copy.pid == 0 || (bool)copy.follower != followers)
            continue;
        copy.key[MG_FIFO_KEY_MAX - 1] = '\0';
        mg_json_object_begin(j);
        mg_json_kv_int(j, "pid", copy.pid);
        mg_json_kv_uint(j, "worker", copy.slot);
        mg_json_kv_string(j, "key", show_key ? copy.key : "hidden");
        kv_ms(j, "ageMs", now - copy.since_monotonic_ns);
        mg_json_object_end(j);
    }
    mg_json_array_end(j);
}

/* What every FIFO gate shows: in healthz the four saturation keys (cap, inFlight, queueMax,
 * waiting: bytewise order, as /api/healthz wants); in full also its bound and counters.
 * admitted_key names the permits given ("acquired" for the cold gate, as it always was). */
static void fifo_json(struct mg_json *j, const struct mg_fifo_gate *gate, bool full,
                      const char *admitted_key)
{
    struct mg_fifo_snapshot g;
    mg_fifo_gate_read(gate, getpid(), true, &g);
    mg_json_kv_uint(j, "cap", g.cap);
    mg_json_kv_uint(j, "inFlight", g.in_flight);
    mg_json_kv_uint(j, "queueMax", g.queue_max);
    mg_json_kv_uint(j, "waiting", g.waiting);
    if (!full)
        return;
    kv_ms(j, "waitMs", g.wait_ns);
    mg_json_kv_uint(j, "peak", g.peak);
#define COUNTER_JSON(field, json, what)                                                            \
    mg_json_kv_uint(j, strcmp(#field, "acquired") == 0 ? admitted_key : json, g.field);
    MG_FIFO_COUNTER_LIST(COUNTER_JSON)
#undef COUNTER_JSON
}

static void cold_json(struct mg_json *j, const struct mg_segment *seg, bool full, int64_t now)
{
    const struct mg_fifo_gate *g = seg->cold;
    const struct mg_result_cache *c = seg->cache.cache;
    mg_json_object_begin(j);
    fifo_json(j, g, full, "acquired");
    if (full) {
        mg_json_kv_uint(j, "cacheHits", atomic_load(&c->hits));
        mg_json_kv_uint(j, "cacheMisses", atomic_load(&c->misses));
        mg_json_kv_uint(j, "coalesced", atomic_load(&c->coalesced));
        mg_json_kv_uint(j, "cacheEntries", mg_result_cache_ready(&seg->cache, now));
        /* A cold gate's key is the report's ("pubkey|days"): nobody's address. */
        records_json(j, "holders", g->holder, MG_FIFO_HOLDERS_MAX, false, true, now);
        records_json(j, "waiters", g->waiter, MG_FIFO_WAITERS_MAX, false, true, now);
        records_json(j, "followers", g->waiter, MG_FIFO_WAITERS_MAX, true, true, now);
    }
    mg_json_object_end(j);
}

static void anon_json(struct mg_json *j, const struct mg_segment *seg, bool full, bool show_clients,
                      int64_t now)
{
    const struct mg_fifo_gate *g = seg->anon;
    const struct mg_client_table *t = seg->clients.table;
    mg_json_object_begin(j);
    fifo_json(j, g, full, "admitted");
    if (full) {
        mg_json_kv_uint(j, "bypassed", mg_counter_get(seg, MG_CTR_ANON_BYPASSED));
        mg_json_kv_uint(j, "rateLimited", mg_counter_get(seg, MG_CTR_ANON_RATE_LIMITED));
        mg_json_kv_uint(j, "unauthorized", mg_counter_get(seg, MG_CTR_UNAUTHORIZED));
        mg_json_key(j, "rateLimit");
        mg_json_object_begin(j);
        mg_json_kv_uint(j, "perMinute", t->per_minute);
        mg_json_kv_uint(j, "burst", t->burst);
        mg_json_kv_uint(j, "entries", (uint64_t)t->sets * MG_CLIENT_WAYS);
        mg_json_kv_uint(j, "tracked", mg_client_limit_tracked(&seg->clients, now));
        mg_json_kv_uint(j, "evicted", atomic_load(&t->evicted));
        mg_json_object_end(j);
        records_json(j, "holders", g->holder, MG_FIFO_HOLDERS_MAX, false, show_clients, now);
        records_json(j, "waiters", g->waiter, MG_FIFO_WAITERS_MAX, false, show_clients, now);
    }
    mg_json_object_end(j);
}

/* The upstream: its gate, breaker and tunnels. Its state never makes healthz unhealthy:
 * native routes answer whatever the upstream does. */
static void upstream_json(struct mg_json *j, const struct mg_segment *seg, bool full, int64_t now)
{
    const struct mg_upstream_shm *u = seg->upstream;
    const struct mg_breaker *b = &u->breaker;
    uint32_t state = atomic_load(&b->state);
    int64_t until = atomic_load(&b->open_until_ns);
    mg_json_object_begin(j);
    mg_json_kv_string(j, "address", seg->config->upstream);
    mg_json_kv_string(j, "breaker", mg_breaker_state_name(state));
    struct mg_fifo_snapshot g; /* read as every FIFO gate is; its keys around "tunnels" */
    mg_fifo_gate_read(&u->gate, getpid(), true, &g);
    mg_json_kv_uint(j, "cap", g.cap);
    mg_json_kv_uint(j, "inFlight", g.in_flight);
    mg_json_kv_uint(j, "queueMax", g.queue_max);
    mg_json_kv_uint(j, "tunnels", atomic_load(&u->tunnels_open));
    mg_json_kv_uint(j, "waiting", g.waiting);
    if (full) {
        kv_ms(j, "waitMs", g.wait_ns);
        mg_json_kv_uint(j, "peak", g.peak);
#define COUNTER_JSON(field, json, what)                                                            \
    mg_json_kv_uint(j, strcmp(#field, "acquired") == 0 ? "admitted" : json, g.field);
        MG_FIFO_COUNTER_LIST(COUNTER_JSON)
#undef COUNTER_JSON
        kv_ms(j, "breakerOpenRemainingMs",
              state == MG_BREAKER_OPEN && until > now ? until - now : 0);
        mg_json_kv_uint(j, "breakerFailuresInARow", atomic_load(&b->failures));
        mg_json_kv_uint(j, "breakerOpened", atomic_load(&b->opened));
        mg_json_kv_uint(j, "breakerFastFails", atomic_load(&b->fast_fails));
        mg_json_kv_uint(j, "breakerProbes", atomic_load(&b->probes));
        mg_json_kv_uint(j, "tunnelCap", atomic_load(&u->tunnel_cap));
        mg_json_kv_uint(j, "tunnelsPeak", atomic_load(&u->tunnels_peak));
        uint32_t anon_max = atomic_load(&u->anon_max);
        mg_json_kv_uint(j, "anonymousHeld", atomic_load(&u->anon_held));
        mg_json_kv_uint(j, "anonymousMax", anon_max == UINT32_MAX ? g.cap : anon_max);
        mg_json_kv_uint(j, "anonymousPeak", atomic_load(&u->anon_peak));
        mg_json_kv_uint(j, "anonymousHeldBack", atomic_load(&u->anon_held_back));
        static const struct {
            const char *key;
            enum mg_counter counter;
        } counters[] = {
            {"requests", MG_CTR_UPSTREAM_REQUESTS},
            {"connects", MG_CTR_UPSTREAM_CONNECTS},
            {"reused", MG_CTR_UPSTREAM_REUSED},
            {"retries", MG_CTR_UPSTREAM_RETRIES},
            {"bytesSent", MG_CTR_UPSTREAM_BYTES_SENT},
            {"bytesReceived", MG_CTR_UPSTREAM_BYTES_RECEIVED},
            {"failures", MG_CTR_UPSTREAM_FAILURES},
            {"answered502", MG_CTR_UPSTREAM_502},
            {"answered504", MG_CTR_UPSTREAM_504},
            {"aborted", MG_CTR_UPSTREAM_ABORTED},
            {"refusedFraming", MG_CTR_UPSTREAM_REFUSED_AMBIGUOUS},
            {"tunnelsOpened", MG_CTR_UPSTREAM_TUNNELS},
            {"tunnelsRefused", MG_CTR_UPSTREAM_TUNNELS_REFUSED},
        };
        for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++)
            mg_json_kv_uint(j, counters[i].key, mg_counter_get(seg, counters[i].counter));
        records_json(j, "holders", u->gate.holder, MG_FIFO_HOLDERS_MAX, false, true, now);
        records_json(j, "waiters", u->gate.waiter, MG_FIFO_WAITERS_MAX, false, true, now);
    }
    mg_json_object_end(j);
}

void mg_gates_json(struct mg_json *j, const struct mg_segment *seg, bool full, bool show_clients)
{
    int64_t now = mg_monotonic_ns();
    mg_json_object_begin(j); /* a map: keys in bytewise order */
    mg_json_key(j, "anonLine");
    anon_json(j, seg, full, show_clients, now);
    mg_json_key(j, "perfMem");
    diag_json(j, seg->diag, full, now);
    mg_json_key(j, "reachCold");
    cold_json(j, seg, full, now);
    if (seg->config->upstream[0]) {
        mg_json_key(j, "upstream");
        upstream_json(j, seg, full, now);
    }
    mg_json_object_end(j);
}

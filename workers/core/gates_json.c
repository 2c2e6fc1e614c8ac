/* SPDX-License-Identifier: ISC */
#include "gates_json.h"

#include "client_limit.h"
#include "clock.h"
#include "gate_diag.h"
#include "gate_fifo.h"
#include "gates.h"
#include "live_ring.h"
#include "process.h"
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

static void diag_json(struct mg_json *j, const struct mg_diag_gate *gate, bool full, int64_t now)
{
    struct mg_diag_snapshot g;
    mg_diag_gate_read(gate, mg_self_pid(), true, now, &g);
    mg_json_object_begin(j);
    if (!full) {
        /* /api/healthz: a map, keys in bytewise order. */
        kv_ms(j, "cooldownRemainingMs", g.cooldown_remaining_ns);
        mg_json_kv_bool(j, "enabled", g.enabled);
        mg_json_kv_uint(j, "running", g.running);
    } else {
        mg_json_kv_bool(j, "enabled", g.enabled);
        mg_json_kv_uint(j, "running", g.running);
        kv_ms(j, "cooldownRemainingMs", g.cooldown_remaining_ns);
        kv_ms(j, "cooldownMs", g.cooldown_ns);
        mg_json_key(j, "holder");
        if (g.holder_pid != 0) {
            mg_json_object_begin(j);
            mg_json_kv_int(j, "pid", g.holder_pid);
            mg_json_kv_uint(j, "worker", g.holder_slot);
            kv_ms(j, "runningMs", now - g.holder_since_monotonic_ns);
            mg_json_object_end(j);
        } else {
            mg_json_null(j);
        }
        kv_ms(j, "lastWalkMs", g.last_walk_ns);
        mg_json_kv_uint(j, "peak", g.peak);
#define COUNTER_JSON(field, json, what) mg_json_kv_uint(j, json, g.field);
        MG_DIAG_COUNTER_LIST(COUNTER_JSON)
#undef COUNTER_JSON
    }
    mg_json_object_end(j);
}

/* show_key false: the record's key names a client ("client path"), and the reader is not an
 * admin: "hidden" in its place. */
static void records_json(struct mg_json *j, const char *key, const struct mg_fifo_gate *gate,
                         enum mg_fifo_records which, bool show_key, int64_t now)
{
    struct mg_fifo_record r[MG_FIFO_WAITERS_MAX];
    unsigned n = mg_fifo_gate_records(gate, mg_self_pid(), true, which, r, MG_FIFO_WAITERS_MAX);
    mg_json_key(j, key);
    mg_json_array_begin(j);
    for (unsigned i = 0; i < n; i++) {
        mg_json_object_begin(j);
        mg_json_kv_int(j, "pid", r[i].pid);
        mg_json_kv_uint(j, "worker", r[i].slot);
        mg_json_kv_string(j, "key", show_key ? r[i].key : "hidden");
        kv_ms(j, "ageMs", now - r[i].since_monotonic_ns);
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
    mg_fifo_gate_read(gate, mg_self_pid(), true, &g);
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
    mg_json_object_begin(j);
    fifo_json(j, g, full, "acquired");
    if (full) {
        /* The cache's use by the gate's requests (all its counters: /api/perf's
         * meshgateCache.results). */
        struct mg_cache_snapshot c;
        mg_result_cache_read(&seg->cache, mg_self_pid(), true, now, &c);
        mg_json_kv_uint(j, "cacheHits", c.hits);
        mg_json_kv_uint(j, "cacheMisses", c.misses);
        mg_json_kv_uint(j, "coalesced", c.coalesced);
        mg_json_kv_uint(j, "cacheEntries", c.ready);
        /* A cold gate's key is the report's ("pubkey|days"): nobody's address. */
        records_json(j, "holders", g, MG_FIFO_HOLDERS, true, now);
        records_json(j, "waiters", g, MG_FIFO_WAITERS, true, now);
        records_json(j, "followers", g, MG_FIFO_FOLLOWERS, true, now);
    }
    mg_json_object_end(j);
}

static void anon_json(struct mg_json *j, const struct mg_segment *seg, bool full, bool show_clients,
                      int64_t now)
{
    const struct mg_fifo_gate *g = seg->anon;
    mg_json_object_begin(j);
    fifo_json(j, g, full, "admitted");
    if (full) {
        mg_json_kv_uint(j, "bypassed", mg_counter_get(seg, MG_CTR_ANON_BYPASSED));
        mg_json_kv_uint(j, "rateLimited", mg_counter_get(seg, MG_CTR_ANON_RATE_LIMITED));
        mg_json_kv_uint(j, "unauthorized", mg_counter_get(seg, MG_CTR_UNAUTHORIZED));
        mg_json_key(j, "rateLimit");
        mg_json_object_begin(j);
        struct mg_client_snapshot t;
        mg_client_limit_read(&seg->clients, now, &t);
        mg_json_kv_uint(j, "perMinute", t.per_minute);
        mg_json_kv_uint(j, "burst", t.burst);
        mg_json_kv_uint(j, "entries", t.entries);
        mg_json_kv_uint(j, "tracked", t.tracked);
#define COUNTER_JSON(field, json, what) mg_json_kv_uint(j, json, t.field);
        MG_CLIENT_COUNTER_LIST(COUNTER_JSON)
#undef COUNTER_JSON
        mg_json_object_end(j);
        records_json(j, "holders", g, MG_FIFO_HOLDERS, show_clients, now);
        records_json(j, "waiters", g, MG_FIFO_WAITERS, show_clients, now);
    }
    mg_json_object_end(j);
}

/* The upstream: its gate, breaker and tunnels. Its state never makes healthz unhealthy:
 * native routes answer whatever the upstream does. Its address is an admin's to read (it
 * tells where CoreScope's own server listens): "hidden" for anyone else. */
static void upstream_json(struct mg_json *j, const struct mg_segment *seg, bool full,
                          bool show_address, int64_t now)
{
    const struct mg_upstream_shm *u = seg->upstream;
    struct mg_upstream_snapshot b;
    mg_upstream_shm_read(u, now, &b);
    mg_json_object_begin(j);
    mg_json_kv_string(j, "address", show_address ? seg->config->upstream : "hidden");
    mg_json_kv_string(j, "breaker", mg_breaker_state_name(b.breaker_state));
    struct mg_fifo_snapshot g; /* read as every FIFO gate is; its keys around "tunnels" */
    mg_fifo_gate_read(&u->gate, mg_self_pid(), true, &g);
    mg_json_kv_uint(j, "cap", g.cap);
    mg_json_kv_uint(j, "inFlight", g.in_flight);
    mg_json_kv_uint(j, "queueMax", g.queue_max);
    mg_json_kv_uint(j, "tunnels", b.tunnels_open);
    mg_json_kv_uint(j, "waiting", g.waiting);
    if (full) {
        kv_ms(j, "waitMs", g.wait_ns);
        mg_json_kv_uint(j, "peak", g.peak);
#define COUNTER_JSON(field, json, what)                                                            \
    mg_json_kv_uint(j, strcmp(#field, "acquired") == 0 ? "admitted" : json, g.field);
        MG_FIFO_COUNTER_LIST(COUNTER_JSON)
#undef COUNTER_JSON
        kv_ms(j, "breakerOpenRemainingMs", b.breaker_open_remaining_ns);
        mg_json_kv_uint(j, "breakerFailuresInARow", b.breaker_failures);
#define COUNTER_JSON(field, json, what) mg_json_kv_uint(j, json, b.field);
        MG_BREAKER_COUNTER_LIST(COUNTER_JSON)
#undef COUNTER_JSON
        mg_json_kv_uint(j, "tunnelCap", b.tunnel_cap);
        mg_json_kv_uint(j, "tunnelsPeak", b.tunnels_peak);
        mg_json_kv_uint(j, "anonymousHeld", b.anon_held);
        mg_json_kv_uint(j, "anonymousMax", b.anon_max == UINT32_MAX ? g.cap : b.anon_max);
        mg_json_kv_uint(j, "anonymousPeak", b.anon_peak);
        mg_json_kv_uint(j, "anonymousHeldBack", b.anon_held_back);
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
        records_json(j, "holders", &u->gate, MG_FIFO_HOLDERS, true, now);
        records_json(j, "waiters", &u->gate, MG_FIFO_WAITERS, true, now);
    }
    mg_json_object_end(j);
}

void mg_gates_json(struct mg_json *j, const struct mg_segment *seg, bool full, bool show_clients)
{
    int64_t now = mg_monotonic_ns();
    mg_json_object_begin(j); /* a map: keys in bytewise order */
    mg_json_key(j, "anonLine");
    anon_json(j, seg, full, show_clients, now);
    if (full) {
        /* The connection cap (MESHGATE_MAX_CONNS_PER_CLIENT): /api/perf only. */
        struct mg_gate_snapshots all;
        mg_gates_read(seg, getpid(), true, now, &all);
        mg_json_key(j, "connCap");
        mg_json_object_begin(j);
        mg_json_kv_uint(j, "cap", all.conn_cap.cap);
#define COUNTER_JSON(field, json, what) mg_json_kv_uint(j, json, all.conn_cap.field);
        MG_CONN_COUNTER_LIST(COUNTER_JSON)
#undef COUNTER_JSON
        mg_json_object_end(j);
    }
    if (full) {
        /* The live feed (shm/live_ring.h): /api/perf only. */
        struct mg_live_snapshot l;
        mg_live_ring_read(seg->live, &l);
        mg_json_key(j, "liveFeed");
        mg_json_object_begin(j);
        mg_json_kv_uint(j, "cap", l.clients_cap);
        mg_json_kv_uint(j, "clients", l.clients_open);
        mg_json_kv_uint(j, "clientsPeak", l.clients_peak);
        mg_json_kv_uint(j, "events", l.events);
        mg_json_kv_uint(j, "ringFill", l.fill);
        mg_json_kv_uint(j, "ringSlots", l.slots);
        mg_json_kv_int(j, "watcherPid", l.writer_pid);
        mg_json_object_end(j);
    }
    mg_json_key(j, "perfMem");
    diag_json(j, seg->diag, full, now);
    mg_json_key(j, "reachCold");
    cold_json(j, seg, full, now);
    if (seg->config->upstream[0]) {
        mg_json_key(j, "upstream");
        upstream_json(j, seg, full, show_clients, now);
    }
    mg_json_object_end(j);
}

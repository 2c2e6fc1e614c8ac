/* SPDX-License-Identifier: ISC */
/*
 * GET /metrics: the whole process group's figures in the Prometheus text exposition format
 * 0.0.4, read from the shared segment without locks (as /api/perf reads them), so any worker
 * answers for all of them.
 *
 * Every family is written once, as "# HELP", "# TYPE", then all its samples, because the
 * format wants a family's samples together. Every route and every state is always listed,
 * with zeros, so a series never appears or vanishes with traffic.
 *
 * Latency: the segment's histograms have 8 log-linear buckets per power of two of
 * microseconds; they are summed into the fixed `le` boundaries of le_us[]. A segment bucket
 * counts toward an `le` only when its whole range is at or below it, so a bucket that
 * straddles a boundary is counted in the next one up: a sample counted under `le` is always
 * <= le, and one left out is above le / 1.125 (the segment's resolution of 12.5 %). The last
 * segment bucket also holds every larger value, so it counts only toward +Inf. _count is the
 * sum of the buckets read, so it always equals the +Inf bucket; _sum is read apart and may be
 * one request ahead or behind while workers add to it.
 *
 * meshgate_database_up is the one figure that may touch the database: it is the answer of the
 * group's row counts (db_counts.h), the value /api/healthz answers 503 on, so a scrape costs
 * the database at most one count per interval for the whole group.
 */
#include "build_info.h"
#include "client_limit.h"
#include "db_counts.h"
#include "clock.h"
#include "gate_diag.h"
#include "gate_fifo.h"
#include "gates.h"
#include "live_ring.h"
#include "result_cache.h"
#include "router.h"
#include "scoreboard.h"
#include "stats.h"
#include "upstream_gate.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define US_PER_SEC 1000000.0

/* The `le` boundaries in microseconds and as printed (+Inf follows them). */
static const uint64_t le_us[] = {500,    1000,   2500,   5000,    10000,   25000,   50000,
                                 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000};
static const char *const le_text[] = {"0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05",
                                      "0.1",    "0.25",  "0.5",    "1",     "2.5",  "5",     "10"};
#define LE_COUNT (sizeof le_us / sizeof le_us[0])
_Static_assert(sizeof le_us / sizeof le_us[0] == sizeof le_text / sizeof le_text[0],
               "one printed form per boundary");

static uint64_t load64(const _Atomic uint64_t *v)
{
    return atomic_load_explicit(v, memory_order_relaxed);
}

/* HELP text escapes backslash and newline; label values also escape the double quote. */
static void put_escaped(struct mg_buf *b, const char *s, bool quote)
{
    for (; *s; s++) {
        if (*s == '\\')
            mg_buf_puts(b, "\\\\");
        else if (*s == '\n')
            mg_buf_puts(b, "\\n");
        else if (*s == '"' && quote)
            mg_buf_puts(b, "\\\"");
        else
            mg_buf_putc(b, *s);
    }
}

static void family(struct mg_buf *b, const char *name, const char *type, const char *help)
{
    mg_buf_printf(b, "# HELP %s ", name);
    put_escaped(b, help, false);
    mg_buf_printf(b, "\n# TYPE %s %s\n", name, type);
}

/* name{label="value"} (the label part only when label is not NULL), without the number. */
static void sample_name(struct mg_buf *b, const char *name, const char *label, const char *value)
{
    mg_buf_puts(b, name);
    if (label) {
        mg_buf_printf(b, "{%s=\"", label);
        put_escaped(b, value, true);
        mg_buf_puts(b, "\"}");
    }
}

static void sample_uint(struct mg_buf *b, const char *name, const char *label, const char *value,
                        uint64_t n)
{
    sample_name(b, name, label, value);
    mg_buf_printf(b, " %" PRIu64 "\n", n);
}

static void sample_seconds(struct mg_buf *b, const char *name, const char *label, const char *value,
                           double seconds)
{
    sample_name(b, name, label, value);
    mg_buf_printf(b, " %.6f\n", seconds);
}

static void single_uint(struct mg_buf *b, const char *name, const char *type, const char *help,
                        uint64_t n)
{
    family(b, name, type, help);
    sample_uint(b, name, NULL, NULL, n);
}

static void write_counters(struct mg_buf *b, const struct mg_segment *seg)
{
    for (int i = 0; i < MG_CTR_COUNT; i++) {
        char name[96];
        snprintf(name, sizeof name, "meshgate_%s_total", mg_counter_names[i]);
        single_uint(b, name, "counter", mg_counter_help[i],
                    mg_counter_get(seg, (enum mg_counter)i));
    }
}

/* The route's template, copied and re-terminated (the segment's strings are fixed-size). */
static void route_name(const struct mg_route_stats *r, char out[MG_ROUTE_NAME_MAX])
{
    memcpy(out, r->name, MG_ROUTE_NAME_MAX);
    out[MG_ROUTE_NAME_MAX - 1] = '\0';
}

/* One histogram: metric's buckets, sum and count, labelled route="..." unless route is NULL. */
static void route_histogram(struct mg_buf *b, const char *metric, const struct mg_route_stats *r,
                            const char *route)
{
    char name[96];
    uint64_t cumulative[LE_COUNT] = {0};
    uint64_t total = 0;
    for (unsigned k = 0; k < MG_HIST_BUCKETS; k++) {
        uint64_t n = load64(&r->bucket[k]);
        total += n;
        if (k == MG_HIST_BUCKETS - 1)
            continue; /* unbounded above: +Inf only */
        uint64_t upper = mg_hist_bucket_upper_us(k);
        for (unsigned i = 0; i < LE_COUNT; i++)
            if (upper <= le_us[i])
                cumulative[i] += n;
    }
    for (unsigned i = 0; i <= LE_COUNT; i++) {
        mg_buf_printf(b, "%s_bucket{", metric);
        if (route) {
            mg_buf_puts(b, "route=\"");
            put_escaped(b, route, true);
            mg_buf_puts(b, "\",");
        }
        mg_buf_printf(b, "le=\"%s\"} %" PRIu64 "\n", i < LE_COUNT ? le_text[i] : "+Inf",
                      i < LE_COUNT ? cumulative[i] : total);
    }
    snprintf(name, sizeof name, "%s_sum", metric);
    sample_seconds(b, name, route ? "route" : NULL, route, (double)load64(&r->sum_us) / US_PER_SEC);
    snprintf(name, sizeof name, "%s_count", metric);
    sample_uint(b, name, route ? "route" : NULL, route, total);
}

static void write_routes(struct mg_buf *b, const struct mg_segment *seg)
{
    uint32_t n = seg->route_count < MG_ROUTES_MAX ? seg->route_count : MG_ROUTES_MAX;
    char name[MG_ROUTE_NAME_MAX];

    /* WebSocket tunnels are not requests: their durations (how long a page stayed open)
     * are a family of their own, after the requests'. */
    family(b, "meshgate_request_duration_seconds", "histogram",
           "time from a request's head being read to its response being ready, by route");
    for (uint32_t i = 0; i < n; i++) {
        if (i == MG_ROUTE_TUNNEL)
            continue;
        route_name(&seg->routes[i], name);
        route_histogram(b, "meshgate_request_duration_seconds", &seg->routes[i], name);
    }
    family(b, "meshgate_request_errors_total", "counter",
           "requests answered with a 5xx status, by route");
    for (uint32_t i = 0; i < n; i++) {
        if (i == MG_ROUTE_TUNNEL)
            continue;
        route_name(&seg->routes[i], name);
        sample_uint(b, "meshgate_request_errors_total", "route", name,
                    load64(&seg->routes[i].errors));
    }
    family(b, "meshgate_request_duration_max_seconds", "gauge",
           "the longest request so far, by route (exact)");
    for (uint32_t i = 0; i < n; i++) {
        if (i == MG_ROUTE_TUNNEL)
            continue;
        route_name(&seg->routes[i], name);
        sample_seconds(b, "meshgate_request_duration_max_seconds", "route", name,
                       (double)load64(&seg->routes[i].max_us) / US_PER_SEC);
    }
    if (MG_ROUTE_TUNNEL < n) {
        family(b, "meshgate_upstream_tunnel_duration_seconds", "histogram",
               "how long each WebSocket tunnel to the upstream stayed open");
        route_histogram(b, "meshgate_upstream_tunnel_duration_seconds",
                        &seg->routes[MG_ROUTE_TUNNEL], NULL);
    }
}

static void write_workers(struct mg_buf *b, const struct mg_segment *seg)
{
    uint64_t by_state[MG_SLOT_STATE_COUNT] = {0};
    uint64_t connections = 0;
    for (uint32_t i = 0; i < seg->slot_count; i++) {
        uint32_t state = atomic_load(&seg->slots[i].state);
        if (state < MG_SLOT_STATE_COUNT)
            by_state[state]++;
        connections += atomic_load(&seg->slots[i].connections);
    }
    single_uint(b, "meshgate_workers", "gauge", "worker processes configured (MESHGATE_WORKERS)",
                seg->config->workers > 0 ? (uint64_t)seg->config->workers : 0);
    single_uint(b, "meshgate_workers_alive", "gauge", "worker processes running now",
                mg_scoreboard_alive(seg));
    family(b, "meshgate_worker_slots", "gauge", "scoreboard slots by state");
    for (uint32_t s = 0; s < MG_SLOT_STATE_COUNT; s++)
        sample_uint(b, "meshgate_worker_slots", "state", mg_slot_state_name(s), by_state[s]);
    single_uint(b, "meshgate_connections_open", "gauge",
                "client connections open now, over every worker", connections);
    family(b, "meshgate_worker_db_connections", "gauge",
           "SQLite connections a running worker has open: its loop's, and one per helper thread "
           "that has had heavy work");
    for (uint32_t i = 0; i < seg->slot_count; i++) {
        if (atomic_load(&seg->slots[i].pid) == 0)
            continue;
        char slot[16];
        snprintf(slot, sizeof slot, "%" PRIu32, i);
        sample_uint(b, "meshgate_worker_db_connections", "slot", slot,
                    atomic_load(&seg->slots[i].db_connections));
    }
}

static void write_server(struct mg_buf *b, const struct mg_segment *seg, int64_t now)
{
    const struct mg_shm_header *h = seg->header;
    int64_t uptime_ns = now - h->created_monotonic_ns;
    family(b, "meshgate_uptime_seconds", "gauge", "seconds since the master created the segment");
    sample_seconds(b, "meshgate_uptime_seconds", NULL, NULL,
                   uptime_ns > 0 ? (double)uptime_ns / (double)MG_NS_PER_SEC : 0.0);

    uint32_t current = atomic_load(&h->server_state);
    family(b, "meshgate_server_state", "gauge", "1 for the state the server is in, 0 otherwise");
    for (uint32_t s = MG_SERVER_STARTING; s <= MG_SERVER_STOPPED; s++)
        sample_uint(b, "meshgate_server_state", "state", mg_server_state_name(s), s == current);
    single_uint(b, "meshgate_generation", "gauge", "configuration generation: +1 on each SIGHUP",
                atomic_load(&h->generation));

    char version[MG_VERSION_MAX];
    memcpy(version, h->version, sizeof version);
    version[MG_VERSION_MAX - 1] = '\0';
    family(b, "meshgate_build_info", "gauge",
           "always 1; the version of the running binary and the commit it was built from");
    mg_buf_puts(b, "meshgate_build_info{version=\"");
    put_escaped(b, version, true);
    mg_buf_puts(b, "\",commit=\"");
    put_escaped(b, mg_build_commit(), true);
    mg_buf_puts(b, "\"} 1\n");
}

/* The live feed's ring and clients (its counters are group counters, above). */
static void write_live(struct mg_buf *b, const struct mg_segment *seg)
{
    struct mg_live_snapshot l;
    mg_live_ring_read(seg->live, &l);
    single_uint(b, "meshgate_live_clients_open", "gauge",
                "WebSocket clients of meshgate's own live feed open now", l.clients_open);
    single_uint(b, "meshgate_live_clients_cap", "gauge",
                "live feed clients allowed at once (MESHGATE_LIVE_CLIENTS, <= 3/4 of connections)",
                l.clients_cap);
    single_uint(b, "meshgate_live_ring_fill", "gauge",
                "events the live feed's ring holds now (at most its slots)", l.fill);
    single_uint(b, "meshgate_live_ring_slots", "gauge", "events the live feed's ring can hold",
                l.slots);
}

static void write_database(struct mg_buf *b, struct mg_env *env)
{
    struct mg_db_counts counts;
    bool up = mg_db_counts_get(env, &counts);
    single_uint(b, "meshgate_database_up", "gauge",
                "1 when the database answers (the row counts of /api/healthz), 0 when not", up);
    if (!up)
        return; /* no rows rather than made-up zeros */
    family(b, "meshgate_database_rows", "gauge",
           "rows in CoreScope's tables, counted at most once per 10 s for the whole group");
    sample_uint(b, "meshgate_database_rows", "table", "transmissions",
                (uint64_t)counts.transmissions);
    sample_uint(b, "meshgate_database_rows", "table", "observations",
                (uint64_t)counts.observations);
    sample_uint(b, "meshgate_database_rows", "table", "nodes", (uint64_t)counts.nodes);
    sample_uint(b, "meshgate_database_rows", "table", "observers", (uint64_t)counts.observers);
}

/* Only on a replica copy (docs/scale-out.md). */
static void write_replica(struct mg_buf *b, const struct mg_segment *seg, int32_t max_lag_ms)
{
    int64_t lag_ms;
    if (!mg_segment_replica_lag_ms(seg, mg_realtime_ns(), &lag_ms))
        return;
    family(b, "meshgate_replica_lag_seconds", "gauge",
           "age of the replica copy the oldest serving workers read: now minus the time the "
           "follower stamped on it");
    sample_seconds(b, "meshgate_replica_lag_seconds", NULL, NULL, (double)lag_ms / 1000.0);
    family(b, "meshgate_replica_max_lag_seconds", "gauge",
           "MESHGATE_REPLICA_MAX_LAG_MS: past it the agent port answers drain");
    sample_seconds(b, "meshgate_replica_max_lag_seconds", NULL, NULL, (double)max_lag_ms / 1000.0);
}

/* Each row of the gate table (shm/gates.h) has its writer here, metrics_ROW, called in the
 * table's order with the row's snapshot: a gate added to the table needs one. */
static void metrics_diag(struct mg_buf *b, const struct mg_env *env,
                         const struct mg_gate_snapshots *all)
{
    (void)env;
    const struct mg_diag_snapshot g = all->diag;
    single_uint(b, "meshgate_perf_mem_running", "gauge",
                "memory breakdowns (/api/perf?mem=1) running now", g.running);
    single_uint(b, "meshgate_perf_mem_peak", "gauge", "most memory breakdowns running at once",
                g.peak);
    family(b, "meshgate_perf_mem_cooldown_remaining_seconds", "gauge",
           "seconds until the diagnostic gate admits another memory breakdown");
    sample_seconds(b, "meshgate_perf_mem_cooldown_remaining_seconds", NULL, NULL,
                   (double)g.cooldown_remaining_ns / (double)MG_NS_PER_SEC);
#define WRITE_COUNTER(field, json, what)                                                           \
    single_uint(b, "meshgate_perf_mem_" #field "_total", "counter", what, g.field);
    MG_DIAG_COUNTER_LIST(WRITE_COUNTER)
#undef WRITE_COUNTER
}

/* What a FIFO gate's families say; the counters come from MG_FIFO_COUNTER_LIST. */
struct fifo_metrics {
    const char *prefix;      /* meshgate_reach_cold */
    const char *gate;        /* "the cold-scan gate" */
    const char *acquired_as; /* the name of the permits-given counter ("acquired") */
    const char *cap, *in_flight, *waiting, *queue_max, *peak; /* help of the gauges */
};

static void write_fifo_gate(struct mg_buf *b, const struct fifo_metrics *m,
                            const struct mg_fifo_snapshot *g)
{
    char name[96], help[160];
    const struct {
        const char *suffix, *help;
        uint64_t value;
    } gauges[] = {{"cap", m->cap, g->cap},
                  {"in_flight", m->in_flight, g->in_flight},
                  {"waiting", m->waiting, g->waiting},
                  {"queue_max", m->queue_max, g->queue_max},
                  {"peak", m->peak, g->peak}};
    for (size_t i = 0; i < sizeof gauges / sizeof gauges[0]; i++) {
        snprintf(name, sizeof name, "%s_%s", m->prefix, gauges[i].suffix);
        single_uint(b, name, "gauge", gauges[i].help, gauges[i].value);
    }
#define WRITE_COUNTER(field, json, what)                                                           \
    snprintf(name, sizeof name, "%s_%s_total", m->prefix,                                          \
             strcmp(#field, "acquired") == 0 ? m->acquired_as : #field);                           \
    snprintf(help, sizeof help, "%s: %s", m->gate, what);                                          \
    single_uint(b, name, "counter", help, g->field);
    MG_FIFO_COUNTER_LIST(WRITE_COUNTER)
#undef WRITE_COUNTER
}

static void metrics_cold(struct mg_buf *b, const struct mg_env *env,
                         const struct mg_gate_snapshots *all)
{
    (void)env;
    static const struct fifo_metrics m = {
        "meshgate_reach_cold",
        "the cold-scan gate",
        "acquired",
        "cold reach scans allowed at once (0: no limit)",
        "cold reach scans running now",
        "requests in the cold-scan line now (waiting for a permit or a build)",
        "places in the cold-scan line",
        "most cold reach scans running at once",
    };
    write_fifo_gate(b, &m, &all->cold);
}

static void metrics_anon_line(struct mg_buf *b, const struct mg_env *env,
                              const struct mg_gate_snapshots *all)
{
    (void)env;
    static const struct fifo_metrics m = {
        "meshgate_anon_line",
        "the anonymous line",
        "admitted",
        "anonymous heavy requests handled at once (0: no line)",
        "anonymous heavy requests holding a permit now",
        "anonymous heavy requests waiting in line now",
        "places in the anonymous line",
        "most anonymous heavy requests holding a permit at once",
    };
    write_fifo_gate(b, &m, &all->anon_line);
}

static void metrics_rate_limit(struct mg_buf *b, const struct mg_env *env,
                               const struct mg_gate_snapshots *all)
{
    (void)env;
    const struct mg_client_snapshot t = all->rate_limit;
    single_uint(b, "meshgate_anon_rate_per_minute", "gauge",
                "heavy requests a minute allowed to one anonymous client (0: no limit)",
                t.per_minute);
    single_uint(b, "meshgate_anon_rate_burst", "gauge",
                "heavy requests one anonymous client may make at once", t.burst);
    single_uint(b, "meshgate_anon_rate_clients_tracked", "gauge",
                "anonymous clients in the rate table that have used part of their burst",
                t.tracked);
#define WRITE_COUNTER(field, json, what)                                                           \
    single_uint(b, "meshgate_anon_rate_" #field "_total", "counter", what, t.field);
    MG_CLIENT_COUNTER_LIST(WRITE_COUNTER)
#undef WRITE_COUNTER
}

/* The upstream's gate, breaker and tunnels (its request and byte counters are
 * meshgate_upstream_*_total among the counters, its latency the "(upstream)" route). */
static void metrics_upstream(struct mg_buf *b, const struct mg_env *env,
                             const struct mg_gate_snapshots *all)
{
    (void)env;
    static const struct fifo_metrics m = {
        "meshgate_upstream_gate",
        "the upstream's gate",
        "admitted",
        "requests at the upstream at once (0: no cap)",
        "requests holding an upstream permit now",
        "requests waiting in the upstream's line now",
        "places in the upstream's line",
        "most requests holding an upstream permit at once",
    };
    write_fifo_gate(b, &m, &all->upstream);
    const struct mg_upstream_snapshot s = all->breaker;
    single_uint(b, "meshgate_upstream_tunnels_open", "gauge",
                "WebSocket tunnels to the upstream open now", s.tunnels_open);
    single_uint(b, "meshgate_upstream_tunnels_cap", "gauge",
                "WebSocket tunnels allowed at once (MESHGATE_UPSTREAM_WEBSOCKETS)", s.tunnel_cap);
    single_uint(b, "meshgate_upstream_anonymous_held", "gauge",
                "permits of the upstream gate anonymous requests hold now", s.anon_held);
    single_uint(b, "meshgate_upstream_anonymous_held_back_total", "counter",
                "tries of anonymous requests passed over in the upstream's line: the rest of the "
                "permits are reserved for signed-in clients",
                s.anon_held_back);
}

static void metrics_breaker(struct mg_buf *b, const struct mg_env *env,
                            const struct mg_gate_snapshots *all)
{
    (void)env;
    const struct mg_upstream_snapshot s = all->breaker;
    single_uint(b, "meshgate_upstream_breaker_open", "gauge",
                "1 while the upstream's breaker fails requests fast (open or half-open)",
                s.breaker_state != MG_BREAKER_CLOSED);
#define WRITE_COUNTER(field, json, what)                                                           \
    single_uint(b, "meshgate_upstream_breaker_" #field "_total", "counter", what, s.field);
    MG_BREAKER_COUNTER_LIST(WRITE_COUNTER)
#undef WRITE_COUNTER
}

static void metrics_conn_cap(struct mg_buf *b, const struct mg_env *env,
                             const struct mg_gate_snapshots *all)
{
    (void)env;
    const struct mg_conn_snapshot c = all->conn_cap;
    single_uint(b, "meshgate_conn_cap", "gauge",
                "connections one client address may hold open (0: no cap)", c.cap);
#define WRITE_COUNTER(field, json, what)                                                           \
    single_uint(b, "meshgate_conn_cap_" #field "_total", "counter", what, c.field);
    MG_CONN_COUNTER_LIST(WRITE_COUNTER)
#undef WRITE_COUNTER
}

/* Every gate, by walking the table. */
static void write_gates(struct mg_buf *b, const struct mg_env *env, int64_t now)
{
    struct mg_gate_snapshots all;
    mg_gates_read(env->seg, env->pid, true, now, &all);
#define WRITE_GATE(name, ...) metrics_##name(b, env, &all);
    MG_GATE_TABLE(WRITE_GATE)
#undef WRITE_GATE
}

static void write_cache(struct mg_buf *b, const struct mg_env *env, int64_t now)
{
    struct mg_cache_snapshot c;
    mg_result_cache_read(&env->seg->cache, env->pid, true, now, &c);
    single_uint(b, "meshgate_reach_cache_entries_ready", "gauge",
                "reach reports stored and not expired", c.ready);
#define WRITE_COUNTER(field, json, what)                                                           \
    single_uint(b, "meshgate_reach_cache_" #field "_total", "counter", what, c.field);
    MG_CACHE_COUNTER_LIST(WRITE_COUNTER)
#undef WRITE_COUNTER
}

/* Every shared table's numbers (table_stats.h): one family per number, a sample per table. */
static void write_tables(struct mg_buf *b, const struct mg_env *env)
{
    struct mg_table_snapshot t[MG_TABLE_COUNT];
    mg_table_stats_read(env->seg->cache.cache->tables, t);
#define WRITE_TABLE_STAT(field, json, type, what)                                                  \
    family(b, "meshgate_table_" #field, type, "shared tables: " what);                             \
    for (int i = 0; i < MG_TABLE_COUNT; i++)                                                       \
        sample_uint(b, "meshgate_table_" #field, "table", mg_table_names[i], t[i].field);
    MG_TABLE_STAT_LIST(WRITE_TABLE_STAT)
#undef WRITE_TABLE_STAT
}

enum mg_turn mg_handle_metrics(struct mg_env *env, const struct mg_request *req,
                               struct mg_response *res)
{
    (void)req;
    const struct mg_segment *seg = env->seg;
    int64_t now = mg_monotonic_ns();
    res->status = 200;
    res->content_type = "text/plain; version=0.0.4; charset=utf-8";
    res->no_store = true;
    struct mg_buf *b = &res->body;
    write_counters(b, seg);
    write_routes(b, seg);
    write_workers(b, seg);
    write_server(b, seg, now);
    write_gates(b, env, now);
    write_cache(b, env, now);
    write_tables(b, env);
    write_database(b, env);
    write_replica(b, env->seg, env->cfg->replica_max_lag_ms);
    write_live(b, seg);
    return MG_DONE;
}

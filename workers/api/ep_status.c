/* SPDX-License-Identifier: ISC */
/*
 * GET /server-status: the live state of the whole group at a glance, for a person, in the
 * manner of Apache's mod_status: the scoreboard (one character per worker, then a table),
 * each gate's occupancy and refusals, request and refusal rates over the last minute, and
 * per-route latency. Plain HTML that refreshes itself every 2 s; no script, so nothing can
 * fail in the browser. Read from the segment without taking any lock.
 */
#include "client_limit.h"
#include "clock.h"
#include "gate_diag.h"
#include "gate_fifo.h"
#include "gates.h"
#include "live_ring.h"
#include "rates.h"
#include "result_cache.h"
#include "router.h"
#include "scoreboard.h"
#include "stats.h"
#include "upstream_gate.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void text(struct mg_buf *b, const char *s, size_t max)
{
    for (size_t i = 0; i < max && s[i]; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '<')
            mg_buf_puts(b, "&lt;");
        else if (c == '>')
            mg_buf_puts(b, "&gt;");
        else if (c == '&')
            mg_buf_puts(b, "&amp;");
        else if (c == '"')
            mg_buf_puts(b, "&quot;");
        else if (c < 0x20 || c == 0x7f)
            mg_buf_printf(b, "\\x%02x", c);
        else
            mg_buf_putc(b, (char)c);
    }
}

static double ms(int64_t ns)
{
    return (double)ns / (double)MG_NS_PER_MS;
}

static void section_server(struct mg_buf *b, struct mg_segment *seg, int64_t now)
{
    const struct mg_shm_header *h = seg->header;
    int64_t up = (now - h->created_monotonic_ns) / MG_NS_PER_SEC;
    mg_buf_printf(b,
                  "<p>meshgate %s, master pid %d, <b>%s</b>, generation %u, up %" PRId64
                  " s, workers <b>%u</b> alive of %u, segment <code>",
                  h->version, (int)atomic_load(&h->master_pid),
                  mg_server_state_name(atomic_load(&h->server_state)), atomic_load(&h->generation),
                  up, mg_scoreboard_alive(seg), seg->slot_count);
    text(b, seg->config->shm_name, sizeof seg->config->shm_name);
    mg_buf_puts(b, "</code></p>\n<table><tr><th></th><th>last 5 s</th><th>last 60 s</th>"
                   "<th>since start</th></tr>\n");
    double r5 = 0, f5 = 0, r60 = 0, f60 = 0;
    bool have5 = mg_rates_per_second(seg, now / MG_NS_PER_SEC, 5, &r5, &f5);
    bool have60 = mg_rates_per_second(seg, now / MG_NS_PER_SEC, 60, &r60, &f60);
    char c5[32] = "–", c60[32] = "–", d5[32] = "–", d60[32] = "–";
    if (have5)
        snprintf(c5, sizeof c5, "%.1f/s", r5), snprintf(d5, sizeof d5, "%.1f/s", f5);
    if (have60)
        snprintf(c60, sizeof c60, "%.1f/s", r60), snprintf(d60, sizeof d60, "%.1f/s", f60);
    mg_buf_printf(b,
                  "<tr><td>requests</td><td id=\"rate\">%s</td><td>%s</td><td>%" PRIu64
                  "</td></tr>\n<tr><td>refused by a gate</td><td>%s</td><td>%s</td><td>%" PRIu64
                  "</td></tr>\n</table>\n",
                  c5, c60, mg_counter_get(seg, MG_CTR_REQUESTS), d5, d60, mg_rates_refusals(seg));
}

static void section_scoreboard(struct mg_buf *b, struct mg_segment *seg, int64_t now)
{
    mg_buf_puts(b, "<h2>Scoreboard</h2>\n<pre id=\"scoreboard\">");
    for (unsigned i = 0; i < seg->slot_count; i++)
        mg_buf_putc(b, mg_slot_state_char(atomic_load(&seg->slots[i].state)));
    mg_buf_puts(b, "</pre>\n<p class=\"legend\">");
    for (uint32_t st = 0; st < MG_SLOT_STATE_COUNT; st++)
        mg_buf_printf(b, "<code>%c</code> %s%s", mg_slot_state_char(st), mg_slot_state_name(st),
                      st + 1 < MG_SLOT_STATE_COUNT ? ", " : "");
    mg_buf_puts(b, "</p>\n<table id=\"workers\"><tr><th>worker</th><th>pid</th><th>state</th>"
                   "<th>spawns</th><th>connections</th><th>requests</th><th>heartbeat</th>"
                   "<th>current request</th></tr>\n");
    for (unsigned i = 0; i < seg->slot_count; i++) {
        struct mg_slot s;
        mg_slot_snapshot(&seg->slots[i], &s);
        mg_buf_printf(b,
                      "<tr><td>%u</td><td>%d</td><td>%s</td><td>%u</td><td>%u</td><td>%" PRIu64
                      "</td><td>%.0f ms ago</td><td>",
                      i, (int)atomic_load(&s.pid), mg_slot_state_name(atomic_load(&s.state)),
                      atomic_load(&s.spawns), atomic_load(&s.connections), atomic_load(&s.requests),
                      ms(now - atomic_load(&s.heartbeat_monotonic_ns)));
        int64_t since = atomic_load(&s.request_started_monotonic_ns);
        if (since) {
            text(b, s.method, sizeof s.method);
            mg_buf_putc(b, ' ');
            text(b, s.path, sizeof s.path);
            mg_buf_printf(b, " (%.0f ms)", ms(now - since));
        }
        mg_buf_puts(b, "</td></tr>\n");
    }
    mg_buf_puts(b, "</table>\n");
}

static void records(struct mg_buf *b, const char *what, const struct mg_fifo_gate *gate,
                    enum mg_fifo_records which, int64_t now)
{
    struct mg_fifo_record r[MG_FIFO_WAITERS_MAX];
    unsigned n = mg_fifo_gate_records(gate, getpid(), true, which, r, MG_FIFO_WAITERS_MAX);
    for (unsigned i = 0; i < n; i++) {
        mg_buf_printf(b, "<tr><td>%s</td><td>%u</td><td>%d</td><td>", what, r[i].slot, r[i].pid);
        text(b, r[i].key, sizeof r[i].key);
        mg_buf_printf(b, "</td><td>%.0f ms</td></tr>\n", ms(now - r[i].since_monotonic_ns));
    }
}

static void section_gates(struct mg_buf *b, struct mg_segment *seg, int64_t now)
{
    struct mg_fifo_snapshot cold, anon;
    mg_fifo_gate_read(seg->cold, getpid(), true, &cold);
    mg_fifo_gate_read(seg->anon, getpid(), true, &anon);
    const struct mg_fifo_snapshot *g = &cold;
    struct mg_cache_snapshot c;
    mg_result_cache_read(&seg->cache, getpid(), true, now, &c);
    mg_buf_puts(b, "<h2>Gates</h2>\n<table id=\"gates\"><tr><th>gate</th><th>cap</th>"
                   "<th>in use</th><th>waiting</th><th>peak</th><th>admitted</th>"
                   "<th>refused</th><th>reclaimed</th><th></th></tr>\n");
    char cap[16];
    if (g->cap)
        snprintf(cap, sizeof cap, "%u", g->cap);
    else
        snprintf(cap, sizeof cap, "unlimited");
    mg_buf_printf(b,
                  "<tr><td>cold reach builds</td><td>%s</td><td>%u</td><td>%u of %u</td><td>%u</td>"
                  "<td>%" PRIu64 "</td><td>%" PRIu64 " full, %" PRIu64 " timed out, %" PRIu64
                  " gone</td><td>%" PRIu64 "</td><td>cache: %u ready, %" PRIu64 " hits, %" PRIu64
                  " misses, %" PRIu64 " coalesced</td></tr>\n",
                  cap, g->in_flight, g->waiting, g->queue_max, g->peak, g->acquired,
                  g->refused_full, g->refused_timeout, g->cancelled, g->reclaimed, c.ready, c.hits,
                  c.misses, c.coalesced);
    const struct mg_fifo_snapshot *a = &anon;
    struct mg_client_snapshot t;
    mg_client_limit_read(&seg->clients, now, &t);
    char rate[96], acap[16];
    if (a->cap)
        snprintf(acap, sizeof acap, "%u", a->cap);
    else
        snprintf(acap, sizeof acap, "off");
    if (t.per_minute)
        snprintf(rate, sizeof rate, "%u a minute, burst %u", t.per_minute, t.burst);
    else
        snprintf(rate, sizeof rate, "off");
    mg_buf_printf(b,
                  "<tr><td>anonymous heavy requests</td><td>%s</td><td>%u</td><td>%u of %u</td>"
                  "<td>%u</td><td>%" PRIu64 "</td><td>%" PRIu64 " full, %" PRIu64
                  " timed out, %" PRIu64 " gone, %" PRIu64 " rate-limited</td><td>%" PRIu64
                  "</td><td>%" PRIu64 " signed-in bypassed; per-client limit: %s</td></tr>\n",
                  acap, a->in_flight, a->waiting, a->queue_max, a->peak, a->acquired,
                  a->refused_full, a->refused_timeout, a->cancelled,
                  mg_counter_get(seg, MG_CTR_ANON_RATE_LIMITED), a->reclaimed,
                  mg_counter_get(seg, MG_CTR_ANON_BYPASSED), rate);
    struct mg_diag_snapshot d;
    mg_diag_gate_read(seg->diag, getpid(), true, now, &d);
    mg_buf_printf(b,
                  "<tr><td>memory breakdown (/api/perf?mem=1)</td><td>%s</td><td>%u</td><td>–</td>"
                  "<td>%u</td><td>%" PRIu64 "</td><td>%" PRIu64 " busy, %" PRIu64
                  " cooling</td><td>%" PRIu64 "</td><td>cooldown %.0f ms left; last walk %.0f ms"
                  "</td></tr>\n",
                  d.enabled ? "1" : "off", d.running, d.peak, d.admitted, d.refused_busy,
                  d.refused_cooling, d.reclaimed, ms(d.cooldown_remaining_ns), ms(d.last_walk_ns));
    const struct mg_upstream_shm *u = seg->upstream;
    if (seg->config->upstream[0]) {
        struct mg_fifo_snapshot snap, *ug = &snap;
        mg_fifo_gate_read(&u->gate, getpid(), true, &snap);
        struct mg_upstream_snapshot us;
        mg_upstream_shm_read(u, now, &us);
        char ucap[16];
        if (ug->cap)
            snprintf(ucap, sizeof ucap, "%u", ug->cap);
        else
            snprintf(ucap, sizeof ucap, "unlimited");
        mg_buf_printf(
            b,
            "<tr id=\"upstream\"><td>upstream %s</td><td>%s</td><td>%u</td><td>%u of %u</td>"
            "<td>%u</td><td>%" PRIu64 "</td><td>%" PRIu64 " full, %" PRIu64 " timed out, %" PRIu64
            " breaker</td><td>%" PRIu64 "</td><td>breaker %s (opened %" PRIu64
            " times); %u of %u WebSockets; %" PRIu64 " bytes up, %" PRIu64 " down; %" PRIu64
            " 502, %" PRIu64 " 504</td></tr>\n",
            seg->config->upstream, ucap, ug->in_flight, ug->waiting, ug->queue_max, ug->peak,
            ug->acquired, ug->refused_full, ug->refused_timeout, us.fast_fails, ug->reclaimed,
            mg_breaker_state_name(us.breaker_state), us.opened, us.tunnels_open, us.tunnel_cap,
            mg_counter_get(seg, MG_CTR_UPSTREAM_BYTES_SENT),
            mg_counter_get(seg, MG_CTR_UPSTREAM_BYTES_RECEIVED),
            mg_counter_get(seg, MG_CTR_UPSTREAM_502), mg_counter_get(seg, MG_CTR_UPSTREAM_504));
    }
    mg_buf_puts(b, "</table>\n");
    struct mg_live_snapshot live;
    mg_live_ring_read(seg->live, &live);
    mg_buf_printf(b,
                  "<p id=\"live\">live feed: %u of %u clients (peak %u); ring %u of %u events, "
                  "%" PRIu64 " written, %" PRIu64 " clients dropped for falling behind</p>\n",
                  live.clients_open, live.clients_cap, live.clients_peak, live.fill, live.slots,
                  live.events, mg_counter_get(seg, MG_CTR_LIVE_DROPPED_SLOW));
    mg_buf_puts(b, "<table id=\"holders\"><tr><th></th><th>worker</th><th>pid</th><th>key</th>"
                   "<th>for</th></tr>\n");
    records(b, "holds a permit", seg->cold, MG_FIFO_HOLDERS, now);
    records(b, "waits in line", seg->cold, MG_FIFO_WAITERS, now);
    records(b, "waits for a build", seg->cold, MG_FIFO_FOLLOWERS, now);
    records(b, "holds an anonymous permit", seg->anon, MG_FIFO_HOLDERS, now);
    records(b, "waits in the anonymous line", seg->anon, MG_FIFO_WAITERS, now);
    records(b, "holds an upstream permit", &u->gate, MG_FIFO_HOLDERS, now);
    records(b, "waits in the upstream's line", &u->gate, MG_FIFO_WAITERS, now);
    mg_buf_puts(b, "</table>\n");
}

/* One counter in a row of the gate-counters table: ", name value" after the first. */
static void counter_cell(struct mg_buf *b, bool *first, const char *name, uint64_t value)
{
    mg_buf_printf(b, "%s%s %" PRIu64, *first ? "" : ", ", name, value);
    *first = false;
}

/* The row of one list: ROW(buffer, "gate", LIST, snapshot). */
#define COUNTER_CELL(field, json, what) counter_cell(b, &first, json, row_snapshot.field);
#define COUNTER_ROW(b, name, LIST, snapshot)                                                       \
    do {                                                                                           \
        bool first = true;                                                                         \
        const __typeof__(snapshot) row_snapshot = snapshot;                                        \
        mg_buf_printf(b, "<tr><td>%s</td><td>", name);                                             \
        LIST(COUNTER_CELL)                                                                         \
        mg_buf_puts(b, "</td></tr>\n");                                                            \
    } while (0)

/* Every counter of every gate, the cache and the rate table, from their lists (a counter
 * added to a list appears here by itself), named by their JSON keys as /api/perf names them. */
static void section_gate_counters(struct mg_buf *b, struct mg_segment *seg, int64_t now)
{
    int pid = getpid();
    mg_buf_puts(b, "<table id=\"gate-counters\"><tr><th>gate</th><th>counters</th></tr>\n");
    /* Every row of the gate table (shm/gates.h), under its name here; the upstream's rows only
     * with an upstream. */
    static const char *const title[MG_GATE_ROWS] = {
        [MG_GATE_ROW_conn_cap] = "connections per client",
        [MG_GATE_ROW_rate_limit] = "per-client rate",
        [MG_GATE_ROW_anon_line] = "anonymous heavy requests",
        [MG_GATE_ROW_cold] = "cold reach builds",
        [MG_GATE_ROW_diag] = "memory breakdown",
        [MG_GATE_ROW_upstream] = "upstream",
        [MG_GATE_ROW_breaker] = "upstream breaker",
    };
    struct mg_gate_snapshots all;
    mg_gates_read(seg, pid, true, now, &all);
    bool upstream = seg->config->upstream[0] != '\0';
#define GATE_ROW(name, sections, t, status, retry, refusal, counters, snapshot)                    \
    if (upstream ||                                                                                \
        (MG_GATE_ROW_##name != MG_GATE_ROW_upstream && MG_GATE_ROW_##name != MG_GATE_ROW_breaker)) \
        COUNTER_ROW(b, title[MG_GATE_ROW_##name], counters, all.name);
    MG_GATE_TABLE(GATE_ROW)
#undef GATE_ROW
    struct mg_cache_snapshot c;
    mg_result_cache_read(&seg->cache, pid, true, now, &c);
    COUNTER_ROW(b, "reach result cache", MG_CACHE_COUNTER_LIST, c);
    mg_buf_puts(b, "</table>\n");
}
#undef COUNTER_ROW
#undef COUNTER_CELL

/* Every shared table (table_stats.h): a row each, a column per number, named by their JSON
 * keys as /api/perf names them; a pass under way is background work, in its own column. */
static void section_tables(struct mg_buf *b, struct mg_segment *seg)
{
    struct mg_table_snapshot t[MG_TABLE_COUNT];
    mg_table_stats_read(seg->cache.cache->tables, t);
    mg_buf_puts(b, "<h2>Shared tables</h2>\n<table id=\"tables\"><tr><th>table</th>");
#define TABLE_HEAD(field, json, type, what) mg_buf_puts(b, "<th>" json "</th>");
    MG_TABLE_STAT_LIST(TABLE_HEAD)
#undef TABLE_HEAD
    mg_buf_puts(b, "<th></th></tr>\n");
    for (int i = 0; i < MG_TABLE_COUNT; i++) {
        mg_buf_printf(b, "<tr><td>%s</td>", mg_table_names[i]);
#define TABLE_CELL(field, json, type, what) mg_buf_printf(b, "<td>%" PRIu64 "</td>", t[i].field);
        MG_TABLE_STAT_LIST(TABLE_CELL)
#undef TABLE_CELL
        mg_buf_printf(b, "<td>%s</td></tr>\n",
                      t[i].building ? "pass under way (background work, no permit)" : "");
    }
    mg_buf_puts(b, "</table>\n");
}

static void section_routes(struct mg_buf *b, struct mg_segment *seg)
{
    mg_buf_puts(b, "<h2>Routes</h2>\n<table id=\"routes\"><tr><th>route</th><th>requests</th>"
                   "<th>p50</th><th>p95</th><th>max</th><th>5xx</th></tr>\n");
    for (unsigned i = 0; i < seg->route_count; i++) {
        const struct mg_route_stats *r = &seg->routes[i];
        uint64_t count = atomic_load(&r->count);
        if (!count)
            continue;
        mg_buf_puts(b, "<tr><td>");
        text(b, r->name, sizeof r->name);
        mg_buf_printf(b,
                      "</td><td>%" PRIu64 "</td><td>%.1f ms</td><td>%.1f ms</td><td>%.1f ms</td>"
                      "<td>%" PRIu64 "</td></tr>\n",
                      count, (double)mg_hist_quantile_us(r, 0.5) / 1000.0,
                      (double)mg_hist_quantile_us(r, 0.95) / 1000.0,
                      (double)atomic_load(&r->max_us) / 1000.0, atomic_load(&r->errors));
    }
    mg_buf_puts(b, "</table>\n");
}

enum mg_turn mg_handle_status(struct mg_env *env, const struct mg_request *req,
                              struct mg_response *res)
{
    (void)req;
    struct mg_segment *seg = env->seg;
    int64_t now = mg_monotonic_ns();
    struct mg_buf *b = &res->body;
    res->status = 200;
    res->content_type = "text/html; charset=utf-8";
    res->no_store = true;
    mg_buf_puts(b, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                   "<meta http-equiv=\"refresh\" content=\"2\">"
                   "<link rel=\"icon\" href=\"data:,\">"
                   "<title>meshgate status</title><style>"
                   "body{font:14px system-ui,sans-serif;margin:1.5em}"
                   "table{border-collapse:collapse;margin:.5em 0}"
                   "td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}"
                   "pre#scoreboard{font-size:20px;letter-spacing:2px}"
                   "</style></head><body>\n<h1>meshgate status</h1>\n");
    section_server(b, seg, now);
    section_scoreboard(b, seg, now);
    section_gates(b, seg, now);
    section_gate_counters(b, seg, now);
    section_tables(b, seg);
    section_routes(b, seg);
    mg_buf_puts(b, "</body></html>\n");
    return MG_DONE;
}

/* SPDX-License-Identifier: ISC */
/*
 * GET /api/perf (and /api/health, at the end): how the whole process group has been doing, read
 * from the shared segment (never from one worker's memory): request totals, per-route latency from
 * the shared histograms, the ring of slow requests, the group values' freshness, the database's
 * size and row counts, then meshgate's own sections (workers, gates, counters).
 *
 * Fixed order: uptime, totalRequests, avgMs, endpoints, slowQueries, cache, packetStore,
 * sqlite, [memoryBreakdown, memoryBreakdownNote], meshgateCache, workers, gates, counters.
 * endpoints and counters are maps: their keys are in bytewise order. Milliseconds have 1 decimal,
 * megabytes 2 (1 MB = 1048576 bytes), as CoreScope prints them.
 *
 * The figures are read without locks while workers keep adding to them, so a route's count
 * and its sum may be one request apart; every figure only grows.
 */
#include "build_info.h"
#include "clock.h"
#include "db_counts.h"
#include "gate_diag.h"
#include "gates_json.h"
#include "admission.h"
#include "jobs.h"
#include "live_ring.h"
#include "log.h"
#include "result_cache.h"
#include "perf_mem.h"
#include "json.h"
#include "params.h"
#include "router.h"
#include "scoreboard.h"
#include "shared_value.h"
#include "stats.h"
#include "upstream_gate.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BYTES_PER_MB (1024.0 * 1024.0)

static void kv_ms(struct mg_json *j, const char *key, double us)
{
    mg_json_key(j, key);
    mg_json_double_rounded(j, us / 1000.0, 1);
}

static void kv_mb(struct mg_json *j, const char *key, double bytes)
{
    mg_json_key(j, key);
    mg_json_double_rounded(j, bytes / BYTES_PER_MB, 2);
}

/* "2026-05-17T18:13:27.081Z" */
static void rfc3339_ms(int64_t realtime_ns, char *out, size_t cap)
{
    time_t s = (time_t)(realtime_ns / MG_NS_PER_SEC);
    int ms = (int)(realtime_ns % MG_NS_PER_SEC / MG_NS_PER_MS);
    struct tm tm;
    gmtime_r(&s, &tm);
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, cap, "%s.%03dZ", base, ms);
}

static uint64_t load(const _Atomic uint64_t *v)
{
    return atomic_load_explicit(v, memory_order_relaxed);
}

struct named_route {
    char name[MG_ROUTE_NAME_MAX];
    const struct mg_route_stats *stats;
};

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct named_route *)a)->name, ((const struct named_route *)b)->name);
}

/* avgMs: the mean time of every request the group answered (tunnels are not requests). */
static void write_routes_total(struct mg_json *j, const struct mg_segment *seg)
{
    uint64_t all_count = 0, all_sum_us = 0;
    for (uint32_t i = 0; i < seg->route_count && i < MG_ROUTES_MAX; i++) {
        if (i == MG_ROUTE_TUNNEL)
            continue;
        all_count += load(&seg->routes[i].count);
        all_sum_us += load(&seg->routes[i].sum_us);
    }
    kv_ms(j, "avgMs", all_count ? (double)all_sum_us / (double)all_count : 0.0);
}

/* "tunnels": how long WebSocket tunnels stayed open (kept apart from the endpoints). */
static void write_tunnels(struct mg_json *j, const struct mg_segment *seg)
{
    if (MG_ROUTE_TUNNEL >= seg->route_count)
        return;
    const struct mg_route_stats *r = &seg->routes[MG_ROUTE_TUNNEL];
    uint64_t count = load(&r->count);
    mg_json_key(j, "tunnels");
    mg_json_object_begin(j);
    mg_json_kv_uint(j, "count", count);
    kv_ms(j, "avgMs", count ? (double)load(&r->sum_us) / (double)count : 0.0);
    kv_ms(j, "p50Ms", (double)mg_hist_quantile_us(r, 0.50));
    kv_ms(j, "p95Ms", (double)mg_hist_quantile_us(r, 0.95));
    kv_ms(j, "maxMs", (double)load(&r->max_us));
    mg_json_object_end(j);
}

/* avgMs over every route, then "endpoints": the routes that have answered anything. */
static void write_routes(struct mg_json *j, const struct mg_segment *seg)
{
    struct named_route routes[MG_ROUTES_MAX];
    unsigned n = 0;
    write_routes_total(j, seg);
    for (uint32_t i = 0; i < seg->route_count && i < MG_ROUTES_MAX; i++) {
        const struct mg_route_stats *r = &seg->routes[i];
        uint64_t count = load(&r->count);
        if (count == 0 || i == MG_ROUTE_TUNNEL)
            continue;
        memcpy(routes[n].name, r->name, MG_ROUTE_NAME_MAX);
        routes[n].name[MG_ROUTE_NAME_MAX - 1] = '\0';
        routes[n].stats = r;
        n++;
    }

    qsort(routes, n, sizeof routes[0], by_name);
    mg_json_key(j, "endpoints");
    mg_json_object_begin(j);
    for (unsigned i = 0; i < n; i++) {
        const struct mg_route_stats *r = routes[i].stats;
        uint64_t count = load(&r->count);
        mg_json_key(j, routes[i].name);
        mg_json_object_begin(j);
        mg_json_kv_uint(j, "count", count);
        kv_ms(j, "avgMs", (double)load(&r->sum_us) / (double)count);
        kv_ms(j, "p50Ms", (double)mg_hist_quantile_us(r, 0.50));
        kv_ms(j, "p95Ms", (double)mg_hist_quantile_us(r, 0.95));
        kv_ms(j, "maxMs", (double)load(&r->max_us));
        mg_json_object_end(j);
    }
    mg_json_object_end(j);
}

static void write_slow_entry(struct mg_json *j, const struct mg_slow_entry *e)
{
    char when[40];
    rfc3339_ms(e->time_realtime_ns, when, sizeof when);
    mg_json_object_begin(j);
    mg_json_kv_string(j, "path", e->path);
    kv_ms(j, "ms", (double)e->duration_us);
    mg_json_kv_string(j, "time", when);
    mg_json_kv_uint(j, "status", e->status);
    mg_json_object_end(j);
}

static void write_slow(struct mg_json *j, const struct mg_segment *seg)
{
    struct mg_slow_entry slow[MG_SLOW_MAX];
    unsigned n = mg_slow_snapshot(seg, slow); /* newest first */
    mg_json_key(j, "slowQueries");
    mg_json_array_begin(j);
    for (unsigned i = 0; i < n; i++)
        write_slow_entry(j, &slow[i]);
    mg_json_array_end(j);
}

/*
 * There is no response cache yet: what the group does cache are its group values, so this
 * says how often each was recomputed and how old the one being served is.
 */
static void write_group_value(struct mg_json *j, const char *key, struct mg_shared_value *v,
                              int64_t interval_ns, int64_t now_ns)
{
    int64_t computed = atomic_load_explicit(&v->computed_monotonic_ns, memory_order_relaxed);
    mg_json_key(j, key);
    mg_json_object_begin(j);
    mg_json_kv_uint(j, "refreshes", atomic_load_explicit(&v->refreshes, memory_order_relaxed));
    if (computed)
        mg_json_kv_int(j, "ageMs", (now_ns - computed) / MG_NS_PER_MS);
    else
        mg_json_kv_null(j, "ageMs");
    mg_json_kv_int(j, "intervalMs", interval_ns / MG_NS_PER_MS);
    mg_json_object_end(j);
}

/*
 * "cache" in the shape CoreScope's Perf page reads (size, hits, misses, staleHits,
 * recomputes, hitRate), filled from what meshgate caches, as the nearest meaning:
 * - size: reports ready in the shared result cache, plus the group values that hold one;
 * - hits: answers from either while fresh; staleHits: answers from a group value past its
 *   interval while another worker refreshed it (CoreScope's stale-while-revalidate);
 * - misses: result-cache misses plus group-value computations; recomputes: reports stored
 *   plus group-value computations;
 * - hitRate: percent of answers served from a cache (fresh or stale), 1 decimal.
 */
void mg_perf_cache_figures(struct mg_segment *seg, struct mg_perf_cache *out)
{
    int64_t now = mg_monotonic_ns();
    struct mg_cache_snapshot c;
    mg_result_cache_read(&seg->cache, getpid(), true, now, &c);
    uint64_t size = c.ready;
    uint64_t refreshes = 0;
    for (int id = 0; id < MG_VALUE_COUNT; id++) {
        struct mg_shared_value *v = &seg->values[id];
        size += atomic_load_explicit(&v->computed_monotonic_ns, memory_order_relaxed) != 0;
        refreshes += atomic_load_explicit(&v->refreshes, memory_order_relaxed);
    }
    *out = (struct mg_perf_cache){
        .size = size,
        .hits = c.hits + mg_counter_get(seg, MG_CTR_GROUP_VALUE_HITS),
        .stale = mg_counter_get(seg, MG_CTR_GROUP_VALUE_STALE_HITS),
        .misses = c.misses + refreshes,
        .recomputes = c.stored + refreshes,
    };
}

static void write_cache(struct mg_json *j, struct mg_segment *seg, const char *size_key)
{
    struct mg_perf_cache c;
    mg_perf_cache_figures(seg, &c);
    uint64_t served = c.hits + c.stale;

    mg_json_key(j, "cache");
    mg_json_object_begin(j);
    mg_json_kv_uint(j, size_key, c.size);
    mg_json_kv_uint(j, "hits", c.hits);
    mg_json_kv_uint(j, "misses", c.misses);
    mg_json_kv_uint(j, "staleHits", c.stale);
    mg_json_kv_uint(j, "recomputes", c.recomputes);
    mg_json_key(j, "hitRate");
    mg_json_double_rounded(
        j, served + c.misses ? 100.0 * (double)served / (double)(served + c.misses) : 0.0, 1);
    mg_json_object_end(j);
}

/* meshgate's own caches in detail: each group value, and the shared result cache. */
static void write_meshgate_cache(struct mg_json *j, struct mg_segment *seg)
{
    int64_t now = mg_monotonic_ns();
    struct mg_cache_snapshot c;
    mg_result_cache_read(&seg->cache, getpid(), true, now, &c);
    mg_json_key(j, "meshgateCache");
    mg_json_object_begin(j);
    write_group_value(j, "stats", &seg->values[MG_VALUE_STATS], MG_STATS_INTERVAL_NS, now);
    write_group_value(j, "dbCounts", &seg->values[MG_VALUE_DB_COUNTS], MG_DB_COUNTS_INTERVAL_NS,
                      now);
    mg_json_kv_uint(j, "groupValueHits", mg_counter_get(seg, MG_CTR_GROUP_VALUE_HITS));
    mg_json_kv_uint(j, "groupValueStaleHits", mg_counter_get(seg, MG_CTR_GROUP_VALUE_STALE_HITS));
    mg_json_key(j, "results");
    mg_json_object_begin(j);
    mg_json_kv_uint(j, "entries", c.ready);
    mg_json_kv_uint(j, "capacity", c.entries);
    mg_json_kv_uint(j, "building", c.building);
#define COUNTER_JSON(field, json, what) mg_json_kv_uint(j, json, c.field);
    MG_CACHE_COUNTER_LIST(COUNTER_JSON)
#undef COUNTER_JSON
    mg_json_object_end(j);
    mg_json_object_end(j);
}

/* A PRAGMA's number, or -1. */
static int64_t pragma(struct mg_db *db, const char *sql)
{
    return mg_db_scalar(db, sql);
}

static void write_sqlite(struct mg_json *j, struct mg_env *env, const struct mg_db_counts *counts)
{
    int64_t page_size = pragma(env->db, "PRAGMA page_size");
    int64_t page_count = pragma(env->db, "PRAGMA page_count");
    int64_t freelist = pragma(env->db, "PRAGMA freelist_count");
    char wal_path[MG_PATH_MAX + 8];
    snprintf(wal_path, sizeof wal_path, "%s-wal", env->cfg->db_path);
    struct stat st;
    double wal_bytes = stat(wal_path, &st) == 0 ? (double)st.st_size : 0.0;

    mg_json_key(j, "sqlite");
    mg_json_object_begin(j);
    if (page_size > 0 && page_count >= 0)
        kv_mb(j, "dbSizeMB", (double)page_count * (double)page_size);
    else
        mg_json_kv_null(j, "dbSizeMB");
    kv_mb(j, "walSizeMB", wal_bytes);
    if (page_size > 0 && freelist >= 0)
        kv_mb(j, "freelistMB", (double)freelist * (double)page_size);
    else
        mg_json_kv_null(j, "freelistMB");
    mg_json_key(j, "rows");
    if (counts) {
        mg_json_object_begin(j);
        mg_json_kv_int(j, "transmissions", counts->transmissions);
        mg_json_kv_int(j, "observations", counts->observations);
        mg_json_kv_int(j, "nodes", counts->nodes);
        mg_json_kv_int(j, "observers", counts->observers);
        mg_json_object_end(j);
    } else {
        mg_json_null(j); /* the database did not answer; the log says why */
    }
    mg_json_object_end(j);
}

static void write_workers(struct mg_json *j, struct mg_env *env)
{
    struct mg_segment *seg = env->seg;
    mg_json_key(j, "workers");
    mg_json_object_begin(j);
    mg_json_kv_int(j, "configured", env->cfg->workers);
    mg_json_kv_uint(j, "alive", mg_scoreboard_alive(seg));
    mg_json_key(j, "slots");
    mg_json_array_begin(j);
    for (uint32_t i = 0; i < seg->slot_count; i++) {
        struct mg_slot s;
        mg_slot_snapshot(&seg->slots[i], &s);
        int32_t pid = atomic_load(&s.pid);
        mg_json_object_begin(j);
        mg_json_kv_uint(j, "slot", i);
        if (pid > 0)
            mg_json_kv_int(j, "pid", pid);
        else
            mg_json_kv_null(j, "pid");
        mg_json_kv_string(j, "state", mg_slot_state_name(atomic_load(&s.state)));
        mg_json_kv_uint(j, "requests", atomic_load(&s.requests));
        mg_json_kv_uint(j, "requestsAllSpawns", atomic_load(&s.requests_all));
        mg_json_kv_uint(j, "connections", atomic_load(&s.connections));
        mg_json_kv_uint(j, "spawns", atomic_load(&s.spawns));
        mg_json_object_end(j);
    }
    mg_json_array_end(j);
    mg_json_object_end(j);
}

static int by_counter_name(const void *a, const void *b)
{
    return strcmp(mg_counter_names[*(const int *)a], mg_counter_names[*(const int *)b]);
}

static void write_counters(struct mg_json *j, const struct mg_segment *seg)
{
    int order[MG_CTR_COUNT];
    for (int i = 0; i < MG_CTR_COUNT; i++)
        order[i] = i;
    qsort(order, MG_CTR_COUNT, sizeof order[0], by_counter_name);
    mg_json_key(j, "counters");
    mg_json_object_begin(j);
    for (int i = 0; i < MG_CTR_COUNT; i++)
        mg_json_kv_uint(j, mg_counter_names[order[i]],
                        mg_counter_get(seg, (enum mg_counter)order[i]));
    mg_json_object_end(j);
}

/* The parameters, declared once (params.h). CoreScope's handlePerf: only mem=1 exactly asks
 * for the memory breakdown; anything else is plain /api/perf. */
struct perf_params {
    int mem;
};
static const char *const one_only[] = {"1", NULL};
static const struct mg_param perf_param_list[] = {
    {.name = "mem",
     .kind = MG_PARAM_CHOICE,
     .offset = offsetof(struct perf_params, mem),
     .choices = one_only,
     .def = -1,
     .corescope = "== \"1\", else none"},
};
const struct mg_param_table mg_perf_params = MG_PARAM_TABLE(struct perf_params, perf_param_list);

static bool wants_memory_breakdown(const struct mg_request *req)
{
    struct perf_params own;
    const struct perf_params *p = mg_params_get(&mg_perf_params, req, NULL, &own);
    return p && p->mem == 0; /* never NULL p: the table refuses nothing */
}

/* A walk the diagnostic gate is about to refuse (one runs, or the cooldown) costs nothing:
 * it is refused at once with its own Retry-After rather than made to wait in the anonymous
 * line for a permit it would not use. */
bool mg_perf_is_heavy(struct mg_env *env, const struct mg_request *req)
{
    return wants_memory_breakdown(req) && mg_admission_diag_open(env);
}

/*
 * ?mem=1: the diagnostic walk behind the diagnostic gate. Admission is the very first thing
 * (invariant 4): a refusal answers 429 without a single database call. The walk runs on the
 * worker's helper thread while the request is parked, so the worker keeps answering its
 * other connections. The permit is given back as soon as the walk ends, before any of the
 * response is written, so a client that reads slowly holds nothing.
 */
struct walk_job {
    struct mg_job job; /* first: the thread hands this pointer back */
    struct mg_perf_mem m;
    int rc;
    bool busy;
    int64_t ended_ns;
    char err[256];
};

struct walk_state {
    int step;                 /* 0: ask the gate; 1: hand the walk over; 2: walking */
    struct mg_gate_pass diag; /* at the diagnostic gate (admission.c) */
    int64_t started_ns;
    struct walk_job *job;
};
_Static_assert(sizeof(struct walk_state) <= MG_PARK_BYTES, "the state fits a park");

static void run_walk(struct mg_job *job, struct mg_db *db)
{
    struct walk_job *w = (struct walk_job *)job;
    w->rc = mg_perf_mem_walk(db, &w->m, w->err, sizeof w->err);
    w->busy = w->rc != 0 && (sqlite3_errcode(db->conn) & 0xff) == SQLITE_BUSY;
    w->ended_ns = mg_monotonic_ns();
}

/*
 * Returns true when fragment holds the value of "memoryBreakdown"; false when res already
 * holds the answer (a refusal, an error: *turn MG_DONE) or the request is parked (MG_PARK).
 */
static bool memory_breakdown(struct mg_env *env, const struct mg_request *req,
                             struct mg_response *res, struct mg_buf *fragment, enum mg_turn *turn)
{
    struct walk_state *st = (struct walk_state *)req->park->state;
    if (st->step == 0) {
        /* Refused at once (busy, cooling) before any database work; parked, without the
         * permit, while no helper can start the walk. */
        enum mg_admission_result r =
            mg_admission_pass(&mg_gate_diag, &st->diag, env, req, NULL, NULL, res);
        if (r != MG_ADMISSION_RUN) {
            *turn = r == MG_ADMISSION_PARKED ? MG_PARK : MG_DONE;
            return false;
        }
        st->job = calloc(1, sizeof *st->job);
        if (!st->job) {
            mg_admission_release(&mg_gate_diag, &st->diag, env, req, mg_monotonic_ns(), 0);
            mg_response_error(res, 500, "out of memory");
            return false;
        }
        st->job->job.run = run_walk;
        st->job->job.owner = req->park;
        st->job->job.under_permit = true;
        st->started_ns = mg_monotonic_ns();
        st->step = 1;
    }
    if (st->step == 1) {
        if (!mg_jobs_hand_over(env->jobs, &st->job->job, env->db)) {
            *turn = mg_park_until(req, 0); /* no thread can take it now: asked when one frees */
            return false;
        }
        st->step = 2;
    }
    if (!atomic_load(&st->job->job.done)) {
        *turn = mg_park_until(req, 0); /* the helper's eventfd says when it is done */
        return false;
    }
    struct walk_job *w = st->job;
    st->job = NULL;
    mg_admission_release(&mg_gate_diag, &st->diag, env, req, w->ended_ns,
                         w->ended_ns - st->started_ns);
    bool ok = w->rc == 0;
    if (!ok) {
        mg_log(MG_LOG_ERROR, "memory breakdown: %s", w->err);
        if (w->busy)
            mg_response_refuse(res, 503, 1, "the database is busy; ask again after Retry-After");
        else
            mg_response_error(res, 500, "the memory breakdown failed: %s", w->err);
    } else {
        struct mg_json j;
        mg_json_init(&j, fragment);
        mg_perf_mem_json(&j, &w->m);
    }
    free(w);
    return ok;
}

/* Every shared table's numbers (table_stats.h), by table. */
static void write_tables(struct mg_json *j, const struct mg_segment *seg)
{
    struct mg_table_snapshot t[MG_TABLE_COUNT];
    mg_table_stats_read(seg->cache.cache->tables, t);
    mg_json_key(j, "tables");
    mg_json_object_begin(j);
    for (int i = 0; i < MG_TABLE_COUNT; i++) {
        mg_json_key(j, mg_table_names[i]);
        mg_json_object_begin(j);
#define TABLE_JSON(field, json, type, what) mg_json_kv_uint(j, json, t[i].field);
        MG_TABLE_STAT_LIST(TABLE_JSON)
#undef TABLE_JSON
        mg_json_object_end(j);
    }
    mg_json_object_end(j);
}

static enum mg_turn breakdown_step(struct mg_env *env, const struct mg_request *req,
                                   struct mg_response *res);

/* The answer, with the memory breakdown when walk: a request that parks for it (in the
 * diagnostic gate's line, for a thread, for its walk) continues at breakdown_step. */
static enum mg_turn perf_answer(struct mg_env *env, const struct mg_request *req,
                                struct mg_response *res, bool walk)
{
    struct mg_buf breakdown;
    mg_buf_init(&breakdown);
    enum mg_turn turn = MG_DONE;
    if (walk && !memory_breakdown(env, req, res, &breakdown, &turn)) {
        mg_buf_free(&breakdown);
        return turn == MG_PARK ? mg_park_at(req, breakdown_step, req->park->wait.until_ns) : turn;
    }
    struct mg_db_counts counts;
    bool have_counts = mg_db_counts_current(env, &counts);
    struct mg_segment *seg = env->seg;
    int64_t uptime_ns = mg_monotonic_ns() - seg->header->created_monotonic_ns;

    mg_response_json(res, 200);
    struct mg_json j;
    mg_json_init(&j, &res->body);
    mg_json_object_begin(&j);
    mg_json_kv_int(&j, "uptime", uptime_ns > 0 ? uptime_ns / MG_NS_PER_SEC : 0);
    mg_json_kv_uint(&j, "totalRequests", mg_counter_get(seg, MG_CTR_REQUESTS));
    write_routes(&j, seg);
    write_slow(&j, seg);
    write_cache(&j, seg, "size");
    mg_json_kv_null(&j, "packetStore"); /* there is no in-memory store */
    write_sqlite(&j, env, have_counts ? &counts : NULL);
    if (breakdown.len > 0) {
        mg_json_key(&j, "memoryBreakdown");
        mg_json_raw(&j, breakdown.data, breakdown.len);
        mg_json_kv_string(&j, "memoryBreakdownNote", mg_perf_mem_note);
    }
    write_meshgate_cache(&j, seg);
    write_tables(&j, seg);
    write_workers(&j, env);
    mg_json_key(&j, "gates");
    mg_gates_json(&j, seg, true, req->admin);
    write_counters(&j, seg);
    write_tunnels(&j, seg);
    mg_json_object_end(&j);
    mg_buf_putc(&res->body, '\n');
    mg_buf_free(&breakdown);
    return MG_DONE;
}

/* A later turn of ?mem=1, at its walk's step (its state in the park). */
static enum mg_turn breakdown_step(struct mg_env *env, const struct mg_request *req,
                                   struct mg_response *res)
{
    return perf_answer(env, req, res, true);
}

enum mg_turn mg_handle_perf(struct mg_env *env, const struct mg_request *req,
                            struct mg_response *res)
{
    return perf_answer(env, req, res, wants_memory_breakdown(req));
}

/* Resident memory of one process in bytes (/proc/PID/statm), 0 when it is gone. */
static uint64_t rss_bytes(int pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/statm", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    unsigned long long size_pages = 0, resident_pages = 0;
    int got = fscanf(f, "%llu %llu", &size_pages, &resident_pages);
    fclose(f);
    return got == 2 ? (uint64_t)resident_pages * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
}

/*
 * GET /api/health, in CoreScope's shape (fixed order: status, engine, version, commit,
 * buildTime, uptime, uptimeHuman, memory, eventLoop, cache, websocket, packetStore, perf),
 * with what meshgate really knows:
 * - engine "meshgate"; uptime from the segment's creation (the master's start);
 * - memory: rss, the resident memory of the master and every live worker, in MB (pages the
 *   processes share, such as the segment, count in each); no garbage-collected heap, so no
 *   heapUsed, heapTotal or external;
 * - eventLoop: {} (a worker's loop lag is not measured; the object stays so the Perf page
 *   renders);
 * - cache: as /api/perf's, with CoreScope's "entries" for its size;
 * - websocket.clients: the live feed's clients and the tunnels to the upstream's; packetStore
 *   null, as in /api/perf;
 * - perf: the group's requests and mean time, the slow requests in the ring (over 100 ms) and
 *   the last 5 of them, oldest first.
 */
enum mg_turn mg_handle_health(struct mg_env *env, const struct mg_request *req,
                              struct mg_response *res)
{
    (void)req;
    struct mg_segment *seg = env->seg;
    int64_t uptime_ns = mg_monotonic_ns() - seg->header->created_monotonic_ns;
    int64_t uptime_s = uptime_ns > 0 ? uptime_ns / MG_NS_PER_SEC : 0;
    uint64_t rss = rss_bytes(atomic_load(&seg->header->master_pid));
    for (uint32_t i = 0; i < seg->slot_count; i++) {
        int32_t pid = atomic_load(&seg->slots[i].pid);
        uint32_t state = atomic_load(&seg->slots[i].state);
        if (pid > 0 && state != MG_SLOT_DEAD && state != MG_SLOT_EMPTY)
            rss += rss_bytes(pid);
    }
    char version[MG_VERSION_MAX + 1];
    snprintf(version, sizeof version, "%.*s", MG_VERSION_MAX, seg->header->version);
    char human[64];
    snprintf(human, sizeof human, "%lldh %lldm", (long long)(uptime_s / 3600),
             (long long)(uptime_s % 3600 / 60));

    mg_response_json(res, 200);
    struct mg_json j;
    mg_json_init(&j, &res->body);
    mg_json_object_begin(&j);
    mg_json_kv_string(&j, "status", "ok");
    mg_json_kv_string(&j, "engine", "meshgate");
    mg_json_kv_string(&j, "version", version);
    mg_json_kv_string(&j, "commit", mg_build_commit());
    mg_json_kv_string(&j, "buildTime", mg_build_time());
    mg_json_kv_int(&j, "uptime", uptime_s);
    mg_json_kv_string(&j, "uptimeHuman", human);
    mg_json_key(&j, "memory");
    mg_json_object_begin(&j);
    mg_json_kv_uint(&j, "rss", rss / (1024 * 1024));
    mg_json_object_end(&j);
    mg_json_key(&j, "eventLoop");
    mg_json_object_begin(&j);
    mg_json_object_end(&j);
    write_cache(&j, seg, "entries");
    /* CoreScope's hub's clients: the live feed's, and the tunnels to the upstream's. */
    mg_json_key(&j, "websocket");
    mg_json_object_begin(&j);
    mg_json_kv_uint(&j, "clients",
                    (uint64_t)atomic_load(&seg->live->clients_open) +
                        atomic_load(&seg->upstream->tunnels_open));
    mg_json_object_end(&j);
    mg_json_kv_null(&j, "packetStore");

    mg_json_key(&j, "perf");
    mg_json_object_begin(&j);
    mg_json_kv_uint(&j, "totalRequests", mg_counter_get(seg, MG_CTR_REQUESTS));
    write_routes_total(&j, seg);
    struct mg_slow_entry slow[MG_SLOW_MAX];
    unsigned n = mg_slow_snapshot(seg, slow); /* newest first */
    mg_json_kv_uint(&j, "slowQueries", n);
    mg_json_key(&j, "recentSlow");
    mg_json_array_begin(&j);
    for (unsigned i = n < 5 ? n : 5; i-- > 0;)
        write_slow_entry(&j, &slow[i]);
    mg_json_array_end(&j);
    mg_json_object_end(&j);
    mg_json_object_end(&j);
    mg_buf_putc(&res->body, '\n');
    return MG_DONE;
}

/*
 * GET /api/mqtt/status: CoreScope's server reads it from a file its ingestor writes about its
 * MQTT connections; meshgate reads only the database, so it answers what CoreScope answers
 * when that file is absent: no sources, no sample time. The Observers page shows no MQTT panel
 * rows then, and no error.
 */
enum mg_turn mg_handle_mqtt_status(struct mg_env *env, const struct mg_request *req,
                                   struct mg_response *res)
{
    (void)env;
    (void)req;
    mg_response_json(res, 200);
    mg_buf_puts(&res->body, "{\"sources\":[],\"sampleAt\":\"\"}\n");
    return MG_DONE;
}

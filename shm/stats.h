/* SPDX-License-Identifier: ISC */
/*
 * stats: group-wide counters, per-route latency histograms and the ring of slow requests,
 * all in the shared segment and all updated with atomic adds by every worker, so the
 * figures describe the whole process group and survive a worker's restart.
 *
 * Counters only grow (invariant 8). Histograms have MG_HIST_SUB_BUCKETS buckets per power
 * of two of microseconds, so a percentile read from them is within 1/8 (12.5 %) of the
 * true value; the maximum is exact.
 */
#ifndef MESHGATE_STATS_H
#define MESHGATE_STATS_H

#include <stdatomic.h>
#include <stdint.h>

struct mg_segment; /* segment_layout.h: the segment lays these records out, so no include */

/* Group-wide counters. Add a name to MG_COUNTER_LIST and it appears everywhere. */
#define MG_COUNTER_LIST(X)                                                                         \
    X(REQUESTS, "requests", "requests answered")                                                   \
    X(RESPONSES_2XX, "responses_2xx", "responses with a 2xx status")                               \
    X(RESPONSES_3XX, "responses_3xx", "responses with a 3xx status")                               \
    X(RESPONSES_4XX, "responses_4xx",                                                              \
      "responses with a 4xx status, and the 501 and 505 that refuse what a client sent")           \
    X(RESPONSES_5XX, "responses_5xx", "responses with a 5xx status that the server caused")        \
    X(BYTES_SENT, "bytes_sent", "bytes of responses written to sockets")                           \
    X(CONNECTIONS_ACCEPTED, "connections_accepted", "connections accepted")                        \
    X(CONNECTIONS_CLOSED, "connections_closed", "connections closed")                              \
    X(CONNECTIONS_OVER_CLIENT_CAP, "connections_over_client_cap",                                  \
      "connections closed at once because their address had MESHGATE_MAX_CONNS_PER_CLIENT open")   \
    X(HEADER_TIMEOUTS, "header_timeouts", "connections cut for a request head not sent in time")   \
    X(IDLE_TIMEOUTS, "idle_timeouts", "kept-alive connections closed for being idle")              \
    X(SEND_TIMEOUTS, "send_timeouts", "connections cut for a response not read in time")           \
    X(UNREAD_REFUSED, "unread_refused",                                                            \
      "answers replaced by 503 because their client left MESHGATE_MAX_UNREAD_BYTES_PER_CLIENT "    \
      "unread")                                                                                    \
    X(REFUSALS_PACED, "refusals_paced",                                                            \
      "refusals held before they were written, their connection not read meanwhile, because "      \
      "their client address was refused again and again (MESHGATE_REFUSAL_PACE_MAX_MS)")           \
    X(BAD_REQUESTS, "bad_requests", "requests refused as malformed or too large")                  \
    X(ACCEPT_ERRORS, "accept_errors", "failed accept calls (other than no connection pending)")    \
    X(WORKER_SPAWNS, "worker_spawns", "worker processes started")                                  \
    X(WORKER_EXITS, "worker_exits", "worker processes that exited")                                \
    X(WORKER_CRASHES, "worker_crashes", "workers that died by a signal or exited non-zero")        \
    X(WORKER_SLOTS_RECLAIMED, "worker_slots_reclaimed", "slots of dead workers cleaned up")        \
    X(WORKER_STALLS, "worker_stalls",                                                              \
      "workers the master killed for a stopped heartbeat or for freezing inside a shared lock")    \
    X(LOCKS_FORCED, "locks_forced",                                                                \
      "shared locks forced free because their holder could never release them")                    \
    X(RELOADS, "reloads", "SIGHUP reloads")                                                        \
    X(SIGNED_IN, "signed_in", "requests that presented a valid API key")                           \
    X(UNAUTHORIZED, "unauthorized", "requests refused with 401 for an API key that is not valid")  \
    X(ANON_BYPASSED, "anon_bypassed",                                                              \
      "heavy requests of signed-in clients, which skip the "                                       \
      "anonymous line")                                                                            \
    X(ANON_RATE_LIMITED, "anon_rate_limited",                                                      \
      "anonymous heavy requests refused with 429 by the per-client rate limit")                    \
    X(GROUP_VALUE_HITS, "group_value_hits",                                                        \
      "answers served from a group value (stats, row counts) within its interval")                 \
    X(DATABASE_REPLACED, "database_replaced",                                                      \
      "times the database path was found to name another file than the workers serve (or none)")   \
    X(DB_FAULTS, "db_faults",                                                                      \
      "database connections that reported corruption, not a database or an I/O error: each "       \
      "was closed and opened again, and its work run again")                                       \
    X(DB_FAULTS_UNHEALED, "db_faults_unhealed",                                                    \
      "faults that came again on the connection opened again: the worker was replaced")            \
    X(GROUP_VALUE_STALE_HITS, "group_value_stale_hits",                                            \
      "answers served from a group value past its interval while another worker refreshed it")     \
    X(UPSTREAM_REQUESTS, "upstream_requests", "requests passed to the upstream")                   \
    X(UPSTREAM_CONNECTS, "upstream_connects", "connections opened to the upstream")                \
    X(UPSTREAM_REUSED, "upstream_reused",                                                          \
      "requests sent on a kept-alive connection to the upstream")                                  \
    X(UPSTREAM_RETRIES, "upstream_retries",                                                        \
      "idempotent requests sent again on a new connection: a kept-alive one closed before any "    \
      "answer")                                                                                    \
    X(UPSTREAM_BYTES_SENT, "upstream_bytes_sent", "bytes written to the upstream")                 \
    X(UPSTREAM_BYTES_RECEIVED, "upstream_bytes_received", "bytes read from the upstream")          \
    X(UPSTREAM_FAILURES, "upstream_failures",                                                      \
      "upstream requests that failed: refused, timed out, or broken before the response head")     \
    X(UPSTREAM_502, "upstream_502", "502 answers: the upstream failed, or the breaker is open")    \
    X(UPSTREAM_504, "upstream_504", "504 answers: the upstream did not answer in time")            \
    X(UPSTREAM_ABORTED, "upstream_aborted",                                                        \
      "proxied exchanges cut after the response began (the upstream or the client broke off)")     \
    X(UPSTREAM_REFUSED_AMBIGUOUS, "upstream_refused_ambiguous",                                    \
      "requests for the upstream refused with 400 or 413 for their framing (smuggling, no "        \
      "length)")                                                                                   \
    X(UPSTREAM_TUNNELS, "upstream_tunnels", "WebSocket tunnels opened to the upstream")            \
    X(UPSTREAM_TUNNELS_REFUSED, "upstream_tunnels_refused",                                        \
      "WebSocket upgrades refused with 503 because MESHGATE_UPSTREAM_WEBSOCKETS were open")        \
    X(UPSTREAM_TUNNELS_OVER_SHARE, "upstream_tunnels_over_share",                                  \
      "WebSocket upgrades refused with 503 because their address held "                            \
      "MESHGATE_UPSTREAM_WEBSOCKETS_PER_CLIENT tunnels")                                           \
    X(UPSTREAM_TUNNELS_CLOSED_CLIENT, "upstream_tunnels_closed_client",                            \
      "WebSocket tunnels that ended because the client closed or broke its side")                  \
    X(UPSTREAM_TUNNELS_CLOSED_UPSTREAM, "upstream_tunnels_closed_upstream",                        \
      "WebSocket tunnels that ended because the upstream closed or broke its side")                \
    X(UPSTREAM_TUNNELS_CLOSED_IDLE, "upstream_tunnels_closed_idle",                                \
      "WebSocket tunnels closed for MESHGATE_UPSTREAM_TUNNEL_IDLE_MS without a byte (or a pong) "  \
      "from the client")                                                                           \
    X(UPSTREAM_TUNNELS_CLOSED_DRAIN, "upstream_tunnels_closed_drain",                              \
      "WebSocket tunnels closed by a drain (SIGTERM, SIGHUP)")                                     \
    X(LIVE_EVENTS, "live_events",                                                                  \
      "events the live feed's watcher wrote into the ring (one per new observation)")              \
    X(LIVE_EVENTS_OVERSIZE, "live_events_oversize",                                                \
      "new observations left out of the live feed because their message exceeds a ring slot")      \
    X(LIVE_WATCH_STEPS, "live_watch_steps",                                                        \
      "times the live feed's watcher found the database changed and read its new rows")            \
    X(LIVE_CLIENTS, "live_clients", "WebSocket clients of meshgate's own live feed opened")        \
    X(LIVE_CLIENTS_REFUSED, "live_clients_refused",                                                \
      "live feed upgrades refused with 503 because MESHGATE_LIVE_CLIENTS were open")               \
    X(LIVE_CLIENTS_OVER_SHARE, "live_clients_over_share",                                          \
      "live feed upgrades refused with 503 because their address held MESHGATE_LIVE_PER_CLIENT")   \
    X(LIVE_FRAMES_SENT, "live_frames_sent", "live feed messages queued to clients")                \
    X(LIVE_DROPPED_SLOW, "live_dropped_slow",                                                      \
      "live feed clients dropped with a close frame for falling a whole ring behind")              \
    X(LIVE_CLOSED_IDLE, "live_closed_idle",                                                        \
      "live feed clients closed for sending nothing (no pong) for twice MESHGATE_LIVE_PING_MS")    \
    X(LIVE_CLOSED_BAD_FRAME, "live_closed_bad_frame",                                              \
      "live feed clients closed for a malformed, unmasked or oversized frame")                     \
    X(LIVE_CLOSED_DRAIN, "live_closed_drain",                                                      \
      "live feed clients closed with a close frame by a drain (SIGTERM, SIGHUP)")                  \
    X(UPSTREAM_RELAY_TIMEOUTS, "upstream_relay_timeouts",                                          \
      "proxied exchanges cut at MESHGATE_UPSTREAM_RELAY_TIMEOUT_MS (a client reading too slowly)") \
    X(BODY_TIMEOUTS, "body_timeouts",                                                              \
      "requests answered 408 for a body not sent in time (MESHGATE_BODY_TIMEOUT_MS, "              \
      "MESHGATE_BODY_MIN_RATE)")                                                                   \
    X(CONNECTIONS_SHED, "connections_shed",                                                        \
      "connections that gave up their place when a worker was full: the oldest still sending a "   \
      "head; closed, or held unread (connections_tarpitted)")                                      \
    X(CONNECTIONS_TARPITTED, "connections_tarpitted",                                              \
      "shed connections kept open unread until their header deadline instead of closed "           \
      "(MESHGATE_SHED_TARPIT)")                                                                    \
    X(PARK_WAKES, "park_wakes",                                                                    \
      "wakes of a worker's parked requests through its slot: a gate's permit handed on, a "        \
      "followed build ended")                                                                      \
    X(PARKED_TIMER_TURNS, "parked_timer_turns",                                                    \
      "turns of a worker's loop woken by its timer, not by an event, while it had requests "       \
      "parked")                                                                                    \
    X(MEMORY_RELEASES_START_PASS, "memory_releases_start_pass",                                    \
      "times a worker gave its free malloc memory back as a start pass's thread ended (a group "   \
      "table built or copied at its start)")                                                       \
    X(MEMORY_RELEASES_BUDGET, "memory_releases_budget",                                            \
      "times a worker's loop gave memory back, found past its budget over what it had at start "   \
      "(MG_MEM_MAP_KEEP_KIB, MG_MEM_ANON_KEEP_KIB)")

enum mg_counter {
#define MG_COUNTER_ENUM(id, name, help) MG_CTR_##id,
    MG_COUNTER_LIST(MG_COUNTER_ENUM)
#undef MG_COUNTER_ENUM
        MG_CTR_COUNT
};

extern const char *const mg_counter_names[MG_CTR_COUNT];
extern const char *const mg_counter_help[MG_CTR_COUNT];

struct mg_counters {
    _Atomic uint64_t value[MG_CTR_COUNT];
};

#define MG_ROUTES_MAX 128 /* the route table and the four counted extras (router.h) */
#define MG_ROUTE_NAME_MAX 48
#define MG_HIST_SUB_BUCKETS 8
#define MG_HIST_BUCKETS 320 /* covers up to 2^40 us (12 days) */

struct mg_route_stats {
    char name[MG_ROUTE_NAME_MAX]; /* route template, written once by the master */
    _Atomic uint64_t count;
    _Atomic uint64_t sum_us;
    _Atomic uint64_t max_us;
    _Atomic uint64_t errors; /* server faults: mg_status_class 5 */
    _Atomic uint64_t bucket[MG_HIST_BUCKETS];
};

#define MG_SLOW_MAX 20
#define MG_SLOW_PATH_MAX 128
#define MG_SLOW_THRESHOLD_US 100000

struct mg_slow_entry {
    _Atomic uint32_t seq; /* odd while being written */
    uint32_t status;
    int64_t duration_us;
    int64_t time_realtime_ns;
    char path[MG_SLOW_PATH_MAX];
};

struct mg_slow_ring {
    _Atomic uint64_t next; /* entries ever written; the newest is at (next - 1) % MG_SLOW_MAX */
    struct mg_slow_entry entry[MG_SLOW_MAX];
};

void mg_counter_add(struct mg_segment *seg, enum mg_counter c, uint64_t n);
uint64_t mg_counter_get(const struct mg_segment *seg, enum mg_counter c);

/*
 * The class a status is counted in (2..5): its first digit, except 501 (a transfer coding
 * other than chunked) and 505 (an HTTP version other than 1.x), which meshgate answers only
 * to what a client sent: they are client errors (4), not server faults, in every counter and
 * histogram, so an alert on 5xx is not set off by a client.
 */
int mg_status_class(int status);

/* Records one answered request on a route (route < seg->route_count). */
void mg_route_record(struct mg_segment *seg, unsigned route, int status, int64_t duration_us);
/* Adds a request to the slow ring when it took at least MG_SLOW_THRESHOLD_US. */
void mg_slow_record(struct mg_segment *seg, const char *path, int status, int64_t duration_us,
                    int64_t time_realtime_ns);

/* Histogram arithmetic, exposed for tests and for readers of copies. */
unsigned mg_hist_bucket(uint64_t us);
uint64_t mg_hist_bucket_upper_us(unsigned bucket);
/* The value below which fraction q (0..1) of the recorded samples fall, capped by max_us. */
uint64_t mg_hist_quantile_us(const struct mg_route_stats *r, double q);

/* A consistent copy of the slow ring, newest first; returns how many entries. */
unsigned mg_slow_snapshot(const struct mg_segment *seg, struct mg_slow_entry *out);

#endif

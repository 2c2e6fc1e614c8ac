/* SPDX-License-Identifier: ISC */
/*
 * router: the one table of routes. Each row declares the route's template (the name it is
 * counted under in /api/perf and the segment), its cost class, and its handler. Templates
 * are exact paths, or have one ":name" segment that matches any single path segment and is
 * handed to the handler as req->path_param. The row (struct mg_route) is core's (site.h):
 * dispatch reaches this table only through what server/ hands it at start (mg_site_wire).
 *
 * Cost classes. Heavy routes scan the database: an anonymous heavy request passes the
 * per-client rate limit and the anonymous line before its handler runs (dispatch.c); light
 * routes never touch either. A heavy route may name a `heavy_when` test for the requests
 * of it that really scan (/api/perf only with mem=1; a reach report only when it is not
 * warm in the shared cache): the others are light. An endpoint added later that scans is
 * declared heavy here, and nothing else needs to change.
 */
#ifndef MESHGATE_ROUTER_H
#define MESHGATE_ROUTER_H

#include "gates.h"
#include "handler.h"
#include "params.h"
#include "site.h"

/* The method of a route's template ("GET" for a plain path) and its path. */
const char *mg_route_method(unsigned route);
const char *mg_route_path(unsigned route);

/* Route ids are indexes into the table; the five after it (site.h: enum mg_route_extra) are not
 * in it but are counted. */
extern const struct mg_route mg_routes[];
extern const unsigned mg_route_table_len;
#define MG_ROUTE_NOT_FOUND (mg_route_table_len + MG_ROUTE_EXTRA_NOT_FOUND)
#define MG_ROUTE_BAD_REQUEST (mg_route_table_len + MG_ROUTE_EXTRA_BAD_REQUEST)
/* Files of MESHGATE_PUBLIC_DIR (paths outside /api/ that no route matched). */
#define MG_ROUTE_STATIC (mg_route_table_len + MG_ROUTE_EXTRA_STATIC)
/* Requests passed to MESHGATE_UPSTREAM (no native route answers them). */
#define MG_ROUTE_UPSTREAM (mg_route_table_len + MG_ROUTE_EXTRA_UPSTREAM)
/* WebSocket tunnels to the upstream: how long each stayed open, apart from the requests. */
#define MG_ROUTE_TUNNEL (mg_route_table_len + MG_ROUTE_EXTRA_TUNNEL)

/* Names of every counted route, in id order, for the segment: the table, then the five above. */
unsigned mg_route_names(const char **out, unsigned cap);
/* The route whose template is t[0..n), or MG_ROUTE_NOT_FOUND. */
unsigned mg_route_by_template(const char *t, size_t n);

/*
 * The routes of one node (template "/api/nodes/:pubkey..."): dispatch runs them through the
 * guard, so none can forget it. The guard answers 404 "Not found" when the key (lowercased),
 * or for /api/nodes/{pubkey} the one node a short key of 8 to 63 hex digits names, is
 * hidden (node_visibility.h); else it runs the route's handler.
 */
bool mg_node_visibility_guards(unsigned route);
enum mg_turn mg_node_visibility_guard(struct mg_env *env, const struct mg_request *req,
                                      struct mg_response *res);

/*
 * Finds the GET route for a decoded path; fills param (cap bytes) with the ":name" segment.
 * Returns the route id, or MG_ROUTE_NOT_FOUND.
 */
unsigned mg_route_match(const char *path, char *param, size_t cap);
/*
 * The route for a request's method (as sent: HEAD is GET's) and decoded path, or
 * MG_ROUTE_NOT_FOUND; then *allow (when not NULL) says which methods the path has
 * ("GET, HEAD", "POST", ...; NULL: none), for a 405.
 */
unsigned mg_route_match_method(const char *method, size_t method_len, const char *path, char *param,
                               size_t cap, const char **allow);

/* The routes' parameter tables (params.h), each declared beside its handler. */
extern const struct mg_param_table mg_nodes_params;
extern const struct mg_param_table mg_packet_timestamps_params;
extern const struct mg_param_table mg_resolve_hops_params;
extern const struct mg_param_table mg_packets_params;
extern const struct mg_param_table mg_node_neighbors_params;
extern const struct mg_param_table mg_reach_params;
extern const struct mg_param_table mg_scope_stats_params;
extern const struct mg_param_table mg_channels_params;
extern const struct mg_param_table mg_known_channels_params;
extern const struct mg_param_table mg_channel_messages_params;
extern const struct mg_param_table mg_observer_analytics_params;
extern const struct mg_param_table mg_bulk_health_params;
extern const struct mg_param_table mg_fleet_clock_skew_params;
extern const struct mg_param_table mg_perf_params;
extern const struct mg_param_table mg_node_search_params;
extern const struct mg_param_table mg_metrics_summary_params;
extern const struct mg_param_table mg_observer_metrics_params;
extern const struct mg_param_table mg_node_battery_params;
/* The Analytics page's signal reports' region, area and time window (ep_analytics_rf.c). */
extern const struct mg_param_table mg_analytics_window_params;
/* Node analytics and mobile RX coverage (ep_node_analytics.c, ep_rx_coverage.c). */
extern const struct mg_param_table mg_node_analytics_params;
extern const struct mg_param_table mg_node_rx_coverage_params;
extern const struct mg_param_table mg_rx_coverage_params;
extern const struct mg_param_table mg_rx_leaderboard_params;

/* The endpoints (one file per family). */
enum mg_turn mg_handle_reach(struct mg_env *env, const struct mg_request *req,
                             struct mg_response *res);
enum mg_turn mg_handle_bulk_health(struct mg_env *env, const struct mg_request *req,
                                   struct mg_response *res);
enum mg_turn mg_handle_node_paths(struct mg_env *env, const struct mg_request *req,
                                  struct mg_response *res);
enum mg_turn mg_handle_node_neighbors(struct mg_env *env, const struct mg_request *req,
                                      struct mg_response *res);
enum mg_turn mg_handle_status(struct mg_env *env, const struct mg_request *req,
                              struct mg_response *res);
enum mg_turn mg_handle_healthz(struct mg_env *env, const struct mg_request *req,
                               struct mg_response *res);
enum mg_turn mg_handle_nodes(struct mg_env *env, const struct mg_request *req,
                             struct mg_response *res);
enum mg_turn mg_handle_node_search(struct mg_env *env, const struct mg_request *req,
                                   struct mg_response *res);
enum mg_turn mg_handle_node_detail(struct mg_env *env, const struct mg_request *req,
                                   struct mg_response *res);
enum mg_turn mg_handle_node_health(struct mg_env *env, const struct mg_request *req,
                                   struct mg_response *res);
enum mg_turn mg_handle_node_clock_skew(struct mg_env *env, const struct mg_request *req,
                                       struct mg_response *res);
enum mg_turn mg_handle_fleet_clock_skew(struct mg_env *env, const struct mg_request *req,
                                        struct mg_response *res);
/* The detail is heavy for a node with many transmissions in its 7-day window (ep_node_detail.c). */
bool mg_node_detail_is_heavy(struct mg_env *env, const struct mg_request *req);
enum mg_turn mg_handle_packets(struct mg_env *env, const struct mg_request *req,
                               struct mg_response *res);
/* The /api/stats body is rendered at most once per this for the whole group. */
#define MG_STATS_INTERVAL_NS (10 * 1000000000LL)
enum mg_turn mg_handle_stats(struct mg_env *env, const struct mg_request *req,
                             struct mg_response *res);
/* /api/stats is heavy for the request that would render the body (none, or a stale one whose
 * refresh nobody holds); the others serve the group's value. */
bool mg_stats_is_heavy(struct mg_env *env, const struct mg_request *req);
enum mg_turn mg_handle_perf(struct mg_env *env, const struct mg_request *req,
                            struct mg_response *res);
/* /api/perf is heavy with mem=1 exactly (the diagnostic walk), unless the diagnostic gate
 * would refuse it at once. */
bool mg_perf_is_heavy(struct mg_env *env, const struct mg_request *req);
/* A reach report is heavy unless it is warm in the shared cache or its parameters are bad
 * (answered 400 before any work). */
bool mg_reach_is_heavy(struct mg_env *env, const struct mg_request *req);
bool mg_fleet_clock_skew_is_heavy(struct mg_env *env, const struct mg_request *req);
/* A node's /clock-skew answer ("\n"-ended) into body; *none when it has none. An SQLite code
 * (ep_node_clock.c; node analytics carry it too). */
int mg_node_skew_body(struct mg_db *db, const char *pubkey, struct mg_buf *body, bool *none);
/* Node analytics (ep_node_analytics.c): a cold report, always heavy (router.c). Mobile RX coverage
 * (ep_rx_coverage.c): CoreScope's opt-in clientRxCoverage routes. */
enum mg_turn mg_handle_node_analytics(struct mg_env *env, const struct mg_request *req,
                                      struct mg_response *res);
enum mg_turn mg_handle_node_rx_coverage(struct mg_env *env, const struct mg_request *req,
                                        struct mg_response *res);
enum mg_turn mg_handle_rx_coverage(struct mg_env *env, const struct mg_request *req,
                                   struct mg_response *res);
bool mg_rx_coverage_served(void);
enum mg_turn mg_handle_rx_leaderboard(struct mg_env *env, const struct mg_request *req,
                                      struct mg_response *res);
/* The Analytics page's roles, hash sizes and collisions (ep_node_clock.c for the roles, a
 * summary of the fleet's clock skew): cold reports, heavy unless warm in the shared cache. */
enum mg_turn mg_handle_analytics_roles(struct mg_env *env, const struct mg_request *req,
                                       struct mg_response *res);
bool mg_analytics_roles_is_heavy(struct mg_env *env, const struct mg_request *req);
/* ep_analytics_hash.c: the hash collisions. */
extern const struct mg_param_table mg_hash_collisions_params;
enum mg_turn mg_handle_hash_collisions(struct mg_env *env, const struct mg_request *req,
                                       struct mg_response *res);
bool mg_hash_collisions_is_heavy(struct mg_env *env, const struct mg_request *req);
/* The hash sizes tab (ep_analytics_hashsz.c): a cold report, heavy unless warm. */
extern const struct mg_param_table mg_hash_sizes_params;
enum mg_turn mg_handle_hash_sizes(struct mg_env *env, const struct mg_request *req,
                                  struct mg_response *res);
bool mg_hash_sizes_is_heavy(struct mg_env *env, const struct mg_request *req);
/* The relay airtime share (ep_analytics_airtime.c) and the Audio Lab's buckets
 * (ep_audio_lab.c): cold reports, heavy unless warm. */
extern const struct mg_param_table mg_relay_airtime_params;
enum mg_turn mg_handle_relay_airtime(struct mg_env *env, const struct mg_request *req,
                                     struct mg_response *res);
bool mg_relay_airtime_is_heavy(struct mg_env *env, const struct mg_request *req);
enum mg_turn mg_handle_audio_lab(struct mg_env *env, const struct mg_request *req,
                                 struct mg_response *res);
bool mg_audio_lab_is_heavy(struct mg_env *env, const struct mg_request *req);
bool mg_scope_stats_is_heavy(struct mg_env *env, const struct mg_request *req);
bool mg_node_paths_is_heavy(struct mg_env *env, const struct mg_request *req);
bool mg_node_neighbors_is_heavy(struct mg_env *env, const struct mg_request *req);
/* /api/nodes is heavy when this process has no table of hash sizes, or with a region when it
 * has no region map, and the group has no copy to take (node_hash_sizes.h, region_map.h). */
bool mg_nodes_is_heavy(struct mg_env *env, const struct mg_request *req);
/* Packets, observers and channels of CoreScope's front end (ep_packet_detail.c,
 * ep_observers.c, ep_channels.c). */
enum mg_turn mg_handle_packet_detail(struct mg_env *env, const struct mg_request *req,
                                     struct mg_response *res);
enum mg_turn mg_handle_packet_timestamps(struct mg_env *env, const struct mg_request *req,
                                         struct mg_response *res);
enum mg_turn mg_handle_traces(struct mg_env *env, const struct mg_request *req,
                              struct mg_response *res);
/*
 * Whether a request for /api/packets (its parks_until, ep_packets.c) waits before its gates
 * for the first chunk of the group's first summaries pass, and until when: 0 when it goes now;
 * else the CLOCK_MONOTONIC time to ask again. It waits while that chunk runs (begun, under
 * the lease: one not begun may be queued behind other start passes) and none has failed, for a page
 * newest first with no filter that lies within the first chunk's MG_TX_SUMMARY_FIRST_TX
 * transmissions (read directly, it would read their observations beside the chunk that is
 * summarizing them), and at most MG_TX_SUMMARY_FIRST_WAIT_NS from since_ns (when it first asked);
 * then it reads directly. Only atomic loads: cheap on the loop.
 */
int64_t mg_packets_parks_until(struct mg_env *env, const struct mg_request *req, int64_t since_ns);
/* Heavy unless the page is one the summaries answer with a bounded cost (ep_packets.h,
 * MG_PACKETS_LIGHT_LIMIT): no filter, no expand, no grouping, at most MG_PACKETS_LIGHT_LIMIT
 * rows MG_PACKETS_LIGHT_OFFSET down, and the summaries made. Only atomic loads. */
bool mg_packets_is_heavy(struct mg_env *env, const struct mg_request *req);

/* Heavy for a transmission heard more often than a light answer may list. */
bool mg_packet_detail_is_heavy(struct mg_env *env, const struct mg_request *req);
bool mg_traces_is_heavy(struct mg_env *env, const struct mg_request *req);
/* A transmission heard more often than this makes its detail (/api/packets/:id) heavy: each
 * observation is rows read and some 3.6 KB written (800 of them: 2.9 MB, 70 000 VM steps). */
#define MG_PACKET_LIGHT_OBSERVATIONS 12
/* Likewise its trace (/api/traces/:hash): some 400 bytes an observation. */
#define MG_TRACE_LIGHT_OBSERVATIONS 128
enum mg_turn mg_handle_resolve_hops(struct mg_env *env, const struct mg_request *req,
                                    struct mg_response *res);
bool mg_resolve_hops_is_heavy(struct mg_env *env, const struct mg_request *req);
/* More hops than this make /api/resolve-hops heavy: each is a walk of the nodes that can relay
 * and an entry of the answer (a two-digit hop among 2 000 nodes: some 2.5 KB). */
#define MG_RESOLVE_HOPS_LIGHT_MAX 24
enum mg_turn mg_handle_iata_coords(struct mg_env *env, const struct mg_request *req,
                                   struct mg_response *res);
enum mg_turn mg_handle_observers(struct mg_env *env, const struct mg_request *req,
                                 struct mg_response *res);
enum mg_turn mg_handle_observer(struct mg_env *env, const struct mg_request *req,
                                struct mg_response *res);
enum mg_turn mg_handle_observer_analytics(struct mg_env *env, const struct mg_request *req,
                                          struct mg_response *res);
/* Observer analytics are heavy unless warm in the shared cache (cold_report.h). */
bool mg_observer_analytics_is_heavy(struct mg_env *env, const struct mg_request *req);
enum mg_turn mg_handle_observer_clock_skew(struct mg_env *env, const struct mg_request *req,
                                           struct mg_response *res);
bool mg_observer_clock_skew_is_heavy(struct mg_env *env, const struct mg_request *req);
/* The routes of the observer_metrics table (ep_observer_metrics.c). */
enum mg_turn mg_handle_metrics_summary(struct mg_env *env, const struct mg_request *req,
                                       struct mg_response *res);
enum mg_turn mg_handle_observer_metrics(struct mg_env *env, const struct mg_request *req,
                                        struct mg_response *res);
enum mg_turn mg_handle_node_battery(struct mg_env *env, const struct mg_request *req,
                                    struct mg_response *res);
enum mg_turn mg_handle_channels(struct mg_env *env, const struct mg_request *req,
                                struct mg_response *res);
enum mg_turn mg_handle_channel_messages(struct mg_env *env, const struct mg_request *req,
                                        struct mg_response *res);
enum mg_turn mg_handle_known_channels(struct mg_env *env, const struct mg_request *req,
                                      struct mg_response *res);
enum mg_turn mg_handle_metrics(struct mg_env *env, const struct mg_request *req,
                               struct mg_response *res);
/* The /api/config answers: bodies rendered from CoreScope's config.json by the master
 * (ep_config.c). */
enum mg_turn mg_handle_config(struct mg_env *env, const struct mg_request *req,
                              struct mg_response *res);
enum mg_turn mg_handle_config_regions(struct mg_env *env, const struct mg_request *req,
                                      struct mg_response *res);
enum mg_turn mg_handle_health(struct mg_env *env, const struct mg_request *req,
                              struct mg_response *res);
enum mg_turn mg_handle_scope_stats(struct mg_env *env, const struct mg_request *req,
                                   struct mg_response *res);
/* The Analytics page's signal reports (ep_analytics_rf.c): cold reports, heavy unless warm. */
enum mg_turn mg_handle_analytics_rf(struct mg_env *env, const struct mg_request *req,
                                    struct mg_response *res);
bool mg_analytics_rf_is_heavy(struct mg_env *env, const struct mg_request *req);
enum mg_turn mg_handle_analytics_channels(struct mg_env *env, const struct mg_request *req,
                                          struct mg_response *res);
/* The Analytics page's topology and distance tabs (ep_analytics_topo.c): cold reports, heavy
 * unless warm. */
extern const struct mg_param_table mg_analytics_distance_params;
enum mg_turn mg_handle_analytics_topology(struct mg_env *env, const struct mg_request *req,
                                          struct mg_response *res);
bool mg_analytics_topology_is_heavy(struct mg_env *env, const struct mg_request *req);
enum mg_turn mg_handle_analytics_distance(struct mg_env *env, const struct mg_request *req,
                                          struct mg_response *res);
bool mg_analytics_distance_is_heavy(struct mg_env *env, const struct mg_request *req);
enum mg_turn mg_handle_mqtt_status(struct mg_env *env, const struct mg_request *req,
                                   struct mg_response *res);
/* The Route Patterns tab (ep_analytics_subpaths.c): cold reports, heavy unless warm. */
extern const struct mg_param_table mg_analytics_subpaths_params;
extern const struct mg_param_table mg_analytics_subpaths_bulk_params;
extern const struct mg_param_table mg_analytics_subpath_detail_params;
enum mg_turn mg_handle_analytics_subpaths(struct mg_env *env, const struct mg_request *req,
                                          struct mg_response *res);
bool mg_analytics_subpaths_is_heavy(struct mg_env *env, const struct mg_request *req);
enum mg_turn mg_handle_analytics_subpaths_bulk(struct mg_env *env, const struct mg_request *req,
                                               struct mg_response *res);
bool mg_analytics_subpaths_bulk_is_heavy(struct mg_env *env, const struct mg_request *req);
enum mg_turn mg_handle_analytics_subpath_detail(struct mg_env *env, const struct mg_request *req,
                                                struct mg_response *res);
bool mg_analytics_subpath_detail_is_heavy(struct mg_env *env, const struct mg_request *req);

/* The Analytics page's neighbour graph (ep_neighbor_graph.c): a cold report of the group's
 * neighbour graph, heavy unless warm. */
extern const struct mg_param_table mg_neighbor_graph_params;
enum mg_turn mg_handle_neighbor_graph(struct mg_env *env, const struct mg_request *req,
                                      struct mg_response *res);
bool mg_neighbor_graph_is_heavy(struct mg_env *env, const struct mg_request *req);
/* The small routes of CoreScope's server (issue 26, misc). */
extern const struct mg_param_table mg_node_resolve_params;
enum mg_turn mg_handle_network_status(struct mg_env *env, const struct mg_request *req,
                                      struct mg_response *res);
enum mg_turn mg_handle_node_resolve(struct mg_env *env, const struct mg_request *req,
                                    struct mg_response *res);
/* /api/perf/{sqlite,io,write-sources} (ep_perf_io.c). */
enum mg_turn mg_handle_perf_sqlite(struct mg_env *env, const struct mg_request *req,
                                   struct mg_response *res);
enum mg_turn mg_handle_perf_io(struct mg_env *env, const struct mg_request *req,
                               struct mg_response *res);
enum mg_turn mg_handle_perf_write_sources(struct mg_env *env, const struct mg_request *req,
                                          struct mg_response *res);
/* The group's answer caches as /api/perf counts them (ep_perf.c): the shared result cache and
 * the group values; served = hits + stale. */
struct mg_perf_cache {
    uint64_t size, hits, stale, misses, recomputes;
};
void mg_perf_cache_figures(struct mg_segment *seg, struct mg_perf_cache *out);
/* CoreScope's API-key routes without an upstream (ep_keyed.c): 403 as CoreScope's without a
 * key configured, 403 naming meshgate read-only with one. */
enum mg_turn mg_handle_key_protected(struct mg_env *env, const struct mg_request *req,
                                     struct mg_response *res);
/* POST /api/packets/observations (ep_packet_detail.c): the observations of a batch of hashes;
 * heavy. */
#define MG_BATCH_OBSERVATIONS_MAX 200
#define MG_BATCH_OBSERVATIONS_BODY_MAX 65536
enum mg_turn mg_handle_batch_observations(struct mg_env *env, const struct mg_request *req,
                                          struct mg_response *res);
/* POST /api/paths/inspect: CoreScope's path inspector (ep_paths_inspect.c). It reads the
 * first 4096 bytes of its body, as CoreScope does; a longer one is read whole up to this. */
#define MG_PATHS_INSPECT_BODY_MAX 65536
enum mg_turn mg_handle_paths_inspect(struct mg_env *env, const struct mg_request *req,
                                     struct mg_response *res);
bool mg_paths_inspect_is_heavy(struct mg_env *env, const struct mg_request *req);
/* POST /api/decode (ep_decode.c): CoreScope's packet decoder; light. */
#define MG_DECODE_BODY_MAX 16384
enum mg_turn mg_handle_decode(struct mg_env *env, const struct mg_request *req,
                              struct mg_response *res);
/* /api/spec and /api/docs: meshgate's OpenAPI description of this table (ep_openapi.c). */
enum mg_turn mg_handle_spec(struct mg_env *env, const struct mg_request *req,
                            struct mg_response *res);
enum mg_turn mg_handle_docs(struct mg_env *env, const struct mg_request *req,
                            struct mg_response *res);

#endif

/* SPDX-License-Identifier: ISC */
#include "router.h"

#include "admission.h"
#include "node_visibility.h"

#include <ctype.h>
#include <string.h>

/*
 * Each route's class, and the requests of it that are light with their worst parameters
 * (tests/test_cost.c runs each on a generated database and fails when one steps through
 * more rows than a light request may, or when a route that can be light declares none).
 * "{node}" stands for the busiest node's key, "{quiet}" for a node's that the detail can
 * serve light, "{prefix}" for its first 8 digits, "{companion}" for a node that cannot relay
 * (tests/test_cost.c). Costs at 2M observations:
 * docs/benchmarks.md.
 */

/* Light: the cached counts and a probe of the schema cookie (no table is read). */
static const char *const healthz_cases[] = {"/api/healthz", NULL};
/* Heavy with a limit above MG_NODES_LIGHT_LIMIT unless this thread keeps the answer (a copy),
 * or with a region while neither this process nor the group has a region map (region_map.h:
 * one pass over the ADVERTs' observations); otherwise one or two passes over nodes, whatever
 * the filters, sort or offset. The hash sizes (node_hash_sizes.h: one pass over the week's
 * ADVERTs) and relay activity (node_relay.h: one pass over observations) are not waited for:
 * their passes run behind the list, which writes the fields as CoreScope has them before its
 * own until they land (in process, with no helper to run them, the request is heavy and builds
 * them). */
static const char *const nodes_cases[] = {
    "/api/nodes",
    "/api/nodes?limit=500", /* the Nodes page: light once this thread keeps its answer */
    "/api/nodes?limit=2000",
    "/api/nodes?limit=2000&offset=1000000000",
    "/api/nodes?sortBy=name&limit=2000&offset=100",
    "/api/nodes?sortBy=packetCount&limit=2000",
    "/api/nodes?search=zzzz-matches-nothing",
    "/api/nodes?search=a&sortBy=name",
    "/api/nodes?lastHeard=30d&before=2999-01-01&role=repeater",
    "/api/nodes?region=SJC",
    "/api/nodes?region=SJC,OAK,SFO,LAX,ALL&role=repeater&search=e&sortBy=packetCount"
    "&lastHeard=30d&limit=2000&offset=3",
    NULL,
};
/* Light: one pass over nodes (no index serves LIKE), as a /api/nodes page. */
static const char *const node_search_cases[] = {
    "/api/nodes/search?q=a", "/api/nodes/search?q=zzzz-matches-nothing", "/api/nodes/search?q=%25",
    "/api/nodes/search", NULL};
/* The node by its key (a short prefix: one pass over nodes) and its own transmissions
 * through idx_transmissions_from_pubkey: its ADVERTs of the week, read twice, and its 20
 * newest transmissions with all their observations, each written (some 430 bytes). Light for
 * a node with at most MG_NODE_DETAIL_LIGHT_ROWS (8) transmissions and
 * MG_NODE_DETAIL_LIGHT_OBSERVATIONS (32) observations of them ("{quiet}": the node with the
 * most observations within both); heavy above (mg_node_detail_is_heavy): the busiest node of
 * a 2M-observation database, 541 ADVERTs in the week, costs 3400 pages, 10 ms; a node of 2
 * transmissions heard 800 times each wrote 670 KB. */
static const char *const node_detail_cases[] = {"/api/nodes/{quiet}", "/api/nodes/{prefix}", NULL};
/* Heavy unless warm in the shared cache: a warm report is a copy out of the segment. */
static const char *const reach_cases[] = {"/api/nodes/{node}/reach",
                                          "/api/nodes/{node}/reach?days=30", NULL};
/* Cold report: heavy to build (CoreScope's neighbour graph from every observation, kept per
 * process for 5 minutes: 28-41 s for the first node at 2M observations on a loaded machine,
 * then a walk of the edges for each other node), light when warm (0 steps). */
static const char *const neighbors_cases[] = {"/api/nodes/{node}/neighbors",
                                              "/api/nodes/{node}/neighbors?min_count=2", NULL};
/* Cold report: heavy to build (every observation whose path holds a hop starting with the
 * key's first byte, or whose resolved_path holds the key, and all observations of their
 * transmissions: the busiest node at 2M observations, 11.6 s, 24.8M VM steps, 1.33M pages),
 * light when warm (0 steps): the shared cache keeps any body up to a quarter of its pool
 * (MESHGATE_REACH_CACHE_BYTES / 4, 4 MiB by default), the 50 paths of a busy node too. */
static const char *const paths_cases[] = {"/api/nodes/{companion}/paths", NULL};
/* Cold report (cold_report.h): heavy to build (20-28 s, 33M VM steps, 3.5M pages at 2M
 * observations), light when warm (0 steps): the list (34 KB on a 200k-observation database,
 * 718 KB at 2M observations) is kept by the shared cache, which keeps any body up to a
 * quarter of its pool (MESHGATE_REACH_CACHE_BYTES / 4, 4 MiB by default). */
static const char *const fleet_skew_cases[] = {"/api/nodes/clock-skew", NULL};
/* The Analytics page's roles, hash sizes and collisions (CoreScope recomputes each every 5
 * minutes). Roles: a cold report, heavy to build (the fleet clock skew's passes over every
 * ADVERT's observations, then one over nodes; at 2M observations 114 s on a machine at load
 * 22 on 2 cores), light when warm (0 steps; 11 ms, 743 bytes). */
static const char *const analytics_roles_cases[] = {"/api/analytics/roles", NULL};
/* Collisions: a cold report, heavy to build (a pass over nodes with the group's hash sizes;
 * with a region, one over the region's observations: at 2M observations 12.9 s, with
 * region=SJC 130 s, its query 4.3 s of CPU, on a machine at load 22 on 2 cores), light when
 * warm (0 steps; 683 KB copied from the shared cache in 0.16 s). */
static const char *const hash_collisions_cases[] = {
    "/api/analytics/hash-collisions", "/api/analytics/hash-collisions?region=SJC,OAK", NULL};
/* The Route Patterns tab (ep_analytics_subpaths.c): cold reports of every transmission's display
 * path, heavy to build, light when warm (the worst parameters: the most groups and runs, the
 * region's scan, the longest hops). At 2M observations on 2 cores at load 30 to 60: the bulk
 * 72 to 321 s cold, the detail 225 s (the topology 54 s beside them), longer than CoreScope's
 * 60 s freshness, so there each minute's first request builds again. */
static const char *const analytics_subpaths_cases[] = {
    "/api/analytics/subpaths?minLen=2&maxLen=64&limit=200", NULL};
static const char *const analytics_subpaths_bulk_cases[] = {
    "/api/analytics/subpaths-bulk?groups=2-64:200,2-64:200,2-64:200,2-64:200,2-64:200,2-64:200,"
    "2-64:200,2-64:200,2-64:200,2-64:200,2-64:200,2-64:200&region=SJC&window=7d",
    NULL};
static const char *const analytics_subpath_detail_cases[] = {
    "/api/analytics/subpath-detail?hops=a,b,c,d,e,f,g,h", NULL};
/* Hash sizes (ep_analytics_hashsz.c): a cold report of every observation, light when warm. */
static const char *const hash_sizes_cases[] = {"/api/analytics/hash-sizes",
                                               "/api/analytics/hash-sizes?region=SJC,OAK",
                                               "/api/analytics/hash-sizes?area=bogus", NULL};
/* Relay airtime share (ep_analytics_airtime.c) and the Audio Lab's buckets (ep_audio_lab.c):
 * cold reports of every observation or transmission, light when warm. */
static const char *const relay_airtime_cases[] = {
    "/api/analytics/relay-airtime-share", "/api/analytics/relay-airtime-share?window=7d", NULL};
static const char *const audio_lab_cases[] = {"/api/audio-lab/buckets", NULL};
/* Cold reports, one per window: heavy to build (the window's transmissions through
 * idx_transmissions_first_seen: 7d at 2M observations 1.7-2.1 s, 16.8M VM steps, 64 149
 * pages), light when warm (0 steps). */
/* The Analytics page's neighbour graph (ep_neighbor_graph.c): light when warm in the shared
 * cache, a walk of the group's graph's edges when built. */
static const char *const neighbor_graph_cases[] = {
    "/api/analytics/neighbor-graph", "/api/analytics/neighbor-graph?min_count=1&min_score=0",
    "/api/analytics/neighbor-graph?region=SJC,OAK&role=repeater", NULL};
/* The Analytics page's signal reports (ep_analytics_rf.c): light when warm in the shared
 * cache (a copy out of the segment); a build reads every observation. */
static const char *const analytics_rf_cases[] = {
    "/api/analytics/rf", "/api/analytics/rf?window=7d",
    "/api/analytics/rf?region=SJC,OAK&area=bogus&from=2026-01-01T00:00:00Z", NULL};
/* The Analytics page's topology and distance tabs (ep_analytics_topo.c): light when warm in
 * the shared cache (a copy out of the segment); a build reads every transmission's
 * observations (cold, on a loaded machine: the 200k-observation default shape 11.8 s and 4.2 s,
 * the heavy shape 3.3 s and 0.5 s; warm 0.1 s for the topology's 3.9 MB, 2 ms for 173 KB). */
static const char *const analytics_topology_cases[] = {
    "/api/analytics/topology", "/api/analytics/topology?window=7d",
    "/api/analytics/topology?region=SJC,OAK&area=bogus&from=2026-01-01T00:00:00Z", NULL};
static const char *const analytics_distance_cases[] = {
    "/api/analytics/distance", "/api/analytics/distance?region=SJC,OAK&area=bogus", NULL};
static const char *const scope_cases[] = {"/api/scope-stats", "/api/scope-stats?window=1h",
                                          "/api/scope-stats?window=7d", NULL};
/* Light: the body is computed at most once per 10 s for the group; the request that would
 * compute it is heavy (mg_stats_is_heavy). */
static const char *const stats_cases[] = {"/api/stats", NULL};
/* Heavy with mem=1 (the walk); otherwise the segment, the cached counts and three pragmas. */
static const char *const perf_cases[] = {"/api/perf", "/api/perf?mem=0", "/api/perf?mem=true",
                                         NULL};
/* Light: the segment only. */
static const char *const status_cases[] = {"/server-status", NULL};
static const char *const metrics_cases[] = {"/metrics", NULL};

/* Packets, observers and channels of CoreScope's front end (issue 14). Costs:
 * docs/architecture.md ("Cost classes, measured"). A transmission by primary key or UNIQUE
 * hash, its observations by idx_observations_transmission_id: a row read and written per
 * observation (the detail some 3.6 KB each, a trace 400 bytes), so light only for one heard at
 * most MG_PACKET_LIGHT_OBSERVATIONS (MG_TRACE_LIGHT_OBSERVATIONS) times ("{lpacket}",
 * "{lhash}": the most-heard such one); heavy above (a transmission heard 800 times: 2.9 MB,
 * 70 000 VM steps; its trace 321 KB). */
static const char *const packet_detail_cases[] = {"/api/packets/{lpacket}", "/api/packets/{lhash}",
                                                  "/api/packets/{LHASH}", NULL};
/* Light: a page of no filter, neither expanded nor grouped, of at most MG_PACKETS_LIGHT_LIMIT
 * rows at most MG_PACKETS_LIGHT_OFFSET down, that the summaries (shm/tx_summary.h) cover with
 * the process's total kept (ep_packets.h); each row a summary, its best observation by primary
 * key and some 700 bytes. Found otherwise at run time, it is admitted again, heavy. */
static const char *const packets_cases[] = {
    "/api/packets", "/api/packets?limit=50&offset=1000", "/api/packets?order=asc&limit=50",
    "/api/packets?limit=50&expand=nothing&groupByHash=false", NULL};
static const char *const traces_cases[] = {"/api/traces/{lhash}", "/api/traces/zzzz", NULL};
/* Light: one pass over the nodes that can relay for each of at most
 * MG_RESOLVE_HOPS_LIGHT_MAX hops ("{hops}": as many two-digit hops, each with several
 * candidates); heavy with more, or with a context while the worker has no fresh neighbour
 * graph. */
static const char *const resolve_hops_cases[] = {
    "/api/resolve-hops?hops=a1,b2c3,d4e5f6,0123456789,ffff,A1,a1,zz,,x",
    "/api/resolve-hops?hops={hops}", "/api/resolve-hops", NULL};
/* Light: tables in the program, no database (0 steps). */
/* The path inspector (issue 26, item 1: inspect): light with one hop (a pass over nodes, up
 * to 20 paths of one hop written); heavy with more (a pass over neighbor_edges too, or the
 * group's neighbour graph). */
static const char *const paths_inspect_cases[] = {
    "POST /api/paths/inspect {\"prefixes\":[\"a1\"]}",
    "POST /api/paths/inspect {\"prefixes\":[\"A1B2C3\"]}", NULL};
static const char *const iata_cases[] = {"/api/iata-coords", NULL};
static const char *const known_channels_cases[] = {"/api/known-channels",
                                                   "/api/known-channels?region=US", NULL};
/* Cold reports (cold_report.h): heavy to build (the observer's window: 8.3 s cold for the
 * busiest observer; every ADVERT heard twice), light when warm in the shared cache (0 steps). */
static const char *const analytics_cases[] = {"/api/observers/{observer}/analytics",
                                              "/api/observers/{observer}/analytics?days=365", NULL};
static const char *const clock_skew_cases[] = {"/api/observers/clock-skew", NULL};
/* Light: bodies rendered from CoreScope's config.json when the master read it; a request
 * copies bytes (0 VM steps). /regions adds one pass over observers (a row per receiver:
 * 31 rows in CoreScope's fixture, 40 in a generated 2M-observation database). */
static const char *const config_client_cases[] = {"/api/config/client", NULL};
static const char *const config_cache_cases[] = {"/api/config/cache", NULL};
static const char *const config_theme_cases[] = {"/api/config/theme", NULL};
static const char *const config_map_cases[] = {"/api/config/map", NULL};
static const char *const config_geo_filter_cases[] = {"/api/config/geo-filter", NULL};
static const char *const config_areas_cases[] = {"/api/config/areas", NULL};
static const char *const config_polygons_cases[] = {"/api/config/areas/polygons", NULL};
static const char *const config_regions_cases[] = {"/api/config/regions", NULL};
/* Light: the segment and /proc/PID/statm of the group's processes; no table is read. */
static const char *const health_cases[] = {"/api/health", NULL};
/* Light: a constant (CoreScope's answer without its ingestor's MQTT file). */
static const char *const mqtt_status_cases[] = {"/api/mqtt/status", NULL};

/* The small routes of CoreScope's server (issue 26, misc): light, one pass over nodes at most
 * (network-status: every row of nodes; resolve: the key range of the prefix through the
 * primary key's index, two rows at most). */
static const char *const network_status_cases[] = {"/api/nodes/network-status", NULL};
static const char *const node_resolve_cases[] = {"/api/nodes/resolve?prefix=0000",
                                                 "/api/nodes/resolve?prefix={prefix}", NULL};
/* Light: the file's header (three pragmas), a stat of the -wal and the segment; /proc of the
 * group's processes; a constant. No table is read. */
static const char *const perf_sqlite_cases[] = {"/api/perf/sqlite", NULL};
static const char *const perf_io_cases[] = {"/api/perf/io", NULL};
static const char *const perf_write_sources_cases[] = {"/api/perf/write-sources", NULL};
/* Light: meshgate's OpenAPI description, rendered once per process from this table, copied;
 * the page that shows it is a constant (0 VM steps). */
static const char *const spec_cases[] = {"/api/spec", NULL};
static const char *const docs_cases[] = {"/api/docs", NULL};

/* CoreScope's API-key routes without an upstream: a fixed answer, no database. */
static const char *const key_post_packets_cases[] = {"POST /api/packets", NULL};
static const char *const key_perf_reset_cases[] = {"POST /api/perf/reset", NULL};
static const char *const key_geo_filter_cases[] = {"PUT /api/config/geo-filter", NULL};
static const char *const key_prune_cases[] = {"POST /api/admin/prune-geo-filter", NULL};
static const char *const key_prune_status_cases[] = {"/api/admin/prune-geo-filter/status", NULL};
static const char *const key_affinity_cases[] = {"/api/debug/affinity", NULL};
static const char *const key_dropped_cases[] = {"/api/dropped-packets", NULL};
static const char *const key_backup_cases[] = {"/api/backup", NULL};

/* CoreScope's packet decoder (issue 26, decode): no database; one body of at most
 * MG_DECODE_BODY_MAX bytes, one packet of at most 254 bytes. Its worst answers: the longest
 * ADVERT of the migrated fixture (its signature checked), and a TRACE of 249 bytes (63 SNR
 * values, 175 hops). */
static const char *const decode_cases[] = {
    "POST /api/decode {\"hex\":\"11048EF578ECC718D4805558B8A737E78C6751D95C513C694D6B508EF04A9A85"
    "868DE12F4703A451C96903B35847FF93230B0A6637DD81FB8E7BAD767EF8F305D41F806BB5CAB236DABAD5C678DCF"
    "DE9B135207E9977F45FF333AE49DECDF9D11C5D2F8B11EF28D4F00592109E3602166EBAF853637A4D6E746E20F09F"
    "8F94EFB88F2053756D6D697420\"}",
    "POST /api/decode {\"hex\":\"263fd8dfe6edf4fb020910171e252c333a41484f565d646b727980878e959ca3"
    "aab1b8bfc6cdd4dbe2e9f0f7fe050c131a21282f363d444b525960676e757c838a78563412efbeadde000b30557a9f"
    "c4e90e33587da2c7ec11365b80a5caef14395e83a8cdf2173c6186abd0f51a3f6489aed3f81d42678cb1d6fb20456a"
    "8fb4d9fe23486d92b7dc01264b7095badf04294e7398bde2072c51769bc0e50a2f54799ec3e80d32577ca1c6eb1035"
    "5a7fa4c9ee13385d82a7ccf1163b6085aacff4193e6388add2f71c41668bb0d5fa1f44698eb3d8fd22476c91b6db00"
    "254a6f94b9de03284d7297bce1062b50759abfe4092e53789dc2e70c31\"}",
    NULL};

const struct mg_route mg_routes[] = {
    {.template = "/api/healthz",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_healthz,
     .light_cases = healthz_cases},
    {.template = "/api/nodes",
     .gates = mg_gates_heavy,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_nodes,
     .heavy_when = mg_nodes_is_heavy,
     .params = &mg_nodes_params,
     .light_cases = nodes_cases},
    /* Node search and detail: light (node_search_cases, node_detail_cases). The exact
     * paths come before the :pubkey one that would take them for a key. */
    {.template = "/api/nodes/search",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_node_search,
     .light_cases = node_search_cases,
     .params = &mg_node_search_params},
    /* Heavy unless warm: every ADVERT's observations, twice (the offsets; the keys each is
     * filed under): 33M VM steps, 3.5M pages at 2M observations. */
    /* Heavy: one pass over observations and one over transmissions for all the nodes, then
     * each of their transmissions read once: at 2M observations 5.1 s, 38M VM steps, 3.2M
     * pages (limit=200: 9.7 s, 69M steps, 7.2M pages). */
    {.template = "/api/nodes/bulk-health",
     .gates = mg_gates_heavy,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_bulk_health,
     .params = &mg_bulk_health_params},
    {.template = "/api/nodes/clock-skew",
     .gates = mg_gates_cold,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_fleet_clock_skew,
     .heavy_when = mg_fleet_clock_skew_is_heavy,
     .own_jobs = true,
     .light_cases = fleet_skew_cases,
     .params = &mg_fleet_clock_skew_params},
    /* The small routes of issue 26 (misc): before /api/nodes/:pubkey, as in CoreScope. */
    {.template = "/api/nodes/network-status",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_network_status,
     .light_cases = network_status_cases},
    {.template = "/api/nodes/resolve",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_node_resolve,
     .light_cases = node_resolve_cases,
     .params = &mg_node_resolve_params},
    /* Node analytics and mobile RX coverage (issue 26), before /api/nodes/:pubkey, as in
     * CoreScope's router. Node analytics (ep_node_analytics.c) is a cold report (the node's packets
     * as /health finds them, and its clock skew: every ADVERT's observations), shared by the group,
     * but declares no warm case: its answer lists every packet's SNR and the clock skew's samples
     * (a busy node's runs past what a light answer may write), so the route stays heavy. Mobile RX
     * coverage (ep_rx_coverage.c) is heavy too: with clientRxCoverage on, the maps read the view's
     * receptions and the leaderboard (a cold report) the window's newest 500 000; with it off
     * (CoreScope's default, and the front end's: it then asks none of them) each answers a constant
     * 404, which passes the heavy gates all the same. */
    {.template = "/api/nodes/:pubkey/analytics",
     .gates = mg_gates_cold,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_node_analytics,
     .own_jobs = true,
     .params = &mg_node_analytics_params},
    {.template = "/api/nodes/:pubkey/rx-coverage",
     .gates = mg_gates_heavy,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_node_rx_coverage,
     .served = mg_rx_coverage_served,
     .params = &mg_node_rx_coverage_params},
    {.template = "/api/rx-coverage",
     .gates = mg_gates_heavy,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_rx_coverage,
     .served = mg_rx_coverage_served,
     .params = &mg_rx_coverage_params},
    {.template = "/api/rx-leaderboard",
     .gates = mg_gates_cold,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_rx_leaderboard,
     .served = mg_rx_coverage_served,
     .own_jobs = true,
     .params = &mg_rx_leaderboard_params},
    {.template = "/api/nodes/:pubkey",
     .gates = mg_gates_heavy,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_node_detail,
     .heavy_when = mg_node_detail_is_heavy,
     .light_cases = node_detail_cases},
    /* Heavy: finding a node's packets reads every transmission and observation, as no index
     * serves a key inside decoded_json, resolved_path or path_json (the busiest node at 2M
     * observations: 32.8M VM steps, 432 122 pages, 6.5 s on a loaded machine). */
    {.template = "/api/nodes/:pubkey/health",
     .gates = mg_gates_heavy,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_node_health},
    /* Heavy: every ADVERT's observations (the observers' offsets) and the node's packets (as
     * health finds them): 50M VM steps, 1.5M pages, 14 s at 2M observations. A cold report
     * (the cold gate, coalescing, the shared cache: a node's 169 KB of samples on a
     * 200k-observation database are kept like any body up to a quarter of the pool), but it
     * declares no warm case (no heavy_when, no light cases), so the route stays heavy. */
    {.template = "/api/nodes/:pubkey/clock-skew",
     .gates = mg_gates_cold,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_node_clock_skew,
     .own_jobs = true},
    {.template = "/api/nodes/:pubkey/reach",
     .gates = mg_gates_cold,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_reach,
     .heavy_when = mg_reach_is_heavy,
     .own_jobs = true,
     .holds_in_build = true,
     .light_cases = reach_cases,
     .params = &mg_reach_params},
    {.template = "/api/nodes/:pubkey/paths",
     .gates = mg_gates_cold,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_node_paths,
     .heavy_when = mg_node_paths_is_heavy,
     .own_jobs = true,
     .light_cases = paths_cases},
    /* Observer metrics (ep_observer_metrics.c): a node's battery series. Heavy: the samples
     * of the window (365 days every 5 minutes: 105 120 rows). */
    {.template = "/api/nodes/:pubkey/battery",
     .gates = mg_gates_heavy,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_node_battery,
     .params = &mg_node_battery_params},
    {.template = "/api/nodes/:pubkey/neighbors",
     .gates = mg_gates_cold,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_node_neighbors,
     .heavy_when = mg_node_neighbors_is_heavy,
     .own_jobs = true,
     .light_cases = neighbors_cases,
     .params = &mg_node_neighbors_params},
    /* The Analytics page: roles, hash sizes, collisions (analytics_roles_cases above). */
    {.template = "/api/analytics/roles",
     .gates = mg_gates_cold,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_analytics_roles,
     .heavy_when = mg_analytics_roles_is_heavy,
     .own_jobs = true,
     .light_cases = analytics_roles_cases},
    /* The hash sizes tab (ep_analytics_hashsz.c), where CoreScope's router has it: a cold
     * report of every observation, light when warm. */
    {.template = "/api/analytics/hash-sizes",
     .gates = mg_gates_cold,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_hash_sizes,
     .heavy_when = mg_hash_sizes_is_heavy,
     .own_jobs = true,
     .light_cases = hash_sizes_cases,
     .params = &mg_hash_sizes_params},
    {.template = "/api/analytics/hash-collisions",
     .gates = mg_gates_cold,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_hash_collisions,
     .heavy_when = mg_hash_collisions_is_heavy,
     .own_jobs = true,
     .light_cases = hash_collisions_cases,
     .params = &mg_hash_collisions_params},
    /* The Analytics page's signal reports (ep_analytics_rf.c), where CoreScope's router has
     * them: cold reports of every observation (docs/benchmarks.md), light when warm. */
    {.template = "/api/analytics/rf",
     .gates = mg_gates_cold,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_analytics_rf,
     .heavy_when = mg_analytics_rf_is_heavy,
     .own_jobs = true,
     .light_cases = analytics_rf_cases,
     .params = &mg_analytics_window_params},
    /* Always heavy, though a cold report: its answer lists every message's length, 352 KB
     * warm at 2M observations (a light answer renders at most 64 KiB). */
    {.template = "/api/analytics/channels",
     .gates = mg_gates_cold,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_analytics_channels,
     .own_jobs = true,
     .params = &mg_analytics_window_params},
    /* The Route Patterns tab (ep_analytics_subpaths.c), where CoreScope's router has it: cold
     * reports, light when warm. */
    {.template = "/api/analytics/subpaths",
     .gates = mg_gates_cold,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_analytics_subpaths,
     .heavy_when = mg_analytics_subpaths_is_heavy,
     .own_jobs = true,
     .light_cases = analytics_subpaths_cases,
     .params = &mg_analytics_subpaths_params},
    {.template = "/api/analytics/subpaths-bulk",
     .gates = mg_gates_cold,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_analytics_subpaths_bulk,
     .heavy_when = mg_analytics_subpaths_bulk_is_heavy,
     .own_jobs = true,
     .light_cases = analytics_subpaths_bulk_cases,
     .params = &mg_analytics_subpaths_bulk_params},
    {.template = "/api/analytics/subpath-detail",
     .gates = mg_gates_cold,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_analytics_subpath_detail,
     .heavy_when = mg_analytics_subpath_detail_is_heavy,
     .own_jobs = true,
     .light_cases = analytics_subpath_detail_cases,
     .params = &mg_analytics_subpath_detail_params},
    /* The Analytics page's subpaths and neighbour graph (ep_neighbor_graph.c), where
     * CoreScope's router has them: cold reports, light when warm (neighbor_graph_cases). */
    {.template = "/api/analytics/neighbor-graph",
     .gates = mg_gates_cold,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_neighbor_graph,
     .heavy_when = mg_neighbor_graph_is_heavy,
     .own_jobs = true,
     .light_cases = neighbor_graph_cases,
     .params = &mg_neighbor_graph_params},
    /* The Analytics page's topology and distance (ep_analytics_topo.c): cold reports. */
    {.template = "/api/analytics/topology",
     .gates = mg_gates_cold,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_analytics_topology,
     .heavy_when = mg_analytics_topology_is_heavy,
     .own_jobs = true,
     .light_cases = analytics_topology_cases,
     .params = &mg_analytics_window_params},
    {.template = "/api/analytics/distance",
     .gates = mg_gates_cold,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_analytics_distance,
     .heavy_when = mg_analytics_distance_is_heavy,
     .own_jobs = true,
     .light_cases = analytics_distance_cases,
     .params = &mg_analytics_distance_params},
    /* The relay airtime share (ep_analytics_airtime.c), last of the Analytics routes as in
     * CoreScope's router: a cold report of every observation's resolved path. */
    {.template = "/api/analytics/relay-airtime-share",
     .gates = mg_gates_cold,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_relay_airtime,
     .heavy_when = mg_relay_airtime_is_heavy,
     .own_jobs = true,
     .light_cases = relay_airtime_cases,
     .params = &mg_relay_airtime_params},
    /* Heavy but for a page the summaries answer (packets_cases). */
    {.template = "/api/packets",
     .gates = mg_gates_heavy,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_packets,
     .heavy_when = mg_packets_is_heavy,
     .light_cases = packets_cases,
     .parks_until = mg_packets_parks_until,
     .params = &mg_packets_params},
    /* Issue 14 (classes and measurements above and in docs/benchmarks.md). Heavy: a row per
     * transmission after ?since= (193k steps for a day at 2M observations). */
    {.template = "/api/packets/timestamps",
     .gates = mg_gates_heavy,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_packet_timestamps,
     .params = &mg_packet_timestamps_params},
    {.template = "/api/packets/:id",
     .gates = mg_gates_heavy,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_packet_detail,
     .heavy_when = mg_packet_detail_is_heavy,
     .light_cases = packet_detail_cases},
    {.template = "/api/traces/:hash",
     .gates = mg_gates_heavy,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_traces,
     .heavy_when = mg_traces_is_heavy,
     .light_cases = traces_cases},
    /* Heavy with more than MG_RESOLVE_HOPS_LIGHT_MAX hops, or with from_node or observer while
     * the worker has no fresh neighbour graph (its build: a pass over observations, 28-41 s at
     * 2M on a loaded machine). */
    {.template = "/api/resolve-hops",
     .gates = mg_gates_heavy,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_resolve_hops,
     .heavy_when = mg_resolve_hops_is_heavy,
     .light_cases = resolve_hops_cases,
     .params = &mg_resolve_hops_params},
    /* CoreScope's path inspector (issue 26, item 1: inspect; ep_paths_inspect.c): a beam
     * search over the body's hop prefixes. Light with one hop or a refused body; heavy with
     * more (a pass over neighbor_edges, or the group's neighbour graph, and the search:
     * at most 64 hops x 20 paths x a hop's candidates). */
    {.template = "POST /api/paths/inspect",
     .gates = mg_gates_heavy,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_paths_inspect,
     .heavy_when = mg_paths_inspect_is_heavy,
     .light_cases = paths_inspect_cases,
     .body_max = MG_PATHS_INSPECT_BODY_MAX},
    {.template = "/api/iata-coords",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_iata_coords,
     .light_cases = iata_cases},
    /* The Audio Lab's sample packets (ep_audio_lab.c): a cold report of every transmission. */
    {.template = "/api/audio-lab/buckets",
     .gates = mg_gates_cold,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_audio_lab,
     .heavy_when = mg_audio_lab_is_heavy,
     .own_jobs = true,
     .light_cases = audio_lab_cases},
    /* Heavy: packetsLastHour counts the last hour's observations (11 600 index rows in the
     * busiest hour of the 2M database; it grows with traffic). */
    {.template = "/api/observers",
     .gates = mg_gates_heavy,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_observers},
    /* Observer metrics (ep_observer_metrics.c), before the :id routes. Heavy: the summary
     * reads every sample of its window (any length), a series its observer's. */
    {.template = "/api/observers/metrics/summary",
     .gates = mg_gates_heavy,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_metrics_summary,
     .params = &mg_metrics_summary_params},
    {.template = "/api/observers/:id/metrics",
     .gates = mg_gates_heavy,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_observer_metrics,
     .params = &mg_observer_metrics_params},
    {.template = "/api/observers/clock-skew",
     .gates = mg_gates_cold,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_observer_clock_skew,
     .heavy_when = mg_observer_clock_skew_is_heavy,
     .own_jobs = true,
     .light_cases = clock_skew_cases},
    {.template = "/api/observers/:id/analytics",
     .gates = mg_gates_cold,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_observer_analytics,
     .heavy_when = mg_observer_analytics_is_heavy,
     .own_jobs = true,
     .light_cases = analytics_cases,
     .params = &mg_observer_analytics_params},
    {.template = "/api/observers/:id",
     .gates = mg_gates_heavy,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_observer},
    /* Heavy: every GRP_TXT transmission is grouped, 590 ms (with a region, their
     * observations: 8.8 s). */
    {.template = "/api/channels",
     .gates = mg_gates_heavy,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_channels,
     .params = &mg_channels_params},
    /* Heavy: each of the channel's messages gets its newest sighting to choose the page
     * (868 ms for the busiest channel). */
    {.template = "/api/channels/:hash/messages",
     .gates = mg_gates_heavy,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_channel_messages,
     .params = &mg_channel_messages_params},
    {.template = "/api/known-channels",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_known_channels,
     .light_cases = known_channels_cases,
     .params = &mg_known_channels_params},
    {.template = "/api/stats",
     .gates = mg_gates_heavy,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_stats,
     .heavy_when = mg_stats_is_heavy,
     .light_cases = stats_cases},
    {.template = "/api/perf",
     .gates = mg_gates_diag,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_perf,
     .heavy_when = mg_perf_is_heavy,
     .own_jobs = true,
     .light_cases = perf_cases,
     .params = &mg_perf_params},
    /* The Perf page's disk cards (issue 26, misc): light. */
    {.template = "/api/perf/sqlite",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_perf_sqlite,
     .light_cases = perf_sqlite_cases},
    {.template = "/api/perf/io",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_perf_io,
     .light_cases = perf_io_cases},
    {.template = "/api/perf/write-sources",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_perf_write_sources,
     .light_cases = perf_write_sources_cases},
    /* CoreScope's configuration, its health and its scopes (issue 14, h14a). */
    {.template = "/api/config/client",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_config,
     .light_cases = config_client_cases},
    {.template = "/api/config/cache",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_config,
     .light_cases = config_cache_cases},
    {.template = "/api/config/theme",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_config,
     .light_cases = config_theme_cases},
    {.template = "/api/config/map",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_config,
     .light_cases = config_map_cases},
    {.template = "/api/config/geo-filter",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_config,
     .light_cases = config_geo_filter_cases},
    {.template = "/api/config/areas",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_config,
     .light_cases = config_areas_cases},
    {.template = "/api/config/areas/polygons",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_config,
     .light_cases = config_polygons_cases},
    {.template = "/api/config/regions",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_config_regions,
     .light_cases = config_regions_cases},
    {.template = "/api/health",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_health,
     .light_cases = health_cases},
    {.template = "/api/mqtt/status",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_mqtt_status,
     .light_cases = mqtt_status_cases},
    /* Heavy: counts the window's transmissions (through the first_seen index); 7d is most of
     * the table (docs/benchmarks.md: 2M observations). */
    {.template = "/api/scope-stats",
     .gates = mg_gates_cold,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_scope_stats,
     .heavy_when = mg_scope_stats_is_heavy,
     .own_jobs = true,
     .light_cases = scope_cases,
     .params = &mg_scope_stats_params},
    /* meshgate's own API description (issue 26, misc). */
    {.template = "/api/spec",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_spec,
     .light_cases = spec_cases},
    {.template = "/api/docs",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_docs,
     .light_cases = docs_cases},
    /* CoreScope's POST tools and API-key routes (issue 26, item 1: posttools). A POST tool
     * reads its JSON body (Content-Length, at most body_max bytes: CoreScope's own limit
     * where it has one, else a bound of ours above what its front end sends); an API-key
     * route goes to the upstream when there is one, else answers as CoreScope's without a
     * key (ep_keyed.c). Heavy: a batch of up to 200 hashes, each a walk of its
     * observations (800 each on the heavy shape). */
    {.template = "POST /api/packets/observations",
     .gates = mg_gates_heavy,
     .cost = MG_COST_HEAVY,
     .handler = mg_handle_batch_observations,
     .body_max = MG_BATCH_OBSERVATIONS_BODY_MAX},
    /* CoreScope's packet decoder (issue 26, decode): light, no database (ep_decode.c); its
     * body bound is ours (CoreScope reads any length): a packet is at most 508 hex digits,
     * and the bound leaves room for spaces and line breaks in a pasted one. */
    {.template = "POST /api/decode",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_decode,
     .light_cases = decode_cases,
     .body_max = MG_DECODE_BODY_MAX},
    {.template = "POST /api/packets",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_key_protected,
     .light_cases = key_post_packets_cases,
     .upstream_first = true},
    {.template = "POST /api/perf/reset",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_key_protected,
     .light_cases = key_perf_reset_cases,
     .upstream_first = true},
    {.template = "PUT /api/config/geo-filter",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_key_protected,
     .light_cases = key_geo_filter_cases,
     .upstream_first = true},
    {.template = "POST /api/admin/prune-geo-filter",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_key_protected,
     .light_cases = key_prune_cases,
     .upstream_first = true},
    {.template = "/api/admin/prune-geo-filter/status",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_key_protected,
     .light_cases = key_prune_status_cases,
     .upstream_first = true},
    {.template = "/api/debug/affinity",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_key_protected,
     .light_cases = key_affinity_cases,
     .upstream_first = true},
    {.template = "/api/dropped-packets",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_key_protected,
     .light_cases = key_dropped_cases,
     .upstream_first = true},
    {.template = "/api/backup",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_key_protected,
     .light_cases = key_backup_cases,
     .upstream_first = true},
    {.template = "/server-status",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_status,
     .light_cases = status_cases,
     .admin_only = true},
    {.template = "/metrics",
     .gates = mg_gates_light,
     .cost = MG_COST_LIGHT,
     .handler = mg_handle_metrics,
     .light_cases = metrics_cases,
     .admin_only = true},
};
const unsigned mg_route_table_len = sizeof mg_routes / sizeof mg_routes[0];

unsigned mg_route_by_template(const char *t, size_t n)
{
    for (unsigned i = 0; i < mg_route_table_len; i++)
        if (strlen(mg_routes[i].template) == n && memcmp(mg_routes[i].template, t, n) == 0)
            return i;
    return MG_ROUTE_NOT_FOUND;
}

unsigned mg_route_names(const char **out, unsigned cap)
{
    unsigned n = 0;
    for (unsigned i = 0; i < mg_route_table_len && n < cap; i++)
        out[n++] = mg_routes[i].template;
    if (n < cap)
        out[n++] = "(not found)";
    if (n < cap)
        out[n++] = "(bad request)";
    if (n < cap)
        out[n++] = "(static)";
    if (n < cap)
        out[n++] = "(upstream)";
    if (n < cap)
        out[n++] = "(tunnel)";
    return n;
}

/* Literal routes of CoreScope's server at a place where meshgate's own routes take a
 * parameter (/api/nodes/network-status and /api/nodes/resolve beside /api/nodes/{pubkey}):
 * no key, id or hash is one of these words, so a parameter never stands for them and the
 * request goes where CoreScope's server would take it (the upstream, or 404 without one). */
static const char *const corescope_literals[] = {"network-status", "resolve"};

static bool is_corescope_literal(const char *segment)
{
    for (size_t i = 0; i < sizeof corescope_literals / sizeof corescope_literals[0]; i++)
        if (strcmp(segment, corescope_literals[i]) == 0)
            return true;
    return false;
}

static bool match(const char *tmpl, const char *path, char *param, size_t cap)
{
    while (*tmpl && *path) {
        if (*tmpl == ':') {
            const char *slash = strchr(path, '/');
            size_t n = slash ? (size_t)(slash - path) : strlen(path);
            if (n == 0 || n >= cap)
                return false;
            memcpy(param, path, n);
            param[n] = '\0';
            if (is_corescope_literal(param))
                return false;
            path += n;
            tmpl = strchr(tmpl, '/');
            if (!tmpl)
                return *path == '\0';
            continue;
        }
        if (*tmpl != *path)
            return false;
        tmpl++, path++;
    }
    return *tmpl == '\0' && *path == '\0';
}

unsigned mg_route_match(const char *path, char *param, size_t cap)
{
    if (cap)
        param[0] = '\0';
    for (unsigned i = 0; i < mg_route_table_len; i++)
        if (match(mg_routes[i].template, path, param, cap))
            return i;
    return MG_ROUTE_NOT_FOUND;
}

const char *mg_route_method(unsigned route)
{
    return route < mg_route_table_len ? mg_route_row_method(&mg_routes[route]) : "GET";
}

const char *mg_route_path(unsigned route)
{
    return route < mg_route_table_len ? mg_route_row_path(&mg_routes[route]) : "";
}

unsigned mg_route_match_method(const char *method, size_t method_len, const char *path, char *param,
                               size_t cap, const char **allow)
{
    /* Which methods the path has: GET (with HEAD) 1, POST 2, PUT 4. */
    static const char *const allow_text[8] = {
        NULL,  "GET, HEAD",      "POST",      "GET, HEAD, POST",
        "PUT", "GET, HEAD, PUT", "POST, PUT", "GET, HEAD, POST, PUT"};
    bool get = (method_len == 3 && memcmp(method, "GET", 3) == 0) ||
               (method_len == 4 && memcmp(method, "HEAD", 4) == 0);
    unsigned have = 0;
    if (cap)
        param[0] = '\0';
    for (unsigned i = 0; i < mg_route_table_len; i++) {
        const char *t = mg_routes[i].template;
        const char *p = mg_route_row_path(&mg_routes[i]);
        size_t n = p == t ? 0 : (size_t)(p - t) - 1;
        if (!match(p, path, param, cap))
            continue;
        if (n ? n == method_len && memcmp(t, method, n) == 0 : get) {
            if (allow)
                *allow = NULL;
            return i;
        }
        const char *m = mg_route_method(i);
        have |= strcmp(m, "GET") == 0 ? 1u : strcmp(m, "POST") == 0 ? 2u : 4u;
    }
    if (cap)
        param[0] = '\0';
    if (allow)
        *allow = allow_text[have];
    return MG_ROUTE_NOT_FOUND;
}

/* ---- the routes of one node ---- */

static const char node_route_prefix[] = "/api/nodes/:";

bool mg_node_visibility_guards(unsigned route)
{
    return route < mg_route_table_len &&
           strncmp(mg_routes[route].template, node_route_prefix, sizeof node_route_prefix - 1) == 0;
}

static bool is_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i]))
            return false;
    return true;
}

enum mg_turn mg_node_visibility_guard(struct mg_env *env, const struct mg_request *req,
                                      struct mg_response *res)
{
    char ignored[MG_PATH_PARAM_MAX];
    unsigned route = mg_route_match(req->path, ignored, sizeof ignored);
    if (!mg_node_visibility_guards(route)) {
        mg_response_error(res, 404, "Not found"); /* not reached: dispatch chose it */
        return MG_DONE;
    }
    if (mg_node_visibility_hides()) {
        char key[MG_PATH_PARAM_MAX];
        size_t n = strlen(req->path_param);
        for (size_t i = 0; i <= n; i++)
            key[i] = (char)tolower((unsigned char)req->path_param[i]);
        /* Only the node's own page takes a short key (CoreScope's short links). */
        bool short_key = strcmp(mg_routes[route].template, "/api/nodes/:pubkey") == 0 && n >= 8 &&
                         n < 64 && is_hex(key, n);
        bool hidden;
        int rc = mg_node_key_hidden(env->db->conn, key, short_key, &hidden);
        if (rc != SQLITE_OK) {
            mg_response_db_failure(res, "the node", rc);
            return MG_DONE;
        }
        if (hidden) {
            mg_response_error(res, 404, "Not found");
            return MG_DONE;
        }
    }
    return mg_routes[route].handler(env, req, res);
}

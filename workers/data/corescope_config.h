/* SPDX-License-Identifier: ISC */
/*
 * corescope_config: the operator's CoreScope config.json (MESHGATE_CORESCOPE_CONFIG), read by
 * the master with jansson at start and on SIGHUP, and turned at once into the finished bodies
 * of /api/config/{cache,client,theme,map,geo-filter,areas,areas/polygons} and the list of
 * configured regions. Workers fork from the master and serve those bytes: no request parses
 * anything, and a reload's new workers serve the new file while old ones finish on the old.
 *
 * What each body holds is what CoreScope's server answers for the same file (its built-in
 * defaults for every key the file lacks, the deprecated top-level "tiles" and
 * "mapDarkTileProvider" moved into map.tiles, timestamps normalised, maps with their keys in
 * bytewise order). Without a file the bodies are those defaults. `theme.json` beside the file,
 * when there is one, overlays the theme as CoreScope's theme.json does.
 *
 * Where meshgate differs on purpose: a file that is not JSON, or whose known keys have the
 * wrong type, is refused with the file, line and column (CoreScope falls back to defaults in
 * silence); areas are listed sorted by key (CoreScope: Go's random map order); geo-filter's
 * writeEnabled is always false (meshgate has no write endpoints).
 */
#ifndef MESHGATE_CORESCOPE_CONFIG_H
#define MESHGATE_CORESCOPE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum mg_corescope_body {
    MG_CS_CACHE,
    MG_CS_CLIENT,
    MG_CS_THEME,
    MG_CS_MAP,
    MG_CS_GEO_FILTER,
    MG_CS_AREAS,
    MG_CS_AREAS_POLYGONS,
    MG_CS_BODY_COUNT
};

struct mg_corescope_region {
    char *code;
    char *name;
};

/* An entry of "areas": a polygon of [lat, lon] points, and the legacy bounding box. */
struct mg_corescope_area {
    char *key;
    double (*polygon)[2];
    size_t polygon_len;
    bool has_box; /* all four of latMin, latMax, lonMin, lonMax */
    double lat_min, lat_max, lon_min, lon_max;
};

struct mg_corescope_config {
    bool loaded;
    /* finished JSON bodies, each ending in "\n" */
    char *body[MG_CS_BODY_COUNT];
    size_t body_len[MG_CS_BODY_COUNT];
    /* "regions" of the file: code -> display name, sorted by code (bytewise) */
    struct mg_corescope_region *regions;
    size_t region_count;
    /* healthThresholds.relayActiveHours (24 when absent): how recent a repeater's last relay
     * must be for relay_active (node_relay.h) */
    double relay_active_hours;
    /* batteryThresholds.lowMv and .criticalMv as written (0 when absent: the battery route's
     * defaults, 3300 and 3000, apply to a value of 0 or less, as CoreScope's) */
    long long battery_low_mv, battery_critical_mv;
    /* clientRxCoverage.enabled (false when absent): CoreScope's opt-in mobile RX coverage
     * routes (ep_rx_coverage.c) answer 404 without it */
    bool client_rx_coverage;
    /* healthThresholds' degraded and silent ages, ms, as CoreScope's GetHealthMs (truncated
     * like its int()): repeaters and rooms use the infra pair, every other role the node pair
     * (defaults 24 h / 72 h and 1 h / 24 h). */
    int64_t infra_degraded_ms, infra_silent_ms, node_degraded_ms, node_silent_ms;
    /* analytics.loraPreset's freq, bw, sf and cr as written (0 when absent): the relay airtime
     * share's PHY preset (ep_analytics_airtime.c puts CoreScope's defaults in their place) */
    double lora_freq_hz, lora_bw_khz;
    long long lora_sf, lora_cr;
    /* "areas", sorted by key (bytewise) */
    struct mg_corescope_area *areas;
    size_t area_count;
    /* The three settings that hide nodes (workers/data/node_visibility.h applies them):
     * "geo_filter" present (an object) -> has_geo_filter, its polygon or box in geo_filter
     * (key NULL) and its bufferKm; "hiddenNamePrefixes" as written (empty ones dropped);
     * "nodeBlacklist" trimmed and lowercased (empty ones dropped). */
    bool has_geo_filter;
    struct mg_corescope_area geo_filter;
    double geo_buffer_km;
    char **hidden_prefixes;
    size_t hidden_prefix_count;
    char **blacklist;
    size_t blacklist_count;
    /* "observerBlacklist", as nodeBlacklist (node_visibility.h applies it to observers) */
    char **observer_blacklist;
    size_t observer_blacklist_count;
    /* "apiKey" is set (a non-empty string): CoreScope's API-key routes are open there to a
     * client with the key (ep_keyed.c); meshgate keeps no copy of the key. */
    bool api_key_set;
    /* Different for every load in this process: what is derived from a configuration (the
     * visibility rules) is rebuilt when it changes. */
    unsigned long generation;
};

/* The configuration this process serves: loaded by the preflight (and on SIGHUP by the
 * master), inherited by the workers. */
extern struct mg_corescope_config mg_corescope;

/*
 * Reads path (empty: none, CoreScope's defaults) and renders every body into c (which must be
 * zeroed or freed). 0, or -1 with a message naming the file, and for a syntax error its line
 * and column, in err; c is left empty then.
 */
int mg_corescope_load(struct mg_corescope_config *c, const char *path, char *err, size_t errlen);
/* The same from texts in memory: config.json's (config_len bytes) and theme.json's (NULL:
 * none); name stands for the file in messages. */
int mg_corescope_load_text(struct mg_corescope_config *c, const char *name, const char *config,
                           size_t config_len, const char *theme, size_t theme_len, char *err,
                           size_t errlen);
void mg_corescope_free(struct mg_corescope_config *c);

/* Writes a parsed JSON value as CoreScope's encoder writes a decoded document: objects with
 * their keys in bytewise order (v is a jansson json_t *). */
struct mg_json;
void mg_corescope_json_emit(struct mg_json *j, void *v);

/* The area of that key; NULL when the file has none. */
const struct mg_corescope_area *mg_corescope_area(const struct mg_corescope_config *c,
                                                  const char *key);
/* CoreScope's geofilter.PassesFilter for an area: (0, 0) passes; inside a polygon of 3 or more
 * points (ray casting); else inside the bounding box when it has one; else passes. */
bool mg_corescope_area_holds(const struct mg_corescope_area *a, double lat, double lon);

/* CoreScope's geofilter.PassesFilter for geo_filter: an area's test (above), where a point
 * outside the polygon also passes within bufferKm of one of its edges (measured on a flat
 * projection: 111 km a degree of latitude, times the cosine of the edge's mean latitude for
 * longitude). True when the file has no geo_filter. */
bool mg_corescope_geo_passes(const struct mg_corescope_config *c, double lat, double lon);

/* mg_corescope, loaded with the defaults first if nothing loaded it (in-process tests). */
const struct mg_corescope_config *mg_corescope_current(void);

#endif

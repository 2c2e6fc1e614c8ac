/* SPDX-License-Identifier: ISC */
#include "corescope_config.h"

#include "buf.h"
#include "json.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct mg_corescope_config mg_corescope;

/* What loading is doing, for messages: the file, and the first error met. */
struct loader {
    const char *path;
    char *err;
    size_t errlen;
    bool failed;
};

static void fail(struct loader *l, const char *key, const char *expected)
{
    if (l->failed)
        return;
    l->failed = true;
    snprintf(l->err, l->errlen, "MESHGATE_CORESCOPE_CONFIG=%s: \"%s\" must be %s", l->path, key,
             expected);
}

/* Writes any JSON value as CoreScope's encoder does with a decoded document: objects with
 * their keys in bytewise order. */
static int by_key(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void emit_object(struct mg_json *j, json_t *obj)
{
    size_t n = json_object_size(obj), i = 0;
    const char **keys = calloc(n ? n : 1, sizeof *keys);
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v) keys[i++] = k;
    qsort(keys, n, sizeof *keys, by_key);
    mg_json_object_begin(j);
    for (i = 0; i < n; i++) {
        mg_json_key(j, keys[i]);
        mg_corescope_json_emit(j, json_object_get(obj, keys[i]));
    }
    mg_json_object_end(j);
    free(keys);
}

void mg_corescope_json_emit(struct mg_json *j, void *value)
{
    json_t *v = value;
    size_t i;
    json_t *e;
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        emit_object(j, v);
        break;
    case JSON_ARRAY:
        mg_json_array_begin(j);
        json_array_foreach(v, i, e) mg_corescope_json_emit(j, e);
        mg_json_array_end(j);
        break;
    case JSON_STRING:
        mg_json_string_n(j, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER:
        mg_json_int(j, json_integer_value(v));
        break;
    case JSON_REAL:
        mg_json_double(j, json_real_value(v));
        break;
    case JSON_TRUE:
        mg_json_bool(j, true);
        break;
    case JSON_FALSE:
        mg_json_bool(j, false);
        break;
    case JSON_NULL:
        mg_json_null(j);
        break;
    }
}

/* A member that may be absent or null (both: NULL), else must have the type asked for. */
static json_t *member(struct loader *l, json_t *obj, const char *key, const char *path_key,
                      json_type type, const char *expected)
{
    json_t *v = obj ? json_object_get(obj, key) : NULL;
    if (!v || json_is_null(v))
        return NULL;
    if (json_typeof(v) != type && !(type == JSON_REAL && json_is_number(v)) &&
        !(type == JSON_TRUE && json_is_boolean(v))) {
        fail(l, path_key, expected);
        return NULL;
    }
    return v;
}

static json_t *object_member(struct loader *l, json_t *obj, const char *key, const char *path_key)
{
    return member(l, obj, key, path_key, JSON_OBJECT, "an object");
}

static double number_member(struct loader *l, json_t *obj, const char *key, const char *path_key)
{
    json_t *v = member(l, obj, key, path_key, JSON_REAL, "a number");
    return v ? json_number_value(v) : 0;
}

static json_int_t int_member(struct loader *l, json_t *obj, const char *key, const char *path_key)
{
    json_t *v = member(l, obj, key, path_key, JSON_INTEGER, "a whole number");
    return v ? json_integer_value(v) : 0;
}

/* A duration of healthThresholds: a number (what: NULL, a whole number of minutes) of at most
 * MAX_DURATION, so that its milliseconds fit (CoreScope's int() of a larger one is garbage). */
#define MAX_DURATION 1e9
static double bounded_member(struct loader *l, json_t *obj, const char *key, const char *path_key,
                             const char *what)
{
    double v =
        what ? number_member(l, obj, key, path_key) : (double)int_member(l, obj, key, path_key);
    if (v > MAX_DURATION) {
        char expected[96];
        snprintf(expected, sizeof expected, "%s up to %.0f",
                 what ? what : "a whole number of minutes", MAX_DURATION);
        fail(l, path_key, expected);
        return 0;
    }
    return v;
}

static const char *string_member(struct loader *l, json_t *obj, const char *key,
                                 const char *path_key)
{
    json_t *v = member(l, obj, key, path_key, JSON_STRING, "a string");
    return v ? json_string_value(v) : "";
}

static bool bool_member(struct loader *l, json_t *obj, const char *key, const char *path_key)
{
    json_t *v = member(l, obj, key, path_key, JSON_TRUE, "true or false");
    return v && json_is_true(v);
}

static void kv_value_or_null(struct mg_json *j, const char *key, json_t *v)
{
    mg_json_key(j, key);
    if (v)
        mg_corescope_json_emit(j, v);
    else
        mg_json_null(j);
}

/* An object of defaults (pairs of strings), then each overlay's keys over it (shallow, as
 * CoreScope merges). Returns a new reference. */
static json_t *merged(const char *const *defaults, json_t *overlay1, json_t *overlay2)
{
    json_t *m = json_object();
    for (const char *const *d = defaults; d && d[0]; d += 2)
        json_object_set_new(m, d[0], json_string(d[1]));
    if (overlay1)
        json_object_update(m, overlay1);
    if (overlay2)
        json_object_update(m, overlay2);
    return m;
}

static char *finish(struct mg_buf *b, size_t *len)
{
    mg_buf_putc(b, '\n');
    if (b->failed) {
        mg_buf_free(b);
        return NULL;
    }
    mg_buf_cstr(b); /* NUL-terminated too, for whoever reads it as a string */
    *len = b->len;
    return b->data; /* the buffer's memory becomes the body */
}

/* ---- /api/config/cache: cacheTTL as it is, or {} ---- */
static void render_cache(struct loader *l, json_t *root, struct mg_json *j)
{
    json_t *ttl = object_member(l, root, "cacheTTL", "cacheTTL");
    if (ttl)
        mg_corescope_json_emit(j, ttl);
    else {
        mg_json_object_begin(j);
        mg_json_object_end(j);
    }
}

/* ---- /api/config/client ---- */

static void render_health_thresholds(struct loader *l, json_t *root, struct mg_json *j)
{
    json_t *h = object_member(l, root, "healthThresholds", "healthThresholds");
    static const struct {
        const char *key, *path, *out;
        double def;
    } hours[] = {
        {"infraDegradedHours", "healthThresholds.infraDegradedHours", "infraDegradedMs", 24},
        {"infraSilentHours", "healthThresholds.infraSilentHours", "infraSilentMs", 72},
        {"nodeDegradedHours", "healthThresholds.nodeDegradedHours", "nodeDegradedMs", 1},
        {"nodeSilentHours", "healthThresholds.nodeSilentHours", "nodeSilentMs", 24},
    };
    mg_json_object_begin(j); /* keys in bytewise order */
    for (size_t i = 0; i < sizeof hours / sizeof hours[0]; i++) {
        double v = bounded_member(l, h, hours[i].key, hours[i].path, "a number of hours");
        double use = v > 0 ? v : hours[i].def;
        mg_json_kv_int(j, hours[i].out, (int64_t)(use * 3600000.0)); /* truncated, as Go's int() */
    }
    (void)bounded_member(l, h, "relayActiveHours", "healthThresholds.relayActiveHours",
                         "a number of hours");
    json_int_t online = (json_int_t)bounded_member(l, h, "observerOnlineMinutes",
                                                   "healthThresholds.observerOnlineMinutes", NULL);
    json_int_t stale = (json_int_t)bounded_member(l, h, "observerStaleMinutes",
                                                  "healthThresholds.observerStaleMinutes", NULL);
    mg_json_kv_int(j, "observerOnlineMs", (online > 0 ? online : 60) * 60000);
    mg_json_kv_int(j, "observerStaleMs", (stale > 0 ? stale : 1440) * 60000);
    mg_json_object_end(j);
}

/* "map", with the deprecated top-level "mapDarkTileProvider" and "tiles" moved into
 * map.tiles where it has no such key (CoreScope's migration at load). New reference. */
static json_t *migrated_map(struct loader *l, json_t *root)
{
    json_t *map = object_member(l, root, "map", "map");
    json_t *m = map ? json_deep_copy(map) : json_object();
    json_t *tiles = json_object_get(m, "tiles");
    if (!tiles || json_is_null(tiles)) {
        tiles = json_object();
        json_object_set_new(m, "tiles", tiles);
    }
    const char *dark = string_member(l, root, "mapDarkTileProvider", "mapDarkTileProvider");
    json_t *old = object_member(l, root, "tiles", "tiles");
    if (!json_is_object(tiles))
        return m;
    json_t *have = json_object_get(tiles, "darkDefault");
    if (dark[0] && (!have || json_is_null(have)))
        json_object_set_new(tiles, "darkDefault", json_string(dark));
    const char *k;
    json_t *v;
    json_object_foreach(old, k, v)
    {
        json_t *cur = json_object_get(tiles, k);
        if (!cur || json_is_null(cur))
            json_object_set(tiles, k, v);
    }
    return m;
}

/* One of CoreScope's accepted words, lowercased and trimmed, or the default. */
static void normalised_word(const char *in, const char *const *accepted, char *out, size_t cap)
{
    while (*in && isspace((unsigned char)*in))
        in++;
    size_t n = strlen(in);
    while (n && isspace((unsigned char)in[n - 1]))
        n--;
    char word[32];
    if (n < sizeof word) {
        for (size_t i = 0; i < n; i++)
            word[i] = (char)tolower((unsigned char)in[i]);
        word[n] = '\0';
        for (const char *const *a = accepted; *a; a++)
            if (strcmp(word, *a) == 0) {
                snprintf(out, cap, "%s", word);
                return;
            }
    }
    snprintf(out, cap, "%s", accepted[0]); /* the first is the default */
}

static void render_timestamps(struct loader *l, json_t *root, struct mg_json *j)
{
    static const char *const modes[] = {"ago", "absolute", NULL};
    static const char *const zones[] = {"local", "utc", NULL};
    static const char *const presets[] = {"iso", "iso-seconds", "locale", NULL};
    json_t *t = object_member(l, root, "timestamps", "timestamps");
    char mode[32], zone[32], preset[32];
    normalised_word(t ? string_member(l, t, "defaultMode", "timestamps.defaultMode") : "ago", modes,
                    mode, sizeof mode);
    normalised_word(t ? string_member(l, t, "timezone", "timestamps.timezone") : "local", zones,
                    zone, sizeof zone);
    normalised_word(t ? string_member(l, t, "formatPreset", "timestamps.formatPreset") : "iso",
                    presets, preset, sizeof preset);
    mg_json_object_begin(j); /* CoreScope's field order */
    mg_json_kv_string(j, "defaultMode", mode);
    mg_json_kv_string(j, "timezone", zone);
    mg_json_kv_string(j, "formatPreset", preset);
    mg_json_kv_string(j, "customFormat",
                      string_member(l, t, "customFormat", "timestamps.customFormat"));
    mg_json_kv_bool(j, "allowCustomFormat",
                    bool_member(l, t, "allowCustomFormat", "timestamps.allowCustomFormat"));
    mg_json_object_end(j);
}

static void kv_int_or_null(struct loader *l, struct mg_json *j, json_t *root, const char *key)
{
    json_t *v = member(l, root, key, key, JSON_INTEGER, "a whole number");
    mg_json_key(j, key);
    if (v)
        mg_json_int(j, json_integer_value(v));
    else
        mg_json_null(j);
}

static void render_client(struct loader *l, json_t *root, struct mg_json *j)
{
    mg_json_object_begin(j); /* CoreScope's field order */
    kv_value_or_null(j, "roles", object_member(l, root, "roles", "roles"));
    mg_json_key(j, "healthThresholds");
    render_health_thresholds(l, root, j);
    json_t *map = migrated_map(l, root);
    mg_json_key(j, "map");
    mg_corescope_json_emit(j, map);
    json_decref(map);
    /* Written even when absent (null), as CoreScope's encoder does. */
    kv_value_or_null(j, "tiles", object_member(l, root, "tiles", "tiles"));
    kv_value_or_null(j, "snrThresholds", object_member(l, root, "snrThresholds", "snrThresholds"));
    kv_value_or_null(j, "distThresholds",
                     object_member(l, root, "distThresholds", "distThresholds"));
    kv_value_or_null(j, "maxHopDist",
                     member(l, root, "maxHopDist", "maxHopDist", JSON_REAL, "a number"));
    kv_value_or_null(j, "limits", object_member(l, root, "limits", "limits"));
    kv_int_or_null(l, j, root, "perfSlowMs");
    kv_int_or_null(l, j, root, "wsReconnectMs");
    kv_int_or_null(l, j, root, "cacheInvalidateMs");
    kv_value_or_null(j, "externalUrls", object_member(l, root, "externalUrls", "externalUrls"));
    json_t *live = object_member(l, root, "liveMap", "liveMap");
    json_int_t buffer_ms =
        int_member(l, live, "propagationBufferMs", "liveMap.propagationBufferMs");
    json_int_t max_nodes = int_member(l, live, "maxNodes", "liveMap.maxNodes");
    mg_json_kv_int(j, "propagationBufferMs", buffer_ms > 0 ? buffer_ms : 5000);
    mg_json_kv_int(j, "liveMapMaxNodes",
                   max_nodes <= 0      ? 2000
                   : max_nodes < 100   ? 100
                   : max_nodes > 20000 ? 20000
                                       : max_nodes);
    mg_json_key(j, "timestamps");
    render_timestamps(l, root, j);
    if (bool_member(l, root, "debugAffinity", "debugAffinity"))
        mg_json_kv_bool(j, "debugAffinity", true);
    const char *dark = string_member(l, root, "mapDarkTileProvider", "mapDarkTileProvider");
    if (dark[0])
        mg_json_kv_string(j, "mapDarkTileProvider", dark);
    json_t *customizer = object_member(l, root, "customizer", "customizer");
    json_t *tabs = member(l, customizer, "disabledTabs", "customizer.disabledTabs", JSON_ARRAY,
                          "a list of strings");
    size_t i;
    json_t *tab;
    json_array_foreach(tabs, i, tab) if (!json_is_string(tab))
        fail(l, "customizer.disabledTabs", "a list of strings");
    mg_json_key(j, "customizer");
    mg_json_object_begin(j);
    mg_json_key(j, "disabledTabs");
    if (tabs)
        mg_corescope_json_emit(j, tabs);
    else {
        mg_json_array_begin(j);
        mg_json_array_end(j);
    }
    mg_json_object_end(j);
    json_t *rx = object_member(l, root, "clientRxCoverage", "clientRxCoverage");
    mg_json_kv_bool(j, "clientRxCoverage",
                    bool_member(l, rx, "enabled", "clientRxCoverage.enabled"));
    mg_json_object_end(j);
}

/* ---- /api/config/theme: CoreScope's defaults, then config.json, then theme.json ---- */

static const char *const default_branding[] = {
    "siteName", "CoreScope", "tagline", "Real-time MeshCore LoRa mesh network analyzer", NULL};
static const char *const default_theme[] = {
    "accent",      "#4a9eff", "accentHover",  "#6db3ff", "navBg",        "#0f0f23",
    "navBg2",      "#1a1a2e", "navText",      "#ffffff", "navTextMuted", "#cbd5e1",
    "background",  "#f4f5f7", "text",         "#1a1a2e", "textMuted",    "#5b6370",
    "border",      "#e2e5ea", "surface1",     "#ffffff", "surface2",     "#ffffff",
    "surface3",    "#ffffff", "sectionBg",    "#eef2ff", "cardBg",       "#ffffff",
    "contentBg",   "#f4f5f7", "detailBg",     "#ffffff", "inputBg",      "#ffffff",
    "rowStripe",   "#f9fafb", "rowHover",     "#eef2ff", "selectedBg",   "#dbeafe",
    "statusGreen", "#22c55e", "statusYellow", "#eab308", "statusRed",    "#ef4444",
    NULL};
static const char *const default_theme_dark[] = {
    "accent",     "#4a9eff", "accentHover", "#6db3ff", "navBg",        "#0f0f23",
    "navBg2",     "#1a1a2e", "navText",     "#ffffff", "navTextMuted", "#cbd5e1",
    "background", "#0f0f23", "text",        "#e2e8f0", "textMuted",    "#a8b8cc",
    "border",     "#334155", "surface1",    "#1a1a2e", "surface2",     "#232340",
    "cardBg",     "#1a1a2e", "contentBg",   "#0f0f23", "detailBg",     "#232340",
    "inputBg",    "#1e1e34", "rowStripe",   "#1e1e34", "rowHover",     "#2d2d50",
    "selectedBg", "#1e3a5f", "statusGreen", "#22c55e", "statusYellow", "#eab308",
    "statusRed",  "#ef4444", "surface3",    "#2d2d50", "sectionBg",    "#1e1e34",
    NULL};
static const char *const default_node_colors[] = {"repeater", "#dc2626", "companion", "#2563eb",
                                                  "room",     "#16a34a", "sensor",    "#d97706",
                                                  "observer", "#8b5cf6", NULL};
static const char *const default_type_colors[] = {
    "ADVERT",  "#22c55e", "GRP_TXT",  "#3b82f6",  "TXT_MSG", "#f59e0b", "ACK",
    "#6b7280", "REQ",     "#a855f7",  "RESPONSE", "#06b6d4", "TRACE",   "#ec4899",
    "PATH",    "#14b8a6", "ANON_REQ", "#f43f5e",  "UNKNOWN", "#6b7280", NULL};

/* CoreScope's built-in landing page (its data, reproduced so the answers are the same). */
static const char default_home_json[] =
    "{\"heroTitle\":\"CoreScope\",\"heroSubtitle\":\"Real-time MeshCore LoRa mesh network "
    "analyzer\",\"steps\":["
    "{\"emoji\":\"ph:bluetooth\",\"title\":\"Connect via Bluetooth\",\"description\":\"Flash "
    "**BLE companion** firmware from [MeshCore Flasher](https://flasher.meshcore.io/).\\n- "
    "Screenless devices: default PIN `123456`\\n- Screen devices: random PIN shown on "
    "display\\n- If pairing fails: forget device, reboot, re-pair\"},"
    "{\"emoji\":\"ph:radio\",\"title\":\"Set the right frequency preset\",\"description\":\"**US "
    "Recommended:**\\n`910.525 MHz \\u00b7 BW 62.5 kHz \\u00b7 SF 7 \\u00b7 CR 5`\\nSelect "
    "**\\\"US Recommended\\\"** in the app or flasher.\"},"
    "{\"emoji\":\"ph:broadcast\",\"title\":\"Advertise yourself\",\"description\":\"Tap the "
    "signal icon \\u2192 **Flood** to broadcast your node to the mesh. Companions only advert "
    "when you trigger it manually.\"},"
    "{\"emoji\":\"ph:repeat\",\"title\":\"Check \\\"Heard N repeats\\\"\",\"description\":\"- "
    "**\\\"Sent\\\"** = transmitted, no confirmation\\n- **\\\"Heard 0 repeats\\\"** = no "
    "repeater picked it up\\n- **\\\"Heard 1+ repeats\\\"** = you're on the mesh!\"}],"
    "\"footerLinks\":[{\"label\":\"ph:package Packets\",\"url\":\"#/packets\"},"
    "{\"label\":\"ph:map-trifold Network Map\",\"url\":\"#/map\"}]}";

/* typeColors' legacy "REQUEST" becomes "REQ" unless "REQ" is given. New reference or NULL. */
static json_t *normalised_type_colors(json_t *m)
{
    if (!m)
        return NULL;
    json_t *out = json_copy(m);
    json_t *legacy = json_object_get(out, "REQUEST");
    if (legacy) {
        if (!json_object_get(out, "REQ"))
            json_object_set(out, "REQ", legacy);
        json_object_del(out, "REQUEST");
    }
    return out;
}

static void render_theme(struct loader *l, json_t *root, json_t *theme_file, struct mg_json *j)
{
    static const struct {
        const char *key;
        const char *const *defaults;
    } parts[] = {
        {"branding", default_branding},
        {"theme", default_theme},
        {"themeDark", default_theme_dark},
        {"nodeColors", default_node_colors},
        {"typeColors", default_type_colors},
        {"home", NULL},
        {"markerStroke", NULL},
    };
    mg_json_object_begin(j); /* CoreScope's field order */
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        json_t *a = object_member(l, root, parts[i].key, parts[i].key);
        json_t *b = object_member(l, theme_file, parts[i].key, parts[i].key);
        json_t *m;
        if (strcmp(parts[i].key, "typeColors") == 0) {
            json_t *na = normalised_type_colors(a), *nb = normalised_type_colors(b);
            m = merged(parts[i].defaults, na, nb);
            json_decref(na);
            json_decref(nb);
            json_t *req = json_object_get(m, "REQ");
            if (req)
                json_object_set(m, "REQUEST", req); /* both names, as CoreScope sends */
        } else if (strcmp(parts[i].key, "home") == 0) {
            m = json_loads(default_home_json, 0, NULL);
            if (a)
                json_object_update(m, a);
            if (b)
                json_object_update(m, b);
        } else if (strcmp(parts[i].key, "markerStroke") == 0) {
            m = json_object();
            json_object_set_new(m, "color", json_string("rgba(255,255,255,0.85)"));
            json_object_set_new(m, "width", json_integer(1));
            json_object_set_new(m, "opacity", json_integer(1));
            if (a)
                json_object_update(m, a);
            if (b)
                json_object_update(m, b);
        } else {
            m = merged(parts[i].defaults, a, b);
        }
        mg_json_key(j, parts[i].key);
        mg_corescope_json_emit(j, m);
        json_decref(m);
    }
    mg_json_object_end(j);
}

/* ---- /api/config/map ---- */
static void render_map(struct loader *l, json_t *root, struct mg_json *j)
{
    json_t *d = object_member(l, root, "mapDefaults", "mapDefaults");
    json_t *center = member(l, d, "center", "mapDefaults.center", JSON_ARRAY, "a list of numbers");
    size_t i;
    json_t *e;
    json_array_foreach(center, i, e) if (!json_is_number(e))
        fail(l, "mapDefaults.center", "a list of numbers");
    json_int_t zoom = int_member(l, d, "zoom", "mapDefaults.zoom");
    mg_json_object_begin(j);
    mg_json_key(j, "center");
    mg_json_array_begin(j);
    if (json_array_size(center) > 0) {
        json_array_foreach(center, i, e) mg_json_double(j, json_number_value(e));
    } else {
        mg_json_double(j, 37.45);
        mg_json_double(j, -122.0);
    }
    mg_json_array_end(j);
    mg_json_kv_int(j, "zoom", zoom != 0 ? zoom : 9);
    mg_json_object_end(j);
}

/* A polygon: a list of [lat, lon] pairs (as CoreScope reads pairs: a missing number is 0,
 * numbers past the second are ignored). */
static bool polygon_ok(json_t *poly)
{
    size_t i, k;
    json_t *pair, *x;
    json_array_foreach(poly, i, pair)
    {
        if (!json_is_array(pair))
            return false;
        json_array_foreach(pair, k, x) if (!json_is_number(x)) return false;
    }
    return true;
}

static void emit_polygon(struct mg_json *j, json_t *poly)
{
    size_t i;
    json_t *pair;
    mg_json_array_begin(j);
    json_array_foreach(poly, i, pair)
    {
        mg_json_array_begin(j);
        mg_json_double(j, json_number_value(json_array_get(pair, 0)));
        mg_json_double(j, json_number_value(json_array_get(pair, 1)));
        mg_json_array_end(j);
    }
    mg_json_array_end(j);
}

static json_t *polygon_member(struct loader *l, json_t *obj, const char *path_key)
{
    json_t *poly = member(l, obj, "polygon", path_key, JSON_ARRAY, "a list of [lat, lon] pairs");
    if (poly && !polygon_ok(poly)) {
        fail(l, path_key, "a list of [lat, lon] pairs");
        return NULL;
    }
    return poly;
}

/* ---- /api/config/geo-filter ---- */
static void render_geo_filter(struct loader *l, json_t *root, struct mg_json *j)
{
    json_t *gf = object_member(l, root, "geo_filter", "geo_filter");
    json_t *poly = polygon_member(l, gf, "geo_filter.polygon");
    double buffer = number_member(l, gf, "bufferKm", "geo_filter.bufferKm");
    mg_json_object_begin(j); /* a map: keys in bytewise order */
    if (json_array_size(poly) == 0) {
        mg_json_kv_int(j, "bufferKm", 0);
        mg_json_kv_null(j, "polygon");
    } else {
        mg_json_kv_double(j, "bufferKm", buffer);
        mg_json_key(j, "polygon");
        emit_polygon(j, poly);
    }
    /* meshgate serves no PUT /api/config/geo-filter, so the customizer may not offer one. */
    mg_json_kv_bool(j, "writeEnabled", false);
    mg_json_object_end(j);
}

/* ---- /api/config/areas and /areas/polygons: sorted by key ---- */
static void render_areas(struct loader *l, json_t *root, struct mg_json *j, bool polygons)
{
    json_t *areas = object_member(l, root, "areas", "areas");
    size_t n = json_object_size(areas), i = 0;
    const char **keys = calloc(n ? n : 1, sizeof *keys);
    const char *k;
    json_t *v;
    json_object_foreach(areas, k, v) keys[i++] = k;
    qsort(keys, n, sizeof *keys, by_key);
    static const char *const bounds[] = {"latMin", "latMax", "lonMin", "lonMax"};
    mg_json_array_begin(j);
    for (i = 0; i < n; i++) {
        /* An entry that is not an object (a "_comment") reads as one without a label, as in
         * CoreScope. */
        json_t *a = json_object_get(areas, keys[i]);
        json_t *area = json_is_object(a) ? a : NULL;
        char path_key[300];
        snprintf(path_key, sizeof path_key, "areas.%s.label", keys[i]);
        const char *label = string_member(l, area, "label", path_key);
        snprintf(path_key, sizeof path_key, "areas.%s.polygon", keys[i]);
        json_t *poly = polygon_member(l, area, path_key);
        if (!polygons && !label[0])
            continue;
        mg_json_object_begin(j);
        mg_json_kv_string(j, "key", keys[i]);
        mg_json_kv_string(j, "label", label);
        if (polygons && json_array_size(poly) > 0) {
            mg_json_key(j, "polygon");
            emit_polygon(j, poly);
        }
        for (size_t b = 0; b < 4; b++) {
            snprintf(path_key, sizeof path_key, "areas.%s.%s", keys[i], bounds[b]);
            json_t *x = member(l, area, bounds[b], path_key, JSON_REAL, "a number");
            if (polygons && x)
                mg_json_kv_double(j, bounds[b], json_number_value(x));
        }
        mg_json_object_end(j);
    }
    mg_json_array_end(j);
    free(keys);
}

static int by_region_code(const void *a, const void *b)
{
    return strcmp(((const struct mg_corescope_region *)a)->code,
                  ((const struct mg_corescope_region *)b)->code);
}

static int by_area_key(const void *a, const void *b)
{
    return strcmp(((const struct mg_corescope_area *)a)->key,
                  ((const struct mg_corescope_area *)b)->key);
}

/* A polygon of [lat, lon] points and the legacy bounding box, from an area or geo_filter. */
static void load_shape(json_t *v, struct mg_corescope_area *a)
{
    json_t *poly = json_object_get(v, "polygon");
    if (json_is_array(poly) && polygon_ok(poly) && json_array_size(poly) > 0) {
        a->polygon = calloc(json_array_size(poly), sizeof *a->polygon);
        size_t i;
        json_t *pair;
        json_array_foreach(poly, i, pair) if (a->polygon)
        {
            a->polygon[i][0] = json_number_value(json_array_get(pair, 0));
            a->polygon[i][1] = json_number_value(json_array_get(pair, 1));
            a->polygon_len = i + 1;
        }
    }
    json_t *box[4] = {json_object_get(v, "latMin"), json_object_get(v, "latMax"),
                      json_object_get(v, "lonMin"), json_object_get(v, "lonMax")};
    a->has_box = json_is_number(box[0]) && json_is_number(box[1]) && json_is_number(box[2]) &&
                 json_is_number(box[3]);
    if (a->has_box) {
        a->lat_min = json_number_value(box[0]);
        a->lat_max = json_number_value(box[1]);
        a->lon_min = json_number_value(box[2]);
        a->lon_max = json_number_value(box[3]);
    }
}

/* The areas' shapes (their errors are reported by render_areas, which reads the same keys). */
static void load_areas(json_t *root, struct mg_corescope_config *c)
{
    json_t *areas = json_object_get(root, "areas");
    if (!json_is_object(areas))
        return;
    size_t n = json_object_size(areas);
    c->areas = calloc(n ? n : 1, sizeof *c->areas);
    if (!c->areas)
        return;
    const char *k;
    json_t *v;
    json_object_foreach(areas, k, v)
    {
        if (!json_is_object(v))
            continue;
        struct mg_corescope_area *a = &c->areas[c->area_count];
        if (!(a->key = strdup(k)))
            continue;
        c->area_count++;
        load_shape(v, a);
    }
    qsort(c->areas, c->area_count, sizeof *c->areas, by_area_key);
}

/* geo_filter's shape and buffer (its errors are reported by render_geo_filter). */
static void load_geo_filter(json_t *root, struct mg_corescope_config *c)
{
    json_t *gf = json_object_get(root, "geo_filter");
    if (!json_is_object(gf))
        return;
    c->has_geo_filter = true;
    load_shape(gf, &c->geo_filter);
    json_t *buffer = json_object_get(gf, "bufferKm");
    c->geo_buffer_km = json_is_number(buffer) ? json_number_value(buffer) : 0;
}

/* A list of strings as *out (each passed through keep: NULL drops it); a wrong type fails. */
static void load_strings(struct loader *l, json_t *root, const char *key, char **out[],
                         size_t *count, char *(*keep)(const char *))
{
    json_t *list = member(l, root, key, key, JSON_ARRAY, "a list of strings");
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v) if (!json_is_string(v))
    {
        fail(l, key, "a list of strings");
        return;
    }
    *out = calloc(json_array_size(list) + 1, sizeof **out);
    if (!*out)
        return;
    json_array_foreach(list, i, v)
    {
        char *s = keep(json_string_value(v));
        if (s)
            (*out)[(*count)++] = s;
    }
}

/* CoreScope skips an empty prefix and keeps the others as written. */
static char *keep_prefix(const char *s)
{
    return s[0] ? strdup(s) : NULL;
}

/* CoreScope's blacklist holds each key trimmed and lowercased, empty ones skipped. */
static char *keep_key(const char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        n--;
    char *k = n ? strndup(s, n) : NULL;
    for (size_t i = 0; k && i < n; i++)
        k[i] = (char)tolower((unsigned char)k[i]);
    return k;
}

static void load_regions(struct loader *l, json_t *root, struct mg_corescope_config *c)
{
    json_t *regions = object_member(l, root, "regions", "regions");
    size_t n = json_object_size(regions);
    c->regions = calloc(n ? n : 1, sizeof *c->regions);
    const char *k;
    json_t *v;
    json_object_foreach(regions, k, v)
    {
        if (!json_is_string(v)) {
            fail(l, "regions", "an object of IATA codes to names (strings)");
            return;
        }
        c->regions[c->region_count].code = strdup(k);
        c->regions[c->region_count].name = strdup(json_string_value(v));
        c->region_count++;
    }
    qsort(c->regions, c->region_count, sizeof *c->regions, by_region_code);
}

/* A parsed document that must be one object; NULL with the message in err (a syntax error:
 * line and column). */
static json_t *parsed_object(json_t *root, const json_error_t *jerr, const char *what,
                             const char *name, char *err, size_t errlen)
{
    if (!root) {
        snprintf(err, errlen, "%s=%s: line %d, column %d: %s", what, name, jerr->line, jerr->column,
                 jerr->text);
        return NULL;
    }
    if (!json_is_object(root)) {
        snprintf(err, errlen, "%s=%s: must hold one JSON object", what, name);
        json_decref(root);
        return NULL;
    }
    return root;
}

/* Parses a file; NULL with the message in err. */
static json_t *parse_file(const char *path, const char *what, char *err, size_t errlen)
{
    json_error_t jerr;
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s=%s: cannot read it (%s)", what, path, strerror(errno));
        return NULL;
    }
    json_t *root = json_loadf(f, 0, &jerr);
    fclose(f);
    return parsed_object(root, &jerr, what, path, err, errlen);
}

/* Renders and loads everything from the parsed documents (root: an object; theme: NULL or
 * an object), which it releases. */
static int load_documents(struct mg_corescope_config *c, const char *name, json_t *root,
                          json_t *theme, char *err, size_t errlen)
{
    struct loader l = {name, err, errlen, false};
    for (int b = 0; b < MG_CS_BODY_COUNT; b++) {
        struct mg_buf buf;
        mg_buf_init(&buf);
        struct mg_json j;
        mg_json_init(&j, &buf);
        switch ((enum mg_corescope_body)b) {
        case MG_CS_CACHE:
            render_cache(&l, root, &j);
            break;
        case MG_CS_CLIENT:
            render_client(&l, root, &j);
            break;
        case MG_CS_THEME:
            render_theme(&l, root, theme, &j);
            break;
        case MG_CS_MAP:
            render_map(&l, root, &j);
            break;
        case MG_CS_GEO_FILTER:
            render_geo_filter(&l, root, &j);
            break;
        case MG_CS_AREAS:
            render_areas(&l, root, &j, false);
            break;
        case MG_CS_AREAS_POLYGONS:
            render_areas(&l, root, &j, true);
            break;
        case MG_CS_BODY_COUNT:
            break;
        }
        c->body[b] = finish(&buf, &c->body_len[b]);
        if (!c->body[b] && !l.failed)
            fail(&l, "(whole file)", "small enough to render (out of memory)");
    }
    load_regions(&l, root, c);
    load_areas(root, c);
    load_geo_filter(root, c);
    load_strings(&l, root, "hiddenNamePrefixes", &c->hidden_prefixes, &c->hidden_prefix_count,
                 keep_prefix);
    load_strings(&l, root, "nodeBlacklist", &c->blacklist, &c->blacklist_count, keep_key);
    load_strings(&l, root, "observerBlacklist", &c->observer_blacklist,
                 &c->observer_blacklist_count, keep_key);
    c->api_key_set = string_member(&l, root, "apiKey", "apiKey")[0] != '\0';
    json_t *thresholds = object_member(&l, root, "healthThresholds", "healthThresholds");
    double relay_hours = bounded_member(&l, thresholds, "relayActiveHours",
                                        "healthThresholds.relayActiveHours", "a number of hours");
    c->relay_active_hours = relay_hours > 0 ? relay_hours : 24; /* CoreScope's default */
    json_t *battery = object_member(&l, root, "batteryThresholds", "batteryThresholds");
    c->battery_low_mv = int_member(&l, battery, "lowMv", "batteryThresholds.lowMv");
    c->battery_critical_mv = int_member(&l, battery, "criticalMv", "batteryThresholds.criticalMv");
    c->client_rx_coverage =
        bool_member(&l, object_member(&l, root, "clientRxCoverage", "clientRxCoverage"), "enabled",
                    "clientRxCoverage.enabled");
    static const struct {
        const char *key, *path;
        double def;
        size_t offset;
    } ages[] = {
        {"infraDegradedHours", "healthThresholds.infraDegradedHours", 24,
         offsetof(struct mg_corescope_config, infra_degraded_ms)},
        {"infraSilentHours", "healthThresholds.infraSilentHours", 72,
         offsetof(struct mg_corescope_config, infra_silent_ms)},
        {"nodeDegradedHours", "healthThresholds.nodeDegradedHours", 1,
         offsetof(struct mg_corescope_config, node_degraded_ms)},
        {"nodeSilentHours", "healthThresholds.nodeSilentHours", 24,
         offsetof(struct mg_corescope_config, node_silent_ms)},
    };
    for (size_t i = 0; i < sizeof ages / sizeof ages[0]; i++) {
        double v = bounded_member(&l, thresholds, ages[i].key, ages[i].path, "a number of hours");
        *(int64_t *)((char *)c + ages[i].offset) =
            (int64_t)((v > 0 ? v : ages[i].def) * 3600000.0); /* truncated, as Go's int() */
    }
    json_t *analytics = object_member(&l, root, "analytics", "analytics");
    json_t *lora = object_member(&l, analytics, "loraPreset", "analytics.loraPreset");
    c->lora_freq_hz = number_member(&l, lora, "freq", "analytics.loraPreset.freq");
    c->lora_bw_khz = number_member(&l, lora, "bw", "analytics.loraPreset.bw");
    c->lora_sf = int_member(&l, lora, "sf", "analytics.loraPreset.sf");
    c->lora_cr = int_member(&l, lora, "cr", "analytics.loraPreset.cr");
    json_decref(root);
    json_decref(theme);
    if (l.failed) {
        mg_corescope_free(c);
        return -1;
    }
    static unsigned long loads;
    c->generation = ++loads;
    c->loaded = true;
    return 0;
}

int mg_corescope_load(struct mg_corescope_config *c, const char *path, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    err[0] = '\0';
    json_t *root = NULL, *theme = NULL;
    if (path && path[0]) {
        root = parse_file(path, "MESHGATE_CORESCOPE_CONFIG", err, errlen);
        if (!root)
            return -1;
        /* theme.json beside config.json, as CoreScope reads it beside its own. */
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", path);
        char theme_path[4200];
        snprintf(theme_path, sizeof theme_path, "%s/theme.json", dirname(dir));
        if (access(theme_path, F_OK) == 0) {
            char why[1024];
            theme = parse_file(theme_path, "theme.json", why, sizeof why);
            if (!theme) {
                snprintf(err, errlen, "MESHGATE_CORESCOPE_CONFIG=%s: its %s", path, why);
                json_decref(root);
                return -1;
            }
        }
    } else {
        root = json_object();
    }
    return load_documents(c, path && path[0] ? path : "", root, theme, err, errlen);
}

int mg_corescope_load_text(struct mg_corescope_config *c, const char *name, const char *config,
                           size_t config_len, const char *theme, size_t theme_len, char *err,
                           size_t errlen)
{
    memset(c, 0, sizeof *c);
    err[0] = '\0';
    json_error_t jerr;
    json_t *root = parsed_object(json_loadb(config, config_len, 0, &jerr), &jerr,
                                 "MESHGATE_CORESCOPE_CONFIG", name, err, errlen);
    if (!root)
        return -1;
    json_t *theme_root = NULL;
    if (theme) {
        char why[1024];
        theme_root = parsed_object(json_loadb(theme, theme_len, 0, &jerr), &jerr, "theme.json",
                                   "(beside it)", why, sizeof why);
        if (!theme_root) {
            snprintf(err, errlen, "MESHGATE_CORESCOPE_CONFIG=%s: its %s", name, why);
            json_decref(root);
            return -1;
        }
    }
    return load_documents(c, name, root, theme_root, err, errlen);
}

void mg_corescope_free(struct mg_corescope_config *c)
{
    for (int b = 0; b < MG_CS_BODY_COUNT; b++)
        free(c->body[b]);
    for (size_t i = 0; i < c->region_count; i++) {
        free(c->regions[i].code);
        free(c->regions[i].name);
    }
    free(c->regions);
    for (size_t i = 0; i < c->area_count; i++) {
        free(c->areas[i].key);
        free(c->areas[i].polygon);
    }
    free(c->areas);
    free(c->geo_filter.polygon);
    for (size_t i = 0; i < c->hidden_prefix_count; i++)
        free(c->hidden_prefixes[i]);
    free(c->hidden_prefixes);
    for (size_t i = 0; i < c->blacklist_count; i++)
        free(c->blacklist[i]);
    free(c->blacklist);
    for (size_t i = 0; i < c->observer_blacklist_count; i++)
        free(c->observer_blacklist[i]);
    free(c->observer_blacklist);
    memset(c, 0, sizeof *c);
}

const struct mg_corescope_area *mg_corescope_area(const struct mg_corescope_config *c,
                                                  const char *key)
{
    struct mg_corescope_area probe = {.key = (char *)key};
    return c->area_count ? bsearch(&probe, c->areas, c->area_count, sizeof *c->areas, by_area_key)
                         : NULL;
}

bool mg_corescope_area_holds(const struct mg_corescope_area *a, double lat, double lon)
{
    if (lat == 0 && lon == 0)
        return true;
    if (a->polygon_len >= 3) {
        bool inside = false;
        for (size_t i = 0, j = a->polygon_len - 1; i < a->polygon_len; j = i++) {
            double yi = a->polygon[i][0], xi = a->polygon[i][1];
            double yj = a->polygon[j][0], xj = a->polygon[j][1];
            if ((yi > lat) != (yj > lat) && lon < (xj - xi) * (lat - yi) / (yj - yi) + xi)
                inside = !inside;
        }
        return inside;
    }
    if (a->has_box)
        return lat >= a->lat_min && lat <= a->lat_max && lon >= a->lon_min && lon <= a->lon_max;
    return true;
}

/* Distance in km from (lat, lon) to the segment a-b, as CoreScope's DistToSegmentKm. */
static double segment_km(double lat, double lon, const double a[2], const double b[2])
{
    double cos_lat = cos((a[0] + b[0]) / 2.0 * M_PI / 180.0);
    double ax = (a[1] - lon) * 111.0 * cos_lat, ay = (a[0] - lat) * 111.0;
    double bx = (b[1] - lon) * 111.0 * cos_lat, by = (b[0] - lat) * 111.0;
    double abx = bx - ax, aby = by - ay, ab2 = abx * abx + aby * aby;
    if (ab2 == 0)
        return sqrt(ax * ax + ay * ay);
    double t = fmax(0, fmin(1, -(ax * abx + ay * aby) / ab2));
    double px = ax + t * abx, py = ay + t * aby;
    return sqrt(px * px + py * py);
}

bool mg_corescope_geo_passes(const struct mg_corescope_config *c, double lat, double lon)
{
    const struct mg_corescope_area *g = &c->geo_filter;
    if (!c->has_geo_filter || (lat == 0 && lon == 0))
        return true;
    if (g->polygon_len < 3)
        return mg_corescope_area_holds(g, lat, lon);
    if (mg_corescope_area_holds(g, lat, lon))
        return true;
    for (size_t i = 0; c->geo_buffer_km > 0 && i < g->polygon_len; i++)
        if (segment_km(lat, lon, g->polygon[i], g->polygon[(i + 1) % g->polygon_len]) <=
            c->geo_buffer_km)
            return true;
    return false;
}

const struct mg_corescope_config *mg_corescope_current(void)
{
    if (!mg_corescope.loaded) {
        char err[256];
        mg_corescope_load(&mg_corescope, "", err, sizeof err);
    }
    return &mg_corescope;
}

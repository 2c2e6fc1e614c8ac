/* SPDX-License-Identifier: ISC */
/*
 * fixture: the generator of CoreScope databases, and the freshener of copies.
 *
 * The model is built in memory from the seed before any row is written:
 *   - nodes: 32-byte keys, a role (84% repeater, 11% room, 4% companion, 1% sensor), a true
 *     position in one of a few Bay Area clusters (the stored lat/lon may be NULL or 0,0 while
 *     the true position still places the node), and a hop-prefix size. A few pairs of relays
 *     are forced to share their first 2 bytes, and a few their first 3 (no reliable token).
 *   - the radio graph: the active repeaters, each linked to its nearest neighbours, with
 *     components joined by their closest pair so that every repeater reaches every other.
 *   - observers: some are repeaters (their id is the node's key in upper case), the others
 *     sit next to one. Each has an "ear" (the repeaters it hears directly) and a table of
 *     hop counts from every repeater to that ear, found by breadth-first search.
 * A transmission enters the graph at its source; each observation walks down the observer's
 * hop-count table along one random shortest path, so the same neighbour pairs recur the way
 * relay traffic does. Every random choice comes from a xoshiro256** stream consumed in a
 * fixed order by one thread at a time, so the same options give the same rows; the columns
 * and tables only the migrated schema has draw from a second stream, so the base columns do
 * not depend on the schema.
 *
 * A producer thread makes the rows while the caller's thread writes them (the pipe below),
 * in one transaction with journaling off; secondary indexes are created after the rows, and
 * the file is switched to WAL at the end, as CoreScope's files are.
 */
#include "fixture.h"

#include <sqlite3.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* MeshCore carries at most 64 bytes of path. */
#define PATH_MAX_BYTES 64
#define KNN_LINKS 4
#define DIST_UNREACHABLE 255
#define ROW_TEXT_BYTES 16384

enum role { ROLE_REPEATER, ROLE_ROOM, ROLE_COMPANION, ROLE_SENSOR };
static const char *const role_names[] = {"repeater", "room", "companion", "sensor"};

enum payload {
    PT_REQ = 0,
    PT_RESPONSE = 1,
    PT_TXT_MSG = 2,
    PT_ACK = 3,
    PT_ADVERT = 4,
    PT_GRP_TXT = 5,
    PT_GRP_DATA = 6,
    PT_ANON_REQ = 7,
    PT_PATH = 8,
    PT_TRACE = 9,
    PT_CONTROL = 11,
};

enum route { RT_TRANSPORT_FLOOD = 0, RT_FLOOD = 1, RT_DIRECT = 2, RT_TRANSPORT_DIRECT = 3 };

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err != NULL && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* --- random numbers: xoshiro256**, seeded through splitmix64 ----------------------------- */

struct rng {
    uint64_t s[4];
};

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

static void rng_seed(struct rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

static uint64_t rotl64(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(struct rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

/* Uniform in [0, n), without modulo bias. */
static uint64_t rng_below(struct rng *r, uint64_t n)
{
    if (n <= 1)
        return 0;
    uint64_t threshold = (0 - n) % n;
    uint64_t x;
    do
        x = rng_next(r);
    while (x < threshold);
    return x % n;
}

static double rng_unit(struct rng *r)
{
    return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

static bool rng_chance(struct rng *r, double p)
{
    return rng_unit(r) < p;
}

static double rng_gauss(struct rng *r)
{
    double u = 1.0 - rng_unit(r);
    double v = rng_unit(r);
    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

static void rng_bytes(struct rng *r, uint8_t *out, size_t n)
{
    while (n > 0) {
        uint64_t x = rng_next(r);
        for (int i = 0; i < 8 && n > 0; i++, n--) {
            *out++ = (uint8_t)x;
            x >>= 8;
        }
    }
}

/* A bijection of 64-bit values: distinct inputs give distinct transmission hashes. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

/* --- text: a bounded buffer for one row's strings ---------------------------------------- */

struct text {
    char *p;
    size_t len, cap;
    bool overflow;
};

static void text_reset(struct text *t)
{
    t->len = 0;
    t->overflow = false;
    t->p[0] = '\0';
}

static void text_putn(struct text *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        t->overflow = true;
        return;
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = '\0';
}

static void text_puts(struct text *t, const char *s)
{
    text_putn(t, s, strlen(s));
}

static void text_putc(struct text *t, char c)
{
    text_putn(t, &c, 1);
}

static void text_printf(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void text_printf(struct text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = t->cap - t->len;
    int n = vsnprintf(t->p + t->len, room, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= room) {
        t->overflow = true;
        t->p[t->len] = '\0';
        return;
    }
    t->len += (size_t)n;
}

static void text_hex(struct text *t, const uint8_t *bytes, size_t n, bool upper)
{
    const char *digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
    if (t->len + 2 * n + 1 > t->cap) {
        t->overflow = true;
        return;
    }
    for (size_t i = 0; i < n; i++) {
        t->p[t->len++] = digits[bytes[i] >> 4];
        t->p[t->len++] = digits[bytes[i] & 15];
    }
    t->p[t->len] = '\0';
}

/* A JSON string the way Go's encoding/json (CoreScope's ingestor) writes it: <, > and & as
 * \u escapes, and U+2028/U+2029 too. */
static void text_json_string(struct text *t, const char *s)
{
    text_putc(t, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        unsigned char c = *p;
        if (c == '"' || c == '\\') {
            text_putc(t, '\\');
            text_putc(t, (char)c);
        } else if (c == '\n') {
            text_puts(t, "\\n");
        } else if (c < 0x20 || c == '<' || c == '>' || c == '&') {
            text_printf(t, "\\u%04x", c);
        } else if (c == 0xE2 && p[1] == 0x80 && (p[2] == 0xA8 || p[2] == 0xA9)) {
            text_printf(t, "\\u%04x", p[2] == 0xA8 ? 0x2028 : 0x2029);
            p += 2;
        } else {
            text_putc(t, (char)c);
        }
    }
    text_putc(t, '"');
}

/* A coordinate as CoreScope prints it: the stored decimals, without trailing zeros. */
static void text_coord(struct text *t, double v, int decimals)
{
    char tmp[48];
    int n = snprintf(tmp, sizeof tmp, "%.*f", decimals, v);
    if (n <= 0 || (size_t)n >= sizeof tmp)
        return;
    if (strchr(tmp, '.') != NULL) {
        while (n > 0 && tmp[n - 1] == '0')
            tmp[--n] = '\0';
        if (n > 0 && tmp[n - 1] == '.')
            tmp[--n] = '\0';
    }
    if (strcmp(tmp, "-0") == 0)
        strcpy(tmp, "0");
    text_puts(t, tmp);
}

/* --- time ------------------------------------------------------------------------------- */

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm). */
static int64_t days_from_civil(int64_t y, int64_t m, int64_t d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

struct civil {
    int64_t year;
    int month, day, hour, minute, second;
    int millis;
};

static struct civil civil_from_ms(int64_t ms)
{
    struct civil c;
    int64_t secs = floor_div(ms, 1000);
    c.millis = (int)(ms - secs * 1000);
    int64_t days = floor_div(secs, 86400);
    int64_t sod = secs - days * 86400;
    civil_from_days(days, &c.year, &c.month, &c.day);
    c.hour = (int)(sod / 3600);
    c.minute = (int)(sod / 60 % 60);
    c.second = (int)(sod % 60);
    return c;
}

/* "2026-05-17T18:13:27Z" or, with_ms, "2026-05-17T18:13:27.081Z". */
static void format_rfc3339(char *out, size_t n, int64_t ms, bool with_ms)
{
    struct civil c = civil_from_ms(ms);
    if (with_ms)
        snprintf(out, n, "%04" PRId64 "-%02d-%02dT%02d:%02d:%02d.%03dZ", c.year, c.month, c.day,
                 c.hour, c.minute, c.second, c.millis);
    else
        snprintf(out, n, "%04" PRId64 "-%02d-%02dT%02d:%02d:%02dZ", c.year, c.month, c.day, c.hour,
                 c.minute, c.second);
}

/* SQLite's datetime('now') shape, which CoreScope's created_at has. */
static void format_sql_datetime(char *out, size_t n, int64_t secs)
{
    struct civil c = civil_from_ms(secs * 1000);
    snprintf(out, n, "%04" PRId64 "-%02d-%02d %02d:%02d:%02d", c.year, c.month, c.day, c.hour,
             c.minute, c.second);
}

/* The shape of one RFC 3339 value, so a shifted value can be written back the same way. */
struct rfc3339_shape {
    char separator;      /* 'T', 't' or ' ' */
    int fraction_digits; /* 0..9 */
    char extra[8];       /* fraction digits beyond milliseconds, kept verbatim */
    char zone;           /* 'Z', 'z', or '+' / '-' with offset_minutes */
    int offset_minutes;
};

static bool parse_digits(const char *s, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

static int days_in_month(int64_t year, int month)
{
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    return month == 2 && leap ? 29 : days[month - 1];
}

static bool parse_rfc3339(const char *s, size_t len, int64_t *ms, struct rfc3339_shape *shape)
{
    int year, month, day, hour, minute, second;
    if (len < 20 || s[4] != '-' || s[7] != '-' || s[13] != ':' || s[16] != ':')
        return false;
    if (s[10] != 'T' && s[10] != 't' && s[10] != ' ')
        return false;
    if (!parse_digits(s, 4, &year) || !parse_digits(s + 5, 2, &month) ||
        !parse_digits(s + 8, 2, &day) || !parse_digits(s + 11, 2, &hour) ||
        !parse_digits(s + 14, 2, &minute) || !parse_digits(s + 17, 2, &second))
        return false;
    if (month < 1 || month > 12 || day < 1 || day > days_in_month(year, month) || hour > 23 ||
        minute > 59 || second > 59)
        return false;
    shape->separator = s[10];
    size_t i = 19;
    int millis = 0;
    shape->fraction_digits = 0;
    shape->extra[0] = '\0';
    if (i < len && s[i] == '.') {
        i++;
        int digits = 0;
        while (i < len && s[i] >= '0' && s[i] <= '9') {
            if (digits < 3)
                millis = millis * 10 + (s[i] - '0');
            else if (digits < 9)
                shape->extra[digits - 3] = s[i];
            else
                return false;
            digits++;
            i++;
        }
        if (digits == 0)
            return false;
        shape->extra[digits > 3 ? digits - 3 : 0] = '\0';
        for (int k = digits; k < 3; k++)
            millis *= 10;
        shape->fraction_digits = digits;
    }
    if (i >= len)
        return false;
    int offset = 0;
    if (s[i] == 'Z' || s[i] == 'z') {
        shape->zone = s[i];
        i++;
    } else if (s[i] == '+' || s[i] == '-') {
        int oh, om;
        if (len - i < 6 || s[i + 3] != ':' || !parse_digits(s + i + 1, 2, &oh) ||
            !parse_digits(s + i + 4, 2, &om) || oh > 23 || om > 59)
            return false;
        shape->zone = s[i];
        offset = (s[i] == '-' ? -1 : 1) * (oh * 60 + om);
        i += 6;
    } else {
        return false;
    }
    if (i != len)
        return false;
    shape->offset_minutes = offset;
    int64_t days = days_from_civil(year, month, day);
    int64_t secs = days * 86400 + hour * 3600 + minute * 60 + second - (int64_t)offset * 60;
    *ms = secs * 1000 + millis;
    return true;
}

bool mg_fixture_parse_rfc3339_ms(const char *text, size_t len, int64_t *ms)
{
    struct rfc3339_shape shape;
    return text != NULL && parse_rfc3339(text, len, ms, &shape);
}

/* Writes ms in the given shape; the fraction is truncated to the shape's digits. */
static int format_shaped(char *out, size_t n, int64_t ms, const struct rfc3339_shape *shape)
{
    struct civil c = civil_from_ms(ms + (int64_t)shape->offset_minutes * 60000);
    if (c.year < 0 || c.year > 9999)
        return -1;
    int len = snprintf(out, n, "%04" PRId64 "-%02d-%02d%c%02d:%02d:%02d", c.year, c.month, c.day,
                       shape->separator, c.hour, c.minute, c.second);
    if (shape->fraction_digits > 0) {
        char frac[4];
        snprintf(frac, sizeof frac, "%03d", c.millis);
        int keep = shape->fraction_digits < 3 ? shape->fraction_digits : 3;
        len += snprintf(out + len, n - (size_t)len, ".%.*s%s", keep, frac, shape->extra);
    }
    if (shape->zone == 'Z' || shape->zone == 'z') {
        len += snprintf(out + len, n - (size_t)len, "%c", shape->zone);
    } else {
        int off = shape->offset_minutes < 0 ? -shape->offset_minutes : shape->offset_minutes;
        len += snprintf(out + len, n - (size_t)len, "%c%02d:%02d", shape->zone, off / 60, off % 60);
    }
    return len;
}

/* --- the model ---------------------------------------------------------------------------- */

struct cluster {
    const char *iata;
    const char *scope;
    double lat, lon, spread_deg, weight;
};

/* Where MeshCore nodes cluster around the Bay Area, and what share of nodes each holds. */
static const struct cluster clusters[] = {
    {"SFO", "#sf", 37.765, -122.440, 0.035, 0.17},
    {"SFO", "#peninsula", 37.520, -122.290, 0.060, 0.13},
    {"OAK", "#eastbay", 37.835, -122.255, 0.050, 0.19},
    {"OAK", "#trivalley", 37.690, -121.920, 0.060, 0.11},
    {"SJC", "#southbay", 37.340, -121.900, 0.070, 0.23},
    {"SJC", "#southcounty", 37.050, -121.600, 0.050, 0.06},
    {"MRY", "#monterey", 36.610, -121.850, 0.050, 0.11},
};
static const char *const cluster_places[][6] = {
    {"Twin Peaks", "Sutro", "Mission", "Sunset", "Bernal", "Potrero"},
    {"San Mateo", "Redwood City", "Palo Alto", "Belmont", "Skyline", "Half Moon Bay"},
    {"Berkeley", "Oakland", "Grizzly Peak", "Alameda", "Richmond", "El Cerrito"},
    {"Dublin", "Pleasanton", "Livermore", "San Ramon", "Mt Diablo", "Danville"},
    {"San Jose", "Santa Clara", "Mt Hamilton", "Los Gatos", "Milpitas", "Campbell"},
    {"Gilroy", "Morgan Hill", "Hollister", "San Martin", "Coyote", "Uvas"},
    {"Monterey", "Carmel", "Salinas", "Marina", "Pacific Grove", "Seaside"},
};
#define CLUSTER_COUNT (sizeof clusters / sizeof clusters[0])

static const char *const emoji[] = {"\xF0\x9F\x8C\xB3", "\xF0\x9F\x97\x9D\xEF\xB8\x8F",
                                    "\xF0\x9F\x93\xA1", "\xE2\x9B\xB0\xEF\xB8\x8F",
                                    "\xF0\x9F\x8C\x89", "\xF0\x9F\x8C\x8E"};
static const char *const first_names[] = {"brian", "Maya", "Jorge", "Priya", "Tom",  "Alex",
                                          "Sam",   "Lena", "Omar",  "Kai",   "Rosa", "Wei"};
static const char *const call_prefixes[] = {"K",  "N",  "W",  "KD", "KN", "KJ",
                                            "KM", "KK", "WB", "AE", "AF", "KF"};
static const char *const client_versions[] = {
    "meshcoretomqtt/1.0.6.3-6415650", "meshcoretomqtt/1.1.0.0-31aad7d",
    "pyMC_repeater/1.0.8.dev49",      "meshcore-packet-capture/1.2-1bd909c",
    "meshcoremqtt/v1.14.0",           "RemoteTerm/3.5.0-5213c8c",
    "meshcore-dev/meshcore-ha:2.4.0", "meshcoretomqtt/1.0.8.0-e52c5ed",
};
static const char *const radios[] = {"910.5250244,62.5,7,5", "910.525,62.5,7,5",
                                     "910.525024,62.5,7,5", "910.5250244,62.5,7,8"};
static const char *const models[] = {"Heltec V3", "RAK4631", "Station G2", "T-Beam", "Xiao nRF52"};
static const char *const firmwares[] = {"v1.7.2", "v1.8.0", "v1.9.1", "v1.10.0"};

struct channel {
    const char *name; /* NULL: a private channel whose key CoreScope does not have */
    uint8_t hash;
};

static const struct channel channels[] = {
    {"public", 0x11}, {"#test", 0xD9},    {"#wardriving", 0x81}, {"#bot", 0x5A},
    {"#chat", 0x2B},  {"#bayarea", 0x47}, {NULL, 0xC3},          {NULL, 0x6E},
    {NULL, 0x93},     {NULL, 0xF0},       {NULL, 0x66},          {NULL, 0x39},
};
#define CHANNEL_COUNT (sizeof channels / sizeof channels[0])

struct node {
    uint8_t key[32];
    char hex[65];
    char name[80];
    uint8_t role, cluster, hop_size, decimals;
    uint8_t unique_mask; /* bit s-1: the s-byte prefix is unique among relay-role nodes */
    bool stale;          /* last heard before the window; sends nothing in it */
    bool pos_null, pos_zero;
    double lat, lon; /* true position */
    double stored_lat, stored_lon;
    double activity;
    int32_t vertex;   /* index in the radio graph, or -1 */
    int32_t entry;    /* the vertex its packets enter the graph through */
    int32_t observer; /* the observer it is, or -1 */
    int64_t first_advert, last_advert;
    uint32_t adverts;
};

struct observer {
    char id[72];
    char id_lower[72]; /* the key a neighbour edge names it by, "" for a non-hex id */
    char name[80];
    const char *iata;
    int32_t node; /* the node it is, or -1 */
    int32_t blocked_vertex;
    double lat, lon;
    int64_t active_from, active_until;
    bool inactive, reports_signal, direction_rx;
    double snr_bias;
    uint8_t *dist; /* hops from each vertex to the ear; DIST_UNREACHABLE */
    long observations;
    int64_t last_observation;
};

/* One transmission as pass 1 plans it. */
struct plan {
    int64_t t;
    int32_t source;
    uint32_t count;
    float weight;
    uint8_t payload_type, route;
};

/* A neighbour edge endpoint: 0 is '', 1..N a node, N+1.. an observer. */
struct edge_map {
    uint64_t *keys;
    uint32_t *counts;
    int64_t *last;
    size_t cap, len;
};

/*
 * Pass 2 runs in a thread of its own and hands finished rows to the thread that owns the
 * SQLite connection, through a ring of chunks. Each chunk holds serialized records and is
 * either being filled (producer) or being written (writer); the writer binds straight from
 * the chunk, which stays put until every statement over it has run.
 */
#define PIPE_CHUNKS 4
#define PIPE_CHUNK_BYTES (1u << 20)
#define RECORD_BYTES (64u << 10)
#define OBS_BATCH 32

enum record_kind { RECORD_OBSERVATION = 1, RECORD_TRANSMISSION = 2 };

struct record {
    uint8_t *p;
    size_t len, cap;
    bool overflow;
};

struct chunk {
    uint8_t *data;
    size_t len;
    bool full; /* handed to the writer */
    bool last; /* the producer is done after this one */
};

struct pipe {
    pthread_mutex_t mu;
    pthread_cond_t changed;
    struct chunk chunks[PIPE_CHUNKS];
    int fill, drain;
    bool failed; /* either side stopped; the other must too */
};

struct gen {
    struct mg_fixture_options o;
    struct rng rng;
    /* Draws for the migrated schema's own columns and tables only, so that the base columns
     * are the same rows whichever schema is asked for. */
    struct rng rng_migrated;
    int64_t now, start, span;

    struct node *nodes;
    long n_nodes;
    struct observer *observers;
    long n_observers;

    int32_t *vertex_node; /* vertex -> node */
    long n_vertices;
    int32_t *adj_start, *adj;

    double *advert_cum, *message_cum;
    int32_t *active_nodes;
    long n_active;

    struct plan *plans;
    struct edge_map edges;
    uint32_t *endpoint_rank; /* endpoints in the byte order of their keys */

    uint32_t *cand_key;
    int32_t *cand_obs;
    int32_t *cand_len;

    sqlite3 *db;
    sqlite3_stmt *ins_tx, *ins_obs, *ins_obs_batch;
    const uint8_t *batch[OBS_BATCH]; /* records bound to ins_obs_batch, not yet written */
    int batched;
    long observations_written; /* for opt.progress */
    struct text t_path, t_resolved, t_raw, t_obs_raw, t_json;
    struct record rec;
    struct pipe *pipe;
    char *err;
    size_t errlen;
    char producer_err[256];
};

static bool migrated(const struct gen *g)
{
    return g->o.schema == MG_FIXTURE_MIGRATED;
}

static double geo_d2(double lat1, double lon1, double lat2, double lon2)
{
    double dlat = lat1 - lat2;
    double dlon = (lon1 - lon2) * 0.7934; /* cos(37.5 degrees) */
    return dlat * dlat + dlon * dlon;
}

static bool is_relay_role(uint8_t role)
{
    return role == ROLE_REPEATER || role == ROLE_ROOM;
}

static void make_callsign(struct rng *r, char *out, size_t n)
{
    const char *prefix = call_prefixes[rng_below(r, sizeof call_prefixes / sizeof *call_prefixes)];
    int letters = 2 + (int)rng_below(r, 2);
    char suffix[4];
    for (int i = 0; i < letters; i++)
        suffix[i] = (char)('A' + rng_below(r, 26));
    suffix[letters] = '\0';
    snprintf(out, n, "%s6%s", prefix, suffix);
}

static void make_name(struct rng *r, struct node *nd)
{
    const char *place = cluster_places[nd->cluster][rng_below(r, 6)];
    char call[16];
    make_callsign(r, call, sizeof call);
    const char *em = emoji[rng_below(r, sizeof emoji / sizeof *emoji)];
    const char *first = first_names[rng_below(r, sizeof first_names / sizeof *first_names)];
    switch (nd->role) {
    case ROLE_REPEATER:
        switch (rng_below(r, 6)) {
        case 0:
            snprintf(nd->name, sizeof nd->name, "%s Rptr", place);
            break;
        case 1:
            snprintf(nd->name, sizeof nd->name, "%s Repeater", call);
            break;
        case 2:
            snprintf(nd->name, sizeof nd->name, "%s-%s", call, place);
            break;
        case 3:
            snprintf(nd->name, sizeof nd->name, "%s RPT %02X", place, nd->key[0]);
            break;
        case 4:
            snprintf(nd->name, sizeof nd->name, "%s %s", place, em);
            break;
        default:
            snprintf(nd->name, sizeof nd->name, "%s Mesh %d", place, 1 + (int)rng_below(r, 9));
            break;
        }
        break;
    case ROLE_ROOM: {
        static const char *const kinds[] = {"Room", "Room Server", "BBS", "Chat"};
        snprintf(nd->name, sizeof nd->name, "%s %s", place, kinds[rng_below(r, 4)]);
        break;
    }
    case ROLE_COMPANION:
        switch (rng_below(r, 4)) {
        case 0:
            snprintf(nd->name, sizeof nd->name, "%s T-Deck", first);
            break;
        case 1:
            snprintf(nd->name, sizeof nd->name, "%s", call);
            break;
        case 2:
            snprintf(nd->name, sizeof nd->name, "%s %s", first, em);
            break;
        default:
            snprintf(nd->name, sizeof nd->name, "%sCompanion", first);
            break;
        }
        break;
    default:
        snprintf(nd->name, sizeof nd->name, "WX %s %d", place, 1 + (int)rng_below(r, 9));
        break;
    }
}

static double round_to(double v, int decimals)
{
    double scale = pow(10.0, decimals);
    return round(v * scale) / scale;
}

static void shuffle_i32(struct rng *r, int32_t *a, long n)
{
    for (long i = n - 1; i > 0; i--) {
        long j = (long)rng_below(r, (uint64_t)i + 1);
        int32_t tmp = a[i];
        a[i] = a[j];
        a[j] = tmp;
    }
}

static int compare_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void *xcalloc(struct gen *g, size_t n, size_t size, bool *ok)
{
    void *p = calloc(n ? n : 1, size);
    if (p == NULL && *ok) {
        fail(g->err, g->errlen, "out of memory allocating %zu x %zu bytes", n, size);
        *ok = false;
    }
    return p;
}

/* Roles, keys, positions, names and activity of every node. */
static int build_nodes(struct gen *g)
{
    struct rng *r = &g->rng;
    long n = g->n_nodes;
    bool ok = true;
    g->nodes = xcalloc(g, (size_t)n, sizeof *g->nodes, &ok);
    int32_t *order = xcalloc(g, (size_t)n, sizeof *order, &ok);
    if (!ok) {
        free(order);
        return -1;
    }

    long rooms = lround(0.11 * (double)n), companions = lround(0.04 * (double)n);
    long sensors = lround(0.01 * (double)n);
    long repeaters = n - rooms - companions - sensors;
    for (long i = 0; i < n; i++)
        order[i] = (int32_t)i;
    shuffle_i32(r, order, n);
    for (long i = 0; i < n; i++) {
        uint8_t role = i < repeaters                     ? ROLE_REPEATER
                       : i < repeaters + rooms           ? ROLE_ROOM
                       : i < repeaters + rooms + sensors ? ROLE_SENSOR
                                                         : ROLE_COMPANION;
        g->nodes[order[i]].role = role;
    }

    for (long i = 0; i < n; i++) {
        struct node *nd = &g->nodes[i];
        rng_bytes(r, nd->key, sizeof nd->key);
        double pick = rng_unit(r), acc = 0;
        nd->cluster = CLUSTER_COUNT - 1;
        for (size_t c = 0; c < CLUSTER_COUNT; c++) {
            acc += clusters[c].weight;
            if (pick < acc) {
                nd->cluster = (uint8_t)c;
                break;
            }
        }
        const struct cluster *c = &clusters[nd->cluster];
        nd->lat = c->lat + rng_gauss(r) * c->spread_deg;
        nd->lon = c->lon + rng_gauss(r) * c->spread_deg * 1.25;
        double u = rng_unit(r);
        nd->hop_size = u < 0.80 ? 1 : u < 0.97 ? 2 : 3;
        nd->stale = rng_chance(r, 0.12);
        nd->pos_null = rng_chance(r, nd->role == ROLE_COMPANION ? 0.30 : 0.03);
        nd->pos_zero = !nd->pos_null && rng_chance(r, 0.05);
        static const uint8_t decimals[] = {3, 5, 6, 6};
        nd->decimals = decimals[rng_below(r, 4)];
        nd->stored_lat = nd->pos_zero ? 0.0 : round_to(nd->lat, nd->decimals);
        nd->stored_lon = nd->pos_zero ? 0.0 : round_to(nd->lon, nd->decimals);
        nd->activity = exp(rng_gauss(r) * 0.8);
        nd->vertex = -1;
        nd->entry = -1;
        nd->observer = -1;
        nd->first_advert = INT64_MAX;
        nd->last_advert = INT64_MIN;
    }

    /* Keep at least three active repeaters so that the radio graph has a shape. */
    long active_repeaters = 0;
    for (long i = 0; i < n; i++)
        active_repeaters += g->nodes[i].role == ROLE_REPEATER && !g->nodes[i].stale;
    for (long i = 0; i < n && active_repeaters < 3; i++) {
        if (g->nodes[i].role == ROLE_REPEATER && g->nodes[i].stale) {
            g->nodes[i].stale = false;
            active_repeaters++;
        }
    }

    /* Deliberate prefix collisions among relays: a few pairs share their first 2 bytes
     * (then differ in the third), a few share their first 3 (no reliable token at all). */
    long n_relays = 0;
    for (long i = 0; i < n; i++)
        if (is_relay_role(g->nodes[i].role))
            order[n_relays++] = (int32_t)i;
    shuffle_i32(r, order, n_relays);
    long pairs3 = n_relays / 300 > 2 ? n_relays / 300 : 2;
    long pairs2 = n_relays / 100 > 2 ? n_relays / 100 : 2;
    long used = 0;
    for (long p = 0; p < pairs3 + pairs2 && used + 2 <= n_relays; p++, used += 2) {
        struct node *a = &g->nodes[order[used]], *b = &g->nodes[order[used + 1]];
        if (p < pairs3) {
            memcpy(a->key, b->key, 3);
        } else {
            memcpy(a->key, b->key, 2);
            a->key[2] = (uint8_t)(b->key[2] ^ (1 + rng_below(r, 255)));
        }
    }

    for (long i = 0; i < n; i++) {
        struct node *nd = &g->nodes[i];
        static const char digits[] = "0123456789abcdef";
        for (int k = 0; k < 32; k++) {
            nd->hex[2 * k] = digits[nd->key[k] >> 4];
            nd->hex[2 * k + 1] = digits[nd->key[k] & 15];
        }
        nd->hex[64] = '\0';
        make_name(r, nd);
    }
    /* Names that exercise a server's JSON escaping. */
    if (n_relays >= 2) {
        snprintf(g->nodes[order[0]].name, sizeof g->nodes[0].name, "Bob & Alice <Rptr>");
        snprintf(g->nodes[order[1]].name, sizeof g->nodes[0].name, "Summit \"Ridge\" Rptr");
    }

    /* Which prefixes are unique among relay-role nodes (stale ones included). */
    uint32_t *count1 = xcalloc(g, 256, sizeof *count1, &ok);
    uint32_t *count2 = xcalloc(g, 65536, sizeof *count2, &ok);
    uint32_t *p3 = xcalloc(g, (size_t)n_relays, sizeof *p3, &ok);
    if (!ok) {
        free(count1);
        free(count2);
        free(p3);
        free(order);
        return -1;
    }
    for (long k = 0; k < n_relays; k++) {
        const uint8_t *key = g->nodes[order[k]].key;
        count1[key[0]]++;
        count2[key[0] << 8 | key[1]]++;
        p3[k] = (uint32_t)key[0] << 16 | (uint32_t)key[1] << 8 | key[2];
    }
    qsort(p3, (size_t)n_relays, sizeof *p3, compare_u32);
    for (long k = 0; k < n_relays; k++) {
        struct node *nd = &g->nodes[order[k]];
        const uint8_t *key = nd->key;
        uint32_t v3 = (uint32_t)key[0] << 16 | (uint32_t)key[1] << 8 | key[2];
        uint32_t *first = bsearch(&v3, p3, (size_t)n_relays, sizeof *p3, compare_u32);
        long at = first - p3, same = 0;
        while (at > 0 && p3[at - 1] == v3)
            at--;
        while (at + same < n_relays && p3[at + same] == v3)
            same++;
        nd->unique_mask =
            (uint8_t)((count1[key[0]] == 1 ? 1 : 0) | (count2[key[0] << 8 | key[1]] == 1 ? 2 : 0) |
                      (same == 1 ? 4 : 0));
    }
    free(count1);
    free(count2);
    free(p3);
    free(order);
    return 0;
}

static int uf_find(int32_t *parent, int32_t x)
{
    while (parent[x] != x) {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    return x;
}

/* The radio graph over active repeaters: nearest-neighbour links, then the closest pair
 * between components until one component remains (Boruvka). */
static int build_graph(struct gen *g)
{
    bool ok = true;
    long n = g->n_nodes, v_count = 0;
    for (long i = 0; i < n; i++)
        if (g->nodes[i].role == ROLE_REPEATER && !g->nodes[i].stale)
            v_count++;
    g->n_vertices = v_count;
    g->vertex_node = xcalloc(g, (size_t)v_count, sizeof *g->vertex_node, &ok);
    size_t edge_cap = (size_t)v_count * KNN_LINKS + (size_t)v_count;
    uint64_t *edges = xcalloc(g, edge_cap, sizeof *edges, &ok);
    int32_t *parent = xcalloc(g, (size_t)v_count, sizeof *parent, &ok);
    int32_t *comp = xcalloc(g, (size_t)v_count, sizeof *comp, &ok);
    double *best_d = xcalloc(g, (size_t)v_count, sizeof *best_d, &ok);
    uint64_t *best_e = xcalloc(g, (size_t)v_count, sizeof *best_e, &ok);
    if (!ok)
        goto out;

    v_count = 0;
    for (long i = 0; i < n; i++) {
        if (g->nodes[i].role == ROLE_REPEATER && !g->nodes[i].stale) {
            g->nodes[i].vertex = (int32_t)v_count;
            g->vertex_node[v_count++] = (int32_t)i;
        }
    }

    size_t n_edges = 0;
    for (long u = 0; u < v_count; u++) {
        const struct node *a = &g->nodes[g->vertex_node[u]];
        double bd[KNN_LINKS];
        int32_t bv[KNN_LINKS];
        int nb = 0;
        for (long v = 0; v < v_count; v++) {
            if (v == u)
                continue;
            const struct node *b = &g->nodes[g->vertex_node[v]];
            double d = geo_d2(a->lat, a->lon, b->lat, b->lon);
            if (nb == KNN_LINKS && d >= bd[KNN_LINKS - 1])
                continue;
            int k = nb < KNN_LINKS ? nb++ : KNN_LINKS - 1;
            while (k > 0 && bd[k - 1] > d) {
                bd[k] = bd[k - 1];
                bv[k] = bv[k - 1];
                k--;
            }
            bd[k] = d;
            bv[k] = (int32_t)v;
        }
        for (int k = 0; k < nb; k++) {
            uint64_t lo = (uint64_t)(u < bv[k] ? u : bv[k]), hi = (uint64_t)(u < bv[k] ? bv[k] : u);
            edges[n_edges++] = lo << 32 | hi;
        }
    }

    for (long v = 0; v < v_count; v++)
        parent[v] = (int32_t)v;
    for (size_t e = 0; e < n_edges; e++) {
        int32_t a = uf_find(parent, (int32_t)(edges[e] >> 32));
        int32_t b = uf_find(parent, (int32_t)(edges[e] & 0xFFFFFFFFu));
        if (a != b)
            parent[a] = b;
    }
    for (;;) {
        long components = 0;
        for (long v = 0; v < v_count; v++) {
            comp[v] = uf_find(parent, (int32_t)v);
            components += comp[v] == v;
            best_d[v] = INFINITY;
        }
        if (components <= 1)
            break;
        for (long u = 0; u < v_count; u++) {
            const struct node *a = &g->nodes[g->vertex_node[u]];
            for (long v = u + 1; v < v_count; v++) {
                if (comp[u] == comp[v])
                    continue;
                const struct node *b = &g->nodes[g->vertex_node[v]];
                double d = geo_d2(a->lat, a->lon, b->lat, b->lon);
                uint64_t e = (uint64_t)u << 32 | (uint64_t)v;
                if (d < best_d[comp[u]]) {
                    best_d[comp[u]] = d;
                    best_e[comp[u]] = e;
                }
                if (d < best_d[comp[v]]) {
                    best_d[comp[v]] = d;
                    best_e[comp[v]] = e;
                }
            }
        }
        for (long c = 0; c < v_count; c++) {
            if (comp[c] != c || isinf(best_d[c]))
                continue;
            int32_t a = uf_find(parent, (int32_t)(best_e[c] >> 32));
            int32_t b = uf_find(parent, (int32_t)(best_e[c] & 0xFFFFFFFFu));
            if (a != b && n_edges < edge_cap) {
                parent[a] = b;
                edges[n_edges++] = best_e[c];
            }
        }
    }

    qsort(edges, n_edges, sizeof *edges, compare_u64);
    g->adj_start = xcalloc(g, (size_t)v_count + 1, sizeof *g->adj_start, &ok);
    g->adj = xcalloc(g, n_edges * 2, sizeof *g->adj, &ok);
    if (!ok)
        goto out;
    size_t unique = 0;
    for (size_t e = 0; e < n_edges; e++) {
        if (unique > 0 && edges[unique - 1] == edges[e])
            continue;
        edges[unique++] = edges[e];
    }
    for (size_t e = 0; e < unique; e++) {
        g->adj_start[(edges[e] >> 32) + 1]++;
        g->adj_start[(edges[e] & 0xFFFFFFFFu) + 1]++;
    }
    for (long v = 0; v < v_count; v++)
        g->adj_start[v + 1] += g->adj_start[v];
    int32_t *fill = comp; /* reused as the fill cursor */
    for (long v = 0; v < v_count; v++)
        fill[v] = g->adj_start[v];
    for (size_t e = 0; e < unique; e++) {
        int32_t a = (int32_t)(edges[e] >> 32), b = (int32_t)(edges[e] & 0xFFFFFFFFu);
        g->adj[fill[a]++] = b;
        g->adj[fill[b]++] = a;
    }

    /* The vertex each other node's packets enter the graph through: its nearest repeater. */
    for (long i = 0; i < n; i++) {
        struct node *nd = &g->nodes[i];
        if (nd->vertex >= 0) {
            nd->entry = nd->vertex;
            continue;
        }
        double best = INFINITY;
        for (long v = 0; v < v_count; v++) {
            const struct node *b = &g->nodes[g->vertex_node[v]];
            double d = geo_d2(nd->lat, nd->lon, b->lat, b->lon);
            if (d < best) {
                best = d;
                nd->entry = (int32_t)v;
            }
        }
    }

out:
    free(edges);
    free(parent);
    free(comp);
    free(best_d);
    free(best_e);
    return ok ? 0 : -1;
}

/* Hops from every vertex to the observer's ear, never through its own repeater. */
static void observer_bfs(struct gen *g, struct observer *ob, const int32_t *ear, int n_ear,
                         int32_t *queue)
{
    memset(ob->dist, DIST_UNREACHABLE, (size_t)g->n_vertices);
    long head = 0, tail = 0;
    for (int k = 0; k < n_ear; k++) {
        if (ear[k] == ob->blocked_vertex || ob->dist[ear[k]] == 0)
            continue;
        ob->dist[ear[k]] = 0;
        queue[tail++] = ear[k];
    }
    while (head < tail) {
        int32_t u = queue[head++];
        uint8_t next = ob->dist[u] >= DIST_UNREACHABLE - 1 ? DIST_UNREACHABLE - 1 : ob->dist[u] + 1;
        for (int32_t k = g->adj_start[u]; k < g->adj_start[u + 1]; k++) {
            int32_t v = g->adj[k];
            if (v == ob->blocked_vertex || ob->dist[v] != DIST_UNREACHABLE)
                continue;
            ob->dist[v] = next;
            queue[tail++] = v;
        }
    }
}

static void random_upper_hex(struct rng *r, char *out, size_t bytes)
{
    static const char digits[] = "0123456789ABCDEF";
    for (size_t i = 0; i < bytes; i++) {
        uint8_t b = (uint8_t)rng_next(r);
        out[2 * i] = digits[b >> 4];
        out[2 * i + 1] = digits[b & 15];
    }
    out[2 * bytes] = '\0';
}

static int build_observers(struct gen *g)
{
    struct rng *r = &g->rng;
    bool ok = true;
    long n = g->n_observers, nv = g->n_vertices;
    g->observers = xcalloc(g, (size_t)n, sizeof *g->observers, &ok);
    int32_t *pool = xcalloc(g, (size_t)nv, sizeof *pool, &ok);
    int32_t *queue = xcalloc(g, (size_t)nv, sizeof *queue, &ok);
    if (!ok)
        goto out;
    for (long v = 0; v < nv; v++)
        pool[v] = (int32_t)v;
    shuffle_i32(r, pool, nv);

    /* About 40% of observers are repeaters; always leave some repeaters that are not. */
    long as_nodes = lround(0.4 * (double)n), pool_used = 0;
    if (as_nodes > nv - 2)
        as_nodes = nv - 2 > 0 ? nv - 2 : 0;
    for (long j = 0; j < n; j++) {
        struct observer *ob = &g->observers[j];
        ob->node = -1;
        ob->blocked_vertex = -1;
        ob->dist = xcalloc(g, (size_t)nv, 1, &ok);
        if (!ok)
            goto out;
        int32_t home;
        bool is_node = (j % 5 == 1 || j % 5 == 3) && as_nodes > 0;
        if (is_node) {
            as_nodes--;
            home = pool[pool_used++];
            struct node *nd = &g->nodes[g->vertex_node[home]];
            ob->node = g->vertex_node[home];
            ob->blocked_vertex = home;
            nd->observer = (int32_t)j;
            for (int k = 0; k < 64; k++)
                ob->id[k] = (char)(nd->hex[k] >= 'a' ? nd->hex[k] - 'a' + 'A' : nd->hex[k]);
            ob->id[64] = '\0';
            snprintf(ob->id_lower, sizeof ob->id_lower, "%s", nd->hex);
            snprintf(ob->name, sizeof ob->name, "%s", nd->name);
            ob->lat = nd->lat;
            ob->lon = nd->lon;
        } else {
            home = (int32_t)rng_below(r, (uint64_t)nv);
            const struct node *nd = &g->nodes[g->vertex_node[home]];
            ob->lat = nd->lat + rng_gauss(r) * 0.01;
            ob->lon = nd->lon + rng_gauss(r) * 0.012;
            const char *place = cluster_places[nd->cluster][rng_below(r, 6)];
            if (n >= 6 && j == n - 1) {
                /* CoreScope accepts any text as an observer id; real ones include names. */
                for (int k = 0; k < 6; k++)
                    ob->id[k] = (char)('a' + rng_below(r, 26));
                ob->id[6] = '\0';
                snprintf(ob->name, sizeof ob->name, "%s", ob->id);
            } else {
                random_upper_hex(r, ob->id, 32);
                for (int k = 0; k < 65; k++)
                    ob->id_lower[k] =
                        (char)(ob->id[k] >= 'A' && ob->id[k] <= 'F' ? ob->id[k] - 'A' + 'a'
                                                                    : ob->id[k]);
                static const char *const kinds[] = {"%s Observer", "%s MQTT", "%s-obs"};
                snprintf(ob->name, sizeof ob->name, kinds[rng_below(r, 3)], place);
            }
        }
        ob->iata = clusters[g->nodes[g->vertex_node[home]].cluster].iata;

        /* Observer 0 hears the whole window, so every transmission has a listener. */
        double u = j == 0 ? 0.0 : rng_unit(r);
        ob->active_from = INT64_MIN;
        ob->active_until = INT64_MAX;
        if (u >= 0.93) {
            ob->inactive = true;
            ob->active_until = g->start + (int64_t)((0.1 + 0.5 * rng_unit(r)) * (double)g->span);
        } else if (u >= 0.85) {
            ob->active_from = g->start + (int64_t)((0.2 + 0.6 * rng_unit(r)) * (double)g->span);
        }
        ob->reports_signal = rng_chance(r, 0.8);
        ob->direction_rx = rng_chance(r, 0.65);
        ob->snr_bias = -4.0 + 10.0 * rng_unit(r);

        int32_t ear[64];
        int n_ear = 0;
        if (is_node) {
            for (int32_t k = g->adj_start[home]; k < g->adj_start[home + 1] && n_ear < 64; k++)
                ear[n_ear++] = g->adj[k];
        } else {
            double b1 = INFINITY, b2 = INFINITY;
            int32_t v1 = home, v2 = -1;
            for (long v = 0; v < nv; v++) {
                const struct node *nd = &g->nodes[g->vertex_node[v]];
                double d = geo_d2(ob->lat, ob->lon, nd->lat, nd->lon);
                if (d < b1) {
                    b2 = b1;
                    v2 = v1;
                    b1 = d;
                    v1 = (int32_t)v;
                } else if (d < b2) {
                    b2 = d;
                    v2 = (int32_t)v;
                }
            }
            ear[n_ear++] = v1;
            if (v2 >= 0 && v2 != v1)
                ear[n_ear++] = v2;
        }
        observer_bfs(g, ob, ear, n_ear, queue);
    }
out:
    free(pool);
    free(queue);
    return ok ? 0 : -1;
}

/* Cumulative weights for picking who sends adverts and who sends everything else. */
static int build_senders(struct gen *g)
{
    bool ok = true;
    g->active_nodes = xcalloc(g, (size_t)g->n_nodes, sizeof *g->active_nodes, &ok);
    g->advert_cum = xcalloc(g, (size_t)g->n_nodes, sizeof *g->advert_cum, &ok);
    g->message_cum = xcalloc(g, (size_t)g->n_nodes, sizeof *g->message_cum, &ok);
    if (!ok)
        return -1;
    static const double advert_w[] = {1.0, 1.0, 0.5, 0.7};
    static const double message_w[] = {0.4, 1.5, 8.0, 0.5};
    double a = 0, m = 0;
    long k = 0;
    for (long i = 0; i < g->n_nodes; i++) {
        const struct node *nd = &g->nodes[i];
        if (nd->stale)
            continue;
        a += advert_w[nd->role] * nd->activity;
        m += message_w[nd->role] * nd->activity;
        g->active_nodes[k] = (int32_t)i;
        g->advert_cum[k] = a;
        g->message_cum[k] = m;
        k++;
    }
    g->n_active = k;
    return k > 0 ? 0 : fail(g->err, g->errlen, "no active node to send packets");
}

static int32_t pick_sender(struct gen *g, const double *cum)
{
    double x = rng_unit(&g->rng) * cum[g->n_active - 1];
    long lo = 0, hi = g->n_active - 1;
    while (lo < hi) {
        long mid = (lo + hi) / 2;
        if (cum[mid] > x)
            hi = mid;
        else
            lo = mid + 1;
    }
    return g->active_nodes[lo];
}

static bool observer_active(const struct observer *ob, int64_t t)
{
    return t >= ob->active_from && t <= ob->active_until;
}

/* --- pass 1: when, what, from whom, and how many hear it --------------------------------- */

static uint8_t pick_payload_type(struct rng *r)
{
    static const struct {
        uint8_t type;
        double share;
    } mix[] = {{PT_ADVERT, 0.20},  {PT_GRP_TXT, 0.32},   {PT_REQ, 0.11},       {PT_RESPONSE, 0.14},
               {PT_TXT_MSG, 0.09}, {PT_ACK, 0.03},       {PT_ANON_REQ, 0.035}, {PT_PATH, 0.045},
               {PT_TRACE, 0.015},  {PT_GRP_DATA, 0.005}, {PT_CONTROL, 0.01}};
    double u = rng_unit(r), acc = 0;
    for (size_t i = 0; i < sizeof mix / sizeof mix[0]; i++) {
        acc += mix[i].share;
        if (u < acc)
            return mix[i].type;
    }
    return PT_GRP_TXT;
}

static uint8_t pick_route(struct rng *r, uint8_t type)
{
    double u = rng_unit(r);
    switch (type) {
    case PT_ADVERT:
        return u < 0.78 ? RT_FLOOD : u < 0.98 ? RT_DIRECT : RT_TRANSPORT_FLOOD;
    case PT_GRP_TXT:
    case PT_GRP_DATA:
        return u < 0.93 ? RT_FLOOD : u < 0.99 ? RT_TRANSPORT_FLOOD : RT_DIRECT;
    case PT_TRACE:
    case PT_CONTROL:
        return RT_DIRECT;
    case PT_PATH:
    case PT_ANON_REQ:
        return u < 0.7 ? RT_FLOOD : RT_DIRECT;
    default:
        return u < 0.42 ? RT_FLOOD : u < 0.97 ? RT_DIRECT : RT_TRANSPORT_DIRECT;
    }
}

static bool is_flood(uint8_t route)
{
    return route == RT_FLOOD || route == RT_TRANSPORT_FLOOD;
}

static long eligible_observers(const struct gen *g, int64_t t, int32_t source)
{
    long n = 0;
    for (long j = 0; j < g->n_observers; j++)
        n += observer_active(&g->observers[j], t) && g->observers[j].node != source;
    return n;
}

static int plan_transmissions(struct gen *g)
{
    struct rng *r = &g->rng;
    long n = g->o.transmissions;
    bool ok = true;
    g->plans = xcalloc(g, (size_t)n, sizeof *g->plans, &ok);
    uint32_t *cap = xcalloc(g, (size_t)n, sizeof *cap, &ok);
    if (!ok) {
        free(cap);
        return -1;
    }
    double total_w = 0;
    for (long i = 0; i < n; i++) {
        struct plan *p = &g->plans[i];
        /* Jittered, increasing times over the window; ids follow time as in CoreScope. */
        p->t = g->start + (int64_t)(((double)i + rng_unit(r)) * (double)g->span / (double)n);
        if (p->t > g->now)
            p->t = g->now;
        p->payload_type = pick_payload_type(r);
        p->route = pick_route(r, p->payload_type);
        long eligible = 0;
        for (int tries = 0; tries < 64 && eligible == 0; tries++) {
            p->source =
                pick_sender(g, p->payload_type == PT_ADVERT ? g->advert_cum : g->message_cum);
            eligible = eligible_observers(g, p->t, p->source);
        }
        cap[i] = (uint32_t)(eligible > 0 ? eligible : 1);
        double w;
        if (is_flood(p->route)) {
            double factor = p->payload_type == PT_ADVERT    ? 1.4
                            : p->payload_type == PT_GRP_TXT ? 1.2
                                                            : 0.8;
            w = -log(1.0 - rng_unit(r)) * factor;
        } else {
            w = 0.12;
        }
        p->weight = (float)w;
        total_w += (double)p->weight;
        if (p->payload_type == PT_ADVERT) {
            struct node *nd = &g->nodes[p->source];
            nd->adverts++;
            if (p->t < nd->first_advert)
                nd->first_advert = p->t;
            if (p->t > nd->last_advert)
                nd->last_advert = p->t;
        }
    }

    /* Beyond one hearing each, the extra observations go out in proportion to the weights;
     * exact in total because the cumulative weight ends at exactly total_w. */
    long extra = g->o.observations - n, carry = 0;
    double cum = 0;
    long given = 0;
    for (long i = 0; i < n; i++) {
        cum += (double)g->plans[i].weight;
        long upto = i == n - 1 ? extra : llround((double)extra * (cum / total_w));
        if (upto > extra)
            upto = extra;
        long share = upto - given;
        given = upto;
        long want = 1 + share + carry;
        long c = want < (long)cap[i] ? want : (long)cap[i];
        carry = want - c;
        g->plans[i].count = (uint32_t)c;
    }
    /* What the active observers could not take is heard again over another path, by the
     * flooded transmissions first. */
    bool any_flood = false;
    for (long i = 0; i < n && !any_flood; i++)
        any_flood = is_flood(g->plans[i].route);
    while (carry > 0) {
        for (long i = 0; i < n && carry > 0; i++) {
            if (is_flood(g->plans[i].route) || !any_flood) {
                g->plans[i].count++;
                carry--;
            }
        }
    }
    free(cap);
    return 0;
}

/* --- pass 2: rows ------------------------------------------------------------------------- */

static int edge_grow(struct edge_map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 4096;
    uint64_t *keys = calloc(cap, sizeof *keys);
    uint32_t *counts = calloc(cap, sizeof *counts);
    int64_t *last = calloc(cap, sizeof *last);
    if (keys == NULL || counts == NULL || last == NULL) {
        free(keys);
        free(counts);
        free(last);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (m->keys[i] == 0)
            continue;
        size_t h = (size_t)mix64(m->keys[i]) & (cap - 1);
        while (keys[h] != 0)
            h = (h + 1) & (cap - 1);
        keys[h] = m->keys[i];
        counts[h] = m->counts[i];
        last[h] = m->last[i];
    }
    free(m->keys);
    free(m->counts);
    free(m->last);
    m->keys = keys;
    m->counts = counts;
    m->last = last;
    m->cap = cap;
    return 0;
}

static const char *endpoint_key(const struct gen *g, uint32_t e)
{
    if (e == 0)
        return "";
    if (e <= (uint32_t)g->n_nodes)
        return g->nodes[e - 1].hex;
    return g->observers[e - 1 - (uint32_t)g->n_nodes].id_lower;
}

static int edge_add(struct gen *g, uint32_t a, uint32_t b, int64_t ts)
{
    if (a == b)
        return 0;
    if (g->endpoint_rank[a] > g->endpoint_rank[b]) {
        uint32_t tmp = a;
        a = b;
        b = tmp;
    }
    struct edge_map *m = &g->edges;
    if ((m->len + 1) * 2 > m->cap && edge_grow(m) != 0)
        return fail(g->producer_err, sizeof g->producer_err, "out of memory for neighbour edges");
    uint64_t key = ((uint64_t)a + 1) << 32 | ((uint64_t)b + 1);
    size_t h = (size_t)mix64(key) & (m->cap - 1);
    while (m->keys[h] != 0 && m->keys[h] != key)
        h = (h + 1) & (m->cap - 1);
    if (m->keys[h] == 0) {
        m->keys[h] = key;
        m->len++;
    }
    m->counts[h]++;
    if (ts > m->last[h])
        m->last[h] = ts;
    return 0;
}

static int compare_endpoints(const void *x, const void *y, void *ctx)
{
    return strcmp(endpoint_key(ctx, *(const uint32_t *)x), endpoint_key(ctx, *(const uint32_t *)y));
}

/* Neighbour edges keep node_a < node_b in byte order; ranking every endpoint once makes
 * that a comparison of two integers. */
static int rank_endpoints(struct gen *g)
{
    size_t n = (size_t)(1 + g->n_nodes + g->n_observers);
    uint32_t *order = calloc(n, sizeof *order);
    g->endpoint_rank = calloc(n, sizeof *g->endpoint_rank);
    if (order == NULL || g->endpoint_rank == NULL) {
        free(order);
        return fail(g->err, g->errlen, "out of memory ranking %zu keys", n);
    }
    for (size_t i = 0; i < n; i++)
        order[i] = (uint32_t)i;
    qsort_r(order, n, sizeof *order, compare_endpoints, g);
    for (size_t i = 0; i < n; i++)
        g->endpoint_rank[order[i]] = (uint32_t)i;
    free(order);
    return 0;
}

static uint32_t node_endpoint(int32_t node)
{
    return (uint32_t)node + 1;
}

static uint32_t observer_endpoint(const struct gen *g, long j)
{
    const struct observer *ob = &g->observers[j];
    if (ob->node >= 0)
        return node_endpoint(ob->node);
    return ob->id_lower[0] ? (uint32_t)(g->n_nodes + 1 + j) : UINT32_MAX;
}

/* One random shortest path from start to the observer's ear, as node indices. */
static int walk(struct gen *g, const struct observer *ob, int32_t start, bool include_start,
                int32_t *path)
{
    int len = 0;
    int32_t cur = start;
    if (include_start)
        path[len++] = g->vertex_node[cur];
    if (cur == ob->blocked_vertex)
        return 0; /* the observer is the repeater this packet entered through */
    while (ob->dist[cur] > 0 && ob->dist[cur] != DIST_UNREACHABLE) {
        uint8_t want = ob->dist[cur] - 1;
        int options = 0;
        for (int32_t k = g->adj_start[cur]; k < g->adj_start[cur + 1]; k++)
            options += ob->dist[g->adj[k]] == want;
        int pick = (int)rng_below(&g->rng, (uint64_t)options);
        for (int32_t k = g->adj_start[cur]; k < g->adj_start[cur + 1]; k++) {
            if (ob->dist[g->adj[k]] == want && pick-- == 0) {
                cur = g->adj[k];
                break;
            }
        }
        path[len++] = g->vertex_node[cur];
    }
    return len;
}

struct packet {
    uint8_t payload[600];
    size_t payload_len;
    uint8_t transport[4];
    bool upper;
};

static void random_hex_json(struct gen *g, struct text *t, const char *field, size_t bytes,
                            struct packet *pk)
{
    uint8_t buf[128];
    rng_bytes(&g->rng, buf, bytes);
    text_printf(t, ",\"%s\":\"", field);
    text_hex(t, buf, bytes, false);
    text_putc(t, '"');
    memcpy(pk->payload + pk->payload_len, buf, bytes);
    pk->payload_len += bytes;
}

static void put_byte_json(struct text *t, const char *field, uint8_t b, struct packet *pk)
{
    text_printf(t, ",\"%s\":\"%02x\"", field, b);
    pk->payload[pk->payload_len++] = b;
}

static void build_chat_text(struct gen *g, const struct node *src, char *out, size_t n)
{
    struct rng *r = &g->rng;
    const char *place = cluster_places[src->cluster][rng_below(r, 6)];
    char call[16];
    make_callsign(r, call, sizeof call);
    switch (rng_below(r, 8)) {
    case 0:
        snprintf(out, n, "@[MapperBot] %.5f, %.5f [0.3w]", src->lat, src->lon);
        break;
    case 1:
        snprintf(out, n, "Test from %s", place);
        break;
    case 2:
        snprintf(out, n, "Good morning from %s", place);
        break;
    case 3:
        snprintf(out, n, "Anyone copy in %s?", place);
        break;
    case 4:
        snprintf(out, n, "ping");
        break;
    case 5:
        snprintf(out, n, "73 de %s", call);
        break;
    case 6:
        snprintf(out, n, "Signal check: \"loud & clear\" <3");
        break;
    default:
        snprintf(out, n, "Heading to %s, back on in 20", place);
        break;
    }
}

/* The payload bytes and CoreScope's decoded_json of one transmission; sets channel_hash. */
static void build_payload(struct gen *g, const struct plan *p, struct packet *pk,
                          char *channel_hash, size_t channel_hash_len)
{
    struct rng *r = &g->rng;
    struct text *t = &g->t_json;
    const struct node *src = &g->nodes[p->source];
    const struct node *dst = &g->nodes[rng_below(r, (uint64_t)g->n_nodes)];
    text_reset(t);
    pk->payload_len = 0;
    channel_hash[0] = '\0';
    switch (p->payload_type) {
    case PT_REQ:
    case PT_RESPONSE:
    case PT_TXT_MSG: {
        static const char *const names[] = {"REQ", "RESPONSE", "TXT_MSG"};
        static const uint8_t max_blocks[] = {2, 4, 6};
        text_printf(t, "{\"type\":\"%s\"", names[p->payload_type]);
        put_byte_json(t, "destHash", dst->key[0], pk);
        put_byte_json(t, "srcHash", src->key[0], pk);
        random_hex_json(g, t, "mac", 2, pk);
        random_hex_json(g, t, "encryptedData", 16 * (1 + rng_below(r, max_blocks[p->payload_type])),
                        pk);
        text_putc(t, '}');
        break;
    }
    case PT_ACK:
        text_puts(t, "{\"type\":\"ACK\"");
        random_hex_json(g, t, "ackCrc", 4, pk);
        text_putc(t, '}');
        break;
    case PT_ADVERT: {
        int64_t ts = p->t - (int64_t)rng_below(r, 90);
        uint8_t ts_le[4] = {(uint8_t)ts, (uint8_t)(ts >> 8), (uint8_t)(ts >> 16),
                            (uint8_t)(ts >> 24)};
        char iso[40];
        format_rfc3339(iso, sizeof iso, ts * 1000, true);
        memcpy(pk->payload, src->key, 32);
        memcpy(pk->payload + 32, ts_le, 4);
        pk->payload_len = 36;
        text_printf(t,
                    "{\"type\":\"ADVERT\",\"pubKey\":\"%s\",\"timestamp\":%" PRId64
                    ",\"timestampISO\":\"%s\"",
                    src->hex, ts, iso);
        random_hex_json(g, t, "signature", 64, pk);
        static const uint8_t type_bits[] = {2, 3, 1, 4};
        bool has_loc = !src->pos_null;
        uint8_t flags = (uint8_t)(type_bits[src->role] | (has_loc ? 0x10 : 0) | 0x80);
        pk->payload[pk->payload_len++] = flags;
        text_printf(t,
                    ",\"flags\":{\"raw\":%u,\"type\":%u,\"chat\":%s,\"repeater\":%s,\"room\":%s,"
                    "\"sensor\":%s,\"hasLocation\":%s,\"hasName\":true}",
                    flags, type_bits[src->role], src->role == ROLE_COMPANION ? "true" : "false",
                    src->role == ROLE_REPEATER ? "true" : "false",
                    src->role == ROLE_ROOM ? "true" : "false",
                    src->role == ROLE_SENSOR ? "true" : "false", has_loc ? "true" : "false");
        if (has_loc) {
            int32_t lat = (int32_t)lround(src->stored_lat * 1e6);
            int32_t lon = (int32_t)lround(src->stored_lon * 1e6);
            for (int k = 0; k < 4; k++)
                pk->payload[pk->payload_len++] = (uint8_t)((uint32_t)lat >> (8 * k));
            for (int k = 0; k < 4; k++)
                pk->payload[pk->payload_len++] = (uint8_t)((uint32_t)lon >> (8 * k));
            text_puts(t, ",\"lat\":");
            text_coord(t, src->stored_lat, src->decimals);
            text_puts(t, ",\"lon\":");
            text_coord(t, src->stored_lon, src->decimals);
        }
        size_t name_len = strlen(src->name);
        memcpy(pk->payload + pk->payload_len, src->name, name_len);
        pk->payload_len += name_len;
        text_puts(t, ",\"name\":");
        text_json_string(t, src->name);
        text_putc(t, '}');
        break;
    }
    case PT_GRP_TXT:
    case PT_GRP_DATA: {
        const struct channel *ch = &channels[rng_below(r, CHANNEL_COUNT)];
        bool decrypted = ch->name != NULL && p->payload_type == PT_GRP_TXT;
        pk->payload[pk->payload_len++] = ch->hash;
        if (decrypted) {
            char said[160], line[256];
            build_chat_text(g, src, said, sizeof said);
            snprintf(line, sizeof line, "%s: %s", src->name, said);
            uint8_t mac[2];
            rng_bytes(r, mac, 2);
            memcpy(pk->payload + pk->payload_len, mac, 2);
            pk->payload_len += 2;
            size_t blocks = (5 + strlen(line) + 15) / 16;
            rng_bytes(r, pk->payload + pk->payload_len, 16 * blocks);
            pk->payload_len += 16 * blocks;
            text_printf(t,
                        "{\"type\":\"CHAN\",\"channelHash\":%u,\"channelHashHex\":\"%02X\","
                        "\"decryptionStatus\":\"decrypted\",\"channel\":",
                        ch->hash, ch->hash);
            text_json_string(t, ch->name);
            text_puts(t, ",\"text\":");
            text_json_string(t, line);
            text_puts(t, ",\"sender\":");
            text_json_string(t, src->name);
            text_printf(t, ",\"sender_timestamp\":%" PRId64 "}", p->t - (int64_t)rng_below(r, 30));
            snprintf(channel_hash, channel_hash_len, "%s", ch->name);
        } else {
            text_printf(t, "{\"type\":\"%s\"",
                        p->payload_type == PT_GRP_TXT ? "GRP_TXT" : "GRP_DATA");
            random_hex_json(g, t, "mac", 2, pk);
            random_hex_json(g, t, "encryptedData", 16 * (1 + rng_below(r, 6)), pk);
            text_printf(t,
                        ",\"channelHash\":%u,\"channelHashHex\":\"%02X\","
                        "\"decryptionStatus\":\"decryption_failed\"}",
                        ch->hash, ch->hash);
            if (p->payload_type == PT_GRP_TXT)
                snprintf(channel_hash, channel_hash_len, "enc_%02X", ch->hash);
        }
        break;
    }
    case PT_ANON_REQ: {
        text_puts(t, "{\"type\":\"ANON_REQ\"");
        put_byte_json(t, "destHash", dst->key[0], pk);
        uint8_t eph[32];
        rng_bytes(r, eph, 32);
        memcpy(pk->payload + pk->payload_len, eph, 32);
        pk->payload_len += 32;
        random_hex_json(g, t, "mac", 2, pk);
        random_hex_json(g, t, "encryptedData", 16 * (1 + rng_below(r, 2)), pk);
        text_puts(t, ",\"ephemeralPubKey\":\"");
        text_hex(t, eph, 32, false);
        text_puts(t, "\"}");
        break;
    }
    case PT_PATH:
        text_puts(t, "{\"type\":\"PATH\"");
        put_byte_json(t, "destHash", dst->key[0], pk);
        put_byte_json(t, "srcHash", src->key[0], pk);
        random_hex_json(g, t, "mac", 2, pk);
        random_hex_json(g, t, "pathData", 16 * (1 + rng_below(r, 2)), pk);
        text_putc(t, '}');
        break;
    default: {
        /* TRACE and CONTROL: CoreScope stores what it could not decode as raw. */
        size_t len = p->payload_type == PT_TRACE ? 10 + rng_below(r, 4) : 18 + rng_below(r, 20);
        rng_bytes(r, pk->payload, len);
        pk->payload_len = len;
        text_printf(t, "{\"type\":\"%s\",\"raw\":\"",
                    p->payload_type == PT_TRACE ? "TRACE" : "UNKNOWN");
        text_hex(t, pk->payload, len, false);
        text_puts(t, p->payload_type == PT_TRACE ? "\",\"error\":\"too short\"}" : "\"}");
        break;
    }
    }
}

/* header, transport codes, path length, path, payload: the packet as an observer heard it. */
static void build_raw(struct text *t, const struct gen *g, const struct plan *p,
                      const struct packet *pk, const int32_t *path, int len, int hop_size)
{
    uint8_t head[6];
    size_t n = 0;
    head[n++] = (uint8_t)(p->payload_type << 2 | p->route);
    text_reset(t);
    text_hex(t, head, n, pk->upper);
    if (p->route == RT_TRANSPORT_FLOOD || p->route == RT_TRANSPORT_DIRECT)
        text_hex(t, pk->transport, 4, pk->upper);
    uint8_t path_len = (uint8_t)((hop_size - 1) << 6 | len);
    text_hex(t, &path_len, 1, pk->upper);
    for (int i = 0; i < len; i++)
        text_hex(t, g->nodes[path[i]].key, (size_t)hop_size, pk->upper);
    text_hex(t, pk->payload, pk->payload_len, pk->upper);
}

static int check_row_text(struct gen *g)
{
    if (g->t_path.overflow || g->t_resolved.overflow || g->t_raw.overflow ||
        g->t_obs_raw.overflow || g->t_json.overflow || g->rec.overflow) {
        snprintf(g->producer_err, sizeof g->producer_err,
                 "internal error: a row's text outgrew its buffer");
        return -1;
    }
    return 0;
}

static int step_insert(struct gen *g, sqlite3_stmt *st, const char *what)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return fail(g->err, g->errlen, "insert into %s: %s", what, sqlite3_errmsg(g->db));
    return 0;
}

static void bind_text_or_null(sqlite3_stmt *st, int i, const char *s, size_t len)
{
    if (s == NULL)
        sqlite3_bind_null(st, i);
    else
        sqlite3_bind_text(st, i, s, (int)len, SQLITE_STATIC);
}

/* --- records: one row, serialized for the writer ------------------------------------------ */

static void rec_put(struct record *r, const void *bytes, size_t n)
{
    if (r->len + n > r->cap) {
        r->overflow = true;
        return;
    }
    memcpy(r->p + r->len, bytes, n);
    r->len += n;
}

static void rec_u8(struct record *r, uint8_t v)
{
    rec_put(r, &v, 1);
}

static void rec_i64(struct record *r, int64_t v)
{
    rec_put(r, &v, sizeof v);
}

static void rec_f64(struct record *r, double v)
{
    rec_put(r, &v, sizeof v);
}

/* A string, or NULL (length UINT32_MAX). */
static void rec_str(struct record *r, const char *s, size_t n)
{
    uint32_t len = s == NULL ? UINT32_MAX : (uint32_t)n;
    rec_put(r, &len, sizeof len);
    if (s != NULL)
        rec_put(r, s, n);
}

struct reader {
    const uint8_t *p;
};

static uint8_t rd_u8(struct reader *rd)
{
    return *rd->p++;
}

static int64_t rd_i64(struct reader *rd)
{
    int64_t v;
    memcpy(&v, rd->p, sizeof v);
    rd->p += sizeof v;
    return v;
}

static double rd_f64(struct reader *rd)
{
    double v;
    memcpy(&v, rd->p, sizeof v);
    rd->p += sizeof v;
    return v;
}

/* Binds the next string of the record to parameter i, without copying it. */
static void rd_bind_str(struct reader *rd, sqlite3_stmt *st, int i)
{
    uint32_t len;
    memcpy(&len, rd->p, sizeof len);
    rd->p += sizeof len;
    if (len == UINT32_MAX) {
        sqlite3_bind_null(st, i);
        return;
    }
    sqlite3_bind_text(st, i, (const char *)rd->p, (int)len, SQLITE_STATIC);
    rd->p += len;
}

/* --- the pipe between the producer and the writer ----------------------------------------- */

static void pipe_free(struct pipe *pp)
{
    if (pp == NULL)
        return;
    for (int i = 0; i < PIPE_CHUNKS; i++)
        free(pp->chunks[i].data);
    pthread_cond_destroy(&pp->changed);
    pthread_mutex_destroy(&pp->mu);
    free(pp);
}

static struct pipe *pipe_new(void)
{
    struct pipe *pp = calloc(1, sizeof *pp);
    if (pp == NULL)
        return NULL;
    pthread_mutex_init(&pp->mu, NULL);
    pthread_cond_init(&pp->changed, NULL);
    for (int i = 0; i < PIPE_CHUNKS; i++) {
        pp->chunks[i].data = malloc(PIPE_CHUNK_BYTES);
        if (pp->chunks[i].data == NULL) {
            pipe_free(pp);
            return NULL;
        }
    }
    return pp;
}

static void pipe_fail(struct pipe *pp)
{
    pthread_mutex_lock(&pp->mu);
    pp->failed = true;
    pthread_cond_broadcast(&pp->changed);
    pthread_mutex_unlock(&pp->mu);
}

/* Hands the chunk being filled to the writer and waits for the next one to be free.
 * Returns false when the writer has failed. */
static bool pipe_publish(struct pipe *pp, bool last)
{
    pthread_mutex_lock(&pp->mu);
    struct chunk *ch = &pp->chunks[pp->fill];
    ch->last = last;
    ch->full = true;
    pthread_cond_broadcast(&pp->changed);
    pp->fill = (pp->fill + 1) % PIPE_CHUNKS;
    while (!last && pp->chunks[pp->fill].full && !pp->failed)
        pthread_cond_wait(&pp->changed, &pp->mu);
    bool ok = !pp->failed;
    if (!last)
        pp->chunks[pp->fill].len = 0;
    pthread_mutex_unlock(&pp->mu);
    return ok;
}

/* Appends the finished record; the chunk it fills is owned by the producer alone. */
static int pipe_push(struct gen *g)
{
    struct pipe *pp = g->pipe;
    struct chunk *ch = &pp->chunks[pp->fill];
    if (ch->len + g->rec.len > PIPE_CHUNK_BYTES) {
        if (!pipe_publish(pp, false))
            return -1;
        ch = &pp->chunks[pp->fill];
    }
    memcpy(ch->data + ch->len, g->rec.p, g->rec.len);
    ch->len += g->rec.len;
    g->rec.len = 0;
    return 0;
}

/* Chooses up to want observers for one transmission, nearest (in hops) first with noise.
 * Returns how many; cand_obs[0..n) in order, cand_len the path length each would have. */
static long choose_observers(struct gen *g, const struct plan *p, int32_t start, bool include_start,
                             long want, int max_hops)
{
    struct rng *r = &g->rng;
    long n = 0;
    int32_t far_obs = -1, far_len = 0;
    uint32_t far_key = 0;
    uint32_t noise = is_flood(p->route) ? 5 : 2;
    for (long j = 0; j < g->n_observers; j++) {
        const struct observer *ob = &g->observers[j];
        if (!observer_active(ob, p->t) || ob->node == p->source)
            continue;
        int len;
        if (start == ob->blocked_vertex)
            len = include_start ? 0 : -1;
        else if (ob->dist[start] == DIST_UNREACHABLE)
            len = -1;
        else
            len = ob->dist[start] + (include_start ? 1 : 0);
        if (len < 0)
            continue;
        uint32_t key =
            (uint32_t)(len + (int)rng_below(r, noise)) << 16 | (uint32_t)(rng_next(r) & 0xFFFF);
        if (len > max_hops) {
            /* Too far to hear it, unless nobody nearer can. */
            if (far_obs < 0 || len < far_len) {
                far_obs = (int32_t)j;
                far_len = len;
                far_key = key;
            }
            continue;
        }
        g->cand_obs[n] = (int32_t)j;
        g->cand_len[n] = len;
        g->cand_key[n] = key;
        n++;
    }
    if (n == 0 && far_obs >= 0) {
        g->cand_obs[0] = far_obs;
        g->cand_len[0] = far_len;
        g->cand_key[0] = far_key;
        n = 1;
    }
    long take = want < n ? want : n;
    for (long a = 0; a < take; a++) {
        long m = a;
        for (long b = a + 1; b < n; b++)
            if (g->cand_key[b] < g->cand_key[m])
                m = b;
        uint32_t k = g->cand_key[a];
        g->cand_key[a] = g->cand_key[m];
        g->cand_key[m] = k;
        int32_t o = g->cand_obs[a];
        g->cand_obs[a] = g->cand_obs[m];
        g->cand_obs[m] = o;
        int32_t l = g->cand_len[a];
        g->cand_len[a] = g->cand_len[m];
        g->cand_len[m] = l;
    }
    return take;
}

static int write_transmission(struct gen *g, long index, long *obs_id)
{
    struct rng *r = &g->rng;
    const struct plan *p = &g->plans[index];
    const struct node *src = &g->nodes[p->source];
    long tx_id = index + 1;
    int hop_size = src->hop_size;
    int max_hops = PATH_MAX_BYTES / hop_size;
    bool include_start = src->vertex < 0;
    int32_t start = src->entry;

    struct packet pk;
    char channel_hash[32];
    pk.upper = rng_chance(r, 0.7);
    rng_bytes(r, pk.transport, sizeof pk.transport);
    build_payload(g, p, &pk, channel_hash, sizeof channel_hash);

    long want = (long)p->count;
    long chosen = choose_observers(g, p, start, include_start, want, max_hops);
    if (chosen == 0)
        return fail(g->producer_err, sizeof g->producer_err,
                    "internal error: transmission %ld has no observer", tx_id);

    int32_t path[256];
    int32_t first_path[256];
    int first_len = -1;
    int64_t last_ts = p->t;
    bool zero_hop =
        !is_flood(p->route) && (p->payload_type == PT_ADVERT || p->payload_type == PT_TRACE ||
                                p->payload_type == PT_CONTROL);
    for (long k = 0; k < want; k++) {
        long j = g->cand_obs[k % chosen];
        struct observer *ob = &g->observers[j];
        int len = walk(g, ob, start, include_start, path);
        if (zero_hop) {
            len = 0;
        } else if (!is_flood(p->route) && len > 0) {
            /* A direct packet shows the hops still ahead of it, often none. */
            if (rng_chance(r, 0.7)) {
                len = 0;
            } else {
                int keep = 1 + (int)rng_below(r, (uint64_t)(len < 3 ? len : 3));
                memmove(path, path + len - keep, (size_t)keep * sizeof *path);
                len = keep;
            }
        }
        if (len > max_hops)
            len = max_hops;

        int64_t ts = p->t;
        if (k > 0)
            ts += (int64_t)rng_below(r, (uint64_t)(3 + 2 * len));
        if (ts > g->now)
            ts = g->now;
        if (ts > last_ts)
            last_ts = ts;

        bool path_null = rng_chance(r, 0.003);
        bool resolved_null = path_null || len == 0 || rng_chance(r, 0.05);
        text_reset(&g->t_path);
        text_reset(&g->t_resolved);
        if (!path_null) {
            text_putc(&g->t_path, '[');
            text_putc(&g->t_resolved, '[');
            uint32_t prev = UINT32_MAX;
            if (p->payload_type == PT_ADVERT)
                prev = node_endpoint(p->source);
            for (int h = 0; h < len; h++) {
                const struct node *hop = &g->nodes[path[h]];
                if (h > 0) {
                    text_putc(&g->t_path, ',');
                    text_putc(&g->t_resolved, ',');
                }
                text_putc(&g->t_path, '"');
                text_hex(&g->t_path, hop->key, (size_t)hop_size, true);
                text_putc(&g->t_path, '"');
                bool resolved = (hop->unique_mask >> (hop_size - 1) & 1) || rng_chance(r, 0.7);
                if (resolved) {
                    text_putc(&g->t_resolved, '"');
                    text_putn(&g->t_resolved, hop->hex, 64);
                    text_putc(&g->t_resolved, '"');
                } else {
                    text_puts(&g->t_resolved, "null");
                }
                uint32_t here = resolved ? node_endpoint(path[h]) : 0;
                if (prev != UINT32_MAX && (prev != 0 || here != 0) && edge_add(g, prev, here, ts))
                    return -1;
                prev = here;
            }
            text_putc(&g->t_path, ']');
            text_putc(&g->t_resolved, ']');
            uint32_t obs_end = observer_endpoint(g, j);
            if (prev != UINT32_MAX && obs_end != UINT32_MAX && (prev != 0 || len == 0) &&
                edge_add(g, prev, obs_end, ts))
                return -1;
        }
        if (first_len < 0) {
            first_len = path_null ? 0 : len;
            memcpy(first_path, path, (size_t)first_len * sizeof *path);
        }

        struct record *rc = &g->rec;
        rec_u8(rc, RECORD_OBSERVATION);
        rec_i64(rc, *obs_id);
        rec_i64(rc, tx_id);
        rec_i64(rc, j + 1);
        rec_u8(rc, ob->direction_rx);
        bool signal = ob->reports_signal && !rng_chance(r, 0.03);
        rec_u8(rc, signal);
        if (signal) {
            double snr = ob->snr_bias + rng_gauss(r) * 3.5 - 0.25 * len;
            snr = round(fmax(-20.0, fmin(14.0, snr)) * 4.0) / 4.0;
            double rssi =
                round(fmax(-130.0, fmin(-35.0, -118.0 + (snr + 15.0) * 2.2 + rng_gauss(r) * 4.0)));
            rec_f64(rc, snr);
            rec_f64(rc, rssi);
        }
        rec_i64(rc, rng_chance(r, 0.1) ? 1 + (int64_t)rng_below(r, 100) : -1);
        rec_str(rc, path_null ? NULL : g->t_path.p, g->t_path.len);
        rec_i64(rc, ts);
        rec_str(rc, resolved_null ? NULL : g->t_resolved.p, g->t_resolved.len);
        if (migrated(g)) {
            if (rng_chance(&g->rng_migrated, 0.85)) {
                build_raw(&g->t_obs_raw, g, p, &pk, path, path_null ? 0 : len, hop_size);
                rec_str(rc, g->t_obs_raw.p, g->t_obs_raw.len);
            } else {
                rec_str(rc, NULL, 0);
            }
        }
        if (check_row_text(g) != 0 || pipe_push(g) != 0)
            return -1;
        (*obs_id)++;
        ob->observations++;
        if (ts > ob->last_observation)
            ob->last_observation = ts;
    }

    char first_seen[40], created_at[40], hash[17];
    format_rfc3339(first_seen, sizeof first_seen, p->t * 1000, false);
    format_sql_datetime(created_at, sizeof created_at, p->t + (int64_t)rng_below(r, 3));
    snprintf(hash, sizeof hash, "%016" PRIx64,
             mix64(g->o.seed * 0x9E3779B97F4A7C15u + (uint64_t)tx_id));
    build_raw(&g->t_raw, g, p, &pk, first_path, first_len, hop_size);
    if (check_row_text(g) != 0)
        return -1;

    struct record *rc = &g->rec;
    rec_u8(rc, RECORD_TRANSMISSION);
    rec_i64(rc, tx_id);
    rec_str(rc, g->t_raw.p, g->t_raw.len);
    rec_str(rc, hash, 16);
    rec_str(rc, first_seen, strlen(first_seen));
    rec_u8(rc, p->route);
    rec_u8(rc, p->payload_type);
    rec_str(rc, g->t_json.p, g->t_json.len);
    rec_str(rc, created_at, strlen(created_at));
    rec_str(rc, channel_hash[0] ? channel_hash : NULL, strlen(channel_hash));
    rec_str(rc, p->payload_type == PT_ADVERT ? src->hex : NULL, 64);
    if (migrated(g)) {
        /* CoreScope names the region of a transport-routed packet when its transport code
         * matches a known scope, writes '' when it matches none, and NULL for the rest. */
        const char *scope = NULL;
        if (p->route == RT_TRANSPORT_FLOOD || p->route == RT_TRANSPORT_DIRECT)
            scope = rng_chance(&g->rng_migrated, 0.9) ? clusters[src->cluster].scope : "";
        rec_str(rc, scope, scope ? strlen(scope) : 0);
        /* last_seen: the newest observation, as CoreScope's backfill and ingestor keep it. */
        rec_i64(rc, last_ts);
    }
    if (check_row_text(g) != 0)
        return -1;
    return pipe_push(g);
}

/* The producer: pass 2 over every planned transmission. */
static void *produce_rows(void *arg)
{
    struct gen *g = arg;
    long obs_id = 1;
    int rc = 0;
    for (long i = 0; i < g->o.transmissions && rc == 0; i++)
        rc = write_transmission(g, i, &obs_id);
    if (rc == 0 && obs_id - 1 != g->o.observations) {
        snprintf(g->producer_err, sizeof g->producer_err,
                 "internal error: made %ld observations instead of %ld", obs_id - 1,
                 g->o.observations);
        rc = -1;
    }
    if (rc != 0)
        pipe_fail(g->pipe);
    else
        pipe_publish(g->pipe, true);
    return NULL;
}

/* Binds one observation record (after its kind byte) to the parameters after base. */
static void bind_observation(struct gen *g, sqlite3_stmt *st, int base, struct reader *rd)
{
    sqlite3_bind_int64(st, base + 1, rd_i64(rd));
    sqlite3_bind_int64(st, base + 2, rd_i64(rd));
    sqlite3_bind_int64(st, base + 3, rd_i64(rd));
    if (rd_u8(rd))
        sqlite3_bind_text(st, base + 4, "rx", 2, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, base + 4);
    if (rd_u8(rd)) {
        sqlite3_bind_double(st, base + 5, rd_f64(rd));
        sqlite3_bind_double(st, base + 6, rd_f64(rd));
    } else {
        sqlite3_bind_null(st, base + 5);
        sqlite3_bind_null(st, base + 6);
    }
    int64_t score = rd_i64(rd);
    if (score >= 0)
        sqlite3_bind_int64(st, base + 7, score);
    else
        sqlite3_bind_null(st, base + 7);
    rd_bind_str(rd, st, base + 8);
    sqlite3_bind_int64(st, base + 9, rd_i64(rd));
    rd_bind_str(rd, st, base + 10);
    if (migrated(g))
        rd_bind_str(rd, st, base + 11);
}

static int obs_columns(const struct gen *g)
{
    return migrated(g) ? 11 : 10;
}

/* Observations go in OBS_BATCH to a statement: an AUTOINCREMENT table pays a look-up and an
 * update of sqlite_sequence per statement, not per row. */
static int write_record(struct gen *g, struct reader *rd)
{
    const uint8_t *start = rd->p;
    uint8_t kind = rd_u8(rd);
    if (kind == RECORD_OBSERVATION) {
        g->observations_written++;
        g->batch[g->batched] = start;
        bind_observation(g, g->ins_obs_batch, g->batched * obs_columns(g), rd);
        if (++g->batched < OBS_BATCH)
            return 0;
        g->batched = 0;
        return step_insert(g, g->ins_obs_batch, "observations");
    }
    sqlite3_stmt *st = g->ins_tx;
    sqlite3_bind_int64(st, 1, rd_i64(rd));
    rd_bind_str(rd, st, 2);
    rd_bind_str(rd, st, 3);
    rd_bind_str(rd, st, 4);
    sqlite3_bind_int(st, 5, rd_u8(rd));
    sqlite3_bind_int(st, 6, rd_u8(rd));
    sqlite3_bind_null(st, 7);
    rd_bind_str(rd, st, 8);
    rd_bind_str(rd, st, 9);
    rd_bind_str(rd, st, 10);
    rd_bind_str(rd, st, 11);
    if (migrated(g)) {
        rd_bind_str(rd, st, 12);
        sqlite3_bind_int64(st, 13, rd_i64(rd));
    }
    return step_insert(g, st, "transmissions");
}

/* Writes the observations of an unfinished batch one by one, before their chunk is reused. */
static int flush_batch(struct gen *g)
{
    for (int k = 0; k < g->batched; k++) {
        struct reader rd = {g->batch[k] + 1};
        bind_observation(g, g->ins_obs, 0, &rd);
        if (step_insert(g, g->ins_obs, "observations") != 0)
            return -1;
    }
    g->batched = 0;
    return 0;
}

/* The writer: inserts every record the producer hands over, in order. */
static int write_rows(struct gen *g)
{
    struct pipe *pp = g->pipe;
    for (;;) {
        pthread_mutex_lock(&pp->mu);
        struct chunk *ch = &pp->chunks[pp->drain];
        while (!ch->full && !pp->failed)
            pthread_cond_wait(&pp->changed, &pp->mu);
        bool failed = pp->failed;
        pthread_mutex_unlock(&pp->mu);
        if (failed)
            return -1;
        struct reader rd = {ch->data};
        const uint8_t *end = ch->data + ch->len;
        int rc = 0;
        while (rd.p < end && rc == 0)
            rc = write_record(g, &rd);
        if (rc != 0 || flush_batch(g) != 0) {
            pipe_fail(pp);
            return -1;
        }
        bool last = ch->last;
        if (g->o.progress)
            g->o.progress(g->o.progress_arg, "rows", g->observations_written, g->o.observations);
        pthread_mutex_lock(&pp->mu);
        ch->full = false;
        pp->drain = (pp->drain + 1) % PIPE_CHUNKS;
        pthread_cond_broadcast(&pp->changed);
        pthread_mutex_unlock(&pp->mu);
        if (last)
            return 0;
    }
}

/* --- nodes, observers, edges, inactive nodes --------------------------------------------- */

/* nodes.multibyte_sup as CoreScope's capability cache stores it, and the evidence it names. */
enum multibyte { MULTIBYTE_UNKNOWN = 0, MULTIBYTE_SUSPECTED = 1, MULTIBYTE_CONFIRMED = 2 };
static const char *const multibyte_evidence[] = {NULL, "path", "advert"};

/* Confirmed when the node's own adverts carry hops of 2 or 3 bytes; suspected when it is a
 * relay that forwarded such packets (its prefix appears in multi-byte paths) but no advert of
 * its own shows it. A few capable nodes are not in the cache yet. */
static enum multibyte multibyte_of(struct rng *q, const struct node *nd)
{
    if (nd->hop_size >= 2 && nd->adverts > 0)
        return rng_chance(q, 0.95) ? MULTIBYTE_CONFIRMED : MULTIBYTE_UNKNOWN;
    if (is_relay_role(nd->role) && !nd->stale)
        return rng_chance(q, nd->hop_size >= 2 ? 0.8 : 0.1) ? MULTIBYTE_SUSPECTED
                                                            : MULTIBYTE_UNKNOWN;
    return MULTIBYTE_UNKNOWN;
}

static int write_nodes(struct gen *g)
{
    struct rng *r = &g->rng;
    const char *sql = migrated(g)
                          ? "INSERT INTO nodes (public_key, name, role, lat, lon, last_seen, "
                            "first_seen, advert_count, battery_mv, temperature_c, "
                            "foreign_advert, default_scope, multibyte_sup, multibyte_evidence) "
                            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
                          : "INSERT INTO nodes (public_key, name, role, lat, lon, last_seen, "
                            "first_seen, advert_count, battery_mv, temperature_c, "
                            "foreign_advert) VALUES (?,?,?,?,?,?,?,?,?,?,?)";
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(g->db, sql, -1, &st, NULL) != SQLITE_OK)
        return fail(g->err, g->errlen, "prepare insert into nodes: %s", sqlite3_errmsg(g->db));
    int rc = 0;
    int64_t window_ms = g->span * 1000;
    for (long i = 0; i < g->n_nodes && rc == 0; i++) {
        const struct node *nd = &g->nodes[i];
        bool last_ms = rng_chance(r, 0.25), first_ms = rng_chance(r, 0.8);
        int64_t last, first;
        if (nd->stale) {
            last = (g->start - 3600) * 1000 - (int64_t)(rng_unit(r) * 2.0 * (double)window_ms);
        } else if (nd->adverts > 0) {
            last = nd->last_advert * 1000;
        } else {
            last = g->start * 1000 + (int64_t)(rng_unit(r) * (double)window_ms);
        }
        if (last_ms)
            last += (int64_t)rng_below(r, 1000);
        if (last > g->now * 1000)
            last = g->now * 1000;
        if (!nd->stale && rng_chance(r, 0.12)) {
            /* Newly seen in the window: first heard with its first advert. */
            int64_t at = nd->adverts > 0 ? nd->first_advert * 1000 : last;
            first = at - (int64_t)rng_below(r, 60000);
        } else {
            first = (nd->stale ? last : g->start * 1000) - 3600000 -
                    (int64_t)(rng_unit(r) * 60.0 * 86400000.0);
        }
        if (first > last)
            first = last;
        char last_s[40], first_s[40];
        format_rfc3339(last_s, sizeof last_s, last, last_ms);
        format_rfc3339(first_s, sizeof first_s, first, first_ms);

        sqlite3_bind_text(st, 1, nd->hex, 64, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, nd->name, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, role_names[nd->role], -1, SQLITE_STATIC);
        if (nd->pos_null) {
            sqlite3_bind_null(st, 4);
            sqlite3_bind_null(st, 5);
        } else {
            sqlite3_bind_double(st, 4, nd->stored_lat);
            sqlite3_bind_double(st, 5, nd->stored_lon);
        }
        sqlite3_bind_text(st, 6, last_s, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 7, first_s, -1, SQLITE_TRANSIENT);
        long history = first < g->start * 1000 ? (long)rng_below(r, 40) : 0;
        long adverts = (long)nd->adverts + history;
        sqlite3_bind_int64(st, 8, adverts > 0 ? adverts : 1);
        bool telemetry = nd->role == ROLE_SENSOR || rng_chance(r, 0.25);
        if (telemetry)
            sqlite3_bind_int(st, 9, 3500 + (int)rng_below(r, 700));
        else
            sqlite3_bind_null(st, 9);
        if (nd->role == ROLE_SENSOR || (telemetry && rng_chance(r, 0.6)))
            sqlite3_bind_double(st, 10, (double)(50 + (int)rng_below(r, 350)) / 10.0);
        else
            sqlite3_bind_null(st, 10);
        sqlite3_bind_int(st, 11, rng_chance(r, 0.02) ? 1 : 0);
        if (migrated(g)) {
            struct rng *q = &g->rng_migrated;
            const char *scope = clusters[nd->cluster].scope;
            bool has_default = nd->role == ROLE_REPEATER && rng_chance(q, 0.6);
            bind_text_or_null(st, 12, has_default ? (rng_chance(q, 0.7) ? scope : "*") : NULL,
                              (size_t)-1);
            enum multibyte cap = multibyte_of(q, nd);
            sqlite3_bind_int(st, 13, (int)cap);
            bind_text_or_null(st, 14, multibyte_evidence[cap], (size_t)-1);
        }
        rc = step_insert(g, st, "nodes");
    }
    sqlite3_finalize(st);
    return rc;
}

/* The observers columns of the migration (parameters 17..21):
 *   - a few observers send timestamps in naive local time (Pacific, 7 or 8 hours behind
 *     UTC); CoreScope records the skew, how often it clamped one in the last 24 hours, and
 *     when it last did (older than 24 hours: the flag has decayed);
 *   - firmware that reports its repeat flag sets can_relay_seen = 1, with can_relay 1 for an
 *     observer that is a repeater and 0 for a listener; otherwise can_relay keeps its
 *     default 1 and can_relay_seen 0 (unknown). */
static void bind_observer_migrated(struct gen *g, sqlite3_stmt *st, const struct observer *ob,
                                   int64_t first_ms, int64_t last_ms)
{
    struct rng *q = &g->rng_migrated;
    if (rng_chance(q, 0.12)) {
        int64_t skew = (rng_chance(q, 0.7) ? -25200 : -28800) + (int64_t)rng_below(q, 121) - 60;
        int64_t at =
            last_ms - (int64_t)(rng_unit(q) * (rng_chance(q, 0.75) ? 20.0 : 200.0) * 3600000.0);
        if (at < first_ms)
            at = first_ms;
        char at_s[40];
        format_rfc3339(at_s, sizeof at_s, at, false);
        sqlite3_bind_int64(st, 17, skew);
        sqlite3_bind_int(st, 18, 1 + (int)rng_below(q, 400));
        sqlite3_bind_text(st, 19, at_s, -1, SQLITE_TRANSIENT);
    } else {
        sqlite3_bind_null(st, 17);
        sqlite3_bind_int(st, 18, 0);
        sqlite3_bind_null(st, 19);
    }
    bool seen = rng_chance(q, 0.55);
    sqlite3_bind_int(st, 20, seen ? ob->node >= 0 : 1);
    sqlite3_bind_int(st, 21, seen);
}

static int write_observers(struct gen *g)
{
    struct rng *r = &g->rng;
    sqlite3_stmt *st = NULL;
    const char *sql = migrated(g)
                          ? "INSERT INTO observers (rowid, id, name, iata, last_seen, "
                            "first_seen, packet_count, model, firmware, client_version, radio, "
                            "battery_mv, uptime_secs, noise_floor, inactive, last_packet_at, "
                            "clock_skew_seconds, clock_skew_count_24h, clock_last_naive_at, "
                            "can_relay, can_relay_seen) "
                            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
                          : "INSERT INTO observers (rowid, id, name, iata, last_seen, "
                            "first_seen, packet_count, model, firmware, client_version, radio, "
                            "battery_mv, uptime_secs, noise_floor, inactive, last_packet_at) "
                            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)";
    if (sqlite3_prepare_v2(g->db, sql, -1, &st, NULL) != SQLITE_OK)
        return fail(g->err, g->errlen, "prepare insert into observers: %s", sqlite3_errmsg(g->db));
    int rc = 0;
    for (long j = 0; j < g->n_observers && rc == 0; j++) {
        const struct observer *ob = &g->observers[j];
        int64_t last;
        if (ob->inactive) {
            last = ob->active_until * 1000;
        } else {
            last = (g->now - (int64_t)rng_below(r, 300)) * 1000 + (int64_t)rng_below(r, 1000);
        }
        if (ob->observations > 0 && last < ob->last_observation * 1000)
            last = ob->last_observation * 1000;
        if (last > g->now * 1000)
            last = g->now * 1000;
        int64_t first =
            ob->active_from != INT64_MIN
                ? ob->active_from * 1000
                : (g->start - 86400) * 1000 - (int64_t)(rng_unit(r) * 60.0 * 86400000.0);
        first += (int64_t)rng_below(r, 1000);
        if (first > last)
            first = last;
        char last_s[40], first_s[40], packet_at[40];
        format_rfc3339(last_s, sizeof last_s, last, false);
        format_rfc3339(first_s, sizeof first_s, first, rng_chance(r, 0.8));
        sqlite3_bind_int64(st, 1, j + 1);
        sqlite3_bind_text(st, 2, ob->id, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, ob->name, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 4, ob->iata, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 5, last_s, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 6, first_s, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 7, ob->observations + (long)rng_below(r, 50000));
        bind_text_or_null(
            st, 8, rng_chance(r, 0.4) ? models[rng_below(r, sizeof models / sizeof *models)] : NULL,
            (size_t)-1);
        bind_text_or_null(st, 9,
                          rng_chance(r, 0.4)
                              ? firmwares[rng_below(r, sizeof firmwares / sizeof *firmwares)]
                              : NULL,
                          (size_t)-1);
        sqlite3_bind_text(
            st, 10, client_versions[rng_below(r, sizeof client_versions / sizeof *client_versions)],
            -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 11, radios[rng_below(r, sizeof radios / sizeof *radios)], -1,
                          SQLITE_STATIC);
        if (rng_chance(r, 0.2))
            sqlite3_bind_int(st, 12, 3600 + (int)rng_below(r, 600));
        else
            sqlite3_bind_null(st, 12);
        if (rng_chance(r, 0.6)) {
            sqlite3_bind_int64(st, 13, 3600 + (int64_t)rng_below(r, 90 * 86400));
            sqlite3_bind_double(st, 14, -115.0 + 0.5 * (double)rng_below(r, 40));
        } else {
            sqlite3_bind_null(st, 13);
            sqlite3_bind_null(st, 14);
        }
        sqlite3_bind_int(st, 15, ob->inactive ? 1 : 0);
        if (ob->observations > 0) {
            format_rfc3339(packet_at, sizeof packet_at, ob->last_observation * 1000, false);
            sqlite3_bind_text(st, 16, packet_at, -1, SQLITE_TRANSIENT);
        } else {
            sqlite3_bind_null(st, 16);
        }
        if (migrated(g))
            bind_observer_migrated(g, st, ob, first, last);
        rc = step_insert(g, st, "observers");
    }
    sqlite3_finalize(st);
    return rc;
}

struct edge_row {
    uint32_t a, b, count;
    int64_t last;
};

static int compare_edge_rows(const void *x, const void *y, void *ctx)
{
    const uint32_t *rank = ctx;
    const struct edge_row *p = x, *q = y;
    if (rank[p->a] != rank[q->a])
        return rank[p->a] < rank[q->a] ? -1 : 1;
    return rank[p->b] < rank[q->b] ? -1 : rank[p->b] > rank[q->b];
}

static int write_edges(struct gen *g)
{
    struct edge_map *m = &g->edges;
    struct edge_row *rows = calloc(m->len ? m->len : 1, sizeof *rows);
    if (rows == NULL)
        return fail(g->err, g->errlen, "out of memory for neighbour edges");
    size_t n = 0;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->keys[i] == 0)
            continue;
        rows[n].a = (uint32_t)(m->keys[i] >> 32) - 1;
        rows[n].b = (uint32_t)(m->keys[i] & 0xFFFFFFFFu) - 1;
        rows[n].count = m->counts[i];
        rows[n].last = m->last[i];
        n++;
    }
    qsort_r(rows, n, sizeof *rows, compare_edge_rows, g->endpoint_rank);
    sqlite3_stmt *st = NULL;
    int rc = 0;
    if (sqlite3_prepare_v2(g->db,
                           "INSERT INTO neighbor_edges (node_a, node_b, count, last_seen) "
                           "VALUES (?,?,?,?)",
                           -1, &st, NULL) != SQLITE_OK) {
        free(rows);
        return fail(g->err, g->errlen, "prepare insert into neighbor_edges: %s",
                    sqlite3_errmsg(g->db));
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        char last[40];
        format_rfc3339(last, sizeof last, rows[i].last * 1000, false);
        sqlite3_bind_text(st, 1, endpoint_key(g, rows[i].a), -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, endpoint_key(g, rows[i].b), -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, rows[i].count);
        sqlite3_bind_text(st, 4, last, -1, SQLITE_TRANSIENT);
        rc = step_insert(g, st, "neighbor_edges");
    }
    sqlite3_finalize(st);
    free(rows);
    return rc;
}

/* Nodes CoreScope soft-deleted after they went quiet: one for every 20 nodes, last heard
 * between 1 and 60 days before the window, with the columns of nodes. */
static int write_inactive_nodes(struct gen *g)
{
    struct rng *q = &g->rng_migrated;
    long n = g->n_nodes / 20 > 1 ? g->n_nodes / 20 : 1;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(g->db,
                           "INSERT INTO inactive_nodes (public_key, name, role, lat, lon, "
                           "last_seen, first_seen, advert_count, battery_mv, temperature_c, "
                           "foreign_advert, default_scope, multibyte_sup, multibyte_evidence) "
                           "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                           -1, &st, NULL) != SQLITE_OK)
        return fail(g->err, g->errlen, "prepare insert into inactive_nodes: %s",
                    sqlite3_errmsg(g->db));
    int rc = 0;
    for (long i = 0; i < n && rc == 0; i++) {
        struct node nd;
        memset(&nd, 0, sizeof nd);
        rng_bytes(q, nd.key, sizeof nd.key);
        text_reset(&g->t_raw);
        text_hex(&g->t_raw, nd.key, sizeof nd.key, false);
        snprintf(nd.hex, sizeof nd.hex, "%.*s", 64, g->t_raw.p);
        double u = rng_unit(q);
        nd.role = u < 0.75 ? ROLE_REPEATER : u < 0.9 ? ROLE_COMPANION : ROLE_ROOM;
        nd.cluster = (uint8_t)rng_below(q, CLUSTER_COUNT);
        make_name(q, &nd);
        const struct cluster *cl = &clusters[nd.cluster];
        int64_t last = (g->start - 86400 - (int64_t)(rng_unit(q) * 59.0 * 86400.0)) * 1000;
        int64_t first = last - (int64_t)(rng_unit(q) * 120.0 * 86400000.0);
        char last_s[40], first_s[40];
        format_rfc3339(last_s, sizeof last_s, last, rng_chance(q, 0.25));
        format_rfc3339(first_s, sizeof first_s, first, rng_chance(q, 0.8));

        sqlite3_bind_text(st, 1, nd.hex, 64, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, nd.name, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 3, role_names[nd.role], -1, SQLITE_STATIC);
        if (rng_chance(q, 0.1)) {
            sqlite3_bind_null(st, 4);
            sqlite3_bind_null(st, 5);
        } else {
            sqlite3_bind_double(st, 4, round_to(cl->lat + rng_gauss(q) * cl->spread_deg, 5));
            sqlite3_bind_double(st, 5, round_to(cl->lon + rng_gauss(q) * cl->spread_deg, 5));
        }
        sqlite3_bind_text(st, 6, last_s, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 7, first_s, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(st, 8, 1 + (int)rng_below(q, 60));
        if (rng_chance(q, 0.2))
            sqlite3_bind_int(st, 9, 3400 + (int)rng_below(q, 800));
        else
            sqlite3_bind_null(st, 9);
        sqlite3_bind_null(st, 10);
        sqlite3_bind_int(st, 11, rng_chance(q, 0.02) ? 1 : 0);
        bool scoped = nd.role == ROLE_REPEATER && rng_chance(q, 0.3);
        bind_text_or_null(st, 12, scoped ? cl->scope : NULL, (size_t)-1);
        bool multibyte = rng_chance(q, 0.1);
        sqlite3_bind_int(st, 13, multibyte ? MULTIBYTE_CONFIRMED : MULTIBYTE_UNKNOWN);
        bind_text_or_null(st, 14, multibyte_evidence[multibyte ? MULTIBYTE_CONFIRMED : 0],
                          (size_t)-1);
        rc = step_insert(g, st, "inactive_nodes");
    }
    sqlite3_finalize(st);
    return rc;
}

/* --- schema ------------------------------------------------------------------------------- */

/* CoreScope's tables, byte for byte as its ingestor leaves them in sqlite_master. */
static const char schema_tables[] =
    "CREATE TABLE nodes (\n"
    "    public_key TEXT PRIMARY KEY,\n"
    "    name TEXT,\n"
    "    role TEXT,\n"
    "    lat REAL,\n"
    "    lon REAL,\n"
    "    last_seen TEXT,\n"
    "    first_seen TEXT,\n"
    "    advert_count INTEGER DEFAULT 0,\n"
    "    battery_mv INTEGER,\n"
    "    temperature_c REAL\n"
    ", foreign_advert INTEGER DEFAULT 0);\n"
    "CREATE TABLE observers (\n"
    "    id TEXT PRIMARY KEY,\n"
    "    name TEXT,\n"
    "    iata TEXT,\n"
    "    last_seen TEXT,\n"
    "    first_seen TEXT,\n"
    "    packet_count INTEGER DEFAULT 0,\n"
    "    model TEXT,\n"
    "    firmware TEXT,\n"
    "    client_version TEXT,\n"
    "    radio TEXT,\n"
    "    battery_mv INTEGER,\n"
    "    uptime_secs INTEGER,\n"
    "    noise_floor REAL\n"
    ", inactive INTEGER DEFAULT 0, last_packet_at TEXT);\n"
    "CREATE TABLE transmissions (\n"
    "    id INTEGER PRIMARY KEY AUTOINCREMENT,\n"
    "    raw_hex TEXT NOT NULL,\n"
    "    hash TEXT NOT NULL UNIQUE,\n"
    "    first_seen TEXT NOT NULL,\n"
    "    route_type INTEGER,\n"
    "    payload_type INTEGER,\n"
    "    payload_version INTEGER,\n"
    "    decoded_json TEXT,\n"
    "    created_at TEXT DEFAULT (datetime('now'))\n"
    ", channel_hash TEXT DEFAULT NULL, from_pubkey TEXT);\n"
    "CREATE TABLE observations (\n"
    "    id INTEGER PRIMARY KEY AUTOINCREMENT,\n"
    "    transmission_id INTEGER NOT NULL REFERENCES transmissions(id),\n"
    "    observer_idx INTEGER,\n"
    "    direction TEXT,\n"
    "    snr REAL,\n"
    "    rssi REAL,\n"
    "    score INTEGER,\n"
    "    path_json TEXT,\n"
    "    timestamp INTEGER NOT NULL\n"
    ", resolved_path TEXT);\n"
    "CREATE TABLE neighbor_edges (\n"
    "\t\tnode_a TEXT NOT NULL,\n"
    "\t\tnode_b TEXT NOT NULL,\n"
    "\t\tcount INTEGER DEFAULT 1,\n"
    "\t\tlast_seen TEXT,\n"
    "\t\tPRIMARY KEY (node_a, node_b)\n"
    "\t);\n";

/* The migration's columns, added the way CoreScope's migration adds them (an added column's
 * definition is appended to its table's CREATE text), before any row is written. */
static const char schema_migrated_columns[] =
    "ALTER TABLE nodes ADD COLUMN default_scope TEXT DEFAULT NULL;\n"
    "ALTER TABLE nodes ADD COLUMN multibyte_sup INTEGER NOT NULL DEFAULT 0;\n"
    "ALTER TABLE nodes ADD COLUMN multibyte_evidence TEXT;\n"
    "ALTER TABLE observers ADD COLUMN clock_skew_seconds INTEGER DEFAULT NULL;\n"
    "ALTER TABLE observers ADD COLUMN clock_skew_count_24h INTEGER DEFAULT 0;\n"
    "ALTER TABLE observers ADD COLUMN clock_last_naive_at TEXT DEFAULT NULL;\n"
    "ALTER TABLE observers ADD COLUMN can_relay INTEGER DEFAULT 1;\n"
    "ALTER TABLE observers ADD COLUMN can_relay_seen INTEGER DEFAULT 0;\n"
    "ALTER TABLE transmissions ADD COLUMN scope_name TEXT DEFAULT NULL;\n"
    "ALTER TABLE transmissions ADD COLUMN last_seen INTEGER NOT NULL DEFAULT 0;\n"
    "ALTER TABLE observations ADD COLUMN raw_hex TEXT;\n";

static const char schema_indexes[] =
    "CREATE INDEX idx_tx_channel_hash ON transmissions(channel_hash) WHERE payload_type = 5;\n"
    "CREATE INDEX idx_transmissions_first_seen ON transmissions(first_seen);\n"
    "CREATE INDEX idx_transmissions_hash ON transmissions(hash);\n"
    "CREATE INDEX idx_transmissions_payload_type ON transmissions(payload_type);\n"
    "CREATE INDEX idx_observations_timestamp ON observations(timestamp);\n"
    "CREATE INDEX idx_observations_transmission_id ON observations(transmission_id);\n"
    "CREATE INDEX idx_observations_observer_idx ON observations(observer_idx);\n"
    "CREATE INDEX idx_transmissions_from_pubkey ON transmissions(from_pubkey);\n";

/* The rest of the migration, after the rows and in the order it leaves sqlite_master: the
 * composite observations index, the table of soft-deleted nodes (the columns of nodes, its
 * own index), the markers of the migrations that record one (as CoreScope's migrated e2e
 * fixture has them), and the two partial transmissions indexes. */
static const char schema_migrated_rest[] =
    "CREATE INDEX idx_observations_tx_ts ON observations(transmission_id, timestamp);\n"
    "CREATE TABLE inactive_nodes (\n"
    "    public_key TEXT PRIMARY KEY,\n"
    "    name TEXT,\n"
    "    role TEXT,\n"
    "    lat REAL,\n"
    "    lon REAL,\n"
    "    last_seen TEXT,\n"
    "    first_seen TEXT,\n"
    "    advert_count INTEGER DEFAULT 0,\n"
    "    battery_mv INTEGER,\n"
    "    temperature_c REAL,\n"
    "    foreign_advert INTEGER DEFAULT 0\n"
    ");\n"
    "ALTER TABLE inactive_nodes ADD COLUMN default_scope TEXT DEFAULT NULL;\n"
    "ALTER TABLE inactive_nodes ADD COLUMN multibyte_sup INTEGER NOT NULL DEFAULT 0;\n"
    "ALTER TABLE inactive_nodes ADD COLUMN multibyte_evidence TEXT;\n"
    "CREATE INDEX idx_inactive_nodes_last_seen ON inactive_nodes(last_seen);\n"
    "CREATE TABLE _migrations (name TEXT PRIMARY KEY);\n"
    "INSERT INTO _migrations (name) VALUES ('scope_name_v1'), ('nodes_default_scope_v1'),\n"
    "    ('observations_raw_hex_v1');\n"
    "CREATE INDEX idx_tx_scope_name ON transmissions(scope_name) WHERE scope_name IS NOT NULL;\n"
    "CREATE INDEX idx_tx_last_seen_zero ON transmissions(id) WHERE last_seen=0;\n";

static int exec_sql(struct gen *g, const char *sql, const char *what)
{
    char *msg = NULL;
    if (sqlite3_exec(g->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        fail(g->err, g->errlen, "%s: %s", what, msg ? msg : sqlite3_errmsg(g->db));
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

static int prepare_inserts(struct gen *g)
{
    const char *tx = migrated(g)
                         ? "INSERT INTO transmissions (id, raw_hex, hash, first_seen, route_type, "
                           "payload_type, payload_version, decoded_json, created_at, "
                           "channel_hash, from_pubkey, scope_name, last_seen) "
                           "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)"
                         : "INSERT INTO transmissions (id, raw_hex, hash, first_seen, route_type, "
                           "payload_type, payload_version, decoded_json, created_at, "
                           "channel_hash, from_pubkey) VALUES (?,?,?,?,?,?,?,?,?,?,?)";
    const char *obs = migrated(g)
                          ? "INSERT INTO observations (id, transmission_id, observer_idx, "
                            "direction, snr, rssi, score, path_json, timestamp, resolved_path, "
                            "raw_hex) VALUES (?,?,?,?,?,?,?,?,?,?,?)"
                          : "INSERT INTO observations (id, transmission_id, observer_idx, "
                            "direction, snr, rssi, score, path_json, timestamp, resolved_path) "
                            "VALUES (?,?,?,?,?,?,?,?,?,?)";
    if (sqlite3_prepare_v2(g->db, tx, -1, &g->ins_tx, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(g->db, obs, -1, &g->ins_obs, NULL) != SQLITE_OK)
        return fail(g->err, g->errlen, "prepare inserts: %s", sqlite3_errmsg(g->db));
    /* The same statement with OBS_BATCH rows of values. */
    const char *values = strstr(obs, "VALUES ") + 7;
    size_t head = (size_t)(values - obs), one = strlen(values);
    char *batch = malloc(head + OBS_BATCH * (one + 1) + 1);
    if (batch == NULL)
        return fail(g->err, g->errlen, "out of memory");
    memcpy(batch, obs, head);
    size_t len = head;
    for (int k = 0; k < OBS_BATCH; k++) {
        if (k > 0)
            batch[len++] = ',';
        memcpy(batch + len, values, one);
        len += one;
    }
    batch[len] = '\0';
    int rc = sqlite3_prepare_v2(g->db, batch, (int)len, &g->ins_obs_batch, NULL);
    free(batch);
    if (rc != SQLITE_OK)
        return fail(g->err, g->errlen, "prepare batched insert: %s", sqlite3_errmsg(g->db));
    return 0;
}

/* --- options ------------------------------------------------------------------------------ */

void mg_fixture_options_default(struct mg_fixture_options *opt)
{
    memset(opt, 0, sizeof *opt);
    opt->seed = 1;
    opt->observations = 100000;
    opt->days = 7;
}

static long clamp_long(long v, long lo, long hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

int mg_fixture_resolve(const struct mg_fixture_options *opt, struct mg_fixture_options *out,
                       char *err, size_t errlen)
{
    *out = *opt;
    if (out->observations < 0 || out->observations > MG_FIXTURE_MAX_OBSERVATIONS)
        return fail(err, errlen, "observations %ld: must be between 0 and %ld", out->observations,
                    MG_FIXTURE_MAX_OBSERVATIONS);
    if (out->days < 0 || out->days > MG_FIXTURE_MAX_DAYS)
        return fail(err, errlen, "days %d: must be between 1 and %d", out->days,
                    MG_FIXTURE_MAX_DAYS);
    if (out->days == 0)
        out->days = 7;
    if (out->schema != MG_FIXTURE_MIGRATED && out->schema != MG_FIXTURE_BASE)
        return fail(err, errlen, "schema %d: must be migrated or base", (int)out->schema);
    if (out->transmissions < 0)
        return fail(err, errlen, "transmissions %ld: must be at least 1", out->transmissions);
    if (out->obs_per_tx < 0 || out->obs_per_tx > MG_FIXTURE_MAX_OBS_PER_TX)
        return fail(err, errlen, "obs-per-tx %ld: must be between 1 and %d", out->obs_per_tx,
                    MG_FIXTURE_MAX_OBS_PER_TX);
    /* Resolving twice gives the same options: transmissions, once set, agree with obs_per_tx. */
    long per_tx = out->obs_per_tx > 0 ? out->obs_per_tx : MG_FIXTURE_DEFAULT_OBS_PER_TX;
    long implied = out->observations / per_tx > 0 ? out->observations / per_tx : 1;
    if (out->observations == 0)
        implied = 0;
    if (out->transmissions == 0)
        out->transmissions = implied;
    else if (out->obs_per_tx > 0 && out->transmissions != implied)
        return fail(err, errlen,
                    "obs-per-tx %ld: give either it or transmissions (%ld), not both, since "
                    "each sets the other",
                    out->obs_per_tx, out->transmissions);
    if (out->transmissions > out->observations)
        return fail(err, errlen,
                    "transmissions %ld: must not exceed observations (%ld), since every "
                    "transmission is heard at least once",
                    out->transmissions, out->observations);
    if (out->nodes == 0)
        out->nodes = clamp_long(out->observations / 250, 60, 2000);
    if (out->nodes < MG_FIXTURE_MIN_NODES || out->nodes > MG_FIXTURE_MAX_NODES)
        return fail(err, errlen, "nodes %ld: must be between %d and %d", out->nodes,
                    MG_FIXTURE_MIN_NODES, MG_FIXTURE_MAX_NODES);
    if (out->observers == 0)
        out->observers = clamp_long(out->nodes / 12, 4, 150);
    if (out->observers < 1 || out->observers > MG_FIXTURE_MAX_OBSERVERS)
        return fail(err, errlen, "observers %ld: must be between 1 and %d", out->observers,
                    MG_FIXTURE_MAX_OBSERVERS);
    if (out->transmissions > 0 && out->observations / out->transmissions > out->observers)
        return fail(err, errlen,
                    "observations %ld: more than observers (%ld) x transmissions (%ld); give "
                    "more observers or transmissions",
                    out->observations, out->observers, out->transmissions);
    if (out->now_unix < 0)
        return fail(err, errlen, "now %" PRId64 ": must be a Unix time in seconds", out->now_unix);
    if (out->now_unix == 0)
        out->now_unix = (int64_t)time(NULL);
    if (out->now_unix < (int64_t)out->days * 86400 + 86400 * 400 ||
        out->now_unix > INT64_C(253402300799) - 86400)
        return fail(err, errlen, "now %" PRId64 ": must be a Unix time between 1971 and 9999",
                    out->now_unix);
    return 0;
}

/* --- generate ----------------------------------------------------------------------------- */

static void gen_free(struct gen *g)
{
    if (g->observers != NULL)
        for (long j = 0; j < g->n_observers; j++)
            free(g->observers[j].dist);
    free(g->observers);
    free(g->nodes);
    free(g->vertex_node);
    free(g->adj_start);
    free(g->adj);
    free(g->advert_cum);
    free(g->message_cum);
    free(g->active_nodes);
    free(g->plans);
    free(g->edges.keys);
    free(g->edges.counts);
    free(g->edges.last);
    free(g->cand_key);
    free(g->cand_obs);
    free(g->cand_len);
    free(g->endpoint_rank);
    free(g->rec.p);
    pipe_free(g->pipe);
    free(g->t_path.p);
    free(g->t_resolved.p);
    free(g->t_raw.p);
    free(g->t_obs_raw.p);
    free(g->t_json.p);
    sqlite3_finalize(g->ins_tx);
    sqlite3_finalize(g->ins_obs);
    sqlite3_finalize(g->ins_obs_batch);
    if (g->db != NULL)
        sqlite3_close(g->db);
}

static bool text_init(struct text *t)
{
    t->p = malloc(ROW_TEXT_BYTES);
    t->cap = ROW_TEXT_BYTES;
    t->len = 0;
    t->overflow = false;
    if (t->p != NULL)
        t->p[0] = '\0';
    return t->p != NULL;
}

/* Removes path and the -wal, -shm and -journal files SQLite keeps beside it. */
static void remove_db_files(const char *path)
{
    static const char *const suffixes[] = {"", "-wal", "-shm", "-journal"};
    char name[4096];
    for (size_t i = 0; i < sizeof suffixes / sizeof *suffixes; i++) {
        if (snprintf(name, sizeof name, "%s%s", path, suffixes[i]) < (int)sizeof name)
            unlink(name);
    }
}

static int generate_into(struct gen *g, const char *path, const char *tmp)
{
    if (sqlite3_open_v2(tmp, &g->db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        NULL) != SQLITE_OK)
        return fail(g->err, g->errlen, "cannot create %s (as %s first): %s", path, tmp,
                    g->db ? sqlite3_errmsg(g->db) : "out of memory");
    if (exec_sql(g,
                 "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-262144;"
                 "PRAGMA temp_store=MEMORY;",
                 "set generation pragmas") != 0 ||
        exec_sql(g, "BEGIN", "begin") != 0 ||
        exec_sql(g, schema_tables, "create CoreScope's tables") != 0 ||
        (migrated(g) && exec_sql(g, schema_migrated_columns, "add the migration's columns") != 0) ||
        prepare_inserts(g) != 0)
        return -1;

    bool ok = true;
    g->cand_key = xcalloc(g, (size_t)g->n_observers, sizeof *g->cand_key, &ok);
    g->cand_obs = xcalloc(g, (size_t)g->n_observers, sizeof *g->cand_obs, &ok);
    g->cand_len = xcalloc(g, (size_t)g->n_observers, sizeof *g->cand_len, &ok);
    if (!ok || !text_init(&g->t_path) || !text_init(&g->t_resolved) || !text_init(&g->t_raw) ||
        !text_init(&g->t_obs_raw) || !text_init(&g->t_json))
        return ok ? fail(g->err, g->errlen, "out of memory for row buffers") : -1;

    if (build_nodes(g) != 0 || build_graph(g) != 0 || build_observers(g) != 0 ||
        rank_endpoints(g) != 0 || build_senders(g) != 0 || plan_transmissions(g) != 0)
        return -1;

    g->rec.p = malloc(RECORD_BYTES);
    g->rec.cap = RECORD_BYTES;
    g->pipe = pipe_new();
    if (g->rec.p == NULL || g->pipe == NULL)
        return fail(g->err, g->errlen, "out of memory for the row pipe");
    pthread_t producer;
    int err = pthread_create(&producer, NULL, produce_rows, g);
    if (err != 0)
        return fail(g->err, g->errlen, "start the row producer: %s", strerror(err));
    int rc = write_rows(g);
    pthread_join(producer, NULL);
    if (g->producer_err[0] != '\0')
        return fail(g->err, g->errlen, "%s", g->producer_err);
    if (rc != 0)
        return -1;
    if (write_nodes(g) != 0 || write_observers(g) != 0 || write_edges(g) != 0)
        return -1;
    if (g->o.progress)
        g->o.progress(g->o.progress_arg, "indexes", g->o.observations, g->o.observations);
    if (exec_sql(g, schema_indexes, "create indexes") != 0 ||
        (migrated(g) && (exec_sql(g, schema_migrated_rest, "finish the migration") != 0 ||
                         write_inactive_nodes(g) != 0)) ||
        exec_sql(g, "COMMIT", "commit") != 0)
        return -1;
    sqlite3_finalize(g->ins_tx);
    sqlite3_finalize(g->ins_obs);
    sqlite3_finalize(g->ins_obs_batch);
    g->ins_tx = g->ins_obs = g->ins_obs_batch = NULL;
    /* Production databases are in WAL mode; a reader must cope with that. */
    if (exec_sql(g, "PRAGMA journal_mode=WAL", "switch to WAL") != 0)
        return -1;
    if (sqlite3_close(g->db) != SQLITE_OK)
        return fail(g->err, g->errlen, "close %s: %s", tmp, sqlite3_errmsg(g->db));
    g->db = NULL;
    return 0;
}

int mg_fixture_generate(const char *path, const struct mg_fixture_options *opt, char *err,
                        size_t errlen)
{
    struct gen g;
    memset(&g, 0, sizeof g);
    g.err = err;
    g.errlen = errlen;
    if (path == NULL || path[0] == '\0')
        return fail(err, errlen, "no output path given");
    if (mg_fixture_resolve(opt, &g.o, err, errlen) != 0)
        return -1;
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!g.o.overwrite)
            return fail(err, errlen, "%s already exists; remove it or ask to overwrite (--force)",
                        path);
        if (!S_ISREG(st.st_mode))
            return fail(err, errlen, "%s exists and is not a regular file; not replacing it", path);
    } else if (errno != ENOENT) {
        return fail(err, errlen, "%s: %s", path, strerror(errno));
    }

    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return fail(err, errlen, "%s: path too long", path);
    remove_db_files(tmp);

    g.now = g.o.now_unix;
    g.span = (int64_t)g.o.days * 86400;
    g.start = g.now - g.span;
    g.n_nodes = g.o.nodes;
    g.n_observers = g.o.observers;
    rng_seed(&g.rng, g.o.seed);
    rng_seed(&g.rng_migrated, g.o.seed ^ 0x6F7074696F6E616Cu);

    int rc = generate_into(&g, path, tmp);
    gen_free(&g);
    if (rc == 0) {
        if (g.o.overwrite) {
            /* A stale WAL beside the new file would be replayed into it. */
            char side[4096];
            snprintf(side, sizeof side, "%s-wal", path);
            unlink(side);
            snprintf(side, sizeof side, "%s-shm", path);
            unlink(side);
            if (rename(tmp, path) != 0)
                rc = fail(err, errlen, "move %s to %s: %s", tmp, path, strerror(errno));
        } else if (link(tmp, path) != 0) {
            rc = errno == EEXIST
                     ? fail(err, errlen, "%s already exists; remove it or ask to overwrite", path)
                     : fail(err, errlen, "move %s to %s: %s", tmp, path, strerror(errno));
        }
    }
    remove_db_files(tmp);
    return rc;
}

/* --- freshen ------------------------------------------------------------------------------ */

static void sql_rfc3339_ms(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    const char *s = (const char *)sqlite3_value_text(argv[0]);
    int64_t ms;
    if (sqlite3_value_type(argv[0]) == SQLITE_TEXT && s != NULL &&
        mg_fixture_parse_rfc3339_ms(s, (size_t)sqlite3_value_bytes(argv[0]), &ms))
        sqlite3_result_int64(ctx, ms);
    else
        sqlite3_result_null(ctx);
}

static void sql_rfc3339_shift(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    if (sqlite3_value_type(argv[0]) != SQLITE_TEXT) {
        sqlite3_result_value(ctx, argv[0]);
        return;
    }
    const char *s = (const char *)sqlite3_value_text(argv[0]);
    int64_t ms;
    struct rfc3339_shape shape;
    char out[64];
    if (s == NULL || !parse_rfc3339(s, (size_t)sqlite3_value_bytes(argv[0]), &ms, &shape) ||
        format_shaped(out, sizeof out, ms + sqlite3_value_int64(argv[1]), &shape) < 0) {
        sqlite3_result_value(ctx, argv[0]);
        return;
    }
    sqlite3_result_text(ctx, out, -1, SQLITE_TRANSIENT);
}

static bool has_column(sqlite3 *db, const char *table, const char *column)
{
    sqlite3_stmt *st = NULL;
    bool found = false;
    if (sqlite3_prepare_v2(db, "SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2", -1, &st,
                           NULL) != SQLITE_OK)
        return false;
    sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, column, -1, SQLITE_STATIC);
    found = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    return found;
}

/* Runs a one-value query; *has is false when it gave NULL or no row. */
static int query_int64(sqlite3 *db, const char *sql, int64_t *value, bool *has)
{
    sqlite3_stmt *st = NULL;
    *has = false;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return -1;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL) {
        *value = sqlite3_column_int64(st, 0);
        *has = true;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : -1;
}

static int exec_int64(sqlite3 *db, const char *sql, int64_t arg)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_int64(st, 1, arg);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : -1;
}

/* A text time column whose newest value becomes now, and the columns of its table that move
 * by the same offset. A group with like_nodes moves by the offset of nodes.last_seen instead
 * (when nodes had one): soft-deleted nodes stay older than the nodes still heard. */
struct text_group {
    const char *table;
    const char *lead;
    const char *followers[3];
    bool like_nodes;
};

static const struct text_group text_groups[] = {
    {"nodes", "last_seen", {"first_seen"}, false},
    {"inactive_nodes", "last_seen", {"first_seen"}, true},
    {"observers", "last_seen", {"first_seen", "last_packet_at", "clock_last_naive_at"}, false},
    {"transmissions", "first_seen", {NULL}, false},
    {"neighbor_edges", "last_seen", {NULL}, false},
};
#define TEXT_GROUP_FOLLOWERS (sizeof text_groups[0].followers / sizeof text_groups[0].followers[0])

static int shift_times(sqlite3 *db, int64_t now, char *err, size_t errlen)
{
    char sql[512];
    int64_t newest;
    bool has;
    if (has_column(db, "observations", "timestamp")) {
        if (query_int64(db, "SELECT max(timestamp) FROM observations", &newest, &has) != 0)
            return fail(err, errlen, "read newest observation: %s", sqlite3_errmsg(db));
        if (has && newest != now) {
            int64_t delta = now - newest;
            if (exec_int64(db,
                           "UPDATE observations SET timestamp = timestamp + ?1 "
                           "WHERE typeof(timestamp) = 'integer'",
                           delta) != 0)
                return fail(err, errlen, "shift observations.timestamp: %s", sqlite3_errmsg(db));
            if (has_column(db, "transmissions", "last_seen") &&
                exec_int64(db,
                           "UPDATE transmissions SET last_seen = last_seen + ?1 "
                           "WHERE typeof(last_seen) = 'integer' AND last_seen > 0",
                           delta) != 0)
                return fail(err, errlen, "shift transmissions.last_seen: %s", sqlite3_errmsg(db));
        }
    }
    int64_t nodes_offset = 0; /* text_groups[0] is nodes */
    bool nodes_offset_known = false;
    for (size_t i = 0; i < sizeof text_groups / sizeof *text_groups; i++) {
        const struct text_group *tg = &text_groups[i];
        if (!has_column(db, tg->table, tg->lead))
            continue;
        snprintf(sql, sizeof sql, "SELECT max(mg_rfc3339_ms(\"%s\")) FROM \"%s\"", tg->lead,
                 tg->table);
        if (query_int64(db, sql, &newest, &has) != 0)
            return fail(err, errlen, "read newest %s.%s: %s", tg->table, tg->lead,
                        sqlite3_errmsg(db));
        if (!has)
            continue;
        int64_t offset = now * 1000 - newest;
        if (tg->like_nodes && nodes_offset_known)
            offset = nodes_offset;
        if (i == 0) {
            nodes_offset = offset;
            nodes_offset_known = true;
        }
        if (offset == 0)
            continue;
        int len =
            snprintf(sql, sizeof sql, "UPDATE \"%s\" SET \"%s\" = mg_rfc3339_shift(\"%s\", ?1)",
                     tg->table, tg->lead, tg->lead);
        for (size_t k = 0; k < TEXT_GROUP_FOLLOWERS; k++) {
            const char *f = tg->followers[k];
            if (f != NULL && has_column(db, tg->table, f))
                len += snprintf(sql + len, sizeof sql - (size_t)len,
                                ", \"%s\" = mg_rfc3339_shift(\"%s\", ?1)", f, f);
        }
        if (exec_int64(db, sql, offset) != 0)
            return fail(err, errlen, "shift %s.%s: %s", tg->table, tg->lead, sqlite3_errmsg(db));
    }
    return 0;
}

/* A read-only URI for the source. Without a -wal or -shm beside it, nothing is writing it
 * and the main file is the whole database: open it immutable, so that SQLite creates no side
 * files next to it. Otherwise it is live, and the WAL must be read through the -shm. */
static int source_uri(const char *src, char *uri, size_t n)
{
    char side[4200];
    struct stat st;
    bool live = false;
    static const char *const suffixes[] = {"-wal", "-shm"};
    for (size_t i = 0; i < 2; i++) {
        if (snprintf(side, sizeof side, "%s%s", src, suffixes[i]) >= (int)sizeof side)
            return -1;
        live = live || stat(side, &st) == 0;
    }
    size_t len = 0;
    len += (size_t)snprintf(uri, n, "file:");
    for (const unsigned char *p = (const unsigned char *)src; *p; p++) {
        if (len + 4 >= n)
            return -1;
        if (*p == '%' || *p == '?' || *p == '#' || *p < 0x20 || *p >= 0x7F)
            len += (size_t)snprintf(uri + len, n - len, "%%%02X", *p);
        else
            uri[len++] = (char)*p;
    }
    uri[len] = '\0';
    const char *query = live ? "?mode=ro" : "?mode=ro&immutable=1";
    if (len + strlen(query) + 1 > n)
        return -1;
    strcpy(uri + len, query);
    return 0;
}

static int freshen_copy(const char *src, const char *dst, int64_t now, char *err, size_t errlen)
{
    sqlite3 *in = NULL, *out = NULL;
    int rc = -1;
    char uri[4200];
    if (source_uri(src, uri, sizeof uri) != 0) {
        fail(err, errlen, "freshen: source path too long: %s", src);
        goto out;
    }
    if (sqlite3_open_v2(uri, &in, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL) != SQLITE_OK) {
        fail(err, errlen, "freshen: open %s read-only: %s", src,
             in ? sqlite3_errmsg(in) : "out of memory");
        goto out;
    }
    if (sqlite3_open_v2(dst, &out, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK) {
        fail(err, errlen, "freshen: create %s: %s", dst,
             out ? sqlite3_errmsg(out) : "out of memory");
        goto out;
    }
    sqlite3_backup *b = sqlite3_backup_init(out, "main", in, "main");
    if (b == NULL) {
        fail(err, errlen, "freshen: copy %s: %s", src, sqlite3_errmsg(out));
        goto out;
    }
    int step = sqlite3_backup_step(b, -1);
    sqlite3_backup_finish(b);
    if (step != SQLITE_DONE) {
        fail(err, errlen, "freshen: copy %s: %s", src,
             step == SQLITE_NOTADB ? "not an SQLite database" : sqlite3_errstr(step));
        goto out;
    }
    sqlite3_close(in);
    in = NULL;

    int64_t tables = 0;
    bool has;
    if (query_int64(out,
                    "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN "
                    "('nodes','observers','transmissions','observations','neighbor_edges')",
                    &tables, &has) != 0 ||
        tables == 0) {
        fail(err, errlen, "freshen: %s has none of CoreScope's tables (nodes, observations, ...)",
             src);
        goto out;
    }
    if (sqlite3_create_function(out, "mg_rfc3339_ms", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL,
                                sql_rfc3339_ms, NULL, NULL) != SQLITE_OK ||
        sqlite3_create_function(out, "mg_rfc3339_shift", 2, SQLITE_UTF8 | SQLITE_DETERMINISTIC,
                                NULL, sql_rfc3339_shift, NULL, NULL) != SQLITE_OK) {
        fail(err, errlen, "freshen: register functions: %s", sqlite3_errmsg(out));
        goto out;
    }
    /* Journaling is pointless on a copy that is removed on failure; the copy gets the
     * source's journal mode back at the end. */
    char mode[16] = "delete";
    sqlite3_stmt *jm = NULL;
    if (sqlite3_prepare_v2(out, "PRAGMA journal_mode", -1, &jm, NULL) == SQLITE_OK &&
        sqlite3_step(jm) == SQLITE_ROW && sqlite3_column_text(jm, 0) != NULL)
        snprintf(mode, sizeof mode, "%s", (const char *)sqlite3_column_text(jm, 0));
    sqlite3_finalize(jm);
    char *msg = NULL;
    if (sqlite3_exec(out,
                     "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; "
                     "PRAGMA cache_size=-262144; BEGIN",
                     NULL, NULL, &msg) != SQLITE_OK) {
        fail(err, errlen, "freshen: begin: %s", msg ? msg : sqlite3_errmsg(out));
        sqlite3_free(msg);
        goto out;
    }
    if (shift_times(out, now, err, errlen) != 0) {
        sqlite3_exec(out, "ROLLBACK", NULL, NULL, NULL);
        goto out;
    }
    if (sqlite3_exec(out, "COMMIT", NULL, NULL, &msg) != SQLITE_OK) {
        fail(err, errlen, "freshen: commit: %s", msg ? msg : sqlite3_errmsg(out));
        sqlite3_free(msg);
        goto out;
    }
    char restore[48];
    snprintf(restore, sizeof restore, "PRAGMA journal_mode=%s",
             strcmp(mode, "wal") == 0 ? "WAL" : "DELETE");
    if (sqlite3_exec(out, restore, NULL, NULL, &msg) != SQLITE_OK) {
        fail(err, errlen, "freshen: %s: %s", restore, msg ? msg : sqlite3_errmsg(out));
        sqlite3_free(msg);
        goto out;
    }
    rc = 0;
out:
    if (in != NULL)
        sqlite3_close(in);
    if (out != NULL && sqlite3_close(out) != SQLITE_OK && rc == 0)
        rc = fail(err, errlen, "freshen: close %s: %s", dst, sqlite3_errmsg(out));
    return rc;
}

int mg_fixture_freshen(const char *src, const char *dst, int64_t now_unix, char *err, size_t errlen)
{
    struct stat st;
    if (src == NULL || dst == NULL || src[0] == '\0' || dst[0] == '\0')
        return fail(err, errlen, "freshen: both a source and a destination are needed");
    if (stat(src, &st) != 0)
        return fail(err, errlen, "freshen: source %s: %s", src, strerror(errno));
    if (!S_ISREG(st.st_mode) || access(src, R_OK) != 0)
        return fail(err, errlen, "freshen: source %s is not a readable file", src);
    if (lstat(dst, &st) == 0)
        return fail(err, errlen, "freshen: %s already exists; remove it or choose another path",
                    dst);
    if (errno != ENOENT)
        return fail(err, errlen, "freshen: %s: %s", dst, strerror(errno));
    int64_t now = now_unix > 0 ? now_unix : (int64_t)time(NULL);
    if (freshen_copy(src, dst, now, err, errlen) != 0) {
        remove_db_files(dst);
        return -1;
    }
    return 0;
}

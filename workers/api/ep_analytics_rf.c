/* SPDX-License-Identifier: ISC */
/*
 * The Analytics page's signal reports, as CoreScope's server computes them from its store:
 *
 * GET /api/analytics/rf?region=&area=&window=|from=&to=  the RF report: SNR and RSSI of every
 * observation (statistics, 20-bin histograms, per payload type, per hour, a scatter of at most
 * about 500 points), packet sizes (25 bins) and payload types of the distinct transmissions,
 * distinct transmissions per hour, and the time the observations span.
 *
 * The observations are CoreScope's store's: every transmission (oldest first_seen first, then
 * by id) with its observations (newest first), one per observer and path (CoreScope's store keeps
 * the newest of copies with the same observer and path_json). no region   (none given, "ALL", or
 * codes no observer has): every transmission whose first_seen is in the window, with all its
 * observations; one without any counts once by its first_seen. area= keeps the transmissions whose
 * ADVERT names a node inside the area (decoded public_key, else pubKey). region      the
 * observations of the observers whose IATA is one of the codes, each whose own time is in the
 * window; area= as above, but an observation it drops still counts in totalAllPackets (as
 * CoreScope's loop counts it first). Every answer is a cold report (cold_report.h) keyed by its
 * parameters and the minute, so it is at most CoreScope's default cache time (60 s) old. Ties
 * CoreScope leaves to Go's map order (payload types and types of equal count) are broken by type
 * and name; with a region the scatter's points come in transmission order, where CoreScope's come
 * observer by observer in no fixed order.
 */
#include "cold_report.h"
#include "corescope_config.h"
#include "corescope_window.h"
#include "json.h"
#include "node_visibility.h"
#include "params.h"
#include "region_codes.h"
#include "result_cache.h"
#include "router.h"
#include "time_parse.h"

#include <ctype.h>
#include <sha2.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How old an answer may be, as CoreScope's: a filtered one is kept 60 s (its rfCacheTTL
 * default), the unfiltered one is recomputed every 300 s (its analytics recomputers' default
 * interval). A key names its interval. */
#define ANALYTICS_CACHE_S 60
#define ANALYTICS_DEFAULT_SHAPE_S 300
#define REGION_TEXT_MAX 80
#define AREA_KEY_MAX 48
/* A key's room: longer than the cache's keys (such a report is built, not kept), so that
 * nothing is cut. */
#define ANALYTICS_KEY_BYTES 320

/* ---- the parameters, shared by the family's routes ---- */

struct analytics_params {
    struct mg_param_list region;
    const char *area;
    int window;
    const char *from, *to;
};
#define P(f) .offset = offsetof(struct analytics_params, f)
static const struct mg_param analytics_param_list[] = {
    {.name = "region",
     .kind = MG_PARAM_LIST,
     P(region),
     .flags = MG_LIST_SKIP_ALL,
     .corescope = "IATA codes trimmed and uppercased; no code left, or codes no observer has: "
                  "no filter; meshgate: 400 past 79 bytes of codes (a cache key's room)"},
    {.name = "area",
     .kind = MG_PARAM_TEXT,
     P(area),
     .corescope = "a key the configuration's areas lack, or an area with no node: no filter"},
    {.name = "window",
     .kind = MG_PARAM_CHOICE,
     P(window),
     .choices = mg_cs_window_names,
     .def = -1,
     .corescope = "1h, 24h|1d, 3d, 7d|1w, 30d ending now; anything else: no window; ignored "
                  "when from or to is given"},
    {.name = "from",
     .kind = MG_PARAM_TEXT,
     P(from),
     .corescope = "RFC 3339, cut to the second; malformed: no lower bound"},
    {.name = "to",
     .kind = MG_PARAM_TEXT,
     P(to),
     .corescope = "RFC 3339, cut to the second; malformed: no upper bound"},
};
#undef P
const struct mg_param_table mg_analytics_window_params =
    MG_PARAM_TABLE(struct analytics_params, analytics_param_list);

/* What a build needs, copied into it (cold_report.h). */
struct analytics_args {
    char region[REGION_TEXT_MAX]; /* codes, uppercased, comma-separated; "" none */
    char area[AREA_KEY_MAX];      /* a configured area's key; "" none */
    struct mg_cs_window window;
};
_Static_assert(sizeof(struct analytics_args) <= MG_COLD_ARGS_BYTES, "the args fit a build");

/* The request's arguments and cache key (prefix names the report); false with a 400 in res
 * (when not NULL) for what cannot be served. */
static bool analytics_args(const struct mg_request *req, struct mg_response *res,
                           const char *prefix, struct analytics_args *a, char *key, size_t cap)
{
    memset(a, 0, sizeof *a);
    struct analytics_params own;
    const struct analytics_params *p = mg_params_get(&mg_analytics_window_params, req, res, &own);
    if (!p)
        return false;
    if (p->region.text && !mg_param_list_codes(p->region.text, a->region, sizeof a->region)) {
        if (res)
            mg_response_error(res, 400, "region: at most 79 bytes of codes");
        return false;
    }
    if (p->area && mg_corescope_area(mg_corescope_current(), p->area)) {
        if (strlen(p->area) >= sizeof a->area) {
            if (res)
                mg_response_error(res, 400, "area: a key of at most 47 bytes");
            return false;
        }
        snprintf(a->area, sizeof a->area, "%s", p->area);
    }
    int64_t now = (int64_t)time(NULL);
    mg_cs_window_parse(p->window, p->from, p->to, now, &a->window);
    char wkey[64];
    mg_cs_window_key(&a->window, wkey, sizeof wkey);
    int64_t interval = !a->region[0] && !a->area[0] && mg_cs_window_is_zero(&a->window)
                           ? ANALYTICS_DEFAULT_SHAPE_S
                           : ANALYTICS_CACHE_S;
    snprintf(key, cap, "%s|%s|%s|%s|%lu|@%lld:%lld", prefix, a->region, a->area, wkey,
             a->area[0] ? mg_corescope_current()->generation : 0UL, (long long)interval,
             (long long)(now / interval));
    return true;
}

/* ---- small tables ---- */

/* Distinct doubles with how often each was seen, in order of first sight. */
struct value_counts {
    struct {
        double v;
        int64_t n;
    } * e;
    size_t len, cap;
    uint32_t *slot; /* index + 1; 0 empty */
    size_t slots;
    bool failed;
};

static uint64_t hash_bytes(const void *p, size_t n, uint64_t h)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 0x100000001b3ULL;
    return h;
}
#define HASH_SEED 0xcbf29ce484222325ULL

static bool value_counts_grow(struct value_counts *t)
{
    size_t slots = t->slots ? t->slots * 2 : 256;
    uint32_t *s = calloc(slots, sizeof *s);
    if (!s)
        return false;
    for (size_t i = 0; i < t->len; i++) {
        size_t h = hash_bytes(&t->e[i].v, sizeof(double), HASH_SEED) & (slots - 1);
        while (s[h])
            h = (h + 1) & (slots - 1);
        s[h] = (uint32_t)(i + 1);
    }
    free(t->slot);
    t->slot = s, t->slots = slots;
    return true;
}

/* The index of v (added with count 0 when new), or -1 when out of memory. */
static int64_t value_counts_add(struct value_counts *t, double v, int64_t n)
{
    if (t->failed)
        return -1;
    if (v == 0)
        v = 0; /* -0 and 0 are one value, as Go's == has them */
    if ((t->len + 1) * 2 > t->slots && !value_counts_grow(t)) {
        t->failed = true;
        return -1;
    }
    size_t h = hash_bytes(&v, sizeof v, HASH_SEED) & (t->slots - 1);
    while (t->slot[h]) {
        size_t i = t->slot[h] - 1;
        if (t->e[i].v == v) {
            t->e[i].n += n;
            return (int64_t)i;
        }
        h = (h + 1) & (t->slots - 1);
    }
    if (t->len == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        void *grown = realloc(t->e, cap * sizeof *t->e);
        if (!grown) {
            t->failed = true;
            return -1;
        }
        t->e = grown, t->cap = cap;
    }
    t->e[t->len].v = v;
    t->e[t->len].n = n;
    t->slot[h] = (uint32_t)(t->len + 1);
    return (int64_t)t->len++;
}

static void value_counts_free(struct value_counts *t)
{
    free(t->e);
    free(t->slot);
}

/* Statistics of a sorted multiset of doubles, summed in CoreScope's order (ascending). */
struct value_stats {
    int64_t n;
    double min, max, avg, median, stddev, sum;
};

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts t's entries by value (indexes into it are void after) and its statistics. */
static void value_counts_stats(struct value_counts *t, struct value_stats *s)
{
    memset(s, 0, sizeof *s);
    if (t->len > 1) /* the entries begin with their double */
        qsort(t->e, t->len, sizeof *t->e, by_value);
    for (size_t i = 0; i < t->len; i++)
        s->n += t->e[i].n;
    if (!s->n)
        return;
    s->min = t->e[0].v;
    s->max = t->e[t->len - 1].v;
    int64_t mid = s->n / 2, seen = 0;
    bool have_median = false;
    for (size_t i = 0; i < t->len; i++) {
        if (!have_median && seen + t->e[i].n > mid) {
            s->median = t->e[i].v;
            have_median = true;
        }
        seen += t->e[i].n;
        for (int64_t k = 0; k < t->e[i].n; k++)
            s->sum += t->e[i].v;
    }
    s->avg = s->sum / (double)s->n;
    double sq = 0;
    for (size_t i = 0; i < t->len; i++) {
        double d = t->e[i].v - s->avg;
        for (int64_t k = 0; k < t->e[i].n; k++)
            sq += d * d;
    }
    s->stddev = sqrt(sq / (double)s->n);
}

static void write_stats(struct mg_json *j, const char *key, const struct value_stats *s)
{
    mg_json_key(j, key);
    mg_json_object_begin(j); /* a Go map: keys in bytewise order */
    mg_json_kv_double(j, "avg", s->avg);
    mg_json_kv_double(j, "max", s->max);
    mg_json_kv_double(j, "median", s->median);
    mg_json_kv_double(j, "min", s->min);
    mg_json_kv_double(j, "stddev", s->stddev);
    mg_json_object_end(j);
}

/* CoreScope's histogram of bins equal bins from min to max (a range of 0 counts as 1). */
static void write_histogram(struct mg_json *j, const char *key, const struct value_counts *t,
                            const struct value_stats *s, int bins)
{
    mg_json_key(j, key);
    mg_json_object_begin(j);
    mg_json_key(j, "bins");
    mg_json_array_begin(j);
    if (s->n) {
        double range = s->max - s->min;
        if (range == 0)
            range = 1;
        double width = range / bins;
        int64_t counts[32] = {0};
        for (size_t i = 0; i < t->len; i++) {
            int idx = (int)((t->e[i].v - s->min) / width);
            counts[idx >= bins ? bins - 1 : idx] += t->e[i].n;
        }
        for (int i = 0; i < bins; i++) {
            mg_json_object_begin(j);
            mg_json_kv_int(j, "count", counts[i]);
            mg_json_kv_double(j, "w", width);
            mg_json_kv_double(j, "x", s->min + (double)i * width);
            mg_json_object_end(j);
        }
    }
    mg_json_array_end(j);
    mg_json_kv_double(j, "max", s->n ? s->max : 0);
    mg_json_kv_double(j, "min", s->n ? s->min : 0);
    mg_json_object_end(j);
}

/* Tallies by a text key (an hour "2026-05-17T12", a type's name, a sender). */
struct tally {
    char *key;
    size_t key_len;
    int64_t n;
    double sum, min, max;
    /* a channel's (the analytics of channels) */
    char *name, *last_activity;
    bool encrypted;
    int64_t senders;
};
struct tallies {
    struct tally *e;
    size_t len, cap;
    uint32_t *slot;
    size_t slots;
    bool failed;
};

static bool tallies_grow(struct tallies *t)
{
    size_t slots = t->slots ? t->slots * 2 : 256;
    uint32_t *s = calloc(slots, sizeof *s);
    if (!s)
        return false;
    for (size_t i = 0; i < t->len; i++) {
        size_t h = hash_bytes(t->e[i].key, t->e[i].key_len, HASH_SEED) & (slots - 1);
        while (s[h])
            h = (h + 1) & (slots - 1);
        s[h] = (uint32_t)(i + 1);
    }
    free(t->slot);
    t->slot = s, t->slots = slots;
    return true;
}

/* The tally of key (the first len bytes; new ones start at 0), NULL when out of memory. */
static struct tally *tallies_get(struct tallies *t, const char *key, size_t len)
{
    if (t->failed)
        return NULL;
    if ((t->len + 1) * 2 > t->slots && !tallies_grow(t)) {
        t->failed = true;
        return NULL;
    }
    size_t h = hash_bytes(key, len, HASH_SEED) & (t->slots - 1);
    while (t->slot[h]) {
        struct tally *e = &t->e[t->slot[h] - 1];
        if (e->key_len == len && memcmp(e->key, key, len) == 0)
            return e;
        h = (h + 1) & (t->slots - 1);
    }
    if (t->len == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        struct tally *grown = realloc(t->e, cap * sizeof *grown);
        if (!grown) {
            t->failed = true;
            return NULL;
        }
        t->e = grown, t->cap = cap;
    }
    struct tally *e = &t->e[t->len];
    memset(e, 0, sizeof *e);
    if (!(e->key = malloc(len + 1))) {
        t->failed = true;
        return NULL;
    }
    memcpy(e->key, key, len);
    e->key[len] = '\0';
    e->key_len = len;
    t->slot[h] = (uint32_t)(t->len + 1);
    t->len++;
    return e;
}

static void tallies_free(struct tallies *t)
{
    for (size_t i = 0; i < t->len; i++) {
        free(t->e[i].key);
        free(t->e[i].name);
        free(t->e[i].last_activity);
    }
    free(t->e);
    free(t->slot);
}

static int by_key(const void *a, const void *b)
{
    return strcmp(((const struct tally *)a)->key, ((const struct tally *)b)->key);
}

/* Payload types: most first, then by number (CoreScope leaves ties in Go's map order). */
static int by_count_then_number(const void *a, const void *b)
{
    const struct tally *x = a, *y = b;
    if (x->n != y->n)
        return x->n > y->n ? -1 : 1;
    long long p = atoll(x->key), q = atoll(y->key);
    return (p > q) - (p < q);
}

static int by_count_then_key(const void *a, const void *b)
{
    const struct tally *x = a, *y = b;
    if (x->n != y->n)
        return x->n > y->n ? -1 : 1;
    return strcmp(x->key, y->key);
}

/* ---- one transmission's observations: CoreScope's store keeps one per observer and path ---- */

struct seen_copies {
    struct mg_buf text; /* observer id, '\x1f', path_json; one after another */
    size_t *off, *len;  /* of each copy's text */
    uint32_t *slot;     /* index + 1 */
    size_t count, cap, slots;
};

/* Whether (observer, path) is new for this transmission (and remember it); -1: out of memory. */
static int seen_copies_add(struct seen_copies *s, const char *observer, const char *path)
{
    size_t at = s->text.len;
    mg_buf_puts(&s->text, observer ? observer : "");
    mg_buf_putc(&s->text, '\x1f');
    mg_buf_puts(&s->text, path ? path : "");
    if (s->text.failed)
        return -1;
    size_t n = s->text.len - at;
    if ((s->count + 1) * 2 > s->slots) {
        size_t slots = s->slots ? s->slots * 2 : 64;
        uint32_t *grown = calloc(slots, sizeof *grown);
        if (!grown)
            return -1;
        for (size_t i = 0; i < s->count; i++) {
            size_t h = hash_bytes(s->text.data + s->off[i], s->len[i], HASH_SEED) & (slots - 1);
            while (grown[h])
                h = (h + 1) & (slots - 1);
            grown[h] = (uint32_t)(i + 1);
        }
        free(s->slot);
        s->slot = grown, s->slots = slots;
    }
    size_t h = hash_bytes(s->text.data + at, n, HASH_SEED) & (s->slots - 1);
    while (s->slot[h]) {
        size_t i = s->slot[h] - 1;
        if (s->len[i] == n && memcmp(s->text.data + s->off[i], s->text.data + at, n) == 0) {
            s->text.len = at; /* a copy of one already kept */
            return 0;
        }
        h = (h + 1) & (s->slots - 1);
    }
    if (s->count == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        size_t *off = realloc(s->off, cap * sizeof *off);
        if (off)
            s->off = off;
        size_t *len = off ? realloc(s->len, cap * sizeof *len) : NULL;
        if (!len)
            return -1;
        s->len = len, s->cap = cap;
    }
    s->off[s->count] = at;
    s->len[s->count] = n;
    s->slot[h] = (uint32_t)(s->count + 1);
    s->count++;
    return 1;
}

static void seen_copies_reset(struct seen_copies *s)
{
    if (s->count)
        memset(s->slot, 0, s->slots * sizeof *s->slot);
    s->count = 0;
    mg_buf_reset(&s->text);
}

static void seen_copies_free(struct seen_copies *s)
{
    mg_buf_free(&s->text);
    free(s->off);
    free(s->len);
    free(s->slot);
}

/* ---- /api/analytics/rf ---- */

static const char *const payload_type_names[] = {
    "REQ",  "RESPONSE", "TXT_MSG",   "ACK",     "ADVERT", "GRP_TXT", "GRP_DATA", "ANON_REQ",
    "PATH", "TRACE",    "MULTIPART", "CONTROL", NULL,     NULL,      NULL,       "RAW_CUSTOM"};

/* CoreScope's name of a payload type: its name, else "UNK(n)"; "UNK" when it has none. */
static void type_name(int64_t t, bool has, char out[32])
{
    if (!has)
        snprintf(out, 32, "UNK");
    else if (t >= 0 && t < 16 && payload_type_names[t])
        snprintf(out, 32, "%s", payload_type_names[t]);
    else
        snprintf(out, 32, "UNK(%lld)", (long long)t);
}

enum rf_col {
    RF_TX,
    RF_FIRST_SEEN,
    RF_TYPE,
    RF_RAW_BYTES,
    RF_NODE,
    RF_OBS,
    RF_OBSERVER,
    RF_PATH,
    RF_SNR,
    RF_RSSI,
    RF_TS_TEXT,
    RF_TS,
};

struct rf {
    bool regional;
    struct value_counts snr, rssi, sizes;
    struct tallies types, hours, by_type, over_time;
    uint32_t (*scatter)[2]; /* indexes into snr and rssi, in arrival order */
    size_t scatter_len, scatter_cap;
    int64_t total_obs, transmissions;
    char min_ts[40], max_ts[40];
    bool failed;
    /* the transmission in hand */
    struct seen_copies copies;
    char (*tx_hours)[13]; /* its hours already counted (packets per hour) */
    size_t tx_hours_len, tx_hours_cap;
    bool tx_counted; /* its hash is counted (sizes, types, transmissions) */
};

static void note_time(struct rf *r, const char *ts)
{
    if (!ts || !ts[0])
        return;
    if (!r->min_ts[0] || strcmp(ts, r->min_ts) < 0)
        snprintf(r->min_ts, sizeof r->min_ts, "%s", ts);
    if (strcmp(ts, r->max_ts) > 0)
        snprintf(r->max_ts, sizeof r->max_ts, "%s", ts);
}

/* The transmission's size and type, once (its hash is unique). */
static void count_transmission(struct rf *r, sqlite3_stmt *st)
{
    if (r->tx_counted)
        return;
    r->tx_counted = true;
    r->transmissions++;
    int64_t bytes = sqlite3_column_int64(st, RF_RAW_BYTES);
    if (bytes > 0 && value_counts_add(&r->sizes, (double)(bytes / 2), 1) < 0)
        r->failed = true;
    if (sqlite3_column_type(st, RF_TYPE) != SQLITE_NULL) {
        char key[32];
        snprintf(key, sizeof key, "%lld", (long long)sqlite3_column_int64(st, RF_TYPE));
        struct tally *t = tallies_get(&r->types, key, strlen(key));
        if (t)
            t->n++;
        else
            r->failed = true;
    }
}

/* Packets per hour: a transmission counts once per hour it was heard in. */
static void count_hour(struct rf *r, const char *ts, bool dedup)
{
    if (!ts || strlen(ts) < 13)
        return;
    if (dedup) {
        for (size_t i = 0; i < r->tx_hours_len; i++)
            if (memcmp(r->tx_hours[i], ts, 13) == 0)
                return;
        if (r->tx_hours_len == r->tx_hours_cap) {
            size_t cap = r->tx_hours_cap ? r->tx_hours_cap * 2 : 16;
            void *grown = realloc(r->tx_hours, cap * sizeof *r->tx_hours);
            if (!grown) {
                r->failed = true;
                return;
            }
            r->tx_hours = grown, r->tx_hours_cap = cap;
        }
        memcpy(r->tx_hours[r->tx_hours_len++], ts, 13);
    }
    struct tally *t = tallies_get(&r->hours, ts, 13);
    if (t)
        t->n++;
    else
        r->failed = true;
}

/* One kept observation (its transmission's filters passed). */
static void count_observation(struct rf *r, sqlite3_stmt *st)
{
    const char *ts = (const char *)sqlite3_column_text(st, RF_TS_TEXT);
    note_time(r, ts);
    bool has_snr = sqlite3_column_type(st, RF_SNR) != SQLITE_NULL;
    bool has_rssi = sqlite3_column_type(st, RF_RSSI) != SQLITE_NULL;
    int64_t snr_i = -1, rssi_i = -1;
    if (has_snr) {
        double snr = sqlite3_column_double(st, RF_SNR);
        snr_i = value_counts_add(&r->snr, snr, 1);
        char name[32];
        type_name(sqlite3_column_int64(st, RF_TYPE),
                  sqlite3_column_type(st, RF_TYPE) != SQLITE_NULL, name);
        struct tally *t = tallies_get(&r->by_type, name, strlen(name));
        if (t) {
            if (!t->n || snr < t->min)
                t->min = snr;
            if (!t->n || snr > t->max)
                t->max = snr;
            t->n++;
            t->sum += snr;
        }
        if (ts && strlen(ts) >= 13) {
            struct tally *h = tallies_get(&r->over_time, ts, 13);
            if (h) {
                h->n++;
                h->sum += snr;
            }
        }
        if (!t || snr_i < 0)
            r->failed = true;
    }
    if (has_rssi &&
        (rssi_i = value_counts_add(&r->rssi, sqlite3_column_double(st, RF_RSSI), 1)) < 0)
        r->failed = true;
    if (has_snr && has_rssi && snr_i >= 0 && rssi_i >= 0) {
        if (r->scatter_len == r->scatter_cap) {
            size_t cap = r->scatter_cap ? r->scatter_cap * 2 : 1024;
            void *grown = realloc(r->scatter, cap * sizeof *r->scatter);
            if (!grown) {
                r->failed = true;
                return;
            }
            r->scatter = grown, r->scatter_cap = cap;
        }
        r->scatter[r->scatter_len][0] = (uint32_t)snr_i;
        r->scatter[r->scatter_len++][1] = (uint32_t)rssi_i;
    }
    count_hour(r, ts, true);
}

/* The time between the first and last observation, in hours, as CoreScope parses the two. */
static bool go_time_ms(const char *s, int64_t *ms)
{
    size_t n = strlen(s);
    if (n == 19 && s[10] == ' ') { /* "2006-01-02 15:04:05" in UTC */
        char iso[24];
        snprintf(iso, sizeof iso, "%.10sT%.8sZ", s, s + 11);
        return mg_rfc3339_parse_ms(iso, strlen(iso), ms);
    }
    struct mg_rfc3339_shape shape;
    return mg_rfc3339_parse_shaped(s, n, ms, &shape) && shape.separator == 'T' && shape.zone != 'z';
}

static double time_span_hours(const struct rf *r)
{
    int64_t a, b;
    if (!r->min_ts[0] || !r->max_ts[0] || strcmp(r->min_ts, r->max_ts) == 0)
        return 0;
    if (!go_time_ms(r->min_ts, &a) || !go_time_ms(r->max_ts, &b))
        return 0;
    return (double)(b - a) / 3600000.0;
}

static void rf_free(struct rf *r)
{
    value_counts_free(&r->snr);
    value_counts_free(&r->rssi);
    value_counts_free(&r->sizes);
    tallies_free(&r->types);
    tallies_free(&r->hours);
    tallies_free(&r->by_type);
    tallies_free(&r->over_time);
    free(r->scatter);
    free(r->tx_hours);
    seen_copies_free(&r->copies);
}

static void rf_write(struct rf *r, struct mg_buf *body)
{
    /* The scatter's points, by value, before the tables are sorted. */
    size_t step = r->scatter_len > 500 ? r->scatter_len / 500 : 1;
    size_t points = r->scatter_len ? (r->scatter_len - 1) / step + 1 : 0;
    double(*scatter)[2] = points ? malloc(points * sizeof *scatter) : NULL;
    if (points && !scatter) {
        body->failed = true;
        return;
    }
    for (size_t i = 0, k = 0; i < r->scatter_len; i += step, k++) {
        scatter[k][0] = r->snr.e[r->scatter[i][0]].v;
        scatter[k][1] = r->rssi.e[r->scatter[i][1]].v;
    }
    struct value_stats snr, rssi, sizes;
    value_counts_stats(&r->snr, &snr);
    value_counts_stats(&r->rssi, &rssi);
    value_counts_stats(&r->sizes, &sizes);

    struct mg_json j;
    mg_json_init(&j, body);
    mg_json_object_begin(&j); /* a Go map: keys in bytewise order */
    mg_json_kv_int(&j, "avgPacketSize", sizes.n ? (int64_t)sizes.sum / sizes.n : 0);
    mg_json_kv_int(&j, "maxPacketSize", (int64_t)sizes.max);
    mg_json_kv_int(&j, "minPacketSize", (int64_t)sizes.min);
    write_histogram(&j, "packetSizes", &r->sizes, &sizes, 25);

    mg_json_key(&j, "packetsPerHour");
    mg_json_array_begin(&j);
    if (r->hours.len > 1)
        qsort(r->hours.e, r->hours.len, sizeof *r->hours.e, by_key);
    for (size_t i = 0; i < r->hours.len; i++) {
        mg_json_object_begin(&j);
        mg_json_kv_string(&j, "hour", r->hours.e[i].key);
        mg_json_kv_int(&j, "count", r->hours.e[i].n);
        mg_json_object_end(&j);
    }
    mg_json_array_end(&j);

    mg_json_key(&j, "payloadTypes");
    mg_json_array_begin(&j);
    if (r->types.len > 1)
        qsort(r->types.e, r->types.len, sizeof *r->types.e, by_count_then_number);
    for (size_t i = 0; i < r->types.len; i++) {
        int64_t t = atoll(r->types.e[i].key);
        char name[32];
        type_name(t, true, name);
        mg_json_object_begin(&j);
        mg_json_kv_int(&j, "type", t);
        mg_json_kv_string(&j, "name", name);
        mg_json_kv_int(&j, "count", r->types.e[i].n);
        mg_json_object_end(&j);
    }
    mg_json_array_end(&j);

    write_stats(&j, "rssi", &rssi);
    write_histogram(&j, "rssiValues", &r->rssi, &rssi, 20);

    mg_json_key(&j, "scatterData");
    mg_json_array_begin(&j);
    for (size_t k = 0; k < points; k++) {
        mg_json_object_begin(&j);
        mg_json_kv_double(&j, "snr", scatter[k][0]);
        mg_json_kv_double(&j, "rssi", scatter[k][1]);
        mg_json_object_end(&j);
    }
    mg_json_array_end(&j);
    free(scatter);

    mg_json_key(&j, "signalOverTime");
    mg_json_array_begin(&j);
    if (r->over_time.len > 1)
        qsort(r->over_time.e, r->over_time.len, sizeof *r->over_time.e, by_key);
    for (size_t i = 0; i < r->over_time.len; i++) {
        const struct tally *t = &r->over_time.e[i];
        mg_json_object_begin(&j);
        mg_json_kv_string(&j, "hour", t->key);
        mg_json_kv_int(&j, "count", t->n);
        mg_json_kv_double(&j, "avgSnr", t->sum / (double)t->n);
        mg_json_object_end(&j);
    }
    mg_json_array_end(&j);

    write_stats(&j, "snr", &snr);
    mg_json_key(&j, "snrByType");
    mg_json_array_begin(&j);
    if (r->by_type.len > 1)
        qsort(r->by_type.e, r->by_type.len, sizeof *r->by_type.e, by_count_then_key);
    for (size_t i = 0; i < r->by_type.len; i++) {
        const struct tally *t = &r->by_type.e[i];
        mg_json_object_begin(&j);
        mg_json_kv_string(&j, "name", t->key);
        mg_json_kv_int(&j, "count", t->n);
        mg_json_kv_double(&j, "avg", t->sum / (double)t->n);
        mg_json_kv_double(&j, "min", t->min);
        mg_json_kv_double(&j, "max", t->max);
        mg_json_object_end(&j);
    }
    mg_json_array_end(&j);
    write_histogram(&j, "snrValues", &r->snr, &snr, 20);
    mg_json_kv_double(&j, "timeSpanHours", time_span_hours(r));
    mg_json_kv_int(&j, "totalAllPackets", r->total_obs);
    mg_json_kv_int(&j, "totalPackets", snr.n);
    mg_json_kv_int(&j, "totalTransmissions", r->transmissions);
    mg_json_object_end(&j);
    mg_buf_putc(body, '\n');
}

/* The one pass: every transmission with its observations, in CoreScope's store's order. */
static int rf_scan(struct mg_db *db, const struct analytics_args *a,
                   const struct mg_area_nodes *area, struct rf *r)
{
    bool by_area = mg_area_nodes_filter(area);
    struct mg_buf sql;
    mg_buf_init(&sql);
    mg_buf_printf(&sql,
                  "SELECT t.id, t.first_seen, t.payload_type, length(CAST(t.raw_hex AS BLOB)), %s,"
                  " o.id, ob.id, o.path_json, o.snr, o.rssi,"
                  " strftime('%%Y-%%m-%%dT%%H:%%M:%%fZ', o.timestamp, 'unixepoch'), o.timestamp"
                  " FROM transmissions t %s JOIN observations o ON o.transmission_id = t.id"
                  " LEFT JOIN observers ob ON ob.rowid = o.observer_idx",
                  by_area ? MG_ADVERT_NODE_SQL : "NULL", r->regional ? "" : "LEFT");
    const struct mg_cs_window *w = &a->window;
    if (r->regional) {
        mg_buf_puts(&sql, " WHERE o.observer_idx IN (SELECT rowid FROM observers WHERE"
                          " upper(trim(iata)) IN ");
        mg_region_codes_sql(&sql, a->region);
        mg_buf_puts(&sql, ")");
        if (w->has_since) /* the newest copy is the one kept: an older one is older still */
            mg_buf_puts(&sql, " AND o.timestamp >= :since");
    } else {
        /* The transmission's first_seen, as text a day wider than the window (its exact test
         * is on the parsed time, below). */
        mg_buf_puts(&sql, " WHERE 1");
        if (w->has_since)
            mg_buf_puts(&sql, " AND t.first_seen >= strftime('%Y-%m-%dT%H:%M:%S', :since - 86400,"
                              " 'unixepoch')");
        if (w->has_until)
            mg_buf_puts(&sql, " AND t.first_seen <= strftime('%Y-%m-%dT%H:%M:%S', :until + 86400,"
                              " 'unixepoch')");
    }
    /* CoreScope's store loads transmissions by id, each with its observations newest first,
     * then sorts them by first_seen (as text), keeping id order among equals. */
    mg_buf_puts(&sql, " ORDER BY t.first_seen, t.id, o.timestamp DESC, o.id");
    sqlite3_stmt *st = sql.failed ? NULL : mg_db_prepare(db, mg_buf_cstr(&sql));
    mg_buf_free(&sql);
    if (!st)
        return sqlite3_errcode(db->conn) ? sqlite3_errcode(db->conn) : SQLITE_NOMEM;
    if (r->regional)
        mg_region_codes_bind(st, 1, a->region);
    int i_since = sqlite3_bind_parameter_index(st, ":since");
    int i_until = sqlite3_bind_parameter_index(st, ":until");
    if (i_since)
        sqlite3_bind_int64(st, i_since, w->since_s);
    if (i_until)
        sqlite3_bind_int64(st, i_until, w->until_s);

    int64_t tx = -1;
    bool tx_in = false; /* the transmission passes the filters of its level */
    int rc;
    while (!r->failed && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t this_tx = sqlite3_column_int64(st, RF_TX);
        if (this_tx != tx) {
            tx = this_tx;
            seen_copies_reset(&r->copies);
            r->tx_hours_len = 0;
            r->tx_counted = false;
            const char *node = (const char *)sqlite3_column_text(st, RF_NODE);
            bool in_area = !by_area || (node && node[0] && mg_area_nodes_has(area, node));
            tx_in = r->regional
                        ? in_area
                        : in_area && mg_cs_window_holds_text(
                                         w, (const char *)sqlite3_column_text(st, RF_FIRST_SEEN));
            if (!r->regional && tx_in)
                count_transmission(r, st);
        }
        if (sqlite3_column_type(st, RF_OBS) == SQLITE_NULL) {
            if (tx_in) { /* a transmission without observations counts once, by first_seen */
                const char *first = (const char *)sqlite3_column_text(st, RF_FIRST_SEEN);
                r->total_obs++;
                note_time(r, first);
                count_hour(r, first, false);
            }
            continue;
        }
        int fresh = seen_copies_add(&r->copies, (const char *)sqlite3_column_text(st, RF_OBSERVER),
                                    (const char *)sqlite3_column_text(st, RF_PATH));
        if (fresh < 0) {
            r->failed = true;
            break;
        }
        if (!fresh)
            continue;
        if (r->regional) {
            if (!mg_cs_window_holds_ms(w, sqlite3_column_int64(st, RF_TS) * 1000))
                continue;
            r->total_obs++;
            if (!tx_in)
                continue;
            count_transmission(r, st);
        } else {
            if (!tx_in)
                continue;
            r->total_obs++;
        }
        count_observation(r, st);
    }
    sqlite3_finalize(st);
    if (r->failed || r->snr.failed || r->rssi.failed || r->sizes.failed)
        return SQLITE_NOMEM;
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int rf_body(struct mg_db *db, const struct analytics_args *a, struct mg_buf *body)
{
    struct rf r;
    memset(&r, 0, sizeof r);
    mg_buf_init(&r.copies.text);
    int rc = mg_region_codes_known(db, a->region, &r.regional);
    struct mg_area_nodes area;
    memset(&area, 0, sizeof area);
    if (rc == SQLITE_OK && a->area[0])
        rc = mg_area_nodes_load(db->conn, a->area, &area);
    if (rc == SQLITE_OK)
        rc = rf_scan(db, a, &area, &r);
    if (rc == SQLITE_OK)
        rf_write(&r, body);
    mg_area_nodes_free(&area);
    rf_free(&r);
    return rc;
}

static void rf_build(struct mg_cold_build *b, struct mg_db *db)
{
    const struct analytics_args *a = (const struct analytics_args *)b->args;
    bool in_transaction = sqlite3_exec(db->conn, "BEGIN", NULL, NULL, NULL) == SQLITE_OK;
    int rc = rf_body(db, a, &b->body);
    if (in_transaction)
        sqlite3_exec(db->conn, "COMMIT", NULL, NULL, NULL);
    mg_cold_result(b, rc, "the observations");
}

static const struct mg_cold_report rf_report = {
    .name = "RF analytics",
    .not_found = "Not found",
    .bad_request = "bad request",
    .build = rf_build,
};

bool mg_analytics_rf_is_heavy(struct mg_env *env, const struct mg_request *req)
{
    struct analytics_args a;
    char key[ANALYTICS_KEY_BYTES];
    if (!analytics_args(req, NULL, "rf", &a, key, sizeof key))
        return false; /* answered 400 before any read */
    return mg_cold_report_is_heavy(env, key);
}

enum mg_turn mg_handle_analytics_rf(struct mg_env *env, const struct mg_request *req,
                                    struct mg_response *res)
{
    struct analytics_args a;
    char key[ANALYTICS_KEY_BYTES];
    if (!analytics_args(req, res, "rf", &a, key, sizeof key))
        return MG_DONE;
    return mg_cold_report_serve(env, req, res, &rf_report, key, &a, sizeof a);
}

/* ---- /api/analytics/channels ---- */

/*
 * The group text (GRP_TXT) transmissions, oldest first_seen first, in the window (by
 * first_seen), heard by an observer of the region when one is named, sent by a node of the
 * area when one is named; each decoded as CoreScope decodes it (a decoded_json that is not a
 * JSON object, or whose type, channel, channel_hash, text, sender or decryptionStatus is not a
 * string, is skipped).
 */
enum chan_col {
    CH_FIRST_SEEN,
    CH_NODE,
    CH_DOC,
    CH_BAD_FIELDS,
    CH_CHANNEL,
    CH_HASH_TYPE,
    CH_HASH,
    CH_HASH2,
    CH_TEXT,
    CH_SENDER,
    CH_STATUS,
};

static const char channels_columns[] =
    "SELECT t.first_seen, %s, CASE WHEN t.d IS NULL THEN NULL ELSE json_type(t.d) END,"
    " coalesce(json_type(t.d, '$.type') NOT IN ('text', 'null'), 0)"
    " + coalesce(json_type(t.d, '$.channel') NOT IN ('text', 'null'), 0)"
    " + coalesce(json_type(t.d, '$.channel_hash') NOT IN ('text', 'null'), 0)"
    " + coalesce(json_type(t.d, '$.text') NOT IN ('text', 'null'), 0)"
    " + coalesce(json_type(t.d, '$.sender') NOT IN ('text', 'null'), 0)"
    " + coalesce(json_type(t.d, '$.decryptionStatus') NOT IN ('text', 'null'), 0),"
    " json_extract(t.d, '$.channel'), json_type(t.d, '$.channelHash'),"
    " json_extract(t.d, '$.channelHash'), json_extract(t.d, '$.channel_hash'),"
    " json_extract(t.d, '$.text'), json_extract(t.d, '$.sender'),"
    " json_extract(t.d, '$.decryptionStatus')"
    " FROM (SELECT t.*, CASE WHEN json_valid(t.decoded_json) THEN t.decoded_json END AS d"
    " FROM transmissions t WHERE t.payload_type = 5";

/* Go's strconv.Atoi: an optional sign and decimal digits, in range. */
static bool go_atoi(const char *s, int64_t *out)
{
    return s && *s && mg_parse_atoi(s, out);
}

/* CoreScope's "chN" placeholder name. */
static bool placeholder_name(const char *name)
{
    int64_t ignored;
    return strncmp(name, "ch", 2) == 0 && go_atoi(name + 2, &ignored);
}

/* Whether name (with its "#") hashes to the channel hash byte, as the firmware derives it. */
static bool name_matches_hash(const char *name, const char *hash)
{
    int64_t expected;
    if (!go_atoi(hash, &expected))
        return false;
    struct mg_buf full;
    mg_buf_init(&full);
    if (name[0] != '#')
        mg_buf_putc(&full, '#');
    mg_buf_puts(&full, name);
    /* SHA-256 from libmd (sha2.h), which libbsd already brings. */
    uint8_t h1[SHA256_DIGEST_LENGTH], h2[SHA256_DIGEST_LENGTH];
    SHA2_CTX sha;
    SHA256Init(&sha);
    SHA256Update(&sha, (const uint8_t *)(full.data ? full.data : ""), full.len);
    SHA256Final(h1, &sha);
    mg_buf_free(&full);
    SHA256Init(&sha);
    SHA256Update(&sha, h1, 16);
    SHA256Final(h2, &sha);
    return (int64_t)h2[0] == expected;
}

/* The channel hash as CoreScope's text of channelHash (a number as Go formats it). */
static void channel_hash_text(sqlite3_stmt *st, struct mg_buf *out)
{
    const char *type = (const char *)sqlite3_column_text(st, CH_HASH_TYPE);
    if (!type || strcmp(type, "null") == 0)
        return;
    if (strcmp(type, "true") == 0 || strcmp(type, "false") == 0) {
        mg_buf_puts(out, type); /* Go's %v of a bool */
        return;
    }
    if (strcmp(type, "integer") == 0 || strcmp(type, "real") == 0) {
        char num[40];
        double v = sqlite3_column_double(st, CH_HASH);
        if (v == (double)(int64_t)v && v > -1e18 && v < 1e18)
            snprintf(num, sizeof num, "%lld", (long long)v);
        else
            mg_json_format_double(v, num, sizeof num);
        mg_buf_puts(out, num);
        return;
    }
    const char *text = (const char *)sqlite3_column_text(st, CH_HASH);
    mg_buf_puts(out, text ? text : "");
}

struct channels {
    struct tallies chans, senders, chan_senders, timeline;
    int64_t *lengths;
    size_t lengths_len, lengths_cap;
    bool failed;
};

static bool set_text(char **field, const char *value)
{
    char *copy = strdup(value ? value : "");
    if (!copy)
        return false;
    free(*field);
    *field = copy;
    return true;
}

static void channels_row(struct channels *c, sqlite3_stmt *st)
{
    const char *doc = (const char *)sqlite3_column_text(st, CH_DOC);
    if (!doc || (strcmp(doc, "object") != 0 && strcmp(doc, "null") != 0))
        return; /* Go's json.Unmarshal fails */
    if (sqlite3_column_int64(st, CH_BAD_FIELDS) > 0)
        return;
    const char *first_seen = (const char *)sqlite3_column_text(st, CH_FIRST_SEEN);
    const char *channel = (const char *)sqlite3_column_text(st, CH_CHANNEL);
    const char *text = (const char *)sqlite3_column_text(st, CH_TEXT);
    const char *sender = (const char *)sqlite3_column_text(st, CH_SENDER);
    const char *status = (const char *)sqlite3_column_text(st, CH_STATUS);
    struct mg_buf hash, name;
    mg_buf_init(&hash);
    mg_buf_init(&name);
    channel_hash_text(st, &hash);
    if (!hash.len) {
        const char *h2 = (const char *)sqlite3_column_text(st, CH_HASH2);
        mg_buf_puts(&hash, h2 ? h2 : "");
    }
    if (!hash.len)
        mg_buf_putc(&hash, '?');
    const char *h = mg_buf_cstr(&hash);
    if (channel && channel[0])
        mg_buf_puts(&name, channel);
    else
        mg_buf_printf(&name, "ch%s", h);
    bool encrypted = !(text && text[0]) && !(sender && sender[0]);
    const char *n = mg_buf_cstr(&name);
    if (n[0] && !(strncmp(n, "ch", 2) == 0 && strcmp(n + 2, h) == 0) &&
        !(status && strcmp(status, "decrypted") == 0) && !name_matches_hash(n, h)) {
        mg_buf_reset(&name);
        mg_buf_printf(&name, "ch%s", h);
        n = mg_buf_cstr(&name);
        encrypted = true;
    }
    struct tally *ch = tallies_get(&c->chans, h, hash.len);
    if (!ch || hash.failed || name.failed) {
        c->failed = true;
        goto done;
    }
    if (ch->n == 0) {
        ch->encrypted = encrypted;
        c->failed |= !set_text(&ch->name, n);
    } else if (placeholder_name(ch->name) && !placeholder_name(n)) {
        c->failed |= !set_text(&ch->name, n);
    }
    ch->n++;
    c->failed |= !set_text(&ch->last_activity, first_seen);
    if (!encrypted)
        ch->encrypted = false;
    if (sender && sender[0]) {
        struct mg_buf pair;
        mg_buf_init(&pair);
        mg_buf_printf(&pair, "%s\x1f%s", h, sender);
        struct tally *p = pair.failed ? NULL : tallies_get(&c->chan_senders, pair.data, pair.len);
        mg_buf_free(&pair);
        struct tally *s = tallies_get(&c->senders, sender, strlen(sender));
        if (!p || !s) {
            c->failed = true;
            goto done;
        }
        if (p->n++ == 0)
            ch->senders++;
        s->n++;
    }
    if (text && text[0]) {
        if (c->lengths_len == c->lengths_cap) {
            size_t cap = c->lengths_cap ? c->lengths_cap * 2 : 256;
            int64_t *grown = realloc(c->lengths, cap * sizeof *grown);
            if (!grown) {
                c->failed = true;
                goto done;
            }
            c->lengths = grown, c->lengths_cap = cap;
        }
        c->lengths[c->lengths_len++] = (int64_t)strlen(text);
    }
    if (first_seen && strlen(first_seen) >= 13) {
        struct mg_buf key;
        mg_buf_init(&key);
        mg_buf_append(&key, first_seen, 13);
        mg_buf_printf(&key, "|%s", n);
        struct tally *t = key.failed ? NULL : tallies_get(&c->timeline, key.data, key.len);
        mg_buf_free(&key);
        if (t)
            t->n++;
        else
            c->failed = true;
    }
done:
    mg_buf_free(&hash);
    mg_buf_free(&name);
}

static int by_messages_then_hash(const void *a, const void *b)
{
    return by_count_then_key(a, b); /* messages are n, the hash the key */
}

static void channels_write(struct channels *c, struct mg_buf *body)
{
    int64_t decryptable = 0;
    for (size_t i = 0; i < c->chans.len; i++)
        decryptable += !c->chans.e[i].encrypted;
    struct mg_json j;
    mg_json_init(&j, body);
    mg_json_object_begin(&j); /* a Go map: keys in bytewise order */
    mg_json_kv_int(&j, "activeChannels", (int64_t)c->chans.len);
    mg_json_key(&j, "channelTimeline");
    mg_json_array_begin(&j);
    if (c->timeline.len > 1) /* by hour, then channel: the key is "hour|channel" */
        qsort(c->timeline.e, c->timeline.len, sizeof *c->timeline.e, by_key);
    for (size_t i = 0; i < c->timeline.len; i++) {
        const struct tally *t = &c->timeline.e[i];
        mg_json_object_begin(&j);
        mg_json_kv_string(&j, "channel", t->key + 14);
        mg_json_kv_int(&j, "count", t->n);
        mg_json_key(&j, "hour");
        mg_json_string_n(&j, t->key, 13);
        mg_json_object_end(&j);
    }
    mg_json_array_end(&j);
    mg_json_key(&j, "channels");
    mg_json_array_begin(&j);
    if (c->chans.len > 1)
        qsort(c->chans.e, c->chans.len, sizeof *c->chans.e, by_messages_then_hash);
    for (size_t i = 0; i < c->chans.len; i++) {
        const struct tally *t = &c->chans.e[i];
        mg_json_object_begin(&j);
        mg_json_kv_bool(&j, "encrypted", t->encrypted);
        mg_json_kv_string(&j, "hash", t->key);
        mg_json_kv_string(&j, "lastActivity", t->last_activity ? t->last_activity : "");
        mg_json_kv_int(&j, "messages", t->n);
        mg_json_kv_string(&j, "name", t->name ? t->name : "");
        mg_json_kv_int(&j, "senders", t->senders);
        mg_json_object_end(&j);
    }
    mg_json_array_end(&j);
    mg_json_kv_int(&j, "decryptable", decryptable);
    mg_json_key(&j, "msgLengths");
    mg_json_array_begin(&j);
    for (size_t i = 0; i < c->lengths_len; i++)
        mg_json_int(&j, c->lengths[i]);
    mg_json_array_end(&j);
    mg_json_key(&j, "topSenders");
    mg_json_array_begin(&j);
    if (c->senders.len > 1)
        qsort(c->senders.e, c->senders.len, sizeof *c->senders.e, by_count_then_key);
    for (size_t i = 0; i < c->senders.len && i < 15; i++) {
        mg_json_object_begin(&j);
        mg_json_kv_int(&j, "count", c->senders.e[i].n);
        mg_json_kv_string(&j, "name", c->senders.e[i].key);
        mg_json_object_end(&j);
    }
    mg_json_array_end(&j);
    mg_json_object_end(&j);
    mg_buf_putc(body, '\n');
}

static int channels_body(struct mg_db *db, const struct analytics_args *a, struct mg_buf *body)
{
    bool regional = false;
    int rc = mg_region_codes_known(db, a->region, &regional);
    struct mg_area_nodes area;
    memset(&area, 0, sizeof area);
    if (rc == SQLITE_OK && a->area[0])
        rc = mg_area_nodes_load(db->conn, a->area, &area);
    if (rc != SQLITE_OK) {
        mg_area_nodes_free(&area);
        return rc;
    }
    bool by_area = mg_area_nodes_filter(&area);
    const struct mg_cs_window *w = &a->window;
    struct mg_buf sql;
    mg_buf_init(&sql);
    mg_buf_printf(&sql, channels_columns, by_area ? MG_ADVERT_NODE_SQL : "NULL");
    if (w->has_since)
        mg_buf_puts(&sql, " AND t.first_seen >= strftime('%Y-%m-%dT%H:%M:%S', :since - 86400,"
                          " 'unixepoch')");
    if (w->has_until)
        mg_buf_puts(&sql, " AND t.first_seen <= strftime('%Y-%m-%dT%H:%M:%S', :until + 86400,"
                          " 'unixepoch')");
    if (regional) {
        mg_buf_puts(&sql, " AND EXISTS (SELECT 1 FROM observations o WHERE o.transmission_id ="
                          " t.id AND o.observer_idx IN (SELECT rowid FROM observers WHERE"
                          " upper(trim(iata)) IN ");
        mg_region_codes_sql(&sql, a->region);
        mg_buf_puts(&sql, "))");
    }
    /* CoreScope's list of a payload type's transmissions is in load order: by id. */
    mg_buf_puts(&sql, ") t ORDER BY t.id");
    sqlite3_stmt *st = sql.failed ? NULL : mg_db_prepare(db, mg_buf_cstr(&sql));
    mg_buf_free(&sql);
    if (!st) {
        mg_area_nodes_free(&area);
        return sqlite3_errcode(db->conn) ? sqlite3_errcode(db->conn) : SQLITE_NOMEM;
    }
    int i_since = sqlite3_bind_parameter_index(st, ":since");
    int i_until = sqlite3_bind_parameter_index(st, ":until");
    if (i_since)
        sqlite3_bind_int64(st, i_since, w->since_s);
    if (i_until)
        sqlite3_bind_int64(st, i_until, w->until_s);
    if (regional)
        mg_region_codes_bind(st, (i_since ? 1 : 0) + (i_until ? 1 : 0) + 1, a->region);
    struct channels c;
    memset(&c, 0, sizeof c);
    while (!c.failed && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (!mg_cs_window_holds_text(w, (const char *)sqlite3_column_text(st, CH_FIRST_SEEN)))
            continue;
        if (by_area) {
            const char *node = (const char *)sqlite3_column_text(st, CH_NODE);
            if (!node || !node[0] || !mg_area_nodes_has(&area, node))
                continue;
        }
        channels_row(&c, st);
    }
    sqlite3_finalize(st);
    mg_area_nodes_free(&area);
    if (c.failed || c.chans.failed || c.senders.failed || c.timeline.failed)
        rc = SQLITE_NOMEM;
    else if (rc == SQLITE_DONE) {
        rc = SQLITE_OK;
        channels_write(&c, body);
    }
    tallies_free(&c.chans);
    tallies_free(&c.senders);
    tallies_free(&c.chan_senders);
    tallies_free(&c.timeline);
    free(c.lengths);
    return rc;
}

static void channels_build(struct mg_cold_build *b, struct mg_db *db)
{
    const struct analytics_args *a = (const struct analytics_args *)b->args;
    bool in_transaction = sqlite3_exec(db->conn, "BEGIN", NULL, NULL, NULL) == SQLITE_OK;
    int rc = channels_body(db, a, &b->body);
    if (in_transaction)
        sqlite3_exec(db->conn, "COMMIT", NULL, NULL, NULL);
    mg_cold_result(b, rc, "the group texts");
}

static const struct mg_cold_report channels_report = {
    .name = "channel analytics",
    .not_found = "Not found",
    .bad_request = "bad request",
    .build = channels_build,
};

enum mg_turn mg_handle_analytics_channels(struct mg_env *env, const struct mg_request *req,
                                          struct mg_response *res)
{
    struct analytics_args a;
    char key[ANALYTICS_KEY_BYTES];
    if (!analytics_args(req, res, "channels", &a, key, sizeof key))
        return MG_DONE;
    return mg_cold_report_serve(env, req, res, &channels_report, key, &a, sizeof a);
}

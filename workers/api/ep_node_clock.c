/* SPDX-License-Identifier: ISC */
/*
 * GET /api/nodes/{pubkey}/clock-skew: how far a node's clock is off, from the timestamps its
 * ADVERTs carry against the times observers heard them, as CoreScope's clock-skew engine
 * computes it:
 *   1. samples: every ADVERT with a timestamp (decoded payload.timestamp, else timestamp)
 *      from 2020 to 2100, once per observation (one per observer and path, newest first);
 *   2. observer offsets: over ADVERTs heard by 2 or more observations, each observer's
 *      median deviation from the median time they were heard at;
 *   3. per ADVERT (by hash): skew = advert time - heard time, plus the observer's offset
 *      when it has one; the median, mean and last of them;
 *   4. per node: the ADVERTs among the packets CoreScope files under the node (those of
 *      /health), their medians summed up: median, mean, last, the recent window (the last 5
 *      or those within an hour of the latest, whichever is fewer) that decides the severity,
 *      drift (Theil-Sen over up to 200 points), and the 10 latest ADVERTs' evidence.
 * Steps 1 and 2 read every ADVERT's observations, so the route is heavy. The fleet's list
 * (/api/nodes/clock-skew) and the Analytics page's roles (/api/analytics/roles, the fleet's
 * figures by role) are built from the same engine, below.
 *
 * Differences from CoreScope: equal times are ordered by id where CoreScope's sort leaves
 * them in any order; a hash is the one stored (CoreScope's store recomputes some).
 */
#include "buf.h"
#include "cold_report.h"
#include "corescope_config.h"
#include "json.h"
#include "log.h"
#include "node_read.h"
#include "node_visibility.h"
#include "params.h"
#include "result_cache.h"
#include "router.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SKEW_WARN_S 300.0
#define SKEW_CRITICAL_S 3600.0
#define SKEW_ABSURD_S (30 * 86400.0)
#define SKEW_NO_CLOCK_S (365 * 86400.0)
#define MIN_DRIFT_SAMPLES 5
#define MAX_DRIFT_PER_DAY 86400.0
#define RECENT_COUNT 5
#define RECENT_WINDOW_S 3600
#define BIMODAL_S 3600.0
#define RTC_RESET_S (24 * 3600.0)
#define MAX_SKEW_JUMP_S 60.0
#define THEIL_SEN_MAX 200
#define EVIDENCE_MAX 10

/* CoreScope's rounding: half up, then truncated toward zero. */
static double round_to(double v, int places)
{
    double m = places == 1 ? 10.0 : 100.0;
    return (double)(int64_t)(v * m + 0.5) / m;
}

static int by_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of n values (0 for none); sorts a copy. */
static double median_of(const double *v, size_t n)
{
    if (n == 0)
        return 0;
    double *s = malloc(n * sizeof *s);
    if (!s)
        return 0;
    memcpy(s, v, n * sizeof *s);
    qsort(s, n, sizeof *s, by_double);
    double m = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    free(s);
    return m;
}

static double mean_of(const double *v, size_t n)
{
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    return n ? sum / (double)n : 0;
}

static const char *severity_of(double abs_skew)
{
    return abs_skew >= SKEW_NO_CLOCK_S   ? "no_clock"
           : abs_skew >= SKEW_ABSURD_S   ? "absurd"
           : abs_skew >= SKEW_CRITICAL_S ? "critical"
           : abs_skew >= SKEW_WARN_S     ? "warning"
                                         : "ok";
}

/* One observation of an ADVERT. */
struct sample {
    int64_t tx;
    char *hash, *observer, *observer_name;
    int64_t advert_ts, observed_ts;
    double corrected, offset;
    bool calibrated;
};

struct observer_offset {
    char *observer;
    double offset;
};

static int by_observer(const void *a, const void *b)
{
    return strcmp(((const struct observer_offset *)a)->observer,
                  ((const struct observer_offset *)b)->observer);
}

/* Every observation of an ADVERT with a plausible timestamp, by transmission id, newest
 * first (one per observer and path is kept). The ADVERTs' timestamps are read once each (a
 * materialized list), not once per observation. */
static const char samples_sql[] =
    "WITH adverts(id, hash, ts) AS MATERIALIZED (SELECT id, coalesce(hash, ''),"
    " CAST(CASE WHEN json_type(decoded_json, '$.payload') = 'object'"
    " AND json_type(decoded_json, '$.payload.timestamp') IN ('integer', 'real')"
    " AND decoded_json ->> '$.payload.timestamp' > 0 THEN decoded_json ->> '$.payload.timestamp'"
    " WHEN json_type(decoded_json, '$.timestamp') IN ('integer', 'real')"
    " THEN decoded_json ->> '$.timestamp' ELSE 0 END AS INTEGER)"
    " FROM transmissions WHERE payload_type = 4 AND json_valid(decoded_json))"
    " SELECT a.id, a.hash, a.ts, o.timestamp, coalesce(obs.id, ''), obs.name,"
    " coalesce(o.path_json, '') FROM adverts a JOIN observations o ON o.transmission_id = a.id"
    " LEFT JOIN observers obs ON obs.rowid = o.observer_idx"
    " WHERE a.ts BETWEEN 1577836800 AND 4102444800 ORDER BY a.id, o.timestamp DESC";

struct engine {
    struct sample *s;
    size_t n, cap;
    struct observer_offset *offsets; /* sorted by observer */
    size_t n_offsets;
};

static void samples_free(struct engine *e)
{
    for (size_t i = 0; i < e->n; i++) {
        free(e->s[i].hash);
        free(e->s[i].observer);
        free(e->s[i].observer_name);
    }
    free(e->s);
    for (size_t i = 0; i < e->n_offsets; i++)
        free(e->offsets[i].observer);
    free(e->offsets);
}

static char *dup_or_null(const unsigned char *t)
{
    return t ? strdup((const char *)t) : NULL;
}

static int read_samples(struct mg_db *db, struct engine *e)
{
    sqlite3_stmt *st = mg_db_prepare(db, samples_sql);
    if (!st)
        return SQLITE_ERROR;
    int rc;
    int64_t tx = -1;
    struct mg_buf seen; /* "observer|path" of this transmission's observations */
    mg_buf_init(&seen);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(st, 0);
        if (id != tx) {
            tx = id;
            mg_buf_reset(&seen);
        }
        char key[512];
        snprintf(key, sizeof key, "%s|%s", sqlite3_column_text(st, 4), sqlite3_column_text(st, 6));
        bool dup = false;
        for (const char *k = seen.data; k && k < seen.data + seen.len; k += strlen(k) + 1)
            dup = dup || strcmp(k, key) == 0;
        if (dup)
            continue;
        mg_buf_append(&seen, key, strlen(key) + 1);
        int64_t advert = sqlite3_column_int64(st, 2), observed = sqlite3_column_int64(st, 3);
        if (advert < 1577836800 || advert > 4102444800 || observed <= 0)
            continue;
        if (e->n == e->cap) {
            e->cap = e->cap ? e->cap * 2 : 1024;
            struct sample *more = realloc(e->s, e->cap * sizeof *e->s);
            if (!more) {
                rc = SQLITE_NOMEM;
                break;
            }
            e->s = more;
        }
        e->s[e->n++] = (struct sample){
            .tx = id,
            .hash = dup_or_null(sqlite3_column_text(st, 1)),
            .observer = dup_or_null(sqlite3_column_text(st, 4)),
            .observer_name = dup_or_null(sqlite3_column_text(st, 5)),
            .advert_ts = advert,
            .observed_ts = observed,
        };
    }
    mg_buf_free(&seen);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

struct index_entry {
    const char *hash;
    size_t i;
};

static int by_hash_then_order(const void *a, const void *b)
{
    const struct index_entry *x = a, *y = b;
    int c = strcmp(x->hash, y->hash);
    return c ? c : (x->i < y->i ? -1 : x->i > y->i);
}

/* The samples grouped by hash (each group in sample order). */
static struct index_entry *group_by_hash(const struct engine *e)
{
    struct index_entry *g = malloc((e->n ? e->n : 1) * sizeof *g);
    if (!g)
        return NULL;
    for (size_t i = 0; i < e->n; i++)
        g[i] = (struct index_entry){e->s[i].hash ? e->s[i].hash : "", i};
    if (e->n > 1)
        qsort(g, e->n, sizeof *g, by_hash_then_order);
    return g;
}

/* Step 2: each observer's offset, then every sample's corrected skew. */
static int calibrate(struct engine *e)
{
    struct index_entry *g = group_by_hash(e);
    double *dev = malloc((e->n ? e->n : 1) * sizeof *dev);
    const char **dev_observer = malloc((e->n ? e->n : 1) * sizeof *dev_observer);
    double *times = malloc((e->n ? e->n : 1) * sizeof *times);
    if (!g || !dev || !dev_observer || !times) {
        free(g), free(dev), free(dev_observer), free(times);
        return SQLITE_NOMEM;
    }
    size_t n_dev = 0;
    for (size_t i = 0; i < e->n;) {
        size_t j = i;
        while (j < e->n && strcmp(g[j].hash, g[i].hash) == 0)
            j++;
        if (j - i >= 2) {
            for (size_t k = i; k < j; k++)
                times[k - i] = (double)e->s[g[k].i].observed_ts;
            double med = median_of(times, j - i);
            for (size_t k = i; k < j; k++) {
                dev[n_dev] = (double)e->s[g[k].i].observed_ts - med;
                dev_observer[n_dev++] = e->s[g[k].i].observer ? e->s[g[k].i].observer : "";
            }
        }
        i = j;
    }
    /* Offsets: the median of each observer's deviations. */
    e->offsets = calloc(n_dev ? n_dev : 1, sizeof *e->offsets);
    double *mine = malloc((n_dev ? n_dev : 1) * sizeof *mine);
    int rc = e->offsets && mine ? SQLITE_OK : SQLITE_NOMEM;
    for (size_t i = 0; rc == SQLITE_OK && i < n_dev; i++) {
        bool done = false;
        for (size_t k = 0; k < e->n_offsets && !done; k++)
            done = strcmp(e->offsets[k].observer, dev_observer[i]) == 0;
        if (done)
            continue;
        size_t m = 0;
        for (size_t k = i; k < n_dev; k++)
            if (strcmp(dev_observer[k], dev_observer[i]) == 0)
                mine[m++] = dev[k];
        e->offsets[e->n_offsets++] =
            (struct observer_offset){strdup(dev_observer[i]), median_of(mine, m)};
    }
    free(mine);
    if (e->n_offsets > 1)
        qsort(e->offsets, e->n_offsets, sizeof *e->offsets, by_observer);
    for (size_t i = 0; rc == SQLITE_OK && i < e->n; i++) {
        struct sample *s = &e->s[i];
        struct observer_offset want = {s->observer ? s->observer : "", 0};
        const struct observer_offset *o =
            e->n_offsets ? bsearch(&want, e->offsets, e->n_offsets, sizeof *e->offsets, by_observer)
                         : NULL;
        double raw = (double)(s->advert_ts - s->observed_ts);
        s->calibrated = o != NULL;
        s->offset = o ? o->offset : 0;
        s->corrected = o ? raw + o->offset : raw;
    }
    free(g), free(dev), free(dev_observer), free(times);
    return rc;
}

/* Steps 1 and 2, and the samples grouped by hash into *groups; an SQLite code. */
static int engine_build(struct mg_db *db, struct engine *e, struct index_entry **groups)
{
    int rc = read_samples(db, e);
    if (rc == SQLITE_OK)
        rc = calibrate(e);
    if (rc == SQLITE_OK && !(*groups = group_by_hash(e)))
        rc = SQLITE_NOMEM;
    return rc;
}

static void engine_free(struct engine *e, struct index_entry *groups)
{
    free(groups);
    samples_free(e);
}

/* Step 3 for one hash: its samples are g[first..end) (in sample order). */
struct advert_skew {
    int64_t tx;
    const char *hash;
    double median, mean, last;
    int64_t samples, last_observed_ts, advert_ts;
    bool calibrated;
    size_t first, end;
};

static bool advert_skew(const struct engine *e, const struct index_entry *g, size_t first,
                        size_t end, struct advert_skew *a)
{
    size_t n = end - first;
    double *v = malloc(n * sizeof *v);
    if (!v)
        return false;
    memset(a, 0, sizeof *a);
    a->hash = g[first].hash;
    a->first = first;
    a->end = end;
    for (size_t k = first; k < end; k++) {
        const struct sample *s = &e->s[g[k].i];
        v[k - first] = s->corrected;
        if (s->observed_ts > a->last_observed_ts)
            a->last_observed_ts = s->observed_ts;
        a->calibrated = a->calibrated || s->calibrated;
    }
    a->median = round_to(median_of(v, n), 1);
    a->mean = round_to(mean_of(v, n), 1);
    a->last = round_to(e->s[g[end - 1].i].corrected, 1);
    a->samples = (int64_t)n;
    a->advert_ts = e->s[g[end - 1].i].advert_ts;
    free(v);
    return true;
}

/* The range of hash's samples in g; false when it has none. */
static bool hash_range(const struct engine *e, const struct index_entry *g, const char *hash,
                       size_t *first, size_t *end)
{
    size_t lo = 0, hi = e->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(g[mid].hash, hash) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t j = lo;
    while (j < e->n && strcmp(g[j].hash, hash) == 0)
        j++;
    *first = lo;
    *end = j;
    return j > lo;
}

struct pair {
    int64_t ts;
    double skew;
    const struct advert_skew *a;
};

static int by_ts(const void *x, const void *y)
{
    const struct pair *a = x, *b = y;
    if (a->ts != b->ts)
        return a->ts < b->ts ? -1 : 1;
    return a->a->tx < b->a->tx ? -1 : a->a->tx > b->a->tx;
}

static double theil_sen(const struct pair *p, size_t n)
{
    size_t cap = n * (n - 1) / 2, k = 0;
    double *slopes = malloc((cap ? cap : 1) * sizeof *slopes);
    if (!slopes)
        return 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++) {
            double dt = (double)(p[j].ts - p[i].ts);
            if (dt > 0)
                slopes[k++] = (p[j].skew - p[i].skew) / dt;
        }
    double m = 0;
    if (k) {
        qsort(slopes, k, sizeof *slopes, by_double);
        m = k % 2 ? slopes[k / 2] : (slopes[k / 2 - 1] + slopes[k / 2]) / 2;
    }
    free(slopes);
    return m;
}

/* Seconds per day (pairs sorted by time). */
static double drift(const struct pair *p, size_t n)
{
    if (n < 2 || p[n - 1].ts - p[0].ts < 3600)
        return 0;
    struct pair *f = malloc(n * sizeof *f);
    if (!f)
        return 0;
    size_t m = 0;
    f[m++] = p[0];
    for (size_t i = 1; i < n; i++)
        if (fabs(p[i].skew - f[m - 1].skew) <= MAX_SKEW_JUMP_S)
            f[m++] = p[i];
    const struct pair *use = f;
    if (m < 2 || f[m - 1].ts - f[0].ts < 3600)
        use = p, m = n;
    if (m > THEIL_SEN_MAX)
        use += m - THEIL_SEN_MAX, m = THEIL_SEN_MAX;
    double d = theil_sen(use, m) * 86400;
    free(f);
    return d;
}

struct evidence {
    const struct advert_skew *a;
    int64_t ts;
    size_t order;
};

static int by_evidence_ts(const void *x, const void *y)
{
    const struct evidence *a = x, *b = y;
    if (a->ts != b->ts)
        return a->ts > b->ts ? -1 : 1;
    return a->order < b->order ? -1 : a->order > b->order;
}

/* The name an observer is known by among these samples ("" for none). */
static const char *observer_name(const struct engine *e, const struct index_entry *g,
                                 const struct advert_skew *adverts, size_t n_adverts,
                                 const char *observer)
{
    const char *name = "";
    for (size_t a = 0; a < n_adverts; a++)
        for (size_t k = adverts[a].first; k < adverts[a].end; k++) {
            const struct sample *s = &e->s[g[k].i];
            if (s->observer && strcmp(s->observer, observer) == 0 && s->observer_name &&
                *s->observer_name)
                name = s->observer_name;
        }
    return name;
}

static void kv_double(struct mg_json *j, const char *key, double v)
{
    mg_json_key(j, key);
    mg_json_double(j, v);
}

/* What /api/analytics/roles takes of a node's skew (the roles section below). */
struct role_skew {
    char *key;
    const char *severity; /* a literal */
    double recent, last;  /* recentMedianSkewSec, lastSkewSec as the fleet writes them */
};
struct role_skews {
    struct role_skew *s;
    size_t n, cap;
};

/* Step 4, written as CoreScope's NodeClockSkew (its fields in declaration order). */
struct fleet_names {
    const char *name, *role;    /* NULL or "": left out */
    struct role_skews *collect; /* not NULL: the figures are kept here, nothing is written */
};

static bool collect_skew(struct role_skews *c, const char *pubkey, const char *severity,
                         double recent, double last)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 256;
        struct role_skew *more = realloc(c->s, cap * sizeof *more);
        if (!more)
            return false;
        c->s = more, c->cap = cap;
    }
    char *key = strdup(pubkey);
    if (!key)
        return false;
    c->s[c->n++] = (struct role_skew){key, severity, round_to(recent, 1), round_to(last, 1)};
    return true;
}

static bool write_node_skew(struct mg_json *j, const char *pubkey, const struct engine *e,
                            const struct index_entry *g, struct advert_skew *adv, size_t n,
                            const struct fleet_names *fleet)
{
    double *all = calloc(n ? n : 1, sizeof *all);
    struct pair *pairs = calloc(n ? n : 1, sizeof *pairs);
    struct evidence *ev = calloc(n ? n : 1, sizeof *ev);
    if (!all || !pairs || !ev) {
        free(all), free(pairs), free(ev);
        return false;
    }
    int64_t total = 0, last_obs = 0, last_adv = 0;
    double last_skew = 0;
    bool any_cal = false;
    for (size_t i = 0; i < n; i++) {
        all[i] = adv[i].median;
        total += adv[i].samples;
        any_cal = any_cal || adv[i].calibrated;
        if (adv[i].last_observed_ts > last_obs) {
            last_obs = adv[i].last_observed_ts;
            last_skew = adv[i].last;
            last_adv = adv[i].advert_ts;
        }
        pairs[i] = (struct pair){adv[i].last_observed_ts, adv[i].median, &adv[i]};
        ev[i] = (struct evidence){&adv[i], e->s[g[adv[i].first].i].observed_ts, i};
    }
    double med = median_of(all, n), mean = mean_of(all, n);
    if (n > 1)
        qsort(pairs, n, sizeof *pairs, by_ts);
    /* The recent window: the last RECENT_COUNT, or those within an hour of the latest. */
    size_t start = n > RECENT_COUNT ? n - RECENT_COUNT : 0, by_time = n - 1;
    for (size_t i = n; i-- > 0;) {
        if (pairs[n - 1].ts - pairs[i].ts <= RECENT_WINDOW_S)
            by_time = i;
        else
            break;
    }
    if (by_time > start)
        start = by_time;
    double recent = last_skew, *good = calloc(n ? n : 1, sizeof *good),
           *vals = calloc(n ? n : 1, sizeof *vals);
    if (!good || !vals) {
        free(all), free(pairs), free(ev), free(good), free(vals);
        return false;
    }
    size_t n_vals = 0, n_good = 0, rtc_resets = 0;
    for (size_t i = start; i < n; i++)
        vals[n_vals++] = pairs[i].skew;
    if (n_vals)
        recent = median_of(vals, n_vals);
    for (size_t i = 0; i < n_vals; i++) {
        double v = fabs(vals[i]);
        if (v > RTC_RESET_S)
            rtc_resets++;
        else if (v <= BIMODAL_S)
            good[n_good++] = vals[i];
    }
    int64_t recent_count = (int64_t)(n_vals - rtc_resets);
    int64_t bad_count = recent_count - (int64_t)n_good;
    double good_fraction = recent_count > 0 ? (double)n_good / (double)recent_count : 0;
    const char *severity;
    if (good_fraction < 0.10) {
        severity = "no_clock";
    } else if (good_fraction < 0.80 && bad_count > 0) {
        severity = "bimodal_clock";
        if (n_good)
            recent = median_of(good, n_good);
    } else {
        if (n_good)
            recent = median_of(good, n_good);
        severity = severity_of(fabs(recent));
    }
    double drift_per_day = 0;
    if (strcmp(severity, "no_clock") != 0 && strcmp(severity, "bimodal_clock") != 0 &&
        n >= MIN_DRIFT_SAMPLES) {
        drift_per_day = drift(pairs, n);
        if (fabs(drift_per_day) > MAX_DRIFT_PER_DAY)
            drift_per_day = 0;
    }

    if (fleet && fleet->collect) {
        bool kept = collect_skew(fleet->collect, pubkey, severity, recent, last_skew);
        free(all), free(pairs), free(ev), free(good), free(vals);
        return kept;
    }
    mg_json_object_begin(j);
    mg_json_kv_string(j, "pubkey", pubkey);
    kv_double(j, "meanSkewSec", round_to(mean, 1));
    kv_double(j, "medianSkewSec", round_to(med, 1));
    kv_double(j, "lastSkewSec", round_to(last_skew, 1));
    kv_double(j, "recentMedianSkewSec", round_to(recent, 1));
    kv_double(j, "driftPerDaySec", round_to(drift_per_day, 2));
    mg_json_kv_string(j, "severity", severity);
    mg_json_kv_int(j, "sampleCount", total);
    mg_json_kv_bool(j, "calibrated", any_cal);
    mg_json_kv_int(j, "lastAdvertTS", last_adv);
    mg_json_kv_int(j, "lastObservedTS", last_obs);
    if (!fleet) { /* the fleet leaves samples, evidence and summary out */
        mg_json_key(j, "samples");
        mg_json_array_begin(j);
        for (size_t i = 0; i < n; i++) {
            mg_json_object_begin(j);
            mg_json_kv_int(j, "ts", pairs[i].ts);
            kv_double(j, "skew", round_to(pairs[i].skew, 1));
            mg_json_object_end(j);
        }
        mg_json_array_end(j);
    }
    kv_double(j, "goodFraction", round_to(good_fraction, 2));
    mg_json_kv_int(j, "recentBadSampleCount", bad_count);
    bool any_bad = false;
    for (size_t i = start; i < n; i++) {
        double v = fabs(pairs[i].skew);
        if (v > RTC_RESET_S || v <= BIMODAL_S || !*pairs[i].a->hash)
            continue;
        if (!any_bad) {
            mg_json_key(j, "recentBadSamples");
            mg_json_array_begin(j);
            any_bad = true;
        }
        mg_json_object_begin(j);
        mg_json_kv_string(j, "hash", pairs[i].a->hash);
        mg_json_kv_int(j, "advertTS", pairs[i].a->advert_ts);
        kv_double(j, "skewSec", round_to(pairs[i].skew, 1));
        mg_json_object_end(j);
    }
    if (any_bad)
        mg_json_array_end(j);
    mg_json_kv_int(j, "recentSampleCount", recent_count);
    if (fleet) {
        if (fleet->name && *fleet->name)
            mg_json_kv_string(j, "nodeName", fleet->name);
        if (fleet->role && *fleet->role)
            mg_json_kv_string(j, "nodeRole", fleet->role);
        mg_json_object_end(j);
        free(all), free(pairs), free(ev), free(good), free(vals);
        return true;
    }
    /* The 10 latest ADVERTs' evidence, observer by observer. */
    if (n > 1)
        qsort(ev, n, sizeof *ev, by_evidence_ts);
    size_t n_ev = n < EVIDENCE_MAX ? n : EVIDENCE_MAX;
    int64_t cal_total = 0, cal_yes = 0;
    mg_json_key(j, "recentHashEvidence");
    mg_json_array_begin(j);
    for (size_t i = 0; i < n_ev; i++) {
        const struct advert_skew *a = ev[i].a;
        size_t m = a->end - a->first, kept = 0;
        double *corr = malloc(m * sizeof *corr);
        mg_json_object_begin(j);
        mg_json_kv_string(j, "hash", a->hash);
        mg_json_key(j, "observers");
        mg_json_array_begin(j);
        for (size_t k = a->first; k < a->end; k++) {
            const struct sample *s = &e->s[g[k].i];
            const char *id = s->observer ? s->observer : "";
            const char *name = observer_name(e, g, adv, n, id);
            double corrected = round_to(s->corrected, 1);
            mg_json_object_begin(j);
            mg_json_kv_string(j, "observerID", id);
            mg_json_kv_string(j, "observerName", *name ? name : id);
            kv_double(j, "rawSkewSec", round_to((double)(s->advert_ts - s->observed_ts), 1));
            kv_double(j, "correctedSkewSec", corrected);
            kv_double(j, "observerOffsetSec", round_to(s->offset, 1));
            mg_json_kv_bool(j, "calibrated", s->calibrated);
            mg_json_object_end(j);
            if (corr && fabs(corrected) <= RTC_RESET_S)
                corr[kept++] = corrected;
            cal_total++;
            cal_yes += s->calibrated;
        }
        mg_json_array_end(j);
        kv_double(j, "medianCorrectedSkewSec", round_to(median_of(corr, kept), 1));
        mg_json_kv_int(j, "timestamp", ev[i].ts);
        mg_json_object_end(j);
        free(corr);
    }
    mg_json_array_end(j);
    mg_json_key(j, "calibrationSummary");
    mg_json_object_begin(j);
    mg_json_kv_int(j, "totalSamples", cal_total);
    mg_json_kv_int(j, "calibratedSamples", cal_yes);
    mg_json_kv_int(j, "uncalibratedSamples", cal_total - cal_yes);
    mg_json_object_end(j);
    mg_json_object_end(j);
    free(all), free(pairs), free(ev), free(good), free(vals);
    return true;
}

/* The node's answer into body; *none when it has no ADVERT with samples. An SQLite code.
 * Node analytics (ep_node_analytics.c) carry it too. */
int mg_node_skew_body(struct mg_db *db, const char *pubkey, struct mg_buf *body, bool *none)
{
    struct engine e = {0};
    struct index_entry *g = NULL;
    int64_t *ids = NULL;
    size_t n_ids = 0, n_adv = 0;
    struct advert_skew *adv = NULL;
    int rc = engine_build(db, &e, &g);
    if (rc == SQLITE_OK)
        rc = mg_node_packet_ids(db, pubkey, &ids, &n_ids);
    sqlite3_stmt *tx = rc == SQLITE_OK ? mg_db_prepare(db, "SELECT payload_type, coalesce(hash,"
                                                           " '') FROM transmissions WHERE id = ?1")
                                       : NULL;
    if (rc == SQLITE_OK && (!tx || !(adv = calloc(n_ids ? n_ids : 1, sizeof *adv))))
        rc = tx ? SQLITE_NOMEM : SQLITE_ERROR;
    for (size_t i = 0; rc == SQLITE_OK && i < n_ids; i++) {
        sqlite3_bind_int64(tx, 1, ids[i]);
        size_t first, end;
        if (sqlite3_step(tx) == SQLITE_ROW && sqlite3_column_int(tx, 0) == 4 &&
            hash_range(&e, g, (const char *)sqlite3_column_text(tx, 1), &first, &end)) {
            if (!advert_skew(&e, g, first, end, &adv[n_adv]))
                rc = SQLITE_NOMEM;
            adv[n_adv++].tx = ids[i];
        }
        sqlite3_reset(tx);
    }
    *none = rc == SQLITE_OK && n_adv == 0;
    if (rc == SQLITE_OK && n_adv) {
        struct mg_json j;
        mg_json_init(&j, body);
        if (!write_node_skew(&j, pubkey, &e, g, adv, n_adv, NULL))
            rc = SQLITE_NOMEM;
        mg_buf_putc(body, '\n');
    }
    sqlite3_finalize(tx);
    free(adv);
    free(ids);
    engine_free(&e, g);
    return rc;
}

/*
 * Both routes are cold reports (cold_report.h): built at most `cap` at a time under the cold
 * gate, shared through the result cache (CoreScope caches them about 30 s; here for
 * MESHGATE_REACH_CACHE_TTL_MS), built once for identical concurrent requests.
 */
#define SKEW_KEY_MAX 128 /* longer {pubkey}s name no node: 404 without a build */

static void node_skew_build(struct mg_cold_build *b, struct mg_db *db)
{
    bool began = mg_node_read_begin(db);
    bool none = false;
    int rc = mg_node_skew_body(db, (const char *)b->args, &b->body, &none);
    mg_node_read_end(db, began);
    mg_cold_result(b, rc, "the ADVERTs");
    if (rc == SQLITE_OK && none)
        b->result = MG_COLD_NOT_FOUND;
}

static const struct mg_cold_report node_skew_report = {
    .name = "node clock skew",
    .not_found = "No clock skew data for this node",
    .bad_request = "bad request",
    .build = node_skew_build,
};

static bool node_skew_key(const struct mg_request *req, char *key, size_t cap)
{
    if (strlen(req->path_param) > SKEW_KEY_MAX)
        return false;
    snprintf(key, cap, "skew|%s", req->path_param);
    return true;
}

enum mg_turn mg_handle_node_clock_skew(struct mg_env *env, const struct mg_request *req,
                                       struct mg_response *res)
{
    char key[SKEW_KEY_MAX + 8];
    if (!node_skew_key(req, key, sizeof key)) {
        mg_response_error(res, 404, "%s", node_skew_report.not_found);
        return MG_DONE;
    }
    return mg_cold_report_serve(env, req, res, &node_skew_report, key, req->path_param,
                                strlen(req->path_param) + 1);
}

/* ---- the fleet ------------------------------------------------------------------------------ */

/*
 * GET /api/nodes/clock-skew: the same for every key CoreScope files an ADVERT under, without
 * samples and evidence, with the node's name and role. Which keys an ADVERT is filed under
 * is found in one pass over ADVERTs and their observations: its decoded keys, the keys of
 * its observations' resolved paths, and, for an observation without one, each hop that one
 * relay alone starts with (the relays' keys, sorted, searched by prefix). The list is in key
 * order (CoreScope's is that of a Go map: random).
 */
static const char filed_sql[] =
    "SELECT t.id, t.decoded_json ->> '$.pubKey', t.decoded_json ->> '$.destPubKey',"
    " t.decoded_json ->> '$.srcPubKey', coalesce(obs.id, ''), o.path_json, %s,"
    " coalesce(t.hash, '') FROM transmissions t LEFT JOIN observations o"
    " ON o.transmission_id = t.id"
    " LEFT JOIN observers obs ON obs.rowid = o.observer_idx"
    " WHERE t.payload_type = 4 AND json_valid(t.decoded_json)"
    " ORDER BY t.id, o.timestamp DESC";

struct filed {
    char *key;
    int64_t tx;
    size_t first, end; /* its hash's samples in the engine's groups */
};

static int by_key_tx(const void *a, const void *b)
{
    const struct filed *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->tx < y->tx ? -1 : x->tx > y->tx);
}

static int by_text(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

struct filings {
    const struct engine *e;
    const struct index_entry *g;
    size_t first, end; /* of the transmission being filed */
    struct filed *f;
    size_t n, cap;
    char **relays; /* lowercased keys of repeaters and rooms, sorted */
    size_t n_relays;
};

static bool file_under(struct filings *fl, const char *key, int64_t tx)
{
    if (!key || !*key || fl->first == fl->end)
        return true;
    if (fl->n == fl->cap) {
        fl->cap = fl->cap ? fl->cap * 2 : 1024;
        struct filed *more = realloc(fl->f, fl->cap * sizeof *fl->f);
        if (!more)
            return false;
        fl->f = more;
    }
    char *copy = strdup(key);
    if (!copy)
        return false;
    fl->f[fl->n++] = (struct filed){copy, tx, fl->first, fl->end};
    return true;
}

/* The one relay whose key starts with hop (lowercased, a prefix of 2 to 8 characters or a
 * whole key), or NULL. */
static const char *unique_relay(const struct filings *fl, const char *hop, size_t len)
{
    char h[80];
    if (len < 2 || len >= sizeof h)
        return NULL;
    for (size_t i = 0; i < len; i++)
        h[i] = hop[i] >= 'A' && hop[i] <= 'Z' ? (char)(hop[i] + 32) : hop[i];
    h[len] = '\0';
    size_t lo = 0, hi = fl->n_relays;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(fl->relays[mid], h) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t found = 0;
    const char *only = NULL;
    for (size_t i = lo; i < fl->n_relays && strncmp(fl->relays[i], h, len) == 0; i++) {
        bool listed = len <= 8 || strlen(fl->relays[i]) == len; /* CoreScope's prefix map */
        if (listed)
            found++, only = fl->relays[i];
    }
    return found == 1 ? only : NULL;
}

static int read_relays(struct mg_db *db, struct filings *fl)
{
    sqlite3_stmt *st = mg_db_prepare(
        db, "SELECT lower(public_key) FROM nodes WHERE instr(lower(role), 'repeater') > 0"
            " OR instr(lower(role), 'room_server') > 0 OR lower(role) = 'room'");
    if (!st)
        return SQLITE_ERROR;
    int rc;
    size_t cap = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (fl->n_relays == cap) {
            cap = cap ? cap * 2 : 256;
            char **more = realloc(fl->relays, cap * sizeof *more);
            if (!more) {
                rc = SQLITE_NOMEM;
                break;
            }
            fl->relays = more;
        }
        if (!(fl->relays[fl->n_relays] = strdup((const char *)sqlite3_column_text(st, 0)))) {
            rc = SQLITE_NOMEM;
            break;
        }
        fl->n_relays++;
    }
    sqlite3_finalize(st);
    if (fl->n_relays > 1)
        qsort(fl->relays, fl->n_relays, sizeof *fl->relays, by_text);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* Files one observation's keys: its resolved path's, else its path's hops that resolve. */
static bool file_observation(struct filings *fl, int64_t tx, const char *resolved, const char *path)
{
    const char *list = resolved && *resolved ? resolved : path;
    bool hops = !(resolved && *resolved);
    if (!list || (hops && (strcmp(list, "[]") == 0)))
        return true;
    /* Arrays of JSON strings (and nulls): each quoted item. */
    for (const char *p = strchr(list, '"'); p;) {
        const char *end = strchr(p + 1, '"');
        if (!end)
            break;
        size_t len = (size_t)(end - p - 1);
        char key[80];
        if (len && len < sizeof key) {
            memcpy(key, p + 1, len);
            key[len] = '\0';
            const char *filed = hops ? unique_relay(fl, key, len) : key;
            if (filed && !file_under(fl, filed, tx))
                return false;
        }
        p = strchr(end + 1, '"');
    }
    return true;
}

static int read_filings(struct mg_db *db, struct filings *fl)
{
    int rc = read_relays(db, fl);
    if (rc != SQLITE_OK)
        return rc;
    char sql[sizeof filed_sql + 96];
    snprintf(sql, sizeof sql, filed_sql,
             db->schema.obs_resolved_path
                 ? "CASE WHEN json_valid(o.resolved_path) THEN o.resolved_path END"
                 : "NULL");
    sqlite3_stmt *st = mg_db_prepare(db, sql);
    if (!st)
        return SQLITE_ERROR;
    int64_t tx = -1;
    struct mg_buf seen;
    mg_buf_init(&seen);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(st, 0);
        rc = SQLITE_NOMEM;
        if (id != tx) {
            tx = id;
            mg_buf_reset(&seen);
            /* An ADVERT without samples has no skew: not filed. */
            if (!hash_range(fl->e, fl->g, (const char *)sqlite3_column_text(st, 7), &fl->first,
                            &fl->end)) {
                fl->first = fl->end = 0;
            }
            bool ok = true;
            for (int c = 1; c <= 3 && ok; c++)
                if (sqlite3_column_type(st, c) == SQLITE_TEXT)
                    ok = file_under(fl, (const char *)sqlite3_column_text(st, c), id);
            if (!ok)
                break;
        }
        if (sqlite3_column_type(st, 5) == SQLITE_NULL &&
            sqlite3_column_type(st, 4) == SQLITE_TEXT && !*sqlite3_column_text(st, 4) &&
            sqlite3_column_type(st, 6) == SQLITE_NULL) {
            rc = SQLITE_OK; /* no observation (the LEFT JOIN's empty row) */
            continue;
        }
        char key[512];
        snprintf(key, sizeof key, "%s|%s", sqlite3_column_text(st, 4),
                 sqlite3_column_text(st, 5) ? (const char *)sqlite3_column_text(st, 5) : "");
        bool dup = false;
        for (const char *k = seen.data; k && k < seen.data + seen.len; k += strlen(k) + 1)
            dup = dup || strcmp(k, key) == 0;
        rc = SQLITE_OK;
        if (dup)
            continue;
        mg_buf_append(&seen, key, strlen(key) + 1);
        if (!file_observation(fl, id, (const char *)sqlite3_column_text(st, 6),
                              (const char *)sqlite3_column_text(st, 5))) {
            rc = SQLITE_NOMEM;
            break;
        }
    }
    mg_buf_free(&seen);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE && rc != SQLITE_OK)
        return rc;
    if (fl->n > 1)
        qsort(fl->f, fl->n, sizeof *fl->f, by_key_tx);
    return SQLITE_OK;
}

static void filings_free(struct filings *fl)
{
    for (size_t i = 0; i < fl->n; i++)
        free(fl->f[i].key);
    free(fl->f);
    for (size_t i = 0; i < fl->n_relays; i++)
        free(fl->relays[i]);
    free(fl->relays);
}

/* The fleet's answer into body, its nodes in area (a key of the configuration's areas, ""
 * for all); an SQLite code. A node the configuration hides is left out (node_visibility.h).
 * With collect, nothing is written: every node's figures, hidden ones too, are kept there in
 * key order (the roles' count, which CoreScope takes from its unfiltered fleet). */
static int fleet_body(struct mg_db *db, const char *area_key, struct mg_buf *body,
                      struct role_skews *collect)
{
    struct mg_area_nodes area;
    int area_rc = mg_area_nodes_load(db->conn, area_key, &area);
    if (area_rc != SQLITE_OK)
        return area_rc;
    struct engine e = {0};
    struct filings fl = {0};
    struct index_entry *g = NULL;
    struct advert_skew *adv = NULL;
    int rc = engine_build(db, &e, &g);
    fl.e = &e;
    fl.g = g;
    if (rc == SQLITE_OK)
        rc = read_filings(db, &fl);
    sqlite3_stmt *node = NULL;
    struct advert_skew *by_group = NULL; /* each hash's figures, computed once */
    bool *done = NULL;
    size_t *marked = NULL; /* the key (its first filing + 1) a hash was last taken for */
    if (rc == SQLITE_OK) {
        node = mg_db_prepare(db, "SELECT name, role FROM nodes WHERE public_key = ?1");
        adv = calloc(fl.n ? fl.n : 1, sizeof *adv);
        by_group = calloc(e.n ? e.n : 1, sizeof *by_group);
        done = calloc(e.n ? e.n : 1, sizeof *done);
        marked = calloc(e.n ? e.n : 1, sizeof *marked);
        rc = !node ? SQLITE_ERROR : adv && by_group && done && marked ? SQLITE_OK : SQLITE_NOMEM;
    }
    if (rc == SQLITE_OK) {
        struct mg_json j;
        mg_json_init(&j, body);
        mg_json_array_begin(&j);
        for (size_t i = 0; rc == SQLITE_OK && i < fl.n;) {
            size_t k = i, n_adv = 0;
            for (; k < fl.n && strcmp(fl.f[k].key, fl.f[i].key) == 0; k++) {
                size_t first = fl.f[k].first;
                if (marked[first] == i + 1) /* CoreScope files a hash under a key once */
                    continue;
                marked[first] = i + 1;
                if (!done[first]) {
                    if (!advert_skew(&e, g, first, fl.f[k].end, &by_group[first])) {
                        rc = SQLITE_NOMEM;
                        break;
                    }
                    done[first] = true;
                }
                adv[n_adv] = by_group[first];
                adv[n_adv++].tx = fl.f[k].tx;
            }
            if (rc == SQLITE_OK && n_adv &&
                (!mg_area_nodes_filter(&area) || mg_area_nodes_has(&area, fl.f[i].key))) {
                sqlite3_bind_text(node, 1, fl.f[i].key, -1, SQLITE_STATIC);
                struct fleet_names names = {NULL, NULL, collect};
                if (sqlite3_step(node) == SQLITE_ROW)
                    names =
                        (struct fleet_names){(const char *)sqlite3_column_text(node, 0),
                                             (const char *)sqlite3_column_text(node, 1), collect};
                if ((collect || !mg_node_hidden(fl.f[i].key, names.name)) &&
                    !write_node_skew(&j, fl.f[i].key, &e, g, adv, n_adv, &names))
                    rc = SQLITE_NOMEM;
                sqlite3_reset(node);
            }
            i = k;
        }
        mg_json_array_end(&j);
        mg_buf_putc(body, '\n');
    }
    free(by_group);
    free(done);
    free(marked);
    sqlite3_finalize(node);
    free(adv);
    filings_free(&fl);
    engine_free(&e, g);
    mg_area_nodes_free(&area);
    return rc;
}

static void fleet_build(struct mg_cold_build *b, struct mg_db *db)
{
    bool began = mg_node_read_begin(db);
    int rc = fleet_body(db, (const char *)b->args, &b->body, NULL);
    mg_node_read_end(db, began);
    mg_cold_result(b, rc, "the ADVERTs");
}

static const struct mg_cold_report fleet_report = {
    .name = "fleet clock skew",
    .not_found = "Not found",
    .bad_request = "bad request",
    .build = fleet_build,
};

/* The parameters, declared once (params.h). CoreScope's handleFleetClockSkew: area missing,
 * empty, or a key the configuration's areas lack: no filter. */
struct fleet_params {
    const char *area;
};
static const struct mg_param fleet_param_list[] = {
    {.name = "area",
     .kind = MG_PARAM_TEXT,
     .offset = offsetof(struct fleet_params, area),
     .corescope = "a key the configuration's areas lack: no filter"},
};
const struct mg_param_table mg_fleet_clock_skew_params =
    MG_PARAM_TABLE(struct fleet_params, fleet_param_list);

/* The area the request asks for: a key of the configuration's areas, else "" (CoreScope
 * filters nothing for a key it does not have). */
static const char *fleet_area(const struct mg_request *req)
{
    struct fleet_params own;
    const struct fleet_params *p = mg_params_get(&mg_fleet_clock_skew_params, req, NULL, &own);
    const char *area = p ? p->area : NULL; /* never NULL p: the table refuses nothing */
    return area && strlen(area) < MG_COLD_ARGS_BYTES &&
                   mg_corescope_area(mg_corescope_current(), area)
               ? area
               : "";
}

/* The report's key: the area, and the configuration (what it hides; a reload's workers
 * share the group's cache with the old ones until these finish). */
static void fleet_key(const struct mg_request *req, char *key, size_t cap)
{
    snprintf(key, cap, "nodes|clock-skew|%lu|%s", mg_corescope_current()->generation,
             fleet_area(req));
}

bool mg_fleet_clock_skew_is_heavy(struct mg_env *env, const struct mg_request *req)
{
    char key[MG_COLD_ARGS_BYTES + 64];
    fleet_key(req, key, sizeof key);
    return mg_cold_report_is_heavy(env, key);
}

enum mg_turn mg_handle_fleet_clock_skew(struct mg_env *env, const struct mg_request *req,
                                        struct mg_response *res)
{
    char key[MG_COLD_ARGS_BYTES + 64];
    fleet_key(req, key, sizeof key);
    const char *area = fleet_area(req);
    return mg_cold_report_serve(env, req, res, &fleet_report, key, area, strlen(area) + 1);
}

/* ---- the roles ------------------------------------------------------------------------------ */

/*
 * GET /api/analytics/roles: the nodes table by role (trimmed and lowercased, "unknown" for
 * none), each role's clock-skew posture from the fleet's figures above: how many of its nodes
 * have a skew, the mean and median of their absolute recent skew (the last one where the
 * recent median is 0), rounded to 2 places, and how many are ok, warning, critical, absurd or
 * without a clock (a bimodal clock counts only as a skew). Largest population first, then by
 * role. As CoreScope's, every node counts, hidden ones too (the nodes table and the fleet's
 * figures unfiltered), and the route takes no parameter. The fleet's passes make it heavy: a
 * cold report, kept by the shared cache (MESHGATE_REACH_CACHE_TTL_MS, 5 minutes by default:
 * CoreScope recomputes it every 5 minutes).
 */
struct role_bucket {
    char *role;
    int64_t nodes, with_skew, ok, warning, critical, absurd, no_clock;
    double *abs;
    size_t n_abs;
};

static int by_skew_key(const void *a, const void *b)
{
    return strcmp(((const struct role_skew *)a)->key, ((const struct role_skew *)b)->key);
}

static int by_population(const void *a, const void *b)
{
    const struct role_bucket *x = a, *y = b;
    if (x->nodes != y->nodes)
        return x->nodes > y->nodes ? -1 : 1;
    return strcmp(x->role, y->role);
}

/* CoreScope's role: trimmed of white space, lowercased, "unknown" when empty. */
static char *normal_role(const unsigned char *raw)
{
    const char *s = raw ? (const char *)raw : "";
    while (*s == ' ' || (*s >= '\t' && *s <= '\r'))
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || (s[n - 1] >= '\t' && s[n - 1] <= '\r')))
        n--;
    if (!n)
        return strdup("unknown");
    char *r = strndup(s, n);
    for (size_t i = 0; r && i < n; i++)
        r[i] = r[i] >= 'A' && r[i] <= 'Z' ? (char)(r[i] + 32) : r[i];
    return r;
}

static struct role_bucket *bucket_of(struct role_bucket **list, size_t *n, char *role)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp((*list)[i].role, role) == 0) {
            free(role);
            return &(*list)[i];
        }
    struct role_bucket *more = realloc(*list, (*n + 1) * sizeof *more);
    if (!more) {
        free(role);
        return NULL;
    }
    *list = more;
    more[*n] = (struct role_bucket){.role = role};
    return &more[(*n)++];
}

static bool count_skew(struct role_bucket *b, const struct role_skew *s, size_t nodes)
{
    if (!b->abs && !(b->abs = malloc((nodes ? nodes : 1) * sizeof *b->abs)))
        return false;
    b->with_skew++;
    b->abs[b->n_abs++] = fabs(s->recent) != 0 ? fabs(s->recent) : fabs(s->last);
    int64_t *count = strcmp(s->severity, "ok") == 0         ? &b->ok
                     : strcmp(s->severity, "warning") == 0  ? &b->warning
                     : strcmp(s->severity, "critical") == 0 ? &b->critical
                     : strcmp(s->severity, "absurd") == 0   ? &b->absurd
                     : strcmp(s->severity, "no_clock") == 0 ? &b->no_clock
                                                            : NULL;
    if (count)
        (*count)++;
    return true;
}

static void write_roles(struct mg_json *j, struct role_bucket *buckets, size_t n)
{
    int64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += buckets[i].nodes;
    if (n > 1)
        qsort(buckets, n, sizeof *buckets, by_population);
    mg_json_object_begin(j);
    mg_json_kv_int(j, "totalNodes", total);
    mg_json_key(j, "roles");
    mg_json_array_begin(j);
    for (size_t i = 0; i < n; i++) {
        const struct role_bucket *b = &buckets[i];
        double mean = 0, median = 0;
        if (b->n_abs) {
            mean = (double)(int64_t)(mean_of(b->abs, b->n_abs) * 100 + 0.5) / 100;
            median = (double)(int64_t)(median_of(b->abs, b->n_abs) * 100 + 0.5) / 100;
        }
        mg_json_object_begin(j);
        mg_json_kv_string(j, "role", b->role);
        mg_json_kv_int(j, "nodeCount", b->nodes);
        mg_json_kv_int(j, "withSkew", b->with_skew);
        kv_double(j, "meanAbsSkewSec", mean);
        kv_double(j, "medianAbsSkewSec", median);
        mg_json_kv_int(j, "okCount", b->ok);
        mg_json_kv_int(j, "warningCount", b->warning);
        mg_json_kv_int(j, "criticalCount", b->critical);
        mg_json_kv_int(j, "absurdCount", b->absurd);
        mg_json_kv_int(j, "noClockCount", b->no_clock);
        mg_json_object_end(j);
    }
    mg_json_array_end(j);
    mg_json_object_end(j);
}

/* The roles' answer into body; an SQLite code. */
static int roles_body(struct mg_db *db, struct mg_buf *body)
{
    struct role_skews skews = {0};
    struct mg_buf scratch;
    mg_buf_init(&scratch);
    int rc = fleet_body(db, "", &scratch, &skews);
    mg_buf_free(&scratch);
    if (skews.n > 1) /* already in key order; sorted again so the search never depends on it */
        qsort(skews.s, skews.n, sizeof *skews.s, by_skew_key);
    size_t n_nodes = 0;
    sqlite3_stmt *st = NULL;
    if (rc == SQLITE_OK) {
        st = mg_db_prepare(db, "SELECT count(*) FROM nodes");
        rc = st && sqlite3_step(st) == SQLITE_ROW ? SQLITE_OK : sqlite3_errcode(db->conn);
        n_nodes = rc == SQLITE_OK ? (size_t)sqlite3_column_int64(st, 0) : 0;
        sqlite3_finalize(st);
        st = rc == SQLITE_OK ? mg_db_prepare(db, "SELECT public_key, role FROM nodes") : NULL;
        if (rc == SQLITE_OK && !st)
            rc = sqlite3_errcode(db->conn);
    }
    struct role_bucket *buckets = NULL;
    size_t n_buckets = 0;
    while (rc == SQLITE_OK) {
        int step = sqlite3_step(st);
        if (step != SQLITE_ROW) {
            rc = step == SQLITE_DONE ? SQLITE_OK : step;
            break;
        }
        struct role_bucket *b = NULL;
        char *role = normal_role(sqlite3_column_text(st, 1));
        if (!role || !(b = bucket_of(&buckets, &n_buckets, role))) {
            rc = SQLITE_NOMEM;
            break;
        }
        b->nodes++;
        const char *key = (const char *)sqlite3_column_text(st, 0);
        struct role_skew want = {.key = (char *)(key ? key : "")};
        const struct role_skew *s =
            skews.n ? bsearch(&want, skews.s, skews.n, sizeof *skews.s, by_skew_key) : NULL;
        if (s && !count_skew(b, s, n_nodes))
            rc = SQLITE_NOMEM;
    }
    sqlite3_finalize(st);
    if (rc == SQLITE_OK) {
        struct mg_json j;
        mg_json_init(&j, body);
        write_roles(&j, buckets, n_buckets);
        mg_buf_putc(body, '\n');
    }
    for (size_t i = 0; i < n_buckets; i++)
        free(buckets[i].role), free(buckets[i].abs);
    free(buckets);
    for (size_t i = 0; i < skews.n; i++)
        free(skews.s[i].key);
    free(skews.s);
    return rc;
}

static void roles_build(struct mg_cold_build *b, struct mg_db *db)
{
    bool began = mg_node_read_begin(db);
    int rc = roles_body(db, &b->body);
    mg_node_read_end(db, began);
    mg_cold_result(b, rc, "the roles");
}

static const struct mg_cold_report roles_report = {
    .name = "role analytics",
    .not_found = "Not found",
    .bad_request = "bad request",
    .build = roles_build,
};

/* One answer for the group: it depends on no parameter and no configuration. */
static const char roles_key[] = "analytics|roles";

bool mg_analytics_roles_is_heavy(struct mg_env *env, const struct mg_request *req)
{
    (void)req;
    return mg_cold_report_is_heavy(env, roles_key);
}

enum mg_turn mg_handle_analytics_roles(struct mg_env *env, const struct mg_request *req,
                                       struct mg_response *res)
{
    return mg_cold_report_serve(env, req, res, &roles_report, roles_key, "", 1);
}
